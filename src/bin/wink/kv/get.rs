//! `wink kv get FILE POINTER`.

use std::path::PathBuf;

use wink::format::kvseq::KvPointer;
use wink::{Error, Result};

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Exit status 1 when no entry starts at POINTER, or the entry there is deleted. POINTER is trusted
as the library trusts it: one that points inside an entry is reported as not found when its bytes
do not parse as an entry, and cannot always be told from an entry start when they do.";

/// Writes the value of the live entry at POINTER to stdout, byte for byte.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The kvseq file.
    file: PathBuf,
    /// The entry's pointer, as `wink kv append` printed it or `wink dump` lists it.
    pointer: u64,
}

pub fn run(args: &Args) -> Result<Status> {
    let kv = super::open_reader(&args.file)?;
    let ptr = KvPointer(args.pointer);
    let entry = kv.read(ptr).map_err(|e| super::explain(&kv, ptr, e))?;
    if entry.deleted {
        let path = args.file.display();
        return Err(Error::NotFound(format!(
            "{path}: the entry at {ptr} is deleted"
        )));
    }
    let mut out = Out::new();
    out.bytes(&entry.value)?;
    out.finish()?;
    Ok(0)
}
