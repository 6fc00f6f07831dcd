//! `wink check DIR`: a whole store checked — configuration, the meta filesys and every container
//! (each with [`crate::filesys::check::check_filesys`]), every title record (checksum, order), and
//! every render's location (inside its container's datafile, inside a live data entry of exactly
//! the value's length). Values themselves are verified by `wink scrub`; a render whose value is in
//! quarantine (`wink scrub --quarantine`) is a warning, so that `--strict` fails until it is
//! restored or put again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::check::{Problem, Report, Severity};
use crate::filesys::check::check_filesys;
use crate::filesys::{file_path, Filesys, OpenOptions};
use crate::store::quarantine;
use crate::store::record::Render;

use super::{container_base, meta_base, Store, StoreOptions};

/// Checks the store in `dir` (read-only).
pub fn check_store(dir: &Path) -> Report {
    let mut report = Report {
        path: dir.to_path_buf(),
        format: None,
        summary: format!("store {}", dir.display()),
        problems: Vec::new(),
    };
    report
        .problems
        .extend(crate::check::check_file(&dir.join("store")).problems);
    // The title records' own index is rebuilt from their checksummed keys, not from the inode
    // keys a plain reindex of the meta filesys would trust.
    let rebuild = format!("run `wink recover --rebuild-index {}`", dir.display());
    report.problems.extend(
        check_filesys(&meta_base(dir))
            .problems
            .into_iter()
            .map(|mut p| {
                p.what = p.what.replace("run `wink fs reindex`", &rebuild);
                p
            }),
    );
    let store = match Store::open(dir, &StoreOptions::read_only()) {
        Ok(s) => s,
        Err(e) => {
            report
                .problems
                .push(Problem::from_error(&dir.join("store"), &e));
            return report;
        }
    };
    let mut containers = Vec::new();
    for id in store.container_ids().unwrap_or_default() {
        let base = container_base(dir, id);
        report.problems.extend(check_filesys(&base).problems);
        // The container as a reader recovers it: after a crash its last commit may be only in its
        // journal, and the superblock on disk names the commit before.
        let entries = Filesys::open(&base, &OpenOptions::read_only())
            .ok()
            .map(|fs| Entries {
                first: fs.data().first().0,
                filesize: fs.data().filesize(),
            });
        containers.push((id, entries));
    }
    // Few entries (one per damaged value): held in memory, renders looked up in them.
    let quarantine: HashMap<(u32, u64), PathBuf> = match store.quarantined() {
        Ok(entries) => entries
            .into_iter()
            .map(|e| {
                let path = quarantine::description_path(dir, e.container, e.offset);
                ((e.container, e.offset), path)
            })
            .collect(),
        Err(e) => {
            report
                .problems
                .push(Problem::from_error(&quarantine::dir_of(dir), &e));
            HashMap::new()
        }
    };
    let (mut titles, mut renders, mut damaged) = (0u64, 0u64, 0u64);
    for item in store.records.fs.iter() {
        let file = match item {
            Ok(f) => f,
            Err(e) => {
                report
                    .problems
                    .push(Problem::from_error(store.records.fs.data().path(), &e));
                break;
            }
        };
        let meta_path = store.records.fs.data().path().to_path_buf();
        let rec = match super::record_of(&store.records.fs, &file) {
            Ok(r) => r,
            Err(e) => {
                let mut p = Problem::from_error(&meta_path, &e);
                p.what = format!(
                    "title {:?}: {}",
                    String::from_utf8_lossy(&file.name),
                    p.what
                );
                if matches!(&e, crate::Error::Corrupt { what, .. } if what == "title record key") {
                    p.what = format!("{}; {rebuild}", p.what);
                }
                report.problems.push(p);
                continue;
            }
        };
        titles += 1;
        for (i, render) in rec.renders.iter().enumerate() {
            renders += 1;
            if i > 0 && precedes(render, &rec.renders[i - 1]) {
                report.problems.push(Problem {
                    path: meta_path.clone(),
                    offset: Some(file.inode.0),
                    severity: Severity::Error,
                    what: format!(
                        "title record {:?}: renders out of order at {i}",
                        String::from_utf8_lossy(&file.name)
                    ),
                });
            }
            let loc = render.location;
            if let Some(entry) = quarantine.get(&(loc.container, loc.offset)) {
                damaged += 1;
                report.problems.push(Problem {
                    path: file_path(&container_base(dir, loc.container), "data"),
                    offset: Some(loc.offset),
                    severity: Severity::Warning,
                    what: format!(
                        "title {:?} rev {} tid {}: value damaged, quarantined (see {}); reads of \
                         it fail; restore it from a snapshot or put the render again",
                        String::from_utf8_lossy(&file.name),
                        render.rev,
                        render.tid,
                        entry.display()
                    ),
                });
            }
            if let Some(what) = check_location(render, &containers) {
                report.problems.push(Problem {
                    path: meta_path.clone(),
                    offset: Some(file.inode.0),
                    severity: Severity::Error,
                    what: format!(
                        "title {:?} rev {} tid {}: {what}",
                        String::from_utf8_lossy(&file.name),
                        render.rev,
                        render.tid
                    ),
                });
            }
        }
    }
    match store.archive_tier() {
        Ok(Some(archive)) => {
            report
                .problems
                .extend(check_filesys(store.archive_base()).problems);
            // Every block decompresses and every revision matches its map entry and CRC-32.
            report.problems.extend(archive.verify());
        }
        Ok(None) => {}
        Err(e) => {
            report
                .problems
                .extend(check_filesys(store.archive_base()).problems);
            report
                .problems
                .push(Problem::from_error(store.archive_base(), &e));
        }
    }
    report.summary = format!(
        "store {}: {titles} titles, {renders} renders, {} containers{}",
        dir.display(),
        containers.len(),
        if damaged > 0 {
            format!(", {damaged} renders damaged and quarantined")
        } else {
            String::new()
        }
    );
    report
}

/// True when `a` should come before `b` in a record (newest first).
fn precedes(a: &Render, b: &Render) -> bool {
    a.rev > b.rev || (a.rev == b.rev && super::key::cmp_tid(a.tid, b.tid).is_gt())
}

/// Where a container's entries lie in its datafile, at its last commit.
struct Entries {
    first: u64,
    filesize: u64,
}

fn check_location(render: &Render, containers: &[(u32, Option<Entries>)]) -> Option<String> {
    let loc = render.location;
    if loc.len == 0 {
        return None;
    }
    let Some((_, kv)) = containers.iter().find(|(id, _)| *id == loc.container) else {
        return Some(format!(
            "names container {} which does not exist",
            loc.container
        ));
    };
    let kv = kv.as_ref()?;
    let end = loc.offset.checked_add(loc.len);
    if end.is_none_or(|e| e > kv.filesize) || loc.offset < kv.first {
        return Some(format!(
            "value at {}..+{} lies outside container {}'s entries (FILESIZE {})",
            loc.offset, loc.len, loc.container, kv.filesize
        ));
    }
    None
}

impl Store {
    /// The meta filesys (for maintenance tools).
    pub fn meta(&self) -> &Filesys {
        self.records.fs()
    }
}
