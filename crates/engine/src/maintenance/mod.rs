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
//! What a caller asks for is a method of [`Store`](crate::store::Store) defined here (`compact`,
//! `cull_due`, `archive_step`, `scrub`, `snapshot`, …), so the store's public API is unchanged;
//! the work behind it is functions and types of this module that use the store's crate-internal
//! API (its title records, its container set, the generation file, the archive tier).

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
