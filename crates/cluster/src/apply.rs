//! Applying a partition's messages to a store: a batch of them, then one commit that also holds
//! the record of the last stream sequence applied per partition (docs/CLUSTER.md § Apply).
//!
//! The record is a render of the reserved domain ([`RESERVED_DOMAIN`], title `applied`, one fixed
//! (rev, tid), rewritten in place), so it is made durable by the same commit as the renders it
//! covers: after a crash both are there or neither is, and a replay applies nothing twice and
//! misses nothing. Precedence is the store's, by (rev, tid), so the order in which messages of
//! different titles (or of one title, across replicas) arrive changes nothing readable.
//!
//! The record also says which stream its sequences count in (the stream's creation time) and
//! which message it saw last (its sequence and checksum), so that a node never trusts a sequence
//! number the stream may have given to another message since (a stream restored from an older
//! copy, or recreated): [`Record::mark`]. A node that found its records out of step with the
//! stream says so in the record ([`Record::diverged`]) until a replay clears it.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::message::{Change, Kind, RESERVED_DOMAIN};
use wink_engine::clock::StampedClock;
use wink_engine::store::Which;
use wink_engine::store::{key, Batch, Put, Store};
use wink_engine::{Error, Result};

/// The record's title, revision and tid.
const APPLIED_TITLE: &str = "applied";
const APPLIED_REV: u64 = 1;

fn applied_tid() -> Uuid {
    key::tid_at(1_600_000_000, 1, *b"wink.c")
}

/// Partition → the last stream sequence applied (0: none).
pub type Applied = BTreeMap<u32, u64>;

/// A message the stream held: which stream (its creation time, as the stream's info gives it),
/// at which sequence, and a checksum of its subject and body. Two messages with the same mark
/// are the same message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The stream's creation time.
    pub stream: String,
    /// The message's sequence in it.
    pub seq: u64,
    /// CRC-32 of its subject, a zero byte and its body.
    pub crc: u32,
}

impl Mark {
    /// The mark of the message `subject`/`payload` at `seq` of the stream created at `stream`.
    pub fn of(stream: &str, seq: u64, subject: &str, payload: &[u8]) -> Mark {
        let mut h = crc32fast::Hasher::new();
        h.update(subject.as_bytes());
        h.update(&[0]);
        h.update(payload);
        Mark {
            stream: stream.to_string(),
            seq,
            crc: h.finalize(),
        }
    }
}

/// The store's cluster record: what is applied, against which stream, and whether the node has
/// found its records out of step with the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Partition → the last sequence applied to it.
    pub applied: Applied,
    /// The last message the node scanned (every owned partition is applied up to it). `None` in
    /// a record written before marks, or right after a replay was asked for.
    pub mark: Option<Mark>,
    /// Why the node stopped vouching for its partitions; cleared by a replay.
    pub diverged: Option<String>,
}

/// A message taken from the stream.
#[derive(Clone, Debug)]
pub struct Message {
    /// Its stream sequence.
    pub seq: u64,
    /// The partition of its key.
    pub partition: u32,
    /// What it asks.
    pub change: Change,
}

/// What applying one message did: what a single node would have answered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A put stored.
    Stored,
    /// A put refused because its revision (or title) is taken down.
    TakenDown,
    /// A put refused for another reason, the same on every replica.
    Refused {
        /// The store's reason.
        why: String,
    },
    /// A put whose conditions (`If-Match`, `If-None-Match`) did not hold when it was applied.
    PreconditionFailed {
        /// Which condition, and what the store held.
        why: String,
    },
    /// A take-down, and the renders it removed.
    Removed {
        /// Renders removed.
        removed: usize,
    },
    /// A lift, and whether there was a take-down to lift.
    Lifted {
        /// Whether there was one.
        lifted: bool,
    },
}

/// What a batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages applied by this batch.
    pub applied: usize,
    /// At or below the partition's recorded sequence: applied before.
    pub skipped: usize,
    /// Refused by the store the same way on every replica (a take-down, a render over the
    /// bucket's `max_value`, …): `seq: why`.
    pub refused: Vec<String>,
    /// What each message applied (not the skipped ones) did, by sequence.
    pub outcomes: Vec<(u64, Outcome)>,
}

/// The store's record of applied sequences.
pub fn read_applied(store: &Store) -> Result<Applied> {
    Ok(read_record(store)?.applied)
}

/// The store's whole cluster record.
pub fn read_record(store: &Store) -> Result<Record> {
    let Some(got) = store.get(
        RESERVED_DOMAIN,
        APPLIED_TITLE,
        Which::Render(APPLIED_REV, applied_tid()),
    )?
    else {
        return Ok(Record::default());
    };
    let text = String::from_utf8_lossy(&got.value);
    let mut out = Record::default();
    let damaged = |line: &str| {
        Error::corrupt(
            store.dir(),
            0,
            "the cluster's record of applied sequences".to_string(),
            "lines PARTITION=SEQUENCE, stream=CREATED SEQUENCE CRC, diverged=WHY",
            line,
        )
    };
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            return Err(damaged(line));
        };
        match k {
            "stream" => {
                let mut f = v.rsplitn(3, ' ');
                let crc = f.next().and_then(|c| u32::from_str_radix(c, 16).ok());
                let seq = f.next().and_then(|s| s.parse::<u64>().ok());
                let (Some(crc), Some(seq), Some(stream)) = (crc, seq, f.next()) else {
                    return Err(damaged(line));
                };
                out.mark = Some(Mark {
                    stream: stream.to_string(),
                    seq,
                    crc,
                });
            }
            "diverged" => out.diverged = Some(v.to_string()),
            _ => {
                let p = k.parse::<u32>().map_err(|_| damaged(line))?;
                let s = v.parse::<u64>().map_err(|_| damaged(line))?;
                out.applied.insert(p, s);
            }
        }
    }
    Ok(out)
}

/// Rewrites the record in `batch` (it is durable at the batch's commit).
pub fn write_record(batch: &mut Batch<'_>, record: &Record) -> Result<()> {
    let mut text = String::new();
    if let Some(m) = &record.mark {
        text.push_str(&format!("stream={} {} {:08x}\n", m.stream, m.seq, m.crc));
    }
    if let Some(why) = &record.diverged {
        // One line: the record is read line by line.
        text.push_str(&format!("diverged={}\n", why.replace('\n', " ")));
    }
    for (p, s) in &record.applied {
        text.push_str(&format!("{p}={s}\n"));
    }
    batch.put(&Put {
        domain: RESERVED_DOMAIN,
        title: APPLIED_TITLE,
        rev: APPLIED_REV,
        tid: Some(applied_tid()),
        content_type: "text/plain",
        labels: &wink_engine::store::Labels::NONE,
        value: text.as_bytes(),
        historical: false,
    })?;
    Ok(())
}

/// Applies `messages` (in stream order) whose sequence is past their partition's record, then
/// records, for every partition of `through.1`, that everything up to `through.0` is applied
/// (the caller scanned the stream that far for those partitions), and `mark` as the last message
/// scanned, and commits once. An error other than a refusal leaves the batch uncommitted: the
/// caller must stop applying (the next open recovers the store as after a crash, and the replay
/// starts from the record).
pub fn apply_batch(
    store: &mut Store,
    messages: &[Message],
    through: Option<(u64, &[u32])>,
    mark: Option<&Mark>,
) -> Result<Report> {
    apply_batch_deciding(store, messages, through, mark, true, |_| {})
}

/// [`apply_batch`], calling `decided` with the batch's report once every message is applied
/// and before the commit: what each message did is then settled (a replay of the stream, which
/// holds them durably, decides the same), so a writer can be answered while the commit syncs.
/// Not called when applying fails. Without `commit`, the batch and its record are left for the
/// store's next commit (take-downs and lifts still commit themselves).
pub fn apply_batch_deciding(
    store: &mut Store,
    messages: &[Message],
    through: Option<(u64, &[u32])>,
    mark: Option<&Mark>,
    commit: bool,
    decided: impl FnOnce(&Report),
) -> Result<Report> {
    let mut record = read_record(store)?;
    let before = record.clone();
    let mut report = Report::default();
    let mut batch = store.batch();
    for m in messages {
        let done = record.applied.get(&m.partition).copied().unwrap_or(0);
        if m.seq <= done {
            report.skipped += 1;
            continue;
        }
        let c = &m.change;
        let rev = c.kind.of_rev(c.rev);
        let outcome = match c.kind {
            Kind::Put => {
                let named = c.names_render.then_some(c.tid);
                match c
                    .conditions
                    .check(batch.store(), &c.domain, &c.title, c.rev, named)?
                {
                    // Checked at the same point of the log on every replica: the same answer.
                    Err(why) => {
                        report.refused.push(format!("{}: {why}", m.seq));
                        report
                            .outcomes
                            .push((m.seq, Outcome::PreconditionFailed { why }));
                        record.applied.insert(m.partition, m.seq);
                        continue;
                    }
                    Ok(()) => StampedClock::with(c.arrival, || {
                        batch.put(&c.as_put()).map(|_| Outcome::Stored)
                    }),
                }
            }
            // These commit themselves: the record written first rides in their commit.
            Kind::TakeDown | Kind::Lift | Kind::TakeDownTitle | Kind::LiftTitle => {
                record.applied.insert(m.partition, m.seq);
                write_record(&mut batch, &record)?;
                StampedClock::with(c.arrival, || match c.kind {
                    Kind::TakeDown | Kind::TakeDownTitle => batch
                        .take_down(&c.domain, &c.title, rev)
                        .map(|removed| Outcome::Removed { removed }),
                    _ => batch
                        .lift(&c.domain, &c.title, rev)
                        .map(|lifted| Outcome::Lifted { lifted }),
                })
            }
        };
        let outcome = match outcome {
            Ok(o) => {
                report.applied += 1;
                o
            }
            // The store refuses the same message the same way on every replica.
            Err(Error::Invalid(why)) => {
                report.refused.push(format!("{}: {why}", m.seq));
                if c.kind == Kind::Put && batch.store().is_taken_down(&c.domain, &c.title, rev)? {
                    Outcome::TakenDown
                } else {
                    Outcome::Refused { why }
                }
            }
            Err(e) => return Err(e),
        };
        report.outcomes.push((m.seq, outcome));
        record.applied.insert(m.partition, m.seq);
    }
    if let Some((seq, partitions)) = through {
        for p in partitions {
            let e = record.applied.entry(*p).or_insert(0);
            *e = (*e).max(seq);
        }
    }
    if let Some(mark) = mark {
        record.mark = Some(mark.clone());
    }
    let changed = record != before;
    if changed {
        write_record(&mut batch, &record)?;
    }
    decided(&report);
    if changed && commit {
        batch.commit()?;
    }
    Ok(report)
}

/// Marks the store's records as out of step with the stream (`why`), and rewinds every
/// partition to at most `rewind_to`, so that what the stream holds past it is applied again
/// (idempotently) rather than skipped; commits.
pub fn diverge(store: &mut Store, why: &str, rewind_to: u64) -> Result<()> {
    let mut record = read_record(store)?;
    for s in record.applied.values_mut() {
        *s = (*s).min(rewind_to);
    }
    record.mark = None;
    record.diverged = Some(why.to_string());
    let mut batch = store.batch();
    write_record(&mut batch, &record)?;
    batch.commit().map(drop)
}

/// Asks for a replay: every partition rewound to `from - 1` (the stream's first sequence held),
/// the mark and the divergence cleared; commits. What the stream holds is applied again in
/// order, which changes nothing already applied (a put of the same (rev, tid) and bytes, a
/// take-down or lift again).
pub fn replay_from(store: &mut Store, from: u64) -> Result<()> {
    let mut record = read_record(store)?;
    for s in record.applied.values_mut() {
        *s = (*s).min(from.saturating_sub(1));
    }
    record.mark = None;
    record.diverged = None;
    let mut batch = store.batch();
    write_record(&mut batch, &record)?;
    batch.commit().map(drop)
}

/// Applies one page of a copy of another owner's store (puts at their arrival times, take-downs)
/// and commits; the record is not changed (see [`seeded`]). Answers the renders stored; a put
/// the store refuses (a take-down of it arrived first) is left out, as on the owner.
pub fn apply_copy(store: &mut Store, changes: &[Change]) -> Result<usize> {
    let mut stored = 0;
    let mut batch = store.batch();
    for c in changes {
        match c.kind {
            Kind::Put => match StampedClock::with(c.arrival, || batch.put(&c.as_put())) {
                Ok(_) => stored += 1,
                Err(Error::Invalid(_)) => {}
                Err(e) => return Err(e),
            },
            Kind::TakeDown | Kind::TakeDownTitle => {
                batch.take_down(&c.domain, &c.title, c.kind.of_rev(c.rev))?;
            }
            // A copy holds state, not history: no lifts.
            Kind::Lift | Kind::LiftTitle => {}
        }
    }
    batch.commit()?;
    Ok(stored)
}

/// Records that partition `partition` holds everything up to `seq` (a copy of an owner that had
/// applied that far), and commits: the stream is applied from `seq + 1` on.
pub fn seeded(store: &mut Store, partition: u32, seq: u64) -> Result<()> {
    let mut record = read_record(store)?;
    let e = record.applied.entry(partition).or_insert(0);
    *e = (*e).max(seq);
    let mut batch = store.batch();
    write_record(&mut batch, &record)?;
    batch.commit().map(drop)
}

/// Records every partition (`0..partitions`) of a bucket entered in the cluster's catalog when
/// the stream stood at `since` as applied up to it (none of its messages is at or below it), and
/// commits when that changes the record.
pub fn entered(store: &mut Store, partitions: u32, since: u64) -> Result<()> {
    let mut record = read_record(store)?;
    let before = record.clone();
    for p in 0..partitions {
        let e = record.applied.entry(p).or_insert(0);
        *e = (*e).max(since);
    }
    if record != before {
        let mut batch = store.batch();
        write_record(&mut batch, &record)?;
        batch.commit()?;
    }
    Ok(())
}

/// Applies one change a repair brings from another owner (docs/CLUSTER.md § Repair): a put at
/// its arrival time, or a take-down, by the store's precedence like any put or take-down, and
/// commits. The record of applied sequences is not changed: the change is not the stream's.
/// A put the store refuses (its revision is taken down here) is answered, not an error.
pub fn apply_repair(store: &mut Store, c: &Change) -> Result<Outcome> {
    let rev = c.kind.of_rev(c.rev);
    let mut batch = store.batch();
    let outcome = match c.kind {
        Kind::Put => match StampedClock::with(c.arrival, || batch.put(&c.as_put())) {
            Ok(_) => Outcome::Stored,
            Err(Error::Invalid(why)) => {
                if batch.store().is_taken_down(&c.domain, &c.title, rev)? {
                    Outcome::TakenDown
                } else {
                    Outcome::Refused { why }
                }
            }
            Err(e) => return Err(e),
        },
        Kind::TakeDown | Kind::TakeDownTitle => Outcome::Removed {
            removed: batch.take_down(&c.domain, &c.title, rev)?,
        },
        // A repair copies what an owner holds, and a lift leaves nothing held.
        Kind::Lift | Kind::LiftTitle => {
            return Err(Error::invalid("a repair applies puts and take-downs only"))
        }
    };
    batch.commit()?;
    Ok(outcome)
}
