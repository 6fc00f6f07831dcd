//! The survey: each file of a container classified against its title's record (live, or
//! dropped and why), and the decision of what to do with the container.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use uuid::Uuid;

use crate::archive::Archive;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys};
use crate::store::containers::container_base;
use crate::store::record::{Location, Render, TitleRecord};
use crate::store::tiers::visible_in;
use crate::store::Config;
use crate::vfs::Vfs;

use super::cost::TargetCost;
use super::report::{Action, ContainerPlan, Reason, Tally};
use super::CompactOptions;

/// A live value found by the survey.
#[derive(Clone, Debug)]
pub(super) struct LiveValue {
    /// The file's name in the container: `DOMAIN/TITLE/REV/TID`.
    pub(super) name: Vec<u8>,
    /// The title record's name: `DOMAIN/TITLE`.
    pub(super) record: Vec<u8>,
    pub(super) rev: u64,
    pub(super) tid: Uuid,
    pub(super) loc: Location,
    /// The file's inode entry in the old container (its kv_pointer): the copy's order within
    /// a title.
    pub(super) inode: u64,
}

/// A survey: the plan and what a build needs.
#[derive(Debug)]
pub(super) struct Survey {
    pub(super) plan: ContainerPlan,
    pub(super) live: Vec<LiveValue>,
    /// Every title with a file in the container.
    pub(super) titles: BTreeSet<Vec<u8>>,
}

impl Survey {
    /// Bytes of memory the survey holds (its live values and titles), to bound what is kept.
    pub(super) fn held_bytes(&self) -> u64 {
        let values: usize = self
            .live
            .iter()
            .map(|v| std::mem::size_of::<LiveValue>() + v.name.len() + v.record.len())
            .sum();
        let titles: usize = self.titles.iter().map(|t| 3 * 8 + t.len()).sum();
        (values + titles) as u64
    }
}

/// Containers surveyed at once (a job over sparse containers takes several, a run's plan
/// takes them all).
pub(super) const SURVEYS_AT_ONCE: usize = 4;

/// Surveys `ids` with `survey`, [`SURVEYS_AT_ONCE`] at a time, one thread each: a survey waits
/// on small random reads (index cells, inodes), so several overlap well on a disk. In `ids`'
/// order.
pub(super) fn survey_in_parallel(
    ids: &[u32],
    survey: impl Fn(u32) -> Result<Survey> + Sync,
) -> Vec<Result<Survey>> {
    let survey = &survey;
    let mut surveys = Vec::with_capacity(ids.len());
    for batch in ids.chunks(SURVEYS_AT_ONCE) {
        std::thread::scope(|scope| {
            let workers: Vec<_> = batch
                .iter()
                .map(|&id| scope.spawn(move || survey(id)))
                .collect();
            surveys.extend(workers.into_iter().map(|w| {
                w.join()
                    .unwrap_or_else(|p| Err(Error::panicked("a survey thread", &*p)))
            }));
        });
    }
    surveys
}

/// `DOMAIN/TITLE/REV/TID` → (`DOMAIN/TITLE`, rev, tid); titles may hold `/`.
fn parse_value_name(name: &[u8]) -> Option<(Vec<u8>, u64, Uuid)> {
    let text = std::str::from_utf8(name).ok()?;
    let mut parts = text.rsplitn(3, '/');
    let tid = Uuid::parse_str(parts.next()?).ok()?;
    let rev = parts.next()?.parse().ok()?;
    let record = parts.next()?;
    record
        .contains('/')
        .then(|| (record.as_bytes().to_vec(), rev, tid))
}

/// Titles whose facts a survey keeps at once (a container's files interleave titles; each
/// title's record is read and decoded once while it stays in the cache).
const SURVEY_CACHE: usize = 4096;

/// What the survey needs of one title, worked out once.
struct TitleFacts {
    rec: Option<TitleRecord>,
    /// (rev, tid) of the hot renders a read may return now.
    visible: HashSet<(u64, Uuid)>,
    /// (rev, tid) the archive holds, read when first needed.
    archived: Option<HashSet<(u64, [u8; 16])>>,
}

/// Reads a title record by its name: through the writer's view, or a read-only view renewed
/// when a writer's commit made it stale (see `view.rs`), so that a survey beside a writer
/// classifies values by the records as they are, not as they were when its view was taken.
type LoadRecord<'a> = &'a dyn Fn(&[u8]) -> Result<Option<TitleRecord>>;

/// Classifies every file of container `id` against the title records.
pub(super) struct Surveyor<'a> {
    cfg: &'a Config,
    load: LoadRecord<'a>,
    archive: Option<&'a Archive>,
    now: i64,
    cache: HashMap<Vec<u8>, TitleFacts>,
}

impl Surveyor<'_> {
    pub(super) fn new<'a>(
        cfg: &'a Config,
        load: LoadRecord<'a>,
        archive: Option<&'a Archive>,
        now: i64,
    ) -> Surveyor<'a> {
        Surveyor {
            cfg,
            load,
            archive,
            now,
            cache: HashMap::new(),
        }
    }

    fn facts(&mut self, name: &[u8]) -> Result<&mut TitleFacts> {
        if !self.cache.contains_key(name) {
            if self.cache.len() >= SURVEY_CACHE {
                self.cache.clear();
            }
            let rec = (self.load)(name)?;
            let visible = rec
                .as_ref()
                .map(|rec| {
                    visible_in(self.cfg, rec, self.now)
                        .iter()
                        .map(|r| (r.rev, r.tid))
                        .collect()
                })
                .unwrap_or_default();
            let facts = TitleFacts {
                rec,
                visible,
                archived: None,
            };
            self.cache.insert(name.to_vec(), facts);
        }
        self.cache
            .get_mut(name)
            .ok_or_else(|| Error::invalid("survey cache lost a title"))
    }

    pub(super) fn survey(&mut self, vfs: &Arc<dyn Vfs>, dir: &Path, id: u32) -> Result<Survey> {
        let base = container_base(dir, id);
        let fs = Filesys::open_in(vfs.clone(), &base, &filesys::OpenOptions::read_only())?;
        let mut plan = ContainerPlan {
            id,
            bytes: filesys::files_size(vfs.as_ref(), &base, Some(fs.data().filesize()))?,
            live: Tally::default(),
            live_names: 0,
            dropped: BTreeMap::new(),
            action: Action::Keep,
            into: None,
            new_bytes: 0,
            note: None,
        };
        let mut live = Vec::new();
        let mut titles = BTreeSet::new();
        // Only inodes are read, a page or two per file: no readahead of the values between.
        let _ = fs.data().storage().advise_random();
        let files = match fs.files_by_index()? {
            Some(files) => files,
            None => fs.iter_sparse().collect::<Result<Vec<_>>>()?,
        };
        for file in files {
            let Some((record, rev, tid)) = parse_value_name(&file.name) else {
                plan.dropped
                    .entry(Reason::Deleted)
                    .or_default()
                    .add(file.size);
                continue;
            };
            titles.insert(record.clone());
            match self.classify(&record, rev, tid, id)? {
                Ok(render) => {
                    plan.live.add(render.location.len);
                    plan.live_names += file.name.len() as u64;
                    live.push(LiveValue {
                        name: file.name,
                        record,
                        rev,
                        tid,
                        loc: render.location,
                        inode: file.inode.0,
                    });
                }
                Err(reason) => plan.dropped.entry(reason).or_default().add(file.size),
            }
        }
        let _ = fs.data().storage().drop_cache(0, 0);
        Ok(Survey { plan, live, titles })
    }

    /// The live render a file holds, or why it is dead.
    fn classify(
        &mut self,
        record: &[u8],
        rev: u64,
        tid: Uuid,
        id: u32,
    ) -> Result<std::result::Result<Render, Reason>> {
        let archive = self.archive;
        let facts = self.facts(record)?;
        let Some(rec) = &facts.rec else {
            return Ok(Err(Reason::Deleted));
        };
        if let Some(r) = rec.renders.iter().find(|r| r.rev == rev && r.tid == tid) {
            if r.location.container != id {
                return Ok(Err(Reason::Replaced));
            }
            return Ok(if facts.visible.contains(&(rev, tid)) {
                Ok(r.clone())
            } else {
                Err(Reason::Expired)
            });
        }
        if rec.title_down || rec.revs_down.contains(&rev) {
            return Ok(Err(Reason::TakenDown));
        }
        if let Some(archive) = archive {
            if facts.archived.is_none() {
                let held = archive
                    .map(record)?
                    .map(|m| m.entries.iter().map(|e| (e.rev, e.tid)).collect())
                    .unwrap_or_default();
                facts.archived = Some(held);
            }
            if facts
                .archived
                .as_ref()
                .is_some_and(|held| held.contains(&(rev, *tid.as_bytes())))
            {
                return Ok(Err(Reason::Archived));
            }
        }
        Ok(Err(Reason::Expired))
    }
}

/// Decides a surveyed container's action. `replacement`: bytes of the container that a seal
/// starts in its place when it is the current one (0 for a sealed one).
///
/// A rewrite must pay for itself: what it is estimated to give back (the container's bytes less
/// its copy's, and less a replacement's) must be positive and at least `min_dead` of the
/// container, or a run could leave the store bigger than it found it. A taken-down value is
/// rewritten out whatever it costs.
pub(super) fn decide(plan: &mut ContainerPlan, opts: &CompactOptions, replacement: u64) {
    // A container without files (a fresh current one) has nothing to reclaim.
    let empty = plan.live.values == 0 && plan.dropped.is_empty();
    plan.action = if empty {
        Action::Keep
    } else if plan.live.values == 0 {
        Action::Drop
    } else if plan.dropped.is_empty() {
        // Its dead bytes are overhead (headers, inodes, index) a copy would have as well: a
        // small container would otherwise pass min_dead and be rewritten by every run.
        Action::Keep
    } else if plan.dropped.contains_key(&Reason::TakenDown) {
        Action::Rewrite
    } else {
        let copy = TargetCost::of(plan).files_bytes();
        let gain = plan.bytes.saturating_sub(copy.saturating_add(replacement));
        if gain > 0 && gain as f64 >= opts.min_dead * plan.bytes as f64 {
            Action::Rewrite
        } else {
            Action::Keep
        }
    };
}
