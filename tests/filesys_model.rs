//! Model-based test of filesys and filesys-ao on a simulated disk: random operations, reopens,
//! reindexes and power cuts (unsynced writes dropped, or reordered and torn at sector
//! boundaries, also in the middle of a commit), checked against a `BTreeMap<name, bytes>`.
//!
//! After a power cut the filesys must equal the model as of the last completed `sync()` — or, when
//! the cut came inside a `sync()` that did not return, possibly the model that sync was
//! committing. Nothing else: no lost synced file, no garbage.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use wink::clock::ManualClock;
use wink::filesys::{Filesys, FsOptions, OpenOptions};
use wink::Error;
use wink_harness::sim::{CrashMode, SimDisk};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
enum Op {
    Put(u8, Vec<u8>),
    Append(u8, Vec<u8>),
    Read(u8, u16, u16),
    Delete(u8),
    Rename(u8, u8),
    Sync,
    Reopen,
    Reindex,
    Crash { reorder: bool, seed: u64 },
    CrashInSync { after: u8, reorder: bool, seed: u64 },
}

fn name(i: u8) -> Vec<u8> {
    format!("dir/name-{i}").into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    let bytes = prop::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        6 => (0..8u8, bytes.clone()).prop_map(|(n, b)| Op::Put(n, b)),
        4 => (0..8u8, bytes).prop_map(|(n, b)| Op::Append(n, b)),
        3 => (0..8u8, any::<u16>(), any::<u16>()).prop_map(|(n, o, l)| Op::Read(n, o % 700, l % 700)),
        2 => (0..8u8).prop_map(Op::Delete),
        2 => (0..8u8, 0..8u8).prop_map(|(a, b)| Op::Rename(a, b)),
        3 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => Just(Op::Reindex),
        1 => (any::<bool>(), any::<u64>()).prop_map(|(reorder, seed)| Op::Crash { reorder, seed }),
        1 => (1..8u8, any::<bool>(), any::<u64>()).prop_map(|(after, reorder, seed)| Op::CrashInSync { after, reorder, seed }),
    ]
}

struct Harness {
    disk: SimDisk,
    clock: ManualClock,
    fs: Option<Filesys>,
    ao: bool,
    /// Whether the writer keeps the keys and inodes it wrote (as the store's record writer
    /// does), answering its lookups from them.
    keep: bool,
    /// What a power cut may leave: the model at the last commit (two candidates when a commit
    /// happened inside an operation, before or after its change).
    committed: Vec<Model>,
    current: Model,
}

const BASE: &str = "/sim/fs";

impl Harness {
    fn new(ao: bool, keep: bool) -> Harness {
        let disk = SimDisk::new();
        let clock = ManualClock::new(1_000_000);
        // Small inodes and a tiny index: resizes (plain) and capacity errors (ao) and index growth
        // happen within a few operations.
        let opts = FsOptions {
            ao,
            dups: ao,
            isz: 88,
            htsize: 2,
            timemp: 7,
            fileincr: 4096,
        };
        let mut fs = Filesys::create_in(
            Arc::new(disk.clone()),
            Path::new(BASE),
            &opts,
            &Harness::open_opts(&clock),
        )
        .unwrap();
        fs.set_verify_misses(keep);
        Harness {
            disk,
            clock,
            fs: Some(fs),
            ao,
            keep,
            committed: vec![Model::new()],
            current: Model::new(),
        }
    }

    fn open_opts(clock: &ManualClock) -> OpenOptions {
        OpenOptions {
            clock: Arc::new(clock.clone()),
            drop_behind: None,
            ..OpenOptions::writer()
        }
    }

    fn fs(&mut self) -> &mut Filesys {
        self.fs.as_mut().expect("open")
    }

    fn reopen(&mut self) {
        self.fs = None;
        let mut fs = Filesys::open_in(
            Arc::new(self.disk.clone()),
            Path::new(BASE),
            &Harness::open_opts(&self.clock),
        )
        .unwrap();
        fs.set_verify_misses(self.keep);
        self.fs = Some(fs);
    }

    fn state(&mut self) -> Model {
        let fs = self.fs();
        let mut out = Model::new();
        let stats: Vec<_> = fs.iter().map(|s| s.unwrap()).collect();
        let sparse: Vec<_> = fs.iter_sparse().map(|s| s.unwrap()).collect();
        assert_eq!(sparse, stats, "a sparse walk and a full walk disagree");
        let by_index = fs.files_by_index().unwrap();
        // The index accounts for every live entry of a filesys this crate wrote.
        assert_eq!(
            by_index.as_ref(),
            Some(&stats),
            "the index and a walk disagree"
        );
        for stat in stats {
            let via_name = fs.read(&stat.name).unwrap();
            assert_eq!(
                fs.read_stat(&stat).unwrap(),
                via_name,
                "iteration and lookup disagree"
            );
            assert!(
                out.insert(stat.name.clone(), via_name).is_none(),
                "a name listed twice"
            );
        }
        out
    }

    fn apply(&mut self, op: Op) {
        self.clock.advance(3);
        let before = (self.current.clone(), self.fs().commits());
        let explicit = matches!(
            op,
            Op::Sync | Op::Reopen | Op::Reindex | Op::Crash { .. } | Op::CrashInSync { .. }
        );
        self.apply_op(op);
        if !explicit && self.fs().commits() != before.1 {
            self.committed = vec![before.0, self.current.clone()];
        }
    }

    fn apply_op(&mut self, op: Op) {
        match op {
            Op::Put(n, bytes) => {
                self.fs().put(&name(n), 0, &bytes).unwrap();
                self.current.insert(name(n), bytes);
            }
            Op::Append(n, bytes) => match (
                self.fs().append(&name(n), &bytes),
                self.current.get_mut(&name(n)),
            ) {
                (Ok(_), Some(content)) => content.extend_from_slice(&bytes),
                (Err(Error::NotFound(_)), None) => {}
                (Err(Error::Full { .. }), Some(_)) if self.ao => {}
                (result, model) => panic!("append: {result:?} with model {model:?}"),
            },
            Op::Read(n, offset, len) => {
                let got = self.fs().read_range(&name(n), offset.into(), len.into());
                match (got, self.current.get(&name(n))) {
                    (Ok(bytes), Some(content)) => {
                        let start = (offset as usize).min(content.len());
                        let end = (start + len as usize).min(content.len());
                        assert_eq!(bytes, content[start..end]);
                    }
                    (Err(Error::NotFound(_)), None) => {}
                    (result, model) => panic!("read: {result:?} with model {model:?}"),
                }
            }
            Op::Delete(n) => {
                let deleted = self.fs().delete(&name(n)).unwrap();
                assert_eq!(deleted, self.current.remove(&name(n)).is_some());
            }
            Op::Rename(a, b) => {
                let result = self.fs().rename(&name(a), &name(b));
                match result {
                    Ok(_) => {
                        let content = self
                            .current
                            .remove(&name(a))
                            .expect("renamed an existing file");
                        assert!(self.current.insert(name(b), content).is_none());
                    }
                    Err(Error::Invalid(_)) => {
                        assert!(self.ao || self.current.contains_key(&name(b)))
                    }
                    Err(Error::NotFound(_)) => assert!(!self.current.contains_key(&name(a))),
                    Err(e) => panic!("rename: {e}"),
                }
            }
            Op::Sync => {
                self.fs().sync().unwrap();
                self.committed = vec![self.current.clone()];
            }
            Op::Reopen => {
                self.fs().sync().unwrap();
                self.committed = vec![self.current.clone()];
                self.reopen();
                assert_eq!(self.state(), self.current);
            }
            Op::Reindex => {
                self.fs().reindex().unwrap();
                self.committed = vec![self.current.clone()];
                assert_eq!(self.state(), self.current);
            }
            Op::Crash { reorder, seed } => self.crash(None, reorder, seed),
            Op::CrashInSync {
                after,
                reorder,
                seed,
            } => self.crash(Some(after), reorder, seed),
        }
    }

    fn crash(&mut self, during_sync: Option<u8>, reorder: bool, seed: u64) {
        let mut completed = false;
        if let Some(after) = during_sync {
            self.disk.fail_after_syncs(after.into());
            completed = self.fs().sync().is_ok();
        }
        let mode = if reorder {
            CrashMode::Reorder { seed }
        } else {
            CrashMode::DropUnsynced
        };
        self.fs = None; // dropped while the power is out: its last writes fail
        self.disk.crash(mode);
        self.reopen();
        let state = self.state();
        if completed {
            self.committed = vec![self.current.clone()];
        }
        let in_flight = during_sync.is_some() && state == self.current;
        if !self.committed.contains(&state) && !in_flight {
            panic!("after the crash:\n{state:?}\nexpected one of the committed states:\n{:?}\nor the one in flight:\n{:?}", self.committed, self.current);
        }
        self.committed = vec![state.clone()];
        self.current = state;
    }
}

fn run(ao: bool, keep: bool, ops: Vec<Op>) {
    let mut h = Harness::new(ao, keep);
    for op in ops {
        h.apply(op);
    }
    h.fs().sync().unwrap();
    h.reopen();
    assert_eq!(h.state(), h.current);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn plain_filesys_matches_the_model(
        keep in any::<bool>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(false, keep, ops);
    }

    #[test]
    fn ao_filesys_matches_the_model(
        keep in any::<bool>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(true, keep, ops);
    }
}
