//! What a check finds: [`Problem`]s of a [`Severity`], gathered per file in a [`Report`].

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::format::superblock::Format;

/// How bad a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Bookkeeping is off, but every entry still reads correctly.
    Warning,
    /// The file is damaged or cannot be read.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding: which file, where, how bad, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in.
    pub path: PathBuf,
    /// The byte offset of the damage; `None` only when there is no place to point at (a file
    /// that cannot be opened).
    pub offset: Option<u64>,
    /// How bad it is.
    pub severity: Severity,
    /// What is wrong, in one line (what was expected and what was found, where that applies).
    pub what: String,
}

impl Problem {
    /// The problem an error from the library describes.
    pub fn from_error(fallback: &Path, e: &Error) -> Problem {
        let (path, offset, what) = match e {
            Error::Corrupt {
                path,
                offset,
                what,
                expected,
                found,
            } => (
                path,
                Some(*offset),
                format!("{what}: expected {expected}, found {found}"),
            ),
            Error::Unsupported { path, offset, what } => {
                (path, Some(*offset), format!("unsupported: {what}"))
            }
            Error::Io {
                path,
                offset,
                source,
            } => (path, *offset, format!("I/O error: {source}")),
            other => (&fallback.to_path_buf(), None, other.to_string()),
        };
        Problem {
            path: path.clone(),
            offset,
            severity: Severity::Error,
            what,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.severity)?;
        if let Some(offset) = self.offset {
            write!(f, " at byte {offset}")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// What [`check_file`](super::check_file) found in one file.
#[derive(Clone, Debug)]
pub struct Report {
    /// The file checked.
    pub path: PathBuf,
    /// The format, when the superblock names a known one.
    pub format: Option<Format>,
    /// A one-line description of what was checked (format, PURPOSE, counts).
    pub summary: String,
    /// Everything found wrong; empty for a sound file.
    pub problems: Vec<Problem>,
}

impl Report {
    pub(super) fn new(path: &Path) -> Report {
        Report {
            path: path.to_path_buf(),
            format: None,
            summary: String::new(),
            problems: Vec::new(),
        }
    }

    /// Problems of severity [`Severity::Error`].
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    /// Problems of severity [`Severity::Warning`].
    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    /// True when nothing counts against the file; `strict` counts warnings too.
    pub fn is_clean(&self, strict: bool) -> bool {
        self.errors() == 0 && (!strict || self.warnings() == 0)
    }

    fn count(&self, severity: Severity) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == severity)
            .count()
    }

    pub(super) fn push(&mut self, severity: Severity, offset: Option<u64>, what: String) {
        self.problems.push(Problem {
            path: self.path.clone(),
            offset,
            severity,
            what,
        });
    }

    pub(super) fn error(&mut self, offset: u64, what: String) {
        self.push(Severity::Error, Some(offset), what);
    }

    pub(super) fn warning(&mut self, offset: u64, what: String) {
        self.push(Severity::Warning, Some(offset), what);
    }

    pub(super) fn failed(&mut self, e: &Error) {
        self.problems.push(Problem::from_error(&self.path, e));
    }
}
