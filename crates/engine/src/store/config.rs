//! The store's configuration file `DIR/store`: a kvseq (PURPOSE `WINKSTOR`, KEYREPR 0, VALREPR 1)
//! of `name → value` text entries, written once by `init`.
//!
//! - `version`: `1`; the layout version of the store directory.
//! - `revisions`: `all` | `recent:TTL`; revision retention.
//! - `renders`: `all` | `latest:C:G` | …; render retention.
//! - `historical_ttl`: seconds; retention of historical puts.
//! - `container_bytes`: bytes; a container is sealed past this size.
//! - `max_value`: bytes; the largest value a put accepts (≤ 256 MiB).
//! - `archive`: `none` | `first` | `newest` | `every:SECS`; the archive tier.
//! - `archive_block_bytes`: bytes; raw bytes per archive block.
//! - `archive_level`: 1..=22; the zstd level of the archive.
//! - `archive_key_every`: N; a self-contained block every N blocks (0: first only).
//! - `archive_chain_bytes`: bytes; v2: a key once a read would decode more.
//! - `checksum`: 8 hex digits; the CRC-32 of the entries before it (see `verify_settings`).

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::kvseq::{KvSeq, KvSeqOptions};
use crate::format::repr::Repr;
use crate::format::superblock::Purpose;
use crate::vfs::Vfs;

use super::policy::{ArchivePolicy, Policy};

/// The largest value a store accepts: one filesys data entry.
pub const MAX_VALUE: u64 = crate::filesys::MAX_DATA_ENTRY;

/// PURPOSE of the configuration file: what its superblock says it is.
pub const PURPOSE: Purpose = Purpose(*b"WINKSTOR");
const VERSION: &str = "1";

/// A store's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Retention of revisions and renders in the hot tier.
    pub policy: Policy,
    /// Bytes past which the current container is sealed and a new one started.
    pub container_bytes: u64,
    /// The largest value a put accepts, bytes (at most [`MAX_VALUE`]).
    pub max_value: u64,
    /// The archive tier, when enabled: which render of a leaving revision it keeps.
    pub archive: Option<ArchivePolicy>,
    /// Raw bytes per archive block.
    pub archive_block_bytes: u64,
    /// zstd level of the archive.
    pub archive_level: i32,
    /// A self-contained archive block every this many blocks (0: only the first).
    pub archive_key_every: u32,
    /// Format 2: a new key frame once a read would decode more raw bytes than this.
    pub archive_chain_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::default(),
            container_bytes: 1 << 30,
            max_value: 64 << 20,
            archive: None,
            archive_block_bytes: crate::archive::ArchiveOptions::default().block_bytes,
            archive_level: crate::archive::ArchiveOptions::default().level,
            archive_key_every: crate::archive::ArchiveOptions::default().key_every,
            archive_chain_bytes: crate::archive::ArchiveOptions::default().chain_bytes,
        }
    }
}

impl Config {
    /// How this store's archive is written and read.
    pub fn archive_options(&self) -> crate::archive::ArchiveOptions {
        crate::archive::ArchiveOptions {
            block_bytes: self.archive_block_bytes,
            level: self.archive_level,
            key_every: self.archive_key_every,
            chain_bytes: self.archive_chain_bytes,
            ..crate::archive::ArchiveOptions::default()
        }
    }

    fn entries(&self) -> Vec<(&'static str, String)> {
        vec![
            ("version", VERSION.to_string()),
            ("revisions", self.policy.revisions.to_string()),
            ("renders", self.policy.renders.to_string()),
            ("historical_ttl", self.policy.historical_ttl.to_string()),
            ("container_bytes", self.container_bytes.to_string()),
            ("max_value", self.max_value.to_string()),
            (
                "archive",
                self.archive.map_or("none".to_string(), |a| a.to_string()),
            ),
            ("archive_block_bytes", self.archive_block_bytes.to_string()),
            ("archive_level", self.archive_level.to_string()),
            ("archive_key_every", self.archive_key_every.to_string()),
            ("archive_chain_bytes", self.archive_chain_bytes.to_string()),
        ]
    }

    /// Writes the configuration file (which must not exist).
    pub fn write(&self, vfs: &dyn Vfs, path: &Path, opts: &KvSeqOptions) -> Result<()> {
        write_settings(vfs, path, PURPOSE, &self.entries(), opts)
    }

    /// Reads the configuration file.
    pub fn read(vfs: &dyn Vfs, path: &Path) -> Result<Config> {
        let kv = KvSeq::open(vfs.open(path, false)?, false)?;
        if kv.superblock().purpose() != PURPOSE {
            return Err(Error::corrupt(
                path,
                crate::format::superblock::PURPOSE_VALUE_OFFSET,
                "store configuration PURPOSE",
                PURPOSE,
                kv.superblock().purpose(),
            ));
        }
        verify_settings(&kv, path)?;
        let mut cfg = Config::default();
        let mut version = None;
        for entry in kv.iter_entries(kv.first(), true) {
            let e = entry?;
            let at = e.layout.ptr.0;
            let value = String::from_utf8(e.value.unwrap_or_default()).map_err(|_| {
                Error::corrupt(path, at, "configuration value", "UTF-8", "other bytes")
            })?;
            let bad = |what: &str| {
                Error::corrupt(
                    path,
                    at,
                    format!("configuration {what}"),
                    "a valid setting",
                    value.clone(),
                )
            };
            let number = |v: &str| v.parse::<u64>().map_err(|_| bad("number"));
            match e.key.as_slice() {
                b"version" => version = Some(value.clone()),
                b"revisions" => {
                    cfg.policy.revisions = value.parse().map_err(|_| bad("revisions"))?
                }
                b"renders" => cfg.policy.renders = value.parse().map_err(|_| bad("renders"))?,
                b"historical_ttl" => {
                    cfg.policy.historical_ttl = value
                        .parse::<i64>()
                        .ok()
                        .filter(|v| *v >= 0)
                        .ok_or_else(|| bad("historical_ttl"))?
                }
                b"container_bytes" => cfg.container_bytes = number(&value)?.max(1 << 20),
                b"max_value" => cfg.max_value = number(&value)?.min(MAX_VALUE),
                b"archive" if value == "none" => cfg.archive = None,
                b"archive" => cfg.archive = Some(value.parse().map_err(|_| bad("archive"))?),
                b"archive_block_bytes" => {
                    cfg.archive_block_bytes = number(&value)?.clamp(64 << 10, 1 << 30)
                }
                b"archive_key_every" => {
                    cfg.archive_key_every =
                        value.parse::<u32>().map_err(|_| bad("archive_key_every"))?
                }
                b"archive_chain_bytes" => cfg.archive_chain_bytes = number(&value)?,
                b"archive_level" => {
                    cfg.archive_level = value
                        .parse::<i32>()
                        .ok()
                        .filter(|l| (1..=22).contains(l))
                        .ok_or_else(|| bad("archive_level"))?
                }
                // Settings of later versions are kept by not rewriting the file.
                _ => {}
            }
        }
        if version.as_deref() != Some(VERSION) {
            return Err(Error::unsupported(
                path,
                0,
                format!("store layout version {version:?} (this wink reads {VERSION})"),
            ));
        }
        Ok(cfg)
    }
}

/// Creates `path` (which must not exist) as a small settings file — a kvseq of (name, value)
/// text pairs, KEYREPR 0, VALREPR 1, no delete flags — and syncs it. The configuration and the
/// generation file share this layout.
pub(super) fn write_settings(
    vfs: &dyn Vfs,
    path: &Path,
    purpose: Purpose,
    entries: &[(&str, String)],
    opts: &KvSeqOptions,
) -> Result<()> {
    let mut kv = KvSeq::create(vfs.create_new(path)?, &settings_options(purpose, opts))?;
    append_settings(&mut kv, entries)?;
    kv.sync()
}

/// [`write_settings`] for a temporary file that is renamed over the real one once it is
/// durable: one sync for all of it (no reader opens the temporary file, so the order in which
/// its bytes and its superblock reach the disk does not matter; only the rename has to wait).
pub(super) fn write_settings_to_rename(
    vfs: &dyn Vfs,
    path: &Path,
    purpose: Purpose,
    entries: &[(&str, String)],
    opts: &KvSeqOptions,
) -> Result<()> {
    let settings = settings_options(purpose, opts);
    let mut kv = KvSeq::create_unsynced(vfs.create_new(path)?, &settings)?;
    append_settings(&mut kv, entries)?;
    kv.stage_sync(opts.clock.now())?;
    crate::storage::sync(kv.storage())
}

fn settings_options(purpose: Purpose, opts: &KvSeqOptions) -> KvSeqOptions {
    KvSeqOptions {
        purpose,
        keyrepr: Repr::Prefixed { width: 1 },
        valrepr: Repr::Prefixed { width: 2 },
        delflag: false,
        fileincr: 0,
        ..opts.clone()
    }
}

/// Appends the entries and the checksum entry after them.
fn append_settings(kv: &mut KvSeq, entries: &[(&str, String)]) -> Result<()> {
    let mut crc = crc32fast::Hasher::new();
    for (key, value) in entries {
        kv.append(key.as_bytes(), value.as_bytes())?;
        hash_setting(&mut crc, key.as_bytes(), value.as_bytes());
    }
    kv.append(CHECKSUM, format!("{:08x}", crc.finalize()).as_bytes())?;
    Ok(())
}

/// The key of a settings file's last entry: the CRC-32 of every entry before it.
const CHECKSUM: &[u8] = b"checksum";

fn hash_setting(crc: &mut crc32fast::Hasher, key: &[u8], value: &[u8]) {
    // Lengths first, so that no two lists of entries hash the same bytes.
    crc.update(&(key.len() as u32).to_be_bytes());
    crc.update(key);
    crc.update(&(value.len() as u32).to_be_bytes());
    crc.update(value);
}

/// Checks a settings file's `checksum` entry against the entries before it: a flipped byte in a
/// key or a value (`archive` read as an unknown key, say, and the store opened without its
/// archive) is damage, never another setting. Files written before the entry was kept have
/// none and are read as they are; entries after it are not covered.
pub(super) fn verify_settings(kv: &KvSeq, path: &Path) -> Result<()> {
    let mut crc = crc32fast::Hasher::new();
    for entry in kv.iter_entries(kv.first(), true) {
        let e = entry?;
        let value = e.value.unwrap_or_default();
        if e.key == CHECKSUM {
            let want = format!("{:08x}", crc.finalize());
            if value != want.as_bytes() {
                return Err(Error::corrupt(
                    path,
                    e.layout.ptr.0,
                    "settings checksum (CRC-32 of the entries before it)",
                    want,
                    String::from_utf8_lossy(&value),
                ));
            }
            return Ok(());
        }
        hash_setting(&mut crc, &e.key, &value);
    }
    Ok(())
}
