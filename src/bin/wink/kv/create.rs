//! `wink kv create FILE [options]`.

use std::io;
use std::path::PathBuf;

use wink::format::kvseq::{KvSeq, KvSeqOptions};
use wink::format::repr::Repr;
use wink::format::superblock::{Purpose, DEFAULT_SBSIZE};
use wink::storage::{sync_parent_dir, MemStorage};
use wink::{Error, Result};

use crate::Status;

const AFTER_HELP: &str = "\
KEYREPR/VALREPR: 0..3 a signed length of 1, 2, 4 or 8 bytes before the data; 4..259 exactly
N-4 bytes; 260..514 one length byte and a slot of N-259 bytes. The defaults (KEYREPR 1, VALREPR
2) take keys up to 32767 bytes and values up to 2^31-1 bytes.";

/// Creates a new, empty kvseq file and syncs it (and its directory).
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The file to create; an existing file is never overwritten.
    file: PathBuf,
    /// KEYREPR: how keys are stored.
    #[arg(long, default_value_t = 1)]
    keyrepr: i64,
    /// VALREPR: how values are stored.
    #[arg(long, default_value_t = 2)]
    valrepr: i64,
    /// Give entries a delflag (KVDELFL 1), so that `wink kv del` can delete them.
    #[arg(long)]
    delflag: bool,
    /// ALIGN: entries start at multiples of N (0: no alignment).
    #[arg(long, default_value_t = 0)]
    align: u64,
    /// PURPOSE: up to eight printable ASCII characters.
    #[arg(long, default_value = "KVSEQ")]
    purpose: String,
    /// SBSIZE: the superblock's size, a multiple of 8 from 64 to 1 MiB.
    #[arg(long, default_value_t = DEFAULT_SBSIZE)]
    sbsize: u64,
    /// FILEINCR: the file grows (is preallocated) in steps of N bytes.
    #[arg(long, default_value_t = 1 << 20)]
    fileincr: u64,
}

pub fn run(args: &Args) -> Result<Status> {
    let opts = options(args)?;
    // A dry run in memory: invalid options are refused before the file exists.
    KvSeq::create(Box::new(MemStorage::new("options")), &opts)?;
    KvSeq::create_path(&args.file, &opts).map_err(|e| match e {
        Error::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists => {
            Error::invalid(format!("{} exists; not overwritten", args.file.display()))
        }
        other => other,
    })?;
    sync_parent_dir(&args.file).map_err(|e| Error::io(&args.file, None, e))?;
    Ok(0)
}

fn options(args: &Args) -> Result<KvSeqOptions> {
    let repr = |name: &str, code: i64| {
        Repr::from_code(code).ok_or_else(|| Error::invalid(format!("{name} {code}: 0..=514")))
    };
    Ok(KvSeqOptions {
        sbsize: args.sbsize,
        purpose: purpose(&args.purpose)?,
        keyrepr: repr("KEYREPR", args.keyrepr)?,
        valrepr: repr("VALREPR", args.valrepr)?,
        delflag: args.delflag,
        align: args.align,
        fileincr: args.fileincr,
        extra: Vec::new(),
        clock: crate::clock_from_env()?,
    })
}

fn purpose(text: &str) -> Result<Purpose> {
    Purpose::new(text).map_err(|_| {
        Error::invalid(format!(
            "PURPOSE {text:?}: 1 to 8 printable ASCII characters"
        ))
    })
}
