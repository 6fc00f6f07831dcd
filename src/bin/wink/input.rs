//! Content given on the command line: a file, or stdin, read against a limit.

use std::io::{self, Read};
use std::path::Path;

use wink::{Error, Result};

/// The most bytes `wink kv append`, `wink fs put` and `wink fs append` take from their input:
/// one filesys data entry (256 MiB). The library takes larger files, in pieces.
pub const MAX_INPUT: u64 = wink::filesys::MAX_DATA_ENTRY;

/// The bytes of `file`, or of stdin when it is `-` or absent: at most `limit` of them. An input
/// longer than that is refused (exit 2) as soon as it passes the limit, never read whole
/// first: a regular file by its length, before a byte is read; anything else (a pipe, a device
/// such as /dev/zero) once `limit + 1` bytes have come. `over` says whose limit it is, for the
/// message. Read before any store or filesys is locked, so that a slow producer never holds the
/// writer lock.
pub fn read_input(file: Option<&Path>, limit: u64, over: &str) -> Result<Vec<u8>> {
    let too_long = |source: &str| {
        Error::invalid(format!(
            "{source}: more than {limit} bytes, over {over}; nothing was written"
        ))
    };
    match file {
        Some(path) if path != Path::new("-") => {
            let file = std::fs::File::open(path).map_err(|e| input_error(path, e))?;
            let meta = file.metadata().map_err(|e| input_error(path, e))?;
            if meta.is_dir() {
                return Err(Error::invalid(format!(
                    "{}: cannot read it: a directory",
                    path.display()
                )));
            }
            if meta.is_file() && meta.len() > limit {
                return Err(too_long(&path.display().to_string()));
            }
            read_limited(file, limit, path)
                .and_then(|c| c.ok_or_else(|| too_long(&path.display().to_string())))
        }
        _ => read_limited(io::stdin().lock(), limit, Path::new("<stdin>"))
            .and_then(|c| c.ok_or_else(|| too_long("stdin"))),
    }
}

/// Up to `limit` bytes of `source`, or `None` when it holds more.
fn read_limited(source: impl Read, limit: u64, path: &Path) -> Result<Option<Vec<u8>>> {
    let mut content = Vec::new();
    source
        .take(limit.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|e| input_error(path, e))?;
    Ok((content.len() as u64 <= limit).then_some(content))
}

/// A missing or unreadable input file is a wrong argument (exit 2), not damage in a Wink file.
fn input_error(path: &Path, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied | io::ErrorKind::IsADirectory => {
            Error::invalid(format!("{}: cannot read it: {e}", path.display()))
        }
        _ => Error::io(path, None, e),
    }
}
