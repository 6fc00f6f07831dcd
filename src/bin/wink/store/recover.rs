//! `wink recover DIR [--wait]`: a writer's open, explicitly, with its report.

use std::path::PathBuf;

use wink::maintenance;
use wink::store::StoreOptions;
use wink::Result;

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Opens the store as its writer, which repairs what a crash left: a torn commit of the title
records or of the current container is dropped back to the last complete one (the file and the
byte range are named), and an unfinished compaction is finished or undone. Then checks the whole
store as `wink check` does. Damage in the middle of a file is never truncated away: it is
reported (and reads of the values it holds fail with exit 3) for an operator to restore from a
snapshot; `wink scrub --quarantine` finds damaged values and copies them, described, to
DIR/quarantine/, after which check warns about each one.

With --rebuild-index, the title index is rebuilt from the title records first (what `wink check`
suggests when the index or a record's name is damaged). Unlike `wink fs reindex` of the meta
files, it trusts only what checksums cover: a record that does not decode is refused (its
title's reads keep failing with the damage); a record whose own key differs from the name its
inode carries is written again under its own key; a title the archive holds without a record
gets one, so that reads find its archived revisions again. One line per change or refusal.

Output: one `repaired: ...` line per repair (none when the store was clean), then the check's
report.

Exit status: 0 when the store is clean afterwards; 1 when the check still finds problems; 3 when
the store cannot be opened; 4 when another writer holds the store (unless --wait).";

/// Repairs what a crash left and reports it.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    #[command(flatten)]
    writing: Writing,
    /// Rebuild the title index from the title records (trusting only checksummed keys).
    #[arg(long)]
    rebuild_index: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    let mut out = Out::new();
    if args.rebuild_index {
        rebuild(args, &mut out)?;
    }
    // Each repair is reported once, here on stdout (not again on stderr as other verbs do).
    let store = super::open_writer_quietly(&args.dir, &args.writing)?;
    let repairs = super::repairs(&store);
    for r in &repairs {
        out.line(&format!("repaired: {r}"))?;
    }
    drop(store);
    let report = wink::store::check::check_store(&args.dir);
    for p in &report.problems {
        out.line(&p.to_string())?;
    }
    out.line(&format!(
        "{}: {} repairs; {}",
        args.dir.display(),
        repairs.len(),
        if report.problems.is_empty() {
            "clean"
        } else {
            "problems remain"
        }
    ))?;
    out.finish()?;
    Ok(if report.problems.is_empty() { 0 } else { 1 })
}

/// Rebuilds the title index and reports what it did, one line each.
fn rebuild(args: &Args, out: &mut Out) -> Result<()> {
    super::expect_store(&args.dir)?;
    let opts = StoreOptions {
        wait: args.writing.wait,
        clock: crate::clock_from_env()?,
        ..StoreOptions::writer()
    };
    let report = maintenance::rebuild_index(&args.dir, &opts)?;
    for (found, own) in &report.renamed {
        out.line(&format!(
            "repaired: title record found as {found:?} names {own:?}: written again under it"
        ))?;
    }
    for title in &report.archive_only {
        out.line(&format!(
            "repaired: archived title {title:?} had no record: one written"
        ))?;
    }
    for refusal in &report.refused {
        out.line(&format!("refused: {refusal}"))?;
    }
    out.line(&format!(
        "{}: title index rebuilt: {} records indexed, {} verified by their own key, {} without \
         one (older records)",
        args.dir.display(),
        report.indexed,
        report.verified,
        report.unverified
    ))
}
