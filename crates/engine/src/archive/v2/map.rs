//! The v2 map of one title (`WAM2`): its segments, its frames (one per distinct revision, in
//! archive order) and its entries.
//!
//! The map file is a log of records as in v1 (`length (4), kind (1), body, CRC-32 (4)`): kinds 1
//! and 3 a snapshot (`WAM2` then a body), kinds 2 and 4 a delta (a body). Kinds 3 and 4, which
//! writers write, lay the body's numbers out compact (LEB128, and a frame that follows the one
//! before it in its segment names no place); kinds 1 and 2, as stores wrote them before, fixed
//! (big-endian, the widths below). One body serves both:
//!
//! | part     | layout                                                                     |
//! |----------|----------------------------------------------------------------------------|
//! | types    | n (2) × (len (2), UTF-8 bytes): the content types the body's entries name,  |
//! |          | a type with labels as `TYPE NUL ENCODING NUL LANGUAGE` ([`Labels`])         |
//! | refs     | n (2) × (len (2), title key): titles whose keys frames reference, appended  |
//! | segments | n (4) × (index (4), appends (1), length (8)): added or grown segment files  |
//! | frames   | first index (4), n (4) × frame: appended frames                            |
//! | entries  | n (4) × (rev (8), tid (16), type (2), frame (4), flags (1; bit 0 taken down)) |
//! | down     | n (4) × (rev (8), tid (16)): earlier entries taken down (a delta's only)     |
//!
//! A frame: base (1; 0 key, 1 the previous frame, 2 another title's key, 3 an earlier frame of
//! the title; compact: bit 7 when segment and offset follow), segment (4), offset in the segment
//! file (8), stored length (4), raw length (4), CRC-32 of the raw revision (4 bytes in both
//! layouts); base 2 adds ref index (2) and that title's frame (4), base 3 the earlier frame (4).
//! A compact entry is rev (the signed difference from the entry before), flags (bit 0 taken
//! down; bits 1–5 n, the tid's leading bytes written, the rest as the tid before), the n tid
//! bytes, type, and the frame plus one. A taken-down entry whose bytes a rewrite purged
//! names no frame (`0xFFFFFFFF`; compact 0). Byte tables: docs/FORMAT.md § Archive, format 2.
//!
//! Format 3 (`WAM3`) adds kind 5, a parts record (`WAM3`, then n): the first record of a map
//! file whose log begins in n part files ([`Map::decode_log_parts`]).
//!
//! Everything read is bounded before use: counts by the bytes left, frames by their segment's
//! length, raw lengths by [`MAX_RAW`], entries by the frames present.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::bytes::ByteReader;
use crate::store::Labels;

use super::super::map::{record, Entry};
use super::chain::WINDOW;

/// Magic of a v2 map snapshot.
pub const MAGIC: &[u8; 4] = b"WAM2";
/// Magic of a v3 map snapshot: the v2 layout, whose frames may also be members of units
/// ([`Base::Unit`]).
pub const MAGIC3: &[u8; 4] = b"WAM3";
/// Members a unit holds at most, its first included: a bound on what a read decodes.
pub const UNIT_MEMBERS: usize = 16;
/// The most bytes of the unit before a unit of base [`Base::After`] its prefix takes (unless
/// the revision before alone is longer): past this, a longer prefix found almost nothing more
/// on the corpus and made compressing slower.
pub const AFTER_BYTES: usize = 2 << 20;

/// The prefix of a unit of base [`Base::After`]: of `unit`, the decoded content of the unit
/// before from its first member through the frame before (the last `before` bytes), its last
/// [`AFTER_BYTES`] bytes, or that frame's whole revision when longer.
pub fn after_prefix(unit: &[u8], before: usize) -> &[u8] {
    let len = unit.len().min(AFTER_BYTES.max(before));
    &unit[unit.len() - len..]
}
/// The frame of a purged take-down record: none.
pub const NO_FRAME: u32 = u32::MAX;
/// The largest raw revision a frame may claim: the store's largest value (one filesys data
/// entry), so a damaged map cannot make a read allocate more.
pub const MAX_RAW: u64 = crate::filesys::MAX_DATA_ENTRY;
/// Appends (data entries) a segment file takes: the archive filesys's fixed inode capacity.
pub const MAX_APPENDS: u8 = 16;

const SNAPSHOT: u8 = 1;
const DELTA: u8 = 2;
const SNAPSHOT_COMPACT: u8 = 3;
const DELTA_COMPACT: u8 = 4;
/// Format 3: the first record of a map file whose log begins in part files (`WAM3`, then the
/// number of parts, 1 byte).
const PARTS: u8 = 5;
/// Format 3: part files a map's log may span before the map is rewritten as one snapshot; a
/// read of the map reads this many files and the map's at most.
pub const MAX_PARTS: u8 = 15;
/// Bit 7 of a compact frame's base byte: its segment and offset follow.
const PLACED: u8 = 0x80;
/// Smallest items, fixed layout and compact: bounds on a count by the bytes left.
const SEGMENT_SIZE: (usize, usize) = (13, 3);
const FRAME_SIZE: (usize, usize) = (25, 7);
const ENTRY_SIZE: (usize, usize) = (31, 4);
const DOWN_SIZE: (usize, usize) = (24, 17);

/// How a body writes its numbers: the fixed layout (kinds 1 and 2, big-endian integers of fixed
/// width) or the compact one (kinds 3 and 4, LEB128; what follows from the frame before left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Fixed,
    Compact,
}

impl Layout {
    fn min(self, sizes: (usize, usize)) -> usize {
        match self {
            Layout::Fixed => sizes.0,
            Layout::Compact => sizes.1,
        }
    }
}

/// Numbers into a body, fixed-width (of the width named) or LEB128.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    layout: Layout,
}

impl Writer<'_> {
    fn n(&mut self, v: u64, width: usize) {
        match self.layout {
            Layout::Fixed => self.out.extend_from_slice(&v.to_be_bytes()[8 - width..]),
            // Writing to a Vec cannot fail.
            Layout::Compact => drop(leb128::write::unsigned(self.out, v)),
        }
    }
    fn n16(&mut self, v: u64) {
        self.n(v, 2)
    }
    fn n32(&mut self, v: u64) {
        self.n(v, 4)
    }
    fn n64(&mut self, v: u64) {
        self.n(v, 8)
    }
    fn signed(&mut self, v: i64) {
        // Writing to a Vec cannot fail.
        drop(leb128::write::signed(self.out, v));
    }
    fn strings(&mut self, list: &[&[u8]]) {
        self.n16(list.len() as u64);
        for s in list {
            self.n16(s.len() as u64);
            self.out.extend_from_slice(s);
        }
    }
}

/// Numbers from a body, as [`Writer`] wrote them: `None` when short, or when a compact number
/// does not fit the width the fixed layout gives it.
struct Reader<'a> {
    r: ByteReader<'a>,
    layout: Layout,
}

impl Reader<'_> {
    fn n(&mut self, width: u32) -> Option<u64> {
        match self.layout {
            Layout::Fixed => match width {
                16 => self.r.u16().map(u64::from),
                32 => self.r.u32().map(u64::from),
                _ => self.r.u64(),
            },
            Layout::Compact => self
                .r
                .varint()
                .filter(|v| width == 64 || *v < 1u64 << width),
        }
    }
    fn n16(&mut self) -> Option<u64> {
        self.n(16)
    }
    fn n32(&mut self) -> Option<u64> {
        self.n(32)
    }
    fn n64(&mut self) -> Option<u64> {
        self.n(64)
    }
}

/// What a frame was compressed against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// Nothing: a key.
    Key,
    /// The raw revision of the frame before it.
    Previous,
    /// The raw revision of an earlier frame of the title, one of the
    /// [`WINDOW`] before it but not the one right before ([`Base::Previous`]).
    Earlier(u32),
    /// Another title's key (`refs[title]`, its frame `frame`, itself a [`Base::Key`]): a key too.
    Title {
        /// Index of the title's key in the map's `refs`.
        title: u16,
        /// Index of the key frame in that title's map.
        frame: u32,
    },
    /// Format 3: the next member of the unit of the frame before it. The unit is one zstd frame
    /// (stored with its first member, which has one of the other bases) whose content is its
    /// members' raw revisions one after the other; a member stores no bytes of its own.
    Unit,
    /// Format 3, a unit's first frame: the decoded content of the unit of the frame before it,
    /// from that unit's first member through the frame before, its last [`AFTER_BYTES`] bytes
    /// (and never less than the frame before's revision). A read decodes that unit up to there
    /// anyway (it is on the path): the prefix costs no decoding, and the unit matches every
    /// revision of the one before, as if they were one.
    After,
}

impl Base {
    /// Whether a chain of frames starts here.
    pub fn is_key(&self) -> bool {
        matches!(self, Base::Key | Base::Title { .. })
    }

    /// Whether the frame starts a unit (stores the compressed bytes), as every v2 frame does.
    pub fn is_head(&self) -> bool {
        *self != Base::Unit
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
    /// Format 3 (`WAM3`): frames may be members of units.
    pub units: bool,
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

    fn encode(&self, out: &mut Vec<u8>, layout: Layout) {
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
        let mut w = Writer { out, layout };
        let type_bytes: Vec<&[u8]> = types.iter().map(|t| t.as_bytes()).collect();
        w.strings(&type_bytes);
        let refs: Vec<&[u8]> = self.refs.iter().map(|r| r.as_slice()).collect();
        w.strings(&refs);
        w.n32(self.segments.len() as u64);
        for (n, s) in &self.segments {
            w.n32(u64::from(*n));
            w.out.push(s.appends);
            w.n64(s.len);
        }
        w.n32(u64::from(self.first_frame));
        w.n32(self.frames.len() as u64);
        let mut end = None;
        for f in &self.frames {
            let mut head = match f.base {
                Base::Key => 0,
                Base::Previous => 1,
                Base::Title { .. } => 2,
                Base::Earlier(_) => 3,
                Base::Unit => 4,
                Base::After => 5,
            };
            // Compact: a frame right after the one before it in the same segment (all but the
            // first of a run, as a run appends) names no place of its own.
            let placed = layout == Layout::Fixed || end != Some((f.seg, f.offset));
            if layout == Layout::Compact && placed {
                head |= PLACED;
            }
            w.out.push(head);
            if placed {
                w.n32(u64::from(f.seg));
                w.n64(f.offset);
            }
            w.n32(u64::from(f.stored));
            w.n32(u64::from(f.raw));
            w.out.extend_from_slice(&f.crc.to_be_bytes());
            match f.base {
                Base::Title { title, frame } => {
                    w.n16(u64::from(title));
                    w.n32(u64::from(frame));
                }
                Base::Earlier(frame) => w.n32(u64::from(frame)),
                Base::Key | Base::Previous | Base::Unit | Base::After => {}
            }
            end = Some((f.seg, f.offset + u64::from(f.stored)));
        }
        w.n32(self.entries.len() as u64);
        let (mut rev_before, mut tid_before) = (0u64, [0u8; 16]);
        for (e, s) in self.entries.iter().zip(&strings) {
            let t = types.iter().position(|t| *t == s.as_ref()).unwrap_or(0) as u64;
            // A purged record keeps NO_FRAME in memory too, so a map re-encodes to itself.
            match layout {
                Layout::Fixed => {
                    w.out.extend_from_slice(&e.rev.to_be_bytes());
                    w.out.extend_from_slice(&e.tid);
                    w.n16(t);
                    w.out.extend_from_slice(&e.block.to_be_bytes());
                    w.out.push(u8::from(e.taken_down));
                }
                Layout::Compact => {
                    // Revisions of a run mostly ascend: the difference is a byte or two. Tids
                    // of one writer share their clock sequence and node (the last 8 bytes),
                    // and mostly the high time bits before them: only the bytes up to the last
                    // one that differs from the tid before are written.
                    w.signed(e.rev.wrapping_sub(rev_before) as i64);
                    let kept = (0..16).rev().take_while(|&i| e.tid[i] == tid_before[i]);
                    let n = 16 - kept.count();
                    w.out.push(u8::from(e.taken_down) | (n as u8) << 1);
                    w.out.extend_from_slice(&e.tid[..n]);
                    w.n16(t);
                    w.n32(u64::from(e.block.wrapping_add(1)));
                }
            }
            (rev_before, tid_before) = (e.rev, e.tid);
        }
        w.n32(self.down.len() as u64);
        for (rev, tid) in &self.down {
            w.n64(*rev);
            w.out.extend_from_slice(tid);
        }
    }

    /// A body; entries get their frame's length and CRC when the map is applied.
    fn decode(body: &[u8], layout: Layout, path: &Path, offset: u64) -> Result<Delta> {
        let bad = |at: usize, what: &str| {
            Error::corrupt(
                path,
                offset + at as u64,
                format!("archive map (v2): {what}"),
                "a well-formed map",
                "damage",
            )
        };
        let mut r = Reader {
            r: ByteReader::new(body, 0),
            layout,
        };
        let truncated = |r: &Reader<'_>| bad(r.r.pos, "truncated or out of range");
        // A count no larger than the items of at least `min` bytes that the bytes left can hold.
        let count = |r: &mut Reader<'_>, min: usize, what: &str| -> Result<usize> {
            let n = r.n32().ok_or_else(|| truncated(r))? as usize;
            if n > r.r.left() / min {
                return Err(bad(r.r.pos, what));
            }
            Ok(n)
        };
        let strings = |r: &mut Reader<'_>| -> Result<Vec<Vec<u8>>> {
            let n = r.n16().ok_or_else(|| truncated(r))? as usize;
            let mut out = Vec::new();
            for _ in 0..n {
                let len = r.n16().ok_or_else(|| truncated(r))? as usize;
                let pos = r.r.pos;
                out.push(r.r.take(len).ok_or_else(|| bad(pos, "truncated"))?.to_vec());
            }
            Ok(out)
        };
        let types = strings(&mut r)?
            .into_iter()
            .map(|t| {
                let t = String::from_utf8(t).map_err(|_| bad(0, "content type"))?;
                Labels::split(&t).map_err(|what| bad(0, what))
            })
            .collect::<Result<Vec<(String, Labels)>>>()?;
        let refs = strings(&mut r)?;
        let mut d = Delta {
            refs,
            ..Delta::default()
        };
        let n = count(&mut r, layout.min(SEGMENT_SIZE), "segment count")?;
        for _ in 0..n {
            let s = (|| Some((r.n32()? as u32, r.r.take(1)?[0], r.n64()?)))()
                .ok_or_else(|| truncated(&r))?;
            let (index, appends, len) = s;
            d.segments.push((index, Segment { appends, len }));
        }
        d.first_frame = r.n32().ok_or_else(|| truncated(&r))? as u32;
        let n = count(&mut r, layout.min(FRAME_SIZE), "frame count")?;
        d.frames.reserve_exact(n);
        let mut end = None;
        for _ in 0..n {
            let at = r.r.pos;
            let head = r.r.take(1).ok_or_else(|| truncated(&r))?[0];
            let placed = layout == Layout::Fixed || head & PLACED != 0;
            let f = (|| {
                let (seg, offset) = match (placed, end) {
                    (true, _) => (r.n32()? as u32, r.n64()?),
                    (false, Some(end)) => end,
                    (false, None) => return Some(Err("a first frame with no place")),
                };
                let (stored, raw) = (r.n32()? as u32, r.n32()? as u32);
                let crc = r.r.u32()?;
                let base = match head & !PLACED {
                    0 => Base::Key,
                    1 => Base::Previous,
                    2 => Base::Title {
                        title: r.n16()? as u16,
                        frame: r.n32()? as u32,
                    },
                    3 => Base::Earlier(r.n32()? as u32),
                    4 => Base::Unit,
                    5 => Base::After,
                    _ => return Some(Err("frame base")),
                };
                let f = Frame {
                    seg,
                    offset,
                    stored,
                    raw,
                    crc,
                    base,
                };
                Some(Ok(f))
            })()
            .ok_or_else(|| truncated(&r))?
            .map_err(|what| bad(at, what))?;
            if layout == Layout::Fixed && head & PLACED != 0 {
                return Err(bad(at, "frame base"));
            }
            end = Some((f.seg, f.offset.saturating_add(u64::from(f.stored))));
            d.frames.push(f);
        }
        let n = count(&mut r, layout.min(ENTRY_SIZE), "entry count")?;
        d.entries.reserve_exact(n);
        let (mut rev_before, mut tid_before) = (0u64, [0u8; 16]);
        for _ in 0..n {
            let at = r.r.pos;
            let e = (|| match layout {
                Layout::Fixed => {
                    let (rev, tid) = (r.r.u64()?, r.r.take(16)?.try_into().ok()?);
                    let (t, frame) = (r.n16()? as usize, r.r.u32()?);
                    Some(Ok((rev, tid, t, frame, r.r.take(1)?[0])))
                }
                Layout::Compact => {
                    let rev = rev_before.wrapping_add(r.r.signed_varint()? as u64);
                    let flags = r.r.take(1)?[0];
                    let n = usize::from(flags >> 1);
                    if n > 16 {
                        return Some(Err("tid bytes"));
                    }
                    let mut tid = tid_before;
                    tid[..n].copy_from_slice(r.r.take(n)?);
                    let t = r.n16()? as usize;
                    let frame = (r.n32()? as u32).wrapping_sub(1);
                    Some(Ok((rev, tid, t, frame, flags & 1)))
                }
            })()
            .ok_or_else(|| truncated(&r))?
            .map_err(|what| bad(at, what))?;
            let (rev, tid, t, frame, flags) = e;
            (rev_before, tid_before) = (rev, tid);
            let (content_type, labels) = types
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
                labels,
                block: frame,
                offset: 0,
                len: 0,
                crc: 0,
                taken_down: flags & 1 == 1,
            });
        }
        let n = count(&mut r, layout.min(DOWN_SIZE), "take-down count")?;
        for _ in 0..n {
            let down = (|| Some((r.n64()?, r.r.take(16)?.try_into().ok()?)))()
                .ok_or_else(|| truncated(&r))?;
            d.down.push(down);
        }
        if r.r.pos != body.len() {
            return Err(bad(r.r.pos, "trailing bytes"));
        }
        Ok(d)
    }

    /// The delta as a log record.
    pub fn record(&self) -> Vec<u8> {
        let mut body = Vec::new();
        self.encode(&mut body, Layout::Compact);
        record(DELTA_COMPACT, &body)
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
        let mut body = if self.units { MAGIC3 } else { MAGIC }.to_vec();
        self.as_delta().encode(&mut body, Layout::Compact);
        record(SNAPSHOT_COMPACT, &body)
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
        // The members of the unit open so far and their raw bytes: a unit decodes whole.
        let (mut members, mut unit_raw) = (0usize, 0u64);
        for (i, f) in self.frames.iter().enumerate() {
            if f.base == Base::After && (!self.units || i == 0) {
                return Err("frame base");
            }
            if f.base == Base::Unit {
                if !self.units || i == 0 {
                    return Err("frame base");
                }
                if f.stored != 0 || (f.seg, f.offset) != end {
                    return Err("unit member with bytes or a place of its own");
                }
                members += 1;
                unit_raw += u64::from(f.raw);
                if members > UNIT_MEMBERS || unit_raw > MAX_RAW {
                    return Err("unit too large");
                }
            } else {
                (members, unit_raw) = (1, u64::from(f.raw));
            }
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
                Base::Earlier(j) if j as usize >= i || i - j as usize > WINDOW => {
                    return Err("frame parent out of reach")
                }
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
        Map::decode_log_parts(&[(bytes, offset)], path)
    }

    /// Reads a map log held in several files (format 3): `pieces` are the part files in order,
    /// then the map file, each with the offset its damage is reported at. With more than one
    /// piece, the map file's first record names the parts (`pieces.len() - 1`), and the log is
    /// the parts' records, then the map file's after that one.
    pub fn decode_log_parts(pieces: &[(&[u8], u64)], path: &Path) -> Result<Map> {
        const WHAT: &str = "archive map log (v2)";
        let mut map: Option<Map> = None;
        let last = pieces.len().saturating_sub(1);
        for (p, &(bytes, offset)) in pieces.iter().enumerate() {
            let bad = super::super::map::log_damage(path, offset, WHAT);
            if bytes.is_empty() {
                return Err(bad(0, "a map part with no record"));
            }
            for (r, record) in super::super::map::log_records(bytes, path, offset, WHAT).enumerate()
            {
                let (at, body) = record?;
                let here = offset + at as u64 + 5;
                if p == last && r == 0 && last > 0 {
                    // The parts record: `WAM3`, then how many part files come before.
                    if body[0] != PARTS || body.get(1..5) != Some(MAGIC3.as_slice()) {
                        return Err(bad(at, "a map file after parts without a parts record"));
                    }
                    if body.get(5..) != Some([last as u8].as_slice()) || last > MAX_PARTS.into() {
                        return Err(bad(at + 9, "number of map parts"));
                    }
                    continue;
                }
                let (kind, layout) = match body[0] {
                    SNAPSHOT | DELTA => (body[0], Layout::Fixed),
                    SNAPSHOT_COMPACT => (SNAPSHOT, Layout::Compact),
                    DELTA_COMPACT => (DELTA, Layout::Compact),
                    _ => return Err(bad(at, "record kind")),
                };
                match (kind, map.as_mut()) {
                    (SNAPSHOT, None) => {
                        let units = match body.get(1..5) {
                            Some(m) if m == MAGIC && last == 0 => false,
                            Some(m) if m == MAGIC3 && layout == Layout::Compact => true,
                            _ => return Err(bad(at + 5, "magic")),
                        };
                        let d = Delta::decode(&body[5..], layout, path, here + 4)?;
                        if !d.down.is_empty() {
                            return Err(bad(at, "take-downs in a snapshot"));
                        }
                        let mut m = Map {
                            units,
                            ..Map::default()
                        };
                        m.apply_unchecked(d).map_err(|what| bad(at, what))?;
                        map = Some(m);
                    }
                    (DELTA, Some(m)) => {
                        let d = Delta::decode(&body[1..], layout, path, here)?;
                        m.apply_unchecked(d).map_err(|what| bad(at, what))?;
                    }
                    _ => return Err(bad(at, "record kind or order")),
                }
            }
        }
        let offset = pieces.last().map_or(0, |p| p.1);
        let bad = super::super::map::log_damage(path, offset, WHAT);
        let map = map.ok_or_else(|| bad(0, "no snapshot"))?;
        map.check().map_err(|what| bad(0, what))?;
        Ok(map)
    }
}

/// The first record of a format 3 map file whose log begins in `parts` part files.
pub fn parts_record(parts: u8) -> Vec<u8> {
    record(PARTS, &[MAGIC3.as_slice(), &[parts]].concat())
}

/// The part files a map file's first record names (format 3), 0 when it names none; read
/// before the record's CRC is checked (the log's decoding checks it, and refuses a count that
/// does not match the parts read).
pub fn log_parts(bytes: &[u8]) -> u8 {
    match (bytes.get(4), bytes.get(5..9), bytes.get(9)) {
        (Some(&PARTS), Some(m), Some(&n)) if m == MAGIC3 => n.min(MAX_PARTS),
        _ => 0,
    }
}

/// The records of a map file after its parts record (all of them when it has none): what a
/// part file made of it holds.
pub fn after_parts(bytes: &[u8]) -> &[u8] {
    if log_parts(bytes) == 0 {
        return bytes;
    }
    let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    bytes.get(8 + len..).unwrap_or_default()
}

/// The format of a map log, by the magic of its first record: 1, 2, 3, or `None` (none of them).
pub fn log_version(bytes: &[u8]) -> Option<u8> {
    match bytes.get(5..9) {
        Some(m) if m == super::super::map::MAGIC => Some(1),
        Some(m) if m == MAGIC => Some(2),
        Some(m) if m == MAGIC3 => Some(3),
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
            labels: crate::store::Labels::NONE,
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

    /// A log as stores wrote it before the compact layout: kinds 1 and 2.
    fn fixed_log(map: &Map, delta: &Delta) -> Vec<u8> {
        let mut snapshot = MAGIC.to_vec();
        map.as_delta().encode(&mut snapshot, Layout::Fixed);
        let mut body = Vec::new();
        delta.encode(&mut body, Layout::Fixed);
        [record(SNAPSHOT, &snapshot), record(DELTA, &body)].concat()
    }

    #[test]
    fn fixed_logs_of_older_stores_read_alone_and_followed_by_compact_records() {
        let (map, delta) = sample();
        let mut expected = map.clone();
        expected.apply(&delta).unwrap();
        let fixed = fixed_log(&map, &delta);
        assert_eq!(fixed[4], SNAPSHOT);
        assert_eq!(log_version(&fixed), Some(2));
        assert_eq!(
            Map::decode_log(&fixed, Path::new("m"), 0).unwrap(),
            expected
        );
        // An archive written before keeps its log and appends compact deltas to it.
        let (_, second) = sample();
        let mut third = second.clone();
        third.first_frame = 3;
        third.frames = vec![Frame {
            offset: 30,
            ..second.frames[0]
        }];
        third.segments = vec![(
            0,
            Segment {
                appends: 3,
                len: 40,
            },
        )];
        third.entries = vec![entry(5, 3, false)];
        third.down = vec![(4, [4; 16])];
        let mixed = [fixed.clone(), third.record()].concat();
        expected.apply(&third).unwrap();
        assert_eq!(
            Map::decode_log(&mixed, Path::new("m"), 0).unwrap(),
            expected
        );
        // The compact layout is the smaller: the same map, as one snapshot each way.
        let compact = expected.snapshot_record();
        let mut fixed_body = MAGIC.to_vec();
        expected.as_delta().encode(&mut fixed_body, Layout::Fixed);
        assert!(
            compact.len() < fixed_body.len(),
            "{} vs {}",
            compact.len(),
            fixed_body.len()
        );
        assert_eq!(compact[4], SNAPSHOT_COMPACT);
    }

    #[test]
    fn compact_frames_name_a_place_only_when_they_do_not_follow_the_one_before() {
        let (map, _) = sample();
        let mut moved = map.clone();
        moved.frames[1].offset = 11;
        moved.segments[0].len = 21;
        for m in [&map, &moved] {
            let log = m.snapshot_record();
            assert_eq!(Map::decode_log(&log, Path::new("m"), 0).unwrap(), *m);
        }
        // One frame placed (seg 0, offset 10: two one-byte numbers) costs two bytes more.
        assert_eq!(
            moved.snapshot_record().len(),
            map.snapshot_record().len() + 2
        );
        // A first frame must name its place.
        let mut body = Vec::new();
        map.as_delta().encode(&mut body, Layout::Compact);
        let at = body
            .windows(2)
            .position(|w| w == [2 | PLACED, 0])
            .expect("the first frame's head and segment");
        body[at] = 2;
        body.remove(at + 1);
        body.remove(at + 1);
        let err = Delta::decode(&body, Layout::Compact, Path::new("m"), 0).unwrap_err();
        assert!(err.to_string().contains("no place"), "{err}");
    }

    #[test]
    fn compact_entries_write_only_the_tid_bytes_that_differ_from_the_one_before() {
        let (mut map, _) = sample();
        let tid = |low: u8| {
            let mut t = [0x11; 16];
            t[0] = low;
            t
        };
        for (i, e) in map.entries.iter_mut().enumerate() {
            e.tid = tid(i as u8);
        }
        let log = map.snapshot_record();
        assert_eq!(Map::decode_log(&log, Path::new("m"), 0).unwrap(), map);
        // The first tid in full (the one "before" it is zeros), then one byte each.
        let (whole, _) = sample();
        assert_eq!(whole.snapshot_record().len() - log.len(), 2 * 15);
        // n past 16 is damage, not a read past the tid.
        let mut body = Vec::new();
        map.as_delta().encode(&mut body, Layout::Compact);
        let at = body.len() - 5; // the last entry: flags, one tid byte, type, frame; no down
        assert_eq!(body[at], 1 << 1);
        body[at] = 17 << 1;
        let err = Delta::decode(&body, Layout::Compact, Path::new("m"), 0).unwrap_err();
        assert!(err.to_string().contains("tid bytes"), "{err}");
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
