//! `wink import DIR SRC [--domain D] [--batch N] [--wait]`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use wink::store::import::{import, read_manifest, CorpusEntry, ImportStats};
use wink::store::{key, Config};
use wink::vfs::RealFs;
use wink::{Error, Result};

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
SRC is laid out like the shared corpus: SRC/manifest.tsv (a header line, then tab-separated doc,
rev, timestamp, bytes, ...) and SRC/DOC/REV.html. Each line becomes a render of title DOC,
revision REV (as a number), with a tid at the line's timestamp that is the same on every import,
content type text/html; charset=utf-8. Puts are committed every N (one sync per batch).

Before anything is written, the manifest is read and every file it names is checked: a missing
SRC/manifest.tsv, a malformed line, a DOC that is not a valid title, or a file that is missing or
over the store's maximum value size is exit status 2, with nothing written. A failure during the
import (exit status 3) leaves the batches committed before it.

A progress bar goes to stderr when it is a terminal. At the end, a summary on stdout, one
`FIELD<TAB>VALUE` line each: renders, titles, bytes, batches, seconds, mb_per_s (10^6 bytes).";

/// The domain of imported titles unless `--domain` says otherwise.
const DEFAULT_DOMAIN: &str = "corpus";

/// Loads a corpus into a store.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// The corpus directory (holding manifest.tsv).
    src: PathBuf,
    /// The domain the documents are stored under.
    #[arg(long, default_value = DEFAULT_DOMAIN)]
    domain: String,
    /// Commit every N puts.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    batch: usize,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    key::check_domain(&args.domain)?;
    if args.batch == 0 {
        return Err(Error::invalid("--batch 0: at least 1 put per commit"));
    }
    super::expect_store(&args.dir)?;
    let entries = manifest(&args.src)?;
    let cfg = Config::read(&RealFs, &args.dir.join("store"))?;
    preflight(&entries, &cfg)?;
    let mut store = super::open_writer(&args.dir, &args.writing)?;
    let bar = super::progress_bar(
        Some(entries.iter().map(|e| e.bytes).sum()),
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    );
    let started = Instant::now();
    let result = import(&mut store, &entries, &args.domain, args.batch, |done, _| {
        bar.set_position(done)
    });
    bar.finish_and_clear();
    summary(&result?, started.elapsed().as_secs_f64())?;
    Ok(0)
}

/// The manifest; one that is missing or malformed is a wrong argument, not damage in the store.
fn manifest(src: &Path) -> Result<Vec<CorpusEntry>> {
    let path = src.join("manifest.tsv");
    if !path.is_file() {
        return Err(Error::invalid(format!(
            "{}: no corpus there ({} is not a file)",
            src.display(),
            path.display()
        )));
    }
    read_manifest(src).map_err(|e| match e {
        Error::Corrupt {
            path,
            offset,
            what,
            found,
            ..
        } => Error::invalid(format!(
            "{}: at byte {offset}: {what}: {found:?}",
            path.display()
        )),
        other => other,
    })
}

/// Checks every entry before the first put: its title, and that its file is there and small
/// enough.
fn preflight(entries: &[CorpusEntry], cfg: &Config) -> Result<()> {
    for e in entries {
        key::check_title(&e.doc)?;
        let meta = std::fs::metadata(&e.path)
            .map_err(|err| Error::invalid(format!("{}: {err}", e.path.display())))?;
        if !meta.is_file() {
            return Err(Error::invalid(format!("{}: not a file", e.path.display())));
        }
        if meta.len() > cfg.max_value {
            return Err(Error::invalid(format!(
                "{}: {} bytes, over this store's maximum value of {}",
                e.path.display(),
                meta.len(),
                cfg.max_value
            )));
        }
    }
    Ok(())
}

fn summary(stats: &ImportStats, seconds: f64) -> Result<()> {
    let rate = if seconds > 0.0 {
        stats.bytes as f64 / 1e6 / seconds
    } else {
        0.0
    };
    let mut out = Out::new();
    for (field, value) in [
        ("renders", stats.renders.to_string()),
        ("titles", stats.titles.to_string()),
        ("bytes", stats.bytes.to_string()),
        ("batches", stats.batches.to_string()),
        ("seconds", format!("{seconds:.3}")),
        ("mb_per_s", format!("{rate:.1}")),
    ] {
        out.line(&format!("{field}\t{value}"))?;
    }
    out.finish()
}
