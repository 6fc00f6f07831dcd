//! `wink import DIR SRC [--domain D] [--batch N] [--wait]`, `wink import DIR --warc FILE...`
//! ([`super::import_warc`]) and `wink import DIR --enterprise FILE...`
//! ([`super::import_enterprise`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use wink::store::import::{import, read_manifest, verify, CorpusEntry, ImportStats};
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

Before anything is written, the manifest is read and every file it names is checked against its
line. Exit status 2, with nothing written, for: a missing SRC/manifest.tsv; a manifest over 256
MiB, a line over 64 KiB or not UTF-8; a malformed line (too few columns, a DOC that is not a
valid title, a revision that is not a number, a timestamp outside 0 to 103072857660 seconds, a
bytes column that is not a number, a sha1 column that is neither 40 hex digits nor empty nor
`-`); a file that is missing, not a regular file, of another length than its bytes column, over
the store's maximum value size, or of another SHA-1 than its sha1 column. Each message names the
manifest line. Files with a sha1 are read once for the check, then again to be stored. A file
that changes length between the check and its put stops the import there (exit 2), and a failure
during the import (exit status 3) likewise leaves the batches committed before it.

A progress bar goes to stderr when it is a terminal. At the end, a summary on stdout, one
`FIELD<TAB>VALUE` line each: renders, titles, bytes, batches, seconds, mb_per_s (10^6 bytes).

With --warc FILE... instead of SRC, WARC files (gzip, zstd or plain) are imported in order:
resource, response and revisit records become renders (a Wink export's with their revision, tid
and content type; other WARCs' as docs/WARC.md maps them), records without a render are passed
over, and a render that cannot be mapped is refused with its reason (one stderr line each).
Damage (a truncated member, a wrong Content-Length, a bad digest, a missing mandatory field, a
revisit whose original is absent) stops the import with exit status 3 and an error naming the
file, the record's offset and the field; what came before it is committed, nothing after it is
imported. --skip-damaged skips damaged records instead (one stderr line each) and counts them.
Summary fields: files, records, renders, revisits, passed_over, refused, damaged, bytes,
file_bytes, seconds, mb_per_s (of file bytes).

With --enterprise FILE... instead, Wikimedia Enterprise HTML snapshots (*.json.tar.gz: a tar.gz of
NDJSON members, one article per line) are streamed in, never unpacked: each article is a render
of its domain (from url), title (name, spaces as underscores), revision (version.identifier) and
time (date_modified), content type text/html; charset=utf-8 with the profile its HTML declares
(docs/DUMPS.md). An article whose title already has a render of its revision is left as it is
(unchanged), so the next snapshot adds only new revisions and a re-run after a kill finishes
without duplicates. Commits every --batch articles. A bad line (not UTF-8, not an article object,
a missing field, a title over 1,024 bytes, a body over the store's maximum, a line over
--max-line-bytes) stops the import with exit status 2 and a message naming the file, the tar
member and the line; the articles before it are committed, nothing of it or after it is stored.
--skip-bad skips such lines instead (one stderr line each) and counts them. A file that does not
decode (gzip or tar damage) stops it with exit status 3. Summary fields: files, members, lines,
articles, stored, unchanged, refused, bad, reshaped (stored, but an export writes some field
differently; one stderr line each), bytes (of HTML stored), file_bytes, seconds, mb_per_s (of
HTML bytes).";

/// The domain of imported titles unless `--domain` says otherwise.
const DEFAULT_DOMAIN: &str = "corpus";

/// Loads a corpus into a store.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// The corpus directory (holding manifest.tsv).
    #[arg(required_unless_present_any = ["warc", "enterprise"], conflicts_with_all = ["warc", "enterprise"])]
    src: Option<PathBuf>,
    /// WARC files (.warc.gz, .warc.zst or .warc) to import instead of a corpus.
    #[cfg(feature = "warc")]
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "domain")]
    warc: Vec<PathBuf>,
    /// With --warc: skip damaged records (counted) instead of stopping at the first.
    #[cfg(feature = "warc")]
    #[arg(long, requires = "warc")]
    skip_damaged: bool,
    /// Wikimedia Enterprise HTML snapshots (.json.tar.gz) to import instead of a corpus.
    #[cfg(feature = "dumps")]
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["domain", "warc"])]
    enterprise: Vec<PathBuf>,
    /// With --enterprise: skip bad lines (counted) instead of stopping at the first.
    #[cfg(feature = "dumps")]
    #[arg(long, requires = "enterprise")]
    skip_bad: bool,
    /// With --enterprise: the longest line read (default: 4 times the store's maximum value
    /// and 16 MiB).
    #[cfg(feature = "dumps")]
    #[arg(long, value_name = "N", requires = "enterprise")]
    max_line_bytes: Option<u64>,
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
    #[cfg(feature = "warc")]
    if !args.warc.is_empty() {
        let opts = wink::warc::ImportOptions {
            batch: args.batch,
            skip_damaged: args.skip_damaged,
        };
        return super::import_warc::run(&args.dir, &args.warc, &opts, &args.writing);
    }
    #[cfg(feature = "dumps")]
    if !args.enterprise.is_empty() {
        let opts = wink::warc::EnterpriseImportOptions {
            batch: args.batch,
            skip_bad: args.skip_bad,
            max_line: args.max_line_bytes,
        };
        return super::import_enterprise::run(&args.dir, &args.enterprise, &opts, &args.writing);
    }
    let Some(src) = &args.src else {
        return Err(Error::invalid(
            "a corpus directory, --warc FILE... or --enterprise FILE...",
        ));
    };
    let entries = manifest(src)?;
    let cfg = Config::read(&RealFs, &args.dir.join("store"))?;
    verify(&entries, cfg.max_value)?;
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

/// The manifest; one that is missing is a wrong argument, as a malformed one is.
fn manifest(src: &Path) -> Result<Vec<CorpusEntry>> {
    let path = src.join("manifest.tsv");
    if !path.is_file() {
        return Err(Error::invalid(format!(
            "{}: no corpus there ({} is not a file)",
            src.display(),
            path.display()
        )));
    }
    read_manifest(src)
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
