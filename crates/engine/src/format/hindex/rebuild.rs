//! Rebuilding a hindex at another size: every used cell rehashed into a scratch table beside
//! the file, which is then renamed over it (atomic: a reader sees the old table or the new one).
//! A cell a lookup could not find (a wrong stored hash, or behind a free cell on its probe path)
//! is damage, and stops the rebuild rather than come back as a valid entry.

use super::{table_end, Cell, HIndex, KeySource, WRITER_HTDEL, WRITER_HTFREE};
use crate::error::{Error, Result};
use crate::format::hash::KeyHash;
use crate::format::kvseq::KvPointer;
use crate::format::superblock::var;
use crate::storage::{read_exact_at, write_all_at, Storage};

/// The suffix of the scratch table a rebuild writes beside the file (`PATH.grow`).
pub const GROW_SUFFIX: &str = "grow";
/// A rebuilt table up to this size is built in memory and written in one go.
const IN_MEMORY_REBUILD: u64 = 64 << 20;

impl HIndex {
    /// Rebuilds at a size that brings the load to half the limit, and swaps it in atomically.
    pub fn grow(&mut self, keys: &dyn KeySource) -> Result<()> {
        let mut size = self.htsize;
        while self.live as f64 > size as f64 * self.max_load * 0.5 {
            size = size.saturating_mul(2);
        }
        self.rebuild(size, keys)
    }

    /// Rebuilds the table with `htsize` cells (deleted cells go away) and swaps it in atomically.
    pub fn rebuild(&mut self, htsize: u64, keys: &dyn KeySource) -> Result<()> {
        self.check_writable()?;
        // Every cell may move, even in a rebuild that fails on the way: no probe made before
        // holds.
        self.changes += 1;
        if htsize == 0 || (self.live as f64) > htsize as f64 * self.max_load {
            return Err(Error::invalid(format!(
                "{htsize} cells cannot hold {} keys",
                self.live
            )));
        }
        let path = self.path().to_path_buf();
        let width = self.cellsz * 8;
        let table_bytes = htsize
            .checked_mul(width)
            .ok_or_else(|| Error::invalid("table too large"))?;
        let mut sb = self.sb.clone();
        let end = table_end(sb.sbsize(), htsize, self.cellsz)
            .ok_or_else(|| Error::invalid("table too large"))?;
        sb.set(&path, var::HTSIZE, htsize as i64)?;
        sb.set(&path, var::FILESIZE, end as i64)?;
        sb.set(&path, var::SYNCSIZE, end as i64)?;
        sb.set(&path, var::HTFREE, WRITER_HTFREE)?;
        sb.set(&path, var::HTDEL, WRITER_HTDEL)?;
        let temp = self
            .storage
            .create_temp(GROW_SUFFIX)
            .map_err(|e| Error::io(&path, None, e))?;
        let built = self.fill(temp.as_ref(), htsize, table_bytes, keys);
        let count = match built {
            Ok(count) => count,
            Err(e) => {
                let _ = self.storage.discard_temp(temp);
                return Err(e);
            }
        };
        if sb.get(var::ENTRIES).is_some() {
            sb.set(&path, var::ENTRIES, count as i64)?;
        }
        if sb.get(var::AENTRIES).is_some() {
            sb.set(&path, var::AENTRIES, count as i64)?;
        }
        sb.write(temp.as_ref())?;
        self.storage = self
            .storage
            .commit_temp(temp)
            .map_err(|e| Error::io(&path, None, e))?;
        self.sb = sb;
        self.htsize = htsize;
        self.htfree = WRITER_HTFREE;
        self.htdel = WRITER_HTDEL;
        self.entries = count;
        self.live = count;
        self.dirty = false;
        Ok(())
    }

    /// Writes the used cells of this table, rehashed, into `temp` as a table of `htsize` cells.
    fn fill(
        &self,
        temp: &dyn Storage,
        htsize: u64,
        table_bytes: u64,
        keys: &dyn KeySource,
    ) -> Result<u64> {
        let sbsize = self.sb.sbsize();
        let width = self.cellsz * 8;
        let path = temp.path().to_path_buf();
        temp.allocate(sbsize + table_bytes)
            .map_err(|e| Error::io(&path, None, e))?;
        let mut table = if table_bytes <= IN_MEMORY_REBUILD {
            Some(vec![0u8; table_bytes as usize])
        } else {
            None
        };
        let mut count = 0;
        let mut reach = Reach::default();
        let (mut buf, mut cells) = (Vec::new(), Vec::new());
        for old in 0..self.htsize {
            if old % 4096 == 0 {
                self.read_run(old, 4096.min(self.htsize - old), &mut buf, &mut cells)?;
            }
            let (ptr, stored) = match cells[(old % 4096) as usize] {
                Cell::Free => {
                    reach.last_free = Some(old);
                    continue;
                }
                Cell::Deleted => continue,
                Cell::Used { ptr, stored_hash } => (ptr, stored_hash),
            };
            let hash = keys.key_hash_at(ptr)?;
            self.check_carried(old, ptr, stored, hash, &mut reach)?;
            let mut cell = hash.home(htsize);
            let mut cell_bytes = [0u8; 16];
            cell_bytes[..8].copy_from_slice(&(ptr.0 as i64).to_be_bytes());
            cell_bytes[8..].copy_from_slice(&hash.stored().to_be_bytes());
            let n = (width as usize).min(16);
            loop {
                let at = cell * width;
                let free = match &table {
                    Some(t) => t[at as usize..at as usize + 8] == [0u8; 8],
                    None => {
                        let mut w = [0u8; 8];
                        read_exact_at(temp, &mut w, sbsize + at, "a new hindex cell")?;
                        w == [0u8; 8]
                    }
                };
                if free {
                    match &mut table {
                        Some(t) => {
                            t[at as usize..at as usize + n].copy_from_slice(&cell_bytes[..n])
                        }
                        None => write_all_at(temp, &cell_bytes[..n], sbsize + at)?,
                    }
                    break;
                }
                cell = (cell + 1) % htsize;
            }
            count += 1;
        }
        if let Some((home, cell, ptr)) = reach.wrapped {
            // A probe that wrapped past the end crossed no free cell at or after its home.
            if let Some(free) = reach.last_free.filter(|f| *f >= home) {
                return Err(self.unreachable(cell, ptr, home, free));
            }
        }
        if let Some(t) = table {
            write_all_at(temp, &t, sbsize)?;
        }
        Ok(count)
    }

    /// A rebuild carries over only cells a lookup can find: a used cell with a wrong stored hash,
    /// or behind a free cell on its probe path, is damage that rehashing would bring back as a
    /// valid (possibly duplicate) entry. Cells come in order, so a cell at or after its home
    /// is checked against the last free cell seen, and a wrapped one at the end of the sweep.
    fn check_carried(
        &self,
        old: u64,
        ptr: KvPointer,
        stored: u64,
        hash: KeyHash,
        reach: &mut Reach,
    ) -> Result<()> {
        self.check_stored_hash(old, ptr, stored, hash)?;
        let home = hash.home(self.htsize);
        let blocking = if home <= old {
            reach.last_free.filter(|f| *f >= home)
        } else {
            if reach.wrapped.is_none_or(|(h, _, _)| home < h) {
                reach.wrapped = Some((home, old, ptr));
            }
            reach.last_free
        };
        match blocking {
            Some(free) => Err(self.unreachable(old, ptr, home, free)),
            None => Ok(()),
        }
    }
}

/// What a rebuild's sweep knows of the old table's free cells (see [`HIndex::check_carried`]).
#[derive(Default)]
struct Reach {
    /// The last free cell met so far.
    last_free: Option<u64>,
    /// The wrapped cell with the smallest home: (home, cell, pointer).
    wrapped: Option<(u64, u64, KvPointer)>,
}
