//! Counts over the whole store: a scan of the title records, and the containers' sizes.

use std::path::PathBuf;

use crate::error::Result;
use crate::filesys;
use crate::storage::PageMap;

use super::containers::container_base;
use super::{record_of, Render, Store};

/// Counts over the whole store (a scan of the title records).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStat {
    /// Titles with at least one readable render.
    pub titles: u64,
    /// Readable revisions.
    pub revisions: u64,
    /// Readable renders.
    pub renders: u64,
    /// Bytes of readable values, by the title records.
    pub live_bytes: u64,
    /// Bytes in containers no readable render refers to (reclaimed by compaction).
    pub dead_bytes: u64,
    /// Containers (sealed and current).
    pub containers: u64,
    /// Bytes of the containers' datafiles.
    pub container_bytes: u64,
    /// The archive tier's counts, when the store has one.
    pub archive: Option<crate::archive::ArchiveStats>,
    /// Titles whose record could not be read (`DOMAIN/TITLE: the damage`): not counted above.
    pub damaged: Vec<String>,
}

impl Store {
    /// Counts over the whole store (reads every title record).
    pub fn stat(&self) -> Result<StoreStat> {
        self.check_failed()?;
        let now = self.clock.now();
        let policy = self.cfg.policy;
        let mut st = StoreStat::default();
        let mut pages = ScanPages::start(&self.records.fs)?;
        for item in self.records.fs.iter() {
            let file = match item {
                Ok(file) => file,
                Err(e) => {
                    // The walk cannot step past a damaged entry: what follows is not counted.
                    st.damaged
                        .push(format!("(the title records from here on): {e}"));
                    break;
                }
            };
            let rec = match record_of(&self.records.fs, &file) {
                Ok(rec) => rec,
                Err(e) => {
                    st.damaged
                        .push(format!("{}: {e}", String::from_utf8_lossy(&file.name)));
                    continue;
                }
            };
            pages.passed(file.inode.0)?;
            let readable: Vec<&Render> = rec
                .renders
                .iter()
                .filter(|r| policy.readable(&r.stamps, now))
                .collect();
            if readable.is_empty() {
                continue;
            }
            st.titles += 1;
            st.renders += readable.len() as u64;
            let mut revs: Vec<u64> = readable.iter().map(|r| r.rev).collect();
            revs.dedup();
            st.revisions += revs.len() as u64;
            // Lengths come from the records: saturating, so a damaged one cannot wrap the sum.
            let bytes = readable.iter().map(|r| r.location.len);
            st.live_bytes = bytes.fold(st.live_bytes, u64::saturating_add);
        }
        pages.finish()?;
        for id in self.container_ids()? {
            let path = filesys::file_path(&container_base(&self.dir, id), "data");
            st.containers += 1;
            let kv = crate::format::kvseq::KvSeq::open(self.vfs.open(&path, false)?, false)?;
            st.container_bytes += kv.filesize();
        }
        st.dead_bytes = st.container_bytes.saturating_sub(st.live_bytes);
        st.archive = self.archive_tier()?.map(|a| a.stats()).transpose()?;
        Ok(st)
    }
}

/// Bytes of the meta datafile the scan passes between drops of the pages it brought in.
const SWEEP_BYTES: u64 = 64 << 20;

/// A record's data entry lies just before its inode; pages this far behind the inode the scan
/// reached are past.
const SWEEP_MARGIN: u64 = 1 << 20;

/// The page cache of the title records' files as a scan of every record found it: a count
/// (`wink serve` makes one every few minutes), a scrub, a whole cull or archive run must not fill
/// the page cache with every record of the store and evict a serving node's working set. The
/// scans go in file order, so the pages they brought in are dropped behind them as they go, and
/// once more over both files when they end (a data entry read far from its inode, the index
/// cells).
pub(crate) struct ScanPages {
    files: Vec<(PathBuf, PageMap)>,
    swept: u64,
}

impl ScanPages {
    pub(crate) fn start(meta: &filesys::Filesys) -> Result<ScanPages> {
        let paths = [meta.data().path(), meta.index().path()];
        let files = paths
            .into_iter()
            .map(|p| Ok((p.to_path_buf(), PageMap::of(p)?)))
            .collect::<Result<_>>()?;
        Ok(ScanPages { files, swept: 0 })
    }

    /// The scan has reached `at` in the meta datafile (a position before the last one starts
    /// another pass over the file).
    pub(crate) fn passed(&mut self, at: u64) -> Result<()> {
        if at < self.swept {
            self.swept = 0;
        }
        let behind = at.saturating_sub(SWEEP_MARGIN);
        if behind < self.swept + SWEEP_BYTES {
            return Ok(());
        }
        let (path, map) = &self.files[0];
        map.drop_others_in(path, self.swept, behind)?;
        self.swept = behind;
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<()> {
        for (path, map) in &self.files {
            map.drop_others_in(path, 0, u64::MAX)?;
        }
        Ok(())
    }
}
