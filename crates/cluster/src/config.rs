//! A cluster's configuration file (`wink serve --cluster FILE`, `wink cluster …`): the nodes,
//! the NATS servers, P and R, the declared buckets. Format and meaning: docs/CLUSTER.md.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use super::router::RouterEntry;

use wink_engine::{Error, Result};

/// The largest configuration file read.
const MAX_CONFIG: u64 = 1 << 20;

/// One node of the cluster.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    pub name: String,
    /// Its HTTP base, `http://HOST:PORT` (requests are forwarded there).
    pub url: String,
}

/// The configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name (overridden by `--name`).
    #[serde(default)]
    pub name: String,
    /// NATS server URLs, `nats://HOST:PORT`.
    pub nats: Vec<String>,
    /// The NATS servers' monitoring URLs, `http://HOST:PORT`: a node reads each one's `/varz`
    /// to learn whether it syncs every write to disk (`sync_interval: always`), and refuses
    /// writes while any does not (docs/CLUSTER.md § What a 201 means).
    #[serde(default)]
    pub nats_monitor: Vec<String>,
    /// Acknowledge writes even when the NATS servers do not sync every write, or cannot be asked:
    /// a power cut of the servers may then lose acknowledged writes. For tests of other things
    /// and for benchmarks of the difference; never for data that matters.
    #[serde(default)]
    pub unsafe_acks_without_nats_fsync: bool,
    /// The nodes: name and URL.
    pub nodes: Vec<NodeEntry>,
    /// Partitions of the key space (P).
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Owners of each partition (R).
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// Bucket name → its settings (the JSON of `PUT P`), created by every node at start.
    #[serde(default)]
    pub buckets: BTreeMap<String, serde_json::Value>,
    /// Seconds the stream keeps a message.
    #[serde(default = "default_max_age")]
    pub stream_max_age: u64,
    /// The stream's replicas (at most the NATS servers).
    #[serde(default = "default_stream_replicas")]
    pub stream_replicas: usize,
    /// Seconds a node may be without a lease before the partitions it owns are given another
    /// live owner each, so that each has R live owners again (0: never).
    #[serde(default = "default_replace_after")]
    pub replace_after_secs: u64,
    /// Milliseconds between a node's reads of the cluster's bucket catalog, for buckets made
    /// through other nodes (a write of one is applied without waiting for it).
    #[serde(default = "default_catalog_read")]
    pub catalog_read_ms: u64,
    /// The HAProxies in front, whose partition maps the nodes keep current (docs/CLUSTER.md
    /// § Routing straight to an owner). None: a router balances by path and nodes forward.
    #[serde(default)]
    pub routers: Vec<RouterEntry>,
}

fn default_partitions() -> u32 {
    64
}
fn default_replicas() -> u32 {
    2
}
fn default_max_age() -> u64 {
    7 * 86_400
}
fn default_stream_replicas() -> usize {
    3
}
fn default_catalog_read() -> u64 {
    500
}
fn default_replace_after() -> u64 {
    // Longer than a reboot: a node that comes back within it replays what it missed, and no
    // partition is copied for nothing.
    300
}

impl ClusterConfig {
    /// Reads and checks the file.
    pub fn read(path: &Path) -> Result<ClusterConfig> {
        use std::io::Read as _;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, None, e))?;
        let mut text = Vec::new();
        file.take(MAX_CONFIG + 1)
            .read_to_end(&mut text)
            .map_err(|e| Error::io(path, None, e))?;
        if text.len() as u64 > MAX_CONFIG {
            return Err(Error::invalid(format!(
                "{}: a cluster configuration is at most {MAX_CONFIG} bytes",
                path.display()
            )));
        }
        let cfg: ClusterConfig = serde_json::from_slice(&text).map_err(|e| {
            Error::invalid(format!(
                "{}: not a cluster configuration: {e}",
                path.display()
            ))
        })?;
        cfg.check()
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        Ok(cfg)
    }

    /// The checks a configuration must pass, as one message.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.nats.is_empty() {
            return Err("nats: at least one server URL".into());
        }
        if self.nodes.is_empty() {
            return Err("nodes: at least one".into());
        }
        if !(1..=4096).contains(&self.partitions) {
            return Err(format!("partitions {}: 1 to 4096", self.partitions));
        }
        if self.replicas == 0 {
            return Err("replicas: at least 1".into());
        }
        for r in &self.routers {
            // A runtime API command is words separated by spaces, commands by semicolons.
            let word =
                |w: &str| !w.is_empty() && !w.contains(|c: char| c.is_whitespace() || c == ';');
            if !word(&r.admin) || !word(&r.map) {
                return Err(format!(
                    "routers: admin {:?} and map {:?}, each one word",
                    r.admin, r.map
                ));
            }
        }
        if self.stream_max_age == 0 {
            return Err("stream_max_age: at least 1 second".into());
        }
        if !(1..=5).contains(&self.stream_replicas) {
            return Err(format!("stream_replicas {}: 1 to 5", self.stream_replicas));
        }
        let mut names = std::collections::BTreeSet::new();
        for n in &self.nodes {
            if !valid_node_name(&n.name) {
                return Err(format!(
                    "node name {:?}: [a-z0-9][a-z0-9_-]{{0,31}}",
                    n.name
                ));
            }
            if !names.insert(n.name.as_str()) {
                return Err(format!("node {} is listed twice", n.name));
            }
            if !n.url.starts_with("http://") {
                return Err(format!(
                    "node {}: url {:?} must start with http://",
                    n.name, n.url
                ));
            }
        }
        if !(10..=3_600_000).contains(&self.catalog_read_ms) {
            return Err(format!(
                "catalog_read_ms {}: 10 to 3600000",
                self.catalog_read_ms
            ));
        }
        if let Some(m) = self.nats_monitor.iter().find(|m| !m.starts_with("http://")) {
            return Err(format!("nats_monitor: {m:?} must start with http://"));
        }
        for b in self.buckets.keys() {
            if !wink_service::spec::valid_bucket_name(b) {
                return Err(format!("bucket name {b:?}: [a-z0-9][a-z0-9._-]{{0,63}}"));
            }
        }
        Ok(())
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// A node's name: also part of NATS keys, so a small alphabet.
pub fn valid_node_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_is_checked() {
        let text = r#"{"name":"n1","nats":["nats://127.0.0.1:4222"],
            "nodes":[{"name":"n1","url":"http://127.0.0.1:1"}],"buckets":{"html":{}}}"#;
        let cfg: ClusterConfig = serde_json::from_str(text).unwrap();
        assert_eq!(cfg.partitions, 64);
        assert_eq!(cfg.replicas, 2);
        assert!(cfg.check().is_ok());
        let mut bad = cfg.clone();
        bad.nodes.push(bad.nodes[0].clone());
        assert!(bad.check().unwrap_err().contains("twice"));
        let mut bad = cfg.clone();
        bad.nodes[0].name = "N/1".into();
        assert!(bad.check().is_err());
        assert_eq!(cfg.catalog_read_ms, 500);
        let mut bad = cfg.clone();
        bad.catalog_read_ms = 0;
        assert!(bad.check().unwrap_err().contains("catalog_read_ms"));
        let mut bad = cfg;
        bad.partitions = 0;
        assert!(bad.check().is_err());
        assert!(serde_json::from_str::<ClusterConfig>(r#"{"nats":[],"nodes":[],"x":1}"#).is_err());
    }
}
