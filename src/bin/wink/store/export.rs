//! `wink export DIR -o OUT.warc.gz [filters] [--compress gzip|zstd|none] [--max-file-bytes N]
//! [--json]`: the store's renders as WARC 1.1 records with a CDXJ index.

use std::path::PathBuf;

use serde::Serialize;
use wink::store::key;
use wink::warc::codec::Compression;
use wink::warc::date::Ticks;
use wink::warc::export::{self, ExportOptions, ExportReport, Filter};
use wink::{Error, Result};

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Writes every readable render of both tiers (what `wink ls` lists), title by title, each title's
renders oldest first: a `resource` record per render, or a `revisit` record (profile
identical-payload-digest, no block) when its payload is identical to one already written for the
same title. Each file opens with a `warcinfo` record. Each record is its own gzip member
(.warc.gz) or zstd frame (.warc.zst), so any record can be read from its offset; --compress none
writes a plain .warc. The compression is what OUT's name says unless --compress says it (then
OUT's name must agree). Records are compressed on every core.

With --max-file-bytes N, the records go to files of at most N bytes (a record larger than N gets
a file of its own), named BASE-00000.warc.gz, BASE-00001.warc.gz, ... for OUT = BASE.warc.gz.
The CDXJ index goes to BASE.cdxj: one line per resource and revisit record, sorted as pywb
expects (see docs/WARC.md for the record layout, the URI form and how to find a revision).

Filters: --domain D, --title T (with --domain: one title, looked up directly), --current (only
the renders of each title's current revision), --since T and --until T (the render's tid time, at
or after since, before until; seconds since the epoch or an RFC 3339 date such as
2024-05-01T00:00:00Z).

The store is read through a read-only handle beside any writer; memory stays bounded whatever
its size, and the dump leaves the page cache as it found it (the values it reads from disk and
the files it writes are dropped from it). Existing files are never overwritten (exit 2). A
progress bar goes to stderr when it is a terminal. At the end, a summary: one `FIELD<TAB>VALUE`
line each (titles, records, resources, revisits, value_bytes, raw_bytes, written_bytes, files,
index_lines, seconds, mb_per_s of value bytes, 10^6 bytes per second), or one JSON object with
--json (the files by name).

Exit status: 0 on success; 2 on bad usage, no store, or an output file that exists; 3 when data
cannot be read or written (the files of the failed export are removed).";

/// Exports a store's renders as WARC records with a CDXJ index.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// The WARC file to write: BASE.warc.gz, BASE.warc.zst or BASE.warc.
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
    /// Only this domain.
    #[arg(long, value_name = "D")]
    domain: Option<String>,
    /// Only this title.
    #[arg(long, value_name = "T")]
    title: Option<String>,
    /// Only the renders of each title's current revision.
    #[arg(long, conflicts_with = "all")]
    current: bool,
    /// Every readable render of both tiers (the default).
    #[arg(long)]
    all: bool,
    /// Only renders made at or after T (seconds since the epoch, or RFC 3339).
    #[arg(long, value_name = "T", value_parser = parse_time)]
    since: Option<i64>,
    /// Only renders made before T.
    #[arg(long, value_name = "T", value_parser = parse_time)]
    until: Option<i64>,
    /// gzip, zstd or none (default: what OUT's name says).
    #[arg(long, value_name = "KIND", value_parser = parse_compression)]
    compress: Option<Compression>,
    /// The compression level (gzip 1-9, default 6; zstd 1-22, default 3).
    #[arg(long, value_name = "N")]
    level: Option<u32>,
    /// Split into files of at most N bytes.
    #[arg(long, value_name = "N")]
    max_file_bytes: Option<u64>,
    /// Compressor threads (default: one per core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Write no CDXJ index.
    #[arg(long)]
    no_index: bool,
    /// One JSON object instead of FIELD<TAB>VALUE lines.
    #[arg(long)]
    json: bool,
}

fn parse_time(text: &str) -> Result<i64> {
    if let Ok(secs) = text.parse::<i64>() {
        return Ok(secs);
    }
    Ticks::parse(text)
        .map(Ticks::unix_secs)
        .map_err(|e| Error::invalid(format!("{e}; or seconds since the epoch")))
}

fn parse_compression(text: &str) -> Result<Compression> {
    match text {
        "gzip" | "gz" => Ok(Compression::Gzip),
        "zstd" | "zst" => Ok(Compression::Zstd),
        "none" => Ok(Compression::None),
        _ => Err(Error::invalid(format!("{text:?}: gzip, zstd or none"))),
    }
}

#[derive(Serialize)]
struct ReportJson {
    titles: u64,
    records: u64,
    resources: u64,
    revisits: u64,
    value_bytes: u64,
    raw_bytes: u64,
    written_bytes: u64,
    files: Vec<String>,
    index: Option<String>,
    index_lines: u64,
    seconds: f64,
    mb_per_s: f64,
}

pub fn run(args: &Args) -> Result<Status> {
    let opts = options(args)?;
    let store = super::open_reader(&args.dir)?;
    let bar = super::progress_bar(Some(0), "exporting {bar:40} {percent}% {msg}, eta {eta}");
    let result = export::export(&store, &opts, |p| {
        bar.set_length(p.walked.1);
        bar.set_position(p.walked.0);
        bar.set_message(format!(
            "{} renders, {:.0} MB read, {:.0} MB written",
            p.renders,
            p.value_bytes as f64 / 1e6,
            p.written_bytes as f64 / 1e6
        ));
    });
    bar.finish_and_clear();
    summary(&result?, args.json)?;
    Ok(0)
}

fn options(args: &Args) -> Result<ExportOptions> {
    if let Some(d) = &args.domain {
        key::check_domain(d)?;
    }
    if let Some(t) = &args.title {
        key::check_title(t)?;
    }
    let mut opts = ExportOptions::new(&args.output)?;
    if let Some(c) = args.compress {
        if c != opts.compression {
            return Err(Error::invalid(format!(
                "--compress {c:?} writes *{}, not {}",
                c.extension(),
                args.output.display()
            )));
        }
    }
    opts.level = args.level.unwrap_or(opts.compression.default_level());
    if args.max_file_bytes == Some(0) {
        return Err(Error::invalid("--max-file-bytes 0"));
    }
    opts.max_file_bytes = args.max_file_bytes;
    if let Some(t) = args.threads {
        opts.threads = t.max(1);
    }
    opts.index = !args.no_index;
    opts.filter = Filter {
        domain: args.domain.clone(),
        title: args.title.clone(),
        current_only: args.current && !args.all,
        since: args.since,
        until: args.until,
    };
    Ok(opts)
}

fn summary(r: &ExportReport, json: bool) -> Result<()> {
    let rate = if r.seconds > 0.0 {
        r.value_bytes as f64 / 1e6 / r.seconds
    } else {
        0.0
    };
    let names: Vec<String> = r.files.iter().map(|f| f.display().to_string()).collect();
    let mut out = Out::new();
    if json {
        out.json(&ReportJson {
            titles: r.titles,
            records: r.records,
            resources: r.resources,
            revisits: r.revisits,
            value_bytes: r.value_bytes,
            raw_bytes: r.raw_bytes,
            written_bytes: r.written_bytes,
            files: names,
            index: r.index.as_ref().map(|p| p.display().to_string()),
            index_lines: r.index_lines,
            seconds: r.seconds,
            mb_per_s: rate,
        })?;
    } else {
        for (field, value) in [
            ("titles", r.titles.to_string()),
            ("records", r.records.to_string()),
            ("resources", r.resources.to_string()),
            ("revisits", r.revisits.to_string()),
            ("value_bytes", r.value_bytes.to_string()),
            ("raw_bytes", r.raw_bytes.to_string()),
            ("written_bytes", r.written_bytes.to_string()),
            ("files", names.join(" ")),
            ("index_lines", r.index_lines.to_string()),
            ("seconds", format!("{:.3}", r.seconds)),
            ("mb_per_s", format!("{rate:.1}")),
        ] {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()
}
