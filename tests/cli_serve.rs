//! `wink serve` driven with curl, as an operator would: a fresh machine's `wink serve` (data
//! root `./wink-data`), a bucket, a render put from a file and read back byte-exact, HEAD, an
//! as-of read answered as `wink get --as-of` answers it, the token, and a clean stop.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::server::Server;

fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut body = out.stdout;
    let at = body.iter().rposition(|b| *b == b'\n').unwrap();
    let code = String::from_utf8(body[at + 1..].to_vec()).unwrap();
    body.truncate(at);
    (code, body)
}

fn wink(cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wink"))
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn curl_against_a_fresh_wink_serve() {
    if !common::require::tool("curl", "--version", "wink serve with curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "letmein\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wink"));
    cmd.current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token);
    let mut s = Server::spawn(cmd, &dir.path().join("wink-data"));
    assert!(
        dir.path().join("wink-data").is_dir(),
        "the default data root is ./wink-data"
    );
    let p = s.p("html", "");
    let bearer = "Authorization: Bearer letmein";
    let (code, body) = curl(&["-X", "PUT", &p]);
    assert_eq!(code, "401", "{}", String::from_utf8_lossy(&body));
    let (code, _) = curl(&[
        "-X",
        "PUT",
        "-H",
        bearer,
        "-H",
        "Content-Type: application/json",
        "--data",
        r#"{"revisionRetentionPolicy":{"type":"all"},"revisions":"all"}"#,
        &p,
    ]);
    assert_eq!(code, "201");

    // A render from a file, with bytes curl must not touch (NUL, CR, high bytes).
    let page: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let file = dir.path().join("page.html");
    std::fs::write(&file, &page).unwrap();
    let data = format!("@{}", file.display());
    let (code, body) = curl(&[
        "-X",
        "PUT",
        "-H",
        bearer,
        "-H",
        "Content-Type: text/html",
        "--data-binary",
        &data,
        &format!("{p}/Main_Page/41"),
    ]);
    assert_eq!(code, "201", "{}", String::from_utf8_lossy(&body));
    let (code, got) = curl(&[&format!("{p}/Main_Page")]);
    assert_eq!(code, "200");
    assert!(got == page, "byte-exact");
    let (code, head) = curl(&["-I", &format!("{p}/Main_Page/41")]);
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert_eq!(code, "200");
    assert!(
        head.contains("content-length: 20000") && head.contains("etag: \"41/"),
        "{head}"
    );

    // A later revision; as of a time between the two, revision 41 — as `wink get --as-of` says.
    std::thread::sleep(Duration::from_millis(1100));
    let between = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    std::thread::sleep(Duration::from_millis(1100));
    let (code, _) = curl(&[
        "-X",
        "PUT",
        "-H",
        bearer,
        "--data-binary",
        "newer",
        &format!("{p}/Main_Page/42"),
    ]);
    assert_eq!(code, "201");
    let at = format!("{between:.3}");
    let (code, then) = curl(&[&format!("{p}/Main_Page?as_of={at}")]);
    assert_eq!(code, "200");
    assert!(then == page);
    // The CLI reads beside the serving writer.
    let store = dir.path().join("wink-data/html");
    let out = wink(
        dir.path(),
        &[
            "get",
            store.to_str().unwrap(),
            common::server::D,
            "Main_Page",
            "--as-of",
            &at,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == then,
        "wink get --as-of answers as the server does"
    );
    let out = wink(
        dir.path(),
        &[
            "get",
            store.to_str().unwrap(),
            common::server::D,
            "Main_Page",
        ],
    );
    assert_eq!(out.stdout, b"newer");
    let (code, _) = curl(&[&format!("{p}/Main_Page?as_of=1000000000")]);
    assert_eq!(code, "404");
    let out = wink(
        dir.path(),
        &[
            "get",
            store.to_str().unwrap(),
            common::server::D,
            "Main_Page",
            "--as-of",
            "2001-09-09T01:46:40Z",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = wink(
        dir.path(),
        &[
            "get",
            store.to_str().unwrap(),
            common::server::D,
            "Main_Page",
            "--as-of",
            "whenever",
        ],
    );
    assert_eq!(out.status.code(), Some(2));

    // A take-down needs the token too; then a clean stop.
    let (code, _) = curl(&["-X", "DELETE", &format!("{p}/Main_Page/42")]);
    assert_eq!(code, "401");
    let (code, _) = curl(&["-X", "DELETE", "-H", bearer, &format!("{p}/Main_Page/42")]);
    assert_eq!(code, "200");
    let (code, got) = curl(&[&format!("{p}/Main_Page")]);
    assert_eq!((code.as_str(), got == page), ("200", true));
    let (status, stderr) = s.terminate(Duration::from_secs(30));
    assert!(status.success(), "{stderr}");
}
