//! Maintenance of a render store: the work that keeps a store small and sound beside its reads
//! and puts, a layer above [`crate::store`] and [`crate::archive`] (it imports from them; they
//! never import from it).
//!
//! - [`compact`](mod@compact): containers rewritten without the values no read can return any more, and the
//!   archive rewritten without its dead bytes.
//! - [`cull`]: title records rewritten without the renders no read can return any more.
//! - [`archive_run`]: revisions leaving the hot tier moved into the archive.
//! - [`background`]: a thread that culls, archives and compacts in bounded steps.
//! - [`scrub`](mod@scrub) and [`quarantine`]: every stored byte checked, damaged values copied aside.
//! - [`snapshot`](mod@snapshot): a consistent copy of a live store.
//! - [`space`](mod@space): where a store's bytes are, and what is in the page cache.
//! - [`rebuild`]: the title index rebuilt from the records' checksummed keys.
//!
//! What a caller asks for is a function of this module that takes the store, not a method of
//! [`Store`](crate::store::Store): `maintenance::compact(&mut store, &opts, progress)`,
//! `cull_due`, `archive_step`, `scrub(&store, …)`, `snapshot`, …. The store's own methods are
//! the data path (put, get, list, take-down, batch); the work here uses its crate-internal
//! parts (the title records, the container set, the generation file, the archive tier).
//!
//! ```
//! use wink_engine::{maintenance, CompactOptions, Config, Store, StoreOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let opts = StoreOptions::writer();
//! Store::init(dir.path(), &Config::default(), &opts)?;
//! let mut store = Store::open(dir.path(), &opts)?;
//! let report = maintenance::compact(&mut store, &CompactOptions::default(), |_, _| {})?;
//! assert!(report.nothing_to_do());
//! assert!(maintenance::scrub(&store, |_| {})?.is_clean());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod archive_run;
pub mod background;
pub mod compact;
pub mod cull;
pub mod quarantine;
pub mod rebuild;
pub mod scrub;
pub mod snapshot;
pub mod space;

pub use archive_run::{archive_due, archive_step, ArchiveReport};
pub use compact::{
    adopt, compact, plan_compaction, rewrite_archive, start_compaction, start_compaction_of,
};
pub use cull::{cull_all, cull_due, CullReport};
pub use rebuild::rebuild_index;
pub use scrub::{checked_summary_step, scrub, scrub_with};
pub use snapshot::snapshot;
pub use space::space;
