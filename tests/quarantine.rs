//! Damage in the middle of a container is reported and quarantined, never truncated away: `wink
//! scrub --quarantine` copies the damaged value's bytes and a description to `DIR/quarantine/`,
//! reads of it then name the entry (exit 3), `ls`, `stat` and `check` show it, every other
//! render reads byte for byte, no file of the store changes length, and compaction keeps the
//! container it cannot copy whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;
use wink::clock::ManualClock;
use wink::maintenance;
use wink::maintenance::scrub::ScrubOptions;
use wink::store::check::check_store;
use wink::store::quarantine;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Page, Policy, Renders, Revisions, Store, StoreOptions};
use wink::Error;

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";
const T: i64 = 1_700_000_000;
const TITLES: usize = 9;
/// The title whose value is damaged: one in the middle of the container.
const VICTIM: usize = 4;

fn title(i: usize) -> String {
    format!("Title {i}")
}

/// A value unique to its title and revision, a few KiB.
fn value(i: usize, rev: u64) -> Vec<u8> {
    format!("<p>value of title {i} revision {rev}: ")
        .into_bytes()
        .into_iter()
        .chain((0..3000).map(|k| b'a' + ((k * 7 + i * 13 + rev as usize) % 26) as u8))
        .collect()
}

fn opts(clock: &Arc<ManualClock>, writable: bool) -> StoreOptions {
    StoreOptions {
        clock: clock.clone(),
        ..if writable {
            StoreOptions::writer()
        } else {
            StoreOptions::read_only()
        }
    }
}

/// A store of TITLES titles, one render each, all in container 1.
fn store(dir: &Path, clock: &Arc<ManualClock>) {
    let cfg = Config {
        policy: Policy {
            revisions: Revisions::All,
            renders: Renders::All,
            historical_ttl: 3600,
        },
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts(clock, true)).unwrap();
    let mut s = Store::open(dir, &opts(clock, true)).unwrap();
    for i in 0..TITLES {
        s.put(&Put::new(D, &title(i), 1, HTML, &value(i, 1)))
            .unwrap();
    }
}

/// Flips a byte in the middle of the victim's value in its container; returns the value's
/// offset, found by scanning the container for its bytes.
fn damage(dir: &Path) -> (PathBuf, u64) {
    let data = dir.join("c000001.data");
    let mut bytes = std::fs::read(&data).unwrap();
    let wanted = value(VICTIM, 1);
    let at = bytes
        .windows(wanted.len())
        .position(|w| w == wanted.as_slice())
        .expect("the value in container 1");
    // In the middle of the file: values of other titles lie before and after it.
    assert!(at > 4 * wanted.len() && at + 4 * wanted.len() < bytes.len());
    bytes[at + wanted.len() / 2] ^= 0x40;
    std::fs::write(&data, bytes).unwrap();
    (data, at as u64)
}

/// Every file under `dir` with its length.
fn lengths(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            out.insert(p.clone(), std::fs::metadata(&p).unwrap().len());
        }
    }
    out
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn wink(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(args)
        .env("WINK_NOW", (T + 10).to_string())
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn scrub_quarantines_a_damaged_value_and_reads_name_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = Arc::new(ManualClock::new(T));
    store(dir, &clock);
    let (data, offset) = damage(dir);
    let before = lengths(dir);
    let reader = Store::open(dir, &opts(&clock, false)).unwrap();
    // Before the quarantine, the generic checksum error.
    let err = reader.get(D, &title(VICTIM), Which::Latest).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    let tid = reader.list(D, &title(VICTIM), Page::default()).unwrap()[0].tid;

    let report =
        maintenance::scrub_with(&reader, ScrubOptions { quarantine: true }, |_| {}).unwrap();
    assert_eq!(report.values, TITLES as u64);
    assert_eq!(report.damaged.len(), 1, "{:?}", report.damaged);
    let d = &report.damaged[0];
    assert_eq!(
        (d.title.as_str(), d.rev, d.tid),
        (title(VICTIM).as_str(), 1, tid)
    );
    assert_eq!((d.file.as_path(), d.offset), (data.as_path(), offset));
    let description = quarantine::description_path(dir, 1, offset);
    assert_eq!(d.quarantined.as_deref(), Some(description.as_path()));

    // The entry: the damaged bytes exactly as they are in the container, and a description.
    let len = value(VICTIM, 1).len();
    let found = std::fs::read(&data).unwrap()[offset as usize..offset as usize + len].to_vec();
    assert_ne!(found, value(VICTIM, 1));
    assert_eq!(
        std::fs::read(quarantine::bytes_path(dir, 1, offset)).unwrap(),
        found
    );
    let json: Value = serde_json::from_slice(&std::fs::read(&description).unwrap()).unwrap();
    assert_eq!(json["format"], "wink-quarantine-1");
    assert_eq!(json["domain"], D);
    assert_eq!(json["title"], title(VICTIM));
    assert_eq!(json["rev"], 1);
    assert_eq!(json["tid"], tid.to_string());
    assert_eq!(json["container"], 1);
    assert_eq!(json["file"], data.to_str().unwrap());
    assert_eq!(json["offset"], offset);
    assert_eq!(json["length"], len as u64);
    assert_eq!(json["saved_bytes"], len as u64);
    assert_eq!(
        json["expected_crc32"],
        format!("0x{:08x}", crc32fast::hash(&value(VICTIM, 1)))
    );
    assert_eq!(
        json["found_crc32"],
        format!("0x{:08x}", crc32fast::hash(&found))
    );
    assert_eq!(json["quarantined_at"], T);

    // Reads of it name the entry; every other render reads byte for byte.
    let err = reader.get(D, &title(VICTIM), Which::Latest).unwrap_err();
    assert!(matches!(err, Error::Damaged { .. }), "{err}");
    assert_eq!(err.exit_code(), 3);
    let text = err.to_string();
    assert!(text.contains("quarantined") && text.contains(description.to_str().unwrap()));
    assert!(text.contains("c000001.data") && text.contains(&offset.to_string()));
    assert!(matches!(
        reader.get(D, &title(VICTIM), Which::Render(1, tid)),
        Err(Error::Damaged { .. })
    ));
    for i in (0..TITLES).filter(|i| *i != VICTIM) {
        let got = reader.get(D, &title(i), Which::Latest).unwrap().unwrap();
        assert_eq!(got.value, value(i, 1), "title {i}");
    }

    // Nothing of the store was truncated or rewritten: every file keeps its length.
    let after = lengths(dir);
    assert_eq!(before, after);
    assert_eq!(reader.quarantined().unwrap().len(), 1);

    // A second scrub keeps the entry as it was.
    let first = std::fs::read(&description).unwrap();
    clock.advance(100);
    let again =
        maintenance::scrub_with(&reader, ScrubOptions { quarantine: true }, |_| {}).unwrap();
    assert_eq!(again.damaged.len(), 1);
    assert_eq!(std::fs::read(&description).unwrap(), first);

    // check: a warning naming the render and the entry.
    let report = check_store(dir);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!(p.severity, wink::check::Severity::Warning);
    assert_eq!((p.path.as_path(), p.offset), (data.as_path(), Some(offset)));
    assert!(p.what.contains(&title(VICTIM)) && p.what.contains("quarantined"));
    assert!(report.is_clean(false) && !report.is_clean(true));
}

#[test]
fn the_cli_scrubs_into_quarantine_and_get_ls_stat_check_show_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = Arc::new(ManualClock::new(T));
    store(dir, &clock);
    let (data, offset) = damage(dir);
    let d = dir.to_str().unwrap();
    let victim = title(VICTIM);

    let run = wink(&["scrub", d]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(!run.stdout.contains("quarantined"), "{}", run.stdout);
    assert!(!quarantine::dir_of(dir).exists());

    let run = wink(&["scrub", d, "--quarantine"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let description = quarantine::description_path(dir, 1, offset);
    let line = run.stdout.lines().next().unwrap();
    assert!(
        line.starts_with(&format!("{D}/{victim} rev 1 tid ")),
        "{line}"
    );
    assert!(
        line.contains(&format!("hot {} at byte {offset}", data.display())),
        "{line}"
    );
    assert!(
        line.ends_with(&format!("; quarantined in {}", description.display())),
        "{line}"
    );
    assert!(run.stderr.contains("1 quarantined"), "{}", run.stderr);

    let run = wink(&["get", d, D, &victim]);
    assert_eq!(run.code, 3);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains("damaged value") && run.stderr.contains(description.to_str().unwrap()),
        "{}",
        run.stderr
    );
    let run = wink(&["get", d, D, &title(0)]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout.as_bytes(), value(0, 1));

    let run = wink(&["ls", d, D, &victim]);
    assert_eq!(run.code, 0);
    let fields: Vec<&str> = run.stdout.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 6, "{}", run.stdout);
    assert_eq!(fields[5], format!("quarantined {}", description.display()));
    let run = wink(&["ls", d, D, &victim, "--json"]);
    let json: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(json[0]["quarantined"], description.to_str().unwrap());
    let run = wink(&["ls", d, D, &title(0), "--json"]);
    let json: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(json[0].get("quarantined").is_none());

    let run = wink(&["stat", d, "--json"]);
    assert_eq!(run.code, 0);
    let json: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(json["quarantined"], 1);
    assert!(wink(&["stat", d]).stdout.contains("quarantined\t1\n"));

    let run = wink(&["check", d]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("quarantined"), "{}", run.stdout);
    assert_eq!(wink(&["check", d, "--strict"]).code, 1);
}

/// A value of about 64 KiB unique to its title.
fn big(i: usize) -> Vec<u8> {
    let mut v = format!("<p>big value of title {i}: ").into_bytes();
    v.extend((0..64_000).map(|k| b'a' + ((k * 11 + i * 17) % 26) as u8));
    v
}

/// The files of container 1 with their lengths.
fn container_one(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut files = lengths(dir);
    files.retain(|p, _| {
        p.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("c000001.")
    });
    files
}

#[test]
fn compaction_keeps_a_container_with_a_damaged_value_and_compacts_the_others() {
    use wink::maintenance::compact::{Action, CompactOptions};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = Arc::new(ManualClock::new(T));
    let cfg = Config {
        policy: Policy {
            revisions: Revisions::All,
            renders: Renders::All,
            historical_ttl: 3600,
        },
        container_bytes: 1 << 20,
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts(&clock, true)).unwrap();
    let mut s = Store::open(dir, &opts(&clock, true)).unwrap();
    const N: usize = 40;
    let mut batch = s.batch();
    for i in 0..N {
        let v = big(i);
        batch
            .put(&wink::store::Put {
                domain: D,
                title: &title(i),
                rev: 1,
                tid: None,
                content_type: HTML,
                labels: &wink::store::Labels::NONE,
                value: &v,
                historical: false,
            })
            .unwrap();
    }
    batch.commit().unwrap();
    assert!(s.container_ids().unwrap().len() >= 3);
    // Titles 3 (container 1) and 20 (container 2) taken down: both containers are worth a
    // rewrite. Title 7's value, in the middle of container 1, is damaged.
    s.take_down(D, &title(3), None).unwrap();
    s.take_down(D, &title(20), None).unwrap();
    drop(s);
    let c1 = dir.join("c000001.data");
    let mut bytes = std::fs::read(&c1).unwrap();
    let head = big(7)[..64].to_vec();
    let at = bytes
        .windows(64)
        .position(|w| w == head.as_slice())
        .expect("title 7 in container 1");
    assert!(at > 4 * big(7).len());
    bytes[at + 30_000] ^= 0x01;
    std::fs::write(&c1, bytes).unwrap();
    let kept_before = container_one(dir);

    let mut s = Store::open(dir, &opts(&clock, true)).unwrap();
    let report = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    let plan = |id: u32| report.containers.iter().find(|c| c.id == id).unwrap();
    // Container 1: kept whole, with a note naming the file and the offset.
    assert_eq!(plan(1).action, Action::Keep, "{:?}", plan(1));
    assert_eq!(plan(1).into, None);
    let note = plan(1).note.as_deref().expect("a note");
    assert!(
        note.contains("c000001.data") && note.contains(&at.to_string()),
        "{note}"
    );
    assert!(note.contains(&title(7)), "{note}");
    // Container 2: compacted all the same.
    assert_eq!(plan(2).action, Action::Rewrite, "{:?}", plan(2));
    assert!(plan(2).into.is_some());
    assert!(!dir.join("c000002.data").exists());
    // Nothing of container 1 was changed, and nothing was dropped from it.
    let kept_after = container_one(dir);
    assert_eq!(kept_before, kept_after);
    for i in 0..N {
        match i {
            3 | 20 => assert!(s.get(D, &title(i), Which::Latest).unwrap().is_none()),
            7 => assert!(matches!(
                s.get(D, &title(i), Which::Latest),
                Err(Error::Corrupt { .. })
            )),
            _ => assert_eq!(
                s.get(D, &title(i), Which::Latest).unwrap().unwrap().value,
                big(i)
            ),
        }
    }
    // The damage is still there to be found and quarantined.
    let scrub = maintenance::scrub_with(&s, ScrubOptions { quarantine: true }, |_| {}).unwrap();
    assert_eq!(scrub.damaged.len(), 1);
    assert_eq!(scrub.damaged[0].offset, at as u64);
    assert!(matches!(
        s.get(D, &title(7), Which::Latest),
        Err(Error::Damaged { .. })
    ));
}
