//! What the harness measures around the contenders: memory, page cache, disk, latency.

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::contender::Res;

/// A field of /proc/meminfo, in bytes.
pub fn meminfo(field: &str) -> Res<u64> {
    let text = fs::read_to_string("/proc/meminfo")?;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse()?;
            return Ok(kib * 1024);
        }
    }
    Err(format!("/proc/meminfo has no {field}").into())
}

/// A field of /proc/self/status (VmHWM, VmRSS), in bytes.
pub fn status(field: &str) -> Res<u64> {
    let text = fs::read_to_string("/proc/self/status")?;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse()?;
            return Ok(kib * 1024);
        }
    }
    Err(format!("/proc/self/status has no {field}").into())
}

/// How many times any process has dropped the whole page cache (`echo 1|3 > drop_caches`) since
/// boot (/proc/vmstat drop_pagecache). Benchmarks of other developers on a shared machine do.
pub fn global_drops() -> Res<u64> {
    let text = fs::read_to_string("/proc/vmstat")?;
    text.lines()
        .find_map(|l| l.strip_prefix("drop_pagecache "))
        .ok_or("/proc/vmstat has no drop_pagecache")?
        .trim()
        .parse()
        .map_err(Into::into)
}

/// Bytes this process has caused to be written to the disk so far (/proc/self/io write_bytes:
/// page-cache pages it dirtied, counted once per dirtying): how much a store rewrites besides its
/// values.
pub fn io_write_bytes() -> Res<u64> {
    let text = fs::read_to_string("/proc/self/io")?;
    text.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .ok_or("/proc/self/io has no write_bytes")?
        .trim()
        .parse()
        .map_err(Into::into)
}

/// User + system CPU seconds of this process so far.
pub fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct we pass; a zeroed rusage is a valid initial value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Seconds this thread has spent runnable but waiting for a CPU (/proc/thread-self/schedstat):
/// on a shared machine, the part of a wall time that other processes took.
pub fn runqueue_secs() -> Res<f64> {
    let text = fs::read_to_string("/proc/thread-self/schedstat")?;
    let ns: u64 = text
        .split_whitespace()
        .nth(1)
        .ok_or("schedstat has no run delay")?
        .parse()?;
    Ok(ns as f64 / 1e9)
}

/// Resets VmHWM to the current RSS (proc(5), clear_refs "5"), so the peak of one phase can be read.
pub fn reset_peak_rss() -> Res<()> {
    fs::write("/proc/self/clear_refs", "5")?;
    Ok(())
}

/// Bytes allocated on disk (st_blocks × 512) under `path`, directories included.
pub fn disk_bytes(path: &Path) -> Res<u64> {
    let meta = fs::symlink_metadata(path)?;
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for entry in fs::read_dir(path)? {
            total += disk_bytes(&entry?.path())?;
        }
    }
    Ok(total)
}

/// Drops a file's pages from the page cache (clean pages only: callers commit first).
pub fn drop_cache(path: &Path) -> Res<()> {
    let file = File::open(path)?;
    // SAFETY: fadvise on a descriptor we own, for the whole file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc).into());
    }
    Ok(())
}

/// Reads a whole file so that its pages are cached.
pub fn make_resident(path: &Path) -> Res<u64> {
    let mut file = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

/// Latencies of one read phase, in nanoseconds.
#[derive(Debug, Default)]
pub struct Latencies(pub Vec<u64>);

impl Latencies {
    /// The q-quantile (0..=1) in microseconds.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_unstable();
        let i = ((self.0.len() - 1) as f64 * q).round() as usize;
        self.0[i] as f64 / 1000.0
    }
}
