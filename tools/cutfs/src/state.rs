//! The filesystem's state: what a program sees (the volatile tree, in memory) over what would
//! survive a power cut (the durable tree, which is the backing directory itself).
//!
//! The backing directory always holds exactly the durable state, plus a scratch area `.cutfs/`
//! that the next mount wipes:
//!
//! | backing path            | what it is                                                      |
//! |-------------------------|-----------------------------------------------------------------|
//! | `NAME...`               | the durable tree: entries made durable by a directory fsync     |
//! | `.cutfs/objects/ID`     | a hard link to every live file's backing file: its durable bytes |
//! | `.cutfs/dirs/ID`        | a directory that was fsynced but whose own name is not durable   |
//!
//! A file's bytes reach its backing file only on fsync/fdatasync; until then they live in dirty
//! pages here. A name reaches the durable tree only on an fsync of its directory. A cut is simply
//! "stop": nothing more is written, and the next mount shows the backing tree as it stands.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Dirty data is kept in pages of this size.
pub const PAGE: u64 = 4096;
/// The scratch area's name in the backing directory's root (hidden from the mounted view).
pub const SCRATCH: &str = ".cutfs";

pub type Id = u64;
pub const ROOT: Id = 1;
/// An errno.
pub type Res<T> = Result<T, i32>;

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Owner, permissions and times: kept in memory only (not subject to the cut).
#[derive(Clone, Debug)]
pub struct Meta {
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

impl Meta {
    fn new(perm: u32, uid: u32, gid: u32) -> Meta {
        let now = SystemTime::now();
        Meta {
            perm: perm & 0o7777,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
        }
    }

    fn of(md: &fs::Metadata) -> Meta {
        let mut m = Meta::new(md.mode(), md.uid(), md.gid());
        if let Ok(t) = md.modified() {
            m.mtime = t;
            m.ctime = t;
        }
        m
    }

    fn touch(&mut self) {
        let now = SystemTime::now();
        self.mtime = now;
        self.ctime = now;
    }
}

#[derive(Debug)]
pub struct FileNode {
    /// The backing file (`.cutfs/objects/ID`): the durable bytes.
    object: File,
    /// The length a program sees.
    pub len: u64,
    /// The backing file's length.
    durable_len: u64,
    /// Backing bytes at or past this offset are not seen (the file was truncated below them
    /// since the last sync); never more than `len`.
    clip: u64,
    /// Written since the last sync, by page number; each page shows what a read of it sees.
    pages: BTreeMap<u64, Box<[u8]>>,
    /// Names in the volatile tree.
    pub nlink: u32,
    /// Open handles.
    opens: u32,
}

#[derive(Debug)]
pub struct DirNode {
    pub entries: BTreeMap<OsString, Id>,
    pub parent: Id,
    /// Removed from the volatile tree but still present in the backing one.
    removed: bool,
    /// The entries in the backing tree, when the directory exists there.
    durable: Option<BTreeMap<OsString, Id>>,
    /// The directory's own durable name; `None` with `durable` set: it is in `.cutfs/dirs/`.
    dparent: Option<(Id, OsString)>,
}

#[derive(Debug)]
pub enum Body {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug)]
pub struct Node {
    pub meta: Meta,
    pub body: Body,
}

/// The whole filesystem.
#[derive(Debug)]
pub struct State {
    backing: PathBuf,
    nodes: HashMap<Id, Node>,
    next: Id,
    /// Set by a cut: from then on every operation fails and nothing reaches the backing tree.
    pub cut: bool,
    /// What a file's fsync makes durable besides the file.
    pub names: crate::Names,
    /// Files' fsyncs (and fdatasyncs) so far.
    pub fsyncs: u64,
    /// The fsync that fails once with EIO, losing the file's dirty pages, as Linux after a
    /// writeback error ([`crate::Control::lose_writeback_at_fsync`]).
    pub lose_at: Option<u64>,
}

impl State {
    /// Opens the backing directory as it stands (the durable state), wiping the scratch area.
    pub fn open(backing: &Path, names: crate::Names) -> io::Result<State> {
        let scratch = backing.join(SCRATCH);
        if scratch.exists() {
            fs::remove_dir_all(&scratch)?;
        }
        fs::create_dir_all(scratch.join("objects"))?;
        fs::create_dir_all(scratch.join("dirs"))?;
        let md = fs::metadata(backing)?;
        let mut st = State {
            backing: backing.to_path_buf(),
            nodes: HashMap::new(),
            next: ROOT + 1,
            cut: false,
            names,
            fsyncs: 0,
            lose_at: None,
        };
        st.nodes.insert(
            ROOT,
            Node {
                meta: Meta::of(&md),
                body: Body::Dir(DirNode {
                    entries: BTreeMap::new(),
                    parent: ROOT,
                    removed: false,
                    durable: Some(BTreeMap::new()),
                    dparent: None,
                }),
            },
        );
        let mut seen = HashMap::new();
        st.scan(ROOT, backing, &mut seen)?;
        Ok(st)
    }

    fn scan(&mut self, dir: Id, path: &Path, seen: &mut HashMap<(u64, u64), Id>) -> io::Result<()> {
        for entry in fs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name();
            if dir == ROOT && name == SCRATCH {
                continue;
            }
            let p = entry.path();
            let md = fs::symlink_metadata(&p)?;
            let id = if md.is_dir() {
                let id = self.alloc();
                self.nodes.insert(
                    id,
                    Node {
                        meta: Meta::of(&md),
                        body: Body::Dir(DirNode {
                            entries: BTreeMap::new(),
                            parent: dir,
                            removed: false,
                            durable: Some(BTreeMap::new()),
                            dparent: Some((dir, name.clone())),
                        }),
                    },
                );
                self.scan(id, &p, seen)?;
                id
            } else if md.is_file() {
                let id = match seen.get(&(md.dev(), md.ino())) {
                    Some(id) => *id,
                    None => {
                        let id = self.alloc();
                        fs::hard_link(&p, self.object_path(id))?;
                        let object = OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(self.object_path(id))?;
                        self.nodes.insert(
                            id,
                            Node {
                                meta: Meta::of(&md),
                                body: Body::File(FileNode {
                                    object,
                                    len: md.len(),
                                    durable_len: md.len(),
                                    clip: md.len(),
                                    pages: BTreeMap::new(),
                                    nlink: 0,
                                    opens: 0,
                                }),
                            },
                        );
                        seen.insert((md.dev(), md.ino()), id);
                        id
                    }
                };
                self.file_mut(id).expect("just inserted").nlink += 1;
                id
            } else {
                return Err(io::Error::other(format!(
                    "{}: only regular files and directories are supported",
                    p.display()
                )));
            };
            let d = self.dir_mut(dir).expect("scanned directory");
            d.entries.insert(name.clone(), id);
            d.durable.as_mut().expect("scanned").insert(name, id);
        }
        Ok(())
    }

    fn alloc(&mut self) -> Id {
        let id = self.next;
        self.next += 1;
        id
    }

    fn object_path(&self, id: Id) -> PathBuf {
        self.backing
            .join(SCRATCH)
            .join("objects")
            .join(id.to_string())
    }

    /// Where a directory with a backing existence is in the backing tree.
    fn dir_path(&self, id: Id) -> PathBuf {
        if id == ROOT {
            return self.backing.clone();
        }
        match self.dir_durable_name(id) {
            Some((parent, name)) => self.dir_path(parent).join(name),
            None => self.backing.join(SCRATCH).join("dirs").join(id.to_string()),
        }
    }

    pub fn node(&self, id: Id) -> Res<&Node> {
        self.nodes.get(&id).ok_or(libc::ENOENT)
    }

    fn node_mut(&mut self, id: Id) -> Res<&mut Node> {
        self.nodes.get_mut(&id).ok_or(libc::ENOENT)
    }

    pub fn dir(&self, id: Id) -> Res<&DirNode> {
        match &self.node(id)?.body {
            Body::Dir(d) if !d.removed => Ok(d),
            Body::Dir(_) => Err(libc::ENOENT),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, id: Id) -> Res<&mut DirNode> {
        match &mut self.node_mut(id)?.body {
            Body::Dir(d) => Ok(d),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn file(&self, id: Id) -> Res<&FileNode> {
        match &self.node(id)?.body {
            Body::File(f) => Ok(f),
            Body::Dir(_) => Err(libc::EISDIR),
        }
    }

    fn file_mut(&mut self, id: Id) -> Res<&mut FileNode> {
        match &mut self.node_mut(id)?.body {
            Body::File(f) => Ok(f),
            Body::Dir(_) => Err(libc::EISDIR),
        }
    }

    fn is_dir(&self, id: Id) -> bool {
        matches!(
            self.nodes.get(&id),
            Some(Node {
                body: Body::Dir(_),
                ..
            })
        )
    }

    pub fn lookup(&self, parent: Id, name: &OsStr) -> Res<Id> {
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    fn check_new_name(&self, parent: Id, name: &OsStr) -> Res<()> {
        if parent == ROOT && name == SCRATCH {
            return Err(libc::EACCES);
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        Ok(())
    }

    /// A new empty file, not durable anywhere until its directory is fsynced.
    pub fn create(&mut self, parent: Id, name: &OsStr, meta: Meta) -> Res<Id> {
        self.check_new_name(parent, name)?;
        let id = self.alloc();
        let object = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.object_path(id))
            .map_err(errno)?;
        let perm = fs::Permissions::from_mode(meta.perm);
        fs::set_permissions(self.object_path(id), perm).map_err(errno)?;
        self.nodes.insert(
            id,
            Node {
                meta,
                body: Body::File(FileNode {
                    object,
                    len: 0,
                    durable_len: 0,
                    clip: 0,
                    pages: BTreeMap::new(),
                    nlink: 1,
                    opens: 0,
                }),
            },
        );
        let d = self.dir_mut(parent)?;
        d.entries.insert(name.to_owned(), id);
        self.node_mut(parent)?.meta.touch();
        Ok(id)
    }

    pub fn mkdir(&mut self, parent: Id, name: &OsStr, meta: Meta) -> Res<Id> {
        self.check_new_name(parent, name)?;
        let id = self.alloc();
        self.nodes.insert(
            id,
            Node {
                meta,
                body: Body::Dir(DirNode {
                    entries: BTreeMap::new(),
                    parent,
                    removed: false,
                    durable: None,
                    dparent: None,
                }),
            },
        );
        self.dir_mut(parent)?.entries.insert(name.to_owned(), id);
        self.node_mut(parent)?.meta.touch();
        Ok(id)
    }

    pub fn unlink(&mut self, parent: Id, name: &OsStr) -> Res<()> {
        let id = self.lookup(parent, name)?;
        if self.is_dir(id) {
            return Err(libc::EISDIR);
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.node_mut(parent)?.meta.touch();
        let node = self.node_mut(id)?;
        node.meta.ctime = SystemTime::now();
        if let Body::File(f) = &mut node.body {
            f.nlink -= 1;
        }
        self.maybe_free(id);
        Ok(())
    }

    pub fn rmdir(&mut self, parent: Id, name: &OsStr) -> Res<()> {
        let id = self.lookup(parent, name)?;
        if !self.dir(id)?.entries.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.node_mut(parent)?.meta.touch();
        self.drop_dir(id).map_err(errno)
    }

    /// Forgets a directory that left the volatile tree. While it still has a durable name the
    /// node stays (marked removed) so that its parent's next fsync can delete it from the
    /// backing tree; a fsynced directory without a durable name is deleted from the scratch area
    /// now.
    fn drop_dir(&mut self, id: Id) -> io::Result<()> {
        let d = self.dir_mut(id).map_err(io::Error::from_raw_os_error)?;
        d.removed = true;
        match (&d.durable, &d.dparent) {
            (None, _) => {
                self.nodes.remove(&id);
            }
            (Some(_), None) => {
                self.discard_durable_dir(id)?;
                self.nodes.remove(&id);
            }
            (Some(_), Some(_)) => {}
        }
        Ok(())
    }

    /// Frees a file that has no name and no open handle: its backing file keeps only the
    /// durable names it may still have.
    fn maybe_free(&mut self, id: Id) {
        if let Ok(f) = self.file(id) {
            if f.nlink == 0 && f.opens == 0 {
                self.nodes.remove(&id);
                let _ = fs::remove_file(self.object_path(id));
            }
        }
    }

    pub fn opened(&mut self, id: Id) -> Res<()> {
        if let Body::File(f) = &mut self.node_mut(id)?.body {
            f.opens += 1;
        }
        Ok(())
    }

    pub fn released(&mut self, id: Id) {
        if let Ok(f) = self.file_mut(id) {
            f.opens = f.opens.saturating_sub(1);
        }
        self.maybe_free(id);
    }

    pub fn rename(
        &mut self,
        parent: Id,
        name: &OsStr,
        newparent: Id,
        newname: &OsStr,
        noreplace: bool,
    ) -> Res<()> {
        let id = self.lookup(parent, name)?;
        self.dir(newparent)?;
        if newparent == ROOT && newname == SCRATCH {
            return Err(libc::EACCES);
        }
        let moving_dir = self.is_dir(id);
        if moving_dir {
            // A directory cannot move under itself.
            let mut at = newparent;
            loop {
                if at == id {
                    return Err(libc::EINVAL);
                }
                if at == ROOT {
                    break;
                }
                at = self.dir(at)?.parent;
            }
        }
        if let Ok(old) = self.lookup(newparent, newname) {
            if old == id {
                return Ok(());
            }
            if noreplace {
                return Err(libc::EEXIST);
            }
            match (moving_dir, self.is_dir(old)) {
                (false, true) => return Err(libc::EISDIR),
                (true, false) => return Err(libc::ENOTDIR),
                (true, true) => self.rmdir(newparent, newname)?,
                (false, false) => self.unlink(newparent, newname)?,
            }
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.dir_mut(newparent)?
            .entries
            .insert(newname.to_owned(), id);
        if moving_dir {
            self.dir_mut(id)?.parent = newparent;
        }
        self.node_mut(parent)?.meta.touch();
        self.node_mut(newparent)?.meta.touch();
        self.node_mut(id)?.meta.ctime = SystemTime::now();
        Ok(())
    }

    /// What a read sees: dirty pages over the backing file's visible bytes, zeros elsewhere.
    pub fn read(&self, id: Id, offset: u64, size: u64) -> Res<Vec<u8>> {
        let f = self.file(id)?;
        if offset >= f.len {
            return Ok(Vec::new());
        }
        let end = f.len.min(offset.saturating_add(size));
        let mut buf = vec![0u8; (end - offset) as usize];
        let base_end = end.min(f.clip).min(f.durable_len);
        if offset < base_end {
            read_full(&f.object, &mut buf[..(base_end - offset) as usize], offset)
                .map_err(errno)?;
        }
        for (&p, page) in f.pages.range(offset / PAGE..=(end - 1) / PAGE) {
            let start = (p * PAGE).max(offset);
            let stop = ((p + 1) * PAGE).min(end);
            let from = (start - p * PAGE) as usize;
            buf[(start - offset) as usize..(stop - offset) as usize]
                .copy_from_slice(&page[from..from + (stop - start) as usize]);
        }
        Ok(buf)
    }

    /// Writes into dirty pages only; the backing file is untouched until a sync.
    pub fn write(&mut self, id: Id, offset: u64, data: &[u8]) -> Res<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset.checked_add(data.len() as u64).ok_or(libc::EFBIG)?;
        for p in offset / PAGE..=(end - 1) / PAGE {
            if !self.file(id)?.pages.contains_key(&p) {
                let mut page = self.read(id, p * PAGE, PAGE)?;
                page.resize(PAGE as usize, 0);
                self.file_mut(id)?.pages.insert(p, page.into_boxed_slice());
            }
            let start = (p * PAGE).max(offset);
            let stop = ((p + 1) * PAGE).min(end);
            let page = self.file_mut(id)?.pages.get_mut(&p).expect("just filled");
            page[(start - p * PAGE) as usize..(stop - p * PAGE) as usize]
                .copy_from_slice(&data[(start - offset) as usize..(stop - offset) as usize]);
        }
        let f = self.file_mut(id)?;
        f.len = f.len.max(end);
        self.node_mut(id)?.meta.touch();
        Ok(())
    }

    /// Truncates or extends (with zeros), in memory only.
    pub fn set_len(&mut self, id: Id, len: u64) -> Res<()> {
        let f = self.file_mut(id)?;
        if len < f.len {
            let first_gone = len.div_ceil(PAGE);
            f.pages.split_off(&first_gone);
            if len % PAGE != 0 {
                if let Some(page) = f.pages.get_mut(&(len / PAGE)) {
                    page[(len % PAGE) as usize..].fill(0);
                }
            }
            f.clip = f.clip.min(len);
        }
        f.len = len;
        self.node_mut(id)?.meta.touch();
        Ok(())
    }

    /// fallocate(2): mode 0 grows the length (no blocks are reserved: there is no disk to
    /// fill), KEEP_SIZE does nothing; hole punching and the rest are not supported.
    pub fn fallocate(&mut self, id: Id, offset: u64, length: u64, mode: i32) -> Res<()> {
        let end = offset.checked_add(length).ok_or(libc::EFBIG)?;
        match mode {
            0 => {
                if end > self.file(id)?.len {
                    self.set_len(id, end)?;
                }
                Ok(())
            }
            libc::FALLOC_FL_KEEP_SIZE => {
                self.file(id)?;
                Ok(())
            }
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    /// fsync/fdatasync of a file: its length and bytes become durable (its names do not).
    pub fn sync_file(&mut self, id: Id) -> Res<()> {
        let f = self.file_mut(id)?;
        if f.clip < f.durable_len {
            f.object.set_len(f.clip).map_err(errno)?;
        }
        if f.len != f.clip.min(f.durable_len) {
            f.object.set_len(f.len).map_err(errno)?;
        }
        for (&p, page) in &f.pages {
            let n = (f.len - p * PAGE).min(PAGE) as usize;
            f.object.write_all_at(&page[..n], p * PAGE).map_err(errno)?;
        }
        f.pages.clear();
        f.durable_len = f.len;
        f.clip = f.len;
        Ok(())
    }

    /// fsync/fdatasync of a file under the rules of [`crate::Names`]: the file, and with
    /// journaled names every name operation made so far.
    pub fn fsync(&mut self, id: Id) -> Res<()> {
        self.fsyncs += 1;
        if self.lose_at == Some(self.fsyncs) {
            // The writeback failed: the pages are gone from what can ever become durable, and
            // (evicted at once, which the kernel may do to clean pages) from what reads see.
            self.lose_at = None;
            self.file_mut(id)?.pages.clear();
            return Err(libc::EIO);
        }
        self.sync_file(id)?;
        if self.names == crate::Names::Journaled {
            self.sync_names()?;
        }
        Ok(())
    }

    /// Every directory's entries made durable, as a metadata journal's commit does.
    fn sync_names(&mut self) -> Res<()> {
        let mut ids: Vec<Id> = self
            .nodes
            .iter()
            .filter(|(_, n)| matches!(&n.body, Body::Dir(d) if !d.removed))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.sync_dir(id)?;
        }
        Ok(())
    }

    /// fsync of a directory: its entries in the backing tree become what they are now (the
    /// directory itself gets a backing existence, in the scratch area if its own name is not
    /// durable). Entries that moved between directories are in the durable state of each
    /// directory only as far as each was fsynced, except that a directory has one place in the
    /// backing tree: a directory moved to a fsynced parent leaves its old durable place.
    pub fn sync_dir(&mut self, id: Id) -> Res<()> {
        self.sync_dir_io(id).map_err(errno)
    }

    fn sync_dir_io(&mut self, id: Id) -> io::Result<()> {
        let enoent = || io::Error::from_raw_os_error(libc::ENOENT);
        let d = self.dir(id).map_err(io::Error::from_raw_os_error)?;
        if d.durable.is_none() {
            fs::create_dir(self.dir_path(id))?;
            self.dir_mut(id).map_err(|_| enoent())?.durable = Some(BTreeMap::new());
        }
        let d = self.dir(id).map_err(|_| enoent())?;
        let now = d.entries.clone();
        let was = d.durable.clone().unwrap_or_default();
        let path = self.dir_path(id);
        // Entries that went, or now name something else.
        for (name, old) in &was {
            if now.get(name) == Some(old) {
                continue;
            }
            if self.is_dir(*old) {
                // Unless the directory moved on already (its parent's sync took it along).
                if self.dir_durable_name(*old) == Some((id, name.clone())) {
                    self.unplace_dir(*old)?;
                }
            } else {
                fs::remove_file(path.join(name))?;
            }
            self.durable_of(id).remove(name);
        }
        // Entries that came.
        for (name, new) in &now {
            if was.get(name) == Some(new) {
                continue;
            }
            let to = path.join(name);
            if self.is_dir(*new) {
                let from = self.dir_durable_name(*new);
                if self
                    .dir(*new)
                    .ok()
                    .and_then(|d| d.durable.as_ref())
                    .is_some()
                {
                    fs::rename(self.dir_path(*new), &to)?;
                } else {
                    fs::create_dir(&to)?;
                    self.dir_mut(*new).map_err(|_| enoent())?.durable = Some(BTreeMap::new());
                }
                if let Some((p, n)) = from {
                    self.durable_of(p).remove(&n);
                }
                self.dir_mut(*new).map_err(|_| enoent())?.dparent = Some((id, name.clone()));
            } else {
                fs::hard_link(self.object_path(*new), &to)?;
            }
            self.durable_of(id).insert(name.clone(), *new);
        }
        Ok(())
    }

    fn dir_durable_name(&self, id: Id) -> Option<(Id, OsString)> {
        match &self.nodes.get(&id)?.body {
            Body::Dir(d) => d.dparent.clone(),
            Body::File(_) => None,
        }
    }

    fn durable_of(&mut self, id: Id) -> &mut BTreeMap<OsString, Id> {
        match self.nodes.get_mut(&id).map(|n| &mut n.body) {
            Some(Body::Dir(d)) => d.durable.get_or_insert_with(BTreeMap::new),
            _ => unreachable!("durable entries of a directory that is not one"),
        }
    }

    /// Takes a directory out of its durable place: a live one into the scratch area (it keeps
    /// its durable contents for when a parent of it is fsynced), a removed one deleted.
    fn unplace_dir(&mut self, id: Id) -> io::Result<()> {
        let removed = matches!(
            self.nodes.get(&id),
            Some(Node {
                body: Body::Dir(DirNode { removed: true, .. }),
                ..
            })
        );
        if removed {
            self.discard_durable_dir(id)?;
            self.nodes.remove(&id);
        } else {
            let from = self.dir_path(id);
            if let Ok(d) = self.dir_mut(id) {
                d.dparent = None;
            }
            fs::rename(from, self.dir_path(id))?;
        }
        Ok(())
    }

    /// Deletes a removed directory's backing copy; live directories inside it go to the scratch
    /// area first, removed ones are deleted with it.
    fn discard_durable_dir(&mut self, id: Id) -> io::Result<()> {
        let durable = match self.dir_mut(id) {
            Ok(d) => d.durable.clone().unwrap_or_default(),
            Err(_) => return Ok(()),
        };
        for (name, child) in durable {
            if self.is_dir(child) && self.dir_durable_name(child) == Some((id, name)) {
                self.unplace_dir(child)?;
            }
        }
        fs::remove_dir_all(self.dir_path(id))?;
        if let Ok(d) = self.dir_mut(id) {
            d.durable = None;
            d.dparent = None;
        }
        Ok(())
    }

    /// Makes everything durable, as a clean unmount would.
    pub fn sync_all(&mut self) -> Res<()> {
        let mut ids: Vec<Id> = self.nodes.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            match self.nodes.get(&id).map(|n| &n.body) {
                Some(Body::File(_)) => self.sync_file(id)?,
                Some(Body::Dir(d)) if !d.removed => self.sync_dir(id)?,
                _ => {}
            }
        }
        Ok(())
    }

    pub fn statfs(&self) -> Res<libc::statvfs> {
        let path = std::ffi::CString::new(self.backing.as_os_str().as_encoded_bytes())
            .map_err(|_| libc::EINVAL)?;
        // SAFETY: a NUL-terminated path and a zeroed out-struct that statvfs fills.
        let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::statvfs(path.as_ptr(), &mut out) };
        if rc != 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        Ok(out)
    }

    pub fn set_meta(&mut self, id: Id, f: impl FnOnce(&mut Meta)) -> Res<()> {
        let node = self.node_mut(id)?;
        f(&mut node.meta);
        node.meta.ctime = SystemTime::now();
        Ok(())
    }

    /// Sizes for `stat`: (length, link count).
    pub fn size_links(&self, id: Id) -> Res<(u64, u32)> {
        match &self.node(id)?.body {
            Body::File(f) => Ok((f.len, f.nlink)),
            Body::Dir(d) => {
                let subdirs = d.entries.values().filter(|c| self.is_dir(**c)).count();
                Ok((4096, 2 + subdirs as u32))
            }
        }
    }

    pub fn new_meta(perm: u32, uid: u32, gid: u32) -> Meta {
        Meta::new(perm, uid, gid)
    }
}

fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            // The backing file is shorter than recorded only if someone changed it under us:
            // what is missing reads as zeros.
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
