//! `wink export`: a store's renders as WARC records, streaming, with a CDXJ index.
//!
//! Titles are walked in steps ([`Store::dump_step`]), each title's renders oldest first. A
//! render becomes a `resource` record, or a `revisit` (profile identical-payload-digest) when
//! its payload is identical to one already written for the same title; every file opens with a
//! `warcinfo` record. Memory holds one step of titles, one title's payload digests and the
//! records in flight ([`writer`](super::writer)), whatever the store's size.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use uuid::Uuid;

use crate::error::{Error, Result};
use std::sync::atomic::Ordering;

use wink_engine::store::{DumpReader, DumpRender, DumpTitle, State, Store, TitleCursor};

use super::cdxj;
use super::codec::Compression;
use super::date::Ticks;
use super::digest::{sha1, sha1_label};
use super::mapping::{self, render_uri, tid_date};
use super::record::{Header, END_OF_RECORD};
use super::surt::surt;
use super::writer::{self, Feed, IndexEntry, Output};

/// Titles walked per step.
const STEP_TITLES: usize = 64;

/// Which renders an export takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this domain.
    pub domain: Option<String>,
    /// Only this title (within the domain, if one is given).
    pub title: Option<String>,
    /// Only the renders of each title's current revision (state `current`).
    pub current_only: bool,
    /// Only renders whose tid time is at or after this second.
    pub since: Option<i64>,
    /// Only renders whose tid time is before this second.
    pub until: Option<i64>,
}

impl Filter {
    fn takes_title(&self, t: &DumpTitle) -> bool {
        self.domain.as_ref().is_none_or(|d| *d == t.domain)
            && self.title.as_ref().is_none_or(|x| *x == t.title)
    }

    fn takes(&self, r: &DumpRender) -> bool {
        let secs = mapping::tid_secs(r.tid);
        (!self.current_only || r.state == State::Current)
            && self.since.is_none_or(|s| secs >= s)
            && self.until.is_none_or(|u| secs < u)
    }
}

/// How to export.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// The first file's path as given (`dump.warc.gz`); its ending must match `compression`.
    pub out: PathBuf,
    /// How each record is compressed.
    pub compression: Compression,
    /// The compression level.
    pub level: u32,
    /// Files of at most this many bytes, named `BASE-00000.EXT`, … (one file `BASE.EXT` when
    /// `None`). A record larger than that gets a file of its own.
    pub max_file_bytes: Option<u64>,
    /// Which renders are exported.
    pub filter: Filter,
    /// Compressor threads (the machine's cores by default).
    pub threads: usize,
    /// Write the CDXJ index beside the files (`BASE.cdxj`).
    pub index: bool,
}

impl ExportOptions {
    /// Defaults for `out`: the compression its name says, every core, an index.
    pub fn new(out: &Path) -> Result<ExportOptions> {
        let compression = compression_of_name(out)?;
        Ok(ExportOptions {
            out: out.to_path_buf(),
            compression,
            level: compression.default_level(),
            max_file_bytes: None,
            filter: Filter::default(),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            index: true,
        })
    }

    /// The name without `.warc.gz` / `.warc.zst` / `.warc`.
    pub fn base(&self) -> Result<PathBuf> {
        let name = self.out.to_string_lossy();
        let ext = self.compression.extension();
        name.strip_suffix(ext).map(PathBuf::from).ok_or_else(|| {
            Error::invalid(format!(
                "{}: a {:?} export is named *{ext}",
                self.out.display(),
                self.compression
            ))
        })
    }

    /// The index's path: `BASE.cdxj`.
    pub fn index_path(&self) -> Result<PathBuf> {
        Ok(PathBuf::from(format!("{}.cdxj", self.base()?.display())))
    }
}

/// The compression a file name asks for.
pub(crate) fn compression_of_name(out: &Path) -> Result<Compression> {
    let name = out.to_string_lossy();
    [Compression::Gzip, Compression::Zstd, Compression::None]
        .into_iter()
        .find(|c| name.ends_with(c.extension()))
        .ok_or_else(|| {
            Error::invalid(format!(
                "{}: an export is named *.warc.gz, *.warc.zst or *.warc",
                out.display()
            ))
        })
}

/// What an export did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExportReport {
    /// Titles with a render exported.
    pub titles: u64,
    /// Records written: `warcinfo`, `resource` and `revisit`.
    pub records: u64,
    /// Renders written whole, as `resource` records.
    pub resources: u64,
    /// Renders that repeat a payload already written, as `revisit` records.
    pub revisits: u64,
    /// Bytes of the renders exported (a revisit's too).
    pub value_bytes: u64,
    /// Bytes of the records before compression.
    pub raw_bytes: u64,
    /// Bytes of the files.
    pub written_bytes: u64,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// The CDXJ index, when one was written.
    pub index: Option<PathBuf>,
    /// Lines of the index.
    pub index_lines: u64,
    /// Wall-clock time taken.
    pub seconds: f64,
}

/// Where an export stands, for a progress display.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportProgress {
    /// Renders exported so far.
    pub renders: u64,
    /// Bytes of those renders.
    pub value_bytes: u64,
    /// Bytes of the files written so far.
    pub written_bytes: u64,
    /// (bytes of the title records walked, bytes the walk goes over).
    pub walked: (u64, u64),
}

/// A title as exported: its latest render's URI and `WARC-Date` (a WACZ's page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exported<'a> {
    pub domain: &'a str,
    pub title: &'a str,
    pub uri: &'a str,
    pub date: &'a str,
}

/// The first record of a payload written for a title: what its revisits refer to.
struct Original {
    id: String,
    uri: String,
    date: String,
}

/// Exports `store` as `opts` says; `progress` is called after every step of titles.
pub fn export_warc(
    store: &Store,
    opts: &ExportOptions,
    progress: impl FnMut(&ExportProgress),
) -> Result<ExportReport> {
    export_titles(store, opts, progress, |_| Ok(()))
}

/// [`export`], telling `exported` of every title written, after its records.
pub(crate) fn export_titles(
    store: &Store,
    opts: &ExportOptions,
    mut progress: impl FnMut(&ExportProgress),
    mut exported: impl FnMut(&Exported<'_>) -> Result<()>,
) -> Result<ExportReport> {
    let started = Instant::now();
    let base = opts.base()?;
    let index = if opts.index {
        Some(opts.index_path()?)
    } else {
        None
    };
    if let Some(p) = index.as_ref().filter(|p| p.exists()) {
        return Err(Error::invalid(format!(
            "{} exists; remove it or choose another name",
            p.display()
        )));
    }
    let output = Output {
        base,
        compression: opts.compression,
        level: opts.level,
        max_file_bytes: opts.max_file_bytes,
        index: index.clone(),
        threads: opts.threads,
    };
    let info_fields = warcinfo_fields(store, &opts.filter);
    let now = Ticks::from_unix_secs(store.now());
    let warcinfo = |name: &str| warcinfo_record(name, now, &info_fields);
    let mut report = ExportReport::default();
    let written = writer::write(&output, &warcinfo, |feed| {
        let mut run = Run {
            filter: &opts.filter,
            reader: store.dump_reader()?,
            feed,
            report: &mut report,
            progress: ExportProgress::default(),
            exported: &mut exported,
        };
        if let (Some(d), Some(t)) = (&opts.filter.domain, &opts.filter.title) {
            let title = store.dump_title(d, t)?;
            run.titles(title.as_slice())?;
            progress(&run.progress);
        } else {
            let mut cursor = TitleCursor::new();
            while !cursor.is_done() {
                run.titles(&store.dump_step(&mut cursor, STEP_TITLES)?)?;
                run.progress.walked = cursor.progress();
                run.progress.written_bytes = run.feed.written.load(Ordering::Relaxed);
                progress(&run.progress);
            }
        }
        run.reader.finish()
    })?;
    report.records = written.records;
    report.raw_bytes = written.raw_bytes;
    report.written_bytes = written.file_bytes;
    report.files = written.files;
    report.index = index;
    report.index_lines = written.index_lines;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// One export under way.
struct Run<'a, 's> {
    filter: &'a Filter,
    reader: DumpReader<'s>,
    feed: &'a mut Feed,
    report: &'a mut ExportReport,
    progress: ExportProgress,
    exported: &'a mut dyn FnMut(&Exported<'_>) -> Result<()>,
}

impl Run<'_, '_> {
    /// Sends the records of `titles`.
    fn titles(&mut self, titles: &[DumpTitle]) -> Result<()> {
        let taken = titles.iter().filter(|t| self.filter.takes_title(t));
        for t in taken.clone() {
            for r in t.renders.iter().filter(|r| self.filter.takes(r)) {
                self.reader.plan(r);
            }
        }
        for t in taken {
            let mut originals: HashMap<[u8; 20], Original> = HashMap::new();
            let mut last: Option<(String, String)> = None;
            for r in t.renders.iter().filter(|r| self.filter.takes(r)) {
                let value = self.reader.read(t, r)?;
                let digest = sha1(&value);
                let uri = render_uri(&t.domain, &t.title, r.rev, r.tid);
                last = Some((uri, date_of(r)?));
                let (record, entry) = match originals.get(&digest) {
                    Some(o) => {
                        self.report.revisits += 1;
                        revisit_record(t, r, &digest, o)?
                    }
                    None => {
                        self.report.resources += 1;
                        let (record, entry, original) = resource_record(t, r, &digest, &value)?;
                        originals.insert(digest, original);
                        (record, entry)
                    }
                };
                self.report.value_bytes += value.len() as u64;
                self.progress.renders += 1;
                self.progress.value_bytes += value.len() as u64;
                self.feed.send(record, Some(entry))?;
            }
            if let Some((uri, date)) = &last {
                self.report.titles += 1;
                (self.exported)(&Exported {
                    domain: &t.domain,
                    title: &t.title,
                    uri,
                    date,
                })?;
            }
        }
        Ok(())
    }
}

fn record_id() -> String {
    format!("<urn:uuid:{}>", Uuid::new_v4())
}

fn date_of(r: &DumpRender) -> Result<String> {
    tid_date(r.tid).ok_or_else(|| {
        Error::invalid(format!(
            "tid {} is past the year 9999: no WARC-Date can carry it",
            r.tid
        ))
    })
}

/// The fields every render's record has, after its type, id, date and URI.
fn wink_fields(h: &mut Header, r: &DumpRender) {
    h.push(mapping::FIELD_REV, r.rev.to_string());
    h.push(mapping::FIELD_TID, r.tid.to_string());
    h.push(mapping::FIELD_STATE, r.state.as_str());
    if let Some(e) = &r.labels.encoding {
        h.push(mapping::FIELD_CONTENT_ENCODING, e);
    }
    if let Some(l) = &r.labels.language {
        h.push(mapping::FIELD_CONTENT_LANGUAGE, l);
    }
}

fn finish_record(h: &Header, block: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + 1024);
    h.write_to(&mut out);
    out.extend_from_slice(block);
    out.extend_from_slice(END_OF_RECORD);
    out
}

fn index_entry(uri: &str, date: &str, mime: &str, digest: &str) -> Result<IndexEntry> {
    Ok(IndexEntry {
        surt: surt(uri).unwrap_or_else(|| uri.to_string()),
        timestamp14: Ticks::parse(date)
            .ok()
            .and_then(|t| t.timestamp14())
            .ok_or_else(|| Error::invalid(format!("WARC-Date {date}")))?,
        url: uri.to_string(),
        mime: mime.to_string(),
        digest: digest.to_string(),
    })
}

fn resource_record(
    t: &DumpTitle,
    r: &DumpRender,
    digest: &[u8; 20],
    value: &[u8],
) -> Result<(Vec<u8>, IndexEntry, Original)> {
    let uri = render_uri(&t.domain, &t.title, r.rev, r.tid);
    let (id, date, label) = (record_id(), date_of(r)?, sha1_label(digest));
    let mut h = Header::new();
    h.push("WARC-Type", "resource");
    h.push("WARC-Record-ID", &id);
    h.push("WARC-Date", &date);
    h.push("WARC-Target-URI", &uri);
    h.push("Content-Type", &r.content_type);
    h.push("WARC-Block-Digest", &label);
    h.push("WARC-Payload-Digest", &label);
    wink_fields(&mut h, r);
    h.push("Content-Length", value.len().to_string());
    let entry = index_entry(&uri, &date, cdxj::mime(&r.content_type), &label)?;
    Ok((finish_record(&h, value), entry, Original { id, uri, date }))
}

fn revisit_record(
    t: &DumpTitle,
    r: &DumpRender,
    digest: &[u8; 20],
    original: &Original,
) -> Result<(Vec<u8>, IndexEntry)> {
    let uri = render_uri(&t.domain, &t.title, r.rev, r.tid);
    let (date, label) = (date_of(r)?, sha1_label(digest));
    let mut h = Header::new();
    h.push("WARC-Type", "revisit");
    h.push("WARC-Record-ID", record_id());
    h.push("WARC-Date", &date);
    h.push("WARC-Target-URI", &uri);
    h.push("WARC-Profile", mapping::IDENTICAL_PAYLOAD);
    h.push("WARC-Refers-To", &original.id);
    h.push("WARC-Refers-To-Target-URI", &original.uri);
    h.push("WARC-Refers-To-Date", &original.date);
    h.push("WARC-Block-Digest", sha1_label(&sha1(b"")));
    h.push("WARC-Payload-Digest", &label);
    h.push(mapping::FIELD_CONTENT_TYPE, &r.content_type);
    wink_fields(&mut h, r);
    h.push("Content-Length", "0");
    let entry = index_entry(&uri, &date, "warc/revisit", &label)?;
    Ok((finish_record(&h, b""), entry))
}

/// The `warcinfo` block's fields (`application/warc-fields`): software, format, the store's
/// policy and what was exported.
fn warcinfo_fields(store: &Store, filter: &Filter) -> Vec<(String, String)> {
    let cfg = store.config();
    let mut f = vec![
        (
            "software".into(),
            format!("wink {}", env!("CARGO_PKG_VERSION")),
        ),
        ("format".into(), "WARC File Format 1.1".into()),
        (
            "conformsTo".into(),
            "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
                .into(),
        ),
        (
            "description".into(),
            "HTML renders of page revisions exported from a Wink render store".into(),
        ),
        ("wink-revisions".into(), cfg.policy.revisions.to_string()),
        ("wink-renders".into(), cfg.policy.renders.to_string()),
        (
            "wink-historical-ttl".into(),
            cfg.policy.historical_ttl.to_string(),
        ),
        (
            "wink-archive".into(),
            cfg.archive.map_or("none".into(), |a| a.to_string()),
        ),
    ];
    let mut selection = Vec::new();
    if let Some(d) = &filter.domain {
        selection.push(format!("domain={d}"));
    }
    if let Some(t) = &filter.title {
        selection.push(format!(
            "title={}",
            percent_encoding::utf8_percent_encode(t, percent_encoding::CONTROLS)
        ));
    }
    if filter.current_only {
        selection.push("current".into());
    }
    if let Some(s) = filter.since {
        selection.push(format!("since={s}"));
    }
    if let Some(u) = filter.until {
        selection.push(format!("until={u}"));
    }
    let selection = if selection.is_empty() {
        "every readable render, both tiers".to_string()
    } else {
        selection.join(" ")
    };
    f.push(("wink-selection".into(), selection));
    f
}

fn warcinfo_record(name: &str, now: Ticks, fields: &[(String, String)]) -> Vec<u8> {
    let mut block = String::new();
    for (k, v) in fields {
        block.push_str(&format!("{k}: {v}\r\n"));
    }
    let name = percent_encoding::utf8_percent_encode(name, percent_encoding::CONTROLS);
    let mut h = Header::new();
    h.push("WARC-Type", "warcinfo");
    h.push("WARC-Record-ID", record_id());
    h.push("WARC-Date", now.warc_date().unwrap_or_default());
    h.push("WARC-Filename", name.to_string());
    h.push("Content-Type", "application/warc-fields");
    h.push("WARC-Block-Digest", sha1_label(&sha1(block.as_bytes())));
    h.push("Content-Length", block.len().to_string());
    finish_record(&h, block.as_bytes())
}
