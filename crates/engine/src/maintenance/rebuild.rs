//! `wink recover --rebuild-index`: the title index rebuilt from the title records, trusting
//! nothing a checksum does not cover.
//!
//! A title record is found by its name, the key of its inode in the meta filesys; that key is
//! not under the record's checksum, the record's own copy of it is (records written before
//! the copy was kept have none). A plain reindex of the meta filesys trusts the inode keys, so a
//! damaged key would file a title's renders under another name. This rebuild reindexes, then
//! walks every record:
//! - a record that does not decode (checksum, layout) is refused: it stays where it is and
//!   reads of its title keep failing with the damage, never answering without it;
//! - a record whose own key differs from its inode's is written again under its own key and
//!   the misnamed copy removed (unless a record under the right key exists: then both are
//!   reported and left alone);
//! - a title the archive holds with no record gets an empty one that says so, since reads look
//!   in the archive only for titles whose record does (a title whose record was removed by an
//!   older version while the archive held it, or whose record was lost).

use crate::error::Result;
use crate::filesys::{self, Filesys};
use crate::store::record::{InArchive, TitleRecord};
use crate::store::{meta_base, Store, StoreOptions};

/// What a rebuild found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Title records indexed by the reindex of the meta filesys.
    pub indexed: u64,
    /// Records that name the key they were found under.
    pub verified: u64,
    /// Records that keep no key of their own (written by an older version): indexed by their
    /// inode's key, which nothing can verify.
    pub unverified: u64,
    /// Records written again under their own key: (the key they were found under, their own).
    pub renamed: Vec<(String, String)>,
    /// Records refused, with the damage: their titles' reads keep failing.
    pub refused: Vec<String>,
    /// Archived titles given a record.
    pub archive_only: Vec<String>,
}

/// Rebuilds the title index of the store in `dir` from its records (see the module doc);
/// takes the writer's lock. Committed when it returns.
pub fn rebuild_index(dir: &std::path::Path, opts: &StoreOptions) -> Result<RebuildReport> {
    let open = filesys::OpenOptions {
        writable: true,
        wait: opts.wait,
        clock: opts.clock.clone(),
        drop_behind: None,
        background_appends: false,
    };
    let mut report = RebuildReport {
        indexed: Filesys::reindex_in(opts.vfs.clone(), &meta_base(dir), &open)?,
        ..RebuildReport::default()
    };
    let mut store = Store::open(dir, opts)?;
    store.writer()?;
    let mut misnamed = Vec::new();
    for item in store.meta().iter() {
        let file = item?;
        let path = store.meta().data().path();
        let decoded = store
            .meta()
            .read_stat(&file)
            .and_then(|bytes| Ok((TitleRecord::decode_any(&bytes, path, file.inode.0)?, bytes)));
        match decoded {
            Err(e) => report
                .refused
                .push(format!("{:?}: {e}", String::from_utf8_lossy(&file.name))),
            Ok(((None, _), _)) => report.unverified += 1,
            Ok(((Some(own), _), _)) if own == file.name => report.verified += 1,
            Ok(((Some(own), _), bytes)) => misnamed.push((file, own, bytes)),
        }
    }
    for (file, own, bytes) in misnamed {
        let (found, named) = (
            String::from_utf8_lossy(&file.name).into_owned(),
            String::from_utf8_lossy(&own).into_owned(),
        );
        let taken = store.meta().stat(&own)?.is_some();
        let indexed_here = store.meta().stat(&file.name)?.map(|s| s.inode) == Some(file.inode);
        if taken || !indexed_here || !is_record_name(&own) {
            report.refused.push(format!(
                "{found:?}: the record names {named:?}, which {}; left as it is",
                if taken {
                    "has a record of its own"
                } else {
                    "cannot be written as found"
                }
            ));
            continue;
        }
        store.meta_mut().put(&own, 0, &bytes)?;
        store.meta_mut().delete(&file.name)?;
        report.renamed.push((found, named));
    }
    let archived = match store.archive_tier()? {
        Some(archive) => archive.titles()?,
        None => Vec::new(),
    };
    for key in archived {
        if store.meta().stat(&key)?.is_none() {
            let rec = TitleRecord {
                archive: InArchive::Yes,
                ..TitleRecord::default()
            };
            store.save(&key, &rec)?;
            report
                .archive_only
                .push(String::from_utf8_lossy(&key).into_owned());
        }
    }
    store.commit()?;
    Ok(report)
}

/// Whether `name` is a record name the store could have written: `DOMAIN/TITLE`, both valid.
fn is_record_name(name: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(name) else {
        return false;
    };
    text.split_once('/').is_some_and(|(domain, title)| {
        crate::store::key::check_domain(domain).is_ok()
            && crate::store::key::check_title(title).is_ok()
    })
}
