//! Applying a partition's messages to a store: a batch of them, then one commit that also holds
//! the record of the last stream sequence applied per partition (docs/CLUSTER.md § Apply).
//!
//! The record is a render of the reserved domain ([`RESERVED_DOMAIN`], title `applied`, one fixed
//! (rev, tid), rewritten in place), so it is made durable by the same commit as the renders it
//! covers: after a crash both are there or neither is, and a replay applies nothing twice and
//! misses nothing. Precedence is the store's, by (rev, tid), so the order in which messages of
//! different titles (or of one title, across replicas) arrive changes nothing readable.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::message::{Change, Kind, RESERVED_DOMAIN, WHOLE_TITLE};
use crate::clock::StampedClock;
use crate::error::{Error, Result};
use crate::store::{key, Put, Store};

/// The record's title, revision and tid.
const APPLIED_TITLE: &str = "applied";
const APPLIED_REV: u64 = 1;

fn applied_tid() -> Uuid {
    key::tid_at(1_600_000_000, 1, *b"wink.c")
}

/// Partition → the last stream sequence applied (0: none).
pub type Applied = BTreeMap<u32, u64>;

/// A message taken from the stream.
#[derive(Clone, Debug)]
pub struct Message {
    pub seq: u64,
    pub partition: u32,
    pub change: Change,
}

/// What a batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub applied: usize,
    /// At or below the partition's recorded sequence: applied before.
    pub skipped: usize,
    /// Refused by the store the same way on every replica (a take-down, a render over the
    /// bucket's `max_value`, …): `seq: why`.
    pub refused: Vec<String>,
}

/// The store's record of applied sequences.
pub fn read_applied(store: &Store) -> Result<Applied> {
    let Some(got) = store.get_render(RESERVED_DOMAIN, APPLIED_TITLE, APPLIED_REV, applied_tid())?
    else {
        return Ok(Applied::new());
    };
    let text = String::from_utf8_lossy(&got.value);
    let mut out = Applied::new();
    for line in text.lines() {
        let parsed = line
            .split_once('=')
            .and_then(|(p, s)| Some((p.parse::<u32>().ok()?, s.parse::<u64>().ok()?)));
        let (p, s) = parsed.ok_or_else(|| {
            Error::corrupt(
                store.dir(),
                0,
                "the cluster's record of applied sequences".to_string(),
                "lines PARTITION=SEQUENCE",
                line,
            )
        })?;
        out.insert(p, s);
    }
    Ok(out)
}

fn write_applied(store: &mut Store, applied: &Applied) -> Result<()> {
    let mut text = String::new();
    for (p, s) in applied {
        text.push_str(&format!("{p}={s}\n"));
    }
    store.put_uncommitted(&Put {
        domain: RESERVED_DOMAIN,
        title: APPLIED_TITLE,
        rev: APPLIED_REV,
        tid: Some(applied_tid()),
        content_type: "text/plain",
        value: text.as_bytes(),
        historical: false,
    })?;
    Ok(())
}

/// Applies `messages` (in stream order) whose sequence is past their partition's record, then
/// records, for every partition of `through.1`, that everything up to `through.0` is applied
/// (the caller scanned the stream that far for those partitions), and commits once. An error
/// other than a refusal leaves the batch uncommitted: the caller must stop applying (the next
/// open recovers the store as after a crash, and the replay starts from the record).
pub fn apply_batch(
    store: &mut Store,
    messages: &[Message],
    through: Option<(u64, &[u32])>,
) -> Result<Report> {
    let mut applied = read_applied(store)?;
    let before = applied.clone();
    let mut report = Report::default();
    for m in messages {
        let done = applied.get(&m.partition).copied().unwrap_or(0);
        if m.seq <= done {
            report.skipped += 1;
            continue;
        }
        let c = &m.change;
        let rev = (c.rev != WHOLE_TITLE).then_some(c.rev);
        let outcome = match c.kind {
            Kind::Put => {
                StampedClock::with(c.arrival, || store.put_uncommitted(&c.as_put()).map(|_| ()))
            }
            // These commit themselves: the record written first rides in their commit.
            Kind::TakeDown | Kind::Lift => {
                applied.insert(m.partition, m.seq);
                write_applied(store, &applied)?;
                StampedClock::with(c.arrival, || match c.kind {
                    Kind::TakeDown => store.take_down(&c.domain, &c.title, rev).map(|_| ()),
                    _ => store.lift(&c.domain, &c.title, rev).map(|_| ()),
                })
            }
        };
        match outcome {
            Ok(()) => report.applied += 1,
            // The store refuses the same message the same way on every replica.
            Err(Error::Invalid(why)) => report.refused.push(format!("{}: {why}", m.seq)),
            Err(e) => return Err(e),
        }
        applied.insert(m.partition, m.seq);
    }
    if let Some((seq, partitions)) = through {
        for p in partitions {
            let e = applied.entry(*p).or_insert(0);
            *e = (*e).max(seq);
        }
    }
    if applied != before {
        write_applied(store, &applied)?;
        store.commit()?;
    }
    Ok(report)
}
