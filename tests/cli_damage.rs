//! Damaged metadata through the CLI, as a reliability engineer damaged it: never a wrong answer
//! with exit 0, damage kept to the titles it touches, found by `scrub` and `check`, and repaired
//! by `wink recover --rebuild-index` without making anything worse.
//!
//! The story: a store whose title index lost a 4 KiB block answered an older archived revision
//! as the latest with exit 0 (a missing record sent the read to the archive), and a title whose
//! name was damaged in `meta.data` did the same, until a raw `wink fs reindex` of the metadata
//! filed its current render under a phantom title.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::cli::{s, wink_at, Run};

const D: &str = "d";
const T: i64 = 1_700_000_000;
/// After the recent window of superseded revisions: the archive run and every read.
const LATER: i64 = T + 1000;
const ARCHIVED: [&str; 8] = ["A", "B", "C", "D", "E", "F", "G", "H"];

fn wink(args: &[&str]) -> Run {
    wink_at(LATER, args, b"")
}

fn page(title: &str, rev: u64) -> Vec<u8> {
    format!("<p>{title} revision {rev}</p>{}", "x".repeat(300)).into_bytes()
}

/// Titles A..H with revisions 1..3 (1 and 2 archived, 3 current and hot), Z hot only.
fn store() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let d = s(&dir);
    let init = [
        "init",
        d,
        "--revisions",
        "recent:100",
        "--renders",
        "latest:1:10",
    ];
    wink_at(T, &[&init[..], &["--archive", "newest"]].concat(), b"").expect(0);
    for t in ARCHIVED {
        for rev in 1..=3u64 {
            let rev_s = rev.to_string();
            wink_at(T, &["put", d, D, t, &rev_s, "-"], &page(t, rev)).expect(0);
        }
    }
    wink_at(T, &["put", d, D, "Z", "1", "-"], &page("Z", 1)).expect(0);
    wink(&["archive", d]).expect(0);
    (tmp, dir)
}

/// What `get --meta` answers: (exit code, revision when exit 0).
fn latest(dir: &Path, title: &str) -> (i32, Option<u64>) {
    let run = wink(&["get", s(dir), D, title, "--meta"]);
    let rev = (run.code == 0).then(|| run.json()["rev"].as_u64().unwrap());
    (run.code, rev)
}

/// Every title answers its current revision.
fn all_read(dir: &Path) {
    for t in ARCHIVED {
        assert_eq!(latest(dir, t), (0, Some(3)), "{t}");
        let run = wink(&["get", s(dir), D, t, "1"]).expect(0);
        assert_eq!(run.stdout, page(t, 1), "{t} rev 1");
    }
    assert_eq!(latest(dir, "Z"), (0, Some(1)));
}

/// Entries of a kvseq as `wink dump --json` lists them: (ptr, deleted, key).
fn entries(path: &Path) -> Vec<(u64, bool, String)> {
    wink(&["dump", s(path), "--json"])
        .expect(0)
        .json_lines()
        .iter()
        .filter(|v| v["type"] == "entry")
        .map(|v: &Value| {
            (
                v["ptr"].as_u64().unwrap(),
                v["deleted"].as_bool().unwrap(),
                v["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn patch(path: &Path, at: usize, f: impl FnOnce(&mut u8)) {
    let mut bytes = fs::read(path).unwrap();
    f(&mut bytes[at]);
    fs::write(path, bytes).unwrap();
}

/// The byte offset of `needle` in `path`, searched from `from`.
fn find(path: &Path, needle: &[u8], from: usize) -> usize {
    let bytes = fs::read(path).unwrap();
    from + bytes[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{needle:?} not in {}", path.display()))
}

#[test]
fn a_lost_index_block_never_answers_an_archived_revision_as_the_latest() {
    let (_tmp, dir) = store();
    all_read(&dir);
    // Every cell of the title index zeroed: cells read as free.
    let idx = dir.join("meta.idx");
    let len = fs::metadata(&idx).unwrap().len() as usize;
    let mut bytes = fs::read(&idx).unwrap();
    bytes[4096..len].fill(0);
    fs::write(&idx, bytes).unwrap();
    for t in ARCHIVED {
        let run = wink(&["get", s(&dir), D, t, "--meta"]).expect(3);
        assert!(
            run.stderr.contains("meta.idx") && run.stderr.contains("byte"),
            "{}",
            run.stderr
        );
        wink(&["ls", s(&dir), D, t]).expect(3);
    }
    // A title never archived has no other witness: absent, and scrub and check say why.
    assert_eq!(latest(&dir, "Z").0, 1);
    let scrub = wink(&["scrub", s(&dir)]).expect(1);
    for t in ["A", "H", "Z"] {
        assert!(
            scrub.out().contains(&format!("d/{t}: meta ")),
            "{}",
            scrub.out()
        );
    }
    let check = wink(&["check", s(&dir)]).expect(1);
    assert!(
        check.out().contains("wink recover --rebuild-index"),
        "{}",
        check.out()
    );
    assert!(!check.out().contains("wink fs reindex"), "{}", check.out());
    // The repair the check suggests brings every title back.
    let run = wink(&["recover", s(&dir), "--rebuild-index"]).expect(0);
    assert!(
        run.out().contains("9 records indexed, 9 verified"),
        "{}",
        run.out()
    );
    all_read(&dir);
    wink(&["scrub", s(&dir)]).expect(0);
}

#[test]
fn a_damaged_title_name_stays_with_its_title_and_the_rebuild_puts_it_back() {
    let (_tmp, dir) = store();
    let meta = dir.join("meta.data");
    // The live inode of d/C: its key's title byte, C → S.
    let (ptr, _, _) = entries(&meta)
        .into_iter()
        .rfind(|(_, deleted, key)| !deleted && key == "d/C/I0")
        .unwrap();
    let at = find(&meta, b"d/C/I0", ptr as usize) + 2;
    patch(&meta, at, |b| *b ^= 0x10);
    let run = wink(&["get", s(&dir), D, "C"]).expect(3);
    assert!(run.stderr.contains("meta.data"), "{}", run.stderr);
    for t in ["A", "B", "D", "H"] {
        assert_eq!(latest(&dir, t), (0, Some(3)), "{t}");
    }
    assert_eq!(latest(&dir, "Z"), (0, Some(1)));
    let check = wink(&["check", s(&dir)]).expect(1);
    assert!(
        check.out().contains("wink recover --rebuild-index"),
        "{}",
        check.out()
    );
    let scrub = wink(&["scrub", s(&dir)]).expect(1);
    assert!(scrub.out().contains("d/S: meta "), "{}", scrub.out());
    let stat = wink(&["stat", s(&dir)]).expect(3);
    assert!(stat.out().contains("titles\t8\n"), "{}", stat.out());
    assert!(stat.out().contains("damaged\td/S: "), "{}", stat.out());

    // What a raw reindex of the metadata does (what check used to suggest): the record is filed
    // under the damaged name; neither name answers with it.
    wink_at(LATER, &["fs", "reindex", s(&dir.join("meta"))], b"").expect(0);
    assert_eq!(latest(&dir, "C").0, 3, "the archive alone never answers");
    let phantom = wink(&["get", s(&dir), D, "S"]).expect(3);
    assert!(
        phantom.stderr.contains("title record key"),
        "{}",
        phantom.stderr
    );

    // The store's rebuild trusts the record's own key: C is back, S is gone.
    let run = wink(&["recover", s(&dir), "--rebuild-index"]).expect(0);
    assert!(
        run.out().contains("found as \"d/S\" names \"d/C\""),
        "{}",
        run.out()
    );
    all_read(&dir);
    assert_eq!(latest(&dir, "S").0, 1);
    wink(&["check", s(&dir)]).expect(0);
}

#[test]
fn damage_stays_with_what_it_touches() {
    let (tmp, dir) = store();
    let pristine = tmp.path().join("pristine");
    fs::create_dir(&pristine).unwrap();
    for e in fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), pristine.join(e.file_name())).unwrap();
    }
    let restore = || {
        for e in fs::read_dir(&pristine).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    };

    // The delete flag of the last title record written: that title only.
    let meta = dir.join("meta.data");
    let (ptr, _, key) = entries(&meta)
        .into_iter()
        .rfind(|(_, deleted, key)| !deleted && key.ends_with("/I0"))
        .unwrap();
    patch(&meta, ptr as usize, |b| *b ^= 1);
    let damaged = key
        .trim_end_matches("/I0")
        .trim_start_matches("d/")
        .to_string();
    assert_ne!(latest(&dir, &damaged).0, 0, "{damaged}");
    for t in ARCHIVED.iter().chain(&["Z"]).filter(|t| **t != damaged) {
        assert_eq!(latest(&dir, t).0, 0, "{t} beside damaged {damaged}");
    }
    restore();

    // The archive's superblock, then its time index cut short: the hot tier reads on; what
    // needs the archive fails naming it.
    for damage in ["superblock", "time"] {
        match damage {
            "superblock" => patch(&dir.join("archive.data"), 41, |b| *b ^= 0x04),
            _ => {
                let f = fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("archive.time"));
                f.unwrap().set_len(100).unwrap();
            }
        }
        for t in ARCHIVED {
            assert_eq!(
                latest(&dir, t),
                (0, Some(3)),
                "{t} with the archive's {damage} damaged"
            );
            let run = wink(&["get", s(&dir), D, t, "1"]).expect(3);
            assert!(run.stderr.contains("archive."), "{}", run.stderr);
        }
        assert_eq!(latest(&dir, "Z"), (0, Some(1)));
        wink(&["put", s(&dir), D, "Z", "2", "-"]).expect(0);
        let check = wink(&["check", s(&dir)]).expect(1);
        assert!(check.out().contains("archive."), "{}", check.out());
        restore();
    }
}

#[test]
fn check_warns_about_header_fields_readers_do_not_rely_on() {
    let (_tmp, dir) = store();
    let data = dir.join("c000001.data");
    let at = find(&data, b"PURPOSE ", 0) + 8;
    patch(&data, at, |b| *b ^= 0x01);
    let idx = dir.join("c000001.idx");
    let at = find(&idx, b"HTDEL   ", 0) + 15;
    patch(&idx, at, |b| *b ^= 0x02);
    let run = wink(&["check", s(&dir), "--strict"]).expect(1);
    assert!(run.out().contains("PURPOSE is GSYSDATA"), "{}", run.out());
    assert!(run.out().contains("HTDEL is -3"), "{}", run.out());
    fs::OpenOptions::new()
        .write(true)
        .open(dir.join("c000001.time"))
        .unwrap()
        .set_len(100)
        .unwrap();
    let run = wink(&["check", s(&dir)]).expect(1);
    assert!(run.out().contains("c000001.time: error"), "{}", run.out());
}
