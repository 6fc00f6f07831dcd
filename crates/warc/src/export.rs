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
    /// The order of a store's titles (a [`DumpSource`] other than a store has its own).
    pub order: Order,
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
            order: Order::File,
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

/// What an export's `warcinfo` record says of the store its renders come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    /// The revisions policy, as the store's settings write it (`all`, `recent:3600`, …).
    pub revisions: String,
    /// The renders policy, likewise.
    pub renders: String,
    /// Seconds a historical render stays readable.
    pub historical_ttl: i64,
    /// The archive policy, or `none`.
    pub archive: String,
    /// The time of the export, seconds since the epoch (the `warcinfo`'s `WARC-Date`).
    pub now: i64,
}

impl SourceInfo {
    /// What `store` says of itself.
    pub fn of(store: &Store) -> SourceInfo {
        let cfg = store.config();
        SourceInfo {
            revisions: cfg.policy.revisions.to_string(),
            renders: cfg.policy.renders.to_string(),
            historical_ttl: cfg.policy.historical_ttl,
            archive: cfg.archive.map_or("none".into(), |a| a.to_string()),
            now: store.now(),
        }
    }
}

/// Where an export's titles and values come from: a local store ([`StoreSource`]) or a stream
/// that another layer reads (a cluster's partitions, merged). The export writes the titles in
/// the order they are given and keeps no more than one step of them.
pub trait DumpSource {
    /// What the `warcinfo` record says of the store.
    fn info(&self) -> SourceInfo;
    /// The next titles, each with its renders oldest first (revision, then tid precedence);
    /// `None` once every title was given.
    fn next_titles(&mut self) -> Result<Option<Vec<DumpTitle>>>;
    /// Announces that `render` of the last titles given will be read, in this order.
    fn plan(&mut self, _render: &DumpRender) {}
    /// The value of `render`, one of `title`'s from the last titles given.
    fn read(&mut self, title: &DumpTitle, render: &DumpRender) -> Result<Vec<u8>>;
    /// (work done, work in all) in any unit, for a progress bar.
    fn walked(&self) -> (u64, u64);
    /// Called once every record was sent: lets go of what the source holds.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// In which order a store's titles are exported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// The order their records lie in the store's files: one walk, values read close to the
    /// order they were written.
    #[default]
    File,
    /// Domain, then title, bytewise: the same bytes from any store that holds the same
    /// renders (a cluster's export is in this order). Each step of titles walks every title
    /// record once.
    Key,
}

/// Titles per step of a key-order walk: each step walks every title record.
const KEY_STEP_TITLES: usize = 4096;

/// A local store as a [`DumpSource`], in the order asked, reading values through a
/// [`DumpReader`] (read ahead, page cache left as found).
pub struct StoreSource<'s> {
    store: &'s Store,
    reader: Option<DumpReader<'s>>,
    walk: Walk,
}

enum Walk {
    /// One title, looked up directly; `None` once given.
    One(Option<(String, String)>),
    File(TitleCursor),
    Key {
        domain: Option<String>,
        after: Option<(String, String)>,
        done: bool,
        given: u64,
    },
}

impl<'s> StoreSource<'s> {
    /// The titles of `store` that `filter` names by domain and title, in `order`.
    pub fn new(store: &'s Store, filter: &Filter, order: Order) -> Result<StoreSource<'s>> {
        let walk = match (&filter.domain, &filter.title, order) {
            (Some(d), Some(t), _) => Walk::One(Some((d.clone(), t.clone()))),
            (_, _, Order::File) => Walk::File(TitleCursor::new()),
            (domain, _, Order::Key) => Walk::Key {
                domain: domain.clone(),
                after: None,
                done: false,
                given: 0,
            },
        };
        Ok(StoreSource {
            store,
            reader: Some(store.dump_reader()?),
            walk,
        })
    }
}

impl DumpSource for StoreSource<'_> {
    fn info(&self) -> SourceInfo {
        SourceInfo::of(self.store)
    }

    fn next_titles(&mut self) -> Result<Option<Vec<DumpTitle>>> {
        match &mut self.walk {
            Walk::One(one) => match one.take() {
                Some((d, t)) => Ok(Some(self.store.dump_title(&d, &t)?.into_iter().collect())),
                None => Ok(None),
            },
            Walk::File(cursor) if cursor.is_done() => Ok(None),
            Walk::File(cursor) => Ok(Some(self.store.dump_step(cursor, STEP_TITLES)?)),
            Walk::Key { done: true, .. } => Ok(None),
            Walk::Key {
                domain,
                after,
                done,
                given,
            } => {
                let names = self.store.titles_in_key_order(
                    after.as_ref().map(|(d, t)| (d.as_str(), t.as_str())),
                    |d, _| domain.as_ref().is_none_or(|x| x == d),
                    KEY_STEP_TITLES,
                )?;
                *done = names.len() < KEY_STEP_TITLES;
                *given += names.len() as u64;
                let mut out = Vec::with_capacity(names.len());
                for (d, t) in &names {
                    out.extend(self.store.dump_title(d, t)?);
                }
                *after = names.into_iter().last();
                Ok(Some(out))
            }
        }
    }

    fn plan(&mut self, render: &DumpRender) {
        if let Some(r) = self.reader.as_mut() {
            r.plan(render);
        }
    }

    fn read(&mut self, title: &DumpTitle, render: &DumpRender) -> Result<Vec<u8>> {
        match self.reader.as_mut() {
            Some(r) => r.read(title, render),
            None => Err(Error::internal("a dump read after its source finished")),
        }
    }

    fn walked(&self) -> (u64, u64) {
        match &self.walk {
            Walk::One(one) => (u64::from(one.is_none()), 1),
            Walk::File(cursor) => cursor.progress(),
            // The number of titles is not known ahead: the bar stays where the walk is.
            Walk::Key { given, done, .. } => (*given, if *done { *given } else { *given + 1 }),
        }
    }

    fn finish(&mut self) -> Result<()> {
        match self.reader.take() {
            Some(r) => r.finish(),
            None => Ok(()),
        }
    }
}

/// Exports `store` as `opts` says; `progress` is called after every step of titles.
pub fn export_warc(
    store: &Store,
    opts: &ExportOptions,
    progress: impl FnMut(&ExportProgress),
) -> Result<ExportReport> {
    export_titles(store, opts, progress, |_| Ok(()))
}

/// Exports the titles `source` gives as `opts` says (its domain and title filters are the
/// source's to apply: the export applies them again).
pub fn export_source(
    source: &mut dyn DumpSource,
    opts: &ExportOptions,
    progress: impl FnMut(&ExportProgress),
) -> Result<ExportReport> {
    export_from(source, opts, progress, |_| Ok(()))
}

/// [`export_warc`], telling `exported` of every title written, after its records.
pub(crate) fn export_titles(
    store: &Store,
    opts: &ExportOptions,
    progress: impl FnMut(&ExportProgress),
    exported: impl FnMut(&Exported<'_>) -> Result<()>,
) -> Result<ExportReport> {
    // The output's name is checked before the store is read.
    opts.base()?;
    let mut source = StoreSource::new(store, &opts.filter, opts.order)?;
    export_from(&mut source, opts, progress, exported)
}

fn export_from(
    source: &mut dyn DumpSource,
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
    let info = source.info();
    let info_fields = warcinfo_fields(&info, &opts.filter);
    let now = Ticks::from_unix_secs(info.now);
    let warcinfo = |name: &str| warcinfo_record(name, now, &info_fields);
    let mut report = ExportReport::default();
    let written = writer::write(&output, &warcinfo, |feed| {
        let mut run = Run {
            filter: &opts.filter,
            source: &mut *source,
            feed,
            report: &mut report,
            progress: ExportProgress::default(),
            exported: &mut exported,
        };
        while let Some(titles) = run.source.next_titles()? {
            run.titles(&titles)?;
            run.progress.walked = run.source.walked();
            run.progress.written_bytes = run.feed.written.load(Ordering::Relaxed);
            progress(&run.progress);
        }
        run.source.finish()
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
struct Run<'a> {
    filter: &'a Filter,
    source: &'a mut dyn DumpSource,
    feed: &'a mut Feed,
    report: &'a mut ExportReport,
    progress: ExportProgress,
    exported: &'a mut dyn FnMut(&Exported<'_>) -> Result<()>,
}

impl Run<'_> {
    /// Sends the records of `titles`.
    fn titles(&mut self, titles: &[DumpTitle]) -> Result<()> {
        let taken = titles.iter().filter(|t| self.filter.takes_title(t));
        for t in taken.clone() {
            for r in t.renders.iter().filter(|r| self.filter.takes(r)) {
                self.source.plan(r);
            }
        }
        for t in taken {
            let mut originals: HashMap<[u8; 20], Original> = HashMap::new();
            let mut last: Option<(String, String)> = None;
            for r in t.renders.iter().filter(|r| self.filter.takes(r)) {
                let value = self.source.read(t, r)?;
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
fn warcinfo_fields(info: &SourceInfo, filter: &Filter) -> Vec<(String, String)> {
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
        ("wink-revisions".into(), info.revisions.clone()),
        ("wink-renders".into(), info.renders.clone()),
        (
            "wink-historical-ttl".into(),
            info.historical_ttl.to_string(),
        ),
        ("wink-archive".into(), info.archive.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use wink_engine::store::{Config, Put, StoreOptions};

    /// The titles a store gives, with their values, as another source would carry them.
    struct Carried {
        info: SourceInfo,
        steps: Vec<Vec<(DumpTitle, Vec<Vec<u8>>)>>,
        values: HashMap<(String, u64, uuid::Uuid), Vec<u8>>,
    }

    impl DumpSource for Carried {
        fn info(&self) -> SourceInfo {
            self.info.clone()
        }

        fn next_titles(&mut self) -> Result<Option<Vec<DumpTitle>>> {
            if self.steps.is_empty() {
                return Ok(None);
            }
            let mut out = Vec::new();
            for (t, values) in self.steps.remove(0) {
                for (r, v) in t.renders.iter().zip(values) {
                    self.values.insert((t.title.clone(), r.rev, r.tid), v);
                }
                out.push(t);
            }
            Ok(Some(out))
        }

        fn read(&mut self, t: &DumpTitle, r: &DumpRender) -> Result<Vec<u8>> {
            self.values
                .remove(&(t.title.clone(), r.rev, r.tid))
                .ok_or_else(|| Error::internal("not carried"))
        }

        fn walked(&self) -> (u64, u64) {
            (0, 0)
        }
    }

    /// The file with every record id numbered by first appearance, and the warcinfo's date
    /// (the export's time: the first `WARC-Date`) put aside.
    fn normalized(path: &Path) -> String {
        let text = String::from_utf8(std::fs::read(path).unwrap()).unwrap();
        let date = text.find("WARC-Date: ").unwrap();
        let end = date + text[date..].find("\r\n").unwrap();
        let text = format!("{}WARC-Date: -{}", &text[..date], &text[end..]);
        let mut ids: Vec<String> = Vec::new();
        let mut out = String::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("<urn:uuid:") {
            out.push_str(&rest[..i]);
            let id = rest[i..i + 47].to_string();
            let n = ids.iter().position(|x| *x == id).unwrap_or_else(|| {
                ids.push(id);
                ids.len() - 1
            });
            out.push_str(&format!("<id {n}>"));
            rest = &rest[i + 47..];
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn key_order_sorts_titles_and_a_carried_source_writes_the_same_records() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("s");
        let opts = StoreOptions::writer();
        Store::init(&src, &Config::default(), &opts).unwrap();
        let mut store = Store::open(&src, &opts).unwrap();
        let titles = [("b.org", "Z"), ("a.org", "Y"), ("b.org", "A"), ("a.b", "X")];
        for (i, (d, t)) in titles.iter().enumerate() {
            for rev in 1..=2 {
                let value = format!("<p>{t} {}</p>", rev.min(i as u64 % 2 + 1));
                store
                    .put(&Put::new(d, t, rev, "text/html", value.as_bytes()))
                    .unwrap();
            }
        }
        let export = |name: &str, order: Order| {
            let mut o = ExportOptions::new(&dir.path().join(name).join("x.warc")).unwrap();
            std::fs::create_dir_all(dir.path().join(name)).unwrap();
            o.order = order;
            o.threads = 1;
            (export_warc(&store, &o, |_| {}).unwrap(), o)
        };
        let (report, o) = export("key", Order::Key);
        assert_eq!((report.resources, report.revisits), (6, 2));
        let text = normalized(&o.out);
        let at = |d: &str, t: &str| text.find(&format!("https://{d}/api/rest_v1/page/html/{t}/"));
        let order: Vec<usize> = [("a.b", "X"), ("a.org", "Y"), ("b.org", "A"), ("b.org", "Z")]
            .iter()
            .map(|(d, t)| at(d, t).expect("exported"))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        let (_, file) = export("file", Order::File);
        assert_ne!(normalized(&file.out), text, "file order is another order");

        // The same titles carried by another source, in steps of two: the same bytes.
        let mut names: Vec<(&str, &str)> = titles.to_vec();
        names.sort();
        let mut reader = store.dump_reader().unwrap();
        let mut steps = Vec::new();
        for pair in names.chunks(2) {
            let mut step = Vec::new();
            for (d, t) in pair {
                let got = store.dump_title(d, t).unwrap().unwrap();
                let values: Vec<Vec<u8>> = got
                    .renders
                    .iter()
                    .map(|r| reader.read(&got, r).unwrap())
                    .collect();
                let renders = got
                    .renders
                    .iter()
                    .map(|r| {
                        let (ct, labels) = (r.content_type.clone(), r.labels.clone());
                        DumpRender::carried(r.rev, r.tid, ct, labels, r.state, r.size, 0, 0)
                    })
                    .collect();
                step.push((DumpTitle { renders, ..got }, values));
            }
            steps.push(step);
        }
        let mut carried = Carried {
            info: SourceInfo::of(&store),
            steps,
            values: HashMap::new(),
        };
        let mut o2 = ExportOptions::new(&dir.path().join("carried.warc")).unwrap();
        o2.threads = 1;
        let r2 = export_source(&mut carried, &o2, |_| {}).unwrap();
        assert_eq!((r2.resources, r2.revisits), (6, 2));
        let name = |s: &str, n: &str| s.replace(n, "NAME");
        assert_eq!(
            name(&normalized(&o2.out), "carried.warc"),
            name(&text, "x.warc")
        );
    }
}
