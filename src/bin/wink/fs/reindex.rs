//! `wink fs reindex BASE`.

use std::path::PathBuf;

use wink::Result;

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Reads every inode of BASE.data, builds a new index of the live files beside BASE.idx, and
renames it into place (atomically: a crash leaves the old index or the new one). Prints the
number of files indexed. `wink check BASE` suggests this when the index disagrees with the data.";

/// Rebuilds the index from the datafile alone.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    super::expect_filesys(&args.base)?;
    let open = wink::filesys::OpenOptions {
        wait: args.writing.wait,
        clock: crate::clock_from_env()?,
        ..wink::filesys::OpenOptions::writer()
    };
    let count = wink::filesys::Filesys::reindex_in(
        std::sync::Arc::new(wink::vfs::RealFs),
        &args.base,
        &open,
    )?;
    let mut out = Out::new();
    out.line(&count.to_string())?;
    out.finish()?;
    Ok(0)
}
