//! The Wink storage engine: a local store for revisioned web documents, on the Wink container
//! formats.
//!
//! A render store: create one, write renders (one commit each, or many in one batch), read the
//! latest, a revision or a listing. Every value read back is checked against its CRC-32.
//!
//! ```
//! use wink_engine::{Config, Labels, Page, Put, Store, StoreOptions, Which};
//!
//! let dir = tempfile::tempdir()?;
//! let opts = StoreOptions::writer();
//! Store::init(dir.path(), &Config::default(), &opts)?;
//! let mut store = Store::open(dir.path(), &opts)?;
//!
//! // One put, durable (fsynced) when it returns; the tid is made from the clock.
//! let tid = store.put(&Put::new("en.wikipedia.org", "Main_Page", 1, "text/html", b"<p>one</p>"))?;
//!
//! // Many puts, durable together at the batch's commit (group commit).
//! let mut batch = store.batch();
//! for rev in 2..=3 {
//!     let html = format!("<p>revision {rev}</p>");
//!     batch.put(&Put {
//!         domain: "en.wikipedia.org",
//!         title: "Main_Page",
//!         rev,
//!         tid: None,
//!         content_type: "text/html",
//!         labels: &Labels::NONE,
//!         value: html.as_bytes(),
//!         historical: false,
//!     })?;
//! }
//! assert_eq!(batch.commit()?, 2);
//!
//! // Precedence is by revision, then tid: the latest is revision 3.
//! let latest = store.get("en.wikipedia.org", "Main_Page", Which::Latest)?.expect("stored");
//! assert_eq!((latest.rev, latest.value.as_slice()), (3, b"<p>revision 3</p>".as_slice()));
//! let first = store.get("en.wikipedia.org", "Main_Page", Which::Render(1, tid))?.expect("kept");
//! assert_eq!(first.value, b"<p>one</p>");
//! let listed = store.list("en.wikipedia.org", "Main_Page", Page::default())?;
//! assert_eq!(listed.iter().map(|l| l.rev).collect::<Vec<_>>(), [3, 2, 1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The API is the list of names at the root of the crate (below). Its modules are the layers,
//! bottom to top, each importing only from the ones before it (the one-page picture is
//! docs/ARCHITECTURE.md):
//!
//! - [`storage`] and [`vfs`]: the storage seam (pread/pwrite, sync, page-cache hooks) and the
//!   files a structure of several lives in; [`clock`], the time every stamp is read from;
//! - [`format`](mod@format): the container formats (superblock, kvseq, hindex, perm, exact to their spec);
//!   [`check`], the check of one file of any of them;
//! - [`filesys`]: a flat filesystem on kvseq and hindex, with the append-only variant;
//! - [`store`] and [`archive`]: the render store and the archive of superseded revisions;
//! - [`maintenance`]: compaction, culling, archive runs, scrub, snapshots, the index rebuild.
//!
//! WARC and dumps are built on this crate by the crate `wink_warc`, the HTTP service and the
//! cluster by the `wink` package; the engine compiles none of tokio, hyper, clap, indicatif or
//! async-nats. Every public item
//! is documented (`missing_docs` guards them). The modules' paths may change between versions;
//! the names at the root are the interface.
//!
//! The formats stand on their own too:
//!
//! ```
//! use wink_engine::{KvSeq, KvSeqOptions, MemStorage};
//!
//! let mut kv = KvSeq::create(Box::new(MemStorage::new("demo")), &KvSeqOptions::default())?;
//! let ptr = kv.append(b"key", b"value")?;
//! assert_eq!(kv.read(ptr)?.value, b"value");
//! kv.sync()?;
//! # Ok::<(), wink_engine::Error>(())
//! ```

#![warn(missing_docs)]

// The unit tests compile the harness's simulated disk and revision histories from their source
// (`crates/harness/src/`), which names the engine `wink_engine`: a dev-dependency on
// wink-harness would link a second copy of the engine, whose types are not this one's.
#[cfg(test)]
extern crate self as wink_engine;
// Not every item of them is used here.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../harness/src/sim.rs"]
mod sim;
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../harness/src/synth.rs"]
mod synth;

pub mod archive;
pub mod check;
pub mod clock;
mod error;
pub mod filesys;
pub mod format;
pub mod maintenance;
pub mod storage;
pub mod store;
pub mod vfs;

// The render store.
pub use store::{
    Batch, Config, Got, Labels, Listed, Page, Policy, Put, Renders, Revisions, State, Store,
    StoreOptions, StoreStat, TitleKey, Which, RECORD_CACHE_BYTES,
};
// Its maintenance.
pub use maintenance::compact::{CompactOptions, CompactReport};
pub use maintenance::scrub::{ScrubOptions, ScrubReport};
pub use maintenance::{ArchiveReport, CullReport};
// The archive.
pub use archive::{Archive, ArchiveOptions, ArchiveStats};
// The filesys.
pub use filesys::{Filesys, FsOptions, OpenOptions};
// The container formats.
pub use format::hindex::{HIndex, HIndexOptions};
pub use format::kvseq::{KvPointer, KvSeq, KvSeqOptions};
pub use format::perm::{Perm, PermOptions};
pub use format::superblock::Superblock;
// Where their bytes live, and the clock they stamp.
pub use clock::{Clock, ManualClock};
pub use storage::{FileStorage, MemStorage, Storage};
pub use vfs::{RealFs, Vfs};
// Errors.
pub use error::{Error, Result};
