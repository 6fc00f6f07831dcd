//! `wink export DIR --format enterprise -o FILE.json.tar.gz`: the latest render of every title
//! (or the latest as of a time) as an Enterprise HTML snapshot: a tar.gz of NDJSON members of
//! bounded size, one article per line.
//!
//! Titles are walked in steps ([`Store::dump_step`], or in key order) and the chosen renders read
//! through a [`DumpReader`](wink_engine::store::DumpReader), as the WARC export does, so the page
//! cache is left as it was found (the titles may also come from any other [`DumpSource`]: a
//! cluster's, [`export_enterprise_from`]); the file is written by
//! [`targz`](super::super::targz) with drop-behind. Memory holds one step of titles, the lines
//! in flight to the compressors, and nothing that grows with the store.
//!
//! Members are named `{wiki}_{n}.ndjson`, `{wiki}` being the database name of `--domain`, else
//! what the file's name starts with before its first `-` (Enterprise's
//! `enwiki-NS0-20240401-ENTERPRISE-HTML.json.tar.gz` gives `enwiki`). A member ends before the
//! line that would take it past [`EnterpriseExportOptions::member_bytes`] (a longer line is a member of its
//! own). Renders that are not HTML, or whose bytes are not UTF-8 (a JSON string cannot carry
//! them), are left out and counted.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::export::{DumpSource, Filter, Order, StoreSource};
use crate::mapping::tid_time;
use wink_engine::store::{DumpRender, DumpTitle, Store};

use super::super::targz::{self, TarGzOptions};
use super::{article_url, date_modified, dbname_of_domain, language_of_domain, name_of_title};

/// How to export.
#[derive(Clone, Debug)]
pub struct EnterpriseExportOptions {
    /// The file: `*.json.tar.gz` (or `*.tar.gz`).
    pub out: PathBuf,
    /// Only this domain.
    pub domain: Option<String>,
    /// The latest render as of this second (its tid's time at or before it).
    pub as_of: Option<i64>,
    /// A member's size bound, bytes of NDJSON.
    pub member_bytes: u64,
    /// The gzip level (0 to 9).
    pub level: u32,
    /// Compressor threads.
    pub threads: usize,
    /// The order of a store's titles (a [`DumpSource`] other than a store has its own).
    pub order: Order,
}

/// The member size bound unless one is given: 1 GiB of NDJSON.
pub(crate) const MEMBER_BYTES: u64 = 1 << 30;

impl EnterpriseExportOptions {
    /// Defaults for `out`: 1 GiB members, gzip level 6, every core.
    pub fn new(out: &Path) -> Result<EnterpriseExportOptions> {
        let name = out.to_string_lossy();
        if !name.ends_with(".tar.gz") {
            return Err(Error::invalid(format!(
                "{}: an Enterprise snapshot is named *.json.tar.gz",
                out.display()
            )));
        }
        Ok(EnterpriseExportOptions {
            out: out.to_path_buf(),
            domain: None,
            as_of: None,
            member_bytes: MEMBER_BYTES,
            level: 6,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            order: Order::File,
        })
    }

    /// The members' prefix: the wiki of `--domain`, else the file name up to its first `-`.
    pub fn wiki(&self) -> String {
        if let Some(d) = &self.domain {
            return dbname_of_domain(d);
        }
        let name = self
            .out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.split(['-', '.']).next().unwrap_or("");
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if !stem.is_empty() && stem.len() <= 64 && stem.chars().all(plain) {
            stem.to_string()
        } else {
            "articles".to_string()
        }
    }
}

/// What an export did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnterpriseExportReport {
    /// Articles written (one per title).
    pub articles: u64,
    /// Titles left out: their chosen render is not HTML.
    pub not_html: u64,
    /// Titles left out: their chosen render is not UTF-8.
    pub not_utf8: u64,
    /// Bytes of HTML written.
    pub html_bytes: u64,
    /// Bytes of NDJSON.
    pub raw_bytes: u64,
    /// Bytes of the file.
    pub written_bytes: u64,
    /// The tar members written: name and bytes of NDJSON.
    pub members: Vec<(String, u64)>,
    /// Wall-clock time taken.
    pub seconds: f64,
}

/// Where an export stands, for a progress display.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnterpriseExportProgress {
    /// Articles written so far.
    pub articles: u64,
    /// Bytes of HTML written so far.
    pub html_bytes: u64,
    /// Bytes of the file written so far.
    pub written_bytes: u64,
    /// (bytes of the title records walked, bytes the walk goes over).
    pub walked: (u64, u64),
}

/// One line of the snapshot, in Enterprise's field order.
#[derive(Serialize)]
struct Line<'a> {
    name: String,
    date_modified: String,
    version: Version,
    url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_language: Option<Identified>,
    is_part_of: Project,
    article_body: Body<'a>,
}

#[derive(Serialize)]
struct Version {
    identifier: u64,
}

#[derive(Serialize)]
struct Identified {
    identifier: String,
}

#[derive(Serialize)]
struct Project {
    identifier: String,
    url: String,
}

#[derive(Serialize)]
struct Body<'a> {
    html: &'a str,
}

/// The render of `t` an export takes: the newest (by revision, then tid), of those made at or
/// before `as_of` when given.
fn chosen(t: &DumpTitle, as_of: Option<i64>) -> Option<&DumpRender> {
    t.renders
        .iter()
        .rfind(|r| as_of.is_none_or(|at| tid_time(r.tid).unix_secs() <= at))
}

fn is_html(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("text/html")
}

/// Exports `store` as `opts` says; `progress` is called after every step of titles.
pub fn export_enterprise(
    store: &Store,
    opts: &EnterpriseExportOptions,
    progress: impl FnMut(&EnterpriseExportProgress),
) -> Result<EnterpriseExportReport> {
    let filter = Filter {
        domain: opts.domain.clone(),
        ..Filter::default()
    };
    let mut source = StoreSource::new(store, &filter, opts.order)?;
    export_enterprise_from(&mut source, opts, progress)
}

/// Exports the titles `source` gives as `opts` says (a cluster's, merged in key order).
pub fn export_enterprise_from(
    source: &mut dyn DumpSource,
    opts: &EnterpriseExportOptions,
    mut progress: impl FnMut(&EnterpriseExportProgress),
) -> Result<EnterpriseExportReport> {
    let started = Instant::now();
    let wiki = opts.wiki();
    let tar_opts = TarGzOptions {
        level: opts.level,
        threads: opts.threads,
        mtime: u64::try_from(source.info().now).unwrap_or(0),
    };
    let mut report = EnterpriseExportReport::default();
    let mut p = EnterpriseExportProgress::default();
    let written = targz::write(&opts.out, &tar_opts, |members| {
        let (mut member_len, mut member_no) = (0u64, 0u64);
        let mut line = Vec::new();
        while let Some(titles) = source.next_titles()? {
            let picked: Vec<(&DumpTitle, &DumpRender)> = titles
                .iter()
                .filter(|t| opts.domain.as_ref().is_none_or(|d| *d == t.domain))
                .filter_map(|t| chosen(t, opts.as_of).map(|r| (t, r)))
                .filter(|(_, r)| {
                    // A render kept in a content coding (gzip) is not HTML text as stored.
                    let html = is_html(&r.content_type) && r.labels.encoding.is_none();
                    report.not_html += u64::from(!html);
                    html
                })
                .collect();
            for (_, r) in &picked {
                source.plan(r);
            }
            for (t, r) in picked {
                let value = source.read(t, r)?;
                let Ok(html) = std::str::from_utf8(&value) else {
                    report.not_utf8 += 1;
                    continue;
                };
                line.clear();
                serde_json::to_writer(&mut line, &article(t, r, html)?)
                    .map_err(|e| Error::internal(format!("an article as JSON: {e}")))?;
                line.push(b'\n');
                let n = line.len() as u64;
                if report.articles == 0 || (member_len > 0 && member_len + n > opts.member_bytes) {
                    members.begin(&format!("{wiki}_{member_no}.ndjson"))?;
                    member_no += 1;
                    member_len = 0;
                }
                members.write(&line)?;
                member_len += n;
                report.articles += 1;
                report.html_bytes += html.len() as u64;
                p.articles += 1;
                p.html_bytes += html.len() as u64;
            }
            p.walked = source.walked();
            p.written_bytes = members.written.load(Ordering::Relaxed);
            progress(&p);
        }
        source.finish()
    })?;
    report.members = written.members;
    report.raw_bytes = written.raw_bytes;
    report.written_bytes = written.file_bytes;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn article<'a>(t: &'a DumpTitle, r: &DumpRender, html: &'a str) -> Result<Line<'a>> {
    let date = date_modified(tid_time(r.tid)).ok_or_else(|| {
        Error::invalid(format!(
            "tid {} is past the year 9999: no date carries it",
            r.tid
        ))
    })?;
    Ok(Line {
        name: name_of_title(&t.title),
        date_modified: date,
        version: Version { identifier: r.rev },
        url: article_url(&t.domain, &t.title),
        in_language: language_of_domain(&t.domain).map(|identifier| Identified { identifier }),
        is_part_of: Project {
            identifier: dbname_of_domain(&t.domain),
            url: format!("https://{}", t.domain),
        },
        article_body: Body { html },
    })
}
