//! `wink fs create BASE [options]`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wink::filesys::{file_path, inode, Filesys, FsOptions, OpenOptions, FILES};

use wink::{Error, Result};

use super::Writing;
use crate::recording::Recording;
use crate::Status;

const AFTER_HELP: &str = "\
Creates BASE.data (kvseq, FSYSDATA), BASE.idx (hindex, FSYSIDX), BASE.jnl (the redo journal,
FSYSJRNL) and, with --ao, BASE.time (the time index, FSYSTIME), and syncs them. Exit status 2
when an option is invalid or one of the four files exists (nothing is created, overwritten or
removed); when creating fails midway, the files this run created are removed again.";

/// Largest initial index: the index grows on its own, so a bigger start only wastes space.
const MAX_HTSIZE: u64 = 1 << 32;

/// Creates a new, empty filesys and syncs it.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The base path: the files are BASE.data, BASE.idx, BASE.jnl (and BASE.time).
    base: PathBuf,
    /// The append-only variant: mtimes never decrease, files are never renamed, and `ls` can
    /// list an mtime range through the time index.
    #[arg(long)]
    ao: bool,
    /// ISZ: the size of new inodes in bytes; an inode holds (ISZ - 56) / 16 data pointers. In an
    /// ao filesys inodes never grow, so ISZ bounds how often a file can be appended to.
    #[arg(long, default_value_t = FsOptions::default().isz)]
    isz: u64,
    /// TIMEMP: seconds per time-mark period of the time index (ao only).
    #[arg(long, requires = "ao", default_value_t = FsOptions::default().timemp)]
    timemp: i64,
    /// HAVEDUPS: creating an existing name makes a new version instead of failing.
    #[arg(long)]
    dups: bool,
    /// HTSIZE: the index's initial number of cells (it grows as files are added).
    #[arg(long, default_value_t = FsOptions::default().htsize)]
    htsize: u64,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let opts = options(args)?;
    let open = OpenOptions {
        wait: args.writing.wait,
        clock: crate::clock_from_env()?,
        ..OpenOptions::writer()
    };
    refuse_existing(&args.base)?;
    let vfs = Arc::new(Recording::default());
    let result = create(vfs.clone(), &args.base, &opts, &open);
    if result.is_err() {
        vfs.remove_created();
    }
    result.map(|()| 0)
}

/// The library refuses the same values again; checking here first keeps the promise "invalid
/// options create nothing" visible in one place, and bounds HTSIZE, which the library does not.
fn options(args: &Args) -> Result<FsOptions> {
    if !(inode::MIN_SIZE..=inode::MAX_SIZE).contains(&args.isz) {
        return Err(Error::invalid(format!(
            "ISZ {}: {}..={} bytes",
            args.isz,
            inode::MIN_SIZE,
            inode::MAX_SIZE
        )));
    }
    if !(1..=MAX_HTSIZE).contains(&args.htsize) {
        return Err(Error::invalid(format!(
            "HTSIZE {}: 1..={MAX_HTSIZE} cells",
            args.htsize
        )));
    }
    if args.ao && args.timemp < 1 {
        return Err(Error::invalid(format!(
            "TIMEMP {}: at least 1 second",
            args.timemp
        )));
    }
    Ok(FsOptions {
        ao: args.ao,
        dups: args.dups,
        isz: args.isz,
        timemp: args.timemp,
        htsize: args.htsize,
        ..FsOptions::default()
    })
}

/// Never overwrites or removes a file that is there: the library would take a BASE.idx without a
/// BASE.data for the leftover of an interrupted create and remove it, but from the command line
/// it may just as well be someone's file.
fn refuse_existing(base: &Path) -> Result<()> {
    for ext in FILES {
        let path = file_path(base, ext);
        if path.symlink_metadata().is_ok() {
            return Err(Error::invalid(format!(
                "{} exists; not overwritten (remove it first if an interrupted create left it)",
                path.display()
            )));
        }
    }
    Ok(())
}

fn create(vfs: Arc<Recording>, base: &Path, opts: &FsOptions, open: &OpenOptions) -> Result<()> {
    let mut fs = Filesys::create_in(vfs, base, opts, open).map_err(|e| match e {
        Error::Io { path, source, .. } if source.kind() == io::ErrorKind::AlreadyExists => {
            Error::invalid(format!("{} exists; not overwritten", path.display()))
        }
        other => other,
    })?;
    super::report_recovery(&fs);
    fs.sync()
}
