//! `wink fs ...`: a filesys (`BASE.data`, `BASE.idx`, `BASE.jnl`, and `BASE.time` when ao) from
//! the command line.
//!
//! Writing commands take the filesys's writer lock (`--wait` waits for it instead of exit 4),
//! use the `WINK_NOW` clock for mtimes and SYNCTIME, and succeed only after the commit is durable.

mod append;
mod cat;
mod create;
mod ls;
mod mv;
mod put;
mod reindex;
mod rm;
mod stat;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use clap::Subcommand;
use serde::Serialize;
use wink::filesys::{file_path, FileStat, Filesys, OpenOptions, DATA_PURPOSE};
use wink::format::superblock::{Format, Superblock};
use wink::storage::FileStorage;
use wink::{Error, Result};

use crate::show;
use crate::Status;

#[derive(Subcommand)]
pub enum Command {
    /// Create a new, empty filesys (none of its files may exist).
    Create(create::Args),
    /// Write a file: create it, or replace it with a new version.
    Put(put::Args),
    /// Append to an existing file.
    Append(append::Args),
    /// Write a file's content (or a byte range of it) to stdout.
    Cat(cat::Args),
    /// Print a file's metadata.
    Stat(stat::Args),
    /// List the live files in file order, or those in an mtime range (ao).
    Ls(ls::Args),
    /// Delete a file.
    Rm(rm::Args),
    /// Rename a file (refused in an ao filesys).
    Mv(mv::Args),
    /// Rebuild BASE.idx from BASE.data alone and print how many files it indexes.
    Reindex(reindex::Args),
}

pub fn run(command: Command) -> Result<Status> {
    match command {
        Command::Create(args) => create::run(&args),
        Command::Put(args) => put::run(&args),
        Command::Append(args) => append::run(&args),
        Command::Cat(args) => cat::run(&args),
        Command::Stat(args) => stat::run(&args),
        Command::Ls(args) => ls::run(&args),
        Command::Rm(args) => rm::run(&args),
        Command::Mv(args) => mv::run(&args),
        Command::Reindex(args) => reindex::run(&args),
    }
}

/// The option every writing command takes.
#[derive(clap::Args)]
pub struct Writing {
    /// Wait for another writer's lock instead of exiting with status 4.
    #[arg(long)]
    wait: bool,
}

/// Opens `base` for writing with the `WINK_NOW` clock, and reports what the open repaired.
fn open_writer(base: &Path, writing: &Writing) -> Result<Filesys> {
    let clock = crate::clock_from_env()?;
    expect_filesys(base)?;
    let open = OpenOptions {
        wait: writing.wait,
        clock,
        ..OpenOptions::writer()
    };
    let fs = Filesys::open(base, &open)?;
    report_recovery(&fs);
    Ok(fs)
}

/// Tells the operator what a writer's open repaired: the filesys is not as it was left.
fn report_recovery(fs: &Filesys) {
    for action in &fs.recovery().actions {
        eprintln!("wink: recovered: {}", action.replace('\n', " "));
    }
}

/// Opens `base` read-only (no lock; a concurrent writer's later commits are not seen).
fn open_reader(base: &Path) -> Result<Filesys> {
    expect_filesys(base)?;
    Filesys::open(base, &OpenOptions::read_only())
}

/// A base that names no filesys is a usage mistake, not damage: it is refused with exit 2
/// before the library would report a missing file (3) or a plain kvseq's missing ISZ as
/// corruption (3).
fn expect_filesys(base: &Path) -> Result<()> {
    let data = file_path(base, "data");
    if data.symlink_metadata().is_err() {
        return Err(Error::invalid(format!(
            "{}: no filesys there ({} does not exist)",
            base.display(),
            data.display()
        )));
    }
    let sb = Superblock::read(&FileStorage::open(&data, false)?)?;
    if sb.format() != Some(Format::KvSeq) || sb.purpose() != DATA_PURPOSE {
        let format = sb.format().map_or("unknown", Format::name);
        return Err(Error::invalid(format!(
            "{} is a {format} file with PURPOSE {}, not a filesys datafile (kvseq, FSYSDATA)",
            data.display(),
            show::quoted(&sb.purpose().text())
        )));
    }
    Ok(())
}

/// A file name as given: the argument's bytes.
fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

/// "Not found" for a name that has no live file.
fn no_file(base: &Path, name: &[u8]) -> Error {
    Error::NotFound(format!("{}: no file {}", base.display(), show::text(name)))
}

/// One file as JSON, for `stat --json` and `ls --json`. `name` is null when the name is not
/// UTF-8; `name_hex` always holds its bytes (as `dump` does for keys).
#[derive(Serialize)]
struct FileJson<'a> {
    name: Option<&'a str>,
    name_hex: String,
    size: u64,
    ftype: u8,
    mtime: i64,
    fileid: u64,
    inode: u64,
    inode_size: u64,
    data_entries: u64,
}

impl<'a> FileJson<'a> {
    fn new(stat: &'a FileStat) -> Self {
        FileJson {
            name: show::utf8(&stat.name),
            name_hex: show::hex(&stat.name),
            size: stat.size,
            ftype: stat.ftype,
            mtime: stat.mtime,
            fileid: stat.fileid,
            inode: stat.inode.0,
            inode_size: stat.inode_size,
            data_entries: stat.data_entries,
        }
    }
}
