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
//!
//! The code: `report.rs` holds what a check finds ([`Report`], [`Problem`], [`Severity`]), also
//! used by the filesys's and the store's checks; this file the checks every file gets (the
//! superblock) and the helpers the format checkers share; `kvseq.rs`, `hindex.rs` and `perm.rs`
//! one format each.

mod hindex;
mod kvseq;
mod perm;
mod report;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::format::kvseq::{EntryLayout, KvPointer, KvSeq};
use crate::format::superblock::{Format, Superblock, VarName};
use crate::format::superblock::{FORMAT_VALUE_OFFSET, PURPOSE_VALUE_OFFSET};
use crate::storage::{read_exact_at, FileStorage, Storage};

pub use report::{Problem, Report, Severity};

use hindex::check_hindex;
use kvseq::check_kvseq;
use perm::check_perm;

/// Cells or pairs read per chunk: bounds memory on tables of any size.
const CHUNK: u64 = 4096;
/// Bytes compared per read when checking that a range is zero.
const ZERO_CHUNK: u64 = 64 << 10;

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
