//! Where a store's bytes are: per container, its datafile's size, the bytes of readable values in
//! it (live) and the rest (dead: values past retention, taken down or replaced, and the
//! container's own bookkeeping — what compaction reclaims), and how much of each file the page
//! cache holds (mincore), the figure the page-cache policy is judged by (docs/INTERNALS.md
//! § Durability, layer by layer: "Page cache").

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::Result;
use crate::filesys;
use crate::format::kvseq::KvSeq;
use crate::storage::residency;
use crate::store::containers::container_base;
use crate::store::{meta_base, ScanPages, Store};

/// One container's space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSpace {
    /// The container's number.
    pub id: u32,
    /// The datafile's logical size (FILESIZE).
    pub bytes: u64,
    /// Bytes of readable values in it (by the title records).
    pub live_bytes: u64,
    /// The rest of `bytes`: what compaction reclaims.
    pub dead_bytes: u64,
    /// Bytes of the datafile in the page cache.
    pub resident_bytes: u64,
}

/// A file's page-cache residency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Residency {
    /// The file.
    pub path: PathBuf,
    /// The file's length on disk (preallocation included).
    pub bytes: u64,
    /// Bytes of it in the page cache.
    pub resident_bytes: u64,
}

/// Space by container, and the meta files' residency.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Space {
    /// One per container, by number.
    pub containers: Vec<ContainerSpace>,
    /// The title records' files (`DIR/meta.*`).
    pub meta: Vec<Residency>,
}

/// Space by container (a scan of the title records, the same readability rule as
/// [`Store::stat`]: the containers' live bytes add up to its `live_bytes`) and the page-cache
/// residency of the containers and the meta files. Residency is asked of the kernel without
/// touching a page, so asking does not change it, and the scan drops the pages of the meta files
/// it brought in before the residency is taken.
pub fn space(store: &Store) -> Result<Space> {
    let now = store.now();
    let policy = store.config().policy;
    let mut live: BTreeMap<u32, u64> = BTreeMap::new();
    let mut pages = ScanPages::start(store.meta())?;
    for item in store.meta().iter() {
        // Damaged records are [`Store::stat`]'s to report: their values are not counted.
        let Ok(file) = item else { break };
        let Ok(rec) = crate::store::record_of(store.meta(), &file) else {
            continue;
        };
        pages.passed(file.inode.0)?;
        for r in rec
            .renders
            .iter()
            .filter(|r| policy.readable(&r.stamps, now))
        {
            let bytes = live.entry(r.location.container).or_default();
            *bytes = bytes.saturating_add(r.location.len);
        }
    }
    pages.finish()?;
    let mut space = Space::default();
    for id in store.container_ids()? {
        let path = filesys::file_path(&container_base(store.dir(), id), "data");
        let bytes = KvSeq::open(store.vfs().open(&path, false)?, false)?.filesize();
        let live_bytes = live.get(&id).copied().unwrap_or(0);
        space.containers.push(ContainerSpace {
            id,
            bytes,
            live_bytes,
            dead_bytes: bytes.saturating_sub(live_bytes),
            resident_bytes: residency(&path)?.0,
        });
    }
    for ext in filesys::FILES {
        let path = filesys::file_path(&meta_base(store.dir()), ext);
        if store.vfs().exists(&path) {
            let (resident_bytes, bytes) = residency(&path)?;
            space.meta.push(Residency {
                path,
                bytes,
                resident_bytes,
            });
        }
    }
    Ok(space)
}
