//! The redo journal: makes a commit's in-place writes all-or-nothing, and tells a complete
//! commit from a torn one after a single barrier.
//!
//! A journal is a kvseq (PURPOSE `FSYSJRNL`, KEYREPR 13, VALREPR 2, no delflag), written from
//! offset 0 of one of two slot files, `BASE.jnl` (even commit numbers) and `BASE.jnl2` (odd), so
//! that writing one commit's journal never overwrites the previous commit's:
//!
//! | entry    | key (9 bytes)                        | value                                      |
//! |----------|--------------------------------------|--------------------------------------------|
//! | write    | file tag (1 byte), offset (int64)    | the bytes to write there                   |
//! | appended | 0xFE, start (int64)                  | file tag (1), end (int64), CRC-32 (4) of the file's bytes start..end |
//! | requires | 0xFD, FILESIZE (int64)               | the base name of a sibling filesys whose committed datafile must reach that FILESIZE |
//! | commit   | 0xFC, number of writes (int64)       | CRC-32 (4 bytes) of JSEQ (int64) and the entries before it |
//!
//! Superblock variable JSEQ numbers the commits. File tags: 0 = `.data`, 1 = `.idx`, 2 = `.time`.
//!
//! The commit entry's CRC covers JSEQ too: a slot is rewritten in place without a sync, so after
//! a power cut it may hold the superblock (and JSEQ) of the journal it held before over the
//! entries of the one written since — the entries start in a later sector. Without JSEQ under
//! the CRC, such a slot reads as a complete journal of the old number with the new commit's
//! writes, and recovery would apply a commit whose barrier never returned.
//!
//! A journal written by the version with one slot ends with a commit entry tagged 0xFF whose CRC
//! covers the entries only. It is read (it has no appended or requires entries: that version
//! synced appended bytes before writing it), and a writer's open replaces it at once with an
//! empty journal in each slot, so no commit is ever written over it.
//!
//! Commit order: the appended bytes and the journal are written, then made durable together by
//! one barrier (every file's fdatasync at once); then the in-place writes are applied. The
//! journal names the bytes the commit appended with their CRC, so that after a crash recovery can
//! tell a journal whose appended bytes all arrived (a complete commit, applied again) from one
//! whose barrier was cut short (its appends are dropped and the commit before it stands). The
//! other slot still holds the commit before, whose applied writes the interrupted barrier may not
//! have made durable yet: it is applied again first. [`decide`] is the whole rule.
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::kvseq::{Image, KvSeq, KvSeqOptions};
use crate::format::repr::Repr;
use crate::format::superblock::{Purpose, VarName};
use crate::storage::{self, write_all_at, MemStorage, Storage};

/// Superblock variable: the commit number of the journal.
pub const JSEQ: VarName = VarName::new(b"JSEQ");
/// PURPOSE of a journal.
pub const PURPOSE: Purpose = Purpose(*b"FSYSJRNL");
/// The suffixes of the two slot files, by the parity of the commit number.
pub const SLOTS: [&str; 2] = ["jnl", "jnl2"];
const COMMIT_TAG: u8 = 0xFC;
/// The commit entry of a journal written by the version with one slot (its CRC leaves out JSEQ).
const LEGACY_COMMIT_TAG: u8 = 0xFF;
const APPENDED_TAG: u8 = 0xFE;
const REQUIRES_TAG: u8 = 0xFD;
const KEY_LEN: u16 = 9;

/// One held write: (file tag, offset, bytes).
pub type Write = (u8, u64, Vec<u8>);

/// Bytes a commit appended to one file, with their CRC-32.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Appended {
    /// The file (tag).
    pub tag: u8,
    /// The first byte appended (the file's stable end at the commit before).
    pub start: u64,
    /// One past the last byte the commit relies on.
    pub end: u64,
    /// CRC-32 (IEEE) of the bytes `start..end`.
    pub crc: u32,
}

/// A commit of another filesys that this one depends on: that filesys (a sibling of this one's
/// base, named by its base's file name) must have committed a datafile at least this long.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Requires {
    /// The sibling's base file name (no directory).
    pub name: String,
    /// Its datafile's FILESIZE after the commit depended on.
    pub filesize: u64,
}

/// What a commit's journal holds.
#[derive(Debug, PartialEq, Eq, Default, Clone)]
pub struct Replay {
    /// JSEQ: the commit number of the journal.
    pub seq: u64,
    /// The held writes, in the order they are applied.
    pub writes: Vec<Write>,
    /// The bytes the commit appended, which must be durable for it to count.
    pub appended: Vec<Appended>,
    /// The other filesys's commit this one depends on.
    pub requires: Option<Requires>,
    /// Written by the version with one slot (see the module's text).
    pub legacy: bool,
}

/// A journal slot as read back from disk.
#[derive(Debug, PartialEq, Eq)]
pub enum Slot {
    /// No file, or an empty one: nothing was ever written there.
    Absent,
    /// Bytes that are no complete journal: a write of it was cut short.
    Torn,
    /// A complete journal (its own CRC holds; whether its appended bytes arrived is
    /// [`decide`]'s question).
    Valid(Replay),
    /// A complete journal, commit number `seq`, whose entries were not parsed because recovery
    /// cannot need them: the other slot holds a newer journal with nothing to apply (a clean
    /// close's, written over durable files). Its commit entry's CRC was checked.
    Unread(u64),
}

/// Which slot file holds commit `seq`.
pub fn slot_of(seq: u64) -> usize {
    (seq % 2) as usize
}

/// The greatest commit number either slot holds.
pub fn last_seq(slots: &[Slot; 2]) -> u64 {
    slots
        .iter()
        .filter_map(|s| match s {
            Slot::Valid(r) => Some(r.seq),
            Slot::Unread(seq) => Some(*seq),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// What recovery makes of the two slots.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The journals to apply, oldest first (the last is the commit the filesys is at).
    pub replays: Vec<Replay>,
    /// The greatest commit number either slot holds: the next commit's is greater.
    pub last_seq: u64,
    /// A journal was set aside: torn, or complete in itself but its appended bytes or the
    /// commit it required did not all arrive.
    pub discarded: Option<String>,
}

/// The recovery rule over the two slots. `complete` tells whether a journal's appended bytes
/// and required commit are durable (the journal itself is). It is asked only about the newest
/// journal, and only when nothing else proves it: a commit starts its journal only after the
/// commit before has passed its barrier, so the older of two journals is always complete, and so
/// is a lone journal beside a torn slot (the torn one was the next commit's).
pub fn decide(
    slots: [Slot; 2],
    complete: &mut dyn FnMut(&Replay) -> Result<bool>,
) -> Result<Decision> {
    let torn = slots.iter().any(|s| matches!(s, Slot::Torn));
    let last_seq = last_seq(&slots);
    // (number, the journal when its entries were read)
    let mut valid: Vec<(u64, Option<Replay>)> = slots
        .into_iter()
        .filter_map(|s| match s {
            Slot::Valid(r) => Some((r.seq, Some(r))),
            Slot::Unread(seq) => Some((seq, None)),
            _ => None,
        })
        .collect();
    valid.sort_by_key(|(seq, _)| *seq);
    let mut decision = Decision {
        last_seq,
        discarded: torn.then(|| "a torn journal (none of its writes had been applied)".into()),
        ..Decision::default()
    };
    let Some((_, newest)) = valid.pop() else {
        return Ok(decision);
    };
    let newest = newest.ok_or_else(|| Error::internal("the newest journal was not read"))?;
    let older = valid.pop();
    let proven = torn && older.is_none();
    let needed = |older: Option<(u64, Option<Replay>)>| -> Result<Option<Replay>> {
        older
            .map(|(seq, r)| {
                r.ok_or_else(|| {
                    Error::internal(format!("journal {seq} is needed but was not read"))
                })
            })
            .transpose()
    };
    if proven || complete(&newest)? {
        // An empty journal is written only over durable files (a clean close, an index about to
        // be replaced): nothing before it is applied again.
        if !newest.writes.is_empty() {
            decision.replays.extend(needed(older)?);
        }
        decision.replays.push(newest);
    } else {
        decision.discarded = Some(format!(
            "commit {}: its journal is complete but not all it appended or required arrived \
             (none of its writes had been applied)",
            newest.seq
        ));
        decision.replays.extend(needed(older)?);
    }
    Ok(decision)
}

/// Encodes a complete journal file.
pub fn encode(seq: u64, writes: &[Write]) -> Result<Vec<u8>> {
    encode_commit(&Replay {
        seq,
        writes: writes.to_vec(),
        ..Replay::default()
    })
}

/// Encodes a commit's journal: its writes, what it appended, what it requires.
pub fn encode_commit(commit: &Replay) -> Result<Vec<u8>> {
    encode_as(commit, false)
}

/// Encodes a journal, as the version with one slot did when `legacy`.
fn encode_as(commit: &Replay, legacy: bool) -> Result<Vec<u8>> {
    let mut e = Encoder::new(commit.seq)?;
    for (tag, offset, bytes) in &commit.writes {
        e.write(*tag, *offset, bytes)?;
    }
    for a in &commit.appended {
        e.appended(*a);
    }
    if let Some(r) = &commit.requires {
        e.requires(r.clone());
    }
    e.finish_as(legacy)
}

/// The layout of journal `seq` (SYNCTIME 0: a journal's superblock does not depend on the time).
fn options(seq: u64) -> KvSeqOptions {
    KvSeqOptions {
        purpose: PURPOSE,
        keyrepr: Repr::Fixed { len: KEY_LEN },
        valrepr: Repr::Prefixed { width: 4 },
        delflag: false,
        fileincr: 0,
        extra: vec![(JSEQ, seq as i64)],
        clock: std::sync::Arc::new(crate::clock::ManualClock::new(0)),
        ..KvSeqOptions::default()
    }
}

/// A commit's journal, encoded as its writes are handed over: a commit adds them from where they
/// are held, without copying them into a [`Replay`] first.
#[derive(Debug)]
pub struct Encoder {
    seq: u64,
    image: Image,
    writes: u64,
    appended: Vec<Appended>,
    requires: Option<Requires>,
}

impl Encoder {
    /// The journal of commit number `seq`, with no entries yet.
    pub fn new(seq: u64) -> Result<Encoder> {
        Ok(Encoder {
            seq,
            image: Image::new(Path::new("journal"), &options(seq))?,
            writes: 0,
            appended: Vec::new(),
            requires: None,
        })
    }

    /// Adds a held write (the writes are applied in the order they are added).
    pub fn write(&mut self, tag: u8, offset: u64, bytes: &[u8]) -> Result<()> {
        self.image.append(&key(tag, offset), bytes)?;
        self.writes += 1;
        Ok(())
    }

    /// Adds bytes the commit appended (encoded after every write).
    pub fn appended(&mut self, a: Appended) {
        self.appended.push(a);
    }

    /// Says which sibling's commit this one depends on (encoded after the appended bytes).
    pub fn requires(&mut self, r: Requires) {
        self.requires = Some(r);
    }

    /// Returns the whole journal file, sealed by its commit entry.
    pub fn finish(self) -> Result<Vec<u8>> {
        self.finish_as(false)
    }

    fn finish_as(mut self, legacy: bool) -> Result<Vec<u8>> {
        for a in std::mem::take(&mut self.appended) {
            let mut v = Vec::with_capacity(13);
            v.push(a.tag);
            v.extend_from_slice(&a.end.to_be_bytes());
            v.extend_from_slice(&a.crc.to_be_bytes());
            self.image.append(&key(APPENDED_TAG, a.start), &v)?;
        }
        if let Some(r) = self.requires.take() {
            self.image
                .append(&key(REQUIRES_TAG, r.filesize), r.name.as_bytes())?;
        }
        let entries = self.image.entries();
        let (tag, crc) = if legacy {
            (LEGACY_COMMIT_TAG, crc32fast::hash(entries))
        } else {
            (COMMIT_TAG, sealed_crc(self.seq, entries))
        };
        self.image
            .append(&key(tag, self.writes), &crc.to_be_bytes())?;
        self.image.finish()
    }
}

/// The commit entry's CRC: of the commit number, then of the entries before it.
fn sealed_crc(seq: u64, entries: &[u8]) -> u32 {
    let mut crc = sealed_hasher(seq);
    crc.update(entries);
    crc.finalize()
}

/// The commit entry's CRC, fed the commit number; the entries follow.
fn sealed_hasher(seq: u64) -> crc32fast::Hasher {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_be_bytes());
    crc
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
    place(storage, &encode(seq, writes)?)?;
    storage::sync(storage)
}

/// Writes encoded journal `bytes` at offset 0 of `storage`, without a sync (a commit's barrier
/// makes it durable with the bytes it appended), and cuts off what a longer one left.
pub fn place(storage: &dyn Storage, bytes: &[u8]) -> Result<()> {
    write_all_at(storage, bytes, 0)?;
    if storage::length(storage)? > bytes.len() as u64 {
        storage
            .set_len(bytes.len() as u64)
            .map_err(|e| Error::io(storage.path(), Some(bytes.len() as u64), e))?;
    }
    Ok(())
}

/// Reads the journal in `storage`: `Ok(None)` when it is empty or torn (then nothing of it was
/// applied); `Err` only for I/O errors.
pub fn read(storage: Box<dyn Storage>) -> Result<Option<Replay>> {
    match read_slot(storage)? {
        Slot::Valid(r) => Ok(Some(r)),
        _ => Ok(None),
    }
}

/// Reads one slot file.
pub fn read_slot(storage: Box<dyn Storage>) -> Result<Slot> {
    match open_slot(storage)? {
        Ok(kv) => parse_slot(&kv),
        Err(slot) => Ok(slot),
    }
}

/// Opens a slot file's kvseq (read whole into memory when of a sane size), or says the slot is
/// absent or torn.
fn open_slot(storage: Box<dyn Storage>) -> Result<std::result::Result<KvSeq, Slot>> {
    let len = storage::length(storage.as_ref())?;
    if len == 0 {
        return Ok(Err(Slot::Absent));
    }
    // A journal is parsed entry by entry, a few small reads each: after a large commit (a bulk
    // load's, megabytes of held writes) that was a hundred thousand preads on every open. Read
    // whole into memory when it is of a sane size; a larger one is parsed from the file. A
    // reader may read a slot while the writer rewrites it (and sets its length): what it read
    // is then a torn journal, as entry by entry, never an error.
    let storage: Box<dyn Storage> = if len <= READ_WHOLE {
        let mut bytes = vec![0u8; len as usize];
        let n = storage
            .read_at(&mut bytes, 0)
            .map_err(|e| Error::io(storage.path(), Some(0), e))?;
        bytes.truncate(n);
        let name = storage.path().to_string_lossy();
        Box::new(MemStorage::from_bytes(&name, bytes))
    } else {
        storage
    };
    match KvSeq::open(storage, false) {
        Ok(kv) => Ok(Ok(kv)),
        Err(e) if e.is_corruption() => Ok(Err(Slot::Torn)),
        Err(e) => Err(e),
    }
}

/// Parses an opened slot's entries.
fn parse_slot(kv: &KvSeq) -> Result<Slot> {
    match parse(kv) {
        Ok(Some(replay)) => Ok(Slot::Valid(replay)),
        Ok(None) => Ok(Slot::Torn),
        Err(e) if e.is_corruption() || matches!(e, Error::NotFound(_)) => Ok(Slot::Torn),
        Err(e) => Err(e),
    }
}

/// Journals up to this many bytes are read with one read (see [`read_slot`]).
const READ_WHOLE: u64 = 64 << 20;

/// Reads both slots of the filesys at `base` (a missing `BASE.jnl2` is an absent slot: a filesys
/// that has made no commit since it was written by a single-slot version).
///
/// The slot with the greater JSEQ is parsed first. When it holds a complete journal with nothing
/// to apply (what a clean close leaves), [`decide`] never applies the other one, so the other is
/// only checked to be complete by its commit entry's CRC, not parsed ([`Slot::Unread`]): after a
/// bulk load, that journal holds megabytes of in-place writes, and parsing them was most of the
/// time of every open.
pub fn read_slots(vfs: &dyn crate::vfs::Vfs, base: &Path) -> Result<[Slot; 2]> {
    let open = |ext: &str| -> Result<std::result::Result<KvSeq, Slot>> {
        let path = super::file_path(base, ext);
        if vfs.exists(&path) {
            open_slot(vfs.open(&path, false)?)
        } else {
            Ok(Err(Slot::Absent))
        }
    };
    let mut opened = [open(SLOTS[0])?, open(SLOTS[1])?];
    let jseq = |o: &std::result::Result<KvSeq, Slot>| o.as_ref().ok().and_then(|kv| kv.var(JSEQ));
    let newer = usize::from(jseq(&opened[1]) > jseq(&opened[0]));
    let mut take = |i: usize| std::mem::replace(&mut opened[i], Err(Slot::Absent));
    let (first, second) = (take(newer), take(1 - newer));
    let first = match first {
        Ok(kv) => parse_slot(&kv)?,
        Err(slot) => slot,
    };
    let second = match second {
        Ok(kv) => match (&first, sealed(&kv)) {
            (Slot::Valid(n), Some(seq)) if nothing_to_apply(n) && seq < n.seq => Slot::Unread(seq),
            _ => parse_slot(&kv)?,
        },
        Err(slot) => slot,
    };
    Ok(if newer == 0 {
        [first, second]
    } else {
        [second, first]
    })
}

/// True for a journal after which nothing older is applied, whatever its appended bytes: no
/// writes, nothing appended or required, and of the current version.
fn nothing_to_apply(r: &Replay) -> bool {
    r.writes.is_empty() && r.appended.is_empty() && r.requires.is_none() && !r.legacy
}

/// The commit number of a journal whose last entry is a commit entry of the current version with
/// a CRC that holds over its number and every entry before it; `None` otherwise (then only a
/// parse can tell). The entries themselves are not parsed.
fn sealed(kv: &KvSeq) -> Option<u64> {
    const COMMIT_LEN: u64 = KEY_LEN as u64 + 4 + 4;
    let seq = u64::try_from(kv.var(JSEQ)?).ok()?;
    let (first, end) = (kv.first().0, kv.filesize());
    let usable = kv.superblock().purpose() == PURPOSE
        && kv.keyrepr() == (Repr::Fixed { len: KEY_LEN })
        && kv.valrepr() == (Repr::Prefixed { width: 4 })
        && !kv.has_delflag()
        && kv.align() <= 1
        && end >= first + COMMIT_LEN;
    if !usable {
        return None;
    }
    let read = |buf: &mut [u8], at: u64| {
        crate::storage::read_exact_at(kv.storage(), buf, at, "a journal").ok()
    };
    let commit_at = end - COMMIT_LEN;
    let mut commit = [0u8; COMMIT_LEN as usize];
    read(&mut commit, commit_at)?;
    let len = u32::from_be_bytes(commit[9..13].try_into().expect("4 bytes"));
    let crc = u32::from_be_bytes(commit[13..17].try_into().expect("4 bytes"));
    if commit[0] != COMMIT_TAG || len != 4 {
        return None;
    }
    // In pieces: a damaged length could name more bytes than memory holds.
    let mut sum = sealed_hasher(seq);
    let mut buf = vec![0u8; (1 << 20).min(commit_at - first) as usize];
    let mut at = first;
    while at < commit_at {
        let n = buf.len().min((commit_at - at) as usize);
        read(&mut buf[..n], at)?;
        sum.update(&buf[..n]);
        at += n as u64;
    }
    (sum.finalize() == crc).then_some(seq)
}

/// Writes an empty journal numbered past every commit in either slot, durably: written over
/// durable files, it says nothing before it needs applying again (a clean close, an index about
/// to be replaced, a recovery done). Returns its number.
pub fn write_empty(vfs: &dyn crate::vfs::Vfs, base: &Path, after: u64) -> Result<u64> {
    let seq = after + 1;
    let path = super::file_path(base, SLOTS[slot_of(seq)]);
    let created = !vfs.exists(&path);
    let file = if created {
        vfs.create_new(&path)?
    } else {
        vfs.open(&path, true)?
    };
    write(file.as_ref(), seq, &[])?;
    if created {
        vfs.sync_dir(&path)?;
    }
    Ok(seq)
}

fn parse(kv: &KvSeq) -> Result<Option<Replay>> {
    let seq = kv.var(JSEQ).and_then(|v| u64::try_from(v).ok());
    let (Some(seq), true) = (
        seq,
        kv.superblock().purpose() == PURPOSE && kv.keyrepr() == Repr::Fixed { len: KEY_LEN },
    ) else {
        return Ok(None);
    };
    let mut replay = Replay {
        seq,
        ..Replay::default()
    };
    let mut crc = sealed_hasher(seq);
    let mut legacy_crc = crc32fast::Hasher::new();
    let mut raw = Vec::new();
    for entry in kv.iter_entries(kv.first(), false) {
        let entry = entry?;
        let value = entry.value.unwrap_or_default();
        let tag = entry.key[0];
        let n = u64::from_be_bytes(entry.key[1..9].try_into().expect("fixed 9-byte key"));
        if tag == COMMIT_TAG || tag == LEGACY_COMMIT_TAG {
            replay.legacy = tag == LEGACY_COMMIT_TAG;
            let sum = if replay.legacy { legacy_crc } else { crc }.finalize();
            let complete = n == replay.writes.len() as u64
                && entry.layout.end == kv.filesize()
                && value == sum.to_be_bytes()
                && !(replay.legacy && (!replay.appended.is_empty() || replay.requires.is_some()));
            return Ok(complete.then_some(replay));
        }
        raw.clear();
        raw.resize((entry.layout.end - entry.layout.ptr.0) as usize, 0);
        crate::storage::read_exact_at(
            kv.storage(),
            &mut raw,
            entry.layout.ptr.0,
            "a journal entry",
        )?;
        crc.update(&raw);
        legacy_crc.update(&raw);
        match tag {
            APPENDED_TAG => {
                // Checked by the CRC above, so a value of another length is damage: the journal
                // does not count.
                let Ok(v) = <[u8; 13]>::try_from(value.as_slice()) else {
                    return Ok(None);
                };
                let end = u64::from_be_bytes(v[1..9].try_into().expect("8 bytes"));
                replay.appended.push(Appended {
                    tag: v[0],
                    start: n,
                    end,
                    crc: u32::from_be_bytes(v[9..13].try_into().expect("4 bytes")),
                });
            }
            REQUIRES_TAG => {
                let Ok(name) = String::from_utf8(value) else {
                    return Ok(None);
                };
                replay.requires = Some(Requires { name, filesize: n });
            }
            _ => replay.writes.push((tag, n, value)),
        }
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

    /// The journal as a kvseq writer lays it out, entry by entry: what [`Encoder`] must equal.
    fn written_by_kvseq(commit: &Replay, legacy: bool) -> Vec<u8> {
        let mem = MemStorage::new("journal");
        let mut kv = KvSeq::create(Box::new(mem.clone()), &options(commit.seq)).unwrap();
        for (tag, offset, bytes) in &commit.writes {
            kv.append(&key(*tag, *offset), bytes).unwrap();
        }
        for a in &commit.appended {
            let mut v = vec![a.tag];
            v.extend_from_slice(&a.end.to_be_bytes());
            v.extend_from_slice(&a.crc.to_be_bytes());
            kv.append(&key(APPENDED_TAG, a.start), &v).unwrap();
        }
        if let Some(r) = &commit.requires {
            kv.append(&key(REQUIRES_TAG, r.filesize), r.name.as_bytes())
                .unwrap();
        }
        let body_start = kv.first().0 as usize;
        let body_end = kv.filesize() as usize;
        kv.flush().unwrap();
        let entries = &mem.to_vec()[body_start..body_end];
        let (tag, crc) = if legacy {
            (LEGACY_COMMIT_TAG, crc32fast::hash(entries))
        } else {
            (COMMIT_TAG, sealed_crc(commit.seq, entries))
        };
        kv.append(&key(tag, commit.writes.len() as u64), &crc.to_be_bytes())
            .unwrap();
        kv.flush().unwrap();
        let mut bytes = mem.to_vec();
        bytes.truncate(kv.filesize() as usize);
        bytes
    }

    #[test]
    fn the_encoder_writes_what_a_kvseq_writer_would() {
        let full = Replay {
            seq: 41,
            writes: vec![
                (0, 4096, vec![1, 2, 3]),
                (1, 9000, vec![0; 16]),
                (2, 7, vec![]),
            ],
            appended: vec![
                Appended {
                    tag: 0,
                    start: 4096,
                    end: 70_000,
                    crc: 0xDEAD_BEEF,
                },
                Appended {
                    tag: 2,
                    start: 512,
                    end: 600,
                    crc: 1,
                },
            ],
            requires: Some(Requires {
                name: "meta".into(),
                filesize: 123_456,
            }),
            legacy: false,
        };
        for commit in [
            full,
            Replay {
                seq: 2,
                ..Replay::default()
            },
        ] {
            assert_eq!(
                encode_commit(&commit).unwrap(),
                written_by_kvseq(&commit, false)
            );
            assert_eq!(
                encode_as(&commit, true).unwrap(),
                written_by_kvseq(&commit, true)
            );
        }
    }

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
                writes: writes.clone(),
                ..Replay::default()
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

    fn commit(seq: u64, writes: usize) -> Replay {
        Replay {
            seq,
            writes: (0..writes)
                .map(|i| (0u8, i as u64 * 8, vec![seq as u8]))
                .collect(),
            appended: vec![Appended {
                tag: 0,
                start: 100,
                end: 200,
                crc: 7,
            }],
            requires: Some(Requires {
                name: "c000001".into(),
                filesize: 4096,
            }),
            legacy: false,
        }
    }

    #[test]
    fn appended_and_requires_entries_round_trip() {
        let c = commit(9, 3);
        let bytes = encode_commit(&c).unwrap();
        let back = read_slot(Box::new(MemStorage::from_bytes("j", bytes))).unwrap();
        assert_eq!(back, Slot::Valid(c));
    }

    /// A slot rewritten in place and cut: the old journal's first sector (its superblock, JSEQ
    /// included) over the entries of the journal written since. Both journals have the same
    /// length, so the superblock's FILESIZE matches the entries; only JSEQ under the CRC tells
    /// the mix from a journal.
    #[test]
    fn an_old_superblock_over_new_entries_is_torn() {
        let old = encode_commit(&commit(7, 5)).unwrap();
        let mut new = commit(9, 5);
        new.writes.iter_mut().for_each(|w| w.2 = vec![7]);
        let new = encode_commit(&new).unwrap();
        assert_eq!(old.len(), new.len());
        let mut mix = new.clone();
        mix[..512].copy_from_slice(&old[..512]);
        assert_ne!(mix, old);
        let read = |b: Vec<u8>| read_slot(Box::new(MemStorage::from_bytes("j", b))).unwrap();
        assert_eq!(read(mix), Slot::Torn);
        assert_eq!(
            read(new),
            Slot::Valid(Replay {
                writes: commit(9, 5)
                    .writes
                    .iter()
                    .map(|w| (w.0, w.1, vec![7]))
                    .collect(),
                ..commit(9, 5)
            })
        );
    }

    /// A journal of the version with one slot is read as it stands, unless it claims what that
    /// version never wrote.
    #[test]
    fn a_journal_of_the_one_slot_version_is_read() {
        let plain = Replay {
            seq: 4,
            writes: vec![(0, 0, vec![1; 8])],
            ..Replay::default()
        };
        let bytes = encode_as(&plain, true).unwrap();
        let read = |b: Vec<u8>| read_slot(Box::new(MemStorage::from_bytes("j", b))).unwrap();
        assert_eq!(
            read(bytes),
            Slot::Valid(Replay {
                legacy: true,
                ..plain
            })
        );
        assert_eq!(read(encode_as(&commit(4, 1), true).unwrap()), Slot::Torn);
    }

    /// Beside a newer journal with nothing to apply, a complete journal is checked by its commit
    /// entry and not parsed; anything else in that slot is parsed as before.
    #[test]
    fn the_journal_before_an_empty_one_is_checked_not_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("f");
        let put = |seq: u64, bytes: Vec<u8>| {
            std::fs::write(super::super::file_path(&base, SLOTS[slot_of(seq)]), bytes).unwrap()
        };
        let read = || read_slots(&crate::vfs::RealFs, &base).unwrap();
        let empty = |seq| Replay {
            seq,
            ..Replay::default()
        };
        let big = commit(5, 3);
        put(5, encode_commit(&big).unwrap());
        put(6, encode(6, &[]).unwrap());
        assert_eq!(read(), [Slot::Valid(empty(6)), Slot::Unread(5)]);
        let d = decide(read(), &mut |_| Ok(true)).unwrap();
        let seqs: Vec<u64> = d.replays.iter().map(|r| r.seq).collect();
        assert_eq!((seqs, d.last_seq, d.discarded), (vec![6], 6, None));
        // The older journal damaged: parsed, and torn.
        let mut torn = encode_commit(&big).unwrap();
        let n = torn.len();
        torn[n - 30] ^= 1;
        put(5, torn);
        assert_eq!(read(), [Slot::Valid(empty(6)), Slot::Torn]);
        // Of the version with one slot: parsed.
        let plain = Replay {
            seq: 5,
            writes: vec![(0, 0, vec![1; 8])],
            ..Replay::default()
        };
        put(5, encode_as(&plain, true).unwrap());
        let legacy = Replay {
            legacy: true,
            ..plain
        };
        assert_eq!(read(), [Slot::Valid(empty(6)), Slot::Valid(legacy)]);
        // Numbered past the empty one: parsed.
        put(7, encode_commit(&commit(7, 2)).unwrap());
        assert_eq!(read(), [Slot::Valid(empty(6)), Slot::Valid(commit(7, 2))]);
        // The newer journal has writes: the older one is parsed, and applied first.
        put(5, encode_commit(&big).unwrap());
        put(6, encode_commit(&commit(6, 1)).unwrap());
        assert_eq!(read(), [Slot::Valid(commit(6, 1)), Slot::Valid(big)]);
        // A journal recovery needs but did not read is an error, never skipped.
        let d = decide([Slot::Valid(commit(6, 1)), Slot::Unread(5)], &mut |_| {
            Ok(true)
        });
        assert!(matches!(d, Err(Error::Internal(_))), "{d:?}");
    }

    /// The recovery rule, case by case: which journals are applied, and when the newest one's
    /// appended bytes are asked about.
    #[test]
    fn the_newest_complete_commit_and_the_one_before_are_applied() {
        let seqs = |d: &Decision| d.replays.iter().map(|r| r.seq).collect::<Vec<_>>();
        let valid = |seq, writes| Slot::Valid(commit(seq, writes));
        let mut asked = Vec::new();
        let arrived = |ok: bool| {
            move |r: &Replay| -> Result<bool> {
                let _ = r;
                Ok(ok)
            }
        };
        // Both complete journals: the older one again, then the newer.
        let d = decide([valid(4, 2), valid(5, 2)], &mut arrived(true)).unwrap();
        assert_eq!(
            (seqs(&d), d.last_seq, d.discarded.is_none()),
            (vec![4, 5], 5, true)
        );
        // The newer one's appends did not all arrive: only the older one stands.
        let d = decide([valid(4, 2), valid(5, 2)], &mut arrived(false)).unwrap();
        assert_eq!(
            (seqs(&d), d.last_seq, d.discarded.is_some()),
            (vec![4], 5, true)
        );
        // An empty newest journal: nothing before it is applied.
        let d = decide([valid(6, 0), valid(5, 2)], &mut arrived(true)).unwrap();
        assert_eq!(seqs(&d), vec![6]);
        // A lone journal beside a torn slot was followed by a commit: complete, unasked.
        let d = decide([Slot::Torn, valid(5, 2)], &mut |r: &Replay| {
            asked.push(r.seq);
            Ok(false)
        })
        .unwrap();
        assert_eq!((seqs(&d), asked.is_empty()), (vec![5], true));
        assert!(d.discarded.is_some());
        // A lone journal beside an absent slot is asked about.
        let d = decide([valid(0, 0), Slot::Absent], &mut arrived(true)).unwrap();
        assert_eq!(seqs(&d), vec![0]);
        let d = decide([Slot::Absent, valid(1, 3)], &mut arrived(false)).unwrap();
        assert_eq!(seqs(&d), Vec::<u64>::new());
        let d = decide([Slot::Absent, Slot::Absent], &mut arrived(true)).unwrap();
        assert_eq!((seqs(&d), d.last_seq), (vec![], 0));
    }
}
