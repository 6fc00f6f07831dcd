//! `wink check BASE`: the files of a filesys checked together.
//!
//! Beyond each file's own structure ([`crate::check::check_file`]): every live inode's checksum
//! and data pointers (own, live data entries of the recorded sizes); index ↔ data (each live name
//! is indexed at its inode, each used cell names a live inode); ITOTSZ, DTOTSZ and NEXTFID; in the
//! ao variant, inodes in ascending mtime order and the time marks exactly where the rule puts them.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::check::{check_file, Problem, Report, Severity};
use crate::error::{Error, Result};
use crate::format::kvseq::KvPointer;

use super::inode::{classify, data_key, inode_key, Inode, KeyKind};
use super::timeindex::{LASTMT, TIMEMARK};
use super::{file_path, Filesys, OpenOptions, DTOTSZ, FILES, ITOTSZ, NEXTFID};

/// Checks the filesys at `base` (read-only).
pub fn check_filesys(base: &Path) -> Report {
    let mut report = Report {
        path: base.to_path_buf(),
        format: None,
        summary: format!("filesys {}", base.display()),
        problems: Vec::new(),
    };
    for ext in FILES {
        let path = file_path(base, ext);
        // An empty journal slot holds nothing (a crash came between its creation and its
        // first journal).
        let empty_slot = ext.starts_with("jnl") && path.metadata().is_ok_and(|m| m.len() == 0);
        if path.exists() && !empty_slot {
            report.problems.extend(check_file(&path).problems);
        }
    }
    match Filesys::open(base, &OpenOptions::read_only()) {
        Ok(fs) => {
            check_roles(&fs, &mut report);
            if let Err(e) = check_open(&fs, &mut report) {
                report
                    .problems
                    .push(Problem::from_error(&file_path(base, "data"), &e));
            }
        }
        Err(e) => report
            .problems
            .push(Problem::from_error(&file_path(base, "data"), &e)),
    }
    report
}

/// What a filesys's writers put in its files' headers, which readers do not depend on (so a
/// flipped byte there reads on): a warning, so that it is seen before a tool that does depend on
/// it (`file -m magic/wink`, another implementation) trips over it.
fn check_roles(fs: &Filesys, report: &mut Report) {
    let purposes = [
        (
            fs.data().superblock(),
            fs.data().path(),
            super::DATA_PURPOSE,
        ),
        (
            fs.index().superblock(),
            fs.index().path(),
            super::INDEX_PURPOSE,
        ),
    ];
    let time = fs.time_index().map(|t| {
        (
            t.kv().superblock(),
            t.kv().path(),
            super::timeindex::PURPOSE,
        )
    });
    for (sb, path, want) in purposes.into_iter().chain(time) {
        if sb.purpose() != want {
            problem(
                report,
                path,
                crate::format::superblock::PURPOSE_VALUE_OFFSET,
                Severity::Warning,
                format!("PURPOSE is {}, where a filesys writes {want}", sb.purpose()),
            );
        }
    }
    let (idx, path) = (fs.index().superblock(), fs.index().path());
    for (name, want) in [
        (
            crate::format::superblock::var::HTFREE,
            crate::format::hindex::WRITER_HTFREE,
        ),
        (
            crate::format::superblock::var::HTDEL,
            crate::format::hindex::WRITER_HTDEL,
        ),
    ] {
        if let Some(found) = idx.get(name).filter(|v| *v != want) {
            problem(
                report,
                path,
                idx.value_offset(name).unwrap_or(0),
                Severity::Warning,
                format!("{name} is {found}, where a filesys writes {want}"),
            );
        }
    }
}

struct Walk {
    live: HashMap<Vec<u8>, KvPointer>,
    referenced: HashSet<u64>,
    live_data: Vec<u64>,
    itotsz: i64,
    dtotsz: i64,
    max_fileid: u64,
    /// (mtime, inode pointer) of every inode in file order (ao checks).
    inodes: Vec<(i64, KvPointer)>,
}

fn problem(report: &mut Report, path: &Path, offset: u64, severity: Severity, what: String) {
    report.problems.push(Problem {
        path: path.to_path_buf(),
        offset: Some(offset),
        severity,
        what,
    });
}

fn check_open(fs: &Filesys, report: &mut Report) -> Result<()> {
    let walk = walk_data(fs, report)?;
    let path = fs.data().path().to_path_buf();
    for ptr in &walk.live_data {
        if !walk.referenced.contains(ptr) {
            problem(
                report,
                &path,
                *ptr,
                Severity::Warning,
                "live data entry no live inode refers to (space leak)".into(),
            );
        }
    }
    for (name, want, have) in [
        ("ITOTSZ", walk.itotsz, fs.var(ITOTSZ)),
        ("DTOTSZ", walk.dtotsz, fs.var(DTOTSZ)),
    ] {
        if have != Some(want) {
            problem(
                report,
                &path,
                fs.data()
                    .superblock()
                    .value_offset(crate::format::superblock::VarName::new(name.as_bytes()))
                    .unwrap_or(0),
                Severity::Warning,
                format!("{name} is {have:?}, the live files add up to {want}"),
            );
        }
    }
    if let Some(next) = fs.var(NEXTFID) {
        if u64::try_from(next).map_or(true, |n| n <= walk.max_fileid) {
            problem(
                report,
                &path,
                fs.data().superblock().value_offset(NEXTFID).unwrap_or(0),
                Severity::Error,
                format!(
                    "NEXTFID {next} is not above the largest FILEID {}",
                    walk.max_fileid
                ),
            );
        }
    }
    check_index(fs, &walk, report)?;
    if fs.is_ao() {
        check_time(fs, &walk, report)?;
    }
    Ok(())
}

fn walk_data(fs: &Filesys, report: &mut Report) -> Result<Walk> {
    let data = fs.data();
    let path = data.path().to_path_buf();
    let mut w = Walk {
        live: HashMap::new(),
        referenced: HashSet::new(),
        live_data: Vec::new(),
        itotsz: 0,
        dtotsz: 0,
        max_fileid: 0,
        inodes: Vec::new(),
    };
    for item in data.iter(data.first(), false) {
        let info = item?;
        let ptr = info.layout.ptr;
        match classify(&info.key) {
            KeyKind::Data { .. } => {
                if !info.layout.deleted {
                    w.live_data.push(ptr.0);
                }
            }
            KeyKind::Inode { name, .. } => {
                let entry = data.read(ptr)?;
                let inode = match Inode::decode(&entry.value, &path, entry.value_offset) {
                    Ok(i) => i,
                    Err(e) if info.layout.deleted => {
                        problem(
                            report,
                            &path,
                            ptr.0,
                            Severity::Warning,
                            format!("deleted inode does not decode: {e}"),
                        );
                        continue;
                    }
                    Err(e) => {
                        report.problems.push(Problem::from_error(&path, &e));
                        continue;
                    }
                };
                w.inodes.push((inode.mtime, ptr));
                w.max_fileid = w.max_fileid.max(inode.fileid);
                if info.layout.deleted {
                    continue;
                }
                if w.live.insert(name.to_vec(), ptr).is_some() {
                    problem(
                        report,
                        &path,
                        ptr.0,
                        Severity::Error,
                        format!(
                            "a second live inode for {:?} (the earlier version was not marked \
                             deleted)",
                            String::from_utf8_lossy(name)
                        ),
                    );
                }
                w.itotsz += inode.size as i64;
                w.dtotsz += inode.lsize as i64;
                check_inode_data(fs, &inode, ptr, &mut w, report);
            }
            KeyKind::Other => problem(
                report,
                &path,
                ptr.0,
                Severity::Error,
                format!(
                    "key {:?} is neither an inode nor a data entry",
                    String::from_utf8_lossy(&info.key)
                ),
            ),
        }
    }
    Ok(w)
}

fn check_inode_data(fs: &Filesys, inode: &Inode, at: KvPointer, w: &mut Walk, report: &mut Report) {
    let path = fs.data().path();
    for (n, &(ptr, size)) in inode.data.iter().enumerate() {
        w.referenced.insert(ptr.0);
        let expected = data_key(inode.fileid, n as u64);
        match fs.data().read_key(ptr) {
            Ok((layout, key)) if key == expected && !layout.deleted && layout.value_len == size => {
            }
            Ok((layout, key)) => problem(
                report,
                path,
                at.0,
                Severity::Error,
                format!(
                    "data pointer {n} ({ptr}) names {}{:?} of {} bytes, not live {:?} of {size}",
                    if layout.deleted { "deleted " } else { "" },
                    String::from_utf8_lossy(&key),
                    layout.value_len,
                    String::from_utf8_lossy(&expected)
                ),
            ),
            Err(e) => problem(
                report,
                path,
                at.0,
                Severity::Error,
                format!("data pointer {n} ({ptr}): {e}"),
            ),
        }
    }
}

fn check_index(fs: &Filesys, walk: &Walk, report: &mut Report) -> Result<()> {
    let idx_path = fs.index().path().to_path_buf();
    for (name, ptr) in &walk.live {
        let key = inode_key(name);
        match fs.index().lookup(&key, fs.data()) {
            Ok(Some(found)) if found.ptr == *ptr => {}
            Ok(Some(found)) => problem(
                report,
                &idx_path,
                fs.index().superblock().sbsize() + found.cell * 16,
                Severity::Error,
                format!(
                    "{:?} is indexed at {} but its live inode is at {ptr}; run `wink fs reindex`",
                    String::from_utf8_lossy(name),
                    found.ptr
                ),
            ),
            Ok(None) => problem(
                report,
                &idx_path,
                0,
                Severity::Error,
                format!(
                    "live file {:?} (inode at {ptr}) is not in the index; run `wink fs reindex`",
                    String::from_utf8_lossy(name)
                ),
            ),
            Err(e) => report.problems.push(Problem::from_error(&idx_path, &e)),
        }
    }
    let used = fs.index().live();
    if used != walk.live.len() as u64 {
        problem(
            report,
            &idx_path,
            0,
            Severity::Error,
            format!(
                "{used} used cells for {} live files; run `wink fs reindex`",
                walk.live.len()
            ),
        );
    }
    Ok(())
}

fn check_time(fs: &Filesys, walk: &Walk, report: &mut Report) -> Result<()> {
    let Some(time) = fs.time_index() else {
        return Err(Error::invalid("an ao filesys without a time index"));
    };
    let path = time.kv().path().to_path_buf();
    let data_path = fs.data().path().to_path_buf();
    let mut expected = Vec::new();
    let mut last: Option<(i64, i64)> = None; // (mtime, period)
    for &(mtime, ptr) in &walk.inodes {
        if let Some((prev, _)) = last {
            if mtime < prev {
                problem(
                    report,
                    &data_path,
                    ptr.0,
                    Severity::Error,
                    format!("ao order: mtime {mtime} after {prev}"),
                );
            }
        }
        let period = time.period(mtime);
        if last.is_none_or(|(_, p)| period > p) {
            expected.push((period, ptr));
        }
        last = Some((mtime, last.map_or(period, |(_, p)| p.max(period))));
    }
    let actual: Vec<(i64, KvPointer)> = (0..time.len())
        .map(|i| time.mark(i))
        .collect::<Result<_>>()?;
    if actual != expected {
        let first_diff = actual
            .iter()
            .zip(&expected)
            .position(|(a, e)| a != e)
            .unwrap_or(actual.len().min(expected.len()));
        problem(
            report,
            &path,
            time.kv().first().0 + first_diff as u64 * 16,
            Severity::Error,
            format!(
                "time marks differ from the inodes from mark {first_diff}: found {:?}, \
                 expected {:?}",
                actual.get(first_diff),
                expected.get(first_diff)
            ),
        );
    }
    let var_at = |name| time.kv().superblock().value_offset(name).unwrap_or(0);
    if let Some(&(mark, _)) = expected.last() {
        if time.kv().var(TIMEMARK) != Some(mark) {
            problem(
                report,
                &path,
                var_at(TIMEMARK),
                Severity::Error,
                format!("TIMEMARK {:?}, expected {mark}", time.kv().var(TIMEMARK)),
            );
        }
    }
    if let Some(&(mtime, _)) = walk.inodes.last() {
        if time.kv().var(LASTMT) != Some(mtime) {
            problem(
                report,
                &path,
                var_at(LASTMT),
                Severity::Error,
                format!("LASTMT {:?}, expected {mtime}", time.kv().var(LASTMT)),
            );
        }
    }
    Ok(())
}
