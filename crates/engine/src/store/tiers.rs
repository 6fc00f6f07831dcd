//! Reads through the tiers — hot (title records and containers), then the archive. The archive
//! run that moves revisions leaving the hot tier into the archive is
//! [`crate::maintenance::archive_run`].
//!
//! With the archive enabled, the renders the archive policy picks ("candidates") stay readable in
//! the hot tier past their deadline until they are archived.

use std::path::Path;

use uuid::Uuid;

use crate::archive::map::Entry as ArchiveEntry;
use crate::archive::Archive;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys, Staleness};

use super::key::{cmp_tid, TitleKey};
use super::latest::Latest;
use super::record::{InArchive, Render, TitleRecord};
use super::{lost_file, Got, Listed, Page, State, Store};

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
pub(crate) fn visible_in<'r>(
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
    pub(crate) fn visible<'r>(&self, rec: &'r TitleRecord, now: i64) -> Vec<&'r Render> {
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
        self.archived_where(name, rec, |entries| entries.cloned().collect())
            .map(Option::unwrap_or_default)
    }

    /// The newest archived render of a title (see [`Store::archived`]) that `pick` accepts,
    /// found without copying the title's entries.
    fn newest_archived(
        &self,
        name: &[u8],
        rec: Option<&TitleRecord>,
        pick: &impl Fn(u64, Uuid) -> bool,
    ) -> Result<Option<ArchiveEntry>> {
        let newest = self.archived_where(name, rec, |entries| {
            entries
                .filter(|e| pick(e.rev, Uuid::from_bytes(e.tid)))
                .max_by(|a, b| {
                    let tid = |e: &ArchiveEntry| Uuid::from_bytes(e.tid);
                    a.rev.cmp(&b.rev).then_with(|| cmp_tid(tid(a), tid(b)))
                })
                .cloned()
        })?;
        Ok(newest.flatten())
    }

    /// `look` at a title's archived renders that may be returned; `None` when there is nothing
    /// to look at. The archive is looked at only on the evidence of the title's record.
    fn archived_where<T>(
        &self,
        name: &[u8],
        rec: Option<&TitleRecord>,
        look: impl FnOnce(&mut dyn Iterator<Item = &ArchiveEntry>) -> T,
    ) -> Result<Option<T>> {
        let Some(rec) = rec else {
            self.check_unrecorded(name)?;
            return Ok(None);
        };
        if rec.title_down || rec.archive == InArchive::No {
            return Ok(None);
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
            return Ok(None);
        };
        let looked = archive.with_entries(name, |entries| {
            let mut may = entries
                .iter()
                .filter(|e| !e.taken_down && !rec.revs_down.contains(&e.rev));
            look(&mut may)
        })?;
        match looked {
            Some(t) => Ok(Some(t)),
            // The record says the archive holds revisions: its map was lost (an index cell).
            None if rec.archive == InArchive::Yes => Err(self.missing_map(archive, name)),
            None => Ok(None),
        }
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

    /// Whether the archive may hold renders of a title, on the evidence of its record as this
    /// handle reads it: false when the store has no archive, the title has no record, is taken
    /// down, or its record says nothing of it ever left the hot tier. A read-only handle's view
    /// of the archive is as of its open: a miss on it needs a newer view only when this is true.
    pub fn archive_may_hold(&self, domain: &str, title: &str) -> Result<bool> {
        if self.archive.is_none() && self.archive_damage.is_none() {
            return Ok(false);
        }
        let title = TitleKey::new(domain, title)?;
        let rec =
            self.read_fresh(|meta, staleness| self.records.read(meta, staleness, title.name()))?;
        Ok(rec.is_some_and(|r| !r.title_down && r.archive != InArchive::No))
    }

    /// The newest render in either tier that `pick` accepts (`latest`: it accepts every render,
    /// so the answer kept for a get of the latest render may answer).
    pub(super) fn find(
        &self,
        domain: &str,
        title: &str,
        latest: bool,
        pick: impl Fn(u64, Uuid) -> bool,
    ) -> Result<Option<Got>> {
        let title = TitleKey::new(domain, title)?;
        self.read_fresh(|meta, staleness| self.find_in(meta, staleness, &title, latest, &pick))
    }

    /// [`Store::find`] through one view of the title records.
    fn find_in(
        &self,
        meta: &Filesys,
        staleness: Staleness,
        title: &TitleKey,
        latest: bool,
        pick: &impl Fn(u64, Uuid) -> bool,
    ) -> Result<Option<Got>> {
        let name = title.name();
        let now = self.clock.now();
        if latest {
            if let Some(l) = self.records.latest(name, now, self.latest_tag) {
                return Ok(Some(Got {
                    rev: l.rev,
                    tid: l.tid,
                    labels: l.labels(),
                    content_type: l.content_type.into(),
                    state: l.state,
                    value: self.read_value(&l.location)?,
                }));
            }
        }
        let read = self.records.read_kept(meta, staleness, name)?;
        let (rec, kept) = match read {
            Some((rec, kept)) => (Some(rec), kept),
            None => (None, None),
        };
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
            if let Some(e) = self.newest_archived(name, rec.as_ref(), pick)? {
                let k = (e.rev, Uuid::from_bytes(e.tid));
                if best.as_ref().is_none_or(|b| newer(k, b.key())) {
                    best = Some(Hit::Archived(e));
                }
            }
        }
        match (best, &rec) {
            (Some(Hit::Hot(r)), Some(rec)) => {
                let got = self.got(rec, r, now)?;
                if latest && settled {
                    if let Some(kept) = &kept {
                        let l = Latest::of(rec, r, got.state, &self.cfg, self.latest_tag, now);
                        self.records.attach(name, kept, l);
                    }
                }
                Ok(Some(got))
            }
            (Some(Hit::Archived(e)), _) => {
                let archive = self
                    .archive_tier()?
                    .ok_or_else(|| Error::invalid("no archive"))?;
                let value = archive.read(name, &e)?;
                Ok(Some(Got {
                    rev: e.rev,
                    tid: Uuid::from_bytes(e.tid),
                    content_type: e.content_type,
                    labels: e.labels,
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
        let rec = self.records.read(meta, staleness, title.name())?;
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
                    content_type: r.content_type.to_string(),
                    labels: r.labels.clone(),
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
                    labels: e.labels,
                    state: State::Archived,
                });
            }
        }
        out.sort_by(|a, b| b.rev.cmp(&a.rev).then_with(|| cmp_tid(b.tid, a.tid)));
        Ok(out.into_iter().skip(page.offset).take(page.limit).collect())
    }

    /// Opens the archive at `base` (after a compaction rewrote it) in place of the current one.
    pub(crate) fn reopen_archive(&mut self, base: &Path) -> Result<()> {
        let aopts = self.cfg.archive_options();
        let open = filesys::OpenOptions {
            writable: self.containers.writable(),
            wait: false,
            clock: self.clock.clone(),
            drop_behind: Some(8 << 20),
            background_appends: true,
        };
        self.archive = None;
        self.archive = Some(Archive::open_in(self.vfs.clone(), base, &open, aopts)?);
        self.archive_damage = None;
        self.archive_base = base.to_path_buf();
        Ok(())
    }

    /// The archive tier: `None` for a store without one; the damage that kept it from opening
    /// for a store whose archive could not be read.
    pub(crate) fn archive_tier(&self) -> Result<Option<&Archive>> {
        match &self.archive_damage {
            Some(e) => Err(e.again()),
            None => Ok(self.archive.as_ref()),
        }
    }

    /// [`Store::archive_tier`], to write to.
    pub(crate) fn archive_tier_mut(&mut self) -> Result<Option<&mut Archive>> {
        match &self.archive_damage {
            Some(e) => Err(e.again()),
            None => Ok(self.archive.as_mut()),
        }
    }

    /// The damage of a title whose record is missing while the archive holds revisions of it:
    /// its index cell or its record was lost. Never answered from the archive alone, which
    /// would return an old revision as the latest.
    pub(crate) fn missing_record(&self, name: &[u8]) -> Error {
        lost_file(
            &self.records.fs,
            name,
            format!("title record of {:?}", String::from_utf8_lossy(name)),
            "a record: the archive holds revisions of the title",
            "none; run `wink recover --rebuild-index`",
        )
    }

    /// Checks that a title no record names has nothing in the archive either: if it has, its
    /// record was lost ([`Store::missing_record`]).
    pub(super) fn check_unrecorded(&self, name: &[u8]) -> Result<()> {
        if let Some(archive) = self.archive_tier()? {
            if archive.with_entries(name, |_| ())?.is_some() {
                return Err(self.missing_record(name));
            }
        }
        Ok(())
    }

    /// The archive tier, when the store has one.
    pub fn archive(&self) -> Option<&crate::archive::Archive> {
        self.archive.as_ref()
    }
}
