//! `wink fs cat BASE NAME [--offset N] [--len N]`.

use std::ffi::OsString;
use std::path::PathBuf;

use wink::Result;

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Writes bytes OFFSET .. OFFSET+LEN of the file, fewer at its end (none when OFFSET is past it).
Every data entry read is checked against the file's inode; damage is reported with file and byte
offset (exit status 3) after the bytes before it were written. Exit status 1 when NAME does not
exist.";

/// Bytes read per step: bounds memory for files of any size.
const CHUNK: u64 = 1 << 20;

/// Writes a file's content, or a byte range of it, to stdout.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// The file's name, as the argument's bytes.
    name: OsString,
    /// The first byte to write.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// How many bytes to write at most (default: to the end).
    #[arg(long)]
    len: Option<u64>,
}

pub fn run(args: &Args) -> Result<Status> {
    let fs = super::open_reader(&args.base)?;
    let name = super::name_bytes(&args.name);
    let stat = fs
        .stat(name)?
        .ok_or_else(|| super::no_file(&args.base, name))?;
    let end = args
        .offset
        .saturating_add(args.len.unwrap_or(u64::MAX))
        .min(stat.size);
    let mut out = Out::new();
    let mut at = args.offset;
    let result = loop {
        if at >= end {
            break Ok(());
        }
        // The handle reads the commit it opened on, so the chunks come from one version.
        match fs.read_range(name, at, CHUNK.min(end - at)) {
            Ok(bytes) => out.bytes(&bytes)?,
            Err(e) => break Err(e),
        }
        at = at.saturating_add(CHUNK);
    };
    out.finish()?;
    result.map(|()| 0)
}
