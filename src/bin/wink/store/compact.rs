//! `wink compact DIR [--dry-run] [--max-mbps N] [--min-dead PCT] [--json] [--wait]`.

use std::path::PathBuf;

use serde::Serialize;
use wink::maintenance;
use wink::maintenance::compact::{Action, CompactOptions, CompactReport};
use wink::{Error, Result};

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Rewrites the store's sealed containers one at a time: the values no read can return any more are
dropped (expired: past their retention deadline; taken down: `wink rm`; replaced: written again;
archived: moved into the archive; deleted: their title is gone), the rest are copied into a new
container with each title's renders together, and the switch is atomic (the generation file).
A container with no live value is removed whole. A container is rewritten when its rewrite
would give back space, at least --min-dead percent of its bytes, so that a run does not leave the
store bigger; and always when it holds a taken-down value. The current container is sealed first
when it holds values to drop, so that after `wink rm` and `wink compact` no file of the store
holds the removed bytes. Reads and writes are dropped from the page cache after use.

The run is planned before anything is written. With nothing to do it writes nothing and says
`nothing to do`. Free space is checked against what the run writes — the live values to copy,
their new container's index and small files, the generation file and the title records — with
the space of the containers it drops counted as free once they are gone; a run that does not
fit is refused before any change. On a terminal, stderr shows the bytes copied.

A crash (or kill) at any moment leaves the store as it was before the container being compacted,
or after it; the next writer's open finishes or undoes the step and says so on stderr.

Output: one line per container, `container N: ACTION, BYTES bytes, live VALUES values (BYTES
bytes), dropped REASON VALUES values (BYTES bytes), ...` (ACTION: keep, rewrite, drop), then
`nothing to do` when that is so, `reclaimed BYTES bytes` and `generation G`. --dry-run prints
the same report and changes nothing (it takes no lock). --json: one object with the same fields
(and `nothing_to_do`), nothing else on stdout or stderr.

Exit status: 0 on success (and with nothing to do); 2 on bad options or a disk too full for the
run (nothing changed: every file as it was); 3 on
a read or write error (the store stays at the last completed step); 4 when another writer holds
the store (unless --wait).";

/// Reclaims the space of values no read can return any more.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Report what would be dropped and reclaimed, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Limit compaction's reads plus writes to this many MB/s.
    #[arg(long, value_name = "N")]
    max_mbps: Option<f64>,
    /// Rewrite a container once its rewrite would give back this percentage of its bytes.
    #[arg(long, value_name = "PCT", default_value_t = 25.0)]
    min_dead: f64,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    writing: Writing,
}

#[derive(Serialize)]
struct TallyJson {
    reason: &'static str,
    values: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct ContainerJson {
    number: u32,
    action: &'static str,
    bytes: u64,
    live_values: u64,
    live_bytes: u64,
    dropped: Vec<TallyJson>,
    into: Option<u32>,
    reclaimed_bytes: u64,
    note: Option<String>,
}

#[derive(Serialize)]
struct ReportJson {
    dry_run: bool,
    nothing_to_do: bool,
    generation_before: u64,
    generation_after: u64,
    reclaimed_bytes: u64,
    read_bytes: u64,
    written_bytes: u64,
    seconds: f64,
    dropped: Vec<TallyJson>,
    containers: Vec<ContainerJson>,
    archive: Option<ArchiveJson>,
}

#[derive(Serialize)]
struct ArchiveJson {
    rewritten: bool,
    taken_down_revisions: u64,
    taken_down_stored_bytes: u64,
    dead_bytes: u64,
    bytes_before: u64,
    bytes_after: Option<u64>,
}

fn archive_json(report: &CompactReport) -> Option<ArchiveJson> {
    let due = report.archive_due.as_ref()?;
    Some(ArchiveJson {
        rewritten: report.archive_rewrite.is_some(),
        taken_down_revisions: due.taken_down,
        taken_down_stored_bytes: due.taken_down_stored_bytes,
        dead_bytes: due.dead_bytes,
        bytes_before: due.datafile_bytes,
        bytes_after: report.archive_rewrite.as_ref().map(|r| r.bytes_after),
    })
}

pub fn run(args: &Args) -> Result<Status> {
    if !(0.0..=100.0).contains(&args.min_dead) {
        return Err(Error::invalid(format!(
            "--min-dead {}: a percentage, 0 to 100",
            args.min_dead
        )));
    }
    if args.max_mbps.is_some_and(|m| !(m > 0.0 && m.is_finite())) {
        return Err(Error::invalid("--max-mbps: a positive number of MB/s"));
    }
    let opts = CompactOptions {
        min_dead: args.min_dead / 100.0,
        max_mbps: args.max_mbps,
        seal_current: true,
        dry_run: args.dry_run,
    };
    let report = if args.dry_run {
        maintenance::plan_compaction(&super::open_reader(&args.dir)?, &opts)?
    } else {
        let mut store = super::open_writer(&args.dir, &args.writing)?;
        let bar = if args.json {
            indicatif::ProgressBar::hidden()
        } else {
            super::progress_bar(
                None,
                "compacting {bar:40} {bytes}/{total_bytes} copied, {bytes_per_sec}, eta {eta}",
            )
        };
        let report = maintenance::compact(&mut store, &opts, |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        });
        bar.finish_and_clear();
        report?
    };
    if args.json {
        let mut out = Out::new();
        out.line(
            &serde_json::to_string(&to_json(&report)).map_err(|e| Error::invalid(e.to_string()))?,
        )?;
        out.finish()?;
    } else {
        print(&report)?;
    }
    Ok(0)
}

fn tallies(
    t: &std::collections::BTreeMap<
        wink::maintenance::compact::Reason,
        wink::maintenance::compact::Tally,
    >,
) -> Vec<TallyJson> {
    t.iter()
        .map(|(r, t)| TallyJson {
            reason: r.as_str(),
            values: t.values,
            bytes: t.bytes,
        })
        .collect()
}

fn to_json(report: &CompactReport) -> ReportJson {
    ReportJson {
        dry_run: report.dry_run,
        nothing_to_do: report.nothing_to_do(),
        generation_before: report.generation_before,
        generation_after: report.generation_after,
        reclaimed_bytes: report.reclaimed(),
        read_bytes: report.read_bytes,
        written_bytes: report.written_bytes,
        seconds: report.seconds,
        dropped: tallies(&report.dropped()),
        containers: report
            .containers
            .iter()
            .map(|c| ContainerJson {
                number: c.id,
                action: c.action.as_str(),
                bytes: c.bytes,
                live_values: c.live.values,
                live_bytes: c.live.bytes,
                dropped: tallies(&c.dropped),
                into: c.into,
                reclaimed_bytes: c.reclaimed(),
                note: c.note.clone(),
            })
            .collect(),
        archive: archive_json(report),
    }
}

fn print(report: &CompactReport) -> Result<()> {
    let mut out = Out::new();
    for c in &report.containers {
        let mut line = format!(
            "container {}: {}, {} bytes, live {} values ({} bytes)",
            c.id,
            c.action.as_str(),
            c.bytes,
            c.live.values,
            c.live.bytes
        );
        for (reason, t) in &c.dropped {
            line.push_str(&format!(
                ", dropped {} {} values ({} bytes)",
                reason.as_str(),
                t.values,
                t.bytes
            ));
        }
        if let Some(into) = c.into {
            line.push_str(&format!(", into container {into}"));
        }
        if c.action == Action::Abandoned {
            if let Some(note) = &c.note {
                line.push_str(&format!(" ({note})"));
            }
        }
        out.line(&line)?;
    }
    if let Some(a) = archive_json(report) {
        let mut line = format!(
            "archive: {}, {} bytes, taken down {} revisions ({} bytes stored), dead {} bytes",
            if a.rewritten { "rewrite" } else { "as is" },
            a.bytes_before,
            a.taken_down_revisions,
            a.taken_down_stored_bytes,
            a.dead_bytes
        );
        if let Some(after) = a.bytes_after {
            line.push_str(&format!(", now {after} bytes"));
        }
        out.line(&line)?;
    }
    if report.nothing_to_do() {
        out.line("nothing to do")?;
    }
    let verb = if report.dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    out.line(&format!("{verb} {} bytes", report.reclaimed()))?;
    out.line(&format!("generation {}", report.generation_after))?;
    out.finish()
}
