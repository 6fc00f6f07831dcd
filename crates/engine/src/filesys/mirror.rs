//! A writer's copy of a small index file in memory: probes read cells from it instead of from the
//! page cache through a `pread`, which was most of what a probe cost (two probes a put).
//!
//! Only a writer mirrors, and only its index: nothing but the writer changes that file while it
//! holds the lock, and every change it makes passes through here (writes, lengths, the swap of
//! a rebuilt index). A write updates the copy only once the file took it, so the copy never holds
//! bytes the file refused. A file longer than the limit is not copied, and a copy that would grow
//! past it is dropped: reads then go to the file again.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::RwLock;

use crate::storage::Storage;

/// The largest index a writer copies into memory, bytes: a container's index stays far below it
/// (its values are large), and so does the title index of up to about 750,000 titles (a table
/// of 2^20 cells; the next growth, to 2^21, passes it).
pub const MIRROR_LIMIT: u64 = 32 << 20;

/// A storage whose bytes are also held in memory, for reads.
pub struct Mirrored {
    inner: Box<dyn Storage>,
    copy: RwLock<Option<Vec<u8>>>,
    limit: u64,
}

impl fmt::Debug for Mirrored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mirrored")
            .field("inner", &self.inner)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Mirrored {
    /// Wraps `inner`, reading it whole when it is at most `limit` bytes long; a longer one is
    /// returned as it is.
    pub fn wrap(inner: Box<dyn Storage>, limit: u64) -> io::Result<Box<dyn Storage>> {
        let len = inner.len()?;
        if len > limit {
            return Ok(inner);
        }
        let mut copy = vec![0u8; len as usize];
        let mut at = 0;
        while at < copy.len() {
            match inner.read_at(&mut copy[at..], at as u64)? {
                0 => break,
                n => at += n,
            }
        }
        copy.truncate(at);
        Ok(Box::new(Mirrored {
            inner,
            copy: RwLock::new(Some(copy)),
            limit,
        }))
    }

    fn copy(&self) -> std::sync::RwLockWriteGuard<'_, Option<Vec<u8>>> {
        // The copy is changed only after the file was: a panic between leaves it behind the
        // file, never ahead; dropping it is always safe.
        self.copy.write().unwrap_or_else(|p| {
            let mut g = p.into_inner();
            *g = None;
            g
        })
    }

    /// Makes the copy `len` bytes long, or drops it past the limit.
    fn resize(copy: &mut Option<Vec<u8>>, len: u64, limit: u64) {
        if len > limit {
            *copy = None;
        } else if let Some(c) = copy {
            c.resize(len as usize, 0);
        }
    }
}

impl Storage for Mirrored {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn len(&self) -> io::Result<u64> {
        if let Some(c) = &*self.copy.read().unwrap_or_else(|p| p.into_inner()) {
            return Ok(c.len() as u64);
        }
        self.inner.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(c) = &*self.copy.read().unwrap_or_else(|p| p.into_inner()) {
            let start = offset.min(c.len() as u64) as usize;
            let n = buf.len().min(c.len() - start);
            buf[..n].copy_from_slice(&c[start..start + n]);
            return Ok(n);
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut copy = self.copy();
        let result = self.inner.write_at(buf, offset);
        if result.is_err() {
            // Part of it may have reached the file.
            *copy = None;
            return result;
        }
        let end = offset + buf.len() as u64;
        if let Some(c) = &mut *copy {
            if end > c.len() as u64 {
                Self::resize(&mut copy, end, self.limit);
            }
        }
        if let Some(c) = &mut *copy {
            c[offset as usize..end as usize].copy_from_slice(buf);
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut copy = self.copy();
        let result = self.inner.set_len(len);
        match result {
            Ok(()) => Self::resize(&mut copy, len, self.limit),
            Err(_) => *copy = None,
        }
        result
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let mut copy = self.copy();
        let result = self.inner.allocate(len).and_then(|()| self.inner.len());
        match result {
            Ok(now) => {
                Self::resize(&mut copy, now, self.limit);
                Ok(())
            }
            Err(e) => {
                *copy = None;
                Err(e)
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn sync_fd(&self) -> Option<std::os::unix::io::RawFd> {
        self.inner.sync_fd()
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.start_writeback(offset, len)
    }

    fn flush_and_drop(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.flush_and_drop(offset, len)
    }

    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.drop_cache(offset, len)
    }

    fn create_temp(&self, suffix: &str) -> io::Result<Box<dyn Storage>> {
        self.inner.create_temp(suffix)
    }

    fn commit_temp(&self, temp: Box<dyn Storage>) -> io::Result<Box<dyn Storage>> {
        // The replacement (a rebuilt index) is read whole again: the writer built it, so its
        // pages are in the page cache.
        *self.copy() = None;
        Mirrored::wrap(self.inner.commit_temp(temp)?, self.limit)
    }

    fn discard_temp(&self, temp: Box<dyn Storage>) -> io::Result<()> {
        self.inner.discard_temp(temp)
    }

    fn advise_random(&self) -> io::Result<()> {
        self.inner.advise_random()
    }

    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.will_need(offset, len)
    }

    fn advise_sequential(&self) -> io::Result<()> {
        self.inner.advise_sequential()
    }

    fn read_at_uncached(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }

    fn cached_pages(&self, offset: u64, len: u64) -> io::Result<Vec<bool>> {
        self.inner.cached_pages(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    fn read_all(s: &dyn Storage) -> Vec<u8> {
        let mut buf = vec![0u8; s.len().unwrap() as usize + 10];
        let n = s.read_at(&mut buf, 0).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn reads_follow_every_change_the_file_took() {
        let file = MemStorage::from_bytes("idx", vec![1u8; 100]);
        let m = Mirrored::wrap(Box::new(file.clone()), 1000).unwrap();
        m.write_at(&[7; 10], 95).unwrap();
        m.set_len(90).unwrap();
        m.allocate(120).unwrap();
        m.write_at(&[9; 5], 10).unwrap();
        assert_eq!(read_all(m.as_ref()), file.to_vec());
        assert_eq!(m.len().unwrap(), 120);
        let mut tail = [0u8; 8];
        assert_eq!(
            m.read_at(&mut tail, 116).unwrap(),
            4,
            "a short read at the end"
        );
        assert_eq!(m.read_at(&mut tail, 500).unwrap(), 0);
    }

    #[test]
    fn a_file_that_grows_past_the_limit_is_read_from_the_file() {
        let file = MemStorage::from_bytes("idx", vec![1u8; 100]);
        let m = Mirrored::wrap(Box::new(file.clone()), 150).unwrap();
        m.write_at(&[3; 100], 100).unwrap();
        assert_eq!(read_all(m.as_ref()), file.to_vec());
        file.write_at(&[5], 0).unwrap(); // seen: no copy any more
        let mut one = [0u8; 1];
        m.read_at(&mut one, 0).unwrap();
        assert_eq!(one, [5]);
        let big = Mirrored::wrap(Box::new(MemStorage::from_bytes("b", vec![0; 200])), 150);
        assert!(format!("{:?}", big.unwrap()).starts_with("MemStorage"));
    }

    #[test]
    fn a_swapped_in_replacement_is_copied_again() {
        let file = MemStorage::from_bytes("idx", vec![1u8; 64]);
        let m = Mirrored::wrap(Box::new(file.clone()), 1000).unwrap();
        let temp = m.create_temp("tmp").unwrap();
        temp.write_at(&[8; 80], 0).unwrap();
        let swapped = m.commit_temp(temp).unwrap();
        assert_eq!(read_all(swapped.as_ref()), vec![8u8; 80]);
    }
}
