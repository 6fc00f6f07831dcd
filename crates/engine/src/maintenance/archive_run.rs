//! The archive run: moves the revisions leaving the hot tier into the archive.
//!
//! With the archive enabled, the renders the archive policy picks ("candidates") stay readable in
//! the hot tier past their deadline until they are archived; a run archives the candidates of every
//! revision whose recent window has passed, makes the archive durable, and only then removes them
//! from the hot tier. A crash anywhere leaves each render in one tier or both, and a rerun finishes
//! the job (the archive skips what it already holds). Reads through both tiers are
//! [`crate::store::tiers`].

use uuid::Uuid;

use crate::archive::Item;
use crate::error::{Error, Result};
use crate::store::policy::{ArchivePolicy, Revisions};
use crate::store::record::{InArchive, Render};
use crate::store::walk::{TitleCursor, STEP_TITLES};
use crate::store::{ScanPages, Store};

/// What an archive run (or step) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Titles with a revision archived.
    pub titles: u64,
    /// Revisions archived (and removed from their title records).
    pub revisions: u64,
    /// Raw bytes archived.
    pub bytes: u64,
    /// Title records walked.
    pub titles_walked: u64,
}

impl ArchiveReport {
    /// Adds another report's counts.
    pub fn add(&mut self, other: &ArchiveReport) {
        self.titles += other.titles;
        self.revisions += other.revisions;
        self.bytes += other.bytes;
        self.titles_walked += other.titles_walked;
    }
}

/// A title and the (rev, tid) of its renders an archive step moved.
type Moved<'a> = (&'a [u8], Vec<(u64, Uuid)>);

/// The (rev, tid) of the renders of one title added to the archive, and their raw bytes.
type Archived = (Vec<(u64, Uuid)>, u64);

/// Archives the candidates of every revision that has left the hot tier, then removes them
/// from the hot tier: [`archive_step`](fn@crate::maintenance::archive_step)s of 256 titles until the pass is done.
/// `progress(done, total)` counts titles (the total is counted first).
pub fn archive_due(store: &mut Store, mut progress: impl FnMut(u64, u64)) -> Result<ArchiveReport> {
    archive_policy(store)?;
    store.writer()?;
    let mut pages = ScanPages::start(store.meta())?;
    let total = store.meta().iter().count() as u64;
    let mut cursor = TitleCursor::new();
    let mut report = ArchiveReport::default();
    while !cursor.is_done() {
        let step = archive_step(store, &mut cursor, STEP_TITLES)?;
        report.add(&step);
        pages.passed(cursor.progress().0)?;
        progress(report.titles_walked.min(total), total);
    }
    pages.finish()?;
    Ok(report)
}

/// One step of an archive run, over the next `max_titles` title records from `cursor`: the
/// candidates of every revision whose recent window has passed are added to the archive, the
/// archive is committed, and only then are they removed from their records (which are culled
/// as a put would), committed too. The writer is held for the step only; between steps the
/// store takes puts and reads as usual (the compression needs the archive's one writer
/// handle, the one reads go through: see docs/INTERNALS.md). The cursor moves past the
/// titles done; on an error, past the title that failed as well, with what was archived
/// before it committed.
pub fn archive_step(
    store: &mut Store,
    cursor: &mut TitleCursor,
    max_titles: usize,
) -> Result<ArchiveReport> {
    let policy = archive_policy(store)?;
    store.writer()?;
    let Revisions::Recent { ttl } = store.config().policy.revisions else {
        // With every revision retained, no revision ever leaves the hot tier.
        cursor.finish_pass();
        return Ok(ArchiveReport::default());
    };
    let now = store.now();
    let walk = store.walk_titles(cursor, max_titles)?;
    store.archive_tier()?;
    let mut report = ArchiveReport::default();
    let mut moved: Vec<Moved<'_>> = Vec::new();
    let mut failed = None;
    for (i, (name, _)) in walk.titles.iter().enumerate() {
        report.titles_walked += 1;
        match archive_title(store, name, policy, ttl, now) {
            Ok(None) => {}
            Ok(Some((gone, bytes))) => {
                report.titles += 1;
                report.revisions += gone.len() as u64;
                report.bytes += bytes;
                moved.push((name, gone));
            }
            Err(e) => {
                failed = Some((i, e));
                break;
            }
        }
    }
    // The archive is durable before anything leaves the hot tier.
    if let Some(archive) = store.archive_tier_mut()? {
        archive.commit()?;
    }
    for (name, gone) in moved {
        let Some(mut rec) = store.load(name)? else {
            continue;
        };
        // Culled with the candidates as they were before the archived ones leave: culled
        // after, a render its deadline had hidden would take an archived candidate's place
        // (the newest render left, say) and be readable again, then archived by the next run.
        rec.cull_keeping(&store.config().policy, now, Some(policy));
        rec.renders.retain(|r| !gone.contains(&(r.rev, r.tid)));
        // Reads look in the archive only for titles whose record says so.
        rec.archive = InArchive::Yes;
        store.save(name, &rec)?;
    }
    if report.titles > 0 {
        store.commit()?;
    }
    match failed {
        Some((i, e)) => {
            walk.stop_after(cursor, i);
            Err(e)
        }
        None => {
            walk.finish(cursor);
            Ok(report)
        }
    }
}

fn archive_policy(store: &Store) -> Result<ArchivePolicy> {
    store.config().archive.ok_or_else(|| {
        Error::invalid(format!(
            "{}: this store has no archive (wink init --archive)",
            store.dir().display()
        ))
    })
}

/// Adds a title's due candidates to the archive (uncommitted); returns their (rev, tid) and
/// raw bytes, or `None` when none is due.
fn archive_title(
    store: &mut Store,
    name: &[u8],
    policy: ArchivePolicy,
    ttl: i64,
    now: i64,
) -> Result<Option<Archived>> {
    let Some(rec) = store.load(name)? else {
        return Ok(None);
    };
    let left = |r: &Render| {
        r.stamps
            .superseded
            .is_some_and(|s| s.saturating_add(ttl) <= now)
    };
    let due: Vec<&Render> = rec
        .candidates(policy)
        .into_iter()
        .filter_map(|(rev, tid)| rec.renders.iter().find(|r| r.rev == rev && r.tid == tid))
        .filter(|r| left(r))
        .collect();
    if due.is_empty() {
        return Ok(None);
    }
    let values: Vec<Vec<u8>> = due
        .iter()
        .map(|r| store.read_value(&r.location))
        .collect::<Result<_>>()?;
    let items: Vec<Item<'_>> = due
        .iter()
        .zip(&values)
        .map(|(r, v)| Item {
            rev: r.rev,
            tid: *r.tid.as_bytes(),
            content_type: &r.content_type,
            labels: &r.labels,
            value: v,
        })
        .collect();
    let archive = store
        .archive_tier_mut()?
        .ok_or_else(|| Error::invalid("no archive"))?;
    archive.add(name, &items)?;
    let bytes = values.iter().map(|v| v.len() as u64).sum();
    Ok(Some((due.iter().map(|r| (r.rev, r.tid)).collect(), bytes)))
}
