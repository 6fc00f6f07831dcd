//! `wink fs put BASE NAME [FILE | -] [--type N]`.

use std::ffi::OsString;
use std::path::PathBuf;

use wink::Result;

use super::Writing;
use crate::Status;

const AFTER_HELP: &str = "\
An existing file is replaced: the new content gets a new inode and file id, and the old version
(inode and data) is marked deleted. The content is read completely before the filesys is locked.
Exit status 2 when FILE cannot be read, or NAME is longer than 4096 bytes.";

/// Writes a file from FILE or stdin, and syncs.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// The file's name, as the argument's bytes (`/` is an ordinary character).
    name: OsString,
    /// Where the content comes from; `-` or none: stdin.
    file: Option<PathBuf>,
    /// FTYPE: the file's type, 0..=255 (the filesys stores it; it means what you say it means).
    #[arg(long = "type", default_value_t = 0)]
    ftype: u8,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let content = crate::input::read_input(
        args.file.as_deref(),
        crate::input::MAX_INPUT,
        "the most a `wink fs` input takes (256 MiB)",
    )?;
    let mut fs = super::open_writer(&args.base, &args.writing)?;
    fs.put(super::name_bytes(&args.name), args.ftype, &content)?;
    fs.sync()?;
    Ok(0)
}
