//! The superblock: the common header of every Wink file.
//!
//! | offset        | size | name      | meaning                                              |
//! |---------------|------|-----------|------------------------------------------------------|
//! | 0             | 8    | magic     | `#!WINKME`                                           |
//! | 8             | 8    | name 0    | `SBSIZE  `                                           |
//! | 16            | 8    | SBSIZE    | size of the superblock, multiple of 8, 64..=1 MiB    |
//! | 24            | 8    | name 1    | `FORMAT  `                                           |
//! | 32            | 8    | FORMAT    | 0x10 kvseq, 0x20 hindex, 0x30 perm                   |
//! | 40            | 8    | name 2    | `PURPOSE `                                           |
//! | 48            | 8    | PURPOSE   | eight ASCII characters, right-padded with spaces     |
//! | 8 + 16·i      | 16   | var i     | name (8 ASCII bytes, space-padded) + int64 value     |
//! | 8 + 16·n      | 8    | end       | eight 0x00 bytes                                     |
//! | …             | …    | room      | zero up to SBSIZE: room for more variables           |
//!
//! Grammar: `superblock = "#!WINKME" (name value){n≥3} 00×8 00* ; |superblock| = SBSIZE`.
//! All integers are big-endian two's complement. Parsing is two steps: [`Superblock::parse`]
//! checks shape (magic, names, terminator, SBSIZE sanity) and the format modules validate meaning.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::{length, read_exact_at, write_all_at, Storage};

/// The first eight bytes of every Wink file.
pub const MAGIC: [u8; 8] = *b"#!WINKME";
/// Bytes per variable: an 8-byte name and an 8-byte value.
pub const VAR_SIZE: u64 = 16;
/// Offset of the first variable (SBSIZE).
pub const FIRST_VAR: u64 = MAGIC.len() as u64;
/// Offset of SBSIZE's value.
pub const SBSIZE_VALUE_OFFSET: u64 = FIRST_VAR + 8;
/// Offset of FORMAT's value (the magic test in `magic/wink` reads it here).
pub const FORMAT_VALUE_OFFSET: u64 = SBSIZE_VALUE_OFFSET + VAR_SIZE;
/// Offset of PURPOSE's value.
pub const PURPOSE_VALUE_OFFSET: u64 = FORMAT_VALUE_OFFSET + VAR_SIZE;
/// Smallest legal SBSIZE: magic, three variables and the terminator.
pub const MIN_SBSIZE: u64 = FIRST_VAR + 3 * VAR_SIZE + 8;
/// Largest SBSIZE a reader accepts; bounds the allocation a hostile header can ask for.
pub const MAX_SBSIZE: u64 = 1 << 20;
/// SBSIZE writers use unless told otherwise.
pub const DEFAULT_SBSIZE: u64 = 4096;

/// An 8-byte variable name, right-padded with spaces.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct VarName(pub [u8; 8]);

impl VarName {
    /// Pads `name` (at most 8 bytes) with spaces. Panics at compile time when too long.
    pub const fn new(name: &[u8]) -> VarName {
        assert!(name.len() <= 8, "a variable name has at most 8 bytes");
        let mut out = [b' '; 8];
        let mut i = 0;
        while i < name.len() {
            out[i] = name[i];
            i += 1;
        }
        VarName(out)
    }

    /// The name without its padding spaces.
    pub fn trimmed(&self) -> String {
        String::from_utf8_lossy(&self.0)
            .trim_end_matches(' ')
            .to_string()
    }

    /// Parses a user-supplied name such as `"FILESIZE"`.
    pub fn parse(text: &str) -> Result<VarName> {
        let bytes = text.as_bytes();
        if bytes.is_empty() || bytes.len() > 8 || !bytes.iter().all(|b| is_name_byte(*b)) {
            return Err(Error::invalid(format!(
                "variable name {text:?}: 1 to 8 printable ASCII characters"
            )));
        }
        Ok(VarName::new(bytes))
    }
}

impl fmt::Debug for VarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.trimmed())
    }
}

impl fmt::Display for VarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.trimmed())
    }
}

/// Names of the variables this library reads or writes (documented in `docs/FORMAT.md`).
pub mod var {
    use super::VarName;
    /// Superblock size: where the format's data begins.
    pub const SBSIZE: VarName = VarName::new(b"SBSIZE");
    /// Which format the file is (0x10 kvseq, 0x20 hindex, 0x30 perm).
    pub const FORMAT: VarName = VarName::new(b"FORMAT");
    /// The user's 8 characters saying what the file is for; not interpreted by the formats.
    pub const PURPOSE: VarName = VarName::new(b"PURPOSE");
    /// Logical end of the file's contents; bytes past it mean nothing.
    pub const FILESIZE: VarName = VarName::new(b"FILESIZE");
    /// Preallocation step of the real length (kvseq, perm).
    pub const FILEINCR: VarName = VarName::new(b"FILEINCR");
    /// kvseq: FILESIZE at the last completed sync.
    pub const SYNCSIZE: VarName = VarName::new(b"SYNCSIZE");
    /// Time of the last completed sync, seconds since the epoch.
    pub const SYNCTIME: VarName = VarName::new(b"SYNCTIME");
    /// kvseq: the key representation.
    pub const KEYREPR: VarName = VarName::new(b"KEYREPR");
    /// kvseq: the value representation.
    pub const VALREPR: VarName = VarName::new(b"VALREPR");
    /// kvseq: 1 when every entry starts with a delflag byte.
    pub const KVDELFL: VarName = VarName::new(b"KVDELFL");
    /// kvseq: entries start at multiples of ALIGN.
    pub const ALIGN: VarName = VarName::new(b"ALIGN");
    /// kvseq: entries, deleted ones included; hindex: cells that are not HTFREE.
    pub const ENTRIES: VarName = VarName::new(b"ENTRIES");
    /// kvseq: entries not deleted; hindex: cells neither HTFREE nor HTDEL.
    pub const AENTRIES: VarName = VarName::new(b"AENTRIES");
    /// hindex: the number of cells; perm: hashes are taken mod HTSIZE.
    pub const HTSIZE: VarName = VarName::new(b"HTSIZE");
    /// hindex: the cell size in 64-bit words.
    pub const CELLSZ: VarName = VarName::new(b"CELLSZ");
    /// hindex, perm: the hash algorithm (only 1, MD5, exists).
    pub const HTALGO: VarName = VarName::new(b"HTALGO");
    /// hindex: word 0 of a free cell.
    pub const HTFREE: VarName = VarName::new(b"HTFREE");
    /// hindex: word 0 of a deleted cell.
    pub const HTDEL: VarName = VarName::new(b"HTDEL");
    /// perm: the number of pairs.
    pub const PERMSIZE: VarName = VarName::new(b"PERMSIZE");
}

/// The FORMAT variable's known values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// FORMAT 0x10: a kvseq.
    KvSeq,
    /// FORMAT 0x20: a hindex.
    HIndex,
    /// FORMAT 0x30: a perm.
    Perm,
}

impl Format {
    /// The value stored in FORMAT.
    pub const fn code(self) -> i64 {
        match self {
            Format::KvSeq => 0x10,
            Format::HIndex => 0x20,
            Format::Perm => 0x30,
        }
    }

    /// The format for a FORMAT value, if known.
    pub fn from_code(code: i64) -> Option<Format> {
        [Format::KvSeq, Format::HIndex, Format::Perm]
            .into_iter()
            .find(|f| f.code() == code)
    }

    /// The name used by `file -m magic/wink` and `wink dump`.
    pub fn name(self) -> &'static str {
        match self {
            Format::KvSeq => "kvseq",
            Format::HIndex => "hindex",
            Format::Perm => "perm",
        }
    }
}

/// The PURPOSE variable: eight ASCII characters, right-padded with spaces.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Purpose(pub [u8; 8]);

impl Purpose {
    /// A purpose from at most eight printable ASCII characters.
    pub fn new(text: &str) -> Result<Purpose> {
        VarName::parse(text).map(|n| Purpose(n.0))
    }

    /// The int64 stored in the superblock.
    pub fn value(self) -> i64 {
        i64::from_be_bytes(self.0)
    }

    /// The purpose an int64 value spells.
    pub fn from_value(v: i64) -> Purpose {
        Purpose(v.to_be_bytes())
    }

    /// The text without trailing padding (spaces, and NULs from careless writers).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0)
            .trim_end_matches([' ', '\0'])
            .to_string()
    }
}

impl fmt::Debug for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text())
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

fn is_name_byte(b: u8) -> bool {
    (0x20..=0x7e).contains(&b)
}

/// A parsed superblock: SBSIZE and the variables in file order (unknown ones included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    sbsize: u64,
    vars: Vec<(VarName, i64)>,
}

impl Superblock {
    /// A new superblock with SBSIZE, FORMAT and PURPOSE in their fixed places.
    pub fn new(sbsize: u64, format: Format, purpose: Purpose) -> Result<Superblock> {
        if sbsize % 8 != 0 || !(MIN_SBSIZE..=MAX_SBSIZE).contains(&sbsize) {
            return Err(Error::invalid(format!(
                "SBSIZE {sbsize}: a multiple of 8 from {MIN_SBSIZE} to {MAX_SBSIZE}"
            )));
        }
        let sbsize_value = i64::try_from(sbsize).map_err(|_| Error::invalid("SBSIZE too large"))?;
        Ok(Superblock {
            sbsize,
            vars: vec![
                (var::SBSIZE, sbsize_value),
                (var::FORMAT, format.code()),
                (var::PURPOSE, purpose.value()),
            ],
        })
    }

    /// Reads and parses the superblock at the start of `s`.
    pub fn read(s: &dyn Storage) -> Result<Superblock> {
        let path = s.path();
        let file_len = length(s)?;
        let mut head = [0u8; 24];
        if file_len < head.len() as u64 {
            return Err(Error::corrupt(
                path,
                0,
                "file too short for a superblock",
                format!("at least {} bytes", head.len()),
                format!("{file_len} bytes"),
            ));
        }
        read_exact_at(s, &mut head, 0, "the superblock")?;
        let sbsize = check_head(path, &head, file_len)?;
        // Bounded by MAX_SBSIZE in check_head.
        let mut bytes = vec![0u8; sbsize as usize];
        read_exact_at(s, &mut bytes, 0, "the superblock")?;
        Superblock::parse(path, &bytes, file_len)
    }

    /// Parses a superblock from the first bytes of a file of length `file_len`.
    ///
    /// `bytes` must hold at least SBSIZE bytes (more are ignored).
    pub fn parse(path: &Path, bytes: &[u8], file_len: u64) -> Result<Superblock> {
        if bytes.len() < 24 {
            return Err(Error::corrupt(
                path,
                0,
                "file too short for a superblock",
                "at least 24 bytes",
                format!("{} bytes", bytes.len()),
            ));
        }
        let sbsize = check_head(path, &bytes[..24], file_len)?;
        let sbsize_usize = sbsize as usize; // ≤ MAX_SBSIZE
        if bytes.len() < sbsize_usize {
            return Err(Error::corrupt(
                path,
                bytes.len() as u64,
                "superblock shorter than SBSIZE",
                format!("{sbsize} bytes"),
                format!("{} bytes", bytes.len()),
            ));
        }
        let sb = &bytes[..sbsize_usize];
        let mut vars: Vec<(VarName, i64)> = Vec::new();
        let mut pos = FIRST_VAR as usize;
        loop {
            // A variable slot or the terminator must fit inside SBSIZE.
            if pos + 8 > sbsize_usize {
                return Err(Error::corrupt(
                    path,
                    pos as u64,
                    "superblock terminator",
                    "eight zero bytes within SBSIZE",
                    "no terminator",
                ));
            }
            let name_bytes: [u8; 8] = sb[pos..pos + 8].try_into().expect("8-byte slice");
            if name_bytes == [0u8; 8] {
                break;
            }
            let name = VarName(name_bytes);
            if let Some(i) = name_bytes.iter().position(|b| !is_name_byte(*b)) {
                return Err(Error::corrupt(
                    path,
                    (pos + i) as u64,
                    "superblock variable name",
                    "printable ASCII",
                    format!("byte 0x{:02x}", name_bytes[i]),
                ));
            }
            // A value must follow the name, and a terminator the value.
            if pos + 16 + 8 > sbsize_usize {
                return Err(Error::corrupt(
                    path,
                    pos as u64,
                    "superblock variable",
                    "a variable and a terminator within SBSIZE",
                    format!("variable {name} at the end of the superblock"),
                ));
            }
            let value = i64::from_be_bytes(sb[pos + 8..pos + 16].try_into().expect("8 bytes"));
            let index = vars.len();
            let fixed = [var::SBSIZE, var::FORMAT, var::PURPOSE];
            if index < fixed.len() && name != fixed[index] {
                return Err(Error::corrupt(
                    path,
                    pos as u64,
                    format!("superblock variable {index}"),
                    fixed[index],
                    name,
                ));
            }
            if index >= fixed.len() && fixed.contains(&name) {
                return Err(Error::corrupt(
                    path,
                    pos as u64,
                    "superblock variable order",
                    format!(
                        "{name} only at variable {}",
                        fixed.iter().position(|n| *n == name).unwrap_or(0)
                    ),
                    format!("{name} at variable {index}"),
                ));
            }
            if vars.iter().any(|(n, _)| *n == name) {
                return Err(Error::corrupt(
                    path,
                    pos as u64,
                    "superblock variable name",
                    "unique names",
                    format!("{name} twice"),
                ));
            }
            vars.push((name, value));
            pos += 16;
        }
        if vars.len() < 3 {
            return Err(Error::corrupt(
                path,
                pos as u64,
                "superblock",
                "SBSIZE, FORMAT and PURPOSE",
                format!("{} variables", vars.len()),
            ));
        }
        Ok(Superblock { sbsize, vars })
    }

    /// SBSIZE: where the format's data begins.
    pub fn sbsize(&self) -> u64 {
        self.sbsize
    }

    /// The FORMAT value (validated by the format that opens the file).
    pub fn format_code(&self) -> i64 {
        self.vars[1].1
    }

    /// The format, if FORMAT names a known one.
    pub fn format(&self) -> Option<Format> {
        Format::from_code(self.format_code())
    }

    /// PURPOSE.
    pub fn purpose(&self) -> Purpose {
        Purpose::from_value(self.vars[2].1)
    }

    /// The value of a variable, if present.
    pub fn get(&self, name: VarName) -> Option<i64> {
        self.vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// All variables in file order.
    pub fn vars(&self) -> &[(VarName, i64)] {
        &self.vars
    }

    /// Sets a variable in memory, adding it at the end when absent.
    ///
    /// SBSIZE, FORMAT and PURPOSE are fixed once created. Fails with [`Error::Full`] when the
    /// superblock has no room for another variable.
    pub fn set(&mut self, path: &Path, name: VarName, value: i64) -> Result<()> {
        if name == var::SBSIZE || name == var::FORMAT {
            return Err(Error::invalid(format!("{name} cannot be changed")));
        }
        if let Some(slot) = self.vars.iter_mut().find(|(n, _)| *n == name) {
            slot.1 = value;
            return Ok(());
        }
        if !name.0.iter().all(|b| is_name_byte(*b)) {
            return Err(Error::invalid(format!("variable name {name:?}")));
        }
        if self.terminator_offset() + VAR_SIZE + 8 > self.sbsize {
            return Err(Error::Full {
                path: path.to_path_buf(),
                what: format!(
                    "no room in the {}-byte superblock for variable {name}",
                    self.sbsize
                ),
            });
        }
        self.vars.push((name, value));
        Ok(())
    }

    /// A variable that must be a non-negative integer; a negative value is corruption reported
    /// at the value's offset.
    pub fn get_u64(&self, path: &Path, name: VarName) -> Result<Option<u64>> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        u64::try_from(value).map(Some).map_err(|_| {
            Error::corrupt(
                path,
                self.value_offset(name).unwrap_or(0),
                format!("variable {name}"),
                "a non-negative value",
                value,
            )
        })
    }

    /// Like [`Superblock::get_u64`], but the variable must be present.
    pub fn require_u64(&self, path: &Path, name: VarName) -> Result<u64> {
        self.get_u64(path, name)?.ok_or_else(|| {
            Error::corrupt(
                path,
                self.terminator_offset(),
                "superblock",
                format!("variable {name}"),
                "no such variable",
            )
        })
    }

    /// Fails unless FORMAT is `format`.
    pub fn expect_format(&self, path: &Path, format: Format) -> Result<()> {
        if self.format_code() != format.code() {
            return Err(Error::corrupt(
                path,
                FORMAT_VALUE_OFFSET,
                "FORMAT",
                format!("0x{:x} ({})", format.code(), format.name()),
                format!("0x{:x}", self.format_code()),
            ));
        }
        Ok(())
    }

    /// Byte offset of a variable's value (for a one-word in-place update).
    pub fn value_offset(&self, name: VarName) -> Option<u64> {
        self.vars
            .iter()
            .position(|(n, _)| *n == name)
            .map(|i| FIRST_VAR + VAR_SIZE * i as u64 + 8)
    }

    /// Offset of the terminator (the end of the variables).
    pub fn terminator_offset(&self) -> u64 {
        FIRST_VAR + VAR_SIZE * self.vars.len() as u64
    }

    /// The variables region: magic, variables and terminator (not the zero room after it).
    pub fn encode_vars(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.terminator_offset() as usize + 8);
        out.extend_from_slice(&MAGIC);
        for (name, value) in &self.vars {
            out.extend_from_slice(&name.0);
            out.extend_from_slice(&value.to_be_bytes());
        }
        out.extend_from_slice(&[0u8; 8]);
        out
    }

    /// The whole superblock, SBSIZE bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.encode_vars();
        out.resize(self.sbsize as usize, 0);
        out
    }

    /// Writes the whole superblock at offset 0.
    pub fn write(&self, s: &dyn Storage) -> Result<()> {
        write_all_at(s, &self.encode(), 0)
    }

    /// Writes magic, variables and terminator in one write; the zero room after is untouched.
    ///
    /// One write of at most a few hundred bytes: it lies in the first disk sector for up to 31
    /// variables, which is what makes header updates atomic on real media.
    pub fn write_vars(&self, s: &dyn Storage) -> Result<()> {
        write_all_at(s, &self.encode_vars(), 0)
    }

    /// Updates one variable's value in place: a single 8-byte write.
    pub fn write_var(&self, s: &dyn Storage, name: VarName) -> Result<()> {
        let (offset, value) = match (self.value_offset(name), self.get(name)) {
            (Some(o), Some(v)) => (o, v),
            _ => return Err(Error::invalid(format!("no variable {name} to update"))),
        };
        write_all_at(s, &value.to_be_bytes(), offset)
    }
}

/// Checks the magic and SBSIZE (bytes 0..24) and returns SBSIZE.
fn check_head(path: &Path, head: &[u8], file_len: u64) -> Result<u64> {
    if head[..8] != MAGIC {
        return Err(Error::corrupt(
            path,
            0,
            "magic",
            "#!WINKME",
            format!("{:?}", String::from_utf8_lossy(&head[..8])),
        ));
    }
    if head[8..16] != var::SBSIZE.0 {
        return Err(Error::corrupt(
            path,
            FIRST_VAR,
            "superblock variable 0",
            "SBSIZE",
            format!("{:?}", String::from_utf8_lossy(&head[8..16])),
        ));
    }
    let raw = i64::from_be_bytes(head[16..24].try_into().expect("8 bytes"));
    let valid = u64::try_from(raw)
        .ok()
        .filter(|v| v % 8 == 0 && (MIN_SBSIZE..=MAX_SBSIZE).contains(v));
    let Some(sbsize) = valid else {
        return Err(Error::corrupt(
            path,
            SBSIZE_VALUE_OFFSET,
            "SBSIZE",
            format!("a multiple of 8 from {MIN_SBSIZE} to {MAX_SBSIZE}"),
            raw,
        ));
    };
    // Protects every later read of the superblock from running off the file.
    if sbsize > file_len {
        return Err(Error::corrupt(
            path,
            SBSIZE_VALUE_OFFSET,
            "SBSIZE past the end of the file",
            format!("at most {file_len}"),
            sbsize,
        ));
    }
    Ok(sbsize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    fn sample() -> Superblock {
        let mut sb = Superblock::new(4096, Format::KvSeq, Purpose::new("TEST").unwrap()).unwrap();
        sb.set(Path::new("t"), var::FILESIZE, 4096).unwrap();
        sb.set(Path::new("t"), VarName::new(b"XTRA"), -7).unwrap();
        sb
    }

    #[test]
    fn offsets_match_the_spec() {
        assert_eq!(SBSIZE_VALUE_OFFSET, 16);
        assert_eq!(FORMAT_VALUE_OFFSET, 32);
        assert_eq!(PURPOSE_VALUE_OFFSET, 48);
        assert_eq!(MIN_SBSIZE, 64);
        let bytes = sample().encode();
        assert_eq!(&bytes[..8], b"#!WINKME");
        assert_eq!(&bytes[8..16], b"SBSIZE  ");
        assert_eq!(
            i64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes")),
            4096
        );
        assert_eq!(
            i64::from_be_bytes(bytes[32..40].try_into().expect("8 bytes")),
            0x10
        );
        assert_eq!(&bytes[48..56], b"TEST    ");
        assert_eq!(bytes.len(), 4096);
    }

    #[test]
    fn roundtrip_keeps_unknown_variables() {
        let sb = sample();
        let bytes = sb.encode();
        let parsed = Superblock::parse(Path::new("t"), &bytes, 4096).unwrap();
        assert_eq!(parsed, sb);
        assert_eq!(parsed.get(VarName::new(b"XTRA")), Some(-7));
        assert_eq!(parsed.purpose().text(), "TEST");
    }

    #[test]
    fn in_place_update_and_add() {
        let s = MemStorage::new("t");
        let mut sb = sample();
        sb.write(&s).unwrap();
        sb.set(Path::new("t"), var::FILESIZE, 5000).unwrap();
        sb.write_var(&s, var::FILESIZE).unwrap();
        sb.set(Path::new("t"), var::ENTRIES, 3).unwrap();
        sb.write_vars(&s).unwrap();
        let back = Superblock::read(&s).unwrap();
        assert_eq!(back.get(var::FILESIZE), Some(5000));
        assert_eq!(back.get(var::ENTRIES), Some(3));
        assert_eq!(back.vars().len(), 6);
    }

    #[test]
    fn full_superblock_refuses_a_variable() {
        let mut sb = Superblock::new(64, Format::Perm, Purpose::new("P").unwrap()).unwrap();
        let err = sb.set(Path::new("t"), var::PERMSIZE, 1).unwrap_err();
        assert!(matches!(err, Error::Full { .. }));
    }

    fn reject(bytes: &[u8], offset: u64) {
        match Superblock::parse(Path::new("t"), bytes, bytes.len() as u64) {
            Err(Error::Corrupt { offset: o, .. }) => assert_eq!(o, offset, "wrong offset"),
            other => panic!("expected corruption at {offset}, got {other:?}"),
        }
    }

    #[test]
    fn every_rejection_rule() {
        let good = sample().encode();
        let mut b = good.clone();
        b[0] = b'X';
        reject(&b, 0); // magic
        for bad in [4095i64, 56, 2 << 20, -8] {
            let mut b = good.clone();
            b[16..24].copy_from_slice(&bad.to_be_bytes());
            reject(&b, 16); // SBSIZE not a multiple of 8, too small, too large, negative
        }
        let mut b = good.clone();
        b[16..24].copy_from_slice(&8192i64.to_be_bytes());
        reject(&b, 16); // SBSIZE past the end of the file
        let mut b = good.clone();
        b[24..32].copy_from_slice(b"PURPOSE ");
        reject(&b, 24); // FORMAT out of place
        let mut b = good.clone();
        b[40..48].copy_from_slice(b"XTRA    ");
        reject(&b, 40); // PURPOSE out of place
        let mut b = good.clone();
        b[58] = 0x01;
        reject(&b, 58); // a name byte outside printable ASCII
        let mut b = good.clone();
        b[72..80].copy_from_slice(b"FILESIZE");
        reject(&b, 72); // a duplicated name
        let mut b = good.clone();
        b[72..80].copy_from_slice(b"SBSIZE  ");
        reject(&b, 72); // SBSIZE again, later
        let mut b = vec![0u8; 64];
        b[..56].copy_from_slice(&good[..56]);
        b[16..24].copy_from_slice(&64i64.to_be_bytes());
        b[56..64].copy_from_slice(b"NOTERM  ");
        reject(&b, 56); // no terminator within SBSIZE
    }
}
