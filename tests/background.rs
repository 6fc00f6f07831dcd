//! Maintenance beside a live writer: culling as an operation changes no read result, and the
//! background thread culls, archives and compacts a store that other threads keep putting into
//! and reading from through the same `Arc<Mutex<Store>>`, losing no write.
//!
//! - `a_cull_changes_no_read_result_now_or_later`: two stores take the same operations; one is
//!   also culled in small steps at random moments. After every step, every read (list, latest,
//!   each revision, each render ever put) at the present and at four later clock values answers
//!   the same in both, and puts are refused or taken alike — under four policies, with and
//!   without an archive.
//! - `background_maintenance_beside_writers_and_readers_loses_nothing_and_reclaims_space`: the
//!   thread runs while a writer puts and a reader reads; afterwards every render an independent
//!   model says is readable reads back byte for byte with the model's state (archived for the
//!   revisions that left the hot tier), untouched titles read as before maintenance, nothing else
//!   is listed, the space of dead values is reclaimed, and the store checks clean after a reopen.
//! - `errors_are_kept_in_the_status_and_a_poisoned_lock_stops_the_thread`.
//! - `wink_cull_reports_and_changes_no_read`: the CLI verb, its report and exit codes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use uuid::Uuid;
use wink::clock::{Clock, ManualClock};
use wink::maintenance;
use wink::maintenance::background::{Maintenance, MaintenanceOptions};
use wink::store::key::tid_at;
use wink::store::policy::{ArchivePolicy, Renders};
use wink::store::Which;
use wink::store::{
    Config, Got, Listed, Page, Policy, Put, Revisions, State, Store, StoreOptions, TitleCursor,
};
use wink_harness::sim::SimDisk;

mod common;

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";
const T: i64 = 1_700_000_000;

fn title(t: usize) -> String {
    format!("Page_{t}/sub")
}

/// Deterministic bytes that name their title, revision and render.
fn value(t: usize, rev: u64, n: u64, len: usize) -> Vec<u8> {
    let head = format!("<p>title {t} rev {rev} render {n}</p>");
    let seed = (t as u64) << 40 ^ rev << 16 ^ n ^ 0x9E37_79B9_7F4A_7C15;
    common::lettered(head, seed, len)
}

fn options(clock: &Arc<ManualClock>, vfs: Option<SimDisk>) -> StoreOptions {
    let base = StoreOptions::writer();
    StoreOptions {
        clock: clock.clone(),
        vfs: match vfs {
            Some(disk) => Arc::new(disk),
            None => base.vfs.clone(),
        },
        ..base
    }
}

// ---- culling changes no read ------------------------------------------------------------

/// One answer of a read.
#[derive(Debug, PartialEq)]
enum Answer {
    List(Vec<Listed>),
    Got(Option<Got>),
}

/// Every answer the store gives at the clock's present and at later times, each labelled.
fn observe(
    store: &Store,
    clock: &ManualClock,
    titles: usize,
    max_rev: u64,
    universe: &[(usize, u64, Uuid)],
) -> Vec<(String, Answer)> {
    let now = clock.now();
    let mut out = Vec::new();
    for dt in [0, 9, 31, 120, 1000] {
        clock.set(now + dt);
        for t in 0..titles {
            let name = title(t);
            let list = store.list(D, &name, Page::default()).unwrap();
            out.push((format!("+{dt} list {t}"), Answer::List(list)));
            let latest = store.get(D, &name, Which::Latest).unwrap();
            out.push((format!("+{dt} latest {t}"), Answer::Got(latest)));
            for rev in 1..=max_rev {
                let got = store.get(D, &name, Which::Rev(rev)).unwrap();
                out.push((format!("+{dt} rev {t}/{rev}"), Answer::Got(got)));
            }
            for (_, rev, tid) in universe.iter().filter(|u| u.0 == t) {
                let got = store.get(D, &name, Which::Render(*rev, *tid)).unwrap();
                out.push((format!("+{dt} render {t}/{rev}/{tid}"), Answer::Got(got)));
            }
        }
    }
    clock.set(now);
    out
}

fn assert_same(culled: &[(String, Answer)], plain: &[(String, Answer)], when: &str) {
    assert_eq!(culled.len(), plain.len());
    for (a, b) in culled.iter().zip(plain) {
        assert_eq!(a.0, b.0);
        assert!(
            a.1 == b.1,
            "{when}: {} differs after culling:\n{:?}\n{:?}",
            a.0,
            a.1,
            b.1
        );
    }
}

/// Runs random operations against two stores, culling one of them in steps of two titles at
/// random moments (a pass goes on across operations); compares every read after each step.
/// `late` lets puts carry tids older than the revision's newest (late arrivals). Returns the
/// renders culled.
fn twin_run(cfg: &Config, seed: u64, late: bool) -> u64 {
    const TITLES: usize = 5;
    let (ca, cb) = (Arc::new(ManualClock::new(T)), Arc::new(ManualClock::new(T)));
    let dir = Path::new("/s");
    let (da, db) = (SimDisk::new(), SimDisk::new());
    Store::init(dir, cfg, &options(&ca, Some(da.clone()))).unwrap();
    Store::init(dir, cfg, &options(&cb, Some(db.clone()))).unwrap();
    let mut a = Store::open(dir, &options(&ca, Some(da))).unwrap();
    let mut b = Store::open(dir, &options(&cb, Some(db))).unwrap();
    let mut rng = common::Rng(seed);
    let mut universe: Vec<(usize, u64, Uuid)> = Vec::new();
    let mut top = [0u64; TITLES];
    let mut cursor = TitleCursor::new();
    let (mut culled, mut counter) = (0u64, 0u16);
    for step in 0..140 {
        let t = rng.below(TITLES as u64) as usize;
        let now = ca.now();
        match rng.below(20) {
            0..=9 => {
                let rev = match rng.below(4) {
                    0 if top[t] > 1 => 1 + rng.below(top[t]),
                    1 | 2 => {
                        top[t] += 1;
                        top[t]
                    }
                    _ => top[t].max(1),
                };
                top[t] = top[t].max(rev);
                let same = universe
                    .iter()
                    .filter(|u| u.0 == t && u.1 == rev)
                    .map(|u| u.2)
                    .next_back();
                let tid = match (rng.below(6), same) {
                    // The same render written again: its value replaced, its deadlines restarted.
                    (0, Some(tid)) => tid,
                    (1, _) if late => tid_at(now - 1 - rng.below(200) as i64, counter, [7; 6]),
                    _ => tid_at(now, counter, [1; 6]),
                };
                counter = counter.wrapping_add(1);
                let v = value(t, rev, step, 200 + rng.below(600) as usize);
                let put = Put {
                    domain: D,
                    title: &title(t),
                    rev,
                    tid: Some(tid),
                    content_type: HTML,
                    labels: &wink::store::Labels::NONE,
                    value: &v,
                    historical: rng.below(8) == 0,
                };
                let (ra, rb) = (a.put(&put), b.put(&put));
                assert_eq!(ra.is_ok(), rb.is_ok(), "step {step}: {ra:?} / {rb:?}");
                universe.push((t, rev, tid));
            }
            10 if top[t] > 0 => {
                let rev = (rng.below(3) > 0).then(|| 1 + rng.below(top[t]));
                assert_eq!(
                    a.take_down(D, &title(t), rev).unwrap(),
                    b.take_down(D, &title(t), rev).unwrap()
                );
            }
            11 if top[t] > 0 => {
                let rev = (rng.below(2) > 0).then(|| 1 + rng.below(top[t]));
                assert_eq!(
                    a.lift(D, &title(t), rev).unwrap(),
                    b.lift(D, &title(t), rev).unwrap()
                );
            }
            12..=15 => {
                let secs = 1 + rng.below(25) as i64;
                ca.advance(secs);
                cb.advance(secs);
            }
            _ => {
                if cursor.is_done() {
                    cursor = TitleCursor::new();
                }
                culled += maintenance::cull_due(&mut a, &mut cursor, 2)
                    .unwrap()
                    .renders_culled;
                let max = top.iter().copied().max().unwrap_or(0);
                assert_same(
                    &observe(&a, &ca, TITLES, max, &universe),
                    &observe(&b, &cb, TITLES, max, &universe),
                    &format!("seed {seed} step {step}"),
                );
            }
        }
    }
    // A whole cull at the end, and one more that finds nothing left.
    culled += maintenance::cull_all(&mut a, |_, _| {})
        .unwrap()
        .renders_culled;
    let max = top.iter().copied().max().unwrap_or(0);
    assert_same(
        &observe(&a, &ca, TITLES, max, &universe),
        &observe(&b, &cb, TITLES, max, &universe),
        &format!("seed {seed}, the end"),
    );
    assert_eq!(
        maintenance::cull_all(&mut a, |_, _| {})
            .unwrap()
            .renders_culled,
        0
    );
    culled
}

fn config(renders: Renders, ttl: i64, archive: Option<ArchivePolicy>) -> Config {
    Config {
        policy: Policy {
            revisions: Revisions::Recent { ttl },
            renders,
            historical_ttl: 40,
        },
        archive,
        ..Config::default()
    }
}

#[test]
fn a_cull_changes_no_read_result_now_or_later() {
    let cases = [
        (
            config(
                Renders::Latest {
                    count: 1,
                    grace: 10,
                },
                60,
                None,
            ),
            true,
        ),
        (
            config(
                Renders::Interval {
                    secs: 20,
                    count: 1,
                    grace: 15,
                },
                45,
                Some(ArchivePolicy::Newest),
            ),
            true,
        ),
        (
            config(
                Renders::Latest { count: 2, grace: 5 },
                60,
                Some(ArchivePolicy::First),
            ),
            true,
        ),
        // One per interval of tid time is decided over the renders present, oldest first: a
        // late arrival with an older tid shifts which are kept, so this case has none.
        (
            config(
                Renders::Ttl { ttl: 50 },
                80,
                Some(ArchivePolicy::Every { secs: 15 }),
            ),
            false,
        ),
    ];
    for (i, (cfg, late)) in cases.iter().enumerate() {
        let culled = twin_run(cfg, 0x5EED_0000 + i as u64 * 7919, *late);
        // Otherwise the comparison proved nothing.
        assert!(culled > 0, "case {i}: nothing was culled");
    }
}

// ---- the background thread ----------------------------------------------------------------

const TITLES: usize = 40;
/// Titles the writer keeps putting to while maintenance runs.
const HOT: usize = 10;
const TTL: i64 = 100;
/// Title 3's revision 2 is taken down; title 5 is taken down whole.
const DOWN_REV: (usize, u64) = (3, 2);
const DOWN_TITLE: usize = 5;

/// What the model knows of a render: its key, bytes and the state it must be listed with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Known {
    rev: u64,
    tid: Uuid,
    value: Vec<u8>,
}

fn background_config() -> Config {
    Config {
        policy: common::recent_policy(TTL),
        container_bytes: 128 << 10,
        archive: Some(ArchivePolicy::Newest),
        ..Config::default()
    }
}

/// Revisions 1 to 4 of every title, each rendered twice, 10 s apart; returns every render put
/// by title, in order.
fn populate(store: &mut Store, clock: &ManualClock) -> BTreeMap<usize, Vec<Known>> {
    let mut puts: BTreeMap<usize, Vec<Known>> = BTreeMap::new();
    let mut counter = 0u16;
    for rev in 1..=4u64 {
        for n in 0..2u64 {
            let mut batch = store.batch();
            for t in 0..TITLES {
                let v = value(t, rev, n, 2000 + (t * 131 + rev as usize * 17) % 4000);
                let tid = tid_at(clock.now(), counter, [2; 6]);
                counter = counter.wrapping_add(1);
                batch
                    .put(&Put {
                        domain: D,
                        title: &title(t),
                        rev,
                        tid: Some(tid),
                        content_type: HTML,
                        labels: &wink::store::Labels::NONE,
                        value: &v,
                        historical: false,
                    })
                    .unwrap();
                puts.entry(t)
                    .or_default()
                    .push(Known { rev, tid, value: v });
            }
            batch.commit().unwrap();
            clock.advance(10);
        }
    }
    store
        .take_down(D, &title(DOWN_REV.0), Some(DOWN_REV.1))
        .unwrap();
    store.take_down(D, &title(DOWN_TITLE), None).unwrap();
    puts
}

/// The model at a time past revision 1-3's recent window and revision 4's pushed-out renders'
/// grace, with no time passing after `writes` began: per title, (rev, tid) → (value, state),
/// newest first. Each revision's newest render of the population stays readable (1 to 3 from
/// the archive, 4 current — or recent once a write made a newer revision); every write during
/// maintenance is readable (none has reached a deadline), those of its last revision current.
fn model(
    population: &BTreeMap<usize, Vec<Known>>,
    writes: &BTreeMap<usize, Vec<Known>>,
    t: usize,
) -> Vec<(u64, Uuid, Vec<u8>, State)> {
    if t == DOWN_TITLE {
        return Vec::new();
    }
    let mut out: Vec<(u64, Uuid, Vec<u8>, State)> = Vec::new();
    let wrote = writes.get(&t).filter(|w| !w.is_empty());
    for rev in 1..=4u64 {
        if (t, rev) == DOWN_REV {
            continue;
        }
        let newest = population[&t].iter().rev().find(|k| k.rev == rev).unwrap();
        let state = match (rev, wrote) {
            (4, None) => State::Current,
            (4, Some(_)) => State::Recent,
            _ => State::Archived,
        };
        out.push((rev, newest.tid, newest.value.clone(), state));
    }
    if let Some(w) = wrote {
        let current = w.iter().map(|k| k.rev).max();
        for k in w {
            let state = if Some(k.rev) == current {
                State::Current
            } else {
                State::Recent
            };
            out.push((k.rev, k.tid, k.value.clone(), state));
        }
    }
    out.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| wink::store::key::cmp_tid(b.1, a.1))
    });
    out
}

/// Checks a title against the model: the listing (keys, sizes, states) and every render's bytes.
fn check_title(store: &Store, t: usize, want: &[(u64, Uuid, Vec<u8>, State)]) {
    let name = title(t);
    let listed: Vec<(u64, Uuid, u64, State)> = store
        .list(D, &name, Page::default())
        .unwrap()
        .into_iter()
        .map(|l: Listed| (l.rev, l.tid, l.size, l.state))
        .collect();
    let expected: Vec<(u64, Uuid, u64, State)> = want
        .iter()
        .map(|w| (w.0, w.1, w.2.len() as u64, w.3))
        .collect();
    assert_eq!(listed, expected, "title {t}");
    for (rev, tid, v, state) in want {
        let got = store
            .get(D, &name, Which::Render(*rev, *tid))
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.rev, got.tid, got.state),
            (*rev, *tid, *state),
            "title {t}"
        );
        assert!(
            got.value == *v,
            "title {t} rev {rev} tid {tid}: other bytes"
        );
    }
    let latest = store.get(D, &name, Which::Latest).unwrap();
    assert_eq!(
        latest.map(|g| (g.rev, g.tid, g.value)),
        want.first().map(|w| (w.0, w.1, w.2.clone())),
        "title {t}: latest"
    );
}

/// Everything a title's listing says, with each render's bytes (before maintenance).
fn answers(store: &Store, t: usize) -> Vec<(Listed, Got)> {
    let name = title(t);
    store
        .list(D, &name, Page::default())
        .unwrap()
        .into_iter()
        .map(|l| {
            let got = store
                .get(D, &name, Which::Render(l.rev, l.tid))
                .unwrap()
                .unwrap();
            (l, got)
        })
        .collect()
}

/// The same render, but for the state: an archived one was a hot candidate before.
fn same_but_archived(before: &[(Listed, Got)], after: &[(Listed, Got)]) -> bool {
    before.len() == after.len()
        && before.iter().zip(after).all(|((lb, gb), (la, ga))| {
            let state_ok =
                la.state == lb.state || (lb.state == State::Recent && la.state == State::Archived);
            (lb.rev, lb.tid, lb.size, &lb.content_type)
                == (la.rev, la.tid, la.size, &la.content_type)
                && state_ok
                && gb.value == ga.value
                && ga.state == la.state
        })
}

#[test]
fn background_maintenance_beside_writers_and_readers_loses_nothing_and_reclaims_space() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T));
    Store::init(dir.path(), &background_config(), &options(&clock, None)).unwrap();
    let mut store = Store::open(dir.path(), &options(&clock, None)).unwrap();
    let population = populate(&mut store, &clock);
    // Revisions 1-3 have left the hot tier, revision 4's older render is past its grace.
    clock.set(T + 1000);
    let before: Vec<Vec<(Listed, Got)>> = (0..TITLES).map(|t| answers(&store, t)).collect();
    for (t, answers) in before.iter().enumerate() {
        let hot_model = model(&population, &BTreeMap::new(), t);
        let listed: Vec<(u64, Uuid)> = answers.iter().map(|a| (a.0.rev, a.0.tid)).collect();
        let want: Vec<(u64, Uuid)> = hot_model.iter().map(|m| (m.0, m.1)).collect();
        assert_eq!(listed, want, "title {t} before maintenance");
    }
    let stat_before = store.stat().unwrap();

    let store = Arc::new(Mutex::new(store));
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let writer = {
        let (store, done) = (store.clone(), done.clone());
        thread::spawn(move || {
            let mut writes: BTreeMap<usize, Vec<Known>> = BTreeMap::new();
            let mut i = 0u64;
            let mut n = 0;
            while !done.load(Ordering::SeqCst) || n < 40 {
                let t = (i % HOT as u64) as usize;
                if t == DOWN_TITLE {
                    i += 1;
                    continue;
                }
                // Two renders of each new revision of each title.
                let rev = 5 + i / HOT as u64 / 2;
                let v = value(t, rev, 100 + i, 300 + (i as usize * 37) % 700);
                let tid = store
                    .lock()
                    .unwrap()
                    .put(&Put::new(D, &title(t), rev, HTML, &v))
                    .unwrap();
                writes
                    .entry(t)
                    .or_default()
                    .push(Known { rev, tid, value: v });
                n += 1;
                i += 1;
                if i >= 2000 {
                    break;
                }
                thread::sleep(Duration::from_millis(1));
            }
            writes
        })
    };
    let reader = {
        let (store, done, reads) = (store.clone(), done.clone(), reads.clone());
        let before = before.clone();
        thread::spawn(move || {
            let mut i = 0usize;
            while !done.load(Ordering::SeqCst) {
                let t = HOT + i % (TITLES - HOT);
                let now = answers(&store.lock().unwrap(), t);
                assert!(same_but_archived(&before[t], &now), "title {t} mid-run");
                let s = store.lock().unwrap();
                let latest = s.get(D, &title(i % HOT), Which::Latest).unwrap();
                assert_eq!(latest.is_none(), i % HOT == DOWN_TITLE);
                assert!(latest.is_none_or(|g| g.rev >= 4));
                drop(s);
                reads.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
        })
    };
    let maintenance = Maintenance::spawn(
        store.clone(),
        MaintenanceOptions {
            interval: Duration::from_millis(5),
            max_mbps: None,
            seal_current: true,
            step_titles: 8,
            ..MaintenanceOptions::default()
        },
    )
    .unwrap();
    let status = maintenance.wait_rounds(3, Duration::from_secs(120));
    assert!(status.rounds >= 3, "{status:?}");
    done.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    reader.join().unwrap();
    // With the writes over and the clock still, the store settles: a round finds nothing more
    // to cull, archive or compact (a freshly compacted container is not rewritten again).
    let settled = maintenance.wait_rounds(status.rounds + 2, Duration::from_secs(120));
    let again = maintenance.wait_rounds(settled.rounds + 2, Duration::from_secs(120));
    assert_eq!(again.rounds, settled.rounds + 2, "{again:?}");
    assert_eq!(
        (
            again.culled.renders_culled,
            again.archived.revisions,
            again.compacted
        ),
        (
            settled.culled.renders_culled,
            settled.archived.revisions,
            settled.compacted
        ),
        "{again:?}"
    );
    let status = maintenance.stop();
    assert!(!status.running);
    assert_eq!(status.errors, 0, "{:?}", status.last_error);
    assert!(status.culled.renders_culled > 0, "{status:?}");
    // Revisions 1-3 of every title but the one taken down whole, less the revision taken down.
    assert_eq!(status.archived.revisions, 3 * (TITLES as u64 - 1) - 1);
    assert!(
        status.compacted > 0 && status.reclaimed_bytes > 0,
        "{status:?}"
    );
    assert!(reads.load(Ordering::SeqCst) > 0);
    assert!(writes.values().map(Vec::len).sum::<usize>() >= 40);

    let mut store = Arc::into_inner(store).unwrap().into_inner().unwrap();
    for (t, earlier) in before.iter().enumerate() {
        check_title(&store, t, &model(&population, &writes, t));
        if t >= HOT {
            assert!(same_but_archived(earlier, &answers(&store, t)), "title {t}");
        }
    }
    // The take-downs hold: their puts are still refused.
    assert!(store
        .put(&Put::new(D, &title(DOWN_TITLE), 9, HTML, b"x"))
        .is_err());
    assert!(store
        .put(&Put::new(D, &title(DOWN_REV.0), DOWN_REV.1, HTML, b"x"))
        .is_err());
    let stat_after = store.stat().unwrap();
    let written: u64 = writes
        .values()
        .flatten()
        .map(|k| k.value.len() as u64)
        .sum();
    // The dead values of the population are gone from the containers: what is left is the live
    // values, the writes, and the containers' own bookkeeping.
    assert!(
        stat_after.dead_bytes * 4 < stat_before.dead_bytes,
        "dead bytes {} before, {} after",
        stat_before.dead_bytes,
        stat_after.dead_bytes
    );
    assert!(stat_after.container_bytes < stat_before.container_bytes / 2 + written);
    drop(store);

    // Reopened, it reads the same, and checks clean.
    let store = Store::open(dir.path(), &options(&clock, None)).unwrap();
    for t in 0..TITLES {
        check_title(&store, t, &model(&population, &writes, t));
    }
    drop(store);
    common::assert_checks_clean(dir.path());
}

#[test]
fn errors_are_kept_in_the_status_and_a_poisoned_lock_stops_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T));
    Store::init(dir.path(), &background_config(), &options(&clock, None)).unwrap();
    let mut store = Store::open(dir.path(), &options(&clock, None)).unwrap();
    populate(&mut store, &clock);
    clock.set(T + 1000);
    // A sealed container's header damaged: every compaction survey fails on it.
    let first = dir.path().join("c000001.data");
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[..8].copy_from_slice(b"garbage!");
    std::fs::write(&first, &bytes).unwrap();

    let store = Arc::new(Mutex::new(store));
    let opts = MaintenanceOptions {
        interval: Duration::from_secs(3600),
        max_mbps: None,
        ..MaintenanceOptions::default()
    };
    let maintenance = Maintenance::spawn(store.clone(), opts.clone()).unwrap();
    let status = maintenance.wait_rounds(1, Duration::from_secs(60));
    assert_eq!(status.rounds, 1, "{status:?}");
    maintenance.run_now();
    let status = maintenance.wait_rounds(2, Duration::from_secs(60));
    assert_eq!(status.rounds, 2, "{status:?}");
    // One error a round; the rest of the round's work was done.
    assert_eq!(status.errors, 2, "{status:?}");
    let error = status.last_error.clone().unwrap();
    assert!(
        error.starts_with("compaction survey") && error.contains("c000001.data"),
        "{error}"
    );
    assert!(status.culled.renders_culled > 0 && status.archived.revisions > 0);
    assert!(status.running);

    // A thread that panics holding the lock poisons it: the maintenance thread stops by itself.
    let poisoner = store.clone();
    assert!(thread::spawn(move || {
        let _held = poisoner.lock().unwrap();
        panic!("a user thread panics holding the store");
    })
    .join()
    .is_err());
    maintenance.run_now();
    let status = maintenance.wait_rounds(u64::MAX, Duration::from_secs(60));
    assert!(!status.running, "{status:?}");
    assert!(
        status.last_error.as_deref().unwrap().contains("poisoned"),
        "{status:?}"
    );
    assert_eq!(maintenance.stop().rounds, 2);
    // Nor does a new one start on it, or on a read-only handle.
    assert!(Maintenance::spawn(store, opts.clone()).is_err());
    let reader = Store::open(
        dir.path(),
        &StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::read_only()
        },
    )
    .unwrap();
    assert!(Maintenance::spawn(Arc::new(Mutex::new(reader)), opts).is_err());
}

// ---- wink cull ------------------------------------------------------------------------------

fn wink(args: &[&str], now: i64) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(args)
        .env("WINK_NOW", now.to_string())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn wink_cull_reports_and_changes_no_read() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T));
    let cfg = Config {
        archive: None,
        ..background_config()
    };
    Store::init(dir.path(), &cfg, &options(&clock, None)).unwrap();
    let mut store = Store::open(dir.path(), &options(&clock, None)).unwrap();
    populate(&mut store, &clock);
    drop(store);
    let later = T + 1000;
    let read = |at: i64| -> Vec<Vec<(Listed, Got)>> {
        let c = Arc::new(ManualClock::new(at));
        let s = Store::open(
            dir.path(),
            &StoreOptions {
                clock: c,
                ..StoreOptions::read_only()
            },
        )
        .unwrap();
        (0..TITLES).map(|t| answers(&s, t)).collect()
    };
    let before = (read(later), read(later + 95), read(later + 10_000));
    let d = dir.path().to_str().unwrap();

    let (code, out, err) = wink(&["cull", d, "--json"], later);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // The puts culled as they went: each title kept revision 4's two renders and the newest of
    // revisions 1-3, recent when revision 4 arrived; all but revision 4's newest are past a
    // deadline now: 4 culled per title, 3 for title 3 (its revision 2 taken down), none for the
    // title taken down whole (a record of its marker only).
    assert_eq!(report["titles"], TITLES as u64);
    assert_eq!(report["titles_touched"], TITLES as u64 - 1);
    assert_eq!(report["renders_culled"], 4 * (TITLES as u64 - 2) + 3);
    assert!(report["dead_bytes"].as_u64().unwrap() > 0);
    // Reads at that time and later ones are what they were.
    assert!(before == (read(later), read(later + 95), read(later + 10_000)));

    let (code, out, _) = wink(&["cull", d], later);
    assert_eq!(code, 0);
    let fields: BTreeMap<&str, &str> = out.lines().filter_map(|l| l.split_once('\t')).collect();
    assert_eq!(fields["titles"], TITLES.to_string());
    assert_eq!(fields["renders_culled"], "0");
    assert_eq!(fields["titles_touched"], "0");

    let missing = dir.path().join("none");
    let (code, _, err) = wink(&["cull", missing.to_str().unwrap()], later);
    assert_eq!(code, 2, "{err}");
    let held = Store::open(dir.path(), &options(&clock, None)).unwrap();
    let (code, _, err) = wink(&["cull", d], later);
    assert_eq!(code, 4, "{err}");
    drop(held);
}
