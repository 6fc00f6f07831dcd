//! Walks over the title records in bounded steps: a cursor over the meta datafile in file order,
//! which culling, archive runs and the dump each take a step at a time.
//!
//! Records are files of an append-only kvseq, so a position in it stays an entry boundary; a pass
//! ends where the datafile ended when it started. A record rewritten during the pass moves past
//! that end and waits for the next pass.

use crate::error::Result;
use crate::filesys::inode::{classify, KeyKind};
use crate::format::kvseq::KvPointer;

use super::Store;

/// Titles a step walks when the caller does not say.
pub const STEP_TITLES: usize = 256;

/// Where a walk over a store's title records stands. Valid for the store handle it was used
/// with (a writer's open may cut an unsynced tail off the records and write others there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TitleCursor {
    /// The position of the next entry to read in the meta datafile (`None`: its first entry).
    next: Option<u64>,
    /// Where the pass ends: the datafile's size when it started (`None`: not started).
    end: Option<u64>,
    done: bool,
}

impl TitleCursor {
    /// A cursor at the start of a new pass.
    pub fn new() -> TitleCursor {
        TitleCursor::default()
    }

    /// True once the pass has walked every record that existed when it started.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Ends the pass where it stands.
    pub(crate) fn finish_pass(&mut self) {
        self.done = true;
    }

    /// The cursor as text, for a caller that walks a store over several requests: `NEXT.END`
    /// in hex (`-` for a position not taken yet), or `done`.
    pub fn token(&self) -> String {
        if self.done {
            return "done".to_string();
        }
        let hex = |p: Option<u64>| p.map_or_else(|| "-".to_string(), |p| format!("{p:x}"));
        format!("{}.{}", hex(self.next), hex(self.end))
    }

    /// The cursor [`TitleCursor::token`] wrote; `None` for any other text. A position that is
    /// not an entry boundary of the same store makes the walk fail (the records are untrusted
    /// bytes), never read elsewhere.
    pub fn from_token(text: &str) -> Option<TitleCursor> {
        if text == "done" {
            return Some(TitleCursor {
                done: true,
                ..TitleCursor::default()
            });
        }
        let (next, end) = text.split_once('.')?;
        let pos = |t: &str| match t {
            "-" => Some(None),
            t if t.len() <= 16 => u64::from_str_radix(t, 16).ok().map(Some),
            _ => None,
        };
        Some(TitleCursor {
            next: pos(next)?,
            end: pos(end)?,
            done: false,
        })
    }

    /// (bytes of the meta datafile walked, bytes the pass walks), for progress reports.
    pub fn progress(&self) -> (u64, u64) {
        let end = self.end.unwrap_or(0);
        if self.done {
            return (end, end);
        }
        (self.next.unwrap_or(0).min(end), end)
    }
}

/// The titles of one step: each name with the position after its record's inode entry.
pub(crate) struct Walk {
    pub titles: Vec<(Vec<u8>, u64)>,
    /// The position after the last entry read.
    pub walked_to: Option<u64>,
    pub done: bool,
}

impl Walk {
    /// Moves `cursor` past every title of the walk.
    pub fn finish(&self, cursor: &mut TitleCursor) {
        if self.walked_to.is_some() {
            cursor.next = self.walked_to;
        }
        cursor.done = self.done;
    }

    /// Moves `cursor` past the `i`-th title only (a step that stopped there).
    pub fn stop_after(&self, cursor: &mut TitleCursor, i: usize) {
        if let Some((_, after)) = self.titles.get(i) {
            cursor.next = Some(*after);
        }
    }
}

impl Store {
    /// The next titles of a pass, at most `max`; the cursor does not move (see [`Walk`]).
    pub(crate) fn walk_titles(&self, cursor: &mut TitleCursor, max: usize) -> Result<Walk> {
        let data = self.records.fs.data();
        let end = *cursor.end.get_or_insert(data.filesize());
        let mut walk = Walk {
            titles: Vec::new(),
            walked_to: None,
            done: cursor.done,
        };
        if cursor.done {
            return Ok(walk);
        }
        let start = cursor.next.map_or(data.first(), KvPointer);
        let mut iter = data.iter_entries(start, true);
        while walk.titles.len() < max.max(1) {
            let entry = match iter.next() {
                None => {
                    walk.done = true;
                    break;
                }
                Some(Ok(entry)) => entry,
                // The titles before the damage are worked on; the next step meets it again.
                Some(Err(_)) if !walk.titles.is_empty() => break,
                Some(Err(e)) => return Err(e),
            };
            if entry.layout.ptr.0 >= end {
                walk.done = true;
                break;
            }
            let after = iter.position().0;
            walk.walked_to = Some(after);
            if let KeyKind::Inode { name, n: 0 } = classify(&entry.key) {
                walk.titles.push((name.to_vec(), after));
            }
        }
        Ok(walk)
    }
}
