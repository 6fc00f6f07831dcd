//! `wink import DIR --warc FILE... [--skip-damaged] [--batch N] [--wait]`: WARC records into a
//! store (the options are `wink import`'s).

use std::path::{Path, PathBuf};

use wink::warc::{import_warc, ImportOptions, ImportReport};
use wink::Result;

use super::Writing;
use crate::Status;

/// Refused records shown one by one; past this many, only counted.
const SHOWN: u64 = 100;

pub fn run(
    dir: &Path,
    files: &[PathBuf],
    opts: &ImportOptions,
    writing: &Writing,
) -> Result<Status> {
    let (mut store, bar) = super::start_import(
        dir,
        files,
        writing,
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )?;
    let mut shown = 0u64;
    let result = import_warc(
        &mut store,
        files,
        opts,
        |r| {
            shown += 1;
            if shown <= SHOWN {
                bar.suspend(|| {
                    eprintln!(
                        "wink: refused: {} at byte {}: {}",
                        r.file.display(),
                        r.offset,
                        r.reason.replace('\n', " ")
                    )
                });
            }
        },
        |e| bar.suspend(|| eprintln!("wink: skipped damaged record: {e}")),
        |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    );
    bar.finish_and_clear();
    let report = result?;
    if report.refused > SHOWN {
        eprintln!(
            "wink: refused {} records in all ({SHOWN} shown)",
            report.refused
        );
    }
    summary(&report)?;
    Ok(0)
}

fn summary(r: &ImportReport) -> Result<()> {
    crate::show::summary(
        &[
            ("files", r.files),
            ("records", r.records),
            ("renders", r.renders),
            ("revisits", r.revisits),
            ("passed_over", r.passed_over),
            ("refused", r.refused),
            ("damaged", r.damaged),
            ("bytes", r.bytes),
            ("file_bytes", r.file_bytes),
        ],
        r.file_bytes,
        r.seconds,
    )
}
