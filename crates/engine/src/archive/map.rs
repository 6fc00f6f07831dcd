//! The archive map of one title: its blocks, their frames, and where each archived revision lies.
//!
//! | field      | size            | meaning                                                      |
//! |------------|-----------------|--------------------------------------------------------------|
//! | magic      | 4               | `WAM1`                                                       |
//! | n_types    | 2               | content types, then n × (len (2), UTF-8 bytes); a type with  |
//! |            |                 | labels: `TYPE NUL ENCODING NUL LANGUAGE` ([`Labels`])        |
//! | n_blocks   | 4               | blocks, then per block: flags (1; bit 0 sealed, bit 1 key),   |
//! |            |                 | length of its last revision (8), n_frames (4), then per      |
//! |            |                 | frame: stored length (8), raw length (8)                     |
//! | n_entries  | 4               | revisions, then per entry (below)                            |
//! | crc        | 4               | CRC-32 of every byte before it                               |
//!
//! Entry: rev (8), tid (16), type index (2), block (4), offset in the block's raw content (8),
//! length (8), CRC-32 of the revision (4), flags (1; bit 0 taken down). All big-endian. A
//! taken-down entry with offset and length 0 names no bytes: a rewrite purged them (block and CRC
//! are 0 too, and its block need not exist).
//!
//! The map file is a log: `record = length (4) kind (1) body crc (4)`, the CRC over kind and
//! body. The first record is a snapshot (kind 1, the layout above without its own magic and CRC is
//! not repeated: the body is a complete encoded map); each archive run appends a delta (kind 2):
//! `n_blocks (4) × (block index (4), block as above)`, `n_entries (4) × entry`, `n_down (4) ×
//! (rev (8), tid (16))` with its own content-type table first. Appending keeps incremental runs
//! from leaving superseded copies behind; a full log is rewritten as one snapshot.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::bytes::ByteReader;
use crate::store::Labels;

/// The first four bytes of a format 1 title map (docs/FORMAT.md).
pub const MAGIC: &[u8; 4] = b"WAM1";
const ENTRY_SIZE: usize = 51;
/// Largest raw content a block may claim (bounds allocations from a damaged map).
pub const MAX_BLOCK_RAW: u64 = 1 << 30;

/// One zstd frame of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Compressed bytes.
    pub stored: u64,
    /// Bytes it decompresses to.
    pub raw: u64,
}

/// One block: a file of concatenated frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Complete: no frame is appended to it any more.
    pub sealed: bool,
    /// A key block's first frame needs no earlier block.
    pub key: bool,
    /// Length of the revision its raw content ends with (the next block's dictionary).
    pub last_len: u64,
    /// Its frames, in the order of the title's stream.
    pub frames: Vec<Frame>,
}

impl Block {
    /// Bytes the block decompresses to. Saturating: frame sizes come from disk, and a total
    /// past `MAX_BLOCK_RAW` must be seen as such by the map's check, not wrap below it.
    pub fn raw_len(&self) -> u64 {
        self.frames
            .iter()
            .fold(0, |sum, f| sum.saturating_add(f.raw))
    }

    /// Compressed bytes of the block (saturating, as [`Block::raw_len`]).
    pub fn stored_len(&self) -> u64 {
        self.frames
            .iter()
            .fold(0, |sum, f| sum.saturating_add(f.stored))
    }
}

/// One archived revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Revision number.
    pub rev: u64,
    /// Render id (the tid's 16 bytes).
    pub tid: [u8; 16],
    /// Content type, as put.
    pub content_type: String,
    /// Content encoding and language, as put (in the type table's string: [`Labels`]).
    pub labels: Labels,
    /// The block holding it (format 2: the frame's index).
    pub block: u32,
    /// Byte offset of the revision in the block's raw content (format 2: 0).
    pub offset: u64,
    /// Length of the raw revision, bytes.
    pub len: u64,
    /// CRC-32 of the raw revision.
    pub crc: u32,
    /// Taken down: never returned; a rewrite purges its bytes.
    pub taken_down: bool,
}

impl Entry {
    /// A take-down record whose bytes a rewrite purged: it locates nothing.
    pub fn is_purged(&self) -> bool {
        self.taken_down && self.offset == 0 && self.len == 0
    }
}

/// The map of one title.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TitleMap {
    /// The title's blocks, by index.
    pub blocks: Vec<Block>,
    /// Its archived revisions, in archive order.
    pub entries: Vec<Entry>,
}

impl TitleMap {
    /// The map's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let strings: Vec<_> = self
            .entries
            .iter()
            .map(|e| e.labels.join(&e.content_type))
            .collect();
        let mut types: Vec<&str> = Vec::new();
        for t in &strings {
            if !types.contains(&t.as_ref()) {
                types.push(t);
            }
        }
        let mut out = Vec::with_capacity(64 + self.entries.len() * ENTRY_SIZE);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(types.len() as u16).to_be_bytes());
        for t in &types {
            out.extend_from_slice(&(t.len() as u16).to_be_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        out.extend_from_slice(&(self.blocks.len() as u32).to_be_bytes());
        for b in &self.blocks {
            out.push(u8::from(b.sealed) | (u8::from(b.key) << 1));
            out.extend_from_slice(&b.last_len.to_be_bytes());
            out.extend_from_slice(&(b.frames.len() as u32).to_be_bytes());
            for f in &b.frames {
                out.extend_from_slice(&f.stored.to_be_bytes());
                out.extend_from_slice(&f.raw.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for (e, s) in self.entries.iter().zip(&strings) {
            let t = types.iter().position(|t| *t == s.as_ref()).unwrap_or(0) as u16;
            out.extend_from_slice(&e.rev.to_be_bytes());
            out.extend_from_slice(&e.tid);
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&e.block.to_be_bytes());
            out.extend_from_slice(&e.offset.to_be_bytes());
            out.extend_from_slice(&e.len.to_be_bytes());
            out.extend_from_slice(&e.crc.to_be_bytes());
            out.push(u8::from(e.taken_down));
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn encode_unchecked(&self) -> Vec<u8> {
        self.encode()
    }

    /// Decodes a map read from `path` at `offset` (for messages); every count is bounded by the
    /// bytes present and every location by its block.
    pub fn decode(bytes: &[u8], path: &Path, offset: u64) -> Result<TitleMap> {
        let map = TitleMap::decode_unchecked(bytes, path, offset)?;
        map.check_locations().map_err(|what| {
            Error::corrupt(
                path,
                offset,
                format!("archive map: {what}"),
                "a well-formed map",
                "damage",
            )
        })?;
        Ok(map)
    }

    fn decode_unchecked(bytes: &[u8], path: &Path, offset: u64) -> Result<TitleMap> {
        let bad = |at: usize, what: &str| {
            Error::corrupt(
                path,
                offset + at as u64,
                format!("archive map: {what}"),
                "a well-formed map",
                "damage",
            )
        };
        if bytes.len() < 8 || &bytes[..4] != MAGIC {
            return Err(bad(0, "magic"));
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body) != u32::from_be_bytes(tail.try_into().expect("4 bytes")) {
            return Err(bad(body.len(), "CRC-32"));
        }
        let mut r = ByteReader::new(body, 4);
        let mut types = Vec::new();
        for _ in 0..r.u16().ok_or_else(|| bad(r.pos, "truncated"))? {
            let len = r.u16().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
            let pos = r.pos;
            let t = r.take(len).ok_or_else(|| bad(pos, "truncated"))?;
            let t = String::from_utf8(t.to_vec()).map_err(|_| bad(r.pos, "content type"))?;
            types.push(Labels::split(&t).map_err(|what| bad(r.pos, what))?);
        }
        let mut map = TitleMap::default();
        let n_blocks = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
        if n_blocks > body.len() / 13 {
            return Err(bad(r.pos, "block count"));
        }
        for _ in 0..n_blocks {
            let pos = r.pos;
            let flags = r.take(1).ok_or_else(|| bad(pos, "truncated"))?[0];
            let last_len = r.u64().ok_or_else(|| bad(r.pos, "truncated"))?;
            let n_frames = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
            if n_frames > body.len() / 16 {
                return Err(bad(r.pos, "frame count"));
            }
            let mut block = Block {
                sealed: flags & 1 == 1,
                key: flags & 2 == 2,
                last_len,
                frames: Vec::with_capacity(n_frames),
            };
            for _ in 0..n_frames {
                let stored = r.u64().ok_or_else(|| bad(r.pos, "truncated"))?;
                let raw = r.u64().ok_or_else(|| bad(r.pos, "truncated"))?;
                block.frames.push(Frame { stored, raw });
            }
            map.blocks.push(block);
        }
        let n = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
        if n > body.len() / ENTRY_SIZE {
            return Err(bad(r.pos, "entry count"));
        }
        for _ in 0..n {
            let at = r.pos;
            let e = (|| {
                let rev = r.u64()?;
                let tid: [u8; 16] = r.take(16)?.try_into().ok()?;
                let t = r.u16()? as usize;
                let block = r.u32()?;
                let (off, len, crc) = (r.u64()?, r.u64()?, r.u32()?);
                let flags = r.take(1)?[0];
                Some((rev, tid, t, block, off, len, crc, flags))
            })()
            .ok_or_else(|| bad(at, "truncated"))?;
            let (rev, tid, t, block, off, len, crc, flags) = e;
            let (content_type, labels) = types
                .get(t)
                .cloned()
                .ok_or_else(|| bad(at, "content type index"))?;
            map.entries.push(Entry {
                rev,
                tid,
                content_type,
                labels,
                block,
                offset: off,
                len,
                crc,
                taken_down: flags & 1 == 1,
            });
        }
        if r.pos != body.len() {
            return Err(bad(r.pos, "trailing bytes"));
        }
        Ok(map)
    }
}

const SNAPSHOT: u8 = 1;
const DELTA: u8 = 2;

/// What one archive run changed: blocks added or grown, entries added, entries taken down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Blocks added or grown, by index, each whole.
    pub blocks: Vec<(u32, Block)>,
    /// Entries added.
    pub entries: Vec<Entry>,
    /// (revision, tid) of earlier entries taken down.
    pub down: Vec<(u64, [u8; 16])>,
}

impl Delta {
    /// True when the run changed nothing.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.entries.is_empty() && self.down.is_empty()
    }
}

/// The (rev, tid) of the entries a take-down of `rev` (or, with `None`, of the whole title)
/// marks: those of it not taken down already (both formats' maps).
pub(crate) fn to_take_down(entries: &[Entry], rev: Option<u64>) -> Vec<(u64, [u8; 16])> {
    entries
        .iter()
        .filter(|e| !e.taken_down && rev.is_none_or(|r| e.rev == r))
        .map(|e| (e.rev, e.tid))
        .collect()
}

pub(crate) fn record(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 9);
    out.extend_from_slice(&(body.len() as u32 + 1).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

impl TitleMap {
    /// The map as a log of one snapshot record.
    pub fn snapshot_record(&self) -> Vec<u8> {
        record(SNAPSHOT, &self.encode())
    }

    /// Applies a delta in memory.
    pub fn apply(&mut self, d: &Delta) {
        for (n, block) in &d.blocks {
            let n = *n as usize;
            if n == self.blocks.len() {
                self.blocks.push(block.clone());
            } else if n < self.blocks.len() {
                self.blocks[n] = block.clone();
            }
        }
        // Take-downs name entries from before the delta (a rewritten render's new entry carries
        // the same revision and tid, and stays).
        for (rev, tid) in &d.down {
            for e in self
                .entries
                .iter_mut()
                .filter(|e| e.rev == *rev && e.tid == *tid)
            {
                e.taken_down = true;
            }
        }
        self.entries.extend(d.entries.iter().cloned());
    }

    /// Reads a map log: a snapshot and the deltas after it.
    pub fn decode_log(bytes: &[u8], path: &Path, offset: u64) -> Result<TitleMap> {
        let bad = log_damage(path, offset, "archive map log");
        let mut map: Option<TitleMap> = None;
        for record in log_records(bytes, path, offset, "archive map log") {
            let (at, body) = record?;
            match (body[0], map.as_mut()) {
                (SNAPSHOT, None) => {
                    map = Some(TitleMap::decode(&body[1..], path, offset + at as u64 + 5)?)
                }
                (DELTA, Some(m)) => {
                    let d = Delta::decode(&body[1..], path, offset + at as u64 + 5)?;
                    m.apply(&d);
                    m.check_locations().map_err(|what| bad(at, what))?;
                }
                _ => return Err(bad(at, "record kind or order")),
            }
        }
        map.ok_or_else(|| bad(0, "no snapshot"))
    }

    fn check_locations(&self) -> std::result::Result<(), &'static str> {
        // A purged record reads nothing, so its block (0, of a title that may have none) is moot.
        for e in self.entries.iter().filter(|e| !e.is_purged()) {
            let fits = self.blocks.get(e.block as usize).is_some_and(|b| {
                e.offset
                    .checked_add(e.len)
                    .is_some_and(|end| end <= b.raw_len())
            });
            if !fits {
                return Err("revision location outside its block");
            }
        }
        if self
            .blocks
            .iter()
            .any(|b| b.raw_len() > MAX_BLOCK_RAW || b.last_len > b.raw_len())
        {
            return Err("block raw length");
        }
        Ok(())
    }
}

impl Delta {
    /// The delta as a log record.
    pub fn record(&self) -> Vec<u8> {
        // A delta reuses the snapshot encoding: its blocks and entries form a partial map.
        let partial = TitleMap {
            blocks: self.blocks.iter().map(|(_, b)| b.clone()).collect(),
            entries: self.entries.clone(),
        };
        let mut body = Vec::new();
        body.extend_from_slice(&(self.blocks.len() as u32).to_be_bytes());
        for (n, _) in &self.blocks {
            body.extend_from_slice(&n.to_be_bytes());
        }
        body.extend_from_slice(&(self.down.len() as u32).to_be_bytes());
        for (rev, tid) in &self.down {
            body.extend_from_slice(&rev.to_be_bytes());
            body.extend_from_slice(tid);
        }
        body.extend_from_slice(&partial.encode_unchecked());
        record(DELTA, &body)
    }

    fn decode(body: &[u8], path: &Path, offset: u64) -> Result<Delta> {
        let bad = |at: usize| {
            Error::corrupt(
                path,
                offset + at as u64,
                "archive map delta",
                "a well-formed delta",
                "damage",
            )
        };
        let mut r = ByteReader::new(body, 0);
        let n = r.u32().ok_or_else(|| bad(r.pos))? as usize;
        if n > body.len() / 4 {
            return Err(bad(r.pos));
        }
        let mut indexes = Vec::with_capacity(n);
        for _ in 0..n {
            indexes.push(r.u32().ok_or_else(|| bad(r.pos))?);
        }
        let n_down = r.u32().ok_or_else(|| bad(r.pos))? as usize;
        if n_down > body.len() / 24 {
            return Err(bad(r.pos));
        }
        let mut down = Vec::with_capacity(n_down);
        for _ in 0..n_down {
            let rev = r.u64().ok_or_else(|| bad(r.pos))?;
            let pos = r.pos;
            let tid: [u8; 16] = r
                .take(16)
                .ok_or_else(|| bad(pos))?
                .try_into()
                .expect("16 bytes");
            down.push((rev, tid));
        }
        let partial = TitleMap::decode_unchecked(&body[r.pos..], path, offset + r.pos as u64)?;
        if partial.blocks.len() != indexes.len() {
            return Err(bad(r.pos));
        }
        Ok(Delta {
            blocks: indexes.into_iter().zip(partial.blocks).collect(),
            entries: partial.entries,
            down,
        })
    }
}

/// The damage of a map log (`what`: which log) at a byte of it.
pub(crate) fn log_damage<'a>(
    path: &'a Path,
    offset: u64,
    what: &'a str,
) -> impl Fn(usize, &str) -> Error + 'a {
    move |at, damage| {
        Error::corrupt(
            path,
            offset + at as u64,
            format!("{what}: {damage}"),
            "well-formed records",
            "damage",
        )
    }
}

/// The records of a map log, both formats': `length (4), body (kind (1), …), CRC-32 (4)` of
/// the body, each checked before it is handed out as (its offset in the log, its body).
pub(crate) fn log_records<'a>(
    bytes: &'a [u8],
    path: &'a Path,
    offset: u64,
    what: &'a str,
) -> impl Iterator<Item = Result<(usize, &'a [u8])>> + 'a {
    let bad = log_damage(path, offset, what);
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let start = at;
        let len = match bytes.get(at..at + 4) {
            // Four bytes: the slice's length is what `get` returned.
            Some(b) => u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize,
            None => {
                at = bytes.len();
                return Some(Err(bad(start, "truncated record")));
            }
        };
        let Some(end) = at
            .checked_add(4 + len + 4)
            .filter(|e| *e <= bytes.len() && len >= 1)
        else {
            at = bytes.len();
            return Some(Err(bad(start, "record length")));
        };
        let body = &bytes[at + 4..at + 4 + len];
        // Four bytes: `end` is within `bytes` and at least 8 past `at`.
        let crc = u32::from_be_bytes(bytes[end - 4..end].try_into().expect("4 bytes"));
        at = end;
        if crc32fast::hash(body) != crc {
            at = bytes.len();
            return Some(Err(bad(start, "record CRC-32")));
        }
        Some(Ok((start, body)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame sizes whose total passes 2^64 (a map damaged in a way its CRC does not catch, found
    /// by fuzzing `archive_map`): the total wrapped to 0 and passed the block-size check.
    #[test]
    fn frame_sizes_that_overflow_a_blocks_length_are_refused() {
        let half = Frame {
            stored: 1,
            raw: 1 << 63,
        };
        let map = TitleMap {
            blocks: vec![Block {
                sealed: true,
                key: true,
                last_len: 0,
                frames: vec![half, half],
            }],
            entries: Vec::new(),
        };
        assert_eq!(map.blocks[0].raw_len(), u64::MAX);
        let err = TitleMap::decode(&map.encode(), Path::new("m"), 0).unwrap_err();
        assert!(err.to_string().contains("block raw length"), "{err}");
    }

    #[test]
    fn roundtrip_and_every_flip_detected() {
        let map = TitleMap {
            blocks: vec![
                Block {
                    sealed: true,
                    key: true,
                    last_len: 5000,
                    frames: vec![Frame {
                        stored: 100,
                        raw: 5000,
                    }],
                },
                Block {
                    sealed: false,
                    key: false,
                    last_len: 200,
                    frames: vec![
                        Frame {
                            stored: 10,
                            raw: 300,
                        },
                        Frame {
                            stored: 7,
                            raw: 200,
                        },
                    ],
                },
            ],
            entries: vec![
                Entry {
                    rev: 1,
                    tid: [1; 16],
                    content_type: "text/html".into(),
                    labels: crate::store::Labels::NONE,
                    block: 0,
                    offset: 0,
                    len: 5000,
                    crc: 9,
                    taken_down: false,
                },
                Entry {
                    rev: 2,
                    tid: [2; 16],
                    content_type: "text/html".into(),
                    labels: crate::store::Labels::NONE,
                    block: 1,
                    offset: 300,
                    len: 200,
                    crc: 8,
                    taken_down: true,
                },
            ],
        };
        let bytes = map.encode();
        assert_eq!(TitleMap::decode(&bytes, Path::new("a"), 0).unwrap(), map);
        // As a log: snapshot of the first block, then a delta growing block 1 and taking down.
        let first = TitleMap {
            blocks: vec![map.blocks[0].clone()],
            entries: vec![map.entries[0].clone()],
        };
        let delta = Delta {
            blocks: vec![(1, map.blocks[1].clone())],
            entries: vec![map.entries[1].clone()],
            down: vec![(1, [1; 16])],
        };
        // The delta takes down an entry from before it; its own entries stay as they are.
        let mut expected = map.clone();
        expected.entries[0].taken_down = true;
        let log = [first.snapshot_record(), delta.record()].concat();
        assert_eq!(
            TitleMap::decode_log(&log, Path::new("a"), 0).unwrap(),
            expected
        );
        for i in 0..log.len() {
            let mut bad = log.clone();
            bad[i] ^= 0x08;
            assert!(
                TitleMap::decode_log(&bad, Path::new("a"), 0).is_err(),
                "log flip at {i}"
            );
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert!(
                TitleMap::decode(&bad, Path::new("a"), 0).is_err(),
                "flip at {i}"
            );
        }
    }
}
