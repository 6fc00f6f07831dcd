//! `wink cluster status|verify|rebalance|remove|replay FILE` (and `wink cluster verify URL` and
//! `wink cluster repair URL`, which need no file: [`verify_url`], [`repair_url`]), where FILE is
//! the `cluster.json` that `cluster/up` writes: the router, the configuration's path, each
//! node's URL and data root, and the token file the nodes were started with, if any.
//!
//! Every request to a node goes through [`Admin::request`], which sends the bearer token with
//! the requests that change something (any method but GET and HEAD); reads go without it, as
//! nodes serve them to anyone: `replay` (a POST) carries it; `status`, `verify`, `rebalance`
//! and `remove` only read from the nodes (`GET /_cluster`) and change the map through NATS.
//! `verify URL` and `repair URL` send the token they are given with every request.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::HeaderValue;
use hyper::Method;
use serde::Deserialize;
use sha1::{Digest, Sha1};

use super::apply::Outcome;
use super::config::ClusterConfig;
use super::digest::{PartitionDigest, TitlePage};
use super::message::{partition_of, Change, Kind, RESERVED_DOMAIN};
use super::node::{self, NodeStatus};
use super::placement::{self, Map};
use wink_engine::store::Which;
use wink_engine::store::{Store, StoreOptions};
use wink_engine::{Error, Result};
use wink_serve::Auth;

/// A node in `cluster.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeRun {
    /// Its name in the configuration.
    pub name: String,
    /// Its base URL.
    pub url: String,
    /// Its data root: one store directory per bucket.
    pub data: PathBuf,
}

/// `cluster.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct ClusterRun {
    /// The router's (HAProxy's) base URL.
    pub router: String,
    /// The cluster's configuration file.
    pub config: PathBuf,
    /// The nodes started.
    pub nodes: Vec<NodeRun>,
    /// The token file every node was started with (`cluster/up --token-file`).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl ClusterRun {
    /// Reads `cluster.json` at `path` and the configuration it names.
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
    /// What `cluster.json` says was started.
    pub run: ClusterRun,
    /// The cluster's configuration.
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
            .map_err(|e| Error::unavailable(format!("cluster: {url}: {e}")))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io(Path::new("."), None, e))
}

/// What NATS holds of a cluster's state.
struct State {
    map: Map,
    /// The map's revision in its bucket.
    revision: u64,
    /// The stream's last sequence.
    last: u64,
    /// The NATS server leading the stream, when it has a leader.
    leader: Option<String>,
    /// Node name → URL, for every node with a live lease.
    leases: BTreeMap<String, String>,
    placement: kv::Store,
}

/// The map, the stream's last sequence and leader, and the leases, from NATS. JetStream
/// answers 503 for a while after a server comes back (a frozen one, a restart): asked again
/// for up to 15 s.
async fn cluster_state(cfg: &ClusterConfig) -> Result<State> {
    let started = Instant::now();
    loop {
        match cluster_state_once(cfg).await {
            Ok(st) => return Ok(st),
            Err(e) if started.elapsed() > Duration::from_secs(15) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn cluster_state_once(cfg: &ClusterConfig) -> Result<State> {
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        node::connect(cfg, Arc::new(AtomicBool::new(false))),
    )
    .await
    .map_err(|_| Error::unavailable("cluster: no NATS server answered within 10 s"))??;
    let js = node::context(client);
    let placement = js
        .get_key_value(placement::PLACEMENT_BUCKET)
        .await
        .map_err(|e| Error::unavailable(format!("cluster: the placement bucket: {e}")))?;
    let (map, revision) = node::read_map(&placement, cfg).await?;
    let mut stream = js
        .get_stream(placement::STREAM)
        .await
        .map_err(|e| Error::unavailable(format!("cluster: the stream: {e}")))?;
    let info = stream
        .info()
        .await
        .map_err(|e| Error::unavailable(format!("cluster: the stream's info: {e}")))?;
    let last = info.state.last_sequence;
    let leader = info.cluster.as_ref().and_then(|c| c.leader.clone());
    let lease_bucket = js
        .get_key_value(placement::LEASE_BUCKET)
        .await
        .map_err(|e| Error::unavailable(format!("cluster: the lease bucket: {e}")))?;
    let leases = node::all_leases(&lease_bucket)
        .await
        .map_err(|e| Error::unavailable(format!("cluster: the leases: {e}")))?
        .into_iter()
        .collect();
    Ok(State {
        map,
        revision,
        last,
        leader,
        leases,
        placement,
    })
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
    let (status, _, body) =
        request_full(method, url, authorization, Bytes::new(), deadline, 16 << 20).await?;
    Ok((status, body))
}

/// One request with `body`: its status and body (at most `limit` bytes), within `deadline`.
async fn request_with(
    method: Method,
    url: &str,
    authorization: Option<HeaderValue>,
    body: Bytes,
    limit: usize,
    deadline: Duration,
) -> std::result::Result<(u16, Bytes), String> {
    let (status, _, body) = request_full(method, url, authorization, body, deadline, limit).await?;
    Ok((status, body))
}

/// A request with `body`: the answer's status, headers and body (at most `max_body` bytes, or
/// an error), within `deadline`.
pub(super) async fn request_full(
    method: Method,
    url: &str,
    authorization: Option<HeaderValue>,
    body: Bytes,
    deadline: Duration,
    max_body: usize,
) -> std::result::Result<(u16, hyper::HeaderMap, Bytes), String> {
    let rest = url.strip_prefix("http://").ok_or("not an http:// URL")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let work = async {
        let mut send = wink_serve::http1_connect(authority).await?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, authority);
        if let Some(value) = authorization {
            req = req.header(hyper::header::AUTHORIZATION, value);
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let answer = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = answer.status().as_u16();
        let headers = answer.headers().clone();
        let body = http_body_util::Limited::new(answer.into_body(), max_body)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, headers, body))
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

/// `wink cluster status`: the map, the stream's last sequence and leader, the leases, the
/// partitions with fewer than R owners holding a lease, each node's status, as JSON.
pub fn status(admin: &Admin) -> Result<serde_json::Value> {
    let run = &admin.run;
    runtime()?.block_on(async {
        let st = cluster_state(&admin.cfg).await?;
        let mut nodes = Vec::new();
        for n in &run.nodes {
            if st.map.removed.contains(&n.name) {
                nodes.push(serde_json::json!({ "name": n.name, "removed": true }));
                continue;
            }
            nodes.push(match node_status(admin, &n.url).await {
                Ok(s) => serde_json::to_value(s).unwrap_or_default(),
                Err(e) => serde_json::json!({ "name": n.name, "error": e }),
            });
        }
        let live: Vec<String> = st.leases.keys().cloned().collect();
        Ok(serde_json::json!({
            "stream_last_sequence": st.last,
            "stream_leader": st.leader,
            "map_revision": st.revision,
            "map": st.map,
            "leases": st.leases,
            "under_replicated": st.map.under_replicated(&live),
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
                    .is_some_and(wink_service::spec::valid_bucket_name)
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
        let mut cursor = wink_engine::store::TitleCursor::new();
        while !cursor.is_done() {
            for t in store.dump_step(&mut cursor, 256)? {
                if t.domain == RESERVED_DOMAIN
                    || !owned.contains(&partition_of(&t.domain, &t.title, partitions))
                {
                    continue;
                }
                let mut renders = Vec::new();
                for r in &t.renders {
                    let got = store.get(&t.domain, &t.title, Which::Render(r.rev, r.tid))?;
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
    let State { map, last, .. } = rt.block_on(cluster_state(cfg))?;
    let mut problems = Vec::new();
    // A node removed for good holds nothing the cluster vouches for.
    let nodes: Vec<&NodeRun> = run
        .nodes
        .iter()
        .filter(|n| !map.removed.contains(&n.name))
        .collect();
    rt.block_on(async {
        for n in &nodes {
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
                    // Ready: its apply session runs under the current map and generation (a
                    // replay just asked for restarts it, and `scanned` is stale until then).
                    Ok(s) if s.ready && s.scanned >= last => break,
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
    for n in &nodes {
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
    let (status, body) = admin.call(Method::POST, &url).map_err(|e| match e {
        Error::Unavailable(why) => Error::unavailable(format!("node {name}: {why}")),
        e => e,
    })?;
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

/// `wink cluster rebalance`: spreads the partitions over the cluster's members (the configured
/// nodes and the map's owners, less the removed ones). Answers what it did.
pub fn rebalance(admin: &Admin, patience: Duration) -> Result<String> {
    runtime()?.block_on(async {
        let st = cluster_state(&admin.cfg).await?;
        let configured: Vec<String> = admin.cfg.nodes.iter().map(|n| n.name.clone()).collect();
        let target = st.map.balanced(&st.map.members(&configured));
        if target == st.map {
            return Ok("balanced already".to_string());
        }
        move_to(admin, st, target, patience).await
    })
}

/// `wink cluster remove`: takes node `name` out of the cluster for good. Its partitions go to
/// the other members, which catch up before the map stops naming it; it is never given a
/// partition again. Answers what it did.
pub fn remove(admin: &Admin, name: &str, patience: Duration) -> Result<String> {
    runtime()?.block_on(async {
        let st = cluster_state(&admin.cfg).await?;
        if st.map.removed.iter().any(|n| n == name) {
            return Ok(format!("{name} was removed already"));
        }
        let configured: Vec<String> = admin.cfg.nodes.iter().map(|n| n.name.clone()).collect();
        let mut members = st.map.members(&configured);
        if !members.iter().any(|n| n == name) {
            return Err(Error::invalid(format!("no node {name} in the cluster")));
        }
        members.retain(|n| n != name);
        if members.is_empty() {
            return Err(Error::invalid(format!(
                "{name} is the cluster's last node: it cannot be removed"
            )));
        }
        let target = st.map.without(name, &members);
        move_to(admin, st, target, patience).await
    })
}

/// Moves the map to `target` in two compare-and-sets: first each partition owned by its old and
/// new owners together; then, once every owner in `target` has started under that map and
/// applied the stream up to its last sequence, by its new owners only.
async fn move_to(admin: &Admin, st: State, target: Map, patience: Duration) -> Result<String> {
    let (map, kv) = (&st.map, &st.placement);
    let moved = (0..map.partitions)
        .filter(|p| map.owners(*p) != target.owners(*p))
        .count();
    let wide = map.widened(&target);
    let cas = |m: &Map| serde_json::to_vec(m).unwrap_or_default();
    let changed = |e: &dyn std::fmt::Display| {
        Error::invalid(format!(
            "cluster: the map changed meanwhile ({e}); run the command again"
        ))
    };
    let wide_rev = kv
        .update(placement::MAP_KEY, cas(&wide).into(), st.revision)
        .await
        .map_err(|e| changed(&e))?;
    let started = Instant::now();
    for n in &admin.run.nodes {
        if (0..target.partitions).all(|p| !target.owns(&n.name, p)) {
            continue;
        }
        loop {
            match node_status(admin, &n.url).await {
                Ok(s) if s.map_revision >= wide_rev && s.ready && s.scanned >= st.last => break,
                _ if started.elapsed() > patience => {
                    return Err(Error::invalid(format!(
                        "cluster: node {} did not catch up within {} s (the map stays \
                         widened at revision {wide_rev}: run the command again)",
                        n.name,
                        patience.as_secs()
                    )))
                }
                // A status is cheap, and the new owners see the map at once: a rebalance's
                // fixed cost is mostly this wait.
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    kv.update(placement::MAP_KEY, cas(&target).into(), wide_rev)
        .await
        .map_err(|e| changed(&e))?;
    Ok(format!(
        "{moved} partitions moved; every new owner caught up to sequence {}",
        st.last
    ))
}

/// GET `url` with the token, within `deadline`: its status and body parsed as JSON.
pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
    url: &str,
    auth: &Auth,
    deadline: Duration,
) -> std::result::Result<T, String> {
    let (status, body) = request(Method::GET, url, auth.bearer(), deadline).await?;
    if status != 200 {
        return Err(format!(
            "answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    serde_json::from_slice(&body).map_err(|e| format!("not the answer expected: {e}"))
}

/// Every title digest of one partition on one owner, by key, and (`check`) the renders whose
/// values failed their check.
async fn all_titles(
    base: &str,
    bucket: &str,
    partition: u32,
    auth: &Auth,
    check: bool,
) -> std::result::Result<(BTreeMap<(String, String), String>, Vec<String>), String> {
    let mut out = BTreeMap::new();
    let mut damaged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut url = format!("{base}/_cluster/digest/{bucket}/{partition}?titles=1");
        if check {
            url.push_str("&check=1");
        }
        if let Some(a) = &after {
            url.push_str(&format!("&after={a}"));
        }
        let page: TitlePage = get_json(&url, auth, Duration::from_secs(600)).await?;
        damaged.extend(page.damaged);
        for t in page.titles {
            out.insert(
                (t.domain, t.title),
                format!("{} [{}]", t.held, &t.digest[..12]),
            );
        }
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok((out, damaged)),
        }
    }
}

/// A cluster reached by one URL: its map, each owner's base URL, its buckets, and what was
/// wrong on the way (an owner with no URL, one that vouches for nothing or never caught up).
struct Reached {
    map: Map,
    base: BTreeMap<String, String>,
    buckets: Vec<String>,
    problems: Vec<String>,
}

/// Reads the map, the nodes' URLs and the buckets from `URL/_cluster`; waits (up to
/// `patience`) until every owner is ready and has applied the stream as far as the furthest
/// one.
async fn reach(url: &str, auth: &Auth, patience: Duration) -> Result<Reached> {
    let started = Instant::now();
    let first: NodeStatus = loop {
        match get_json(&format!("{url}/_cluster"), auth, Duration::from_secs(5)).await {
            Ok(s) => break s,
            Err(e) if started.elapsed() > patience => {
                return Err(Error::unavailable(format!("cluster: {url}/_cluster: {e}")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let map = first.map.clone().ok_or_else(|| {
        Error::invalid(format!("cluster: {url}/_cluster answers no placement map"))
    })?;
    let owners: BTreeSet<String> = (0..map.partitions)
        .flat_map(|p| map.owners(p).to_vec())
        .filter(|n| !map.removed.contains(n))
        .collect();
    let mut problems = Vec::new();
    let mut base = BTreeMap::new();
    for n in &owners {
        match first.urls.get(n) {
            Some(u) => {
                base.insert(n.clone(), u.trim_end_matches('/').to_string());
            }
            None => problems.push(format!("node {n}: no URL known for it")),
        }
    }
    // Caught up: ready, and applied as far as the furthest owner seen.
    let mut target = first.scanned;
    for (n, u) in &base {
        loop {
            let s: std::result::Result<NodeStatus, String> =
                get_json(&format!("{u}/_cluster"), auth, Duration::from_secs(5)).await;
            match s {
                Ok(NodeStatus {
                    diverged: Some(why),
                    ..
                }) => {
                    problems.push(format!(
                        "node {n} vouches for none of its partitions: {why}"
                    ));
                    break;
                }
                Ok(s) if s.ready && s.scanned >= target => {
                    target = target.max(s.scanned);
                    break;
                }
                Ok(s) if started.elapsed() > patience => {
                    problems.push(format!(
                        "node {n} has applied up to {}, another owner up to {target}",
                        s.scanned
                    ));
                    break;
                }
                Err(e) if started.elapsed() > patience => {
                    problems.push(format!("node {n} does not answer: {e}"));
                    break;
                }
                Ok(s) => {
                    target = target.max(s.scanned);
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(Reached {
        map,
        base,
        buckets: first.buckets,
        problems,
    })
}

/// A title: (domain, title).
type TitleKey = (String, String);
/// What each owner holds of a title, in words (`None`: nothing).
type Holdings = Vec<(String, Option<String>)>;

/// Where the owners of one partition differ.
#[derive(Default)]
struct Differences {
    /// The owners asked (those that answered their digest), in the map's order.
    owners: Vec<String>,
    /// The titles whose digests differ, each with what every owner holds of it, in words.
    titles: Vec<(TitleKey, Holdings)>,
    /// Owners that did not answer, in words.
    problems: Vec<String>,
    /// With `check`: the renders whose values failed their check, per owner, in words.
    damaged: BTreeSet<(String, String)>,
}

/// Asks every owner of `partition` of `bucket` for its digest (with `check`: every value read
/// and checked first) and, where they differ, for their title digests.
async fn differences(r: &Reached, bucket: &str, p: u32, auth: &Auth, check: bool) -> Differences {
    let mut out = Differences::default();
    let flag = if check { "?check=1" } else { "" };
    // (owner, digest, whether its check found a damaged value)
    let mut digests: Vec<(String, String, bool)> = Vec::new();
    for o in r.map.owners(p).iter().filter(|o| r.base.contains_key(*o)) {
        let u = format!("{}/_cluster/digest/{bucket}/{p}{flag}", r.base[o]);
        match get_json::<PartitionDigest>(&u, auth, Duration::from_secs(600)).await {
            Ok(d) => {
                let found = !d.damaged.is_empty();
                out.damaged
                    .extend(d.damaged.into_iter().map(|w| (o.clone(), w)));
                digests.push((o.clone(), d.digest, found));
            }
            Err(e) => out
                .problems
                .push(format!("bucket {bucket} partition {p}: node {o}: {e}")),
        }
    }
    out.owners = digests.iter().map(|(o, _, _)| o.clone()).collect();
    if digests.iter().all(|(_, d, _)| *d == digests[0].1) {
        return out;
    }
    let mut held = Vec::new();
    for (o, _, found) in &digests {
        // Each page of titles walks the whole partition again: its values are read again only
        // where the check just found damage. A damaged hot value is quarantined by then, and
        // left out of unchecked pages too; a damaged archived one is not, and needs the check.
        match all_titles(&r.base[o], bucket, p, auth, check && *found).await {
            Ok((t, damaged)) => {
                out.damaged
                    .extend(damaged.into_iter().map(|w| (o.clone(), w)));
                held.push((o.clone(), t));
            }
            Err(e) => out.problems.push(format!(
                "bucket {bucket} partition {p}: node {o}'s titles: {e}"
            )),
        }
    }
    let keys: BTreeSet<&(String, String)> = held.iter().flat_map(|(_, t)| t.keys()).collect();
    for k in keys {
        let first = held[0].1.get(k);
        if held[1..].iter().all(|(_, t)| t.get(k) == first) {
            continue;
        }
        let each = held
            .iter()
            .map(|(o, t)| (o.clone(), t.get(k).cloned()))
            .collect();
        out.titles.push((k.clone(), each));
    }
    out
}

/// One difference as `verify` names it.
fn described(
    bucket: &str,
    p: u32,
    key: &(String, String),
    each: &[(String, Option<String>)],
) -> String {
    let each: Vec<String> = each
        .iter()
        .map(|(o, h)| format!("{o} holds {}", h.as_deref().unwrap_or("nothing")))
        .collect();
    format!(
        "bucket {bucket} partition {p}: {}/{}: {}",
        key.0,
        key.1,
        each.join("; ")
    )
}

/// Every difference of the cluster `r`, in words (empty: the owners agree).
async fn all_differences(r: &Reached, auth: &Auth, check: bool) -> Vec<String> {
    let mut problems = r.problems.clone();
    for bucket in &r.buckets {
        for p in 0..r.map.partitions {
            let d = differences(r, bucket, p, auth, check).await;
            problems.extend(d.problems);
            for (o, what) in &d.damaged {
                problems.push(format!("bucket {bucket} partition {p}: node {o}: {what}"));
            }
            for (k, each) in &d.titles {
                problems.push(described(bucket, p, k, each));
            }
        }
    }
    problems
}

/// `wink cluster verify URL`: the cluster reached by one URL (a node's or the router's), the
/// data compared over HTTP. Reads the map, the nodes' URLs and the buckets from `URL/_cluster`;
/// waits (up to `patience`) until every owner is ready and has applied the stream as far as the
/// furthest one; then asks every owner of every partition for its digest
/// (`/_cluster/digest/BUCKET/PARTITION`, with the token; with `check`, `?check=1`: every value
/// read back and checked, a damaged one quarantined) and, where the owners differ, for their
/// title digests. Answers the differences (empty: the owners agree).
pub fn verify_url(url: &str, auth: &Auth, patience: Duration, check: bool) -> Result<Vec<String>> {
    let url = url.trim_end_matches('/');
    runtime()?.block_on(async {
        let r = reach(url, auth, patience).await?;
        Ok(all_differences(&r, auth, check).await)
    })
}

/// What `wink cluster repair URL` did and what is left.
#[derive(Debug, Default)]
pub struct Repaired {
    /// One line per action: a value quarantined, a change copied (and what applying it did).
    pub actions: Vec<String>,
    /// The differences a verify with value checks finds afterwards (empty: nothing is left).
    pub remaining: Vec<String>,
}

/// A title as one owner holds it: `/_cluster/held/…`'s frames, decoded.
#[derive(Default)]
struct Held {
    title_down: bool,
    revs_down: BTreeSet<u64>,
    renders: BTreeMap<(u64, uuid::Uuid), Change>,
}

/// Items a title's answer may hold: far more than any title holds renders.
const HELD_ITEMS: usize = 1 << 20;
/// The largest answer of `/_cluster/held/…` read: a title holding more is not repaired.
const HELD_BYTES: usize = 1 << 30;

fn parse_held(body: &[u8]) -> std::result::Result<Held, String> {
    let mut held = Held::default();
    let mut rest = body;
    let mut n = 0;
    while !rest.is_empty() {
        n += 1;
        if n > HELD_ITEMS || rest.len() < 4 {
            return Err("a damaged answer".into());
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let frame = rest
            .get(4..4 + len)
            .ok_or("a frame longer than the answer")?;
        rest = &rest[4 + len..];
        let c = Change::decode(frame)?;
        match c.kind {
            Kind::Put => {
                held.renders.insert((c.rev, c.tid), c);
            }
            Kind::TakeDown => {
                held.revs_down.insert(c.rev);
            }
            Kind::TakeDownTitle => held.title_down = true,
            Kind::Lift | Kind::LiftTitle => return Err("a lift in a title's holdings".into()),
        }
    }
    Ok(held)
}

/// A take-down (of `rev`, or of the whole title) as the change that makes it.
fn take_down(domain: &str, title: &str, rev: Option<u64>) -> Change {
    Change::take_down(domain.to_string(), title.to_string(), rev)
}

/// What one owner lacks of what the others hold of one title: the take-downs it does not have
/// (first), then the renders it has no copy of and does not refuse by a take-down of its own,
/// each with the owner it is copied from (the first that holds it). A render that two owners
/// hold with other bytes or labels is not copied either way: precedence cannot choose between
/// two copies of one (rev, tid); it is answered in `conflicts`.
fn lacking<'a>(
    (domain, title): (&str, &str),
    me: &Held,
    others: &[(&'a str, &'a Held)],
    conflicts: &mut BTreeSet<(u64, uuid::Uuid)>,
) -> Vec<(&'a str, Change, String)> {
    let mut out = Vec::new();
    for (from, h) in others {
        if h.title_down
            && !me.title_down
            && !out
                .iter()
                .any(|(_, c, _): &(_, Change, _)| c.kind == Kind::TakeDownTitle)
        {
            out.push((
                *from,
                take_down(domain, title, None),
                "the title's take-down".into(),
            ));
        }
        for rev in &h.revs_down {
            let have = me.revs_down.contains(rev)
                || out
                    .iter()
                    .any(|(_, c, _)| c.kind == Kind::TakeDown && c.rev == *rev);
            if !have {
                let what = format!("the take-down of revision {rev}");
                out.push((*from, take_down(domain, title, Some(*rev)), what));
            }
        }
    }
    for (from, h) in others {
        for (key, c) in &h.renders {
            match me.renders.get(key) {
                Some(mine) => {
                    let same = mine.value == c.value
                        && mine.content_type == c.content_type
                        && mine.labels == c.labels;
                    if !same {
                        conflicts.insert(*key);
                    }
                }
                None => {
                    let refused = me.title_down || me.revs_down.contains(&c.rev);
                    let copied = out
                        .iter()
                        .any(|(_, o, _)| o.kind == Kind::Put && (o.rev, o.tid) == *key);
                    if !refused && !copied {
                        let what = format!("render {}/{}", c.rev, c.tid);
                        out.push((*from, c.clone(), what));
                    }
                }
            }
        }
    }
    out
}

/// GET `url` with the token: its body, at most [`HELD_BYTES`].
async fn get_held(url: &str, auth: &Auth) -> std::result::Result<Held, String> {
    let (status, body) = request_with(
        Method::GET,
        url,
        auth.bearer(),
        Bytes::new(),
        HELD_BYTES,
        Duration::from_secs(600),
    )
    .await?;
    if status != 200 {
        return Err(format!(
            "answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    parse_held(&body)
}

/// Repairs one title of `partition` of `bucket` whose owners differ: fetches what each owner
/// holds of it (values that fail their check are never sent), then copies to each owner what
/// it lacks from another (`POST /_cluster/repair/BUCKET/PARTITION`).
async fn repair_title(
    r: &Reached,
    bucket: &str,
    p: u32,
    owners: &[String],
    key: &(String, String),
    auth: &Auth,
    actions: &mut Vec<String>,
) {
    let (domain, title) = key;
    let q: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("domain", domain)
        .append_pair("title", title)
        .finish();
    let at = format!("bucket {bucket} partition {p}: {domain}/{title}");
    let mut held = Vec::new();
    for o in owners {
        let u = format!("{}/_cluster/held/{bucket}/{p}?{q}", r.base[o]);
        match get_held(&u, auth).await {
            Ok(h) => held.push((o.as_str(), h)),
            Err(e) => {
                actions.push(format!("{at}: not repaired: node {o}'s holdings: {e}"));
                return;
            }
        }
    }
    let mut conflicts = BTreeSet::new();
    for (i, (o, mine)) in held.iter().enumerate() {
        let others: Vec<(&str, &Held)> = held
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (n, h))| (*n, h))
            .collect();
        for (from, change, what) in lacking((domain, title), mine, &others, &mut conflicts) {
            let u = format!("{}/_cluster/repair/{bucket}/{p}", r.base[*o]);
            let body = Bytes::from(change.encode());
            let done = request_with(
                Method::POST,
                &u,
                auth.bearer(),
                body,
                1 << 20,
                Duration::from_secs(600),
            )
            .await;
            let outcome = match done {
                Ok((200, b)) => match serde_json::from_slice::<Outcome>(&b) {
                    Ok(Outcome::Stored) => "stored".to_string(),
                    Ok(Outcome::Removed { removed }) => format!("{removed} renders removed"),
                    Ok(Outcome::TakenDown) => "refused: taken down there".to_string(),
                    Ok(other) => format!("{other:?}"),
                    Err(e) => format!("an answer not understood: {e}"),
                },
                Ok((status, b)) => format!(
                    "failed: answered {status}: {}",
                    String::from_utf8_lossy(&b).trim()
                ),
                Err(e) => format!("failed: {e}"),
            };
            actions.push(format!("{at}: copied {what} from {from} to {o}: {outcome}"));
        }
    }
    for (rev, tid) in conflicts {
        actions.push(format!(
            "{at}: not repaired: render {rev}/{tid} is held with other bytes or labels by \
             different owners (precedence cannot choose between them)"
        ));
    }
}

/// `wink cluster repair URL`: for every difference a verify with value checks finds (each
/// value read back first; one that fails is quarantined on its owner and counts as missing
/// there), copies to each owner what another owner holds and it lacks, by the store's
/// precedence: a render it has no copy of, a take-down it does not have. What a render is held
/// as is never guessed: two owners holding one (rev, tid) with other bytes are left as they
/// are. Then verifies again, with value checks. See docs/CLUSTER.md § Repair.
pub fn repair_url(url: &str, auth: &Auth, patience: Duration) -> Result<Repaired> {
    let url = url.trim_end_matches('/');
    runtime()?.block_on(async {
        let r = reach(url, auth, patience).await?;
        let mut out = Repaired::default();
        for bucket in &r.buckets {
            for p in 0..r.map.partitions {
                let d = differences(&r, bucket, p, auth, true).await;
                for (o, what) in &d.damaged {
                    out.actions
                        .push(format!("bucket {bucket} partition {p}: node {o}: {what}"));
                }
                if !d.problems.is_empty() {
                    // An owner that did not answer: what it lacks is not known.
                    out.actions
                        .extend(d.problems.iter().map(|e| format!("{e}: not repaired")));
                    continue;
                }
                for (key, _) in &d.titles {
                    repair_title(&r, bucket, p, &d.owners, key, auth, &mut out.actions).await;
                }
            }
        }
        out.remaining = all_differences(&r, auth, true).await;
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(rev: u64, n: u16, value: &[u8]) -> Change {
        Change {
            kind: Kind::Put,
            arrival: 1_700_000_000,
            rev,
            tid: wink_engine::store::key::tid_at(1_700_000_000, n, *b"repair"),
            domain: "d.org".into(),
            title: "T".into(),
            content_type: "text/html".into(),
            labels: wink_engine::store::Labels::NONE,
            value: bytes::Bytes::copy_from_slice(value),
            conditions: Default::default(),
            names_render: false,
        }
    }

    fn held(changes: &[Change]) -> Held {
        let mut body = Vec::new();
        for c in changes {
            let frame = c.encode();
            body.extend_from_slice(&(frame.len() as u32).to_be_bytes());
            body.extend_from_slice(&frame);
        }
        parse_held(&body).unwrap()
    }

    fn what(out: &[(&str, Change, String)]) -> Vec<String> {
        out.iter()
            .map(|(from, _, w)| format!("{w} from {from}"))
            .collect()
    }

    #[test]
    fn an_owner_lacks_what_another_holds_and_never_a_copy_precedence_cannot_choose() {
        let (a, b) = (render(1, 1, b"one"), render(2, 2, b"two"));
        let full = held(&[a.clone(), b.clone()]);
        let part = held(std::slice::from_ref(&a));
        let key = ("d.org", "T");
        let mut conflicts = BTreeSet::new();
        let out = lacking(key, &part, &[("n1", &full)], &mut conflicts);
        assert_eq!(what(&out), vec![format!("render 2/{} from n1", b.tid)]);
        assert!(out[0].1 == b, "the render as held, bytes and all");
        assert!(lacking(key, &full, &[("n2", &part)], &mut conflicts).is_empty());

        // A take-down is copied; a render the lacking owner has taken down is not offered.
        let down = held(&[take_down("d.org", "T", Some(2)), a.clone()]);
        let out = lacking(key, &full, &[("n2", &down)], &mut conflicts);
        assert_eq!(what(&out), vec!["the take-down of revision 2 from n2"]);
        assert!(lacking(key, &down, &[("n1", &full)], &mut conflicts).is_empty());
        let whole = held(&[take_down("d.org", "T", None)]);
        let out = lacking(key, &full, &[("n2", &whole)], &mut conflicts);
        assert_eq!(what(&out), vec!["the title's take-down from n2"]);
        assert_eq!((out[0].1.domain.as_str(), out[0].1.title.as_str()), key);
        assert!(lacking(key, &whole, &[("n1", &full)], &mut conflicts).is_empty());

        // One (rev, tid) held with other bytes: neither copy is sent; it is named.
        let mut other = b.clone();
        other.value = bytes::Bytes::from_static(b"TWO");
        let odd = held(&[a.clone(), other]);
        assert!(lacking(key, &full, &[("n2", &odd)], &mut conflicts).is_empty());
        assert_eq!(conflicts.into_iter().collect::<Vec<_>>(), vec![(2, b.tid)]);

        // Two owners holding it: copied once, from the first.
        let mut none = BTreeSet::new();
        let out = lacking(key, &held(&[]), &[("n1", &full), ("n3", &full)], &mut none);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(from, _, _)| *from == "n1"));
    }

    #[test]
    fn a_damaged_answer_is_refused() {
        let one = render(1, 1, b"one").encode();
        let mut body = (one.len() as u32 + 1).to_be_bytes().to_vec();
        body.extend_from_slice(&one);
        assert!(parse_held(&body).is_err());
        assert!(parse_held(&[0, 0]).is_err());
        let mut lift = render(1, 1, b"");
        lift.kind = Kind::Lift;
        let frame = lift.encode();
        let mut body = (frame.len() as u32).to_be_bytes().to_vec();
        body.extend_from_slice(&frame);
        assert!(parse_held(&body).is_err());
    }
}
