//! `wink snapshot DIR DEST [--wait]`: a consistent copy of a live store.

use std::path::PathBuf;

use wink::maintenance;
use wink::{Error, Result};

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Copies the store in DIR to DEST, a new directory (its parent must exist), as a store that opens
on its own. The store's writer lock is held throughout (another writer waits or exits 4; readers
go on), and the store is committed first, so the copy is exactly its state at that commit.
Sealed containers are hard-linked when DEST is on the same file system (they never change
again), copied otherwise; the configuration, the title records, the current container and the
archive are copied whole, byte for byte. Every file and the directory are fsynced before the
command succeeds.

On success, one `FIELD<TAB>VALUE` line each: linked, linked_bytes, copied, copied_bytes (files
and their bytes).

Exit status: 2 when DEST exists (nothing is written), 3 on a read or write error (DEST may then
hold a partial copy without its `store` file, which opens as no store), 4 when another writer
holds the store (unless --wait).";

/// Copies a live store to a new directory, consistently.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// The new directory to copy it to; must not exist.
    dest: PathBuf,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    // Refused before the writer lock is taken: bad input changes nothing.
    if args.dest.symlink_metadata().is_ok() {
        return Err(Error::invalid(format!(
            "{}: already exists; a snapshot goes to a new directory",
            args.dest.display()
        )));
    }
    super::expect_store(&args.dir)?;
    let mut store = super::open_writer(&args.dir, &args.writing)?;
    let report = maintenance::snapshot(&mut store, &args.dest)?;
    let mut out = Out::new();
    for (field, value) in [
        ("linked", report.linked),
        ("linked_bytes", report.linked_bytes),
        ("copied", report.copied),
        ("copied_bytes", report.copied_bytes),
    ] {
        out.line(&format!("{field}\t{value}"))?;
    }
    out.finish()?;
    Ok(0)
}
