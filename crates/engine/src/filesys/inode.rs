//! The inode: the value of a `NAME/I0` entry in a filesys datafile.
//!
//! | offset      | size | field  | meaning                                                |
//! |-------------|------|--------|--------------------------------------------------------|
//! | 0           | 8    | CKSUM  | CRC-32 of bytes 8 .. 56 + 16·DCOUNT, zero-extended      |
//! | 8           | 8    | NEXTI  | 0 (one inode per file: NI = 1)                          |
//! | 16          | 8    | FILEID | unique in the datafile, kept across rename              |
//! | 24          | 8    | LSIZE  | logical file size in bytes                              |
//! | 32          | 8    | FTYPE  | 0..=255                                                 |
//! | 40          | 8    | FMTIME | seconds since the epoch                                 |
//! | 48          | 8    | DCOUNT | data entries of the file                                |
//! | 56 + 16·i   | 16   | pair i | kv_pointer and data_size of data entry `FILEID/D<i>`    |
//! | …           | …    | pad    | zero up to the inode size (ISZ when created)            |
//!
//! An inode of `n` bytes holds `(n − 56) / 16` pairs.

use crate::error::{Error, Result};
use crate::format::kvseq::KvPointer;
use std::path::Path;

/// Bytes before the first pair.
pub const HEADER: u64 = 56;
/// Bytes per (kv_pointer, data_size) pair.
pub const PAIR: u64 = 16;
/// Offset of LSIZE within the inode (in-place bookkeeping of appends).
pub const LSIZE_OFFSET: u64 = 24;
/// The smallest useful inode: a header and one pair.
pub const MIN_SIZE: u64 = HEADER + PAIR;
/// The largest inode a reader accepts (bounds the allocation for one inode).
pub const MAX_SIZE: u64 = 16 << 20;

/// A decoded inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// FILEID: unique in the datafile, kept across rename; names the data entries.
    pub fileid: u64,
    /// LSIZE: the logical file size, bytes.
    pub lsize: u64,
    /// FTYPE: the file's type, the caller's to assign.
    pub ftype: u8,
    /// FMTIME: seconds since the epoch.
    pub mtime: i64,
    /// (kv_pointer, data_size) of each data entry, in order.
    pub data: Vec<(KvPointer, u64)>,
    /// Bytes the inode occupies (its capacity).
    pub size: u64,
}

impl Inode {
    /// Pairs an inode of `size` bytes holds.
    pub fn capacity_of(size: u64) -> u64 {
        size.saturating_sub(HEADER) / PAIR
    }

    /// Pairs this inode holds.
    pub fn capacity(&self) -> u64 {
        Inode::capacity_of(self.size)
    }

    /// The encoded inode, `size` bytes, CKSUM filled in.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size as usize);
        out.extend_from_slice(&[0u8; 8]);
        for field in [
            0,
            self.fileid as i64,
            self.lsize as i64,
            i64::from(self.ftype),
            self.mtime,
            self.data.len() as i64,
        ] {
            out.extend_from_slice(&field.to_be_bytes());
        }
        for (ptr, size) in &self.data {
            out.extend_from_slice(&(ptr.0 as i64).to_be_bytes());
            out.extend_from_slice(&(*size as i64).to_be_bytes());
        }
        let cksum = crc32fast::hash(&out[8..]);
        out[..8].copy_from_slice(&i64::from(cksum).to_be_bytes());
        out.resize(self.size as usize, 0);
        out
    }

    /// Decodes an inode found at `value_offset` in `path` (for error messages).
    pub fn decode(bytes: &[u8], path: &Path, value_offset: u64) -> Result<Inode> {
        let corrupt = |at: u64, what: &str, expected: String, found: String| {
            Error::corrupt(
                path,
                value_offset + at,
                format!("inode {what}"),
                expected,
                found,
            )
        };
        let size = bytes.len() as u64;
        if size < HEADER {
            return Err(corrupt(
                0,
                "size",
                format!("at least {HEADER} bytes"),
                format!("{size} bytes"),
            ));
        }
        let field = |i: usize| {
            i64::from_be_bytes(
                bytes[i * 8..i * 8 + 8]
                    .try_into()
                    .expect("8 bytes within the checked header"),
            )
        };
        let dcount = field(6);
        let capacity = Inode::capacity_of(size);
        let dcount = u64::try_from(dcount)
            .ok()
            .filter(|d| *d <= capacity)
            .ok_or_else(|| corrupt(48, "DCOUNT", format!("0..={capacity}"), dcount.to_string()))?;
        let end = (HEADER + dcount * PAIR) as usize;
        let stored = field(0);
        let computed = i64::from(crc32fast::hash(&bytes[8..end]));
        // The checksum covers every field a reader relies on; nothing is returned unless it holds.
        if stored != computed {
            return Err(corrupt(
                0,
                "CKSUM",
                format!("0x{computed:08x}"),
                format!("0x{stored:08x}"),
            ));
        }
        if field(1) != 0 {
            return Err(Error::unsupported(
                path,
                value_offset + 8,
                format!(
                    "inode NEXTI {} (only one inode per file is defined)",
                    field(1)
                ),
            ));
        }
        let nonneg = |i: usize, name: &str| {
            u64::try_from(field(i))
                .map_err(|_| corrupt(i as u64 * 8, name, "≥ 0".into(), field(i).to_string()))
        };
        let fileid = nonneg(2, "FILEID")?;
        let lsize = nonneg(3, "LSIZE")?;
        let ftype = u8::try_from(field(4))
            .map_err(|_| corrupt(32, "FTYPE", "0..=255".into(), field(4).to_string()))?;
        let mut data = Vec::with_capacity(dcount as usize);
        let mut total: u64 = 0;
        for i in 0..dcount as usize {
            let at = HEADER as usize + i * PAIR as usize;
            let ptr = i64::from_be_bytes(bytes[at..at + 8].try_into().expect("pair within DCOUNT"));
            let len = i64::from_be_bytes(
                bytes[at + 8..at + 16]
                    .try_into()
                    .expect("pair within DCOUNT"),
            );
            let (Ok(ptr), Ok(len)) = (u64::try_from(ptr), u64::try_from(len)) else {
                return Err(corrupt(
                    at as u64,
                    "pair",
                    "non-negative pointer and size".into(),
                    format!("({ptr}, {len})"),
                ));
            };
            total = total.saturating_add(len);
            data.push((KvPointer(ptr), len));
        }
        // LSIZE bytes must exist in the data entries.
        if lsize > total {
            return Err(corrupt(
                24,
                "LSIZE",
                format!("≤ {total} (the data entries' total)"),
                lsize.to_string(),
            ));
        }
        Ok(Inode {
            fileid,
            lsize,
            ftype,
            mtime: field(5),
            data,
            size,
        })
    }
}

/// The datafile key of a file's inode: `NAME/I0`.
pub fn inode_key(name: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 3);
    key.extend_from_slice(name);
    key.extend_from_slice(b"/I0");
    key
}

/// The datafile key of data entry `n` of a file: `<fileid in lowercase hex>/D<n>`.
pub fn data_key(fileid: u64, n: u64) -> Vec<u8> {
    // Made for every data entry written or read: digits by hand, not `format!`.
    let mut key = Vec::with_capacity(40);
    push_digits(&mut key, fileid, 16);
    key.extend_from_slice(b"/D");
    push_digits(&mut key, n, 10);
    key
}

/// Appends `v` in base `radix` (10 or 16), lowercase, no leading zeros.
fn push_digits(out: &mut Vec<u8>, mut v: u64, radix: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b"0123456789abcdef"[(v % radix) as usize];
        v /= radix;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[at..]);
}

/// What a datafile key names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyKind<'a> {
    /// `NAME/I<n>`.
    Inode {
        /// The file's name.
        name: &'a [u8],
        /// The inode's number (0: one inode per file).
        n: u64,
    },
    /// `<fileid>/D<n>`.
    Data {
        /// The FILEID of the file it belongs to.
        fileid: u64,
        /// Its index among the file's data entries.
        n: u64,
    },
    /// Anything else.
    Other,
}

/// Classifies a datafile key by its last `/X<digits>` segment.
pub fn classify(key: &[u8]) -> KeyKind<'_> {
    let Some(slash) = key.iter().rposition(|b| *b == b'/') else {
        return KeyKind::Other;
    };
    let (head, tail) = (&key[..slash], &key[slash + 1..]);
    let Some((&kind, digits)) = tail.split_first() else {
        return KeyKind::Other;
    };
    let Some(n) = parse_decimal(digits) else {
        return KeyKind::Other;
    };
    match kind {
        b'I' => KeyKind::Inode { name: head, n },
        b'D' => match parse_hex(head) {
            Some(fileid) => KeyKind::Data { fileid, n },
            None => KeyKind::Other,
        },
        _ => KeyKind::Other,
    }
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn parse_hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty()
        || digits.len() > 16
        || !digits
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_key_is_hex_fileid_and_decimal_index() {
        for v in [
            0,
            1,
            9,
            10,
            15,
            16,
            255,
            4096,
            99_999,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            for n in [0, 1, 9, 10, 123, u64::MAX] {
                assert_eq!(data_key(v, n), format!("{v:x}/D{n}").into_bytes());
            }
        }
        assert_eq!(inode_key(b"a/b"), b"a/b/I0");
    }

    #[test]
    fn roundtrip_and_checksum() {
        let inode = Inode {
            fileid: 0x2a,
            lsize: 10,
            ftype: 3,
            mtime: -5,
            data: vec![(KvPointer(4096), 6), (KvPointer(5000), 4)],
            size: 120,
        };
        let bytes = inode.encode();
        assert_eq!(bytes.len(), 120);
        assert_eq!(Inode::decode(&bytes, Path::new("t"), 0).unwrap(), inode);
        for i in 0..(HEADER + 2 * PAIR) as usize {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                Inode::decode(&bad, Path::new("t"), 0).is_err(),
                "flip at {i} passed"
            );
        }
        assert_eq!(Inode::capacity_of(88), 2);
        assert_eq!(Inode::capacity_of(176), 7);
    }

    #[test]
    fn keys() {
        assert_eq!(inode_key(b"a/b c.html"), b"a/b c.html/I0");
        assert_eq!(data_key(255, 3), b"ff/D3");
        assert_eq!(
            classify(b"a/b c.html/I0"),
            KeyKind::Inode {
                name: b"a/b c.html",
                n: 0
            }
        );
        assert_eq!(classify(b"ff/D12"), KeyKind::Data { fileid: 255, n: 12 });
        assert_eq!(
            classify(b"x/D5/I0"),
            KeyKind::Inode {
                name: b"x/D5",
                n: 0
            }
        );
        assert_eq!(classify(b"FF/D1"), KeyKind::Other);
        assert_eq!(classify(b"noslash"), KeyKind::Other);
    }
}
