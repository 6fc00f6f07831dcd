//! Archive format 2: one zstd frame per revision, keys placed by a decode budget.
//!
//! | file in the filesys | content                                                          |
//! |---------------------|------------------------------------------------------------------|
//! | `m/KEY`             | the title's [`map::Map`] (`WAM2`), a log of a snapshot and deltas  |
//! | `v/KEY#N`           | segment N: frames appended, one data entry per archive run         |
//!
//! Each distinct revision of a title is one magicless zstd frame ([`frames`]), compressed with the
//! raw revision of its **parent** as its prefix — the frame before it, or another of the
//! [`chain::WINDOW`] before it that a level-3 trial finds it closest to (a page that went back to
//! an earlier look) — or as a **key**: against nothing, or against another title's key (one level
//! at most: a read decodes at most two keys). A new frame takes a parent only while the raw bytes
//! a read of it would decode (its path from the key) stay within `chain_bytes`, and is a key
//! when no candidate does ([`chain`]). A title's first frame is a key; the key it may reference
//! is the best of the plain keys this handle wrote lately, by a level-3 trial that charges a
//! reference for the decoding it adds to every read, so titles of one site share their
//! boilerplate when it pays.
//!
//! An archive run appends the new frames of a title to its open segment as one data entry
//! (rewriting nothing) and a delta to its map log; the parents a new frame may take are the
//! title's last frame (from the per-title cache of the last decoded revision, or decoded once)
//! and the frames of the run before it. Identical revisions share a frame. A take-down is a map
//! record; the bytes go when the archive is rewritten (always into format 2).
//!
//! Format 3 (`WAM3`) is this format with **units**: a run's revisions grouped, up to
//! [`map::UNIT_MEMBERS`] and [`UNIT_BYTES`], into one zstd frame whose content is the members
//! one after the other, so that a frame's header and entropy tables are paid once per unit and
//! a member matches every revision before it in the unit; members are frames of base
//! [`map::Base::Unit`] that store nothing (docs/FORMAT.md § Format 3). Its map log spans part
//! files (`p/KEY#N`) named by a parts record at the head of `m/KEY`: a full map file becomes
//! the next part instead of the whole map being rewritten every 16 runs, whose dead copies were
//! most of a long title's bytes in an archive that grows by small runs.
//!
//! A read decodes the path from the key with one reused decompression context, starting after
//! the title's cached last decoded revision when that lies on the path, stops decoding a unit
//! after the last of its members the path needs (zstd's streaming decoder, block by block), and
//! checks that member of each unit against its CRC-32 (every member, when that fails: the error
//! names the first damaged one). Its two decoding buffers are kept for the next read.

pub mod chain;
pub mod frames;
pub mod map;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::error::{Error, Result};

use super::map::Entry;
use super::{map_name, Archive, Item, MAX_MAP};
use map::{after_prefix, Base, Delta, Frame, Map, Segment, MAX_APPENDS, MAX_RAW, UNIT_MEMBERS};

/// A segment takes appends until it holds this many bytes (a larger run gets segments of its
/// own): reads take a range of a segment, so its size only bounds a rewrite's unit.
pub const SEGMENT_BYTES: u64 = 16 << 20;
/// Format 3: a unit takes members while its raw bytes stay within this (a read of a member
/// decodes its unit up to that member).
pub const UNIT_BYTES: u64 = 8 << 20;
/// A read's decoding buffers are kept for the next read while each holds at most this many
/// bytes (a unit and the revision before it, at most).
pub const SCRATCH_BYTES: u64 = 2 * UNIT_BYTES;
/// Plain keys remembered as references for the keys of other titles.
const CANDIDATES: usize = 16;
/// The level of the trial compressions that pick a key's reference and a frame's parent.
const TRIAL_LEVEL: i32 = 3;
/// A frame whose trial against the latest frame is at most this many bytes takes it as its
/// parent without trials against the others.
const CLOSE_ENOUGH: usize = 512;
/// A reference is charged one stored byte per this many raw bytes of the key it references:
/// every read of the chain decodes that key in full (about ten times the cost of a delta's raw
/// byte). Measured on the corpus (docs/PERFORMANCE.md § Archive): every reference the trial finds
/// smaller (18 of 20 keys) saves 0.02 points of raw and doubles the p50 of a cold read; charged at
/// 1/32, two remain, which keep the saving; at 1/8, none.
const REF_CHARGE: usize = 32;

pub(crate) fn segment_name(key: &[u8], n: u32) -> Vec<u8> {
    [b"v/".as_slice(), key, format!("#{n}").as_bytes()].concat()
}

/// Format 3: part file `n` (from 1) of the title's map log (`m/KEY` names how many it has).
pub(crate) fn part_name(key: &[u8], n: u8) -> Vec<u8> {
    [b"p/".as_slice(), key, format!("#{n}").as_bytes()].concat()
}

/// The last decoded revision of each title, bounded in bytes.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    last: HashMap<Vec<u8>, (u32, Arc<Vec<u8>>)>,
    order: VecDeque<Vec<u8>>,
    bytes: u64,
}

impl Recent {
    fn get(&self, key: &[u8]) -> Option<(u32, Arc<Vec<u8>>)> {
        self.last.get(key).cloned()
    }

    fn put(&mut self, key: &[u8], frame: u32, raw: Arc<Vec<u8>>, limit: u64) {
        let len = raw.len() as u64;
        if len > limit {
            if let Some((_, old)) = self.last.remove(key) {
                self.bytes -= old.len() as u64;
                self.order.retain(|k| k != key);
            }
            return;
        }
        match self.last.insert(key.to_vec(), (frame, raw)) {
            Some((_, old)) => self.bytes -= old.len() as u64,
            None => self.order.push_back(key.to_vec()),
        }
        self.bytes += len;
        while self.bytes > limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, gone)) = self.last.remove(&oldest) {
                self.bytes -= gone.len() as u64;
            }
        }
    }
}

/// The raw bytes a frame is compressed against.
type Prefix = Arc<Vec<u8>>;

/// A plain key another title's key may be compressed against.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    title: Vec<u8>,
    frame: u32,
    raw: Arc<Vec<u8>>,
}

impl Archive {
    /// The title's v2 map, if it has one (`None` also for a v1 title).
    pub fn map_v2(&self, key: &[u8]) -> Result<Option<Map>> {
        match self.load(key)? {
            Some(super::AnyMap::V2(m)) => Ok(Some(m)),
            _ => Ok(None),
        }
    }

    fn damaged_frame(&self, key: &[u8], map: &Map, n: usize, what: &str) -> Error {
        let f = map.frames.get(n);
        let name = f.map_or_else(Vec::new, |f| segment_name(key, f.seg));
        // The frame's place in the datafile, when its segment's extents can be read.
        let at = f
            .and_then(|f| {
                let extents = self.fs.extents(&name).ok().flatten()?;
                let mut left = f.offset;
                extents.iter().find_map(|e| {
                    if left < e.len {
                        Some(e.offset + left)
                    } else {
                        left -= e.len;
                        None
                    }
                })
            })
            .unwrap_or(0);
        Error::corrupt(
            self.fs.data().path(),
            at,
            format!(
                "archive segment {} of title {:?}: frame {n}",
                String::from_utf8_lossy(&name),
                String::from_utf8_lossy(key)
            ),
            "a frame that decodes to its revision",
            what,
        )
    }

    /// The stored bytes of frames `from..=to` of a title: one read per segment they span.
    fn frame_bytes(&self, key: &[u8], map: &Map, from: usize, to: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(to + 1 - from);
        let mut i = from;
        while i <= to {
            let seg = map.frames[i].seg;
            let mut j = i;
            while j < to && map.frames[j + 1].seg == seg {
                j += 1;
            }
            let start = map.frames[i].offset;
            let end = map.frames[j].offset + u64::from(map.frames[j].stored);
            let bytes = self
                .fs
                .read_range(&segment_name(key, seg), start, end - start);
            let bytes = match bytes {
                Ok(b) if b.len() as u64 == end - start => b,
                Ok(b) => {
                    let what = format!("segment ends {} bytes into the frames read", b.len());
                    return Err(self.damaged_frame(key, map, i, &what));
                }
                Err(Error::NotFound(_)) => {
                    return Err(self.damaged_frame(key, map, i, "segment file missing"))
                }
                Err(e) => return Err(e),
            };
            for f in &map.frames[i..=j] {
                let at = (f.offset - start) as usize;
                out.push(bytes[at..at + f.stored as usize].to_vec());
            }
            i = j + 1;
        }
        Ok(out)
    }

    /// Decodes `members`, the first frame of a unit (a v2 frame is a unit of one: its revision)
    /// to the last member wanted, from its stored bytes against its prefix (`data`, `prefix`)
    /// into `out`, each checked against its CRC-32 (`every`) or the last alone; the rest of the
    /// unit is not decoded.
    fn decode_frame_into(
        &self,
        key: &[u8],
        map: &Map,
        members: std::ops::RangeInclusive<usize>,
        (data, prefix): (&[u8], &[u8]),
        out: &mut Vec<u8>,
        every: bool,
    ) -> Result<()> {
        let n = *members.start();
        let (_, last) = chain::unit(map, n);
        let upto = (*members.end()).clamp(n, last);
        // Bounded by MAX_RAW in the map's check.
        let raw: u64 = (n..=last).map(|j| u64::from(map.frames[j].raw)).sum();
        let want: u64 = (n..=upto).map(|j| u64::from(map.frames[j].raw)).sum();
        let mut guard = self.decoder.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let dec = frames::Decoder::new().map_err(|e| Error::invalid(format!("zstd: {e}")))?;
            *guard = Some(dec);
        }
        let dec = guard.as_mut().expect("just created");
        dec.decompress_start_into(out, data, prefix, raw, want)
            .map_err(|e| self.damaged_frame(key, map, n, &e))?;
        drop(guard);
        self.decompressed
            .fetch_add(out.len() as u64, std::sync::atomic::Ordering::Relaxed);
        out.truncate(want as usize);
        let mut at = 0;
        for j in n..=upto {
            let f = map.frames[j];
            if !every && j < upto {
                at += f.raw as usize;
                continue;
            }
            let crc = crc32fast::hash(&out[at..at + f.raw as usize]);
            if crc != f.crc {
                return Err(self.damaged_frame(
                    key,
                    map,
                    j,
                    &format!("CRC-32 0x{crc:08x}, the map says 0x{:08x}", f.crc),
                ));
            }
            at += f.raw as usize;
        }
        Ok(())
    }

    fn decode_frame(
        &self,
        key: &[u8],
        map: &Map,
        members: std::ops::RangeInclusive<usize>,
        data: &[u8],
        prefix: &[u8],
    ) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.decode_frame_into(key, map, members, (data, prefix), &mut out, true)?;
        Ok(out)
    }

    /// The raw revision of another title's plain key that a key of `key` references.
    fn referenced_key(&self, key: &[u8], map: &Map, n: usize) -> Result<Arc<Vec<u8>>> {
        let Base::Title { title, frame } = map.frames[n].base else {
            return Ok(Arc::new(Vec::new()));
        };
        let other = &map.refs[title as usize];
        let bad = |what: &str| self.damaged_frame(key, map, n, what);
        let shared = self.load_shared(other)?;
        let Some(super::AnyMap::V2(omap)) = shared.as_deref() else {
            return Err(bad("references a title with no v2 map"));
        };
        match omap.frames.get(frame as usize) {
            Some(f) if f.base == Base::Key => {}
            _ => return Err(bad("references a frame that is not a plain key")),
        }
        if let Some((c, raw)) = self.recent_get(other).filter(|(c, _)| *c == frame) {
            let _ = c;
            return Ok(raw);
        }
        let data = self.frame_bytes(other, omap, frame as usize, frame as usize)?;
        // A v3 key may head a unit: its revision is the unit's first, decoded alone.
        let f = frame as usize;
        let raw = self.decode_frame(other, omap, f..=f, &data[0], &[])?;
        Ok(Arc::new(raw))
    }

    fn recent_get(&self, key: &[u8]) -> Option<(u32, Arc<Vec<u8>>)> {
        self.recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
    }

    fn recent_put(&self, key: &[u8], frame: u32, raw: Arc<Vec<u8>>) {
        let limit = self.opts.cache_bytes;
        self.recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(key, frame, raw, limit);
    }

    /// The raw revision of frame `n`: its path decoded from its key, or from the title's last
    /// decoded revision when that lies on the path.
    pub(crate) fn frame_content(&self, key: &[u8], map: &Map, n: usize) -> Result<Arc<Vec<u8>>> {
        // Of a unit, only the last member the path needs is checked against its CRC-32 (the
        // members before it were a tenth of a read's time): a damaged one either leaves the
        // members after it right or fails them. A failure is decoded again checking every
        // member, so that the error names the first damaged one.
        match self.frame_content_as(key, map, n, false) {
            Err(Error::Corrupt { .. }) => self.frame_content_as(key, map, n, true),
            other => other,
        }
    }

    /// [`Archive::frame_content`], checking every member decoded (`every`) or the last a unit's
    /// decoding needs.
    fn frame_content_as(
        &self,
        key: &[u8],
        map: &Map,
        n: usize,
        every: bool,
    ) -> Result<Arc<Vec<u8>>> {
        if n >= map.frames.len() {
            return Err(self.damaged_frame(key, map, n, "the entry names no frame"));
        }
        let path = chain::path(map, n);
        // A cached revision helps when the next frame of the path starts a unit (a member
        // needs its unit decoded from its first) against that revision alone (not `After`).
        let cached = self.recent_get(key).and_then(|(c, raw)| {
            let at = path.iter().position(|&i| i == c as usize)?;
            let next = path.get(at + 1).map_or(Base::Key, |&i| map.frames[i].base);
            (next.is_head() && next != Base::After).then_some((at, raw))
        });
        let (start, prev) = match cached {
            Some((at, raw)) if at + 1 == path.len() => return Ok(raw),
            Some((at, raw)) => (at + 1, raw),
            None => (0, self.referenced_key(key, map, path[0])?),
        };
        let todo = &path[start..];
        // One read of the frames from the first to decode to `n`: those off the path are few
        // bytes (deltas), and a read of their own each would cost more.
        let data = self.frame_bytes(key, map, todo[0], n)?;
        // Two buffers in turn: the unit decoded last holds the next one's prefix, the revision
        // at `span` (a unit's members follow each other on a path). Those of the read before,
        // whose pages are already touched.
        let [mut last, mut next] = std::mem::take(&mut *self.scratch());
        let mut span = 0..0;
        for (k, &i) in todo.iter().enumerate() {
            let f = map.frames[i];
            if f.base.is_head() {
                let prefix: &[u8] = match (k, f.base) {
                    (0, _) => &prev,
                    // `last` holds the unit before from its first member through `span`.
                    (_, Base::After) => after_prefix(&last[..span.end], span.len()),
                    _ => &last[span.clone()],
                };
                // The unit's members on the path follow its first there: decoded up to the
                // last of them, not past it.
                let members = todo[k + 1..]
                    .iter()
                    .take_while(|&&j| map.frames[j].base == Base::Unit)
                    .count();
                let members = i..=todo[k + members];
                let data = &data[i - todo[0]];
                self.decode_frame_into(key, map, members, (data, prefix), &mut next, every)?;
                std::mem::swap(&mut last, &mut next);
                span = 0..f.raw as usize;
            } else {
                span = span.end..span.end + f.raw as usize;
            }
        }
        let raw = Arc::new(last[span].to_vec());
        let mut scratch = self.scratch();
        for (keep, buf) in scratch.iter_mut().zip([last, next]) {
            if buf.capacity() as u64 <= SCRATCH_BYTES {
                *keep = buf;
            }
        }
        drop(scratch);
        self.recent_put(key, n as u32, raw.clone());
        Ok(raw)
    }

    fn scratch(&self) -> std::sync::MutexGuard<'_, [Vec<u8>; 2]> {
        self.scratch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The decoded content of frame `j`'s unit from its first member through `j` (the prefix of
    /// a unit of base `After` that follows `j`).
    fn unit_through(&self, key: &[u8], map: &Map, j: usize) -> Result<Vec<u8>> {
        let (head, _) = chain::unit(map, j);
        if head == j {
            return Ok(self.frame_content(key, map, j)?.to_vec());
        }
        let prefix = match map.frames[head].base {
            Base::After => {
                let before = map.frames[head - 1].raw as usize;
                Arc::new(after_prefix(&self.unit_through(key, map, head - 1)?, before).to_vec())
            }
            _ => match chain::parent(map, head) {
                Some(p) => self.frame_content(key, map, p)?,
                None => self.referenced_key(key, map, head)?,
            },
        };
        let data = self.frame_bytes(key, map, head, head)?;
        self.decode_frame(key, map, head..=j, &data[0], &prefix)
    }

    /// Reads one revision of a v2 title, verified against its CRC-32.
    pub(crate) fn read_v2(&self, key: &[u8], map: &Map, entry: &Entry) -> Result<Vec<u8>> {
        let raw = self.frame_content(key, map, entry.block as usize)?;
        // The frame's bytes were checked against its CRC-32 as they were decoded (or were the
        // writer's own): the entry need only name the same.
        let f = map.frames[entry.block as usize];
        if raw.len() as u64 != entry.len || f.crc != entry.crc || u64::from(f.raw) != entry.len {
            return Err(self.damaged_frame(
                key,
                map,
                entry.block as usize,
                "a revision that does not match its entry",
            ));
        }
        Ok(raw.to_vec())
    }

    /// Calls `each(frame, raw)` for every frame of a title in order, decoding each once.
    pub fn each_frame(
        &self,
        key: &[u8],
        map: &Map,
        mut each: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<()> {
        // The frames a parent may be (the map's check holds parents to this window).
        let mut window: VecDeque<(usize, Arc<Vec<u8>>)> = VecDeque::new();
        // The unit decoded last, and where its member decoded last ends: the prefix of a unit
        // of base `After` (a unit may follow one in another segment).
        let (mut unit, mut at) = (Vec::new(), 0);
        let mut i = 0;
        while i < map.frames.len() {
            // A segment's frames at a time: one read each, memory bounded by a segment.
            let seg = map.frames[i].seg;
            let mut j = i;
            while j + 1 < map.frames.len() && map.frames[j + 1].seg == seg {
                j += 1;
            }
            // A unit's members share its first frame's segment: a unit is decoded whole here.
            let data = self.frame_bytes(key, map, i, j)?;
            for (n, d) in (i..=j).zip(&data) {
                let f = map.frames[n];
                if f.base == Base::After {
                    let before = map.frames[n - 1].raw as usize;
                    let prefix = after_prefix(&unit[..at], before).to_vec();
                    let members = n..=chain::unit(map, n).1;
                    (unit, at) = (self.decode_frame(key, map, members, d, &prefix)?, 0);
                } else if f.base.is_head() {
                    let prefix = match chain::parent(map, n) {
                        Some(p) => match window.iter().find(|(w, _)| *w == p) {
                            Some((_, raw)) => raw.clone(),
                            None => self.frame_content(key, map, p)?,
                        },
                        None => self.referenced_key(key, map, n)?,
                    };
                    let members = n..=chain::unit(map, n).1;
                    (unit, at) = (self.decode_frame(key, map, members, d, &prefix)?, 0);
                }
                let raw = Arc::new(unit[at..at + f.raw as usize].to_vec());
                at += f.raw as usize;
                each(n, &raw)?;
                window.push_back((n, raw));
                if window.len() > chain::WINDOW {
                    window.pop_front();
                }
            }
            i = j + 1;
        }
        Ok(())
    }

    /// [`Archive::add`] for a v2 title (`map` is `None` for a new title). `purged` are take-down
    /// records to carry as they are (a rewrite's).
    pub(crate) fn add_v2(
        &mut self,
        key: &[u8],
        map: Option<Map>,
        items: &[Item<'_>],
        purged: &[Entry],
    ) -> Result<usize> {
        let mut map = map.unwrap_or_else(|| Map {
            units: self.opts.format >= 3,
            ..Map::default()
        });
        let mut delta = Delta {
            first_frame: map.frames.len() as u32,
            ..Delta::default()
        };
        // The title as it grows in this run: frames appended as they are compressed.
        let mut work = map.clone();
        let mut fresh: Vec<(&[u8], Vec<u8>)> = Vec::new();
        // The frames a new frame may take as its parent, with their raw revisions: the title's
        // last (decoded once) and this run's.
        let mut window: VecDeque<(usize, Arc<Vec<u8>>)> = VecDeque::new();
        let mut new_keys: Vec<(u32, Arc<Vec<u8>>)> = Vec::new();
        // Format 3: the units this run opened, by first frame, with the prefix each is
        // compressed against once its members are known.
        // A unit that may follow the unit before (base `After`) also has the revision before
        // alone: compressed against both, it keeps the smaller (small edits of one page can
        // cost more against a long prefix, whose matches lie farther back).
        let mut heads: Vec<(usize, Prefix, Option<Prefix>)> = Vec::new();
        // In revision order, whatever order the caller lists them in: each frame is compressed
        // against the revision before it.
        let mut items = items.to_vec();
        items.sort_by_key(|i| i.rev);
        for item in &items {
            if item.value.len() as u64 > MAX_RAW {
                return Err(Error::invalid(format!(
                    "archive: a revision of {} bytes, over the {MAX_RAW} a frame may hold",
                    item.value.len()
                )));
            }
            let crc = crc32fast::hash(item.value);
            match super::held(map.entries.iter().chain(&delta.entries), item, crc) {
                super::Held::Same => continue,
                super::Held::Replaced(e) => delta.down.push((e.rev, e.tid)),
                super::Held::New => {}
            }
            let entry = |frame: u32| Entry {
                rev: item.rev,
                tid: item.tid,
                content_type: item.content_type.to_string(),
                labels: item.labels.clone(),
                block: frame,
                offset: 0,
                len: item.value.len() as u64,
                crc,
                taken_down: false,
            };
            if let Some(same) = self.identical_v2(key, &work, &fresh, item.value, crc)? {
                delta.entries.push(entry(same));
                continue;
            }
            let n = work.frames.len();
            if window.is_empty() && n > 0 {
                window.push_back((n - 1, self.frame_content(key, &work, n - 1)?));
            }
            let raw = item.value.len() as u64;
            let budget = self.opts.chain_bytes;
            if self.joins_unit(&work, heads.last().map(|h| h.0), raw) {
                work.frames.push(Frame {
                    seg: 0,
                    offset: 0,
                    stored: 0,
                    raw: item.value.len() as u32,
                    crc,
                    base: Base::Unit,
                });
                delta.entries.push(entry(n as u32));
                fresh.push((item.value, Vec::new()));
                window.push_back((n, Arc::new(item.value.to_vec())));
                if window.len() > chain::WINDOW {
                    window.pop_front();
                }
                continue;
            }
            let allowed: Vec<(usize, &[u8])> = window
                .iter()
                .filter(|(j, _)| chain::may_parent(&work, *j, raw, budget))
                .map(|(j, r)| (*j, r.as_slice()))
                .collect();
            let (base, prefix, plain) = match self.choose_parent(&allowed, item.value)? {
                None => {
                    let (base, prefix) = self.choose_key(key, &mut work, &mut delta, item.value)?;
                    (base, prefix, None)
                }
                Some((j, parent)) if j + 1 == n && work.units && chain::unit(&work, j).0 < j => {
                    // The frame before ends a unit of several: this unit matches all of it.
                    let head = chain::unit(&work, j).0;
                    let first_new = n - fresh.len();
                    let content = if head >= first_new {
                        fresh[head - first_new..]
                            .iter()
                            .flat_map(|f| f.0.iter().copied())
                            .collect()
                    } else {
                        self.unit_through(key, &work, j)?
                    };
                    let before = work.frames[j].raw as usize;
                    (
                        Base::After,
                        Arc::new(after_prefix(&content, before).to_vec()),
                        Some(Arc::new(parent.to_vec())),
                    )
                }
                Some((j, parent)) => {
                    let base = if j + 1 == n {
                        Base::Previous
                    } else {
                        Base::Earlier(j as u32)
                    };
                    (base, Arc::new(parent.to_vec()), None)
                }
            };
            // Format 3 compresses a unit once its members are known, below.
            let compressed = if work.units {
                heads.push((n, prefix, plain));
                Vec::new()
            } else {
                self.compress_frame(item.value, &prefix)?
            };
            if base == Base::Key {
                new_keys.push((n as u32, Arc::new(item.value.to_vec())));
            }
            work.frames.push(Frame {
                seg: 0,
                offset: 0,
                stored: compressed.len() as u32,
                raw: item.value.len() as u32,
                crc,
                base,
            });
            delta.entries.push(entry(n as u32));
            fresh.push((item.value, compressed));
            window.push_back((n, Arc::new(item.value.to_vec())));
            if window.len() > chain::WINDOW {
                window.pop_front();
            }
        }
        delta.entries.extend(purged.iter().cloned());
        let first_new = work.frames.len() - fresh.len();
        for (head, prefix, plain) in heads {
            let (_, last) = chain::unit(&work, head);
            let content: Vec<u8> = (head..=last)
                .flat_map(|j| fresh[j - first_new].0.iter().copied())
                .collect();
            let mut compressed = self.compress_frame(&content, &prefix)?;
            if let Some(plain) = plain {
                let alone = self.compress_frame(&content, &plain)?;
                if alone.len() <= compressed.len() {
                    (compressed, work.frames[head].base) = (alone, Base::Previous);
                }
            }
            work.frames[head].stored = compressed.len() as u32;
            fresh[head - first_new].1 = compressed;
        }
        if !fresh.is_empty() {
            self.place(key, &mut work, &mut delta, &fresh)?;
        }
        let added = delta.entries.len() - purged.len();
        if delta.is_empty() {
            return Ok(0);
        }
        map.apply(&delta).map_err(|what| {
            Error::invalid(format!("archive: a v2 delta that does not fit: {what}"))
        })?;
        self.write_map_v2(key, &map, &delta)?;
        // The last frame is the window's latest whenever this run made a frame.
        if let Some((n, last)) = window.pop_back() {
            self.recent_put(key, n as u32, last);
        }
        for (frame, raw) in new_keys {
            self.candidates.push_back(Candidate {
                title: key.to_vec(),
                frame,
                raw,
            });
            while self.candidates.len() > CANDIDATES {
                self.candidates.pop_front();
            }
        }
        Ok(added)
    }

    /// A frame of the title (archived, or new in this run) with exactly these bytes.
    fn identical_v2(
        &self,
        key: &[u8],
        work: &Map,
        fresh: &[(&[u8], Vec<u8>)],
        value: &[u8],
        crc: u32,
    ) -> Result<Option<u32>> {
        let archived = work.frames.len() - fresh.len();
        for (n, f) in work.frames.iter().enumerate() {
            if f.crc != crc || u64::from(f.raw) != value.len() as u64 {
                continue;
            }
            let same = if n >= archived {
                fresh[n - archived].0 == value
            } else {
                self.frame_content(key, work, n)?.as_slice() == value
            };
            if same {
                return Ok(Some(n as u32));
            }
        }
        Ok(None)
    }

    fn compress_frame(&self, value: &[u8], prefix: &[u8]) -> Result<Vec<u8>> {
        frames::compress(value, prefix, self.opts.level)
            .map_err(|e| Error::io(self.fs.data().path(), None, std::io::Error::other(e)))
    }

    /// The parent for a new frame among `allowed` (the frames it may take, oldest first): the
    /// one a level-3 trial compresses `value` smallest against, the latest on a tie; `None`
    /// (a key) when there is none. When the latest is close enough (a delta of at most
    /// [`CLOSE_ENOUGH`] bytes), it is taken without trying the others: most revisions are small
    /// edits of the one before, and the trials would cost more than they could save.
    fn choose_parent<'w>(
        &self,
        allowed: &[(usize, &'w [u8])],
        value: &[u8],
    ) -> Result<Option<(usize, &'w [u8])>> {
        let Some(&(latest, raw)) = allowed.last() else {
            return Ok(None);
        };
        if allowed.len() == 1 {
            return Ok(Some((latest, raw)));
        }
        let fail = |e: String| Error::io(self.fs.data().path(), None, std::io::Error::other(e));
        let trial = |prefix: &[u8]| frames::compress(value, prefix, TRIAL_LEVEL).map(|f| f.len());
        let mut best = (trial(raw).map_err(fail)?, latest, raw);
        if best.0 > CLOSE_ENOUGH {
            for &(j, raw) in allowed.iter().rev().skip(1) {
                let size = trial(raw).map_err(fail)?;
                if size < best.0 {
                    best = (size, j, raw);
                }
            }
        }
        Ok(Some((best.1, best.2)))
    }

    /// Format 3: whether a new frame of `raw` bytes joins the unit this run opened last (at
    /// `head`, its last member the title's last frame): while the unit has fewer than
    /// [`UNIT_MEMBERS`] members and [`UNIT_BYTES`] raw bytes, and a read of it stays within the
    /// decode budget.
    fn joins_unit(&self, work: &Map, head: Option<usize>, raw: u64) -> bool {
        let Some(head) = head.filter(|_| work.units) else {
            return false;
        };
        let n = work.frames.len();
        let unit_raw: u64 = work.frames[head..].iter().map(|f| u64::from(f.raw)).sum();
        n - head < UNIT_MEMBERS
            && unit_raw + raw <= UNIT_BYTES
            && chain::decode_cost(work, n - 1) + raw <= self.opts.chain_bytes
    }

    /// A key: against nothing or against the plain key of another title that a level-3 trial
    /// finds best; the base and the prefix.
    fn choose_key(
        &self,
        key: &[u8],
        work: &mut Map,
        delta: &mut Delta,
        value: &[u8],
    ) -> Result<(Base, Arc<Vec<u8>>)> {
        let trial = |prefix: &[u8]| frames::compress(value, prefix, TRIAL_LEVEL).map(|f| f.len());
        let fail = |e: String| Error::io(self.fs.data().path(), None, std::io::Error::other(e));
        let mut best: Option<(&Candidate, usize)> = None;
        if self.candidates.iter().any(|c| c.title != key) {
            let alone = trial(&[]).map_err(fail)?;
            for c in self.candidates.iter().filter(|c| c.title != key) {
                let size = trial(&c.raw).map_err(fail)?;
                // Every read of the chain decodes the referenced key in full: charged.
                let size = size + c.raw.len() / REF_CHARGE;
                if size < best.map_or(alone, |b| b.1) {
                    best = Some((c, size));
                }
            }
        }
        let Some((c, _)) = best else {
            return Ok((Base::Key, Arc::new(Vec::new())));
        };
        let title = match work.refs.iter().position(|r| *r == c.title) {
            Some(i) => i,
            None => {
                work.refs.push(c.title.clone());
                delta.refs.push(c.title.clone());
                work.refs.len() - 1
            }
        };
        let title = u16::try_from(title)
            .map_err(|_| Error::invalid("archive: a title references too many others"))?;
        let base = Base::Title {
            title,
            frame: c.frame,
        };
        Ok((base, c.raw.clone()))
    }

    /// Writes the new frames to segment files (the open one while it takes appends, then new
    /// ones) and gives them their places in `work` and `delta`.
    fn place(
        &mut self,
        key: &[u8],
        work: &mut Map,
        delta: &mut Delta,
        fresh: &[(&[u8], Vec<u8>)],
    ) -> Result<()> {
        let first = work.frames.len() - fresh.len();
        let mut i = 0;
        while i < fresh.len() {
            let open = match work.segments.last() {
                Some(s) if s.appends < MAX_APPENDS && s.len < SEGMENT_BYTES => {
                    work.segments.len() - 1
                }
                _ => {
                    work.segments.push(Segment::default());
                    work.segments.len() - 1
                }
            };
            let seg = work.segments[open];
            // At least one frame per append; more while the segment stays under its size.
            let mut bytes: Vec<u8> = Vec::new();
            let mut j = i;
            while j < fresh.len()
                && (j == i || seg.len + (bytes.len() + fresh[j].1.len()) as u64 <= SEGMENT_BYTES)
            {
                let f = &mut work.frames[first + j];
                f.seg = open as u32;
                f.offset = seg.len + bytes.len() as u64;
                bytes.extend_from_slice(&fresh[j].1);
                j += 1;
            }
            let name = segment_name(key, open as u32);
            if seg.appends == 0 {
                self.fs.put(&name, 0, &bytes)?;
            } else {
                self.fs.append(&name, &bytes)?;
            }
            let grown = Segment {
                appends: seg.appends + 1,
                len: seg.len + bytes.len() as u64,
            };
            work.segments[open] = grown;
            match delta.segments.iter_mut().find(|(n, _)| *n == open as u32) {
                Some(s) => s.1 = grown,
                None => delta.segments.push((open as u32, grown)),
            }
            i = j;
        }
        delta.frames = work.frames[first..].to_vec();
        Ok(())
    }

    /// Writes what a run changed: a delta appended to the map log, or the whole map as a new
    /// snapshot when the log is new or its inode is full.
    pub(crate) fn write_map_v2(&mut self, key: &[u8], map: &Map, delta: &Delta) -> Result<()> {
        let name = map_name(key);
        let stat = self.fs.stat(&name)?;
        let record = delta.record();
        let fits = |lsize: u64| lsize.saturating_add(record.len() as u64) <= MAX_MAP;
        if stat
            .as_ref()
            .is_some_and(|s| s.data_entries < u64::from(MAX_APPENDS) && fits(s.size))
        {
            self.fs.append(&name, &record)?;
            return Ok(());
        }
        if map.units {
            if let Some(stat) = &stat {
                if self.map_into_part(key, &name, stat.size, &record)? {
                    return Ok(());
                }
            }
        }
        // Encoded only when written: a long title's map is large, and most runs append.
        let snapshot = map.snapshot_record();
        // A map past its reader's limit could not be read back: refused before it is written.
        if snapshot.len() as u64 > MAX_MAP {
            return Err(Error::invalid(format!(
                "the archive map of {:?} would take {} bytes, over the {MAX_MAP} a map may",
                String::from_utf8_lossy(key),
                snapshot.len()
            )));
        }
        // Format 3: the parts the map file names, which the snapshot replaces.
        let parts = match map.units {
            true => self
                .fs
                .read_located_within(&name, MAX_MAP)?
                .map_or(0, |(_, head)| map::log_parts(&head)),
            false => 0,
        };
        self.fs.put(&name, 0, &snapshot)?;
        // The snapshot holds what the parts did: they go (their bytes until a rewrite).
        for i in 1..=parts {
            self.fs.delete(&part_name(key, i))?;
        }
        Ok(())
    }

    /// Format 3, the map file `name` full: its records (after its parts record) become the next
    /// part file, and the map file is written anew as a parts record and `record`, so that a
    /// run rewrites a few records instead of the whole map. `false` when the map already spans
    /// [`map::MAX_PARTS`] parts or would pass [`MAX_MAP`]: then it is rewritten as a snapshot.
    fn map_into_part(&mut self, key: &[u8], name: &[u8], size: u64, record: &[u8]) -> Result<bool> {
        let Some((_, head)) = self.fs.read_located_within(name, MAX_MAP)? else {
            return Ok(false);
        };
        let parts = map::log_parts(&head);
        if parts >= map::MAX_PARTS {
            return Ok(false);
        }
        let mut total = size + record.len() as u64 + 14;
        for i in 1..=parts {
            total += self.fs.stat(&part_name(key, i))?.map_or(0, |s| s.size);
        }
        if total > MAX_MAP {
            return Ok(false);
        }
        self.fs
            .put(&part_name(key, parts + 1), 0, map::after_parts(&head))?;
        self.fs.put(
            name,
            0,
            &[map::parts_record(parts + 1), record.to_vec()].concat(),
        )?;
        Ok(true)
    }

    /// Marks revisions of a v2 title taken down.
    pub(crate) fn take_down_v2(
        &mut self,
        key: &[u8],
        mut map: Map,
        rev: Option<u64>,
    ) -> Result<usize> {
        let down = super::map::to_take_down(&map.entries, rev);
        if down.is_empty() {
            return Ok(0);
        }
        let delta = Delta {
            first_frame: map.frames.len() as u32,
            down: down.clone(),
            ..Delta::default()
        };
        map.apply(&delta)
            .map_err(|what| Error::invalid(format!("archive: {what}")))?;
        self.write_map_v2(key, &map, &delta)?;
        Ok(down.len())
    }

    /// Every frame of a v2 title decoded and checked, every segment's length against its file,
    /// every readable entry against its frame.
    pub(crate) fn verify_v2(&self, key: &[u8], map: &Map) -> Result<()> {
        for (n, seg) in map.segments.iter().enumerate() {
            let name = segment_name(key, n as u32);
            let size = self.fs.stat(&name)?.map(|s| s.size);
            if size != Some(seg.len) {
                return Err(Error::corrupt(
                    self.fs.data().path(),
                    0,
                    format!(
                        "archive segment {} of title {:?}",
                        String::from_utf8_lossy(&name),
                        String::from_utf8_lossy(key)
                    ),
                    format!("{} bytes", seg.len),
                    format!("{size:?}"),
                ));
            }
        }
        self.each_frame(key, map, |_, _| Ok(()))?;
        for e in map.entries.iter().filter(|e| !e.taken_down) {
            let f = map.frames.get(e.block as usize);
            if f.is_none_or(|f| f.crc != e.crc || u64::from(f.raw) != e.len) {
                return Err(self.damaged_frame(
                    key,
                    map,
                    e.block as usize,
                    "an entry unlike its frame",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
