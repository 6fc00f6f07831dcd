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

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::format::repr::{Repr, ReprError};
use crate::format::superblock::{var, Format, Purpose, Superblock, VarName, DEFAULT_SBSIZE};
use crate::storage::{self, length, read_exact_at, write_all_at, FileStorage, Storage};

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
/// How much a reader fetches at once when walking entries.
const SCAN_WINDOW: usize = 256 << 10;
/// How much a single-entry read fetches first (header, key and a small value in one pread).
const POINT_WINDOW: usize = 4096;
/// How much a sparse walk fetches at once: a header, a key and a small value, not the large
/// values it steps over.
const SPARSE_WINDOW: usize = 4096;

/// Settings for a new kvseq.
#[derive(Clone, Debug)]
pub struct KvSeqOptions {
    pub sbsize: u64,
    pub purpose: Purpose,
    pub keyrepr: Repr,
    pub valrepr: Repr,
    pub delflag: bool,
    pub align: u64,
    pub fileincr: u64,
    /// Extra variables written after the standard ones (e.g. a filesys's ISZ).
    pub extra: Vec<(VarName, i64)>,
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

/// Where the parts of one entry lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryLayout {
    pub ptr: KvPointer,
    pub deleted: bool,
    pub key_offset: u64,
    pub key_len: u64,
    pub value_offset: u64,
    pub value_len: u64,
    /// One past the entry's last byte (before alignment).
    pub end: u64,
}

/// One entry, read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub ptr: KvPointer,
    pub deleted: bool,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Where the value's bytes start in the file.
    pub value_offset: u64,
}

/// One entry met by an iterator: its layout, its key, and its value when asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    pub layout: EntryLayout,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Page-cache policy for a writer: after each `chunk` bytes appended, start writeback of the new
/// chunk and drop the previous one from the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropBehind {
    pub chunk: u64,
}

#[derive(Debug, Default)]
struct WritebackState {
    /// Start of the bytes not yet handed to writeback.
    submitted_to: u64,
    /// The chunk handed to writeback last, to be waited for and dropped after the next one.
    in_flight: Option<(u64, u64)>,
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
    /// Creates a kvseq in empty storage.
    pub fn create(storage: Box<dyn Storage>, opts: &KvSeqOptions) -> Result<KvSeq> {
        let path = storage.path().to_path_buf();
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
            sb.set(&path, name, value)?;
        }
        sb.write(storage.as_ref())?;
        let mut kv = KvSeq::from_superblock(storage, sb, true)?;
        kv.clock = opts.clock.clone();
        kv.sync()?;
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
                in_flight: None,
            },
            sb,
        })
    }

    /// Uses `clock` for SYNCTIME.
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// Turns the writer's page-cache policy on (or off with `None`).
    pub fn set_drop_behind(&mut self, policy: Option<DropBehind>) {
        self.drop_behind = policy.filter(|p| p.chunk > 0);
        self.writeback.submitted_to = self.filesize;
    }

    /// The writer's page-cache policy.
    pub fn drop_behind(&self) -> Option<DropBehind> {
        self.drop_behind
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

    pub fn keyrepr(&self) -> Repr {
        self.keyrepr
    }

    pub fn valrepr(&self) -> Repr {
        self.valrepr
    }

    pub fn has_delflag(&self) -> bool {
        self.delflag
    }

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

    // ---- reading -------------------------------------------------------------------------

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

    /// Iterates entries in file order from `from` (usually [`KvSeq::first`]).
    pub fn iter(&self, from: KvPointer, live_only: bool) -> Iter<'_> {
        Iter {
            kv: self,
            window: Window::new(self.storage.as_ref(), self.filesize, SCAN_WINDOW),
            next: from.0.max(self.data_start),
            live_only,
            values: false,
            want_value: None,
            failed: false,
        }
    }

    /// Iterates entries in file order reading only headers, keys and the values whose key
    /// `want_value` accepts, a page at a time: a walk that steps over large values (a filesys's
    /// data entries) without reading them. Other entries come without a value.
    pub fn iter_sparse(
        &self,
        from: KvPointer,
        live_only: bool,
        want_value: fn(&[u8]) -> bool,
    ) -> Iter<'_> {
        Iter {
            window: Window::new(self.storage.as_ref(), self.filesize, SPARSE_WINDOW),
            values: true,
            want_value: Some(want_value),
            ..self.iter(from, live_only)
        }
    }

    /// Iterates entries with their values.
    pub fn iter_entries(&self, from: KvPointer, live_only: bool) -> Iter<'_> {
        Iter {
            values: true,
            ..self.iter(from, live_only)
        }
    }

    fn corrupt(
        &self,
        offset: u64,
        what: impl Into<String>,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Error {
        Error::corrupt(self.storage.path(), offset, what, expected, found)
    }

    fn parse(&self, w: &mut Window<'_>, ptr: KvPointer) -> Result<EntryLayout> {
        let at = ptr.0;
        // A pointer from an index or a caller is untrusted: it must name a possible entry start.
        if at < self.data_start || at >= self.filesize {
            return Err(Error::NotFound(format!(
                "{}: no entry at {at} (entries lie in {}..{})",
                self.path().display(),
                self.data_start,
                self.filesize
            )));
        }
        if self.align > 0 && at % self.align != 0 {
            return Err(Error::NotFound(format!(
                "{}: no entry at {at} (not a multiple of ALIGN {})",
                self.path().display(),
                self.align
            )));
        }
        let mut pos = at;
        let deleted = if self.delflag {
            let flag = w.get(pos, 1, "a delflag")?[0];
            pos += 1;
            match flag {
                0 => false,
                1 => true,
                other => return Err(self.corrupt(at, "delflag", "0 or 1", other)),
            }
        } else {
            false
        };
        let (key_offset, key_len, key_end) = self.field(w, pos, self.keyrepr, "key")?;
        let (value_offset, value_len, end) = self.field(w, key_end, self.valrepr, "value")?;
        Ok(EntryLayout {
            ptr,
            deleted,
            key_offset,
            key_len,
            value_offset,
            value_len,
            end,
        })
    }

    /// Decodes one repr at `pos`: (data offset, data length, end of slot).
    fn field(
        &self,
        w: &mut Window<'_>,
        pos: u64,
        repr: Repr,
        what: &str,
    ) -> Result<(u64, u64, u64)> {
        let header = repr.header_len();
        // The length field itself must lie before FILESIZE.
        if pos + header > self.filesize {
            return Err(self.corrupt(
                pos,
                format!("{what} length runs past FILESIZE"),
                format!("end ≤ {}", self.filesize),
                pos + header,
            ));
        }
        let len = if header == 0 {
            repr.decode_header(&[]).unwrap_or(0)
        } else {
            let bytes = w.get(pos, header, "a length field")?;
            repr.decode_header(bytes).map_err(|e| match e {
                ReprError::NegativeLength(v) => {
                    self.corrupt(pos, format!("{what} length"), "≥ 0", v)
                }
                ReprError::PaddedTooLong { len, max } => {
                    self.corrupt(pos, format!("{what} length"), format!("≤ {max}"), len)
                }
            })?
        };
        let data = pos + header;
        let end = data.checked_add(len + repr.padding(len));
        // The data (and padding) must lie before FILESIZE: this bounds every later allocation.
        match end {
            Some(end) if end <= self.filesize => Ok((data, len, end)),
            _ => Err(self.corrupt(
                pos,
                format!("{what} of {len} bytes runs past FILESIZE"),
                format!("end ≤ {}", self.filesize),
                format!("end {}", data as u128 + len as u128),
            )),
        }
    }

    /// Reads a key or value (and checks the zero padding of padded representations).
    fn field_bytes(
        &self,
        w: &mut Window<'_>,
        offset: u64,
        len: u64,
        repr: Repr,
        what: &str,
    ) -> Result<Vec<u8>> {
        let pad = repr.padding(len);
        let bytes = w.get(offset, len + pad, what)?;
        let (data, padding) = bytes.split_at(len as usize);
        if let Some(i) = padding.iter().position(|b| *b != 0) {
            return Err(self.corrupt(
                offset + len + i as u64,
                format!("{what} padding"),
                "zero bytes",
                format!("0x{:02x}", padding[i]),
            ));
        }
        let mut out = Vec::new();
        reserve(&mut out, data.len(), self.storage.as_ref(), offset, what)?;
        out.extend_from_slice(data);
        Ok(out)
    }

    // ---- writing -------------------------------------------------------------------------

    fn check_writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{} is open read-only",
                self.path().display()
            )))
        }
    }

    /// The encoded size of an entry, or an error naming what does not fit.
    pub fn encoded_size(&self, key: &[u8], value: &[u8]) -> Result<u64> {
        let k = self.keyrepr.encoded_len(key.len() as u64).ok_or_else(|| {
            Error::invalid(format!(
                "a {}-byte key does not fit KEYREPR {} ({})",
                key.len(),
                self.keyrepr.code(),
                describe(self.keyrepr)
            ))
        })?;
        let v = self
            .valrepr
            .encoded_len(value.len() as u64)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "a {}-byte value does not fit VALREPR {} ({})",
                    value.len(),
                    self.valrepr.code(),
                    describe(self.valrepr)
                ))
            })?;
        Ok(u64::from(self.delflag) + k + v)
    }

    fn encode_into(&self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        if self.delflag {
            out.push(0);
        }
        for (repr, data) in [(self.keyrepr, key), (self.valrepr, value)] {
            repr.encode_header(data.len() as u64, out);
            out.extend_from_slice(data);
            out.resize(out.len() + repr.padding(data.len() as u64) as usize, 0);
        }
    }

    /// Makes the real file at least `end` bytes, in FILEINCR steps.
    fn reserve(&mut self, end: u64) -> Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let target = if self.fileincr > 0 {
            end.div_ceil(self.fileincr).saturating_mul(self.fileincr)
        } else {
            end
        };
        self.storage
            .allocate(target)
            .map_err(|e| Error::io(self.storage.path(), Some(self.allocated), e))?;
        self.allocated = target;
        Ok(())
    }

    /// Appends an entry and returns its pointer. Nothing is written when it does not fit.
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<KvPointer> {
        Ok(self.append_entry(key, value)?.ptr)
    }

    /// Appends an entry and returns where its parts lie (no read needed).
    pub fn append_entry(&mut self, key: &[u8], value: &[u8]) -> Result<EntryLayout> {
        self.check_writable()?;
        let size = self.encoded_size(key, value)?;
        let start = self.filesize;
        let ptr = align_up(start, self.align).max(self.data_start);
        let end = ptr
            .checked_add(size)
            .ok_or_else(|| Error::invalid("file would pass 2^64 bytes"))?;
        // The gap before an aligned entry is written as zeros: bytes past FILESIZE may hold a
        // torn entry from before a crash.
        let mut buf = Vec::with_capacity((end - start) as usize);
        buf.resize((ptr - start) as usize, 0);
        self.encode_into(&mut buf, key, value);
        self.reserve(end)?;
        write_all_at(self.storage.as_ref(), &buf, start)?;
        self.filesize = end;
        self.bump(var::ENTRIES, 1);
        self.bump(var::AENTRIES, 1);
        self.dirty = true;
        self.after_append()?;
        let key_offset = ptr + u64::from(self.delflag) + self.keyrepr.header_len();
        let key_len = key.len() as u64;
        let value_offset =
            key_offset + key_len + self.keyrepr.padding(key_len) + self.valrepr.header_len();
        Ok(EntryLayout {
            ptr: KvPointer(ptr),
            deleted: false,
            key_offset,
            key_len,
            value_offset,
            value_len: value.len() as u64,
            end,
        })
    }

    /// Replaces the entry at `ptr` with a live entry. Unless it is the last entry, the new entry
    /// must have the same encoded size.
    pub fn replace(&mut self, ptr: KvPointer, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        let old = self.layout(ptr)?;
        let size = self.encoded_size(key, value)?;
        let is_last = old.end == self.filesize;
        let old_size = old.end - ptr.0;
        if !is_last && size != old_size {
            return Err(Error::invalid(format!(
                "replacing the entry at {ptr} needs the same encoded size ({old_size} bytes, new {size}) unless it is the last entry"
            )));
        }
        let mut buf = Vec::with_capacity(size as usize);
        self.encode_into(&mut buf, key, value);
        let end = ptr.0 + size;
        self.reserve(end)?;
        write_all_at(self.storage.as_ref(), &buf, ptr.0)?;
        if is_last {
            self.filesize = end;
        }
        if old.deleted {
            self.bump(var::AENTRIES, 1);
        }
        self.dirty = true;
        Ok(())
    }

    /// Overwrites bytes inside an entry's value in place (the value's length does not change).
    pub fn overwrite_value(
        &mut self,
        layout: &EntryLayout,
        offset: u64,
        bytes: &[u8],
    ) -> Result<()> {
        self.check_writable()?;
        let end = offset.checked_add(bytes.len() as u64);
        if end.is_none_or(|e| e > layout.value_len) {
            return Err(Error::invalid(format!(
                "overwrite past the {}-byte value at {}",
                layout.value_len, layout.ptr
            )));
        }
        write_all_at(self.storage.as_ref(), bytes, layout.value_offset + offset)
    }

    /// Marks the entry at `ptr` deleted. Returns false when it already was.
    pub fn delete(&mut self, ptr: KvPointer) -> Result<bool> {
        self.check_writable()?;
        if !self.delflag {
            return Err(Error::invalid(format!(
                "{}: entries cannot be deleted (KVDELFL is not 1)",
                self.path().display()
            )));
        }
        let l = self.layout(ptr)?;
        if l.deleted {
            return Ok(false);
        }
        write_all_at(self.storage.as_ref(), &[1], ptr.0)?;
        self.bump(var::AENTRIES, -1);
        self.dirty = true;
        Ok(true)
    }

    /// [`KvSeq::delete`] of an entry just read whole, with nothing written over it since: its
    /// flag is set without reading the entry again (a file rewrite deletes its old inode per put).
    pub fn delete_read(&mut self, entry: &Entry) -> Result<bool> {
        self.check_writable()?;
        if !self.delflag {
            return Err(Error::invalid(format!(
                "{}: entries cannot be deleted (KVDELFL is not 1)",
                self.path().display()
            )));
        }
        if entry.deleted {
            return Ok(false);
        }
        write_all_at(self.storage.as_ref(), &[1], entry.ptr.0)?;
        self.bump(var::AENTRIES, -1);
        self.dirty = true;
        Ok(true)
    }

    fn bump(&mut self, name: VarName, delta: i64) {
        if let Some(v) = self.sb.get(name) {
            // Present variables are set in place; no room is needed.
            let _ = self.sb.set(Path::new(""), name, v.saturating_add(delta));
        }
    }

    fn after_append(&mut self) -> Result<()> {
        let Some(policy) = self.drop_behind else {
            return Ok(());
        };
        let start = self.writeback.submitted_to;
        if self.filesize < start + policy.chunk {
            return Ok(());
        }
        let len = self.filesize - start;
        let s = self.storage.as_ref();
        s.start_writeback(start, len)
            .map_err(|e| Error::io(s.path(), Some(start), e))?;
        if let Some((prev, prev_len)) = self.writeback.in_flight.replace((start, len)) {
            s.flush_and_drop(prev, prev_len)
                .map_err(|e| Error::io(s.path(), Some(prev), e))?;
        }
        self.writeback.submitted_to = self.filesize;
        Ok(())
    }

    /// Writes FILESIZE, ENTRIES, AENTRIES and changed variables to the superblock (no fsync): a
    /// reader opening the file now sees every entry appended so far.
    pub fn flush(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let path = self.storage.path().to_path_buf();
        self.sb.set(&path, var::FILESIZE, self.filesize as i64)?;
        self.sb.write_vars(self.storage.as_ref())?;
        self.dirty = false;
        Ok(())
    }

    /// Makes everything written so far durable and records SYNCSIZE and SYNCTIME.
    ///
    /// Order: data to disk, then the superblock naming it, then the superblock to disk, so that a
    /// durable SYNCSIZE never covers bytes that are not durable.
    pub fn sync(&mut self) -> Result<()> {
        self.check_writable()?;
        storage::sync(self.storage.as_ref())?;
        self.stage_sync(self.clock.now())?;
        storage::sync(self.storage.as_ref())?;
        self.drop_synced()
    }

    /// Writes FILESIZE, SYNCSIZE = FILESIZE and SYNCTIME = `time` to the superblock without any
    /// fsync: for a caller that orders the syncs itself (the filesys journal).
    pub fn stage_sync(&mut self, time: i64) -> Result<()> {
        self.check_writable()?;
        let path = self.storage.path().to_path_buf();
        self.sb.set(&path, var::FILESIZE, self.filesize as i64)?;
        self.sb.set(&path, var::SYNCSIZE, self.filesize as i64)?;
        self.sb.set(&path, var::SYNCTIME, time)?;
        self.sb.write_vars(self.storage.as_ref())?;
        self.dirty = false;
        Ok(())
    }

    /// After a sync: drops the written entries from the page cache (when the page-cache policy
    /// is on). They are durable, so dropping cannot stall on writeback.
    pub fn drop_synced(&mut self) -> Result<()> {
        if self.drop_behind.is_none() {
            return Ok(());
        }
        let s = self.storage.as_ref();
        // Everything before the chunk still in flight (or, with none, before the bytes not yet
        // handed to writeback) was dropped already, by drop-behind or by the last sync: dropping
        // the whole file again cost a walk of its page-cache range per commit (~1.7 ms at a few
        // hundred MiB, a commit per 1,000 puts of the render store).
        let from = match self.writeback.in_flight {
            Some((start, _)) => start,
            None => self.writeback.submitted_to,
        }
        .max(self.data_start)
        .min(self.filesize);
        s.drop_cache(from, self.filesize.saturating_sub(from))
            .map_err(|e| Error::io(s.path(), Some(from), e))?;
        self.writeback = WritebackState {
            submitted_to: self.filesize,
            in_flight: None,
        };
        Ok(())
    }

    /// Gives back the space preallocated past FILESIZE (for a file that is done growing).
    pub fn trim(&mut self) -> Result<()> {
        self.check_writable()?;
        self.storage
            .set_len(self.filesize)
            .map_err(|e| Error::io(self.storage.path(), Some(self.filesize), e))?;
        self.allocated = self.filesize;
        Ok(())
    }

    /// Sets FILESIZE back to `filesize` (dropping a torn tail). The bytes stay but mean nothing.
    pub fn truncate_logical(&mut self, filesize: u64, entries: u64, live: u64) -> Result<()> {
        self.check_writable()?;
        if filesize < self.sb.sbsize() || filesize > self.filesize {
            return Err(Error::invalid(format!("cannot set FILESIZE to {filesize}")));
        }
        self.filesize = filesize;
        let path = self.storage.path().to_path_buf();
        if self.sb.get(var::ENTRIES).is_some() {
            self.sb.set(&path, var::ENTRIES, entries as i64)?;
        }
        if self.sb.get(var::AENTRIES).is_some() {
            self.sb.set(&path, var::AENTRIES, live as i64)?;
        }
        self.dirty = true;
        self.writeback.submitted_to = self.writeback.submitted_to.min(filesize);
        Ok(())
    }
}

impl Drop for KvSeq {
    fn drop(&mut self) {
        if self.writable && self.dirty {
            // Best effort: a reader should see what was appended. Durability needs sync().
            let _ = self.flush();
        }
    }
}

/// Iterator over entries in file order; stops after the first error.
pub struct Iter<'a> {
    kv: &'a KvSeq,
    window: Window<'a>,
    next: u64,
    live_only: bool,
    values: bool,
    /// When set, only values whose key it accepts are read.
    want_value: Option<fn(&[u8]) -> bool>,
    failed: bool,
}

impl Iter<'_> {
    /// Where the next entry would start.
    pub fn position(&self) -> KvPointer {
        KvPointer(self.next)
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<EntryInfo>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed || self.next >= self.kv.filesize {
                return None;
            }
            let result = self.step();
            match result {
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
                Ok(info) if self.live_only && info.layout.deleted => continue,
                Ok(info) => return Some(Ok(info)),
            }
        }
    }
}

impl Iter<'_> {
    fn step(&mut self) -> Result<EntryInfo> {
        let kv = self.kv;
        let layout = kv.parse(&mut self.window, KvPointer(self.next))?;
        self.next = align_up(layout.end, kv.align);
        self.check_gap(layout.end)?;
        let skip = self.live_only && layout.deleted;
        let key = if skip {
            Vec::new()
        } else {
            kv.field_bytes(
                &mut self.window,
                layout.key_offset,
                layout.key_len,
                kv.keyrepr,
                "key",
            )?
        };
        let wanted = self.want_value.is_none_or(|want| want(&key));
        let value = if self.values && !skip && wanted {
            Some(kv.field_bytes(
                &mut self.window,
                layout.value_offset,
                layout.value_len,
                kv.valrepr,
                "value",
            )?)
        } else {
            None
        };
        Ok(EntryInfo { layout, key, value })
    }

    /// The gap after an entry ending at `end` is zero, and the last entry ends at FILESIZE
    /// (docs/FORMAT.md § kvseq): without this, a length field that shrank into the gap would go
    /// unseen.
    fn check_gap(&mut self, end: u64) -> Result<()> {
        let kv = self.kv;
        if end == kv.filesize || self.next == end {
            return Ok(());
        }
        if self.next > kv.filesize {
            return Err(kv.corrupt(
                end,
                "last entry",
                format!("to end at FILESIZE {}", kv.filesize),
                format!("end at {end}"),
            ));
        }
        let gap = self.window.get(end, self.next - end, "an alignment gap")?;
        match gap.iter().position(|b| *b != 0) {
            Some(i) => Err(kv.corrupt(
                end + i as u64,
                "alignment gap",
                "zero bytes",
                format!("0x{:02x}", gap[i]),
            )),
            None => Ok(()),
        }
    }
}

/// A read-ahead window over `[0, limit)` of a storage.
struct Window<'a> {
    storage: &'a dyn Storage,
    limit: u64,
    start: u64,
    buf: Vec<u8>,
    capacity: usize,
}

impl<'a> Window<'a> {
    fn new(storage: &'a dyn Storage, limit: u64, capacity: usize) -> Self {
        Window {
            storage,
            limit,
            start: 0,
            buf: Vec::new(),
            capacity,
        }
    }

    /// The bytes `[offset, offset + len)`; the caller has checked they lie below `limit`.
    fn get(&mut self, offset: u64, len: u64, what: &str) -> Result<&[u8]> {
        let end = offset + len;
        let have_end = self.start + self.buf.len() as u64;
        if offset < self.start || end > have_end {
            let ahead = (self.limit.saturating_sub(offset)).min(self.capacity as u64);
            // `len` ≤ limit − offset ≤ the file's length, checked at open.
            let want = len.max(ahead) as usize;
            if want > self.buf.capacity() {
                self.buf.clear();
                reserve(&mut self.buf, want, self.storage, offset, what)?;
            }
            self.buf.resize(want, 0);
            read_exact_at(self.storage, &mut self.buf, offset, what)?;
            self.start = offset;
        }
        let from = (offset - self.start) as usize;
        Ok(&self.buf[from..from + len as usize])
    }
}

/// Makes room for `n` bytes read at `offset`. Lengths are bounded by the file's length, but a
/// sparse file can be far longer than memory: a length no allocation can hold is an error, not
/// an abort.
fn reserve(buf: &mut Vec<u8>, n: usize, s: &dyn Storage, offset: u64, what: &str) -> Result<()> {
    buf.try_reserve_exact(n).map_err(|_| {
        Error::unsupported(
            s.path(),
            offset,
            format!("{what} of {n} bytes: more than this process can hold in memory"),
        )
    })
}

fn describe(repr: Repr) -> String {
    match repr {
        Repr::Prefixed { .. } => format!("length-prefixed, at most {} bytes", repr.max_len()),
        Repr::Fixed { len } => format!("exactly {len} bytes"),
        Repr::Padded { max } => format!("padded, at most {max} bytes"),
    }
}

/// Keys and values of zero bytes and no delflag: entries that take no room at all.
fn zero_byte_entries(keyrepr: Repr, valrepr: Repr, delflag: bool) -> bool {
    let zero = Repr::Fixed { len: 0 };
    !delflag && keyrepr == zero && valrepr == zero
}

/// `x` rounded up to a multiple of `align` (0 = no alignment). Saturates instead of wrapping.
pub fn align_up(x: u64, align: u64) -> u64 {
    if align <= 1 {
        x
    } else {
        x.div_ceil(align).saturating_mul(align)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    fn mem(opts: &KvSeqOptions) -> (MemStorage, KvSeq) {
        let s = MemStorage::new("mem.kvseq");
        let kv = KvSeq::create(Box::new(s.clone()), opts).unwrap();
        (s, kv)
    }

    #[test]
    fn delete_read_is_delete_without_the_read() {
        let (_, mut kv) = mem(&KvSeqOptions::default());
        let a = kv.append(b"alpha", b"one").unwrap();
        let b = kv.append(b"beta", b"two").unwrap();
        let entry = kv.read(a).unwrap();
        assert!(kv.delete_read(&entry).unwrap());
        assert!(kv.read(a).unwrap().deleted);
        assert!(!kv.delete_read(&kv.read(a).unwrap()).unwrap());
        assert!(!kv.read(b).unwrap().deleted);
        assert_eq!(kv.live_entries(), Some(1));
    }

    #[test]
    fn append_read_iterate_reopen() {
        let (s, mut kv) = mem(&KvSeqOptions::default());
        let a = kv.append(b"alpha", b"one").unwrap();
        let b = kv.append(b"", b"").unwrap();
        let c = kv.append(b"gamma", &[7u8; 5000]).unwrap();
        assert_eq!(a, kv.first());
        assert_eq!(kv.read(a).unwrap().value, b"one");
        assert_eq!(kv.read(b).unwrap().key, b"");
        assert_eq!(kv.read(c).unwrap().value.len(), 5000);
        assert!(kv.delete(b).unwrap());
        assert!(!kv.delete(b).unwrap());
        kv.sync().unwrap();
        let kv = KvSeq::open(Box::new(s), false).unwrap();
        assert_eq!(kv.entries(), Some(3));
        assert_eq!(kv.live_entries(), Some(2));
        let live: Vec<_> = kv.iter(kv.first(), true).map(|e| e.unwrap().key).collect();
        assert_eq!(live, vec![b"alpha".to_vec(), b"gamma".to_vec()]);
        let all: Vec<_> = kv
            .iter_entries(kv.first(), false)
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(all.len(), 3);
        assert!(all[1].layout.deleted);
        assert_eq!(all[2].value.as_deref(), Some(&[7u8; 5000][..]));
        assert_eq!(
            kv.superblock().get(var::SYNCSIZE),
            Some(kv.filesize() as i64)
        );
    }

    #[test]
    fn read_value_then_key_returns_the_entrys_own_bytes() {
        let opts = KvSeqOptions {
            keyrepr: Repr::Padded { max: 20 },
            align: 8,
            ..KvSeqOptions::default()
        };
        let (_, mut kv) = mem(&opts);
        let a = kv.append(b"ab", b"0123456789").unwrap();
        let b = kv.append(b"abcd", b"short").unwrap();
        let mut buf = [0u8; 4];
        // Right key length: the value read ahead is kept.
        let (l, key) = kv.read_value_then_key(a, 2, 3, &mut buf).unwrap();
        assert_eq!(
            (key.as_slice(), &buf, l.value_len),
            (&b"ab"[..], b"3456", 10)
        );
        // A wrong key length guesses the wrong place; the bytes are still the entry's own.
        let mut buf = [0u8; 5];
        let (l, key) = kv.read_value_then_key(b, 9, 0, &mut buf).unwrap();
        assert_eq!((key.as_slice(), &buf, l.ptr), (&b"abcd"[..], b"short", b));
        // Past the entry's value (though inside the file): refused.
        let mut buf = [0u8; 8];
        assert!(kv.read_value_then_key(a, 2, 5, &mut buf).is_err());
        assert!(kv
            .read_value_then_key(KvPointer(5), 2, 0, &mut buf)
            .is_err());
    }

    #[test]
    fn append_entry_layout_matches_a_read() {
        for opts in [
            KvSeqOptions::default(),
            KvSeqOptions {
                keyrepr: Repr::Padded { max: 20 },
                valrepr: Repr::Padded { max: 30 },
                align: 8,
                ..KvSeqOptions::default()
            },
            KvSeqOptions {
                keyrepr: Repr::Fixed { len: 3 },
                valrepr: Repr::Prefixed { width: 8 },
                delflag: false,
                ..KvSeqOptions::default()
            },
        ] {
            let (_, mut kv) = mem(&opts);
            kv.append(b"abc", b"x").unwrap();
            let l = kv.append_entry(b"key", b"value").unwrap();
            assert_eq!(l, kv.layout(l.ptr).unwrap());
        }
    }

    #[test]
    fn alignment_and_padding() {
        let opts = KvSeqOptions {
            keyrepr: Repr::Padded { max: 41 },
            valrepr: Repr::Padded { max: 41 },
            align: 8,
            ..KvSeqOptions::default()
        };
        let (_, mut kv) = mem(&opts);
        let a = kv.append(b"", b"").unwrap();
        let b = kv.append(b"mid", b"value").unwrap();
        assert_eq!(a.0, 4096);
        assert_eq!(b.0, 4096 + 88); // 85-byte entries rounded up to 8
        assert_eq!(kv.filesize(), 4096 + 88 + 85);
        assert_eq!(kv.read(b).unwrap().value, b"value");
        assert!(kv.append(&[b'k'; 42], b"").is_err());
        assert!(kv.read(KvPointer(4097)).is_err());
    }

    #[test]
    fn replace_same_size_or_last() {
        let (_, mut kv) = mem(&KvSeqOptions::default());
        let a = kv.append(b"k", b"v1").unwrap();
        let b = kv.append(b"last", b"short").unwrap();
        kv.replace(a, b"k", b"v2").unwrap();
        assert!(kv.replace(a, b"k", b"longer").is_err());
        kv.replace(b, b"last", b"a much longer value").unwrap();
        assert_eq!(kv.read(b).unwrap().value, b"a much longer value");
        assert_eq!(kv.read(a).unwrap().value, b"v2");
        assert_eq!(kv.filesize(), kv.layout(b).unwrap().end);
    }

    #[test]
    fn too_long_for_repr_writes_nothing() {
        let opts = KvSeqOptions {
            keyrepr: Repr::Prefixed { width: 1 },
            valrepr: Repr::Fixed { len: 8 },
            delflag: false,
            ..KvSeqOptions::default()
        };
        let (s, mut kv) = mem(&opts);
        let before = s.to_vec();
        assert!(matches!(
            kv.append(&[0u8; 128], &[0u8; 8]),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(kv.append(b"k", &[0u8; 7]), Err(Error::Invalid(_))));
        assert!(matches!(kv.delete(kv.first()), Err(Error::Invalid(_))));
        assert_eq!(s.to_vec(), before);
        kv.append(&[1u8; 127], &[2u8; 8]).unwrap();
    }
}
