//! Rewriting an archive into a new one: what compaction does to the archive tier, so that a
//! take-down can be verified (no file of the new archive holds a byte of a taken-down revision,
//! compressed or as a compression prefix) and the ao filesys's dead versions (superseded map logs,
//! replaced files) are left behind.
//!
//! The new archive is in format 2, whatever the source's (so a rewrite also converts a v1
//! archive): each title's readable revisions, read in archive order (each distinct revision
//! once), are archived anew as frames of one revision each, keyed by the decode budget, keys
//! compressed against other titles' keys as an archive run does; take-down records stay in the
//! map, purged (no frame: [`super::map::Entry::is_purged`]). No frame and no prefix of the new
//! archive holds a taken-down byte, because nothing of a taken-down revision is written. A later
//! archive run treats purged records as it treats any take-down: they hide nothing and block
//! nothing (the same revision put again is archived anew). A title whose map holds no revision at
//! all is dropped.
//!
//! Every source revision is checked before it is written: a v1 block is read whole, its length
//! against the map and every frame decompressed against its prefix, a v2 frame decoded against
//! its chain and its CRC-32, and every readable revision against its CRC-32. Any failure ends the
//! rewrite with an error naming file and offset: a revision is never silently left out. The
//! destination is then incomplete, and the caller removes it ([`Archive::remove_in`]).
//!
//! Page cache: the destination is written with the caller's drop-behind policy; the source's
//! datafile pages are dropped every [`DROP_EVERY`] bytes read and at the end.
//!
//! Identical bytes are stored once within a title, so a taken-down revision whose bytes another
//! readable revision has (the same location in the map) keeps those bytes, as that revision. And
//! a readable revision edited from a taken-down one shares most of its text; only what is unique
//! to the taken-down revision disappears.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::filesys::inode::{classify, KeyKind};
use crate::filesys::{self, Filesys};
use crate::store::Labels;
use crate::vfs::Vfs;

use super::map::{Entry, TitleMap};
use super::{archive_fs_options, block_name, decompress, AnyMap, Archive, ArchiveOptions, Item};

/// Source bytes read between two drops of the source datafile's pages.
pub const DROP_EVERY: u64 = 64 << 20;

/// What a rewrite would reclaim, from the maps and one pass over the datafile's entry headers (no
/// block is read or decompressed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RewriteDue {
    /// Titles in the archive.
    pub titles: u64,
    /// Taken-down revisions whose bytes are still in a block (and no readable revision shares).
    pub taken_down: u64,
    /// Their raw bytes.
    pub taken_down_bytes: u64,
    /// Their estimated share of the stored bytes (each block's compression ratio).
    pub taken_down_stored_bytes: u64,
    /// Blocks a rewrite would re-encode (each affected title's from its first affected block),
    /// and their stored bytes.
    pub reencode_blocks: u64,
    /// Their stored bytes.
    pub reencode_stored_bytes: u64,
    /// Datafile entries no live file uses (superseded map logs, replaced files), and their bytes.
    pub dead_entries: u64,
    /// Their bytes.
    pub dead_bytes: u64,
    /// The datafile's size (FILESIZE).
    pub datafile_bytes: u64,
}

impl RewriteDue {
    /// Whether a rewrite would purge a taken-down revision or leave a dead entry behind.
    pub fn is_due(&self) -> bool {
        self.taken_down > 0 || self.dead_entries > 0
    }
}

/// What a rewrite did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RewriteReport {
    /// Titles in the new archive.
    pub titles: u64,
    /// Titles whose blocks were all copied (none: a rewrite writes format 2), and titles
    /// re-encoded.
    pub titles_copied: u64,
    /// Titles whose frames were written anew.
    pub titles_reencoded: u64,
    /// Titles left out: their maps held no revision.
    pub titles_dropped: u64,
    /// Blocks copied as they were (none), and frames written anew.
    pub blocks_copied: u64,
    /// Frames written anew.
    pub blocks_written: u64,
    /// Readable revisions, and their raw bytes.
    pub revisions: u64,
    /// Raw bytes of the readable revisions.
    pub raw_bytes: u64,
    /// Take-down records kept (all purged in the new archive).
    pub taken_down: u64,
    /// Taken-down revisions whose bytes this rewrite purged, and their raw bytes.
    pub purged: u64,
    /// Raw bytes of the purged revisions.
    pub purged_bytes: u64,
    /// Datafile sizes (FILESIZE) of the source and of the new archive.
    pub bytes_before: u64,
    /// Datafile size (FILESIZE) of the new archive.
    pub bytes_after: u64,
}

/// Titles in datafile order, and the datafile's dead entries.
struct Scan {
    titles: Vec<Vec<u8>>,
    dead_entries: u64,
    dead_bytes: u64,
}

/// A location in a title's stream: block, offset, length.
type Loc = (u32, u64, u64);

/// What one title needs: the first block holding bytes only taken-down revisions have (or the
/// block count), and those revisions.
struct Plan {
    first: u32,
    purge: Vec<usize>,
}

fn plan(map: &TitleMap) -> Plan {
    let readable: std::collections::HashSet<Loc> = map
        .entries
        .iter()
        .filter(|e| !e.taken_down)
        .map(|e| (e.block, e.offset, e.len))
        .collect();
    let purge: Vec<usize> = (0..map.entries.len())
        .filter(|&i| {
            let e = &map.entries[i];
            e.taken_down && e.len > 0 && !readable.contains(&(e.block, e.offset, e.len))
        })
        .collect();
    let first = purge
        .iter()
        .map(|&i| map.entries[i].block)
        .min()
        .unwrap_or(map.blocks.len() as u32);
    Plan { first, purge }
}

impl Archive {
    /// What a rewrite would reclaim (see [`RewriteDue`]); the datafile's pages it read are
    /// dropped after.
    pub fn rewrite_due(&self) -> Result<RewriteDue> {
        let scan = self.scan()?;
        let mut due = RewriteDue {
            titles: scan.titles.len() as u64,
            dead_entries: scan.dead_entries,
            dead_bytes: scan.dead_bytes,
            datafile_bytes: self.fs.data().filesize(),
            ..RewriteDue::default()
        };
        for key in &scan.titles {
            let map = match self.load(key)? {
                Some(AnyMap::V1(map)) => map,
                Some(AnyMap::V2(map)) => {
                    due_v2(&map, &mut due);
                    continue;
                }
                None => continue,
            };
            let plan = plan(&map);
            for &i in &plan.purge {
                let e = &map.entries[i];
                let block = &map.blocks[e.block as usize];
                due.taken_down += 1;
                due.taken_down_bytes += e.len;
                let share = u128::from(e.len) * u128::from(block.stored_len())
                    / u128::from(block.raw_len().max(1));
                due.taken_down_stored_bytes += u64::try_from(share).unwrap_or(u64::MAX);
            }
            for block in map.blocks.iter().skip(plan.first as usize) {
                due.reencode_blocks += 1;
                due.reencode_stored_bytes += block.stored_len();
            }
        }
        self.drop_source_pages();
        Ok(due)
    }

    /// Writes a new archive at `dest` (which must not exist) holding every title's readable
    /// revisions and take-down records, and syncs it; see the module doc for what is copied and
    /// what re-encoded. `open` is how the new filesys is opened (its clock and drop-behind);
    /// `progress(done, total)` counts titles (from `(0, total)`). On an error the new archive is
    /// incomplete: remove it with [`Archive::remove_in`].
    pub fn rewrite_into(
        &self,
        vfs: Arc<dyn Vfs>,
        dest: &Path,
        open: &filesys::OpenOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<RewriteReport> {
        let out = Filesys::create_in(vfs.clone(), dest, &archive_fs_options(), open)?;
        let opts = ArchiveOptions {
            format: self.opts.format.max(2),
            ..self.opts
        };
        let mut out = Archive::over(vfs, dest, out, opts);
        let scan = self.scan()?;
        let mut report = RewriteReport {
            bytes_before: self.fs.data().filesize(),
            ..RewriteReport::default()
        };
        let total = scan.titles.len() as u64;
        let mut unread = 0u64;
        progress(0, total);
        for (i, key) in scan.titles.iter().enumerate() {
            unread += self.rewrite_title(&mut out, key, &mut report)?;
            if unread >= DROP_EVERY {
                self.drop_source_pages();
                unread = 0;
            }
            progress(i as u64 + 1, total);
        }
        self.drop_source_pages();
        out.fs.sync()?;
        report.bytes_after = out.fs.data().filesize();
        Ok(report)
    }

    /// Removes the files of the archive at `base` (those present): the caller's cleanup after a
    /// failed [`Archive::rewrite_into`], or of an archive no generation names any more.
    pub fn remove_in(vfs: &dyn Vfs, base: &Path) -> Result<()> {
        // The datafile first: without it the others are leftovers that a create removes anyway.
        filesys::remove_files(vfs, base, &[filesys::staged_datafile(base)])?;
        Ok(())
    }

    /// One title into `out`; returns the source bytes it read.
    fn rewrite_title(
        &self,
        out: &mut Archive,
        key: &[u8],
        report: &mut RewriteReport,
    ) -> Result<u64> {
        let Some(any) = self.load(key)? else {
            return Ok(0);
        };
        let entries = match &any {
            AnyMap::V1(m) => m.entries.clone(),
            AnyMap::V2(m) => m.entries.clone(),
        };
        if entries.is_empty() {
            report.titles_dropped += 1;
            return Ok(0);
        }
        let mut batch = Batch::default();
        let mut read = 0u64;
        match &any {
            AnyMap::V1(map) => {
                // Blocks after the last one holding a readable revision are not needed: not even
                // read (a damaged one cannot stop the purge of a taken-down title).
                let needed = map
                    .entries
                    .iter()
                    .filter(|e| !e.taken_down)
                    .map(|e| e.block + 1)
                    .max()
                    .unwrap_or(0);
                let mut prev: Vec<u8> = Vec::new();
                for n in 0..needed {
                    let (stored, content) = self.read_block(key, map, n, &prev)?;
                    read += stored.len() as u64;
                    self.check_revisions(key, map, n, &content)?;
                    for loc in readable_in(map, n) {
                        let value = &content[loc.1 as usize..(loc.1 + loc.2) as usize];
                        let same = |e: &&Entry| (e.block, e.offset, e.len) == loc;
                        batch.push(&entries, same, value);
                        batch.flush_if_full(out, key)?;
                    }
                    prev = content;
                }
            }
            AnyMap::V2(map) => {
                let used: std::collections::HashSet<u32> = entries
                    .iter()
                    .filter(|e| !e.taken_down)
                    .map(|e| e.block)
                    .collect();
                // Frames after the last one a readable revision uses are not needed: not even
                // read (a damaged one cannot stop the purge of a taken-down title).
                let mut head = map.clone();
                head.frames
                    .truncate(used.iter().max().map_or(0, |&n| n as usize + 1));
                self.each_frame(key, &head, |n, raw| {
                    read += u64::from(map.frames[n].stored);
                    if used.contains(&(n as u32)) {
                        batch.push(&entries, |e: &&Entry| e.block == n as u32, raw);
                        batch.flush_if_full(out, key)?;
                    }
                    Ok(())
                })?;
            }
        }
        batch.flush(out, key)?;
        let purged: Vec<Entry> = entries
            .iter()
            .filter(|e| e.taken_down)
            .map(|e| Entry {
                block: super::v2::map::NO_FRAME,
                offset: 0,
                len: 0,
                crc: 0,
                ..e.clone()
            })
            .collect();
        let new = out.map_v2(key)?;
        out.add_v2(key, new, &[], &purged)?;
        let new = out
            .map_v2(key)?
            .ok_or_else(|| Error::invalid("archive rewrite: a title was not written"))?;
        report.titles += 1;
        report.titles_reencoded += 1;
        report.blocks_written += new.frames.len() as u64;
        let readable: std::collections::HashSet<(u64, [u8; 16])> = new
            .entries
            .iter()
            .filter(|e| !e.taken_down)
            .map(|e| (e.rev, e.tid))
            .collect();
        for e in &new.entries {
            if e.taken_down {
                report.taken_down += 1;
            } else {
                report.revisions += 1;
                report.raw_bytes += e.len;
            }
        }
        // Purged: taken-down revisions whose bytes no readable revision had.
        let kept: std::collections::HashSet<(u32, u64, u64)> = entries
            .iter()
            .filter(|e| !e.taken_down)
            .map(|e| (e.block, e.offset, e.len))
            .collect();
        for e in entries.iter().filter(|e| e.taken_down && !e.is_purged()) {
            if !kept.contains(&(e.block, e.offset, e.len)) {
                report.purged += 1;
                report.purged_bytes += e.len;
            }
        }
        if entries
            .iter()
            .filter(|e| !e.taken_down)
            .any(|e| !readable.contains(&(e.rev, e.tid)))
        {
            return Err(Error::invalid(
                "archive rewrite: a readable revision was not moved",
            ));
        }
        Ok(read)
    }

    /// Block `n` of a title, read whole: its stored bytes and its raw content, every frame
    /// decompressed against its prefix (`prev` is the raw content of block `n - 1`).
    fn read_block(
        &self,
        key: &[u8],
        map: &TitleMap,
        n: u32,
        prev: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let block = &map.blocks[n as usize];
        let dict: &[u8] = if block.key || n == 0 {
            &[]
        } else {
            let last = map.blocks[n as usize - 1].last_len;
            &prev[prev
                .len()
                .saturating_sub(usize::try_from(last).unwrap_or(usize::MAX))..]
        };
        let name = block_name(key, n);
        let (stat, stored) = self
            .fs
            .read_located(&name)?
            .ok_or_else(|| self.damaged(key, n, "block file missing"))?;
        // Frame lengths come from a checksummed map, but are summed without trusting them.
        let expected = block
            .frames
            .iter()
            .try_fold(0u64, |sum, f| sum.checked_add(f.stored));
        if expected != Some(stored.len() as u64) {
            return Err(self.damaged(
                key,
                n,
                &format!(
                    "block file of {} bytes, the map's frames add up to {expected:?}",
                    stored.len()
                ),
            ));
        }
        let mut content: Vec<u8> = Vec::new();
        let mut at = 0usize;
        for (i, frame) in block.frames.iter().enumerate() {
            let data = &stored[at..at + frame.stored as usize];
            let prefix: &[u8] = if content.is_empty() { dict } else { &content };
            let raw = decompress(data, prefix, frame.raw).map_err(|e| {
                Error::corrupt(
                    self.fs.data().path(),
                    stat.inode.0,
                    format!(
                        "archive block {} of title {:?}: frame {i} at byte {at} of the block",
                        String::from_utf8_lossy(&name),
                        String::from_utf8_lossy(key)
                    ),
                    "a zstd frame that decompresses",
                    e,
                )
            })?;
            at += frame.stored as usize;
            content.extend_from_slice(&raw);
        }
        Ok((stored, content))
    }

    /// Every readable revision of block `n` against its CRC-32.
    fn check_revisions(&self, key: &[u8], map: &TitleMap, n: u32, content: &[u8]) -> Result<()> {
        for e in map.entries.iter().filter(|e| !e.taken_down && e.block == n) {
            // The map's own check keeps every location inside its block's raw length, which the
            // decompressed frames just matched.
            self.check_revision_crc(
                key,
                e,
                &content[e.offset as usize..(e.offset + e.len) as usize],
            )?;
        }
        Ok(())
    }

    /// One pass over the datafile's entries (keys, not values): the titles, in file order, and
    /// the entries no live file uses.
    fn scan(&self) -> Result<Scan> {
        let data = self.fs.data();
        let mut scan = Scan {
            titles: Vec::new(),
            dead_entries: 0,
            dead_bytes: 0,
        };
        for entry in data.iter(data.first(), false) {
            let entry = entry?;
            let layout = entry.layout;
            if layout.deleted {
                scan.dead_entries += 1;
                let end = crate::format::kvseq::align_up(layout.end, data.align());
                scan.dead_bytes += end.saturating_sub(layout.ptr.0);
                continue;
            }
            if let KeyKind::Inode { name, n: 0 } = classify(&entry.key) {
                if let Some(key) = name.strip_prefix(b"m/") {
                    scan.titles.push(key.to_vec());
                }
            }
        }
        Ok(scan)
    }

    fn drop_source_pages(&self) {
        let s = self.fs.data().storage();
        // Politeness only: a failed drop leaves pages the kernel will evict anyway.
        let _ = s.drop_cache(0, s.len().unwrap_or(0));
    }
}

/// The distinct locations of readable revisions in block `n`, in stream order.
fn readable_in(map: &TitleMap, n: u32) -> Vec<Loc> {
    let mut locs: Vec<Loc> = map
        .entries
        .iter()
        .filter(|e| !e.taken_down && e.block == n)
        .map(|e| (e.block, e.offset, e.len))
        .collect();
    locs.sort_unstable();
    locs.dedup();
    locs
}

/// A v2 title's share of what a rewrite would reclaim: taken-down revisions whose frame no
/// readable revision shares, and (when there are any) every frame, re-encoded.
fn due_v2(map: &super::v2::map::Map, due: &mut RewriteDue) {
    let readable: std::collections::HashSet<u32> = map
        .entries
        .iter()
        .filter(|e| !e.taken_down)
        .map(|e| e.block)
        .collect();
    let mut any = false;
    let mut counted = std::collections::HashSet::new();
    for e in map
        .entries
        .iter()
        .filter(|e| e.taken_down && !e.is_purged())
    {
        if readable.contains(&e.block) {
            continue;
        }
        any = true;
        due.taken_down += 1;
        due.taken_down_bytes += e.len;
        if counted.insert(e.block) {
            if let Some(f) = map.frames.get(e.block as usize) {
                due.taken_down_stored_bytes += u64::from(f.stored);
            }
        }
    }
    if any {
        due.reencode_blocks += map.frames.len() as u64;
        due.reencode_stored_bytes += map.frames.iter().map(|f| u64::from(f.stored)).sum::<u64>();
    }
}

/// A readable revision on its way: rev, tid, content type, labels, bytes (shared by identical
/// ones).
type Pending = (u64, [u8; 16], String, Labels, Arc<Vec<u8>>);

/// Readable revisions on their way into the new archive, a few MiB at a time.
#[derive(Default)]
struct Batch {
    items: Vec<Pending>,
    bytes: u64,
}

/// Raw bytes a batch gathers before it is archived.
const BATCH_BYTES: u64 = 16 << 20;

impl Batch {
    /// Every readable entry that `at` picks, with `value`.
    fn push(&mut self, entries: &[Entry], at: impl Fn(&&Entry) -> bool, value: &[u8]) {
        let value = Arc::new(value.to_vec());
        for e in entries.iter().filter(|e| !e.taken_down).filter(at) {
            let t = e.content_type.clone();
            self.items
                .push((e.rev, e.tid, t, e.labels.clone(), value.clone()));
        }
        self.bytes += value.len() as u64;
    }

    fn flush_if_full(&mut self, out: &mut Archive, key: &[u8]) -> Result<()> {
        if self.bytes >= BATCH_BYTES {
            self.flush(out, key)?;
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Archive, key: &[u8]) -> Result<()> {
        if self.items.is_empty() {
            return Ok(());
        }
        let items: Vec<Item<'_>> = self
            .items
            .iter()
            .map(|(rev, tid, t, labels, v)| Item {
                rev: *rev,
                tid: *tid,
                content_type: t,
                labels,
                value: v,
            })
            .collect();
        out.add(key, &items)?;
        self.items.clear();
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::Item;
    use crate::clock::{Clock, ManualClock};
    use crate::sim::SimDisk;

    const SRC: &str = "/a/archive";
    const DEST: &str = "/a/archive.2";

    fn fs_open() -> filesys::OpenOptions {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1000));
        filesys::OpenOptions {
            clock,
            drop_behind: None,
            ..filesys::OpenOptions::writer()
        }
    }

    /// Sources in format 1 (new titles of the rewritten archive are v2 whatever these say).
    fn opts() -> ArchiveOptions {
        ArchiveOptions {
            block_bytes: 48 << 10,
            level: 3,
            format: 1,
            ..ArchiveOptions::default()
        }
    }

    fn open(disk: &SimDisk, base: &str) -> Archive {
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        let base = Path::new(base);
        if !vfs.exists(&filesys::file_path(base, "data")) {
            Archive::create_in(vfs.clone(), base, fs_open().clock).unwrap();
        }
        Archive::open_in(vfs, base, &fs_open(), opts()).unwrap()
    }

    fn revisions(seed: u64, n: usize) -> Vec<Vec<u8>> {
        crate::synth::histories(seed, 1, n, 30)
            .map(|r| r.html)
            .collect()
    }

    /// Archives `revs` as revisions 0.. of `key`, `per_run` at a time, committing each run.
    fn archive(a: &mut Archive, key: &[u8], revs: &[Vec<u8>], per_run: usize) {
        for (run, chunk) in revs.chunks(per_run).enumerate() {
            let items = crate::archive::tests::as_items(chunk, run * per_run, [7; 16]);
            a.add(key, &items).unwrap();
            a.commit().unwrap();
        }
    }

    fn rewrite(disk: &SimDisk, a: &Archive) -> RewriteReport {
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        let mut calls = Vec::new();
        let report = a
            .rewrite_into(vfs, Path::new(DEST), &fs_open(), |d, t| calls.push((d, t)))
            .unwrap();
        let titles = a.titles().unwrap().len() as u64;
        assert_eq!(
            calls.last(),
            Some(&(titles, titles)),
            "progress ends at the total"
        );
        report
    }

    fn assert_reads_back(a: &Archive, key: &[u8], revs: &[Vec<u8>], gone: &[u64]) {
        let live = a.entries(key).unwrap();
        assert_eq!(live.len(), revs.len() - gone.len());
        for e in live {
            assert!(!gone.contains(&e.rev), "rev {} is taken down", e.rev);
            assert_eq!(
                a.read(key, &e).unwrap(),
                revs[e.rev as usize],
                "rev {}",
                e.rev
            );
        }
    }

    #[test]
    fn an_untouched_title_is_copied_block_for_block_and_its_map_log_compacted() {
        let disk = SimDisk::new();
        let mut a = open(&disk, SRC);
        let revs = revisions(1, 60);
        // Two revisions per run: the map log fills its file and is rewritten (a dead version).
        archive(&mut a, b"k", &revs, 2);
        let due = a.rewrite_due().unwrap();
        assert!(
            due.is_due() && due.dead_entries > 0 && due.dead_bytes > 0,
            "{due:?}"
        );
        assert_eq!((due.taken_down, due.reencode_blocks), (0, 0));
        let src_map = a.map(b"k").unwrap().unwrap();
        assert!(src_map.blocks.len() >= 3, "{} blocks", src_map.blocks.len());

        let report = rewrite(&disk, &a);
        assert_eq!(
            (report.titles, report.titles_copied, report.titles_reencoded),
            (1, 0, 1)
        );
        assert_eq!((report.revisions, report.purged), (60, 0));
        assert!(report.bytes_after < report.bytes_before, "{report:?}");
        let b = open(&disk, DEST);
        assert_eq!(b.map(b"k").unwrap(), None, "no v1 map left");
        let map = b.map_v2(b"k").unwrap().unwrap();
        assert_eq!(map.frames.len(), 60);
        assert_eq!(report.blocks_written, 60);
        assert_reads_back(&b, b"k", &revs, &[]);
        assert!(b.verify().is_empty());
        let due = b.rewrite_due().unwrap();
        assert!(!due.is_due() && due.dead_bytes == 0, "{due:?}");
    }

    #[test]
    fn a_title_is_reencoded_from_its_first_block_holding_taken_down_bytes() {
        let disk = SimDisk::new();
        let mut a = open(&disk, SRC);
        let revs = revisions(2, 80);
        archive(&mut a, b"k", &revs, 80);
        let src_map = a.map(b"k").unwrap().unwrap();
        assert!(src_map.blocks.len() >= 5, "{} blocks", src_map.blocks.len());
        let victim = src_map
            .entries
            .iter()
            .find(|e| e.block == 2)
            .unwrap()
            .clone();
        assert_eq!(a.take_down(b"k", Some(victim.rev)).unwrap(), 1);
        a.commit().unwrap();
        let due = a.rewrite_due().unwrap();
        assert_eq!((due.taken_down, due.taken_down_bytes), (1, victim.len));
        assert_eq!(due.reencode_blocks, src_map.blocks.len() as u64 - 2);

        let report = rewrite(&disk, &a);
        assert_eq!((report.titles_reencoded, report.blocks_copied), (1, 0));
        assert_eq!(
            (report.revisions, report.taken_down, report.purged),
            (79, 1, 1)
        );
        let b = open(&disk, DEST);
        let map = b.map_v2(b"k").unwrap().unwrap();
        assert_eq!(map.frames.len(), 79);
        let record = map.entries.iter().find(|e| e.rev == victim.rev).unwrap();
        assert!(record.is_purged(), "{record:?}");
        assert_reads_back(&b, b"k", &revs, &[victim.rev]);
        assert!(b.verify().is_empty());
        assert!(!b.rewrite_due().unwrap().is_due());
    }

    #[test]
    fn bytes_a_readable_revision_shares_stay_and_the_rewrite_copies() {
        let disk = SimDisk::new();
        let mut a = open(&disk, SRC);
        let revs = revisions(3, 10);
        archive(&mut a, b"k", &revs, 10);
        let copy = Item {
            rev: 99,
            tid: [9; 16],
            content_type: "text/html",
            labels: &crate::store::Labels::NONE,
            value: &revs[4],
        };
        a.add(b"k", &[copy]).unwrap();
        a.take_down(b"k", Some(4)).unwrap();
        let due = a.rewrite_due().unwrap();
        assert_eq!(due.taken_down, 0, "revision 99 still reads those bytes");
        let report = rewrite(&disk, &a);
        assert_eq!((report.purged, report.taken_down), (0, 1));
        let b = open(&disk, DEST);
        let e99 = b
            .entries(b"k")
            .unwrap()
            .into_iter()
            .find(|e| e.rev == 99)
            .unwrap();
        assert_eq!(b.read(b"k", &e99).unwrap(), revs[4]);
        assert!(b.entries(b"k").unwrap().iter().all(|e| e.rev != 4));
    }

    #[test]
    fn a_title_taken_down_whole_keeps_its_records_and_no_block_even_when_damaged() {
        let disk = SimDisk::new();
        let mut a = open(&disk, SRC);
        let revs = revisions(4, 20);
        archive(&mut a, b"gone", &revs, 20);
        archive(&mut a, b"kept", &revs, 20);
        assert_eq!(a.take_down(b"gone", None).unwrap(), 20);
        a.commit().unwrap();
        // The taken-down title's blocks are never read: damage there cannot stop the purge.
        let ext = a.fs.extents(&block_name(b"gone", 0)).unwrap().unwrap();
        let path = filesys::file_path(Path::new(SRC), "data");
        let s = disk.open(&path, true).unwrap();
        s.write_at(&[0xAA; 64], ext[0].offset + 8).unwrap();

        let report = rewrite(&disk, &a);
        assert_eq!(
            (report.titles, report.purged, report.taken_down),
            (2, 20, 20)
        );
        let mut b = open(&disk, DEST);
        let map = b.map_v2(b"gone").unwrap().unwrap();
        assert!(map.frames.is_empty() && map.entries.iter().all(Entry::is_purged));
        let segment = crate::archive::v2::segment_name(b"gone", 0);
        assert_eq!(b.fs.stat(&segment).unwrap(), None);
        assert_eq!(b.take_down(b"gone", Some(3)).unwrap(), 0);
        assert_reads_back(&b, b"kept", &revs, &[]);
    }

    #[test]
    fn the_new_archive_takes_later_runs() {
        let disk = SimDisk::new();
        let mut a = open(&disk, SRC);
        let revs = revisions(5, 40);
        archive(&mut a, b"k", &revs[..30], 30);
        a.take_down(b"k", Some(1)).unwrap();
        rewrite(&disk, &a);
        let mut b = open(&disk, DEST);
        let items: Vec<Item> = (30..40)
            .map(|i| Item {
                rev: i as u64,
                tid: [7; 16],
                content_type: "text/html",
                labels: &crate::store::Labels::NONE,
                value: &revs[i],
            })
            .collect();
        assert_eq!(b.add(b"k", &items).unwrap(), 10);
        b.commit().unwrap();
        drop(b);
        let b = open(&disk, DEST);
        assert_reads_back(&b, b"k", &revs, &[1]);
    }

    #[test]
    fn an_existing_destination_is_refused_and_remove_in_clears_one() {
        let disk = SimDisk::new();
        let a = open(&disk, SRC);
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        assert!(a
            .rewrite_into(vfs.clone(), Path::new(SRC), &fs_open(), |_, _| {})
            .is_err());
        rewrite(&disk, &a);
        Archive::remove_in(vfs.as_ref(), Path::new(DEST)).unwrap();
        assert!(disk
            .paths()
            .iter()
            .all(|p| !p.to_string_lossy().starts_with(DEST)));
        rewrite(&disk, &a);
    }
}
