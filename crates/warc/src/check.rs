//! `wink check --warc FILE...`: the import's validation alone, for any WARC file, reporting
//! every problem instead of stopping at the first.
//!
//! Each record is read as an import reads it ([`RecordReader`]): a member that decodes to its
//! end, a header with the mandatory fields, exactly `Content-Length` bytes then CRLF CRLF, and
//! the digests it declares. After damage the check moves to the next record it can find and
//! goes on. A revisit must refer (`WARC-Refers-To`) to a record read before it, in the same file
//! or an earlier one given, whose payload digest is the one the revisit names. Unlike warcio's
//! checker, a record cut short is an error, not the end of the file.
//!
//! Memory: one entry per record with a payload digest (a hash of its record ID and 8 bytes of
//! its digest: about 32 bytes), so that revisits can be checked across files.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher as _};
use std::path::{Path, PathBuf};

use crate::error::Result;

use super::digest::Digest;
use super::mapping;
use super::reader::{Damage, ReadError, Record, RecordReader};

/// A problem found, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file it was found in.
    pub file: PathBuf,
    /// Where in the file, and what was wrong.
    pub damage: Damage,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.damage;
        write!(
            f,
            "{}: error at byte {}: {}: expected {}, found {}",
            self.file.display(),
            d.offset,
            d.field,
            d.expected,
            d.found
        )
    }
}

/// The counts of one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSummary {
    /// The file checked.
    pub file: PathBuf,
    /// Records read (damaged ones not counted).
    pub records: u64,
    /// Records by `WARC-Type`, in the order first met.
    pub kinds: Vec<(String, u64)>,
    /// Problems found in it.
    pub problems: u64,
}

/// Checks `files` in order; `problem` is told of each problem as it is found. Returns each
/// file's counts. An error is an I/O error (a file that cannot be read at all).
pub fn check_warc(
    files: &[PathBuf],
    mut problem: impl FnMut(&Problem),
) -> Result<Vec<FileSummary>> {
    let mut seen = Seen::default();
    let mut out = Vec::new();
    for file in files {
        let mut summary = FileSummary {
            file: file.clone(),
            ..FileSummary::default()
        };
        // Blocks are checked in pieces; none is kept.
        let mut reader = RecordReader::open(file, 0)?;
        loop {
            let damage = match reader.next_record() {
                Ok(Some(r)) => {
                    summary.records += 1;
                    count(&mut summary.kinds, r.kind());
                    match seen.record(&r) {
                        Ok(()) => continue,
                        Err(d) => d,
                    }
                }
                Ok(None) => break,
                Err(ReadError::Io(e)) => return Err(e),
                Err(ReadError::Damage(d)) => {
                    summary.problems += 1;
                    problem(&Problem {
                        file: file.clone(),
                        damage: d,
                    });
                    if reader.skip_damage()? {
                        continue;
                    }
                    break;
                }
            };
            summary.problems += 1;
            problem(&Problem {
                file: file.clone(),
                damage,
            });
        }
        out.push(summary);
    }
    Ok(out)
}

fn count(kinds: &mut Vec<(String, u64)>, kind: &str) {
    match kinds.iter_mut().find(|(k, _)| k == kind) {
        Some((_, n)) => *n += 1,
        None => kinds.push((kind.to_string(), 1)),
    }
}

/// Payload digests of the records read so far, by record ID.
#[derive(Default)]
struct Seen {
    digests: HashMap<u64, u64>,
    hasher: std::collections::hash_map::RandomState,
}

impl Seen {
    fn key(&self, id: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(id.as_bytes());
        h.finish()
    }

    fn short(d: &Digest) -> u64 {
        let mut b = [0u8; 8];
        let n = d.bytes.len().min(8);
        b[..n].copy_from_slice(&d.bytes[..n]);
        u64::from_le_bytes(b)
    }

    /// Remembers a record's payload digest; checks a revisit against its original.
    fn record(&mut self, r: &Record) -> std::result::Result<(), Damage> {
        let digest = r
            .header
            .get("WARC-Payload-Digest")
            .and_then(|t| Digest::parse(t).ok());
        let id = r.header.get("WARC-Record-ID").unwrap_or("");
        if r.kind() != "revisit" {
            if let Some(d) = &digest {
                let key = self.key(id);
                self.digests.insert(key, Self::short(d));
            }
            return Ok(());
        }
        let profile = r.header.get("WARC-Profile").unwrap_or("");
        if profile != mapping::IDENTICAL_PAYLOAD && profile != mapping::IDENTICAL_PAYLOAD_1_0 {
            return Ok(()); // nothing to compare a server-not-modified revisit with
        }
        let damage = |field: &str, expected: &str, found: String| Damage {
            offset: r.offset,
            field: field.to_string(),
            expected: expected.to_string(),
            found,
        };
        let Some(original) = r.header.get("WARC-Refers-To") else {
            return Err(damage(
                "WARC-Refers-To",
                "the original's record ID",
                "none".into(),
            ));
        };
        match (self.digests.get(&self.key(original)), &digest) {
            (None, _) => Err(damage(
                "WARC-Refers-To",
                "a record read before the revisit",
                format!("{original}, not in the files checked before this record"),
            )),
            (Some(known), Some(d)) if *known != Self::short(d) => Err(damage(
                "WARC-Payload-Digest",
                "the original's payload digest",
                format!(
                    "{} (the original {original} has another)",
                    r.header.get("WARC-Payload-Digest").unwrap_or("")
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl FileSummary {
    /// `FILE: ok (N records: K1 T1, K2 T2, ...)`: what `wink check --warc` prints of a clean
    /// file.
    pub fn ok_line(&self) -> String {
        let kinds: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        format!(
            "{}: ok ({} records: {})",
            Path::new(&self.file).display(),
            self.records,
            kinds.join(", ")
        )
    }
}
