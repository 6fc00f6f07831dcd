//! Reads through the tiers — hot (title records and containers), then the archive — and the
//! archive run that moves revisions leaving the hot tier into the archive.
//!
//! With the archive enabled, the renders the archive policy picks ("candidates") stay readable in
//! the hot tier past their deadline until they are archived; a run archives the candidates of every
//! revision whose recent window has passed, makes the archive durable, and only then removes them
//! from the hot tier. A crash anywhere leaves each render in one tier or both, and a rerun finishes
//! the job (the archive skips what it already holds).

use uuid::Uuid;

use crate::archive::{map::Entry as ArchiveEntry, Item};
use crate::error::{Error, Result};
use crate::filesys::{Filesys, Staleness};

use super::cull::{TitleCursor, STEP_TITLES};
use super::key::{cmp_tid, TitleKey};
use super::policy::{ArchivePolicy, Revisions};
use super::record::{InArchive, Render, TitleRecord};
use super::{Got, Listed, Page, State, Store};

/// What an archive run (or step) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Titles with a revision archived.
    pub titles: u64,
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

/// A render found in either tier.
enum Hit<'a> {
    Hot(&'a Render),
    Archived(ArchiveEntry),
}

impl Hit<'_> {
    fn key(&self) -> (u64, Uuid) {
        match self {
            Hit::Hot(r) => (r.rev, r.tid),
            Hit::Archived(e) => (e.rev, Uuid::from_bytes(e.tid)),
        }
    }
}

/// [`Store::visible`] for a store with configuration `cfg`: also the renders a compaction keeps.
pub(super) fn visible_in<'r>(
    cfg: &super::Config,
    rec: &'r TitleRecord,
    now: i64,
) -> Vec<&'r Render> {
    let keep = cfg.archive.map(|a| rec.candidates(a)).unwrap_or_default();
    let policy = cfg.policy;
    rec.renders
        .iter()
        .filter(|r| policy.readable(&r.stamps, now) || keep.contains(&(r.rev, r.tid)))
        .collect()
}

fn newer(a: (u64, Uuid), b: (u64, Uuid)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && cmp_tid(a.1, b.1).is_gt())
}

impl Store {
    /// Hot renders a read may return now: readable by the policy, or archive candidates that
    /// are not archived yet.
    pub(super) fn visible<'r>(&self, rec: &'r TitleRecord, now: i64) -> Vec<&'r Render> {
        visible_in(&self.cfg, rec, now)
    }

    /// Archived renders of a title that may be returned (not taken down in either tier). The
    /// archive is looked at only on positive evidence, its record saying it may hold some: a
    /// title without a record has none there, and an archive that does hold it means the
    /// record was lost (damage, never an answer from the archive alone).
    pub(super) fn archived(
        &self,
        name: &[u8],
        rec: Option<&TitleRecord>,
    ) -> Result<Vec<ArchiveEntry>> {
        let Some(rec) = rec else {
            self.check_unrecorded(name)?;
            return Ok(Vec::new());
        };
        if rec.title_down || rec.archive == InArchive::No {
            return Ok(Vec::new());
        }
        let Some(archive) = self.archive_tier()? else {
            if rec.archive == InArchive::Yes {
                // Archived revisions, and no archive: the configuration says otherwise.
                return Err(Error::corrupt(
                    &self.dir.join("store"),
                    0,
                    format!(
                        "store configuration: the record of {:?} says the archive holds \
                         revisions of it",
                        String::from_utf8_lossy(name)
                    ),
                    "an archive",
                    "archive none",
                ));
            }
            return Ok(Vec::new());
        };
        let mut entries = match archive.title_entries(name)? {
            Some(entries) => entries,
            // The record says the archive holds revisions: its map was lost (an index cell).
            None if rec.archive == InArchive::Yes => return Err(self.missing_map(archive, name)),
            None => Vec::new(),
        };
        entries.retain(|e: &ArchiveEntry| !rec.revs_down.contains(&e.rev));
        Ok(entries)
    }

    /// The damage of a title whose record says the archive holds revisions of it while the
    /// archive has no map of it: the map's index cell or inode was lost.
    fn missing_map(&self, archive: &crate::archive::Archive, name: &[u8]) -> Error {
        super::lost_file(
            archive.filesys(),
            &crate::archive::map_name(name),
            format!("archive map of {:?}", String::from_utf8_lossy(name)),
            "a map: the title record says the archive holds revisions of the title",
            "none",
        )
    }

    /// The newest render in either tier that `pick` accepts.
    pub(super) fn find(
        &self,
        domain: &str,
        title: &str,
        pick: impl Fn(u64, Uuid) -> bool,
    ) -> Result<Option<Got>> {
        let title = TitleKey::new(domain, title)?;
        self.read_fresh(|meta, staleness| self.find_in(meta, staleness, &title, &pick))
    }

    /// [`Store::find`] through one view of the title records.
    fn find_in(
        &self,
        meta: &Filesys,
        staleness: Staleness,
        title: &TitleKey,
        pick: &impl Fn(u64, Uuid) -> bool,
    ) -> Result<Option<Got>> {
        let name = title.name();
        let rec = self.record(meta, staleness, name)?;
        let now = self.clock.now();
        let hot = rec.as_ref().and_then(|rec| {
            self.visible(rec, now)
                .into_iter()
                .find(|r| pick(r.rev, r.tid))
        });
        // The archive holds only revisions that left the hot tier: a render of the current
        // revision in the hot tier is the answer without a look at the archive.
        let current = rec
            .as_ref()
            .and_then(|rec| rec.current_rev(&self.cfg.policy, now));
        let settled = hot.is_some_and(|r| Some(r.rev) == current);
        let mut best = hot.map(Hit::Hot);
        if !settled {
            for e in self.archived(name, rec.as_ref())? {
                let k = (e.rev, Uuid::from_bytes(e.tid));
                if pick(k.0, k.1) && best.as_ref().is_none_or(|b| newer(k, b.key())) {
                    best = Some(Hit::Archived(e));
                }
            }
        }
        match (best, &rec) {
            (Some(Hit::Hot(r)), Some(rec)) => self.got(rec, r, now).map(Some),
            (Some(Hit::Archived(e)), _) => {
                let archive = self
                    .archive_tier()?
                    .ok_or_else(|| Error::invalid("no archive"))?;
                let value = archive.read(name, &e)?;
                Ok(Some(Got {
                    rev: e.rev,
                    tid: Uuid::from_bytes(e.tid),
                    content_type: e.content_type,
                    state: State::Archived,
                    value,
                }))
            }
            _ => Ok(None),
        }
    }

    /// A title's renders in both tiers, newest first.
    pub(super) fn list_tiers(&self, domain: &str, title: &str, page: Page) -> Result<Vec<Listed>> {
        let title = TitleKey::new(domain, title)?;
        self.read_fresh(|meta, staleness| self.list_in(meta, staleness, &title, page))
    }

    /// [`Store::list_tiers`] through one view of the title records.
    fn list_in(
        &self,
        meta: &Filesys,
        staleness: Staleness,
        title: &TitleKey,
        page: Page,
    ) -> Result<Vec<Listed>> {
        let rec = self.record(meta, staleness, title.name())?;
        let now = self.clock.now();
        let policy = self.cfg.policy;
        let mut out: Vec<Listed> = match &rec {
            Some(rec) => self
                .visible(rec, now)
                .into_iter()
                .map(|r| Listed {
                    rev: r.rev,
                    tid: r.tid,
                    size: r.location.len,
                    content_type: r.content_type.clone(),
                    state: super::state_of(rec, r, &policy, now),
                })
                .collect(),
            None => Vec::new(),
        };
        for e in self.archived(title.name(), rec.as_ref())? {
            let tid = Uuid::from_bytes(e.tid);
            if !out.iter().any(|l| l.rev == e.rev && l.tid == tid) {
                out.push(Listed {
                    rev: e.rev,
                    tid,
                    size: e.len,
                    content_type: e.content_type,
                    state: State::Archived,
                });
            }
        }
        out.sort_by(|a, b| b.rev.cmp(&a.rev).then_with(|| cmp_tid(b.tid, a.tid)));
        Ok(out.into_iter().skip(page.offset).take(page.limit).collect())
    }

    /// Archives the candidates of every revision that has left the hot tier, then removes them
    /// from the hot tier: [`Store::archive_step`]s of 256 titles until the pass is done.
    /// `progress(done, total)` counts titles (the total is counted first).
    pub fn archive_due(&mut self, mut progress: impl FnMut(u64, u64)) -> Result<ArchiveReport> {
        self.archive_policy()?;
        self.writer()?;
        let total = self.meta.iter().count() as u64;
        let mut cursor = TitleCursor::new();
        let mut report = ArchiveReport::default();
        while !cursor.is_done() {
            let step = self.archive_step(&mut cursor, STEP_TITLES)?;
            report.add(&step);
            progress(report.titles_walked.min(total), total);
        }
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
        &mut self,
        cursor: &mut TitleCursor,
        max_titles: usize,
    ) -> Result<ArchiveReport> {
        let policy = self.archive_policy()?;
        self.writer()?;
        let Revisions::Recent { ttl } = self.cfg.policy.revisions else {
            // With every revision retained, no revision ever leaves the hot tier.
            cursor.finish_pass();
            return Ok(ArchiveReport::default());
        };
        let now = self.clock.now();
        let walk = self.walk_titles(cursor, max_titles)?;
        self.archive_tier()?;
        let mut report = ArchiveReport::default();
        let mut moved: Vec<Moved<'_>> = Vec::new();
        let mut failed = None;
        for (i, (name, _)) in walk.titles.iter().enumerate() {
            report.titles_walked += 1;
            match self.archive_title(name, policy, ttl, now) {
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
        if let Some(archive) = self.archive.as_mut() {
            archive.commit()?;
        }
        for (name, gone) in moved {
            let Some(mut rec) = self.load(name)? else {
                continue;
            };
            // Culled with the candidates as they were before the archived ones leave: culled
            // after, a render its deadline had hidden would take an archived candidate's place
            // (the newest render left, say) and be readable again, then archived by the next run.
            rec.cull_keeping(&self.cfg.policy, now, Some(policy));
            rec.renders.retain(|r| !gone.contains(&(r.rev, r.tid)));
            // Reads look in the archive only for titles whose record says so.
            rec.archive = InArchive::Yes;
            self.save(name, &rec)?;
        }
        if report.titles > 0 {
            self.commit()?;
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

    fn archive_policy(&self) -> Result<ArchivePolicy> {
        self.cfg.archive.ok_or_else(|| {
            Error::invalid(format!(
                "{}: this store has no archive (wink init --archive)",
                self.dir.display()
            ))
        })
    }

    /// Adds a title's due candidates to the archive (uncommitted); returns their (rev, tid) and
    /// raw bytes, or `None` when none is due.
    fn archive_title(
        &mut self,
        name: &[u8],
        policy: ArchivePolicy,
        ttl: i64,
        now: i64,
    ) -> Result<Option<Archived>> {
        let Some(rec) = self.load(name)? else {
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
            .map(|r| self.read_value(&r.location))
            .collect::<Result<_>>()?;
        let items: Vec<Item<'_>> = due
            .iter()
            .zip(&values)
            .map(|(r, v)| Item {
                rev: r.rev,
                tid: *r.tid.as_bytes(),
                content_type: &r.content_type,
                value: v,
            })
            .collect();
        let archive = self
            .archive_tier_mut()?
            .ok_or_else(|| Error::invalid("no archive"))?;
        archive.add(name, &items)?;
        let bytes = values.iter().map(|v| v.len() as u64).sum();
        Ok(Some((due.iter().map(|r| (r.rev, r.tid)).collect(), bytes)))
    }

    /// The archive tier, when the store has one.
    pub fn archive(&self) -> Option<&crate::archive::Archive> {
        self.archive.as_ref()
    }
}
