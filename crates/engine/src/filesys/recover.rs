//! What a writer's open repairs in the datafile: a tail past SYNCSIZE written elsewhere,
//! uncommitted bytes past FILESIZE a crash left, a missing NEXTFID. Each repair is reported in
//! [`Filesys::recovery`].

use super::{inode, Filesys, NEXTFID};
use crate::error::{Error, Result};
use crate::format::kvseq::{KvPointer, KvSeq};
use crate::format::superblock::var;
use crate::storage;

impl Filesys {
    /// Reports bytes past FILESIZE (an append that never committed) and, for a datafile written
    /// elsewhere whose FILESIZE passes SYNCSIZE, drops the unsynced tail.
    pub(super) fn recover_tail(&mut self) -> Result<()> {
        let filesize = self.data.filesize();
        let syncsize = self
            .data
            .superblock()
            .get_u64(self.data.path(), var::SYNCSIZE)?
            .unwrap_or(filesize);
        if syncsize < filesize {
            let (entries, live) = count_entries(&self.data, syncsize)?;
            let (dropped, damaged) = count_tail(&self.data, syncsize);
            self.data.truncate_logical(syncsize, entries, live)?;
            self.recovery.actions.push(format!(
                "{}: dropped unsynced tail {}..{}: {dropped} entries{} (FILESIZE set back to \
                 SYNCSIZE)",
                self.data.path().display(),
                syncsize,
                filesize,
                if damaged {
                    " and an unreadable rest"
                } else {
                    ""
                }
            ));
            self.sync()?;
        }
        if let Some((from, to)) = self.uncommitted_bytes(filesize)? {
            // Zeroed, as preallocated space is, so that the next open does not report them again
            // (the next appends overwrite only as many as they write). Nothing reads them.
            let zeros = vec![0u8; (to - from).min(1 << 20) as usize];
            let mut at = from;
            while at < to {
                let n = (to - at).min(zeros.len() as u64) as usize;
                self.data
                    .storage()
                    .write_at(&zeros[..n], at)
                    .map_err(|e| Error::io(self.data.path(), Some(at), e))?;
                at += n as u64;
            }
            self.recovery.actions.push(format!(
                "{}: zeroed uncommitted bytes {from}..{to} (appends without a commit, left by a \
                 crash or a failed write such as on a full disk; no header counted them)",
                self.data.path().display(),
            ));
        }
        Ok(())
    }

    /// The range from the first to the last non-zero byte past FILESIZE (the space beyond is
    /// preallocated zeros), if there is one. Read 1 MiB at a time, at most [`UNCOMMITTED_SCAN`]:
    /// a crash leaves at most what was appended since the last commit.
    fn uncommitted_bytes(&self, filesize: u64) -> Result<Option<(u64, u64)>> {
        let len = storage::length(self.data.storage())?.min(filesize + UNCOMMITTED_SCAN);
        let mut found: Option<(u64, u64)> = None;
        let mut buf = vec![0u8; 1 << 20];
        let mut at = filesize;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            storage::read_exact_at(self.data.storage(), &mut buf[..n], at, "the datafile tail")?;
            if let Some(last) = buf[..n].iter().rposition(|b| *b != 0) {
                let first = buf[..n].iter().position(|b| *b != 0).unwrap_or(last);
                let start = found.map_or(at + first as u64, |(start, _)| start);
                found = Some((start, at + last as u64 + 1));
            } else if found.is_some() {
                // A whole chunk of zeros after the bytes found: the preallocated rest.
                break;
            }
            at += n as u64;
        }
        // What was read is preallocated zeros (or bytes no commit counted): nothing reads them,
        // and left cached they were most of what a `wink put` (a writer opened for one put)
        // left in the page cache, up to the whole preallocation a time. The page FILESIZE ends
        // in stays: the next append fills it.
        let from = filesize.div_ceil(storage::PAGE) * storage::PAGE;
        if at > from {
            let _ = self.data.storage().drop_cache(from, at - from);
        }
        Ok(found)
    }

    /// A datafile written elsewhere may lack NEXTFID: it is derived once from the inodes.
    pub(super) fn ensure_next_fileid(&mut self) -> Result<()> {
        if self.data.var(NEXTFID).is_some() {
            return Ok(());
        }
        let mut next = 1;
        for entry in self.data.iter_entries(self.data.first(), false) {
            let e = entry?;
            if let inode::KeyKind::Inode { .. } = inode::classify(&e.key) {
                let value = e.value.unwrap_or_default();
                if let Ok(i) = inode::Inode::decode(&value, self.data.path(), e.layout.value_offset)
                {
                    next = next.max(i.fileid + 1);
                }
            }
        }
        self.data.set_var(NEXTFID, next as i64)?;
        self.recovery.actions.push(format!(
            "{}: added NEXTFID {next}",
            self.data.path().display()
        ));
        Ok(())
    }
}

/// How far past FILESIZE a writer's open looks for bytes a crash left (more than any commit's
/// appends between two drop-behind syncs leave unsynced in practice).
const UNCOMMITTED_SCAN: u64 = 64 << 20;

/// Entries from `from` to FILESIZE (a tail about to be dropped), and whether an unreadable one
/// (a torn append) ended the count early.
fn count_tail(kv: &KvSeq, from: u64) -> (u64, bool) {
    let mut entries = 0;
    for e in kv.iter(KvPointer(from), false) {
        if e.is_err() {
            return (entries, true);
        }
        entries += 1;
    }
    (entries, false)
}

/// Counts (entries, live entries) in `[first, end)`; `end` must be an entry boundary.
fn count_entries(kv: &KvSeq, end: u64) -> Result<(u64, u64)> {
    let (mut entries, mut live) = (0, 0);
    let mut it = kv.iter(kv.first(), false);
    while it.position().0 < end {
        let Some(e) = it.next() else { break };
        let e = e?;
        entries += 1;
        live += u64::from(!e.layout.deleted);
    }
    if it.position().0 != end && end > kv.first().0 {
        return Err(Error::corrupt(
            kv.path(),
            end,
            "SYNCSIZE",
            "an entry boundary",
            format!("inside the entry ending at {}", it.position()),
        ));
    }
    Ok((entries, live))
}
