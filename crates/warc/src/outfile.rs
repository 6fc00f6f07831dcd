//! A dump's output file: created new (an existing file is never overwritten), written front to
//! back with drop-behind, synced and dropped from the page cache when it is closed, so a dump
//! leaves none of what it wrote in the page cache.
//!
//! Drop-behind: every [`CHUNK`] appended, writeback of the new bytes is started and the chunk
//! before them is waited for and dropped. A write behind the end ([`OutFile::rewrite`], or
//! [`Seek`] then [`Write`], as a ZIP writer patches a local header) goes to its place; the close
//! syncs and drops the whole file, so a page it dirtied again goes too.

use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use wink_engine::storage::{FileStorage, Storage};

/// The drop-behind chunk.
pub(crate) const CHUNK: u64 = 8 << 20;

/// A file being written (see the module doc).
#[derive(Debug)]
pub(crate) struct OutFile {
    path: PathBuf,
    storage: FileStorage,
    len: u64,
    /// Bytes before this have had writeback started; before `dropped`, waited for and dropped.
    kicked: u64,
    dropped: u64,
    /// Where [`Write`] writes next.
    pos: u64,
}

impl OutFile {
    /// Creates `path`, which must not exist (an invalid-input error names it when it does).
    pub fn create_new(path: &Path) -> Result<OutFile> {
        let storage = FileStorage::create_new(path).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists => {
                Error::invalid(format!(
                    "{} exists; remove it or choose another name",
                    path.display()
                ))
            }
            e => e,
        })?;
        Ok(OutFile {
            path: path.to_path_buf(),
            storage,
            len: 0,
            kicked: 0,
            dropped: 0,
            pos: 0,
        })
    }

    /// Bytes written so far (the end of the file).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Appends `bytes`; returns the offset they start at. [`Write`] goes on after them.
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        let at = self.len;
        self.storage
            .write_at(bytes, at)
            .map_err(|e| Error::io(&self.path, Some(at), e))?;
        self.len += bytes.len() as u64;
        self.pos = self.len;
        if self.len >= self.kicked + CHUNK {
            let s = &self.storage;
            s.start_writeback(self.kicked, self.len - self.kicked)
                .and_then(|()| s.flush_and_drop(self.dropped, self.kicked - self.dropped))
                .map_err(|e| Error::io(&self.path, Some(self.kicked), e))?;
            self.dropped = self.kicked;
            self.kicked = self.len;
        }
        Ok(at)
    }

    /// Writes `bytes` over bytes already written at `at`.
    pub fn rewrite(&mut self, bytes: &[u8], at: u64) -> Result<()> {
        if at + bytes.len() as u64 > self.len {
            return Err(Error::internal(format!(
                "{}: a rewrite of {} bytes at {at} past the end ({})",
                self.path.display(),
                bytes.len(),
                self.len
            )));
        }
        self.storage
            .write_at(bytes, at)
            .map_err(|e| Error::io(&self.path, Some(at), e))
    }

    /// Syncs the file, drops it from the page cache and syncs its directory; returns its length.
    pub fn close(self) -> Result<u64> {
        self.storage
            .sync_data()
            .and_then(|()| self.storage.flush_and_drop(0, self.len))
            .map_err(|e| Error::io(&self.path, None, e))?;
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(dir, None, e))?;
        Ok(self.len)
    }
}

fn to_io(e: Error) -> io::Error {
    match e {
        Error::Io { source, .. } => source,
        e => io::Error::other(e.to_string()),
    }
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let end = self.pos + buf.len() as u64;
        if self.pos == self.len {
            self.append(buf).map_err(to_io)?;
        } else {
            // Part over what was written, the rest appended.
            let over = buf.len().min((self.len - self.pos) as usize);
            self.rewrite(&buf[..over], self.pos).map_err(to_io)?;
            if over < buf.len() {
                self.append(&buf[over..]).map_err(to_io)?;
            }
        }
        self.pos = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for OutFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match pos {
            // A hole would be left unwritten: nothing here seeks past the end.
            Some(p) if p <= self.len => {
                self.pos = p;
                Ok(p)
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a seek past the end of the output", self.path.display()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_append_rewrite_and_seek() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut f = OutFile::create_new(&path).unwrap();
        assert_eq!(f.append(b"hello ").unwrap(), 0);
        f.write_all(b"world").unwrap();
        f.rewrite(b"J", 0).unwrap();
        assert!(f.rewrite(b"xx", 10).is_err());
        f.seek(SeekFrom::Start(6)).unwrap();
        f.write_all(b"W0rld!!").unwrap();
        assert!(f.seek(SeekFrom::Start(100)).is_err());
        assert_eq!(f.close().unwrap(), 13);
        assert_eq!(std::fs::read(&path).unwrap(), b"Jello W0rld!!");
        let again = OutFile::create_new(&path).unwrap_err();
        assert!(matches!(again, Error::Invalid(_)), "{again}");
    }
}
