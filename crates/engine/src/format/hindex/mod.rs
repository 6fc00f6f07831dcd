//! hindex (FORMAT 0x20): an on-disk hash table of kv_pointers with linear probing.
//!
//! | offset                      | size        | content                                     |
//! |-----------------------------|-------------|---------------------------------------------|
//! | 0                           | SBSIZE      | superblock (FORMAT 0x20, HTSIZE, CELLSZ, …)  |
//! | SBSIZE + i·CELLSZ·8         | CELLSZ·8    | cell i, for i in 0..HTSIZE                  |
//! | SBSIZE + HTSIZE·CELLSZ·8    |             | FILESIZE: the end of the table              |
//!
//! Cell: `word0` = a kv_pointer (≥ 0), HTFREE or HTDEL; with CELLSZ ≥ 2, `word1` = the first 8
//! bytes of MD5(key) for used cells and 0 for free and deleted ones ("stored hashes"); further
//! words are zero. Home cell = [`KeyHash::home`]; probing goes h, h+1, … wrapping at HTSIZE and
//! stops at an HTFREE cell. Writers use HTFREE = 0 (a new table is a zero-filled file) and
//! HTDEL = −1 and store both; readers take them from the superblock.
//!
//! Past the load limit the table is rebuilt at a larger size in a scratch file and renamed over
//! the old one (atomic: a reader sees the old table or the new one, never a half-built one).
//!
//! The code: this file holds the open table, lookups and single-cell writes; `rebuild.rs` the
//! rebuild at another size in a scratch file (`PATH.`[`GROW_SUFFIX`]), `verify.rs` the checks
//! of cells against their keys (on open, on a miss, and for `wink check`).

mod rebuild;
mod verify;

#[cfg(test)]
mod tests;

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::hash::{KeyHash, HTALGO_MD5};
use crate::format::kvseq::{KvPointer, KvSeq};
use crate::format::superblock::{var, Format, Purpose, Superblock, VarName, DEFAULT_SBSIZE};
use crate::storage::{self, length, read_exact_at, write_all_at, FileStorage, Storage};

pub use rebuild::GROW_SUFFIX;

/// HTFREE written by this library.
pub const WRITER_HTFREE: i64 = 0;
/// HTDEL written by this library.
pub const WRITER_HTDEL: i64 = -1;
/// Default load limit: (cells not HTFREE) / HTSIZE above this triggers a rebuild.
pub const DEFAULT_MAX_LOAD: f64 = 0.75;
/// Largest CELLSZ accepted (bounds a cell read).
pub const MAX_CELLSZ: u64 = 64;
/// Cells fetched per read while probing.
const PROBE_BATCH: u64 = 8;

/// Reads the key of a kvseq entry (for comparisons and rebuilds).
pub trait KeySource {
    /// The key of the entry at `ptr`; an error when the entry cannot be read.
    fn key_at(&self, ptr: KvPointer) -> Result<Vec<u8>>;

    /// The hash of the key at `ptr` (a source that holds the key in memory hashes it there,
    /// without a copy).
    fn key_hash_at(&self, ptr: KvPointer) -> Result<KeyHash> {
        Ok(KeyHash::of(&self.key_at(ptr)?))
    }
}

impl KeySource for KvSeq {
    fn key_at(&self, ptr: KvPointer) -> Result<Vec<u8>> {
        Ok(self.read_key(ptr)?.1)
    }
}

/// Settings for a new hindex.
#[derive(Clone, Debug)]
pub struct HIndexOptions {
    /// SBSIZE: the superblock's size, bytes.
    pub sbsize: u64,
    /// PURPOSE: the caller's 8 characters, not interpreted.
    pub purpose: Purpose,
    /// HTSIZE: the number of cells of the table.
    pub htsize: u64,
    /// CELLSZ: the cell size in 64-bit words (1 to [`MAX_CELLSZ`]; 2 and up keep a hash beside
    /// the pointer).
    pub cellsz: u64,
    /// The load limit: (cells not HTFREE) / HTSIZE above this rebuilds the table larger.
    pub max_load: f64,
    /// SYNCTIME written at create, seconds since the epoch.
    pub time: i64,
}

impl Default for HIndexOptions {
    fn default() -> Self {
        HIndexOptions {
            sbsize: DEFAULT_SBSIZE,
            purpose: Purpose(*b"HINDEX  "),
            htsize: 1024,
            cellsz: 2,
            max_load: DEFAULT_MAX_LOAD,
            time: 0,
        }
    }
}

/// The contents of one cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// HTFREE: never used; a probe stops here.
    Free,
    /// HTDEL: used once, now deleted; a probe goes on past it.
    Deleted,
    /// A kv_pointer; `stored_hash` is the second word (0 when CELLSZ is 1).
    Used {
        /// Where the entry lies in the kvseq.
        ptr: KvPointer,
        /// The hash kept beside the pointer.
        stored_hash: u64,
    },
}

/// A key found in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// The cell's index in the table.
    pub cell: u64,
    /// The kv_pointer the cell holds.
    pub ptr: KvPointer,
}

/// What a probe for a key read: the cells from the key's home on, up to the one that ended it
/// (the key's cell on a hit, the first free cell on a miss, or every cell of a table without a
/// free one). A miss's verification checks these cells rather than read them again, and the
/// insert that follows a miss ([`HIndex::insert_probed`]) takes its cell from them while the
/// table is as the probe read it.
#[derive(Clone, Debug)]
pub struct Probe {
    hash: KeyHash,
    htsize: u64,
    home: u64,
    cells: Vec<Cell>,
    found: Option<Found>,
    /// The table's [`HIndex::state`] when the cells were read.
    state: (u64, u64),
}

impl Probe {
    /// The key found, if any.
    pub fn found(&self) -> Option<Found> {
        self.found
    }

    /// The cells read, with their index in the table, in probe order.
    pub fn cells(&self) -> impl Iterator<Item = (u64, Cell)> + '_ {
        let (home, htsize) = (self.home, self.htsize);
        (home..)
            .zip(&self.cells)
            .map(move |(cell, c)| (cell % htsize, *c))
    }
}

/// Gives each open table an identity of its own, for [`HIndex::state`].
static TABLES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// An open hindex.
#[derive(Debug)]
pub struct HIndex {
    storage: Box<dyn Storage>,
    sb: Superblock,
    htsize: u64,
    cellsz: u64,
    htfree: i64,
    htdel: i64,
    entries: u64,
    live: u64,
    max_load: f64,
    writable: bool,
    dirty: bool,
    /// This handle's identity and the cell writes and rebuilds it has made: a [`Probe`] made at
    /// the same pair read cells that are still as it read them.
    id: u64,
    changes: u64,
}

impl HIndex {
    /// Creates an empty table in empty storage, durably.
    pub fn create(storage: Box<dyn Storage>, opts: &HIndexOptions) -> Result<HIndex> {
        let index = HIndex::create_unsynced(storage, opts)?;
        storage::sync(index.storage())?;
        Ok(index)
    }

    /// Creates an empty table in empty storage without a sync: for a caller that makes several
    /// new files durable with one barrier ([`crate::storage::sync_all`]).
    pub fn create_unsynced(storage: Box<dyn Storage>, opts: &HIndexOptions) -> Result<HIndex> {
        let path = storage.path().to_path_buf();
        if opts.htsize == 0 || !(1..=MAX_CELLSZ).contains(&opts.cellsz) {
            return Err(Error::invalid(format!(
                "HTSIZE {} and CELLSZ {}: HTSIZE ≥ 1, CELLSZ 1..={MAX_CELLSZ}",
                opts.htsize, opts.cellsz
            )));
        }
        if !(0.05..=0.95).contains(&opts.max_load) {
            return Err(Error::invalid(format!(
                "load limit {} outside 0.05..=0.95",
                opts.max_load
            )));
        }
        let table_end = table_end(opts.sbsize, opts.htsize, opts.cellsz)
            .ok_or_else(|| Error::invalid("table too large"))?;
        let mut sb = Superblock::new(opts.sbsize, Format::HIndex, opts.purpose)?;
        let vars = [
            (var::FILESIZE, table_end as i64),
            (var::FILEINCR, opts.sbsize as i64),
            (var::SYNCSIZE, table_end as i64),
            (var::SYNCTIME, opts.time),
            (var::HTSIZE, opts.htsize as i64),
            (var::CELLSZ, opts.cellsz as i64),
            (var::HTALGO, HTALGO_MD5),
            (var::HTFREE, WRITER_HTFREE),
            (var::HTDEL, WRITER_HTDEL),
            (var::ENTRIES, 0),
            (var::AENTRIES, 0),
        ];
        for (name, value) in vars {
            sb.set(&path, name, value)?;
        }
        storage
            .allocate(table_end)
            .map_err(|e| Error::io(&path, Some(0), e))?;
        sb.write(storage.as_ref())?;
        let mut index = HIndex::from_superblock(storage, sb, true)?;
        index.max_load = opts.max_load;
        Ok(index)
    }

    /// Creates a new hindex file at `path` (which must not exist).
    pub fn create_path(path: &Path, opts: &HIndexOptions) -> Result<HIndex> {
        HIndex::create(Box::new(FileStorage::create_new(path)?), opts)
    }

    /// Opens a hindex. A read-only open never writes.
    pub fn open(storage: Box<dyn Storage>, writable: bool) -> Result<HIndex> {
        let sb = Superblock::read(storage.as_ref())?;
        HIndex::from_superblock(storage, sb, writable)
    }

    /// Opens the hindex file at `path`.
    pub fn open_path(path: &Path, writable: bool) -> Result<HIndex> {
        HIndex::open(Box::new(FileStorage::open(path, writable)?), writable)
    }

    fn from_superblock(
        storage: Box<dyn Storage>,
        sb: Superblock,
        writable: bool,
    ) -> Result<HIndex> {
        let path = storage.path().to_path_buf();
        let at = |name: VarName| sb.value_offset(name).unwrap_or(0);
        sb.expect_format(&path, Format::HIndex)?;
        let htsize = sb.require_u64(&path, var::HTSIZE)?;
        // HTSIZE is a divisor (home = hash mod HTSIZE).
        if htsize == 0 {
            return Err(Error::corrupt(&path, at(var::HTSIZE), "HTSIZE", "≥ 1", 0));
        }
        let cellsz = sb.get_u64(&path, var::CELLSZ)?.unwrap_or(1);
        if !(1..=MAX_CELLSZ).contains(&cellsz) {
            return Err(Error::unsupported(
                &path,
                at(var::CELLSZ),
                format!("CELLSZ {cellsz} (supported 1..={MAX_CELLSZ})"),
            ));
        }
        let algo = sb.get(var::HTALGO).unwrap_or(HTALGO_MD5);
        if algo != HTALGO_MD5 {
            return Err(Error::unsupported(
                &path,
                at(var::HTALGO),
                format!("HTALGO {algo} (only 1, MD5, is defined)"),
            ));
        }
        let htfree = sb.get(var::HTFREE).unwrap_or(WRITER_HTFREE);
        let htdel = sb.get(var::HTDEL).unwrap_or(WRITER_HTDEL);
        if htfree == htdel {
            return Err(Error::corrupt(
                &path,
                at(var::HTDEL),
                "HTDEL",
                format!("different from HTFREE {htfree}"),
                htdel,
            ));
        }
        let file_len = length(storage.as_ref())?;
        // Every cell offset is computed from these; the table must lie within the file.
        let end = table_end(sb.sbsize(), htsize, cellsz)
            .filter(|e| *e <= file_len)
            .ok_or_else(|| {
                Error::corrupt(
                    &path,
                    at(var::HTSIZE),
                    "HTSIZE: table past the end of the file",
                    format!("a table within {file_len} bytes"),
                    format!("{htsize} cells of {cellsz} words"),
                )
            })?;
        if let Some(filesize) = sb.get_u64(&path, var::FILESIZE)? {
            if filesize != end {
                return Err(Error::corrupt(
                    &path,
                    at(var::FILESIZE),
                    "FILESIZE",
                    format!("SBSIZE + HTSIZE·CELLSZ·8 = {end}"),
                    filesize,
                ));
            }
        }
        let entries = sb.get_u64(&path, var::ENTRIES)?;
        let live = sb.get_u64(&path, var::AENTRIES)?;
        // Growth sizes the new table from these counts: damaged ones must not size an allocation.
        for (name, count) in [(var::ENTRIES, entries), (var::AENTRIES, live)] {
            if let Some(count) = count.filter(|c| *c > htsize) {
                let expected = format!("at most HTSIZE {htsize}");
                return Err(Error::corrupt(
                    &path,
                    at(name),
                    name.to_string(),
                    expected,
                    count,
                ));
            }
        }
        let mut index = HIndex {
            storage,
            sb,
            htsize,
            cellsz,
            htfree,
            htdel,
            entries: entries.unwrap_or(0),
            live: live.unwrap_or(0),
            max_load: DEFAULT_MAX_LOAD,
            writable,
            dirty: false,
            id: TABLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            changes: 0,
        };
        if writable && (entries.is_none() || live.is_none()) {
            // Growth needs the counts; a table that does not keep them is counted once.
            let (e, l) = index.count()?;
            index.entries = e;
            index.live = l;
        }
        index.sample_free_cells()?;
        Ok(index)
    }

    /// The indexfile's path.
    pub fn path(&self) -> &Path {
        self.storage.path()
    }

    /// The storage it is read and written through.
    pub fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    /// The superblock, its variables as this handle holds them.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// HTSIZE: the number of cells.
    pub fn htsize(&self) -> u64 {
        self.htsize
    }

    /// CELLSZ: the cell size in 64-bit words.
    pub fn cellsz(&self) -> u64 {
        self.cellsz
    }

    /// Cells that are not HTFREE (ENTRIES).
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Cells in use (AENTRIES).
    pub fn live(&self) -> u64 {
        self.live
    }

    /// The load limit that triggers a rebuild.
    pub fn max_load(&self) -> f64 {
        self.max_load
    }

    /// Sets the load limit that triggers a rebuild (0.05..=0.95).
    pub fn set_max_load(&mut self, max_load: f64) -> Result<()> {
        if !(0.05..=0.95).contains(&max_load) {
            return Err(Error::invalid(format!(
                "load limit {max_load} outside 0.05..=0.95"
            )));
        }
        self.max_load = max_load;
        Ok(())
    }

    /// True when the next insert would pass the load limit (and so rebuild the table).
    pub fn needs_growth(&self) -> bool {
        (self.entries + 1) as f64 > self.max_load * self.htsize as f64
    }

    /// The home cell of a key.
    pub fn home(&self, key: &[u8]) -> u64 {
        KeyHash::of(key).home(self.htsize)
    }

    /// The byte offset of cell `cell` in the index file.
    pub fn cell_offset(&self, cell: u64) -> u64 {
        self.sb.sbsize() + cell * self.cellsz * 8
    }

    fn decode(&self, cell: u64, bytes: &[u8]) -> Result<Cell> {
        let word0 = i64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        let word1 = if self.cellsz >= 2 {
            u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"))
        } else {
            0
        };
        if word0 == self.htfree {
            return Ok(Cell::Free);
        }
        if word0 == self.htdel {
            return Ok(Cell::Deleted);
        }
        match u64::try_from(word0) {
            Ok(ptr) => Ok(Cell::Used {
                ptr: KvPointer(ptr),
                stored_hash: word1,
            }),
            Err(_) => Err(Error::corrupt(
                self.path(),
                self.cell_offset(cell),
                format!("hindex cell {cell}"),
                format!(
                    "a kv_pointer ≥ 0, HTFREE {} or HTDEL {}",
                    self.htfree, self.htdel
                ),
                word0,
            )),
        }
    }

    /// Reads cell `cell` (0..HTSIZE).
    pub fn get(&self, cell: u64) -> Result<Cell> {
        if cell >= self.htsize {
            return Err(Error::invalid(format!(
                "cell {cell} outside 0..{}",
                self.htsize
            )));
        }
        let mut buf = vec![0u8; (self.cellsz * 8) as usize];
        read_exact_at(
            self.storage.as_ref(),
            &mut buf,
            self.cell_offset(cell),
            "a hindex cell",
        )?;
        self.decode(cell, &buf)
    }

    /// Reads cells `[start, start + n)` (no wrap) into `cells`.
    fn read_run(&self, start: u64, n: u64, buf: &mut Vec<u8>, cells: &mut Vec<Cell>) -> Result<()> {
        cells.clear();
        self.read_run_onto(start, n, buf, cells)
    }

    /// Reads cells `[start, start + n)` (no wrap) onto the end of `cells`.
    fn read_run_onto(
        &self,
        start: u64,
        n: u64,
        buf: &mut Vec<u8>,
        cells: &mut Vec<Cell>,
    ) -> Result<()> {
        let width = self.cellsz * 8;
        buf.resize((n * width) as usize, 0);
        read_exact_at(
            self.storage.as_ref(),
            buf,
            self.cell_offset(start),
            "hindex cells",
        )?;
        for (i, chunk) in buf.chunks_exact(width as usize).enumerate() {
            cells.push(self.decode(start + i as u64, chunk)?);
        }
        Ok(())
    }

    /// Probes for `key`: stored hashes are compared before `matches` reads any key.
    pub fn find(
        &self,
        key: &[u8],
        matches: impl FnMut(KvPointer) -> Result<bool>,
    ) -> Result<Option<Found>> {
        let mut cells = Vec::new();
        self.walk(KeyHash::of(key), matches, &mut cells)
    }

    /// [`HIndex::find`], keeping what it read: for a miss's verification
    /// ([`HIndex::check_probe`]) and the insert that follows it ([`HIndex::insert_probed`]).
    pub fn probe(
        &self,
        key: &[u8],
        matches: impl FnMut(KvPointer) -> Result<bool>,
    ) -> Result<Probe> {
        let hash = KeyHash::of(key);
        let mut cells = Vec::new();
        let found = self.walk(hash, matches, &mut cells)?;
        Ok(Probe {
            hash,
            htsize: self.htsize,
            home: hash.home(self.htsize),
            cells,
            found,
            state: self.state(),
        })
    }

    /// The probe of `hash` from its home cell: `cells` gets every cell read up to the one that
    /// ends it (the cells of the last batch past that one are dropped).
    fn walk(
        &self,
        hash: KeyHash,
        mut matches: impl FnMut(KvPointer) -> Result<bool>,
        cells: &mut Vec<Cell>,
    ) -> Result<Option<Found>> {
        let stored = hash.stored();
        let home = hash.home(self.htsize);
        let mut cell = home;
        let mut buf = Vec::new();
        cells.clear();
        // At most HTSIZE probes: a damaged table without a free cell still ends.
        while (cells.len() as u64) < self.htsize {
            let probed = cells.len();
            let n = PROBE_BATCH
                .min(self.htsize - cell)
                .min(self.htsize - probed as u64);
            self.read_run_onto(cell, n, &mut buf, cells)?;
            for i in probed..cells.len() {
                match cells[i] {
                    Cell::Free => {
                        cells.truncate(i + 1);
                        return Ok(None);
                    }
                    Cell::Deleted => {}
                    Cell::Used { ptr, stored_hash } => {
                        if (self.cellsz < 2 || stored_hash == stored) && matches(ptr)? {
                            cells.truncate(i + 1);
                            return Ok(Some(Found {
                                cell: (home + i as u64) % self.htsize,
                                ptr,
                            }));
                        }
                    }
                }
            }
            cell = (cell + n) % self.htsize;
        }
        Ok(None)
    }

    /// This handle's identity and count of changes to the table: equal pairs, equal cells.
    fn state(&self) -> (u64, u64) {
        (self.id, self.changes)
    }

    /// Looks `key` up, reading candidate keys from `keys`.
    pub fn lookup(&self, key: &[u8], keys: &dyn KeySource) -> Result<Option<Found>> {
        self.find(key, |ptr| Ok(keys.key_at(ptr)? == key))
    }

    fn check_writable(&self) -> Result<()> {
        Error::check_writable(self.writable, self.path())
    }

    fn write_cell(&mut self, cell: u64, word0: i64, word1: u64) -> Result<()> {
        let mut bytes = Vec::with_capacity(16);
        bytes.extend_from_slice(&word0.to_be_bytes());
        if self.cellsz >= 2 {
            bytes.extend_from_slice(&word1.to_be_bytes());
        }
        self.changes += 1;
        write_all_at(self.storage.as_ref(), &bytes, self.cell_offset(cell))?;
        self.dirty = true;
        Ok(())
    }

    /// Inserts `key` → `ptr` in the first free or deleted cell of its probe sequence (the caller
    /// makes sure the key is not there yet). Rebuilds the table first when it would pass the load
    /// limit. Returns the cell used.
    pub fn insert(&mut self, key: &[u8], ptr: KvPointer, keys: &dyn KeySource) -> Result<u64> {
        self.prepare_insert(ptr, keys)?;
        self.insert_hash(KeyHash::of(key), ptr)
    }

    /// [`HIndex::insert`] of the key `probe` missed. While nothing was written to the table
    /// since the probe (and it was not rebuilt), the probe's cells say where the key goes and
    /// none is read again; otherwise the key is probed afresh.
    pub fn insert_probed(
        &mut self,
        probe: &Probe,
        ptr: KvPointer,
        keys: &dyn KeySource,
    ) -> Result<u64> {
        self.prepare_insert(ptr, keys)?;
        if probe.found.is_none() && probe.state == self.state() {
            if let Some((target, cell)) =
                probe.cells().find(|(_, c)| !matches!(c, Cell::Used { .. }))
            {
                return self.place(target, cell, ptr, probe.hash);
            }
        }
        self.insert_hash(probe.hash, ptr)
    }

    /// What every insert checks and does first: a writable table, a pointer a cell can hold,
    /// and room below the load limit.
    fn prepare_insert(&mut self, ptr: KvPointer, keys: &dyn KeySource) -> Result<()> {
        self.check_writable()?;
        if ptr.0 > i64::MAX as u64 || ptr.0 as i64 == self.htfree || ptr.0 as i64 == self.htdel {
            return Err(Error::invalid(format!(
                "kv_pointer {ptr} cannot be stored in this table"
            )));
        }
        if self.needs_growth() {
            self.grow(keys)?;
        }
        Ok(())
    }

    fn insert_hash(&mut self, hash: KeyHash, ptr: KvPointer) -> Result<u64> {
        let mut cell = hash.home(self.htsize);
        let (mut buf, mut cells) = (Vec::new(), Vec::new());
        let mut probed = 0;
        while probed < self.htsize {
            let n = PROBE_BATCH
                .min(self.htsize - cell)
                .min(self.htsize - probed);
            self.read_run(cell, n, &mut buf, &mut cells)?;
            if let Some(i) = cells.iter().position(|c| !matches!(c, Cell::Used { .. })) {
                return self.place(cell + i as u64, cells[i], ptr, hash);
            }
            probed += n;
            cell = (cell + n) % self.htsize;
        }
        Err(Error::Full {
            path: self.path().to_path_buf(),
            what: "hash table has no free or deleted cell".into(),
        })
    }

    /// Writes `ptr` into `target`, a cell found `was` (free or deleted), and counts it.
    fn place(&mut self, target: u64, was: Cell, ptr: KvPointer, hash: KeyHash) -> Result<u64> {
        if was == Cell::Free {
            self.entries += 1;
        }
        self.live += 1;
        self.write_cell(target, ptr.0 as i64, hash.stored())?;
        Ok(target)
    }

    /// Points a used cell at a new kv_pointer for the same key (e.g. a newer version).
    pub fn set_pointer(&mut self, cell: u64, ptr: KvPointer) -> Result<()> {
        self.check_writable()?;
        match self.get(cell)? {
            Cell::Used { stored_hash, .. } if ptr.0 <= i64::MAX as u64 => {
                self.write_cell(cell, ptr.0 as i64, stored_hash)
            }
            other => Err(Error::invalid(format!(
                "cell {cell} is {other:?}, not a used cell"
            ))),
        }
    }

    /// [`HIndex::set_pointer`] of a cell a lookup has just found used, with nothing written to
    /// the table since: word 0 is written alone, without reading the cell again (the stored hash
    /// stays as it is). A file rewrite repoints a cell per put; the read was a pread each.
    pub fn repoint(&mut self, found: Found, ptr: KvPointer) -> Result<()> {
        self.check_writable()?;
        let word0 = ptr.0 as i64;
        if found.cell >= self.htsize
            || ptr.0 > i64::MAX as u64
            || word0 == self.htfree
            || word0 == self.htdel
        {
            return Err(Error::invalid(format!(
                "cell {} cannot point at {ptr}",
                found.cell
            )));
        }
        self.changes += 1;
        write_all_at(
            self.storage.as_ref(),
            &word0.to_be_bytes(),
            self.cell_offset(found.cell),
        )?;
        self.dirty = true;
        Ok(())
    }

    /// Marks a used cell deleted (HTDEL, stored hash zeroed).
    pub fn delete_cell(&mut self, cell: u64) -> Result<()> {
        self.check_writable()?;
        match self.get(cell)? {
            Cell::Used { .. } => {
                self.write_cell(cell, self.htdel, 0)?;
                self.live = self.live.saturating_sub(1);
                Ok(())
            }
            other => Err(Error::invalid(format!(
                "cell {cell} is {other:?}, not a used cell"
            ))),
        }
    }

    /// Removes `key`; returns the pointer it had.
    pub fn remove(&mut self, key: &[u8], keys: &dyn KeySource) -> Result<Option<KvPointer>> {
        let Some(found) = self.lookup(key, keys)? else {
            return Ok(None);
        };
        self.delete_cell(found.cell)?;
        Ok(Some(found.ptr))
    }

    /// Every used cell: (cell, pointer), in cell order.
    pub fn used_cells(&self) -> UsedCells<'_> {
        UsedCells {
            index: self,
            next: 0,
            buf: Vec::new(),
            cells: Vec::new(),
            pos: 0,
        }
    }

    /// Counts (cells not free, cells used) by reading the whole table.
    pub fn count(&self) -> Result<(u64, u64)> {
        let (mut entries, mut live) = (0, 0);
        let (mut buf, mut cells) = (Vec::new(), Vec::new());
        let mut start = 0;
        while start < self.htsize {
            let n = 4096.min(self.htsize - start);
            self.read_run(start, n, &mut buf, &mut cells)?;
            for c in &cells {
                match c {
                    Cell::Free => {}
                    Cell::Deleted => entries += 1,
                    Cell::Used { .. } => {
                        entries += 1;
                        live += 1;
                    }
                }
            }
            start += n;
        }
        Ok((entries, live))
    }

    /// Writes ENTRIES and AENTRIES (no fsync).
    pub fn flush(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let path = self.path().to_path_buf();
        for (name, value) in [(var::ENTRIES, self.entries), (var::AENTRIES, self.live)] {
            if self.sb.get(name).is_some() {
                self.sb.set(&path, name, value as i64)?;
            }
        }
        self.sb.write_vars(self.storage.as_ref())?;
        self.dirty = false;
        Ok(())
    }

    /// Makes the table durable and records SYNCTIME (`time`, seconds since the epoch).
    pub fn sync(&mut self, time: i64) -> Result<()> {
        storage::sync(self.storage.as_ref())?;
        self.stage_sync(time)?;
        storage::sync(self.storage.as_ref())
    }

    /// Writes ENTRIES, AENTRIES, SYNCSIZE and SYNCTIME without any fsync (for a caller that
    /// orders the syncs itself).
    pub fn stage_sync(&mut self, time: i64) -> Result<()> {
        self.check_writable()?;
        let path = self.path().to_path_buf();
        self.sb.set(&path, var::SYNCTIME, time)?;
        let end = self.sb.sbsize() + self.htsize * self.cellsz * 8;
        self.sb.set(&path, var::SYNCSIZE, end as i64)?;
        self.dirty = true;
        self.flush()
    }
}

impl Drop for HIndex {
    fn drop(&mut self) {
        if self.writable && self.dirty {
            let _ = self.flush();
        }
    }
}

/// Iterator over the used cells of a table: `(cell, pointer)`.
pub struct UsedCells<'a> {
    index: &'a HIndex,
    next: u64,
    buf: Vec<u8>,
    cells: Vec<Cell>,
    pos: usize,
}

impl Iterator for UsedCells<'_> {
    type Item = Result<(u64, KvPointer)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            while self.pos < self.cells.len() {
                let i = self.pos;
                self.pos += 1;
                if let Cell::Used { ptr, .. } = self.cells[i] {
                    return Some(Ok((self.next - self.cells.len() as u64 + i as u64, ptr)));
                }
            }
            if self.next >= self.index.htsize {
                return None;
            }
            let n = 4096.min(self.index.htsize - self.next);
            if let Err(e) = self
                .index
                .read_run(self.next, n, &mut self.buf, &mut self.cells)
            {
                self.next = self.index.htsize;
                self.cells.clear();
                return Some(Err(e));
            }
            self.next += n;
            self.pos = 0;
        }
    }
}

fn table_end(sbsize: u64, htsize: u64, cellsz: u64) -> Option<u64> {
    htsize
        .checked_mul(cellsz)?
        .checked_mul(8)?
        .checked_add(sbsize)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
