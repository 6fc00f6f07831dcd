//! `wink fs ls BASE [--since T] [--until T] [--json]`.

use std::path::PathBuf;

use wink::filesys::{FileStat, Filesys};
use wink::{Error, Result};

use super::FileJson;
use crate::show::{self, Out};
use crate::Status;

const AFTER_HELP: &str = "\
Lists the live files in file order (the order their current inodes were written: a replaced or
renamed file moves to the end). Text output: a `#` header line, then one tab-separated line per
file: fileid, size, ftype, mtime, name (a JSON string literal, or 0x and hex when not UTF-8).
With --json: one object per line with name (null when not UTF-8), name_hex, size, ftype, mtime,
fileid, inode, inode_size, data_entries.

--since and --until (seconds since the epoch) select the files with since <= mtime < until. They
need an ao filesys, where files lie in mtime order and the time index finds the first one
without reading the files before it; on a plain filesys they are a usage error (exit status 2).

What was read before damage is printed; then the error, with exit status 3.";

/// Lists files.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The filesys's base path.
    base: PathBuf,
    /// Only files with an mtime at or after T (ao).
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    since: Option<i64>,
    /// Only files with an mtime before T (ao).
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    until: Option<i64>,
    /// JSON lines: one object per file.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    let fs = super::open_reader(&args.base)?;
    let files = select(&fs, args)?;
    let mut out = Out::new();
    if !args.json {
        out.line("# fileid\tsize\tftype\tmtime\tname")?;
    }
    let result = files
        .into_iter()
        .try_for_each(|item| item.and_then(|stat| line(&mut out, args, &stat)));
    out.finish()?;
    result.map(|()| 0)
}

/// Files as the library yields them: every live one, or those of an mtime range.
type Files<'a> = Box<dyn Iterator<Item = Result<FileStat>> + 'a>;

/// Every live file, or those in the asked mtime range.
fn select<'a>(fs: &'a Filesys, args: &Args) -> Result<Files<'a>> {
    if args.since.is_none() && args.until.is_none() {
        return Ok(Box::new(fs.iter()));
    }
    let since = args.since.unwrap_or(i64::MIN);
    let until = args.until.unwrap_or(i64::MAX);
    if since > until {
        return Err(Error::invalid(format!(
            "--since {since} is after --until {until}"
        )));
    }
    Ok(Box::new(fs.iter_time(since, until)?))
}

fn line(out: &mut Out, args: &Args, stat: &FileStat) -> Result<()> {
    if args.json {
        return out.json(&FileJson::new(stat));
    }
    out.line(&format!(
        "{}\t{}\t{}\t{}\t{}",
        stat.fileid,
        stat.size,
        stat.ftype,
        stat.mtime,
        show::text(&stat.name)
    ))
}
