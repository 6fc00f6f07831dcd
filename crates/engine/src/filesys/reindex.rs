//! Rebuilding a filesys's index from its datafile alone: for an index that is damaged, or
//! lost (`wink fs reindex`).

use std::path::Path;
use std::sync::Arc;

use super::{error_path, file_path, inode, journal, Filesys, OpenOptions, INDEX_PURPOSE};
use crate::error::{Error, Result};
use crate::format::hindex::{HIndex, HIndexOptions};
use crate::storage::{sibling, Storage};
use crate::vfs::Vfs;

impl Filesys {
    /// Rebuilds `BASE.idx` from `BASE.data` and commits; works when the index is damaged (its
    /// spot check is skipped; an index that cannot be opened at all is moved aside to
    /// `BASE.idx.broken` and replaced). Returns the number of files indexed.
    pub fn reindex_in(vfs: Arc<dyn Vfs>, base: &Path, open: &OpenOptions) -> Result<u64> {
        let idx_path = file_path(base, "idx");
        let mut fs = match Filesys::open_inner(vfs.clone(), base, open, false) {
            Ok(fs) => fs,
            Err(e) if e.is_corruption() && error_path(&e) == Some(idx_path.as_path()) => {
                let broken = sibling(&idx_path, "broken");
                vfs.rename(&idx_path, &broken)?;
                // The failed open already replayed the journal into the other files; emptied
                // now, it can never replay the old index's cells into the new one.
                let seq = journal::last_seq(&journal::read_slots(vfs.as_ref(), base)?);
                journal::write_empty(vfs.as_ref(), base, seq)?;
                let opts = HIndexOptions {
                    purpose: INDEX_PURPOSE,
                    htsize: 16,
                    cellsz: 2,
                    time: open.clock.now(),
                    ..HIndexOptions::default()
                };
                HIndex::create(vfs.create_new(&idx_path)?, &opts)?;
                let mut fs = Filesys::open_inner(vfs, base, open, false)?;
                fs.recovery.actions.push(format!(
                    "{}: could not be opened ({e}); moved to {}",
                    idx_path.display(),
                    broken.display()
                ));
                fs
            }
            Err(e) => return Err(e),
        };
        let count = fs.reindex()?;
        fs.sync()?;
        Ok(count)
    }

    /// Rebuilds `BASE.idx` from `BASE.data` alone and swaps it in atomically.
    pub fn reindex(&mut self) -> Result<u64> {
        self.check_writable()?;
        // Its keys are read here, in file order; the rebuilt table reads ahead afresh.
        self.ahead = None;
        self.ahead_for = 0;
        self.quiesce()?;
        let live = self.data.live_entries().unwrap_or(0).max(1);
        let htsize = (live * 2).next_power_of_two().max(16);
        let temp = self
            .idx
            .storage()
            .create_temp("reindex")
            .map_err(|e| Error::io(self.idx.path(), None, e))?;
        let mut fresh = HIndex::create(
            temp,
            &HIndexOptions {
                purpose: INDEX_PURPOSE,
                htsize,
                cellsz: 2,
                time: self.clock.now(),
                ..HIndexOptions::default()
            },
        )?;
        let mut count = 0;
        for item in self.files(self.data.first(), None) {
            let stat = item?;
            let key = inode::inode_key(&stat.name);
            if fresh.needs_growth() {
                fresh.grow(&self.data)?;
            }
            match fresh.lookup(&key, &self.data)? {
                // The later version of a name counts.
                Some(found) => fresh.set_pointer(found.cell, stat.inode)?,
                None => {
                    fresh.insert(&key, stat.inode, &self.data)?;
                    count += 1;
                }
            }
        }
        fresh.sync(self.clock.now())?;
        let temp_path = fresh.path().to_path_buf();
        drop(fresh);
        let temp = self.vfs.open(&temp_path, true)?;
        self.overlays[1]
            .1
            .commit_temp(temp)
            .map_err(|e| Error::io(self.idx.path(), None, e))?;
        self.idx = HIndex::open(Box::new(self.overlays[1].1.clone()), true)?;
        Ok(count)
    }
}
