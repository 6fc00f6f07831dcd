//! An index growth whose keys were read ahead (their hashes read by a thread of its own while
//! the writer went on putting), cut by a power loss at each of the growing put's writes and
//! syncs in turn, on a simulated disk: the read-ahead writes nothing, so a cut anywhere must
//! leave every name a sync made durable readable, byte-exact, and the filesys clean; and the
//! growth must have read (almost) no key itself, or this tests nothing.

use std::path::Path;
use std::sync::Arc;

use wink::clock::ManualClock;
use wink::filesys::{Filesys, FsOptions, OpenOptions};
use wink_harness::sim::{CrashMode, Cut, SimDisk};

const BASE: &str = "/sim/fs";
/// The index's cells: it grows on the put that finds 24,576 of them used (the 0.75 limit), and
/// reads ahead from 17,204 (0.7 of the limit; past the 16,384 a read-ahead needs).
const HTSIZE: u64 = 32_768;
const GROWS_AT: u32 = 24_576;
/// Names put before the read-ahead begins, committed once (the disk every run starts from).
const FIRST: u32 = 17_000;
/// A sync every so many puts.
const SYNC_EVERY: u32 = 500;

fn name(i: u32) -> Vec<u8> {
    format!("en.wikipedia.org/T{i:06}").into_bytes()
}

fn content(i: u32) -> Vec<u8> {
    let mut out = i.to_be_bytes().repeat(1 + (i % 7) as usize);
    out.push(b'!');
    out
}

fn options(clock: &ManualClock) -> OpenOptions {
    OpenOptions {
        clock: Arc::new(clock.clone()),
        ..OpenOptions::writer()
    }
}

fn open(disk: &SimDisk, clock: &ManualClock) -> Filesys {
    Filesys::open_in(Arc::new(disk.clone()), Path::new(BASE), &options(clock)).unwrap()
}

/// Puts names `FIRST..=GROWS_AT` (the last one grows the index), syncing every
/// [`SYNC_EVERY`], until an operation fails; `arm` is called just before the growing put.
/// Returns the names made durable by a sync that returned, the writes and syncs the growing
/// put made (when it returned), and the keys its growth read.
fn run(disk: &SimDisk, clock: &ManualClock, arm: impl FnOnce()) -> (u32, Option<(u64, u64)>, u64) {
    let mut fs = open(disk, clock);
    let mut durable = FIRST;
    let mut arm = Some(arm);
    for i in FIRST..=GROWS_AT {
        let before = (disk.writes(), disk.syncs());
        if i == GROWS_AT {
            (arm.take().expect("armed once"))();
        }
        if fs.put(&name(i), 0, &content(i)).is_err() {
            return (durable, None, 0);
        }
        if i == GROWS_AT {
            let made = (disk.writes() - before.0, disk.syncs() - before.1);
            let reads = fs.last_growth_key_reads();
            return match fs.sync() {
                Ok(()) => (i + 1, Some(made), reads),
                Err(_) => (durable, Some(made), reads),
            };
        }
        if (i + 1) % SYNC_EVERY == 0 {
            if fs.sync().is_err() {
                return (durable, None, 0);
            }
            durable = i + 1;
        }
    }
    unreachable!("the loop returns at the growing put")
}

/// After a cut: the writer opens, every name of `0..durable` reads back, any later one that
/// survived reads its own content, and the index and a walk of the datafile agree.
fn check(disk: &SimDisk, clock: &ManualClock, durable: u32, at: &str) {
    let fs = open(disk, clock);
    for i in 0..=GROWS_AT {
        match fs.read(&name(i)) {
            Ok(got) => assert_eq!(got, content(i), "{at}: name {i} reads other bytes"),
            Err(e) => assert!(i >= durable, "{at}: durable name {i} lost: {e}"),
        }
    }
    let walked: Vec<_> = fs.iter().map(|s| s.unwrap()).collect();
    assert_eq!(
        fs.files_by_index().unwrap().as_ref(),
        Some(&walked),
        "{at}: the index and a walk disagree"
    );
}

#[test]
fn a_growth_read_ahead_cut_at_each_of_its_writes_and_syncs_loses_nothing_durable() {
    let clock = ManualClock::new(1_700_000_000);
    let disk = SimDisk::new();
    let opts = FsOptions {
        htsize: HTSIZE,
        ..FsOptions::default()
    };
    let mut fs = Filesys::create_in(
        Arc::new(disk.clone()),
        Path::new(BASE),
        &opts,
        &options(&clock),
    )
    .unwrap();
    for i in 0..FIRST {
        fs.put(&name(i), 0, &content(i)).unwrap();
    }
    fs.sync().unwrap();
    drop(fs);

    // Uncut, to count the growing put's writes and syncs.
    let whole = disk.fork();
    let (durable, made, reads) = run(&whole, &clock, || {});
    let (writes, syncs) = made.expect("the growing put returned");
    assert_eq!(durable, GROWS_AT + 1);
    // Read ahead, the growth reads only the keys put after the last commit before the reads
    // began: fewer than a sync's worth. Without, it would read the 17,000 that this writer did
    // not put (it keeps the keys it puts).
    assert!(
        reads < u64::from(SYNC_EVERY),
        "the growth read {reads} keys"
    );
    assert!(writes > 2 && syncs > 0, "{writes} writes, {syncs} syncs");
    check(&whole, &clock, durable, "uncut");

    for at in Cut::every(writes, syncs) {
        let cut = disk.fork();
        let (durable, _, _) = run(&cut, &clock, || at.arm(&cut));
        for mode in [CrashMode::DropUnsynced, CrashMode::Reorder { seed: at.n() }] {
            let crashed = cut.fork();
            crashed.crash(mode);
            check(&crashed, &clock, durable, &format!("{at}, {mode:?}"));
        }
    }
}
