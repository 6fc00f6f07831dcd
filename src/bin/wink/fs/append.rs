//! `wink fs append BASE NAME [FILE | -]`.

use std::ffi::OsString;
use std::path::PathBuf;

use wink::Result;

use super::Writing;
use crate::Status;

const AFTER_HELP: &str = "\
Exit status 1 when NAME does not exist (nothing is written); 2 when FILE cannot be read, or the
file's inode in an ao filesys has no room for another data entry (create it with a larger --isz).";

/// Appends the bytes of FILE or stdin to an existing file, and syncs.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// The file's name, as the argument's bytes.
    name: OsString,
    /// Where the bytes come from; `-` or none: stdin.
    file: Option<PathBuf>,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let bytes = crate::input::read_input(
        args.file.as_deref(),
        crate::input::MAX_INPUT,
        "the most a `wink fs` input takes (256 MiB)",
    )?;
    let mut fs = super::open_writer(&args.base, &args.writing)?;
    fs.append(super::name_bytes(&args.name), &bytes)?;
    fs.sync()?;
    Ok(0)
}
