//! Validation of single Wink files, for `wink check`.
//!
//! [`check_file`] reads the superblock, detects the format and checks the whole file:
//!
//! - every file: the superblock parses; its room after the terminator is zero; PURPOSE is
//!   printable ASCII padded with spaces;
//! - kvseq: every entry from the first to FILESIZE decodes (delflag 0 or 1, lengths within
//!   FILESIZE, zero padding in padded representations), ALIGN gaps are zero, the walk ends at
//!   FILESIZE, ENTRIES / AENTRIES equal the walk's counts, SYNCSIZE ≤ FILESIZE;
//! - hindex: FILESIZE = SBSIZE + HTSIZE·CELLSZ·8, every cell decodes, free and deleted cells
//!   carry a zero stored hash, ENTRIES / AENTRIES equal a count; with a sibling datafile, every
//!   used cell names an entry whose key has the stored hash and reaches the cell by probing;
//! - perm: every pair decodes; with a sibling datafile, every pointer names an entry whose key
//!   hashes to the pair's hash.
//!
//! The sibling datafile has the same stem: `X.kvseq` beside `X.hindex` or `X.perm`, `BASE.data`
//! beside `BASE.idx`. Damage is an [`Severity::Error`]; bookkeeping that readers do not rely on
//! (counts, SYNCSIZE, trailing padding) is a [`Severity::Warning`]. Nothing here panics or writes.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::format::hindex::{HIndex, WRITER_HTDEL, WRITER_HTFREE};
use crate::format::kvseq::{EntryLayout, KvPointer, KvSeq};
use crate::format::perm::{Pair, Perm, PAIR_SIZE};
use crate::format::repr::Repr;
use crate::format::superblock::{var, Format, Superblock, VarName};
use crate::format::superblock::{FORMAT_VALUE_OFFSET, PURPOSE_VALUE_OFFSET};
use crate::storage::{read_exact_at, FileStorage, Storage};

/// Cells or pairs read per chunk: bounds memory on tables of any size.
const CHUNK: u64 = 4096;
/// Bytes compared per read when checking that a range is zero.
const ZERO_CHUNK: u64 = 64 << 10;
/// Load above which a hindex should have grown: the default load limit (docs/FORMAT.md § hindex,
/// "Load limit and growth").
const MAX_LOAD: f64 = 0.75;

/// How bad a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Bookkeeping is off, but every entry still reads correctly.
    Warning,
    /// The file is damaged or cannot be read.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding: which file, where, how bad, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: PathBuf,
    /// The byte offset of the damage; `None` only when there is no place to point at (a file
    /// that cannot be opened).
    pub offset: Option<u64>,
    pub severity: Severity,
    pub what: String,
}

impl Problem {
    /// The problem an error from the library describes.
    pub fn from_error(fallback: &Path, e: &Error) -> Problem {
        let (path, offset, what) = match e {
            Error::Corrupt {
                path,
                offset,
                what,
                expected,
                found,
            } => (
                path,
                Some(*offset),
                format!("{what}: expected {expected}, found {found}"),
            ),
            Error::Unsupported { path, offset, what } => {
                (path, Some(*offset), format!("unsupported: {what}"))
            }
            Error::Io {
                path,
                offset,
                source,
            } => (path, *offset, format!("I/O error: {source}")),
            other => (&fallback.to_path_buf(), None, other.to_string()),
        };
        Problem {
            path: path.clone(),
            offset,
            severity: Severity::Error,
            what,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.severity)?;
        if let Some(offset) = self.offset {
            write!(f, " at byte {offset}")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// What [`check_file`] found in one file.
#[derive(Clone, Debug)]
pub struct Report {
    pub path: PathBuf,
    /// The format, when the superblock names a known one.
    pub format: Option<Format>,
    /// A one-line description of what was checked (format, PURPOSE, counts).
    pub summary: String,
    pub problems: Vec<Problem>,
}

impl Report {
    fn new(path: &Path) -> Report {
        Report {
            path: path.to_path_buf(),
            format: None,
            summary: String::new(),
            problems: Vec::new(),
        }
    }

    /// Problems of severity [`Severity::Error`].
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    /// Problems of severity [`Severity::Warning`].
    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    /// True when nothing counts against the file; `strict` counts warnings too.
    pub fn is_clean(&self, strict: bool) -> bool {
        self.errors() == 0 && (!strict || self.warnings() == 0)
    }

    fn count(&self, severity: Severity) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == severity)
            .count()
    }

    fn push(&mut self, severity: Severity, offset: Option<u64>, what: String) {
        self.problems.push(Problem {
            path: self.path.clone(),
            offset,
            severity,
            what,
        });
    }

    fn error(&mut self, offset: u64, what: String) {
        self.push(Severity::Error, Some(offset), what);
    }

    fn warning(&mut self, offset: u64, what: String) {
        self.push(Severity::Warning, Some(offset), what);
    }

    fn failed(&mut self, e: &Error) {
        self.problems.push(Problem::from_error(&self.path, e));
    }
}

/// Checks one Wink file of any format. Never fails: a file that cannot be opened or parsed is
/// reported as a problem.
pub fn check_file(path: &Path) -> Report {
    let mut report = Report::new(path);
    let sb = match FileStorage::open(path, false).and_then(|s| Superblock::read(&s)) {
        Ok(sb) => sb,
        Err(e) => {
            report.failed(&e);
            return report;
        }
    };
    report.format = sb.format();
    check_superblock(path, &sb, &mut report);
    let summary = match sb.format() {
        Some(Format::KvSeq) => check_kvseq(path, &mut report),
        Some(Format::HIndex) => check_hindex(path, &mut report),
        Some(Format::Perm) => check_perm(path, &mut report),
        None => {
            let code = sb.format_code();
            report.error(FORMAT_VALUE_OFFSET, format!("unknown FORMAT 0x{code:x}"));
            None
        }
    };
    let name = sb.format().map_or("unknown format", Format::name);
    report.summary = match summary {
        Some(s) => format!("{name} {:?}, {s}", sb.purpose().text()),
        None => format!("{name} {:?}", sb.purpose().text()),
    };
    report
}

/// The datafile whose keys a hindex or perm at `path` indexes, when it exists beside it.
pub fn sibling_datafile(path: &Path) -> Option<PathBuf> {
    let data_ext = match path.extension()?.to_str()? {
        "hindex" | "perm" => "kvseq",
        "idx" => "data",
        _ => return None,
    };
    let data = path.with_extension(data_ext);
    data.is_file().then_some(data)
}

/// True when `ptr` is where an entry starts, found by walking the entries up to it. A pointer
/// that does not parse may be a wrong pointer or a damaged entry: this tells them apart.
pub fn is_entry_start(kv: &KvSeq, ptr: KvPointer) -> crate::Result<bool> {
    for item in kv.iter(kv.first(), false) {
        let at = item?.layout.ptr;
        if at >= ptr {
            return Ok(at == ptr);
        }
    }
    Ok(false)
}

// ---- superblock ------------------------------------------------------------------------

fn check_superblock(path: &Path, sb: &Superblock, report: &mut Report) {
    let room = sb.terminator_offset() + 8;
    match FileStorage::open(path, false) {
        Ok(s) => {
            let found = first_nonzero(&s, room, sb.sbsize()).unwrap_or_else(|e| {
                report.failed(&e);
                None
            });
            if let Some(at) = found {
                let what = "non-zero byte in the superblock's free room (must be zero)";
                report.warning(at, what.into());
            }
        }
        Err(e) => report.failed(&e),
    }
    let purpose = sb.purpose().0;
    let text_end = purpose
        .iter()
        .rposition(|b| *b != b' ')
        .map_or(0, |i| i + 1);
    if let Some(i) = purpose[..text_end]
        .iter()
        .position(|b| !(0x20..0x7f).contains(b))
    {
        let what = format!(
            "PURPOSE byte 0x{:02x}: printable ASCII padded with spaces",
            purpose[i]
        );
        report.warning(PURPOSE_VALUE_OFFSET + i as u64, what);
    }
}

/// The offset of the first non-zero byte in `[from, to)`.
fn first_nonzero(s: &dyn Storage, from: u64, to: u64) -> crate::Result<Option<u64>> {
    let mut buf = Vec::new();
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZERO_CHUNK);
        buf.resize(n as usize, 0);
        read_exact_at(s, &mut buf, at, "bytes that must be zero")?;
        if let Some(i) = buf.iter().position(|b| *b != 0) {
            return Ok(Some(at + i as u64));
        }
        at += n;
    }
    Ok(None)
}

/// Reports a non-zero byte in `[from, to)` as an error about `what`.
fn expect_zero(s: &dyn Storage, from: u64, to: u64, what: &str, report: &mut Report) {
    match first_nonzero(s, from, to) {
        Ok(Some(at)) => report.error(at, format!("non-zero byte in {what} (must be zero)")),
        Ok(None) => {}
        Err(e) => report.failed(&e),
    }
}

/// Warns when a count variable differs from the count found.
fn compare_count(sb: &Superblock, name: VarName, found: u64, report: &mut Report) {
    let (Some(stored), Some(at)) = (sb.get(name), sb.value_offset(name)) else {
        return;
    };
    if u64::try_from(stored) != Ok(found) {
        report.warning(at, format!("{name} is {stored}, but {found} were counted"));
    }
}

// ---- kvseq -----------------------------------------------------------------------------

/// What a walk over a kvseq's entries found.
struct Walk {
    entries: u64,
    live: u64,
    /// The end of the last entry, or `None` when the walk stopped at damage.
    end: Option<u64>,
}

fn check_kvseq(path: &Path, report: &mut Report) -> Option<String> {
    let kv = match KvSeq::open_path(path, false) {
        Ok(kv) => kv,
        Err(e) => {
            report.failed(&e);
            return None;
        }
    };
    let sb = kv.superblock();
    if let Some(flag) = sb.get(var::KVDELFL).filter(|f| *f != 0 && *f != 1) {
        let at = sb.value_offset(var::KVDELFL).unwrap_or(0);
        report.warning(
            at,
            format!("KVDELFL {flag} is neither 0 nor 1 (read as: no delflag)"),
        );
    }
    let walk = walk_entries(&kv, report);
    if let Some(end) = walk.end {
        check_kvseq_tail(&kv, &walk, end, report);
        compare_count(sb, var::ENTRIES, walk.entries, report);
        compare_count(sb, var::AENTRIES, walk.live, report);
    }
    check_syncsize(&kv, report);
    Some(format!("{} entries, {} live", walk.entries, walk.live))
}

fn walk_entries(kv: &KvSeq, report: &mut Report) -> Walk {
    let s = kv.storage();
    let mut walk = Walk {
        entries: 0,
        live: 0,
        end: None,
    };
    let mut prev_end = kv.superblock().sbsize();
    for item in kv.iter(kv.first(), false) {
        let layout = match item {
            Ok(info) => info.layout,
            Err(e) => {
                report.failed(&e);
                return walk;
            }
        };
        expect_zero(
            s,
            prev_end,
            layout.ptr.0,
            "the gap before an aligned entry",
            report,
        );
        check_value_padding(kv, &layout, report);
        walk.entries += 1;
        walk.live += u64::from(!layout.deleted);
        prev_end = layout.end;
    }
    walk.end = Some(prev_end);
    walk
}

/// Key padding is checked by the walk, which reads keys; values are not read, so their padding
/// is checked here.
fn check_value_padding(kv: &KvSeq, layout: &EntryLayout, report: &mut Report) {
    let repr = kv.valrepr();
    if let Repr::Padded { .. } = repr {
        let from = layout.value_offset + layout.value_len;
        let to = from + repr.padding(layout.value_len);
        expect_zero(kv.storage(), from, to, "value padding", report);
    }
}

/// The walk stops at the first entry start at or past FILESIZE; FILESIZE should be the end of
/// the last entry (docs/FORMAT.md § kvseq: no trailing padding).
fn check_kvseq_tail(kv: &KvSeq, walk: &Walk, end: u64, report: &mut Report) {
    let filesize = kv.filesize();
    let empty_aligned = walk.entries == 0 && filesize <= kv.first().0;
    if end >= filesize || empty_aligned {
        return;
    }
    let at = kv.superblock().value_offset(var::FILESIZE).unwrap_or(0);
    let what =
        format!("FILESIZE {filesize} is past the end of the last entry ({end}): trailing padding");
    report.warning(at, what);
    expect_zero(kv.storage(), end, filesize, "trailing padding", report);
}

/// SYNCSIZE above FILESIZE is a warning, not damage: replacing the last entry by a shorter one
/// lowers FILESIZE until the next sync, and every entry still reads.
fn check_syncsize(kv: &KvSeq, report: &mut Report) {
    let sb = kv.superblock();
    let (Some(syncsize), Some(at)) = (sb.get(var::SYNCSIZE), sb.value_offset(var::SYNCSIZE)) else {
        return;
    };
    if u64::try_from(syncsize).is_ok_and(|s| s > kv.filesize()) {
        let what = format!("SYNCSIZE {syncsize} is past FILESIZE {}", kv.filesize());
        report.warning(at, what);
    }
}

// ---- sibling datafile ------------------------------------------------------------------

/// Opens the datafile beside `path` read-only; a datafile that does not open is a warning here
/// (its own check reports why).
fn open_datafile(path: &Path, report: &mut Report) -> Option<KvSeq> {
    let data = sibling_datafile(path)?;
    match KvSeq::open_path(&data, false) {
        Ok(kv) => Some(kv),
        Err(e) => {
            let what = format!("cannot check pointers against {}: {e}", data.display());
            report.push(Severity::Warning, None, what);
            None
        }
    }
}

/// The key at `ptr` in the datafile, or an error at `at` saying the pointer names no entry.
fn key_at(
    kv: &KvSeq,
    ptr: KvPointer,
    at: u64,
    whose: &str,
    report: &mut Report,
) -> Option<(EntryLayout, Vec<u8>)> {
    match kv.read_key(ptr) {
        Ok(found) => Some(found),
        Err(e) => {
            let data = kv.path().display();
            report.error(
                at,
                format!("{whose} points at {ptr}, not an entry of {data}: {e}"),
            );
            None
        }
    }
}

// ---- hindex ----------------------------------------------------------------------------

/// Cell counts found by a scan.
#[derive(Default)]
struct Tally {
    not_free: u64,
    used: u64,
}

fn check_hindex(path: &Path, report: &mut Report) -> Option<String> {
    let index = match HIndex::open_path(path, false) {
        Ok(index) => index,
        Err(e) => {
            report.failed(&e);
            return None;
        }
    };
    let keys = open_datafile(path, report);
    let tally = scan_cells(&index, keys.as_ref(), report)?;
    let sb = index.superblock();
    compare_count(sb, var::ENTRIES, tally.not_free, report);
    compare_count(sb, var::AENTRIES, tally.used, report);
    let load = tally.not_free as f64 / index.htsize() as f64;
    if load > MAX_LOAD {
        let at = sb.value_offset(var::HTSIZE).unwrap_or(0);
        let what =
            format!("load {load:.2} above {MAX_LOAD}: the table should have been rebuilt larger");
        report.warning(at, what);
    }
    let verified = if keys.is_some() {
        ", verified against the datafile"
    } else {
        ""
    };
    Some(format!(
        "{} cells, {} used, {} deleted{verified}",
        index.htsize(),
        tally.used,
        tally.not_free - tally.used
    ))
}

/// Reads the whole table in chunks; `None` when it cannot be read.
fn scan_cells(index: &HIndex, keys: Option<&KvSeq>, report: &mut Report) -> Option<Tally> {
    let sb = index.superblock();
    let width = index.cellsz() * 8;
    let mut tally = Tally::default();
    let mut buf = Vec::new();
    let mut start = 0;
    while start < index.htsize() {
        let n = CHUNK.min(index.htsize() - start);
        buf.resize((n * width) as usize, 0);
        let offset = sb.sbsize() + start * width;
        if let Err(e) = read_exact_at(index.storage(), &mut buf, offset, "hindex cells") {
            report.failed(&e);
            return None;
        }
        for (i, bytes) in buf.chunks_exact(width as usize).enumerate() {
            let cell = start + i as u64;
            check_cell(index, keys, cell, bytes, &mut tally, report);
        }
        start += n;
    }
    Some(tally)
}

fn check_cell(
    index: &HIndex,
    keys: Option<&KvSeq>,
    cell: u64,
    bytes: &[u8],
    tally: &mut Tally,
    report: &mut Report,
) {
    let sb = index.superblock();
    let at = sb.sbsize() + cell * index.cellsz() * 8;
    // HIndex::open accepts CELLSZ ≥ 1 only, so a cell has 8 bytes, and 16 when CELLSZ ≥ 2.
    let word0 = i64::from_be_bytes(bytes[..8].try_into().expect("a cell has at least 8 bytes"));
    let hash_is_zero = index.cellsz() < 2 || bytes[8..16] == [0u8; 8];
    let htfree = sb.get(var::HTFREE).unwrap_or(WRITER_HTFREE);
    let htdel = sb.get(var::HTDEL).unwrap_or(WRITER_HTDEL);
    if word0 == htfree || word0 == htdel {
        let state = if word0 == htfree { "free" } else { "deleted" };
        if !hash_is_zero {
            report.error(
                at + 8,
                format!("{state} cell {cell} has a non-zero stored hash"),
            );
        }
        tally.not_free += u64::from(word0 == htdel);
        return;
    }
    let Ok(ptr) = u64::try_from(word0) else {
        let what = format!("cell {cell} holds {word0}: neither a kv_pointer (≥ 0), HTFREE {htfree} nor HTDEL {htdel}");
        report.error(at, what);
        return;
    };
    tally.not_free += 1;
    tally.used += 1;
    if let Some(kv) = keys {
        verify_used_cell(index, kv, cell, KvPointer(ptr), at, report);
    }
}

fn verify_used_cell(
    index: &HIndex,
    kv: &KvSeq,
    cell: u64,
    ptr: KvPointer,
    at: u64,
    report: &mut Report,
) {
    let Some((layout, _)) = key_at(kv, ptr, at, &format!("cell {cell}"), report) else {
        return;
    };
    if layout.deleted {
        report.warning(at, format!("cell {cell} points at {ptr}, a deleted entry"));
    }
    if let Err(e) = index.verify_cell(cell, ptr, kv) {
        report.failed(&e);
    }
}

// ---- perm ------------------------------------------------------------------------------

fn check_perm(path: &Path, report: &mut Report) -> Option<String> {
    let perm = match Perm::open_path(path, false) {
        Ok(perm) => perm,
        Err(e) => {
            report.failed(&e);
            return None;
        }
    };
    let keys = open_datafile(path, report);
    let mut start = 0;
    while start < perm.len() {
        let n = CHUNK.min(perm.len() - start);
        // A chunk that does not decode is read again pair by pair, to report every bad pair.
        let pairs: Vec<_> = match perm.read_range(start, n) {
            Ok(pairs) => pairs.into_iter().map(Ok).collect(),
            Err(_) => (start..start + n).map(|i| perm.get(i)).collect(),
        };
        for (i, pair) in (start..).zip(pairs) {
            match (pair, keys.as_ref()) {
                (Err(e), _) => report.failed(&e),
                (Ok(pair), Some(kv)) => verify_pair(&perm, kv, i, pair, report),
                (Ok(_), None) => {}
            }
        }
        start += n;
    }
    let verified = if keys.is_some() {
        ", verified against the datafile"
    } else {
        ""
    };
    Some(format!("{} pairs{verified}", perm.len()))
}

fn verify_pair(perm: &Perm, kv: &KvSeq, i: u64, pair: Pair, report: &mut Report) {
    let at = perm.superblock().sbsize() + i * PAIR_SIZE;
    let Some((_, key)) = key_at(kv, pair.ptr, at, &format!("pair {i}"), report) else {
        return;
    };
    let expected = perm.hash_key(&key);
    if pair.hash != expected {
        let what = format!(
            "pair {i} has hash {}, but the key at {} hashes to {expected}",
            pair.hash, pair.ptr
        );
        report.error(at + 8, what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::hindex::HIndexOptions;
    use crate::format::kvseq::KvSeqOptions;
    use crate::format::perm::PermOptions;
    use crate::format::superblock::Purpose;
    use std::fs;

    fn kvseq(dir: &Path, name: &str, opts: &KvSeqOptions, n: usize) -> (PathBuf, Vec<KvPointer>) {
        let path = dir.join(name);
        let mut kv = KvSeq::create_path(&path, opts).unwrap();
        let ptrs = (0..n)
            .map(|i| {
                kv.append(
                    format!("key-{i}").as_bytes(),
                    format!("value {i}").as_bytes(),
                )
                .unwrap()
            })
            .collect();
        kv.sync().unwrap();
        (path, ptrs)
    }

    fn patch(path: &Path, offset: u64, bytes: &[u8]) {
        let mut data = fs::read(path).unwrap();
        data[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        fs::write(path, data).unwrap();
    }

    fn only(report: &Report, severity: Severity, offset: u64, text: &str) {
        assert_eq!(report.problems.len(), 1, "{:#?}", report.problems);
        let p = &report.problems[0];
        assert_eq!((p.severity, p.offset), (severity, Some(offset)), "{p}");
        assert!(p.what.contains(text), "{p}");
    }

    #[test]
    fn clean_kvseq_and_damage_at_the_right_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (path, ptrs) = kvseq(dir.path(), "a.kvseq", &KvSeqOptions::default(), 3);
        let report = check_file(&path);
        assert!(report.is_clean(true), "{:#?}", report.problems);
        assert_eq!(report.summary, "kvseq \"KVSEQ\", 3 entries, 3 live");
        patch(&path, ptrs[1].0, &[7]);
        only(&check_file(&path), Severity::Error, ptrs[1].0, "delflag");
    }

    #[test]
    fn alignment_gaps_and_value_padding_must_be_zero() {
        let dir = tempfile::tempdir().unwrap();
        let opts = KvSeqOptions {
            valrepr: Repr::Padded { max: 20 },
            align: 64,
            ..KvSeqOptions::default()
        };
        let (path, ptrs) = kvseq(dir.path(), "p.kvseq", &opts, 3);
        assert!(check_file(&path).is_clean(true));
        let kv = KvSeq::open_path(&path, false).unwrap();
        let layout = kv.layout(ptrs[0]).unwrap();
        drop(kv);
        patch(&path, layout.end, &[1]);
        only(&check_file(&path), Severity::Error, layout.end, "gap");
        patch(&path, layout.end, &[0]);
        let pad = layout.value_offset + layout.value_len + 2;
        patch(&path, pad, &[9]);
        only(&check_file(&path), Severity::Error, pad, "value padding");
    }

    #[test]
    fn counts_and_syncsize_are_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = kvseq(dir.path(), "c.kvseq", &KvSeqOptions::default(), 2);
        let sb = KvSeq::open_path(&path, false).unwrap().superblock().clone();
        let entries_at = sb.value_offset(var::ENTRIES).unwrap();
        patch(&path, entries_at, &5i64.to_be_bytes());
        let report = check_file(&path);
        only(
            &report,
            Severity::Warning,
            entries_at,
            "ENTRIES is 5, but 2",
        );
        assert!(report.is_clean(false) && !report.is_clean(true));
        patch(&path, entries_at, &2i64.to_be_bytes());
        let sync_at = sb.value_offset(var::SYNCSIZE).unwrap();
        patch(&path, sync_at, &1_000_000i64.to_be_bytes());
        only(&check_file(&path), Severity::Warning, sync_at, "SYNCSIZE");
    }

    #[test]
    fn unreadable_files_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        let missing = check_file(&dir.path().join("nope"));
        assert_eq!(missing.errors(), 1);
        assert_eq!(missing.problems[0].offset, None);
        let path = dir.path().join("junk");
        fs::write(&path, b"#!WINKMEnot a superblock at all").unwrap();
        only(&check_file(&path), Severity::Error, 8, "SBSIZE");
        let (path, _) = kvseq(dir.path(), "f.kvseq", &KvSeqOptions::default(), 1);
        patch(&path, FORMAT_VALUE_OFFSET, &0x99i64.to_be_bytes());
        only(
            &check_file(&path),
            Severity::Error,
            FORMAT_VALUE_OFFSET,
            "unknown FORMAT 0x99",
        );
    }

    fn indexed(dir: &Path, n: usize) -> (PathBuf, PathBuf, Vec<KvPointer>) {
        let (data, ptrs) = kvseq(dir, "x.kvseq", &KvSeqOptions::default(), n);
        let kv = KvSeq::open_path(&data, false).unwrap();
        let path = dir.join("x.hindex");
        let opts = HIndexOptions {
            htsize: 16,
            ..HIndexOptions::default()
        };
        let mut index = HIndex::create_path(&path, &opts).unwrap();
        for (i, ptr) in ptrs.iter().enumerate() {
            index
                .insert(format!("key-{i}").as_bytes(), *ptr, &kv)
                .unwrap();
        }
        index.sync(0).unwrap();
        (data, path, ptrs)
    }

    #[test]
    fn hindex_cells_are_verified_against_the_datafile() {
        let dir = tempfile::tempdir().unwrap();
        let (data, path, ptrs) = indexed(dir.path(), 5);
        let report = check_file(&path);
        assert!(report.is_clean(true), "{:#?}", report.problems);
        assert!(
            report.summary.contains("5 used, 0 deleted, verified"),
            "{}",
            report.summary
        );
        let index = HIndex::open_path(&path, false).unwrap();
        let (cell, ptr) = index.used_cells().next().unwrap().unwrap();
        drop(index);
        let at = 4096 + cell * 16;
        // A pointer to another key's entry: the stored hash no longer matches.
        let wrong = ptrs.iter().find(|p| **p != ptr).unwrap();
        patch(&path, at, &(wrong.0 as i64).to_be_bytes());
        only(&check_file(&path), Severity::Error, at + 8, "stored hash");
        // Without the datafile only the structure is checked.
        fs::remove_file(&data).unwrap();
        assert!(check_file(&path).is_clean(true));
    }

    #[test]
    fn hindex_free_cells_need_zero_hashes_and_counts_match() {
        let dir = tempfile::tempdir().unwrap();
        let (_, path, _) = indexed(dir.path(), 2);
        let index = HIndex::open_path(&path, false).unwrap();
        let free = (0..16)
            .find(|c| index.get(*c).unwrap() == crate::format::hindex::Cell::Free)
            .unwrap();
        let aentries_at = index.superblock().value_offset(var::AENTRIES).unwrap();
        drop(index);
        patch(&path, aentries_at, &9i64.to_be_bytes());
        only(
            &check_file(&path),
            Severity::Warning,
            aentries_at,
            "AENTRIES is 9, but 2",
        );
        patch(&path, aentries_at, &2i64.to_be_bytes());
        let at = 4096 + free * 16;
        patch(&path, at, &(-5i64).to_be_bytes());
        // The open's spot check or the full scan finds it; either way at the cell's offset.
        only(&check_file(&path), Severity::Error, at, "-5");
    }

    #[test]
    fn perm_hashes_are_verified_against_the_datafile() {
        let dir = tempfile::tempdir().unwrap();
        let (_, ptrs) = kvseq(dir.path(), "y.kvseq", &KvSeqOptions::default(), 3);
        let path = dir.path().join("y.perm");
        let opts = PermOptions {
            htsize: Some(7),
            purpose: Purpose::new("P").unwrap(),
            ..PermOptions::default()
        };
        let mut perm = Perm::create_path(&path, &opts).unwrap();
        for (i, ptr) in ptrs.iter().enumerate() {
            let hash = perm.hash_key(format!("key-{i}").as_bytes());
            perm.append(Pair { ptr: *ptr, hash }).unwrap();
        }
        perm.sync().unwrap();
        let wrong = (perm.hash_key(b"key-1") + 1) % 7;
        drop(perm);
        assert!(check_file(&path).is_clean(true));
        let at = 4096 + PAIR_SIZE + 8;
        patch(&path, at, &(wrong as i64).to_be_bytes());
        only(&check_file(&path), Severity::Error, at, "pair 1 has hash");
        patch(&path, at - 8, &1i64.to_be_bytes());
        only(&check_file(&path), Severity::Error, at - 8, "not an entry");
    }

    #[test]
    fn superblock_room_and_purpose() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = kvseq(dir.path(), "s.kvseq", &KvSeqOptions::default(), 0);
        patch(&path, 4000, &[1]);
        only(&check_file(&path), Severity::Warning, 4000, "free room");
        patch(&path, 4000, &[0]);
        patch(&path, PURPOSE_VALUE_OFFSET, b"AB\0\0    ");
        only(
            &check_file(&path),
            Severity::Warning,
            PURPOSE_VALUE_OFFSET + 2,
            "PURPOSE",
        );
    }

    #[test]
    fn entry_starts() {
        let dir = tempfile::tempdir().unwrap();
        let (path, ptrs) = kvseq(dir.path(), "e.kvseq", &KvSeqOptions::default(), 3);
        let kv = KvSeq::open_path(&path, false).unwrap();
        assert!(is_entry_start(&kv, ptrs[2]).unwrap());
        assert!(!is_entry_start(&kv, KvPointer(ptrs[1].0 + 1)).unwrap());
        assert!(!is_entry_start(&kv, KvPointer(1 << 40)).unwrap());
    }
}
