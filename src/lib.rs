//! Wink: a local storage engine for revisioned web documents, on the Wink container formats.
//!
//! The engine (the storage seam, the formats, the filesys, the render store, the archive and
//! maintenance) is the crate `wink_engine`; this package re-exports its modules and names, so
//! that `wink::Store` and `wink::store::...` are the engine's, and adds what is built on it: the
//! HTTP service (feature `server`), the cluster (feature `cluster`) and the `wink` binary
//! (feature `cli`). WARC export and import (feature `warc`) and the dumps on it (feature `dumps`:
//! Enterprise HTML snapshots, WACZ) are the crate `wink_warc`, re-exported as [`warc`].
//!
//! ```
//! use wink::{Config, Put, Store, StoreOptions, Which};
//!
//! let dir = tempfile::tempdir()?;
//! let opts = StoreOptions::writer();
//! Store::init(dir.path(), &Config::default(), &opts)?;
//! let mut store = Store::open(dir.path(), &opts)?;
//! let tid = store.put(&Put::new("en.wikipedia.org", "Main_Page", 1, "text/html", b"<p>one</p>"))?;
//! let got = store.get("en.wikipedia.org", "Main_Page", Which::Render(1, tid))?.expect("kept");
//! assert_eq!(got.value, b"<p>one</p>");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Features: `cli` (the `wink` binary, with the test harnesses of the crate `wink_harness` for
//! `wink demo`), `server`, `warc`, `dumps` and `cluster` (replicated nodes on NATS JetStream,
//! docs/CLUSTER.md), all on by default. An embedder of the store alone takes the crate
//! `wink_engine`, or this one with `default-features = false`; neither compiles clap,
//! indicatif, tokio, hyper or async-nats.
//!
//! The crates are the layers, and Cargo enforces their direction: `wink_engine` at the bottom;
//! `wink_warc` on it; the service core `wink_service` (buckets, group commit, writes, the read
//! gate; no HTTP) on it; the HTTP front `wink_serve` ([`serve`]) on the core; the cluster
//! `wink_cluster` ([`cluster`]) on the core and the front; this package, the `wink` binary, on
//! top. [`serve`] offers the binary the service's start ([`serve::run`]) and options;
//! [`cluster`] offers a node's start ([`cluster::serve`]), the configuration, the
//! administration (`wink cluster`) and the stream's messages and their apply, which the tests
//! drive directly.

#![warn(missing_docs)]

/// A replicated cluster of nodes on NATS JetStream: the crate `wink_cluster`.
#[cfg(feature = "cluster")]
pub use wink_cluster as cluster;
/// The HTTP service, `wink serve`: the crate `wink_serve`.
#[cfg(feature = "server")]
pub use wink_serve as serve;
/// WARC export and import, and the dumps on it: the crate `wink_warc`.
#[cfg(feature = "warc")]
pub use wink_warc as warc;

// The engine's layers, under the paths they had in this crate.
pub use wink_engine::{archive, check, clock, filesys, format, maintenance, storage, store, vfs};

// The render store.
pub use wink_engine::{
    Batch, Config, Got, Listed, Page, Policy, Put, Renders, Revisions, State, Store, StoreOptions,
    StoreStat, TitleKey, Which, RECORD_CACHE_BYTES,
};
// Its maintenance.
pub use wink_engine::{
    ArchiveReport, CompactOptions, CompactReport, CullReport, ScrubOptions, ScrubReport,
};
// The archive.
pub use wink_engine::{Archive, ArchiveOptions, ArchiveStats};
// The filesys.
pub use wink_engine::{Filesys, FsOptions, OpenOptions};
// The container formats.
pub use wink_engine::{
    HIndex, HIndexOptions, KvPointer, KvSeq, KvSeqOptions, Perm, PermOptions, Superblock,
};
// Where their bytes live, and the clock they stamp.
pub use wink_engine::{Clock, FileStorage, ManualClock, MemStorage, RealFs, Storage, Vfs};
// Errors.
pub use wink_engine::{Error, Result};
