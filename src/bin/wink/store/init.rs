//! `wink init DIR [--revisions P] [--renders P] [--historical-ttl S] [--container-bytes N]
//! [--max-value N] [--archive first|newest|every:SECS]`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wink::filesys::MAX_DATA_ENTRY;
use wink::store::{Config, Policy, Renders, Revisions, Store, StoreOptions};
use wink::{Error, Result};

use crate::recording::Recording;
use crate::Status;

const AFTER_HELP: &str = "\
Creates DIR (and its parents) with the configuration file DIR/store, the title records
(DIR/meta.*) and the first container (DIR/c000001.*), and syncs them. The policy is fixed for the
store's life.

Revision policy: `all` keeps every revision; `recent:TTL` keeps a superseded revision readable
for TTL seconds after a newer one arrived (the current revision never expires).
Render policy: `all`; `latest:COUNT:GRACE` keeps the newest COUNT renders of a revision and the
others for GRACE seconds after they were pushed out; `interval:SECS:COUNT:GRACE` the newest COUNT
per SECS of tid time; `ttl:TTL` every render for TTL seconds after its arrival (a stash).

Exit status 2 when an option is invalid, when DIR holds a store already, or when DIR is a file
or a directory that is not empty: nothing is created then. When creating fails midway, what this
run created is removed again.";

/// Smallest container: the store treats anything smaller as this.
const MIN_CONTAINER: u64 = 1 << 20;
/// Largest container: compaction needs free space for one container.
const MAX_CONTAINER: u64 = 1 << 40;

/// Creates a new, empty render store.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The directory to create the store in (absent, or empty).
    dir: PathBuf,
    /// Revision retention: all, or recent:TTL.
    #[arg(long, value_name = "POLICY", default_value_t = Policy::default().revisions.to_string())]
    revisions: String,
    /// Render retention: all, latest:COUNT:GRACE, interval:SECS:COUNT:GRACE or ttl:TTL.
    #[arg(long, value_name = "POLICY", default_value_t = Policy::default().renders.to_string())]
    renders: String,
    /// Seconds a historical render (an old revision regenerated on request) stays readable.
    #[arg(long, value_name = "S", allow_negative_numbers = true,
          default_value_t = Policy::default().historical_ttl)]
    historical_ttl: i64,
    /// A container is sealed, and the next one started, past this many bytes (1 MiB .. 1 TiB).
    #[arg(long, value_name = "N", default_value_t = Config::default().container_bytes)]
    container_bytes: u64,
    /// The largest value a put accepts, in bytes (1 .. 256 MiB).
    #[arg(long, value_name = "N", default_value_t = Config::default().max_value)]
    max_value: u64,
    /// Enable the archive tier: which render of a revision leaving the hot tier it keeps —
    /// first, newest, or every:SECS (one per SECS of tid time).
    #[arg(long, value_name = "POLICY")]
    archive: Option<String>,
    /// Raw bytes per archive block (64 KiB .. 1 GiB): format 1 titles only (a new store's
    /// archive writes format 2, one frame per revision).
    #[arg(long, value_name = "N", default_value_t = Config::default().archive_block_bytes)]
    archive_block_bytes: u64,
    /// zstd level of the archive (1 .. 22; higher is smaller and slower to archive).
    #[arg(long, value_name = "L", default_value_t = Config::default().archive_level)]
    archive_level: i32,
    /// Format 1 titles only: a self-contained archive block every N blocks. 2 (the default): a
    /// read decompresses one block, or a block and the key block it references. 0: only a
    /// title's first block, which compresses ~20% better but makes reads of a long history
    /// decompress a chain of blocks.
    #[arg(long, value_name = "N", default_value_t = Config::default().archive_key_every)]
    archive_key_every: u32,
    /// Archive format 2 (one frame per revision): a new key frame, decodable on its own, once a
    /// read would decode more than N raw bytes since the last (0: every revision a key). Larger
    /// is smaller and makes the slowest reads slower.
    #[arg(long, value_name = "N", default_value_t = Config::default().archive_chain_bytes)]
    archive_chain_bytes: u64,
}

pub fn run(args: &Args) -> Result<Status> {
    let cfg = config(args)?;
    let clock = crate::clock_from_env()?;
    refuse_existing(&args.dir)?;
    let vfs = Arc::new(Recording::default());
    let opts = StoreOptions {
        clock,
        vfs: vfs.clone(),
        ..StoreOptions::writer()
    };
    let result = Store::init(&args.dir, &cfg, &opts);
    if result.is_err() {
        vfs.remove_created();
    }
    result.map(|()| 0)
}

/// The configuration, every value checked before anything is created.
fn config(args: &Args) -> Result<Config> {
    let revisions: Revisions = args.revisions.parse()?;
    let renders: Renders = args.renders.parse()?;
    if args.historical_ttl < 0 {
        return Err(Error::invalid(format!(
            "--historical-ttl {}: a number of seconds ≥ 0",
            args.historical_ttl
        )));
    }
    if !(MIN_CONTAINER..=MAX_CONTAINER).contains(&args.container_bytes) {
        return Err(Error::invalid(format!(
            "--container-bytes {}: {MIN_CONTAINER}..={MAX_CONTAINER} bytes",
            args.container_bytes
        )));
    }
    // The store reads a value as one contiguous range, which a filesys guarantees only up to one
    // data entry; a larger value would be split across entries and could not be read back.
    if !(1..=MAX_DATA_ENTRY).contains(&args.max_value) {
        return Err(Error::invalid(format!(
            "--max-value {}: 1..={MAX_DATA_ENTRY} bytes",
            args.max_value
        )));
    }
    let archive = args.archive.as_deref().map(str::parse).transpose()?;
    if !((64 << 10)..=(1 << 30)).contains(&args.archive_block_bytes) {
        return Err(Error::invalid(format!(
            "--archive-block-bytes {}: 65536..=1073741824",
            args.archive_block_bytes
        )));
    }
    if !(1..=22).contains(&args.archive_level) {
        return Err(Error::invalid(format!(
            "--archive-level {}: 1..=22",
            args.archive_level
        )));
    }
    Ok(Config {
        policy: Policy {
            revisions,
            renders,
            historical_ttl: args.historical_ttl,
        },
        container_bytes: args.container_bytes,
        max_value: args.max_value,
        archive,
        archive_block_bytes: args.archive_block_bytes,
        archive_level: args.archive_level,
        archive_key_every: args.archive_key_every,
        archive_chain_bytes: args.archive_chain_bytes,
    })
}

/// DIR must be absent or an empty directory: a store is never mixed with other files, and an
/// interrupted init (files but no DIR/store) is left for the operator to look at and remove.
pub(crate) fn refuse_existing(dir: &Path) -> Result<()> {
    let Ok(meta) = dir.symlink_metadata() else {
        return Ok(());
    };
    let shown = dir.display();
    if !meta.is_dir() {
        return Err(Error::invalid(format!(
            "{shown} exists and is not a directory"
        )));
    }
    if dir.join("store").symlink_metadata().is_ok() {
        return Err(Error::invalid(format!("{shown} holds a store already")));
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, None, e))?;
    if entries.next().is_some() {
        return Err(Error::invalid(format!(
            "{shown} is not empty (a store gets a directory of its own; an interrupted \
             `wink init` leaves files without {shown}/store: remove them first)"
        )));
    }
    Ok(())
}
