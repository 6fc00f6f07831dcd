//! The redo journal `BASE.jnl`: makes a commit's in-place writes all-or-nothing.
//!
//! A journal is a kvseq (PURPOSE `FSYSJRNL`, KEYREPR 13, VALREPR 2, no delflag) rewritten from
//! offset 0 at every commit that has in-place writes:
//!
//! | entry   | key (9 bytes)                      | value                                        |
//! |---------|------------------------------------|----------------------------------------------|
//! | write   | file tag (1 byte), offset (int64)  | the bytes to write there                     |
//! | commit  | 0xFF, number of writes (int64)     | CRC-32 (4 bytes) of the entries before it     |
//!
//! Superblock variable JSEQ numbers the commits. File tags: 0 = `.data`, 1 = `.idx`, 2 = `.time`.
//!
//! Commit order: appended bytes are made durable; the journal is written and made durable; the
//! writes are applied to the files. After a crash, a journal whose commit entry checks out is
//! applied again (idempotent: no in-place write happens between two journals, and appends never
//! overlap a journal's targets); a torn journal is ignored, and then none of its writes had
//! reached the files. Before a file is replaced by a rename (index growth, reindex) the journal is
//! emptied, so an old journal is never applied to a new file.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::kvseq::{KvSeq, KvSeqOptions};
use crate::format::repr::Repr;
use crate::format::superblock::{Purpose, VarName};
use crate::storage::{self, write_all_at, MemStorage, Storage};

/// Superblock variable: the commit number of the journal.
pub const JSEQ: VarName = VarName::new(b"JSEQ");
/// PURPOSE of a journal.
pub const PURPOSE: Purpose = Purpose(*b"FSYSJRNL");
const COMMIT_TAG: u8 = 0xFF;
const KEY_LEN: u16 = 9;

/// One held write: (file tag, offset, bytes).
pub type Write = (u8, u64, Vec<u8>);

/// A journal read back from disk.
#[derive(Debug, PartialEq, Eq)]
pub struct Replay {
    /// JSEQ: the commit number of the journal.
    pub seq: u64,
    /// The held writes, in the order they are applied.
    pub writes: Vec<Write>,
}

/// Encodes a complete journal file.
pub fn encode(seq: u64, writes: &[Write]) -> Result<Vec<u8>> {
    let mem = MemStorage::new("journal");
    let opts = KvSeqOptions {
        purpose: PURPOSE,
        keyrepr: Repr::Fixed { len: KEY_LEN },
        valrepr: Repr::Prefixed { width: 4 },
        delflag: false,
        fileincr: 0,
        extra: vec![(JSEQ, seq as i64)],
        clock: std::sync::Arc::new(crate::clock::ManualClock::new(0)),
        ..KvSeqOptions::default()
    };
    let mut kv = KvSeq::create(Box::new(mem.clone()), &opts)?;
    for (tag, offset, bytes) in writes {
        kv.append(&key(*tag, *offset), bytes)?;
    }
    let body_start = kv.first().0 as usize;
    let body_end = kv.filesize() as usize;
    kv.flush()?;
    let crc = crc32fast::hash(&mem.to_vec()[body_start..body_end]);
    kv.append(&key(COMMIT_TAG, writes.len() as u64), &crc.to_be_bytes())?;
    kv.flush()?;
    let mut bytes = mem.to_vec();
    bytes.truncate(kv.filesize() as usize);
    Ok(bytes)
}

fn key(tag: u8, n: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = tag;
    k[1..].copy_from_slice(&n.to_be_bytes());
    k
}

/// Writes a journal at offset 0 of `storage` and makes it durable. What an earlier, longer
/// journal left past its end is cut off: nothing reads it (the journal ends at its FILESIZE),
/// but it would keep the largest commit's size on disk for good.
pub fn write(storage: &dyn Storage, seq: u64, writes: &[Write]) -> Result<()> {
    let bytes = encode(seq, writes)?;
    write_all_at(storage, &bytes, 0)?;
    if storage::length(storage)? > bytes.len() as u64 {
        storage
            .set_len(bytes.len() as u64)
            .map_err(|e| Error::io(storage.path(), Some(bytes.len() as u64), e))?;
    }
    storage::sync(storage)
}

/// Reads the journal in `storage`: `Ok(None)` when it is empty or torn (then nothing of it was
/// applied); `Err` only for I/O errors.
pub fn read(storage: Box<dyn Storage>) -> Result<Option<Replay>> {
    if storage::length(storage.as_ref())? == 0 {
        return Ok(None);
    }
    let kv = match KvSeq::open(storage, false) {
        Ok(kv) => kv,
        Err(e) if e.is_corruption() => return Ok(None),
        Err(e) => return Err(e),
    };
    match parse(&kv) {
        Ok(replay) => Ok(replay),
        Err(e) if e.is_corruption() || matches!(e, Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn parse(kv: &KvSeq) -> Result<Option<Replay>> {
    let seq = kv.var(JSEQ).and_then(|v| u64::try_from(v).ok());
    let (Some(seq), true) = (
        seq,
        kv.superblock().purpose() == PURPOSE && kv.keyrepr() == Repr::Fixed { len: KEY_LEN },
    ) else {
        return Ok(None);
    };
    let mut writes = Vec::new();
    let mut crc = crc32fast::Hasher::new();
    for entry in kv.iter_entries(kv.first(), false) {
        let entry = entry?;
        let value = entry.value.unwrap_or_default();
        let tag = entry.key[0];
        let n = u64::from_be_bytes(entry.key[1..9].try_into().expect("fixed 9-byte key"));
        if tag == COMMIT_TAG {
            let complete = n == writes.len() as u64
                && entry.layout.end == kv.filesize()
                && value == crc.finalize().to_be_bytes();
            return Ok(complete.then_some(Replay { seq, writes }));
        }
        let mut raw = vec![0u8; (entry.layout.end - entry.layout.ptr.0) as usize];
        crate::storage::read_exact_at(
            kv.storage(),
            &mut raw,
            entry.layout.ptr.0,
            "a journal entry",
        )?;
        crc.update(&raw);
        writes.push((tag, n, value));
    }
    Ok(None)
}

/// Applies replayed writes to the files they name and syncs them. Writes whose bytes are already
/// there are skipped: after a clean shutdown the last journal is fully applied, and replaying it
/// changes nothing. Returns how many writes changed a file.
pub fn apply(replay: &Replay, files: &[(u8, &dyn Storage)], journal_path: &Path) -> Result<usize> {
    let mut changed = 0;
    for (tag, offset, bytes) in &replay.writes {
        let Some((_, file)) = files.iter().find(|(t, _)| t == tag) else {
            return Err(Error::corrupt(
                journal_path,
                0,
                "journal write for an unknown file",
                "tag 0, 1 or 2",
                tag,
            ));
        };
        let mut current = vec![0u8; bytes.len()];
        let n = file
            .read_at(&mut current, *offset)
            .map_err(|e| Error::io(file.path(), Some(*offset), e))?;
        if n == bytes.len() && current == *bytes {
            continue;
        }
        write_all_at(*file, bytes, *offset)?;
        changed += 1;
    }
    if changed > 0 {
        for (_, file) in files {
            storage::sync(*file)?;
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_torn_journals_are_ignored() {
        let writes = vec![(0u8, 4096u64, vec![1u8, 2, 3]), (1, 4200, vec![9; 16])];
        let bytes = encode(7, &writes).unwrap();
        let back = read(Box::new(MemStorage::from_bytes("j", bytes.clone())))
            .unwrap()
            .unwrap();
        assert_eq!(
            back,
            Replay {
                seq: 7,
                writes: writes.clone()
            }
        );
        for cut in [0, 100, 4096, bytes.len() - 1] {
            let torn = read(Box::new(MemStorage::from_bytes("j", bytes[..cut].to_vec()))).unwrap();
            assert_eq!(torn, None, "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        let at = bytes.len() - 10;
        flipped[at] ^= 1;
        assert_eq!(
            read(Box::new(MemStorage::from_bytes("j", flipped))).unwrap(),
            None
        );
        // A newer, shorter journal over an older, longer one.
        let mut over = encode(6, &[(2, 1, vec![5; 400])]).unwrap();
        over.resize(over.len().max(bytes.len()), 0xAA);
        over[..bytes.len()].copy_from_slice(&bytes);
        assert_eq!(
            read(Box::new(MemStorage::from_bytes("j", over)))
                .unwrap()
                .unwrap()
                .seq,
            7
        );
    }

    #[test]
    fn a_shorter_journal_leaves_no_tail_of_a_longer_one() {
        let file = MemStorage::new("j");
        write(&file, 1, &[(0, 4096, vec![3; 20_000])]).unwrap();
        let long = file.to_vec().len();
        let short = vec![(1u8, 64u64, vec![4u8; 8])];
        write(&file, 2, &short).unwrap();
        assert_eq!(file.to_vec(), encode(2, &short).unwrap());
        assert!(file.to_vec().len() + 19_000 < long);
        let back = read(Box::new(file.clone())).unwrap().unwrap();
        assert_eq!((back.seq, back.writes), (2, short));
    }
}
