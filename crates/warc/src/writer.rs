//! Writing records: compressed on every core, written in order, split into files of at most N
//! bytes, each file opening with its own `warcinfo` record, and indexed as they are written.
//!
//! The caller (one thread: it reads the store) hands over whole uncompressed records in order.
//! Compressor threads, one per core, each make a record's member or frame; one writer thread puts
//! them back in order, appends them to the current file and adds their index lines. Memory is
//! bounded: at most [`IN_FLIGHT_BYTES`] of records (or one record, when it is larger) are between
//! the caller and the file. The files are written with drop-behind (writeback started every
//! 8 MiB, the chunk before it waited for and dropped from the page cache) and synced at the end,
//! so a dump leaves neither what it read nor what it wrote in the page cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};

use super::cdxj::{self, Sorter};
use super::codec::Compression;
use super::outfile::OutFile;

/// Bytes of records between the caller and the files, at most.
pub(crate) const IN_FLIGHT_BYTES: u64 = 64 << 20;

/// What the index needs of a record besides where it landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub surt: String,
    pub timestamp14: String,
    pub url: String,
    pub mime: String,
    pub digest: String,
}

/// Where the records go.
#[derive(Clone, Debug)]
pub(crate) struct Output {
    /// The file name without its extension (`dump` for `dump.warc.gz`).
    pub base: PathBuf,
    pub compression: Compression,
    pub level: u32,
    /// Files of at most this many bytes, named `BASE-00000.EXT`, … (one file `BASE.EXT` when
    /// `None`). A record larger than that gets a file of its own.
    pub max_file_bytes: Option<u64>,
    /// The index, written when `Some`.
    pub index: Option<PathBuf>,
    /// Compressor threads.
    pub threads: usize,
}

/// What the writing did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub files: Vec<PathBuf>,
    /// Records written, the `warcinfo` records included.
    pub records: u64,
    /// Bytes of the records before compression.
    pub raw_bytes: u64,
    /// Bytes of the files.
    pub file_bytes: u64,
    pub index_lines: u64,
}

impl Output {
    /// The path of file number `n`.
    pub fn file(&self, n: usize) -> PathBuf {
        let ext = self.compression.extension();
        match self.max_file_bytes {
            None => PathBuf::from(format!("{}{ext}", self.base.display())),
            Some(_) => PathBuf::from(format!("{}-{n:05}{ext}", self.base.display())),
        }
    }
}

/// The caller's end: hands records over in order.
pub(crate) struct Feed {
    jobs: SyncSender<Job>,
    budget: Arc<Budget>,
    seq: u64,
    /// Bytes the writer has put in files so far (for progress).
    pub written: Arc<AtomicU64>,
}

impl Feed {
    /// Hands a record over; an error means the writing has stopped (its error is the one
    /// [`write`] returns).
    pub fn send(&mut self, record: Vec<u8>, index: Option<IndexEntry>) -> Result<()> {
        self.budget.take(record.len() as u64);
        self.jobs
            .send((self.seq, record, index))
            .map_err(|_| Error::invalid("the WARC writer stopped"))?;
        self.seq += 1;
        Ok(())
    }
}

/// Bytes in flight between a producer and a writer, with a wait for room: at most
/// [`IN_FLIGHT_BYTES`], or one item when it is larger.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    used: Mutex<u64>,
    room: Condvar,
    stopped: std::sync::atomic::AtomicBool,
}

impl Budget {
    /// Waits for room for `n` bytes (none once stopped), and takes it.
    pub(crate) fn take(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used > 0 && *used + n > IN_FLIGHT_BYTES && !self.stopped.load(Ordering::Relaxed) {
            used = self.room.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += n;
    }

    /// Gives `n` bytes back.
    pub(crate) fn give(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(n);
        self.room.notify_all();
    }

    /// No more waits: the writer stopped.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.room.notify_all();
    }
}

/// A record handed over: its place in the order, its bytes, its index entry.
type Job = (u64, Vec<u8>, Option<IndexEntry>);
/// A record compressed: its place, its member (or the error), its raw length, its index entry.
type Done = (u64, std::io::Result<Vec<u8>>, u64, Option<IndexEntry>);

/// Runs `produce` with a [`Feed`], compressing and writing what it sends; `warcinfo(name)` makes
/// the uncompressed `warcinfo` record that opens the file `name`. On an error (of `produce` or of
/// the writing) the files written so far are removed.
pub(crate) fn write(
    out: &Output,
    warcinfo: &(dyn Fn(&str) -> Vec<u8> + Sync),
    produce: impl FnOnce(&mut Feed) -> Result<()>,
) -> Result<Written> {
    let threads = out.threads.max(1);
    let (jobs_tx, jobs_rx) = mpsc::sync_channel::<Job>(threads * 2);
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let budget = Arc::new(Budget::default());
    let written = Arc::new(AtomicU64::new(0));
    let created: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let result = std::thread::scope(|scope| {
        for _ in 0..threads {
            let (rx, tx) = (jobs_rx.clone(), done_tx.clone());
            let (compression, level) = (out.compression, out.level);
            scope.spawn(move || compress_jobs(&rx, &tx, compression, level));
        }
        // Once the compressors are gone (the writer failed), a send fails instead of waiting.
        drop(jobs_rx);
        drop(done_tx);
        let writer = {
            let (budget, written, created) = (budget.clone(), written.clone(), &created);
            scope.spawn(move || {
                let r = write_in_order(out, warcinfo, done_rx, &budget, &written, created);
                budget.stop();
                r
            })
        };
        let mut feed = Feed {
            jobs: jobs_tx,
            budget: budget.clone(),
            seq: 0,
            written,
        };
        let produced = produce(&mut feed);
        drop(feed);
        let wrote = writer
            .join()
            .unwrap_or_else(|p| Err(Error::panicked("the WARC writer", &*p)));
        // The writer's error explains a producer's "writer stopped".
        match (produced, wrote) {
            (_, Err(e)) => Err(e),
            (Err(e), Ok(_)) => Err(e),
            (Ok(()), Ok(w)) => Ok(w),
        }
    });
    if result.is_err() {
        for path in created.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = std::fs::remove_file(path);
        }
    }
    result
}

fn compress_jobs(
    jobs: &Mutex<Receiver<Job>>,
    done: &mpsc::Sender<Done>,
    compression: Compression,
    level: u32,
) {
    loop {
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((seq, record, index)) = job else {
            return;
        };
        let raw = record.len() as u64;
        let member = match compression {
            Compression::None => Ok(record),
            c => c.compress(&record, level),
        };
        if done.send((seq, member, raw, index)).is_err() {
            return;
        }
    }
}

/// The file being written: the output file, its name and how many records it holds.
struct OpenFile {
    file: OutFile,
    name: String,
    /// Records other than its warcinfo.
    records: u64,
}

fn write_in_order(
    out: &Output,
    warcinfo: &(dyn Fn(&str) -> Vec<u8> + Sync),
    done: Receiver<Done>,
    budget: &Budget,
    written: &AtomicU64,
    created: &Mutex<Vec<PathBuf>>,
) -> Result<Written> {
    let mut report = Written::default();
    let mut sorter = out.index.as_ref().map(|p| Sorter::new(p));
    let mut pending: BTreeMap<u64, Done> = BTreeMap::new();
    let mut next = 0u64;
    let mut file: Option<OpenFile> = None;
    let open = |n: usize, report: &mut Written| -> Result<OpenFile> {
        let path = out.file(n);
        let file = OutFile::create_new(&path)?;
        created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(path.clone());
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut f = OpenFile {
            file,
            name,
            records: 0,
        };
        let info = warcinfo(&f.name);
        let member = out
            .compression
            .compress(&info, out.level)
            .map_err(|e| Error::io(&path, Some(0), e))?;
        f.file.append(&member)?;
        report.files.push(path);
        report.records += 1;
        report.raw_bytes += info.len() as u64;
        Ok(f)
    };
    for item in done {
        pending.insert(item.0, item);
        while let Some((_, member, raw, index)) = pending.remove(&next) {
            next += 1;
            budget.give(raw);
            let member = member.map_err(|e| Error::io(&out.file(report.files.len()), None, e))?;
            let full = match (&file, out.max_file_bytes) {
                (Some(f), Some(max)) => f.records > 0 && f.file.len() + member.len() as u64 > max,
                _ => false,
            };
            if full {
                if let Some(f) = file.take() {
                    report.file_bytes += f.file.close()?;
                }
            }
            if file.is_none() {
                file = Some(open(report.files.len(), &mut report)?);
            }
            let Some(f) = file.as_mut() else { continue };
            let at = f.file.append(&member)?;
            f.records += 1;
            report.records += 1;
            report.raw_bytes += raw;
            written.store(report.file_bytes + f.file.len(), Ordering::Relaxed);
            if let (Some(sorter), Some(e)) = (sorter.as_mut(), index) {
                let fields = cdxj::Fields {
                    url: &e.url,
                    mime: &e.mime,
                    digest: &e.digest,
                    length: index_length(out.compression, member.len()).to_string(),
                    offset: at.to_string(),
                    filename: &f.name,
                };
                sorter.push(cdxj::line(&e.surt, &e.timestamp14, &fields))?;
            }
        }
    }
    if file.is_none() {
        // An export of nothing is still a WARC file: its warcinfo.
        file = Some(open(0, &mut report)?);
    }
    if let Some(f) = file.take() {
        report.file_bytes += f.file.close()?;
    }
    if let Some(sorter) = sorter {
        report.index_lines = sorter.finish()?;
        if let Some(p) = &out.index {
            created
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(p.clone());
        }
    }
    sync_dir(out.files_dir())?;
    Ok(report)
}

/// The `length` an index gives a record of `len` bytes in the file: a plain record's without
/// the CRLF CRLF that ends it (what cdxj-indexer and warcio count: a reader needs only the
/// header and the block), a member's whole.
fn index_length(compression: Compression, len: usize) -> usize {
    match compression {
        Compression::None => len.saturating_sub(super::record::END_OF_RECORD.len()),
        _ => len,
    }
}

impl Output {
    fn files_dir(&self) -> &Path {
        match self.base.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, None, e))
}
