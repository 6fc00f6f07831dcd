//! `wink import DIR --enterprise FILE... [--skip-bad] [--batch N] [--max-line-bytes N] [--wait]`:
//! Wikimedia Enterprise HTML snapshots into a store (the options are `wink import`'s).

use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use wink::warc::{
    import_enterprise, EnterpriseImportOptions, EnterpriseImportProgress, EnterpriseImportReport,
    EnterpriseListener, EnterpriseNote,
};
use wink::Result;

use super::Writing;
use crate::Status;

/// Lines reported one by one, of each kind; past this many, only counted.
const SHOWN: u64 = 100;

struct Cli {
    bar: ProgressBar,
    shown: [u64; 3],
}

impl Cli {
    fn say(&mut self, kind: usize, label: &str, note: &EnterpriseNote) {
        self.shown[kind] += 1;
        if self.shown[kind] <= SHOWN {
            let line = format!(
                "wink: {label}: {}: {}",
                note.place,
                note.what.replace('\n', " ")
            );
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }
}

impl EnterpriseListener for Cli {
    fn bad(&mut self, note: &EnterpriseNote) {
        self.say(0, "skipped bad line", note);
    }

    fn refused(&mut self, note: &EnterpriseNote) {
        self.say(1, "refused", note);
    }

    fn reshaped(&mut self, note: &EnterpriseNote) {
        self.say(2, "stored, but an export gives back another", note);
    }

    fn progress(&mut self, p: &EnterpriseImportProgress) {
        self.bar.set_length(p.file_bytes.1);
        self.bar.set_position(p.file_bytes.0);
        self.bar.set_message(format!("{} articles", p.articles));
    }
}

pub fn run(
    dir: &Path,
    files: &[PathBuf],
    opts: &EnterpriseImportOptions,
    writing: &Writing,
) -> Result<Status> {
    let (mut store, bar) = super::start_import(
        dir,
        files,
        writing,
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}, eta {eta}",
    )?;
    let mut cli = Cli {
        bar: bar.clone(),
        shown: [0; 3],
    };
    let result = import_enterprise(&mut store, files, opts, &mut cli);
    bar.finish_and_clear();
    let report = result?;
    for (n, what) in [
        (report.bad, "bad lines skipped"),
        (report.refused, "articles refused"),
        (report.reshaped, "articles reshaped"),
    ] {
        if n > SHOWN {
            eprintln!("wink: {n} {what} in all ({SHOWN} shown)");
        }
    }
    summary(&report)?;
    Ok(0)
}

fn summary(r: &EnterpriseImportReport) -> Result<()> {
    crate::show::summary(
        &[
            ("files", r.files),
            ("members", r.members),
            ("lines", r.lines),
            ("articles", r.articles),
            ("stored", r.stored),
            ("unchanged", r.unchanged),
            ("refused", r.refused),
            ("bad", r.bad),
            ("reshaped", r.reshaped),
            ("bytes", r.bytes),
            ("file_bytes", r.file_bytes),
        ],
        r.bytes,
        r.seconds,
    )
}
