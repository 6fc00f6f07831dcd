//! `wink export DIR --wacz FILE.wacz`: the WARC export packaged as WACZ 1.1.1 (Web Archive
//! Collection Zipped, the version py-wacz writes and validates), which ReplayWeb.page and pywb
//! open as they are:
//!
//! | ZIP entry                     | what                                             | ZIP method |
//! |-------------------------------|--------------------------------------------------|------------|
//! | `archive/NAME.warc.gz`        | the WARC export (several files with a size bound) | store      |
//! | `indexes/index.cdxj`          | its CDXJ index (sorted; `filename` is the WARC's) | store      |
//! | `pages/pages.jsonl`           | a `json-pages-1.0` header, then one page per title: its latest exported render's `url` and `ts` | store |
//! | `datapackage.json`            | `profile`, `wacz_version`, every entry's `path`, `bytes` and `sha256:` `hash`, `created`, `software` | store |
//! | `datapackage-digest.json`     | the `sha256:` hash of `datapackage.json`         | store      |
//!
//! The WARC files, index and pages are written first to `FILE.wacz.parts/` beside the package
//! (the exporter's drop-behind and sync), then copied into the ZIP (read with the pages dropped
//! behind, written with drop-behind, hashed on the way); the parts are removed at the end, and
//! a failed export removes what it wrote. Nothing is compressed twice: every entry is stored.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::codec::Compression;
use crate::date::Ticks;
use crate::error::{Error, Result};
use crate::export::{self as warc_export, ExportOptions, ExportProgress, ExportReport};
use crate::outfile::OutFile;
use wink_engine::storage::{FileStorage, Storage};
use wink_engine::store::Store;

/// The WACZ version written.
pub(crate) const WACZ_VERSION: &str = "1.1.1";

/// Bytes copied at a time into the package.
const COPY: usize = 8 << 20;

/// What a WACZ export did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WaczReport {
    /// The WARC export inside.
    pub warc: ExportReport,
    /// Lines of `pages/pages.jsonl` (the header aside).
    pub pages: u64,
    /// The package's entries: path and bytes.
    pub entries: Vec<(String, u64)>,
    /// Bytes of the package.
    pub bytes: u64,
    /// Wall-clock time taken.
    pub seconds: f64,
}

/// `opts.out`'s directory of parts: `FILE.wacz.parts`.
fn parts_dir(out: &Path) -> PathBuf {
    PathBuf::from(format!("{}.parts", out.display()))
}

/// Exports `store` as a WACZ at `out`; `warc` says which renders, how they are compressed (gzip
/// or none), and how the WARC files are split (its `out` and `index` are the package's).
pub fn export_wacz(
    store: &Store,
    out: &Path,
    warc: &ExportOptions,
    progress: impl FnMut(&ExportProgress),
) -> Result<WaczReport> {
    let started = Instant::now();
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(stem) = name.strip_suffix(".wacz").filter(|s| !s.is_empty()) else {
        return Err(Error::invalid(format!(
            "{}: a WACZ package is named *.wacz",
            out.display()
        )));
    };
    if warc.compression == Compression::Zstd {
        return Err(Error::invalid(
            "a WACZ holds .warc.gz or .warc files, not .warc.zst",
        ));
    }
    if out.exists() {
        return Err(Error::invalid(format!(
            "{} exists; remove it or choose another name",
            out.display()
        )));
    }
    let parts = parts_dir(out);
    std::fs::create_dir(&parts).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => Error::invalid(format!(
            "{} exists (left by an export that was stopped?); remove it",
            parts.display()
        )),
        _ => Error::io(&parts, None, e),
    })?;
    let result = package(store, out, &parts, stem, warc, progress, started);
    let _ = std::fs::remove_dir_all(&parts);
    if result.is_err() {
        let _ = std::fs::remove_file(out);
    }
    result
}

#[derive(Serialize)]
struct PagesHeader<'a> {
    format: &'a str,
    id: &'a str,
    title: &'a str,
}

#[derive(Serialize)]
struct PageLine<'a> {
    id: String,
    url: &'a str,
    ts: String,
    title: &'a str,
}

#[derive(Serialize)]
struct Resource {
    name: String,
    path: String,
    hash: String,
    bytes: u64,
}

#[derive(Serialize)]
struct DataPackage<'a> {
    profile: &'a str,
    resources: &'a [Resource],
    wacz_version: &'a str,
    title: String,
    created: String,
    software: String,
}

#[derive(Serialize)]
struct DigestFile<'a> {
    path: &'a str,
    hash: String,
}

/// A resource's name as Frictionless takes it: lower case letters, digits, `-._`.
fn resource_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path).to_lowercase();
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn package(
    store: &Store,
    out: &Path,
    parts: &Path,
    stem: &str,
    warc: &ExportOptions,
    progress: impl FnMut(&ExportProgress),
    started: Instant,
) -> Result<WaczReport> {
    let mut opts = warc.clone();
    opts.out = parts.join(format!("{stem}{}", warc.compression.extension()));
    opts.index = true;
    let pages_path = parts.join("pages.jsonl");
    let mut pages = OutFile::create_new(&pages_path)?;
    let header = PagesHeader {
        format: "json-pages-1.0",
        id: "pages",
        title: "All Pages",
    };
    let mut line = json_line(&header)?;
    pages.append(&line)?;
    let mut count = 0u64;
    let report = warc_export::export_titles(store, &opts, progress, |t| {
        count += 1;
        let ts = Ticks::parse(t.date)
            .ok()
            .and_then(|d| d.warc_date())
            .map(|d| format!("{}Z", &d[..19]))
            .ok_or_else(|| Error::internal(format!("WARC-Date {:?}", t.date)))?;
        line = json_line(&PageLine {
            id: format!("{count}"),
            url: t.uri,
            ts,
            title: t.title,
        })?;
        pages.append(&line).map(|_| ())
    })?;
    pages.close()?;
    let index = opts.index_path()?;
    let mut files: Vec<(String, PathBuf)> = report
        .files
        .iter()
        .map(|f| {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            (format!("archive/{}", name.unwrap_or_default()), f.clone())
        })
        .collect();
    files.push(("indexes/index.cdxj".into(), index));
    files.push(("pages/pages.jsonl".into(), pages_path));

    let mut zip = ZipWriter::new(OutFile::create_new(out)?);
    let zip_err = |e: zip::result::ZipError| Error::io(out, None, std::io::Error::other(e));
    let mut resources = Vec::new();
    let mut entries = Vec::new();
    for (path, file) in &files {
        let (hash, bytes) = copy_into(&mut zip, path, file, out)?;
        resources.push(Resource {
            name: resource_name(path),
            path: path.clone(),
            hash: format!("sha256:{hash}"),
            bytes,
        });
        entries.push((path.clone(), bytes));
    }
    let created = Ticks::from_unix_secs(store.now())
        .warc_date()
        .map(|d| format!("{}Z", &d[..19]))
        .unwrap_or_default();
    let package = DataPackage {
        profile: "data-package",
        resources: &resources,
        wacz_version: WACZ_VERSION,
        title: format!("Wink export of {}", store.dir().display()),
        created,
        software: format!("wink {}", env!("CARGO_PKG_VERSION")),
    };
    let package = serde_json::to_vec_pretty(&package)
        .map_err(|e| Error::internal(format!("datapackage.json: {e}")))?;
    let digest = DigestFile {
        path: "datapackage.json",
        hash: format!("sha256:{}", hex(&Sha256::digest(&package))),
    };
    let digest = serde_json::to_vec_pretty(&digest)
        .map_err(|e| Error::internal(format!("datapackage-digest.json: {e}")))?;
    for (path, bytes) in [
        ("datapackage.json", &package),
        ("datapackage-digest.json", &digest),
    ] {
        zip.start_file(path, stored(bytes.len() as u64))
            .map_err(zip_err)?;
        zip.write_all(bytes).map_err(|e| Error::io(out, None, e))?;
        entries.push((path.to_string(), bytes.len() as u64));
    }
    let file = zip.finish().map_err(zip_err)?;
    let bytes = file.close()?;
    Ok(WaczReport {
        warc: report,
        pages: count,
        entries,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn json_line(v: &impl Serialize) -> Result<Vec<u8>> {
    let mut line =
        serde_json::to_vec(v).map_err(|e| Error::internal(format!("a JSON line: {e}")))?;
    line.push(b'\n');
    Ok(line)
}

fn stored(len: u64) -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .large_file(len >= u64::from(u32::MAX))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies `file` into the package as `path`, stored; returns its SHA-256 (hex) and length. The
/// file's pages are dropped behind the copy.
fn copy_into(
    zip: &mut ZipWriter<OutFile>,
    path: &str,
    file: &Path,
    out: &Path,
) -> Result<(String, u64)> {
    let src = FileStorage::open(file, false)?;
    let len = src.len().map_err(|e| Error::io(file, None, e))?;
    zip.start_file(path, stored(len))
        .map_err(|e| Error::io(out, None, std::io::Error::other(e)))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; COPY];
    let mut at = 0u64;
    while at < len {
        let want = COPY.min((len - at) as usize);
        let n = src
            .read_at(&mut buf[..want], at)
            .map_err(|e| Error::io(file, Some(at), e))?;
        if n == 0 {
            return Err(Error::io(
                file,
                Some(at),
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        }
        hasher.update(&buf[..n]);
        zip.write_all(&buf[..n])
            .map_err(|e| Error::io(out, None, e))?;
        // A hint: the file is removed after the copy.
        let _ = src.drop_cache(at, n as u64);
        at += n as u64;
    }
    Ok((hex(&hasher.finalize()), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_frictionless() {
        assert_eq!(resource_name("archive/Dump 1.warc.gz"), "dump-1.warc.gz");
        assert_eq!(resource_name("pages/pages.jsonl"), "pages.jsonl");
        assert_eq!(resource_name("archive/日本.warc"), "--.warc");
    }
}
