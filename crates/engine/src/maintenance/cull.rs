//! Culling as an operation: title records rewritten without the renders no read can return any
//! more, in bounded steps over a cursor, each step committed.
//!
//! Reads never depend on culling (docs/INTERNALS.md § Retention and archive candidates): a
//! render past its deadline is hidden by the clock whether or not its record still lists it. A cull
//! drops exactly what the opportunistic cull of a put drops
//! ([`TitleRecord::cull_keeping`](crate::store::record::TitleRecord::cull_keeping)):
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
use crate::store::walk::{TitleCursor, STEP_TITLES};
use crate::store::{ScanPages, Store};

/// What a cull did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CullReport {
    /// Title records walked.
    pub titles: u64,
    /// Records rewritten (or removed, when nothing was left in them).
    pub titles_touched: u64,
    /// Renders removed from their records.
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

/// One step of a cull: the next `max_titles` title records from `cursor` rewritten without
/// the renders no read can return any more (see the module doc), then committed. The cursor
/// moves past the titles done; on an error, past the title that failed too (so a rerun goes
/// on after it), with what was done before it committed.
pub fn cull_due(
    store: &mut Store,
    cursor: &mut TitleCursor,
    max_titles: usize,
) -> Result<CullReport> {
    store.writer()?;
    let walk = store.walk_titles(cursor, max_titles)?;
    let (policy, archive, now) = (store.config().policy, store.config().archive, store.now());
    let mut report = CullReport::default();
    let mut failed = None;
    for (i, (name, _)) in walk.titles.iter().enumerate() {
        report.titles += 1;
        let culled = store.load(name).and_then(|rec| match rec {
            Some(mut rec) => {
                let gone = rec.cull_keeping(&policy, now, archive);
                if !gone.is_empty() {
                    store.save(name, &rec)?;
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
        store.commit()
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

/// A whole cull: [`cull_due`](fn@crate::maintenance::cull_due) steps of [`STEP_TITLES`] titles until the pass is done.
/// `progress(done, total)` counts bytes of the meta datafile walked. The title records' page
/// cache is left as the pass found it.
pub fn cull_all(store: &mut Store, mut progress: impl FnMut(u64, u64)) -> Result<CullReport> {
    let mut cursor = TitleCursor::new();
    let mut report = CullReport::default();
    let mut pages = ScanPages::start(store.meta())?;
    while !cursor.is_done() {
        report.add(&cull_due(store, &mut cursor, STEP_TITLES)?);
        let (done, total) = cursor.progress();
        pages.passed(done)?;
        progress(done, total);
    }
    pages.finish()?;
    Ok(report)
}
