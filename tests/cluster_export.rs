//! `wink export --cluster URL` on a real cluster on loopback (3 nats-servers, 3 Wink nodes
//! with 2 owners per partition, HAProxy): renders of three domains, titles with several
//! revisions and renders (some repeating a payload, so revisits), and take-downs, all written
//! through the router; the cluster's export is compared with `wink export --key-order` of a
//! local store given the same puts and take-downs. Then the first owner of a partition is
//! stopped, and the export (through another node) is the same again.
//!
//! What is compared: the WARC files written plain (`.warc`) byte for byte, after every
//! `<urn:uuid:…>` record id is replaced by its rank of first appearance (ids are random per
//! record; a revisit's `WARC-Refers-To` then still names the same record); the `warcinfo`
//! record is compared too, its `WARC-Date` being `WINK_NOW` for both exports. The CDXJ indexes
//! byte for byte (they hold no record id). A gzip export with filters (--domain, --current)
//! is compared decompressed in the same way, and an Enterprise HTML snapshot byte for byte
//! (it holds no random id; its tar times are `WINK_NOW`). Both owners of a partition down: the
//! export fails (exit 5) and leaves no file.
#![cfg(feature = "cluster")]

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::cluster::{enc, Cluster};
use common::server::try_call;
use uuid::{NoContext, Timestamp, Uuid};
use wink::store::{Config, Labels, Put, Store, StoreOptions};

const PARTITIONS: u32 = 4;
const DOMAINS: [&str; 3] = ["en.wikipedia.org", "de.wikipedia.org", "fr.wiktionary.org"];

/// One put of the test: domain, title, revision, tid, value.
struct Render {
    domain: &'static str,
    title: String,
    rev: u64,
    tid: Uuid,
    value: Vec<u8>,
}

/// Some hundreds of renders: 3 domains × 24 titles, 1 to 4 revisions each, 1 to 3 renders a
/// revision; every third render repeats the payload of the one before it (a revisit).
fn renders(now: u64) -> Vec<Render> {
    let mut out = Vec::new();
    let mut tick = 0u64;
    for (d, domain) in DOMAINS.iter().enumerate() {
        for i in 0..24u64 {
            let title = match i % 4 {
                0 => format!("Title_{i}"),
                1 => format!("Straße_{i}"),
                2 => format!("A/B {i}"),
                _ => format!("Zürich_{i}"),
            };
            let revs = 1 + (i + d as u64) % 4;
            for rev in 1..=revs {
                let per = 1 + (i * 7 + rev) % 3;
                for k in 0..per {
                    tick += 1;
                    // Distinct times, an hour to a few minutes before now, in put order.
                    let secs = now - 3600 + tick;
                    let ts = Timestamp::from_unix(NoContext, secs, (k * 1000) as u32);
                    let tid = Uuid::new_v1(ts, &[2, 0, 0, 0, 0, d as u8 + 1]);
                    let value = if k > 0 && (tick % 3 == 0) {
                        format!("<p>{domain} {title} rev {rev} render 0</p>")
                    } else {
                        format!(
                            "<p>{domain} {title} rev {rev} render {k}</p>{}",
                            "x".repeat(k as usize * 100)
                        )
                    };
                    out.push(Render {
                        domain,
                        title: title.clone(),
                        rev,
                        tid,
                        value: value.into_bytes(),
                    });
                }
            }
        }
    }
    // Many small titles, so that each partition takes more than one page.
    for j in 0..1100u64 {
        tick += 1;
        let ts = Timestamp::from_unix(NoContext, now - 3600 + tick, 0);
        let domain = DOMAINS[(j % 3) as usize];
        out.push(Render {
            domain,
            title: format!("Small_{j:04}"),
            rev: 1 + j % 5,
            tid: Uuid::new_v1(ts, &[2, 0, 0, 0, 1, 0]),
            value: format!("<p>small {j}</p>").into_bytes(),
        });
    }
    out
}

/// Take-downs: a whole title, and one revision of another.
fn take_downs() -> Vec<(&'static str, String, Option<u64>)> {
    vec![
        (DOMAINS[0], "Title_4".to_string(), None),
        (DOMAINS[1], "Straße_1".to_string(), Some(1)),
    ]
}

fn wink(args: &[&str], now: u64) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(args)
        .env("WINK_NOW", now.to_string())
        .output()
        .expect("wink runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file's bytes, decoded member by member when it is gzip.
fn plain(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if !path.to_string_lossy().ends_with(".gz") {
        return bytes;
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The bytes with every `<urn:uuid:…>` replaced by its rank of first appearance (same length).
fn normalized(bytes: &[u8]) -> Vec<u8> {
    let prefix = b"<urn:uuid:";
    let id_len = prefix.len() + 36 + 1;
    let mut ranks: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(prefix) && i + id_len <= bytes.len() {
            let id = bytes[i..i + id_len].to_vec();
            let n = ranks.len();
            let rank = *ranks.entry(id).or_insert(n);
            let text = format!("<urn:uuid:{rank:036}>");
            out.extend_from_slice(text.as_bytes());
            i += id_len;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn same_warc(a: &Path, b: &Path) {
    let (x, y) = (normalized(&plain(a)), normalized(&plain(b)));
    if x != y {
        let at = x
            .iter()
            .zip(&y)
            .position(|(p, q)| p != q)
            .unwrap_or(x.len().min(y.len()));
        let show = |v: &[u8]| {
            String::from_utf8_lossy(&v[at.saturating_sub(300)..(at + 300).min(v.len())])
                .into_owned()
        };
        panic!(
            "{} ({} bytes) and {} ({} bytes) differ at byte {at}:\n--- {}\n+++ {}",
            a.display(),
            x.len(),
            b.display(),
            y.len(),
            show(&x),
            show(&y)
        );
    }
}

fn field(summary: &str, name: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}\t")))
        .unwrap_or_else(|| panic!("no {name} in {summary}"))
        .parse()
        .unwrap()
}

#[test]
fn a_cluster_export_is_the_key_order_export_of_the_same_renders_even_with_an_owner_down() {
    if !common::cluster::tools("the cluster export test") {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let all = renders(now);
    assert!(all.len() >= 300, "{} renders", all.len());

    // The local store that holds the same renders.
    let work = tempfile::tempdir().unwrap();
    let local = work.path().join("local");
    Store::init(&local, &Config::default(), &StoreOptions::writer()).unwrap();
    let mut store = Store::open(&local, &StoreOptions::writer()).unwrap();

    // Through the router, four clients at once (a title's renders in order, by one client).
    let mut clients: Vec<Vec<&Render>> = vec![Vec::new(); 4];
    let mut client_of: HashMap<(&str, &str), usize> = HashMap::new();
    for r in &all {
        let n = client_of.len();
        let c = *client_of.entry((r.domain, &r.title)).or_insert(n % 4);
        clients[c].push(r);
    }
    std::thread::scope(|s| {
        for renders in &clients {
            let (agent, router) = (&agent, &cluster.router);
            s.spawn(move || {
                for r in renders {
                    let url = format!(
                        "{router}/{}/sys/key_rev_value/html/{}/{}/{}",
                        r.domain,
                        enc(&r.title),
                        r.rev,
                        r.tid
                    );
                    let ct = [("Content-Type", "text/html")];
                    let a = try_call(agent, "PUT", &url, &ct, Some(&r.value))
                        .unwrap_or_else(|e| panic!("PUT {url}: {e}"));
                    let body = String::from_utf8_lossy(&a.body).into_owned();
                    assert_eq!(a.status, 201, "PUT {url}: {body}");
                }
            });
        }
    });
    for r in &all {
        store
            .put(&Put {
                domain: r.domain,
                title: &r.title,
                rev: r.rev,
                tid: Some(r.tid),
                content_type: "text/html",
                labels: &Labels::NONE,
                value: &r.value,
                historical: false,
            })
            .unwrap();
    }
    for (domain, title, rev) in take_downs() {
        let mut url = format!(
            "{}/{domain}/sys/key_rev_value/html/{}",
            cluster.router,
            enc(&title)
        );
        if let Some(rev) = rev {
            url.push_str(&format!("/{rev}"));
        }
        let a = try_call(&agent, "DELETE", &url, &[], None).unwrap();
        assert!(a.status < 300, "DELETE {url}: {} {:?}", a.status, a.body);
        store.take_down(domain, &title, rev).unwrap();
    }
    drop(store);

    // Every owner has applied everything, and the owners agree.
    let (n1, _) = cluster.node("n1");
    let (code, out, err) = wink(&["cluster", "verify", &n1, "--patience", "60"], now);
    assert_eq!(code, 0, "verify: {out} {err}");

    // Plain WARC and its index, the whole bucket.
    let export_now = now + 5;
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (la, lb) = (a.join("dump.warc"), b.join("dump.warc"));
    let (la_s, lb_s) = (la.to_str().unwrap(), lb.to_str().unwrap());
    let (code, local_sum, err) = wink(
        &["export", local.to_str().unwrap(), "--key-order", "-o", la_s],
        export_now,
    );
    assert_eq!(code, 0, "local export: {err}");
    let (code, cluster_sum, err) = wink(
        &[
            "export",
            "--cluster",
            &cluster.router,
            "--bucket",
            "html",
            "-o",
            lb_s,
        ],
        export_now,
    );
    assert_eq!(code, 0, "cluster export: {err}");
    eprintln!("local:\n{local_sum}\ncluster:\n{cluster_sum}");
    let resources = field(&cluster_sum, "resources");
    let revisits = field(&cluster_sum, "revisits");
    assert!(
        revisits > 20 && resources + revisits > 1300,
        "{cluster_sum}"
    );
    assert!(
        field(&cluster_sum, "pages") > u64::from(PARTITIONS),
        "{cluster_sum}"
    );
    for f in [
        "titles",
        "records",
        "resources",
        "revisits",
        "value_bytes",
        "raw_bytes",
    ] {
        assert_eq!(field(&local_sum, f), field(&cluster_sum, f), "{f}");
    }
    same_warc(&la, &lb);
    let (ia, ib) = (a.join("dump.cdxj"), b.join("dump.cdxj"));
    assert_eq!(
        std::fs::read(&ia).unwrap(),
        std::fs::read(&ib).unwrap(),
        "the CDXJ indexes"
    );
    // The take-downs are honoured: the title taken down is nowhere in the export.
    let text = String::from_utf8_lossy(&std::fs::read(&lb).unwrap()).into_owned();
    let uri = |d: &str, t: &str| format!("https://{d}/api/rest_v1/page/html/{t}/");
    assert!(
        !text.contains(&uri(DOMAINS[0], "Title_4")),
        "a title taken down was exported"
    );
    assert!(text.contains(&uri(DOMAINS[1], "Title_4")));
    let straße = uri(DOMAINS[1], "Stra%C3%9Fe_1");
    assert!(
        !text.contains(&format!("{straße}1/")),
        "a revision taken down"
    );
    assert!(text.contains(&format!("{straße}2/")));

    // Gzip, one domain, current renders only: compared decompressed.
    let gz = |dir: &PathBuf| dir.join("de.warc.gz");
    let filters = ["--domain", DOMAINS[1], "--current"];
    let mut args = vec!["export", local.to_str().unwrap(), "--key-order", "-o"];
    let ga = gz(&a);
    args.push(ga.to_str().unwrap());
    args.extend(filters);
    let (code, _, err) = wink(&args, export_now);
    assert_eq!(code, 0, "local gzip export: {err}");
    let gb = gz(&b);
    let mut args = vec!["export", "--cluster", &n1, "--bucket", "html", "-o"];
    args.push(gb.to_str().unwrap());
    args.extend(filters);
    let (code, sum, err) = wink(&args, export_now);
    assert_eq!(code, 0, "cluster gzip export: {err}");
    assert!(field(&sum, "resources") > 10, "{sum}");
    same_warc(&ga, &gb);

    // An Enterprise HTML snapshot (the latest render of every title): the same bytes.
    let (ea, eb) = (a.join("w-NS0.json.tar.gz"), b.join("w-NS0.json.tar.gz"));
    let (code, local_e, err) = wink(
        &[
            "export",
            local.to_str().unwrap(),
            "--format",
            "enterprise",
            "--key-order",
            "-o",
            ea.to_str().unwrap(),
        ],
        export_now,
    );
    assert_eq!(code, 0, "local enterprise export: {err}");
    let (code, cluster_e, err) = wink(
        &[
            "export",
            "--cluster",
            &cluster.router,
            "--bucket",
            "html",
            "--format",
            "enterprise",
            "-o",
            eb.to_str().unwrap(),
        ],
        export_now,
    );
    assert_eq!(code, 0, "cluster enterprise export: {err}");
    assert_eq!(field(&local_e, "articles"), field(&cluster_e, "articles"));
    assert!(field(&cluster_e, "articles") >= 70, "{cluster_e}");
    assert_eq!(plain(&ea), plain(&eb), "the snapshots, decompressed");
    assert_eq!(std::fs::read(&ea).unwrap(), std::fs::read(&eb).unwrap());

    // The route: a node that does not own a partition refuses its page (503); a cursor it did
    // not make is 400.
    let status = common::cluster::get_json(&format!("{n1}/_cluster")).expect("status");
    let owners = |p: usize| status["map"]["owners"][p].as_array().unwrap().clone();
    let foreign = (0..PARTITIONS as usize)
        .find(|p| !owners(*p).iter().any(|o| o == "n1"))
        .expect("a partition n1 does not own");
    let page = |p: usize, q: &str| {
        let url = format!("{n1}/_cluster/dump/html/{p}{q}");
        try_call(&agent, "GET", &url, &[], None).unwrap().status
    };
    assert_eq!(page(foreign, ""), 503);
    let own = (0..PARTITIONS as usize)
        .find(|p| owners(*p).iter().any(|o| o == "n1"))
        .expect("a partition n1 owns");
    assert_eq!(page(own, ""), 200);
    assert_eq!(page(own, "?after=zz"), 400);
    assert_eq!(page(own, "?max_bytes=0"), 400);
    // A partition page by page: one title a page with max_bytes=1, the same titles in the same
    // order as in pages of the default size.
    let walk = |max: &str| {
        let mut titles = Vec::new();
        let mut pages = 0;
        let mut after: Option<String> = None;
        loop {
            let mut url = format!("{n1}/_cluster/dump/html/{own}?{max}");
            if let Some(a) = &after {
                url.push_str(&format!("&after={a}"));
            }
            let a = try_call(&agent, "GET", &url, &[], None).unwrap();
            assert_eq!(a.status, 200, "{url}");
            let got = wink::cluster::dump::parse_page(&url, &a.body).unwrap();
            pages += 1;
            for t in got {
                titles.push((t.title.domain, t.title.title, t.values));
            }
            match a.header("x-wink-next") {
                Some(n) => after = Some(n.to_string()),
                None => return (pages, titles),
            }
        }
    };
    let (small_pages, small) = walk("max_bytes=1");
    let (pages, whole) = walk("");
    assert!(
        whole.len() > 256 && pages >= 2,
        "{pages} pages of {}",
        whole.len()
    );
    // (A title taken down whole has no render left: its page is empty.)
    assert!(
        (whole.len()..whole.len() + 3).contains(&small_pages),
        "{small_pages} pages"
    );
    assert_eq!(small, whole);
    assert!(whole
        .windows(2)
        .all(|w| (&w[0].0, &w[0].1) < (&w[1].0, &w[1].1)));

    // The first owner of partition 0 stopped: its partitions come from the other owners.
    let p0: Vec<String> = owners(0)
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    let (first, second) = (p0[0].clone(), p0[1].clone());
    let through = ["n1", "n2", "n3"]
        .into_iter()
        .find(|n| !p0.iter().any(|o| o == n))
        .unwrap();
    let (url, _) = cluster.node(through);
    cluster.ctl("stop", &first);
    let c = work.path().join("c");
    std::fs::create_dir_all(&c).unwrap();
    let lc = c.join("dump.warc");
    let (code, sum, err) = wink(
        &[
            "export",
            "--cluster",
            &url,
            "--bucket",
            "html",
            "-o",
            lc.to_str().unwrap(),
        ],
        export_now,
    );
    assert_eq!(code, 0, "cluster export with {first} down: {err}");
    assert!(field(&sum, "retries") >= 1, "{sum}");
    assert_eq!(field(&cluster_sum, "retries"), 0, "{cluster_sum}");
    assert_eq!(field(&sum, "records"), field(&cluster_sum, "records"));
    same_warc(&la, &lc);
    assert_eq!(
        std::fs::read(&ia).unwrap(),
        std::fs::read(c.join("dump.cdxj")).unwrap()
    );

    // Bad usage changes nothing and exits 2: an unknown bucket, no bucket, a file that exists.
    let (code, _, err) = wink(
        &[
            "export",
            "--cluster",
            &url,
            "--bucket",
            "nope",
            "-o",
            c.join("x.warc").to_str().unwrap(),
        ],
        export_now,
    );
    assert_eq!(code, 2, "unknown bucket: {err}");
    assert!(!c.join("x.warc").exists());
    let (code, _, _) = wink(&["export", "--cluster", &url, "-o", "y.warc"], export_now);
    assert_eq!(code, 2, "no --bucket");
    let (code, _, err) = wink(
        &[
            "export",
            "--cluster",
            &url,
            "--bucket",
            "html",
            "-o",
            lc.to_str().unwrap(),
        ],
        export_now,
    );
    assert_eq!(code, 2, "an existing output: {err}");

    // Both owners of partition 0 down: the export fails as unavailable and leaves no file.
    cluster.ctl("stop", &second);
    let z = c.join("z.warc");
    let (code, _, err) = wink(
        &[
            "export",
            "--cluster",
            &url,
            "--bucket",
            "html",
            "-o",
            z.to_str().unwrap(),
        ],
        export_now,
    );
    assert_eq!(code, 5, "no owner of partition 0: {err}");
    assert!(err.contains("partition 0"), "{err}");
    assert!(!z.exists() && !c.join("z.cdxj").exists());
}

#[test]
fn a_cluster_export_sends_the_nodes_token() {
    if !common::cluster::tools("the cluster export token test") {
        return;
    }
    let secrets = tempfile::tempdir().unwrap();
    let (token, wrong) = (secrets.path().join("token"), secrets.path().join("wrong"));
    std::fs::write(&token, "the-export-test-token\n").unwrap();
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let cluster = Cluster::up_with(3, 2, 4, &["--token-file", token.to_str().unwrap()]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    for i in 0..20 {
        let url = format!(
            "{}/{}/sys/key_rev_value/html/T_{i}/1",
            cluster.router, DOMAINS[0]
        );
        let auth = [
            ("Content-Type", "text/html"),
            ("Authorization", "Bearer the-export-test-token"),
        ];
        let a = try_call(&agent, "PUT", &url, &auth, Some(b"<p>t</p>")).unwrap();
        assert_eq!(a.status, 201, "PUT {url}");
    }
    let (n1, _) = cluster.node("n1");
    let status = common::cluster::get_json(&format!("{n1}/_cluster")).expect("status");
    let own = (0..PARTITIONS as usize)
        .find(|p| {
            status["map"]["owners"][*p]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o == "n1")
        })
        .unwrap();
    let url = format!("{n1}/_cluster/dump/html/{own}");
    assert_eq!(
        try_call(&agent, "GET", &url, &[], None).unwrap().status,
        401
    );
    let out = secrets.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let export = |file: &str, token: Option<&Path>| {
        let o = out.join(file);
        let mut args = vec!["export", "--cluster", &cluster.router, "--bucket", "html"];
        args.extend(["-o", o.to_str().unwrap()]);
        if let Some(t) = token {
            args.extend(["--token-file", t.to_str().unwrap()]);
        }
        let (code, sum, err) = wink(&args, 1_800_000_000);
        (code, sum, err, o.exists())
    };
    let (code, _, err, made) = export("none.warc", None);
    assert_eq!(code, 2, "without the token: {err}");
    assert!(err.contains("401") && !made, "{err}");
    let (code, _, err, made) = export("wrong.warc", Some(&wrong));
    assert_eq!(code, 2, "a wrong token: {err}");
    assert!(!made);
    let (code, sum, err, made) = export("ok.warc", Some(&token));
    assert_eq!(code, 0, "with the token: {err}");
    assert!(made);
    assert_eq!(field(&sum, "resources"), 20, "{sum}");
}
