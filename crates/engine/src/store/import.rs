//! Bulk load of a corpus laid out like `shared/corpus/`: `SRC/DOC/NNNN.html` plus a
//! `manifest.tsv` (doc, rev, timestamp, bytes, sha1, source). Title = doc, revision = rev as a
//! number, tid = a version-1 UUID at the manifest's timestamp (deterministic per document).
//!
//! Nothing is trusted: the manifest is read line by line against [`MAX_MANIFEST`] and
//! [`MAX_LINE`], each line must be UTF-8 with a timestamp a tid can carry, and [`verify`]
//! checks every file against its line (present, a regular file, exactly `bytes` long, within
//! the store's maximum value, of the given SHA-1) before the caller writes anything. An import
//! reads each file again against its `bytes`, and refuses one whose length changed since.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};
use sha1::Sha1;

use crate::error::{Error, Result};

use super::{key, Put, Store};

/// The largest manifest read: 256 MiB, about two million lines.
pub const MAX_MANIFEST: u64 = 256 << 20;
/// The longest manifest line, bytes.
pub const MAX_LINE: u64 = 64 << 10;

/// One line of the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusEntry {
    /// The document: the title it is stored under, and its directory in the corpus.
    pub doc: String,
    /// Revision number.
    pub rev: u64,
    /// Seconds since the epoch: the time of the render's tid.
    pub timestamp: i64,
    /// The file's length, bytes; checked before and while it is read.
    pub bytes: u64,
    /// The file's SHA-1, when the manifest gives one (not empty, not `-`).
    pub sha1: Option<[u8; 20]>,
    /// The file: `SRC/DOC/REV.html`.
    pub path: PathBuf,
    /// Its line in the manifest (1: the header).
    pub line: u64,
}

/// Reads `SRC/manifest.tsv`: a header line, then one tab-separated line per revision. Any line
/// that cannot be taken as it is is [`Error::Invalid`] naming the manifest, the line and its
/// byte offset.
pub fn read_manifest(src: &Path) -> Result<Vec<CorpusEntry>> {
    let path = src.join("manifest.tsv");
    let file = File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => {
            Error::invalid(format!("{}: cannot read it: {e}", path.display()))
        }
        _ => Error::io(&path, None, e),
    })?;
    let mut reader = BufReader::new(file);
    let mut out = Vec::new();
    let mut offset = 0u64;
    let mut buf = Vec::new();
    for n in 1u64.. {
        buf.clear();
        let got = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(&path, Some(offset), e))?;
        if got == 0 {
            break;
        }
        let at = offset;
        offset += got as u64;
        let bad = |what: String| {
            Error::invalid(format!("{}: line {n} (byte {at}): {what}", path.display()))
        };
        if offset > MAX_MANIFEST {
            return Err(bad(format!(
                "the manifest is longer than {MAX_MANIFEST} bytes; split the corpus"
            )));
        }
        if buf.last() != Some(&b'\n') && got as u64 > MAX_LINE {
            return Err(bad(format!("longer than {MAX_LINE} bytes")));
        }
        let line = std::str::from_utf8(&buf).map_err(|e| {
            bad(format!(
                "not UTF-8 (at byte {})",
                at + e.valid_up_to() as u64
            ))
        })?;
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if n == 1 || line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(src, line, n).map_err(|what| bad(format!("{what}: {line:?}")))?);
    }
    Ok(out)
}

/// One manifest line (not the header): the column at fault when it cannot be taken.
fn parse_line(src: &Path, line: &str, n: u64) -> std::result::Result<CorpusEntry, String> {
    let cols: Vec<&str> = line.split('\t').collect();
    if cols.len() < 4 {
        return Err("too few columns (doc, rev, timestamp, bytes, …)".into());
    }
    let doc = cols[0];
    if doc.contains('/') || doc.contains("..") || key::check_title(doc).is_err() {
        return Err(format!(
            "doc {doc:?} is not a title (1 to 1024 bytes, no '/', '..', NUL)"
        ));
    }
    let rev = key::parse_rev(cols[1]).map_err(|_| format!("rev {:?}", cols[1]))?;
    let timestamp = cols[2]
        .parse::<i64>()
        .ok()
        .filter(|t| key::check_now(*t).is_ok())
        .ok_or_else(|| {
            format!(
                "timestamp {:?}: seconds since the epoch, 0 to {} (what a tid can carry)",
                cols[2],
                key::MAX_NOW
            )
        })?;
    let bytes = cols[3]
        .parse::<u64>()
        .map_err(|_| format!("bytes {:?}: a byte count", cols[3]))?;
    let sha1 = match cols.get(4).copied().unwrap_or("") {
        "" | "-" => None,
        text => Some(parse_sha1(text).ok_or_else(|| format!("sha1 {text:?}: 40 hex digits"))?),
    };
    Ok(CorpusEntry {
        doc: doc.to_string(),
        rev,
        timestamp,
        bytes,
        sha1,
        path: src.join(doc).join(format!("{}.html", cols[1])),
        line: n,
    })
}

fn parse_sha1(text: &str) -> Option<[u8; 20]> {
    if text.len() != 40 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks every entry's file against its manifest line before anything is written: present, a
/// regular file, exactly `bytes` long, at most `max_value` bytes, and of the given SHA-1 (the
/// files with one are read once for it, each against its length). [`Error::Invalid`] names the
/// file and the manifest line.
pub fn verify(entries: &[CorpusEntry], max_value: u64) -> Result<()> {
    for e in entries {
        let bad = |what: String| {
            Error::invalid(format!(
                "{} (manifest line {}): {what}",
                e.path.display(),
                e.line
            ))
        };
        let meta = std::fs::metadata(&e.path).map_err(|err| bad(err.to_string()))?;
        if !meta.is_file() {
            return Err(bad("not a file".into()));
        }
        if meta.len() != e.bytes {
            return Err(bad(format!(
                "{} bytes, the manifest's bytes column says {}",
                meta.len(),
                e.bytes
            )));
        }
        if e.bytes > max_value {
            return Err(bad(format!(
                "{} bytes, over this store's maximum value of {max_value}",
                e.bytes
            )));
        }
        if let Some(expected) = e.sha1 {
            let file = File::open(&e.path).map_err(|err| bad(err.to_string()))?;
            let mut hasher = Sha1::new();
            let read = io::copy(&mut file.take(e.bytes + 1), &mut hasher)
                .map_err(|err| Error::io(&e.path, None, err))?;
            let found: [u8; 20] = hasher.finalize().into();
            if read != e.bytes {
                return Err(bad(format!("changed while it was read: {read} bytes")));
            }
            if found != expected {
                return Err(bad(format!(
                    "SHA-1 {}, the manifest's sha1 column says {}",
                    hex(&found),
                    hex(&expected)
                )));
            }
        }
    }
    Ok(())
}

/// The file of `e`, read against its manifest length (and `max_value`): one that changed
/// length since [`verify`] is refused rather than read whole.
fn read_entry(e: &CorpusEntry, max_value: u64) -> Result<Vec<u8>> {
    let limit = e.bytes.min(max_value);
    let mut value = Vec::new();
    File::open(&e.path)
        .and_then(|f| f.take(limit + 1).read_to_end(&mut value))
        .map_err(|err| Error::io(&e.path, None, err))?;
    if value.len() as u64 != e.bytes {
        return Err(Error::invalid(format!(
            "{} (manifest line {}): {} bytes read, the manifest says {}: it changed since it \
             was verified",
            e.path.display(),
            e.line,
            if value.len() as u64 > limit {
                format!("more than {limit}")
            } else {
                value.len().to_string()
            },
            e.bytes
        )));
    }
    Ok(value)
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Renders put.
    pub renders: u64,
    /// Bytes of values put.
    pub bytes: u64,
    /// Distinct titles put.
    pub titles: u64,
    /// Batches committed.
    pub batches: u64,
}

/// A document's own tid node: the first 6 bytes of MD5(domain/doc), multicast bit set.
fn node_for(domain: &str, doc: &str) -> [u8; 6] {
    let digest = Md5::digest(format!("{domain}/{doc}").as_bytes());
    let mut node = [0u8; 6];
    node.copy_from_slice(&digest[..6]);
    node[0] |= 0x01;
    node
}

/// Loads every revision in `entries` into `store` under `domain`, committing every `batch`
/// puts; `progress(done, total_bytes)` is called after each put. [`verify`] the entries first:
/// a file found different from its line here fails the import with the batches before it
/// committed.
pub fn import(
    store: &mut Store,
    entries: &[CorpusEntry],
    domain: &str,
    batch: usize,
    mut progress: impl FnMut(u64, u64),
) -> Result<ImportStats> {
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut stats = ImportStats::default();
    let mut titles = std::collections::BTreeSet::new();
    let mut pending = 0;
    let max_value = store.config().max_value;
    let mut group = store.batch();
    for e in entries {
        let value = read_entry(e, max_value)?;
        let tid = key::tid_at(
            e.timestamp,
            (e.rev & 0x3fff) as u16,
            node_for(domain, &e.doc),
        );
        group.put(&Put {
            domain,
            title: &e.doc,
            rev: e.rev,
            tid: Some(tid),
            content_type: "text/html; charset=utf-8",
            labels: &super::Labels::NONE,
            value: &value,
            historical: false,
        })?;
        stats.renders += 1;
        stats.bytes += value.len() as u64;
        titles.insert(e.doc.clone());
        pending += 1;
        if pending >= batch.max(1) {
            group.commit()?;
            stats.batches += 1;
            pending = 0;
        }
        progress(stats.bytes, total);
    }
    if pending > 0 {
        group.commit()?;
        stats.batches += 1;
    }
    stats.titles = titles.len() as u64;
    Ok(stats)
}
