//! Compaction of the archive: rewritten without taken-down or dead bytes into a new archive, which
//! the generation file switches to.

use crate::archive::rewrite::RewriteReport;
use crate::archive::Archive;
use crate::error::{Error, Result};
use crate::filesys;
use crate::store::Store;

use super::report::{archive_worth_it, CompactReport};
use super::CompactOptions;

/// Rewrites the archive whether or not it holds anything to reclaim: what converts an
/// archive of format 1 to format 2 (`wink archive --rewrite`). Reads go on meanwhile, from
/// the old archive until the switch.
pub fn rewrite_archive(store: &mut Store) -> Result<RewriteReport> {
    archive_policy_set(store)?;
    store.writer()?;
    switch_archive(store)
}

/// Rewrites the archive without taken-down bytes or dead entries when it is worth it: into
/// `archive.gN`, named `pending_archive` first; the switch names it `archive` in the
/// generation file; the old one is then removed.
pub(super) fn compact_archive(
    store: &mut Store,
    opts: &CompactOptions,
    report: &mut CompactReport,
) -> Result<()> {
    let Some(archive) = store.archive() else {
        return Ok(());
    };
    let due = archive.rewrite_due()?;
    let worth = archive_worth_it(&due, opts.min_dead);
    report.archive_due = Some(due);
    if !worth {
        return Ok(());
    }
    report.archive_rewrite = Some(switch_archive(store)?);
    Ok(())
}

fn archive_policy_set(store: &Store) -> Result<()> {
    match store.archive() {
        Some(_) => Ok(()),
        None => Err(Error::invalid(format!(
            "{}: this store has no archive (wink init --archive)",
            store.dir().display()
        ))),
    }
}

/// Writes the archive anew into `archive.gN`, named `pending_archive` first; the switch
/// names it `archive` in the generation file; the old one is then removed.
fn switch_archive(store: &mut Store) -> Result<RewriteReport> {
    let Some(archive) = store.archive() else {
        return Err(Error::invalid("no archive"));
    };
    let mut g = store.generation()?;
    let name = format!("archive.g{}", g.generation + 1);
    let dest = store.dir().join(&name);
    if store.vfs().exists(&filesys::file_path(&dest, "data")) {
        Archive::remove_in(store.vfs().as_ref(), &dest)?;
    }
    g.pending_archive = name.clone();
    store.write_generation(&g)?;
    let open = filesys::OpenOptions {
        writable: true,
        wait: false,
        clock: store.clock().clone(),
        drop_behind: Some(8 << 20),
        background_appends: true,
    };
    let rewritten = archive.rewrite_into(store.vfs().clone(), &dest, &open, |_, _| {});
    let rewritten = match rewritten {
        Ok(r) => r,
        Err(e) => {
            Archive::remove_in(store.vfs().as_ref(), &dest)?;
            g.pending_archive.clear();
            store.write_generation(&g)?;
            return Err(e);
        }
    };
    let old = g.archive_base(store.dir());
    g.retired_archive = std::mem::replace(&mut g.archive, name);
    g.pending_archive.clear();
    g.generation += 1;
    store.write_generation(&g)?;
    store.reopen_archive(&dest)?;
    Archive::remove_in(store.vfs().as_ref(), &old)?;
    g.retired_archive.clear();
    store.write_generation(&g)?;
    Ok(rewritten)
}
