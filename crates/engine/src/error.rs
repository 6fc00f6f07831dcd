//! The one error type of the library.
//!
//! Variants say what went wrong and where. The CLI maps them to its stable exit codes
//! ([`Error::exit_code`]): not found → 1, invalid input → 2, unreadable data or an internal
//! error → 3, in use → 4.
//! A short read of bytes the file's own header promises is [`Error::Corrupt`], not an I/O error:
//! an operator must be able to tell a failing disk from a damaged file.

use std::any::Any;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Wink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system failed a read, write or sync. A full disk (or quota) says "disk
    /// full": nothing is wrong with the files, what failed was not committed.
    #[error("{}: {}{}: {source}", path.display(), IoWhat(source), At(*offset))]
    Io {
        /// The file.
        path: PathBuf,
        /// Where in it, when the operation had a place.
        offset: Option<u64>,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// Bytes on disk do not follow the format. Nothing from the damaged structure is returned.
    #[error("{}: corrupt at byte {offset}: {what} (expected {expected}, found {found}); run `wink \
        check` on it", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The byte where the damage was found (the start of the structure read).
        offset: u64,
        /// The structure or field.
        what: String,
        /// What the format requires there.
        expected: String,
        /// What is there.
        found: String,
    },

    /// A value known to be damaged: `wink scrub --quarantine` copied its bytes and a description
    /// to the store's quarantine. Nothing of it is returned.
    #[error("{}: damaged value at byte {offset}, quarantined (see {}); restore it from a snapshot \
        or put the render again", path.display(), quarantine.display())]
    Damaged {
        /// The container file holding the value.
        path: PathBuf,
        /// The value's first byte.
        offset: u64,
        /// The quarantine entry's description.
        quarantine: PathBuf,
    },

    /// A well-formed file uses a feature this implementation does not support.
    #[error("{}: unsupported at byte {offset}: {what}", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Where the feature is declared.
        offset: u64,
        /// The feature.
        what: String,
    },

    /// The caller asked for something the format or the store cannot take. Nothing was changed.
    #[error("invalid: {0}")]
    Invalid(String),

    /// A name, key, pointer or revision that is not there.
    #[error("not found: {0}")]
    NotFound(String),

    /// A read-only handle's view is older than a writer's commit that changed what it was reading
    /// (a file rewritten, removed or created since the view was taken). Nothing wrong was
    /// returned: refresh the handle and read again.
    #[error("{}: changed by a later commit at byte {offset}: {what}; refresh and read \
        again", path.display())]
    Stale {
        /// The file the later commit changed.
        path: PathBuf,
        /// Where the read found the sign of it.
        offset: u64,
        /// What was read.
        what: String,
    },

    /// Another writer holds the lock of `path` (a store's directory, or a file).
    #[error("{}: in use by another writer (lock held); retry later, or wait for \
        it", path.display())]
    InUse {
        /// What is locked.
        path: PathBuf,
    },

    /// A fixed capacity is exhausted (an ao inode, a superblock with no room for a variable).
    #[error("{}: full: {what}", path.display())]
    Full {
        /// The file.
        path: PathBuf,
        /// What has no room.
        what: String,
    },

    /// A failed writer: a sync of `path` failed, so this writer's handle no longer knows what its
    /// files hold on disk (Linux forgets the writes a failed sync could not make durable, and the
    /// next sync succeeds without them). It refuses every read and write until the store is
    /// reopened, whose recovery reads only what was committed. Nothing is wrong with the files.
    #[error("{}: a sync failed earlier, so this writer is failed: it refuses every read and \
        write until the store is reopened", path.display())]
    WriterFailed {
        /// The file whose sync failed.
        path: PathBuf,
    },

    /// Something the operation needs is out of reach now (a server, a peer, a log): nothing was
    /// changed by this failure, and the same request may succeed later. The engine itself never
    /// returns it; the layers above it that talk to other processes do.
    #[error("unavailable: {0}")]
    Unavailable(String),

    /// A bug in Wink (a thread of the engine panicked), never a fault of the input. What was
    /// being done may have stopped half way: a store's commits are all or nothing, and the next
    /// writer's open recovers as after a crash.
    #[error(
        "internal error (a bug in Wink): {0}; what was being done may not have completed \
         (the store's crash recovery applies on the next writer's open)"
    )]
    Internal(String),
}

/// What an I/O error is, in words: "disk full" for ENOSPC and EDQUOT.
struct IoWhat<'a>(&'a io::Error);

impl fmt::Display for IoWhat<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_disk_full(self.0) {
            f.write_str("disk full (the write was not committed; free space and retry)")
        } else {
            f.write_str("I/O error")
        }
    }
}

/// Whether an I/O error means the file system (or a quota) has no room left.
fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

struct At(Option<u64>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(offset) => write!(f, " at byte {offset}"),
            None => Ok(()),
        }
    }
}

impl Error {
    /// Whether this is an I/O error that means the file system (or a quota) has no room left
    /// (ENOSPC, EDQUOT): the service answers it 507, not 500.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Io { source, .. } if is_disk_full(source))
    }

    /// An I/O error on `path`, at `offset` when the operation had one.
    pub fn io(path: &Path, offset: Option<u64>, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            offset,
            source,
        }
    }

    /// Corruption in `path` at `offset`.
    pub fn corrupt(
        path: &Path,
        offset: u64,
        what: impl Into<String>,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Self {
        Error::Corrupt {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    /// An unsupported feature in `path` at `offset`.
    pub fn unsupported(path: &Path, offset: u64, what: impl Into<String>) -> Self {
        Error::Unsupported {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
        }
    }

    /// A read-only view of `path` older than what a writer committed at `offset`.
    pub fn stale(path: &Path, offset: u64, what: impl Into<String>) -> Self {
        Error::Stale {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
        }
    }

    /// An invalid argument.
    pub fn invalid(what: impl Into<String>) -> Self {
        Error::Invalid(what.into())
    }

    /// A write asked of a handle opened read-only on `path`.
    pub fn read_only(path: &Path) -> Self {
        Error::Invalid(format!("{} is open read-only", path.display()))
    }

    /// The refusal of a failed writer: see [`Error::WriterFailed`].
    pub fn writer_failed(path: &Path) -> Self {
        Error::WriterFailed {
            path: path.to_path_buf(),
        }
    }

    /// `Ok` unless `failed` names the file whose sync failed a writer, else
    /// [`Error::writer_failed`].
    pub(crate) fn check_not_failed(failed: Option<&Path>) -> Result<()> {
        match failed {
            Some(path) => Err(Error::writer_failed(path)),
            None => Ok(()),
        }
    }

    /// `Ok` for a writable handle on `path`, else [`Error::read_only`].
    pub(crate) fn check_writable(writable: bool, path: &Path) -> Result<()> {
        if writable {
            Ok(())
        } else {
            Err(Error::read_only(path))
        }
    }

    /// Out of reach now: see [`Error::Unavailable`].
    pub fn unavailable(what: impl Into<String>) -> Self {
        Error::Unavailable(what.into())
    }

    /// A bug in Wink.
    pub fn internal(what: impl Into<String>) -> Self {
        Error::Internal(what.into())
    }

    /// The error of a thread `who` that panicked with `payload` (what `join` returns), with the
    /// panic's message when it has one: the message is what tells a bug report where to look.
    pub fn panicked(who: &str, payload: &(dyn Any + Send)) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        match message {
            Some(m) => Error::Internal(format!("{who} panicked: {m}")),
            None => Error::Internal(format!("{who} panicked")),
        }
    }

    /// The exit code the `wink` CLI uses for this error.
    ///
    /// 1: not found; 2: invalid input (nothing changed); 3: data could not be read or written
    /// (corruption or I/O, a failed writer), or an internal error (a bug; not input's fault, so
    /// never 2); 4: in use by another writer (or changed by it under a read-only read: retry);
    /// 5: unavailable (a server or peer out of reach; nothing changed; retry later).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::NotFound(_) => 1,
            Error::Invalid(_) | Error::Full { .. } => 2,
            Error::Io { .. }
            | Error::WriterFailed { .. }
            | Error::Corrupt { .. }
            | Error::Damaged { .. }
            | Error::Unsupported { .. }
            | Error::Internal(_) => 3,
            Error::InUse { .. } | Error::Stale { .. } => 4,
            Error::Unavailable(_) => 5,
        }
    }

    /// The same error again, for a damage found once and reported to every read that needs
    /// what it damaged (an I/O error's source keeps its kind and message).
    pub fn again(&self) -> Error {
        match self {
            Error::Io {
                path,
                offset,
                source,
            } => Error::Io {
                path: path.clone(),
                offset: *offset,
                source: match source.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Corrupt {
                path,
                offset,
                what,
                expected,
                found,
            } => Error::Corrupt {
                path: path.clone(),
                offset: *offset,
                what: what.clone(),
                expected: expected.clone(),
                found: found.clone(),
            },
            Error::Damaged {
                path,
                offset,
                quarantine,
            } => Error::Damaged {
                path: path.clone(),
                offset: *offset,
                quarantine: quarantine.clone(),
            },
            Error::Unsupported { path, offset, what } => Error::Unsupported {
                path: path.clone(),
                offset: *offset,
                what: what.clone(),
            },
            Error::Invalid(what) => Error::Invalid(what.clone()),
            Error::NotFound(what) => Error::NotFound(what.clone()),
            Error::Stale { path, offset, what } => Error::Stale {
                path: path.clone(),
                offset: *offset,
                what: what.clone(),
            },
            Error::InUse { path } => Error::InUse { path: path.clone() },
            Error::WriterFailed { path } => Error::writer_failed(path),
            Error::Full { path, what } => Error::Full {
                path: path.clone(),
                what: what.clone(),
            },
            Error::Internal(what) => Error::Internal(what.clone()),
            Error::Unavailable(what) => Error::Unavailable(what.clone()),
        }
    }

    /// True when the error means the bytes on disk are damaged (as opposed to an I/O failure).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corrupt { .. } | Error::Damaged { .. } | Error::Unsupported { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_file_and_offset() {
        let e = Error::corrupt(Path::new("/x/a.kvseq"), 4100, "key length", ">= 0", -3);
        let text = e.to_string();
        assert!(text.contains("/x/a.kvseq"), "{text}");
        assert!(text.contains("4100"), "{text}");
        assert!(text.contains("-3"), "{text}");
        assert_eq!(e.exit_code(), 3);
        let e = Error::io(Path::new("/y"), Some(7), io::Error::other("boom"));
        assert!(e.to_string().contains("at byte 7"));
        assert!(e.to_string().contains("I/O error"));
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        let text = Error::io(Path::new("/y"), Some(7), full).to_string();
        assert!(
            text.starts_with("/y: disk full") && text.contains("at byte 7"),
            "{text}"
        );
    }

    #[test]
    fn a_panicking_thread_is_an_internal_error_with_its_message() {
        let joined: Result<()> = std::thread::scope(|s| {
            let worker = s.spawn(|| -> Result<()> { panic!("index {} out of range", 7) });
            worker
                .join()
                .unwrap_or_else(|p| Err(Error::panicked("a test thread", &*p)))
        });
        let e = joined.unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e:?}");
        assert_eq!(e.exit_code(), 3);
        let text = e.to_string();
        assert!(text.contains("a bug in Wink"), "{text}");
        assert!(
            text.contains("a test thread panicked: index 7 out of range"),
            "{text}"
        );
        assert!(text.contains("may not have completed"), "{text}");
        let e = Error::panicked("w", &42u8);
        assert_eq!(
            e.to_string().split(';').next(),
            Some("internal error (a bug in Wink): w panicked")
        );
        assert!(matches!(e.again(), Error::Internal(_)));
    }
}
