//! `wink fs rm BASE NAME`.

use std::ffi::OsString;
use std::path::PathBuf;

use wink::Result;

use super::Writing;
use crate::Status;

/// Deletes a file (its inode and data entries are marked deleted), and syncs.
#[derive(clap::Args)]
#[command(after_help = "Exit status 1 when NAME does not exist (nothing is written).")]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// The file's name, as the argument's bytes.
    name: OsString,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let mut fs = super::open_writer(&args.base, &args.writing)?;
    let name = super::name_bytes(&args.name);
    if !fs.delete(name)? {
        return Err(super::no_file(&args.base, name));
    }
    fs.sync()?;
    Ok(0)
}
