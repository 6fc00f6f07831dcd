//! Wink: a local storage engine for revisioned web documents, on the Wink container formats.
//!
//! Layers, bottom to top (each imports only from the ones above it in this list):
//!
//! - [`storage`]: the seam under the formats (pread/pwrite, sync, page-cache hooks).
//! - [`format`]: superblock, kvseq, hindex, perm — the container formats, exact to the spec.
//! - [`check`]: validation of any Wink file, for `wink check`.
//! - [`vfs`], [`sim`]: where multi-file structures get their files (real, or a simulated disk).
//! - [`filesys`]: a flat filesystem on kvseq + hindex, with the append-only variant.
//! - [`store`]: the render store — revisions and renders with precedence and retention.
//! - [`synth`]: deterministic revision histories for the demo and benchmarks.
//! - [`warc`] (feature `warc`): WARC export and import of a store, with a CDXJ index.
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
pub use format::hindex::HIndex;
pub use format::kvseq::{KvPointer, KvSeq};
pub use format::perm::Perm;
pub use format::superblock::Superblock;
