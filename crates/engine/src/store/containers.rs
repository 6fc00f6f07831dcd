//! The container set: the containers holding a store's values (`DIR/cNNNNNN.*`, filesys-ao),
//! their numbers (CURCONT and NEXTCONT in the meta datafile), the writer of the current one (its
//! values go to writeback as they are appended: its filesys's drop-behind), its rotation when
//! full, the cache of open container files that reads go through, and the removal of a
//! container's files.
//!
//! The numbers live in the meta filesys, which the store owns: the methods that read or set them
//! take it as an argument, and the store commits them with its title records.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::filesys::{self, Filesys, FsOptions};
use crate::format::perm::{RUNS_SUFFIX, SORTED_SUFFIX};
use crate::storage::{sibling, Storage};
use crate::vfs::Vfs;

use super::{Config, Store, CURCONT, NEXTCONT};

/// Open container files kept for reads. Every container is opened when the store is, so a
/// reader keeps reading the generation it opened while a compaction removes its containers.
const READER_CACHE: usize = 4096;

/// Bytes of `container_bytes` per container index cell: one cell per 4 KiB holds a full container
/// of renders averaging 5.4 KiB or more at the 0.75 load limit without a rebuild. A rebuild reads
/// every indexed key back from the datafile (the home cell comes from digest bytes the cell does
/// not store), and drop-behind has taken those pages out of the cache: growing a 1 GiB
/// container's index from 1024 cells reread ~200k keys, cold. A cell is 16 bytes (4 MiB per GiB).
const CONTAINER_BYTES_PER_CELL: u64 = 4096;

/// The base path of container `id`'s files.
pub(crate) fn container_base(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("c{id:06}"))
}

/// The options a new container is created with.
pub(crate) fn container_options(cfg: &Config) -> FsOptions {
    FsOptions {
        ao: true,
        dups: true,
        isz: 88,
        timemp: 3600,
        htsize: (cfg.container_bytes / CONTAINER_BYTES_PER_CELL).clamp(1024, 1 << 20),
        fileincr: 16 << 20,
    }
}

/// The open current container, where puts append their values.
#[derive(Debug)]
pub(crate) struct ContainerWriter {
    pub(crate) id: u32,
    pub(crate) fs: Filesys,
}

/// A store's containers (see the module doc).
#[derive(Debug)]
pub(crate) struct Containers {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    /// What a new container is created with ([`container_options`]).
    options: FsOptions,
    /// The current container's writer (a writer's handle only).
    writer: Option<ContainerWriter>,
    readers: Mutex<HashMap<u32, Arc<dyn Storage>>>,
}

impl Containers {
    /// The containers of the store in `dir`; none is opened yet.
    pub(crate) fn new(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        clock: Arc<dyn Clock>,
        cfg: &Config,
    ) -> Containers {
        Containers {
            vfs,
            dir: dir.to_path_buf(),
            clock,
            options: container_options(cfg),
            writer: None,
            readers: Mutex::new(HashMap::new()),
        }
    }

    /// The base path of container `id`'s files.
    pub(crate) fn base(&self, id: u32) -> PathBuf {
        container_base(&self.dir, id)
    }

    /// The number of the current container (CURCONT).
    pub(crate) fn current(&self, meta: &Filesys) -> Result<u32> {
        let id = meta.var(CURCONT).unwrap_or(1);
        u32::try_from(id).ok().filter(|i| *i >= 1).ok_or_else(|| {
            let at = meta.data().superblock().value_offset(CURCONT).unwrap_or(0);
            Error::corrupt(
                meta.data().path(),
                at,
                "CURCONT",
                "a container number ≥ 1",
                id,
            )
        })
    }

    /// Containers that exist, oldest first.
    pub(crate) fn ids(&self, meta: &Filesys) -> Result<Vec<u32>> {
        let last = self.current(meta)?.max(self.next(meta)?.saturating_sub(1));
        Ok((1..=last)
            .filter(|id| {
                self.vfs
                    .exists(&filesys::file_path(&self.base(*id), "data"))
            })
            .collect())
    }

    /// The next container number to allocate (NEXTCONT; absent: CURCONT + 1).
    pub(crate) fn next(&self, meta: &Filesys) -> Result<u32> {
        let current = self.current(meta)?;
        match meta.var(NEXTCONT) {
            None => Ok(current + 1),
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| *n > current)
                .ok_or_else(|| {
                    let at = meta.data().superblock().value_offset(NEXTCONT).unwrap_or(0);
                    Error::corrupt(
                        meta.data().path(),
                        at,
                        "NEXTCONT",
                        format!("a container number above CURCONT {current}"),
                        n,
                    )
                }),
        }
    }

    /// A container number never used before (durable with the next commit; numbers whose files
    /// exist are skipped, so a crash before that commit cannot hand one out twice).
    pub(crate) fn allocate(&self, meta: &mut Filesys) -> Result<u32> {
        let mut id = self.next(meta)?;
        while self.vfs.exists(&filesys::file_path(&self.base(id), "data")) {
            id = id
                .checked_add(1)
                .ok_or_else(|| Error::invalid("container numbers exhausted"))?;
        }
        meta.set_var(NEXTCONT, i64::from(id) + 1)?;
        Ok(id)
    }

    /// Container `id`'s datafile, opened for reads once and kept (up to [`READER_CACHE`]). The
    /// writer's own uncommitted appends to it are in the file first (see [`Filesys::settle`]).
    pub(crate) fn reader(&self, id: u32) -> Result<Arc<dyn Storage>> {
        if let Some(w) = self.writer.as_ref().filter(|w| w.id == id) {
            w.fs.settle()?;
        }
        let mut cache = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = cache.get(&id) {
            return Ok(s.clone());
        }
        if cache.len() >= READER_CACHE {
            cache.clear();
        }
        let storage: Arc<dyn Storage> = Arc::from(
            self.vfs
                .open(&filesys::file_path(&self.base(id), "data"), false)?,
        );
        let _ = storage.advise_random();
        cache.insert(id, storage.clone());
        Ok(storage)
    }

    /// Closes this handle's reader of a container (before it is removed).
    pub(crate) fn forget_reader(&self, id: u32) {
        let mut cache = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        cache.remove(&id);
    }

    /// Removes container `id`'s files, this handle's reader of it first.
    pub(crate) fn remove(&self, id: u32) -> Result<()> {
        self.forget_reader(id);
        remove_filesys(self.vfs.as_ref(), &self.base(id))
    }

    /// Opens container `id` to write to (created when its files do not exist).
    pub(crate) fn open_writer(&mut self, id: u32, wait: bool) -> Result<()> {
        let base = self.base(id);
        let open = filesys::OpenOptions {
            wait,
            clock: self.clock.clone(),
            ..filesys::OpenOptions::writer()
        };
        let fs = if self.vfs.exists(&filesys::file_path(&base, "data")) {
            Filesys::open_in(self.vfs.clone(), &base, &open)?
        } else {
            Filesys::create_in(self.vfs.clone(), &base, &self.options, &open)?
        };
        self.writer = Some(ContainerWriter { id, fs });
        Ok(())
    }

    /// The current container's writer: an error on a read-only handle.
    pub(crate) fn writer(&mut self) -> Result<&mut ContainerWriter> {
        self.writer
            .as_mut()
            .ok_or_else(|| Error::read_only(&self.dir))
    }

    /// The current container's writer, when this is a writer's handle.
    pub(crate) fn writer_if_open(&mut self) -> Option<&mut ContainerWriter> {
        self.writer.as_mut()
    }

    /// The file whose sync failed, when the current container's writer is failed.
    pub(crate) fn writer_failed(&self) -> Option<&Path> {
        self.writer.as_ref().and_then(|w| w.fs.failed())
    }

    /// True on a writer's handle.
    pub(crate) fn writable(&self) -> bool {
        self.writer.is_some()
    }

    /// What the current container's open repaired (a crash mid-put), for the log.
    pub(crate) fn writer_recovery(&self) -> Vec<String> {
        self.writer
            .as_ref()
            .map(|w| w.fs.recovery().actions.clone())
            .unwrap_or_default()
    }

    /// Seals the current container and starts the next one, named current in `meta`: the caller
    /// commits before (the values the sealed one holds) and after (CURCONT, NEXTCONT).
    pub(crate) fn rotate(&mut self, meta: &mut Filesys) -> Result<()> {
        // A sealed container keeps no preallocated room.
        self.writer()?.fs.seal()?;
        let next = self.allocate(meta)?;
        self.writer = None;
        self.open_writer(next, false)?;
        meta.set_var(CURCONT, i64::from(next))?;
        Ok(())
    }
}

/// Removes a filesys's files, the datafile first, then syncs the directory.
pub(crate) fn remove_filesys(vfs: &dyn Vfs, base: &Path) -> Result<()> {
    // A build's perm and its merge scratch too: a build that failed or was killed leaves them.
    let perm = filesys::file_path(base, "perm");
    let build = [RUNS_SUFFIX, SORTED_SUFFIX].map(|suffix| sibling(&perm, suffix));
    let leftovers: Vec<PathBuf> = filesys::scratch_files(base)
        .into_iter()
        .chain([perm])
        .chain(build)
        .collect();
    match filesys::remove_files(vfs, base, &leftovers)? {
        Some(path) => vfs.sync_dir(&path),
        None => Ok(()),
    }
}

/// The store's side of its container set: what its open, reads, puts and maintenance ask of it.
impl Store {
    /// The number of the current container (CURCONT).
    pub(crate) fn current_container(&self) -> Result<u32> {
        self.containers.current(&self.records.fs)
    }

    /// Containers that exist, oldest first.
    pub fn container_ids(&self) -> Result<Vec<u32>> {
        self.containers.ids(&self.records.fs)
    }

    /// The next container number to allocate.
    pub(super) fn next_container(&self) -> Result<u32> {
        self.containers.next(&self.records.fs)
    }

    /// A container number never used before (durable with the next commit).
    pub(crate) fn allocate_container(&mut self) -> Result<u32> {
        self.containers.allocate(&mut self.records.fs)
    }

    /// The containers of the values.
    pub(crate) fn containers(&self) -> &Containers {
        &self.containers
    }

    /// The current container's writer: an error on a read-only handle, or a failed writer.
    pub(crate) fn writer(&mut self) -> Result<&mut ContainerWriter> {
        self.check_failed()?;
        self.containers.writer()
    }

    /// Seals the current container and starts the next.
    pub(crate) fn rotate(&mut self) -> Result<()> {
        self.commit()?;
        self.containers.rotate(&mut self.records.fs)?;
        self.commit()
    }

    /// Container `id`'s datafile, to read values from.
    pub(super) fn container(&self, id: u32) -> Result<Arc<dyn Storage>> {
        self.containers.reader(id)
    }
}
