//! Dumps people already consume, end to end through the `wink` binary and read back by the
//! field's own tools (installed by `.ci/pytools`): Wikimedia Enterprise HTML snapshots imported
//! and exported (mwparserfromhtml's `HTMLDump` iterates what we write), WARC exports read by
//! fastwarc (gzip, zstd, plain) and replayed by pywb, WACZ packages checked by `wacz validate`.
//! Inputs: generated articles (titles with spaces, slashes, unicode; a 10 MiB body) and
//! successive snapshots of the shared corpus.
#![cfg(feature = "dumps")]

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cli::{s, spawn, wink_at, Run};
use common::require;
use serde_json::{json, Value};
use wink::store::Which;
use wink::store::{Page, Store};

/// The clock of every command here.
const NOW: i64 = 1_800_000_000;

fn wink(args: &[&str]) -> Run {
    wink_at(NOW, args, b"")
}

/// The whole-number fields of a summary (`seconds` and rates aside).
trait Counts {
    fn counts(&self) -> BTreeMap<String, u64>;
}

impl Counts for Run {
    fn counts(&self) -> BTreeMap<String, u64> {
        self.fields()
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect()
    }
}

fn open(dir: &Path) -> Store {
    common::open_read_only_at(dir, NOW)
}

/// MediaWiki's canonical URL of a page (what Enterprise's `url` is).
fn url_of(domain: &str, name: &str) -> String {
    let title = name.replace(' ', "_");
    let mut out = format!("https://{domain}/wiki/");
    for b in title.bytes() {
        if b.is_ascii_alphanumeric() || b";@$!*(),/:-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn wiki_of(domain: &str) -> (String, String) {
    let lang = domain.split('.').next().unwrap().to_string();
    (format!("{}wiki", lang.replace('-', "_")), lang)
}

/// An article as Enterprise writes one, with the fields Wink drops too.
fn article(domain: &str, name: &str, rev: u64, date: &str, html: &str) -> Value {
    let (db, lang) = wiki_of(domain);
    json!({
        "name": name,
        "identifier": 4242,
        "date_created": "2001-01-15T00:00:00Z",
        "date_modified": date,
        "version": {"identifier": rev, "comment": "edit", "tags": ["mobile edit"],
            "is_minor_edit": false, "editor": {"identifier": 7, "name": "Someone"}},
        "url": url_of(domain, name),
        "namespace": {"identifier": 0},
        "in_language": {"identifier": lang},
        "main_entity": {"identifier": "Q1", "url": "http://www.wikidata.org/entity/Q1"},
        "is_part_of": {"identifier": db, "url": format!("https://{domain}")},
        "article_body": {"html": html, "wikitext": "''wikitext''"},
        "license": [{"name": "Creative Commons Attribution-ShareAlike 4.0",
            "identifier": "CC-BY-SA-4.0", "url": "https://creativecommons.org/licenses/by-sa/4.0/"}]
    })
}

/// A page as Parsoid renders one (what mwparserfromhtml parses): a head with its base and
/// version, sections in the body.
fn parsoid(domain: &str, name: &str, text: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html prefix=\"dc: http://purl.org/dc/terms/ mw: http://mediawiki.org/rdf/\" \
         about=\"https://{domain}/wiki/Special:Redirect/revision/1\"><head prefix=\"mwr: \
         https://{domain}/wiki/Special:Redirect/\"><meta charset=\"utf-8\"/><meta \
         property=\"mw:pageNamespace\" content=\"0\"/><meta property=\"mw:htmlVersion\" \
         content=\"2.8.0\"/><title>{name}</title><base href=\"//{domain}/wiki/\"/></head>\
         <body class=\"mw-content-ltr mw-parser-output\" lang=\"en\" dir=\"ltr\">\
         <section data-mw-section-id=\"0\" id=\"mwAQ\"><p id=\"mwAg\">{text}</p></section>\
         </body></html>"
    )
}

/// Writes a snapshot: a tar.gz (one gzip stream, as Enterprise's) of NDJSON members.
fn snapshot(path: &Path, members: &[(&str, Vec<Vec<u8>>)]) {
    let file = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::new(6));
    let mut tar = tar::Builder::new(gz);
    for (name, lines) in members {
        let mut data = Vec::new();
        for l in lines {
            data.extend_from_slice(l);
            data.push(b'\n');
        }
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, &data[..]).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

fn line(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// Every member of an exported snapshot, read with the tar and flate2 crates: (name, articles).
fn members(path: &Path) -> Vec<(String, Vec<Value>)> {
    let file = std::fs::File::open(path).unwrap();
    let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(file));
    let mut out = Vec::new();
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut text = String::new();
        e.read_to_string(&mut text).unwrap();
        let arts = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        out.push((name, arts));
    }
    out
}

/// What a round trip keeps of an article, by name.
fn kept(articles: &[Value]) -> BTreeMap<String, Value> {
    articles
        .iter()
        .map(|a| {
            let k = json!({
                "name": a["name"], "url": a["url"], "version": a["version"]["identifier"],
                "date_modified": a["date_modified"], "html": a["article_body"]["html"],
                "is_part_of": a["is_part_of"], "in_language": a["in_language"],
            });
            (a["name"].as_str().unwrap().to_string(), k)
        })
        .collect()
}

fn all(members: &[(String, Vec<Value>)]) -> Vec<Value> {
    members.iter().flat_map(|(_, a)| a.clone()).collect()
}

fn sha1_hex(bytes: &[u8]) -> String {
    use sha1::Digest;
    sha1::Sha1::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// mwparserfromhtml's `HTMLDump` over `path`: each document it yields (title, revision, date,
/// SHA-1 of the HTML, and whether its article parsed). `parse` false replaces the library's
/// `Document` with one that does not parse the body (its reading of the tar.gz and the JSON is
/// the library's), for bodies that are not Parsoid HTML.
fn html_dump(path: &Path, parse: bool) -> Option<Vec<Value>> {
    let python = require::python_with("mwparserfromhtml", "mwparserfromhtml's HTMLDump")?;
    let script = r#"
import hashlib, json, sys
import mwparserfromhtml.dump.dump as dump
from mwparserfromhtml import HTMLDump
if sys.argv[2] == "0":
    class Plain(dump.Document):
        def __init__(self, document):
            self.document = document
    dump.Document = Plain
out = []
for doc in HTMLDump(sys.argv[1]):
    d = doc.document
    item = {"title": doc.get_title(), "rev": d["version"]["identifier"],
            "date": str(doc.get_curr_revision_time()),
            "sha1": hashlib.sha1(d["article_body"]["html"].encode("utf-8")).hexdigest()}
    if sys.argv[2] == "1":
        item["text"] = "\n".join(doc.html.get_plaintext())
    out.append(item)
print(json.dumps(out))
"#;
    let out = Command::new(python)
        .args(["-c", script, s(path), if parse { "1" } else { "0" }])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().last().unwrap_or("[]");
    Some(serde_json::from_str::<Vec<Value>>(last).unwrap())
}

fn init(dir: &Path) {
    wink(&["init", s(dir), "--revisions", "all"]).expect(0);
}

/// The articles of the first snapshot: titles with spaces, slashes, unicode, `%`; Parsoid pages
/// and a 10 MiB body.
fn month_one() -> Vec<Value> {
    let mut out = Vec::new();
    for (i, (domain, name)) in [
        ("en.wikipedia.org", "Main Page"),
        ("en.wikipedia.org", "AC/DC (band)"),
        ("fr.wikipedia.org", "Café au lait"),
        ("ja.wikipedia.org", "日本"),
        ("en.wikipedia.org", "100% pure, a/b/c?"),
        ("en.wikipedia.org", "Sandbox"),
    ]
    .iter()
    .enumerate()
    {
        let html = parsoid(domain, name, &format!("{name}: first text"));
        let date = format!("2024-03-0{}T1{i}:00:00Z", i + 1);
        out.push(article(domain, name, 1000 + i as u64, &date, &html));
    }
    let big = common::lettered("<p>".into(), 7, 10 << 20);
    let big = String::from_utf8(big).unwrap();
    out.push(article(
        "en.wikipedia.org",
        "Huge page",
        2000,
        "2024-03-10T00:00:00Z",
        &big,
    ));
    out
}

/// The next month's: three pages edited, one new, the rest as they were.
fn month_two(one: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = one.to_vec();
    for (i, a) in out
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| [0, 2, 3].contains(i))
    {
        let domain = a["is_part_of"]["url"].as_str().unwrap()[8..].to_string();
        let name = a["name"].as_str().unwrap().to_string();
        a["version"]["identifier"] = json!(5000 + i as u64);
        a["date_modified"] = json!(format!("2024-04-0{}T08:00:00Z", i + 1));
        a["article_body"]["html"] = json!(parsoid(&domain, &name, &format!("{name}: edited")));
    }
    let html = parsoid("de.wikipedia.org", "Straße", "neu");
    out.push(article(
        "de.wikipedia.org",
        "Straße",
        6000,
        "2024-04-05T00:00:00Z",
        &html,
    ));
    out
}

#[test]
fn enterprise_snapshots_import_export_and_read_back_with_mwparserfromhtml() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init(&dir);
    let one = month_one();
    let m1 = tmp
        .path()
        .join("enwiki-NS0-20240401-ENTERPRISE-HTML.json.tar.gz");
    let lines: Vec<Vec<u8>> = one.iter().map(line).collect();
    snapshot(
        &m1,
        &[
            ("enwiki_0.ndjson", lines[..4].to_vec()),
            ("enwiki_1.ndjson", lines[4..].to_vec()),
        ],
    );
    let run = wink(&["import", s(&dir), "--enterprise", s(&m1)]).expect(0);
    let n = run.counts();
    assert_eq!(
        (n["members"], n["articles"], n["stored"], n["unchanged"]),
        (2, 7, 7, 0),
        "{}",
        run.out()
    );
    assert_eq!(n["reshaped"], 0, "{}", run.stderr);
    let st = open(&dir);
    let got = st
        .get("fr.wikipedia.org", "Café_au_lait", Which::Latest)
        .unwrap()
        .unwrap();
    assert_eq!(got.rev, 1002);
    assert_eq!(
        got.content_type,
        "text/html; charset=utf-8; \
         profile=\"https://www.mediawiki.org/wiki/Specification/HTML/2.8.0\""
    );
    assert_eq!(
        got.value,
        one[2]["article_body"]["html"].as_str().unwrap().as_bytes()
    );
    let huge = st
        .get("en.wikipedia.org", "Huge_page", Which::Latest)
        .unwrap()
        .unwrap();
    assert_eq!(
        (huge.value.len(), huge.content_type.as_str()),
        (10 << 20, "text/html; charset=utf-8")
    );
    drop(st);

    // The same snapshot again stores nothing.
    let again = wink(&["import", s(&dir), "--enterprise", s(&m1)])
        .expect(0)
        .counts();
    assert_eq!((again["stored"], again["unchanged"]), (0, 7));

    // Next month's adds the new revisions only, and the old ones stay.
    let two = month_two(&one);
    let m2 = tmp
        .path()
        .join("enwiki-NS0-20240501-ENTERPRISE-HTML.json.tar.gz");
    snapshot(&m2, &[("enwiki_0.ndjson", two.iter().map(line).collect())]);
    let n = wink(&["import", s(&dir), "--enterprise", s(&m2)])
        .expect(0)
        .counts();
    assert_eq!((n["stored"], n["unchanged"]), (4, 4));
    let st = open(&dir);
    let revs: Vec<u64> = st
        .list("en.wikipedia.org", "Main_Page", Page::default())
        .unwrap()
        .iter()
        .map(|l| l.rev)
        .collect();
    assert_eq!(revs, [5000, 1000]);
    drop(st);

    // Exported, the latest of every title comes back as it was put in.
    let out = tmp
        .path()
        .join("enwiki-NS0-20240601-ENTERPRISE-HTML.json.tar.gz");
    let report = wink(&[
        "export",
        s(&dir),
        "--format",
        "enterprise",
        "-o",
        s(&out),
        "--json",
    ])
    .expect(0)
    .json();
    assert_eq!(report["articles"], 8);
    let exported = members(&out);
    assert_eq!(exported[0].0, "enwiki_0.ndjson");
    assert_eq!(kept(&all(&exported)), kept(&two));

    // As of a time between the snapshots: the first month's.
    let then = tmp.path().join("then.json.tar.gz");
    wink(&[
        "export",
        s(&dir),
        "--format",
        "enterprise",
        "-o",
        s(&then),
        "--as-of",
        "2024-03-31T00:00:00Z",
    ])
    .expect(0);
    assert_eq!(kept(&all(&members(&then))), kept(&one));

    // One domain, members of a bounded size (a longer article is a member of its own).
    let fr = tmp.path().join("x.json.tar.gz");
    wink(&[
        "export",
        s(&dir),
        "--format",
        "enterprise",
        "-o",
        s(&fr),
        "--domain",
        "fr.wikipedia.org",
    ])
    .expect(0);
    let fr = members(&fr);
    assert_eq!(
        (fr.len(), fr[0].0.as_str(), fr[0].1.len()),
        (1, "frwiki_0.ndjson", 1)
    );
    let small = tmp.path().join("small.json.tar.gz");
    wink(&[
        "export",
        s(&dir),
        "--format",
        "enterprise",
        "-o",
        s(&small),
        "--member-bytes",
        "3000",
    ])
    .expect(0);
    let parts = members(&small);
    assert!(parts.len() >= 4, "{}", parts.len());
    for (name, arts) in &parts {
        let bytes: usize = arts.iter().map(|a| line(a).len() + 1).sum();
        assert!(bytes <= 3000 || arts.len() == 1, "{name}: {bytes} bytes");
    }
    assert_eq!(kept(&all(&parts)), kept(&two));

    // A render kept in a content coding is not HTML text as stored, even when its bytes happen
    // to be UTF-8: left out, counted.
    {
        let opts = wink::store::StoreOptions {
            clock: std::sync::Arc::new(wink::clock::ManualClock::new(NOW)),
            ..wink::store::StoreOptions::writer()
        };
        let mut st = Store::open(&dir, &opts).unwrap();
        st.put(&wink::store::Put {
            domain: "en.wikipedia.org",
            title: "Coded",
            rev: 1,
            tid: None,
            content_type: "text/html; charset=utf-8",
            labels: &wink::store::Labels {
                encoding: Some("br".into()),
                language: None,
            },
            value: b"<p>brotli bytes that happen to be text</p>",
            historical: false,
        })
        .unwrap();
    }
    let coded = tmp.path().join("coded.json.tar.gz");
    let with_coded = wink(&[
        "export",
        s(&dir),
        "--format",
        "enterprise",
        "-o",
        s(&coded),
        "--json",
    ])
    .expect(0)
    .json();
    assert_eq!(with_coded["articles"], report["articles"]);
    assert_eq!(
        with_coded["not_html"].as_u64(),
        report["not_html"].as_u64().map(|n| n + 1)
    );
    assert_eq!(kept(&all(&members(&coded))), kept(&two));

    // mwparserfromhtml: every document of every member, and the Parsoid pages parsed.
    for file in [&out, &small] {
        let Some(docs) = html_dump(file, false) else {
            return;
        };
        let mut got: Vec<(String, u64, String)> = docs
            .iter()
            .map(|d| {
                let t = d["title"].as_str().unwrap().to_string();
                (
                    t,
                    d["rev"].as_u64().unwrap(),
                    d["sha1"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        got.sort();
        let mut want: Vec<(String, u64, String)> = two
            .iter()
            .map(|a| {
                let html = a["article_body"]["html"].as_str().unwrap();
                let t = a["name"].as_str().unwrap().to_string();
                (
                    t,
                    a["version"]["identifier"].as_u64().unwrap(),
                    sha1_hex(html.as_bytes()),
                )
            })
            .collect();
        want.sort();
        assert_eq!(got, want);
    }
    let parsed = html_dump(&out, true).unwrap();
    // The 10 MiB body is not Parsoid HTML: the library skips it, with its message.
    assert_eq!(parsed.len(), 7);
    let html_of: BTreeMap<&str, &str> = two
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap(),
                a["article_body"]["html"].as_str().unwrap(),
            )
        })
        .collect();
    for d in &parsed {
        let text = d["text"].as_str().unwrap();
        let html = html_of[d["title"].as_str().unwrap()];
        assert!(
            !text.is_empty() && html.contains(&format!(">{text}</p>")),
            "{d}"
        );
    }
}

/// Bad lines: each kind named by file, member and line; exit 2; the articles before it stored
/// and nothing after; `--skip-bad` counts them.
#[test]
fn a_bad_line_names_file_member_and_line_and_skip_bad_counts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let good = |i: u64| {
        let name = format!("Page {i}");
        line(&article(
            "en.wikipedia.org",
            &name,
            i,
            "2024-01-01T00:00:00Z",
            "<p>x</p>",
        ))
    };
    let long_title = line(&article(
        "en.wikipedia.org",
        &"x".repeat(1100),
        9,
        "2024-01-01T00:00:00Z",
        "<p/>",
    ));
    let mut not_utf8 = good(9);
    let at = not_utf8.windows(3).position(|w| w == b"<p>").unwrap();
    not_utf8[at + 1] = 0xff;
    let mut missing = article(
        "en.wikipedia.org",
        "Page 9",
        9,
        "2024-01-01T00:00:00Z",
        "<p/>",
    );
    missing["version"]
        .as_object_mut()
        .unwrap()
        .remove("identifier");
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "malformed",
            b"{\"name\": \"Page 9\", ".to_vec(),
            "not an article",
        ),
        (
            "missing",
            line(&missing),
            "missing field version.identifier",
        ),
        ("long", long_title, "a title has 1 to 1024 bytes"),
        ("utf8", not_utf8, "not UTF-8"),
        ("array", b"[1, 2]".to_vec(), "not an article"),
    ];
    for (kind, bad, why) in cases {
        let file = tmp.path().join(format!("{kind}.json.tar.gz"));
        snapshot(
            &file,
            &[
                ("w_0.ndjson", vec![good(1), good(2)]),
                ("w_1.ndjson", vec![good(3), b"   ".to_vec(), bad, good(4)]),
            ],
        );
        let dir = tmp.path().join(kind);
        init(&dir);
        let run = wink(&["import", s(&dir), "--enterprise", s(&file), "--batch", "1"]).expect(2);
        let place = format!("{}: member w_1.ndjson, line 3: ", file.display());
        assert!(
            run.stderr.contains(&place) && run.stderr.contains(why),
            "{}",
            run.stderr
        );
        let st = open(&dir);
        for (i, there) in [(1, true), (2, true), (3, true), (4, false)] {
            let got = st
                .get("en.wikipedia.org", &format!("Page_{i}"), Which::Latest)
                .unwrap();
            assert_eq!(got.is_some(), there, "{kind}: page {i}");
        }
        assert!(st
            .get("en.wikipedia.org", "Page_9", Which::Latest)
            .unwrap()
            .is_none());
        drop(st);
        let run = wink(&["import", s(&dir), "--enterprise", s(&file), "--skip-bad"]).expect(0);
        let n = run.counts();
        assert_eq!((n["bad"], n["stored"], n["unchanged"]), (1, 1, 3), "{kind}");
        assert!(run.stderr.contains("skipped bad line") && run.stderr.contains(&place));
    }
    // A damaged gzip stream is damage (exit 3), naming the file; a file that is no gzip is
    // invalid input.
    let file = tmp.path().join("cut.json.tar.gz");
    snapshot(&file, &[("w_0.ndjson", (1..200).map(good).collect())]);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let dir = tmp.path().join("cut");
    init(&dir);
    let run = wink(&["import", s(&dir), "--enterprise", s(&file)]).expect(3);
    assert!(
        run.stderr.contains(s(&file)) && run.stderr.contains("gzip and tar"),
        "{}",
        run.stderr
    );
    let plain = tmp.path().join("plain.ndjson");
    std::fs::write(&plain, good(1)).unwrap();
    wink(&["import", s(&dir), "--enterprise", s(&plain)]).expect(2);
    // Options of another kind of import or export are usage errors.
    let (warc, tar, zip) = (
        tmp.path().join("x.warc.gz"),
        tmp.path().join("x.tar.gz"),
        tmp.path().join("x.zip"),
    );
    let (dir, plain) = (s(&dir), s(&plain));
    for args in [
        vec!["import", dir, "--enterprise", plain, "--skip-damaged"],
        vec!["export", dir, "-o", s(&warc), "--as-of", "1"],
        vec![
            "export",
            dir,
            "--format",
            "enterprise",
            "-o",
            s(&tar),
            "--current",
        ],
        vec!["export", dir, "--format", "enterprise", "-o", s(&zip)],
    ] {
        wink(&args).expect(2);
    }
}

/// A kill loses at most the batch under way; a re-run finishes without a duplicate, whenever
/// the kill lands.
#[test]
fn a_killed_import_is_finished_by_a_rerun_without_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let count = 600u64;
    let lines: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            let html = common::lettered(format!("<p>{i}"), i, 20_000);
            let html = String::from_utf8(html).unwrap();
            line(&article(
                "en.wikipedia.org",
                &format!("T {i}"),
                i + 1,
                "2024-02-02T02:02:02Z",
                &html,
            ))
        })
        .collect();
    let file = tmp.path().join("big.json.tar.gz");
    snapshot(&file, &[("w_0.ndjson", lines)]);
    let dir = tmp.path().join("store");
    init(&dir);
    let mut child = spawn(
        &["import", s(&dir), "--enterprise", s(&file), "--batch", "7"],
        NOW,
    );
    std::thread::sleep(Duration::from_millis(150));
    let _ = child.kill();
    let _ = child.wait();
    let n = wink(&["import", s(&dir), "--enterprise", s(&file), "--batch", "7"])
        .expect(0)
        .counts();
    assert_eq!(n["stored"] + n["unchanged"], count);
    let st = open(&dir);
    for i in 0..count {
        let listed = st
            .list("en.wikipedia.org", &format!("T_{i}"), Page::default())
            .unwrap();
        assert_eq!(listed.len(), 1, "title {i}: {listed:?}");
    }
}

/// The shared corpus as three monthly snapshots of its 20 documents (each month the latest
/// revision then): the store keeps every month's revision, and an export as of each month's
/// date gives that snapshot back.
#[test]
fn successive_snapshots_of_the_shared_corpus_are_kept_and_given_back() {
    let Some(corpus) = require::shared("corpus", "Enterprise snapshots of the shared corpus")
    else {
        return;
    };
    let manifest = std::fs::read_to_string(corpus.join("manifest.tsv")).unwrap();
    let mut docs: BTreeMap<String, Vec<(u64, i64)>> = BTreeMap::new();
    for l in manifest.lines().skip(1) {
        let c: Vec<&str> = l.split('\t').collect();
        docs.entry(c[0].to_string())
            .or_default()
            .push((c[1].parse().unwrap(), c[2].parse().unwrap()));
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init(&dir);
    let mut months = Vec::new();
    for m in 1..=3usize {
        let arts: Vec<Value> = docs
            .iter()
            .map(|(doc, revs)| {
                let (rev, ts) = revs[revs.len() * m / 3 - 1];
                let html = std::fs::read(corpus.join(doc).join(format!("{rev:04}.html"))).unwrap();
                let date = wink::warc::Ticks::from_unix_secs(ts).warc_date().unwrap();
                let date = format!("{}Z", &date[..19]);
                let html = String::from_utf8(html).unwrap();
                article(
                    "en.wikipedia.org",
                    &doc.replace('-', " "),
                    rev,
                    &date,
                    &html,
                )
            })
            .collect();
        let file = tmp
            .path()
            .join(format!("enwiki-NS0-2026080{m}-ENTERPRISE-HTML.json.tar.gz"));
        snapshot(
            &file,
            &[("enwiki_0.ndjson", arts.iter().map(line).collect())],
        );
        let n = wink(&["import", s(&dir), "--enterprise", s(&file)])
            .expect(0)
            .counts();
        assert_eq!(n["stored"], 20);
        let newest = arts
            .iter()
            .map(|a| a["date_modified"].as_str().unwrap().to_string())
            .max()
            .unwrap();
        months.push((arts, newest));
    }
    let st = open(&dir);
    for doc in docs.keys() {
        let listed = st
            .list("en.wikipedia.org", &doc.replace('-', "_"), Page::default())
            .unwrap();
        assert_eq!(listed.len(), 3, "{doc}");
    }
    drop(st);
    for (m, (arts, newest)) in months.iter().enumerate() {
        // As of the month's newest date, each document's revision then.
        let out = tmp.path().join(format!("out{m}.json.tar.gz"));
        wink(&[
            "export",
            s(&dir),
            "--format",
            "enterprise",
            "-o",
            s(&out),
            "--as-of",
            newest,
        ])
        .expect(0);
        let got = kept(&all(&members(&out)));
        let want = kept(arts);
        // A document whose next month's revision is older than this month's newest date shows
        // that one instead: compare the documents whose next revision came later.
        let later: Vec<&String> = want
            .keys()
            .filter(|name| {
                months.get(m + 1).is_none_or(|(next, _)| {
                    next.iter().any(|a| {
                        a["name"] == json!(name)
                            && a["date_modified"].as_str().unwrap() > newest.as_str()
                    })
                })
            })
            .collect();
        assert!(!later.is_empty());
        for name in later {
            assert_eq!(got[name], want[name], "month {m}: {name}");
        }
    }
}

// ---- WARC exports read by the field's tools ----------------------------------------------------

/// A store of generated renders (unicode titles, a slash, revisits, a 10 MiB body) and, when
/// the shared corpus is there, the corpus.
fn warc_store(tmp: &Path) -> PathBuf {
    let dir = tmp.join("warc-store");
    init(&dir);
    let one = month_one();
    let file = tmp.join("gen.json.tar.gz");
    snapshot(&file, &[("w_0.ndjson", one.iter().map(line).collect())]);
    wink(&["import", s(&dir), "--enterprise", s(&file)]).expect(0);
    // A re-render of the same bytes: a revisit in the export.
    let html = parsoid("en.wikipedia.org", "Main Page", "Main Page: first text");
    wink_at(
        NOW,
        &["put", s(&dir), "en.wikipedia.org", "Main_Page", "1000", "-"],
        html.as_bytes(),
    )
    .expect(0);
    if let Some(corpus) = require::shared("corpus", "WARC exports of the shared corpus") {
        wink(&["import", s(&dir), s(&corpus)]).expect(0);
    }
    dir
}

#[test]
fn fastwarc_reads_every_record_of_gzip_zstd_and_plain_exports_with_valid_digests() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = warc_store(tmp.path());
    let Some(python) = require::python_with("fastwarc", "fastwarc reading a Wink export") else {
        return;
    };
    let script = r#"
import base64, hashlib, json, sys
from fastwarc.warc import ArchiveIterator, WarcRecordType
records = block_ok = payload_ok = revisits = 0
payloads = {}
for r in ArchiveIterator(sys.argv[1], record_types=WarcRecordType.any_type, parse_http=False):
    records += 1
    h = r.headers
    block_ok += r.verify_block_digest(consume=False)
    body = r.reader.read()
    label = h.get("WARC-Payload-Digest")
    if label is None:
        continue
    algo, value = label.split(":", 1)
    if h.get("WARC-Type") == "revisit":
        revisits += 1
        payload_ok += payloads.get(h.get("WARC-Refers-To")) == label
    else:
        digest = base64.b32encode(hashlib.new(algo, body).digest()).decode()
        payload_ok += digest == value
        payloads[h.get("WARC-Record-ID")] = label
print(json.dumps({"records": records, "block_ok": block_ok, "payload_ok": payload_ok,
                  "payloads": len(payloads) + revisits, "revisits": revisits}))
"#;
    let fastwarc = require::python_tool("fastwarc", "fastwarc check of a Wink export");
    for (name, extra) in [
        ("g.warc.gz", &[][..]),
        ("z.warc.zst", &[][..]),
        ("p.warc", &["--compress", "none"][..]),
    ] {
        let out = tmp.path().join(name);
        let mut args = vec!["export", s(&dir), "-o", s(&out), "--json"];
        args.extend_from_slice(extra);
        let report = wink(&args).expect(0).json();
        let records = report["records"].as_u64().unwrap();
        let run = Command::new(&python)
            .args(["-c", script, s(&out)])
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got: Value = serde_json::from_slice(&run.stdout).unwrap();
        assert_eq!(got["records"], records, "{name}: {got}");
        assert_eq!(got["block_ok"], records, "{name}: {got}");
        assert_eq!(got["payload_ok"], got["payloads"], "{name}: {got}");
        assert_eq!(
            got["payloads"],
            records - 1,
            "{name}: every record but the warcinfo"
        );
        assert!(got["revisits"].as_u64().unwrap() >= 1, "{got}");
        // fastwarc's own checker: every block digest.
        if let Some(fastwarc) = &fastwarc {
            let run = Command::new(fastwarc)
                .args(["check", s(&out)])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&run.stdout);
            assert!(run.status.success(), "{name}: {text}");
            assert!(
                text.contains(&format!("{records} records were verified")),
                "{text}"
            );
        }
    }
}

/// A free loopback port (bound, then let go for the server to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn pywb_replays_sampled_revisions_byte_exact_by_timestamp_and_uri() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = warc_store(tmp.path());
    let (Some(manager), Some(wayback)) = (
        require::python_tool("wb-manager", "pywb replaying a Wink export"),
        require::python_tool("wayback", "pywb replaying a Wink export"),
    ) else {
        return;
    };
    let out = tmp.path().join("replay.warc.gz");
    wink(&["export", s(&dir), "-o", s(&out)]).expect(0);
    let root = tmp.path().join("pywb");
    std::fs::create_dir(&root).unwrap();
    for args in [vec!["init", "renders"], vec!["add", "renders", s(&out)]] {
        let st = Command::new(&manager)
            .args(&args)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
    let port = free_port();
    let mut server = Command::new(&wayback)
        .args(["-p", &port.to_string(), "-b", "127.0.0.1"])
        .current_dir(&root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}/renders");
    let started = Instant::now();
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    while agent.get(&format!("{base}/")).call().is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "wayback did not start"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Sampled: every generated title (unicode, slash, 10 MiB) and every 50th other line.
    let index = std::fs::read_to_string(tmp.path().join("replay.cdxj")).unwrap();
    let st = open(&dir);
    let mut checked = 0;
    for (i, l) in index.lines().enumerate() {
        let (_, rest) = l.split_once(' ').unwrap();
        let (ts, json) = rest.split_once(' ').unwrap();
        let v: Value = serde_json::from_str(json).unwrap();
        let url = v["url"].as_str().unwrap();
        let key = wink::warc::parse_render_uri(url).unwrap();
        if key.domain == "corpus" && i % 50 != 0 {
            continue;
        }
        let want = st
            .get(
                &key.domain,
                &key.title,
                Which::Render(key.rev, key.tid.unwrap()),
            )
            .unwrap()
            .unwrap();
        let resp = agent.get(&format!("{base}/{ts}id_/{url}")).call().unwrap();
        assert_eq!(resp.status(), 200, "{url}");
        let mut body = Vec::new();
        resp.into_reader().read_to_end(&mut body).unwrap();
        assert!(
            body == want.value,
            "{url}: {} bytes, not the render's {}",
            body.len(),
            want.value.len()
        );
        checked += 1;
    }
    let _ = server.kill();
    let _ = server.wait();
    assert!(checked >= 8, "{checked}");
}

#[test]
fn a_wacz_package_passes_wacz_validate_and_holds_the_export() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = warc_store(tmp.path());
    let out = tmp.path().join("renders.wacz");
    let run = wink(&["export", s(&dir), "--wacz", s(&out), "--json"]).expect(0);
    let report = run.json();
    assert!(!tmp.path().join("renders.wacz.parts").exists());
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&out).unwrap()).unwrap();
    let names: Vec<String> = zip.file_names().map(str::to_string).collect();
    for n in [
        "archive/renders.warc.gz",
        "indexes/index.cdxj",
        "pages/pages.jsonl",
        "datapackage.json",
        "datapackage-digest.json",
    ] {
        assert!(names.contains(&n.to_string()), "{n} in {names:?}");
        let e = zip.by_name(n).unwrap();
        assert_eq!(e.compression(), zip::CompressionMethod::Stored);
    }
    let mut pages = String::new();
    zip.by_name("pages/pages.jsonl")
        .unwrap()
        .read_to_string(&mut pages)
        .unwrap();
    assert_eq!(
        pages.lines().count() as u64,
        report["pages"].as_u64().unwrap() + 1
    );
    assert_eq!(report["pages"], report["titles"]);
    let mut index = String::new();
    zip.by_name("indexes/index.cdxj")
        .unwrap()
        .read_to_string(&mut index)
        .unwrap();
    assert!(index
        .lines()
        .all(|l| l.ends_with("\"filename\": \"renders.warc.gz\"}")));
    assert_eq!(
        index.lines().count() as u64,
        report["index_lines"].as_u64().unwrap()
    );
    if let Some(wacz) = require::python_tool("wacz", "wacz validate of a Wink WACZ") {
        let run = Command::new(&wacz)
            .args(["validate", "-f", s(&out)])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && text.contains("Validation succeeded"),
            "{text}"
        );
        // A changed byte in the WARC is found.
        let bad = tmp.path().join("bad.wacz");
        let mut bytes = std::fs::read(&out).unwrap();
        let at = zip
            .by_name("archive/renders.warc.gz")
            .unwrap()
            .data_start()
            .unwrap();
        bytes[at as usize + 1000] ^= 1;
        std::fs::write(&bad, bytes).unwrap();
        let run = Command::new(&wacz)
            .args(["validate", "-f", s(&bad)])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&run.stdout).contains("Validation succeeded"));
    }
    // Existing outputs are never overwritten; a WACZ holds no .warc.zst.
    wink(&["export", s(&dir), "--wacz", s(&out)]).expect(2);
    wink(&[
        "export",
        s(&dir),
        "--wacz",
        s(&tmp.path().join("z.wacz")),
        "--compress",
        "zstd",
    ])
    .expect(2);
    assert!(!tmp.path().join("z.wacz").exists() && !tmp.path().join("z.wacz.parts").exists());
}
