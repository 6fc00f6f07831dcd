//! The CDXJ index of an export: one line per `resource` and `revisit` record,
//! `SURT 14-DIGIT-TIMESTAMP {"url", "mime", "digest", "length", "offset", "filename"}`, sorted
//! bytewise (as `LC_ALL=C sort` and pywb have it), the same lines cdxj-indexer writes for the
//! same file: its JSON is Python's (`", "` and `": "` separators, non-ASCII as `\uXXXX`), numbers
//! as strings, `mime` the content type up to `;` (`warc/revisit` for a revisit), and the
//! `warcinfo` records left out.
//!
//! Sorting is external, so memory is bounded whatever the number of records: lines are kept up
//! to [`RUN_BYTES`], sorted, written to a run file beside the index, and the runs are merged.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// Bytes of lines sorted in memory before they go to a run file.
pub(crate) const RUN_BYTES: usize = 64 << 20;

/// The JSON part of a line, in cdxj-indexer's field order.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Fields<'a> {
    pub url: &'a str,
    pub mime: &'a str,
    pub digest: &'a str,
    pub length: String,
    pub offset: String,
    pub filename: &'a str,
}

/// One index line (with its newline).
pub(crate) fn line(surt: &str, timestamp14: &str, fields: &Fields<'_>) -> String {
    let mut json = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut json, PythonFormatter);
    // A struct of strings always serializes.
    fields.serialize(&mut ser).unwrap_or_default();
    format!("{surt} {timestamp14} {}\n", String::from_utf8_lossy(&json))
}

/// The `mime` of a record: its content type up to the first `;` or space (`warc/revisit` for
/// a revisit).
pub(crate) fn mime(content_type: &str) -> &str {
    content_type
        .split([';', ' ', '\t'])
        .next()
        .unwrap_or("")
        .trim()
}

/// serde_json output as Python's `json.dumps` writes it.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, s: &str) -> io::Result<()> {
        for c in s.chars() {
            if c.is_ascii() {
                w.write_all(&[c as u8])?;
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(w, "\\u{u:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// Sorts index lines with bounded memory (module doc).
#[derive(Debug)]
pub(crate) struct Sorter {
    out: PathBuf,
    lines: Vec<String>,
    bytes: usize,
    runs: Vec<PathBuf>,
}

impl Sorter {
    /// A sorter for the index at `out` (its runs go beside it, `OUT.runN`).
    pub fn new(out: &Path) -> Sorter {
        Sorter {
            out: out.to_path_buf(),
            lines: Vec::new(),
            bytes: 0,
            runs: Vec::new(),
        }
    }

    pub fn push(&mut self, line: String) -> Result<()> {
        self.bytes += line.len();
        self.lines.push(line);
        if self.bytes >= RUN_BYTES {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<()> {
        self.lines.sort_unstable();
        let path = PathBuf::from(format!("{}.run{}", self.out.display(), self.runs.len()));
        write_lines(&path, self.lines.drain(..))?;
        self.runs.push(path);
        self.bytes = 0;
        Ok(())
    }

    /// Writes the sorted index (identical lines once, as cdxj-indexer does), synced; removes the
    /// runs. Returns the number of lines.
    pub fn finish(mut self) -> Result<u64> {
        if self.runs.is_empty() {
            self.lines.sort_unstable();
            self.lines.dedup();
            let n = self.lines.len() as u64;
            write_lines(&self.out, self.lines.drain(..))?;
            return Ok(n);
        }
        if !self.lines.is_empty() {
            self.spill()?;
        }
        let mut readers = Vec::new();
        for run in &self.runs {
            let f = File::open(run).map_err(|e| Error::io(run, None, e))?;
            readers.push((run.clone(), BufReader::new(f).lines()));
        }
        // The smallest line first: a min-heap of (line, run).
        let mut heap = BinaryHeap::new();
        for (i, (path, r)) in readers.iter_mut().enumerate() {
            if let Some(l) = r.next() {
                let l = l.map_err(|e| Error::io(path, None, e))?;
                heap.push(std::cmp::Reverse((l, i)));
            }
        }
        let mut n = 0u64;
        let mut last: Option<String> = None;
        let merged = std::iter::from_fn(|| {
            let std::cmp::Reverse((l, i)) = heap.pop()?;
            let (path, r) = &mut readers[i];
            match r.next() {
                Some(Ok(next)) => heap.push(std::cmp::Reverse((next, i))),
                Some(Err(e)) => return Some(Err(Error::io(path, None, e))),
                None => {}
            }
            Some(Ok(l))
        });
        let file = File::create(&self.out).map_err(|e| Error::io(&self.out, None, e))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        for l in merged {
            let l = l?;
            if last.as_ref() == Some(&l) {
                continue;
            }
            writeln!(w, "{l}").map_err(|e| Error::io(&self.out, None, e))?;
            n += 1;
            last = Some(l);
        }
        finish_file(&self.out, w)?;
        for run in &self.runs {
            let _ = std::fs::remove_file(run);
        }
        self.runs.clear();
        Ok(n)
    }
}

impl Drop for Sorter {
    fn drop(&mut self) {
        for run in &self.runs {
            let _ = std::fs::remove_file(run);
        }
    }
}

/// Lines (each ending in a newline) written to `path` and synced.
fn write_lines(path: &Path, lines: impl Iterator<Item = String>) -> Result<()> {
    let file = File::create(path).map_err(|e| Error::io(path, None, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    for l in lines {
        w.write_all(l.as_bytes())
            .map_err(|e| Error::io(path, None, e))?;
    }
    finish_file(path, w)
}

fn finish_file(path: &Path, w: BufWriter<File>) -> Result<()> {
    let file = w
        .into_inner()
        .map_err(|e| Error::io(path, None, e.into_error()))?;
    file.sync_data().map_err(|e| Error::io(path, None, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_what_cdxj_indexer_writes() {
        let f = Fields {
            url: "https://d/x/Caf%C3%A9",
            mime: mime("text/html; charset=utf-8"),
            digest: "sha1:ABC",
            length: 323.to_string(),
            offset: 0.to_string(),
            filename: "dump-é.warc.gz",
        };
        assert_eq!(
            line("d)/x/caf%c3%a9", "20240501120000", &f),
            "d)/x/caf%c3%a9 20240501120000 {\"url\": \"https://d/x/Caf%C3%A9\", \"mime\": \
             \"text/html\", \"digest\": \"sha1:ABC\", \"length\": \"323\", \"offset\": \"0\", \
             \"filename\": \"dump-\\u00e9.warc.gz\"}\n"
        );
    }

    #[test]
    fn external_sort_merges_runs_and_drops_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("i.cdxj");
        let mut s = Sorter::new(&out);
        let mut expected = Vec::new();
        for i in (0..2000u32).rev() {
            let l = format!("key{:05} {}\n", (i * 7919) % 2000, "x".repeat(40_000));
            expected.push(l.clone());
            s.push(l).unwrap();
            if i % 700 == 0 {
                s.spill().unwrap();
            }
        }
        s.push(expected[0].clone()).unwrap();
        assert!(s.runs.len() >= 3);
        assert_eq!(s.finish().unwrap(), 2000);
        expected.sort();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected.concat());
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "runs removed");
    }
}
