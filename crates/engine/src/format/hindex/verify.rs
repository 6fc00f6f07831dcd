//! Checks of a hindex's cells against the keys they name: a sample on open (free cells' zero
//! hashes, a few used cells), the probe path of a key a lookup missed, and one cell at a time for
//! `wink check`.

use super::{hex, Cell, HIndex, KeySource, Probe, PROBE_BATCH};
use crate::error::{Error, Result};
use crate::format::hash::KeyHash;
use crate::format::kvseq::KvPointer;
use crate::storage::read_exact_at;

/// Used cells whose stored hash and probe path are verified on open.
const SPOT_CHECKS: usize = 16;
/// Cells scanned from each sample point for a used one.
const SPOT_SCAN: u64 = 256;

impl HIndex {
    /// Free and deleted cells must carry a zero stored hash; a few runs are checked on open so a
    /// wrong CELLSZ shows at once.
    pub(super) fn sample_free_cells(&self) -> Result<()> {
        if self.cellsz < 2 {
            return Ok(());
        }
        let width = (self.cellsz * 8) as usize;
        let mut buf = Vec::new();
        // One bad cell is damage to that cell, for the lookups that pass it to find; a wrong
        // CELLSZ or a table of another format fails many.
        let mut first_bad = None;
        let mut bad = 0u32;
        for k in 0..4u64 {
            let start = self.htsize * k / 4;
            let n = 16.min(self.htsize - start);
            buf.resize(n as usize * width, 0);
            let read = read_exact_at(
                self.storage.as_ref(),
                &mut buf,
                self.cell_offset(start),
                "hindex cells",
            );
            if let Err(e) = read {
                bad += 1;
                first_bad.get_or_insert(e);
                continue;
            }
            for (i, chunk) in buf.chunks_exact(width).enumerate() {
                let cell = start + i as u64;
                let used = match self.decode(cell, chunk) {
                    Ok(c) => matches!(c, Cell::Used { .. }),
                    Err(e) => {
                        bad += 1;
                        first_bad.get_or_insert(e);
                        continue;
                    }
                };
                if !used && chunk[8..16] != [0u8; 8] {
                    bad += 1;
                    first_bad.get_or_insert(Error::corrupt(
                        self.path(),
                        self.cell_offset(cell) + 8,
                        format!("stored hash of free/deleted cell {cell}"),
                        0,
                        format!("0x{}", hex(&chunk[8..16])),
                    ));
                }
            }
        }
        match first_bad {
            Some(e) if bad > 1 => Err(e),
            _ => Ok(()),
        }
    }

    /// Verifies a few used cells against their keys: the stored hash equals MD5(key)'s first 8
    /// bytes, and the key's probe from its home reaches the cell without passing a free cell. A
    /// wrong HTALGO or CELLSZ, or an index of another datafile, fails here at once: every cell
    /// fails. A minority that fails is damage to those cells (or their keys), left for the
    /// lookups that pass them to report, so that it stays with the names it touches.
    pub fn spot_check(&self, keys: &dyn KeySource) -> Result<()> {
        let (mut buf, mut cells) = (Vec::new(), Vec::new());
        let mut last_checked = None;
        let (mut passed, mut failed) = (0u32, Vec::new());
        // From evenly spaced points, the next used cell (within a bounded scan) is verified, so
        // a sparse table is checked as well as a full one.
        for k in 0..SPOT_CHECKS as u64 {
            let mut start = self.htsize * k / SPOT_CHECKS as u64;
            let mut scanned = 0;
            'scan: while scanned < SPOT_SCAN && start < self.htsize {
                let n = PROBE_BATCH.min(self.htsize - start);
                if let Err(e) = self.read_run(start, n, &mut buf, &mut cells) {
                    failed.push(e);
                    break 'scan;
                }
                for (i, c) in cells.iter().enumerate() {
                    let cell = start + i as u64;
                    if let Cell::Used { ptr, .. } = *c {
                        if last_checked != Some(cell) {
                            match self.verify_cell(cell, ptr, keys) {
                                Ok(()) => passed += 1,
                                Err(e) => failed.push(e),
                            }
                            last_checked = Some(cell);
                        }
                        break 'scan;
                    }
                }
                start += n;
                scanned += n;
            }
        }
        if failed.len() as u32 >= passed.max(1) {
            return Err(failed.swap_remove(0));
        }
        Ok(())
    }

    /// The key of the entry used cell `cell` names; a cell that names no entry is damaged.
    fn key_of(&self, cell: u64, ptr: KvPointer, keys: &dyn KeySource) -> Result<Vec<u8>> {
        keys.key_at(ptr).map_err(|e| match e {
            Error::NotFound(found) => Error::corrupt(
                self.path(),
                self.cell_offset(cell),
                format!("the kv_pointer of cell {cell}"),
                "a pointer to an entry",
                found,
            ),
            e => e,
        })
    }

    /// Checks the used cells a lookup of `key` passes (from its home cell to the first free
    /// one) against their keys: a miss is then known not to come from a damaged cell or key on
    /// its path. A cell zeroed whole reads as free and cannot be told apart here. Returns the
    /// first cell that names no entry, if any: damage to a writer, but to a reader whose view is
    /// older than a writer's commit, a sign of that commit.
    pub fn check_probe_path(&self, key: &[u8], keys: &dyn KeySource) -> Result<Option<u64>> {
        self.check_probe(&self.probe(key, |_| Ok(false))?, keys)
    }

    /// [`HIndex::check_probe_path`] of the cells a probe that missed read already: the cells
    /// the miss was decided on, checked without reading them again.
    pub fn check_probe(&self, probe: &Probe, keys: &dyn KeySource) -> Result<Option<u64>> {
        let mut unnamed = None;
        for (cell, c) in probe.cells() {
            match c {
                Cell::Free => break,
                Cell::Deleted => {}
                Cell::Used { ptr, stored_hash } => match keys.key_hash_at(ptr) {
                    Ok(own) => self.check_stored_hash(cell, ptr, stored_hash, own)?,
                    Err(Error::NotFound(_)) => {
                        unnamed.get_or_insert(cell);
                    }
                    Err(e) => return Err(e),
                },
            }
        }
        Ok(unnamed)
    }

    /// Checks one used cell against its key (see [`HIndex::spot_check`]).
    pub fn verify_cell(&self, cell: u64, ptr: KvPointer, keys: &dyn KeySource) -> Result<()> {
        let key = self.key_of(cell, ptr, keys)?;
        let hash = KeyHash::of(&key);
        if let Cell::Used { stored_hash, .. } = self.get(cell)? {
            self.check_stored_hash(cell, ptr, stored_hash, hash)?;
        }
        let home = hash.home(self.htsize);
        let mut c = home;
        while c != cell {
            if self.get(c)? == Cell::Free {
                return Err(self.unreachable(cell, ptr, home, c));
            }
            c = (c + 1) % self.htsize;
        }
        Ok(())
    }

    pub(super) fn check_stored_hash(
        &self,
        cell: u64,
        ptr: KvPointer,
        stored: u64,
        hash: KeyHash,
    ) -> Result<()> {
        if self.cellsz >= 2 && stored != hash.stored() {
            return Err(Error::corrupt(
                self.path(),
                self.cell_offset(cell) + 8,
                format!("stored hash of cell {cell} (key at {ptr})"),
                format!("0x{:016x}", hash.stored()),
                format!("0x{stored:016x}"),
            ));
        }
        Ok(())
    }

    pub(super) fn unreachable(&self, cell: u64, ptr: KvPointer, home: u64, free: u64) -> Error {
        Error::corrupt(
            self.path(),
            self.cell_offset(cell),
            format!("cell {cell} (key at {ptr}) unreachable from its home {home}"),
            "no free cell on the probe path",
            format!("free cell {free}"),
        )
    }
}
