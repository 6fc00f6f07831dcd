//! The FUSE face of [`State`]: every request takes the one lock, so a cut falls between two
//! operations, never inside one.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::state::{Body, Id, Res, State};

/// How long the kernel may cache names and attributes. Every change goes through this
/// filesystem, so the kernel's copies stay true; a cut ends the mount with them.
const TTL: Duration = Duration::from_secs(1);

pub struct CutFs {
    pub state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl CutFs {
    /// Runs `f` on the state unless the power was cut (then every request fails with EIO).
    fn with<T>(&self, f: impl FnOnce(&mut State) -> Res<T>) -> Result<T, Errno> {
        let mut st = lock(&self.state);
        if st.cut {
            return Err(Errno::EIO);
        }
        f(&mut st).map_err(Errno::from_i32)
    }
}

fn attr(st: &State, id: Id) -> Res<FileAttr> {
    let node = st.node(id)?;
    let (size, nlink) = st.size_links(id)?;
    let kind = match node.body {
        Body::File(_) => FileType::RegularFile,
        Body::Dir(_) => FileType::Directory,
    };
    let m = &node.meta;
    Ok(FileAttr {
        ino: INodeNo(id),
        size,
        blocks: size.div_ceil(512),
        atime: m.atime,
        mtime: m.mtime,
        ctime: m.ctime,
        crtime: m.ctime,
        kind,
        perm: m.perm as u16,
        nlink,
        uid: m.uid,
        gid: m.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for CutFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.with(|st| {
            let id = st.lookup(parent.0, name)?;
            attr(st, id)
        }) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|st| attr(st, ino.0)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.with(|st| {
            if let Some(len) = size {
                st.set_len(ino.0, len)?;
            }
            st.set_meta(ino.0, |m| {
                if let Some(mode) = mode {
                    m.perm = mode & 0o7777;
                }
                if let Some(uid) = uid {
                    m.uid = uid;
                }
                if let Some(gid) = gid {
                    m.gid = gid;
                }
                if let Some(t) = atime {
                    m.atime = time(t);
                }
                if let Some(t) = mtime {
                    m.mtime = time(t);
                }
            })?;
            attr(st, ino.0)
        }) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            reply.error(Errno::EPERM);
            return;
        }
        match self.with(|st| {
            let meta = State::new_meta(mode & !umask, req.uid(), req.gid());
            let id = st.create(parent.0, name, meta)?;
            attr(st, id)
        }) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.with(|st| {
            let meta = State::new_meta(mode & !umask, req.uid(), req.gid());
            let id = st.mkdir(parent.0, name, meta)?;
            attr(st, id)
        }) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|st| st.unlink(parent.0, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|st| st.rmdir(parent.0, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            reply.error(Errno::EINVAL);
            return;
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.with(|st| st.rename(parent.0, name, newparent.0, newname, noreplace)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|st| st.opened(ino.0)) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.with(|st| {
            let meta = State::new_meta(mode & !umask, req.uid(), req.gid());
            let id = st.create(parent.0, name, meta)?;
            st.opened(id)?;
            attr(st, id)
        }) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|st| st.read(ino.0, offset, u64::from(size))) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with(|st| st.write(ino.0, offset, data)) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) promises nothing about durability.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // A release after a cut changes nothing durable; let it through so handles go away.
        lock(&self.state).released(ino.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // fdatasync and fsync alike: the length is data (it is needed to read the bytes back).
        match self.with(|st| st.fsync(ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listing = self.with(|st| {
            let d = st.dir(ino.0)?;
            let mut out = vec![
                (ino.0, FileType::Directory, OsStr::new(".").to_owned()),
                (d.parent, FileType::Directory, OsStr::new("..").to_owned()),
            ];
            for (name, id) in &d.entries {
                let kind = match st.node(*id).map(|n| &n.body) {
                    Ok(Body::Dir(_)) => FileType::Directory,
                    _ => FileType::RegularFile,
                };
                out.push((*id, kind, name.clone()));
            }
            Ok(out)
        });
        match listing {
            Ok(entries) => {
                for (i, (id, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(*id), i as u64 + 1, *kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|st| st.sync_dir(ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|st| st.statfs()) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        match self.with(|st| st.node(ino.0).map(|_| ())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.with(|st| st.fallocate(ino.0, offset, length, mode)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
