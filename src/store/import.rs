//! Bulk load of a corpus laid out like `shared/corpus/`: `SRC/DOC/NNNN.html` plus a
//! `manifest.tsv` (doc, rev, timestamp, bytes, sha1, source). Title = doc, revision = rev as a
//! number, tid = a version-1 UUID at the manifest's timestamp (deterministic per document).

use std::path::{Path, PathBuf};

use md5::{Digest, Md5};

use crate::error::{Error, Result};

use super::{key, Put, Store};

/// One line of the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusEntry {
    pub doc: String,
    pub rev: u64,
    pub timestamp: i64,
    pub bytes: u64,
    pub path: PathBuf,
}

/// Reads `SRC/manifest.tsv`.
pub fn read_manifest(src: &Path) -> Result<Vec<CorpusEntry>> {
    let path = src.join("manifest.tsv");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, None, e))?;
    let mut out = Vec::new();
    let mut offset = 0u64;
    for (n, line) in text.lines().enumerate() {
        let at = offset;
        offset += line.len() as u64 + 1;
        if n == 0 || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        let bad = |what: &str| {
            Error::corrupt(
                &path,
                at,
                format!("manifest line {}: {what}", n + 1),
                "doc, rev, timestamp, bytes, …",
                line,
            )
        };
        if cols.len() < 4 {
            return Err(bad("too few columns"));
        }
        let rev = key::parse_rev(cols[1]).map_err(|_| bad("rev"))?;
        let timestamp = cols[2].parse::<i64>().map_err(|_| bad("timestamp"))?;
        let bytes = cols[3].parse::<u64>().map_err(|_| bad("bytes"))?;
        if cols[0].is_empty() || cols[0].contains('/') || cols[0].contains("..") {
            return Err(bad("doc"));
        }
        out.push(CorpusEntry {
            doc: cols[0].to_string(),
            rev,
            timestamp,
            bytes,
            path: src.join(cols[0]).join(format!("{}.html", cols[1])),
        });
    }
    Ok(out)
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportStats {
    pub renders: u64,
    pub bytes: u64,
    pub titles: u64,
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
/// puts; `progress(done, total_bytes)` is called after each put.
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
    for e in entries {
        let value = std::fs::read(&e.path).map_err(|err| Error::io(&e.path, None, err))?;
        let tid = key::tid_at(
            e.timestamp,
            (e.rev & 0x3fff) as u16,
            node_for(domain, &e.doc),
        );
        store.put_uncommitted(&Put {
            domain,
            title: &e.doc,
            rev: e.rev,
            tid: Some(tid),
            content_type: "text/html; charset=utf-8",
            value: &value,
            historical: false,
        })?;
        stats.renders += 1;
        stats.bytes += value.len() as u64;
        titles.insert(e.doc.clone());
        pending += 1;
        if pending >= batch.max(1) {
            store.commit()?;
            stats.batches += 1;
            pending = 0;
        }
        progress(stats.bytes, total);
    }
    if pending > 0 {
        store.commit()?;
        stats.batches += 1;
    }
    stats.titles = titles.len() as u64;
    Ok(stats)
}
