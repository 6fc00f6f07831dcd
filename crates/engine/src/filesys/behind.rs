//! Appends handed to a thread of their own, so that a load's copying of bytes into the page
//! cache (the `pwrite`s, a third of a put's CPU) and its page-cache hints run on the second core
//! while the caller hashes, encodes and indexes the next renders.
//!
//! The queue keeps the order of everything given to it. Nothing is promised before a sync, so
//! nothing changes for durability: every operation that must see the file as written so far (a
//! read reaching a byte not yet written, a sync, the file's length, an in-place write a commit
//! applies) first **drains** the queue, on the caller's thread when the worker is idle. A small
//! commit therefore never waits for another thread: its few queued appends are written by the
//! commit itself, as before. The worker is woken only when [`KICK_BYTES`] or `KICK_OPS`
//! operations are queued or a page-cache hint is (every MiB appended, see `kvseq`), and the
//! queue holds at most [`HELD_MAX`] bytes: a caller past it waits for the worker.
//!
//! An in-place write (a deleted flag set on an entry appended earlier) changes the queued bytes
//! it lands in, or is queued as an operation of its own; a read waits for the queue only when it
//! reads a byte some queued write writes, so such a flag holds up only a read of that entry.
//!
//! A failed write fails every later operation on the file (the error is kept, with the file's
//! name and offset): what reached the file is unknown, so no commit may follow it.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;

use crate::storage::Storage;

/// Queued bytes that wake the worker.
pub const KICK_BYTES: u64 = 256 << 10;
/// Bytes the queue may hold (queued and being written); past it a caller waits.
pub const HELD_MAX: u64 = 8 << 20;
/// Queued operations that wake the worker (in-place writes of a few bytes each).
const KICK_OPS: usize = 64;
/// Largest single write the queue builds by joining contiguous appends.
const SEGMENT: usize = 1 << 20;
/// Written segments' buffers kept for the next ones (their pages stay mapped: a fresh 1 MiB
/// buffer costs a page fault per 4 KiB).
const SPARES: usize = 4;
const PAGE: usize = 4096;

/// One queued operation on the file.
#[derive(Debug)]
enum Op {
    /// `buf[from..]` at `offset`. The bytes start at the same place in a memory page as in a
    /// file page: copies between two addresses a small distance apart modulo 4096 are many
    /// times slower on the machines we measured (see docs/PERFORMANCE.md, the memcpy trap).
    Write {
        offset: u64,
        buf: Vec<u8>,
        from: usize,
    },
    StartWriteback(u64, u64),
    FlushAndDrop(u64, u64),
    DropCache(u64, u64),
}

impl Op {
    fn bytes(&self) -> u64 {
        match self {
            Op::Write { buf, from, .. } => (buf.len() - from) as u64,
            _ => 0,
        }
    }

    /// Returns where a write ends; None for a page-cache hint.
    fn write_end(&self) -> Option<u64> {
        match self {
            Op::Write { offset, .. } => Some(offset + self.bytes()),
            _ => None,
        }
    }

    /// Returns where a write starts; None for a page-cache hint.
    fn write_offset(&self) -> Option<u64> {
        match self {
            Op::Write { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// The bytes a write writes (none for a hint).
    fn written_mut(&mut self) -> &mut [u8] {
        match self {
            Op::Write { buf, from, .. } => &mut buf[*from..],
            _ => &mut [],
        }
    }

    /// Appends `bytes` to a write whose buffer has room for them; false otherwise.
    fn extend(&mut self, bytes: &[u8]) -> bool {
        match self {
            Op::Write { buf, .. } if buf.len() + bytes.len() <= buf.capacity() => {
                buf.extend_from_slice(bytes);
                true
            }
            _ => false,
        }
    }

    fn run(&self, file: &dyn Storage) -> io::Result<()> {
        match self {
            Op::Write { offset, buf, from } => file.write_at(&buf[*from..], *offset),
            Op::StartWriteback(at, len) => file.start_writeback(*at, *len),
            Op::FlushAndDrop(at, len) => file.flush_and_drop(*at, *len),
            Op::DropCache(at, len) => file.drop_cache(*at, *len),
        }
    }

    fn offset(&self) -> u64 {
        match self {
            Op::Write { offset, .. } => *offset,
            Op::StartWriteback(at, _) | Op::FlushAndDrop(at, _) | Op::DropCache(at, _) => *at,
        }
    }
}

#[derive(Debug, Default)]
struct Queue {
    ops: VecDeque<Op>,
    /// Bytes queued and being written.
    held: u64,
    /// Whether ops taken from the queue are being run (by the worker or a draining caller).
    busy: bool,
    /// The lowest offset the ops being run write to.
    running_from: Option<u64>,
    /// The end of the furthest byte the ops being run write.
    running_end: u64,
    /// Whether the worker has been asked to take the queue.
    kicked: bool,
    /// Buffers of written segments, for the next ones (at most [`SPARES`]).
    spare: Vec<Vec<u8>>,
    /// The first failure: every later operation returns it.
    failed: Option<(io::ErrorKind, String)>,
    /// The end of the furthest write given to the queue: a write ending before it is in place,
    /// not an append.
    tail: u64,
    stop: bool,
}

impl Queue {
    /// Whether a write queued or being run may write a byte of `[offset, end)`.
    fn touches(&self, offset: u64, end: u64) -> bool {
        let running = self
            .running_from
            .is_some_and(|from| from < end && offset < self.running_end);
        running
            || self.ops.iter().any(|op| {
                let (Some(o), Some(o_end)) = (op.write_offset(), op.write_end()) else {
                    return false;
                };
                o < end && offset < o_end
            })
    }

    /// Writes `bytes` at `offset` into the latest queued write that holds that whole range;
    /// false when none does (or a later one holds part of it: the write is then queued).
    fn patch(&mut self, bytes: &[u8], offset: u64) -> bool {
        let end = offset + bytes.len() as u64;
        for op in self.ops.iter_mut().rev() {
            let (Some(o), Some(o_end)) = (op.write_offset(), op.write_end()) else {
                continue;
            };
            if o <= offset && end <= o_end {
                op.written_mut()[(offset - o) as usize..][..bytes.len()].copy_from_slice(bytes);
                return true;
            }
            if offset < o_end && o < end {
                return false;
            }
        }
        false
    }

    /// Takes the queued ops to run them (`busy` set).
    fn take(&mut self) -> VecDeque<Op> {
        let ops = std::mem::take(&mut self.ops);
        self.busy = true;
        // A kick asks for the ops queued before it: these.
        self.kicked = false;
        self.running_from = ops.iter().filter_map(Op::write_offset).min();
        self.running_end = ops.iter().filter_map(Op::write_end).max().unwrap_or(0);
        ops
    }

    fn check(&self) -> io::Result<()> {
        match &self.failed {
            None => Ok(()),
            Some((kind, msg)) => Err(io::Error::new(
                *kind,
                format!("an earlier background write failed: {msg}"),
            )),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    queue: Mutex<Queue>,
    /// Signalled when the worker should look at the queue (a kick, or the end).
    work: Condvar,
    /// Signalled when a batch of ops completes (for callers draining or waiting for room).
    done: Condvar,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, on: &Condvar, q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        on.wait(q).unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `ops` (taken from the queue with `busy` set) on `file` and gives the result back.
    fn run(&self, ops: VecDeque<Op>, file: &RwLock<Box<dyn Storage>>) {
        let bytes: u64 = ops.iter().map(Op::bytes).sum();
        let mut failed = None;
        {
            let file = file.read().unwrap_or_else(|p| p.into_inner());
            for op in &ops {
                if let Err(e) = op.run(file.as_ref()) {
                    let at = op.offset();
                    failed = Some((
                        e.kind(),
                        format!("{}, offset {at}: {e}", file.path().display()),
                    ));
                    break;
                }
            }
        }
        let mut q = self.lock();
        q.busy = false;
        q.running_from = None;
        q.running_end = 0;
        q.held -= bytes;
        for op in ops {
            if let Op::Write { buf, .. } = op {
                if q.spare.len() < SPARES && buf.capacity() == SEGMENT + PAGE {
                    q.spare.push(buf);
                }
            }
        }
        if q.failed.is_none() {
            q.failed = failed;
        }
        // The worker may have gone to sleep while a draining caller ran the ops: it is woken if
        // it was kicked since, or is to stop.
        let wake_worker = q.stop || (q.kicked && !q.ops.is_empty());
        drop(q);
        self.done.notify_all();
        if wake_worker {
            self.work.notify_one();
        }
    }
}

/// The queue of one file's appends and its worker thread (started on the first append).
#[derive(Debug)]
pub struct Behind {
    state: Arc<State>,
    file: Arc<RwLock<Box<dyn Storage>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Behind {
    /// A queue writing to `file`.
    pub fn new(file: Arc<RwLock<Box<dyn Storage>>>) -> Behind {
        Behind {
            state: Arc::default(),
            file,
            worker: Mutex::new(None),
        }
    }

    /// Queues a write of `bytes` at `offset` (after everything queued before).
    ///
    /// A write that lands inside bytes still queued (a deleted flag set on an entry appended
    /// since the last commit: two a title's rewrite) changes them where they wait, and an
    /// append joins the segment it continues even past such small writes below it: queued as
    /// operations of their own, they split the segments, each taking a buffer of its own and a
    /// write of its own.
    pub fn write(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut q = self.room()?;
        let end = offset + bytes.len() as u64;
        let in_place = end <= q.tail;
        q.tail = q.tail.max(end);
        // Only a write in place can land inside queued bytes: an append skips the search.
        if in_place && q.patch(bytes, offset) {
            return Ok(());
        }
        for op in q.ops.iter_mut().rev() {
            // The page-cache hints keep their place after the writes queued before them.
            let Some(o_end) = op.write_end() else { break };
            if o_end == offset && op.extend(bytes) {
                return self.queued(q, bytes.len() as u64, false);
            }
            if o_end > offset {
                // Not below this append: the order of the two must stay.
                break;
            }
        }
        if in_place && bytes.len() < PAGE {
            // A flag or a few bytes in place (on an entry appended long ago, whose page the
            // kernel may have to read back first): neither a segment's buffer nor its alignment.
            // A read waits for it only if it reads those very bytes.
            let buf = bytes.to_vec();
            q.ops.push_back(Op::Write {
                offset,
                buf,
                from: 0,
            });
            let many = q.ops.len() >= KICK_OPS;
            return self.queued(q, bytes.len() as u64, many);
        }
        let mut buf = match q.spare.pop() {
            Some(b) if bytes.len() <= SEGMENT => b,
            _ => Vec::with_capacity(bytes.len().max(SEGMENT) + PAGE),
        };
        buf.clear();
        let from = (offset as usize).wrapping_sub(buf.as_ptr() as usize) % PAGE;
        buf.resize(from, 0);
        buf.extend_from_slice(bytes);
        q.ops.push_back(Op::Write { offset, buf, from });
        self.queued(q, bytes.len() as u64, false)
    }

    /// Queues [`Storage::start_writeback`].
    pub fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint(Op::StartWriteback(offset, len))
    }

    /// Queues [`Storage::flush_and_drop`].
    pub fn flush_and_drop(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint(Op::FlushAndDrop(offset, len))
    }

    /// Queues [`Storage::drop_cache`].
    pub fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.hint(Op::DropCache(offset, len))
    }

    fn hint(&self, op: Op) -> io::Result<()> {
        let mut q = self.room()?;
        q.ops.push_back(op);
        self.queued(q, 0, true)
    }

    /// The queue once it has room (waking the worker to make some).
    fn room(&self) -> io::Result<MutexGuard<'_, Queue>> {
        let mut q = self.state.lock();
        q.check()?;
        while q.held >= HELD_MAX {
            self.kick(&mut q)?;
            q = self.state.wait(&self.state.done, q);
            q.check()?;
        }
        Ok(q)
    }

    fn queued(&self, mut q: MutexGuard<'_, Queue>, bytes: u64, wake: bool) -> io::Result<()> {
        q.held += bytes;
        if wake || q.held >= KICK_BYTES {
            self.kick(&mut q)?;
        }
        Ok(())
    }

    /// Asks the worker to take the queue (starting it the first time).
    fn kick(&self, q: &mut Queue) -> io::Result<()> {
        if q.kicked {
            return Ok(());
        }
        q.kicked = true;
        let mut worker = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if worker.is_none() {
            let (state, file) = (self.state.clone(), self.file.clone());
            *worker = Some(
                std::thread::Builder::new()
                    .name("wink-append".into())
                    .spawn(move || work(&state, &file))?,
            );
        }
        self.state.work.notify_one();
        Ok(())
    }

    /// Whether a read of `[offset, offset + len)` may reach bytes a queued write has not yet
    /// put in the file (it must [`Behind::drain`] first); the first failure of a queued write.
    pub fn reaches_unwritten(&self, offset: u64, len: u64) -> io::Result<bool> {
        let q = self.state.lock();
        q.check()?;
        Ok(q.touches(offset, offset.saturating_add(len)))
    }

    /// Writes everything queued (on this thread when the worker is idle) and returns the first
    /// failure of any queued write, now or before.
    pub fn drain(&self) -> io::Result<()> {
        let mut q = self.state.lock();
        loop {
            q.check()?;
            if q.busy {
                q = self.state.wait(&self.state.done, q);
            } else if q.ops.is_empty() {
                return Ok(());
            } else {
                let ops = q.take();
                drop(q);
                self.state.run(ops, &self.file);
                q = self.state.lock();
            }
        }
    }
}

impl Drop for Behind {
    fn drop(&mut self) {
        let mut q = self.state.lock();
        q.stop = true;
        drop(q);
        self.state.work.notify_all();
        if let Some(w) = self.worker.get_mut().ok().and_then(Option::take) {
            let _ = w.join();
        }
    }
}

/// The worker: takes the whole queue whenever kicked, until stopped with nothing left.
fn work(state: &State, file: &RwLock<Box<dyn Storage>>) {
    let mut q = state.lock();
    loop {
        if !q.busy && !q.ops.is_empty() && (q.kicked || q.stop) && q.failed.is_none() {
            let ops = q.take();
            drop(q);
            state.run(ops, file);
            q = state.lock();
            continue;
        }
        if q.stop && !q.busy {
            return;
        }
        if q.ops.is_empty() {
            q.kicked = false;
        }
        q = state.wait(&state.work, q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{MemStorage, Watched};

    fn behind(disk: &MemStorage) -> Behind {
        Behind::new(Arc::new(RwLock::new(Box::new(disk.clone()))))
    }

    #[test]
    fn writes_reach_the_file_in_order_once_drained() {
        let disk = MemStorage::from_bytes("f", vec![0u8; 10]);
        let b = behind(&disk);
        b.write(&[1, 2, 3], 10).unwrap();
        b.write(&[4, 5], 13).unwrap(); // joined to the write before
        b.write(&[9], 11).unwrap(); // over a queued byte: changes it where it waits
        b.drain().unwrap();
        assert_eq!(&disk.to_vec()[10..], &[1, 9, 3, 4, 5]);
    }

    #[test]
    fn a_read_of_bytes_before_the_queued_writes_need_not_wait() {
        let disk = MemStorage::from_bytes("f", vec![7u8; 100]);
        let b = behind(&disk);
        b.write(&[1; 10], 100).unwrap();
        assert!(!b.reaches_unwritten(0, 100).unwrap());
        assert!(b.reaches_unwritten(95, 10).unwrap());
        assert_eq!(disk.to_vec().len(), 100, "still queued");
        b.drain().unwrap();
        assert!(!b.reaches_unwritten(95, 10).unwrap());
        assert_eq!(
            &disk.to_vec()[95..],
            &[7, 7, 7, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
        );
    }

    #[test]
    fn a_write_inside_queued_bytes_changes_them_where_they_wait() {
        let disk = MemStorage::from_bytes("f", vec![0u8; 10]);
        let b = behind(&disk);
        b.write(&[1; 5000], 10).unwrap();
        b.write(&[2], 12).unwrap(); // a flag in the queued append
        b.write(&[3], 4).unwrap(); // a flag in bytes already written: an op of its own
        b.write(&[4; 10], 5010).unwrap(); // joins the append, past the flag below it
        b.write(&[5; 4], 5017).unwrap(); // over the end of the queued bytes: queued after
        assert_eq!(b.state.lock().ops.len(), 3);
        // Only a read of the flag's byte waits for the queue.
        assert!(!b.reaches_unwritten(0, 4).unwrap() && !b.reaches_unwritten(5, 5).unwrap());
        assert!(b.reaches_unwritten(3, 2).unwrap());
        b.drain().unwrap();
        let mut want = vec![0u8; 10];
        want[4] = 3;
        want.extend_from_slice(&[1; 5000]);
        want[12] = 2;
        want.extend_from_slice(&[4; 7]);
        want.extend_from_slice(&[5; 4]);
        assert_eq!(disk.to_vec(), want);
        // A flag in bytes a joined append wrote is in place: an op of a few bytes.
        b.write(&[7; 10], 5021).unwrap();
        b.write(&[8; 10], 5031).unwrap(); // joined
        b.drain().unwrap();
        b.write(&[6], 5035).unwrap();
        let small =
            matches!(b.state.lock().ops.back(), Some(Op::Write { buf, .. }) if buf.len() == 1);
        assert!(small);
        b.drain().unwrap();
        assert_eq!(disk.to_vec()[5035], 6);
    }

    proptest::proptest! {
        /// Appends and in-place writes, drained now and then or taken by the worker, leave the
        /// file as the same writes made in order.
        #[test]
        fn queued_writes_leave_the_file_as_writes_in_order(
            ops in proptest::collection::vec(
                (0u8..5, 0u32..1 << 16, 1usize..9000, proptest::num::u8::ANY),
                1..80,
            ),
        ) {
            let disk = MemStorage::from_bytes("f", Vec::new());
            let b = behind(&disk);
            let mut want: Vec<u8> = Vec::new();
            for (kind, at, len, byte) in ops {
                match kind {
                    0 | 1 => {
                        let bytes = vec![byte; len];
                        b.write(&bytes, want.len() as u64).unwrap();
                        want.extend_from_slice(&bytes);
                    }
                    2 if !want.is_empty() => {
                        let at = at as usize % want.len();
                        let len = (len % 64).min(want.len() - at).max(1);
                        let bytes = vec![byte; len];
                        b.write(&bytes, at as u64).unwrap();
                        want[at..at + bytes.len()].copy_from_slice(&bytes);
                    }
                    3 => b.start_writeback(0, want.len() as u64).unwrap(),
                    _ => b.drain().unwrap(),
                }
            }
            b.drain().unwrap();
            proptest::prop_assert_eq!(disk.to_vec(), want);
        }
    }

    #[test]
    fn the_worker_writes_a_load_and_the_queue_stays_bounded() {
        let disk = MemStorage::from_bytes("f", Vec::new());
        let b = behind(&disk);
        let mut want = Vec::new();
        for i in 0..4000u32 {
            let chunk = vec![i as u8; 3000 + (i as usize * 7) % 5000];
            b.write(&chunk, want.len() as u64).unwrap();
            want.extend_from_slice(&chunk);
            assert!(b.state.lock().held <= HELD_MAX + 8000);
            if i % 700 == 0 {
                b.start_writeback(0, want.len() as u64).unwrap();
            }
        }
        b.drain().unwrap();
        assert_eq!(disk.to_vec(), want);
        assert!(b.worker.lock().unwrap().is_some(), "the worker took part");
    }

    /// A write that fails fails the drain and every later write, naming the file and offset.
    #[test]
    fn a_failed_write_fails_everything_after_it() {
        let disk = MemStorage::from_bytes("data", Vec::new());
        let broken = Watched {
            inner: disk.clone(),
            fail_from: Some(100),
            ..Watched::default()
        };
        let b = Behind::new(Arc::new(RwLock::new(Box::new(broken))));
        b.write(&[1; 50], 0).unwrap();
        b.write(&[2; 50], 100).unwrap();
        let e = b.drain().unwrap_err();
        assert!(e.to_string().contains("data, offset 100"), "{e}");
        assert!(b.write(&[3], 0).is_err());
        assert!(b.drain().is_err());
        assert_eq!(disk.to_vec(), vec![1; 50]);
    }
}
