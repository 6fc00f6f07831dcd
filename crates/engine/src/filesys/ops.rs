//! File operations: lookup, stat, read, put, create, append, delete, rename.

use crate::error::{Error, Result};
use crate::format::hash::KeyHash;
use crate::format::hindex::{Found, Probe};
use crate::format::kvseq::{Entry, KvPointer};

use super::inode::{data_key, inode_key, Inode};
use super::{FileStat, Filesys, Staleness, DTOTSZ, ITOTSZ, MAX_DATA_ENTRY, MAX_NAME, NEXTFID};

/// A live file found through the index.
#[derive(Debug)]
pub(super) struct Located {
    pub found: Found,
    pub entry: Entry,
    pub inode: Inode,
    /// The entry is one this writer appended, kept live in memory: its data entries are live
    /// too, and are deleted without reading them first.
    pub kept: bool,
}

fn validate_name(name: &[u8]) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "a file name has at most {MAX_NAME} bytes ({} given)",
            name.len()
        )));
    }
    if name.contains(&0) {
        return Err(Error::invalid("a file name cannot contain a NUL byte"));
    }
    Ok(())
}

/// An inode's (kv_pointer, data_size) pairs.
type Pairs = Vec<(KvPointer, u64)>;

/// The data entries of `inode` that hold bytes of `[start, end)` of its file: (index, pointer,
/// size, the offset in the file of the entry's first byte).
fn entries_within(
    inode: &Inode,
    start: u64,
    end: u64,
) -> impl Iterator<Item = (usize, KvPointer, u64, u64)> + '_ {
    let mut pos = 0u64;
    inode
        .data
        .iter()
        .enumerate()
        .filter_map(move |(n, &(ptr, size))| {
            let (lo, hi) = (pos, pos.saturating_add(size));
            pos = hi;
            (hi > start && lo < end).then_some((n, ptr, size, lo))
        })
}

/// The most a read reserves before the data entries confirm the sizes.
const MAX_RESERVE: usize = 64 << 20;

/// Data entries up to this size are read with the entry's header in one pread.
const SMALL_ENTRY: u64 = 3 << 10;
/// Bytes of a datafile entry besides its key and value: delflag, the two length prefixes, and
/// room for alignment padding (a read-size hint only).
const ENTRY_HEADER: usize = 16;

/// Where [`Filesys::read_for_update`] found a file (or that it found none), and when.
#[derive(Debug)]
pub struct Version {
    located: Option<Located>,
    /// The lookup's probe of the index: where a new file's name goes, when it found none.
    probe: Probe,
    writes: u64,
}

/// What [`Filesys::read_for_update`] returns: the file's metadata and content (`None`: no such
/// file), and its [`Version`].
pub type ForUpdate = (Option<(FileStat, Vec<u8>)>, Version);

/// Where a piece of a file's content lies in the datafile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset of the data entry's value.
    pub offset: u64,
    /// Length of the value, bytes.
    pub len: u64,
}

fn chunks(len: u64) -> u64 {
    len.div_ceil(MAX_DATA_ENTRY)
}

impl Filesys {
    /// A live file, or `None` (also for a name whose inode a later commit moved out of this
    /// view: a lookup through a stale view misses, as it always has; only
    /// [`Filesys::read_located_as`] tells such a miss apart).
    pub(super) fn locate(&self, name: &[u8]) -> Result<Option<Located>> {
        self.locate_as(name, Staleness::Strict)
    }

    /// Asks the kernel for the inode of `name` (a read of the file soon to come), so that its
    /// disk read overlaps what the caller reads first. The index alone finds it, by the stored
    /// hash of its cell (a collision only hints the wrong bytes): nothing is read or checked
    /// here, and nothing goes wrong when there is no such file.
    pub fn will_need_file(&self, name: &[u8]) {
        if validate_name(name).is_err() {
            return;
        }
        let key = inode_key(name);
        let len = self.inode_entry_len(&key) as u64;
        let _ = self.idx.find(&key, |ptr| {
            let _ = self.data.storage().will_need(ptr.0, len);
            Ok(true)
        });
    }

    /// Bytes of an inode's entry (header, key and an inode of ISZ bytes): what one small read
    /// brings (a larger inode reads on).
    fn inode_entry_len(&self, key: &[u8]) -> usize {
        let isz = self.data.var(super::ISZ).unwrap_or(0).max(0) as usize;
        ENTRY_HEADER + key.len() + isz
    }

    /// Returns the inode entry at `ptr` and whether it came from what this writer kept of the
    /// entries it appended ([`super::KnownKeys`]); otherwise it is read (`hint`: its size).
    fn read_inode_entry(&self, ptr: KvPointer, hint: usize) -> Result<(Entry, bool)> {
        match self.known_keys.entry(ptr) {
            Some(entry) => Ok((entry, true)),
            None => Ok((self.data.read_sized(ptr, hint)?, false)),
        }
    }

    /// A read-only handle reports a data entry deleted under it as stale, not as damage.
    fn default_staleness(&self) -> Staleness {
        if self.writable {
            Staleness::Strict
        } else {
            Staleness::Report
        }
    }

    /// Finds a live file. With [`Staleness::Report`], a miss that passed a sign of a later commit
    /// (an index cell naming an entry past this view's FILESIZE, or this name's inode deleted
    /// while the cell still names it) is [`Error::Stale`], not "no such file".
    fn locate_as(&self, name: &[u8], staleness: Staleness) -> Result<Option<Located>> {
        Ok(self.locate_probed(name, staleness)?.0)
    }

    /// [`Filesys::locate_as`], also returning its probe of the index (for the insert of a name
    /// it did not find).
    fn locate_probed(&self, name: &[u8], staleness: Staleness) -> Result<(Option<Located>, Probe)> {
        self.check_failed()?;
        validate_name(name)?;
        let key = inode_key(name);
        let mut hit = None;
        let mut stale_at = None;
        let hint = self.inode_entry_len(&key);
        let probe = self
            .idx
            .probe(&key, |ptr| match self.read_inode_entry(ptr, hint) {
                Ok((e, kept)) if e.key == key => {
                    let live = !e.deleted;
                    if !live {
                        stale_at.get_or_insert(ptr.0);
                    }
                    hit = Some((e, kept));
                    Ok(live)
                }
                // The cell's stored hash is this key's: another key there is a 64-bit collision
                // only if its own hash is the same, else the key or the cell is damaged.
                Ok((e, _))
                    if self.idx.cellsz() >= 2
                        && KeyHash::of(&e.key).stored() != KeyHash::of(&key).stored() =>
                {
                    Err(Error::corrupt(
                        self.data.path(),
                        ptr.0,
                        format!(
                            "the key of the entry the index names for {:?}",
                            String::from_utf8_lossy(&key)
                        ),
                        "a key with the hash its index cell stores",
                        format!("{:?}", String::from_utf8_lossy(&e.key)),
                    ))
                }
                Ok(_) => Ok(false),
                // A cell naming an entry past this handle's FILESIZE: a commit it has not seen.
                Err(Error::NotFound(_)) => {
                    stale_at.get_or_insert(ptr.0);
                    Ok(false)
                }
                Err(e) => Err(e),
            })?;
        let (Some(found), Some((entry, kept))) = (probe.found(), hit) else {
            let missed = match (staleness, stale_at) {
                (Staleness::Report, Some(at)) => Err(Error::stale(
                    self.data.path(),
                    at,
                    format!(
                        "the index names an inode of {:?} this view does not hold live",
                        String::from_utf8_lossy(name)
                    ),
                )),
                // The cells the miss was decided on are the ones checked.
                _ if self.verify_misses => match self.idx.check_probe(&probe, &self.keys())? {
                    None => Ok(None),
                    // A cell naming an entry past this view: a commit it has not seen.
                    Some(cell) if staleness == Staleness::Report => Err(Error::stale(
                        self.data.path(),
                        self.data.filesize(),
                        format!("index cell {cell} names an entry this view does not hold"),
                    )),
                    Some(cell) => Err(Error::corrupt(
                        self.idx.path(),
                        self.idx.cell_offset(cell),
                        format!(
                            "cell {cell} on the probe path of {:?}",
                            String::from_utf8_lossy(name)
                        ),
                        "a pointer to an entry",
                        "a pointer past the datafile's entries",
                    )),
                },
                _ => Ok(None),
            };
            return missed.map(|none| (none, probe));
        };
        let inode = Inode::decode(&entry.value, self.data.path(), entry.value_offset)?;
        let located = Located {
            found,
            entry,
            inode,
            kept,
        };
        Ok((Some(located), probe))
    }

    /// A file's metadata, or `None`.
    pub fn stat(&self, name: &[u8]) -> Result<Option<FileStat>> {
        Ok(self
            .locate(name)?
            .map(|l| FileStat::of(name, l.entry.ptr, &l.inode)))
    }

    /// A whole file with its metadata, or `None`. A read-only handle reports a file a later
    /// commit rewrote while it was being read as [`Error::Stale`].
    pub fn read_located(&self, name: &[u8]) -> Result<Option<(FileStat, Vec<u8>)>> {
        self.read_file(name, Staleness::Strict, self.default_staleness())
    }

    /// [`Filesys::read_located`] of a file its reader bounds: one whose size (LSIZE) is over
    /// `max` bytes is refused before a byte of it is read, as damage at its inode.
    pub fn read_located_within(
        &self,
        name: &[u8],
        max: u64,
    ) -> Result<Option<(FileStat, Vec<u8>)>> {
        let Some(located) = self.locate(name)? else {
            return Ok(None);
        };
        if located.inode.lsize > max {
            return Err(Error::corrupt(
                self.data.path(),
                located.entry.ptr.0,
                format!("size of {:?}", String::from_utf8_lossy(name)),
                format!("at most {max} bytes"),
                located.inode.lsize,
            ));
        }
        let bytes = self.read_inode_as(&located.inode, 0, u64::MAX, self.default_staleness())?;
        Ok(Some((
            FileStat::of(name, located.entry.ptr, &located.inode),
            bytes,
        )))
    }

    /// [`Filesys::read_located`], treating every sign of a later commit as `staleness` says:
    /// with [`Staleness::Report`], also a miss that passed one is [`Error::Stale`], so that a
    /// caller that can refresh gets the current answer instead of "no such file".
    pub fn read_located_as(
        &self,
        name: &[u8],
        staleness: Staleness,
    ) -> Result<Option<(FileStat, Vec<u8>)>> {
        self.read_file(name, staleness, staleness)
    }

    fn read_file(
        &self,
        name: &[u8],
        lookup: Staleness,
        data: Staleness,
    ) -> Result<Option<(FileStat, Vec<u8>)>> {
        let Some(located) = self.locate_as(name, lookup)? else {
            return Ok(None);
        };
        let bytes = self.read_inode_as(&located.inode, 0, u64::MAX, data)?;
        Ok(Some((
            FileStat::of(name, located.entry.ptr, &located.inode),
            bytes,
        )))
    }

    /// Where a file's content lies: one extent per data entry, in order; `None` when there is no
    /// such file. (A layer above that keeps its own pointers finds a value again after a crash.)
    pub fn extents(&self, name: &[u8]) -> Result<Option<Vec<Extent>>> {
        let Some(located) = self.locate(name)? else {
            return Ok(None);
        };
        let inode = &located.inode;
        let mut out = Vec::with_capacity(inode.data.len());
        for (n, &(ptr, size)) in inode.data.iter().enumerate() {
            let (layout, key) = self.data.read_key(ptr)?;
            let expected = data_key(inode.fileid, n as u64);
            self.check_data_entry(
                ptr,
                n,
                inode,
                &expected,
                size,
                layout.deleted,
                &key,
                layout.value_len,
                self.default_staleness(),
            )?;
            out.push(Extent {
                offset: layout.value_offset,
                len: size,
            });
        }
        Ok(Some(out))
    }

    /// A whole file.
    pub fn read(&self, name: &[u8]) -> Result<Vec<u8>> {
        self.read_range(name, 0, u64::MAX)
    }

    /// Up to `len` bytes from `offset` (fewer at the end of the file).
    pub fn read_range(&self, name: &[u8], offset: u64, len: u64) -> Result<Vec<u8>> {
        let located = self.locate(name)?.ok_or_else(|| {
            Error::NotFound(format!(
                "{}: no file {:?}",
                self.base.display(),
                String::from_utf8_lossy(name)
            ))
        })?;
        self.read_inode(&located.inode, offset, len)
    }

    /// Reads `[offset, offset + len)` of the file an inode describes, checking every data entry.
    pub(super) fn read_inode(&self, inode: &Inode, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read_inode_as(inode, offset, len, self.default_staleness())
    }

    /// Asks the kernel for the whole content of `name` (its inode read here, found by the
    /// index): a caller about to read several small files asks for all of them first, so that
    /// their disk reads overlap. Only a hint: nothing goes wrong when there is no such file.
    pub fn will_need_content(&self, name: &[u8]) {
        if let Ok(Some(located)) = self.locate(name) {
            self.will_need_entries(&located.inode, 0, located.inode.lsize);
        }
    }

    /// Asks the kernel for every data entry of `[start, end)` of a file at once, when the range
    /// spans more than one: read in turn, each entry whose pages are not cached would wait for a
    /// disk read of its own (a file an archive appends to once per run has one entry per run);
    /// asked together, the reads overlap. Only a hint: the reads that follow check everything.
    fn read_ahead(&self, inode: &Inode, start: u64, end: u64) {
        if entries_within(inode, start, end).nth(1).is_none() {
            return;
        }
        self.will_need_entries(inode, start, end);
    }

    fn will_need_entries(&self, inode: &Inode, start: u64, end: u64) {
        let key = data_key(inode.fileid, 0).len() as u64;
        for (_, ptr, size, _) in entries_within(inode, start, end) {
            let len = (ENTRY_HEADER as u64 + key).saturating_add(size);
            let len = len.min(self.data.filesize().saturating_sub(ptr.0));
            let _ = self.data.storage().will_need(ptr.0, len);
        }
    }

    fn read_inode_as(
        &self,
        inode: &Inode,
        offset: u64,
        len: u64,
        staleness: Staleness,
    ) -> Result<Vec<u8>> {
        let start = offset.min(inode.lsize);
        let end = start.saturating_add(len).min(inode.lsize);
        // The inode's sizes are checked entry by entry as they are read; reserve no more up front
        // than a sane amount, so a forged LSIZE cannot ask for an absurd allocation.
        let mut out = Vec::with_capacity(((end - start) as usize).min(MAX_RESERVE));
        self.read_ahead(inode, start, end);
        for (n, ptr, size, lo) in entries_within(inode, start, end) {
            let from = start.max(lo) - lo;
            let to = end.min(lo.saturating_add(size)) - lo;
            let expected = data_key(inode.fileid, n as u64);
            // What an entry read from disk must be: (deleted, key, value length) as found.
            let check = |deleted: bool, key: &[u8], len: u64| {
                self.check_data_entry(ptr, n, inode, &expected, size, deleted, key, len, staleness)
            };
            if size <= SMALL_ENTRY {
                // One pread brings header, key and value of a small entry.
                let entry = self
                    .data
                    .read_sized(ptr, ENTRY_HEADER + expected.len() + size as usize)?;
                check(entry.deleted, &entry.key, entry.value.len() as u64)?;
                out.extend_from_slice(&entry.value[from as usize..to as usize]);
                continue;
            }
            // The value first: its first page holds the header too, so a cold read costs one
            // disk read, not two. Nothing is returned unless the header checks out, and nothing
            // is allocated for a size no entry of this datafile can have.
            if ptr.0.saturating_add(to - from) > self.data.filesize() {
                let (layout, key) = self.data.read_key(ptr)?;
                check(layout.deleted, &key, layout.value_len)?;
            }
            let at = out.len();
            out.resize(at + (to - from) as usize, 0);
            let (layout, key) =
                self.data
                    .read_value_then_key(ptr, expected.len() as u64, from, &mut out[at..])?;
            check(layout.deleted, &key, layout.value_len)?;
        }
        Ok(out)
    }

    /// A live inode's pointers must name its own live data entries of the recorded size. Its own
    /// entry found deleted, read through a view that reports staleness, is a rewrite committed
    /// after the inode was read (data entries are never deleted while their inode is live).
    #[allow(clippy::too_many_arguments)]
    fn check_data_entry(
        &self,
        ptr: KvPointer,
        n: usize,
        inode: &Inode,
        expected: &[u8],
        size: u64,
        deleted: bool,
        key: &[u8],
        len: u64,
        staleness: Staleness,
    ) -> Result<()> {
        if key == expected && len == size {
            if !deleted {
                return Ok(());
            }
            if staleness == Staleness::Report {
                return Err(Error::stale(
                    self.data.path(),
                    ptr.0,
                    format!(
                        "data entry {n} of file id {:x} was deleted (its file rewritten or \
                         removed)",
                        inode.fileid
                    ),
                ));
            }
        }
        Err(Error::corrupt(
            self.data.path(),
            ptr.0,
            format!("data entry {n} of file id {:x}", inode.fileid),
            format!(
                "live {:?} of {size} bytes",
                String::from_utf8_lossy(expected)
            ),
            format!(
                "{}{:?} of {len} bytes",
                if deleted { "deleted " } else { "" },
                String::from_utf8_lossy(key)
            ),
        ))
    }

    fn next_fileid(&mut self) -> Result<u64> {
        let id = self
            .data
            .var(NEXTFID)
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(1)
            .max(1);
        self.data.set_var(NEXTFID, id as i64 + 1)?;
        Ok(id)
    }

    fn add_var(&mut self, name: crate::format::superblock::VarName, delta: i64) -> Result<()> {
        let v = self.data.var(name).unwrap_or(0);
        self.data.set_var(name, v.saturating_add(delta))
    }

    /// Appends data entries `<fileid>/D<first>…` holding `content`.
    fn write_data(
        &mut self,
        fileid: u64,
        first: u64,
        content: &[u8],
    ) -> Result<(Pairs, Vec<Extent>)> {
        let (mut pairs, mut extents) = (Vec::new(), Vec::new());
        for (i, piece) in content.chunks(MAX_DATA_ENTRY as usize).enumerate() {
            let layout = self
                .data
                .append_entry(&data_key(fileid, first + i as u64), piece)?;
            pairs.push((layout.ptr, piece.len() as u64));
            extents.push(Extent {
                offset: layout.value_offset,
                len: layout.value_len,
            });
        }
        Ok((pairs, extents))
    }

    /// Marks a file's inode (and, with `with_data`, its data entries) deleted.
    fn mark_deleted(&mut self, located: &Located, with_data: bool) -> Result<()> {
        if with_data {
            for &(ptr, _) in &located.inode.data {
                if located.kept {
                    self.data.delete_live(ptr)?;
                } else {
                    self.data.delete(ptr)?;
                }
            }
        }
        // Read whole (and found live) by the lookup that made `located`.
        self.data.delete_read(&located.entry)?;
        self.known_keys.forget_value(located.entry.ptr);
        Ok(())
    }

    /// The smallest inode size ≥ ISZ, doubling, that holds `pairs` pointers.
    fn inode_size_for(&self, pairs: u64) -> Result<u64> {
        let isz = self
            .data
            .var(super::ISZ)
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(120);
        if self.is_ao() {
            if pairs > Inode::capacity_of(isz) {
                return Err(Error::Full {
                    path: self.data.path().to_path_buf(),
                    what: format!(
                        "an ao inode of {isz} bytes holds {} data entries; this file needs \
                         {pairs} (create the filesys with a larger --isz)",
                        Inode::capacity_of(isz)
                    ),
                });
            }
            return Ok(isz);
        }
        let mut size = isz;
        while Inode::capacity_of(size) < pairs {
            size = size
                .checked_mul(2)
                .filter(|s| *s <= super::inode::MAX_SIZE)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "a file of {pairs} data entries needs an inode over {} bytes",
                        super::inode::MAX_SIZE
                    ))
                })?;
        }
        Ok(size)
    }

    /// A whole file with its metadata, or `None`, and a [`Version`] for [`Filesys::put_over`]:
    /// a read-modify-write of one file looks its name up once, not twice.
    pub fn read_for_update(&self, name: &[u8]) -> Result<ForUpdate> {
        let (stat, version) = self.locate_for_update(name)?;
        let read = match (stat, self.read_version(&version)?) {
            (Some(stat), Some(bytes)) => Some((stat, bytes)),
            _ => None,
        };
        Ok((read, version))
    }

    /// The lookup of [`Filesys::read_for_update`] alone: the file's metadata (`None`: no such
    /// file) and its [`Version`], for a caller that may hold the content of the inode found
    /// already (it names the inode: [`FileStat::inode`]), else reads it
    /// ([`Filesys::read_version`]).
    pub fn locate_for_update(&self, name: &[u8]) -> Result<(Option<FileStat>, Version)> {
        let writes = self.writes();
        let (located, probe) = self.locate_probed(name, Staleness::Strict)?;
        let stat = located
            .as_ref()
            .map(|l| FileStat::of(name, l.entry.ptr, &l.inode));
        let version = Version {
            located,
            probe,
            writes,
        };
        Ok((stat, version))
    }

    /// The content of the file a [`Version`] found (`None`: it found none).
    pub fn read_version(&self, version: &Version) -> Result<Option<Vec<u8>>> {
        match &version.located {
            Some(l) => Ok(Some(self.read_inode(&l.inode, 0, u64::MAX)?)),
            None => Ok(None),
        }
    }

    /// [`Filesys::put`] of a file read with [`Filesys::read_for_update`]: the lookup made then is
    /// used when nothing was written to this filesys since (and the index did not grow now);
    /// otherwise the name is looked up again.
    pub fn put_over(
        &mut self,
        name: &[u8],
        ftype: u8,
        content: &[u8],
        version: Version,
    ) -> Result<FileStat> {
        let fresh = version.writes == self.writes();
        self.check_writable()?;
        validate_name(name)?;
        let before = self.writes();
        self.ensure_index_room()?;
        let (old, probe) = if fresh && self.writes() == before {
            (version.located, version.probe)
        } else {
            self.locate_probed(name, Staleness::Strict)?
        };
        Ok(self.put_at(name, ftype, content, old, &probe)?.0)
    }

    /// Writes a file: creates it, or replaces it (a new version, the old one marked deleted).
    pub fn put(&mut self, name: &[u8], ftype: u8, content: &[u8]) -> Result<FileStat> {
        Ok(self.put_located(name, ftype, content)?.0)
    }

    /// [`Filesys::put`], also returning where the content's bytes lie in the datafile (for a
    /// layer above that keeps its own pointers and reads values with one pread).
    pub fn put_located(
        &mut self,
        name: &[u8],
        ftype: u8,
        content: &[u8],
    ) -> Result<(FileStat, Vec<Extent>)> {
        self.check_writable()?;
        validate_name(name)?;
        self.ensure_index_room()?;
        let (old, probe) = self.locate_probed(name, Staleness::Strict)?;
        self.put_at(name, ftype, content, old, &probe)
    }

    /// Appends an inode entry under `key` and keeps it ([`super::KnownKeys`]): moved from the
    /// entry at `replaces` (the file's previous inode), or noted afresh. Returns where it lies.
    fn append_inode(
        &mut self,
        key: &[u8],
        inode: &Inode,
        replaces: Option<KvPointer>,
    ) -> Result<KvPointer> {
        let value = inode.encode();
        let layout = self.data.append_entry(key, &value)?;
        let kept = Some((&value[..], layout.value_offset));
        if let Some(ahead) = &mut self.ahead {
            ahead.note(layout.ptr, key);
        }
        match replaces {
            Some(old) => self.known_keys.moved(old, layout.ptr, key, kept),
            None => self.known_keys.note(layout.ptr, key, kept),
        }
        Ok(layout.ptr)
    }

    /// Writes a new version of `name`, whose current one (if any) is `old`; `probe` is the
    /// lookup's probe of the index (a new name goes where it ended, if the index is unchanged).
    fn put_at(
        &mut self,
        name: &[u8],
        ftype: u8,
        content: &[u8],
        old: Option<Located>,
        probe: &Probe,
    ) -> Result<(FileStat, Vec<Extent>)> {
        let size = self.inode_size_for(chunks(content.len() as u64))?;
        let fileid = self.next_fileid()?;
        let now = self.clock.now();
        let mtime = self.time.as_ref().map_or(now, |t| t.mtime_for(now));
        let (data, extents) = self.write_data(fileid, 0, content)?;
        let inode = Inode {
            fileid,
            lsize: content.len() as u64,
            ftype,
            mtime,
            data,
            size,
        };
        let key = inode_key(name);
        // The key this writer kept for the old entry is the new one's.
        let ptr = self.append_inode(&key, &inode, old.as_ref().map(|l| l.entry.ptr))?;
        match &old {
            Some(located) => {
                self.mark_deleted(located, true)?;
                // Found used by the lookup that made `located`; the table is unchanged since.
                self.idx.repoint(located.found, ptr)?;
                self.add_var(ITOTSZ, -(located.inode.size as i64))?;
                self.add_var(DTOTSZ, -(located.inode.lsize as i64))?;
            }
            None => {
                self.idx.insert_probed(probe, ptr, &self.data)?;
            }
        }
        if let Some(t) = &mut self.time {
            t.record(mtime, ptr)?;
        }
        self.add_var(ITOTSZ, size as i64)?;
        self.add_var(DTOTSZ, inode.lsize as i64)?;
        self.maybe_checkpoint()?;
        Ok((FileStat::of(name, ptr, &inode), extents))
    }

    /// Creates an empty file. An existing name is an error unless HAVEDUPS (then a new version).
    pub fn create_file(&mut self, name: &[u8], ftype: u8) -> Result<FileStat> {
        if !self.has_dups() && self.locate(name)?.is_some() {
            return Err(Error::invalid(format!(
                "{:?} exists already (the filesys has no HAVEDUPS)",
                String::from_utf8_lossy(name)
            )));
        }
        self.put(name, ftype, &[])
    }

    /// Appends to an existing file.
    pub fn append(&mut self, name: &[u8], bytes: &[u8]) -> Result<FileStat> {
        self.check_writable()?;
        let located = self.locate(name)?.ok_or_else(|| {
            Error::NotFound(format!(
                "{}: no file {:?}",
                self.base.display(),
                String::from_utf8_lossy(name)
            ))
        })?;
        if bytes.is_empty() {
            return Ok(FileStat::of(name, located.entry.ptr, &located.inode));
        }
        let mut inode = located.inode.clone();
        let needed = inode.data.len() as u64 + chunks(bytes.len() as u64);
        let size = self.inode_size_for(needed)?.max(inode.size);
        let (pairs, _) = self.write_data(inode.fileid, inode.data.len() as u64, bytes)?;
        inode.data.extend(pairs);
        inode.lsize += bytes.len() as u64;
        if !self.is_ao() {
            inode.mtime = self.clock.now();
        }
        self.add_var(DTOTSZ, bytes.len() as i64)?;
        if needed <= located.inode.capacity() {
            let layout = self.data.layout(located.entry.ptr)?;
            self.data.overwrite_value(&layout, 0, &inode.encode())?;
            self.known_keys.forget_value(located.entry.ptr);
            self.maybe_checkpoint()?;
            return Ok(FileStat::of(name, located.entry.ptr, &inode));
        }
        // The inode is full: a twice-as-big copy is appended and the index pointed at it.
        inode.size = size;
        let key = inode_key(name);
        let ptr = self.append_inode(&key, &inode, Some(located.entry.ptr))?;
        self.mark_deleted(&located, false)?;
        self.idx.set_pointer(located.found.cell, ptr)?;
        self.add_var(ITOTSZ, size as i64 - located.inode.size as i64)?;
        self.maybe_checkpoint()?;
        Ok(FileStat::of(name, ptr, &inode))
    }

    /// Deletes a file. Returns false when there was none.
    pub fn delete(&mut self, name: &[u8]) -> Result<bool> {
        self.check_writable()?;
        let Some(located) = self.locate(name)? else {
            return Ok(false);
        };
        self.mark_deleted(&located, true)?;
        self.idx.delete_cell(located.found.cell)?;
        self.add_var(ITOTSZ, -(located.inode.size as i64))?;
        self.add_var(DTOTSZ, -(located.inode.lsize as i64))?;
        self.maybe_checkpoint()?;
        Ok(true)
    }

    /// Renames a file (same FILEID, mtime and data). Refused in the ao variant and when the new
    /// name exists.
    pub fn rename(&mut self, old: &[u8], new: &[u8]) -> Result<FileStat> {
        self.check_writable()?;
        if self.is_ao() {
            return Err(Error::invalid(
                "rename is refused in an ao filesys: the new inode would break the mtime order",
            ));
        }
        validate_name(new)?;
        // OLD must exist before anything is written (a growth of the index writes).
        if self.locate(old)?.is_none() {
            return Err(Error::NotFound(format!(
                "{}: no file {:?}",
                self.base.display(),
                String::from_utf8_lossy(old)
            )));
        }
        self.ensure_index_room()?;
        let located = self.locate(old)?.ok_or_else(|| {
            Error::NotFound(format!(
                "{}: no file {:?}",
                self.base.display(),
                String::from_utf8_lossy(old)
            ))
        })?;
        if self.locate(new)?.is_some() {
            return Err(Error::invalid(format!(
                "{:?} exists already",
                String::from_utf8_lossy(new)
            )));
        }
        let key = inode_key(new);
        let ptr = self.append_inode(&key, &located.inode, None)?;
        self.mark_deleted(&located, false)?;
        self.idx.delete_cell(located.found.cell)?;
        self.idx.insert(&key, ptr, &self.data)?;
        self.maybe_checkpoint()?;
        Ok(FileStat::of(new, ptr, &located.inode))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::super::{file_path, FsOptions, OpenOptions};
    use super::*;
    use crate::clock::ManualClock;
    use crate::storage::{FileStorage, Storage};

    fn create(base: &Path, clock: &ManualClock) -> Filesys {
        let fs = FsOptions {
            htsize: 4,
            ..FsOptions::default()
        };
        let open = OpenOptions {
            clock: Arc::new(clock.clone()),
            ..OpenOptions::writer()
        };
        Filesys::create(base, &fs, &open).unwrap()
    }

    /// A read-modify-write (lookup, then [`Filesys::put_over`], whose insert takes its cell
    /// from the lookup's probe) leaves the files a plain [`Filesys::put`] leaves, byte for
    /// byte, through new names, rewrites and index growth, with misses verified.
    #[test]
    fn a_put_over_a_lookup_writes_the_bytes_a_plain_put_writes() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_700_000_000);
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let (mut over, mut plain) = (create(&a, &clock), create(&b, &clock));
        over.set_verify_misses(true);
        plain.set_verify_misses(true);
        for i in 0..300u32 {
            let name = format!("title-{}", i % 120);
            let content = format!("record {i}");
            let (_, version) = over.read_for_update(name.as_bytes()).unwrap();
            let x = over.put_over(name.as_bytes(), 0, content.as_bytes(), version);
            let y = plain.put(name.as_bytes(), 0, content.as_bytes());
            assert_eq!(x.unwrap(), y.unwrap());
            if i % 50 == 49 {
                over.sync().unwrap();
                plain.sync().unwrap();
            }
        }
        assert!(over.index().htsize() > 4);
        drop((over, plain));
        for ext in ["idx", "data"] {
            let read = |base: &Path| std::fs::read(file_path(base, ext)).unwrap();
            assert!(read(&a) == read(&b), "{ext} differs");
        }
    }

    /// A miss whose probe passed a cell with a wrong stored hash is damage naming the index
    /// file and the word's offset, not "no such file", for a lookup and for a put's lookup.
    #[test]
    fn a_miss_past_a_damaged_cell_names_the_index_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_700_000_000);
        let base = dir.path().join("fs");
        let mut fs = create(&base, &clock);
        for i in 0..40u32 {
            fs.put(format!("title-{i}").as_bytes(), 0, b"x").unwrap();
        }
        fs.sync().unwrap();
        let (missing, cell) = (0..)
            .map(|i| format!("absent-{i}"))
            .find_map(|name| {
                let probe = fs.index().probe(&inode_key(name.as_bytes()), |_| Ok(false));
                let used = probe
                    .unwrap()
                    .cells()
                    .find(|(_, c)| matches!(c, crate::format::hindex::Cell::Used { .. }))
                    .map(|(cell, _)| cell);
                used.map(|cell| (name, cell))
            })
            .unwrap();
        let offset = fs.index().cell_offset(cell) + 8;
        drop(fs);
        let idx = file_path(&base, "idx");
        FileStorage::open(&idx, true)
            .unwrap()
            .write_at(&[0x5A; 8], offset)
            .unwrap();
        let open = OpenOptions {
            clock: Arc::new(clock.clone()),
            ..OpenOptions::writer()
        };
        let mut fs = Filesys::open(&base, &open).unwrap();
        fs.set_verify_misses(true);
        let check = |r: Error| match r {
            Error::Corrupt {
                path, offset: at, ..
            } => assert_eq!((path, at), (idx.clone(), offset)),
            other => panic!("{other:?}"),
        };
        check(fs.stat(missing.as_bytes()).unwrap_err());
        check(fs.read_for_update(missing.as_bytes()).unwrap_err());
        check(fs.put(missing.as_bytes(), 0, b"y").unwrap_err());
    }
}
