//! Wink: a local storage engine for revisioned web documents, on the Wink container formats.
//!
//! A render store: create one, write renders (one commit each, or many in one batch), read the
//! latest, a revision or a listing. Every value read back is checked against its CRC-32.
//!
//! ```
//! use wink::{Config, Page, Put, Store, StoreOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let opts = StoreOptions::writer();
//! Store::init(dir.path(), &Config::default(), &opts)?;
//! let mut store = Store::open(dir.path(), &opts)?;
//!
//! // One put, durable (fsynced) when it returns; the tid is made from the clock.
//! let tid = store.put("en.wikipedia.org", "Main_Page", 1, None, "text/html", b"<p>one</p>")?;
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
//!         value: html.as_bytes(),
//!         historical: false,
//!     })?;
//! }
//! assert_eq!(batch.commit()?, 2);
//!
//! // Precedence is by revision, then tid: the latest is revision 3.
//! let latest = store.get_latest("en.wikipedia.org", "Main_Page")?.expect("stored");
//! assert_eq!((latest.rev, latest.value.as_slice()), (3, b"<p>revision 3</p>".as_slice()));
//! let first = store.get_render("en.wikipedia.org", "Main_Page", 1, tid)?.expect("kept");
//! assert_eq!(first.value, b"<p>one</p>");
//! let listed = store.list("en.wikipedia.org", "Main_Page", Page::default())?;
//! assert_eq!(listed.iter().map(|l| l.rev).collect::<Vec<_>>(), [3, 2, 1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, bottom to top (each imports only from the ones above it in this list; the
//! one-page picture is docs/ARCHITECTURE.md):
//!
//! - [`storage`]: the seam under the formats (pread/pwrite, sync, page-cache hooks).
//! - [`format`]: superblock, kvseq, hindex, perm — the container formats, exact to the spec.
//! - [`check`]: validation of any Wink file, for `wink check`.
//! - [`vfs`], [`sim`]: where multi-file structures get their files (real, or a simulated disk).
//! - [`filesys`]: a flat filesystem on kvseq + hindex, with the append-only variant.
//! - [`archive`]: old revisions of a title packed into compressed frames.
//! - [`store`]: the render store — revisions and renders with precedence and retention, its
//!   maintenance (compaction, culling, archive runs, scrub, snapshots, the index rebuild).
//! - [`synth`]: deterministic revision histories for the demo and benchmarks.
//! - `warc` (feature `warc`): WARC export and import of a store, with a CDXJ index.
//! - `serve` (feature `server`): `wink serve`, RESTBase's key_rev_value API over HTTP.
//! - `cluster` (feature `cluster`): replicated nodes on NATS JetStream (docs/CLUSTER.md).
//!
//! Features: `cli` (the `wink` binary), `server` and `warc`, all on by default; an embedder of
//! the store alone takes `default-features = false`.
//!
//! The formats stand on their own too:
//!
//! ```
//! use wink::format::kvseq::{KvSeq, KvSeqOptions};
//! use wink::storage::MemStorage;
//!
//! let mut kv = KvSeq::create(Box::new(MemStorage::new("demo")), &KvSeqOptions::default())?;
//! let ptr = kv.append(b"key", b"value")?;
//! assert_eq!(kv.read(ptr)?.value, b"value");
//! kv.sync()?;
//! # Ok::<(), wink::Error>(())
//! ```

pub mod archive;
pub mod check;
pub mod clock;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod error;
pub mod filesys;
pub mod format;
pub mod fuzzing;
#[cfg(feature = "server")]
pub mod serve;
pub mod sim;
pub mod storage;
pub mod store;
pub mod synth;
pub mod vfs;
#[cfg(feature = "warc")]
pub mod warc;

pub use error::{Error, Result};
pub use filesys::Filesys;
pub use format::hindex::HIndex;
pub use format::kvseq::{KvPointer, KvSeq};
pub use format::perm::Perm;
pub use format::superblock::Superblock;
pub use store::{Config, Got, Listed, Page, Policy, Put, State, Store, StoreOptions};
