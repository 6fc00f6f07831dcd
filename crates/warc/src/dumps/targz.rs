//! A tar.gz written in one pass with bounded memory, compressed on every core.
//!
//! A tar member's header (512 bytes, ahead of its data) holds the member's size, which a
//! streamed member does not know until its end. So the file is a series of gzip members, which
//! every gzip reader reads as one stream (RFC 1952 §2.2; GNU tar, Python's `tarfile`, flate2's
//! `MultiGzDecoder`):
//!
//! | gzip member                          | holds                                           |
//! |--------------------------------------|-------------------------------------------------|
//! | stored (deflate level 0), 535 bytes  | a tar member's header, rewritten at its end     |
//! | deflate, one per chunk (~1 MiB)      | the member's data, compressed on any core       |
//! | deflate                              | the zeros that pad the data to 512 bytes        |
//! | …                                    | the next member's header, data and padding      |
//! | deflate                              | the two zero blocks that end a tar archive      |
//!
//! A member's header is first written with size 0; when the member ends its real header is
//! written over it, the same number of bytes, since a stored member's length depends only on
//! what it holds. The data chunks are compressed independently (as pigz `--independent` and
//! bgzip do), so they are compressed in parallel and in order by [`write`]; the output file is
//! written with drop-behind and synced ([`OutFile`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use crate::codec::Compression;
use crate::error::{Error, Result};
use crate::outfile::OutFile;
use crate::writer::Budget;

/// Bytes of data per compressed chunk (a longer write is a chunk of its own).
pub(crate) const CHUNK: usize = 1 << 20;
/// A tar block.
const BLOCK: u64 = 512;

/// How to write.
#[derive(Clone, Debug)]
pub(crate) struct TarGzOptions {
    /// gzip level (1-9).
    pub level: u32,
    /// Compressor threads.
    pub threads: usize,
    /// The members' modification time, seconds since the epoch.
    pub mtime: u64,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    /// Each member's name and size, in order.
    pub members: Vec<(String, u64)>,
    /// Bytes of the members' data.
    pub raw_bytes: u64,
    /// Bytes of the file.
    pub file_bytes: u64,
}

enum Part {
    Header(String),
    Data(Vec<u8>),
    End,
}

enum Made {
    Header(String),
    Data { member: Vec<u8>, raw: u64 },
    End,
}

type Job = (u64, Part);
type Done = (u64, std::io::Result<Made>);

/// The producer's end: members are begun, written and ended in order.
pub(crate) struct Members {
    jobs: SyncSender<Job>,
    budget: Arc<Budget>,
    seq: u64,
    chunk: Vec<u8>,
    open: bool,
    /// A send failed: the writer stopped (its error is the one to report).
    stopped: bool,
    /// Bytes the writer has put in the file so far (for progress).
    pub written: Arc<AtomicU64>,
}

impl Members {
    fn send(&mut self, part: Part) -> Result<()> {
        if let Part::Data(d) = &part {
            self.budget.take(d.len() as u64);
        }
        if self.jobs.send((self.seq, part)).is_err() {
            self.stopped = true;
            return Err(Error::invalid("the tar.gz writer stopped"));
        }
        self.seq += 1;
        Ok(())
    }

    /// Begins a member named `name` (ASCII, at most 100 bytes).
    pub fn begin(&mut self, name: &str) -> Result<()> {
        if self.open {
            self.end()?;
        }
        if name.is_empty() || name.len() > 100 || !name.is_ascii() {
            return Err(Error::invalid(format!(
                "tar member name {name:?}: 1 to 100 ASCII bytes"
            )));
        }
        self.open = true;
        self.send(Part::Header(name.to_string()))
    }

    /// Appends to the member under way.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if !self.open {
            return Err(Error::internal("tar.gz data written outside a member"));
        }
        if !self.chunk.is_empty() && self.chunk.len() + bytes.len() > CHUNK {
            self.flush()?;
        }
        self.chunk.extend_from_slice(bytes);
        if self.chunk.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK));
        self.send(Part::Data(chunk))
    }

    /// Ends the member under way (a no-op when none is).
    pub fn end(&mut self) -> Result<()> {
        if !self.open {
            return Ok(());
        }
        self.flush()?;
        self.open = false;
        self.send(Part::End)
    }
}

/// Writes the tar.gz `path` (which must not exist) from what `produce` hands over; on an error
/// (of `produce` or of the writing) the file is removed.
pub(crate) fn write(
    path: &Path,
    opts: &TarGzOptions,
    produce: impl FnOnce(&mut Members) -> Result<()>,
) -> Result<Written> {
    let threads = opts.threads.max(1);
    let (jobs_tx, jobs_rx) = mpsc::sync_channel::<Job>(threads * 2);
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let budget = Arc::new(Budget::default());
    let written = Arc::new(AtomicU64::new(0));
    let created = Mutex::new(None::<PathBuf>);
    let result = std::thread::scope(|scope| {
        for _ in 0..threads {
            let (rx, tx, level) = (jobs_rx.clone(), done_tx.clone(), opts.level);
            scope.spawn(move || compress_parts(&rx, &tx, level));
        }
        // Once the compressors are gone (the writer failed), a send fails instead of waiting.
        drop(jobs_rx);
        drop(done_tx);
        let writer = {
            let (budget, written, created) = (budget.clone(), written.clone(), &created);
            scope.spawn(move || {
                let r = write_in_order(path, opts.mtime, done_rx, &budget, &written, created);
                budget.stop();
                r
            })
        };
        let mut members = Members {
            jobs: jobs_tx,
            budget: budget.clone(),
            seq: 0,
            chunk: Vec::with_capacity(CHUNK),
            open: false,
            stopped: false,
            written,
        };
        let produced = produce(&mut members).and_then(|()| members.end());
        let stopped = members.stopped;
        drop(members);
        let wrote = writer
            .join()
            .unwrap_or_else(|p| Err(Error::panicked("the tar.gz writer", &*p)));
        // The writer's error explains a producer's "writer stopped"; otherwise the producer's
        // error is what happened (the writer then only saw the members end early).
        match (produced, wrote) {
            (Ok(()), wrote) => wrote,
            (Err(_), Err(w)) if stopped => Err(w),
            (Err(e), _) => Err(e),
        }
    });
    if result.is_err() {
        if let Some(p) = created.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

fn compress_parts(jobs: &Mutex<Receiver<Job>>, done: &mpsc::Sender<Done>, level: u32) {
    loop {
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((seq, part)) = job else { return };
        let made = match part {
            Part::Header(name) => Ok(Made::Header(name)),
            Part::End => Ok(Made::End),
            Part::Data(d) => Compression::Gzip
                .compress(&d, level)
                .map(|member| Made::Data {
                    member,
                    raw: d.len() as u64,
                }),
        };
        if done.send((seq, made)).is_err() {
            return;
        }
    }
}

/// One gzip member holding `bytes` uncompressed (deflate's stored blocks): its length depends
/// only on `bytes.len()`.
fn stored_member(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    gz.write_all(bytes)?;
    gz.finish()
}

/// A GNU tar header of a regular file.
fn header(name: &str, size: u64, mtime: u64) -> std::io::Result<[u8; 512]> {
    let mut h = tar::Header::new_gnu();
    h.set_path(name)?;
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(mtime);
    h.set_uid(0);
    h.set_gid(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    let mut out = [0u8; 512];
    out.copy_from_slice(h.as_bytes());
    Ok(out)
}

fn write_in_order(
    path: &Path,
    mtime: u64,
    done: Receiver<Done>,
    budget: &Budget,
    written: &AtomicU64,
    created: &Mutex<Option<PathBuf>>,
) -> Result<Written> {
    let io = |at: Option<u64>| move |e: std::io::Error| Error::io(path, at, e);
    let mut file = OutFile::create_new(path)?;
    *created.lock().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
    let mut report = Written::default();
    let mut pending: BTreeMap<u64, std::io::Result<Made>> = BTreeMap::new();
    let mut next = 0u64;
    // The member under way: its name, where its header is, its size so far.
    let mut member: Option<(String, u64, u64)> = None;
    let placeholder_len = stored_member(&[0; 512]).map_err(io(None))?.len();
    for (seq, made) in done {
        pending.insert(seq, made);
        while let Some(made) = pending.remove(&next) {
            next += 1;
            match made.map_err(io(Some(file.len())))? {
                Made::Header(name) => {
                    let placeholder = stored_member(&header(&name, 0, mtime).map_err(io(None))?)
                        .map_err(io(None))?;
                    let at = file.append(&placeholder)?;
                    member = Some((name, at, 0));
                }
                Made::Data { member: m, raw } => {
                    budget.give(raw);
                    file.append(&m)?;
                    if let Some((_, _, size)) = member.as_mut() {
                        *size += raw;
                    }
                }
                Made::End => {
                    let Some((name, at, size)) = member.take() else {
                        return Err(Error::internal("a tar member ended twice"));
                    };
                    let pad = ((BLOCK - size % BLOCK) % BLOCK) as usize;
                    if pad > 0 {
                        let zeros = Compression::Gzip
                            .compress(&vec![0; pad], 6)
                            .map_err(io(None))?;
                        file.append(&zeros)?;
                    }
                    let real = stored_member(&header(&name, size, mtime).map_err(io(None))?)
                        .map_err(io(None))?;
                    if real.len() != placeholder_len {
                        return Err(Error::internal(format!(
                            "a stored gzip member of a tar header is {} bytes, not {placeholder_len}",
                            real.len()
                        )));
                    }
                    file.rewrite(&real, at)?;
                    report.raw_bytes += size;
                    report.members.push((name, size));
                }
            }
            written.store(file.len(), Ordering::Relaxed);
        }
    }
    if member.is_some() {
        return Err(Error::internal(
            "the tar.gz writing stopped inside a member",
        ));
    }
    let end = Compression::Gzip
        .compress(&[0; 2 * BLOCK as usize], 6)
        .map_err(io(None))?;
    file.append(&end)?;
    report.file_bytes = file.close()?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn opts() -> TarGzOptions {
        TarGzOptions {
            level: 6,
            threads: 2,
            mtime: 1_700_000_000,
        }
    }

    #[test]
    fn members_read_back_with_the_tar_crate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.tar.gz");
        let big: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i * 7 % 251) as u8).collect();
        let w = write(&path, &opts(), |m| {
            m.begin("a_0.ndjson")?;
            m.write(b"{\"a\":1}\n")?;
            m.write(&big)?;
            m.begin("a_1.ndjson")?;
            m.end()?;
            m.begin("a_2.ndjson")?;
            m.write(b"x")
        })
        .unwrap();
        assert_eq!(w.members.len(), 3);
        assert_eq!(w.file_bytes, std::fs::metadata(&path).unwrap().len());
        let file = std::fs::File::open(&path).unwrap();
        let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(file));
        let mut got = Vec::new();
        for e in tar.entries().unwrap() {
            let mut e = e.unwrap();
            assert_eq!(e.header().mtime().unwrap(), 1_700_000_000);
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            got.push((name, data));
        }
        let mut first = b"{\"a\":1}\n".to_vec();
        first.extend_from_slice(&big);
        assert_eq!(
            got,
            vec![
                ("a_0.ndjson".to_string(), first),
                ("a_1.ndjson".to_string(), Vec::new()),
                ("a_2.ndjson".to_string(), b"x".to_vec()),
            ]
        );
    }

    #[test]
    fn a_failed_write_leaves_no_file_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.tar.gz");
        let e = write(&path, &opts(), |m| {
            m.begin("a")?;
            m.write(b"partial")?;
            Err(Error::invalid("stop"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "invalid: stop");
        assert!(!path.exists());
        std::fs::write(&path, b"keep").unwrap();
        assert!(write(&path, &opts(), |_| Ok(())).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
        assert!(write(&dir.path().join("y"), &opts(), |m| m
            .begin(&"n".repeat(101)))
        .is_err());
    }
}
