//! Compaction: container by container, the values no read can return any more are
//! dropped and the rest copied into a new container, and the switch is made by the generation file
//! ([`crate::store::generation`]).
//!
//! One job takes sealed containers N1, N2, … (oldest first) while their live bytes together fit
//! one container (`container_bytes`; the first always fits), and writes one new container M: a run
//! over many sparse containers leaves a few full ones, and pays the fixed costs of a target
//! (create, sync, seal, switch, the records' commit) once per target, not once per source.
//!
//! Its phases, and what a crash in each leaves:
//!
//! - survey: each source's files (found through its index, many inode reads in flight; by a
//!   walk of the datafile when the index does not account for every live entry), each
//!   classified against its title's record: live, or dropped as expired / taken down / replaced
//!   / archived / deleted. [`compact`](fn@crate::maintenance::compact) hands its plan's surveys
//!   (up to 64 MiB of them) to its jobs, so that a container is surveyed once. After a crash:
//!   nothing changed.
//! - pending: the generation file names the new container M as `pending`. After a crash: M
//!   removed at open.
//! - build: the sources' live values copied into M (read 16 MiB ahead with
//!   `POSIX_FADV_WILLNEED`), grouped by title (sorted in memory by the title's hash), verified
//!   against their CRC-32, M synced and sealed. After a crash: M removed at open.
//! - validate: every title with a file in a source re-read: each render there a read could still
//!   return must have been copied. After a crash: M removed, sources kept.
//! - switch: the generation file: generation + 1, `move Ni M` for every source. After a crash:
//!   records rolled forward at open.
//! - forward: the records' renders in the sources pointed into M (or dropped, when not live); one
//!   commit. After a crash: rolled forward at open.
//! - remove: the sources' datafiles removed, then each one's other files, the directory synced;
//!   the moves are left out of the generation file's next write. After a crash: removal finished
//!   at open.
//!
//! A source with no live value is dropped whole (`move N 0`), without a copy and without writing
//! a target. Free space needed: what one target's build writes (`TargetCost`: its values and
//! their overhead, an index sized for them, its small files, room for the records' commit),
//! checked for the whole run before [`compact`](fn@crate::maintenance::compact) changes
//! anything, and again before each build. Only sealed containers are compacted;
//! [`CompactOptions::seal_current`] rotates the current one first when it holds dead values (so
//! that a take-down can be verified at once), once the run is known to go ahead. A live value
//! that cannot be read intact keeps its container whole; the other sources of its job are
//! compacted again by another job without it.
//!
//! The survey and the build need no writer: [`CompactJob::run`] works on its own read-only handles
//! and can run on another thread while the writer keeps taking puts; the validation, switch and
//! roll-forward ([`adopt`](fn@crate::maintenance::adopt)) take the writer's handle for as
//! long as it takes to rewrite the records of the sources' titles. A render that became live
//! again after the survey (it cannot, by the retention rules — deadlines only move earlier — but a
//! survey may race a commit) fails the validation, and the job is abandoned with its sources
//! intact.

mod archive;
mod cost;
mod job;
mod report;
mod run;
mod survey;
mod switch;

pub use archive::rewrite_archive;
pub use job::{start_compaction, start_compaction_of, Adopted, Built, CompactJob};
pub use report::{Action, CompactReport, ContainerPlan, Reason, Tally};
pub use run::{compact, plan_compaction};
pub use switch::adopt;

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
