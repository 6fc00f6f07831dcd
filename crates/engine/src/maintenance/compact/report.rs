//! What a compaction run reports: per container, what was found and what became of it.

use std::collections::BTreeMap;

use crate::archive::rewrite::{RewriteDue, RewriteReport};

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
    /// Its lower-case name, as reports print it.
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
    /// Values counted.
    pub values: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Tally {
    pub(super) fn add(&mut self, bytes: u64) {
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
    /// Its lower-case name, as reports print it.
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
    /// The container's number.
    pub id: u32,
    /// Bytes of its files.
    pub bytes: u64,
    /// Values a read can still return, which a rewrite copies.
    pub live: Tally,
    /// Bytes of the live values' names: a copy writes them beside the values.
    pub live_names: u64,
    /// Values no read can return any more, by why.
    pub dropped: BTreeMap<Reason, Tally>,
    /// What the compaction does (a plan) or did with it.
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
    /// Nothing was changed: the report is the plan.
    pub dry_run: bool,
    /// The store's generation (see the generation file) when the run started.
    pub generation_before: u64,
    /// Its generation when the run ended (the same for a dry run).
    pub generation_after: u64,
    /// One per container surveyed, with what became of it.
    pub containers: Vec<ContainerPlan>,
    /// Bytes read from old containers and written to new ones.
    pub read_bytes: u64,
    /// Bytes written to new containers.
    pub written_bytes: u64,
    /// Wall-clock seconds the run took.
    pub seconds: f64,
    /// The options' `min_dead` (the archive is rewritten past it too).
    pub min_dead: f64,
    /// The archive's survey, when the store has one.
    pub archive_due: Option<RewriteDue>,
    /// The archive's rewrite, when one was done.
    pub archive_rewrite: Option<RewriteReport>,
}

impl CompactReport {
    /// Bytes freed, containers and archive together (a dry run's estimate of what a run would
    /// free).
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

/// Whether the archive is worth rewriting: it holds taken-down bytes, or enough dead ones.
pub(super) fn archive_worth_it(due: &RewriteDue, min_dead: f64) -> bool {
    due.taken_down > 0
        || (due.dead_bytes > 0 && due.dead_bytes as f64 >= min_dead * due.datafile_bytes as f64)
}

/// Whether a plan changes its container.
pub(super) fn acts(plan: &ContainerPlan) -> bool {
    matches!(plan.action, Action::Rewrite | Action::Drop)
}
