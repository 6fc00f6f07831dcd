//! `wink import DIR --warc FILE... [--skip-damaged] [--batch N] [--wait]`: WARC records into a
//! store (the options are `wink import`'s).

use std::path::{Path, PathBuf};

use wink::warc::import::{import, ImportOptions, ImportReport};
use wink::{Error, Result};

use super::Writing;
use crate::show::Out;
use crate::Status;

/// Refused records shown one by one; past this many, only counted.
const SHOWN: u64 = 100;

pub fn run(
    dir: &Path,
    files: &[PathBuf],
    opts: &ImportOptions,
    writing: &Writing,
) -> Result<Status> {
    for f in files {
        if !f.is_file() {
            return Err(Error::invalid(format!("{}: not a file", f.display())));
        }
    }
    let mut store = super::open_writer(dir, writing)?;
    let bar = super::progress_bar(
        Some(0),
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    );
    let mut shown = 0u64;
    let result = import(
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
    let rate = if r.seconds > 0.0 {
        r.file_bytes as f64 / 1e6 / r.seconds
    } else {
        0.0
    };
    let mut out = Out::new();
    for (field, value) in [
        ("files", r.files.to_string()),
        ("records", r.records.to_string()),
        ("renders", r.renders.to_string()),
        ("revisits", r.revisits.to_string()),
        ("passed_over", r.passed_over.to_string()),
        ("refused", r.refused.to_string()),
        ("damaged", r.damaged.to_string()),
        ("bytes", r.bytes.to_string()),
        ("file_bytes", r.file_bytes.to_string()),
        ("seconds", format!("{:.3}", r.seconds)),
        ("mb_per_s", format!("{rate:.1}")),
    ] {
        out.line(&format!("{field}\t{value}"))?;
    }
    out.finish()
}
