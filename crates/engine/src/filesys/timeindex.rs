//! The time index `BASE.time` of an ao filesys: a kvseq of time marks.
//!
//! | entry field | repr          | meaning                                               |
//! |-------------|---------------|-------------------------------------------------------|
//! | key         | KEYREPR 12    | period start `mtime − mtime mod TIMEMP` (int64)        |
//! | value       | VALREPR 12    | kv_pointer of the first inode of that period (int64)   |
//!
//! Superblock variables: TIMEMP (period, seconds), TIMEMARK (last mark), TIMEMN (files appended
//! since the last mark, the marking file included), LASTMT (mtime of the last file). A mark is
//! written when a file's mtime falls in a later period than TIMEMARK, or there is no mark yet.
//! Marks are fixed-size entries in ascending order, so seeking is a binary search.

use crate::error::{Error, Result};
use crate::format::kvseq::{KvPointer, KvSeq, KvSeqOptions};
use crate::format::repr::Repr;
use crate::format::superblock::{Purpose, VarName};
use crate::storage::{read_exact_at, Storage};

/// Superblock variable: the period of the marks, seconds.
pub const TIMEMP: VarName = VarName::new(b"TIMEMP");
/// Superblock variable: the period start of the last mark.
pub const TIMEMARK: VarName = VarName::new(b"TIMEMARK");
/// Superblock variable: files appended since the last mark, the marking file included.
pub const TIMEMN: VarName = VarName::new(b"TIMEMN");
/// Superblock variable: the mtime of the last file, seconds since the epoch.
pub const LASTMT: VarName = VarName::new(b"LASTMT");
/// PURPOSE of a time index.
pub const PURPOSE: Purpose = Purpose(*b"FSYSTIME");
const INT64: Repr = Repr::Fixed { len: 8 };

/// Settings for a new time index.
pub fn options(base: &KvSeqOptions, timemp: i64) -> KvSeqOptions {
    KvSeqOptions {
        purpose: PURPOSE,
        keyrepr: INT64,
        valrepr: INT64,
        delflag: false,
        align: 0,
        fileincr: 4096,
        extra: vec![(TIMEMP, timemp), (TIMEMN, 0)],
        ..base.clone()
    }
}

/// An open time index.
#[derive(Debug)]
pub struct TimeIndex {
    kv: KvSeq,
    timemp: i64,
    entry_size: u64,
}

impl TimeIndex {
    /// Wraps an opened timefile, checking its shape.
    pub fn new(kv: KvSeq) -> Result<TimeIndex> {
        let path = kv.path().to_path_buf();
        let at = |name| kv.superblock().value_offset(name).unwrap_or(0);
        if kv.keyrepr() != INT64 || kv.valrepr() != INT64 {
            return Err(Error::corrupt(
                &path,
                at(crate::format::superblock::var::KEYREPR),
                "timefile representations",
                "KEYREPR 12 and VALREPR 12",
                format!("{} and {}", kv.keyrepr().code(), kv.valrepr().code()),
            ));
        }
        let timemp = kv.var(TIMEMP).unwrap_or(0);
        // TIMEMP is a divisor of every mtime.
        if timemp <= 0 {
            return Err(Error::corrupt(&path, at(TIMEMP), "TIMEMP", "≥ 1", timemp));
        }
        let entry_size = u64::from(kv.has_delflag()) + 16;
        let body = kv.filesize().saturating_sub(kv.first().0);
        if kv.filesize() > kv.first().0 && body % entry_size != 0 {
            return Err(Error::corrupt(
                &path,
                kv.first().0,
                "timefile entries",
                format!("a multiple of {entry_size} bytes"),
                format!("{body} bytes"),
            ));
        }
        Ok(TimeIndex {
            kv,
            timemp,
            entry_size,
        })
    }

    /// The timefile's kvseq.
    pub fn kv(&self) -> &KvSeq {
        &self.kv
    }

    /// The timefile's kvseq, to stage its writes and sync.
    pub fn kv_mut(&mut self) -> &mut KvSeq {
        &mut self.kv
    }

    /// TIMEMP: the period of the marks, seconds.
    pub fn timemp(&self) -> i64 {
        self.timemp
    }

    /// The mtime a file created `now` gets: never below the last one.
    pub fn mtime_for(&self, now: i64) -> i64 {
        self.kv.var(LASTMT).map_or(now, |last| now.max(last))
    }

    /// The start of the period holding `mtime`.
    pub fn period(&self, mtime: i64) -> i64 {
        mtime - mtime.rem_euclid(self.timemp)
    }

    /// Records a new file with `mtime` whose inode is at `inode`.
    pub fn record(&mut self, mtime: i64, inode: KvPointer) -> Result<()> {
        let period = self.period(mtime);
        let mark = self.kv.var(TIMEMARK);
        if mark.is_none_or(|m| period > m) {
            self.kv
                .append(&period.to_be_bytes(), &(inode.0 as i64).to_be_bytes())?;
            self.kv.set_var(TIMEMARK, period)?;
            self.kv.set_var(TIMEMN, 1)?;
        } else {
            let n = self.kv.var(TIMEMN).unwrap_or(0);
            self.kv.set_var(TIMEMN, n.saturating_add(1))?;
        }
        self.kv.set_var(LASTMT, mtime)
    }

    /// Number of marks.
    pub fn len(&self) -> u64 {
        self.kv.filesize().saturating_sub(self.kv.first().0) / self.entry_size
    }

    /// True when there is no mark yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Mark `i`: (period start, inode pointer).
    pub fn mark(&self, i: u64) -> Result<(i64, KvPointer)> {
        let at = self.kv.first().0 + i * self.entry_size + u64::from(self.kv.has_delflag());
        let mut buf = [0u8; 16];
        read_exact_at(self.kv.storage(), &mut buf, at, "a time mark")?;
        let key = i64::from_be_bytes(buf[..8].try_into().expect("8 of 16 bytes"));
        let ptr = i64::from_be_bytes(buf[8..].try_into().expect("8 of 16 bytes"));
        let ptr = u64::try_from(ptr).map_err(|_| {
            Error::corrupt(
                self.kv.path(),
                at + 8,
                format!("time mark {i} pointer"),
                "≥ 0",
                ptr,
            )
        })?;
        Ok((key, KvPointer(ptr)))
    }

    /// Where an iteration over mtimes ≥ `t0` starts: the inode of the greatest mark ≤ `t0`, or
    /// the first mark when every mark is later. `None` when there are no marks.
    pub fn seek(&self, t0: i64) -> Result<Option<KvPointer>> {
        let n = self.len();
        if n == 0 {
            return Ok(None);
        }
        // Binary search for the last mark with key ≤ t0.
        let (mut lo, mut hi) = (0u64, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.mark(mid)?.0 <= t0 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(Some(self.mark(lo.saturating_sub(1))?.1))
    }

    /// The storage (for journaling and syncs).
    pub fn storage(&self) -> &dyn Storage {
        self.kv.storage()
    }
}
