//! `wink archive` end to end through the built binary, with WINK_NOW set per command: revisions
//! leaving the hot tier move into the archive and read back byte for byte with state `archived`
//! (`get`, `get --meta`, `ls --json`), `stat` reports the archive, a rerun archives nothing,
//! take-down reaches the archive, a store without an archive is refused, and a damaged archive
//! block fails reads of its title only, naming the block and the title.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::Path;

use serde_json::Value;
use wink::filesys::inode::Inode;
use wink::filesys::{self, Filesys, OpenOptions};

mod common;
use common::cli::{hold_writer, s, snapshot, waits_for_lock, wink_at, Run};

const D: &str = "en.wikipedia.org";
const T: i64 = 1_700_000_000;
/// The recent window of the test stores.
const TTL: i64 = 100;
const TITLES: [&str; 3] = ["Alpha", "Beta", "Gamma"];

/// `wink ARGS` at time `now`.
fn wink<S: AsRef<OsStr>>(now: i64, args: &[S]) -> Run {
    wink_at(now, args, b"")
}

/// A page of `title` at `rev`: shared boilerplate plus text of its own, a few KB.
fn page(title: &str, rev: u64) -> Vec<u8> {
    let mut html = format!("<!DOCTYPE html><html><head><title>{title}</title></head><body>");
    for p in 0..(20 + rev) {
        html.push_str(&format!(
            "<p id=\"p{p}\">Paragraph {p} of {title}, as edited in revision {}: {}</p>\n",
            rev.min(p + 1),
            "lorem ipsum dolor sit amet ".repeat(1 + (p as usize) % 5)
        ));
    }
    html.push_str(&format!("<footer>revision {rev}</footer></body></html>"));
    html.into_bytes()
}

/// A store with the archive (`newest`, the smallest blocks) and a recent window of TTL seconds.
fn init_archived(dir: &Path) {
    let run = wink(
        T,
        &[
            "init",
            s(dir),
            "--revisions",
            &format!("recent:{TTL}"),
            "--renders",
            "latest:1:10",
            "--archive",
            "newest",
            "--archive-block-bytes",
            "65536",
        ],
    )
    .expect(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

/// Puts revision `rev` of every title at `now`, its content in a file (stdin stays free).
fn put_all(dir: &Path, rev: u64, now: i64) {
    let input = dir.with_extension(format!("input-{rev}"));
    for title in TITLES {
        fs::write(&input, page(title, rev)).unwrap();
        let run = wink(now, &["put", s(dir), D, title, &rev.to_string(), s(&input)]).expect(0);
        assert!(run.stderr.is_empty(), "{}", run.stderr);
    }
    fs::remove_file(&input).unwrap();
}

/// Revision r of every title at `base` + 10 r.
fn put_revisions(dir: &Path, revs: std::ops::RangeInclusive<u64>, base: i64) {
    for rev in revs {
        put_all(dir, rev, base + 10 * rev as i64);
    }
}

/// `wink archive DIR` at `now`: its summary fields (and nothing on stderr: not a terminal).
fn archive(dir: &Path, now: i64) -> BTreeMap<String, String> {
    let run = wink(now, &["archive", s(dir)]).expect(0);
    assert!(
        run.stderr.is_empty(),
        "no progress bar off a terminal: {}",
        run.stderr
    );
    run.fields()
}

fn num(fields: &BTreeMap<String, String>, field: &str) -> u64 {
    fields[field]
        .parse()
        .unwrap_or_else(|_| panic!("{field}: {}", fields[field]))
}

fn get(now: i64, dir: &Path, title: &str, which: &[&str]) -> Run {
    let mut args = vec!["get", s(dir), D, title];
    args.extend_from_slice(which);
    wink(now, &args)
}

fn meta(now: i64, dir: &Path, title: &str, rev: u64) -> Value {
    get(now, dir, title, &[&rev.to_string(), "--meta"])
        .expect(0)
        .json()
}

/// `wink ls --json` at `now` as (rev, size, state).
fn ls(now: i64, dir: &Path, title: &str) -> Vec<(u64, u64, String)> {
    wink(now, &["ls", s(dir), D, title, "--json"])
        .expect(0)
        .json()
        .as_array()
        .expect("an array")
        .iter()
        .map(|o| {
            (
                o["rev"].as_u64().unwrap(),
                o["size"].as_u64().unwrap(),
                o["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn raw_bytes(revs: std::ops::RangeInclusive<u64>) -> u64 {
    TITLES
        .iter()
        .flat_map(|t| revs.clone().map(move |r| page(t, r).len() as u64))
        .sum()
}

#[test]
fn archive_moves_leaving_revisions_and_reads_go_through() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init_archived(&dir);
    put_revisions(&dir, 1..=5, T);
    // Revision 4 was superseded at T + 50: revisions 1..=4 have left the hot tier by T + 200.
    let now = T + 200;
    // Until archived, a leaving revision stays readable from the hot tier.
    assert_eq!(meta(now, &dir, "Alpha", 2)["state"], "recent");

    let run = archive(&dir, now);
    let raw = raw_bytes(1..=4);
    assert_eq!(
        (
            num(&run, "titles"),
            num(&run, "revisions"),
            num(&run, "bytes")
        ),
        (3, 12, raw)
    );
    assert_eq!(
        (num(&run, "archive.titles"), num(&run, "archive.revisions")),
        (3, 12)
    );
    assert_eq!(num(&run, "archive.raw_bytes"), raw);
    let stored = num(&run, "archive.stored_bytes");
    assert!(stored > 0, "{run:?}");
    let pct: f64 = run["archive.stored_pct"].parse().unwrap();
    assert!(
        (pct - 100.0 * stored as f64 / raw as f64).abs() < 0.001,
        "{run:?}"
    );
    let seconds: f64 = run["seconds"].parse().unwrap();
    let rate: f64 = run["mb_per_s"].parse().unwrap();
    assert!(seconds >= 0.0 && rate >= 0.0, "{run:?}");
    assert_eq!(
        run.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "archive.blocks",
            "archive.raw_bytes",
            "archive.revisions",
            "archive.stored_bytes",
            "archive.stored_pct",
            "archive.titles",
            "bytes",
            "mb_per_s",
            "revisions",
            "seconds",
            "titles"
        ]
    );

    for title in TITLES {
        for rev in 1..=4 {
            let m = meta(now, &dir, title, rev);
            assert_eq!(
                (&m["rev"], &m["state"], &m["size"]),
                (
                    &Value::from(rev),
                    &Value::from("archived"),
                    &Value::from(page(title, rev).len())
                ),
                "{title} {rev}: {m}"
            );
            let bytes = get(now, &dir, title, &[&rev.to_string()]).expect(0).stdout;
            assert!(bytes == page(title, rev), "{title} {rev}: bytes differ");
            // By tid too: the archive keeps the render's tid.
            let tid = m["tid"].as_str().unwrap();
            let by_tid = get(now, &dir, title, &[&rev.to_string(), tid]).expect(0);
            assert!(by_tid.stdout == page(title, rev), "{title} {rev} by tid");
        }
        assert_eq!(meta(now, &dir, title, 5)["state"], "current");
        let expected: Vec<(u64, u64, String)> = (1..=5)
            .rev()
            .map(|r| {
                let state = if r == 5 { "current" } else { "archived" };
                (r, page(title, r).len() as u64, state.to_string())
            })
            .collect();
        assert_eq!(ls(now, &dir, title), expected, "{title}");
    }

    let st = wink(now, &["stat", s(&dir), "--json"]).expect(0).json();
    assert_eq!((&st["revisions"], &st["renders"]), (&3.into(), &3.into()));
    let a = &st["archive"];
    // Every byte of the archive's files. The run reported them before its clean close emptied
    // the archive's journal: a little more.
    let on_disk: u64 = ["data", "idx", "time", "jnl", "jnl2"]
        .iter()
        .map(|ext| {
            std::fs::metadata(dir.join(format!("archive.{ext}")))
                .unwrap()
                .len()
        })
        .sum();
    assert!(
        on_disk <= stored && stored - on_disk < 4096,
        "{on_disk} vs {stored}"
    );
    let stored = on_disk;
    assert_eq!(
        (
            &a["titles"],
            &a["revisions"],
            &a["raw_bytes"],
            &a["stored_bytes"]
        ),
        (&3.into(), &12.into(), &raw.into(), &stored.into()),
        "{st}"
    );
    assert_eq!(a["blocks"], num(&run, "archive.blocks"));
    assert_eq!((&a["policy"], &a["level"]), (&"newest".into(), &19.into()));
    let text = wink(now, &["stat", s(&dir)]).expect(0).fields();
    assert_eq!(text["archive.revisions"], "12");
    assert_eq!(text["archive.raw_bytes"], raw.to_string());
    assert_eq!(text["archive.stored_bytes"], stored.to_string());

    // A rerun finds nothing due.
    let again = archive(&dir, now);
    assert_eq!(
        (
            num(&again, "titles"),
            num(&again, "revisions"),
            num(&again, "bytes")
        ),
        (0, 0, 0)
    );
    assert_eq!(num(&again, "archive.revisions"), 12);

    // A later run archives what left since: revision 5, superseded at T + 300.
    put_all(&dir, 6, T + 300);
    let later = archive(&dir, T + 400);
    assert_eq!((num(&later, "titles"), num(&later, "revisions")), (3, 3));
    assert_eq!(num(&later, "bytes"), raw_bytes(5..=5));
    assert_eq!(num(&later, "archive.revisions"), 15);
    for title in TITLES {
        for rev in [1, 5] {
            let run = get(T + 400, &dir, title, &[&rev.to_string()]).expect(0);
            assert!(run.stdout == page(title, rev), "{title} {rev}");
        }
    }

    // A take-down reaches the archive, and outlives reopening.
    let run = wink(T + 400, &["rm", s(&dir), D, "Alpha", "2"]).expect(0);
    assert_eq!(run.out(), "1\n");
    let run = get(T + 400, &dir, "Alpha", &["2"]).expect(1);
    assert!(run.stdout.is_empty());
    assert!(ls(T + 400, &dir, "Alpha")
        .iter()
        .all(|(rev, _, _)| *rev != 2));
    let st = wink(T + 400, &["stat", s(&dir), "--json"]).expect(0).json();
    assert_eq!(st["archive"]["revisions"], 14);
    assert_eq!(
        get(T + 400, &dir, "Alpha", &["3"]).expect(0).stdout,
        page("Alpha", 3)
    );
    wink(T + 400, &["check", "--strict", s(&dir)]).expect(0);
}

#[test]
fn archive_refuses_stores_without_an_archive_and_waits_for_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    wink(T, &["init", s(&plain), "--revisions", "recent:100"]).expect(0);
    fs::write(tmp.path().join("v"), b"one").unwrap();
    wink(
        T,
        &["put", s(&plain), D, "P", "1", s(&tmp.path().join("v"))],
    )
    .expect(0);
    wink(
        T + 1,
        &["put", s(&plain), D, "P", "2", s(&tmp.path().join("v"))],
    )
    .expect(0);
    let before = snapshot(&plain);
    let run = wink(T + 1000, &["archive", s(&plain)]).expect(2);
    assert!(run.stderr.contains("has no archive"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
    assert_eq!(snapshot(&plain), before, "a refused run changes nothing");
    let st = wink(T, &["stat", s(&plain), "--json"]).expect(0).json();
    assert!(st.get("archive").is_none(), "{st}");
    let text = wink(T, &["stat", s(&plain)]).expect(0).fields();
    assert!(text.keys().all(|k| !k.starts_with("archive")), "{text:?}");

    let run = wink(T, &["archive", s(&tmp.path().join("nothing"))]).expect(2);
    assert!(run.stderr.contains("no store there"), "{}", run.stderr);
    wink(T, &["archive"]).expect(2);
    wink(T, &["archive", s(&plain), "--bogus"]).expect(2);

    let dir = tmp.path().join("store");
    init_archived(&dir);
    put_revisions(&dir, 1..=2, T);
    let held = hold_writer(&dir, T);
    let run = wink(T + 500, &["archive", s(&dir)]).expect(4);
    assert!(run.stderr.contains("in use"), "{}", run.stderr);
    let done = waits_for_lock(&["archive", s(&dir), "--wait"], T + 500, held)
        .expect(0)
        .fields();
    assert_eq!(num(&done, "revisions"), 3);
}

/// Where to damage the archive: the middle of the last data entry of the title's segment 0 (the
/// frames of its last archive run, deltas against earlier revisions: its key, which other
/// titles' keys may be compressed against, stays intact), as an offset into DIR/archive.data,
/// found through the filesys (opened read-only).
fn block_byte(dir: &Path, title: &str) -> u64 {
    let archive = Filesys::open(&dir.join("archive"), &OpenOptions::read_only()).unwrap();
    let name = format!("v/{D}/{title}#0");
    let stat = archive
        .stat(name.as_bytes())
        .unwrap()
        .expect("segment 0 exists");
    let entry = archive.data().read(stat.inode).unwrap();
    let inode = Inode::decode(&entry.value, archive.data().path(), stat.inode.0).unwrap();
    assert_eq!(inode.data.len() as u64, stat.data_entries);
    let layout = inode
        .data
        .iter()
        .map(|(ptr, _)| archive.data().layout(*ptr).unwrap())
        .next_back()
        .expect("the segment has data");
    layout.value_offset + layout.value_len / 2
}

#[test]
fn a_damaged_block_fails_its_title_with_exit_3_and_spares_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init_archived(&dir);
    // Two runs, so that the segments hold two data entries each.
    put_revisions(&dir, 1..=3, T);
    assert_eq!(num(&archive(&dir, T + 200), "revisions"), 6);
    put_revisions(&dir, 4..=6, T + 200);
    let run = archive(&dir, T + 500);
    assert_eq!(num(&run, "archive.revisions"), 15);
    assert_eq!(num(&run, "archive.blocks"), 3, "one segment per title");

    let at = block_byte(&dir, "Alpha");
    let data = filesys::file_path(&dir.join("archive"), "data");
    assert_eq!(data, dir.join("archive.data"));
    let mut bytes = fs::read(&data).unwrap();
    bytes[at as usize] ^= 0x55;
    fs::write(&data, bytes).unwrap();

    // The newest archived revision needs every frame from its title's key.
    let run = get(T + 500, &dir, "Alpha", &["5"]).expect(3);
    assert!(run.stdout.is_empty(), "nothing damaged is written");
    for needle in [s(&data), &format!("v/{D}/Alpha#0"), &format!("{D}/Alpha")] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    get(T + 500, &dir, "Alpha", &["5", "--meta"]).expect(3);
    // Another title's archived revisions, and the damaged title's hot revision, still read.
    for rev in 1..=5 {
        let ok = get(T + 500, &dir, "Beta", &[&rev.to_string()]).expect(0);
        assert!(ok.stdout == page("Beta", rev), "Beta {rev}");
    }
    let latest = get(T + 500, &dir, "Alpha", &[]).expect(0);
    assert!(latest.stdout == page("Alpha", 6));
    // `wink check DIR` decodes every archive frame and finds the damage.
    let check = wink(T + 500, &["check", s(&dir)]).expect(1);
    assert!(
        check.out().contains("v/") && check.out().contains("Alpha"),
        "{}",
        check.out()
    );
}

#[test]
fn the_demo_archives_all_but_the_current_revisions_and_reads_them_back() {
    let run = wink(T, &["demo", "--pages", "3", "--revisions", "4"]).expect(0);
    let out = run.out();
    assert!(out.contains("archive newest)"), "{out}");
    assert!(out.contains("] archive\n"), "{out}");
    assert!(
        out.contains("9 revisions of 3 pages left the hot tier"),
        "{out}"
    );
    assert!(out.contains("archive: 9 revisions in 3 blocks"), "{out}");
    assert!(
        out.contains("9 archived renders of 1 pages read back by revision and by tid: every byte as generated, state archived")
            || out.contains("3 archived renders of 1 pages read back by revision and by tid: every byte as generated, state archived"),
        "{out}"
    );
    assert!(out.contains("% of raw") && out.contains(" MB/s"), "{out}");
    assert!(out.contains("all verifications passed"), "{out}");

    // The store it keeps reads the archived revisions back at any later time.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let args = ["demo", "--dir", s(&dir), "--pages", "2", "--revisions", "3"];
    wink(T, &args).expect(0);
    let listed = wink(
        T,
        &["ls", s(&dir), "demo.wikipedia.org", "Page 1", "--json"],
    )
    .expect(0)
    .json();
    let states: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["current", "archived", "archived"]);
    let st = wink(T, &["stat", s(&dir), "--json"]).expect(0).json();
    assert_eq!(st["archive"]["revisions"], 4);
    // One revision per page: nothing leaves the hot tier, and nothing fails.
    let run = wink(T, &["demo", "--pages", "2", "--revisions", "1"]).expect(0);
    assert!(
        run.out()
            .contains("0 revisions of 0 pages left the hot tier"),
        "{}",
        run.out()
    );
}

#[test]
fn a_render_put_again_after_a_lifted_take_down_is_archived_anew() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init_archived(&dir);
    put_revisions(&dir, 1..=2, T);
    assert_eq!(num(&archive(&dir, T + 200), "revisions"), 3);
    let tid = meta(T + 200, &dir, "Alpha", 1)["tid"]
        .as_str()
        .unwrap()
        .to_string();
    wink(T + 200, &["rm", s(&dir), D, "Alpha", "1"]).expect(0);
    wink(T + 200, &["rm", "--lift", s(&dir), D, "Alpha", "1"]).expect(0);
    // The same revision and tid again (as a re-import would put it), with other bytes.
    let again = tmp.path().join("again");
    fs::write(&again, b"<p>revision 1, put again</p>").unwrap();
    let args = ["put", s(&dir), D, "Alpha", "1", s(&again), "--tid", &tid];
    wink(T + 210, &args).expect(0);
    assert_eq!(meta(T + 210, &dir, "Alpha", 1)["state"], "recent");
    let run = archive(&dir, T + 500);
    assert_eq!(num(&run, "revisions"), 1);
    assert_eq!(
        num(&run, "archive.revisions"),
        3,
        "2 of Beta and Gamma, Alpha's again"
    );
    let m = meta(T + 500, &dir, "Alpha", 1);
    assert_eq!(
        (&m["state"], &m["tid"]),
        (&"archived".into(), &tid.clone().into())
    );
    let got = get(T + 500, &dir, "Alpha", &["1"]).expect(0).stdout;
    assert_eq!(got, b"<p>revision 1, put again</p>");
}

#[test]
fn archive_rewrite_writes_the_archive_anew_and_reads_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    init_archived(&dir);
    put_revisions(&dir, 1..=4, T);
    assert_eq!(num(&archive(&dir, T + 500), "revisions"), 9);
    let run = wink(T + 500, &["archive", s(&dir), "--rewrite"]).expect(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    let fields = run.fields();
    assert_eq!(num(&fields, "titles"), 3);
    assert_eq!(num(&fields, "revisions"), 9);
    assert_eq!(num(&fields, "archive.revisions"), 9);
    assert!(num(&fields, "bytes_after") > 0);
    for rev in 1..=3 {
        let ok = get(T + 500, &dir, "Beta", &[&rev.to_string()]).expect(0);
        assert!(ok.stdout == page("Beta", rev), "Beta {rev}");
    }
    wink(T + 500, &["check", s(&dir)]).expect(0);
    let plain = tmp.path().join("plain");
    wink(T, &["init", s(&plain)]).expect(0);
    wink(T, &["archive", s(&plain), "--rewrite"]).expect(2);
}
