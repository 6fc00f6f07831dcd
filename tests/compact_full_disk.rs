//! Compaction on a full disk, and what a run costs: through the library and the built binary.
//!
//! - A run with nothing to do writes nothing, not even on a disk with no byte free.
//! - A refused run (exit 2) leaves every file of the store byte for byte, and its mtime, as it
//!   was, and makes no file.
//! - Dead containers are dropped without a container written for them, and the free-space check
//!   counts what a run writes: on a disk with a few MiB free a run that drops two containers and
//!   rewrites some goes through.
//! - A dry run's estimate of reclaimed bytes is the real run's within 5%, and a run never leaves
//!   the store bigger (lengths and allocated blocks), nor a new container with an index sized
//!   for more than it holds.
//! - Progress is reported in bytes copied; `--json` prints the report alone.
//!
//! A full disk is a small tmpfs in a private user and mount namespace (`unshare -rm`): this test
//! binary is re-executed there (one of the full-disk tests, with `WINK_FULL_DISK_CHILD` set),
//! copies a template store in, fills the disk to leave a given number of bytes free and runs
//! `wink compact`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

mod common;

use common::cli::Run;
use wink::clock::ManualClock;
use wink::maintenance;
use wink::maintenance::compact::{Action, CompactOptions, CompactReport};
use wink::store::Put;
use wink::store::{Config, Store, StoreOptions};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";
const T: i64 = 1_700_000_000;
const TTL: i64 = 100;
/// When the template stores are compacted: revisions 1 and 2 of the first titles have expired.
const NOW: i64 = T + 500;
const CHILD_ENV: &str = "WINK_FULL_DISK_CHILD";
/// The test a re-executed copy of this binary runs: with `CHILD_ENV` set it is the child instead.
/// A `#[test]` of the child's own would pass, checking nothing, in every normal run.
const CHILD_HOST: &str = "a_refused_run_changes_no_byte_of_the_store";

fn options(clock: &Arc<ManualClock>) -> StoreOptions {
    StoreOptions {
        clock: clock.clone(),
        ..StoreOptions::writer()
    }
}

fn open_at(dir: &Path, now: i64) -> Store {
    Store::open(dir, &options(&Arc::new(ManualClock::new(now)))).unwrap()
}

fn put(store: &mut Store, t: usize, rev: u64, len: usize) {
    let v = common::lettered(format!("<p>{t} {rev}</p>"), (t as u64) << 8 ^ rev, len);
    store.put(&Put::new(D, &title(t), rev, HTML, &v)).unwrap();
}

fn title(t: usize) -> String {
    format!("Page_{t}")
}

/// A store of 1 MiB containers: revisions 1 and 2 of titles 0..40 (dead at NOW: their
/// containers are dropped), revision 3 of them (live but for title 5, taken down: its container
/// is rewritten), and titles 40..50 in the current container, one of them taken down when
/// `current_dead`.
fn template(dir: &Path, current_dead: bool) {
    let clock = Arc::new(ManualClock::new(T));
    let cfg = Config {
        policy: common::recent_policy(TTL),
        container_bytes: 1 << 20,
        ..Config::default()
    };
    Store::init(dir, &cfg, &options(&clock)).unwrap();
    let mut s = Store::open(dir, &options(&clock)).unwrap();
    for rev in 1..=2 {
        for t in 0..40 {
            put(&mut s, t, rev, 60_000);
        }
        clock.advance(1);
    }
    clock.set(T + 300);
    for t in 0..40 {
        put(&mut s, t, 3, 24_000);
    }
    for t in 40..50 {
        put(&mut s, t, 1, 20_000);
    }
    s.take_down(D, &title(5), None).unwrap();
    if current_dead {
        s.take_down(D, &title(45), None).unwrap();
    }
}

/// Every render readable at `now`: (title, rev) → value.
fn readable(dir: &Path, now: i64) -> BTreeMap<(usize, u64), Vec<u8>> {
    let s = Store::open(
        dir,
        &StoreOptions {
            clock: Arc::new(ManualClock::new(now)),
            ..StoreOptions::read_only()
        },
    )
    .unwrap();
    common::readable(&s, D, 50, title)
        .into_iter()
        .map(|((t, rev, _), v)| ((t, rev), v))
        .collect()
}

/// Every file of the store: name → (bytes, mtime in ns).
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, i128)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            let name = e.file_name().to_string_lossy().into_owned();
            (name, (std::fs::read(e.path()).unwrap(), mtime))
        })
        .collect()
}

/// Asserts that every file is as it was: the same names, bytes and mtimes.
fn assert_unchanged(before: &BTreeMap<String, (Vec<u8>, i128)>, dir: &Path) {
    let after = files(dir);
    let names = |m: &BTreeMap<String, (Vec<u8>, i128)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(before), names(&after), "the store's files");
    for (name, (bytes, mtime)) in before {
        let (now_bytes, now_mtime) = &after[name];
        assert!(bytes == now_bytes, "{name}: its bytes changed");
        assert_eq!(mtime, now_mtime, "{name}: its mtime changed");
    }
}

/// (sum of lengths, sum of allocated blocks in bytes) of the store's files.
fn store_bytes(dir: &Path) -> (u64, u64) {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .fold((0, 0), |(len, blocks), m| {
            (len + m.len(), blocks + m.blocks() * 512)
        })
}

fn container_ids(dir: &Path) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix('c')?.strip_suffix(".data")?.parse().ok()
        })
        .collect();
    ids.sort();
    ids
}

fn wink(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["compact", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    common::cli::wink_at(NOW, &all, b"")
}

fn within_5_percent(estimate: u64, real: u64) -> bool {
    estimate.abs_diff(real) as f64 <= 0.05 * real as f64
}

// ---- without a full disk -------------------------------------------------------------------

/// A dry run, then the run: the estimate is the result within 5%, and the store is no bigger.
fn estimate_then_run(dir: &Path, now: i64) -> (CompactReport, CompactReport) {
    let mut s = open_at(dir, now);
    let dry = maintenance::plan_compaction(&s, &CompactOptions::default()).unwrap();
    let before = store_bytes(dir);
    let real = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    drop(s);
    let after = store_bytes(dir);
    println!(
        "dry run: would reclaim {}; run: reclaimed {}; store {before:?} -> {after:?} \
         (lengths, allocated)",
        dry.reclaimed(),
        real.reclaimed()
    );
    assert!(real.reclaimed() > 0, "{real:#?}");
    assert!(
        within_5_percent(dry.reclaimed(), real.reclaimed()),
        "estimate {} against {}",
        dry.reclaimed(),
        real.reclaimed()
    );
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "{before:?} -> {after:?}"
    );
    (dry, real)
}

#[test]
fn a_dry_run_estimates_the_reclaimed_bytes_and_the_store_never_grows() {
    // Sealed containers: two dropped, some rewritten, the current one sealed and rewritten.
    let dir = tempfile::tempdir().unwrap();
    template(dir.path(), true);
    let expected = readable(dir.path(), NOW);
    let (_, real) = estimate_then_run(dir.path(), NOW);
    assert!(real.containers.iter().any(|c| c.action == Action::Drop));
    assert!(real.containers.iter().any(|c| c.action == Action::Rewrite));
    assert_eq!(readable(dir.path(), NOW), expected);
    common::assert_checks_clean(dir.path());

    // One big current container (a 4 MiB index, presized for 1 GiB) holding 300 titles, 100 of
    // them removed: its copy gets an index for 200 values, not another 4 MiB one.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T));
    let cfg = Config {
        policy: common::recent_policy(TTL),
        ..Config::default()
    };
    Store::init(dir.path(), &cfg, &options(&clock)).unwrap();
    let mut s = Store::open(dir.path(), &options(&clock)).unwrap();
    for t in 0..300 {
        put(&mut s, t, 1, 60_000);
    }
    for t in 0..100 {
        s.take_down(D, &title(t), None).unwrap();
    }
    drop(s);
    let (_, real) = estimate_then_run(dir.path(), T);
    let target = real.containers[0].into.unwrap();
    let idx = dir.path().join(format!("c{target:06}.idx"));
    let idx_len = std::fs::metadata(&idx).unwrap().len();
    assert!(idx_len < 64 << 10, "{}: {idx_len} bytes", idx.display());
    // Again: nothing left to do, and nothing done.
    let mut s = open_at(dir.path(), T);
    let again = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    assert!(again.nothing_to_do(), "{again:#?}");
}

#[test]
fn a_few_dead_values_in_the_current_container_do_not_make_a_run_grow_the_store() {
    // 10 MB in the current container, whose index is presized for 1 GiB (4 MiB), and 120 KB of
    // it expired: a seal would start another 4 MiB index and the copy give back 120 KB.
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T));
    let cfg = Config {
        policy: common::recent_policy(TTL),
        ..Config::default()
    };
    Store::init(dir.path(), &cfg, &options(&clock)).unwrap();
    let mut s = Store::open(dir.path(), &options(&clock)).unwrap();
    for t in 0..170 {
        put(&mut s, t, 1, 60_000);
    }
    for t in 0..2 {
        put(&mut s, t, 2, 60_000);
    }
    drop(s);
    let before = store_bytes(dir.path());
    let mut s = open_at(dir.path(), T + 2 * TTL);
    let dry = maintenance::plan_compaction(&s, &CompactOptions::default()).unwrap();
    let real = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    drop(s);
    let after = store_bytes(dir.path());
    println!("{before:?} -> {after:?}: {:?}", real.containers);
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "{before:?} -> {after:?}"
    );
    assert!(dry.nothing_to_do() && real.nothing_to_do(), "{real:#?}");
}

#[test]
fn dead_containers_are_dropped_without_a_container_written() {
    let dir = tempfile::tempdir().unwrap();
    template(dir.path(), false);
    // Revisions 1 and 2 are dead: their containers hold nothing live.
    let mut s = open_at(dir.path(), NOW);
    let plan = maintenance::plan_compaction(&s, &CompactOptions::default()).unwrap();
    let dead: Vec<u32> = plan
        .containers
        .iter()
        .filter(|c| c.action == Action::Drop)
        .map(|c| c.id)
        .collect();
    assert!(dead.len() >= 2, "{plan:#?}");
    let before = container_ids(dir.path());
    let report = maintenance::compact(
        &mut s,
        &CompactOptions {
            // Only the drops: nothing else passes.
            min_dead: 1.0,
            ..CompactOptions::default()
        },
        |_, _| {},
    )
    .unwrap();
    drop(s);
    let rewritten: Vec<u32> = report
        .containers
        .iter()
        .filter(|c| c.action == Action::Rewrite)
        .map(|c| c.id)
        .collect();
    let after = container_ids(dir.path());
    let new: Vec<u32> = after
        .iter()
        .filter(|id| !before.contains(id))
        .copied()
        .collect();
    // Only the take-down's rewrite writes a container.
    assert!(
        new.len() <= rewritten.len(),
        "new {new:?}, rewritten {rewritten:?}"
    );
    for id in &dead {
        assert!(!after.contains(id), "container {id} is still there");
    }
    assert_eq!(
        report.written_bytes,
        report
            .containers
            .iter()
            .filter(|c| c.action == Action::Rewrite)
            .map(|c| c.live.bytes)
            .sum::<u64>()
    );
}

#[test]
fn a_run_with_nothing_to_do_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    template(dir.path(), true);
    let mut s = open_at(dir.path(), NOW);
    maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    drop(s);
    let before = files(dir.path());
    let mut s = open_at(dir.path(), NOW);
    let report = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    drop(s);
    assert!(report.nothing_to_do(), "{report:#?}");
    assert_eq!(report.generation_after, report.generation_before);
    assert_unchanged(&before, dir.path());

    let run = wink(dir.path(), &[]).expect(0);
    assert!(run.out().contains("nothing to do\n"), "{}", run.out());
    let run = wink(dir.path(), &["--json"]).expect(0);
    assert_eq!(run.json()["nothing_to_do"], true);
    assert_unchanged(&before, dir.path());
}

#[test]
fn progress_counts_bytes_copied_and_json_is_the_report_alone() {
    let dir = tempfile::tempdir().unwrap();
    template(dir.path(), true);
    let mut s = open_at(dir.path(), NOW);
    let mut seen = Vec::new();
    let report = maintenance::compact(&mut s, &CompactOptions::default(), |done, total| {
        seen.push((done, total))
    })
    .unwrap();
    let total = seen.first().map(|s| s.1).unwrap();
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    assert_eq!(seen.last(), Some(&(total, total)), "{seen:?}");
    assert_eq!(report.written_bytes, total);
    assert!(seen.len() > 10, "{} calls", seen.len());

    let dir = tempfile::tempdir().unwrap();
    template(dir.path(), true);
    let run = wink(dir.path(), &["--json"]).expect(0);
    assert_eq!(run.stderr, "");
    assert_eq!(run.json()["nothing_to_do"], false);
    assert!(run.json()["reclaimed_bytes"].as_u64().unwrap() > 0);

    // On a terminal (`script` gives the command one), stderr shows the bytes copied.
    if !common::require::tool("script", "--version", "compact progress on a terminal") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    template(dir.path(), true);
    let command = format!(
        "WINK_NOW={NOW} {} compact {} >/dev/null",
        env!("CARGO_BIN_EXE_wink"),
        dir.path().display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("copied"), "{text:?}");
}

// ---- on a full disk ------------------------------------------------------------------------

/// Bytes free on the file system of `dir`.
fn free(dir: &Path) -> u64 {
    let out = Command::new("stat")
        .args(["-f", "-c", "%a %S"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut parts = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    parts.next().unwrap() * parts.next().unwrap()
}

/// Fills the file system of `dir` with a file of zeros until `leave` bytes are free (or none,
/// when the disk refuses a byte more).
fn fill(dir: &Path, leave: u64) {
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 64 << 10];
    let mut left = free(dir).saturating_sub(leave);
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if filler.write_all(&chunk[..n]).is_err() {
            break;
        }
        left -= n as u64;
    }
    let _ = filler.sync_all();
}

fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The child, in a copy of this binary run with `WINK_FULL_DISK_CHILD=CASE,TEMPLATE,MOUNT` where
/// MOUNT is a tmpfs of its own: copies the template there, fills the disk and compacts.
fn full_disk_child(spec: &str) {
    let mut parts = spec.splitn(3, ',');
    let (case, template_dir, mount) = (
        parts.next().unwrap(),
        Path::new(parts.next().unwrap()),
        Path::new(parts.next().unwrap()),
    );
    let dir = mount.join("store");
    copy_store(template_dir, &dir);
    let expected = readable(&dir, NOW);
    match case {
        "idle" => {
            fill(mount, 0);
            println!("free: {}", free(mount));
            let before = files(&dir);
            let run = wink(&dir, &[]).expect(0);
            assert!(run.out().contains("nothing to do"), "{}", run.out());
            assert_unchanged(&before, &dir);
        }
        "refused" => {
            fill(mount, 1 << 20);
            println!("free: {}", free(mount));
            let before = files(&dir);
            let run = wink(&dir, &[]).expect(2);
            println!("refused: {}", run.stderr);
            assert!(run.stderr.contains("nothing was changed"), "{}", run.stderr);
            assert_unchanged(&before, &dir);
            let run = wink(&dir, &["--json"]).expect(2);
            assert_eq!(run.out(), "");
            assert_unchanged(&before, &dir);
        }
        "tight" => {
            // Less than one container's preallocation step (16 MiB) free: the copy needs its
            // values, their small files and the records' room, not a whole container.
            fill(mount, 6 << 20);
            println!("free: {}", free(mount));
            let before = store_bytes(&dir);
            let run = wink(&dir, &["--json"]).expect(0);
            let report = run.json();
            let actions: Vec<&str> = report["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["action"].as_str().unwrap())
                .collect();
            println!("{actions:?}, reclaimed {}", report["reclaimed_bytes"]);
            assert!(actions.iter().filter(|a| **a == "drop").count() >= 2);
            assert!(actions.contains(&"rewrite"), "{actions:?}");
            let after = store_bytes(&dir);
            assert!(
                after.0 < before.0 && after.1 < before.1,
                "{before:?} -> {after:?}"
            );
        }
        other => panic!("no case {other}"),
    }
    assert_eq!(readable(&dir, NOW), expected);
    common::assert_checks_clean(&dir);
    println!("{case}: passed");
}

/// Runs `full_disk_child` for `case` on a 64 MiB tmpfs in a namespace of its own, with the
/// template of `current_dead` (compacted first when `compacted`). In that child, is the child.
fn on_full_disk(case: &str, current_dead: bool, compacted: bool) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        full_disk_child(&spec);
        return;
    }
    let probe = Command::new("unshare")
        .args(["-rm", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        common::require::skip(
            "compaction on a full disk",
            "`unshare -rm` cannot make a user and mount namespace here",
        );
        return;
    }
    let template_dir = tempfile::tempdir().unwrap();
    template(template_dir.path(), current_dead);
    if compacted {
        let mut s = open_at(template_dir.path(), NOW);
        maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    }
    let mount: PathBuf = tempfile::tempdir().unwrap().keep();
    let script = format!(
        "mount -t tmpfs -o size=64m tmpfs \"$1\" && exec \"$2\" --exact {CHILD_HOST} \
         --nocapture --test-threads=1"
    );
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script, "sh"])
        .arg(&mount)
        .arg(std::env::current_exe().unwrap())
        .env(
            CHILD_ENV,
            format!(
                "{case},{},{}",
                template_dir.path().display(),
                mount.display()
            ),
        )
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(&mount);
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains(&format!("{case}: passed")),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn on_a_full_disk_a_run_with_nothing_to_do_succeeds_and_writes_nothing() {
    on_full_disk("idle", true, true);
}

#[test]
fn a_refused_run_changes_no_byte_of_the_store() {
    on_full_disk("refused", true, false);
}

#[test]
fn with_a_few_mib_free_dead_containers_are_dropped_and_the_rest_compacted() {
    on_full_disk("tight", false, false);
}
