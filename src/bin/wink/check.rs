//! `wink check PATH... [--strict]`: validates Wink files, filesys bases and render stores, one
//! report line per problem.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressFinish};

use wink::check::{check_file, Report};
use wink::filesys::check::check_filesys;
use wink::filesys::file_path;
use wink::store::check::check_store;
use wink::Result;

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Prints one line per problem, `PATH: error|warning at byte OFFSET: WHAT`, and `PATH: ok (...)` for
a file with none that counts. Errors are damage (the file does not follow the format, or cannot
be read); warnings are bookkeeping that readers do not rely on (ENTRIES/AENTRIES off, SYNCSIZE
past FILESIZE, trailing padding). A hindex or perm is checked against its datafile when one lies
beside it: X.kvseq for X.hindex and X.perm, BASE.data for BASE.idx.

A PATH that does not exist while PATH.data does names a filesys: its files are checked together
(each file's structure, every live inode's checksum and data pointers, index against data, the
size totals, and in the ao variant the mtime order and the time marks).

A PATH that is a directory holding a `store` file names a render store: its configuration, the
title records' filesys and every container are checked as above, then every title record
(checksum, render order) and every render's location in its container. Values themselves are
verified against their CRC-32 by every read (`wink get` exits 3 on a damaged one).

With --warc FILE..., WARC files (gzip, zstd or plain) are checked as `wink import --warc` reads
them, every problem reported (`FILE: error at byte OFFSET: FIELD: expected ..., found ...`, the
offset the record's): a member that does not decode to its end, a record cut short, a wrong
Content-Length, a missing mandatory field, a block or payload digest that does not match, a
revisit whose original (WARC-Refers-To) is not in the files checked before it. `FILE: ok (...)`
counts the records of a clean file by type.

A progress bar (the path being checked, how many are done, the time so far) goes to stderr when it
is a terminal; piped or redirected, stderr gets only the summary of a failed check.

Exit status: 0 when no file has an error (nor, with --strict, a warning); 1 otherwise.";

/// Checks Wink files for damage and reports every problem with file and byte offset.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Wink files (kvseq, hindex, perm), filesys bases (BASE for BASE.data, BASE.idx, ...), or
    /// store directories.
    #[arg(required_unless_present = "warc")]
    paths: Vec<PathBuf>,
    /// WARC files to check (the paths are checked too).
    #[cfg(feature = "warc")]
    #[arg(long, value_name = "FILE", num_args = 1..)]
    warc: Vec<PathBuf>,
    /// Count warnings as problems too.
    #[arg(long)]
    strict: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    let mut out = Out::new();
    #[cfg(feature = "warc")]
    let warc_step = usize::from(!args.warc.is_empty());
    #[cfg(not(feature = "warc"))]
    let warc_step = 0;
    let bar = progress(args.paths.len() + warc_step);
    let (mut errors, mut warnings, mut bad_files) = (0, 0, 0);
    for path in &args.paths {
        bar.set_message(path.display().to_string());
        let report = if is_store_dir(path) {
            check_store(path)
        } else if is_filesys_base(path) {
            check_filesys(path)
        } else {
            check_file(path)
        };
        // Printed with the bar cleared, so that report lines and bar never share a terminal line.
        bar.suspend(|| print(&mut out, &report, args.strict))?;
        bar.inc(1);
        errors += report.errors();
        warnings += report.warnings();
        bad_files += usize::from(!report.is_clean(args.strict));
    }
    #[cfg(feature = "warc")]
    if !args.warc.is_empty() {
        bar.set_message("the WARC files");
        let (lines, problems, bad) = check_warcs(&args.warc)?;
        bar.suspend(|| {
            lines.iter().try_for_each(|l| out.line(l))?;
            out.flush()
        })?;
        errors += problems;
        bad_files += bad;
    }
    bar.finish_and_clear();
    out.finish()?;
    if bad_files == 0 {
        return Ok(0);
    }
    #[cfg(feature = "warc")]
    let files = args.paths.len() + args.warc.len();
    #[cfg(not(feature = "warc"))]
    let files = args.paths.len();
    eprintln!(
        "wink: check: {errors} errors and {warnings} warnings; \
         {bad_files} of {files} files not clean"
    );
    Ok(1)
}

/// Checks WARC files: one line per problem, then an ok line per clean file; the number of
/// problems, and of files with one.
#[cfg(feature = "warc")]
fn check_warcs(files: &[PathBuf]) -> Result<(Vec<String>, usize, usize)> {
    let mut lines = Vec::new();
    let summaries = wink::warc::check_warc(files, |p| lines.push(p.to_string()))?;
    let problems = lines.len();
    let mut bad = 0;
    for s in &summaries {
        if s.problems == 0 {
            lines.push(s.ok_line());
        } else {
            bad += 1;
        }
    }
    Ok((lines, problems, bad))
}

/// A bar over the paths (and the WARC files, as one step) on a terminal, hidden elsewhere. It
/// ticks on its own: one store can take minutes, and a frozen bar would look like a hang. It is
/// cleared however the check ends, so that an error message starts a line of its own.
fn progress(steps: usize) -> ProgressBar {
    let bar = crate::store::progress_bar(
        Some(steps as u64),
        "{spinner} checking {wide_msg} {pos}/{len}, {elapsed}",
    )
    .with_finish(ProgressFinish::AndClear);
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    bar
}

/// A directory with the store's configuration file in it is a store.
fn is_store_dir(path: &Path) -> bool {
    path.is_dir() && path.join("store").is_file()
}

/// A path that is not there itself but has a datafile beside it is a filesys's base.
fn is_filesys_base(path: &Path) -> bool {
    path.symlink_metadata().is_err() && file_path(path, "data").symlink_metadata().is_ok()
}

fn print(out: &mut Out, report: &Report, strict: bool) -> Result<()> {
    for problem in &report.problems {
        out.line(&problem.to_string())?;
    }
    if report.is_clean(strict) {
        let path = report.path.display();
        let warned = match report.warnings() {
            0 => String::new(),
            n => format!("; {n} warnings"),
        };
        out.line(&format!("{path}: ok ({}{warned})", report.summary))?;
    }
    out.flush()
}
