//! WARC export, import and check, end to end through the `wink` binary, checked with the field's
//! own tools: `warcio check`, `warcio index` and `cdxj-indexer` (installed by `.ci/pytools`).
//! Round trips (export → import into an empty store → export) give the same records, IDs and
//! dates aside, and the same reads; every kind of damage is an error naming file, offset and
//! field.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::cli::{s, wink_at, Run};
use common::require;
use wink::clock::ManualClock;
use wink::maintenance;
use wink::store::policy::ArchivePolicy;
use wink::store::Which;
use wink::store::{
    Config, Labels, Page, Policy, Put, Renders, Revisions, State, Store, StoreOptions,
};

/// The clock of every store and command here.
const NOW: i64 = 1_700_000_000;
const HTML: &str = "text/html; charset=utf-8";

fn wink(args: &[&str]) -> Run {
    wink_at(NOW + 10_000, args, b"")
}

/// Titles that exercise the URI's escaping: a slash, spaces, `%`, `#`, non-ASCII, parentheses.
const TITLES: [&str; 6] = [
    "Main_Page",
    "AC/DC (band)",
    "100% #1 ?x=1&y",
    "Café_au_lait",
    "日本",
    "a.b~c*d!e'f",
];

fn page(title: &str, rev: u64, render: u32) -> Vec<u8> {
    let body = format!("<html><p>{title} revision {rev} render {render}</p>");
    common::lettered(
        body,
        rev * 31 + u64::from(render),
        3000 + (rev as usize % 5) * 700,
    )
}

/// The labels of a title's renders: one title's are kept gzip, in French; another's say their
/// language only.
fn labels_of(title_index: usize) -> Labels {
    match title_index {
        3 => Labels {
            encoding: Some("gzip".into()),
            language: Some("fr".into()),
        },
        4 => Labels {
            encoding: None,
            language: Some("ja".into()),
        },
        _ => Labels::NONE,
    }
}

/// A render's bytes as stored: gzip when its labels say so.
fn stored(labels: &Labels, page: Vec<u8>) -> Vec<u8> {
    if labels.encoding.is_none() {
        return page;
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &page).unwrap();
    gz.finish().unwrap()
}

/// A store at `dir`: two domains, six titles, five revisions of two renders each (a render that
/// repeats its revision's first payload: a revisit), two titles' renders with labels, old
/// revisions archived, a historical render and a taken-down revision.
fn generated(dir: &Path) -> Store {
    let clock = ManualClock::new(NOW - 5000);
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        policy: Policy {
            revisions: Revisions::Recent { ttl: 1000 },
            renders: Renders::All,
            historical_ttl: 100_000,
        },
        archive: Some(ArchivePolicy::Newest),
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts).unwrap();
    let mut st = Store::open(dir, &opts).unwrap();
    for (i, title) in TITLES.iter().enumerate() {
        let domain = ["en.wikipedia.org", "de.wikipedia.org"][i % 2];
        let labels = labels_of(i);
        for rev in 1..=5u64 {
            // The second render of odd revisions repeats the first's bytes.
            for render in [0, if rev % 2 == 1 { 0 } else { 1 }] {
                clock.advance(7);
                st.put(&Put {
                    domain,
                    title,
                    rev,
                    tid: None,
                    content_type: HTML,
                    labels: &labels,
                    value: &stored(&labels, page(title, rev, render)),
                    historical: false,
                })
                .unwrap();
            }
        }
    }
    clock.advance(2000);
    maintenance::archive_due(&mut st, |_, _| {}).unwrap();
    st.put(&Put {
        historical: true,
        ..Put::new(
            "en.wikipedia.org",
            "Main_Page",
            2,
            "text/html",
            b"<p>regen</p>",
        )
    })
    .unwrap();
    st.take_down("de.wikipedia.org", "AC/DC (band)", Some(3))
        .unwrap();
    st
}

fn open_at(dir: &Path, now: i64) -> Store {
    common::open_read_only_at(dir, now)
}

/// Every readable render: (domain, title, rev, tid) → (content type, value, state, labels).
type Reads = BTreeMap<(String, String, u64, String), (String, Vec<u8>, State, Labels)>;

fn reads(st: &Store, titles: &[(&str, &str)]) -> Reads {
    let mut out = Reads::new();
    for (domain, title) in titles {
        for l in st.list(domain, title, Page::default()).unwrap() {
            let got = st
                .get(domain, title, Which::Render(l.rev, l.tid))
                .unwrap()
                .unwrap();
            let key = (
                domain.to_string(),
                title.to_string(),
                l.rev,
                l.tid.to_string(),
            );
            out.insert(key, (got.content_type, got.value, got.state, got.labels));
        }
    }
    out
}

fn all_titles() -> Vec<(&'static str, &'static str)> {
    TITLES
        .iter()
        .enumerate()
        .map(|(i, t)| (["en.wikipedia.org", "de.wikipedia.org"][i % 2], *t))
        .collect()
}

/// The records of a file but its warcinfo (which describes the store and the export), each
/// reduced to what a round trip keeps: its header lines but the record ID and a revisit's
/// reference to its original's ID; and its block.
fn comparable(file: &Path) -> Vec<String> {
    records(file)
        .into_iter()
        .filter(|r| !r.contains("WARC-Type: warcinfo"))
        .map(|r| {
            r.split("\r\n")
                .filter(|l| !(l.starts_with("WARC-Record-ID:") || l.starts_with("WARC-Refers-To:")))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// Each record of a file, as text.
fn records(file: &Path) -> Vec<String> {
    let bytes = plain(file);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    text.split("WARC/1.1\r\n")
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect()
}

/// The records of a WARC file uncompressed (gzip members or zstd frames decoded one by one).
fn plain(file: &Path) -> Vec<u8> {
    let bytes = std::fs::read(file).unwrap();
    let name = file.to_string_lossy();
    if name.ends_with(".gz") {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&bytes[..]), &mut out)
            .unwrap();
        out
    } else if name.ends_with(".zst") {
        zstd::stream::decode_all(&bytes[..]).unwrap()
    } else {
        bytes
    }
}

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(run.out().trim()).unwrap()
}

/// `warcio check -v`: exit 0, and every record with a digest passes (revisits aside).
fn warcio_check(file: &Path) {
    let Some(warcio) = require::python_tool("warcio", "warcio check of a Wink export") else {
        return;
    };
    let out = Command::new(warcio)
        .args(["check", "-v", s(file)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "warcio check {}: {text}",
        file.display()
    );
    let records = text.matches("WARC-Record-ID").count();
    let passed = text.matches("digest pass").count();
    let revisits = text.matches(" revisit\n").count();
    assert!(records > 0, "{text}");
    assert_eq!(passed + revisits, records, "every digest verified: {text}");
}

/// `warcio index`: one line per record, at the offsets our index gives.
fn warcio_offsets(file: &Path) -> Option<Vec<(String, u64)>> {
    let warcio = require::python_tool("warcio", "warcio index of a Wink export")?;
    let out = Command::new(warcio)
        .args(["index", "-f", "warc-type,offset", s(file)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines = String::from_utf8(out.stdout).unwrap();
    Some(
        lines
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let offset = v["offset"].as_str().unwrap().parse().unwrap();
                (v["warc-type"].as_str().unwrap().to_string(), offset)
            })
            .collect(),
    )
}

/// Our CDXJ equals cdxj-indexer's on the same files (sorted: its lines come in file order).
fn cdxj_matches(files: &[PathBuf], ours: &Path) {
    let Some(indexer) = require::python_tool("cdxj-indexer", "cdxj-indexer on a Wink export")
    else {
        return;
    };
    let mut expected = String::new();
    for f in files {
        let out = Command::new(&indexer).arg(f).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        expected.push_str(&String::from_utf8(out.stdout).unwrap());
    }
    let mut expected: Vec<&str> = expected.lines().collect();
    expected.sort_unstable();
    let ours = std::fs::read_to_string(ours).unwrap();
    let ours: Vec<&str> = ours.lines().collect();
    assert_eq!(ours.len(), expected.len());
    for (a, b) in ours.iter().zip(&expected) {
        assert_eq!(a, b);
    }
}

#[test]
fn a_generated_store_round_trips_and_the_fields_tools_accept_its_export() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    drop(generated(&src));
    let before = reads(&open_at(&src, NOW + 10_000), &all_titles());
    assert!(before.values().any(|v| v.2 == State::Archived));
    assert!(before.values().any(|v| v.2 == State::Historical));
    assert!(before
        .values()
        .any(|v| v.3.encoding.is_some() && v.2 == State::Archived));

    let out = tmp.path().join("dump.warc.gz");
    let run = wink(&["export", s(&src), "-o", s(&out), "--json"]).expect(0);
    let report = json(&run);
    assert_eq!(
        report["records"],
        before.len() as u64 + 1,
        "a record per render, and warcinfo"
    );
    assert!(report["revisits"].as_u64().unwrap() >= 6, "{report}");
    assert_eq!(report["index"], s(&tmp.path().join("dump.cdxj")));
    // Labelled renders carry their labels in Wink's own fields (warcio reads them as any).
    let text = plain(&out);
    for field in [
        "WARC-Wink-Content-Encoding: gzip\r\n",
        "WARC-Wink-Content-Language: fr\r\n",
        "WARC-Wink-Content-Language: ja\r\n",
    ] {
        assert!(find(&text, field.as_bytes()).is_some(), "{field}");
    }
    warcio_check(&out);
    if let Some(offsets) = warcio_offsets(&out) {
        assert_eq!(offsets.len(), before.len() + 1);
        assert_eq!(offsets[0], ("warcinfo".to_string(), 0));
        let cdxj = std::fs::read_to_string(tmp.path().join("dump.cdxj")).unwrap();
        for (kind, offset) in &offsets[1..] {
            let needle = format!("\"offset\": \"{offset}\"");
            assert!(cdxj.contains(&needle), "{kind} at {offset} indexed");
        }
    }
    cdxj_matches(std::slice::from_ref(&out), &tmp.path().join("dump.cdxj"));
    wink(&["check", "--warc", s(&out)]).expect(0);

    // Into an empty store, and out again.
    let dst = tmp.path().join("dst");
    wink(&["init", s(&dst), "--revisions", "recent:1000000"]).expect(0);
    let run = wink(&["import", s(&dst), "--warc", s(&out)]).expect(0);
    assert!(
        run.out().contains(&format!("renders\t{}", before.len())),
        "{}",
        run.out()
    );
    let after = reads(&open_at(&dst, NOW + 10_000), &all_titles());
    let strip = |r: &Reads| -> Vec<_> {
        r.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.0.clone(),
                    v.1.clone(),
                    v.2 == State::Historical,
                    v.3.clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        strip(&after),
        strip(&before),
        "the same reads, historical renders as such"
    );
    let again = tmp.path().join("again.warc.gz");
    wink(&["export", s(&dst), "-o", s(&again)]).expect(0);
    // The same records but where each render lived: archived ones are hot now.
    let relive = |f: &Path| -> Vec<String> {
        comparable(f)
            .into_iter()
            .map(|r| r.replace("WARC-Wink-State: archived", "WARC-Wink-State: recent"))
            .collect()
    };
    assert_eq!(relive(&again), relive(&out));
    // The same index lines but where the records landed (compressed sizes vary with the IDs).
    let keys = |f: &str| -> Vec<(String, String, String, String)> {
        let text = std::fs::read_to_string(tmp.path().join(f)).unwrap();
        text.lines()
            .map(|l| {
                let (key, json) = l.split_once(" {").unwrap();
                let v: serde_json::Value = serde_json::from_str(&format!("{{{json}")).unwrap();
                let field = |k: &str| v[k].as_str().unwrap().to_string();
                (
                    key.to_string(),
                    field("url"),
                    field("mime"),
                    field("digest"),
                )
            })
            .collect()
    };
    assert_eq!(keys("again.cdxj"), keys("dump.cdxj"));
}

#[test]
fn zstd_and_plain_exports_and_split_files() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    drop(generated(&src));
    let zst = tmp.path().join("z.warc.zst");
    wink(&["export", s(&src), "-o", s(&zst)]).expect(0);
    wink(&["check", "--warc", s(&zst)]).expect(0);
    // warcio reads no zstd: its checker gets the frames decoded.
    let decoded = tmp.path().join("z-decoded.warc");
    std::fs::write(&decoded, plain(&zst)).unwrap();
    warcio_check(&decoded);
    let none = tmp.path().join("n.warc");
    wink(&["export", s(&src), "-o", s(&none), "--compress", "none"]).expect(0);
    warcio_check(&none);
    cdxj_matches(std::slice::from_ref(&none), &tmp.path().join("n.cdxj"));
    assert_eq!(comparable(&none).len(), comparable(&zst).len());

    // Files of at most 20 kB: each opens with its warcinfo, none is over (a record is < 8 kB).
    let run = wink(&[
        "export",
        s(&src),
        "-o",
        s(&tmp.path().join("part.warc.gz")),
        "--max-file-bytes",
        "20000",
        "--json",
    ])
    .expect(0);
    let files: Vec<PathBuf> = json(&run)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| PathBuf::from(f.as_str().unwrap()))
        .collect();
    // How many files depends on how well each record compresses; three or more shows splitting.
    assert!(files.len() >= 3, "{files:?}");
    for (n, f) in files.iter().enumerate() {
        assert!(f.ends_with(format!("part-{n:05}.warc.gz")), "{f:?}");
        assert!(std::fs::metadata(f).unwrap().len() <= 20_000);
        assert!(records(f)[0].starts_with("WARC-Type: warcinfo"));
    }
    cdxj_matches(&files, &tmp.path().join("part.cdxj"));
    let mut args = vec!["check", "--warc"];
    args.extend(files.iter().map(|f| s(f)));
    wink(&args).expect(0);
    // Every file together imports what the single file does.
    let dst = tmp.path().join("dst");
    wink(&["init", s(&dst), "--revisions", "recent:1000000"]).expect(0);
    let mut args = vec!["import", s(&dst), "--warc"];
    args.extend(files.iter().map(|f| s(f)));
    wink(&args).expect(0);
    let titles = all_titles();
    let want = reads(&open_at(&src, NOW + 10_000), &titles);
    assert_eq!(
        reads(&open_at(&dst, NOW + 10_000), &titles).len(),
        want.len()
    );
    // A revisit whose original is in a file not given: damage, naming the field. Files of one
    // record each put every revisit apart from its original.
    let run = wink(&[
        "export",
        s(&src),
        "-o",
        s(&tmp.path().join("single.warc")),
        "--max-file-bytes",
        "1",
        "--json",
    ])
    .expect(0);
    let singles = json(&run)["files"].as_array().unwrap().clone();
    let lone = singles
        .iter()
        .map(|f| PathBuf::from(f.as_str().unwrap()))
        .find(|f| {
            comparable(f)
                .iter()
                .any(|r| r.contains("WARC-Type: revisit"))
        })
        .unwrap();
    let lone = &lone;
    let run = wink(&["check", "--warc", s(lone)]).expect_code(1);
    assert!(run.out().contains("WARC-Refers-To"), "{}", run.out());
    let empty = tmp.path().join("empty");
    wink(&["init", s(&empty)]).expect(0);
    let run = wink(&["import", s(&empty), "--warc", s(lone)]).expect(3);
    assert!(
        run.stderr.contains(s(lone)) && run.stderr.contains("WARC-Refers-To"),
        "{}",
        run.stderr
    );
}

#[test]
fn filters_pick_renders() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    drop(generated(&src));
    let all = reads(&open_at(&src, NOW + 10_000), &all_titles());
    let count = |args: &[&str], name: &str| -> u64 {
        let out = tmp.path().join(format!("{name}.warc"));
        let mut a = vec!["export", s(&src), "-o", s(&out), "--json"];
        a.extend_from_slice(args);
        json(&wink(&a).expect(0))["records"].as_u64().unwrap() - 1
    };
    let en = all.keys().filter(|k| k.0 == "en.wikipedia.org").count() as u64;
    assert_eq!(count(&["--domain", "en.wikipedia.org"], "en"), en);
    let one = all.keys().filter(|k| k.1 == "AC/DC (band)").count() as u64;
    assert_eq!(
        count(
            &["--domain", "de.wikipedia.org", "--title", "AC/DC (band)"],
            "one"
        ),
        one
    );
    let current = all.values().filter(|v| v.2 == State::Current).count() as u64;
    assert_eq!(count(&["--current"], "current"), current);
    assert_eq!(count(&["--until", "1"], "nothing"), 0);
    assert_eq!(
        count(&["--since", "2000-01-01T00:00:00Z"], "since"),
        all.len() as u64
    );
    // Usage errors change nothing (exit 2).
    let out = tmp.path().join("x.warc.gz");
    wink(&["export", s(&src), "-o", s(&out), "--compress", "zstd"]).expect(2);
    wink(&["export", s(&src), "-o", s(&tmp.path().join("x.tar"))]).expect(2);
    wink(&["export", s(&src), "-o", s(&tmp.path().join("en.warc"))]).expect(2);
    wink(&["export", s(&tmp.path().join("nostore")), "-o", s(&out)]).expect(2);
    assert!(!out.exists());
}

#[test]
fn the_shared_corpus_exports_checks_and_round_trips() {
    let Some(corpus) = require::shared("corpus", "the WARC export of the shared corpus") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    wink(&["init", s(&src)]).expect(0);
    wink(&["import", s(&src), s(&corpus)]).expect(0);
    let out = tmp.path().join("corpus.warc.gz");
    let report = json(&wink(&["export", s(&src), "-o", s(&out), "--json"]).expect(0));
    assert_eq!(report["value_bytes"], 128_835_824);
    warcio_check(&out);
    cdxj_matches(std::slice::from_ref(&out), &tmp.path().join("corpus.cdxj"));
    let dst = tmp.path().join("dst");
    wink(&["init", s(&dst)]).expect(0);
    wink(&["import", s(&dst), "--warc", s(&out)]).expect(0);
    let again = tmp.path().join("again.warc.gz");
    wink(&["export", s(&dst), "-o", s(&again)]).expect(0);
    assert_eq!(comparable(&again), comparable(&out));
}

/// A plain export of the generated store, and the byte range of its `n`-th record.
fn plain_export(tmp: &Path) -> (PathBuf, Vec<u8>, Vec<(u64, u64)>) {
    let src = tmp.join("src");
    drop(generated(&src));
    let file = tmp.join("p.warc");
    wink(&["export", s(&src), "-o", s(&file)]).expect(0);
    let bytes = std::fs::read(&file).unwrap();
    let mut starts: Vec<u64> = Vec::new();
    let mut at = 0;
    while let Some(i) = find(&bytes[at..], b"WARC/1.1\r\n") {
        starts.push((at + i) as u64);
        at += i + 1;
    }
    let ranges = starts
        .iter()
        .zip(starts.iter().skip(1).chain([&(bytes.len() as u64)]))
        .map(|(a, b)| (*a, *b))
        .collect();
    (file, bytes, ranges)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes `bytes` as `name`, then: `wink check --warc` fails naming the offset and the field;
/// `wink import` stops there (exit 3, the same naming), keeping exactly the records before it;
/// `--skip-damaged` imports the rest and counts one damaged record.
fn damaged(tmp: &Path, name: &str, bytes: &[u8], at: u64, field: &str, before: usize, all: usize) {
    let file = tmp.join(name);
    std::fs::write(&file, bytes).unwrap();
    let run = wink(&["check", "--warc", s(&file)]).expect_code(1);
    let line = format!("{}: error at byte {at}: {field}", file.display());
    assert!(run.out().contains(&line), "{line} in {}", run.out());
    let dir = tmp.join(format!("{name}.store"));
    wink(&["init", s(&dir), "--revisions", "recent:1000000"]).expect(0);
    let run = wink(&["import", s(&dir), "--warc", s(&file)]).expect(3);
    assert!(
        run.stderr.contains(s(&file))
            && run.stderr.contains(&format!("byte {at}"))
            && run.stderr.contains(field),
        "{}",
        run.stderr
    );
    let kept = reads(&open_at(&dir, NOW + 10_000), &all_titles()).len();
    assert_eq!(kept, before, "the records before the damage, nothing after");
    let skip = tmp.join(format!("{name}.skip"));
    wink(&["init", s(&skip), "--revisions", "recent:1000000"]).expect(0);
    let run = wink(&["import", s(&skip), "--warc", s(&file), "--skip-damaged"]).expect_code(0);
    assert!(run.out().contains("damaged\t1"), "{}", run.out());
    assert!(
        run.stderr.contains("skipped damaged record"),
        "{}",
        run.stderr
    );
    let kept = reads(&open_at(&skip, NOW + 10_000), &all_titles()).len();
    assert_eq!(kept, all - 1, "every record but the damaged one");
}

#[test]
fn each_kind_of_damage_names_file_offset_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, bytes, ranges) = plain_export(tmp.path());
    let all = ranges.len() - 1; // the warcinfo holds no render
                                // A resource record of revision 4, whose payload no revisit repeats.
    let n = (1..ranges.len())
        .find(|&i| {
            let r = &bytes[ranges[i].0 as usize..ranges[i].1 as usize];
            find(r, b"WARC-Type: resource").is_some() && find(r, b"/4/").is_some()
        })
        .unwrap();
    let (start, end) = ranges[n];
    let (start_u, end_u) = (start as usize, end as usize);
    let record = &bytes[start_u..end_u];

    // A wrong Content-Length (one byte more).
    let cl = find(record, b"Content-Length: ").unwrap() + 16;
    let eol = cl + find(&record[cl..], b"\r\n").unwrap();
    let len: u64 = std::str::from_utf8(&record[cl..eol])
        .unwrap()
        .parse()
        .unwrap();
    let mut wrong = bytes[..start_u + cl].to_vec();
    wrong.extend_from_slice((len + 1).to_string().as_bytes());
    wrong.extend_from_slice(&bytes[start_u + eol..]);
    damaged(
        tmp.path(),
        "length.warc",
        &wrong,
        start,
        "Content-Length",
        n - 1,
        all,
    );

    // A flipped byte in a block: its digest.
    let mut flipped = bytes.clone();
    flipped[end_u - 10] ^= 0x20;
    damaged(
        tmp.path(),
        "digest.warc",
        &flipped,
        start,
        "WARC-Block-Digest",
        n - 1,
        all,
    );

    // A mandatory field missing (its name changed, the length kept).
    let mut missing = bytes.clone();
    let d = start_u + find(record, b"WARC-Date:").unwrap();
    missing[d..d + 10].copy_from_slice(b"X-Dated-A:");
    damaged(
        tmp.path(),
        "missing.warc",
        &missing,
        start,
        "WARC-Date",
        n - 1,
        all,
    );

    // A gzip member cut short (its trailer gone), in a .warc.gz of the same records. Cut in the
    // middle of its deflate stream instead, the next member's bytes may read as more of it, and
    // where the damage shows would depend on the bytes (random record ids).
    let members: Vec<Vec<u8>> = ranges
        .iter()
        .map(|(a, b)| {
            wink::warc::Compression::Gzip
                .compress(&bytes[*a as usize..*b as usize], 6)
                .unwrap()
        })
        .collect();
    let member_at: usize = members[..n].iter().map(Vec::len).sum();
    let mut gz = members.concat();
    let len = members[n].len();
    gz.drain(member_at + len - 8..member_at + len);
    damaged(
        tmp.path(),
        "cut.warc.gz",
        &gz,
        member_at as u64,
        "compressed member",
        n - 1,
        all,
    );

    // The last record cut in the middle: warcio's checker accepts it; ours does not.
    let whole = members.concat();
    let last = members.last().unwrap().len();
    let file = tmp.path().join("end.warc.gz");
    std::fs::write(&file, &whole[..whole.len() - last / 2]).unwrap();
    wink(&["check", "--warc", s(&file)]).expect_code(1);
    if let Some(warcio) = require::python_tool("warcio", "warcio check of a truncated file") {
        let st = Command::new(warcio)
            .args(["check", s(&file)])
            .status()
            .unwrap();
        assert!(
            st.success(),
            "warcio's checker accepts a truncated last record"
        );
    }
}

#[test]
fn other_warcs_import_as_mapped_or_are_refused_with_the_reason() {
    let Some(python) = require::python_with("warcio", "a WARC written by warcio's writer") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("foreign.warc.gz");
    let script = r#"
import sys, gzip
from io import BytesIO
from warcio.warcwriter import WARCWriter
from warcio.statusandheaders import StatusAndHeaders
with open(sys.argv[1], 'wb') as f:
    w = WARCWriter(f, gzip=True)
    body = gzip.compress(b'<html>zipped page</html>')
    chunked = b'%x\r\n' % len(body) + body + b'\r\n0\r\n\r\n'
    h = StatusAndHeaders('200 OK', [('Content-Type', 'text/html'), ('Content-Encoding', 'gzip'),
        ('Transfer-Encoding', 'chunked'), ('Content-Language', 'de')], protocol='HTTP/1.1')
    r = w.create_warc_record('https://example.com/page?b=2', 'response', payload=BytesIO(chunked),
        http_headers=h, warc_headers_dict={'WARC-Date': '2024-05-01T12:00:00Z'})
    w.write_record(r)
    req = w.create_warc_record('https://example.com/page?b=2', 'request', payload=BytesIO(b''),
        http_headers=StatusAndHeaders('GET /page?b=2 HTTP/1.1', [], is_http_request=True))
    w.write_record(req)
    h404 = StatusAndHeaders('404 Not Found', [('Content-Type', 'text/html')], protocol='HTTP/1.1')
    w.write_record(w.create_warc_record('https://example.com/gone', 'response',
        payload=BytesIO(b'nope'), http_headers=h404))
    w.write_record(w.create_warc_record('https://example.com/data.json', 'resource',
        payload=BytesIO(b'{"a": 1}'), warc_content_type='application/json',
        warc_headers_dict={'WARC-Date': '2024-05-02T00:00:00Z'}))
    rv = w.create_revisit_record('https://example.com/page?b=2', r.rec_headers.get_header('WARC-Payload-Digest'),
        'https://example.com/page?b=2', '2024-05-01T12:00:00Z',
        warc_headers_dict={'WARC-Date': '2024-06-01T00:00:00Z',
                           'WARC-Refers-To': r.rec_headers.get_header('WARC-Record-ID')})
    w.write_record(rv)
"#;
    let out = Command::new(&python)
        .args(["-c", script, s(&file)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wink(&["check", "--warc", s(&file)]).expect(0);
    let dir = tmp.path().join("store");
    wink(&["init", s(&dir), "--revisions", "all"]).expect(0);
    let run = wink(&["import", s(&dir), "--warc", s(&file)]).expect(0);
    let text = run.out();
    for line in ["renders\t3", "revisits\t1", "passed_over\t1", "refused\t1"] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(run.stderr.contains("HTTP status 404"), "{}", run.stderr);
    let st = open_at(&dir, NOW);
    let renders = st.list("example.com", "page?b=2", Page::default()).unwrap();
    let revs: Vec<u64> = renders.iter().map(|l| l.rev).collect();
    assert_eq!(
        revs,
        vec![20240601000000, 20240501120000],
        "a revision per capture"
    );
    for l in &renders {
        let got = st
            .get("example.com", "page?b=2", Which::Render(l.rev, l.tid))
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.value.as_slice(), got.content_type.as_str()),
            (&b"<html>zipped page</html>"[..], "text/html")
        );
        // The response's language is kept (the revisit's from its original); the body is
        // stored decoded, so no encoding.
        assert_eq!(
            (
                got.labels.encoding.as_deref(),
                got.labels.language.as_deref()
            ),
            (None, Some("de"))
        );
    }
    let json = st
        .get("example.com", "data.json", Which::Latest)
        .unwrap()
        .unwrap();
    assert_eq!(
        (json.value.as_slice(), json.rev),
        (&b"{\"a\": 1}"[..], 20240502000000)
    );
    // The same file again: the same tids, so nothing new.
    drop(st);
    wink(&["import", s(&dir), "--warc", s(&file)]).expect(0);
    let st = open_at(&dir, NOW);
    assert_eq!(
        st.list("example.com", "page?b=2", Page::default()).unwrap(),
        renders
    );
}
