//! The kvseq checker: every entry decodes, gaps and padding are zero, the walk ends at FILESIZE,
//! the counts and SYNCSIZE agree with it.

use std::path::Path;

use super::{compare_count, expect_zero, Report};
use crate::format::kvseq::{EntryLayout, KvSeq};
use crate::format::repr::Repr;
use crate::format::superblock::var;

/// What a walk over a kvseq's entries found.
struct Walk {
    entries: u64,
    live: u64,
    /// The end of the last entry, or `None` when the walk stopped at damage.
    end: Option<u64>,
}

pub(super) fn check_kvseq(path: &Path, report: &mut Report) -> Option<String> {
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
