//! The title record: everything the store knows about one (domain, title), kept as one file of the
//! meta filesys and rewritten whole on every change.
//!
//! | field            | size      | meaning                                                  |
//! |------------------|-----------|----------------------------------------------------------|
//! | magic            | 4         | `WTR3` when a render has labels, else `WTR2` (`WTR1`: no |
//! |                  |           | key field, flags bit 2 read as set)                      |
//! | key_len          | 2         | the record's own name `DOMAIN/TITLE`, then its bytes     |
//! | flags            | 1         | bit 0: the whole title is taken down; bit 1: the archive |
//! |                  |           | holds revisions of the title; bit 2: not known whether   |
//! |                  |           | it does (a record first written as `WTR1`)               |
//! | n_down           | 4         | revisions taken down, then n_down × rev (8)              |
//! | n_types          | 2         | content types, then n_types × (len (2), UTF-8 bytes);    |
//! |                  |           | `WTR3`: a type with labels is `TYPE NUL ENC NUL LANG`    |
//! | n_renders        | 4         | renders, newest first (revision, then tid precedence)    |
//! | render           | 75 each   | see below                                                |
//! | crc              | 4         | CRC-32 of every byte before it                           |
//!
//! Render: rev (8), tid (16), flags (1; bit 0 historical), type index (2), container (4), value
//! offset (8), value length (8), value CRC-32 (4), arrival (8), superseded (8), pushed out (8);
//! the last two are `i64::MIN` when not stamped. All integers big-endian. A render's labels
//! (content encoding and language, [`Labels`]) are in its type's string: `WTR3` is `WTR2` whose
//! type strings may carry them, written only when one does, so stores without labels stay
//! readable by every earlier reader of `WTR2`.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use uuid::Uuid;

use super::key::{cmp_tid, tid_unix_secs};
use super::labels::Labels;
use super::policy::{ArchivePolicy, Policy, Renders, Stamps};
use crate::error::{Error, Result};
use crate::format::bytes::ByteReader;

/// The first four bytes of a title record of the current layout (docs/FORMAT.md).
pub const MAGIC: &[u8; 4] = b"WTR2";
/// A record some of whose renders carry labels: [`MAGIC`]'s layout, the labels in the type
/// strings ([`Labels`]).
pub const MAGIC_V3: &[u8; 4] = b"WTR3";
/// Records written before the key and the archive flag were kept in them; still read.
pub const MAGIC_V1: &[u8; 4] = b"WTR1";
/// The longest record name: a domain, `/` and a title (see [`super::key`]), well within.
const MAX_KEY: usize = u16::MAX as usize;
const RENDER_SIZE: usize = 75;
const NONE: i64 = i64::MIN;

/// Where a value lives, and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Container number.
    pub container: u32,
    /// Byte offset of the value in the container's datafile.
    pub offset: u64,
    /// Length of the value, bytes.
    pub len: u64,
    /// CRC-32 of the value.
    pub crc: u32,
}

impl Location {
    /// Checks `value`, read from this location of the container datafile at `path`, against the
    /// CRC-32 the record keeps: damaged bytes are an error naming file and offset, never returned.
    pub fn verify(&self, path: &Path, value: &[u8]) -> Result<()> {
        let crc = crc32fast::hash(value);
        if crc == self.crc {
            return Ok(());
        }
        Err(Error::corrupt(
            path,
            self.offset,
            "value checksum (CRC-32)",
            format!("0x{:08x}", self.crc),
            format!("0x{crc:08x}"),
        ))
    }
}

/// One stored render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Render {
    /// Revision number.
    pub rev: u64,
    /// Render id (a version-1 UUID).
    pub tid: Uuid,
    /// Content type, as put: shared by the renders of a record that have the same one (decoding
    /// a record clones it per render).
    pub content_type: Arc<str>,
    /// Content encoding and language, as put.
    pub labels: Labels,
    /// Where the value lives, and its CRC-32.
    pub location: Location,
    /// The times its retention deadlines count from.
    pub stamps: Stamps,
}

impl Render {
    /// Newest first: revision, then tid precedence.
    fn precedes(&self, other: &Render) -> std::cmp::Ordering {
        other
            .rev
            .cmp(&self.rev)
            .then_with(|| cmp_tid(other.tid, self.tid))
    }
}

/// Why a put cannot be taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The title, or this revision of it, is taken down.
    TakenDown,
    /// A historical put of a revision newer than the current one.
    HistoricalNewerThanCurrent {
        /// The current revision.
        current: u64,
    },
}

/// All renders and take-downs of one title.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TitleRecord {
    /// The whole title is taken down: nothing of it is returned or taken.
    pub title_down: bool,
    /// Revisions taken down.
    pub revs_down: BTreeSet<u64>,
    /// Newest first.
    pub renders: Vec<Render>,
    /// What the record knows of the title in the archive: reads look there only on this
    /// evidence, never because a record could not be found.
    pub archive: InArchive,
}

/// Whether the archive holds revisions of a title, as its record says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InArchive {
    /// Nothing of the title was archived: reads never look there.
    #[default]
    No,
    /// An archive run moved revisions of the title there (never cleared): its map must exist.
    Yes,
    /// A record written before records said (`WTR1`): reads look, and take no map for none.
    Unknown,
}

impl TitleRecord {
    /// The current revision: the newest non-historical revision readable at `now`.
    pub fn current_rev(&self, policy: &Policy, now: i64) -> Option<u64> {
        self.renders
            .iter()
            .find(|r| !r.stamps.historical && policy.readable(&r.stamps, now))
            .map(|r| r.rev)
    }

    /// Whether a put of `rev` may be taken.
    pub fn check_put(
        &self,
        rev: u64,
        historical: bool,
        policy: &Policy,
        now: i64,
    ) -> std::result::Result<(), Refusal> {
        if self.title_down || self.revs_down.contains(&rev) {
            return Err(Refusal::TakenDown);
        }
        if historical {
            if let Some(current) = self.current_rev(policy, now) {
                if rev > current {
                    return Err(Refusal::HistoricalNewerThanCurrent { current });
                }
            }
        }
        Ok(())
    }

    /// Adds a render (or rewrites the same revision and tid) at `now`, stamping the events it
    /// causes. Returns the location of the value it replaced, if any.
    pub fn put(&mut self, render: Render, policy: &Policy, now: i64) -> Option<Location> {
        let historical = render.stamps.historical;
        let (rev, tid) = (render.rev, render.tid);
        let existing = self
            .renders
            .iter()
            .position(|r| r.rev == rev && r.tid == tid);
        // The first render of a revision to arrive stays first through rewrites.
        let first = match existing {
            Some(i) => self.renders[i].stamps.first,
            None => {
                !historical
                    && !self
                        .renders
                        .iter()
                        .any(|r| r.rev == rev && !r.stamps.historical)
            }
        };
        let fresh = Render {
            stamps: Stamps {
                arrival: now,
                superseded: None,
                pushed_out: None,
                historical,
                first,
            },
            ..render
        };
        let replaced = match existing {
            Some(i) => Some(std::mem::replace(&mut self.renders[i], fresh).location),
            None => {
                let at = self.renders.partition_point(|r| r.precedes(&fresh).is_lt());
                self.renders.insert(at, fresh);
                None
            }
        };
        if !historical {
            // Only a newer revision still readable supersedes a late arrival: one that expired
            // may or may not have been culled yet, and culling must not change what reads return.
            let newer_exists = self
                .renders
                .iter()
                .any(|r| !r.stamps.historical && r.rev > rev && policy.readable(&r.stamps, now));
            for r in self.renders.iter_mut().filter(|r| !r.stamps.historical) {
                if r.rev < rev && r.stamps.superseded.is_none() {
                    r.stamps.superseded = Some(now);
                }
                if r.rev == rev && r.tid == tid && newer_exists {
                    r.stamps.superseded = Some(now);
                }
            }
            self.push_out(rev, policy, now);
        }
        replaced
    }

    /// Stamps renders of `rev` that fell out of the kept set.
    fn push_out(&mut self, rev: u64, policy: &Policy, now: i64) {
        let (count, bucket_secs) = match policy.renders {
            Renders::Latest { count, .. } => (count as usize, None),
            Renders::Interval { secs, count, .. } => (count as usize, Some(secs)),
            Renders::All | Renders::Ttl { .. } => return,
        };
        let bucket = |tid: Uuid| bucket_secs.map(|s| tid_unix_secs(tid).div_euclid(s));
        let mut seen: Vec<(Option<i64>, usize)> = Vec::new();
        // Renders are newest first, so the first `count` readable ones met per bucket are the kept
        // ones. An expired render holds no place: it may or may not have been culled yet.
        for r in self
            .renders
            .iter_mut()
            .filter(|r| r.rev == rev && !r.stamps.historical && policy.readable(&r.stamps, now))
        {
            let b = bucket(r.tid);
            let n = match seen.iter_mut().find(|(k, _)| *k == b) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    seen.push((b, 1));
                    1
                }
            };
            if n > count && r.stamps.pushed_out.is_none() {
                r.stamps.pushed_out = Some(now);
            }
        }
    }

    /// Drops renders past their deadline; returns them.
    pub fn cull(&mut self, policy: &Policy, now: i64) -> Vec<Render> {
        self.cull_keeping(policy, now, None)
    }

    /// Drops renders past their deadline, except the archive's candidates (which stay until they
    /// are archived); returns the renders dropped.
    pub fn cull_keeping(
        &mut self,
        policy: &Policy,
        now: i64,
        archive: Option<ArchivePolicy>,
    ) -> Vec<Render> {
        let keep_set = archive.map(|a| self.candidates(a)).unwrap_or_default();
        let (keep, gone): (Vec<Render>, Vec<Render>) = std::mem::take(&mut self.renders)
            .into_iter()
            .partition(|r| policy.readable(&r.stamps, now) || keep_set.contains(&(r.rev, r.tid)));
        self.renders = keep;
        gone
    }

    /// The renders the archive will keep, per revision, by its policy: (rev, tid) pairs.
    pub fn candidates(&self, archive: ArchivePolicy) -> Vec<(u64, Uuid)> {
        let mut out = Vec::new();
        let mut revs: Vec<u64> = self
            .renders
            .iter()
            .filter(|r| !r.stamps.historical)
            .map(|r| r.rev)
            .collect();
        revs.dedup();
        for rev in revs {
            // Renders are newest first; the oldest-first walk is the reverse.
            let of_rev: Vec<&Render> = self
                .renders
                .iter()
                .filter(|r| r.rev == rev && !r.stamps.historical)
                .collect();
            match archive {
                ArchivePolicy::First => out.extend(
                    of_rev
                        .iter()
                        .filter(|r| r.stamps.first)
                        .map(|r| (r.rev, r.tid)),
                ),
                ArchivePolicy::Newest => out.extend(of_rev.first().map(|r| (r.rev, r.tid))),
                ArchivePolicy::Every { secs } => {
                    let mut last: Option<i64> = None;
                    for r in of_rev.iter().rev() {
                        let t = tid_unix_secs(r.tid);
                        if last.is_none_or(|l| t >= l.saturating_add(secs)) {
                            out.push((r.rev, r.tid));
                            last = Some(t);
                        }
                    }
                }
            }
        }
        out
    }

    /// Takes a revision down (or the whole title with `None`); returns the renders removed.
    pub fn take_down(&mut self, rev: Option<u64>) -> Vec<Render> {
        match rev {
            Some(rev) => {
                self.revs_down.insert(rev);
                let (gone, keep) = std::mem::take(&mut self.renders)
                    .into_iter()
                    .partition(|r| r.rev == rev);
                self.renders = keep;
                gone
            }
            None => {
                self.title_down = true;
                std::mem::take(&mut self.renders)
            }
        }
    }

    /// Lifts a take-down; returns false when there was none.
    pub fn lift(&mut self, rev: Option<u64>) -> bool {
        match rev {
            Some(rev) => self.revs_down.remove(&rev),
            None => std::mem::replace(&mut self.title_down, false),
        }
    }

    /// True when the record holds nothing worth keeping.
    /// A record that says the archive may hold revisions is kept: without it, a read could not
    /// tell an archived title from a record lost to damage.
    pub fn is_empty(&self) -> bool {
        !self.title_down
            && self.revs_down.is_empty()
            && self.renders.is_empty()
            && self.archive == InArchive::No
    }

    /// The record's bytes, under the name `key` (`DOMAIN/TITLE`) it is stored as.
    pub fn encode(&self, key: &[u8]) -> Vec<u8> {
        // Each render's type string: its content type, and its labels when it has any.
        let strings: Vec<std::borrow::Cow<'_, str>> = self
            .renders
            .iter()
            .map(|r| r.labels.join(&r.content_type))
            .collect();
        let mut types: Vec<&str> = Vec::new();
        for t in &strings {
            if !types.contains(&t.as_ref()) {
                types.push(t);
            }
        }
        let labelled = self.renders.iter().any(|r| !r.labels.is_none());
        let mut out = Vec::with_capacity(16 + key.len() + self.renders.len() * RENDER_SIZE);
        out.extend_from_slice(if labelled { MAGIC_V3 } else { MAGIC });
        // Record names are bounded far below this by the key checks; a longer one is cut rather
        // than let the length wrap (a decode then names the mismatch).
        let key = &key[..key.len().min(MAX_KEY)];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.extend_from_slice(key);
        let archive = match self.archive {
            InArchive::No => 0,
            InArchive::Yes => 2,
            InArchive::Unknown => 4,
        };
        out.push(u8::from(self.title_down) | archive);
        out.extend_from_slice(&(self.revs_down.len() as u32).to_be_bytes());
        for rev in &self.revs_down {
            out.extend_from_slice(&rev.to_be_bytes());
        }
        out.extend_from_slice(&(types.len() as u16).to_be_bytes());
        for t in &types {
            out.extend_from_slice(&(t.len() as u16).to_be_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        out.extend_from_slice(&(self.renders.len() as u32).to_be_bytes());
        for (r, t) in self.renders.iter().zip(&strings) {
            let type_index = types.iter().position(|s| *s == t.as_ref()).unwrap_or(0) as u16;
            out.extend_from_slice(&r.rev.to_be_bytes());
            out.extend_from_slice(r.tid.as_bytes());
            out.push(u8::from(r.stamps.historical) | (u8::from(r.stamps.first) << 1));
            out.extend_from_slice(&type_index.to_be_bytes());
            out.extend_from_slice(&r.location.container.to_be_bytes());
            out.extend_from_slice(&r.location.offset.to_be_bytes());
            out.extend_from_slice(&r.location.len.to_be_bytes());
            out.extend_from_slice(&r.location.crc.to_be_bytes());
            for t in [
                Some(r.stamps.arrival),
                r.stamps.superseded,
                r.stamps.pushed_out,
            ] {
                out.extend_from_slice(&t.unwrap_or(NONE).to_be_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes the record stored under the name `key`, read from `path`, whose bytes start at
    /// `offset` there (for messages). A record that names another key is damage: the name it
    /// was found under (an inode's key, an index cell) is wrong, and its renders are not this
    /// title's.
    pub fn decode(bytes: &[u8], key: &[u8], path: &Path, offset: u64) -> Result<TitleRecord> {
        let (own, rec) = TitleRecord::decode_any(bytes, path, offset)?;
        match own {
            Some(own) if own != key => Err(Error::corrupt(
                path,
                offset + 6,
                "title record key",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&own),
            )),
            _ => Ok(rec),
        }
    }

    /// Decodes a record whatever name it was found under; returns the key it names (`None`
    /// for a `WTR1` record, which keeps none) beside it.
    pub fn decode_any(
        bytes: &[u8],
        path: &Path,
        offset: u64,
    ) -> Result<(Option<Vec<u8>>, TitleRecord)> {
        let bad = |at: usize, what: &str| {
            Error::corrupt(
                path,
                offset + at as u64,
                format!("title record: {what}"),
                "a well-formed record",
                "damage",
            )
        };
        let v1 = bytes.get(..4) == Some(MAGIC_V1.as_slice());
        let v3 = bytes.get(..4) == Some(MAGIC_V3.as_slice());
        if bytes.len() < 8 || !(v1 || v3 || &bytes[..4] == MAGIC) {
            return Err(bad(0, "magic"));
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_be_bytes(tail.try_into().expect("4 bytes"));
        // The checksum covers every field; nothing is trusted before it holds.
        if crc32fast::hash(body) != stored {
            return Err(bad(body.len(), "CRC-32"));
        }
        let mut r = ByteReader::new(body, 4).in_file(path, offset, "title record");
        let key = if v1 {
            None
        } else {
            let len = r.u16()? as usize;
            Some(r.take(len)?.to_vec())
        };
        let flags = r.take(1)?[0];
        let mut rec = TitleRecord {
            title_down: flags & 1 == 1,
            archive: match (v1, flags & 6) {
                (true, _) | (false, 4) => InArchive::Unknown,
                (false, 2) => InArchive::Yes,
                (false, 0) => InArchive::No,
                _ => return Err(bad(r.pos - 1, "archive flags")),
            },
            ..TitleRecord::default()
        };
        for _ in 0..r.u32()? {
            rec.revs_down.insert(r.u64()?);
        }
        let mut types = Vec::new();
        for _ in 0..r.u16()? {
            let len = r.u16()? as usize;
            let text = std::str::from_utf8(r.take(len)?)
                .map_err(|_| bad(r.pos, "content type is not UTF-8"))?;
            let (content_type, labels) = if v3 {
                Labels::split(text).map_err(|what| bad(r.pos, what))?
            } else if text.contains('\0') {
                // No content type holds one (the store refuses control characters): a record
                // read with one could not be written back unambiguously beside labels.
                return Err(bad(r.pos, "content type holds a NUL"));
            } else {
                (text.to_string(), Labels::NONE)
            };
            types.push((Arc::<str>::from(content_type), labels));
        }
        let n = r.u32()? as usize;
        // Bounded by the bytes actually present, not by the count field.
        if n > (body.len() - r.pos) / RENDER_SIZE {
            return Err(bad(r.pos, "render count"));
        }
        rec.renders.reserve_exact(n);
        for _ in 0..n {
            let at = r.pos;
            let rev = r.u64()?;
            let tid = Uuid::from_slice(r.take(16)?).map_err(|_| bad(at, "tid"))?;
            let flags = r.take(1)?[0];
            let type_index = r.u16()? as usize;
            let (content_type, labels) = types
                .get(type_index)
                .cloned()
                .ok_or_else(|| bad(at, "content type index"))?;
            let container = r.u32()?;
            let (off, len, crc) = (r.u64()?, r.u64()?, r.u32()?);
            let mut times = [0i64; 3];
            for t in &mut times {
                *t = r.u64()? as i64;
            }
            let opt = |t: i64| (t != NONE).then_some(t);
            rec.renders.push(Render {
                rev,
                tid,
                content_type,
                labels,
                location: Location {
                    container,
                    offset: off,
                    len,
                    crc,
                },
                stamps: Stamps {
                    arrival: times[0],
                    superseded: opt(times[1]),
                    pushed_out: opt(times[2]),
                    historical: flags & 1 == 1,
                    first: flags & 2 == 2,
                },
            });
        }
        if r.pos != body.len() {
            return Err(bad(r.pos, "trailing bytes"));
        }
        Ok((key, rec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key::TidMaker;

    fn render(rev: u64, tid: Uuid) -> Render {
        Render {
            rev,
            tid,
            content_type: "text/html".into(),
            labels: Labels::NONE,
            location: Location {
                container: 1,
                offset: 4096,
                len: 10,
                crc: 7,
            },
            stamps: Stamps::default(),
        }
    }

    #[test]
    fn precedence_never_depends_on_write_order() {
        let maker = TidMaker::new();
        let tids: Vec<Uuid> = (0..4).map(|i| maker.make(1000 + i)).collect();
        let p = Policy {
            renders: Renders::All,
            ..Policy::default()
        };
        let mut a = TitleRecord::default();
        let mut b = TitleRecord::default();
        let puts = [(2, tids[0]), (3, tids[1]), (3, tids[2]), (1, tids[3])];
        for (i, (rev, tid)) in puts.iter().enumerate() {
            a.put(render(*rev, *tid), &p, i as i64);
        }
        for (i, (rev, tid)) in puts.iter().rev().enumerate() {
            b.put(render(*rev, *tid), &p, i as i64);
        }
        let order = |r: &TitleRecord| r.renders.iter().map(|x| (x.rev, x.tid)).collect::<Vec<_>>();
        assert_eq!(order(&a), order(&b));
        assert_eq!(order(&a)[0], (3, tids[2]));
    }

    #[test]
    fn stamps_and_roundtrip() {
        let maker = TidMaker::new();
        let p = Policy::default();
        let mut rec = TitleRecord::default();
        let (t1, t2, t3) = (maker.make(10), maker.make(20), maker.make(30));
        rec.put(render(1, t1), &p, 100);
        rec.put(render(1, t2), &p, 110); // pushes t1 out (latest:1)
        rec.put(render(2, t3), &p, 120); // supersedes revision 1
        let r1 = rec.renders.iter().find(|r| r.tid == t1).unwrap();
        assert_eq!(r1.stamps.pushed_out, Some(110));
        assert_eq!(r1.stamps.superseded, Some(120));
        let late = crate::store::key::tid_at(5, 0, [1; 6]); // an older tid, arriving last
        rec.put(render(1, late), &p, 130); // arrives outside the kept set and after a newer rev
        let l = rec.renders.iter().find(|r| r.tid == late).unwrap();
        assert_eq!(
            (l.stamps.pushed_out, l.stamps.superseded),
            (Some(130), Some(130))
        );
        rec.take_down(Some(7));
        let bytes = rec.encode(b"d/T");
        assert_eq!(
            TitleRecord::decode(&bytes, b"d/T", Path::new("m"), 0).unwrap(),
            rec
        );
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                TitleRecord::decode(&bad, b"d/T", Path::new("m"), 0).is_err(),
                "flip at {i}"
            );
        }
        assert!(TitleRecord::decode(&bytes[..bytes.len() - 1], b"d/T", Path::new("m"), 0).is_err());
    }

    #[test]
    fn a_record_found_under_another_name_is_damage() {
        let mut rec = TitleRecord::default();
        rec.put(render(1, TidMaker::new().make(10)), &Policy::default(), 100);
        let bytes = rec.encode(b"d/Apple");
        let e = TitleRecord::decode(&bytes, b"d/Apply", Path::new("m"), 4096).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("m: corrupt at byte 4102") && text.contains("d/Apple"),
            "{text}"
        );
        assert_eq!(e.exit_code(), 3);
    }

    #[test]
    fn a_v1_record_reads_with_the_archive_flag_set() {
        let mut rec = TitleRecord::default();
        rec.put(render(4, TidMaker::new().make(10)), &Policy::default(), 100);
        // A v1 record is a v2 record without the key field, under the old magic.
        let v2 = rec.encode(b"");
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&v2[6..v2.len() - 4]);
        let crc = crc32fast::hash(&v1);
        v1.extend_from_slice(&crc.to_be_bytes());
        let (key, back) = TitleRecord::decode_any(&v1, Path::new("m"), 0).unwrap();
        assert_eq!(key, None);
        assert_eq!(
            (back.archive, rec.archive),
            (InArchive::Unknown, InArchive::No)
        );
        // Written again, it stays unknown.
        let again = back.encode(b"d/Any");
        let (_, again) = TitleRecord::decode_any(&again, Path::new("m"), 0).unwrap();
        assert_eq!(again, back);
        assert_eq!(back.renders, rec.renders);
        // Any name will do for a record that keeps none.
        assert!(TitleRecord::decode(&v1, b"d/Any", Path::new("m"), 0).is_ok());
    }

    fn labelled(rev: u64, tid: Uuid, e: Option<&str>, l: Option<&str>) -> Render {
        Render {
            labels: Labels {
                encoding: e.map(str::to_string),
                language: l.map(str::to_string),
            },
            ..render(rev, tid)
        }
    }

    #[test]
    fn labels_round_trip_under_their_own_magic() {
        let maker = TidMaker::new();
        let p = Policy {
            renders: Renders::All,
            ..Policy::default()
        };
        let mut rec = TitleRecord::default();
        rec.put(render(1, maker.make(10)), &p, 100);
        let plain = rec.encode(b"d/T");
        assert_eq!(
            &plain[..4],
            MAGIC,
            "no labels: the layout earlier readers know"
        );
        rec.put(
            labelled(2, maker.make(20), Some("gzip"), Some("de")),
            &p,
            110,
        );
        rec.put(
            labelled(3, maker.make(30), None, Some("en-GB, fr")),
            &p,
            120,
        );
        rec.put(labelled(4, maker.make(40), Some("br"), None), &p, 130);
        let bytes = rec.encode(b"d/T");
        assert_eq!(&bytes[..4], MAGIC_V3);
        let back = TitleRecord::decode(&bytes, b"d/T", Path::new("m"), 0).unwrap();
        assert_eq!(back, rec);
        assert_eq!(back.renders[2].labels.encoding.as_deref(), Some("gzip"));
        assert_eq!(back.renders[2].labels.language.as_deref(), Some("de"));
        // Labels are checked as read: a table string the encoder could not have written is
        // damage, named at its place (CRC fixed up, as a writer with a bug would have).
        let at = bytes.windows(4).position(|w| w == b"gzip").unwrap();
        let mut bad = bytes.clone();
        bad[at + 2] = b' ';
        let n = bad.len() - 4;
        let crc = crc32fast::hash(&bad[..n]);
        bad[n..].copy_from_slice(&crc.to_be_bytes());
        let e = TitleRecord::decode(&bad, b"d/T", Path::new("m"), 0).unwrap_err();
        assert!(e.to_string().contains("labels"), "{e}");
        // The same bytes under the old magic are damage, not labels: only WTR3 splits, and no
        // content type holds a NUL.
        let mut old = bytes.clone();
        old[..4].copy_from_slice(MAGIC);
        let crc = crc32fast::hash(&old[..n]);
        old[n..].copy_from_slice(&crc.to_be_bytes());
        let e = TitleRecord::decode(&old, b"d/T", Path::new("m"), 0).unwrap_err();
        assert!(e.to_string().contains("NUL"), "{e}");
    }

    #[test]
    fn a_record_of_the_old_layout_reads_without_labels() {
        // A WTR2 record written field by field as docs/FORMAT.md gives it, before labels.
        let tid = TidMaker::new().make(10);
        let mut b = b"WTR2".to_vec();
        b.extend_from_slice(&3u16.to_be_bytes());
        b.extend_from_slice(b"d/T");
        b.push(0); // flags
        b.extend_from_slice(&0u32.to_be_bytes()); // no take-downs
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&9u16.to_be_bytes());
        b.extend_from_slice(b"text/html");
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&5u64.to_be_bytes()); // rev
        b.extend_from_slice(tid.as_bytes());
        b.push(2); // first
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes()); // container
        b.extend_from_slice(&4096u64.to_be_bytes());
        b.extend_from_slice(&10u64.to_be_bytes());
        b.extend_from_slice(&7u32.to_be_bytes());
        for t in [100, NONE, NONE] {
            b.extend_from_slice(&t.to_be_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        let rec = TitleRecord::decode(&b, b"d/T", Path::new("m"), 0).unwrap();
        assert_eq!(rec.renders.len(), 1);
        let r = &rec.renders[0];
        assert_eq!((r.rev, r.tid, &*r.content_type), (5, tid, "text/html"));
        assert_eq!(r.labels, Labels::NONE);
        // Written again unchanged, it is the same bytes: no labels, no new layout.
        assert_eq!(rec.encode(b"d/T"), b);
    }

    proptest::proptest! {
        #[test]
        fn records_with_labels_round_trip(
            renders in proptest::collection::vec(
                (
                    0u64..5,
                    0i64..1000,
                    "[a-z/+]{1,12}",
                    proptest::option::of("(gzip|br|deflate|x-[a-z]{1,8})"),
                    proptest::option::of("[a-z]{2}(-[A-Z]{2})?(, [a-z]{2})?"),
                ),
                0..12,
            ),
            down in proptest::collection::btree_set(0u64..9, 0..3),
        ) {
            let p = Policy { renders: Renders::All, ..Policy::default() };
            let mut rec = TitleRecord { revs_down: down, ..TitleRecord::default() };
            for (i, (rev, secs, ct, e, l)) in renders.into_iter().enumerate() {
                let tid = crate::store::key::tid_at(secs, i as u16, [1; 6]);
                let r = Render {
                    content_type: ct.into(),
                    labels: Labels { encoding: e, language: l },
                    ..render(rev, tid)
                };
                rec.put(r, &p, i as i64);
            }
            let bytes = rec.encode(b"d/T");
            let labelled = rec.renders.iter().any(|r| !r.labels.is_none());
            proptest::prop_assert_eq!(&bytes[..4], if labelled { MAGIC_V3 } else { MAGIC });
            let back = TitleRecord::decode(&bytes, b"d/T", Path::new("m"), 0).unwrap();
            proptest::prop_assert_eq!(back, rec);
        }
    }
}
