//! Culling as an operation: title records rewritten without the renders no read can return any
//! more, in bounded steps over a cursor, each step committed.
//!
//! Reads never depend on culling (docs/INTERNALS.md § Retention and archive candidates): a
//! render past its deadline is hidden by the clock whether or not its record still lists it. A cull
//! drops exactly what the opportunistic cull of a put drops ([`TitleRecord::cull_keeping`]):
//! renders the policy no longer lets through, except the archive's candidates not archived yet;
//! take-down markers stay. So every read — at this clock value or any later one — answers the same
//! before and after, and a step can stop anywhere: what it committed is a cull some put could have
//! done.
//!
//! The walk goes over the meta datafile in file order. Records are files of an append-only
//! kvseq, so a position in it stays an entry boundary; a pass ends where the datafile ended when
//! it started. A record rewritten during the pass moves past that end and waits for the next
//! pass (a put that rewrote it culled it already).

use crate::error::Result;
use crate::filesys::inode::{classify, KeyKind};
use crate::format::kvseq::KvPointer;

use super::Store;

/// Titles a step walks when the caller does not say.
pub const STEP_TITLES: usize = 256;

/// Where a walk over a store's title records stands. Valid for the store handle it was used
/// with (a writer's open may cut an unsynced tail off the records and write others there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TitleCursor {
    /// The position of the next entry to read in the meta datafile (`None`: its first entry).
    next: Option<u64>,
    /// Where the pass ends: the datafile's size when it started (`None`: not started).
    end: Option<u64>,
    done: bool,
}

impl TitleCursor {
    /// A cursor at the start of a new pass.
    pub fn new() -> TitleCursor {
        TitleCursor::default()
    }

    /// True once the pass has walked every record that existed when it started.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Ends the pass where it stands.
    pub(super) fn finish_pass(&mut self) {
        self.done = true;
    }

    /// (bytes of the meta datafile walked, bytes the pass walks), for progress reports.
    pub fn progress(&self) -> (u64, u64) {
        let end = self.end.unwrap_or(0);
        if self.done {
            return (end, end);
        }
        (self.next.unwrap_or(0).min(end), end)
    }
}

/// The titles of one step: each name with the position after its record's inode entry.
pub(super) struct Walk {
    pub titles: Vec<(Vec<u8>, u64)>,
    /// The position after the last entry read.
    pub walked_to: Option<u64>,
    pub done: bool,
}

impl Walk {
    /// Moves `cursor` past every title of the walk.
    pub fn finish(&self, cursor: &mut TitleCursor) {
        if self.walked_to.is_some() {
            cursor.next = self.walked_to;
        }
        cursor.done = self.done;
    }

    /// Moves `cursor` past the `i`-th title only (a step that stopped there).
    pub fn stop_after(&self, cursor: &mut TitleCursor, i: usize) {
        if let Some((_, after)) = self.titles.get(i) {
            cursor.next = Some(*after);
        }
    }
}

/// What a cull did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CullReport {
    /// Title records walked.
    pub titles: u64,
    /// Records rewritten (or removed, when nothing was left in them).
    pub titles_touched: u64,
    pub renders_culled: u64,
    /// Value bytes of the culled renders: dead in their containers now (compaction reclaims them,
    /// as it would have whether or not they were culled).
    pub dead_bytes: u64,
}

impl CullReport {
    /// Adds another report's counts.
    pub fn add(&mut self, other: &CullReport) {
        self.titles += other.titles;
        self.titles_touched += other.titles_touched;
        self.renders_culled += other.renders_culled;
        self.dead_bytes += other.dead_bytes;
    }
}

impl Store {
    /// The next titles of a pass, at most `max`; the cursor does not move (see [`Walk`]).
    pub(super) fn walk_titles(&self, cursor: &mut TitleCursor, max: usize) -> Result<Walk> {
        let data = self.meta.data();
        let end = *cursor.end.get_or_insert(data.filesize());
        let mut walk = Walk {
            titles: Vec::new(),
            walked_to: None,
            done: cursor.done,
        };
        if cursor.done {
            return Ok(walk);
        }
        let start = cursor.next.map_or(data.first(), KvPointer);
        let mut iter = data.iter_entries(start, true);
        while walk.titles.len() < max.max(1) {
            let entry = match iter.next() {
                None => {
                    walk.done = true;
                    break;
                }
                Some(Ok(entry)) => entry,
                // The titles before the damage are worked on; the next step meets it again.
                Some(Err(_)) if !walk.titles.is_empty() => break,
                Some(Err(e)) => return Err(e),
            };
            if entry.layout.ptr.0 >= end {
                walk.done = true;
                break;
            }
            let after = iter.position().0;
            walk.walked_to = Some(after);
            if let KeyKind::Inode { name, n: 0 } = classify(&entry.key) {
                walk.titles.push((name.to_vec(), after));
            }
        }
        Ok(walk)
    }

    /// One step of a cull: the next `max_titles` title records from `cursor` rewritten without
    /// the renders no read can return any more (see the module doc), then committed. The cursor
    /// moves past the titles done; on an error, past the title that failed too (so a rerun goes
    /// on after it), with what was done before it committed.
    pub fn cull_due(&mut self, cursor: &mut TitleCursor, max_titles: usize) -> Result<CullReport> {
        self.writer()?;
        let walk = self.walk_titles(cursor, max_titles)?;
        let (policy, archive, now) = (self.cfg.policy, self.cfg.archive, self.clock.now());
        let mut report = CullReport::default();
        let mut failed = None;
        for (i, (name, _)) in walk.titles.iter().enumerate() {
            report.titles += 1;
            let culled = self.load(name).and_then(|rec| match rec {
                Some(mut rec) => {
                    let gone = rec.cull_keeping(&policy, now, archive);
                    if !gone.is_empty() {
                        self.save(name, &rec)?;
                    }
                    Ok(gone)
                }
                None => Ok(Vec::new()),
            });
            match culled {
                Ok(gone) if gone.is_empty() => {}
                Ok(gone) => {
                    report.titles_touched += 1;
                    report.renders_culled += gone.len() as u64;
                    let bytes = gone.iter().map(|r| r.location.len);
                    report.dead_bytes = bytes.fold(report.dead_bytes, u64::saturating_add);
                }
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }
        let committed = if report.titles_touched > 0 {
            self.commit()
        } else {
            Ok(())
        };
        match failed {
            Some((i, e)) => {
                walk.stop_after(cursor, i);
                Err(e)
            }
            None => {
                committed?;
                walk.finish(cursor);
                Ok(report)
            }
        }
    }

    /// A whole cull: [`Store::cull_due`] steps of [`STEP_TITLES`] titles until the pass is done.
    /// `progress(done, total)` counts bytes of the meta datafile walked.
    pub fn cull_all(&mut self, mut progress: impl FnMut(u64, u64)) -> Result<CullReport> {
        let mut cursor = TitleCursor::new();
        let mut report = CullReport::default();
        while !cursor.is_done() {
            report.add(&self.cull_due(&mut cursor, STEP_TITLES)?);
            let (done, total) = cursor.progress();
            progress(done, total);
        }
        Ok(report)
    }
}
