//! `wink archive DIR [--wait] [--rewrite]`: the maintenance run that moves revisions leaving the
//! hot tier into the archive, or a rewrite of the whole archive into format 2.

use std::path::PathBuf;
use std::time::Instant;

use wink::archive::ArchiveStats;
use wink::maintenance;
use wink::maintenance::ArchiveReport;
use wink::store::Config;
use wink::vfs::RealFs;
use wink::{Error, Result};

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Archives, for every title, the render the archive policy keeps (`wink init --archive`) of each
revision whose recent window has passed (at WINK_NOW when set), makes the archive durable, and
only then removes those renders from the hot tier. Reads of them keep working, from the archive
(state `archived`). A run interrupted anywhere loses nothing; the next run finishes the job, and
a run with nothing due archives 0. With the revision policy `all` no revision ever leaves the hot
tier, so there is never anything to archive.

A progress bar over titles goes to stderr when it is a terminal. At the end, a summary on stdout,
one `FIELD<TAB>VALUE` line each: what this run archived — titles, revisions, bytes (raw),
seconds, mb_per_s (10^6 bytes per second) — then the whole archive's totals: archive.titles,
archive.blocks, archive.revisions, archive.raw_bytes (uncompressed), archive.stored_bytes (every
byte of the archive's files) and archive.stored_pct (stored_bytes as a % of raw_bytes).

With --rewrite, instead, the whole archive is written anew in format 2 (one zstd frame per
revision; an archive written before format 2 is converted), without taken-down bytes, and
switched to as a compaction switches archives; reads go on meanwhile. The summary then has
titles, revisions, raw_bytes, purged, bytes_before and bytes_after (datafile sizes), seconds,
and the archive totals.

Exit status 2 when the store has no archive (nothing is opened for writing then), 3 when data
cannot be read, 4 when another writer holds the store (unless --wait).";

/// Moves revisions leaving the hot tier into the archive.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Rewrite the whole archive in format 2 instead of archiving.
    #[arg(long)]
    rewrite: bool,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    super::expect_store(&args.dir)?;
    // Refused before the writer lock is taken or anything is recovered: a store without an
    // archive is a wrong argument, and bad input changes nothing.
    let cfg = Config::read(&RealFs, &args.dir.join("store"))?;
    if cfg.archive.is_none() {
        return Err(no_archive(args));
    }
    let mut store = super::open_writer(&args.dir, &args.writing)?;
    if args.rewrite {
        return rewrite(args, &mut store);
    }
    let bar = super::progress_bar(None, "{bar:40} {pos}/{len} titles, eta {eta}");
    let started = Instant::now();
    let result = maintenance::archive_due(&mut store, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = result?;
    let seconds = started.elapsed().as_secs_f64();
    let totals = store.archive().ok_or_else(|| no_archive(args))?.stats()?;
    summary(&report, seconds, &totals)?;
    Ok(0)
}

fn rewrite(args: &Args, store: &mut wink::store::Store) -> Result<Status> {
    let started = Instant::now();
    let report = maintenance::rewrite_archive(store)?;
    let seconds = started.elapsed().as_secs_f64();
    let totals = store.archive().ok_or_else(|| no_archive(args))?.stats()?;
    let mut out = Out::new();
    for (field, value) in [
        ("titles", report.titles.to_string()),
        ("revisions", report.revisions.to_string()),
        ("raw_bytes", report.raw_bytes.to_string()),
        ("purged", report.purged.to_string()),
        ("bytes_before", report.bytes_before.to_string()),
        ("bytes_after", report.bytes_after.to_string()),
        ("seconds", format!("{seconds:.3}")),
    ] {
        out.line(&format!("{field}\t{value}"))?;
    }
    for (field, value) in totals_fields(&totals) {
        out.line(&format!("{field}\t{value}"))?;
    }
    out.finish()?;
    Ok(0)
}

fn no_archive(args: &Args) -> Error {
    Error::invalid(format!(
        "{}: this store has no archive (it is enabled when the store is created: \
         `wink init --archive first|newest|every:SECS`)",
        args.dir.display()
    ))
}

/// `part` as a percentage of `whole`, with `-` when there is no whole to divide by.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.3}", 100.0 * part as f64 / whole as f64)
    }
}

fn summary(report: &ArchiveReport, seconds: f64, totals: &ArchiveStats) -> Result<()> {
    let rate = if seconds > 0.0 {
        report.bytes as f64 / 1e6 / seconds
    } else {
        0.0
    };
    let mut out = Out::new();
    for (field, value) in [
        ("titles", report.titles.to_string()),
        ("revisions", report.revisions.to_string()),
        ("bytes", report.bytes.to_string()),
        ("seconds", format!("{seconds:.3}")),
        ("mb_per_s", format!("{rate:.1}")),
    ]
    .into_iter()
    .chain(totals_fields(totals))
    {
        out.line(&format!("{field}\t{value}"))?;
    }
    out.finish()
}

/// The whole archive's totals, as summary fields.
fn totals_fields(totals: &ArchiveStats) -> [(&'static str, String); 6] {
    [
        ("archive.titles", totals.titles.to_string()),
        ("archive.blocks", totals.blocks.to_string()),
        ("archive.revisions", totals.revisions.to_string()),
        ("archive.raw_bytes", totals.raw_bytes.to_string()),
        ("archive.stored_bytes", totals.stored_bytes.to_string()),
        (
            "archive.stored_pct",
            percent(totals.stored_bytes, totals.raw_bytes),
        ),
    ]
}
