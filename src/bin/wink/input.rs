//! Content given on the command line: a file, or stdin.

use std::io::{self, Read};
use std::path::Path;

use wink::{Error, Result};

/// The bytes of `file`, or of stdin when it is `-` or absent. Read whole before any store or
/// filesys is locked, so that a slow producer never holds the writer lock.
pub fn read_input(file: Option<&Path>) -> Result<Vec<u8>> {
    let mut content = Vec::new();
    match file {
        Some(path) if path != Path::new("-") => {
            content = std::fs::read(path).map_err(|e| input_error(path, e))?;
        }
        _ => {
            io::stdin()
                .lock()
                .read_to_end(&mut content)
                .map_err(|e| Error::io(Path::new("<stdin>"), None, e))?;
        }
    }
    Ok(content)
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
