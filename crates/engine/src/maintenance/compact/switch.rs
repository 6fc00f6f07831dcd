//! The switch: a finished job adopted by the writer — validated against the records as they are
//! now, the generation file switched, the records pointed into the target, the sources removed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::filesys;
use crate::store::containers::{container_base, remove_filesys};
use crate::store::tiers::visible_in;
use crate::store::Store;
use crate::vfs::Vfs;

use super::job::{Adopted, Built, CompactJob};
use super::report::Action;

/// Removes compacted containers whose records were committed (see [`Store::finish_move`]).
///
/// The datafiles first, all of them, then each container's other files and the directory's
/// sync: freeing a datafile's blocks is most of a removal's time (tens of ms per 64 MiB with
/// online discard, where a sync of the directory waits for the blocks it frees to be
/// discarded), and the first sync then covers every source's datafile, not one.
pub(super) fn remove_sources(vfs: &dyn Vfs, dir: &Path, sources: &[u32]) -> Result<()> {
    for source in sources {
        let data = filesys::file_path(&container_base(dir, *source), "data");
        if vfs.exists(&data) {
            vfs.remove(&data)?;
        }
    }
    for source in sources {
        remove_filesys(vfs, &container_base(dir, *source))?;
    }
    Ok(())
}

pub(super) fn join_removal(removal: std::thread::JoinHandle<Result<()>>) -> Result<()> {
    removal
        .join()
        .unwrap_or_else(|p| Err(Error::panicked("a container removal thread", &*p)))
}

/// Finishes a job: validates it against the records as they are now, switches the
/// generation (one `move` per source), points the records into the new container and
/// removes the old ones. A job that failed or no longer fits leaves its sources as they were.
pub fn adopt(store: &mut Store, job: &CompactJob, built: Result<Built>) -> Result<Adopted> {
    let adopted = adopt_switched(store, job, built)?;
    remove_sources(store.vfs().as_ref(), store.dir(), &adopted.switched)?;
    Ok(adopted)
}

/// Removes a job's unfinished target and clears `pending`.
pub(super) fn abandon(store: &mut Store, job: &CompactJob) -> Result<()> {
    remove_filesys(
        store.vfs().as_ref(),
        &container_base(store.dir(), job.target()),
    )?;
    let mut g = store.generation()?;
    if g.pending == job.target() {
        g.pending = 0;
        store.write_generation(&g)?;
    }
    Ok(())
}

/// [`adopt`](fn@crate::maintenance::adopt) up to the removal of the sources: the sources switched away from are
/// in `Adopted::switched`, their records committed and their readers forgotten; they are to
/// be removed ([`remove_sources`]).
pub(super) fn adopt_switched(
    store: &mut Store,
    job: &CompactJob,
    built: Result<Built>,
) -> Result<Adopted> {
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            abandon(store, job)?;
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
    let acted: BTreeMap<u32, u32> = built.acted().map(|p| (p.id, p.into.unwrap_or(0))).collect();
    if !acted.values().any(|into| *into == job.target()) {
        // Nothing copied (or a copy given up): the target goes before any switch.
        abandon(store, job)?;
    }
    if acted.is_empty() {
        return Ok(adopted);
    }
    if let Some(why) = stale(store, &acted, &built)? {
        abandon(store, job)?;
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
    store.commit()?;
    let mut g = store.generation()?;
    g.generation += 1;
    g.pending = 0;
    g.moves
        .extend(acted.iter().map(|(from, into)| (*from, *into)));
    store.write_generation(&g)?;
    store.forward(&built.titles, &acted, |key, r| {
        built
            .remap
            .get(key)
            .filter(|(old, _)| *old == r.location)
            .map(|(_, new)| *new)
    })?;
    adopted.switched = acted.keys().copied().collect();
    for source in &adopted.switched {
        store.containers().forget_reader(*source);
    }
    Ok(adopted)
}

/// Why a build no longer matches the records (a render in a source acted on that a read
/// could return was not copied, or moved since), or `None`.
fn stale(store: &Store, acted: &BTreeMap<u32, u32>, built: &Built) -> Result<Option<String>> {
    let now = store.now();
    for title in &built.titles {
        let Some(rec) = store.load(title)? else {
            continue;
        };
        for r in visible_in(store.config(), &rec, now) {
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
