//! A reader of big-endian integers and byte runs from a slice, for the records the store and the
//! archive keep inside filesys files (title records, archive maps). Nothing it reads is trusted:
//! every read is bounds-checked, and running short is `None` (or, through [`RecordReader`], an
//! error naming the file and the offset).

use std::ops::Deref;
use std::path::Path;

use crate::error::{Error, Result};

/// A position in a byte slice; each read moves it past the bytes read, a short one leaves it.
pub(crate) struct ByteReader<'a> {
    bytes: &'a [u8],
    /// The offset of the next byte to read.
    pub(crate) pos: usize,
}

impl<'a> ByteReader<'a> {
    /// A reader of `bytes` from offset `pos`.
    pub(crate) fn new(bytes: &'a [u8], pos: usize) -> ByteReader<'a> {
        ByteReader { bytes, pos }
    }

    /// The next `n` bytes, or `None` when fewer are left.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len())?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Some(out)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        // `take` returned exactly N bytes.
        self.take(N).map(|b| b.try_into().expect("N bytes"))
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_be_bytes)
    }

    /// An unsigned LEB128 number (at most 64 bits).
    pub(crate) fn varint(&mut self) -> Option<u64> {
        self.leb128(leb128::read::unsigned)
    }

    /// A signed LEB128 number (at most 64 bits).
    pub(crate) fn signed_varint(&mut self) -> Option<i64> {
        self.leb128(leb128::read::signed)
    }

    fn leb128<T>(
        &mut self,
        read: fn(&mut &'a [u8]) -> Result<T, leb128::read::Error>,
    ) -> Option<T> {
        let mut rest = self.bytes.get(self.pos..)?;
        let left = rest.len();
        let v = read(&mut rest).ok()?;
        self.pos += left - rest.len();
        Some(v)
    }

    /// Bytes not read yet.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// This reader for a decoder that stops at the first damage: running short is damage to the
    /// `what` read from `path`, whose byte 0 lies at `base` in the file.
    pub(crate) fn in_file(self, path: &'a Path, base: u64, what: &'a str) -> RecordReader<'a> {
        RecordReader {
            reader: self,
            path,
            base,
            what,
        }
    }
}

/// A [`ByteReader`] whose reads fail with [`Error::Corrupt`] instead of `None`; its position is
/// the reader's (`r.pos`).
pub(crate) struct RecordReader<'a> {
    reader: ByteReader<'a>,
    path: &'a Path,
    base: u64,
    what: &'a str,
}

impl<'a> RecordReader<'a> {
    /// The next `n` bytes; fewer left is damage at the current position.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let at = self.reader.pos;
        self.reader.take(n).ok_or_else(|| {
            Error::corrupt(
                self.path,
                self.base + at as u64,
                self.what,
                format!("{n} more bytes"),
                "the end of the record",
            )
        })
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        // `take` returned exactly N bytes.
        self.take(N).map(|b| b.try_into().expect("N bytes"))
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_be_bytes)
    }
}

impl<'a> Deref for RecordReader<'a> {
    type Target = ByteReader<'a>;

    fn deref(&self) -> &ByteReader<'a> {
        &self.reader
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_reads_and_short_ones_leave_the_position() {
        let bytes = [0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 9];
        let mut r = ByteReader::new(&bytes, 0);
        assert_eq!((r.u16(), r.u32(), r.u64()), (Some(1), Some(2), Some(3)));
        assert_eq!((r.u16(), r.pos), (None, 14));
        assert_eq!(r.take(1), Some(&[9u8][..]));
        let mut r = ByteReader::new(&bytes, 13).in_file(Path::new("f"), 100, "a record");
        assert_eq!(r.u16().unwrap(), 0x0309);
        let e = r.u32().unwrap_err().to_string();
        assert!(e.contains("115") && e.contains("4 more bytes"), "{e}");
        assert_eq!(r.pos, 15);
    }
}
