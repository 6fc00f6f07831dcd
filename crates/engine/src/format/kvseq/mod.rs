//! kvseq (FORMAT 0x10): a sequence of (delflag, key, value) entries after the superblock.
//!
//! | offset                    | size     | content                                          |
//! |---------------------------|----------|--------------------------------------------------|
//! | 0                         | SBSIZE   | superblock (FORMAT 0x10, KEYREPR, VALREPR, …)     |
//! | align(SBSIZE)             | …        | entry, entry, …, each starting at align(prev end) |
//! | FILESIZE                  | …        | preallocated space; meaningless                  |
//!
//! Grammar: `entry = delflag? keyrepr valrepr`, where `delflag` is one byte (0 live, 1 deleted)
//! present only when KVDELFL = 1, and each repr is laid out as [`Repr`] says. With ALIGN > 0,
//! each entry starts at the next multiple of ALIGN (gap bytes zero). A [`KvPointer`] is the byte
//! offset of an entry.
//!
//! Variables read: FILESIZE (required), KEYREPR, VALREPR (required), KVDELFL, ALIGN, FILEINCR,
//! ENTRIES, AENTRIES, SYNCSIZE, SYNCTIME. The writer keeps FILESIZE, ENTRIES and AENTRIES in memory
//! and writes them on [`KvSeq::flush`] and [`KvSeq::sync`]; a reader sees the entries up to the
//! last flush.
//!
//! The code, by concept: `entry.rs` is the layout of one entry (encoding it; decoding and
//! bounds-checking it through a read-ahead window), `write.rs` the writer (append, replace,
//! delete, flush and sync, with the drop-behind page-cache policy), `iter.rs` the walks in file
//! order. This file holds the open file and the reads of one entry.

mod entry;
mod image;
mod iter;
mod write;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::format::repr::Repr;
use crate::format::superblock::{var, Format, Purpose, Superblock, VarName, DEFAULT_SBSIZE};
use crate::storage::{length, read_exact_at, FileStorage, Storage};

pub use entry::{Entry, EntryInfo, EntryLayout};
pub use image::Image;
pub use iter::Iter;
pub use write::{DropBehind, WRITEBACK_KICK};

use entry::{zero_byte_entries, Window};
use write::WritebackState;

/// The byte offset of a kvseq entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KvPointer(pub u64);

impl fmt::Display for KvPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Largest ALIGN a reader accepts: bounds the zero gap a hostile header can ask for.
pub const MAX_ALIGN: u64 = 1 << 20;
/// Largest FILEINCR honoured; larger values are clamped (preallocation is only a hint).
pub const MAX_FILEINCR: u64 = 1 << 30;
/// How much a single-entry read fetches first (header, key and a small value in one pread).
const POINT_WINDOW: usize = 4096;

/// Settings for a new kvseq.
#[derive(Clone, Debug)]
pub struct KvSeqOptions {
    /// SBSIZE: the superblock's size, bytes.
    pub sbsize: u64,
    /// PURPOSE: the caller's 8 characters, not interpreted.
    pub purpose: Purpose,
    /// KEYREPR: how keys are laid out.
    pub keyrepr: Repr,
    /// VALREPR: how values are laid out.
    pub valrepr: Repr,
    /// KVDELFL: every entry starts with a delflag byte, so it can be deleted in place.
    pub delflag: bool,
    /// ALIGN: entries start at multiples of this many bytes (0 or 1: none).
    pub align: u64,
    /// FILEINCR: the preallocation step of the file's real length, bytes (0: none).
    pub fileincr: u64,
    /// Extra variables written after the standard ones (e.g. a filesys's ISZ).
    pub extra: Vec<(VarName, i64)>,
    /// Where SYNCTIME is taken from at each sync.
    pub clock: Arc<dyn Clock>,
}

impl Default for KvSeqOptions {
    fn default() -> Self {
        KvSeqOptions {
            sbsize: DEFAULT_SBSIZE,
            purpose: Purpose(*b"KVSEQ   "),
            keyrepr: Repr::Prefixed { width: 2 },
            valrepr: Repr::Prefixed { width: 4 },
            delflag: true,
            align: 0,
            fileincr: 1 << 20,
            extra: Vec::new(),
            clock: clock::system(),
        }
    }
}

/// An open kvseq file.
#[derive(Debug)]
pub struct KvSeq {
    storage: Box<dyn Storage>,
    sb: Superblock,
    keyrepr: Repr,
    valrepr: Repr,
    delflag: bool,
    align: u64,
    fileincr: u64,
    data_start: u64,
    filesize: u64,
    allocated: u64,
    writable: bool,
    dirty: bool,
    clock: Arc<dyn Clock>,
    drop_behind: Option<DropBehind>,
    writeback: WritebackState,
}

impl KvSeq {
    /// Creates a kvseq in empty storage, durably.
    pub fn create(storage: Box<dyn Storage>, opts: &KvSeqOptions) -> Result<KvSeq> {
        let mut kv = KvSeq::create_unsynced(storage, opts)?;
        kv.sync()?;
        Ok(kv)
    }

    /// Creates a kvseq in empty storage without a sync: for a caller that makes several new
    /// files durable with one barrier ([`crate::storage::sync_all`]). The superblock written
    /// is whole (SYNCSIZE = FILESIZE = its size), so one sync of the storage suffices.
    pub fn create_unsynced(storage: Box<dyn Storage>, opts: &KvSeqOptions) -> Result<KvSeq> {
        let sb = new_superblock(storage.path(), opts)?;
        sb.write(storage.as_ref())?;
        let mut kv = KvSeq::from_superblock(storage, sb, true)?;
        kv.clock = opts.clock.clone();
        Ok(kv)
    }

    /// Creates a new kvseq file at `path` (which must not exist).
    pub fn create_path(path: &Path, opts: &KvSeqOptions) -> Result<KvSeq> {
        KvSeq::create(Box::new(FileStorage::create_new(path)?), opts)
    }

    /// Opens a kvseq. A read-only open never writes.
    pub fn open(storage: Box<dyn Storage>, writable: bool) -> Result<KvSeq> {
        let sb = Superblock::read(storage.as_ref())?;
        KvSeq::from_superblock(storage, sb, writable)
    }

    /// Opens the kvseq file at `path`.
    pub fn open_path(path: &Path, writable: bool) -> Result<KvSeq> {
        KvSeq::open(Box::new(FileStorage::open(path, writable)?), writable)
    }

    fn from_superblock(storage: Box<dyn Storage>, sb: Superblock, writable: bool) -> Result<KvSeq> {
        let path = storage.path().to_path_buf();
        sb.expect_format(&path, Format::KvSeq)?;
        let repr = |name: VarName| -> Result<Repr> {
            let code = sb.get(name).ok_or_else(|| {
                Error::corrupt(
                    &path,
                    sb.terminator_offset(),
                    "superblock",
                    format!("variable {name}"),
                    "none",
                )
            })?;
            Repr::from_code(code).ok_or_else(|| {
                Error::unsupported(
                    &path,
                    sb.value_offset(name).unwrap_or(0),
                    format!("{name} {code} (supported: 0..=514)"),
                )
            })
        };
        let keyrepr = repr(var::KEYREPR)?;
        let valrepr = repr(var::VALREPR)?;
        let delflag = sb.get(var::KVDELFL) == Some(1);
        // Every entry must take a byte, or a walk never advances.
        if zero_byte_entries(keyrepr, valrepr, delflag) {
            return Err(Error::unsupported(
                &path,
                sb.value_offset(var::VALREPR).unwrap_or(0),
                "KEYREPR 4 and VALREPR 4 without KVDELFL: entries of zero bytes",
            ));
        }
        let align = sb.get_u64(&path, var::ALIGN)?.unwrap_or(0);
        // ALIGN is used as a divisor and a gap size below: bounded and checked here once.
        if align > MAX_ALIGN {
            return Err(Error::unsupported(
                &path,
                sb.value_offset(var::ALIGN).unwrap_or(0),
                format!("ALIGN {align} above {MAX_ALIGN}"),
            ));
        }
        let fileincr = sb
            .get_u64(&path, var::FILEINCR)?
            .unwrap_or(0)
            .min(MAX_FILEINCR);
        let filesize = sb.require_u64(&path, var::FILESIZE)?;
        let allocated = length(storage.as_ref())?;
        let filesize_at = sb.value_offset(var::FILESIZE).unwrap_or(0);
        // Every entry read is bounded by FILESIZE, so FILESIZE must lie within the file.
        if filesize > allocated {
            return Err(Error::corrupt(
                &path,
                filesize_at,
                "FILESIZE past the end of the file (truncated?)",
                format!("at most {allocated}"),
                filesize,
            ));
        }
        if filesize < sb.sbsize() {
            return Err(Error::corrupt(
                &path,
                filesize_at,
                "FILESIZE inside the superblock",
                format!("at least {}", sb.sbsize()),
                filesize,
            ));
        }
        for name in [var::ENTRIES, var::AENTRIES, var::SYNCSIZE] {
            sb.get_u64(&path, name)?;
        }
        let data_start = align_up(sb.sbsize(), align);
        Ok(KvSeq {
            storage,
            keyrepr,
            valrepr,
            delflag,
            align,
            fileincr,
            data_start,
            filesize,
            allocated,
            writable,
            dirty: false,
            clock: clock::system(),
            drop_behind: None,
            writeback: WritebackState {
                submitted_to: filesize,
                chunk_from: filesize,
                in_flight: None,
            },
            sb,
        })
    }

    /// Uses `clock` for SYNCTIME.
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// The path, for messages.
    pub fn path(&self) -> &Path {
        self.storage.path()
    }

    /// The storage (for page-cache hints and residency checks).
    pub fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    /// The superblock as last read or written.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The logical end of the entries.
    pub fn filesize(&self) -> u64 {
        self.filesize
    }

    /// Where the first entry starts (SBSIZE rounded up to ALIGN).
    pub fn first(&self) -> KvPointer {
        KvPointer(self.data_start)
    }

    /// KEYREPR: how keys are laid out.
    pub fn keyrepr(&self) -> Repr {
        self.keyrepr
    }

    /// VALREPR: how values are laid out.
    pub fn valrepr(&self) -> Repr {
        self.valrepr
    }

    /// True when every entry starts with a delflag byte (KVDELFL 1).
    pub fn has_delflag(&self) -> bool {
        self.delflag
    }

    /// ALIGN: entries start at multiples of it (0 or 1: none).
    pub fn align(&self) -> u64 {
        self.align
    }

    /// ENTRIES, if the file keeps it.
    pub fn entries(&self) -> Option<u64> {
        self.sb
            .get(var::ENTRIES)
            .and_then(|v| u64::try_from(v).ok())
    }

    /// AENTRIES, if the file keeps it.
    pub fn live_entries(&self) -> Option<u64> {
        self.sb
            .get(var::AENTRIES)
            .and_then(|v| u64::try_from(v).ok())
    }

    /// A superblock variable's current value (including unflushed counters).
    pub fn var(&self, name: VarName) -> Option<i64> {
        self.sb.get(name)
    }

    /// Sets a superblock variable (added when absent); written on the next flush or sync.
    pub fn set_var(&mut self, name: VarName, value: i64) -> Result<()> {
        self.check_writable()?;
        let path = self.storage.path().to_path_buf();
        self.sb.set(&path, name, value)?;
        self.dirty = true;
        Ok(())
    }

    /// The pointer after an entry ending at `end`.
    pub fn next_after(&self, layout: &EntryLayout) -> KvPointer {
        KvPointer(align_up(layout.end, self.align))
    }

    // ---- reading one entry -----------------------------------------------------------------

    /// Where the parts of the entry at `ptr` lie; checks every length against FILESIZE.
    pub fn layout(&self, ptr: KvPointer) -> Result<EntryLayout> {
        let mut w = Window::new(self.storage.as_ref(), self.filesize, 64);
        self.parse(&mut w, ptr)
    }

    /// Reads the entry at `ptr`.
    pub fn read(&self, ptr: KvPointer) -> Result<Entry> {
        self.read_in_window(ptr, POINT_WINDOW)
    }

    /// [`KvSeq::read`] of an entry whose size the caller knows about (`size_hint`: header, key
    /// and value). The first read fetches that much instead of 4 KiB: for an entry of a few
    /// hundred bytes, a 4 KiB window copies ten times the bytes and often touches two pages. A
    /// short hint costs a second read, never a wrong result.
    pub fn read_sized(&self, ptr: KvPointer, size_hint: usize) -> Result<Entry> {
        self.read_in_window(ptr, size_hint.clamp(64, POINT_WINDOW))
    }

    fn read_in_window(&self, ptr: KvPointer, window: usize) -> Result<Entry> {
        let mut w = Window::new(self.storage.as_ref(), self.filesize, window);
        let l = self.parse(&mut w, ptr)?;
        let key = self.field_bytes(&mut w, l.key_offset, l.key_len, self.keyrepr, "key")?;
        let value = self.field_bytes(&mut w, l.value_offset, l.value_len, self.valrepr, "value")?;
        Ok(Entry {
            ptr,
            deleted: l.deleted,
            key,
            value,
            value_offset: l.value_offset,
        })
    }

    /// Reads the delflag and key of the entry at `ptr`.
    pub fn read_key(&self, ptr: KvPointer) -> Result<(EntryLayout, Vec<u8>)> {
        let mut w = Window::new(self.storage.as_ref(), self.filesize, 512);
        let l = self.parse(&mut w, ptr)?;
        let key = self.field_bytes(&mut w, l.key_offset, l.key_len, self.keyrepr, "key")?;
        Ok((l, key))
    }

    /// Reads the value of the entry at `ptr`.
    pub fn read_value(&self, ptr: KvPointer) -> Result<Vec<u8>> {
        Ok(self.read(ptr)?.value)
    }

    /// Reads `buf.len()` bytes of an entry's value, starting `offset` bytes into it.
    pub fn read_value_at(&self, layout: &EntryLayout, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > layout.value_len) {
            return Err(Error::invalid(format!(
                "read of {} bytes at {offset} past the {}-byte value at {}",
                buf.len(),
                layout.value_len,
                layout.ptr
            )));
        }
        read_exact_at(
            self.storage.as_ref(),
            buf,
            layout.value_offset + offset,
            "a value",
        )
    }

    /// Reads `buf.len()` bytes of the value of the entry at `ptr`, `offset` bytes into it, and
    /// returns the entry's layout and key for the caller to check against what it expected
    /// (`key_len` is the expected key's length). `buf` holds that entry's value bytes when this
    /// returns `Ok`, whatever the entry turns out to be.
    ///
    /// The value is read first, at the place an entry with such a key would have it, and the
    /// header after it: on a cold page cache the header lies on the page where the value begins,
    /// so one disk read brings both, where reading the header first costs a second one.
    pub fn read_value_then_key(
        &self,
        ptr: KvPointer,
        key_len: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(EntryLayout, Vec<u8>)> {
        let header = self
            .keyrepr
            .encoded_len(key_len)
            .map(|k| u64::from(self.delflag) + k + self.valrepr.header_len());
        let guess = header
            .filter(|_| ptr.0 >= self.data_start)
            .and_then(|h| ptr.0.checked_add(h));
        // Only a range inside the entries is read ahead of the header; the header decides.
        let early = guess.and_then(|v| v.checked_add(offset)).filter(|&r| {
            r.checked_add(buf.len() as u64)
                .is_some_and(|end| end <= self.filesize)
        });
        if let Some(at) = early {
            read_exact_at(self.storage.as_ref(), buf, at, "a value")?;
        }
        let window = header.map_or(64, |h| h.clamp(1, 512) as usize);
        let mut w = Window::new(self.storage.as_ref(), self.filesize, window);
        let layout = self.parse(&mut w, ptr)?;
        let key = self.field_bytes(
            &mut w,
            layout.key_offset,
            layout.key_len,
            self.keyrepr,
            "key",
        )?;
        let fits = offset
            .checked_add(buf.len() as u64)
            .is_some_and(|e| e <= layout.value_len);
        if early.is_none() || guess != Some(layout.value_offset) || !fits {
            // Read ahead at the wrong place (or not at all): read (or refuse) as the header says.
            self.read_value_at(&layout, offset, buf)?;
        }
        Ok((layout, key))
    }
}

/// `x` rounded up to a multiple of `align` (0 = no alignment). Saturates instead of wrapping.
pub fn align_up(x: u64, align: u64) -> u64 {
    if align <= 1 {
        x
    } else {
        x.div_ceil(align).saturating_mul(align)
    }
}

/// The superblock of a new, empty kvseq: FILESIZE = SYNCSIZE = SBSIZE, no entries.
fn new_superblock(path: &Path, opts: &KvSeqOptions) -> Result<Superblock> {
    if opts.align > MAX_ALIGN {
        return Err(Error::invalid(format!(
            "ALIGN {} above {MAX_ALIGN}",
            opts.align
        )));
    }
    if zero_byte_entries(opts.keyrepr, opts.valrepr, opts.delflag) {
        return Err(Error::invalid(
            "KEYREPR 4 and VALREPR 4 without a delflag: entries of zero bytes",
        ));
    }
    let mut sb = Superblock::new(opts.sbsize, Format::KvSeq, opts.purpose)?;
    let sbsize = sb.sbsize() as i64;
    let mut vars = vec![
        (var::FILESIZE, sbsize),
        (var::FILEINCR, opts.fileincr.min(MAX_FILEINCR) as i64),
        (var::SYNCSIZE, sbsize),
        (var::SYNCTIME, opts.clock.now()),
        (var::KEYREPR, opts.keyrepr.code()),
        (var::VALREPR, opts.valrepr.code()),
    ];
    if opts.delflag {
        vars.push((var::KVDELFL, 1));
    }
    if opts.align > 0 {
        vars.push((var::ALIGN, opts.align as i64));
    }
    vars.push((var::ENTRIES, 0));
    vars.push((var::AENTRIES, 0));
    vars.extend(opts.extra.iter().copied());
    for (name, value) in vars {
        sb.set(path, name, value)?;
    }
    Ok(sb)
}
