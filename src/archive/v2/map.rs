//! The v2 map of one title (`WAM2`): its segments, its frames (one per distinct revision, in
//! archive order) and its entries. Byte tables: docs/FORMAT.md § Archive, format 2.
//!
//! The map file is a log of records as in v1 (`length (4), kind (1), body, CRC-32 (4)`), kind 1
//! a snapshot (`WAM2` then a body), kind 2 a delta (a body). One body layout serves both, all
//! integers big-endian:
//!
//! | part     | layout                                                                     |
//! |----------|----------------------------------------------------------------------------|
//! | types    | n (2) × (len (2), UTF-8 bytes): the content types the body's entries name   |
//! | refs     | n (2) × (len (2), title key): titles whose keys frames reference, appended  |
//! | segments | n (4) × (index (4), appends (1), length (8)): added or grown segment files  |
//! | frames   | first index (4), n (4) × frame: appended frames                            |
//! | entries  | n (4) × (rev (8), tid (16), type (2), frame (4), flags (1; bit 0 taken down)) |
//! | down     | n (4) × (rev (8), tid (16)): earlier entries taken down (a delta's only)     |
//!
//! A frame: base (1; 0 key, 1 the previous frame, 2 another title's key), segment (4), offset in
//! the segment file (8), stored length (4), raw length (4), CRC-32 of the raw revision (4); base 2
//! adds ref index (2) and that title's frame (4). A taken-down entry whose bytes a rewrite purged
//! names frame `0xFFFFFFFF`.
//!
//! Everything read is bounded before use: counts by the bytes left, frames by their segment's
//! length, raw lengths by [`MAX_RAW`], entries by the frames present.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::bytes::ByteReader;

use super::super::map::{record, Entry};

/// Magic of a v2 map snapshot.
pub const MAGIC: &[u8; 4] = b"WAM2";
/// The frame of a purged take-down record: none.
pub const NO_FRAME: u32 = u32::MAX;
/// The largest raw revision a frame may claim: the store's largest value (one filesys data
/// entry), so a damaged map cannot make a read allocate more.
pub const MAX_RAW: u64 = crate::filesys::MAX_DATA_ENTRY;
/// Appends (data entries) a segment file takes: the archive filesys's fixed inode capacity.
pub const MAX_APPENDS: u8 = 16;

const SNAPSHOT: u8 = 1;
const DELTA: u8 = 2;
const FRAME_SIZE: usize = 25;
const ENTRY_SIZE: usize = 31;

/// What a frame was compressed against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// Nothing: a key.
    Key,
    /// The raw revision of the frame before it.
    Previous,
    /// Another title's key (`refs[title]`, its frame `frame`, itself a [`Base::Key`]): a key too.
    Title {
        /// Index of the title's key in the map's `refs`.
        title: u16,
        /// Index of the key frame in that title's map.
        frame: u32,
    },
}

impl Base {
    /// Whether a chain of frames starts here.
    pub fn is_key(&self) -> bool {
        !matches!(self, Base::Previous)
    }
}

/// One revision's frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The segment file holding the frame (`v/KEY#seg`).
    pub seg: u32,
    /// Byte offset of the frame in the segment file.
    pub offset: u64,
    /// Compressed length, bytes.
    pub stored: u32,
    /// Raw length of the revision, bytes.
    pub raw: u32,
    /// CRC-32 of the raw revision.
    pub crc: u32,
    /// What it was compressed against.
    pub base: Base,
}

/// A segment file `v/KEY#N`: frames appended, one data entry per archive run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Data entries appended to the file (at most [`MAX_APPENDS`]).
    pub appends: u8,
    /// The segment file's length, bytes.
    pub len: u64,
}

/// The map of one title. Entries are [`Entry`]s as in v1: `block` is the frame index
/// ([`NO_FRAME`] for a purged record), `offset` is 0, `len` and `crc` are the frame's (0 for a
/// purged record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Map {
    /// Keys of the titles whose key frames this title's frames use as a base ([`Base::Title`]).
    pub refs: Vec<Vec<u8>>,
    /// The title's segment files, by index.
    pub segments: Vec<Segment>,
    /// Its frames, one per distinct revision, in archive order.
    pub frames: Vec<Frame>,
    /// Its archived revisions, in archive order.
    pub entries: Vec<Entry>,
}

/// What one archive run changed (or a whole map, as a delta from nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Title keys appended to the map's refs.
    pub refs: Vec<Vec<u8>>,
    /// Segments added or grown, by index.
    pub segments: Vec<(u32, Segment)>,
    /// Index of the first frame in `frames`: the map's frame count before the run.
    pub first_frame: u32,
    /// Frames appended.
    pub frames: Vec<Frame>,
    /// Entries added.
    pub entries: Vec<Entry>,
    /// (revision, tid) of earlier entries taken down.
    pub down: Vec<(u64, [u8; 16])>,
}

impl Delta {
    /// True when the run changed nothing.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
            && self.segments.is_empty()
            && self.frames.is_empty()
            && self.entries.is_empty()
            && self.down.is_empty()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let mut types: Vec<&str> = Vec::new();
        for e in &self.entries {
            if !types.contains(&e.content_type.as_str()) {
                types.push(&e.content_type);
            }
        }
        let strings = |out: &mut Vec<u8>, list: &[&[u8]]| {
            out.extend_from_slice(&(list.len() as u16).to_be_bytes());
            for s in list {
                out.extend_from_slice(&(s.len() as u16).to_be_bytes());
                out.extend_from_slice(s);
            }
        };
        let type_bytes: Vec<&[u8]> = types.iter().map(|t| t.as_bytes()).collect();
        strings(out, &type_bytes);
        let refs: Vec<&[u8]> = self.refs.iter().map(|r| r.as_slice()).collect();
        strings(out, &refs);
        out.extend_from_slice(&(self.segments.len() as u32).to_be_bytes());
        for (n, s) in &self.segments {
            out.extend_from_slice(&n.to_be_bytes());
            out.push(s.appends);
            out.extend_from_slice(&s.len.to_be_bytes());
        }
        out.extend_from_slice(&self.first_frame.to_be_bytes());
        out.extend_from_slice(&(self.frames.len() as u32).to_be_bytes());
        for f in &self.frames {
            out.push(match f.base {
                Base::Key => 0,
                Base::Previous => 1,
                Base::Title { .. } => 2,
            });
            out.extend_from_slice(&f.seg.to_be_bytes());
            out.extend_from_slice(&f.offset.to_be_bytes());
            out.extend_from_slice(&f.stored.to_be_bytes());
            out.extend_from_slice(&f.raw.to_be_bytes());
            out.extend_from_slice(&f.crc.to_be_bytes());
            if let Base::Title { title, frame } = f.base {
                out.extend_from_slice(&title.to_be_bytes());
                out.extend_from_slice(&frame.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for e in &self.entries {
            let t = types.iter().position(|t| *t == e.content_type).unwrap_or(0) as u16;
            // A purged record keeps NO_FRAME in memory too, so a map re-encodes to itself.
            let frame = e.block;
            out.extend_from_slice(&e.rev.to_be_bytes());
            out.extend_from_slice(&e.tid);
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&frame.to_be_bytes());
            out.push(u8::from(e.taken_down));
        }
        out.extend_from_slice(&(self.down.len() as u32).to_be_bytes());
        for (rev, tid) in &self.down {
            out.extend_from_slice(&rev.to_be_bytes());
            out.extend_from_slice(tid);
        }
    }

    /// A body; entries get their frame's length and CRC when the map is applied.
    fn decode(body: &[u8], path: &Path, offset: u64) -> Result<Delta> {
        let bad = |at: usize, what: &str| {
            Error::corrupt(
                path,
                offset + at as u64,
                format!("archive map (v2): {what}"),
                "a well-formed map",
                "damage",
            )
        };
        let mut r = ByteReader::new(body, 0);
        let strings = |r: &mut ByteReader<'_>| -> Result<Vec<Vec<u8>>> {
            let n = r.u16().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
            let mut out = Vec::new();
            for _ in 0..n {
                let len = r.u16().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
                let pos = r.pos;
                out.push(r.take(len).ok_or_else(|| bad(pos, "truncated"))?.to_vec());
            }
            Ok(out)
        };
        let types = strings(&mut r)?
            .into_iter()
            .map(String::from_utf8)
            .collect::<std::result::Result<Vec<String>, _>>()
            .map_err(|_| bad(0, "content type"))?;
        let refs = strings(&mut r)?;
        let mut d = Delta {
            refs,
            ..Delta::default()
        };
        let n = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
        if n > body.len() / 13 {
            return Err(bad(r.pos, "segment count"));
        }
        for _ in 0..n {
            let at = r.pos;
            let s = (|| Some((r.u32()?, r.take(1)?[0], r.u64()?)))()
                .ok_or_else(|| bad(at, "truncated"))?;
            d.segments.push((
                s.0,
                Segment {
                    appends: s.1,
                    len: s.2,
                },
            ));
        }
        d.first_frame = r.u32().ok_or_else(|| bad(r.pos, "truncated"))?;
        let n = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
        if n > body.len() / FRAME_SIZE {
            return Err(bad(r.pos, "frame count"));
        }
        d.frames.reserve_exact(n);
        for _ in 0..n {
            let at = r.pos;
            let f = (|| {
                let kind = r.take(1)?[0];
                let (seg, off, stored, raw, crc) =
                    (r.u32()?, r.u64()?, r.u32()?, r.u32()?, r.u32()?);
                let base = match kind {
                    0 => Base::Key,
                    1 => Base::Previous,
                    2 => Base::Title {
                        title: r.u16()?,
                        frame: r.u32()?,
                    },
                    _ => return Some(Err(())),
                };
                Some(Ok(Frame {
                    seg,
                    offset: off,
                    stored,
                    raw,
                    crc,
                    base,
                }))
            })()
            .ok_or_else(|| bad(at, "truncated"))?
            .map_err(|()| bad(at, "frame base"))?;
            d.frames.push(f);
        }
        let n = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
        if n > body.len() / ENTRY_SIZE {
            return Err(bad(r.pos, "entry count"));
        }
        d.entries.reserve_exact(n);
        for _ in 0..n {
            let at = r.pos;
            let e = (|| {
                let rev = r.u64()?;
                let tid: [u8; 16] = r.take(16)?.try_into().ok()?;
                Some((rev, tid, r.u16()? as usize, r.u32()?, r.take(1)?[0]))
            })()
            .ok_or_else(|| bad(at, "truncated"))?;
            let (rev, tid, t, frame, flags) = e;
            let content_type = types
                .get(t)
                .cloned()
                .ok_or_else(|| bad(at, "content type index"))?;
            if frame == NO_FRAME && flags & 1 == 0 {
                return Err(bad(at, "a readable entry without a frame"));
            }
            d.entries.push(Entry {
                rev,
                tid,
                content_type,
                block: frame,
                offset: 0,
                len: 0,
                crc: 0,
                taken_down: flags & 1 == 1,
            });
        }
        let n = r.u32().ok_or_else(|| bad(r.pos, "truncated"))? as usize;
        if n > body.len() / 24 {
            return Err(bad(r.pos, "take-down count"));
        }
        for _ in 0..n {
            let at = r.pos;
            let rev = r.u64().ok_or_else(|| bad(at, "truncated"))?;
            let tid: [u8; 16] = r
                .take(16)
                .ok_or_else(|| bad(at, "truncated"))?
                .try_into()
                .expect("16 bytes");
            d.down.push((rev, tid));
        }
        if r.pos != body.len() {
            return Err(bad(r.pos, "trailing bytes"));
        }
        Ok(d)
    }

    /// The delta as a log record.
    pub fn record(&self) -> Vec<u8> {
        let mut body = Vec::new();
        self.encode(&mut body);
        record(DELTA, &body)
    }
}

impl Map {
    /// The whole map as a delta from an empty one.
    fn as_delta(&self) -> Delta {
        Delta {
            refs: self.refs.clone(),
            segments: self
                .segments
                .iter()
                .enumerate()
                .map(|(i, s)| (i as u32, *s))
                .collect(),
            first_frame: 0,
            frames: self.frames.clone(),
            entries: self.entries.clone(),
            down: Vec::new(),
        }
    }

    /// The map as a log of one snapshot record.
    pub fn snapshot_record(&self) -> Vec<u8> {
        let mut body = MAGIC.to_vec();
        self.as_delta().encode(&mut body);
        record(SNAPSHOT, &body)
    }

    /// Applies a delta; `Err` names what does not fit.
    pub fn apply(&mut self, d: &Delta) -> std::result::Result<(), &'static str> {
        self.apply_unchecked(d.clone())?;
        self.check()
    }

    /// [`Map::apply`] without the check of the whole map (a log is checked once, at its end).
    fn apply_unchecked(&mut self, d: Delta) -> std::result::Result<(), &'static str> {
        self.refs.extend(d.refs);
        for (n, s) in &d.segments {
            let n = *n as usize;
            if n == self.segments.len() {
                self.segments.push(*s);
            } else if n < self.segments.len() {
                self.segments[n] = *s;
            } else {
                return Err("segment index");
            }
        }
        if d.first_frame as usize != self.frames.len() {
            return Err("first frame of a delta");
        }
        self.frames.extend_from_slice(&d.frames);
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
        self.entries.reserve(d.entries.len());
        for mut e in d.entries {
            match self.frames.get(e.block as usize) {
                Some(f) if e.block != NO_FRAME => {
                    e.len = u64::from(f.raw);
                    e.crc = f.crc;
                    e.offset = 0;
                }
                _ if e.block == NO_FRAME && e.taken_down => {
                    (e.offset, e.len, e.crc) = (0, 0, 0);
                }
                _ => return Err("entry names no frame"),
            }
            self.entries.push(e);
        }
        Ok(())
    }

    /// Every frame inside its segment and after the one before it, bases that exist, raw
    /// lengths bounded.
    pub fn check(&self) -> std::result::Result<(), &'static str> {
        let mut end = (0u32, 0u64);
        for (i, f) in self.frames.iter().enumerate() {
            let seg = self.segments.get(f.seg as usize).ok_or("frame segment")?;
            let stop = f
                .offset
                .checked_add(u64::from(f.stored))
                .filter(|e| *e <= seg.len)
                .ok_or("frame outside its segment")?;
            if (f.seg, f.offset) < end {
                return Err("frame order");
            }
            end = (f.seg, stop);
            if u64::from(f.raw) > MAX_RAW {
                return Err("frame raw length");
            }
            match f.base {
                Base::Previous if i == 0 => return Err("first frame has no previous"),
                Base::Title { title, .. } if title as usize >= self.refs.len() => {
                    return Err("frame reference")
                }
                _ => {}
            }
        }
        if self.segments.iter().any(|s| s.appends > MAX_APPENDS) {
            return Err("segment appends");
        }
        Ok(())
    }

    /// Reads a map log: a snapshot and the deltas after it.
    pub fn decode_log(bytes: &[u8], path: &Path, offset: u64) -> Result<Map> {
        const WHAT: &str = "archive map log (v2)";
        let bad = super::super::map::log_damage(path, offset, WHAT);
        let mut map: Option<Map> = None;
        for record in super::super::map::log_records(bytes, path, offset, WHAT) {
            let (at, body) = record?;
            let here = offset + at as u64 + 5;
            match (body[0], map.as_mut()) {
                (SNAPSHOT, None) => {
                    if body.get(1..5) != Some(MAGIC.as_slice()) {
                        return Err(bad(at + 5, "magic"));
                    }
                    let d = Delta::decode(&body[5..], path, here + 4)?;
                    if !d.down.is_empty() {
                        return Err(bad(at, "take-downs in a snapshot"));
                    }
                    let mut m = Map::default();
                    m.apply_unchecked(d).map_err(|what| bad(at, what))?;
                    map = Some(m);
                }
                (DELTA, Some(m)) => {
                    let d = Delta::decode(&body[1..], path, here)?;
                    m.apply_unchecked(d).map_err(|what| bad(at, what))?;
                }
                _ => return Err(bad(at, "record kind or order")),
            }
        }
        let map = map.ok_or_else(|| bad(0, "no snapshot"))?;
        map.check().map_err(|what| bad(0, what))?;
        Ok(map)
    }
}

/// The format of a map log, by the magic of its first record: 1, 2, or `None` (neither).
pub fn log_version(bytes: &[u8]) -> Option<u8> {
    match bytes.get(5..9) {
        Some(m) if m == super::super::map::MAGIC => Some(1),
        Some(m) if m == MAGIC => Some(2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rev: u64, frame: u32, down: bool) -> Entry {
        Entry {
            rev,
            tid: [rev as u8; 16],
            content_type: "text/html".into(),
            block: frame,
            offset: 0,
            len: 0,
            crc: 0,
            taken_down: down,
        }
    }

    fn sample() -> (Map, Delta) {
        let frame = |seg, offset, base| Frame {
            seg,
            offset,
            stored: 10,
            raw: 1000,
            crc: 7,
            base,
        };
        let mut map = Map::default();
        let first = Delta {
            refs: vec![b"other/Title".to_vec()],
            segments: vec![(
                0,
                Segment {
                    appends: 1,
                    len: 20,
                },
            )],
            first_frame: 0,
            frames: vec![
                frame(0, 0, Base::Title { title: 0, frame: 0 }),
                frame(0, 10, Base::Previous),
            ],
            entries: vec![entry(1, 0, false), entry(2, 1, false), entry(3, 1, false)],
            down: Vec::new(),
        };
        map.apply(&first).unwrap();
        let second = Delta {
            segments: vec![(
                0,
                Segment {
                    appends: 2,
                    len: 30,
                },
            )],
            first_frame: 2,
            frames: vec![frame(0, 20, Base::Key)],
            entries: vec![entry(4, 2, false)],
            down: vec![(2, [2; 16])],
            ..Delta::default()
        };
        (map, second)
    }

    #[test]
    fn a_log_round_trips_and_every_flip_is_refused() {
        let (map, delta) = sample();
        assert_eq!(
            map.entries[2].len, 1000,
            "an entry takes its frame's length"
        );
        let log = [map.snapshot_record(), delta.record()].concat();
        assert_eq!(log_version(&log), Some(2));
        let mut expected = map.clone();
        expected.apply(&delta).unwrap();
        let got = Map::decode_log(&log, Path::new("m"), 0).unwrap();
        assert_eq!(got, expected);
        assert!(got.entries[1].taken_down && !got.entries[2].taken_down);
        assert_eq!(
            Map::decode_log(&got.snapshot_record(), Path::new("m"), 0).unwrap(),
            got
        );
        for i in 0..log.len() {
            let mut bad = log.clone();
            bad[i] ^= 0x10;
            assert!(
                Map::decode_log(&bad, Path::new("m"), 0).is_err(),
                "flip at {i}"
            );
        }
    }

    #[test]
    fn frames_outside_their_segment_or_with_no_base_are_refused() {
        let (mut map, _) = sample();
        map.frames[1].stored = 11;
        assert_eq!(map.check(), Err("frame outside its segment"));
        let (mut map, _) = sample();
        map.frames[0].base = Base::Previous;
        assert_eq!(map.check(), Err("first frame has no previous"));
        let (mut map, _) = sample();
        map.frames[0].base = Base::Title { title: 1, frame: 0 };
        assert_eq!(map.check(), Err("frame reference"));
        // A raw length past the largest value is refused before a read allocates for it.
        let (mut map, _) = sample();
        map.frames[1].raw = MAX_RAW as u32 + 1;
        assert_eq!(map.check(), Err("frame raw length"));
        let (mut map, _) = sample();
        map.frames[1].offset = 5;
        assert_eq!(map.check(), Err("frame order"));
        let (map, _) = sample();
        let bytes = map.snapshot_record();
        let err = Map::decode_log(&bytes[..bytes.len() - 1], Path::new("m"), 0).unwrap_err();
        assert!(err.is_corruption(), "{err}");
    }
}
