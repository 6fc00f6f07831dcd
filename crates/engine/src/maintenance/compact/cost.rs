//! What compaction costs in free space: a target's files and the room its build needs, checked
//! for a whole run before anything changes.

use std::path::Path;

use crate::error::{Error, Result};
use crate::filesys;
use crate::store::containers::{container_base, container_options};
use crate::store::{Config, Store};

use super::report::{Action, CompactReport, ContainerPlan};

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
pub(super) struct TargetCost {
    values: u64,
    pub(super) bytes: u64,
    names: u64,
}

impl TargetCost {
    pub(super) fn of(plan: &ContainerPlan) -> TargetCost {
        let mut cost = TargetCost::default();
        cost.add(plan);
        cost
    }

    pub(super) fn add(&mut self, plan: &ContainerPlan) {
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
    pub(super) fn files_bytes(&self) -> u64 {
        self.data_bytes() + self.fixed_bytes()
    }

    /// Free space its build needs: the datafile's preallocation, its other files, and room for
    /// the generation file and the records' commit.
    pub(super) fn need(&self) -> u64 {
        self.data_allocation() + self.fixed_bytes() + META_ROOM + self.values * RECORD_PER_VALUE
    }

    pub(super) fn options(&self, cfg: &Config) -> crate::filesys::FsOptions {
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

/// A plan's estimate of what its rewrites will write: for each target, as the jobs will group
/// them, its values and their overhead, and its fixed files (an index sized for what it holds),
/// shared among its sources by live bytes, as a real run shares its targets' bytes.
pub(super) fn estimate_targets(plans: &mut [ContainerPlan], cfg: &Config) {
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
pub(super) fn replacement_bytes(cfg: &Config) -> u64 {
    SBSIZE + container_options(cfg).htsize * 16 + 3 * SBSIZE
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

/// Free bytes of the file system holding `dir`, when it can be asked.
pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// Refuses a run (nothing changed yet) whose steps the free space cannot hold, in the order
/// they come: the seal of the current container (its preallocated room given back, its
/// replacement's files written), the drops (the generation file and the records' commit;
/// their space free once done), each target's build ([`TargetCost::need`]). Returns the
/// largest build's need.
pub(super) fn check_run_space(store: &mut Store, plan: &CompactReport, seal: bool) -> Result<u64> {
    let mut needs = Vec::new();
    for group in target_groups(&plan.containers, store.config()) {
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
    let Some(free) = free_bytes(store.dir()) else {
        return Ok(peak);
    };
    let mut room = i128::from(free);
    let mut steps = Vec::new();
    if seal {
        let current = store.current_container()?;
        let path = filesys::file_path(&container_base(store.dir(), current), "data");
        let len = store
            .vfs()
            .open(&path, false)?
            .len()
            .map_err(|e| Error::io(&path, None, e))?;
        let slack = len.saturating_sub(store.writer()?.fs.data().filesize());
        let replacement = replacement_bytes(store.config());
        steps.push((
            "to seal the current container".to_string(),
            replacement + META_ROOM,
        ));
        room_for(store.dir(), room, &steps, free)?;
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
        room_for(store.dir(), room, &steps, free)?;
        room += i128::from(dropped);
        steps.clear();
    }
    room_for(store.dir(), room, &needs, free)?;
    Ok(peak)
}
