//! Walks over a kvseq in file order: every entry, only live ones, with or without values, or
//! sparse (reading only the values whose key asks for it).

use super::entry::{EntryInfo, Window};
use super::{align_up, KvPointer, KvSeq};
use crate::error::Result;

/// How much a reader fetches at once when walking entries.
const SCAN_WINDOW: usize = 256 << 10;
/// How much a sparse walk fetches at once: a header, a key and a small value, not the large
/// values it steps over.
const SPARSE_WINDOW: usize = 4096;

impl KvSeq {
    /// Iterates entries in file order from `from` (usually [`KvSeq::first`]).
    pub fn iter(&self, from: KvPointer, live_only: bool) -> Iter<'_> {
        Iter {
            kv: self,
            window: Window::new(self.storage.as_ref(), self.filesize, SCAN_WINDOW),
            next: from.0.max(self.data_start),
            live_only,
            values: false,
            want_value: None,
            failed: false,
        }
    }

    /// Iterates entries in file order reading only headers, keys and the values whose key
    /// `want_value` accepts, a page at a time: a walk that steps over large values (a filesys's
    /// data entries) without reading them. Other entries come without a value.
    pub fn iter_sparse(
        &self,
        from: KvPointer,
        live_only: bool,
        want_value: fn(&[u8]) -> bool,
    ) -> Iter<'_> {
        Iter {
            window: Window::new(self.storage.as_ref(), self.filesize, SPARSE_WINDOW),
            values: true,
            want_value: Some(want_value),
            ..self.iter(from, live_only)
        }
    }

    /// Iterates entries with their values.
    pub fn iter_entries(&self, from: KvPointer, live_only: bool) -> Iter<'_> {
        Iter {
            values: true,
            ..self.iter(from, live_only)
        }
    }
}

/// Iterator over entries in file order; stops after the first error.
pub struct Iter<'a> {
    kv: &'a KvSeq,
    window: Window<'a>,
    next: u64,
    live_only: bool,
    values: bool,
    /// When set, only values whose key it accepts are read.
    want_value: Option<fn(&[u8]) -> bool>,
    failed: bool,
}

impl Iter<'_> {
    /// Where the next entry would start.
    pub fn position(&self) -> KvPointer {
        KvPointer(self.next)
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<EntryInfo>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed || self.next >= self.kv.filesize {
                return None;
            }
            let result = self.step();
            match result {
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
                Ok(info) if self.live_only && info.layout.deleted => continue,
                Ok(info) => return Some(Ok(info)),
            }
        }
    }
}

impl Iter<'_> {
    fn step(&mut self) -> Result<EntryInfo> {
        let kv = self.kv;
        let layout = kv.parse(&mut self.window, KvPointer(self.next))?;
        self.next = align_up(layout.end, kv.align);
        self.check_gap(layout.end)?;
        let skip = self.live_only && layout.deleted;
        let key = if skip {
            Vec::new()
        } else {
            kv.field_bytes(
                &mut self.window,
                layout.key_offset,
                layout.key_len,
                kv.keyrepr,
                "key",
            )?
        };
        let wanted = self.want_value.is_none_or(|want| want(&key));
        let value = if self.values && !skip && wanted {
            Some(kv.field_bytes(
                &mut self.window,
                layout.value_offset,
                layout.value_len,
                kv.valrepr,
                "value",
            )?)
        } else {
            None
        };
        Ok(EntryInfo { layout, key, value })
    }

    /// The gap after an entry ending at `end` is zero, and the last entry ends at FILESIZE
    /// (docs/FORMAT.md § kvseq): without this, a length field that shrank into the gap would go
    /// unseen.
    fn check_gap(&mut self, end: u64) -> Result<()> {
        let kv = self.kv;
        if end == kv.filesize || self.next == end {
            return Ok(());
        }
        if self.next > kv.filesize {
            return Err(kv.corrupt(
                end,
                "last entry",
                format!("to end at FILESIZE {}", kv.filesize),
                format!("end at {end}"),
            ));
        }
        let gap = self.window.get(end, self.next - end, "an alignment gap")?;
        match gap.iter().position(|b| *b != 0) {
            Some(i) => Err(kv.corrupt(
                end + i as u64,
                "alignment gap",
                "zero bytes",
                format!("0x{:02x}", gap[i]),
            )),
            None => Ok(()),
        }
    }
}
