//! The copy job: a build of one target container from sealed sources, on its own read-only
//! handles (any thread), throttled, reading ahead; and its start by the writer.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::archive::Archive;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys};
use crate::format::hash::KeyHash;
use crate::format::kvseq::KvSeqOptions;
use crate::storage::{read_exact_at, Storage};
use crate::store::containers::container_base;
use crate::store::generation::Generation;
use crate::store::record::Location;
use crate::store::view;
use crate::store::{Config, Store};
use crate::vfs::Vfs;

use super::cost::{free_bytes, TargetCost};
use super::report::{Action, ContainerPlan};
use super::survey::{decide, survey_in_parallel, LiveValue, Survey, Surveyor, SURVEYS_AT_ONCE};
use super::CompactOptions;

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
/// [`adopt`](fn@crate::maintenance::adopt) finishes it.
///
/// Sparse containers are merged: the job takes its sources in order while their live bytes
/// together fit one container (`container_bytes`; the first always fits), so a run over many
/// sparse containers leaves a few full ones, and pays a container's fixed costs (create, sync,
/// seal, switch, the records' commit) once per target instead of once per source.
#[derive(Debug)]
pub struct CompactJob {
    site: SurveySite,
    clock: Arc<dyn Clock>,
    opts: CompactOptions,
    /// Candidates, oldest first; the job takes a prefix of them.
    sources: Vec<u32>,
    target: u32,
    /// Surveys of candidates already made (by the run that planned this job), taken instead
    /// of surveying them again.
    surveyed: Mutex<HashMap<u32, Survey>>,
}

/// What a survey reads: a store's containers, title records and archive, each survey on
/// read-only handles of its own, so that surveys run on any thread beside the writer.
#[derive(Debug)]
struct SurveySite {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    cfg: Config,
    archive_base: Option<PathBuf>,
}

impl SurveySite {
    fn of(store: &Store) -> Result<SurveySite> {
        let g = store.generation()?;
        Ok(SurveySite {
            vfs: store.vfs().clone(),
            dir: store.dir().to_path_buf(),
            cfg: *store.config(),
            archive_base: store.archive().map(|_| g.archive_base(store.dir())),
        })
    }

    /// Surveys `ids` in parallel, in their order.
    fn survey(&self, ids: &[u32], now: i64) -> Vec<Result<Survey>> {
        survey_in_parallel(ids, |id| self.survey_one(id, now))
    }

    fn survey_one(&self, id: u32, now: i64) -> Result<Survey> {
        let reopen = || {
            crate::store::open_meta(
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
}

/// A finished build, for [`adopt`](fn@crate::maintenance::adopt).
#[derive(Debug)]
pub struct Built {
    /// One per source the job took (a prefix of its candidates, less `retry`).
    pub(super) plans: Vec<ContainerPlan>,
    /// Sources taken whose rewrite was given up because another source of the same target
    /// holds damage: to be compacted again, without it.
    pub(super) retry: Vec<u32>,
    /// Every title with a file in a source rewritten or dropped.
    pub(super) titles: BTreeSet<Vec<u8>>,
    /// (record, rev, tid) → (old location, new location).
    pub(super) remap: HashMap<(Vec<u8>, u64, Uuid), (Location, Location)>,
    pub(super) read_bytes: u64,
    pub(super) written_bytes: u64,
}

impl Built {
    /// One per source the job took, with the action it took (a prefix of its candidates).
    pub fn plans(&self) -> &[ContainerPlan] {
        &self.plans
    }

    /// How many of the job's candidates it took (surveyed and acted on, kept, or to retry).
    pub(super) fn taken(&self) -> usize {
        self.plans.len() + self.retry.len()
    }

    pub(super) fn acted(&self) -> impl Iterator<Item = &ContainerPlan> {
        self.plans
            .iter()
            .filter(|p| matches!(p.action, Action::Rewrite | Action::Drop))
    }
}

/// What [`adopt`](fn@crate::maintenance::adopt) did with a job.
#[derive(Debug, Default)]
pub struct Adopted {
    /// One per source the job took, with its action as done.
    pub plans: Vec<ContainerPlan>,
    /// Sources to compact again (see [`Built`]).
    pub retry: Vec<u32>,
    /// How many of the job's candidates it took: the caller's next job starts after them.
    pub taken: usize,
    /// Bytes read from the sources.
    pub read_bytes: u64,
    /// Bytes written to the new container.
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
                let batch = self.next_surveys(next, now);
                next += batch.len();
                surveyed.extend(batch);
            }
            // A survey is only used (and its error only reported) once its turn comes.
            let Some(survey) = surveyed.pop_front() else {
                break;
            };
            let mut survey = survey?;
            decide(&mut survey.plan, &self.opts, 0);
            let full = live_bytes > 0
                && live_bytes + survey.plan.live.bytes > self.site.cfg.container_bytes;
            if survey.plan.action == Action::Rewrite && full {
                surveyed.push_front(Ok(survey));
                break;
            }
            let Survey {
                plan,
                live: values,
                titles,
            } = survey;
            if plan.action == Action::Rewrite {
                live_bytes += plan.live.bytes;
                cost.add(&plan);
                live.extend(values);
            }
            if matches!(plan.action, Action::Rewrite | Action::Drop) {
                built.titles.extend(titles);
            }
            built.plans.push(plan);
        }
        // Surveys made and not taken stay for the job after this one.
        self.surveyed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(surveyed.into_iter().flatten().map(|s| (s.plan.id, s)));
        if built.plans.iter().any(|p| p.action == Action::Rewrite) {
            self.check_space(&cost)?;
            // Named before it exists: a crash from here on leaves it to be removed at open.
            let mut g = Generation::read(self.site.vfs.as_ref(), &self.site.dir)?;
            g.pending = self.target;
            let kv = KvSeqOptions {
                clock: self.clock.clone(),
                ..KvSeqOptions::default()
            };
            g.write(self.site.vfs.as_ref(), &self.site.dir, &kv)?;
            self.copy(live, &cost, &mut built, progress)?;
        }
        Ok(built)
    }

    /// The surveys of the candidates from `next` on: one made already, or up to
    /// [`SURVEYS_AT_ONCE`] in a row whose surveys are not, made now in parallel.
    fn next_surveys(&self, next: usize, now: i64) -> Vec<Result<Survey>> {
        let rest = &self.sources[next..];
        let n = {
            let mut surveyed = self.surveyed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(made) = rest.first().and_then(|id| surveyed.remove(id)) {
                return vec![Ok(made)];
            }
            rest.iter()
                .take(SURVEYS_AT_ONCE)
                .take_while(|id| !surveyed.contains_key(id))
                .count()
        };
        self.site.survey(&rest[..n], now)
    }

    /// Gives the job surveys made before it started, of candidates the store has not changed
    /// since (see [`compact`](fn@crate::maintenance::compact)); it surveys the others itself.
    pub(super) fn with_surveys(self, surveys: HashMap<u32, Survey>) -> CompactJob {
        CompactJob {
            surveyed: Mutex::new(surveys),
            ..self
        }
    }

    /// The surveys given to the job that it did not use: those of the candidates it left.
    pub(super) fn unused_surveys(&self) -> HashMap<u32, Survey> {
        std::mem::take(&mut *self.surveyed.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Refuses a build the free space cannot hold: counts what it writes (see [`TargetCost`]).
    fn check_space(&self, cost: &TargetCost) -> Result<()> {
        let need = cost.need();
        match free_bytes(&self.site.dir) {
            Some(free) if free < need => Err(Error::Full {
                path: self.site.dir.clone(),
                what: format!(
                    "compacting {} bytes of values into container {} needs {need} bytes free, \
                     {free} are",
                    cost.bytes, self.target
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Copies the live values into the target, a title's values together.
    fn copy(
        &self,
        mut live: Vec<LiveValue>,
        cost: &TargetCost,
        built: &mut Built,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        // Old order within a title: by container, then by inode.
        live.sort_by_key(|v| (v.loc.container, v.inode));
        let order = Self::title_order(&live);
        let mut sources = HashMap::new();
        for plan in built.plans.iter().filter(|p| p.action == Action::Rewrite) {
            let path = filesys::file_path(&container_base(&self.site.dir, plan.id), "data");
            let source = self.site.vfs.open(&path, false)?;
            let _ = source.advise_random();
            sources.insert(plan.id, source);
        }
        let target_base = container_base(&self.site.dir, self.target);
        let open = filesys::OpenOptions {
            writable: true,
            wait: false,
            clock: self.clock.clone(),
            drop_behind: Some(8 << 20),
            background_appends: true,
        };
        let mut target = Filesys::create_in(
            self.site.vfs.clone(),
            &target_base,
            &cost.options(&self.site.cfg),
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
        // The seal commits what was copied (one barrier), then trims the preallocation.
        target.seal()?;
        let filesize = target.data().filesize();
        // Synced, so clean: the copy leaves none of its pages in the cache.
        let _ = target.data().storage().drop_cache(0, 0);
        drop(target);
        for source in sources.values() {
            let _ = source.drop_cache(0, u64::MAX);
        }
        let new_bytes = filesys::files_size(self.site.vfs.as_ref(), &target_base, Some(filesize))?;
        share_target(built, self.target, new_bytes);
        Ok(())
    }

    /// Indexes into `live` in the new container's order: grouped by title (by the hash of the
    /// title's name, as a perm groups them), in `live`'s order within a title. Sorted in memory:
    /// `live` is, and a perm file on disk cost a create, a sync and an unlink per target.
    fn title_order(live: &[LiveValue]) -> Vec<usize> {
        let mut keyed: Vec<(u64, usize)> = live
            .iter()
            .enumerate()
            .map(|(i, v)| (KeyHash::of(&v.record).hash63(), i))
            .collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, i)| i).collect()
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
                "kept: the value of {:?} rev {} tid {} cannot be read intact ({e}); \
                 `wink scrub --quarantine` copies it aside",
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

/// Prepares the compaction of sealed container `source` (see [`start_compaction_of`](fn@crate::maintenance::start_compaction_of)).
pub fn start_compaction(
    store: &mut Store,
    source: u32,
    opts: &CompactOptions,
) -> Result<CompactJob> {
    start_compaction_of(store, &[source], opts)
}
/// Prepares the compaction of sealed containers `candidates` (oldest first; the job takes
/// those whose live bytes fit one container, up to the current container): allocates the
/// new container. The job may run on another thread.
pub fn start_compaction_of(
    store: &mut Store,
    candidates: &[u32],
    opts: &CompactOptions,
) -> Result<CompactJob> {
    store.writer()?;
    let current = store.current_container()?;
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
    let target = store.allocate_container()?;
    Ok(CompactJob {
        site: SurveySite::of(store)?,
        clock: store.clock().clone(),
        opts: opts.clone(),
        sources,
        target,
        surveyed: Mutex::new(HashMap::new()),
    })
}
