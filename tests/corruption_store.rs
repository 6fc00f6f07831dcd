//! A corruption campaign on a whole store: every file of a populated store with an archive ×
//! (a flipped byte, a zeroed 4 KiB block, a truncation), each followed by reads of every title
//! compared with what the store answered before the damage.
//!
//! The story it guards: a store whose title index lost a block answered an older archived
//! revision as the latest, with success, because a record it could not find sent the read to
//! the archive. A store may fail; it must never answer wrongly. So, per trial:
//! - no answer with success differs from the truth (a render, a listing, a revision);
//! - no panic;
//! - a title that reads as absent ("not found") though it exists is found by `wink check` or
//!   `wink scrub` (damage is never silent).
//!
//! Each trial is classified: unaffected (every title as before), contained (some titles fail
//! or miss, others read), or failed whole (nothing reads: the configuration, say). The counts
//! print with `--nocapture`; docs/INTERNALS.md quotes a run. The long version is `#[ignore]`d:
//! `cargo test --release --test corruption_store -- --ignored --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use uuid::Uuid;
use wink::clock::ManualClock;
use wink::maintenance;
use wink::store::policy::ArchivePolicy;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Page, Store, StoreOptions};

const D: &str = "d.example.org";
const HTML: &str = "text/html";
/// Titles with old revisions in the archive, and titles only in the hot tier.
const ARCHIVED: usize = 10;
const HOT: usize = 4;
const REVS: u64 = 4;
const START: i64 = 1_700_000_000;

fn title(i: usize) -> String {
    if i < ARCHIVED {
        format!("Archived_{i}")
    } else {
        format!("Hot_{i}")
    }
}

fn page(i: usize, rev: u64) -> Vec<u8> {
    common::lettered(
        format!("<p>{} rev {rev}</p>", title(i)),
        (i as u64) << 8 | rev,
        700,
    )
}

/// What every title answers on the intact store.
#[derive(Clone, Debug, Default)]
struct TitleTruth {
    latest: Option<(u64, Uuid)>,
    /// The listing, newest first.
    listing: Vec<(u64, Uuid)>,
    /// Per probed revision, its newest render (or nothing).
    revs: BTreeMap<u64, Option<Uuid>>,
    values: BTreeMap<(u64, Uuid), Vec<u8>>,
}

fn open(dir: &Path, clock: &ManualClock, writable: bool) -> wink::Result<Store> {
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..if writable {
            StoreOptions::writer()
        } else {
            StoreOptions::read_only()
        }
    };
    Store::open(dir, &opts)
}

/// A store with archived and hot-only titles, one revision taken down; returns the clock.
fn build(dir: &Path) -> ManualClock {
    let clock = ManualClock::new(START);
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        policy: common::recent_policy(100),
        archive: Some(ArchivePolicy::Newest),
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts).unwrap();
    let mut s = Store::open(dir, &opts).unwrap();
    for rev in 1..=REVS {
        for i in 0..ARCHIVED + HOT {
            if i >= ARCHIVED && rev > 1 {
                continue;
            }
            clock.advance(1);
            s.put(&Put::new(D, &title(i), rev, HTML, &page(i, rev)))
                .unwrap();
        }
    }
    clock.advance(1000);
    let report = maintenance::archive_due(&mut s, |_, _| {}).unwrap();
    assert_eq!(report.revisions, ARCHIVED as u64 * (REVS - 1));
    s.take_down(D, &title(ARCHIVED - 1), Some(2)).unwrap();
    clock
}

fn truth(s: &Store) -> Vec<TitleTruth> {
    (0..ARCHIVED + HOT)
        .map(|i| {
            let t = title(i);
            let mut tt = TitleTruth {
                latest: s.get(D, &t, Which::Latest).unwrap().map(|g| (g.rev, g.tid)),
                ..TitleTruth::default()
            };
            for l in s.list(D, &t, Page::default()).unwrap() {
                tt.listing.push((l.rev, l.tid));
                let got = s.get(D, &t, Which::Render(l.rev, l.tid)).unwrap().unwrap();
                tt.values.insert((l.rev, l.tid), got.value);
            }
            for rev in 1..=REVS {
                tt.revs
                    .insert(rev, s.get(D, &t, Which::Rev(rev)).unwrap().map(|g| g.tid));
            }
            tt
        })
        .collect()
}

/// How one title answered a damaged store.
#[derive(Debug, Default)]
struct Answers {
    exact: bool,
    /// An error with exit status 3 (or 4: a view that changed, never here).
    failed: bool,
    /// "Not found" for something that exists.
    missed: bool,
    wrong: Vec<String>,
}

fn ask(s: &Store, i: usize, tt: &TitleTruth) -> Answers {
    let t = title(i);
    let mut a = Answers {
        exact: true,
        ..Answers::default()
    };
    let note_err = |a: &mut Answers, what: &str, e: wink::Error| {
        a.exact = false;
        match e.exit_code() {
            1 => a.missed = true,
            3 | 4 => a.failed = true,
            code => a
                .wrong
                .push(format!("{t} {what}: exit {code} for damage: {e}")),
        }
    };
    let check = |a: &mut Answers, what: &str, got: Option<wink::store::Got>, want| match (got, want)
    {
        (None, None) => {}
        (None, Some(_)) => {
            a.exact = false;
            a.missed = true;
        }
        (Some(g), want) => {
            let ok =
                want == Some((g.rev, g.tid)) && tt.values.get(&(g.rev, g.tid)) == Some(&g.value);
            if !ok {
                a.exact = false;
                a.wrong.push(format!(
                    "{t} {what}: answered rev {} tid {} ({} bytes), the truth is {want:?}",
                    g.rev,
                    g.tid,
                    g.value.len()
                ));
            }
        }
    };
    match s.get(D, &t, Which::Latest) {
        Ok(got) => check(&mut a, "latest", got, tt.latest),
        Err(e) => note_err(&mut a, "latest", e),
    }
    for (&rev, &tid) in &tt.revs {
        match s.get(D, &t, Which::Rev(rev)) {
            Ok(got) => check(&mut a, &format!("rev {rev}"), got, tid.map(|t| (rev, t))),
            Err(e) => note_err(&mut a, &format!("rev {rev}"), e),
        }
    }
    match s.list(D, &t, Page::default()) {
        Ok(listed) => {
            let listed: Vec<(u64, Uuid)> = listed.iter().map(|l| (l.rev, l.tid)).collect();
            if listed.is_empty() && !tt.listing.is_empty() {
                a.exact = false;
                a.missed = true;
            } else if listed != tt.listing {
                a.exact = false;
                a.wrong.push(format!(
                    "{t} list: {listed:?}, the truth is {:?}",
                    tt.listing
                ));
            }
        }
        Err(e) => note_err(&mut a, "list", e),
    }
    a
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip { at: u64, mask: u8 },
    Zero { block: u64 },
    Truncate { len: u64 },
}

/// The campaign's tallies.
#[derive(Debug, Default)]
struct Tally {
    trials: u64,
    unaffected: u64,
    contained: u64,
    failed_whole: u64,
    /// Titles answering "exit 3" or "not found" summed over trials.
    titles_failed: u64,
    titles_missed: u64,
    wrong: Vec<String>,
    panics: Vec<String>,
    silent: Vec<String>,
    by_file: BTreeMap<String, [u64; 3]>,
    /// The trials nothing read after, with the first error seen.
    whole: Vec<String>,
}

/// The end of a file's bytes that mean something: past the last non-zero byte, preallocated
/// room (damage there changes nothing a reader looks at; trials aim before it).
fn used_len(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rposition(|b| *b != 0)
        .map_or(1, |p| p as u64 + 1)
}

fn apply(path: &Path, pristine: &[u8], damage: Damage) {
    let mut bytes = pristine.to_vec();
    match damage {
        Damage::Flip { at, mask } => bytes[at as usize] ^= mask,
        Damage::Zero { block } => {
            let start = (block * 4096) as usize;
            let end = (start + 4096).min(bytes.len());
            bytes[start..end].fill(0);
        }
        Damage::Truncate { len } => bytes.truncate(len as usize),
    }
    fs::write(path, bytes).unwrap();
}

/// Damage one file, ask every title, put the file back.
fn trial(
    dir: &Path,
    clock: &ManualClock,
    truth: &[TitleTruth],
    file: &Path,
    damage: Damage,
    pristine: &[u8],
    tally: &mut Tally,
) {
    apply(file, pristine, damage);
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let label = format!("{name} {damage:?}");
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let s = match open(dir, clock, false) {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        Ok((0..truth.len())
            .map(|i| ask(&s, i, &truth[i]))
            .collect::<Vec<_>>())
    }));
    tally.trials += 1;
    let row = tally.by_file.entry(name).or_default();
    match outcome {
        Err(_) => tally.panics.push(label.clone()),
        Ok(Err(e)) => {
            if e.exit_code() == 3 || e.exit_code() == 4 {
                tally.failed_whole += 1;
                row[2] += 1;
                tally.whole.push(format!("{label}: open: {e}"));
            } else {
                tally.wrong.push(format!(
                    "{label}: open failed with exit {}: {e}",
                    e.exit_code()
                ));
            }
        }
        Ok(Ok(answers)) => {
            let exact = answers.iter().filter(|a| a.exact).count();
            let missed = answers.iter().filter(|a| a.missed).count();
            tally.titles_failed += answers.iter().filter(|a| a.failed).count() as u64;
            tally.titles_missed += missed as u64;
            for a in &answers {
                tally
                    .wrong
                    .extend(a.wrong.iter().map(|w| format!("{label}: {w}")));
            }
            if exact == answers.len() {
                tally.unaffected += 1;
                row[0] += 1;
            } else if exact > 0 {
                tally.contained += 1;
                row[1] += 1;
            } else {
                tally.failed_whole += 1;
                row[2] += 1;
                tally.whole.push(format!("{label}: every title failed"));
            }
            if missed > 0 && !damage_found(dir, clock) {
                tally
                    .silent
                    .push(format!("{label}: {missed} titles read as absent"));
            }
        }
    }
    fs::write(file, pristine).unwrap();
}

/// Whether `wink check` or `wink scrub` reports damage in the store.
fn damage_found(dir: &Path, clock: &ManualClock) -> bool {
    if !wink::store::check::check_store(dir).problems.is_empty() {
        return true;
    }
    match open(dir, clock, false) {
        Ok(s) => maintenance::scrub(&s, |_| {}).map_or(true, |r| !r.is_clean()),
        Err(_) => true,
    }
}

fn campaign(rounds: u64, seed: u64) -> Tally {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let clock = build(&dir);
    let truth = {
        let s = open(&dir, &clock, false).unwrap();
        truth(&s)
    };
    assert!(truth.iter().all(|t| t.latest.is_some()));
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    // The campaign is the same on every run.
    let mut rng = common::Rng(seed);
    let mut tally = Tally::default();
    for file in &files {
        let pristine = fs::read(file).unwrap();
        let used = used_len(&pristine);
        for _ in 0..rounds {
            // Half the flips in the first 512 bytes: headers and superblocks.
            let at = if rng.below(2) == 0 {
                rng.below(used.min(512))
            } else {
                rng.below(used)
            };
            let mask = 1u8 << rng.below(8);
            let damages = [
                Damage::Flip { at, mask },
                Damage::Flip {
                    at: rng.below(used),
                    mask: 0xff,
                },
                Damage::Zero {
                    block: rng.below(used.div_ceil(4096)),
                },
                Damage::Truncate {
                    len: rng.below(used),
                },
            ];
            for damage in damages {
                trial(&dir, &clock, &truth, file, damage, &pristine, &mut tally);
            }
        }
    }
    println!(
        "corruption campaign: {} trials — {} unaffected, {} contained, {} failed whole; \
         {} title reads failed (exit 3), {} read as absent (found by check or scrub); \
         {} wrong, {} panics, {} silent",
        tally.trials,
        tally.unaffected,
        tally.contained,
        tally.failed_whole,
        tally.titles_failed,
        tally.titles_missed,
        tally.wrong.len(),
        tally.panics.len(),
        tally.silent.len()
    );
    for (file, [u, c, f]) in &tally.by_file {
        println!("  {file:<16} unaffected {u:>4}  contained {c:>4}  failed whole {f:>4}");
    }
    for w in &tally.whole {
        println!("  failed whole: {w}");
    }
    tally
}

fn assert_clean(tally: &Tally) {
    assert!(tally.panics.is_empty(), "panics: {:#?}", tally.panics);
    assert!(tally.wrong.is_empty(), "wrong answers: {:#?}", tally.wrong);
    assert!(
        tally.silent.is_empty(),
        "silent damage: {:#?}",
        tally.silent
    );
}

#[test]
fn damage_anywhere_never_answers_wrongly() {
    let tally = campaign(3, 0x5eed_0001);
    assert_clean(&tally);
    assert!(tally.contained > 0 && tally.unaffected > 0, "{tally:?}");
}

#[test]
#[ignore = "long: thousands of trials"]
fn damage_anywhere_never_answers_wrongly_long() {
    let mut total = 0;
    for seed in 1..=4u64 {
        let tally = campaign(40, 0x5eed_0000 + seed * 7919);
        assert_clean(&tally);
        total += tally.trials;
    }
    println!("{total} trials in all");
}
