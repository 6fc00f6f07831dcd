//! `wink cluster status|verify|rebalance FILE`, where FILE is the `cluster.json` that
//! `cluster/up` writes: the router, the configuration's path, each node's URL and data root,
//! and the token file the nodes were started with, if any.
//!
//! Every request to a node goes through [`Admin::request`], which sends the bearer token with
//! the requests that change something (any method but GET and HEAD); reads go without it, as
//! nodes serve them to anyone: `replay` (a POST) carries it; `status`, `verify` and `rebalance`
//! only read from the nodes (`GET /_cluster`) and change the map through NATS.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::HeaderValue;
use hyper::Method;
use serde::Deserialize;
use sha1::{Digest, Sha1};

use super::config::ClusterConfig;
use super::message::{partition_of, RESERVED_DOMAIN};
use super::node::{self, NodeStatus};
use super::placement::{self, Map};
use crate::error::{Error, Result};
use crate::serve::auth::Auth;
use crate::store::{Store, StoreOptions};

/// A node in `cluster.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeRun {
    pub name: String,
    pub url: String,
    /// Its data root: one store directory per bucket.
    pub data: PathBuf,
}

/// `cluster.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct ClusterRun {
    pub router: String,
    pub config: PathBuf,
    pub nodes: Vec<NodeRun>,
    /// The token file every node was started with (`cluster/up --token-file`).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl ClusterRun {
    pub fn read(path: &Path) -> Result<(ClusterRun, ClusterConfig)> {
        let text = std::fs::read(path).map_err(|e| Error::io(path, None, e))?;
        let run: ClusterRun = serde_json::from_slice(&text)
            .map_err(|e| Error::invalid(format!("{}: not a cluster.json: {e}", path.display())))?;
        let cfg = ClusterConfig::read(&run.config)?;
        Ok((run, cfg))
    }
}

/// A cluster as `wink cluster` reaches it: `cluster.json`, the configuration it names, and the
/// token that changes on the nodes need.
#[derive(Debug)]
pub struct Admin {
    pub run: ClusterRun,
    pub cfg: ClusterConfig,
    auth: Auth,
}

impl Admin {
    /// Reads `file` (a `cluster.json`) and the token: from `token_file` when given, else from
    /// the token file `cluster.json` names, else none.
    pub fn open(file: &Path, token_file: Option<&Path>) -> Result<Admin> {
        let (run, cfg) = ClusterRun::read(file)?;
        let auth = match token_file.or(run.token_file.as_deref()) {
            Some(path) => Auth::from_file(path)?,
            None => Auth::none(),
        };
        Ok(Admin { run, cfg, auth })
    }

    /// One request to a node (`url` is http://HOST:PORT/PATH) with an empty body: its status
    /// and body (at most 16 MiB). A read (GET, HEAD) goes without the token and is answered
    /// within 5 s; any other method carries the token and may take 10 minutes (a snapshot
    /// copies a whole bucket).
    pub async fn request(
        &self,
        method: Method,
        url: &str,
    ) -> std::result::Result<(u16, Bytes), String> {
        if method == Method::GET || method == Method::HEAD {
            request(method, url, None, Duration::from_secs(5)).await
        } else {
            let auth = self.auth.bearer();
            request(method, url, auth, Duration::from_secs(600)).await
        }
    }

    /// [`Admin::request`] from outside a runtime.
    pub fn call(&self, method: Method, url: &str) -> Result<(u16, Bytes)> {
        runtime()?
            .block_on(self.request(method, url))
            .map_err(|e| Error::invalid(format!("cluster: {url}: {e}")))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io(Path::new("."), None, e))
}

/// The map, its revision and the stream's last sequence, from NATS.
async fn cluster_state(cfg: &ClusterConfig) -> Result<(Map, u64, u64)> {
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        node::connect(cfg, Arc::new(AtomicBool::new(false))),
    )
    .await
    .map_err(|_| Error::invalid("cluster: no NATS server answered within 10 s"))??;
    let js = node::context(client);
    let kv = js
        .get_key_value(placement::PLACEMENT_BUCKET)
        .await
        .map_err(|e| Error::invalid(format!("cluster: the placement bucket: {e}")))?;
    let (map, revision) = node::read_map(&kv, cfg).await?;
    let mut stream = js
        .get_stream(placement::STREAM)
        .await
        .map_err(|e| Error::invalid(format!("cluster: the stream: {e}")))?;
    let last = stream
        .info()
        .await
        .map_err(|e| Error::invalid(format!("cluster: the stream's info: {e}")))?
        .state
        .last_sequence;
    Ok((map, revision, last))
}

/// GET `url` and its body, within 5 s.
pub async fn http_get(url: &str) -> std::result::Result<(u16, Bytes), String> {
    request(Method::GET, url, None, Duration::from_secs(5)).await
}

async fn request(
    method: Method,
    url: &str,
    authorization: Option<HeaderValue>,
    deadline: Duration,
) -> std::result::Result<(u16, Bytes), String> {
    let rest = url.strip_prefix("http://").ok_or("not an http:// URL")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let work = async {
        let mut send = node::http1_connect(authority).await?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, authority);
        if let Some(value) = authorization {
            req = req.header(hyper::header::AUTHORIZATION, value);
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let answer = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = answer.status().as_u16();
        let body = http_body_util::Limited::new(answer.into_body(), 16 << 20)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(deadline, work)
        .await
        .map_err(|_| format!("no answer within {} s", deadline.as_secs()))?
}

async fn node_status(admin: &Admin, url: &str) -> std::result::Result<NodeStatus, String> {
    let url = format!("{}/_cluster", url.trim_end_matches('/'));
    let (status, body) = admin.request(Method::GET, &url).await?;
    if status != 200 {
        return Err(format!("/_cluster answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("/_cluster: {e}"))
}

/// `wink cluster status`: the map, the stream's last sequence, each node's status, as JSON.
pub fn status(admin: &Admin) -> Result<serde_json::Value> {
    let (run, cfg) = (&admin.run, &admin.cfg);
    runtime()?.block_on(async {
        let (map, revision, last) = cluster_state(cfg).await?;
        let mut nodes = Vec::new();
        for n in &run.nodes {
            nodes.push(match node_status(admin, &n.url).await {
                Ok(s) => serde_json::to_value(s).unwrap_or_default(),
                Err(e) => serde_json::json!({ "name": n.name, "error": e }),
            });
        }
        Ok(serde_json::json!({
            "stream_last_sequence": last,
            "map_revision": revision,
            "map": map,
            "nodes": nodes,
        }))
    })
}

/// One title's readable renders on one node: (rev, tid, content type, SHA-1 of the bytes).
type Renders = Vec<(u64, String, String, String)>;

/// Every title of the partitions `owned` in every bucket under `data`.
fn titles_of(
    data: &Path,
    partitions: u32,
    owned: &BTreeSet<u32>,
) -> Result<BTreeMap<(String, String, String), Renders>> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(data).map_err(|e| Error::io(data, None, e))?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(crate::serve::spec::valid_bucket_name)
        })
        .collect();
    dirs.sort();
    for dir in dirs {
        let bucket = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let store = Store::open(&dir, &StoreOptions::read_only())?;
        let mut cursor = crate::store::TitleCursor::new();
        while !cursor.is_done() {
            for t in store.dump_step(&mut cursor, 256)? {
                if t.domain == RESERVED_DOMAIN
                    || !owned.contains(&partition_of(&t.domain, &t.title, partitions))
                {
                    continue;
                }
                let mut renders = Vec::new();
                for r in &t.renders {
                    let got = store.get_render(&t.domain, &t.title, r.rev, r.tid)?;
                    let digest = got.map_or_else(
                        || "unreadable".to_string(),
                        |g| {
                            Sha1::digest(&g.value)
                                .iter()
                                .map(|b| format!("{b:02x}"))
                                .collect()
                        },
                    );
                    renders.push((r.rev, r.tid.to_string(), r.content_type.clone(), digest));
                }
                out.insert((bucket.clone(), t.domain.clone(), t.title.clone()), renders);
            }
        }
    }
    Ok(out)
}

/// `wink cluster verify`: waits (up to `patience`) until every node has applied the stream up
/// to its last sequence, then compares every owner of every partition. Answers the differences
/// (empty: the owners agree).
pub fn verify(admin: &Admin, patience: Duration) -> Result<Vec<String>> {
    let (run, cfg) = (&admin.run, &admin.cfg);
    let rt = runtime()?;
    let (map, _, last) = rt.block_on(cluster_state(cfg))?;
    let mut problems = Vec::new();
    rt.block_on(async {
        for n in &run.nodes {
            let started = Instant::now();
            loop {
                match node_status(admin, &n.url).await {
                    Ok(NodeStatus {
                        diverged: Some(why),
                        ..
                    }) => {
                        problems.push(format!(
                            "node {} vouches for none of its partitions: {why}",
                            n.name
                        ));
                        break;
                    }
                    Ok(s) if s.scanned >= last => break,
                    Ok(s) if started.elapsed() > patience => {
                        problems.push(format!(
                            "node {} has applied up to {}, the stream holds {last}",
                            n.name, s.scanned
                        ));
                        break;
                    }
                    Err(e) if started.elapsed() > patience => {
                        problems.push(format!("node {} does not answer: {e}", n.name));
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    });
    let mut held = BTreeMap::new();
    for n in &run.nodes {
        let owned: BTreeSet<u32> = map.owned_by(&n.name).into_iter().collect();
        held.insert(n.name.clone(), titles_of(&n.data, cfg.partitions, &owned)?);
    }
    for p in 0..map.partitions {
        let owners: Vec<&String> = map
            .owners(p)
            .iter()
            .filter(|o| held.contains_key(*o))
            .collect();
        let mut keys = BTreeSet::new();
        for o in &owners {
            for k in held[*o].keys() {
                if partition_of(&k.1, &k.2, cfg.partitions) == p {
                    keys.insert(k.clone());
                }
            }
        }
        for k in keys {
            let first = held[owners[0]].get(&k);
            for o in &owners[1..] {
                let other = held[*o].get(&k);
                if other != first {
                    problems.push(format!(
                        "partition {p}: {}/{}/{}: {} holds {}, {} holds {}",
                        k.0,
                        k.1,
                        k.2,
                        owners[0],
                        describe(first),
                        o,
                        describe(other)
                    ));
                }
            }
        }
    }
    Ok(problems)
}

/// Asks node `name` to replay the stream (`POST /_cluster/replay`, with the token): its records
/// rewound to the stream's first sequence, its divergence cleared. Answers the sequence the
/// replay starts at.
pub fn replay(admin: &Admin, name: &str) -> Result<u64> {
    let node = admin
        .run
        .nodes
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| Error::invalid(format!("no node {name} in cluster.json")))?;
    let url = format!("{}/_cluster/replay", node.url.trim_end_matches('/'));
    let (status, body) = admin
        .call(Method::POST, &url)
        .map_err(|e| Error::invalid(format!("node {name}: {e}")))?;
    if status != 200 {
        return Err(Error::invalid(format!(
            "node {name} answered {status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    Ok(v["from"].as_u64().unwrap_or(0))
}

fn describe(r: Option<&Renders>) -> String {
    match r {
        None => "nothing".into(),
        Some(r) => r
            .iter()
            .map(|(rev, tid, _, digest)| {
                format!("{rev}/{tid} sha1 {}", &digest[..12.min(digest.len())])
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// `wink cluster rebalance`: spreads the partitions over the configured nodes. Each partition
/// that moves is first owned by its old and new owners together (compare-and-set of the map);
/// once every node has started under that map and applied the stream up to its last sequence,
/// the old owners are dropped (a second compare-and-set). Answers what it did.
pub fn rebalance(admin: &Admin, patience: Duration) -> Result<String> {
    let (run, cfg) = (&admin.run, &admin.cfg);
    let names: Vec<String> = cfg.nodes.iter().map(|n| n.name.clone()).collect();
    runtime()?.block_on(async {
        let client = node::connect(cfg, Arc::new(AtomicBool::new(false))).await?;
        let js = node::context(client);
        let kv = js
            .get_key_value(placement::PLACEMENT_BUCKET)
            .await
            .map_err(|e| Error::invalid(format!("cluster: the placement bucket: {e}")))?;
        let (map, revision) = node::read_map(&kv, cfg).await?;
        let target = map.balanced(&names);
        if target == map {
            return Ok("balanced already".to_string());
        }
        let moved = (0..map.partitions)
            .filter(|p| map.owners(*p) != target.owners(*p))
            .count();
        let wide = map.widened(&target);
        let cas = |m: &Map| serde_json::to_vec(m).unwrap_or_default();
        let wide_rev = kv
            .update(placement::MAP_KEY, cas(&wide).into(), revision)
            .await
            .map_err(|e| {
                Error::invalid(format!(
                    "cluster: the map changed meanwhile ({e}); run rebalance again"
                ))
            })?;
        let (_, _, last) = cluster_state(cfg).await?;
        let started = Instant::now();
        for n in &run.nodes {
            loop {
                let s = node_status(admin, &n.url).await;
                match s {
                    Ok(s) if s.map_revision >= wide_rev && s.ready && s.scanned >= last => break,
                    _ if started.elapsed() > patience => {
                        return Err(Error::invalid(format!(
                            "cluster: node {} did not catch up within {} s (the map stays \
                             widened at revision {wide_rev}: run rebalance again)",
                            n.name,
                            patience.as_secs()
                        )))
                    }
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        kv.update(placement::MAP_KEY, cas(&target).into(), wide_rev)
            .await
            .map_err(|e| {
                Error::invalid(format!(
                    "cluster: the map changed meanwhile ({e}); run rebalance again"
                ))
            })?;
        Ok(format!(
            "{moved} partitions moved; every new owner caught up to sequence {last}"
        ))
    })
}
