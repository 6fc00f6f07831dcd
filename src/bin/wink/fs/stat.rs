//! `wink fs stat BASE NAME [--json]`.

use std::ffi::OsString;
use std::path::PathBuf;

use wink::filesys::FileStat;
use wink::Result;

use super::FileJson;
use crate::show::{self, Out};
use crate::Status;

const AFTER_HELP: &str = "\
Text output: one `FIELD<TAB>VALUE` line each for name (a JSON string literal, or 0x and hex
when not UTF-8), size, ftype, mtime, fileid, inode (the inode entry's pointer in BASE.data),
inode_size and data_entries. With --json: one object with the same fields, the name as `name`
(null when not UTF-8) and `name_hex`. Exit status 1 when NAME does not exist.";

/// Prints a file's metadata.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// The file's name, as the argument's bytes.
    name: OsString,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    let fs = super::open_reader(&args.base)?;
    let name = super::name_bytes(&args.name);
    let stat = fs
        .stat(name)?
        .ok_or_else(|| super::no_file(&args.base, name))?;
    let mut out = Out::new();
    if args.json {
        out.json(&FileJson::new(&stat))?;
    } else {
        for (field, value) in fields(&stat) {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()?;
    Ok(0)
}

fn fields(stat: &FileStat) -> [(&'static str, String); 8] {
    [
        ("name", show::text(&stat.name)),
        ("size", stat.size.to_string()),
        ("ftype", stat.ftype.to_string()),
        ("mtime", stat.mtime.to_string()),
        ("fileid", stat.fileid.to_string()),
        ("inode", stat.inode.0.to_string()),
        ("inode_size", stat.inode_size.to_string()),
        ("data_entries", stat.data_entries.to_string()),
    ]
}
