//! Compaction under SIGKILL and on a full disk.
//!
//! One template store is built per test: 1 MiB containers, revisions kept 100 s after they are
//! superseded and one render per revision (10 s grace), six epochs of puts 200 s apart, renders
//! rewritten under a new tid and under the same (revision, tid), and take-downs, all committed.
//! At the compaction's "now" most early containers are dead, some are half live. What every
//! title reads back at that moment (latest, every revision, every listed render, the listing) is
//! recorded from the template, and every check compares the whole of it.
//!
//! - `sigkill_during_compaction`: each round copies the template, runs `wink compact` on the copy
//!   (WINK_NOW = the compaction's now) and SIGKILLs it — after a random delay spread over a
//!   measured unkilled run, or right after the k-th change of the generation file (polled in a
//!   tight loop), so that kills land in the build (`pending` set), between the switch and the
//!   removal (a `move` under way) and between steps. After the kill: a reader sees everything
//!   before any recovery; the writer's open recovers (its log is printed on failure); everything
//!   reads back byte for byte with the same state, taken-down revisions stay gone, `check_store`
//!   is clean, the generation file has nothing under way, no scratch file is left and every
//!   container file is the current one, an original not compacted yet, or referenced by a
//!   record. A full compaction then completes: the same checks, every container but the current
//!   one holds live values, container bytes shrink, and a second run reclaims nothing. The test
//!   fails unless kills hit both a `pending` and a `move` state.
//! - `a_file_size_limit_stops_compaction_cleanly`: this binary re-executed as the same test with
//!   `WINK_COMPACT_FSIZE_CHILD` set, under RLIMIT_FSIZE (SIGXFSZ ignored, so writes fail with
//!   EFBIG), compacts until it fails; the compaction must end in an error, the old generation
//!   intact. Without the limit a compaction completes.
//! - `the_free_space_check_refuses_to_start`: in a user and mount namespace (`unshare -rm`, no
//!   root needed where the kernel allows unprivileged user namespaces) the template is copied
//!   into a small tmpfs, where compaction's statvfs check must refuse with `Error::Full` before
//!   writing a container (the current one is not sealed: that would give back its 16 MiB of
//!   preallocated room), the store intact; remounted larger, the store compacts. Skipped, saying
//!   so (a failure in CI), where `unshare` cannot make the namespace. A real ENOSPC in the
//!   middle of a copy cannot be provoked this way (the check asks more than a copy writes); EFBIG
//!   stands for it.
//!   `tests/compact_full_disk.rs` tests a full disk through the CLI: nothing changed by a
//!   refusal, nothing written with nothing to do, a copy on a disk with a few MiB free.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wink::clock::ManualClock;
use wink::maintenance;
use wink::maintenance::compact::{Action, CompactOptions};
use wink::store::check::check_store;
use wink::store::generation::Generation;
use wink::store::record::TitleRecord;
use wink::store::Put;
use wink::store::Which;
use wink::store::{
    Config, Got, Listed, Page, Policy, Renders, Revisions, Store, StoreOptions, CURCONT,
};
use wink::vfs::RealFs;
use wink::Error;

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html; charset=utf-8";
const T0: i64 = 1_700_000_000;
const EPOCHS: u64 = 8;
const EPOCH_SECS: i64 = 200;
/// The compaction's now: 50 s into the last epoch. Revisions superseded in the last epoch are
/// still readable (100 s), those superseded before are expired, and so is every render pushed
/// out 5 s into an epoch (10 s grace).
const NOW: i64 = T0 + (EPOCHS as i64 - 1) * EPOCH_SECS + 50;
const TITLES: u64 = 80;
const FSIZE_ENV: &str = "WINK_COMPACT_FSIZE_CHILD";
const TMPFS_ENV: &str = "WINK_COMPACT_TMPFS_CHILD";
// The tests a re-executed copy of this binary runs: with the child's variable set each is the
// child instead. A `#[test]` of a child's own would pass, checking nothing, in every normal run.
const FSIZE_HOST: &str = "a_file_size_limit_stops_compaction_cleanly";
const TMPFS_HOST: &str = "the_free_space_check_refuses_to_start";

fn config() -> Config {
    Config {
        policy: Policy {
            revisions: Revisions::Recent { ttl: 100 },
            renders: Renders::Latest {
                count: 1,
                grace: 10,
            },
            historical_ttl: 100,
        },
        container_bytes: 1 << 20,
        ..Config::default()
    }
}

fn options(clock: &ManualClock, writable: bool) -> StoreOptions {
    StoreOptions {
        writable,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    }
}

/// A store handle at the compaction's now.
fn open_at_now(dir: &Path, writable: bool) -> wink::Result<Store> {
    Store::open(dir, &options(&ManualClock::new(NOW), writable))
}

fn title(i: u64) -> String {
    // Titles may hold '/': the container's value names are split from the right.
    if i % 7 == 3 {
        format!("Dir/Sub_{i}")
    } else {
        format!("Page_{i}")
    }
}

fn value(i: u64, rev: u64, variant: u64) -> Vec<u8> {
    let seed = i
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(rev * 31 + variant);
    let len = 3000 + (seed % 13_000) as usize;
    let mut v = format!("<p>{} rev {rev} variant {variant}</p>", title(i)).into_bytes();
    v.extend((0..len).map(|k| (k as u64 ^ seed ^ (k as u64 >> 8)) as u8));
    v
}

/// Whether title `i` gets a new revision in epoch `e` (every title in the first).
fn has_rev(i: u64, e: u64) -> bool {
    e == 0 || (i + e) % 3 != 0
}

/// Builds the template store in `dir`; returns the taken-down (title, revision) pairs.
fn build(dir: &Path) -> Vec<(String, u64)> {
    let clock = ManualClock::new(T0);
    Store::init(dir, &config(), &options(&clock, true)).unwrap();
    let mut s = Store::open(dir, &options(&clock, true)).unwrap();
    for e in 0..EPOCHS {
        clock.set(T0 + e as i64 * EPOCH_SECS);
        let rev = e + 1;
        for i in (0..TITLES).filter(|i| has_rev(*i, e)) {
            let t = title(i);
            let tid = s
                .put(&Put::new(D, &t, rev, HTML, &value(i, rev, 0)))
                .unwrap();
            if i % 4 == 1 {
                // The same (revision, tid) again, other bytes: the first copy is replaced.
                s.put(&Put {
                    tid: Some(tid),
                    ..Put::new(D, &t, rev, HTML, &value(i, rev, 1))
                })
                .unwrap();
            }
        }
        clock.advance(5);
        for i in (0..TITLES).filter(|i| i % 5 == 2 && has_rev(*i, e)) {
            // A new render pushes the first out.
            s.put(&Put::new(D, &title(i), rev, HTML, &value(i, rev, 2)))
                .unwrap();
        }
    }
    clock.set(NOW - 10);
    let mut down = Vec::new();
    for i in 0..TITLES {
        let t = title(i);
        let latest = s.get(D, &t, Which::Latest).unwrap().map(|g| g.rev);
        let target = match (i % 9, latest) {
            (4, Some(rev)) => Some(rev),
            (6, Some(rev)) => s
                .list(D, &t, Page::default())
                .unwrap()
                .iter()
                .map(|l| l.rev)
                .find(|r| *r < rev),
            _ => None,
        };
        if let Some(rev) = target {
            assert!(s.take_down(D, &t, Some(rev)).unwrap() > 0, "{t} {rev}");
            down.push((t, rev));
        }
    }
    down
}

/// Everything a read of one title returns.
#[derive(Debug, PartialEq)]
struct View {
    latest: Option<Got>,
    list: Vec<Listed>,
    revs: Vec<Option<Got>>,
    renders: Vec<Option<Got>>,
}

fn view(s: &Store) -> BTreeMap<String, View> {
    let mut out = BTreeMap::new();
    for i in 0..TITLES {
        let t = title(i);
        let list = s.list(D, &t, Page::default()).unwrap();
        let renders = list
            .iter()
            .map(|l| s.get(D, &t, Which::Render(l.rev, l.tid)).unwrap())
            .collect();
        let v = View {
            latest: s.get(D, &t, Which::Latest).unwrap(),
            revs: (1..=EPOCHS)
                .map(|r| s.get(D, &t, Which::Rev(r)).unwrap())
                .collect(),
            list,
            renders,
        };
        out.insert(t, v);
    }
    out
}

/// The template: its directory, what reads return at the compaction's now, its take-downs and
/// its containers.
struct Template {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    expected: BTreeMap<String, View>,
    down: Vec<(String, u64)>,
    containers: BTreeSet<u32>,
    container_bytes: u64,
}

fn template() -> Template {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let down = build(&dir);
    let s = open_at_now(&dir, false).unwrap();
    let expected = view(&s);
    let readable: usize = expected.values().map(|v| v.renders.len()).sum();
    assert!(
        readable >= TITLES as usize,
        "only {readable} readable renders"
    );
    for (t, rev) in &down {
        assert!(
            s.get(D, t, Which::Rev(*rev)).unwrap().is_none(),
            "{t} {rev}"
        );
    }
    let plan = maintenance::plan_compaction(&s, &CompactOptions::default()).unwrap();
    let acts = |a: Action| plan.containers.iter().filter(|c| c.action == a).count();
    assert!(
        acts(Action::Drop) >= 2 && acts(Action::Rewrite) >= 2,
        "the template must give drops and rewrites: {plan:#?}"
    );
    let stat = s.stat().unwrap();
    let containers = data_ids(&dir).unwrap();
    Template {
        _tmp: tmp,
        dir,
        expected,
        down,
        containers,
        container_bytes: stat.container_bytes,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Container ids with a datafile; an error names any scratch file or any container file left
/// without its datafile.
fn data_ids(dir: &Path) -> Result<BTreeSet<u32>, String> {
    let mut exts: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if [".tmp", ".perm", ".grow"].iter().any(|s| name.ends_with(s)) {
            problems.push(format!("scratch file {name} left"));
        }
        let parsed = name
            .strip_prefix('c')
            .and_then(|r| r.split_once('.'))
            .filter(|(n, _)| n.len() == 6)
            .and_then(|(n, ext)| Some((n.parse::<u32>().ok()?, ext.to_string())));
        if let Some((id, ext)) = parsed {
            exts.entry(id).or_default().push(ext);
        }
    }
    for (id, e) in &exts {
        if !e.iter().any(|x| x == "data") {
            problems.push(format!("container {id}: files {e:?} without a datafile"));
        }
    }
    if problems.is_empty() {
        Ok(exts.into_keys().collect())
    } else {
        Err(problems.join("; "))
    }
}

/// Containers the title records point into: (any render, a readable render).
fn referenced(s: &Store) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let policy = config().policy;
    let (mut any, mut live) = (BTreeSet::new(), BTreeSet::new());
    for item in s.meta().iter() {
        let file = item.unwrap();
        let bytes = s.meta().read_stat(&file).unwrap();
        let rec =
            TitleRecord::decode(&bytes, &file.name, s.meta().data().path(), file.inode.0).unwrap();
        for r in &rec.renders {
            any.insert(r.location.container);
            if policy.readable(&r.stamps, NOW) {
                live.insert(r.location.container);
            }
        }
    }
    (any, live)
}

/// Reads everything back and checks the directory. `done`: after a finished compaction, where
/// every container but the current one must hold a readable value.
fn verify(t: &Template, dir: &Path, s: &Store, done: bool) -> Result<(), String> {
    let got = view(s);
    for (name, want) in &t.expected {
        if got.get(name) != Some(want) {
            return Err(format!("{name}: read back {:#?}", got.get(name)));
        }
    }
    for (name, rev) in &t.down {
        if s.get(D, name, Which::Rev(*rev)).unwrap().is_some() {
            return Err(format!("taken-down {name} revision {rev} reads back"));
        }
    }
    let g = s.generation().unwrap();
    if g.pending != 0 || !g.moves.is_empty() {
        return Err(format!(
            "the generation file still has work under way: {g:?}"
        ));
    }
    let on_disk = data_ids(dir)?;
    let listed: BTreeSet<u32> = s.container_ids().unwrap().into_iter().collect();
    if listed != on_disk {
        return Err(format!(
            "container_ids {listed:?}, datafiles on disk {on_disk:?}"
        ));
    }
    let current = u32::try_from(s.meta().var(CURCONT).unwrap_or(1)).unwrap();
    let (any, live) = referenced(s);
    if let Some(id) = any.iter().find(|id| !on_disk.contains(id)) {
        return Err(format!(
            "a record points into container {id}, which is gone"
        ));
    }
    for id in &on_disk {
        let kept = if done {
            live.contains(id)
        } else {
            any.contains(id) || t.containers.contains(id)
        };
        if !kept && *id != current {
            return Err(format!(
                "container {id} is not in use (current {current}, records {any:?}, live {live:?})"
            ));
        }
    }
    Ok(())
}

fn check_clean(dir: &Path) -> Result<(), String> {
    let report = check_store(dir);
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(format!("check_store: {:#?}", report.problems))
    }
}

/// After a crash or a failed compaction: a reader sees everything before any recovery, the
/// writer's open recovers, and the store is as the template said.
fn verify_recovered(t: &Template, dir: &Path) -> Result<Vec<String>, String> {
    {
        let reader = open_at_now(dir, false).map_err(|e| format!("reader's open: {e}"))?;
        let got = view(&reader);
        if got != t.expected {
            return Err("a reader before recovery reads other content".into());
        }
    }
    let s = open_at_now(dir, true).map_err(|e| format!("writer's open: {e}"))?;
    let log = s.recovery().to_vec();
    let result = verify(t, dir, &s, false);
    drop(s);
    result
        .and_then(|_| check_clean(dir))
        .map_err(|e| format!("{e}\nrecovery: {log:#?}"))?;
    Ok(log)
}

/// A compaction to completion in this process, then the checks of a finished one.
fn compact_fully(t: &Template, dir: &Path) -> Result<(), String> {
    let mut s = open_at_now(dir, true).map_err(|e| e.to_string())?;
    let report = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {})
        .map_err(|e| format!("compaction after recovery: {e}"))?;
    verify(t, dir, &s, true).map_err(|e| format!("{e}\nreport: {report:#?}"))?;
    let after = s.stat().unwrap().container_bytes;
    if after >= t.container_bytes {
        return Err(format!(
            "container bytes {} before, {after} after compaction",
            t.container_bytes
        ));
    }
    if data_ids(dir)?.len() >= t.containers.len() {
        return Err("no container file was removed".into());
    }
    let again = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    if again.reclaimed() != 0 {
        return Err(format!("a second compaction reclaimed more: {again:#?}"));
    }
    drop(s);
    check_clean(dir)
}

// ---- SIGKILL -------------------------------------------------------------------------------

fn spawn_compact(dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_wink"))
        .arg("compact")
        .arg(dir)
        .env("WINK_NOW", NOW.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn generation_bytes(dir: &Path) -> Option<Vec<u8>> {
    std::fs::read(dir.join("generation")).ok()
}

/// When a round kills.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// After this long.
    Delay(Duration),
    /// This long after the generation file changed this many times.
    Change(u32, Duration),
}

/// Runs `wink compact` on `dir` until `at` (or its end); returns whether it was killed and the
/// generation file changes seen.
fn run_and_kill(dir: &Path, at: KillAt) -> (bool, u32) {
    let mut child = spawn_compact(dir);
    let start = Instant::now();
    let mut last = generation_bytes(dir);
    let mut changes = 0;
    let mut fired: Option<Instant> = None;
    loop {
        if child.try_wait().unwrap().is_some() {
            return (false, changes);
        }
        let now = generation_bytes(dir);
        if now != last {
            changes += 1;
            last = now;
        }
        let due = match (at, fired) {
            (KillAt::Delay(d), _) => start.elapsed() >= d,
            (KillAt::Change(k, _), None) if changes >= k => {
                fired = Some(Instant::now());
                false
            }
            (KillAt::Change(_, d), Some(f)) => f.elapsed() >= d,
            _ => false,
        };
        if due {
            // SIGKILL: no destructor, no flush, no chance to finish a write.
            child.kill().unwrap();
            child.wait().unwrap();
            return (true, changes);
        }
    }
}

/// What the generation file says was under way at the kill.
fn phase(dir: &Path) -> &'static str {
    match Generation::read(&RealFs, dir) {
        // A move stays named until the next write of the file; it is under way while its
        // source's datafile (removed first, after the records' commit) is there.
        Ok(g)
            if g.moves
                .iter()
                .any(|(source, _)| dir.join(format!("c{source:06}.data")).exists()) =>
        {
            // A merge: one target named by the moves of several sources.
            let merged = g.moves.iter().any(|(_, into)| {
                *into != 0 && g.moves.iter().filter(|(_, i)| i == into).count() > 1
            });
            if merged {
                "merge move"
            } else {
                "move"
            }
        }
        Ok(g) if g.pending != 0 => "pending",
        Ok(_) => "neither",
        Err(_) => "unreadable",
    }
}

fn sigkill_rounds(rounds: u64, seed: u64) {
    let t = template();
    let work = tempfile::tempdir().unwrap();
    // One unkilled run: its duration and its generation file changes set the kill points.
    let measured = work.path().join("measured");
    copy_dir(&t.dir, &measured);
    let start = Instant::now();
    let (killed, changes) = run_and_kill(&measured, KillAt::Delay(Duration::from_secs(3600)));
    let total = start.elapsed();
    assert!(!killed);
    verify_recovered(&t, &measured).unwrap();
    compact_fully(&t, &measured).unwrap();
    assert!(
        changes >= 3,
        "an unkilled compaction changed the generation file {changes} times"
    );
    println!("unkilled compaction: {total:?}, {changes} generation file changes seen");
    let mut rng = common::Rng(seed);
    let mut phases: BTreeMap<&str, u64> = BTreeMap::new();
    let micros = total.as_micros() as u64;
    for round in 0..rounds {
        let dir = work.path().join(format!("r{round}"));
        copy_dir(&t.dir, &dir);
        let at = match round % 3 {
            0 => KillAt::Delay(Duration::from_micros(rng.below(micros * 6 / 5))),
            1 => KillAt::Change(1 + rng.below(changes.into()) as u32, Duration::ZERO),
            _ => KillAt::Change(
                1 + rng.below(changes.into()) as u32,
                Duration::from_micros(rng.below(micros / u64::from(changes))),
            ),
        };
        let (killed, _) = run_and_kill(&dir, at);
        let p = if killed { phase(&dir) } else { "finished" };
        *phases.entry(p).or_default() += 1;
        let log = verify_recovered(&t, &dir)
            .unwrap_or_else(|e| panic!("round {round} ({at:?}, killed in {p}): {e}"));
        if !log.is_empty() {
            println!("round {round} ({at:?}, {p}): {log:?}");
        }
        compact_fully(&t, &dir)
            .unwrap_or_else(|e| panic!("round {round} ({at:?}, killed in {p}): {e}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    println!("kills by what the generation file had under way: {phases:?}");
    assert!(
        phases.get("merge move").is_some_and(|n| *n > 0)
            && phases.get("pending").is_some_and(|n| *n > 0),
        "kills never hit a merge under way or a pending container: {phases:?}"
    );
}

#[test]
fn sigkill_during_compaction() {
    sigkill_rounds(24, 0xC0FF_EE15);
}

#[test]
#[ignore = "long run: cargo test --release --test compact_crash -- --ignored"]
fn sigkill_during_compaction_long_run() {
    sigkill_rounds(300, 0x5EED_0006);
}

// ---- a file size limit ---------------------------------------------------------------------

/// The child, in a copy of this binary run with `WINK_COMPACT_FSIZE_CHILD=DIR,LIMIT`: limits the
/// size of the files it writes to LIMIT bytes (SIGXFSZ ignored, so a write past it fails with
/// EFBIG), then compacts; prints `compacted` or `error: MESSAGE`.
fn fsize_compact_child(spec: &str) {
    let (dir, limit) = spec.rsplit_once(',').expect("DIR,LIMIT");
    let limit: libc::rlim_t = limit.parse().expect("a byte count");
    let mut s = open_at_now(Path::new(dir), true).unwrap();
    // SAFETY: SIG_IGN installs no handler code; with SIGXFSZ ignored a write past RLIMIT_FSIZE
    // fails with EFBIG instead of killing the process.
    let previous = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    assert_ne!(previous, libc::SIG_ERR);
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or fill the one struct passed, nothing else.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl), 0);
        rl.rlim_cur = limit.min(rl.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0);
    }
    match maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}) {
        Ok(_) => println!("compacted"),
        Err(e) => println!("error: {e}"),
    }
}

/// Runs the child; returns its error message, or `None` when it compacted.
fn run_fsize_child(dir: &Path, limit: u64) -> Option<String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", FSIZE_HOST, "--nocapture", "--test-threads=1"])
        .env(FSIZE_ENV, format!("{},{limit}", dir.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the compaction did not end cleanly: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    if stdout.contains("compacted") {
        return None;
    }
    // The harness's "test NAME ... " has no newline before the child's line.
    let message = stdout
        .lines()
        .find_map(|l| l.split_once("error: ").map(|(_, m)| m.to_string()));
    Some(message.unwrap_or_else(|| panic!("no outcome in the child's output:\n{stdout}")))
}

#[test]
fn a_file_size_limit_stops_compaction_cleanly() {
    if let Ok(spec) = std::env::var(FSIZE_ENV) {
        fsize_compact_child(&spec);
        return;
    }
    let t = template();
    let work = tempfile::tempdir().unwrap();
    // The new container's datafile, preallocated once for the values it will hold (about
    // 600 KB here), is the largest write a compaction makes; below it the limit meets the
    // generation file's rewrite, the perm or the new container.
    let limits = [600u64, 4096, 64 << 10, (256 << 10) + 4321];
    for limit in limits {
        let dir = work.path().join(format!("l{limit}"));
        copy_dir(&t.dir, &dir);
        let message = run_fsize_child(&dir, limit)
            .unwrap_or_else(|| panic!("a compaction under a {limit}-byte limit succeeded"));
        println!("limit {limit}: {message}");
        assert!(message.contains("File too large"), "{limit}: {message}");
        assert!(
            message.contains(&dir.display().to_string()),
            "the error names no file of the store: {message}"
        );
        let log = verify_recovered(&t, &dir)
            .unwrap_or_else(|e| panic!("after a failure at a {limit}-byte limit: {e}"));
        println!("limit {limit}: recovery {log:?}");
        compact_fully(&t, &dir).unwrap_or_else(|e| panic!("without the {limit}-byte limit: {e}"));
    }
}

// ---- the free-space check ------------------------------------------------------------------

/// The child, in a copy of this binary run with `WINK_COMPACT_TMPFS_CHILD=TEMPLATE,MOUNT` inside
/// a mount namespace where MOUNT is a small tmpfs: copies the template there and compacts, which
/// must refuse with `Error::Full`; then checks that the store is as it was.
fn tmpfs_compact_child(spec: &str) {
    let (template_dir, mount) = spec.split_once(',').expect("TEMPLATE,MOUNT");
    let expected = view(&open_at_now(Path::new(template_dir), false).unwrap());
    let dir = Path::new(mount).join("store");
    copy_dir(Path::new(template_dir), &dir);
    let mut s = open_at_now(&dir, true).unwrap();
    // The current container is left as it is: sealing it would give back its 16 MiB of
    // preallocated room, enough for the check to pass.
    let opts = CompactOptions {
        seal_current: false,
        ..CompactOptions::default()
    };
    let err = maintenance::compact(&mut s, &opts, |_, _| {}).unwrap_err();
    assert!(matches!(err, Error::Full { .. }), "{err}");
    assert_eq!(err.exit_code(), 2);
    println!("refused: {err}");
    let g = s.generation().unwrap();
    assert!(g.pending == 0 && g.moves.is_empty(), "{g:?}");
    drop(s);
    let s = open_at_now(&dir, true).unwrap();
    assert_eq!(view(&s), expected);
    drop(s);
    data_ids(&dir).unwrap();
    let report = check_store(&dir);
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    println!("store intact");
    // With room, the same store compacts.
    let remount = Command::new("mount")
        .args(["-o", "remount,size=256m", mount])
        .status()
        .unwrap();
    assert!(remount.success());
    let mut s = open_at_now(&dir, true).unwrap();
    let report = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    assert!(report.reclaimed() > 0, "{report:#?}");
    assert_eq!(view(&s), expected);
    drop(s);
    let report = check_store(&dir);
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    println!("compacted with room");
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[test]
fn the_free_space_check_refuses_to_start() {
    if let Ok(spec) = std::env::var(TMPFS_ENV) {
        tmpfs_compact_child(&spec);
        return;
    }
    let probe = Command::new("unshare")
        .args(["-rm", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        common::require::skip(
            "compaction's free-space check on a small tmpfs",
            "`unshare -rm` cannot make a user and mount namespace here",
        );
        return;
    }
    let t = template();
    let mount = tempfile::tempdir().unwrap();
    // Room for the template and 1 MiB: less than the room the check keeps for the generation
    // file and the records' commit.
    let size = dir_bytes(&t.dir) + (1 << 20);
    let script = format!(
        "mount -t tmpfs -o size={size} tmpfs \"$1\" && exec \"$2\" --exact {TMPFS_HOST} \
         --nocapture --test-threads=1"
    );
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script, "sh"])
        .arg(mount.path())
        .arg(std::env::current_exe().unwrap())
        .env(
            TMPFS_ENV,
            format!("{},{}", t.dir.display(), mount.path().display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("compacted with room"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
