//! Model-based test of the render store on a simulated disk, against a small model of its rules
//! (docs/INTERNALS.md § The render store's rules) written from the text, not from the store's
//! code: puts in any order of revisions and tids, rewrites of the same (revision, tid), batches,
//! historical puts, take-downs and lifts, reads of every kind, a clock moved onto retention
//! deadlines (one second before, then exactly at), reopens, readers, and power cuts (unsynced
//! writes dropped, or reordered and torn; also in the middle of an operation's commit).
//!
//! The model keeps, per render, the times of the events the rules count deadlines from —
//! arrival, superseded, pushed out — and decides readability from them alone:
//! - superseded at S: the arrival of a newer revision; or its own arrival when a newer revision was
//!   readable when it came (a newer revision that expired or was taken down supersedes nothing
//!   that arrives later). Readable until S + the recent TTL; the newest revision is never
//!   superseded.
//! - latest:C / interval:S:C: a render is pushed out at the arrival of the render that leaves at
//!   least C readable renders of its revision (in its tid interval) with precedence over it — its
//!   own arrival when it came in already outside; readable until then + grace.
//! - ttl:T: readable until arrival + T, whatever else holds (a stash).
//! - historical: readable until arrival + historical TTL; refused above the current revision.
//! - a rewrite of the same (revision, tid) is a new arrival: its deadlines restart.
//! - a take-down removes the values for good and refuses puts until lifted.
//! - "current" is the newest revision with a readable non-historical render.
//!
//! After a power cut the store must equal the model as of the last completed commit, or the state a
//! commit in flight was committing. A commit the store makes inside an operation (a container
//! rolling over, the title index growing) is seen through [`Store::commits`]. A take-down of
//! nothing, or a rewrite of an identical value, leaves no trace a read can see at once, so the
//! harness keeps every state that agrees with all reads so far ("worlds") and drops those a later
//! read contradicts.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use uuid::Uuid;
use wink::clock::{Clock, ManualClock};
use wink::store::Which;
use wink::store::{
    Config, Labels, Page, Policy, Put, Renders, Revisions, State, Store, StoreOptions, TidMaker,
};
use wink::Error;
use wink_harness::sim::{CrashMode, SimDisk};

#[path = "store_model/model.rs"]
mod model;

use model::{MRender, Model, Refused, Snapshot, TitleView, REVS, TITLES};

const DOMAIN: &str = "en.wikipedia.org";
const TYPES: [&str; 2] = ["text/html; charset=utf-8", "application/json"];

/// The labels put with a type: the second type's renders carry both, so the model checks that
/// labels travel with their render through commits, crashes and recovery as its type does.
fn labels(ct: usize) -> Labels {
    match ct {
        1 => Labels {
            encoding: Some("gzip".into()),
            language: Some("de".into()),
        },
        _ => Labels::NONE,
    }
}
/// Explicit tids, made at times the test chooses.
const POOL: usize = 6;
const T0: i64 = 1_700_000_000;
const DIR: &str = "/sim/store";
/// Large values fill the 1 MiB containers in a few puts, so that they roll over.
const LARGE: usize = 300 << 10;

fn store_snapshot(s: &Store) -> Snapshot {
    let titles = TITLES
        .iter()
        .map(|title| {
            let list = s.list(DOMAIN, title, Page::default()).unwrap();
            let renders = list
                .iter()
                .map(|l| {
                    s.get(DOMAIN, title, Which::Render(l.rev, l.tid))
                        .unwrap()
                        .unwrap()
                })
                .collect();
            TitleView {
                latest: s.get(DOMAIN, title, Which::Latest).unwrap(),
                by_rev: (0..REVS)
                    .map(|v| s.get(DOMAIN, title, Which::Rev(v)).unwrap())
                    .collect(),
                list,
                renders,
            }
        })
        .collect();
    let st = s.stat().unwrap();
    Snapshot {
        titles,
        stat: [st.titles, st.revisions, st.renders, st.live_bytes],
    }
}

// ---- operations -----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Value {
    Small(Vec<u8>),
    Large(u8),
}

impl Value {
    fn bytes(&self) -> Arc<[u8]> {
        match self {
            Value::Small(b) => b.clone().into(),
            Value::Large(seed) => (0..LARGE)
                .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                .collect(),
        }
    }
}

#[derive(Clone, Debug)]
struct PutOp {
    title: usize,
    rev: u64,
    /// An index into the explicit tids, or `None` for a tid the store generates.
    tid: Option<usize>,
    ct: usize,
    value: Value,
    historical: bool,
}

#[derive(Clone, Debug)]
enum Read {
    Latest(usize),
    Rev(usize, u64),
    Render(usize, u64, usize),
    List(usize, usize, usize),
}

#[derive(Clone, Debug)]
enum Op {
    /// One put, committed.
    Put(PutOp),
    /// Puts, then one commit.
    Batch(Vec<PutOp>),
    Read(Read),
    TakeDown(usize, Option<u64>),
    Lift(usize, Option<u64>),
    /// Lifts one of the take-downs in place (the n-th), if any.
    LiftOne(usize),
    Advance(i64),
    /// To one of the deadlines ahead: one second before it, then exactly at it.
    Deadline(usize),
    Reopen,
    /// A second, read-only handle sees what the writer committed.
    Reader,
    /// Power cut between operations; `hard`: the handle's last syncs fail too.
    Crash {
        reorder: bool,
        hard: bool,
        seed: u64,
    },
    /// Power cut at the `after`-th sync of a write operation.
    CrashIn {
        after: u64,
        op: Box<Op>,
        reorder: bool,
        seed: u64,
    },
}

fn title() -> impl Strategy<Value = usize> {
    prop_oneof![4 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize)]
}

fn put_op() -> impl Strategy<Value = PutOp> {
    let value = prop_oneof![
        7 => prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Small),
        1 => any::<u8>().prop_map(Value::Large),
    ];
    (
        title(),
        0..REVS,
        prop::option::weighted(0.7, 0..POOL),
        0..TYPES.len(),
        value,
        prop::bool::weighted(0.15),
    )
        .prop_map(|(title, rev, tid, ct, value, historical)| PutOp {
            title,
            rev,
            tid,
            ct,
            value,
            historical,
        })
}

/// A write to cut the power in. Its puts use explicit tids: a put that fails takes the tid the
/// store generated with it, and the state its commit may have left must be known.
fn write_op() -> impl Strategy<Value = Op> {
    let explicit = || {
        put_op().prop_map(|p| PutOp {
            tid: Some(p.tid.unwrap_or(p.rev as usize % POOL)),
            ..p
        })
    };
    prop_oneof![
        4 => explicit().prop_map(Op::Put),
        2 => prop::collection::vec(explicit(), 1..5).prop_map(Op::Batch),
        1 => (title(), prop::option::of(0..REVS)).prop_map(|(t, r)| Op::TakeDown(t, r)),
        1 => any::<usize>().prop_map(Op::LiftOne),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let read = prop_oneof![
        title().prop_map(Read::Latest),
        (title(), 0..REVS).prop_map(|(t, r)| Read::Rev(t, r)),
        (title(), 0..REVS, 0..POOL).prop_map(|(t, r, i)| Read::Render(t, r, i)),
        (title(), 0..6usize, 0..6usize).prop_map(|(t, o, l)| Read::List(t, o, l)),
    ];
    prop_oneof![
        12 => put_op().prop_map(Op::Put),
        3 => prop::collection::vec(put_op(), 1..5).prop_map(Op::Batch),
        2 => read.prop_map(Op::Read),
        1 => (title(), prop::option::weighted(0.8, 0..REVS)).prop_map(|(t, r)| Op::TakeDown(t, r)),
        1 => (title(), prop::option::weighted(0.5, 0..REVS)).prop_map(|(t, r)| Op::Lift(t, r)),
        1 => any::<usize>().prop_map(Op::LiftOne),
        4 => (1..20i64).prop_map(Op::Advance),
        5 => any::<usize>().prop_map(Op::Deadline),
        1 => Just(Op::Reopen),
        1 => Just(Op::Reader),
        1 => (any::<bool>(), any::<bool>(), any::<u64>())
            .prop_map(|(reorder, hard, seed)| Op::Crash { reorder, hard, seed }),
        2 => (1..10u64, write_op(), any::<bool>(), any::<u64>()).prop_map(
            |(after, op, reorder, seed)| Op::CrashIn { after, op: Box::new(op), reorder, seed }
        ),
    ]
}

/// The policies the test runs with: small TTLs, so that deadlines are crossed.
fn policies() -> Vec<Policy> {
    let p = |rv: &str, rn: &str, hist: i64| Policy {
        revisions: rv.parse().unwrap(),
        renders: rn.parse().unwrap(),
        historical_ttl: hist,
    };
    vec![
        p("recent:20", "latest:2:7", 15),
        p("recent:9", "latest:1:25", 40),
        p("all", "interval:30:1:9", 25),
        p("recent:30", "interval:20:2:5", 10),
        p("recent:11", "ttl:13", 5),
        p("all", "ttl:40", 50),
        p("recent:50", "all", 30),
        p("all", "all", 8),
    ]
}

// ---- the harness ----------------------------------------------------------------------------

/// One state of the store consistent with every read so far.
#[derive(Clone, Debug, PartialEq, Eq)]
struct World {
    cur: Model,
    /// What a power cut may leave.
    committed: Vec<Model>,
}

/// What a store call answered, in the terms the model predicts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Put(Result<(), Refused>),
    TakenDown(usize),
    Lifted(bool),
    Committed(usize),
}

/// A store error as the model sees it: a refusal, or `None` for anything else.
fn refusal(e: &Error) -> Option<Refused> {
    let Error::Invalid(text) = e else {
        return None;
    };
    if text.contains("taken down") {
        Some(Refused::TakenDown)
    } else if text.contains("newer than the current revision") {
        text.rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .map(Refused::NewerThanCurrent)
    } else {
        None
    }
}

/// A put's result as an answer, and the tid the store used.
fn put_answer(result: wink::Result<Uuid>) -> (wink::Result<Answer>, Option<Uuid>) {
    match result {
        Ok(tid) => (Ok(Answer::Put(Ok(()))), Some(tid)),
        Err(e) => match refusal(&e) {
            Some(r) => (Ok(Answer::Put(Err(r))), None),
            None => (Err(e), None),
        },
    }
}

/// Keeps the worlds `agrees` holds for; there must be one.
fn keep_agreeing(worlds: &mut Vec<World>, what: &dyn Debug, agrees: impl Fn(&World) -> bool) {
    assert!(
        worlds.iter().any(&agrees),
        "the store disagrees with every model state after {what:?}; the states were:\n{worlds:#?}"
    );
    worlds.retain(agrees);
}

/// Keeps the worlds whose reads show `seen`; there must be one.
fn agree_on(worlds: &mut Vec<World>, what: &dyn Debug, now: i64, seen: &Snapshot) {
    if !worlds.iter().any(|w| w.cur.snapshot(now) == *seen) {
        let expected: Vec<Snapshot> = worlds.iter().map(|w| w.cur.snapshot(now)).collect();
        panic!(
            "after {what:?}, at T0+{}, the store shows\n{seen:#?}\nthe model expects one of\n\
             {expected:#?}\nfrom the states\n{worlds:#?}",
            now - T0
        );
    }
    worlds.retain(|w| w.cur.snapshot(now) == *seen);
}

/// How a store call went, for [`settle`].
struct Call<'a> {
    what: &'a dyn Debug,
    result: wink::Result<Answer>,
    /// The store committed during the call.
    committed: bool,
    /// A successful call ends with a commit (else a commit inside it came before its change).
    commits_at_end: bool,
    power_failing: bool,
}

/// Applies a store call to every world, keeps the worlds whose prediction matches the answer, and
/// tracks what a power cut may leave. Returns false when the call failed for want of power.
fn settle(worlds: &mut Vec<World>, call: Call<'_>, predict: impl Fn(&mut Model) -> Answer) -> bool {
    let failed = match &call.result {
        Err(e) => {
            assert!(call.power_failing, "{:?}: {e}", call.what);
            true
        }
        Ok(_) => false,
    };
    let mut predictions = Vec::new();
    for w in worlds.iter_mut() {
        let before = w.cur.clone();
        predictions.push(predict(&mut w.cur));
        if failed {
            // The commit in flight may have completed: one inside the call (a container rolling
            // over, which commits what came before the call) or the one at its end.
            w.committed.push(before);
            w.committed.push(w.cur.clone());
        } else if call.committed {
            let last = if call.commits_at_end {
                w.cur.clone()
            } else {
                before
            };
            w.committed = vec![last];
        }
    }
    if let Ok(answer) = &call.result {
        assert!(
            predictions.contains(answer),
            "{:?}: the store answered {answer:?}, the model {predictions:?}; states:\n{worlds:#?}",
            call.what
        );
        let mut agree = predictions.iter().map(|p| p == answer);
        worlds.retain(|_| agree.next() == Some(true));
    }
    !failed
}

fn new_render(p: &PutOp, tid: Uuid, value: &Arc<[u8]>) -> MRender {
    MRender {
        rev: p.rev,
        tid,
        ct: TYPES[p.ct],
        labels: labels(p.ct),
        value: value.clone(),
        historical: p.historical,
        arrival: 0,
        superseded: None,
        pushed_out: None,
    }
}

struct Harness {
    disk: SimDisk,
    clock: ManualClock,
    store: Option<Store>,
    worlds: Vec<World>,
    tids: Vec<Uuid>,
}

impl Harness {
    fn new(policy: Policy, tid_secs: &[i64]) -> Harness {
        let disk = SimDisk::new();
        let clock = ManualClock::new(T0);
        // One maker, asked in time order (it never steps back), hands the tids out to slots in
        // the order the test chose: tid order differs from slot order and from write order.
        let maker = TidMaker::new();
        let mut order: Vec<usize> = (0..POOL).collect();
        order.sort_by_key(|i| tid_secs[*i]);
        let mut tids = vec![Uuid::nil(); POOL];
        for i in order {
            tids[i] = maker.make(T0 + tid_secs[i]);
        }
        let empty = Model::new(policy);
        let mut h = Harness {
            disk,
            clock,
            store: None,
            worlds: vec![World {
                cur: empty.clone(),
                committed: vec![empty],
            }],
            tids,
        };
        let cfg = Config {
            policy,
            container_bytes: 1 << 20,
            max_value: 1 << 20,
            ..Config::default()
        };
        Store::init(Path::new(DIR), &cfg, &h.options(true)).unwrap();
        h.reopen();
        h
    }

    fn options(&self, writable: bool) -> StoreOptions {
        StoreOptions {
            writable,
            wait: false,
            clock: Arc::new(self.clock.clone()),
            vfs: Arc::new(self.disk.clone()),
            // Small: the model's titles outgrow it, so its evictions are exercised too.
            record_cache_bytes: 64 << 10,
        }
    }

    fn reopen(&mut self) {
        self.store = None;
        self.store = Some(Store::open(Path::new(DIR), &self.options(true)).unwrap());
    }

    fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Every read the store offers, against every world.
    fn check(&mut self, what: &dyn Debug) {
        let seen = store_snapshot(self.store.as_ref().expect("open"));
        agree_on(&mut self.worlds, what, self.clock.now(), &seen);
    }

    /// Picks the take-down a [`Op::LiftOne`] lifts.
    fn resolve(&self, op: Op) -> Op {
        match op {
            Op::LiftOne(n) => {
                let downs: Vec<(usize, Option<u64>)> = (self.worlds[0].cur.titles.iter())
                    .enumerate()
                    .flat_map(|(t, title)| {
                        let whole = title.title_down.then_some((t, None));
                        whole
                            .into_iter()
                            .chain(title.revs_down.iter().map(move |r| (t, Some(*r))))
                    })
                    .collect();
                let (t, rev) = downs
                    .get(n % downs.len().max(1))
                    .copied()
                    .unwrap_or((0, None));
                Op::Lift(t, rev)
            }
            Op::CrashIn {
                after,
                op,
                reorder,
                seed,
            } => Op::CrashIn {
                after,
                op: Box::new(self.resolve(*op)),
                reorder,
                seed,
            },
            op => op,
        }
    }

    fn apply(&mut self, op: Op) {
        let op = self.resolve(op);
        match op.clone() {
            Op::Put(_) | Op::Batch(_) | Op::TakeDown(..) | Op::Lift(..) => self.write(&op, false),
            Op::LiftOne(_) => unreachable!("resolved"),
            Op::Read(r) => self.read(r),
            Op::Advance(secs) => self.clock.advance(secs),
            Op::Deadline(pick) => {
                let ahead = self.worlds[0].cur.deadlines(self.now());
                if let Some(d) = ahead.get(pick % ahead.len().max(1)).copied() {
                    self.clock.set(d - 1);
                    self.check(&("one second before the deadline", d));
                    self.clock.set(d);
                }
            }
            Op::Reopen => self.reopen(),
            Op::Reader => {
                let reader = Store::open(Path::new(DIR), &self.options(false)).unwrap();
                let now = self.now();
                agree_on(&mut self.worlds, &op, now, &store_snapshot(&reader));
            }
            Op::Crash {
                reorder,
                hard,
                seed,
            } => {
                if hard {
                    // The handle's last syncs (on drop) fail too: nothing more reaches the disk.
                    self.disk.fail_after_syncs(1);
                }
                self.crash(reorder, seed);
            }
            Op::CrashIn {
                after,
                op: inner,
                reorder,
                seed,
            } => {
                self.disk.fail_after_syncs(after);
                self.write(&inner, true);
                self.crash(reorder, seed);
            }
        }
        self.check(&op);
    }

    fn read(&mut self, r: Read) {
        let now = self.now();
        let s = self.store.as_ref().expect("open");
        match r {
            Read::Latest(t) => {
                let got = s.get(DOMAIN, TITLES[t], Which::Latest).unwrap();
                keep_agreeing(&mut self.worlds, &r, |w| {
                    w.cur.find(t, now, |_| true) == got
                });
            }
            Read::Rev(t, v) => {
                let got = s.get(DOMAIN, TITLES[t], Which::Rev(v)).unwrap();
                keep_agreeing(&mut self.worlds, &r, |w| {
                    w.cur.find(t, now, |x| x.rev == v) == got
                });
            }
            Read::Render(t, v, i) => {
                let tid = self.tids[i];
                let got = s.get(DOMAIN, TITLES[t], Which::Render(v, tid)).unwrap();
                keep_agreeing(&mut self.worlds, &r, |w| {
                    w.cur.find(t, now, |x| x.rev == v && x.tid == tid) == got
                });
            }
            Read::List(t, offset, limit) => {
                let page = Page { offset, limit };
                let got = s.list(DOMAIN, TITLES[t], page).unwrap();
                keep_agreeing(&mut self.worlds, &r, |w| w.cur.list(t, page, now) == got);
            }
        }
    }

    /// Runs a write operation. With `power_failing`, an I/O error ends it.
    fn write(&mut self, op: &Op, power_failing: bool) {
        let now = self.now();
        match op {
            Op::Put(p) => {
                let value = p.value.bytes();
                let tid = p.tid.map(|i| self.tids[i]);
                let store = self.store.as_mut().expect("open");
                let commits = store.commits();
                let result = store.put(&Put {
                    domain: DOMAIN,
                    title: TITLES[p.title],
                    rev: p.rev,
                    tid,
                    content_type: TYPES[p.ct],
                    labels: &labels(p.ct),
                    value: &value,
                    historical: p.historical,
                });
                let (result, used) = put_answer(result);
                let call = Call {
                    what: op,
                    result,
                    committed: store.commits() != commits,
                    commits_at_end: true,
                    power_failing,
                };
                let r = new_render(p, tid.or(used).unwrap_or_default(), &value);
                settle(&mut self.worlds, call, |m| {
                    Answer::Put(m.put(p.title, r.clone(), now))
                });
            }
            Op::Batch(puts) => self.batch(puts, power_failing),
            Op::TakeDown(t, rev) => {
                let store = self.store.as_mut().expect("open");
                let commits = store.commits();
                let result = store
                    .take_down(DOMAIN, TITLES[*t], *rev)
                    .map(Answer::TakenDown);
                let call = Call {
                    what: op,
                    result,
                    committed: store.commits() != commits,
                    commits_at_end: true,
                    power_failing,
                };
                settle(&mut self.worlds, call, |m| {
                    Answer::TakenDown(m.take_down(*t, *rev, now))
                });
            }
            Op::Lift(t, rev) => {
                let store = self.store.as_mut().expect("open");
                let commits = store.commits();
                let result = store.lift(DOMAIN, TITLES[*t], *rev).map(Answer::Lifted);
                let call = Call {
                    what: op,
                    result,
                    committed: store.commits() != commits,
                    commits_at_end: true,
                    power_failing,
                };
                settle(&mut self.worlds, call, |m| Answer::Lifted(m.lift(*t, *rev)));
            }
            _ => unreachable!("not a write: {op:?}"),
        }
    }

    /// Puts through one [`wink::store::Batch`], then its commit.
    fn batch(&mut self, puts: &[PutOp], power_failing: bool) {
        let now = self.now();
        let store = self.store.as_mut().expect("open");
        let mut batch = store.batch();
        let mut accepted = 0;
        for p in puts {
            let value = p.value.bytes();
            let tid = p.tid.map(|i| self.tids[i]);
            let commits = batch.store().commits();
            let result = batch.put(&Put {
                domain: DOMAIN,
                title: TITLES[p.title],
                rev: p.rev,
                tid,
                content_type: TYPES[p.ct],
                labels: &labels(p.ct),
                value: &value,
                historical: p.historical,
            });
            let (result, used) = put_answer(result);
            accepted += usize::from(matches!(result, Ok(Answer::Put(Ok(())))));
            let call = Call {
                what: p,
                result,
                committed: batch.store().commits() != commits,
                // Only a container rolling over commits inside a batch, before this put.
                commits_at_end: false,
                power_failing,
            };
            let r = new_render(p, tid.or(used).unwrap_or_default(), &value);
            if !settle(&mut self.worlds, call, |m| {
                Answer::Put(m.put(p.title, r.clone(), now))
            }) {
                return;
            }
        }
        let commits = batch.store().commits();
        let result = batch.commit().map(Answer::Committed);
        let store = self.store.as_ref().expect("open");
        let call = Call {
            what: &"batch commit",
            result,
            committed: store.commits() != commits,
            commits_at_end: true,
            power_failing,
        };
        settle(&mut self.worlds, call, |_| Answer::Committed(accepted));
    }

    /// Cuts the power, reopens, and keeps the committed states the store shows.
    fn crash(&mut self, reorder: bool, seed: u64) {
        let mode = if reorder {
            CrashMode::Reorder { seed }
        } else {
            CrashMode::DropUnsynced
        };
        self.store = None;
        self.disk.crash(mode);
        self.reopen();
        let now = self.now();
        let seen = store_snapshot(self.store.as_ref().expect("open"));
        let mut survivors: Vec<World> = Vec::new();
        for w in &self.worlds {
            for c in &w.committed {
                let world = World {
                    cur: c.clone(),
                    committed: vec![c.clone()],
                };
                if c.snapshot(now) == seen && !survivors.contains(&world) {
                    survivors.push(world);
                }
            }
        }
        assert!(
            !survivors.is_empty(),
            "after the power cut the store shows\n{seen:#?}\nwhich is none of the states that \
             may have survived:\n{:#?}",
            self.worlds
        );
        self.worlds = survivors;
    }
}

fn run(policy: Policy, tid_secs: &[i64], ops: Vec<Op>) {
    let mut h = Harness::new(policy, tid_secs);
    for op in ops {
        h.apply(op);
    }
    h.reopen();
    h.check(&"final reopen");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model(
        policy in prop::sample::select(policies()),
        tid_secs in prop::collection::vec(0..90i64, POOL),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(policy, &tid_secs, ops);
    }
}

// ---- regressions found while writing the model ---------------------------------------------

fn sim_store(disk: &SimDisk, clock: &ManualClock, policy: Policy) -> (Store, StoreOptions) {
    let opts = StoreOptions {
        writable: true,
        wait: false,
        clock: Arc::new(clock.clone()),
        vfs: Arc::new(disk.clone()),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        policy,
        ..Config::default()
    };
    Store::init(Path::new(DIR), &cfg, &opts).unwrap();
    (Store::open(Path::new(DIR), &opts).unwrap(), opts)
}

/// The meta filesys commits on its own before it grows its index (at 768 titles, then 1536, …).
/// Inside an uncommitted batch that commit made title records durable whose values were still in
/// the container's unsynced tail: after a power cut, reads of 99 of these titles failed with
/// "corrupt: value checksum". Now every title is readable byte-exact, or absent.
#[test]
fn a_batch_crossing_an_index_growth_leaves_no_record_without_its_value() {
    let (disk, clock) = (SimDisk::new(), ManualClock::new(T0));
    let (mut s, opts) = sim_store(&disk, &clock, Policy::default());
    // The containers' index grows on its own schedule: put it 100 entries ahead of the meta's.
    for rev in 0..100u64 {
        s.put(&Put::new(DOMAIN, "Busy", rev, TYPES[0], b"x"))
            .unwrap();
    }
    let commits = s.commits();
    let value = |i: u32| format!("value of T{i}").into_bytes();
    let mut batch = s.batch();
    for i in 0..1000u32 {
        let put = Put {
            domain: DOMAIN,
            title: &format!("T{i}"),
            rev: 1,
            tid: None,
            content_type: TYPES[0],
            labels: &Labels::NONE,
            value: &value(i),
            historical: false,
        };
        batch.put(&put).unwrap();
    }
    assert!(
        s.commits() > commits,
        "the meta index grew inside the batch"
    );
    disk.fail_after_syncs(1); // the power goes before the batch commits
    drop(s);
    disk.crash(CrashMode::DropUnsynced);
    let s = Store::open(Path::new(DIR), &opts).unwrap();
    let mut present = 0;
    for i in 0..1000u32 {
        if let Some(got) = s.get(DOMAIN, &format!("T{i}"), Which::Latest).unwrap() {
            assert_eq!(got.value, value(i));
            present += 1;
        }
    }
    assert!(
        present > 0,
        "the commit inside the batch made some titles durable"
    );
}

/// A put, a lapse of time, and a take-down, with and without a put of the title in between (which
/// culls what expired): reads and answers must not tell the two apart (a deadline holds whether or
/// not any culling has run: docs/INTERNALS.md § Retention and archive candidates). Before the fix,
/// an expired newer revision still superseded a late arrival of an older one, an expired newer
/// render still pushed a late render out, and a take-down counted expired renders — each only while
/// no put had culled them.
#[test]
fn culling_changes_no_answer() {
    let policy = Policy {
        revisions: Revisions::Recent { ttl: 20 },
        renders: Renders::Latest { count: 1, grace: 7 },
        historical_ttl: 15,
    };
    let tids = TidMaker::new();
    let (old_tid, new_tid) = (tids.make(T0), tids.make(T0 + 1));
    let run = |cull: bool| {
        let (disk, clock) = (SimDisk::new(), ManualClock::new(T0));
        let (mut s, _) = sim_store(&disk, &clock, policy);
        s.put(&Put {
            tid: Some(new_tid),
            ..Put::new(DOMAIN, "A", 1, TYPES[0], b"1 new")
        })
        .unwrap();
        s.put(&Put::new(DOMAIN, "A", 3, TYPES[0], b"3")).unwrap();
        s.put(&Put::new(DOMAIN, "A", 2, TYPES[0], b"2")).unwrap();
        s.take_down(DOMAIN, "A", Some(3)).unwrap();
        clock.advance(20); // revisions 1 and 2 expire
        if cull {
            s.put(&Put {
                historical: true,
                ..Put::new(DOMAIN, "A", 0, TYPES[0], b"h")
            })
            .unwrap();
        }
        // Arrives after revision 2, which expired, and after a newer render of revision 1.
        s.put(&Put {
            tid: Some(old_tid),
            ..Put::new(DOMAIN, "A", 1, TYPES[0], b"1 old")
        })
        .unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            clock.advance(10);
            let latest = s
                .get(DOMAIN, "A", Which::Latest)
                .unwrap()
                .map(|g| (g.rev, g.state, g.value));
            seen.push(latest);
        }
        // The historical render (culling branch) expired at T0 + 35 and is still in the record.
        (seen, s.take_down(DOMAIN, "A", None).unwrap())
    };
    let (seen, removed) = run(false);
    assert_eq!((seen.clone(), removed), run(true));
    let current = Some((1, State::Current, b"1 old".to_vec()));
    assert_eq!(
        seen,
        vec![current; 4],
        "the newest readable revision never expires"
    );
    assert_eq!(removed, 1, "only the current render was readable");
}

/// A commit's journal is written over the slot of the commit two before, without a sync; the
/// cut kept that slot's old first sector (JSEQ 7) over the new entries (commit 9's, which the
/// barrier never made durable, nor the record bytes its index cell points at). Recovery took the
/// mix for commit 7, applied it under commit 8, and the records' index pointed past the data.
#[test]
fn a_cut_journal_slot_is_not_taken_for_the_commit_it_held_before() {
    let put = |title| {
        Op::Put(PutOp {
            title,
            rev: 0,
            tid: None,
            ct: 0,
            value: Value::Small(vec![]),
            historical: false,
        })
    };
    let ops = vec![
        put(2),
        put(0),
        put(0),
        put(0),
        put(0),
        Op::CrashIn {
            after: 2,
            op: Box::new(Op::TakeDown(2, None)),
            reorder: true,
            seed: 7428712550595835568,
        },
    ];
    run(policies()[0], &[0; POOL], ops);
}
