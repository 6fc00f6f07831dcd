//! `wink stat DIR [--json]`.

use std::path::PathBuf;

use serde::Serialize;
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
sealed) and max_value.

Text output: one `FIELD<TAB>VALUE` line each, the policy's fields as policy.revisions,
policy.renders and policy.historical_ttl. With --json: one object with the same fields, the
policy as an object. Reads every title record.";

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
}

impl StatJson {
    fn new(st: &StoreStat, cfg: &Config) -> Self {
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
        }
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
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
        ]
    }
}

pub fn run(args: &Args) -> Result<Status> {
    let store = super::open_reader(&args.dir)?;
    let stat = StatJson::new(&store.stat()?, store.config());
    let mut out = Out::new();
    if args.json {
        out.json(&stat)?;
    } else {
        for (field, value) in stat.fields() {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()?;
    Ok(0)
}
