//! A whole compaction run: planned first (changing nothing), then the current container sealed,
//! dead containers dropped and the rest rewritten a target at a time.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::filesys;
use crate::store::containers::container_base;
use crate::store::Store;

use super::archive::compact_archive;
use super::cost::{check_run_space, estimate_targets, free_bytes, replacement_bytes};
use super::report::{acts, Action, CompactReport, ContainerPlan};
use super::survey::{decide, Surveyor};
use super::switch::{abandon, adopt_switched, join_removal, remove_sources};
use super::{adopt, start_compaction_of, CompactOptions};

/// What a compaction would do, without changing anything (any handle).
pub fn plan_compaction(store: &Store, opts: &CompactOptions) -> Result<CompactReport> {
    let start = Instant::now();
    let g = store.generation()?;
    let load = |name: &[u8]| store.load_fresh(name);
    let mut surveyor = Surveyor::new(store.config(), &load, store.archive(), store.now());
    let mut containers = Vec::new();
    let current = store.current_container()?;
    let replacement = replacement_bytes(store.config());
    for id in store.container_ids()? {
        let mut plan = surveyor.survey(store.vfs(), store.dir(), id)?.plan;
        if id != current {
            decide(&mut plan, opts, 0);
        } else if opts.seal_current {
            decide(&mut plan, opts, replacement);
        }
        containers.push(plan);
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
    let mut plan = plan_compaction(store, opts)?;
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
        let job = start_compaction_of(store, &dead, opts)?;
        let built = job.run();
        let adopted = adopt(store, &job, built)?;
        report.read_bytes += adopted.read_bytes;
        report.written_bytes += adopted.written_bytes;
        report.containers.extend(adopted.plans);
    }
    let mut queue: VecDeque<u32> = rewrites.into();
    let mut removal = None;
    let mut copied = 0u64;
    while !queue.is_empty() {
        if removal.is_some() && free_bytes(store.dir()).is_some_and(|free| free < peak) {
            // Too little room to copy while the last job's sources are still being removed.
            if let Some(previous) = removal.take() {
                join_removal(previous)?;
            }
        }
        let candidates: Vec<u32> = queue.iter().copied().collect();
        let job = start_compaction_of(store, &candidates, opts)?;
        let built = job.run_with_progress(&mut |n| progress(copied + n, total.max(copied + n)));
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
        // Freeing a container's blocks is slow on some file systems (tens of ms per 64 MiB
        // with online discard); the next job's survey and copy go on meanwhile.
        if let Some(previous) = removal.take() {
            join_removal(previous)?;
        }
        let (vfs, dir, sources) = (
            store.vfs().clone(),
            store.dir().to_path_buf(),
            adopted.switched.clone(),
        );
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
    compact_archive(store, opts, &mut report)?;
    report.seconds = start.elapsed().as_secs_f64();
    record_run(store, &mut report)?;
    Ok(report)
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
