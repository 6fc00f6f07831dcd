//! `wink import DIR --enterprise FILE...`: the articles of Enterprise HTML snapshots as renders,
//! streamed, committed in batches.
//!
//! Each file is read once, as it is: gzip decoded and tar members walked as a stream (nothing is
//! unpacked to disk), each NDJSON member line by line. Three threads: one decodes and splits
//! lines, one parses them into articles, this one puts them (gzip decoding alone takes about
//! half of the work, so parsing beside it keeps both cores busy). Memory holds the lines between
//! the first two (64 MiB, or one line when it is longer; a line is at most
//! [`EnterpriseImportOptions::max_line`] bytes), a few articles between the last two, and the store's own
//! bounded caches, whatever the file's size.
//!
//! An article maps as the parent module says. One whose title already has a render of its
//! revision is left as it is (`unchanged`): importing next month's snapshot adds the new
//! revisions only, and a re-run after a kill finishes the job without a duplicate (its tids
//! would be the same anyway). Puts are committed every [`EnterpriseImportOptions::batch`] articles.
//!
//! A line that is not an article (not UTF-8, not JSON, a missing or mistyped field, a title over
//! the store's limit, a body over its maximum value, a time no tid carries) stops the import
//! with an invalid-input error naming the file, the tar member and the line; the articles before
//! it are committed, nothing of it or after it is stored. With `skip_bad` it is counted and
//! reported instead. A file that does not decode (a damaged gzip stream or tar header) is
//! damage, naming the file and the compressed offset.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use serde::Deserialize;

use crate::date::Ticks;
use crate::error::{Error, Result};
use crate::writer::Budget;
use wink_engine::store::{key, Batch, Page, Put, Store};

use super::{
    article_url, content_type_of, dbname_of_domain, domain_of_dbname, language_of_domain, tid_of,
    title_of_name,
};

/// How to import.
#[derive(Clone, Debug)]
pub struct EnterpriseImportOptions {
    /// Articles stored per commit.
    pub batch: usize,
    /// Count and report bad lines instead of stopping at the first.
    pub skip_bad: bool,
    /// The longest line read, bytes (a longer one is a bad line); `None`: four times the
    /// store's maximum value and 16 MiB (JSON escapes and the other fields around the HTML).
    pub max_line: Option<u64>,
}

impl Default for EnterpriseImportOptions {
    fn default() -> Self {
        EnterpriseImportOptions {
            batch: 1000,
            skip_bad: false,
            max_line: None,
        }
    }
}

/// Where a line is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnterprisePlace {
    /// The snapshot file.
    pub file: PathBuf,
    /// The tar member within it.
    pub member: String,
    /// 1 for the member's first line.
    pub line: u64,
}

impl std::fmt::Display for EnterprisePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: member {}, line {}",
            self.file.display(),
            self.member,
            self.line
        )
    }
}

/// Something said about one line: why it is bad, why its render was refused, or what of it
/// will not come back as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnterpriseNote {
    /// The line it is about.
    pub place: EnterprisePlace,
    /// What was wrong, or what changed.
    pub what: String,
}

impl EnterpriseNote {
    fn to_error(&self) -> Error {
        Error::invalid(format!("{}: {}", self.place, self.what))
    }
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnterpriseImportReport {
    /// Files read.
    pub files: u64,
    /// Tar members read.
    pub members: u64,
    /// Lines read (blank ones not counted).
    pub lines: u64,
    /// Lines that are articles.
    pub articles: u64,
    /// Articles put.
    pub stored: u64,
    /// Articles whose title already had a render of their revision.
    pub unchanged: u64,
    /// Articles the store refused (a taken-down revision), each reported.
    pub refused: u64,
    /// Bad lines skipped (`skip_bad`).
    pub bad: u64,
    /// Articles stored whose `name`, `url`, `is_part_of` or `in_language` an export would not
    /// give back as they were (docs/DUMPS.md), each reported.
    pub reshaped: u64,
    /// Bytes of HTML stored.
    pub bytes: u64,
    /// Bytes of the files (compressed).
    pub file_bytes: u64,
    /// Wall-clock time taken.
    pub seconds: f64,
}

/// Where an import stands, for a progress display.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnterpriseImportProgress {
    /// Lines that were articles, so far.
    pub articles: u64,
    /// Compressed bytes read of all the files, and their total.
    pub file_bytes: (u64, u64),
}

/// What the import says as it goes.
pub trait EnterpriseListener {
    /// A bad line skipped (`skip_bad`).
    fn bad(&mut self, note: &EnterpriseNote);
    /// An article the store refused.
    fn refused(&mut self, note: &EnterpriseNote);
    /// An article stored that an export would not give back as it was.
    fn reshaped(&mut self, note: &EnterpriseNote);
    /// After every article.
    fn progress(&mut self, progress: &EnterpriseImportProgress);
}

/// A listener that hears nothing.
pub struct QuietListener;

impl EnterpriseListener for QuietListener {
    fn bad(&mut self, _: &EnterpriseNote) {}
    fn refused(&mut self, _: &EnterpriseNote) {}
    fn reshaped(&mut self, _: &EnterpriseNote) {}
    fn progress(&mut self, _: &EnterpriseImportProgress) {}
}

/// An article ready to be put.
#[derive(Debug)]
struct Article {
    domain: String,
    title: String,
    rev: u64,
    tid: uuid::Uuid,
    content_type: String,
    html: String,
    /// What an export would give back otherwise.
    reshaped: Option<String>,
}

enum Item {
    /// A line read, for the parser.
    Line(EnterprisePlace, Vec<u8>),
    Article(EnterprisePlace, Box<Article>),
    Bad(EnterpriseNote),
    Member,
    FileDone,
    Fatal(Error),
}

/// Articles read ahead of the puts, at most.
const READ_AHEAD: usize = 4;

/// Imports `files` into `store`.
pub fn import_enterprise(
    store: &mut Store,
    files: &[PathBuf],
    opts: &EnterpriseImportOptions,
    listener: &mut dyn EnterpriseListener,
) -> Result<EnterpriseImportReport> {
    let started = Instant::now();
    let total = crate::import::files_size(files);
    let max_value = store.config().max_value;
    let max_line = opts
        .max_line
        .unwrap_or_else(|| max_value.saturating_mul(4).saturating_add(16 << 20));
    let mut report = EnterpriseImportReport {
        file_bytes: total,
        ..EnterpriseImportReport::default()
    };
    let mut pending = 0usize;
    let read = Arc::new(AtomicU64::new(0));
    let (lines_tx, lines_rx) = mpsc::sync_channel::<Item>(64);
    let (tx, rx) = mpsc::sync_channel::<Item>(READ_AHEAD);
    let budget = Arc::new(Budget::default());
    let mut batch = store.batch();
    let result = std::thread::scope(|scope| {
        let reader = Reader {
            max_line,
            read: read.clone(),
            budget: budget.clone(),
        };
        scope.spawn(move || reader.files(files, &lines_tx));
        let parser_budget = budget.clone();
        scope.spawn(move || parse_lines(lines_rx, &tx, max_value, &parser_budget));
        for item in rx {
            match item {
                Item::Line(..) => return Err(Error::internal("a line passed the parser")),
                Item::Member => report.members += 1,
                Item::FileDone => report.files += 1,
                Item::Fatal(e) => return Err(e),
                Item::Bad(note) => {
                    report.lines += 1;
                    if !opts.skip_bad {
                        return Err(note.to_error());
                    }
                    report.bad += 1;
                    listener.bad(&note);
                }
                Item::Article(place, a) => {
                    report.lines += 1;
                    report.articles += 1;
                    if put(&mut batch, &place, &a, &mut report, listener)? {
                        pending += 1;
                        if pending >= opts.batch.max(1) {
                            batch.commit()?;
                            pending = 0;
                        }
                    }
                }
            }
            listener.progress(&EnterpriseImportProgress {
                articles: report.articles,
                file_bytes: (read.load(Ordering::Relaxed), total),
            });
        }
        Ok(())
    });
    // What came before a bad line or a failure is kept: the batch under way is committed too.
    let committed = if pending > 0 {
        batch.commit().map(drop)
    } else {
        Ok(())
    };
    result?;
    committed?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Puts one article unless its revision is there; true when it was put.
fn put(
    batch: &mut Batch<'_>,
    place: &EnterprisePlace,
    a: &Article,
    report: &mut EnterpriseImportReport,
    listener: &mut dyn EnterpriseListener,
) -> Result<bool> {
    let listed = batch.store().list(&a.domain, &a.title, Page::default())?;
    if listed.iter().any(|l| l.rev == a.rev) {
        report.unchanged += 1;
        return Ok(false);
    }
    let put = Put {
        domain: &a.domain,
        title: &a.title,
        rev: a.rev,
        tid: Some(a.tid),
        content_type: &a.content_type,
        labels: &wink_engine::store::Labels::NONE,
        value: a.html.as_bytes(),
        historical: false,
    };
    match batch.put(&put) {
        Ok(_) => {}
        Err(Error::Invalid(why)) => {
            report.refused += 1;
            listener.refused(&EnterpriseNote {
                place: place.clone(),
                what: why,
            });
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    report.stored += 1;
    report.bytes += a.html.len() as u64;
    if let Some(what) = &a.reshaped {
        report.reshaped += 1;
        listener.reshaped(&EnterpriseNote {
            place: place.clone(),
            what: what.clone(),
        });
    }
    Ok(true)
}

/// The parsing side: each line as an article (or why not), everything else passed on.
fn parse_lines(
    lines: mpsc::Receiver<Item>,
    tx: &mpsc::SyncSender<Item>,
    max_value: u64,
    budget: &Budget,
) {
    for item in lines {
        let item = match item {
            Item::Line(place, line) => {
                budget.give(line.len() as u64);
                match article(&line, max_value) {
                    Ok(a) => Item::Article(place, Box::new(a)),
                    Err(what) => Item::Bad(EnterpriseNote { place, what }),
                }
            }
            other => other,
        };
        if tx.send(item).is_err() {
            // The puts stopped: the reader waits for room no more.
            budget.stop();
            return;
        }
    }
}

/// One line as an article, or why it is not one.
fn article(line: &[u8], max_value: u64) -> std::result::Result<Article, String> {
    let text = std::str::from_utf8(line)
        .map_err(|e| format!("not UTF-8 (at byte {} of the line)", e.valid_up_to()))?;
    let raw: RawArticle = serde_json::from_str(text).map_err(|e| format!("not an article: {e}"))?;
    map(raw, max_value)
}

/// The reading side: decompression, tar, lines.
struct Reader {
    max_line: u64,
    /// Compressed bytes read, of all files so far.
    read: Arc<AtomicU64>,
    /// Bytes of lines between the reader and the parser.
    budget: Arc<Budget>,
}

/// A reader that counts the bytes taken from it into a shared counter.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

impl Reader {
    fn files(&self, files: &[PathBuf], tx: &mpsc::SyncSender<Item>) {
        for file in files {
            let fatal = match self.file(file, tx) {
                Ok(true) => None,
                Ok(false) => return,
                Err(e) => Some(e),
            };
            let item = fatal.map_or(Item::FileDone, Item::Fatal);
            let stop = matches!(item, Item::Fatal(_));
            if tx.send(item).is_err() || stop {
                return;
            }
        }
    }

    /// Reads one file into `tx`; false when the receiver is gone.
    fn file(&self, path: &Path, tx: &mpsc::SyncSender<Item>) -> Result<bool> {
        let mut f = File::open(path).map_err(|e| Error::io(path, None, e))?;
        let mut magic = [0u8; 2];
        let n = f
            .read(&mut magic)
            .map_err(|e| Error::io(path, Some(0), e))?;
        if n < 2 || magic != GZIP_MAGIC {
            return Err(Error::invalid(format!(
                "{}: not a gzip file (an Enterprise snapshot is a .json.tar.gz)",
                path.display()
            )));
        }
        let start = self.read.load(Ordering::Relaxed);
        let file = File::open(path).map_err(|e| Error::io(path, None, e))?;
        let counting = Counting {
            inner: BufReader::with_capacity(1 << 20, file),
            read: self.read.clone(),
        };
        let at = || self.read.load(Ordering::Relaxed) - start;
        // A gzip or tar stream that does not decode is damage of the file, at the compressed
        // offset read so far; an I/O error of the disk stays one.
        let damage = |member: Option<&str>, e: io::Error, at: u64| -> Error {
            if matches!(
                e.kind(),
                io::ErrorKind::InvalidData
                    | io::ErrorKind::InvalidInput
                    | io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::Other
            ) {
                let what = match member {
                    Some(m) => format!("gzip and tar stream, in member {m}"),
                    None => "gzip and tar stream".to_string(),
                };
                Error::corrupt(path, at, what, "a tar.gz of NDJSON members", e.to_string())
            } else {
                Error::io(path, Some(at), e)
            }
        };
        let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(counting));
        let entries = archive.entries().map_err(|e| damage(None, e, at()))?;
        let mut line = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| damage(None, e, at()))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let member = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            if tx.send(Item::Member).is_err() {
                return Ok(false);
            }
            let mut lines = BufReader::with_capacity(1 << 20, entry);
            for n in 1u64.. {
                line.clear();
                let got = (&mut lines)
                    .take(self.max_line + 1)
                    .read_until(b'\n', &mut line)
                    .map_err(|e| damage(Some(&member), e, at()))?;
                if got == 0 {
                    break;
                }
                let place = EnterprisePlace {
                    file: path.to_path_buf(),
                    member: member.clone(),
                    line: n,
                };
                let item = if line.last() != Some(&b'\n') && got as u64 > self.max_line {
                    skip_line(&mut lines).map_err(|e| damage(Some(&member), e, at()))?;
                    Item::Bad(EnterpriseNote {
                        place,
                        what: format!("a line longer than {} bytes", self.max_line),
                    })
                } else {
                    let len = trim_line(&line).len();
                    if line[..len].iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    self.budget.take(len as u64);
                    // The line itself goes to the parser; the next is read into a new buffer.
                    let next = Vec::with_capacity(line.capacity().min(1 << 20));
                    let mut owned = std::mem::replace(&mut line, next);
                    owned.truncate(len);
                    Item::Line(place, owned)
                };
                if tx.send(item).is_err() {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// Consumes the rest of an over-long line without keeping it.
fn skip_line(r: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The fields of an article that are read; every other one is passed over unread.
#[derive(Deserialize)]
struct RawArticle {
    name: Option<String>,
    url: Option<String>,
    date_modified: Option<String>,
    version: Option<RawVersion>,
    is_part_of: Option<RawProject>,
    in_language: Option<RawIdentified>,
    article_body: Option<RawBody>,
}

#[derive(Deserialize)]
struct RawVersion {
    identifier: Option<u64>,
}

#[derive(Deserialize)]
struct RawProject {
    identifier: Option<String>,
    url: Option<String>,
}

#[derive(Deserialize)]
struct RawIdentified {
    identifier: Option<String>,
}

#[derive(Deserialize)]
struct RawBody {
    html: Option<String>,
}

/// The host of an http(s) URL.
fn host_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    if !matches!(u.scheme(), "http" | "https") {
        return None;
    }
    let host = u.host_str()?;
    Some(match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    })
}

fn map(raw: RawArticle, max_value: u64) -> std::result::Result<Article, String> {
    let missing = |field: &str| format!("missing field {field}");
    let name = raw.name.ok_or_else(|| missing("name"))?;
    let rev = raw
        .version
        .and_then(|v| v.identifier)
        .ok_or_else(|| missing("version.identifier"))?;
    let html = raw
        .article_body
        .and_then(|b| b.html)
        .ok_or_else(|| missing("article_body.html"))?;
    let date = raw.date_modified.ok_or_else(|| missing("date_modified"))?;
    let project = raw.is_part_of.unwrap_or(RawProject {
        identifier: None,
        url: None,
    });
    let domain = raw
        .url
        .as_deref()
        .and_then(host_of)
        .or_else(|| project.url.as_deref().and_then(host_of))
        .or_else(|| project.identifier.as_deref().and_then(domain_of_dbname))
        .ok_or_else(|| {
            "no domain: neither url nor is_part_of.url is an http(s) URL, and \
             is_part_of.identifier names no Wikimedia wiki"
                .to_string()
        })?;
    key::check_domain(&domain).map_err(|e| format!("domain {domain:?}: {e}"))?;
    let title = title_of_name(&name);
    key::check_title(&title).map_err(|e| format!("name: {e}"))?;
    if html.len() as u64 > max_value {
        return Err(format!(
            "article_body.html of {} bytes, over this store's maximum value of {max_value}",
            html.len()
        ));
    }
    let at = Ticks::parse(&date).map_err(|e| format!("date_modified: {e}"))?;
    let tid = tid_of(&domain, &title, rev, at)
        .ok_or_else(|| format!("date_modified {date:?}: outside what a tid carries"))?;
    let mut differs = Vec::new();
    if name.contains('_') {
        differs.push(format!(
            "name {name:?} (an underscore comes back as a space)"
        ));
    }
    let url = article_url(&domain, &title);
    if raw.url.as_deref().is_some_and(|u| u != url) {
        differs.push(format!("url (comes back as {url})"));
    }
    let db = dbname_of_domain(&domain);
    if project.identifier.as_deref().is_some_and(|i| i != db) {
        differs.push(format!("is_part_of.identifier (comes back as {db})"));
    }
    let project_url = format!("https://{domain}");
    if project.url.as_deref().is_some_and(|u| u != project_url) {
        differs.push(format!("is_part_of.url (comes back as {project_url})"));
    }
    let lang = language_of_domain(&domain);
    let given = raw.in_language.and_then(|l| l.identifier);
    if given.is_some() && given != lang {
        differs.push(format!(
            "in_language.identifier (comes back as {})",
            lang.as_deref().unwrap_or("absent")
        ));
    }
    Ok(Article {
        content_type: content_type_of(&html),
        domain,
        title,
        rev,
        tid,
        html,
        reshaped: (!differs.is_empty()).then(|| differs.join("; ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn article(json: &str) -> std::result::Result<Article, String> {
        let raw: RawArticle = serde_json::from_str(json).map_err(|e| e.to_string())?;
        map(raw, 1 << 20)
    }

    #[test]
    fn a_real_line_maps_and_what_is_missing_is_named() {
        let line = r#"{"name":"Not Again SU","identifier":76716259,"version":{"identifier":1220413474,"comment":"x","editor":{"name":"T"}},"url":"https://en.wikipedia.org/wiki/Not_Again_SU","date_created":"2024-04-23T16:50:32Z","date_modified":"2024-04-23T16:53:55Z","is_part_of":{"identifier":"enwiki","url":"https://en.wikipedia.org"},"in_language":{"identifier":"en"},"article_body":{"html":"<html><head><meta property=\"mw:htmlVersion\" content=\"2.8.0\"/></head></html>","wikitext":"''x''"}}"#;
        let a = article(line).unwrap();
        assert_eq!(
            (a.domain.as_str(), a.title.as_str(), a.rev),
            ("en.wikipedia.org", "Not_Again_SU", 1_220_413_474)
        );
        assert!(
            a.content_type.ends_with("HTML/2.8.0\""),
            "{}",
            a.content_type
        );
        assert_eq!(a.reshaped, None);
        let no_url = r#"{"name":"Ä b","version":{"identifier":3},"date_modified":"2024-01-01T00:00:00Z","is_part_of":{"identifier":"dewiktionary"},"article_body":{"html":"<p/>"}}"#;
        let a = article(no_url).unwrap();
        assert_eq!(
            (a.domain.as_str(), a.title.as_str()),
            ("de.wiktionary.org", "Ä_b")
        );
        for (json, why) in [
            (r#"{"version":{"identifier":1}}"#, "missing field name"),
            (
                r#"{"name":"x","article_body":{"html":""}}"#,
                "version.identifier",
            ),
            (
                r#"{"name":"x","version":{"identifier":1}}"#,
                "article_body.html",
            ),
            (
                r#"{"name":"x","version":{"identifier":1},"article_body":{"html":""}}"#,
                "date_modified",
            ),
            (
                r#"{"name":"x","version":{"identifier":1},"article_body":{"html":""},"date_modified":"2024-01-01T00:00:00Z"}"#,
                "no domain",
            ),
            (
                r#"{"name":"x","url":"https://e.org/wiki/x","version":{"identifier":1},"article_body":{"html":""},"date_modified":"soon"}"#,
                "date_modified",
            ),
        ] {
            let e = article(json).unwrap_err();
            assert!(e.contains(why), "{e} for {json}");
        }
        let long = format!(
            r#"{{"name":"{}","url":"https://e.org/","version":{{"identifier":1}},"article_body":{{"html":""}},"date_modified":"2024-01-01T00:00:00Z"}}"#,
            "x".repeat(1025)
        );
        assert!(article(&long)
            .unwrap_err()
            .contains("a title has 1 to 1024"));
        let big = r#"{"name":"x","url":"https://e.org/","version":{"identifier":1},"article_body":{"html":"0123456789"},"date_modified":"2024-01-01T00:00:00Z"}"#;
        let raw: RawArticle = serde_json::from_str(big).unwrap();
        assert!(map(raw, 5)
            .unwrap_err()
            .contains("over this store's maximum"));
        let odd = r#"{"name":"a_b","url":"https://e.org/x","version":{"identifier":1},"article_body":{"html":""},"date_modified":"2024-01-01T00:00:00Z","in_language":{"identifier":"fr"}}"#;
        let a = article(odd).unwrap();
        let why = a.reshaped.unwrap();
        assert!(
            why.contains("underscore") && why.contains("url") && why.contains("in_language"),
            "{why}"
        );
    }
}
