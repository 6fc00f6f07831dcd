//! How a store is opened: writer or reader, the clock, the files, the cache of title records.

use std::sync::Arc;

use crate::clock::{self, Clock};
use crate::vfs::{RealFs, Vfs};

/// How to open a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Open as the writer (taking the store's lock, recovering after a crash), else read-only.
    pub writable: bool,
    /// Wait for another writer instead of failing with "in use".
    pub wait: bool,
    /// Where tids and retention stamps take the time from.
    pub clock: Arc<dyn Clock>,
    /// The filesystem the store's files are opened through.
    pub vfs: Arc<dyn Vfs>,
    /// Bytes of title records a writer's handle keeps from its reads, so that a warm read is
    /// one pread (the value's), and as much again of committed records for the read-only handles
    /// opened beside it in the same process; 0 keeps none. A read-only handle's own setting is
    /// not used. Default [`RECORD_CACHE_BYTES`].
    pub record_cache_bytes: usize,
}

/// The default of [`StoreOptions::record_cache_bytes`]: 32 MiB holds the records of about
/// 36,000 titles of ten renders each (the encoded size, about 90 bytes a render), or the answers
/// of about 115,000 titles to a get of their latest render (about 290 bytes each, as charged): a
/// full cache gives up records before answers. At 16 MiB the answers of a 100,000-title store
/// did not all fit, and a warm `get_latest` there decoded its record again.
pub const RECORD_CACHE_BYTES: usize = 32 << 20;

impl StoreOptions {
    /// A writer's options: fails "in use" when another writer holds the lock; the system clock,
    /// the real filesystem.
    pub fn writer() -> Self {
        StoreOptions {
            writable: true,
            wait: false,
            clock: clock::system(),
            vfs: Arc::new(RealFs),
            record_cache_bytes: RECORD_CACHE_BYTES,
        }
    }

    /// A read-only handle's options: takes no lock, writes nothing.
    pub fn read_only() -> Self {
        StoreOptions {
            writable: false,
            ..StoreOptions::writer()
        }
    }
}
