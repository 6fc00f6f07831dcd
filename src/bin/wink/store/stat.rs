//! `wink stat DIR [--json]`.

use std::path::PathBuf;

use serde::Serialize;
use wink::archive::ArchiveStats;
use wink::maintenance;
use wink::maintenance::space::Space;
use wink::store::generation::Generation;
use wink::store::{Config, StoreStat};
use wink::Result;

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Counts what reads would return now (retention at WINK_NOW when set; take-downs excluded): titles,
revisions and renders, and the bytes of their values (live_bytes). container_files_bytes is the
size of the containers' datafiles, and dead_bytes the part of it no readable render uses (values
past retention or taken down, and the containers' own bookkeeping), which compaction reclaims.
Then the store's configuration: the policy, container_bytes (the size past which a container is
sealed) and max_value; then generation (bumped by every compaction step), compactions (runs
finished), last_compaction_time (seconds since the epoch; 0: never) and
last_compaction_reclaimed_bytes.

When the store has an archive (`wink init --archive`), its counts follow: titles, blocks (files of
frames: format 1 blocks, format 2 segments), revisions (archived, not taken down), raw_bytes
(their bytes uncompressed) and stored_bytes (every byte of the archive's files), and its
settings: policy, block_bytes (format 1), level and chain_bytes (format 2's decode budget). A
store without an archive has no archive fields at all (no `archive` key in JSON, no `archive.`
lines in text).

quarantined counts the entries of DIR/quarantine (damaged values `wink scrub --quarantine`
copied aside; reads of them fail with exit 3); the field is there only when there is one. A title
record that cannot be read is not counted: one `damaged<TAB>DOMAIN/TITLE: WHAT` line each (JSON:
`damaged_titles`, a list), and the exit status is 3 (the counts of every other title stand).

Text output: one `FIELD<TAB>VALUE` line each, the policy's fields as policy.revisions,
policy.renders and policy.historical_ttl, the archive's as archive.titles, archive.revisions, ...
With --json: one object with the same fields, the policy and the archive as objects. Reads every
title record and every archive map.

Last, space by container and page-cache residency (mincore; asking does not change it): for each
container N, container.N.bytes (its datafile's FILESIZE; they add up to container_files_bytes),
container.N.live_bytes, container.N.dead_bytes and container.N.resident_bytes (bytes of the
datafile in the page cache); for each meta file (meta.data, meta.idx, ...), FILE.bytes (on disk)
and FILE.resident_bytes. With --json: `per_container`, a list of objects with number, bytes,
live_bytes, dead_bytes and resident_bytes, and `meta_files`, a list of objects with file, bytes and
resident_bytes.";

/// Prints a store's counts, sizes and policy.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct PolicyJson {
    revisions: String,
    renders: String,
    historical_ttl: i64,
}

#[derive(Serialize)]
struct StatJson {
    titles: u64,
    revisions: u64,
    renders: u64,
    live_bytes: u64,
    dead_bytes: u64,
    containers: u64,
    container_files_bytes: u64,
    policy: PolicyJson,
    container_bytes: u64,
    max_value: u64,
    generation: u64,
    compactions: u64,
    last_compaction_time: i64,
    last_compaction_reclaimed_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    quarantined: Option<u64>,
    /// Titles whose record could not be read, with the damage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    damaged_titles: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    archive: Option<ArchiveJson>,
    per_container: Vec<ContainerJson>,
    meta_files: Vec<ResidencyJson>,
}

/// One container's space and page-cache residency.
#[derive(Serialize)]
struct ContainerJson {
    number: u32,
    bytes: u64,
    live_bytes: u64,
    dead_bytes: u64,
    resident_bytes: u64,
}

/// A meta file's size on disk and page-cache residency.
#[derive(Serialize)]
struct ResidencyJson {
    file: String,
    bytes: u64,
    resident_bytes: u64,
}

impl StatJson {
    /// Adds the space by container and the meta files' residency, as objects and text fields.
    fn with_space(mut self, space: &Space) -> Self {
        self.per_container = space
            .containers
            .iter()
            .map(|c| ContainerJson {
                number: c.id,
                bytes: c.bytes,
                live_bytes: c.live_bytes,
                dead_bytes: c.dead_bytes,
                resident_bytes: c.resident_bytes,
            })
            .collect();
        self.meta_files = space
            .meta
            .iter()
            .map(|m| ResidencyJson {
                file: m.path.file_name().map_or_else(
                    || m.path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                ),
                bytes: m.bytes,
                resident_bytes: m.resident_bytes,
            })
            .collect();
        self
    }

    fn space_fields(&self) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        for c in &self.per_container {
            for (k, v) in [
                ("bytes", c.bytes),
                ("live_bytes", c.live_bytes),
                ("dead_bytes", c.dead_bytes),
                ("resident_bytes", c.resident_bytes),
            ] {
                fields.push((format!("container.{}.{k}", c.number), v.to_string()));
            }
        }
        for m in &self.meta_files {
            fields.push((format!("{}.bytes", m.file), m.bytes.to_string()));
            fields.push((
                format!("{}.resident_bytes", m.file),
                m.resident_bytes.to_string(),
            ));
        }
        fields
    }
}

/// The archive tier's counts and settings.
#[derive(Serialize)]
struct ArchiveJson {
    titles: u64,
    blocks: u64,
    revisions: u64,
    raw_bytes: u64,
    stored_bytes: u64,
    policy: String,
    block_bytes: u64,
    level: i32,
    chain_bytes: u64,
}

impl ArchiveJson {
    fn new(st: &ArchiveStats, cfg: &Config) -> Option<Self> {
        Some(ArchiveJson {
            titles: st.titles,
            blocks: st.blocks,
            revisions: st.revisions,
            raw_bytes: st.raw_bytes,
            stored_bytes: st.stored_bytes,
            policy: cfg.archive?.to_string(),
            block_bytes: cfg.archive_block_bytes,
            level: cfg.archive_level,
            chain_bytes: cfg.archive_chain_bytes,
        })
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("archive.titles", self.titles.to_string()),
            ("archive.blocks", self.blocks.to_string()),
            ("archive.revisions", self.revisions.to_string()),
            ("archive.raw_bytes", self.raw_bytes.to_string()),
            ("archive.stored_bytes", self.stored_bytes.to_string()),
            ("archive.policy", self.policy.clone()),
            ("archive.block_bytes", self.block_bytes.to_string()),
            ("archive.level", self.level.to_string()),
            ("archive.chain_bytes", self.chain_bytes.to_string()),
        ]
    }
}

impl StatJson {
    fn new(st: &StoreStat, cfg: &Config, g: &Generation) -> Self {
        StatJson {
            titles: st.titles,
            revisions: st.revisions,
            renders: st.renders,
            live_bytes: st.live_bytes,
            dead_bytes: st.dead_bytes,
            containers: st.containers,
            container_files_bytes: st.container_bytes,
            policy: PolicyJson {
                revisions: cfg.policy.revisions.to_string(),
                renders: cfg.policy.renders.to_string(),
                historical_ttl: cfg.policy.historical_ttl,
            },
            container_bytes: cfg.container_bytes,
            max_value: cfg.max_value,
            generation: g.generation,
            compactions: g.compactions,
            last_compaction_time: g.last_time,
            last_compaction_reclaimed_bytes: g.last_reclaimed,
            quarantined: None,
            damaged_titles: st.damaged.clone(),
            archive: st.archive.as_ref().and_then(|a| ArchiveJson::new(a, cfg)),
            per_container: Vec::new(),
            meta_files: Vec::new(),
        }
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("titles", self.titles.to_string()),
            ("revisions", self.revisions.to_string()),
            ("renders", self.renders.to_string()),
            ("live_bytes", self.live_bytes.to_string()),
            ("dead_bytes", self.dead_bytes.to_string()),
            ("containers", self.containers.to_string()),
            (
                "container_files_bytes",
                self.container_files_bytes.to_string(),
            ),
            ("policy.revisions", self.policy.revisions.clone()),
            ("policy.renders", self.policy.renders.clone()),
            (
                "policy.historical_ttl",
                self.policy.historical_ttl.to_string(),
            ),
            ("container_bytes", self.container_bytes.to_string()),
            ("max_value", self.max_value.to_string()),
            ("generation", self.generation.to_string()),
            ("compactions", self.compactions.to_string()),
            (
                "last_compaction_time",
                self.last_compaction_time.to_string(),
            ),
            (
                "last_compaction_reclaimed_bytes",
                self.last_compaction_reclaimed_bytes.to_string(),
            ),
        ];
        fields.extend(self.quarantined.map(|n| ("quarantined", n.to_string())));
        fields.extend(self.damaged_titles.iter().map(|d| ("damaged", d.clone())));
        fields.extend(self.archive.iter().flat_map(ArchiveJson::fields));
        fields
    }
}

pub fn run(args: &Args) -> Result<Status> {
    let store = super::open_reader(&args.dir)?;
    let mut stat = StatJson::new(&store.stat()?, store.config(), &store.generation()?)
        .with_space(&maintenance::space(&store)?);
    let quarantined = store.quarantined()?.len() as u64;
    stat.quarantined = (quarantined > 0).then_some(quarantined);
    let mut out = Out::new();
    if args.json {
        out.json(&stat)?;
    } else {
        for (field, value) in stat.fields() {
            out.line(&format!("{field}\t{value}"))?;
        }
        for (field, value) in stat.space_fields() {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()?;
    if !stat.damaged_titles.is_empty() {
        eprintln!(
            "wink: stat: {} title records could not be read (not counted); see `wink check`",
            stat.damaged_titles.len()
        );
        return Ok(3);
    }
    Ok(0)
}
