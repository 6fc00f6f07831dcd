//! `wink export DIR -o OUT.warc.gz [filters] [--compress gzip|zstd|none] [--max-file-bytes N]
//! [--key-order] [--json]`: the store's renders as WARC 1.1 records with a CDXJ index; with
//! `--wacz FILE.wacz` packaged as WACZ; with `--format enterprise` an Enterprise HTML snapshot
//! ([`super::export_enterprise`]); with `--cluster URL --bucket NAME` instead of DIR, a whole
//! cluster's bucket ([`super::export_cluster`]).

use std::path::PathBuf;

use serde::Serialize;
use wink::store::key;
use wink::warc::{export_warc, Compression, ExportOptions, ExportReport, Filter, Ticks};
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

With --wacz FILE.wacz instead of -o, the WARC export (gzip, or plain with --compress none), its
CDXJ index, pages/pages.jsonl (one page per title: its latest exported render) and
datapackage.json with every entry's SHA-256 are packaged as WACZ 1.1.1 (docs/DUMPS.md); the parts
are written to FILE.wacz.parts/ first and removed at the end. Summary: the WARC export's fields,
then pages, entries, wacz_bytes.

With --format enterprise, -o names a Wikimedia Enterprise HTML snapshot (*.json.tar.gz): the
latest render of every title (--as-of T: the latest made at or before T), one article per line
in members of at most --member-bytes of NDJSON (default 1 GiB), written and read back as
docs/DUMPS.md says; only --domain, --as-of, --level, --threads, --key-order and --json apply
(and --cluster). Summary fields: articles, not_html, not_utf8, html_bytes, raw_bytes,
written_bytes, members, seconds, mb_per_s.

With --key-order, titles are written in key order (domain, then title, bytewise) instead of the
order of the store's files; each step of 4096 titles walks the title records once more.

With --cluster URL --bucket NAME instead of DIR (URL: a cluster node's or the router's), the
export is of a whole cluster's bucket: each partition read from one owner over
GET /_cluster/dump/... (the next owner when one fails), merged in key order, so the file holds the
records and index of `wink export DIR --key-order` of a store with the same renders (record ids
are random in every export). --token-file F sends the nodes' token. The filters and output
options apply, and --format enterprise; --wacz does not. The summary adds pages, page_bytes and
retries (pages asked again of another owner). See docs/CLUSTER.md § Export.

Exit status: 0 on success; 2 on bad usage, no store, an unknown bucket, or an output file that
exists; 3 when data cannot be read or written (the files of the failed export are removed); 5
when no owner of a partition answers (--cluster).";

/// Exports a store's renders as WARC records with a CDXJ index.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory (none with --cluster).
    #[arg(required_unless_present = "cluster")]
    pub(super) dir: Option<PathBuf>,
    /// Export a whole cluster's bucket instead: a node's or the router's http:// URL.
    #[cfg(feature = "cluster")]
    #[arg(long, value_name = "URL", conflicts_with = "dir", requires = "bucket")]
    cluster: Option<String>,
    /// With --cluster: the bucket to export.
    #[cfg(feature = "cluster")]
    #[arg(long, value_name = "NAME", requires = "cluster")]
    bucket: Option<String>,
    /// With --cluster: the nodes' token file (`wink serve --token-file`), sent with each request.
    #[cfg(feature = "cluster")]
    #[arg(long, value_name = "F", requires = "cluster")]
    token_file: Option<PathBuf>,
    /// Titles in key order (domain, then title, bytewise) rather than the order of the store's
    /// files: the same bytes as a --cluster export of the same renders.
    #[arg(long)]
    pub(super) key_order: bool,
    /// The file to write: BASE.warc.gz, BASE.warc.zst or BASE.warc (with --format enterprise:
    /// NAME.json.tar.gz).
    #[arg(short, long, value_name = "OUT", required_unless_present = "wacz")]
    output: Option<PathBuf>,
    /// Package the WARC export as this WACZ file instead.
    #[cfg(feature = "dumps")]
    #[arg(long, value_name = "FILE.wacz", conflicts_with_all = ["output", "format"])]
    wacz: Option<PathBuf>,
    /// warc (the default) or enterprise (a Wikimedia Enterprise HTML snapshot).
    #[cfg(feature = "dumps")]
    #[arg(long, value_name = "FORMAT", value_parser = ["warc", "enterprise"])]
    pub(super) format: Option<String>,
    /// With --format enterprise: the latest render made at or before T.
    #[cfg(feature = "dumps")]
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(super) as_of: Option<i64>,
    /// With --format enterprise: members of at most N bytes of NDJSON.
    #[cfg(feature = "dumps")]
    #[arg(long, value_name = "N")]
    pub(super) member_bytes: Option<u64>,
    /// Only this domain.
    #[arg(long, value_name = "D")]
    pub(super) domain: Option<String>,
    /// Only this title.
    #[arg(long, value_name = "T")]
    pub(super) title: Option<String>,
    /// Only the renders of each title's current revision.
    #[arg(long, conflicts_with = "all")]
    pub(super) current: bool,
    /// Every readable render of both tiers (the default).
    #[arg(long)]
    pub(super) all: bool,
    /// Only renders made at or after T (seconds since the epoch, or RFC 3339).
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(super) since: Option<i64>,
    /// Only renders made before T.
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(super) until: Option<i64>,
    /// gzip, zstd or none (default: what OUT's name says).
    #[arg(long, value_name = "KIND", value_parser = parse_compression)]
    pub(super) compress: Option<Compression>,
    /// The compression level (gzip 1-9, default 6; zstd 1-22, default 3).
    #[arg(long, value_name = "N")]
    pub(super) level: Option<u32>,
    /// Split into files of at most N bytes.
    #[arg(long, value_name = "N")]
    pub(super) max_file_bytes: Option<u64>,
    /// Compressor threads (default: one per core).
    #[arg(long, value_name = "N")]
    pub(super) threads: Option<usize>,
    /// Write no CDXJ index.
    #[arg(long)]
    pub(super) no_index: bool,
    /// One JSON object instead of FIELD<TAB>VALUE lines.
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) fn parse_time(text: &str) -> Result<i64> {
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
    #[serde(flatten)]
    more: std::collections::BTreeMap<String, u64>,
}

/// The store's directory: given unless --cluster is.
fn dir(args: &Args) -> Result<&std::path::Path> {
    args.dir
        .as_deref()
        .ok_or_else(|| Error::invalid("a store's DIR, or --cluster URL --bucket NAME"))
}

pub fn run(args: &Args) -> Result<Status> {
    #[cfg(feature = "cluster")]
    if let Some(url) = &args.cluster {
        return run_cluster(args, url);
    }
    #[cfg(feature = "dumps")]
    if args.format.as_deref() == Some("enterprise") {
        return super::export_enterprise::run(dir(args)?, args.output.as_deref(), args);
    }
    #[cfg(feature = "dumps")]
    if let Some(wacz) = &args.wacz {
        return run_wacz(args, wacz);
    }
    let opts = options(args, args.output.as_deref())?;
    let store = super::open_reader(dir(args)?)?;
    let bar = super::progress_bar(Some(0), "exporting {bar:40} {percent}% {msg}, eta {eta}");
    let result = export_warc(&store, &opts, |p| {
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

/// `--cluster URL --bucket NAME`: the WARC export of a whole cluster's bucket.
#[cfg(feature = "cluster")]
fn run_cluster(args: &Args, url: &str) -> Result<Status> {
    #[cfg(feature = "dumps")]
    if args.wacz.is_some() {
        return Err(Error::invalid(
            "--cluster writes a WARC export or an Enterprise snapshot: not --wacz",
        ));
    }
    if !url.starts_with("http://") {
        return Err(Error::invalid(format!("--cluster {url:?}: an http:// URL")));
    }
    // The cluster's own list of buckets is what the name is checked against.
    let bucket = args.bucket.as_deref().unwrap_or_default();
    let auth = match args.token_file.as_deref() {
        Some(f) => wink::serve::Auth::from_file(f)?,
        None => wink::serve::Auth::none(),
    };
    #[cfg(feature = "dumps")]
    if args.format.as_deref() == Some("enterprise") {
        let output = args.output.as_deref();
        return super::export_enterprise::run_cluster(url, bucket, &auth, output, args);
    }
    let opts = options(args, args.output.as_deref())?;
    let bar = super::progress_bar(Some(0), "exporting {bar:40} {pos}/{len} partitions {msg}");
    let result = super::export_cluster::export(url, bucket, &auth, &opts, |p| {
        bar.set_length(p.walked.1);
        bar.set_position(p.walked.0);
        bar.set_message(format!(
            "{} renders, {:.0} MB written",
            p.renders,
            p.written_bytes as f64 / 1e6
        ));
    });
    bar.finish_and_clear();
    let (report, stats) = result?;
    let fetched = [
        ("pages", stats.pages),
        ("page_bytes", stats.bytes),
        ("retries", stats.retries),
    ];
    summary_with(&report, args.json, &fetched)?;
    Ok(0)
}

/// `--wacz`: the WARC export packaged.
#[cfg(feature = "dumps")]
fn run_wacz(args: &Args, wacz: &std::path::Path) -> Result<Status> {
    if args.as_of.is_some() || args.member_bytes.is_some() {
        return Err(Error::invalid(
            "--as-of and --member-bytes go with --format enterprise",
        ));
    }
    // The WARC's own name inside the package is made by the package; its compression from
    // --compress (gzip by default).
    let kind = args.compress.unwrap_or(Compression::Gzip);
    let placeholder = PathBuf::from(format!("wacz{}", kind.extension()));
    let opts = options(args, Some(&placeholder))?;
    let store = super::open_reader(dir(args)?)?;
    let bar = super::progress_bar(Some(0), "packaging {bar:40} {percent}% {msg}, eta {eta}");
    let result = wink::warc::export_wacz(&store, wacz, &opts, |p| {
        bar.set_length(p.walked.1);
        bar.set_position(p.walked.0);
        bar.set_message(format!("{} renders", p.renders));
    });
    bar.finish_and_clear();
    let r = result?;
    let mut out = Out::new();
    if args.json {
        let files: Vec<String> = r.entries.iter().map(|(p, _)| p.clone()).collect();
        out.json(&serde_json::json!({
            "titles": r.warc.titles,
            "records": r.warc.records,
            "resources": r.warc.resources,
            "revisits": r.warc.revisits,
            "value_bytes": r.warc.value_bytes,
            "index_lines": r.warc.index_lines,
            "pages": r.pages,
            "entries": files,
            "wacz_bytes": r.bytes,
            "seconds": r.seconds,
        }))?;
    } else {
        for (field, value) in [
            ("titles", r.warc.titles.to_string()),
            ("records", r.warc.records.to_string()),
            ("resources", r.warc.resources.to_string()),
            ("revisits", r.warc.revisits.to_string()),
            ("value_bytes", r.warc.value_bytes.to_string()),
            ("index_lines", r.warc.index_lines.to_string()),
            ("pages", r.pages.to_string()),
            ("entries", r.entries.len().to_string()),
            ("wacz_bytes", r.bytes.to_string()),
            ("seconds", format!("{:.3}", r.seconds)),
        ] {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()?;
    Ok(0)
}

fn options(args: &Args, output: Option<&std::path::Path>) -> Result<ExportOptions> {
    let Some(output) = output else {
        return Err(Error::invalid("-o OUT or --wacz FILE.wacz"));
    };
    if let Some(d) = &args.domain {
        key::check_domain(d)?;
    }
    if let Some(t) = &args.title {
        key::check_title(t)?;
    }
    #[cfg(feature = "dumps")]
    if args.as_of.is_some() || args.member_bytes.is_some() {
        return Err(Error::invalid(
            "--as-of and --member-bytes go with --format enterprise",
        ));
    }
    let mut opts = ExportOptions::new(output)?;
    if let Some(c) = args.compress {
        if c != opts.compression {
            return Err(Error::invalid(format!(
                "--compress {c:?} writes *{}, not {}",
                c.extension(),
                output.display()
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
    if args.key_order {
        opts.order = wink::warc::Order::Key;
    }
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
    summary_with(r, json, &[])
}

/// The summary, then `more` fields (a cluster export's pages, bytes fetched, retries).
fn summary_with(r: &ExportReport, json: bool, more: &[(&str, u64)]) -> Result<()> {
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
            more: more.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
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
        for (field, value) in more {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()
}
