//! `wink recover DIR [--wait]`: a writer's open, explicitly, with its report.

use std::path::PathBuf;

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
}

pub fn run(args: &Args) -> Result<Status> {
    // Each repair is reported once, here on stdout (not again on stderr as other verbs do).
    let store = super::open_writer_quietly(&args.dir, &args.writing)?;
    let mut out = Out::new();
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
