//! The hindex checker: the table's size, every cell, the counts and the load; with a sibling
//! datafile, every used cell against the key it names.

use std::path::Path;

use super::{compare_count, key_at, open_datafile, Report, CHUNK};
use crate::format::hindex::{HIndex, WRITER_HTDEL, WRITER_HTFREE};
use crate::format::kvseq::{KvPointer, KvSeq};
use crate::format::superblock::var;
use crate::storage::read_exact_at;

/// Load above which a hindex should have grown: the default load limit (docs/FORMAT.md § hindex,
/// "Load limit and growth").
const MAX_LOAD: f64 = 0.75;

/// Cell counts found by a scan.
#[derive(Default)]
struct Tally {
    not_free: u64,
    used: u64,
}

pub(super) fn check_hindex(path: &Path, report: &mut Report) -> Option<String> {
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
        let what = format!(
            "cell {cell} holds {word0}: neither a kv_pointer (≥ 0), HTFREE {htfree} nor \
             HTDEL {htdel}"
        );
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
