//! The cluster's buckets: a catalog kept under one key of the placement store, changed only by
//! compare-and-set, which every node watches and opens the buckets of (docs/CLUSTER.md
//! § Buckets).
//!
//! A `PUT P` through any node enters the bucket with its settings (in Wink's syntax, as `GET P`
//! shows them) and the stream's last sequence before the entry (`since`): no message of the
//! bucket can sit at or below it, because a node publishes a write only for a bucket its
//! catalog holds. A node that opens the bucket records every partition of it as applied up to
//! `since`, so its apply sessions never look further back for it. A message of a bucket the
//! node has not opened yet is held until it has read the catalog and opened the bucket; it is
//! never skipped. The buckets of the configuration file are entered at a node's start (with
//! `since` 0: they may have messages anywhere), and a node whose configuration declares a bucket
//! the catalog holds with other settings refuses to start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use super::apply;
use super::config::ClusterConfig;
use super::node::{on_writer, Node};
use super::placement;
use wink_engine::store::Config;
use wink_engine::{Error, Result};
use wink_service::registry::{Bucket, CreateError, Created, Registry};
use wink_service::spec::{describe, valid_bucket_name, BucketSpec};

/// The catalog's key in the placement bucket.
pub const CATALOG_KEY: &str = "buckets";
/// Compare-and-set attempts of one change before the answer is 503.
const CAS_ATTEMPTS: u32 = 32;

/// The cluster's buckets, by name.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub buckets: BTreeMap<String, Entry>,
}

/// One bucket of the catalog.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its settings, as `GET P` shows them.
    pub settings: serde_json::Value,
    /// The stream's last sequence before the bucket was entered: none of its messages is at or
    /// below it (0 for a bucket of the configuration file).
    #[serde(default)]
    pub since: u64,
}

impl Entry {
    fn of(cfg: &Config, since: u64) -> Entry {
        Entry {
            settings: describe(cfg),
            since,
        }
    }

    fn spec(&self) -> std::result::Result<BucketSpec, String> {
        let text = serde_json::to_vec(&self.settings).map_err(|e| e.to_string())?;
        BucketSpec::parse(&text).map_err(|e| e.to_string())
    }

    fn config(&self) -> std::result::Result<Config, String> {
        self.spec()?.config().map_err(|e| e.to_string())
    }
}

impl Catalog {
    /// Parses the catalog read from the placement store: names that could not be paths and
    /// settings that are not a bucket's are refused, whole.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Catalog, String> {
        let cat: Catalog = serde_json::from_slice(bytes)
            .map_err(|e| format!("the bucket catalog is not JSON of a catalog: {e}"))?;
        for (name, entry) in &cat.buckets {
            if !valid_bucket_name(name) {
                return Err(format!("the bucket catalog names bucket {name:?}"));
            }
            entry
                .config()
                .map_err(|e| format!("the bucket catalog's bucket {name}: {e}"))?;
        }
        Ok(cat)
    }
}

/// What a node knows of the catalog, and which of its buckets it has opened.
pub struct Buckets {
    pub(super) registry: Arc<Registry>,
    partitions: u32,
    /// The catalog as last read (buckets are only ever added, so the union of every read).
    known: RwLock<Catalog>,
    /// The catalog's buckets opened here: made when missing, their records seeded.
    opened: Mutex<BTreeSet<String>>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> Error {
    Error::unavailable(format!("cluster: {what}: {e}"))
}

/// A refused creation, in words.
fn why(e: &CreateError) -> String {
    match e {
        CreateError::Invalid(e) | CreateError::Store(e) => e.to_string(),
        CreateError::Differs(what) => what.clone(),
        CreateError::Failed(why) => format!("it could not be opened: {why}"),
        CreateError::Full(max) => format!("this node holds as many buckets as it may ({max})"),
    }
}

impl Buckets {
    /// A node's view of the catalog, with the buckets of `registry`.
    pub fn new(registry: Arc<Registry>, partitions: u32) -> Buckets {
        Buckets {
            registry,
            partitions,
            known: RwLock::new(Catalog::default()),
            opened: Mutex::new(BTreeSet::new()),
        }
    }

    fn knows(&self, name: &str) -> bool {
        self.known
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .buckets
            .contains_key(name)
    }

    fn is_open(&self, name: &str) -> bool {
        self.opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    /// Remembers `cat` and opens here every bucket of it not opened yet; answers the buckets
    /// that could not be opened, with why (they are tried again at the next read).
    async fn open_all(&self, cat: &Catalog) -> Vec<String> {
        {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            for (name, entry) in &cat.buckets {
                known
                    .buckets
                    .entry(name.clone())
                    .or_insert_with(|| entry.clone());
            }
        }
        let mut failed = Vec::new();
        for (name, entry) in &cat.buckets {
            if !self.is_open(name) {
                if let Err(e) = self.open(name, entry).await {
                    failed.push(format!("bucket {name}: {e}"));
                }
            }
        }
        failed
    }

    /// Opens bucket `name` here: made with the catalog's settings when missing, and every
    /// partition of it recorded as applied up to the entry's `since`.
    async fn open(&self, name: &str, entry: &Entry) -> std::result::Result<(), String> {
        let spec = entry.spec()?;
        let (reg, n) = (self.registry.clone(), name.to_string());
        let made = tokio::task::spawn_blocking(move || reg.create(&n, &spec))
            .await
            .map_err(|e| e.to_string())?;
        match made {
            Ok(_) => {}
            // A store made here before (by an older configuration) is served as it is.
            Err(CreateError::Differs(what)) => {
                tracing::warn!("{what}: the cluster's catalog says otherwise; served as it is")
            }
            Err(e) => return Err(why(&e)),
        }
        if entry.since > 0 {
            let b = self
                .registry
                .bucket(name)?
                .ok_or_else(|| format!("bucket {name} is not open"))?;
            let (partitions, since) = (self.partitions, entry.since);
            on_writer(&b, move |s| apply::entered(s, partitions, since))
                .await
                .map_err(|e| e.to_string())?;
        }
        self.opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
        Ok(())
    }
}

async fn catalog_store(js: &jetstream::Context) -> Result<kv::Store> {
    js.get_key_value(placement::PLACEMENT_BUCKET)
        .await
        .map_err(|e| unavailable("the placement store", e))
}

/// The catalog and its revision (`None`: never written).
async fn read(store: &kv::Store) -> Result<(Catalog, Option<u64>)> {
    match store.entry(CATALOG_KEY).await {
        Ok(Some(e)) if matches!(e.operation, kv::Operation::Put) => {
            let cat = Catalog::parse(&e.value).map_err(Error::invalid)?;
            Ok((cat, Some(e.revision)))
        }
        Ok(Some(e)) => Ok((Catalog::default(), Some(e.revision))),
        Ok(None) => Ok((Catalog::default(), None)),
        Err(e) => Err(unavailable("reading the bucket catalog", e)),
    }
}

/// Enters `entry` as bucket `name` unless the catalog holds it already, by compare-and-set:
/// answers the entry the catalog holds, whether this call made it, and the catalog.
async fn enter(store: &kv::Store, name: &str, entry: Entry) -> Result<(Entry, bool, Catalog)> {
    for attempt in 0..CAS_ATTEMPTS {
        let (mut cat, revision) = read(store).await?;
        if let Some(held) = cat.buckets.get(name) {
            return Ok((held.clone(), false, cat));
        }
        cat.buckets.insert(name.to_string(), entry.clone());
        let bytes: bytes::Bytes = serde_json::to_vec(&cat)
            .map_err(|e| Error::internal(format!("the bucket catalog as JSON: {e}")))?
            .into();
        let set = match revision {
            None => store
                .create(CATALOG_KEY, bytes)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some(r) => store
                .update(CATALOG_KEY, bytes, r)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        match set {
            Ok(()) => return Ok((entry, true, cat)),
            // Another node changed it first (or NATS failed, which the next read says).
            Err(e) => {
                tracing::debug!("entering bucket {name} in the catalog: {e}; reading it again");
                tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt + 1))).await;
            }
        }
    }
    Err(Error::unavailable(format!(
        "cluster: the bucket catalog changed under each of {CAS_ATTEMPTS} attempts to enter \
         bucket {name}"
    )))
}

/// At a node's start: the configuration's buckets entered in the catalog when it lacks them
/// (an error when it holds one with other settings), and every bucket of the catalog opened
/// here (an error when one cannot be).
pub async fn start(js: &jetstream::Context, cfg: &ClusterConfig, buckets: &Buckets) -> Result<()> {
    let store = catalog_store(js).await?;
    for (name, settings) in &cfg.buckets {
        let text = serde_json::to_vec(settings).unwrap_or_default();
        let invalid = |e: String| Error::invalid(format!("cluster bucket {name}: {e}"));
        let spec = BucketSpec::parse(&text).map_err(|e| invalid(e.to_string()))?;
        let config = spec.config().map_err(|e| invalid(e.to_string()))?;
        let (held, _, _) = enter(&store, name, Entry::of(&config, 0)).await?;
        let differ = spec
            .differences(&held.config().map_err(invalid)?)
            .map_err(|e| invalid(e.to_string()))?;
        if !differ.is_empty() {
            return Err(invalid(format!(
                "the configuration's settings differ from the cluster's catalog: {differ}"
            )));
        }
    }
    let (cat, _) = read(&store).await?;
    let failed = buckets.open_all(&cat).await;
    if !failed.is_empty() {
        return Err(Error::invalid(format!(
            "cluster buckets could not be opened: {}",
            failed.join("; ")
        )));
    }
    Ok(())
}

/// `PUT P` on a cluster node: bucket `name` entered in the catalog with `spec`'s settings, or
/// `spec` checked against the catalog's settings when it holds the bucket (the same answers as
/// one node's [`Registry::create`]), then opened here.
pub async fn create(
    node: &Node,
    name: String,
    spec: BucketSpec,
) -> std::result::Result<Created, CreateError> {
    let config = spec.config().map_err(CreateError::Invalid)?;
    let store = catalog_store(node.js()).await.map_err(CreateError::Store)?;
    let since = last_sequence(node.js()).await.map_err(CreateError::Store)?;
    let (held, made, cat) = enter(&store, &name, Entry::of(&config, since))
        .await
        .map_err(CreateError::Store)?;
    if !made {
        let has = held
            .config()
            .map_err(|e| CreateError::Store(Error::internal(e)))?;
        let differ = spec.differences(&has).map_err(CreateError::Invalid)?;
        if !differ.is_empty() {
            return Err(CreateError::Differs(format!(
                "bucket {name} exists with other settings: {differ}"
            )));
        }
    }
    node.buckets().open_all(&cat).await;
    if !node.buckets().is_open(&name) {
        node.buckets()
            .open(&name, &held)
            .await
            .map_err(|e| CreateError::Store(Error::unavailable(format!("bucket {name}: {e}"))))?;
    }
    Ok(if made { Created::New } else { Created::Existed })
}

/// The stream's last sequence.
async fn last_sequence(js: &jetstream::Context) -> Result<u64> {
    let mut stream = js
        .get_stream(placement::STREAM)
        .await
        .map_err(|e| unavailable("the stream", e))?;
    let info = stream
        .info()
        .await
        .map_err(|e| unavailable("the stream's info", e))?;
    Ok(info.state.last_sequence)
}

/// Whether the cluster has bucket `name`: the catalog as last read, read again when that lacks
/// it (a bucket made through another node a moment ago).
pub async fn knows(node: &Node, name: &str) -> Result<bool> {
    if node.buckets().knows(name) {
        return Ok(true);
    }
    let store = catalog_store(node.js()).await?;
    let (cat, _) = read(&store).await?;
    node.buckets().open_all(&cat).await;
    Ok(cat.buckets.contains_key(name))
}

/// The bucket a message of bucket `name` is applied to: opened from the catalog (read again)
/// when this node has not opened it yet; `None` when there is no such bucket (or it failed to
/// open at start). An `Err` when the catalog cannot be read or the bucket opened: the message
/// must then wait, not be skipped.
pub async fn for_apply(
    node: &Node,
    name: &str,
) -> std::result::Result<Option<Arc<Bucket>>, String> {
    let reg = &node.buckets().registry;
    match reg.bucket(name) {
        Ok(Some(b)) => return Ok(Some(b)),
        Err(_) => return Ok(None),
        Ok(None) => {}
    }
    let store = catalog_store(node.js()).await.map_err(|e| e.to_string())?;
    let (cat, _) = read(&store).await.map_err(|e| e.to_string())?;
    let Some(entry) = cat.buckets.get(name) else {
        return Ok(None);
    };
    node.buckets().open_all(&cat).await;
    if !node.buckets().is_open(name) {
        node.buckets().open(name, entry).await?;
    }
    Ok(reg.bucket(name).ok().flatten())
}

/// Reads the catalog every `catalog_read_ms` and opens the buckets made through other nodes.
pub async fn watch(node: Arc<Node>) {
    let mut store = None;
    let mut seen = None;
    let every = Duration::from_millis(node.cfg.catalog_read_ms);
    loop {
        tokio::time::sleep(every).await;
        if store.is_none() {
            store = catalog_store(node.js()).await.ok();
        }
        let Some(s) = &store else { continue };
        let (cat, revision) = match read(s).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(node = %node.name, "{e}");
                continue;
            }
        };
        let all_open = cat.buckets.keys().all(|b| node.buckets().is_open(b));
        if seen == revision && all_open {
            continue;
        }
        for e in node.buckets().open_all(&cat).await {
            tracing::warn!(node = %node.name, "{e}; tried again shortly");
        }
        seen = revision;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_keeps_every_setting_of_its_bucket() {
        for body in [
            "",
            r#"{"revisionRetentionPolicy":{"type":"latest","count":2,"grace_ttl":60}}"#,
            r#"{"renders":"all","revisions":"recent:3600","historical_ttl":5,
                "archive":"newest","container_bytes":1048576,"max_value":1000}"#,
            r#"{"revisionRetentionPolicy":{"type":"interval","interval":3600,"count":3}}"#,
            r#"{"revisionRetentionPolicy":{"type":"ttl","ttl":5}}"#,
        ] {
            let spec = BucketSpec::parse(body.as_bytes()).unwrap();
            let cfg = spec.config().unwrap();
            let entry = Entry::of(&cfg, 7);
            assert_eq!(entry.config().unwrap(), cfg, "{body}");
            assert_eq!(spec.differences(&entry.config().unwrap()).unwrap(), "");
            let cat = Catalog {
                buckets: [("html".to_string(), entry)].into_iter().collect(),
            };
            let text = serde_json::to_vec(&cat).unwrap();
            assert_eq!(Catalog::parse(&text).unwrap(), cat);
        }
    }

    #[test]
    fn a_damaged_catalog_is_refused_whole() {
        for bad in [
            "{",
            r#"{"buckets":{"../x":{"settings":{}}}}"#,
            r#"{"buckets":{"html":{"settings":{"renders":"some"}}}}"#,
            r#"{"buckets":{"html":{"settings":{},"since":-1}}}"#,
            r#"{"buckets":{},"more":1}"#,
        ] {
            assert!(Catalog::parse(bad.as_bytes()).is_err(), "{bad}");
        }
        let ok = Catalog::parse(br#"{"buckets":{"html":{"settings":{}}}}"#).unwrap();
        assert_eq!(ok.buckets["html"].since, 0);
    }
}
