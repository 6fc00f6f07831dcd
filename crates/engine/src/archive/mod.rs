//! The archive: old revisions of a title compressed against each other, stored as files in an ao
//! filesys (`BASE.*`), with a per-title map from (revision, tid) to where its bytes lie and a
//! CRC-32 per revision. It knows titles only as opaque keys and nothing of the store above it.
//!
//! | file in the filesys | content                                                          |
//! |---------------------|------------------------------------------------------------------|
//! | `m/KEY`             | the title's map, a log of a snapshot and one delta per run          |
//! | `v/KEY#N`           | format 2: segment N, frames of one revision each ([`v2`])           |
//! | `b/KEY#N`           | format 1: block N, concatenated zstd frames of the title's stream  |
//!
//! A title's map names its format (`WAM1` or `WAM2`): new titles are written in
//! [`ArchiveOptions::format`] (2 by default), a title keeps its map's format, and a rewrite writes
//! format 2 ([`rewrite`]). Format 2 is described in [`v2`]; this file keeps format 1 and the
//! dispatch between the two.
//!
//! Format 1: a title's revisions form one logical stream, cut into blocks of about `block_bytes`
//! raw. Each frame is compressed with a raw-content dictionary: for a block's first frame, the
//! last revision of the previous block (none for a key block); for later frames, the block's
//! content so far. An archive run appends one frame to the title's open block; a block that
//! reaches `block_bytes` (or holds as many frames as its file can) is sealed, as it is. Reading a
//! revision decompresses its block up to the revision and, for the block's dictionary, the
//! preceding blocks back to the last key block; `key_every` bounds that chain. Decompressed
//! blocks are kept in a bounded cache.

mod frame;
pub mod map;
pub mod rewrite;
pub mod v2;

pub use frame::{compress, decompress};

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::check::{Problem, Severity};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys, FsOptions};
use crate::store::Labels;
use crate::vfs::Vfs;

use map::{Block, Delta, Entry, Frame, TitleMap};

/// Frames (and map records) a file holds: the capacity of the archive filesys's fixed inodes.
const MAX_FRAMES: u64 = 16;
/// The largest map (a title's log of snapshot and deltas) a read takes: 256 MiB, some five
/// million revisions of one title.
pub const MAX_MAP: u64 = 256 << 20;

/// Format 2's default decode budget. A chain decodes at about 0.1 ms per MiB here, so 20 MiB
/// keeps the slowest read near 2 ms; a key costs as much as a hundred deltas or more (a page
/// with inline data compresses to half on its own), so fewer keys are much smaller: measured in
/// docs/PERFORMANCE.md § Archive.
pub const DEFAULT_CHAIN_BYTES: u64 = 20 << 20;

/// Archive settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveOptions {
    /// A block is sealed once its raw content reaches this many bytes.
    pub block_bytes: u64,
    /// zstd level.
    pub level: i32,
    /// A key block (needing no earlier block) every this many blocks; 0 = only the first.
    pub key_every: u32,
    /// Bytes of decompressed blocks kept in memory (and of v2 titles' last decoded revisions).
    /// Apart from it, a handle that has read format 2 or 3 keeps its two decoding buffers, each
    /// as large as the largest unit a read has decoded into it (one over 16 MiB is let go).
    pub cache_bytes: u64,
    /// The format new titles are written in: 2 (one frame per revision), 3 (units of a run's
    /// revisions, one frame each) or 1 (blocks). A title keeps the format of its map.
    pub format: u8,
    /// Format 2: a new key when a read would decode more raw bytes than this since the last.
    pub chain_bytes: u64,
}

impl Default for ArchiveOptions {
    fn default() -> Self {
        // A key block every 2 blocks: a read decompresses one block, or a block and the key block
        // it references, never a longer chain (key_every 0 compresses ~20% better, unbounded).
        // Level 19: format 2 archives at about 10 MB/s per core there, 0.1 points of raw
        // smaller than at 12 (docs/PERFORMANCE.md § Archive).
        ArchiveOptions {
            block_bytes: 4 << 20,
            level: 19,
            key_every: 2,
            cache_bytes: 64 << 20,
            format: 2,
            chain_bytes: DEFAULT_CHAIN_BYTES,
        }
    }
}

/// A revision to archive.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    /// Revision number.
    pub rev: u64,
    /// Render id (the tid's 16 bytes).
    pub tid: [u8; 16],
    /// Content type, kept in the title's map.
    pub content_type: &'a str,
    /// Content encoding and language, kept in the title's map with the content type.
    pub labels: &'a Labels,
    /// The raw revision.
    pub value: &'a [u8],
}

/// Counts over the whole archive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiveStats {
    /// Titles with a map.
    pub titles: u64,
    /// Files of frames: v1 blocks and v2 segments.
    pub blocks: u64,
    /// Revisions held (not taken down).
    pub revisions: u64,
    /// Their bytes, uncompressed.
    pub raw_bytes: u64,
    /// Every byte of the archive's files.
    pub stored_bytes: u64,
}

#[derive(Debug, Default)]
struct Cache {
    blocks: HashMap<(Vec<u8>, u32), Arc<Vec<u8>>>,
    order: VecDeque<(Vec<u8>, u32)>,
    bytes: u64,
}

/// An open archive.
#[derive(Debug)]
pub struct Archive {
    vfs: Arc<dyn Vfs>,
    base: PathBuf,
    fs: Filesys,
    opts: ArchiveOptions,
    cache: Mutex<Cache>,
    /// Raw bytes decompressed so far (what a read costs, for measurements and tests).
    decompressed: std::sync::atomic::AtomicU64,
    /// Format 2: the reused decompression context (created at the first read).
    decoder: Mutex<Option<v2::frames::Decoder>>,
    /// Format 2: the two buffers a read decodes into, kept for the next read (up to
    /// [`v2::SCRATCH_BYTES`] each): decoding into fresh memory cost a read its page faults.
    scratch: Mutex<[Vec<u8>; 2]>,
    /// Format 2: the last decoded revision of each title.
    recent: Mutex<v2::Recent>,
    /// Format 2: plain keys lately written, which keys of other titles may reference.
    candidates: VecDeque<v2::Candidate>,
    /// Decoded maps (a quarter of `cache_bytes`, counted in map file bytes).
    maps: Mutex<MapCache>,
}

/// Decoded maps by title, each with the version of its file it was decoded from.
#[derive(Debug, Default)]
struct MapCache {
    maps: HashMap<Vec<u8>, (MapVersion, Arc<AnyMap>, u64)>,
    order: VecDeque<Vec<u8>>,
    bytes: u64,
}

/// A map file's inode place, length and data entries.
type MapVersion = (u64, u64, u64);

impl MapCache {
    /// Whether some version of the title's map is held.
    fn holds(&self, key: &[u8]) -> bool {
        self.maps.contains_key(key)
    }

    fn get(&self, key: &[u8], version: MapVersion) -> Option<Arc<AnyMap>> {
        self.maps
            .get(key)
            .filter(|(v, _, _)| *v == version)
            .map(|(_, m, _)| m.clone())
    }

    fn put(&mut self, key: &[u8], version: MapVersion, map: Arc<AnyMap>, len: u64, limit: u64) {
        if let Some((_, _, old)) = self.maps.remove(key) {
            self.bytes -= old;
            self.order.retain(|k| k != key);
        }
        if len > limit {
            return;
        }
        self.maps.insert(key.to_vec(), (version, map, len));
        self.order.push_back(key.to_vec());
        self.bytes += len;
        while self.bytes > limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, _, gone)) = self.maps.remove(&oldest) {
                self.bytes -= gone;
            }
        }
    }
}

/// A title's map in either format.
#[derive(Clone, Debug)]
pub(crate) enum AnyMap {
    V1(TitleMap),
    V2(v2::map::Map),
}

/// The name of the file holding the map of the title `key`.
pub fn map_name(key: &[u8]) -> Vec<u8> {
    [b"m/".as_slice(), key].concat()
}

fn block_name(key: &[u8], n: u32) -> Vec<u8> {
    [b"b/".as_slice(), key, format!("#{n}").as_bytes()].concat()
}

fn archive_fs_options() -> FsOptions {
    FsOptions {
        ao: true,
        dups: true,
        isz: 56 + 16 * MAX_FRAMES,
        timemp: 3600,
        htsize: 64,
        fileincr: 64 << 10,
    }
}

impl Archive {
    /// Creates an empty archive at `base`.
    pub fn create_in(vfs: Arc<dyn Vfs>, base: &Path, clock: Arc<dyn Clock>) -> Result<()> {
        let open = filesys::OpenOptions {
            clock,
            ..filesys::OpenOptions::writer()
        };
        Filesys::create_in(vfs, base, &archive_fs_options(), &open)?.sync()
    }

    /// Opens the archive at `base`.
    pub fn open_in(
        vfs: Arc<dyn Vfs>,
        base: &Path,
        open: &filesys::OpenOptions,
        opts: ArchiveOptions,
    ) -> Result<Archive> {
        let fs = Filesys::open_in(vfs.clone(), base, open)?;
        Ok(Archive::over(vfs, base, fs, opts))
    }

    /// An archive over an open filesys at `base`.
    fn over(vfs: Arc<dyn Vfs>, base: &Path, fs: Filesys, opts: ArchiveOptions) -> Archive {
        Archive {
            vfs,
            base: base.to_path_buf(),
            fs,
            opts,
            cache: Mutex::new(Cache::default()),
            decompressed: Default::default(),
            decoder: Mutex::new(None),
            scratch: Mutex::new([Vec::new(), Vec::new()]),
            recent: Mutex::new(v2::Recent::default()),
            candidates: VecDeque::new(),
            maps: Mutex::new(MapCache::default()),
        }
    }

    /// The options in force.
    pub fn options(&self) -> ArchiveOptions {
        self.opts
    }

    /// Sets how many bytes of decompressed blocks are cached (0: none).
    pub fn set_cache_bytes(&mut self, bytes: u64) {
        self.opts.cache_bytes = bytes;
        self.clear_cache();
    }

    /// Forgets every cached block (for cold-read measurements).
    pub fn clear_cache(&self) {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Cache::default();
        *self.recent.lock().unwrap_or_else(|p| p.into_inner()) = v2::Recent::default();
        *self.maps.lock().unwrap_or_else(|p| p.into_inner()) = MapCache::default();
    }

    /// Raw bytes decompressed since the archive was opened.
    pub fn decompressed_bytes(&self) -> u64 {
        self.decompressed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The filesys holding the archive.
    pub fn filesys(&self) -> &Filesys {
        &self.fs
    }

    /// The title's v1 map, if it has archived anything in format 1 (a v2 title's map is
    /// [`Archive::map_v2`]'s).
    pub fn map(&self, key: &[u8]) -> Result<Option<TitleMap>> {
        match self.load(key)? {
            Some(AnyMap::V1(m)) => Ok(Some(m)),
            _ => Ok(None),
        }
    }

    /// The title's map in whichever format its log's first record names (a copy to change).
    pub(crate) fn load(&self, key: &[u8]) -> Result<Option<AnyMap>> {
        Ok(self.load_shared(key)?.map(|m| (*m).clone()))
    }

    /// The title's map, decoded once per version of its file: a map of many revisions takes
    /// longer to decode than a read of one revision takes.
    pub(crate) fn load_shared(&self, key: &[u8]) -> Result<Option<Arc<AnyMap>>> {
        let name = map_name(key);
        let cached = self
            .maps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .holds(key);
        if !cached {
            // A read of a revision reads the title's (first) segment's inode after the map's: asked
            // for now, its disk read overlaps the map's inode and the map.
            self.fs.will_need_file(&v2::segment_name(key, 0));
        }
        let Some(stat) = self.fs.stat(&name)? else {
            return Ok(None);
        };
        // The inode's place, length and entries change with every write of the map.
        let version = (stat.inode.0, stat.size, stat.data_entries);
        if let Some(hit) = self
            .maps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key, version)
        {
            return Ok(Some(hit));
        }
        let Some((stat, bytes)) = self.fs.read_located_within(&name, MAX_MAP)? else {
            return Ok(None);
        };
        let path = self.fs.data().path();
        let map = match v2::map::log_version(&bytes) {
            Some(3) if v2::map::log_parts(&bytes) > 0 => {
                AnyMap::V2(self.decode_map_parts(key, &bytes, stat.inode.0)?)
            }
            Some(2 | 3) => AnyMap::V2(v2::map::Map::decode_log(&bytes, path, stat.inode.0)?),
            _ => AnyMap::V1(TitleMap::decode_log(&bytes, path, stat.inode.0)?),
        };
        let map = Arc::new(map);
        let version = (stat.inode.0, stat.size, stat.data_entries);
        let limit = self.opts.cache_bytes / 4;
        self.maps.lock().unwrap_or_else(|p| p.into_inner()).put(
            key,
            version,
            map.clone(),
            bytes.len() as u64,
            limit,
        );
        Ok(Some(map))
    }

    /// A format 3 map whose log begins in part files: the parts the map file `head` (at
    /// `offset`) names, read (together within [`MAX_MAP`]) and decoded before its records.
    fn decode_map_parts(&self, key: &[u8], head: &[u8], offset: u64) -> Result<v2::map::Map> {
        let n = v2::map::log_parts(head);
        let names: Vec<Vec<u8>> = (1..=n).map(|i| v2::part_name(key, i)).collect();
        // The parts' inodes asked for at once, then their bytes: a cold read waits for each
        // kind of read once, not once per part.
        for name in &names {
            self.fs.will_need_file(name);
        }
        for name in &names {
            self.fs.will_need_content(name);
        }
        let mut left = MAX_MAP.saturating_sub(head.len() as u64);
        let mut parts = Vec::with_capacity(names.len());
        for name in &names {
            let Some((stat, bytes)) = self.fs.read_located_within(name, left)? else {
                return Err(Error::corrupt(
                    self.fs.data().path(),
                    offset,
                    format!("archive map of {:?}", String::from_utf8_lossy(key)),
                    format!("its part file {:?}", String::from_utf8_lossy(name)),
                    "none",
                ));
            };
            left -= bytes.len() as u64;
            parts.push((bytes, stat.inode.0));
        }
        let mut pieces: Vec<(&[u8], u64)> = parts.iter().map(|(b, o)| (b.as_slice(), *o)).collect();
        pieces.push((head, offset));
        v2::map::Map::decode_log_parts(&pieces, self.fs.data().path())
    }

    /// Writes what a run changed: a delta appended to the map log, or the whole map as a new
    /// snapshot when the log is new or its inode is full.
    fn write_map(&mut self, key: &[u8], map: &TitleMap, delta: &Delta) -> Result<()> {
        let name = map_name(key);
        let stat = self.fs.stat(&name)?;
        let snapshot = map.snapshot_record();
        // A map past its reader's limit could not be read back: refused before it is written.
        if snapshot.len() as u64 > MAX_MAP {
            return Err(Error::invalid(format!(
                "the archive map of {:?} would take {} bytes, over the {MAX_MAP} a map may",
                String::from_utf8_lossy(key),
                snapshot.len()
            )));
        }
        let fits = |lsize: u64| lsize.saturating_add(delta.record().len() as u64) <= MAX_MAP;
        match stat {
            Some(stat) if stat.data_entries < MAX_FRAMES && fits(stat.size) => {
                self.fs.append(&name, &delta.record())?;
            }
            _ => {
                self.fs.put(&name, 0, &snapshot)?;
            }
        }
        Ok(())
    }

    /// The title's archived revisions that are not taken down.
    pub fn entries(&self, key: &[u8]) -> Result<Vec<Entry>> {
        Ok(self.title_entries(key)?.unwrap_or_default())
    }

    /// The title's archived revisions that are not taken down, in either format; `None` when
    /// the archive holds no map of the title (the store tells "archived, but the map is lost"
    /// from "never archived" by it).
    pub fn title_entries(&self, key: &[u8]) -> Result<Option<Vec<Entry>>> {
        let Some(map) = self.load_shared(key)? else {
            return Ok(None);
        };
        let entries = match &*map {
            AnyMap::V1(m) => &m.entries,
            AnyMap::V2(m) => &m.entries,
        };
        Ok(Some(
            entries.iter().filter(|e| !e.taken_down).cloned().collect(),
        ))
    }

    /// `look` at the entries of the title's map (taken down ones included), without copying
    /// them: `None` when the title has no map. A title of many revisions finds the one a read
    /// wants in the time of a look at each entry, not of a copy of all.
    pub fn with_entries<T>(
        &self,
        key: &[u8],
        look: impl FnOnce(&[Entry]) -> T,
    ) -> Result<Option<T>> {
        let Some(map) = self.load_shared(key)? else {
            return Ok(None);
        };
        Ok(Some(look(match &*map {
            AnyMap::V1(m) => &m.entries,
            AnyMap::V2(m) => &m.entries,
        })))
    }

    /// Every revision the title's map records, taken down or not (empty when it has no map).
    pub fn all_entries(&self, key: &[u8]) -> Result<Vec<Entry>> {
        let Some(map) = self.load_shared(key)? else {
            return Ok(Vec::new());
        };
        let entries = match &*map {
            AnyMap::V1(m) => &m.entries,
            AnyMap::V2(m) => &m.entries,
        };
        Ok(entries.clone())
    }

    /// Reads one archived revision, verified against its CRC-32.
    pub fn read(&self, key: &[u8], entry: &Entry) -> Result<Vec<u8>> {
        match self.load_shared(key)?.as_deref() {
            Some(AnyMap::V1(map)) => self.read_in(key, map, entry),
            Some(AnyMap::V2(map)) => self.read_v2(key, map, entry),
            None => Err(Error::NotFound(format!(
                "archive: no title {:?}",
                String::from_utf8_lossy(key)
            ))),
        }
    }

    fn read_in(&self, key: &[u8], map: &TitleMap, entry: &Entry) -> Result<Vec<u8>> {
        let content = self.block_content(key, map, entry.block, entry.offset + entry.len)?;
        let value = content[entry.offset as usize..(entry.offset + entry.len) as usize].to_vec();
        self.check_revision_crc(key, entry, &value)?;
        Ok(value)
    }

    /// A revision's bytes, as decompressed from its block, against the CRC-32 of its map entry;
    /// a mismatch names the block and the title.
    fn check_revision_crc(&self, key: &[u8], entry: &Entry, value: &[u8]) -> Result<()> {
        let crc = crc32fast::hash(value);
        if crc == entry.crc {
            return Ok(());
        }
        let name = block_name(key, entry.block);
        Err(Error::corrupt(
            self.fs.data().path(),
            self.block_offset(&name),
            format!(
                "archive block {} of title {:?}: revision {} checksum",
                String::from_utf8_lossy(&name),
                String::from_utf8_lossy(key),
                entry.rev
            ),
            format!("0x{:08x}", entry.crc),
            format!("0x{crc:08x}"),
        ))
    }

    fn block_offset(&self, name: &[u8]) -> u64 {
        self.fs.stat(name).ok().flatten().map_or(0, |s| s.inode.0)
    }

    /// The raw content of block `n` of a title, at least up to `upto` bytes.
    fn block_content(&self, key: &[u8], map: &TitleMap, n: u32, upto: u64) -> Result<Arc<Vec<u8>>> {
        if let Some(hit) = self.cached(key, n, upto) {
            return Ok(hit);
        }
        let block = map
            .blocks
            .get(n as usize)
            .ok_or_else(|| self.damaged(key, n, "the map names a block that does not exist"))?;
        let dict0 = self.first_dictionary(key, map, n)?;
        let name = block_name(key, n);
        let (stat, stored) = self
            .fs
            .read_located(&name)?
            .ok_or_else(|| self.damaged(key, n, "block file missing"))?;
        if stored.len() as u64 != block.stored_len() {
            return Err(self.damaged(
                key,
                n,
                &format!(
                    "block file of {} bytes, map says {}",
                    stored.len(),
                    block.stored_len()
                ),
            ));
        }
        let mut content: Vec<u8> = Vec::with_capacity(upto.min(block.raw_len()) as usize);
        let mut at = 0usize;
        for frame in &block.frames {
            if content.len() as u64 >= upto {
                break;
            }
            let data = &stored[at..at + frame.stored as usize];
            at += frame.stored as usize;
            let dict: &[u8] = if content.is_empty() { &dict0 } else { &content };
            let out = decompress(data, dict, frame.raw).map_err(|e| {
                Error::corrupt(
                    self.fs.data().path(),
                    stat.inode.0,
                    format!(
                        "archive block {} of title {:?}",
                        String::from_utf8_lossy(&name),
                        String::from_utf8_lossy(key)
                    ),
                    "a zstd frame that decompresses",
                    e,
                )
            })?;
            self.decompressed
                .fetch_add(out.len() as u64, std::sync::atomic::Ordering::Relaxed);
            content.extend_from_slice(&out);
        }
        let content = Arc::new(content);
        self.remember(key, n, content.clone());
        Ok(content)
    }

    /// The dictionary of a block's first frame: the last revision of the block before it.
    fn first_dictionary(&self, key: &[u8], map: &TitleMap, n: u32) -> Result<Vec<u8>> {
        let block = &map.blocks[n as usize];
        if block.key || n == 0 {
            return Ok(Vec::new());
        }
        let prev = &map.blocks[n as usize - 1];
        let content = self.block_content(key, map, n - 1, prev.raw_len())?;
        let start = content.len().saturating_sub(prev.last_len as usize);
        Ok(content[start..].to_vec())
    }

    fn damaged(&self, key: &[u8], n: u32, what: &str) -> Error {
        let name = block_name(key, n);
        Error::corrupt(
            self.fs.data().path(),
            self.block_offset(&name),
            format!(
                "archive block {} of title {:?}",
                String::from_utf8_lossy(&name),
                String::from_utf8_lossy(key)
            ),
            "a block that matches its map",
            what,
        )
    }

    fn cached(&self, key: &[u8], n: u32, upto: u64) -> Option<Arc<Vec<u8>>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .blocks
            .get(&(key.to_vec(), n))
            .filter(|c| c.len() as u64 >= upto)
            .cloned()
    }

    fn remember(&self, key: &[u8], n: u32, content: Arc<Vec<u8>>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let len = content.len() as u64;
        if len > self.opts.cache_bytes {
            return;
        }
        if let Some(old) = cache.blocks.insert((key.to_vec(), n), content) {
            cache.bytes -= old.len() as u64;
        } else {
            cache.order.push_back((key.to_vec(), n));
        }
        cache.bytes += len;
        while cache.bytes > self.opts.cache_bytes {
            let Some(oldest) = cache.order.pop_front() else {
                break;
            };
            if let Some(gone) = cache.blocks.remove(&oldest) {
                cache.bytes -= gone.len() as u64;
            }
        }
    }

    fn forget(&self, key: &[u8], n: u32) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(gone) = cache.blocks.remove(&(key.to_vec(), n)) {
            cache.bytes -= gone.len() as u64;
            cache.order.retain(|k| k != &(key.to_vec(), n));
        }
    }

    /// Archives revisions of one title (uncommitted until [`Archive::commit`]). A revision already
    /// there (same revision and tid) is skipped, so a rerun after a crash finishes the job; bytes
    /// identical to an archived revision are stored once. Returns how many were added.
    pub fn add(&mut self, key: &[u8], items: &[Item<'_>]) -> Result<usize> {
        match self.load(key)? {
            Some(AnyMap::V1(map)) => self.add_v1(key, map, items),
            Some(AnyMap::V2(map)) => self.add_v2(key, Some(map), items, &[]),
            None if self.opts.format == 1 => self.add_v1(key, TitleMap::default(), items),
            None => self.add_v2(key, None, items, &[]),
        }
    }

    fn add_v1(&mut self, key: &[u8], mut map: TitleMap, items: &[Item<'_>]) -> Result<usize> {
        let mut delta = Delta::default();
        let mut fresh: Vec<(Item<'_>, u32)> = Vec::new();
        for item in items {
            let crc = crc32fast::hash(item.value);
            match held(map.entries.iter().chain(&delta.entries), item, crc) {
                Held::Same => continue,
                Held::Replaced(e) => delta.down.push((e.rev, e.tid)),
                Held::New => {}
            }
            if fresh
                .iter()
                .any(|(i, _)| i.rev == item.rev && i.tid == item.tid)
            {
                continue;
            }
            if let Some(same) = self.identical(key, &map, item.value, crc)? {
                delta.entries.push(Entry {
                    rev: item.rev,
                    tid: item.tid,
                    content_type: item.content_type.to_string(),
                    labels: item.labels.clone(),
                    taken_down: false,
                    ..same
                });
                continue;
            }
            fresh.push((*item, crc));
        }
        if !fresh.is_empty() {
            let first_new_block = map.blocks.len();
            let touched = self.append(key, &mut map, &fresh, &mut delta.entries)?;
            let mut touched: Vec<u32> = touched
                .into_iter()
                .chain(first_new_block as u32..map.blocks.len() as u32)
                .collect();
            touched.sort_unstable();
            touched.dedup();
            delta.blocks = touched
                .into_iter()
                .map(|n| (n, map.blocks[n as usize].clone()))
                .collect();
        }
        let added = delta.entries.len();
        if !delta.is_empty() {
            // The blocks are already grown in `map`; the entries change as the delta says.
            map.apply(&Delta {
                blocks: Vec::new(),
                entries: delta.entries.clone(),
                down: delta.down.clone(),
            });
            self.write_map(key, &map, &delta)?;
        }
        Ok(added)
    }

    /// An archived revision with exactly these bytes, if any.
    fn identical(
        &self,
        key: &[u8],
        map: &TitleMap,
        value: &[u8],
        crc: u32,
    ) -> Result<Option<Entry>> {
        for e in map
            .entries
            .iter()
            .filter(|e| !e.taken_down && e.crc == crc && e.len == value.len() as u64)
        {
            if self.read_in(key, map, e)? == value {
                return Ok(Some(e.clone()));
            }
        }
        Ok(None)
    }

    /// Appends new revisions to the title's stream: into the open block, sealing it when the
    /// next revision does not fit or its file is full, and starting blocks as needed. New entries
    /// go to `entries`; returns the indexes of the existing blocks it changed.
    fn append(
        &mut self,
        key: &[u8],
        map: &mut TitleMap,
        fresh: &[(Item<'_>, u32)],
        entries: &mut Vec<Entry>,
    ) -> Result<Vec<u32>> {
        let mut touched = Vec::new();
        let existing = map.blocks.len() as u32;
        let mut rest = fresh;
        while !rest.is_empty() {
            let open = match map.blocks.last() {
                Some(b) if !b.sealed => map.blocks.len() as u32 - 1,
                _ => {
                    let n = map.blocks.len() as u32;
                    let key_block =
                        n == 0 || (self.opts.key_every > 0 && n % self.opts.key_every == 0);
                    map.blocks.push(Block {
                        sealed: false,
                        key: key_block,
                        last_len: 0,
                        frames: Vec::new(),
                    });
                    n
                }
            };
            let block = &map.blocks[open as usize];
            let room = self.opts.block_bytes.saturating_sub(block.raw_len());
            let mut take = 0;
            let mut size = 0u64;
            while take < rest.len() && size + rest[take].0.value.len() as u64 <= room {
                size += rest[take].0.value.len() as u64;
                take += 1;
            }
            if take == 0 && block.raw_len() > 0 {
                // The next revision does not fit: this block is done.
                map.blocks[open as usize].sealed = true;
                touched.push(open);
                continue;
            }
            // A revision larger than a whole block gets a block of its own.
            let take = take.max(1);
            let (now, later) = rest.split_at(take);
            self.append_frame(key, map, open, now, entries)?;
            if open < existing {
                touched.push(open);
            }
            let block = &mut map.blocks[open as usize];
            if block.raw_len() >= self.opts.block_bytes || block.frames.len() as u64 >= MAX_FRAMES {
                block.sealed = true;
            }
            rest = later;
        }
        Ok(touched)
    }

    fn append_frame(
        &mut self,
        key: &[u8],
        map: &mut TitleMap,
        n: u32,
        items: &[(Item<'_>, u32)],
        entries: &mut Vec<Entry>,
    ) -> Result<()> {
        let name = block_name(key, n);
        let before = map.blocks[n as usize].raw_len();
        let dict = if before == 0 {
            self.first_dictionary(key, map, n)?
        } else {
            self.block_content(key, map, n, before)?.to_vec()
        };
        let raw: Vec<u8> = items
            .iter()
            .flat_map(|(i, _)| i.value.iter().copied())
            .collect();
        let compressed = compress(&raw, &dict, self.opts.level)
            .map_err(|e| Error::io(self.fs.data().path(), None, e))?;
        if before == 0 {
            self.fs.put(&name, 0, &compressed)?;
        } else {
            // An appended frame: the block file grows, nothing is rewritten.
            self.fs.append(&name, &compressed)?;
        }
        let mut offset = before;
        for (item, crc) in items {
            entries.push(Entry {
                rev: item.rev,
                tid: item.tid,
                content_type: item.content_type.to_string(),
                labels: item.labels.clone(),
                block: n,
                offset,
                len: item.value.len() as u64,
                crc: *crc,
                taken_down: false,
            });
            offset += item.value.len() as u64;
        }
        let block = &mut map.blocks[n as usize];
        block.frames.push(Frame {
            stored: compressed.len() as u64,
            raw: raw.len() as u64,
        });
        block.last_len = items
            .last()
            .map_or(block.last_len, |(i, _)| i.value.len() as u64);
        self.forget(key, n);
        Ok(())
    }

    /// Marks a revision (or all, with `None`) of a title taken down: never returned again; the
    /// bytes stay in their block until a compaction rewrites it. Returns how many were marked.
    pub fn take_down(&mut self, key: &[u8], rev: Option<u64>) -> Result<usize> {
        let mut map = match self.load(key)? {
            None => return Ok(0),
            Some(AnyMap::V2(map)) => return self.take_down_v2(key, map, rev),
            Some(AnyMap::V1(map)) => map,
        };
        let down = map::to_take_down(&map.entries, rev);
        if down.is_empty() {
            return Ok(0);
        }
        let delta = Delta {
            down: down.clone(),
            ..Delta::default()
        };
        map.apply(&delta);
        self.write_map(key, &map, &delta)?;
        Ok(down.len())
    }

    /// Makes everything archived so far durable, and gives back the datafile's preallocated
    /// room: an archive grows by runs, and the room a run left would otherwise stay allocated
    /// (up to a growth step, 64 KiB) until the next run. Appending later allocates again.
    pub fn commit(&mut self) -> Result<()> {
        self.fs.seal()
    }

    /// Every title key with a map.
    pub fn titles(&self) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for stat in self.fs.iter() {
            let stat = stat?;
            if let Some(key) = stat.name.strip_prefix(b"m/") {
                out.push(key.to_vec());
            }
        }
        Ok(out)
    }

    /// Counts over the whole archive.
    pub fn stats(&self) -> Result<ArchiveStats> {
        let mut st = ArchiveStats::default();
        for key in self.titles()? {
            let (blocks, entries) = match self.load(&key)? {
                Some(AnyMap::V1(m)) => (m.blocks.len(), m.entries),
                Some(AnyMap::V2(m)) => (m.segments.len(), m.entries),
                None => continue,
            };
            st.titles += 1;
            st.blocks += blocks as u64;
            for e in entries.iter().filter(|e| !e.taken_down) {
                st.revisions += 1;
                st.raw_bytes += e.len;
            }
        }
        st.stored_bytes += filesys::files_size(self.vfs.as_ref(), &self.base, None)?;
        Ok(st)
    }

    /// Verifies every block decompresses and every revision matches its map entry and CRC.
    pub fn verify(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let path = self.fs.data().path().to_path_buf();
        let titles = match self.titles() {
            Ok(t) => t,
            Err(e) => return vec![Problem::from_error(&path, &e)],
        };
        for key in titles {
            let map = match self.load(&key) {
                Ok(Some(AnyMap::V1(m))) => m,
                Ok(Some(AnyMap::V2(m))) => {
                    if let Err(e) = self.verify_v2(&key, &m) {
                        let mut p = Problem::from_error(&path, &e);
                        p.severity = Severity::Error;
                        problems.push(p);
                    }
                    continue;
                }
                Ok(None) => continue,
                Err(e) => {
                    problems.push(Problem::from_error(&path, &e));
                    continue;
                }
            };
            for e in map.entries.iter().filter(|e| !e.taken_down) {
                if let Err(err) = self.read_in(&key, &map, e) {
                    let mut p = Problem::from_error(&path, &err);
                    p.severity = Severity::Error;
                    problems.push(p);
                    break;
                }
            }
        }
        problems
    }
}

/// What a title's archive already holds of a render an archive run brings (either format).
pub(crate) enum Held<'a> {
    /// The same bytes: a rerun after a crash; nothing to do.
    Same,
    /// Other bytes: the render was rewritten since; the new bytes replace this entry's.
    Replaced(&'a Entry),
    New,
}

/// Looks `item` (whose bytes' CRC-32 is `crc`) up among a title's entries: its map's and those
/// the run added so far. A taken-down copy does not count: after a lift, the same render put
/// again must be archived anew, or the run would drop it from the hot tier with no copy anywhere.
pub(crate) fn held<'a>(
    mut entries: impl Iterator<Item = &'a Entry>,
    item: &Item<'_>,
    crc: u32,
) -> Held<'a> {
    match entries.find(|e| !e.taken_down && e.rev == item.rev && e.tid == item.tid) {
        Some(e)
            if e.crc == crc
                && e.len == item.value.len() as u64
                && e.content_type == item.content_type
                && e.labels == *item.labels =>
        {
            Held::Same
        }
        Some(e) => Held::Replaced(e),
        None => Held::New,
    }
}

#[cfg(test)]
mod tests;
