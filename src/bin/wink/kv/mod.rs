//! `wink kv ...`: one kvseq file from the command line.

mod append;
mod create;
mod del;
mod get;

use std::fs::File;
use std::path::Path;

use clap::Subcommand;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use wink::check::is_entry_start;
use wink::format::kvseq::{KvPointer, KvSeq};
use wink::format::superblock::{Format, Superblock};
use wink::storage::FileStorage;
use wink::{Error, Result};

use crate::Status;

#[derive(Subcommand)]
pub enum Command {
    /// Create a new kvseq file (it must not exist).
    Create(create::Args),
    /// Append an entry and print its pointer.
    Append(append::Args),
    /// Write the value of the live entry at POINTER to stdout.
    Get(get::Args),
    /// Mark the entry at POINTER deleted (the file needs KVDELFL 1).
    Del(del::Args),
}

pub fn run(command: Command) -> Result<Status> {
    match command {
        Command::Create(args) => create::run(&args),
        Command::Append(args) => append::run(&args),
        Command::Get(args) => get::run(&args),
        Command::Del(args) => del::run(&args),
    }
}

/// An open kvseq and the lock that keeps other `wink` writers out while it is held.
struct Writer {
    kv: KvSeq,
    _lock: Flock<File>,
}

/// Opens `path` for writing under an exclusive flock(2) on the file, with the `WINK_NOW` clock.
/// A second writer gets [`Error::InUse`] at once instead of interleaving appends.
fn open_writer(path: &Path) -> Result<Writer> {
    let clock = crate::clock_from_env()?;
    let file = File::open(path).map_err(|e| Error::io(path, None, e))?;
    let lock =
        Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| match errno {
            Errno::EWOULDBLOCK => Error::InUse {
                path: path.to_path_buf(),
            },
            other => Error::io(path, None, other.into()),
        })?;
    expect_kvseq(path)?;
    let mut kv = KvSeq::open_path(path, true)?;
    kv.set_clock(clock);
    Ok(Writer { kv, _lock: lock })
}

/// Opens `path` read-only.
fn open_reader(path: &Path) -> Result<KvSeq> {
    expect_kvseq(path)?;
    KvSeq::open_path(path, false)
}

/// A hindex or perm given to a kv command is a usage mistake, not damage.
fn expect_kvseq(path: &Path) -> Result<()> {
    let sb = Superblock::read(&FileStorage::open(path, false)?)?;
    match sb.format() {
        Some(format) if format != Format::KvSeq => {
            let name = format.name();
            Err(Error::invalid(format!(
                "{} is a {name} file, not a kvseq",
                path.display()
            )))
        }
        _ => Ok(()),
    }
}

/// "Not found" for a pointer where no entry starts.
fn no_entry(kv: &KvSeq, ptr: KvPointer) -> Error {
    Error::NotFound(format!("{}: no entry starts at {ptr}", kv.path().display()))
}

/// A failed read at `ptr`: corruption there means a wrong pointer when no entry starts at `ptr`
/// (found by walking the entries before it), and real damage otherwise.
fn explain(kv: &KvSeq, ptr: KvPointer, e: Error) -> Error {
    if !e.is_corruption() {
        return e;
    }
    match is_entry_start(kv, ptr) {
        Ok(false) => no_entry(kv, ptr),
        _ => e,
    }
}
