//! `wink kv del FILE POINTER`.

use std::path::PathBuf;

use wink::check::is_entry_start;
use wink::format::kvseq::KvPointer;
use wink::{Error, Result};

use crate::Status;

const AFTER_HELP: &str = "\
The entries before POINTER are walked first: a pointer inside an entry would otherwise flip one
of its bytes. Exit status 1 when no entry starts at POINTER or it is already deleted (nothing is
written); 2 when the file has no delflag (created without --delflag).";

/// Marks the entry at POINTER deleted and syncs.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The kvseq file.
    file: PathBuf,
    /// The entry's pointer, as `wink kv append` printed it or `wink dump` lists it.
    pointer: u64,
}

pub fn run(args: &Args) -> Result<Status> {
    let mut writer = super::open_writer(&args.file)?;
    let kv = &mut writer.kv;
    let ptr = KvPointer(args.pointer);
    if !kv.has_delflag() {
        let path = args.file.display();
        return Err(Error::invalid(format!(
            "{path}: entries cannot be deleted (no KVDELFL 1)"
        )));
    }
    if !is_entry_start(kv, ptr)? {
        return Err(super::no_entry(kv, ptr));
    }
    if !kv.delete(ptr)? {
        let path = args.file.display();
        return Err(Error::NotFound(format!(
            "{path}: the entry at {ptr} is already deleted"
        )));
    }
    kv.sync()?;
    Ok(0)
}
