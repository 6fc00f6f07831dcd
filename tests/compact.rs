//! Compaction through the library and the built binary: what it drops and why, that a take-down
//! leaves no byte of the removed revision in any file, that a dry run changes nothing, that it
//! runs online beside puts and reads without losing a write, that readers of the old generation
//! never read wrong bytes, and that its output leaves the page cache as it found it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tempfile::TempDir;
use uuid::Uuid;
mod common;

use wink::clock::ManualClock;
use wink::maintenance;
use wink::maintenance::compact::{Action, CompactOptions, CompactReport, Reason};
use wink::storage::residency;
use wink::store::policy::ArchivePolicy;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Store, StoreOptions};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";
const T: i64 = 1_700_000_000;
/// The recent window of the test stores.
const TTL: i64 = 100;
const MARKER: &[u8] = b"TAKEDOWN-MARKER-e41b07c3";

fn opts(clock: &Arc<ManualClock>, writable: bool) -> StoreOptions {
    let base = if writable {
        StoreOptions::writer()
    } else {
        StoreOptions::read_only()
    };
    StoreOptions {
        clock: clock.clone(),
        ..base
    }
}

/// The test stores: a recent window of TTL seconds, the newest render with 10 s of grace, 1 MiB
/// containers.
fn config() -> Config {
    Config {
        policy: common::recent_policy(TTL),
        container_bytes: 1 << 20,
        ..Config::default()
    }
}

/// A new store of `cfg` in a new temporary directory, its clock at T; the writer.
fn new_store(cfg: &Config) -> (TempDir, Arc<ManualClock>, Store) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T));
    Store::init(dir.path(), cfg, &opts(&clock, true)).unwrap();
    let store = Store::open(dir.path(), &opts(&clock, true)).unwrap();
    (dir, clock, store)
}

/// Deterministic, incompressible-ish bytes that name their title and revision.
fn value(title: usize, rev: u64, render: u64, len: usize) -> Vec<u8> {
    let head = format!("<p>title {title} rev {rev} render {render}</p>");
    let seed = (title as u64) << 32 ^ rev << 8 ^ render ^ 0x9E37_79B9_7F4A_7C15;
    common::lettered(head, seed, len)
}

fn title(t: usize) -> String {
    format!("Page_{t}/sub")
}

/// One batch: a render of revision `rev` of each title in `titles`, `len(t)` bytes long.
fn put_batch(
    store: &mut Store,
    titles: std::ops::Range<usize>,
    rev: u64,
    render: u64,
    len: impl Fn(usize) -> usize,
) {
    let mut batch = store.batch();
    for t in titles {
        let v = value(t, rev, render, len(t));
        batch
            .put(&wink::store::Put {
                domain: D,
                title: &title(t),
                rev,
                tid: None,
                content_type: HTML,
                labels: &wink::store::Labels::NONE,
                value: &v,
                historical: false,
            })
            .unwrap();
    }
    batch.commit().unwrap();
}

/// Five revisions of `titles` titles, each re-rendered twice, one second apart per revision:
/// at the end only the last revision's newest render is readable past the deadlines.
fn churn(store: &mut Store, clock: &ManualClock, titles: usize) {
    for rev in 1..=5u64 {
        for render in 0..2u64 {
            put_batch(store, 0..titles, rev, render, |t| {
                3000 + (t * 37 + rev as usize * 101) % 9000
            });
            clock.advance(1);
        }
    }
}

/// A new store of `config()` after `churn` of `titles` titles.
fn churned(titles: usize) -> (TempDir, Arc<ManualClock>, Store) {
    let (dir, clock, mut store) = new_store(&config());
    churn(&mut store, &clock, titles);
    (dir, clock, store)
}

/// A compaction with the default options.
fn compact(store: &mut Store) -> CompactReport {
    maintenance::compact(store, &CompactOptions::default(), |_, _| {}).unwrap()
}

fn assert_all_kept(report: &CompactReport) {
    assert!(
        report.containers.iter().all(|c| c.action == Action::Keep),
        "{:#?}",
        report.containers
    );
}

/// The writer again, after the one before was dropped: it had nothing to recover.
fn reopen_writer(dir: &Path, clock: &Arc<ManualClock>) -> Store {
    let store = Store::open(dir, &opts(clock, true)).unwrap();
    assert!(store.recovery().is_empty(), "{:?}", store.recovery());
    store
}

/// Everything readable: (title, rev, tid) → value, through get_render of every listed render.
fn readable(store: &Store, titles: usize) -> BTreeMap<(usize, u64, Uuid), Vec<u8>> {
    common::readable(store, D, titles, title)
}

fn store_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn holds(path: &Path, needle: &[u8]) -> bool {
    fs::read(path)
        .unwrap()
        .windows(needle.len())
        .any(|w| w == needle)
}

fn assert_no_file_holds_the_marker(dir: &Path) {
    for path in store_files(dir) {
        assert!(!holds(&path, MARKER), "{} holds the marker", path.display());
    }
}

fn snapshot_bytes(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    store_files(dir)
        .into_iter()
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

#[test]
fn compaction_drops_dead_values_by_reason_and_keeps_every_readable_one() {
    let (dir, clock, mut store) = churned(40);
    // A rewrite of the same (rev, tid) leaves the first copy behind, in an older container.
    let again = value(0, 1, 9, 5000);
    let first = store
        .list(D, &title(0), wink::store::Page::default())
        .unwrap()
        .into_iter()
        .find(|l| l.rev == 1)
        .unwrap();
    store
        .put(&Put {
            tid: Some(first.tid),
            ..Put::new(D, &title(0), 1, HTML, &again)
        })
        .unwrap();
    store.take_down(D, &title(1), Some(5)).unwrap();
    clock.advance(TTL + 60);
    let before = readable(&store, 40);
    let stat_before = store.stat().unwrap();

    let report = compact(&mut store);
    let dropped = report.dropped();
    for reason in [Reason::Expired, Reason::TakenDown, Reason::Replaced] {
        assert!(dropped.contains_key(&reason), "{reason:?}: {dropped:?}");
    }
    assert!(report.reclaimed() > 0);
    assert!(report
        .containers
        .iter()
        .any(|c| matches!(c.action, Action::Rewrite | Action::Drop)));
    assert!(report.generation_after > report.generation_before);
    assert!(readable(&store, 40) == before);
    assert!(store.get(D, &title(1), Which::Rev(5)).unwrap().is_none());
    let stat_after = store.stat().unwrap();
    assert_eq!(stat_after.live_bytes, stat_before.live_bytes);
    assert!(stat_after.container_bytes < stat_before.container_bytes / 2);

    // Reopened (as a reader and as the writer) it reads the same, and checks clean.
    drop(store);
    let reader = Store::open(dir.path(), &opts(&clock, false)).unwrap();
    assert!(readable(&reader, 40) == before);
    drop(reader);
    let store = reopen_writer(dir.path(), &clock);
    let g = store.generation().unwrap();
    assert_eq!(g.compactions, 1);
    assert!(g.moves.is_empty() && g.pending == 0);
    drop(store);
    common::assert_checks_clean(dir.path());
}

#[test]
fn a_second_run_copies_nothing_even_where_overhead_passes_min_dead() {
    let (_dir, clock, mut store) = churned(2);
    clock.advance(TTL + 60);
    let before = readable(&store, 2);
    let first = compact(&mut store);
    assert!(first.containers.iter().any(|c| c.action == Action::Rewrite));
    // What is left is two small values in a container whose index, time index and journal are
    // several times their size: by bytes, mostly "dead" (over half, where min_dead is a quarter).
    let ids = store.container_ids().unwrap();
    let plan = maintenance::plan_compaction(&store, &CompactOptions::default()).unwrap();
    assert!(plan
        .containers
        .iter()
        .any(|c| c.bytes > 2 * c.live.bytes && c.live.values > 0));
    let again = compact(&mut store);
    assert_all_kept(&again);
    assert_eq!(store.container_ids().unwrap(), ids);
    assert!(readable(&store, 2) == before);
}

#[test]
fn a_take_down_then_compaction_leaves_no_byte_of_the_revision_in_any_file() {
    let (dir, _clock, mut store) = churned(30);
    let mut secret = value(99, 7, 0, 4000);
    secret.extend_from_slice(MARKER);
    secret.extend(value(99, 7, 1, 4000));
    store.put(&Put::new(D, "Secret", 7, HTML, &secret)).unwrap();
    store
        .put(&Put::new(D, "Secret", 8, HTML, b"<p>fine</p>"))
        .unwrap();
    assert!(store_files(dir.path()).iter().any(|p| holds(p, MARKER)));
    let before = readable(&store, 30);

    assert_eq!(store.take_down(D, "Secret", Some(7)).unwrap(), 1);
    // Taken down but not compacted: the bytes are still on disk (so the check below can fail).
    assert!(store_files(dir.path()).iter().any(|p| holds(p, MARKER)));
    let report = compact(&mut store);
    assert!(report.dropped().contains_key(&Reason::TakenDown));
    assert_no_file_holds_the_marker(dir.path());
    assert!(readable(&store, 30) == before);
    assert_eq!(
        store
            .get(D, "Secret", Which::Latest)
            .unwrap()
            .unwrap()
            .value,
        b"<p>fine</p>"
    );
    assert!(store.get(D, "Secret", Which::Rev(7)).unwrap().is_none());
}

#[test]
fn a_dry_run_reports_what_a_run_does_and_changes_nothing() {
    let (dir, clock, mut store) = churned(30);
    store.take_down(D, &title(2), None).unwrap();
    clock.advance(TTL + 60);
    store.batch().commit().unwrap();
    drop(store);
    let files = snapshot_bytes(dir.path());

    let store = Store::open(dir.path(), &opts(&clock, false)).unwrap();
    let dry = maintenance::plan_compaction(
        &store,
        &CompactOptions {
            dry_run: true,
            ..CompactOptions::default()
        },
    )
    .unwrap();
    drop(store);
    assert!(dry.dry_run);
    assert_eq!(snapshot_bytes(dir.path()), files, "a dry run wrote");

    let mut store = Store::open(dir.path(), &opts(&clock, true)).unwrap();
    let real = compact(&mut store);
    // The same containers with the same tallies, whatever the run then did.
    let tallies = |r: &CompactReport| {
        r.containers
            .iter()
            .filter(|c| c.action != Action::Keep)
            .map(|c| (c.id, c.live, c.dropped.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(tallies(&dry), tallies(&real));
    assert_eq!(dry.dropped(), real.dropped());
    assert!(dry.dropped()[&Reason::TakenDown].values >= 5);
    // The estimate counts what the targets will hold, their presized index included: without
    // it, a dry run promised that index (4 MiB a container here) as reclaimed space.
    let (estimate, done) = (dry.reclaimed() as f64, real.reclaimed() as f64);
    assert!(
        (estimate - done).abs()
            <= 0.01 * dry.containers.iter().map(|c| c.bytes).sum::<u64>() as f64,
        "a dry run estimated {estimate} bytes reclaimed, the run reclaimed {done}"
    );
}

#[test]
fn a_container_with_nothing_live_is_dropped_whole_without_a_copy() {
    let (dir, clock, mut store) = churned(40);
    clock.advance(TTL + 60);
    let report = compact(&mut store);
    let dropped: Vec<_> = report
        .containers
        .iter()
        .filter(|c| c.action == Action::Drop)
        .collect();
    assert!(!dropped.is_empty(), "{:?}", report.containers);
    for c in dropped {
        assert_eq!(c.live.values, 0);
        assert_eq!(c.into, None);
        assert!(!dir.path().join(format!("c{:06}.data", c.id)).exists());
    }
}

#[test]
fn online_compaction_beside_puts_and_reads_loses_no_write() {
    let (dir, clock, mut store) = churned(80);
    clock.advance(TTL + 60);
    let opts = CompactOptions::default();
    let sealed: Vec<u32> = {
        let ids = store.container_ids().unwrap();
        ids[..ids.len() - 1].to_vec()
    };
    assert!(sealed.len() >= 2, "{sealed:?}");
    let mut expected = readable(&store, 80);
    let mut rev = 100;
    for id in sealed {
        let job = maintenance::start_compaction(&mut store, id, &opts).unwrap();
        let built = std::thread::scope(|s| {
            let worker = s.spawn(|| job.run());
            // The writer keeps writing and reading while the job copies.
            while !worker.is_finished() {
                let t = rev as usize % 80;
                let v = value(t, rev, 0, 2000);
                let tid = store.put(&Put::new(D, &title(t), rev, HTML, &v)).unwrap();
                expected.retain(|k, _| k.0 != t);
                expected.insert((t, rev, tid), v);
                let got = store.get(D, &title(t), Which::Latest).unwrap().unwrap();
                assert_eq!(got.rev, rev);
                rev += 1;
                if rev > 100_000 {
                    break;
                }
            }
            worker.join().unwrap()
        });
        maintenance::adopt(&mut store, &job, built).unwrap();
    }
    assert!(rev > 100, "no write ran beside the compaction");
    // Every title's latest is the last write; every older render the put superseded is past
    // its grace only later, so compare the latest of each title.
    for t in 0..80 {
        let want = expected
            .iter()
            .filter(|(k, _)| k.0 == t)
            .max_by_key(|(k, _)| k.1)
            .unwrap();
        let got = store.get(D, &title(t), Which::Latest).unwrap().unwrap();
        assert_eq!((got.rev, got.tid), (want.0 .1, want.0 .2));
        assert_eq!(&got.value, want.1);
    }
    drop(store);
    common::assert_checks_clean(dir.path());
}

#[test]
fn a_reader_of_the_old_generation_never_reads_wrong_bytes_and_sees_the_new_one_after_refresh() {
    let (dir, clock, mut store) = churned(40);
    clock.advance(TTL + 60);
    let mut reader = Store::open(dir.path(), &opts(&clock, false)).unwrap();
    let before = readable(&reader, 40);
    let report = compact(&mut store);
    assert!(report
        .containers
        .iter()
        .any(|c| c.action == Action::Rewrite));
    // Before it refreshes, the reader finds what it finds whole or not at all: never an error,
    // never other bytes (its records may name the removed containers, which it holds open).
    for t in 0..40 {
        if let Some(got) = reader.get(D, &title(t), Which::Latest).unwrap() {
            assert!(before.get(&(t, got.rev, got.tid)) == Some(&got.value));
        }
    }
    reader.refresh().unwrap();
    assert!(readable(&reader, 40) == before);
    drop(reader);
    let reopened = Store::open(dir.path(), &opts(&clock, false)).unwrap();
    assert!(readable(&reopened, 40) == before);
}

#[test]
fn compaction_leaves_the_page_cache_as_it_found_it() {
    let (dir, clock, mut store) = churned(60);
    clock.advance(TTL + 60);
    let report = compact(&mut store);
    let written: Vec<u32> = report.containers.iter().filter_map(|c| c.into).collect();
    assert!(!written.is_empty());
    let (mut resident, mut bytes) = (0, 0);
    for id in written {
        let (r, b) = residency(&dir.path().join(format!("c{id:06}.data"))).unwrap();
        resident += r;
        bytes += b;
    }
    // Pages of the new containers' headers may stay; the values must not.
    assert!(
        resident * 10 < bytes,
        "{resident} of {bytes} bytes resident"
    );
}

#[test]
fn wink_compact_prints_the_report_and_dry_run_the_same() {
    let (dir, _clock, mut store) = churned(20);
    store.take_down(D, &title(3), Some(5)).unwrap();
    drop(store);
    let now = (T + 2 * TTL).to_string();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wink"))
            .args(args)
            .env("WINK_NOW", &now)
            .output()
            .unwrap();
        assert!(out.status.success(), "{:?}", out);
        String::from_utf8(out.stdout).unwrap()
    };
    let d = dir.path().to_str().unwrap();
    let dry = run(&["compact", d, "--dry-run"]);
    let real = run(&["compact", d]);
    assert!(dry.contains("dropped taken down 2 values"), "{dry}");
    assert!(dry.contains("would reclaim"), "{dry}");
    assert!(real.contains("reclaimed"), "{real}");
    let strip = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("container"))
            .map(|l| {
                l.split(", into")
                    .next()
                    .unwrap()
                    .replace("rewrite", "x")
                    .replace("drop", "x")
            })
            .collect::<Vec<_>>()
    };
    let acted = |s: &str| -> Vec<String> {
        strip(s)
            .into_iter()
            .filter(|l| !l.contains(": keep"))
            .collect()
    };
    assert_eq!(acted(&dry), acted(&real));
    let json = run(&["compact", d, "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["dry_run"], true);
    assert!(v["generation_before"].as_u64().unwrap() >= 1);
    // Bad options change nothing and exit 2.
    let bad = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(["compact", d, "--max-mbps", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    common::assert_checks_clean(dir.path());
}

#[test]
fn a_take_down_of_an_archived_revision_is_rewritten_out_of_the_archive() {
    let (dir, clock, mut store) = new_store(&Config {
        archive: Some(ArchivePolicy::Newest),
        archive_block_bytes: 64 << 10,
        ..config()
    });
    let mut revs = Vec::new();
    for rev in 1..=12u64 {
        let mut v = value(7, rev, 0, 6000);
        if rev == 5 {
            v.extend_from_slice(MARKER);
            v.extend(value(7, rev, 1, 3000));
        }
        let tid = store.put(&Put::new(D, "Archived", rev, HTML, &v)).unwrap();
        revs.push((rev, tid, v));
        clock.advance(TTL + 1);
    }
    maintenance::archive_due(&mut store, |_, _| {}).unwrap();
    let marked = |store: &Store| {
        common::decompressed_blocks(store.archive().unwrap())
            .iter()
            .any(|(_, _, content)| common::contains(content, MARKER))
    };
    assert!(marked(&store), "the marker was not archived");
    store.take_down(D, "Archived", Some(5)).unwrap();
    // Taken down, not compacted: still in a block.
    assert!(marked(&store));

    let report = compact(&mut store);
    assert!(report.archive_rewrite.is_some(), "{:?}", report.archive_due);
    assert!(!marked(&store));
    assert_no_file_holds_the_marker(dir.path());
    for (rev, tid, v) in &revs {
        let got = store.get(D, "Archived", Which::Render(*rev, *tid)).unwrap();
        if *rev == 5 {
            assert!(got.is_none());
        } else {
            assert!(got.unwrap().value == *v, "rev {rev}");
        }
    }
    let g = store.generation().unwrap();
    assert_ne!(g.archive, "archive");
    assert!(g.retired_archive.is_empty() && g.pending_archive.is_empty());
    assert!(!dir.path().join("archive.data").exists());
    drop(store);
    let reopened = Store::open(dir.path(), &opts(&clock, false)).unwrap();
    assert!(!marked(&reopened));
    assert!(reopened
        .get(D, "Archived", Which::Rev(4))
        .unwrap()
        .is_some());
    drop(reopened);
    common::assert_checks_clean(dir.path());
}

/// Ten titles a phase, each re-rendered and given new revisions; only the last revision of each
/// title stays readable. Titles of one phase are finished in that phase, so every container
/// ends up holding a few live values among many dead ones.
fn sparse_phases(store: &mut Store, clock: &ManualClock, phases: usize) -> usize {
    let per_phase = 10;
    for phase in 0..phases {
        for rev in 1..=3u64 {
            for render in 0..2u64 {
                let titles = phase * per_phase..(phase + 1) * per_phase;
                put_batch(store, titles, rev, render, |t| 6000 + (t * 53) % 6000);
                clock.advance(1);
            }
        }
    }
    phases * per_phase
}

#[test]
fn sparse_containers_are_merged_into_few_full_ones() {
    let (dir, clock, mut store) = new_store(&config());
    let titles = sparse_phases(&mut store, &clock, 12);
    clock.advance(TTL + 60);
    let before = readable(&store, titles);
    assert_eq!(before.len(), titles, "one readable render per title");
    let containers_before = store.container_ids().unwrap().len();
    let report = compact(&mut store);
    let rewritten: Vec<_> = report
        .containers
        .iter()
        .filter(|c| c.action == Action::Rewrite)
        .collect();
    assert!(rewritten.len() >= 4, "{:#?}", report.containers);
    // Sources by target: the live bytes of one target's sources fit one container.
    let mut by_target: BTreeMap<u32, (usize, u64)> = BTreeMap::new();
    for c in &rewritten {
        let e = by_target.entry(c.into.expect("a target")).or_default();
        e.0 += 1;
        e.1 += c.live.bytes;
    }
    assert!(
        by_target.values().any(|(sources, _)| *sources >= 3),
        "no target took three sources: {by_target:?}"
    );
    assert!(by_target.len() < rewritten.len());
    for (target, (_, live)) in &by_target {
        assert!(*live <= 1 << 20, "target {target}: {live} live bytes");
        assert!(dir.path().join(format!("c{target:06}.data")).exists());
    }
    for c in &rewritten {
        assert!(!dir.path().join(format!("c{:06}.data", c.id)).exists());
    }
    let containers_after = store.container_ids().unwrap().len();
    assert!(
        containers_after + rewritten.len() - by_target.len() <= containers_before + 1,
        "{containers_before} containers before, {containers_after} after"
    );
    // Every read the same, through this handle and after a reopen; the store checks clean.
    assert!(readable(&store, titles) == before);
    let again = compact(&mut store);
    assert_all_kept(&again);
    drop(store);
    let store = reopen_writer(dir.path(), &clock);
    assert!(readable(&store, titles) == before);
    drop(store);
    common::assert_checks_clean(dir.path());
}

/// A survey reads title records through a read-only view of the meta filesys. A writer that
/// rewrote a record after that view was taken (any put to the title) made the survey miss it
/// and call its values deleted (a dry run on a read-only handle reported every one of them as
/// "deleted"), or fail with `Stale`: a compaction job beside a writer failed that way now and
/// then (`online_compaction_beside_puts_and_reads_loses_no_write`; the switch's validation kept
/// a misclassified job from dropping anything). The survey now reads such a record again
/// through a fresh view, as the store's reads do. The plan below is the deterministic case; a
/// job's survey shares the loader, and the second half checks a job started before puts to its
/// titles still adopts.
#[test]
fn a_survey_beside_a_writer_reads_rewritten_records_again() {
    let (dir, clock, mut store) = churned(30);
    clock.advance(TTL + 60);
    let reader = Store::open(dir.path(), &opts(&clock, false)).unwrap();
    // Every title's record is rewritten after the reader's view was taken.
    for t in 0..30 {
        store
            .put(&Put::new(D, &title(t), 500, HTML, &value(t, 500, 0, 100)))
            .unwrap();
    }
    let plan = maintenance::plan_compaction(
        &reader,
        &CompactOptions {
            dry_run: true,
            ..CompactOptions::default()
        },
    )
    .unwrap();
    let from_writer = maintenance::plan_compaction(
        &store,
        &CompactOptions {
            dry_run: true,
            ..CompactOptions::default()
        },
    )
    .unwrap();
    assert_eq!(plan.dropped(), from_writer.dropped());
    // A job started before the writer rewrites its titles' records, run after.
    let sealed = store.container_ids().unwrap()[0];
    let job =
        maintenance::start_compaction(&mut store, sealed, &CompactOptions::default()).unwrap();
    for t in 0..30 {
        store
            .put(&Put::new(D, &title(t), 501, HTML, &value(t, 501, 0, 100)))
            .unwrap();
    }
    let built = job.run();
    maintenance::adopt(&mut store, &job, built).unwrap();
}
