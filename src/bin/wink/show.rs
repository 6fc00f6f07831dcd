//! Output helpers shared by the subcommands: buffered stdout, and how byte strings are shown.
//!
//! Keys and values are shown losslessly: in text output as a JSON string literal when they are
//! valid UTF-8 (`"abc"`, with JSON escapes), otherwise as `0x` followed by lowercase hex; in JSON
//! output as a string field (null when not UTF-8) plus a `_hex` field that always holds the bytes.

use std::io::{self, BufWriter, StdoutLock, Write};
use std::path::Path;

use serde::Serialize;
use wink::{Error, Result};

/// Buffered standard output; write errors name `<stdout>`.
pub struct Out {
    w: BufWriter<StdoutLock<'static>>,
}

impl Out {
    pub fn new() -> Out {
        Out {
            w: BufWriter::new(io::stdout().lock()),
        }
    }

    /// Writes one line of text.
    pub fn line(&mut self, text: &str) -> Result<()> {
        writeln!(self.w, "{text}").map_err(stdout_error)
    }

    /// Writes one JSON object on one line.
    pub fn json(&mut self, value: &impl Serialize) -> Result<()> {
        serde_json::to_writer(&mut self.w, value).map_err(|e| stdout_error(e.into()))?;
        self.line("")
    }

    /// Writes raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.w.write_all(bytes).map_err(stdout_error)
    }

    /// Writes out what is buffered, so that it lands before what goes to stderr next.
    pub fn flush(&mut self) -> Result<()> {
        self.w.flush().map_err(stdout_error)
    }

    /// Flushes; output is complete only after this.
    pub fn finish(mut self) -> Result<()> {
        self.w.flush().map_err(stdout_error)
    }
}

/// Prints a run's summary, one `FIELD<TAB>VALUE` line each: `fields`, then `seconds` and
/// `mb_per_s` (`bytes` over the seconds).
pub fn summary(fields: &[(&str, u64)], bytes: u64, seconds: f64) -> Result<()> {
    let rate = if seconds > 0.0 {
        bytes as f64 / 1e6 / seconds
    } else {
        0.0
    };
    let mut out = Out::new();
    for (field, value) in fields {
        out.line(&format!("{field}\t{value}"))?;
    }
    out.line(&format!("seconds\t{seconds:.3}"))?;
    out.line(&format!("mb_per_s\t{rate:.1}"))?;
    out.finish()
}

fn stdout_error(e: io::Error) -> Error {
    Error::io(Path::new("<stdout>"), None, e)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The text form: a JSON string literal when UTF-8, else `0x` and hex.
pub fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => quoted(s),
        Err(_) => format!("0x{}", hex(bytes)),
    }
}

/// `s` as a JSON string literal.
pub fn quoted(s: &str) -> String {
    // Serializing a str cannot fail: serde_json only fails on maps with non-string keys.
    serde_json::to_string(s).unwrap_or_default()
}

/// The JSON string field: the bytes as a string when UTF-8.
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}
