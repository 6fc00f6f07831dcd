//! The one interface every contender implements.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::workload::PutBuf;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// What a read hands back: revision, tid, value bytes.
pub type Seen<'a> = &'a mut dyn FnMut(u64, Uuid, &[u8]);

/// Which of a store's files a visit wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Files {
    /// Files holding values: dropped from the page cache for "cold" reads.
    Data,
    /// Files a lookup reads before the value (the index): kept resident for "cold" reads.
    Index,
}

/// A render store under test.
pub trait Contender {
    /// Creates an empty store in `dir` (which exists and is empty).
    fn create(dir: &Path) -> Res<Self>
    where
        Self: Sized;

    /// Opens the store in `dir`, as a serving node would after a restart.
    fn open(dir: &Path) -> Res<Self>
    where
        Self: Sized;

    /// Applies `n` puts, the i-th filled by `fill(i, buf)`, then makes all of them durable with
    /// one commit.
    fn write_batch(&mut self, n: u64, fill: &mut dyn FnMut(u64, &mut PutBuf)) -> Res<()>;

    /// The latest render of the latest revision; false when the title has none.
    fn get_latest(&self, domain: &str, title: &str, seen: Seen<'_>) -> Res<bool>;

    /// One specific render; false when absent.
    fn get_render(
        &self,
        domain: &str,
        title: &str,
        rev: u64,
        tid: Uuid,
        seen: Seen<'_>,
    ) -> Res<bool>;

    /// Calls `f` with every file of the kind in the store in `dir`.
    fn visit(dir: &Path, kind: Files, f: &mut dyn FnMut(&Path)) -> Res<()>
    where
        Self: Sized;
}

/// Files of `dir` (not recursive) whose name passes `keep`.
pub fn files_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Res<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() && entry.file_name().to_str().is_some_and(&keep) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}
