//! Maintenance of a render store: the work that keeps a store small and sound beside its reads
//! and puts, a layer above [`crate::store`] and [`crate::archive`] (it imports from them; they
//! never import from it).
//!
//! - [`compact`]: containers rewritten without the values no read can return any more, and the
//!   archive rewritten without its dead bytes.
//! - [`cull`]: title records rewritten without the renders no read can return any more.
//! - [`archive_run`]: revisions leaving the hot tier moved into the archive.
//! - [`background`]: a thread that culls, archives and compacts in bounded steps.
//! - [`scrub`] and [`quarantine`]: every stored byte checked, damaged values copied aside.
//! - [`snapshot`]: a consistent copy of a live store.
//! - [`space`]: where a store's bytes are, and what is in the page cache.
//! - [`rebuild`]: the title index rebuilt from the records' checksummed keys.
//!
//! Most of it is methods of [`Store`](crate::store::Store) (`compact`, `cull_due`,
//! `archive_step`, `scrub`, `snapshot`, …), defined here on the store's crate-internal API.

pub mod archive_run;
pub mod background;
pub mod compact;
pub mod cull;
pub mod quarantine;
pub mod rebuild;
pub mod scrub;
pub mod snapshot;
pub mod space;

pub use archive_run::ArchiveReport;
pub use cull::CullReport;
