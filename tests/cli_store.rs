//! The render store's verbs end to end through the built binary: `wink init`, `put`, `get`,
//! `ls`, `rm`, `import`, `stat`, `check DIR` and `demo`, with WINK_NOW set per command so that
//! retention is exact, and every exit code.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tempfile::TempDir;
use wink::store::key;

mod common;
use common::cli::{hold_writer, s, snapshot, waits_for_lock, wink_at, Run};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html; charset=utf-8";
/// The clock of most commands.
const T: i64 = 1_700_000_000;

fn wink<S: AsRef<OsStr>>(args: &[S]) -> Run {
    wink_at(T, args, b"")
}

/// `wink init DIR OPTIONS...`.
fn init(dir: &Path, options: &[&str]) {
    let mut args = vec!["init", s(dir)];
    args.extend_from_slice(options);
    let run = wink(&args).expect(0);
    assert!(
        run.stdout.is_empty() && run.stderr.is_empty(),
        "{}",
        run.stderr
    );
}

/// A new store `store`, made by `wink init DIR OPTIONS...` in a new temporary directory.
fn new_store(options: &[&str]) -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init(&dir, options);
    (tmp, dir)
}

/// `wink put DIR D TITLE REV EXTRA...` at `now` with `value` on stdin; returns the tid printed.
fn put_at(now: i64, dir: &Path, title: &str, rev: &str, extra: &[&str], value: &[u8]) -> String {
    let mut args = vec!["put", s(dir), D, title, rev];
    args.extend_from_slice(extra);
    let run = wink_at(now, &args, value).expect(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    let out = run.out();
    let tid = out.strip_suffix('\n').expect("one line");
    assert!(!tid.contains('\n'), "{out:?}");
    key::parse_tid(tid).expect("a version-1 tid");
    tid.to_string()
}

fn put(dir: &Path, title: &str, rev: &str, value: &[u8]) -> String {
    put_at(T, dir, title, rev, &[], value)
}

/// `wink get DIR D TITLE WHICH...` at `now`: the exit code and stdout.
fn get_at(now: i64, dir: &Path, title: &str, which: &[&str]) -> Run {
    let mut args = vec!["get", s(dir), D, title];
    args.extend_from_slice(which);
    wink_at(now, &args, b"")
}

fn get(dir: &Path, title: &str, which: &[&str]) -> Vec<u8> {
    get_at(T, dir, title, which).expect(0).stdout
}

fn meta_at(now: i64, dir: &Path, title: &str, which: &[&str]) -> Value {
    let mut which = which.to_vec();
    which.push("--meta");
    get_at(now, dir, title, &which).expect(0).json()
}

/// `wink ls DIR D TITLE` at `now` as (rev, state) pairs.
fn ls_at(now: i64, dir: &Path, title: &str) -> Vec<(u64, String)> {
    let run = wink_at(now, &["ls", s(dir), D, title, "--json"], b"").expect(0);
    run.json()
        .as_array()
        .expect("an array")
        .iter()
        .map(|o| {
            (
                o["rev"].as_u64().unwrap(),
                o["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Where `needle` starts in `path`, the last occurrence.
fn find_last(path: &Path, needle: &[u8]) -> usize {
    let bytes = fs::read(path).unwrap();
    bytes
        .windows(needle.len())
        .rposition(|w| w == needle)
        .unwrap_or_else(|| panic!("{needle:?} not in {}", path.display()))
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x20;
    fs::write(path, bytes).unwrap();
}

#[test]
fn put_and_get_are_byte_exact_latest_by_revision_and_by_tid() {
    let (tmp, dir) = new_store(&["--revisions", "all", "--renders", "all"]);

    // Not UTF-8, with NUL and CR LF: bytes go through untouched.
    let first: &[u8] = b"<p>caf\xe9\x00\r\n</p>";
    let tid1 = put(&dir, "Main Page", "1", first);
    assert_eq!(key::tid_unix_secs(key::parse_tid(&tid1).unwrap()), T);

    let file = tmp.path().join("rev2.html");
    let second: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(&file, &second).unwrap();
    let newer = "5b6f9c00-833b-11ee-8000-010203040506";
    let older = "00000000-833b-11ee-8000-010203040506";
    let tid = put_at(
        T,
        &dir,
        "Main Page",
        "2",
        &[s(&file), "--tid", newer, "--type", "text/plain"],
        b"",
    );
    assert_eq!(tid, newer, "the given tid is the render's");
    // Arrives last, but its tid is older: it does not become the latest render of revision 2.
    let tid = put_at(
        T,
        &dir,
        "Main Page",
        "2",
        &["-", "--tid", older],
        b"older render",
    );
    assert_eq!(tid, older);

    assert_eq!(get(&dir, "Main Page", &[]), second);
    assert_eq!(get(&dir, "Main Page", &["2"]), second);
    assert_eq!(get(&dir, "Main Page", &["2", older]), b"older render");
    assert_eq!(get(&dir, "Main Page", &["2", newer]), second);
    assert_eq!(get(&dir, "Main Page", &["1"]), first);
    assert_eq!(get(&dir, "Main Page", &["1", &tid1]), first);

    let meta = meta_at(T, &dir, "Main Page", &[]);
    assert_eq!(
        meta,
        json!({
            "domain": D,
            "title": "Main Page",
            "rev": 2,
            "tid": newer,
            "size": second.len(),
            "content_type": "text/plain",
            "state": "current",
            "etag": format!("\"2/{newer}\""),
        })
    );
    let meta = meta_at(T, &dir, "Main Page", &["1"]);
    assert_eq!(
        (&meta["rev"], &meta["tid"], &meta["size"], &meta["state"]),
        (
            &json!(1),
            &json!(tid1),
            &json!(first.len()),
            &json!("recent")
        )
    );
    assert_eq!(meta["content_type"], HTML, "the default type");

    // Writing the same revision and tid again replaces the value.
    put_at(T, &dir, "Main Page", "2", &["--tid", older], b"replaced");
    assert_eq!(get(&dir, "Main Page", &["2", older]), b"replaced");

    for which in [&[][..], &["3"], &["1", older]] {
        let run = get_at(T, &dir, "Other", which).expect(1);
        assert!(run.stdout.is_empty());
    }
    let run = get_at(T, &dir, "Main Page", &["3"]).expect(1);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
    get_at(T, &dir, "Main Page", &["1", older]).expect(1);
}

#[test]
fn put_keeps_encoding_and_language_and_get_and_ls_return_them() {
    let (_tmp, dir) = new_store(&[]);
    // Stored as given, never decoded: gzip bytes come back as gzip bytes.
    let gz: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03not really gzip";
    let labelled = put_at(
        T,
        &dir,
        "Käse",
        "1",
        &["--encoding", "gzip", "--language", "de, en-GB"],
        gz,
    );
    let plain = put_at(T, &dir, "Käse", "2", &[], b"<p>plain</p>");
    assert_eq!(get(&dir, "Käse", &["1"]), gz);
    let meta = meta_at(T, &dir, "Käse", &["1", &labelled]);
    assert_eq!(
        (&meta["encoding"], &meta["language"]),
        (&json!("gzip"), &json!("de, en-GB"))
    );
    let meta = meta_at(T, &dir, "Käse", &[]);
    assert_eq!(meta["tid"], json!(plain));
    assert!(
        meta.get("encoding").is_none() && meta.get("language").is_none(),
        "{meta}"
    );
    let run = wink_at(T, &["ls", s(&dir), D, "Käse", "--json"], b"").expect(0);
    let listed: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(listed[1]["tid"], json!(labelled));
    assert_eq!(listed[1]["encoding"], json!("gzip"));
    assert_eq!(listed[1]["language"], json!("de, en-GB"));
    assert!(listed[0].get("encoding").is_none(), "{listed}");
}

#[test]
fn ls_lists_newest_first_with_states() {
    let (_tmp, dir) = new_store(&[
        "--revisions",
        "recent:1000",
        "--renders",
        "all",
        "--historical-ttl",
        "500",
    ]);
    // Arrival order is not precedence.
    put_at(T, &dir, "P", "5", &[], b"five");
    put_at(T + 1, &dir, "P", "7", &[], b"seven");
    put_at(T + 2, &dir, "P", "6", &[], b"six");
    let hist = put_at(
        T + 3,
        &dir,
        "P",
        "3",
        &["--historical"],
        b"three, regenerated",
    );
    let run = wink_at(T + 4, &["ls", s(&dir), D, "P"], b"").expect(0);
    let lines: Vec<Vec<String>> = run
        .out()
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    let summary: Vec<(&str, &str, &str, &str)> = lines
        .iter()
        .map(|f| {
            assert_eq!(f.len(), 5, "{f:?}");
            (f[0].as_str(), f[2].as_str(), f[3].as_str(), f[4].as_str())
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("7", "5", HTML, "current"),
            ("6", "3", HTML, "recent"),
            ("5", "4", HTML, "recent"),
            ("3", "18", HTML, "historical"),
        ]
    );
    assert_eq!(lines[3][1], hist);

    let listed = wink_at(T + 4, &["ls", s(&dir), D, "P", "--json"], b"")
        .expect(0)
        .json();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 4);
    assert_eq!(
        listed[3],
        json!({"rev": 3, "tid": hist, "size": 18, "content_type": HTML, "state": "historical"})
    );
    for (o, line) in listed.iter().zip(&lines) {
        assert_eq!(o["tid"], json!(line[1]));
    }
    let page = wink_at(
        T + 4,
        &["ls", s(&dir), D, "P", "--offset", "1", "--limit", "2"],
        b"",
    )
    .expect(0)
    .out();
    let revs: Vec<&str> = page.lines().map(|l| &l[..1]).collect();
    assert_eq!(revs, ["6", "5"]);
    let run = wink(&["ls", s(&dir), D, "Nothing"]).expect(1);
    assert!(run.stdout.is_empty());
    wink(&["ls", s(&dir), D, "P", "--json", "--offset", "4"]).expect(1);
}

#[test]
fn retention_follows_wink_now() {
    let (_tmp, dir) = new_store(&[
        "--revisions",
        "recent:100",
        "--renders",
        "latest:1:10",
        "--historical-ttl",
        "50",
    ]);
    put_at(T, &dir, "P", "1", &[], b"one");
    put_at(T + 5, &dir, "P", "2", &[], b"two"); // supersedes revision 1 at T+5
    assert_eq!(get_at(T + 104, &dir, "P", &["1"]).expect(0).stdout, b"one");
    assert_eq!(
        ls_at(T + 104, &dir, "P"),
        [(2, "current".to_string()), (1, "recent".to_string())]
    );
    let gone = get_at(T + 105, &dir, "P", &["1"]).expect(1);
    assert!(gone.stdout.is_empty());
    assert_eq!(ls_at(T + 105, &dir, "P"), [(2, "current".to_string())]);
    assert_eq!(
        get_at(T + 1_000_000, &dir, "P", &[]).expect(0).stdout,
        b"two",
        "the current revision never expires"
    );

    // A newer render of revision 2 pushes the first out: readable for the 10 s grace.
    let first = meta_at(T + 6, &dir, "P", &["2"])["tid"]
        .as_str()
        .unwrap()
        .to_string();
    put_at(T + 6, &dir, "P", "2", &[], b"two, rerendered");
    assert_eq!(
        get_at(T + 15, &dir, "P", &["2", &first]).expect(0).stdout,
        b"two"
    );
    get_at(T + 16, &dir, "P", &["2", &first]).expect(1);
    assert_eq!(
        get_at(T + 16, &dir, "P", &["2"]).expect(0).stdout,
        b"two, rerendered"
    );

    // A historical render of revision 1, readable for the historical TTL from its arrival.
    put_at(
        T + 200,
        &dir,
        "P",
        "1",
        &["--historical"],
        b"one, regenerated",
    );
    let meta = meta_at(T + 249, &dir, "P", &["1"]);
    assert_eq!(meta["state"], "historical");
    get_at(T + 250, &dir, "P", &["1"]).expect(1);
    // Newer than the current revision: refused.
    let run = wink_at(
        T + 300,
        &["put", s(&dir), D, "P", "3", "--historical"],
        b"x",
    )
    .expect(2);
    assert!(
        run.stderr.contains("newer than the current"),
        "{}",
        run.stderr
    );
}

#[test]
fn rm_takes_down_refuses_puts_and_lifts() {
    let (_tmp, dir) = new_store(&["--renders", "all"]);
    put(&dir, "P", "1", b"one");
    put(&dir, "P", "2", b"two");
    put(&dir, "P", "2", b"two again");
    let run = wink(&["rm", s(&dir), D, "P", "2"]).expect(0);
    assert_eq!(run.out(), "2\n", "both renders of revision 2");
    get_at(T, &dir, "P", &["2"]).expect(1);
    assert_eq!(get(&dir, "P", &[]), b"one");

    let before = snapshot(&dir);
    let run = wink_at(T, &["put", s(&dir), D, "P", "2"], b"back?").expect(2);
    assert!(run.stderr.contains("taken down"), "{}", run.stderr);
    assert_eq!(snapshot(&dir), before, "a refused put writes nothing");

    wink(&["rm", "--lift", s(&dir), D, "P", "2"]).expect(0);
    let run = wink(&["rm", "--lift", s(&dir), D, "P", "2"]).expect(1);
    assert!(run.stderr.contains("nothing to lift"), "{}", run.stderr);
    get_at(T, &dir, "P", &["2"]).expect(1); // lifting brings nothing back
    put(&dir, "P", "2", b"two, after the lift");
    assert_eq!(get(&dir, "P", &[]), b"two, after the lift");

    // The whole title.
    let run = wink(&["rm", s(&dir), D, "P"]).expect(0);
    assert_eq!(run.out(), "2\n");
    get_at(T, &dir, "P", &[]).expect(1);
    get_at(T, &dir, "P", &["1"]).expect(1);
    wink(&["ls", s(&dir), D, "P"]).expect(1);
    wink_at(T, &["put", s(&dir), D, "P", "9"], b"nine").expect(2);
    wink(&["rm", "--lift", s(&dir), D, "P", "9"]).expect(1);
    wink(&["rm", "--lift", s(&dir), D, "P"]).expect(0);
    put(&dir, "P", "9", b"nine");
    assert_eq!(get(&dir, "P", &[]), b"nine");
    // A take-down of something never stored is a tombstone all the same.
    assert_eq!(wink(&["rm", s(&dir), D, "Q", "4"]).expect(0).out(), "0\n");
    wink_at(T, &["put", s(&dir), D, "Q", "4"], b"q").expect(2);
}

/// A corpus as the shared one is laid out: manifest.tsv plus DOC/REV.html.
fn corpus(src: &Path, docs: &[(&str, &str, i64, &[u8])]) {
    let mut manifest = String::from("doc\trev\ttimestamp\tbytes\tsha1\tsource\n");
    for (doc, rev, timestamp, html) in docs {
        fs::create_dir_all(src.join(doc)).unwrap();
        fs::write(src.join(doc).join(format!("{rev}.html")), html).unwrap();
        manifest.push_str(&format!(
            "{doc}\t{rev}\t{timestamp}\t{}\t-\ttest\n",
            html.len()
        ));
    }
    fs::write(src.join("manifest.tsv"), manifest).unwrap();
}

#[test]
fn import_loads_a_corpus_with_deterministic_tids() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("corpus");
    let docs: &[(&str, &str, i64, &[u8])] = &[
        ("terms", "0001", 1_640_000_000, b"<html>terms v1</html>"),
        (
            "terms",
            "0002",
            1_650_000_000,
            b"<html>terms v2, longer</html>",
        ),
        (
            "privacy",
            "0001",
            1_641_000_000,
            b"<html>privacy \xff</html>",
        ),
    ];
    corpus(&src, docs);
    let dir = tmp.path().join("store");
    init(&dir, &["--revisions", "all"]);
    let run = wink(&["import", s(&dir), s(&src), "--domain", D, "--batch", "2"]).expect(0);
    assert!(
        run.stderr.is_empty(),
        "no progress bar off a terminal: {}",
        run.stderr
    );
    let fields = run.fields();
    let bytes: usize = docs.iter().map(|d| d.3.len()).sum();
    assert_eq!(fields["renders"], "3");
    assert_eq!(fields["titles"], "2");
    assert_eq!(fields["bytes"], bytes.to_string());
    assert_eq!(fields["batches"], "2");
    for field in ["seconds", "mb_per_s"] {
        fields[field].parse::<f64>().expect(field);
    }
    for (doc, rev, timestamp, html) in docs {
        let number = rev.trim_start_matches('0');
        assert_eq!(get(&dir, doc, &[number]), *html, "{doc} {rev}");
        let tid = meta_at(T, &dir, doc, &[number])["tid"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            key::tid_unix_secs(key::parse_tid(&tid).unwrap()),
            *timestamp
        );
    }
    assert_eq!(get(&dir, "terms", &[]), docs[1].3);

    // The same corpus imported elsewhere gets the same tids.
    let again = tmp.path().join("again");
    init(&again, &["--revisions", "all"]);
    wink(&["import", s(&again), s(&src), "--domain", D]).expect(0);
    for doc in ["terms", "privacy"] {
        let list = |d: &Path| wink(&["ls", s(d), D, doc, "--json"]).expect(0).json();
        assert_eq!(list(&dir), list(&again));
    }
    // The default domain.
    let third = tmp.path().join("third");
    init(&third, &[]);
    wink(&["import", s(&third), s(&src)]).expect(0);
    wink(&["get", s(&third), "corpus", "privacy"]).expect(0);
}

#[test]
fn import_refuses_bad_input_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("corpus");
    corpus(
        &src,
        &[("a", "0001", 1, b"aaaa"), ("b", "0001", 2, b"bbbbbbbbbbbb")],
    );
    let dir = tmp.path().join("store");
    init(&dir, &["--max-value", "10"]);
    let before = snapshot(&dir);
    let run = wink(&["import", s(&dir), s(&src)]).expect(2);
    assert!(
        run.stderr.contains("b/0001.html") && run.stderr.contains("maximum"),
        "{}",
        run.stderr
    );
    fs::remove_file(src.join("b/0001.html")).unwrap();
    let run = wink(&["import", s(&dir), s(&src)]).expect(2);
    assert!(run.stderr.contains("b/0001.html"), "{}", run.stderr);
    fs::write(
        src.join("manifest.tsv"),
        "doc\trev\ttimestamp\tbytes\na\tone\t1\t4\n",
    )
    .unwrap();
    let run = wink(&["import", s(&dir), s(&src)]).expect(2);
    assert!(
        run.stderr.contains("manifest.tsv") && run.stderr.contains("line 2"),
        "{}",
        run.stderr
    );
    wink(&["import", s(&dir), s(tmp.path())]).expect(2);
    wink(&["import", s(&dir), s(&src), "--batch", "0"]).expect(2);
    wink(&["import", s(&dir), s(&src), "--domain", "a/b"]).expect(2);
    assert_eq!(snapshot(&dir), before);
}

#[test]
fn stat_counts_sizes_and_policy() {
    let (_tmp, dir) = new_store(&[
        "--revisions",
        "recent:100",
        "--renders",
        "interval:3600:2:60",
        "--historical-ttl",
        "77",
        "--container-bytes",
        "2000000",
        "--max-value",
        "5000",
    ]);
    put(&dir, "A", "1", b"12345");
    put_at(T + 1, &dir, "A", "2", &[], b"1234567");
    put(&dir, "B", "1", b"123");
    let run = wink_at(T + 1, &["stat", s(&dir), "--json"], b"").expect(0);
    let mut st = run.json();
    // Space by container and page-cache residency (their sums are tested in tests/maintenance.rs;
    // residency depends on the machine): present, then set aside for the exact comparison.
    let fields = st.as_object_mut().unwrap();
    let per = fields.remove("per_container").expect("per_container");
    assert_eq!(per[0]["live_bytes"], json!(15));
    assert!(fields.remove("meta_files").is_some_and(|m| m.is_array()));
    let files: u64 = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with('c'))
        .map(|p| wink::KvSeq::open_path(&p, false).unwrap().filesize())
        .sum();
    assert_eq!(
        st,
        json!({
            "titles": 2,
            "revisions": 3,
            "renders": 3,
            "live_bytes": 15,
            "dead_bytes": files - 15,
            "containers": 1,
            "container_files_bytes": files,
            "policy": {"revisions": "recent:100", "renders": "interval:3600:2:60", "historical_ttl": 77},
            "container_bytes": 2000000,
            "max_value": 5000,
            "generation": 0,
            "compactions": 0,
            "last_compaction_time": 0,
            "last_compaction_reclaimed_bytes": 0,
        })
    );
    // Past the recent window, revision 1 of A no longer counts.
    let later = wink_at(T + 101, &["stat", s(&dir), "--json"], b"")
        .expect(0)
        .json();
    assert_eq!(
        (&later["revisions"], &later["live_bytes"]),
        (&json!(2), &json!(10))
    );
    let text = wink_at(T + 1, &["stat", s(&dir)], b"").expect(0).fields();
    assert_eq!(text["renders"], "3");
    assert_eq!(text["policy.renders"], "interval:3600:2:60");
    assert_eq!(text["container_bytes"], "2000000");
    assert_eq!(text["container.1.live_bytes"], "15");
    let space = |k: &&String| k.starts_with("container.") || k.starts_with("meta.");
    assert_eq!(text.keys().filter(|k| !space(k)).count(), 16);
    assert_eq!(text["generation"], "0");
}

#[test]
fn init_refuses_bad_options_and_existing_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("deep/er/store");
    for bad in [
        &["--revisions", "some"][..],
        &["--revisions", "recent:-1"],
        &["--renders", "latest:0:5"],
        &["--renders", "interval:0:1:1"],
        &["--renders", "ttl"],
        &["--historical-ttl", "-1"],
        &["--container-bytes", "1000"],
        &["--container-bytes", "x"],
        &["--max-value", "0"],
        &["--max-value", "300000000"],
    ] {
        let mut args = vec!["init", s(&dir)];
        args.extend_from_slice(bad);
        wink(&args).expect(2);
        assert!(
            !tmp.path().join("deep").exists(),
            "{bad:?} created something"
        );
    }
    init(&dir, &[]);
    let made = snapshot(&dir);
    assert!(made.contains_key(&dir.join("store")));
    let run = wink(&["init", s(&dir)]).expect(2);
    assert!(
        run.stderr.contains("holds a store already"),
        "{}",
        run.stderr
    );
    assert_eq!(snapshot(&dir), made);

    let other = tmp.path().join("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("notes.txt"), "mine").unwrap();
    let run = wink(&["init", s(&other)]).expect(2);
    assert!(run.stderr.contains("not empty"), "{}", run.stderr);
    assert_eq!(fs::read_dir(&other).unwrap().count(), 1);
    let file = other.join("notes.txt");
    wink(&["init", s(&file)]).expect(2);
    assert_eq!(fs::read(&file).unwrap(), b"mine");
    // An empty directory is fine.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    init(&empty, &[]);
    wink(&["check", "--strict", s(&empty)]).expect(0);
}

#[test]
fn bad_input_is_refused_with_exit_2_and_changes_nothing() {
    let (tmp, dir) = new_store(&["--max-value", "100"]);
    put(&dir, "T", "1", b"one");
    let before = snapshot(&dir);
    let long_domain = "d".repeat(256);
    let long_title = "t".repeat(1025);
    let v4 = "6ba7b810-9dad-41d1-80b4-00c04fd430c8";
    let cases: &[(&[&str], &str)] = &[
        (&["", "T", "1"], "domain"),
        (&[&long_domain, "T", "1"], "domain"),
        (&["a/b", "T", "1"], "domain"),
        (&[D, "", "1"], "title"),
        (&[D, &long_title, "1"], "title"),
        (&[D, "T", "x"], "revision"),
        (&[D, "T", "-1"], "revision"),
        (&[D, "T", "1.5"], "revision"),
        (&[D, "T", "99999999999999999999"], "revision"),
        (&[D, "T", "1", "--tid", "not-a-uuid"], "tid"),
        (&[D, "T", "1", "--tid", v4], "version-1"),
        (&[D, "T", "1", "--type", ""], "content type"),
        (&[D, "T", "1", "--encoding", "gzip, br"], "content encoding"),
        (&[D, "T", "1", "--encoding", ""], "content encoding"),
        (&[D, "T", "1", "--language", "de\tfr"], "content language"),
    ];
    for (args, says) in cases {
        let mut full = vec!["put", s(&dir)];
        full.extend_from_slice(args);
        let run = wink_at(T, &full, b"value").expect(2);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let run = wink_at(T, &["put", s(&dir), D, "T", "2"], &[b'x'; 101]).expect(2);
    assert!(run.stderr.contains("maximum of 100"), "{}", run.stderr);
    wink_at(T, &["put", s(&dir), D, "T", "2"], &[b'x'; 100]).expect(0);
    let before = {
        let after = snapshot(&dir);
        assert_ne!(after, before, "the put at the maximum was written");
        after
    };
    let missing = tmp.path().join("missing.html");
    wink(&["put", s(&dir), D, "T", "3", s(&missing)]).expect(2);

    // The reading and take-down verbs refuse the same domains, titles and revisions.
    for (args, says) in &cases[..9] {
        for verb in ["get", "rm", "ls"] {
            // ls takes no revision: only the domain and title cases apply.
            let args = match verb {
                "ls" if args[2] != "1" => continue,
                "ls" => &args[..2],
                _ => args,
            };
            let mut full = vec![verb, s(&dir)];
            full.extend_from_slice(args);
            let run = wink(&full).expect(2);
            assert!(run.stderr.contains(says), "{full:?}: {}", run.stderr);
        }
    }
    for tid in ["not-a-uuid", v4] {
        wink(&["get", s(&dir), D, "T", "1", tid]).expect(2);
    }
    wink(&["rm", "--lift", s(&dir), "a/b", "T"]).expect(2);
    // A clock the store cannot stamp or make tids from (before 1970, past what a v1 UUID
    // carries, or the record's "no time" marker).
    for now in ["-1", "103072857661", "-9223372036854775808"] {
        let run = wink_at(now, &["put", s(&dir), D, "T", "9"], b"x").expect(2);
        assert!(run.stderr.contains("WINK_NOW"), "{}", run.stderr);
    }
    assert_eq!(snapshot(&dir), before);

    // A directory that holds no store is a usage error, for every verb.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    for args in [
        &["put", s(&empty), D, "T", "1"][..],
        &["get", s(&empty), D, "T"],
        &["ls", s(&empty), D, "T"],
        &["rm", s(&empty), D, "T"],
        &["stat", s(&empty)],
        &["import", s(&empty), s(tmp.path())],
    ] {
        let run = wink_at(T, args, b"x").expect(2);
        assert!(run.stderr.contains("no store there"), "{}", run.stderr);
    }
    assert_eq!(fs::read_dir(&empty).unwrap().count(), 0);
    wink_at(T, &["put", s(&dir), D], b"").expect(2);
}

#[test]
fn damage_is_reported_with_file_and_offset() {
    let (_tmp, dir) = new_store(&[]);
    put(
        &dir,
        "Damaged",
        "1",
        b"precious content of the damaged page",
    );
    put(&dir, "Intact", "1", b"other content");
    let clean = wink(&["check", "--strict", s(&dir)]).expect(0).out();
    assert_eq!(
        clean,
        format!(
            "{}: ok (store {}: 2 titles, 2 renders, 1 containers)\n",
            dir.display(),
            dir.display()
        )
    );

    // A flipped byte inside a value: reads verify the CRC-32 and name the value's offset.
    let data = dir.join("c000001.data");
    let at = find_last(&data, b"precious content");
    flip(&data, at + 3);
    for which in [&[][..], &["--meta"], &["1"]] {
        let run = get_at(T, &dir, "Damaged", which).expect(3);
        assert!(run.stdout.is_empty(), "nothing damaged is written");
        assert!(
            run.stderr
                .contains(&format!("{}: corrupt at byte {at}", data.display())),
            "{}",
            run.stderr
        );
    }
    assert_eq!(get(&dir, "Intact", &[]), b"other content");
    assert_eq!(ls_at(T, &dir, "Damaged"), [(1, "current".to_string())]);
    // `check DIR` checks structure: the container's entries and the records are intact.
    let run = wink(&["check", s(&dir)]).expect(0);
    assert!(
        run.out()
            .starts_with(&format!("{}: ok (store", dir.display())),
        "{}",
        run.out()
    );

    // A flipped byte inside a title record: check reports meta.data, and reads exit 3.
    let meta = dir.join("meta.data");
    let record = find_last(&meta, b"WTR2");
    flip(&meta, record + 20);
    let run = wink(&["check", s(&dir)]).expect(1);
    assert!(
        run.out()
            .contains(&format!("{}: error at byte", meta.display())),
        "{}",
        run.out()
    );
    assert!(run.stderr.starts_with("wink: check: "), "{}", run.stderr);
    let run = get_at(T, &dir, "Intact", &[]).expect(3);
    assert!(run.stderr.contains(s(&meta)), "{}", run.stderr);
}

#[test]
fn a_second_writer_exits_4_or_waits() {
    let (tmp, dir) = new_store(&[]);
    put(&dir, "P", "1", b"one");
    let src = tmp.path().join("corpus");
    corpus(&src, &[("a", "0001", 1, b"a")]);
    let before = snapshot(&dir);
    let held = hold_writer(&dir, T);
    for args in [
        &["put", s(&dir), D, "P", "2"][..],
        &["rm", s(&dir), D, "P"],
        &["rm", "--lift", s(&dir), D, "P"],
        &["import", s(&dir), s(&src)],
    ] {
        let run = wink_at(T, args, b"two").expect(4);
        assert!(run.stderr.contains("in use"), "{}", run.stderr);
    }
    assert_eq!(get(&dir, "P", &[]), b"one", "readers need no lock");
    wink(&["stat", s(&dir)]).expect(0);
    wink(&["check", s(&dir)]).expect(0);
    assert_eq!(snapshot(&dir), before);

    // The content comes from a file, so that the child blocks on the lock, not on stdin.
    let input = tmp.path().join("input");
    fs::write(&input, "waited").unwrap();
    let args = ["put", s(&dir), D, "P", "2", s(&input), "--wait"];
    waits_for_lock(&args, T, held).expect(0);
    assert_eq!(get(&dir, "P", &[]), b"waited");
}

#[test]
fn demo_runs_verifies_and_keeps_a_store_when_asked() {
    let run = wink(&["demo", "--pages", "3", "--revisions", "4"]).expect(0);
    let out = run.out();
    let temporary = out
        .split_once("store in ")
        .and_then(|(_, rest)| rest.split_once(" (policy"))
        .map(|(path, _)| PathBuf::from(path))
        .expect("the first line names the store's directory");
    assert!(!temporary.exists(), "the temporary store is removed");
    assert!(out.contains("all verifications passed"), "{out}");
    for step in ["] store", "] read", "] list", "] check", "] summary"] {
        assert!(out.contains(step), "{step}: {out}");
    }
    assert!(out.contains("12 renders of 3 pages"), "{out}");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let args = ["demo", "--dir", s(&dir), "--pages", "2", "--revisions", "3"];
    wink(&args).expect(0);
    wink(&["check", "--strict", s(&dir)]).expect(0);
    let page = wink(&["get", s(&dir), "demo.wikipedia.org", "Page 1"])
        .expect(0)
        .stdout;
    assert!(
        page.starts_with(b"<!DOCTYPE html>"),
        "{}",
        String::from_utf8_lossy(&page)
    );
    let listed = wink(&["ls", s(&dir), "demo.wikipedia.org", "Page 0"])
        .expect(0)
        .out();
    assert_eq!(listed.lines().count(), 3);
    // The generated pages are the same on every run.
    let again = tmp.path().join("again");
    wink(&[
        "demo",
        "--dir",
        s(&again),
        "--pages",
        "2",
        "--revisions",
        "3",
    ])
    .expect(0);
    assert_eq!(
        wink(&["get", s(&again), "demo.wikipedia.org", "Page 1"])
            .expect(0)
            .stdout,
        page
    );
    let run = wink(&args).expect(2);
    assert!(
        run.stderr.contains("holds a store already"),
        "{}",
        run.stderr
    );
    wink(&["demo", "--pages", "0"]).expect(2);
}
