//! The layout of one kvseq entry: `delflag? keyrepr valrepr` (see the table in [`super`]).
//! Encoding writes it; decoding checks every length against FILESIZE and the padding of padded
//! representations, reading through a [`Window`] so a walk fetches many entries per pread.

use std::fmt;

use super::{KvPointer, KvSeq};
use crate::error::{Error, Result};
use crate::format::repr::{Repr, ReprError};
use crate::storage::{read_exact_at, Storage};

/// Where the parts of one entry lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryLayout {
    /// Where the entry starts.
    pub ptr: KvPointer,
    /// Its delflag is set (always false without KVDELFL).
    pub deleted: bool,
    /// Byte offset of the key's bytes in the file.
    pub key_offset: u64,
    /// Length of the key, bytes.
    pub key_len: u64,
    /// Byte offset of the value's bytes in the file.
    pub value_offset: u64,
    /// Length of the value, bytes.
    pub value_len: u64,
    /// One past the entry's last byte (before alignment).
    pub end: u64,
}

/// One entry, read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where the entry starts.
    pub ptr: KvPointer,
    /// Its delflag is set (always false without KVDELFL).
    pub deleted: bool,
    /// The key's bytes.
    pub key: Vec<u8>,
    /// The value's bytes.
    pub value: Vec<u8>,
    /// Where the value's bytes start in the file.
    pub value_offset: u64,
}

/// One entry met by an iterator: its layout, its key, and its value when asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// Where its parts lie.
    pub layout: EntryLayout,
    /// The key's bytes.
    pub key: Vec<u8>,
    /// The value's bytes, when the iterator reads values.
    pub value: Option<Vec<u8>>,
}

impl KvSeq {
    // ---- decoding ------------------------------------------------------------------------

    pub(super) fn corrupt(
        &self,
        offset: u64,
        what: impl Into<String>,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Error {
        Error::corrupt(self.storage.path(), offset, what, expected, found)
    }

    pub(super) fn parse(&self, w: &mut Window<'_>, ptr: KvPointer) -> Result<EntryLayout> {
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
    pub(super) fn field_bytes(
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

    // ---- encoding ------------------------------------------------------------------------

    /// The encoded size of an entry, or an error naming what does not fit.
    pub fn encoded_size(&self, key: &[u8], value: &[u8]) -> Result<u64> {
        Codec::of(self).encoded_size(key, value)
    }

    pub(super) fn encode_into(&self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        Codec::of(self).encode_into(out, key, value)
    }
}

/// How a kvseq lays out its entries: what encoding one needs besides the bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Codec {
    pub(super) keyrepr: Repr,
    pub(super) valrepr: Repr,
    pub(super) delflag: bool,
}

impl Codec {
    fn of(kv: &KvSeq) -> Codec {
        Codec {
            keyrepr: kv.keyrepr,
            valrepr: kv.valrepr,
            delflag: kv.delflag,
        }
    }

    /// The encoded size of an entry, or an error naming what does not fit.
    pub(super) fn encoded_size(&self, key: &[u8], value: &[u8]) -> Result<u64> {
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

    /// Appends the entry's bytes to `out` (the caller checked that it fits).
    pub(super) fn encode_into(&self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        if self.delflag {
            out.push(0);
        }
        for (repr, data) in [(self.keyrepr, key), (self.valrepr, value)] {
            repr.encode_header(data.len() as u64, out);
            out.extend_from_slice(data);
            out.resize(out.len() + repr.padding(data.len() as u64) as usize, 0);
        }
    }
}

/// A read-ahead window over `[0, limit)` of a storage.
pub(super) struct Window<'a> {
    storage: &'a dyn Storage,
    limit: u64,
    start: u64,
    buf: Vec<u8>,
    capacity: usize,
}

impl<'a> Window<'a> {
    pub(super) fn new(storage: &'a dyn Storage, limit: u64, capacity: usize) -> Self {
        Window {
            storage,
            limit,
            start: 0,
            buf: Vec::new(),
            capacity,
        }
    }

    /// The bytes `[offset, offset + len)`; the caller has checked they lie below `limit`.
    pub(super) fn get(&mut self, offset: u64, len: u64, what: &str) -> Result<&[u8]> {
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
pub(super) fn zero_byte_entries(keyrepr: Repr, valrepr: Repr, delflag: bool) -> bool {
    let zero = Repr::Fixed { len: 0 };
    !delflag && keyrepr == zero && valrepr == zero
}
