//! A whole compaction run: planned first (changing nothing), then the current container sealed,
//! dead containers dropped and the rest rewritten a target at a time.

use std::collections::{HashMap, VecDeque};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::filesys;
use crate::store::containers::container_base;
use crate::store::Store;

use super::archive::compact_archive;
use super::cost::{check_run_space, estimate_targets, free_bytes, replacement_bytes};
use super::report::{acts, Action, CompactReport, ContainerPlan};
use super::survey::{decide, survey_in_parallel, Survey, Surveyor, SURVEYS_AT_ONCE};
use super::switch::{abandon, adopt_switched, join_removal, remove_sources};
use super::{start_compaction_of, CompactOptions};

/// What a compaction would do, without changing anything (any handle): surveys of what is
/// committed.
pub fn plan_compaction(store: &Store, opts: &CompactOptions) -> Result<CompactReport> {
    Ok(plan_run(store, opts, 0)?.0)
}

/// The report of the surveyed containers: each one's action decided (the current one only to
/// be sealed), and the targets their rewrites would write.
fn report_of(
    store: &Store,
    opts: &CompactOptions,
    mut containers: Vec<ContainerPlan>,
    start: Instant,
) -> Result<CompactReport> {
    let g = store.generation()?;
    let current = store.current_container()?;
    let replacement = replacement_bytes(store.config());
    for plan in &mut containers {
        if plan.id != current {
            decide(plan, opts, 0);
        } else if opts.seal_current {
            decide(plan, opts, replacement);
        }
    }
    estimate_targets(&mut containers, store.config());
    // Sealing the current container to compact it starts another in its place.
    for plan in containers.iter_mut().filter(|p| p.id == current && acts(p)) {
        plan.new_bytes += replacement;
    }
    let archive_due = store.archive().map(|a| a.rewrite_due()).transpose()?;
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

/// A run's plan, and the surveys it was made from for its jobs to reuse (so that a container is
/// surveyed once, not again by its job): surveys of the sealed containers acted on, as many as
/// `keep` bytes hold.
///
/// A kept survey stays true while the jobs run: the run holds the writer, so only its own
/// commit, seal and adoptions change the store, and none of them makes a value live that was
/// dead (an adoption moves values, it does not revive them). A value that died since is copied
/// and then left out by the records' roll-forward; a render a read could still return that a
/// survey missed fails the adoption's validation, which abandons the job with its sources kept.
fn plan_run(
    store: &Store,
    opts: &CompactOptions,
    keep: u64,
) -> Result<(CompactReport, HashMap<u32, Survey>)> {
    let start = Instant::now();
    // Through this handle's view of the records (the writer's keeps them cached; a survey on
    // handles of its own reads them from disk), a few containers at once: a survey waits on
    // small random reads (index cells, inodes), which overlap well on a disk. A batch at a
    // time, so that the surveys not kept are let go before the next batch is made.
    let (now, current) = (store.now(), store.current_container()?);
    let mut plans = Vec::new();
    let mut kept = HashMap::new();
    let mut room = keep;
    for batch in store.container_ids()?.chunks(SURVEYS_AT_ONCE) {
        let surveys = survey_in_parallel(batch, |id| survey_through(store, id, now));
        for survey in surveys {
            let survey = survey?;
            let id = survey.plan.id;
            plans.push(survey.plan.clone());
            // The current container takes the values that the run's first commit makes
            // durable: the job that compacts it surveys it again.
            let held = survey.held_bytes();
            if id != current && held <= room {
                room -= held;
                kept.insert(id, survey);
            }
        }
    }
    let plan = report_of(store, opts, plans, start)?;
    for p in plan.containers.iter().filter(|p| !acts(p)) {
        kept.remove(&p.id);
    }
    Ok((plan, kept))
}

/// Surveys container `id` through this handle's view of the title records.
fn survey_through(store: &Store, id: u32, now: i64) -> Result<Survey> {
    let load = |name: &[u8]| store.load_fresh(name);
    Surveyor::new(store.config(), &load, store.archive(), now).survey(store.vfs(), store.dir(), id)
}

/// Memory for the surveys a run keeps for its jobs (their live values' names and locations).
const SURVEYS_KEPT_BYTES: u64 = 64 << 20;

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
    store: &mut Store,
    opts: &CompactOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<CompactReport> {
    if opts.dry_run {
        return plan_compaction(store, opts);
    }
    store.writer()?;
    let start = Instant::now();
    let (mut plan, mut surveys) = plan_run(store, opts, SURVEYS_KEPT_BYTES)?;
    let idle = plan.nothing_to_do();
    plan.dry_run = false;
    if idle {
        plan.seconds = start.elapsed().as_secs_f64();
        return Ok(plan);
    }
    let current = store.current_container()?;
    let seal = plan.containers.iter().any(|p| p.id == current && acts(p));
    let peak = check_run_space(store, &plan, seal)?;
    // From here on the run changes the store.
    let mut replaced = None;
    if seal {
        store.rotate()?;
        let id = store.current_container()?;
        let filesize = store.writer()?.fs.data().filesize();
        let base = container_base(store.dir(), id);
        let bytes = filesys::files_size(store.vfs().as_ref(), &base, Some(filesize))?;
        replaced = Some((current, bytes));
    } else {
        // The jobs survey what is committed.
        store.commit()?;
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
    let mut removal = None;
    let total: u64 = plan
        .containers
        .iter()
        .filter(|p| p.action == Action::Rewrite)
        .map(|p| p.live.bytes)
        .sum();
    progress(0, total);
    if !dead.is_empty() {
        // Dropped in a job of their own, which writes no container; removed while the copies
        // run, unless a copy needs their space first (below).
        let job = start_compaction_of(store, &dead, opts)?.with_surveys(surveys);
        let built = job.run();
        surveys = job.unused_surveys();
        let adopted = adopt_switched(store, &job, built)?;
        report.read_bytes += adopted.read_bytes;
        report.written_bytes += adopted.written_bytes;
        report.containers.extend(adopted.plans);
        removal = Some(remove_on_a_thread(store, adopted.switched));
    }
    // The container sealed above was surveyed by the plan before the seal's commit added the
    // values it held uncommitted: it is surveyed again, through the writer's view, beside the
    // first job's copy (the store is not changed until that job's adoption), and kept for the
    // job that takes it, which would otherwise survey it on read-only handles of its own.
    let mut resurvey = replaced
        .map(|(id, _)| id)
        .filter(|id| rewrites.contains(id) && !surveys.contains_key(id));
    let mut queue: VecDeque<u32> = rewrites.into();
    let mut copied = 0u64;
    while !queue.is_empty() {
        if removal.is_some() && free_bytes(store.dir()).is_some_and(|free| free < peak) {
            // Too little room to copy while the last job's sources are still being removed.
            if let Some(previous) = removal.take() {
                join_removal(previous)?;
            }
        }
        let candidates: Vec<u32> = queue.iter().copied().collect();
        let job = start_compaction_of(store, &candidates, opts)?.with_surveys(surveys);
        let (now, view) = (store.now(), &*store);
        let (built, resurveyed) = std::thread::scope(|scope| {
            let survey = resurvey
                .take()
                .map(|id| scope.spawn(move || survey_through(view, id, now)));
            let built = job.run_with_progress(&mut |n| progress(copied + n, total.max(copied + n)));
            // A failed survey is made again by the job that takes the container, which reports
            // its error in turn.
            (built, survey.and_then(|s| s.join().ok()?.ok()))
        });
        surveys = job.unused_surveys();
        if let Some(survey) = resurveyed {
            if !built.as_ref().is_ok_and(|b| {
                b.plans.iter().any(|p| p.id == survey.plan.id) || b.retry.contains(&survey.plan.id)
            }) {
                surveys.insert(survey.plan.id, survey);
            }
        }
        if let Err(e @ Error::Full { .. }) = &built {
            // The disk filled since the plan. The run has changed the store already, so it
            // is not refused: what is left is reported as abandoned, and kept.
            let why = e.to_string();
            abandon(store, &job)?;
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
        let adopted = adopt_switched(store, &job, built)?;
        if let Some(previous) = removal.take() {
            join_removal(previous)?;
        }
        removal = Some(remove_on_a_thread(store, adopted.switched.clone()));
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
    compact_archive(store, opts, &mut report)?;
    report.seconds = start.elapsed().as_secs_f64();
    record_run(store, &mut report)?;
    Ok(report)
}

/// Removes switched-away containers on a thread: freeing a container's blocks is slow on some
/// file systems (tens of ms per 64 MiB with online discard), and the next job's copy goes on
/// meanwhile.
fn remove_on_a_thread(store: &Store, sources: Vec<u32>) -> JoinHandle<Result<()>> {
    let (vfs, dir) = (store.vfs().clone(), store.dir().to_path_buf());
    std::thread::spawn(move || remove_sources(vfs.as_ref(), &dir, &sources))
}

/// Records a finished run in the generation file.
fn record_run(store: &mut Store, report: &mut CompactReport) -> Result<()> {
    let mut g = store.generation()?;
    g.last_time = store.now();
    g.last_reclaimed = report.reclaimed();
    g.compactions += 1;
    store.write_generation(&g)?;
    report.generation_after = g.generation;
    Ok(())
}
