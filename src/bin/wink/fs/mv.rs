//! `wink fs mv BASE OLD NEW`.

use std::ffi::OsString;
use std::path::PathBuf;

use wink::Result;

use super::Writing;
use crate::Status;

const AFTER_HELP: &str = "\
The file keeps its file id, mtime and data; a new inode is written under NEW and the old one is
marked deleted. Exit status 1 when OLD does not exist; 2 when NEW exists, or the filesys is ao
(a new inode there would break the mtime order, so ao files are never renamed).";

/// Renames a file, and syncs.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// The file's current name.
    old: OsString,
    /// Its new name (must not exist).
    new: OsString,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let mut fs = super::open_writer(&args.base, &args.writing)?;
    let (old, new) = (super::name_bytes(&args.old), super::name_bytes(&args.new));
    fs.rename(old, new)?;
    fs.sync()?;
    Ok(0)
}
