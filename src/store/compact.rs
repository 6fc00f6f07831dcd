//! Compaction: container by container, the values no read can return any more are
//! dropped and the rest copied into a new container, and the switch is made by the generation file
//! ([`super::generation`]).
//!
//! One job takes sealed containers N1, N2, … (oldest first) while their live bytes together fit
//! one container (`container_bytes`; the first always fits), and writes one new container M: a run
//! over many sparse containers leaves a few full ones, and pays the fixed costs of a target
//! (create, sync, seal, switch, the records' commit) once per target, not once per source.
//!
//! | phase    | what happens                                                          | after a crash here      |
//! |----------|-----------------------------------------------------------------------|-------------------------|
//! | survey   | each source's files (found through its index, many inode reads in flight; by a walk of the datafile when the index does not account for every live entry), each classified against its title's record: live, or dropped as expired / taken down / replaced / archived / deleted | nothing changed |
//! | pending  | the generation file names the new container M as `pending`             | M removed at open       |
//! | build    | the sources' live values copied into M (read 16 MiB ahead with `POSIX_FADV_WILLNEED`), grouped by title with a perm, verified against their CRC-32, M synced and sealed | M removed at open |
//! | validate | every title with a file in a source re-read: each render there a read could still return must have been copied | (M removed, sources kept) |
//! | switch   | the generation file: generation + 1, `move Ni M` for every source      | records rolled forward at open |
//! | forward  | the records' renders in the sources pointed into M (or dropped, when not live); one commit | rolled forward at open |
//! | remove   | each source's files removed (the datafile first), the directory synced; the moves are left out of the generation file's next write | removal finished at open |
//!
//! A source with no live value is dropped whole (`move N 0`), without a copy and without writing
//! a target. Free space needed: what one target's build writes ([`TargetCost`]: its values and
//! their overhead, an index sized for them, its small files, room for the records' commit),
//! checked for the whole run before [`Store::compact`] changes anything, and again before each
//! build. Only sealed containers are compacted; [`CompactOptions::seal_current`] rotates the
//! current one first when it holds dead values (so that a take-down can be verified at once),
//! once the run is known to go ahead. A live value that cannot
//! be read intact keeps its container whole; the other sources of its job are compacted again by
//! another job without it.
//!
//! The survey and the build need no writer: [`CompactJob::run`] works on its own read-only handles
//! and can run on another thread while the writer keeps taking puts; the validation, switch and
//! roll-forward ([`Store::adopt`]) take the writer's handle for as long as it takes to rewrite the
//! records of the sources' titles. A render that became live again after the survey (it cannot,
//! by the retention rules — deadlines only move earlier — but a survey may race a commit) fails
//! the validation, and the job is abandoned with its sources intact.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::archive::rewrite::{RewriteDue, RewriteReport};
use crate::archive::Archive;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys};
use crate::format::kvseq::KvSeqOptions;
use crate::format::perm::{Pair, Perm, PermOptions, RUNS_SUFFIX, SORTED_SUFFIX};
use crate::storage::{read_exact_at, sibling, Storage};
use crate::vfs::Vfs;

use super::generation::Generation;
use super::record::{Location, Render, TitleRecord};
use super::tiers::visible_in;
use super::view;
use super::{container_base, container_options, Config, Store};

/// How to compact.
#[derive(Clone, Debug)]
pub struct CompactOptions {
    /// Rewrite a sealed container once its rewrite would give back this fraction of its bytes
    /// (its bytes less its copy's; never when that is nothing). A container holding a taken-down
    /// value is always rewritten, and one with no live value always dropped.
    pub min_dead: f64,
    /// Limit on compaction I/O (bytes read plus written), in MB/s.
    pub max_mbps: Option<f64>,
    /// Seal the current container first when it holds dead values.
    pub seal_current: bool,
    /// Report what would be done, change nothing.
    pub dry_run: bool,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            min_dead: 0.25,
            max_mbps: None,
            seal_current: true,
            dry_run: false,
        }
    }
}

/// Why a stored value is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Past its retention deadline (whether or not culling removed it from its record yet).
    Expired,
    /// Its revision or title is taken down.
    TakenDown,
    /// The same (revision, tid) was written again; the record points at the newer copy.
    Replaced,
    /// Moved into the archive tier.
    Archived,
    /// No record knows its title any more, or its name is not a render's.
    Deleted,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::TakenDown => "taken down",
            Reason::Replaced => "replaced",
            Reason::Archived => "archived",
            Reason::Deleted => "deleted",
        }
    }
}

/// A count of values and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub values: u64,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: u64) {
        self.values += 1;
        self.bytes += bytes;
    }
}

/// What a compaction does with a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Too little to reclaim.
    Keep,
    /// Live values copied into a new container, the old one removed.
    Rewrite,
    /// No live value: removed whole.
    Drop,
    /// Left as it was: it changed while it was compacted (see the module doc), or failed.
    Abandoned,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Keep => "keep",
            Action::Rewrite => "rewrite",
            Action::Drop => "drop",
            Action::Abandoned => "abandoned",
        }
    }
}

/// One container's survey, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPlan {
    pub id: u32,
    /// Bytes of its files.
    pub bytes: u64,
    pub live: Tally,
    /// Bytes of the live values' names: a copy writes them beside the values.
    pub live_names: u64,
    pub dropped: BTreeMap<Reason, Tally>,
    pub action: Action,
    /// The container its live values went to.
    pub into: Option<u32>,
    /// Bytes of the new container's files: its share of its target's (estimated by a plan), and
    /// for the current container, sealed to be compacted, the files of the one started in its
    /// place.
    pub new_bytes: u64,
    /// Why a step was abandoned.
    pub note: Option<String>,
}

impl ContainerPlan {
    /// Bytes freed (estimated from the live bytes before a rewrite is done).
    pub fn reclaimed(&self) -> u64 {
        match self.action {
            Action::Keep | Action::Abandoned => 0,
            // `new_bytes` of a dropped container is the current container that replaced it.
            Action::Drop => self.bytes.saturating_sub(self.new_bytes),
            Action::Rewrite if self.new_bytes > 0 => self.bytes.saturating_sub(self.new_bytes),
            Action::Rewrite => self.bytes.saturating_sub(self.live.bytes),
        }
    }
}

/// What a compaction run did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompactReport {
    pub dry_run: bool,
    pub generation_before: u64,
    pub generation_after: u64,
    pub containers: Vec<ContainerPlan>,
    /// Bytes read from old containers and written to new ones.
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub seconds: f64,
    /// The options' `min_dead` (the archive is rewritten past it too).
    pub min_dead: f64,
    /// The archive's survey, when the store has one.
    pub archive_due: Option<RewriteDue>,
    /// The archive's rewrite, when one was done.
    pub archive_rewrite: Option<RewriteReport>,
}

impl CompactReport {
    pub fn reclaimed(&self) -> u64 {
        let archive = match (&self.archive_rewrite, &self.archive_due) {
            (Some(r), _) => r.bytes_before.saturating_sub(r.bytes_after),
            (None, Some(d)) if self.dry_run && archive_worth_it(d, self.min_dead) => {
                d.dead_bytes + d.reencode_stored_bytes.min(d.taken_down_stored_bytes)
            }
            _ => 0,
        };
        self.containers
            .iter()
            .map(ContainerPlan::reclaimed)
            .sum::<u64>()
            + archive
    }

    /// Whether the run has (or, dry, would have) nothing to do: no container to rewrite or
    /// drop, no archive to rewrite. A run with nothing to do writes nothing.
    pub fn nothing_to_do(&self) -> bool {
        let archive = match (&self.archive_rewrite, &self.archive_due) {
            (Some(_), _) => true,
            (None, Some(d)) => self.dry_run && archive_worth_it(d, self.min_dead),
            (None, None) => false,
        };
        // An abandoned container was worked on: the run had something to do.
        !archive && self.containers.iter().all(|c| c.action == Action::Keep)
    }

    /// Values dropped, by reason, over every container acted on.
    pub fn dropped(&self) -> BTreeMap<Reason, Tally> {
        let mut out: BTreeMap<Reason, Tally> = BTreeMap::new();
        for c in self
            .containers
            .iter()
            .filter(|c| matches!(c.action, Action::Rewrite | Action::Drop))
        {
            for (reason, t) in &c.dropped {
                let e = out.entry(*reason).or_default();
                e.values += t.values;
                e.bytes += t.bytes;
            }
        }
        out
    }
}

/// A live value found by the survey.
#[derive(Clone, Debug)]
struct LiveValue {
    /// The file's name in the container: `DOMAIN/TITLE/REV/TID`.
    name: Vec<u8>,
    /// The title record's name: `DOMAIN/TITLE`.
    record: Vec<u8>,
    rev: u64,
    tid: Uuid,
    loc: Location,
    /// The file's inode entry in the old container (its kv_pointer in the perm).
    inode: u64,
}

/// A survey: the plan and what a build needs.
#[derive(Debug)]
struct Survey {
    plan: ContainerPlan,
    live: Vec<LiveValue>,
    /// Every title with a file in the container.
    titles: BTreeSet<Vec<u8>>,
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

/// Removes a filesys's files, the datafile first, then syncs the directory.
pub(super) fn remove_filesys(vfs: &dyn Vfs, base: &Path) -> Result<()> {
    // A build's perm and its merge scratch too: a build that failed or was killed leaves them.
    let perm = filesys::file_path(base, "perm");
    let build = [RUNS_SUFFIX, SORTED_SUFFIX].map(|suffix| sibling(&perm, suffix));
    let leftovers: Vec<PathBuf> = filesys::scratch_files(base)
        .into_iter()
        .chain([perm])
        .chain(build)
        .collect();
    match filesys::remove_files(vfs, base, &leftovers)? {
        Some(path) => vfs.sync_dir(&path),
        None => Ok(()),
    }
}

/// Removes compacted containers whose records were committed (see [`Store::finish_move`]).
fn remove_sources(vfs: &dyn Vfs, dir: &Path, sources: &[u32]) -> Result<()> {
    for source in sources {
        remove_filesys(vfs, &container_base(dir, *source))?;
    }
    Ok(())
}

fn join_removal(removal: std::thread::JoinHandle<Result<()>>) -> Result<()> {
    removal
        .join()
        .unwrap_or_else(|p| Err(Error::panicked("a container removal thread", &*p)))
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
struct Surveyor<'a> {
    cfg: &'a Config,
    load: LoadRecord<'a>,
    archive: Option<&'a Archive>,
    now: i64,
    cache: HashMap<Vec<u8>, TitleFacts>,
}

impl Surveyor<'_> {
    fn new<'a>(
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

    fn survey(&mut self, vfs: &Arc<dyn Vfs>, dir: &Path, id: u32) -> Result<Survey> {
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
fn decide(plan: &mut ContainerPlan, opts: &CompactOptions, replacement: u64) {
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

/// Bytes of a value's entry in a container's datafile besides the value and its name: the
/// entry headers and padding, and its inode (ISZ 88). Measured, rounded up.
const ENTRY_OVERHEAD: u64 = 128;

/// Bytes a value adds to a target's journal: its index cell and inode, written in place and
/// committed through the journal. Measured, rounded up.
const JOURNAL_PER_VALUE: u64 = 64;

/// Free space a run keeps for the generation file and the title records' commit (each title
/// with a value in a source is rewritten; `RECORD_PER_VALUE` for each of those values).
const META_ROOM: u64 = 2 << 20;
const RECORD_PER_VALUE: u64 = 128;

/// What a target container costs when it holds `values` values of `bytes` bytes whose names
/// take `names` bytes: its files after the copy, and the free space the copy needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TargetCost {
    values: u64,
    bytes: u64,
    names: u64,
}

impl TargetCost {
    fn of(plan: &ContainerPlan) -> TargetCost {
        let mut cost = TargetCost::default();
        cost.add(plan);
        cost
    }

    fn add(&mut self, plan: &ContainerPlan) {
        self.values += plan.live.values;
        self.bytes += plan.live.bytes;
        self.names += plan.live_names;
    }

    /// Index cells for exactly its values under the load limit: the copy never grows the index,
    /// and a small target does not carry the index of a whole container.
    fn htsize(&self) -> u64 {
        ((self.values + 1) * 4 / 3 + 1).next_power_of_two().max(16)
    }

    fn data_bytes(&self) -> u64 {
        SBSIZE + self.bytes + self.names + self.values * ENTRY_OVERHEAD
    }

    /// The datafile's one preallocation: a little past its estimate, so that it is never
    /// extended (a second step of the same size would double what the copy needs).
    fn data_allocation(&self) -> u64 {
        let data = self.data_bytes();
        (data + data / 64 + (64 << 10)).next_multiple_of(64 << 10)
    }

    fn fixed_bytes(&self) -> u64 {
        let index = SBSIZE + self.htsize() * 16;
        let time = 2 * SBSIZE;
        let journal = SBSIZE + self.values * JOURNAL_PER_VALUE;
        index + time + journal
    }

    /// Bytes of its files once it is sealed.
    fn files_bytes(&self) -> u64 {
        self.data_bytes() + self.fixed_bytes()
    }

    /// Free space its build needs: the datafile's preallocation, its other files, and room for
    /// the generation file and the records' commit.
    fn need(&self) -> u64 {
        self.data_allocation() + self.fixed_bytes() + META_ROOM + self.values * RECORD_PER_VALUE
    }

    fn options(&self, cfg: &Config) -> crate::filesys::FsOptions {
        crate::filesys::FsOptions {
            htsize: self.htsize(),
            fileincr: self.data_allocation(),
            ..container_options(cfg)
        }
    }
}

const SBSIZE: u64 = crate::format::superblock::DEFAULT_SBSIZE;

/// Indexes of the rewrites among `plans` (in order), grouped into targets as jobs group them:
/// while their live bytes fit one container (the first always fits).
fn target_groups(plans: &[ContainerPlan], cfg: &Config) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut live = 0u64;
    for (i, plan) in plans.iter().enumerate() {
        if plan.action != Action::Rewrite {
            continue;
        }
        match groups.last_mut() {
            Some(group) if live == 0 || live + plan.live.bytes <= cfg.container_bytes => {
                group.push(i);
                live += plan.live.bytes;
            }
            _ => {
                groups.push(vec![i]);
                live = plan.live.bytes;
            }
        }
    }
    groups
}

/// Whether the archive is worth rewriting: it holds taken-down bytes, or enough dead ones.
fn archive_worth_it(due: &RewriteDue, min_dead: f64) -> bool {
    due.taken_down > 0
        || (due.dead_bytes > 0 && due.dead_bytes as f64 >= min_dead * due.datafile_bytes as f64)
}

/// Limits I/O to a rate.
struct Throttle {
    bytes_per_sec: Option<f64>,
    start: Instant,
    bytes: u64,
}

impl Throttle {
    fn new(max_mbps: Option<f64>) -> Throttle {
        Throttle {
            bytes_per_sec: max_mbps.filter(|m| *m > 0.0).map(|m| m * 1e6),
            start: Instant::now(),
            bytes: 0,
        }
    }

    fn account(&mut self, bytes: u64) {
        self.bytes += bytes;
        if let Some(rate) = self.bytes_per_sec {
            let due = Duration::from_secs_f64(self.bytes as f64 / rate);
            let elapsed = self.start.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
    }
}

/// A compaction of one or more sealed containers into one new container, to run on any thread;
/// [`Store::adopt`] finishes it.
///
/// Sparse containers are merged: the job takes its sources in order while their live bytes
/// together fit one container (`container_bytes`; the first always fits), so a run over many
/// sparse containers leaves a few full ones, and pays a container's fixed costs (create, sync,
/// seal, switch, the records' commit) once per target instead of once per source.
#[derive(Debug)]
pub struct CompactJob {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    cfg: Config,
    clock: Arc<dyn Clock>,
    archive_base: Option<PathBuf>,
    opts: CompactOptions,
    /// Candidates, oldest first; the job takes a prefix of them.
    sources: Vec<u32>,
    target: u32,
}

/// A finished build, for [`Store::adopt`].
#[derive(Debug)]
pub struct Built {
    /// One per source the job took (a prefix of its candidates, less `retry`).
    plans: Vec<ContainerPlan>,
    /// Sources taken whose rewrite was given up because another source of the same target
    /// holds damage: to be compacted again, without it.
    retry: Vec<u32>,
    /// Every title with a file in a source rewritten or dropped.
    titles: BTreeSet<Vec<u8>>,
    /// (record, rev, tid) → (old location, new location).
    remap: HashMap<(Vec<u8>, u64, Uuid), (Location, Location)>,
    read_bytes: u64,
    written_bytes: u64,
}

impl Built {
    pub fn plans(&self) -> &[ContainerPlan] {
        &self.plans
    }

    /// How many of the job's candidates it took (surveyed and acted on, kept, or to retry).
    fn taken(&self) -> usize {
        self.plans.len() + self.retry.len()
    }

    fn acted(&self) -> impl Iterator<Item = &ContainerPlan> {
        self.plans
            .iter()
            .filter(|p| matches!(p.action, Action::Rewrite | Action::Drop))
    }
}

/// What [`Store::adopt`] did with a job.
#[derive(Debug, Default)]
pub struct Adopted {
    /// One per source the job took, with its action as done.
    pub plans: Vec<ContainerPlan>,
    /// Sources to compact again (see [`Built`]).
    pub retry: Vec<u32>,
    /// How many of the job's candidates it took: the caller's next job starts after them.
    pub taken: usize,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Sources the switch moved away from (removed by `adopt`).
    pub switched: Vec<u32>,
}

impl CompactJob {
    /// The containers this job may compact (it takes a prefix of them).
    pub fn sources(&self) -> &[u32] {
        &self.sources
    }

    /// The container the job writes.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// Surveys the candidates, takes those whose live bytes fit one container, and copies the
    /// live values of those worth a rewrite into the target.
    pub fn run(&self) -> Result<Built> {
        self.run_with_progress(&mut |_| {})
    }

    /// [`CompactJob::run`], telling `progress` the bytes of values copied so far.
    pub fn run_with_progress(&self, progress: &mut dyn FnMut(u64)) -> Result<Built> {
        let now = self.clock.now();
        let mut built = Built {
            plans: Vec::new(),
            retry: Vec::new(),
            titles: BTreeSet::new(),
            remap: HashMap::new(),
            read_bytes: 0,
            written_bytes: 0,
        };
        let mut live = Vec::new();
        let mut live_bytes = 0u64;
        let mut cost = TargetCost::default();
        let mut surveyed: VecDeque<Result<Survey>> = VecDeque::new();
        let mut next = 0;
        loop {
            if surveyed.is_empty() {
                if next == self.sources.len() {
                    break;
                }
                let end = (next + SURVEYS_AT_ONCE).min(self.sources.len());
                surveyed.extend(self.survey_all(&self.sources[next..end], now));
                next = end;
            }
            // A survey is only used (and its error only reported) once its turn comes.
            let Some(survey) = surveyed.pop_front() else {
                break;
            };
            let Survey {
                mut plan,
                live: values,
                titles,
            } = survey?;
            decide(&mut plan, &self.opts, 0);
            if plan.action == Action::Rewrite {
                if live_bytes > 0 && live_bytes + plan.live.bytes > self.cfg.container_bytes {
                    break;
                }
                live_bytes += plan.live.bytes;
                cost.add(&plan);
                live.extend(values);
            }
            if matches!(plan.action, Action::Rewrite | Action::Drop) {
                built.titles.extend(titles);
            }
            built.plans.push(plan);
        }
        if built.plans.iter().any(|p| p.action == Action::Rewrite) {
            self.check_space(&cost)?;
            // Named before it exists: a crash from here on leaves it to be removed at open.
            let mut g = Generation::read(self.vfs.as_ref(), &self.dir)?;
            g.pending = self.target;
            let kv = KvSeqOptions {
                clock: self.clock.clone(),
                ..KvSeqOptions::default()
            };
            g.write(self.vfs.as_ref(), &self.dir, &kv)?;
            self.copy(live, &cost, &mut built, progress)?;
        }
        Ok(built)
    }

    /// Surveys `ids` at once, one thread each with its own read-only handles: a survey waits
    /// on small random reads (index cells, inodes), so several overlap well on a disk.
    fn survey_all(&self, ids: &[u32], now: i64) -> Vec<Result<Survey>> {
        std::thread::scope(|scope| {
            let workers: Vec<_> = ids
                .iter()
                .map(|&id| scope.spawn(move || self.survey_one(id, now)))
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|p| Err(Error::panicked("a survey thread", &*p)))
                })
                .collect()
        })
    }

    fn survey_one(&self, id: u32, now: i64) -> Result<Survey> {
        let reopen = || {
            super::open_meta(
                self.vfs.clone(),
                &self.dir,
                &filesys::OpenOptions::read_only(),
            )
        };
        let meta = RefCell::new(reopen()?);
        let load = |name: &[u8]| {
            view::read_renewing(&meta, reopen, |fs, staleness| {
                view::read_record(fs, name, staleness)
            })
        };
        let archive = match &self.archive_base {
            Some(base) => Some(Archive::open_in(
                self.vfs.clone(),
                base,
                &filesys::OpenOptions::read_only(),
                crate::archive::ArchiveOptions::default(),
            )?),
            None => None,
        };
        Surveyor::new(&self.cfg, &load, archive.as_ref(), now).survey(&self.vfs, &self.dir, id)
    }

    /// Refuses a build the free space cannot hold: counts what it writes (see [`TargetCost`]).
    fn check_space(&self, cost: &TargetCost) -> Result<()> {
        let need = cost.need();
        match free_bytes(&self.dir) {
            Some(free) if free < need => Err(Error::Full {
                path: self.dir.clone(),
                what: format!(
                    "compacting {} bytes of values into container {} needs {need} bytes free, \
                     {free} are",
                    cost.bytes, self.target
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Copies the live values into the target, a title's values together (grouped with a perm).
    fn copy(
        &self,
        mut live: Vec<LiveValue>,
        cost: &TargetCost,
        built: &mut Built,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        // Old order within a title: by container, then by inode.
        live.sort_by_key(|v| (v.loc.container, v.inode));
        let order = self.title_order(&live)?;
        let mut sources = HashMap::new();
        for plan in built.plans.iter().filter(|p| p.action == Action::Rewrite) {
            let path = filesys::file_path(&container_base(&self.dir, plan.id), "data");
            let source = self.vfs.open(&path, false)?;
            let _ = source.advise_random();
            sources.insert(plan.id, source);
        }
        let target_base = container_base(&self.dir, self.target);
        let open = filesys::OpenOptions {
            writable: true,
            wait: false,
            clock: self.clock.clone(),
            drop_behind: Some(8 << 20),
        };
        let mut target = Filesys::create_in(
            self.vfs.clone(),
            &target_base,
            &cost.options(&self.cfg),
            &open,
        )?;
        let mut throttle = Throttle::new(self.opts.max_mbps);
        let mut ahead = ReadAhead::new(&sources, COPY_READ_AHEAD);
        let mut value = Vec::new();
        for (k, &i) in order.iter().enumerate() {
            ahead.keep_ahead(order[k..].iter().map(|&j| live[j].loc));
            let v = &live[i];
            let source = sources.get(&v.loc.container).ok_or_else(|| {
                Error::invalid(format!("container {} is not a source", v.loc.container))
            })?;
            if let Err(e) = read_checked_into(source.as_ref(), &v.loc, &mut value) {
                drop(target);
                give_up_for_damage(built, v, &e);
                return Ok(());
            }
            ahead.consumed(&v.loc);
            let (_, extents) = target.put_located(&v.name, 0, &value)?;
            let new = Location {
                container: self.target,
                offset: extents.first().map_or(0, |e| e.offset),
                len: v.loc.len,
                crc: v.loc.crc,
            };
            built
                .remap
                .insert((v.record.clone(), v.rev, v.tid), (v.loc, new));
            built.read_bytes += v.loc.len;
            built.written_bytes += v.loc.len;
            progress(built.written_bytes);
            throttle.account(2 * v.loc.len);
        }
        target.sync()?;
        target.seal()?;
        let filesize = target.data().filesize();
        // Synced, so clean: the copy leaves none of its pages in the cache.
        let _ = target.data().storage().drop_cache(0, 0);
        drop(target);
        for source in sources.values() {
            let _ = source.drop_cache(0, u64::MAX);
        }
        let new_bytes = filesys::files_size(self.vfs.as_ref(), &target_base, Some(filesize))?;
        share_target(built, self.target, new_bytes);
        Ok(())
    }

    /// Indexes into `live` in the new container's order: grouped by title (a perm of indexes
    /// into `live`, grouped by the title's hash), in `live`'s order within a title.
    fn title_order(&self, live: &[LiveValue]) -> Result<Vec<usize>> {
        let path = self.dir.join(format!("c{:06}.perm", self.target));
        if self.vfs.exists(&path) {
            self.vfs.remove(&path)?;
        }
        let mut perm = Perm::create(self.vfs.create_new(&path)?, &PermOptions::default())?;
        for (i, v) in live.iter().enumerate() {
            let hash = perm.hash_key(&v.record);
            perm.append(Pair {
                ptr: crate::format::kvseq::KvPointer(i as u64),
                hash,
            })?;
        }
        perm.group(|a, b| Ok(a.ptr.cmp(&b.ptr)))?;
        let mut order = Vec::with_capacity(live.len());
        let mut start = 0;
        while start < perm.len() {
            let n = (perm.len() - start).min(1 << 16);
            for pair in perm.read_range(start, n)? {
                let i = usize::try_from(pair.ptr.0)
                    .ok()
                    .filter(|i| *i < live.len())
                    .ok_or_else(|| {
                        Error::corrupt(&path, 0, "perm pair", "an index of the survey", pair.ptr.0)
                    })?;
                order.push(i);
            }
            start += n;
        }
        drop(perm);
        self.vfs.remove(&path)?;
        Ok(order)
    }
}

/// A live value that cannot be read intact: its container is kept whole (damage is never
/// dropped, nor does it stop the run), and the other sources to be rewritten into the same
/// target are left for another job without it (adopt removes the partial target).
fn give_up_for_damage(built: &mut Built, v: &LiveValue, e: &Error) {
    let damaged = v.loc.container;
    built.remap.clear();
    built.read_bytes = 0;
    built.written_bytes = 0;
    let plans = std::mem::take(&mut built.plans);
    for mut plan in plans {
        if plan.id == damaged {
            plan.action = Action::Keep;
            plan.note = Some(format!(
                "kept: the value of {:?} rev {} tid {} cannot be read intact ({e}); `wink scrub --quarantine` copies it aside",
                String::from_utf8_lossy(&v.record),
                v.rev,
                v.tid
            ));
            built.plans.push(plan);
        } else if plan.action == Action::Rewrite {
            built.retry.push(plan.id);
        } else {
            built.plans.push(plan);
        }
    }
}

/// Names the target in each rewritten source's plan, with a share of the target's bytes in
/// proportion to the live bytes it gave.
fn share_target(built: &mut Built, target: u32, new_bytes: u64) {
    let live: u64 = built
        .plans
        .iter()
        .filter(|p| p.action == Action::Rewrite)
        .map(|p| p.live.bytes)
        .sum();
    for plan in built
        .plans
        .iter_mut()
        .filter(|p| p.action == Action::Rewrite)
    {
        plan.into = Some(target);
        plan.new_bytes = if live == 0 {
            0
        } else {
            (u128::from(new_bytes) * u128::from(plan.live.bytes) / u128::from(live)) as u64
        };
    }
}

/// A plan's estimate of what its rewrites will write: for each target, as the jobs will group
/// them, its values and their overhead, and its fixed files (an index sized for what it holds),
/// shared among its sources by live bytes, as a real run shares its targets' bytes.
fn estimate_targets(plans: &mut [ContainerPlan], cfg: &Config) {
    for group in target_groups(plans, cfg) {
        let mut cost = TargetCost::default();
        for &i in &group {
            cost.add(&plans[i]);
        }
        let live = cost.bytes.max(1);
        let fixed = cost.files_bytes() - cost.bytes;
        for &i in &group {
            let plan = &mut plans[i];
            let share = u128::from(fixed) * u128::from(plan.live.bytes) / u128::from(live);
            plan.new_bytes = plan.live.bytes.saturating_add(share as u64);
        }
    }
}

/// Bytes of a new current container's files before its first value: its index, presized for a
/// whole container (SBSIZE, then HTSIZE cells of 16 bytes: CELLSZ 2), and the superblocks of its
/// datafile, time index and journal. Sealing the current container to compact it starts one.
fn replacement_bytes(cfg: &Config) -> u64 {
    SBSIZE + container_options(cfg).htsize * 16 + 3 * SBSIZE
}

/// Containers a job surveys at once (a job over sparse containers takes several).
const SURVEYS_AT_ONCE: usize = 4;

/// Bytes of values asked for ahead of the copy: reads queued at the disk while the copy
/// writes, instead of one synchronous read per value.
const COPY_READ_AHEAD: u64 = 16 << 20;

/// Keeps the next values of a copy being read into the page cache (`POSIX_FADV_WILLNEED`), a
/// bounded number of bytes ahead, and drops each from the cache once it is copied.
struct ReadAhead<'a> {
    /// The source containers' datafiles, by container number.
    sources: &'a HashMap<u32, Box<dyn Storage>>,
    limit: u64,
    /// Values asked for and not yet consumed, and their bytes.
    asked: usize,
    bytes: u64,
}

impl<'a> ReadAhead<'a> {
    fn new(sources: &'a HashMap<u32, Box<dyn Storage>>, limit: u64) -> Self {
        ReadAhead {
            sources,
            limit,
            asked: 0,
            bytes: 0,
        }
    }

    /// `next`: the values still to copy, the next one first.
    fn keep_ahead(&mut self, next: impl Iterator<Item = Location>) {
        for loc in next.skip(self.asked) {
            if self.asked > 0 && self.bytes + loc.len > self.limit {
                break;
            }
            // A hint: a value not read ahead is read when its turn comes.
            if let Some(source) = self.sources.get(&loc.container) {
                let _ = source.will_need(loc.offset, loc.len);
            }
            self.asked += 1;
            self.bytes += loc.len;
        }
    }

    fn consumed(&mut self, loc: &Location) {
        self.asked = self.asked.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(loc.len);
        if let Some(source) = self.sources.get(&loc.container) {
            let _ = source.drop_cache(loc.offset, loc.len);
        }
    }
}

/// Reads a value into `value` and checks it against its CRC-32. The caller reuses the buffer:
/// a fresh large one per value costs a page-faulting allocation each time.
fn read_checked_into(storage: &dyn Storage, loc: &Location, value: &mut Vec<u8>) -> Result<()> {
    let len = usize::try_from(loc.len).map_err(|_| Error::invalid("value too large for memory"))?;
    value.clear();
    value
        .try_reserve(len)
        .map_err(|_| Error::invalid("value too large for memory"))?;
    value.resize(len, 0);
    if len > 0 {
        read_exact_at(storage, value, loc.offset, "a value")?;
    }
    loc.verify(storage.path(), value)
}

/// Refuses the first of `steps` (what it is for, bytes it needs) that `room` cannot hold.
fn room_for(dir: &Path, room: i128, steps: &[(String, u64)], free: u64) -> Result<()> {
    match steps.iter().find(|(_, need)| i128::from(*need) > room) {
        Some((what, need)) => Err(Error::Full {
            path: dir.to_path_buf(),
            what: format!(
                "compaction needs {need} bytes free {what}, {} would be ({free} are now); \
                 nothing was changed",
                room.max(0)
            ),
        }),
        None => Ok(()),
    }
}

/// Whether a plan changes its container.
fn acts(plan: &ContainerPlan) -> bool {
    matches!(plan.action, Action::Rewrite | Action::Drop)
}

/// Free bytes of the file system holding `dir`, when it can be asked.
fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

impl Store {
    /// The generation file's contents.
    /// Moves whose source is gone are finished and left out (see [`Store::finish_move`]).
    pub fn generation(&self) -> Result<Generation> {
        let mut g = Generation::read(self.vfs.as_ref(), &self.dir)?;
        g.moves
            .retain(|(source, _)| !self.container_files_gone(*source));
        Ok(g)
    }

    /// Writes the generation file, leaving out finished moves (see [`Store::finish_move`]).
    fn write_generation(&self, g: &Generation) -> Result<()> {
        let kv = KvSeqOptions {
            clock: self.clock.clone(),
            ..KvSeqOptions::default()
        };
        let mut g = g.clone();
        g.moves
            .retain(|(source, _)| !self.container_files_gone(*source));
        g.write(self.vfs.as_ref(), &self.dir, &kv)
    }

    /// No file of container `id` is left.
    fn container_files_gone(&self, id: u32) -> bool {
        let base = container_base(&self.dir, id);
        !filesys::FILES
            .iter()
            .any(|ext| self.vfs.exists(&filesys::file_path(&base, ext)))
    }

    /// What a compaction would do, without changing anything (any handle).
    pub fn plan_compaction(&self, opts: &CompactOptions) -> Result<CompactReport> {
        let start = Instant::now();
        let g = self.generation()?;
        let load = |name: &[u8]| self.load_fresh(name);
        let mut surveyor = Surveyor::new(&self.cfg, &load, self.archive.as_ref(), self.clock.now());
        let mut containers = Vec::new();
        let current = self.current_container()?;
        let replacement = replacement_bytes(&self.cfg);
        for id in self.container_ids()? {
            let mut plan = surveyor.survey(&self.vfs, &self.dir, id)?.plan;
            if id != current {
                decide(&mut plan, opts, 0);
            } else if opts.seal_current {
                decide(&mut plan, opts, replacement);
            }
            containers.push(plan);
        }
        estimate_targets(&mut containers, &self.cfg);
        // Sealing the current container to compact it starts another in its place.
        for plan in containers.iter_mut().filter(|p| p.id == current && acts(p)) {
            plan.new_bytes += replacement;
        }
        let archive_due = self.archive.as_ref().map(|a| a.rewrite_due()).transpose()?;
        Ok(CompactReport {
            dry_run: true,
            generation_before: g.generation,
            generation_after: g.generation,
            containers,
            read_bytes: 0,
            written_bytes: 0,
            seconds: start.elapsed().as_secs_f64(),
            min_dead: opts.min_dead,
            archive_due,
            archive_rewrite: None,
        })
    }

    /// Compacts every container worth it (see the module doc). With `dry_run`, only reports.
    ///
    /// The whole run is planned first, changing nothing: with nothing to do, nothing is written
    /// (the report's [`CompactReport::nothing_to_do`] says so), and a run the free space cannot
    /// hold is refused with [`Error::Full`] before any change. Then the current container is
    /// sealed when it holds values to drop, the containers with nothing live are dropped (no
    /// container is written for them, and their space is free before any copy needs it), and
    /// the rest are rewritten, a target at a time. `progress` is told (bytes of values copied,
    /// bytes to copy).
    pub fn compact(
        &mut self,
        opts: &CompactOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<CompactReport> {
        if opts.dry_run {
            return self.plan_compaction(opts);
        }
        self.writer()?;
        let start = Instant::now();
        let mut plan = self.plan_compaction(opts)?;
        let idle = plan.nothing_to_do();
        plan.dry_run = false;
        if idle {
            plan.seconds = start.elapsed().as_secs_f64();
            return Ok(plan);
        }
        let current = self.current_container()?;
        let seal = plan.containers.iter().any(|p| p.id == current && acts(p));
        let peak = self.check_run_space(&plan, seal)?;
        // From here on the run changes the store.
        let mut replaced = None;
        if seal {
            self.rotate()?;
            let id = self.current_container()?;
            let filesize = self.writer()?.fs.data().filesize();
            let base = container_base(&self.dir, id);
            let bytes = filesys::files_size(self.vfs.as_ref(), &base, Some(filesize))?;
            replaced = Some((current, bytes));
        } else {
            // The jobs survey what is committed.
            self.commit()?;
        }
        let planned: HashMap<u32, ContainerPlan> =
            plan.containers.iter().map(|p| (p.id, p.clone())).collect();
        let mut report = CompactReport {
            generation_before: plan.generation_before,
            min_dead: opts.min_dead,
            containers: plan
                .containers
                .iter()
                .filter(|p| !acts(p))
                .cloned()
                .collect(),
            ..CompactReport::default()
        };
        let ids = |action| -> Vec<u32> {
            plan.containers
                .iter()
                .filter(|p| p.action == action)
                .map(|p| p.id)
                .collect()
        };
        let (dead, rewrites) = (ids(Action::Drop), ids(Action::Rewrite));
        let total: u64 = plan
            .containers
            .iter()
            .filter(|p| p.action == Action::Rewrite)
            .map(|p| p.live.bytes)
            .sum();
        progress(0, total);
        if !dead.is_empty() {
            // Dropped in a job of their own, which writes no container, and removed before any
            // copy: their space is what a full disk's copy may need.
            let job = self.start_compaction_of(&dead, opts)?;
            let built = job.run();
            let adopted = self.adopt(&job, built)?;
            report.read_bytes += adopted.read_bytes;
            report.written_bytes += adopted.written_bytes;
            report.containers.extend(adopted.plans);
        }
        let mut queue: VecDeque<u32> = rewrites.into();
        let mut removal = None;
        let mut copied = 0u64;
        while !queue.is_empty() {
            if removal.is_some() && free_bytes(&self.dir).is_some_and(|free| free < peak) {
                // Too little room to copy while the last job's sources are still being removed.
                if let Some(previous) = removal.take() {
                    join_removal(previous)?;
                }
            }
            let candidates: Vec<u32> = queue.iter().copied().collect();
            let job = self.start_compaction_of(&candidates, opts)?;
            let built = job.run_with_progress(&mut |n| progress(copied + n, total.max(copied + n)));
            if let Err(e @ Error::Full { .. }) = &built {
                // The disk filled since the plan. The run has changed the store already, so it
                // is not refused: what is left is reported as abandoned, and kept.
                let why = e.to_string();
                self.abandon(&job)?;
                for id in queue.drain(..) {
                    let mut plan = planned
                        .get(&id)
                        .cloned()
                        .ok_or_else(|| Error::invalid(format!("container {id} was not planned")))?;
                    plan.action = Action::Abandoned;
                    plan.note = Some(why.clone());
                    report.containers.push(plan);
                }
                break;
            }
            let adopted = self.adopt_switched(&job, built)?;
            // Freeing a container's blocks is slow on some file systems (tens of ms per 64 MiB
            // with online discard); the next job's survey and copy go on meanwhile.
            if let Some(previous) = removal.take() {
                join_removal(previous)?;
            }
            let (vfs, dir, sources) =
                (self.vfs.clone(), self.dir.clone(), adopted.switched.clone());
            removal = Some(std::thread::spawn(move || {
                remove_sources(vfs.as_ref(), &dir, &sources)
            }));
            // A job takes at least its first candidate; a damaged one is reported, not retried.
            queue.drain(..adopted.taken.clamp(1, queue.len()));
            for id in adopted.retry.iter().rev() {
                queue.push_front(*id);
            }
            report.containers.extend(adopted.plans);
            report.read_bytes += adopted.read_bytes;
            report.written_bytes += adopted.written_bytes;
            copied = report.written_bytes;
            progress(copied, total.max(copied));
        }
        if let Some(last) = removal.take() {
            join_removal(last)?;
        }
        if let Some((id, bytes)) = replaced {
            for plan in report
                .containers
                .iter_mut()
                .filter(|p| p.id == id && acts(p))
            {
                plan.new_bytes += bytes;
            }
        }
        report.containers.sort_by_key(|c| c.id);
        self.compact_archive(opts, &mut report)?;
        report.seconds = start.elapsed().as_secs_f64();
        self.record_run(&mut report)?;
        Ok(report)
    }

    /// Refuses a run (nothing changed yet) whose steps the free space cannot hold, in the order
    /// they come: the seal of the current container (its preallocated room given back, its
    /// replacement's files written), the drops (the generation file and the records' commit;
    /// their space free once done), each target's build ([`TargetCost::need`]). Returns the
    /// largest build's need.
    fn check_run_space(&mut self, plan: &CompactReport, seal: bool) -> Result<u64> {
        let mut needs = Vec::new();
        for group in target_groups(&plan.containers, &self.cfg) {
            let mut cost = TargetCost::default();
            for &i in &group {
                cost.add(&plan.containers[i]);
            }
            needs.push((
                format!("to copy {} bytes of values", cost.bytes),
                cost.need(),
            ));
        }
        let peak = needs.iter().map(|n| n.1).max().unwrap_or(0);
        let Some(free) = free_bytes(&self.dir) else {
            return Ok(peak);
        };
        let mut room = i128::from(free);
        let mut steps = Vec::new();
        if seal {
            let current = self.current_container()?;
            let path = filesys::file_path(&container_base(&self.dir, current), "data");
            let len = self
                .vfs
                .open(&path, false)?
                .len()
                .map_err(|e| Error::io(&path, None, e))?;
            let slack = len.saturating_sub(self.writer()?.fs.data().filesize());
            let replacement = replacement_bytes(&self.cfg);
            steps.push((
                "to seal the current container".to_string(),
                replacement + META_ROOM,
            ));
            room_for(&self.dir, room, &steps, free)?;
            room += i128::from(slack) - i128::from(replacement);
            steps.clear();
        }
        let dropped: u64 = plan
            .containers
            .iter()
            .filter(|p| p.action == Action::Drop)
            .map(|p| p.bytes)
            .sum();
        if dropped > 0 {
            steps.push((
                "to drop the containers with nothing live".to_string(),
                META_ROOM,
            ));
            room_for(&self.dir, room, &steps, free)?;
            room += i128::from(dropped);
            steps.clear();
        }
        room_for(&self.dir, room, &needs, free)?;
        Ok(peak)
    }

    /// Rewrites the archive without taken-down bytes or dead entries when it is worth it: into
    /// `archive.gN`, named `pending_archive` first; the switch names it `archive` in the
    /// generation file; the old one is then removed.
    fn compact_archive(&mut self, opts: &CompactOptions, report: &mut CompactReport) -> Result<()> {
        let Some(archive) = &self.archive else {
            return Ok(());
        };
        let due = archive.rewrite_due()?;
        let worth = archive_worth_it(&due, opts.min_dead);
        report.archive_due = Some(due);
        if !worth {
            return Ok(());
        }
        report.archive_rewrite = Some(self.switch_archive()?);
        Ok(())
    }

    /// Rewrites the archive whether or not it holds anything to reclaim: what converts an
    /// archive of format 1 to format 2 (`wink archive --rewrite`). Reads go on meanwhile, from
    /// the old archive until the switch.
    pub fn rewrite_archive(&mut self) -> Result<RewriteReport> {
        self.archive_policy_set()?;
        self.writer()?;
        self.switch_archive()
    }

    fn archive_policy_set(&self) -> Result<()> {
        match self.archive {
            Some(_) => Ok(()),
            None => Err(Error::invalid(format!(
                "{}: this store has no archive (wink init --archive)",
                self.dir.display()
            ))),
        }
    }

    /// Writes the archive anew into `archive.gN`, named `pending_archive` first; the switch
    /// names it `archive` in the generation file; the old one is then removed.
    fn switch_archive(&mut self) -> Result<RewriteReport> {
        let Some(archive) = &self.archive else {
            return Err(Error::invalid("no archive"));
        };
        let mut g = self.generation()?;
        let name = format!("archive.g{}", g.generation + 1);
        let dest = self.dir.join(&name);
        if self.vfs.exists(&filesys::file_path(&dest, "data")) {
            Archive::remove_in(self.vfs.as_ref(), &dest)?;
        }
        g.pending_archive = name.clone();
        self.write_generation(&g)?;
        let open = filesys::OpenOptions {
            writable: true,
            wait: false,
            clock: self.clock.clone(),
            drop_behind: Some(8 << 20),
        };
        let rewritten = archive.rewrite_into(self.vfs.clone(), &dest, &open, |_, _| {});
        let rewritten = match rewritten {
            Ok(r) => r,
            Err(e) => {
                Archive::remove_in(self.vfs.as_ref(), &dest)?;
                g.pending_archive.clear();
                self.write_generation(&g)?;
                return Err(e);
            }
        };
        let old = g.archive_base(&self.dir);
        g.retired_archive = std::mem::replace(&mut g.archive, name);
        g.pending_archive.clear();
        g.generation += 1;
        self.write_generation(&g)?;
        self.reopen_archive(&dest)?;
        Archive::remove_in(self.vfs.as_ref(), &old)?;
        g.retired_archive.clear();
        self.write_generation(&g)?;
        Ok(rewritten)
    }

    /// Prepares the compaction of sealed container `source` (see [`Store::start_compaction_of`]).
    pub fn start_compaction(&mut self, source: u32, opts: &CompactOptions) -> Result<CompactJob> {
        self.start_compaction_of(&[source], opts)
    }

    /// Prepares the compaction of sealed containers `candidates` (oldest first; the job takes
    /// those whose live bytes fit one container, up to the current container): allocates the
    /// new container. The job may run on another thread.
    pub fn start_compaction_of(
        &mut self,
        candidates: &[u32],
        opts: &CompactOptions,
    ) -> Result<CompactJob> {
        self.writer()?;
        let current = self.current_container()?;
        let sources: Vec<u32> = candidates
            .iter()
            .copied()
            .take_while(|id| *id != current)
            .collect();
        if sources.is_empty() {
            return Err(Error::invalid(format!(
                "container {current} is the current one; only sealed containers are compacted"
            )));
        }
        let target = self.allocate_container()?;
        let g = self.generation()?;
        Ok(CompactJob {
            vfs: self.vfs.clone(),
            dir: self.dir.clone(),
            cfg: self.cfg,
            clock: self.clock.clone(),
            archive_base: self.archive.as_ref().map(|_| g.archive_base(&self.dir)),
            opts: opts.clone(),
            sources,
            target,
        })
    }

    /// Finishes a job: validates it against the records as they are now, switches the
    /// generation (one `move` per source), points the records into the new container and
    /// removes the old ones. A job that failed or no longer fits leaves its sources as they were.
    pub fn adopt(&mut self, job: &CompactJob, built: Result<Built>) -> Result<Adopted> {
        let adopted = self.adopt_switched(job, built)?;
        remove_sources(self.vfs.as_ref(), &self.dir, &adopted.switched)?;
        Ok(adopted)
    }

    /// [`Store::adopt`] up to the removal of the sources: the sources switched away from are
    /// in `Adopted::switched`, their records committed and their readers forgotten; they are to
    /// be removed ([`remove_sources`]).
    fn adopt_switched(&mut self, job: &CompactJob, built: Result<Built>) -> Result<Adopted> {
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                self.abandon(job)?;
                return Err(e);
            }
        };
        let mut adopted = Adopted {
            taken: built.taken(),
            retry: built.retry.clone(),
            read_bytes: built.read_bytes,
            written_bytes: built.written_bytes,
            plans: built.plans.clone(),
            switched: Vec::new(),
        };
        // Source → where its live values went (0: dropped whole).
        let acted: BTreeMap<u32, u32> =
            built.acted().map(|p| (p.id, p.into.unwrap_or(0))).collect();
        if !acted.values().any(|into| *into == job.target) {
            // Nothing copied (or a copy given up): the target goes before any switch.
            self.abandon(job)?;
        }
        if acted.is_empty() {
            return Ok(adopted);
        }
        if let Some(why) = self.stale(&acted, &built)? {
            self.abandon(job)?;
            for plan in adopted
                .plans
                .iter_mut()
                .filter(|p| acted.contains_key(&p.id))
            {
                plan.action = Action::Abandoned;
                plan.note = Some(why.clone());
            }
            return Ok(adopted);
        }
        // NEXTCONT past the target, durable before the switch names it: a crash before the
        // records' commit would otherwise leave a target that container_ids does not list.
        self.commit()?;
        let mut g = self.generation()?;
        g.generation += 1;
        g.pending = 0;
        g.moves
            .extend(acted.iter().map(|(from, into)| (*from, *into)));
        self.write_generation(&g)?;
        self.forward(&built.titles, &acted, |key, r| {
            built
                .remap
                .get(key)
                .filter(|(old, _)| *old == r.location)
                .map(|(_, new)| *new)
        })?;
        adopted.switched = acted.keys().copied().collect();
        for source in &adopted.switched {
            self.forget_reader(*source);
        }
        Ok(adopted)
    }

    /// Why a build no longer matches the records (a render in a source acted on that a read
    /// could return was not copied, or moved since), or `None`.
    fn stale(&self, acted: &BTreeMap<u32, u32>, built: &Built) -> Result<Option<String>> {
        let now = self.clock.now();
        for title in &built.titles {
            let Some(rec) = self.load(title)? else {
                continue;
            };
            for r in visible_in(&self.cfg, &rec, now) {
                if !acted.contains_key(&r.location.container) {
                    continue;
                }
                let copied = built
                    .remap
                    .get(&(title.clone(), r.rev, r.tid))
                    .is_some_and(|(old, _)| *old == r.location);
                if !copied {
                    return Ok(Some(format!(
                        "{} revision {} tid {} is live and was not copied",
                        String::from_utf8_lossy(title),
                        r.rev,
                        r.tid
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Points the renders of `titles` that lie in a container of `sources` to where `remap`
    /// says, dropping the rest (no read can return them: the validation or the survey said so),
    /// and commits.
    fn forward<V>(
        &mut self,
        titles: &BTreeSet<Vec<u8>>,
        sources: &BTreeMap<u32, V>,
        remap: impl Fn(&(Vec<u8>, u64, Uuid), &Render) -> Option<Location>,
    ) -> Result<u64> {
        let mut changed = 0;
        for title in titles {
            let Some(mut rec) = self.load(title)? else {
                continue;
            };
            let moved = |r: &Render| sources.contains_key(&r.location.container);
            if !rec.renders.iter().any(moved) {
                continue;
            }
            let renders = std::mem::take(&mut rec.renders);
            for mut r in renders {
                if moved(&r) {
                    match remap(&(title.clone(), r.rev, r.tid), &r) {
                        Some(loc) => r.location = loc,
                        None => continue,
                    }
                }
                rec.renders.push(r);
            }
            self.save(title, &rec)?;
            changed += 1;
        }
        self.commit()?;
        Ok(changed)
    }

    /// Removes a compacted container and clears its move from the generation file.
    ///
    /// The move stays named in the generation file until its next write, which leaves out every
    /// move whose source is gone: clearing it at once would cost a write (two fsyncs) per
    /// container, and a move whose source is gone is finished (its records were committed
    /// before the removal began), so recovery only sweeps what is left of its files.
    fn finish_move(&mut self, source: u32) -> Result<()> {
        self.forget_reader(source);
        remove_filesys(self.vfs.as_ref(), &container_base(&self.dir, source))
    }

    /// Removes a job's unfinished target and clears `pending`.
    fn abandon(&mut self, job: &CompactJob) -> Result<()> {
        remove_filesys(self.vfs.as_ref(), &container_base(&self.dir, job.target))?;
        let mut g = self.generation()?;
        if g.pending == job.target {
            g.pending = 0;
            self.write_generation(&g)?;
        }
        Ok(())
    }

    /// Records a finished run in the generation file.
    fn record_run(&mut self, report: &mut CompactReport) -> Result<()> {
        let mut g = self.generation()?;
        g.last_time = self.clock.now();
        g.last_reclaimed = report.reclaimed();
        g.compactions += 1;
        self.write_generation(&g)?;
        report.generation_after = g.generation;
        Ok(())
    }

    /// Finishes what the generation file says a crashed compaction left under way (a writer's
    /// open calls this); returns what it did, for the log.
    pub(super) fn recover_generation(&mut self) -> Result<Vec<String>> {
        let mut done = Vec::new();
        // A switch killed before its rename leaves its scratch file; the old file stands.
        let tmp = self.dir.join(format!("{}.tmp", super::generation::FILE));
        if self.vfs.exists(&tmp) {
            self.vfs.remove(&tmp)?;
            done.push(format!("removed {}: an unfinished switch", tmp.display()));
        }
        let mut g = self.generation()?;
        for name in [g.pending_archive.clone(), g.retired_archive.clone()] {
            if !name.is_empty() && name != g.archive {
                let base = self.dir.join(&name);
                Archive::remove_in(self.vfs.as_ref(), &base)?;
                done.push(format!(
                    "removed {}: an archive a compaction replaced or did not finish",
                    base.display()
                ));
            }
        }
        if !g.pending_archive.is_empty() || !g.retired_archive.is_empty() {
            g.pending_archive.clear();
            g.retired_archive.clear();
            self.write_generation(&g)?;
        }
        let targets: Vec<u32> = g.moves.iter().map(|m| m.1).collect();
        if g.pending != 0 && !targets.contains(&g.pending) {
            let base = container_base(&self.dir, g.pending);
            remove_filesys(self.vfs.as_ref(), &base)?;
            done.push(format!(
                "removed {}: an unfinished compaction's container",
                base.display()
            ));
            g.pending = 0;
            self.write_generation(&g)?;
        }
        // A move's target is in use from the switch on: its number must be allocated (the
        // roll-forward's commit makes this durable) before the sweep below.
        if let Some(top) = g.moves.iter().map(|m| m.1).max() {
            if top >= self.next_container()? {
                self.meta.set_var(super::NEXTCONT, i64::from(top) + 1)?;
            }
        }
        for (source, into) in g.moves.clone() {
            // Its datafile is removed first, after the records' commit: once it is gone, only
            // the rest of its files are left to remove.
            let source_data = filesys::file_path(&container_base(&self.dir, source), "data");
            if !self.vfs.exists(&source_data) {
                self.finish_move(source)?;
                continue;
            }
            let n = self.roll_forward(source, into)?;
            self.finish_move(source)?;
            done.push(format!(
                "finished compacting container {source} into {into}: {n} title records pointed into it"
            ));
        }
        if !g.moves.is_empty() {
            self.write_generation(&self.generation()?)?;
        }
        self.remove_unallocated(&mut done)?;
        Ok(done)
    }

    /// Removes containers at numbers no commit handed out (from NEXTCONT on, past CURCONT): a
    /// rotation killed between its new container's create and its commit leaves one. No
    /// committed record points into them: a commit of records makes NEXTCONT durable with them.
    fn remove_unallocated(&mut self, done: &mut Vec<String>) -> Result<()> {
        let mut id = self.next_container()?;
        loop {
            let base = container_base(&self.dir, id);
            let any = filesys::FILES
                .iter()
                .chain(&["data.creating"])
                .any(|ext| self.vfs.exists(&filesys::file_path(&base, ext)));
            if !any {
                return Ok(());
            }
            remove_filesys(self.vfs.as_ref(), &base)?;
            done.push(format!(
                "removed {}: a container whose number was never committed",
                base.display()
            ));
            id = id.saturating_add(1);
        }
    }

    /// Points every record's renders in `source` into `into` by name (after a crash the remap
    /// of the build is gone; the new container's index has it).
    fn roll_forward(&mut self, source: u32, into: u32) -> Result<u64> {
        let mut titles = BTreeSet::new();
        for item in self.meta.iter() {
            let file = item?;
            let rec = super::record_of(&self.meta, &file)?;
            if rec.renders.iter().any(|r| r.location.container == source) {
                titles.insert(file.name);
            }
        }
        let target = match into {
            0 => None,
            id => Some(Filesys::open_in(
                self.vfs.clone(),
                &container_base(&self.dir, id),
                &filesys::OpenOptions::read_only(),
            )?),
        };
        let lookup = |key: &(Vec<u8>, u64, Uuid), r: &Render| -> Option<Location> {
            let fs = target.as_ref()?;
            let name = format!("{}/{}/{}", String::from_utf8_lossy(&key.0), key.1, key.2);
            let extents = fs.extents(name.as_bytes()).ok()??;
            match extents.as_slice() {
                [e] if e.len == r.location.len => Some(Location {
                    container: into,
                    offset: e.offset,
                    ..r.location
                }),
                _ => None,
            }
        };
        self.forward(&titles, &BTreeMap::from([(source, into)]), lookup)
    }
}
