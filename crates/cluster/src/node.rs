//! A running cluster node (`wink serve --cluster FILE`): the NATS connection, the publisher of
//! changes, the apply loop, leases, the placement map, and which node answers a read. To the
//! service core it is the `Writes` (a write is published, and answered once an owner applied
//! it) and the `ReadGate` (admit, peers to forward to, read-your-writes waits); the HTTP front
//! calls it only through those (docs/CLUSTER.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, StatusCode};
use tokio::sync::watch;
use uuid::Uuid;

use super::apply::{self, Mark, Message, Outcome};
use super::config::ClusterConfig;
use super::message::{self, Change, Kind};
use super::placement::{self, Map};
use wink_engine::clock::Clock as _;
use wink_engine::{Error, Result};
use wink_serve::Problem;
use wink_serve::{http1_connect, MIN_SEQ};
use wink_service::commit::{ExclusiveWork, Job};
use wink_service::registry::Registry;
use wink_service::{Done, Peer, Pending, ReadGate, Receipt, Refusal, ServiceError};
use wink_service::{Write, Writes};

/// How long a publish is retried (leader elections take ~5 s) before the answer is 503. With
/// [`APPLY_PATIENCE`], a write's whole deadline; the router's server timeout sits just above.
const PUBLISH_PATIENCE: Duration = Duration::from_secs(10);
/// How long a write waits for an owner to apply it before the answer is 503.
const APPLY_PATIENCE: Duration = Duration::from_secs(5);
/// How long an owner that received a write waits for its own apply before it asks the other
/// owners as well (an apply decides within milliseconds unless its disk stalls).
const OWN_FIRST: Duration = Duration::from_millis(100);
/// The outcomes of applied messages kept for the writers waiting on them.
const OUTCOMES_KEPT: usize = 100_000;
/// How often the apply loop checks that the stream still holds the last message it scanned.
const STREAM_CHECK: Duration = Duration::from_secs(1);
/// How long a read with `x-wink-min-seq` waits for the apply loop.
const MIN_SEQ_WAIT: Duration = Duration::from_secs(10);
/// Messages one apply batch takes at most, and their bytes.
const BATCH_MESSAGES: usize = 1024;
const BATCH_BYTES: usize = 64 << 20;

/// The node.
pub struct Node {
    pub cfg: ClusterConfig,
    pub name: String,
    /// The token this node's requests to other nodes carry (the server's own).
    auth: wink_serve::Auth,
    js: jetstream::Context,
    client: async_nats::Client,
    /// The cluster's buckets: the catalog as last read, and which are open here.
    buckets: super::catalog::Buckets,
    map: RwLock<(Map, u64)>,
    /// Bumped when the map's owners of this node change: the apply loop starts a new session.
    map_generation: AtomicU64,
    /// The map generation the running apply session started under.
    session: AtomicU64,
    /// Everything up to this sequence is applied, and committed, for every partition this
    /// node owns.
    scanned: watch::Sender<u64>,
    /// Everything up to this sequence is applied and its outcome recorded; its commit may
    /// still be syncing (`decided ≥ scanned`). Writers are answered from it.
    decided: watch::Sender<u64>,
    /// Partition → the last sequence decided for it: its reads wait until `scanned` passes it,
    /// so a read after a 201 sees the write, as on a single node.
    deciding: Mutex<HashMap<u32, u64>>,
    /// The stream's last sequence when the apply session started: reads are vouched for once
    /// `scanned` reaches it.
    catch_up_to: AtomicU64,
    /// Why the node cannot apply (behind the stream's retention), when it cannot.
    behind: Mutex<Option<String>>,
    /// Why the node's records are out of step with the stream, when they are: it then vouches
    /// for none of its partitions until a replay (docs/CLUSTER.md § Sequences are not trusted).
    diverged: Mutex<Option<String>>,
    /// What applying each recent message did, by stream sequence: a write's answer.
    outcomes: Mutex<BTreeMap<u64, (u32, Outcome)>>,
    /// Asks the apply loop to check the stream now (a writer found no outcome where one was due).
    check_stream: AtomicBool,
    /// Why writes are refused because a NATS server may not sync them, when they are.
    unsynced: Mutex<Option<String>>,
    /// Node name → its URL, from the leases: nodes added after this one started are reached
    /// through them.
    urls: RwLock<HashMap<String, String>>,
    nats_up: Arc<AtomicBool>,
    /// Nodes with a live lease (all of them when NATS cannot be asked).
    live: RwLock<Vec<String>>,
    tids: Mutex<i64>,
    tid_node: [u8; 6],
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("name", &self.name).finish()
    }
}

fn nats_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::unavailable(format!("cluster: {what}: {e}"))
}

/// Connects to NATS (retrying while none answers) and notes connection changes in `up`.
pub async fn connect(cfg: &ClusterConfig, up: Arc<AtomicBool>) -> Result<async_nats::Client> {
    let flag = up.clone();
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .max_reconnects(None)
        // Only the configured servers: the ones the servers advertise are the same three by
        // other addresses, and a node whose configured route to NATS is cut must stay cut off
        // rather than bypass it (the partition test puts a proxy there).
        .ignore_discovered_servers()
        .connection_timeout(Duration::from_secs(2))
        // A server that stops answering (frozen, cut off) is given up after two unanswered
        // pings, about 2–3 s, and the client moves to another configured server.
        .ping_interval(Duration::from_secs(1))
        .event_callback(move |e| {
            let flag = flag.clone();
            async move {
                match e {
                    async_nats::Event::Connected => flag.store(true, Ordering::SeqCst),
                    async_nats::Event::Disconnected => flag.store(false, Ordering::SeqCst),
                    _ => {}
                }
            }
        })
        .connect(cfg.nats.clone())
        .await
        .map_err(|e| nats_err("connecting to NATS", e))?;
    up.store(true, Ordering::SeqCst);
    Ok(client)
}

/// The JetStream context every user of the cluster shares: acks awaited at most 5 s each.
pub fn context(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(5))
        .build(client)
}

/// Makes the stream and the key-value buckets when they are missing; answers the map.
pub async fn ensure(js: &jetstream::Context, cfg: &ClusterConfig) -> Result<(Map, u64)> {
    let replicas = cfg.stream_replicas.min(cfg.nats.len()).max(1);
    js.get_or_create_stream(stream::Config {
        name: placement::STREAM.to_string(),
        subjects: vec!["wink.>".to_string()],
        storage: stream::StorageType::File,
        num_replicas: replicas,
        max_age: Duration::from_secs(cfg.stream_max_age),
        // JetStream refuses a duplicate window longer than the max age.
        duplicate_window: Duration::from_secs(120.min(cfg.stream_max_age.max(1))),
        ..Default::default()
    })
    .await
    .map_err(|e| nats_err("creating the stream", e))?;
    let placement = key_value(
        js,
        kv::Config {
            bucket: placement::PLACEMENT_BUCKET.to_string(),
            history: 8,
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    key_value(
        js,
        kv::Config {
            bucket: placement::LEASE_BUCKET.to_string(),
            max_age: Duration::from_secs(placement::LEASE_SECS),
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    read_map(&placement, cfg).await
}

async fn key_value(js: &jetstream::Context, config: kv::Config) -> Result<kv::Store> {
    let name = config.bucket.clone();
    if let Ok(s) = js.get_key_value(&name).await {
        return Ok(s);
    }
    match js.create_key_value(config).await {
        Ok(s) => Ok(s),
        // Another node made it meanwhile.
        Err(e) => js
            .get_key_value(&name)
            .await
            .map_err(|_| nats_err(&format!("creating key-value bucket {name}"), e)),
    }
}

/// The map and its revision; the cluster's first map (round robin) when there is none yet.
pub async fn read_map(placement: &kv::Store, cfg: &ClusterConfig) -> Result<(Map, u64)> {
    let mut failures = 0;
    loop {
        match placement.entry(placement::MAP_KEY).await {
            Ok(Some(e)) if matches!(e.operation, kv::Operation::Put) => {
                let map = Map::parse(&e.value, cfg).map_err(Error::invalid)?;
                return Ok((map, e.revision));
            }
            Ok(_) => {
                let first = serde_json::to_vec(&Map::initial(cfg)).unwrap_or_default();
                // Fails when another node created it first: then read it.
                let _ = placement.create(placement::MAP_KEY, first.into()).await;
            }
            // A bucket just made answers "no responders" until its stream has a leader.
            Err(e) if failures >= 40 => return Err(nats_err("reading the placement map", e)),
            Err(_) => {
                failures += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// A change JetStream acknowledged: where it is, and the checksum of its subject and body (the
/// same as its [`Mark`]'s), which tells it from another message given the same sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    pub seq: u64,
    pub partition: u32,
    pub crc: u32,
    /// JetStream had the message already (the same id within the duplicate window): `seq` is
    /// the first copy's.
    pub duplicate: bool,
}

/// The answer of a node's `/_cluster`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct NodeStatus {
    pub name: String,
    pub scanned: u64,
    pub catch_up_to: u64,
    pub ready: bool,
    pub nats: bool,
    pub owned: Vec<u32>,
    pub map_revision: u64,
    pub behind: Option<String>,
    /// Why this node vouches for none of its partitions (its records and the stream disagree).
    #[serde(default)]
    pub diverged: Option<String>,
    /// Why this node refuses writes (a NATS server that may not sync them), when it does.
    #[serde(default)]
    pub writes_refused: Option<String>,
    /// The placement map this node runs under, for a client that reaches the cluster by one URL
    /// (`wink cluster verify URL`).
    #[serde(default)]
    pub map: Option<Map>,
    /// Node name → base URL, for every node the map or the configuration names.
    #[serde(default)]
    pub urls: BTreeMap<String, String>,
    /// The buckets this node serves (filled by the `/_cluster` route).
    #[serde(default)]
    pub buckets: Vec<String>,
}

impl Node {
    /// Connects, makes the stream and buckets when missing, reads the map, creates the declared
    /// buckets, and starts the lease, map and apply tasks on the current runtime.
    pub async fn start(
        cfg: ClusterConfig,
        reg: Arc<Registry>,
        auth: wink_serve::Auth,
    ) -> Result<Arc<Node>> {
        let up = Arc::new(AtomicBool::new(false));
        let client = connect(&cfg, up.clone()).await?;
        let js = context(client.clone());
        // Right after the servers start, JetStream may have no meta leader yet: retry a while.
        let started = Instant::now();
        let (map, revision) = loop {
            match ensure(&js, &cfg).await {
                Ok(m) => break m,
                Err(e) if started.elapsed() > Duration::from_secs(60) => return Err(e),
                Err(e) => {
                    tracing::warn!(node = %cfg.name, "{e}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let buckets = super::catalog::Buckets::new(reg.clone(), cfg.partitions);
        super::catalog::start(&js, &cfg, &buckets).await?;
        let digest = {
            use sha1::Digest as _;
            sha1::Sha1::digest(cfg.name.as_bytes())
        };
        let mut tid_node = [0u8; 6];
        tid_node.copy_from_slice(&digest[..6]);
        // The multicast bit marks a node id that is not a MAC address (RFC 4122 § 4.5).
        tid_node[0] |= 1;
        let names = cfg.nodes.iter().map(|n| n.name.clone()).collect();
        let node = Arc::new(Node {
            name: cfg.name.clone(),
            auth,
            cfg,
            js,
            client,
            buckets,
            map: RwLock::new((map, revision)),
            map_generation: AtomicU64::new(0),
            session: AtomicU64::new(u64::MAX),
            scanned: watch::Sender::new(0),
            decided: watch::Sender::new(0),
            deciding: Mutex::new(HashMap::new()),
            catch_up_to: AtomicU64::new(u64::MAX),
            behind: Mutex::new(None),
            diverged: Mutex::new(None),
            outcomes: Mutex::new(BTreeMap::new()),
            check_stream: AtomicBool::new(false),
            unsynced: Mutex::new(Some(
                "the NATS servers' settings are not checked yet".into(),
            )),
            urls: RwLock::new(HashMap::new()),
            nats_up: up,
            live: RwLock::new(names),
            tids: Mutex::new(0),
            tid_node,
        });
        tokio::spawn(leases(node.clone()));
        tokio::spawn(watch_nats_sync(node.clone()));
        tokio::spawn(watch_map(node.clone()));
        tokio::spawn(replace_lost(node.clone()));
        tokio::spawn(super::catalog::watch(node.clone()));
        tokio::spawn(apply_loop(node.clone(), reg));
        tokio::spawn(super::router::keep(node.clone(), node.cfg.routers.clone()));
        Ok(node)
    }

    pub fn map(&self) -> Map {
        read(&self.map).0.clone()
    }

    pub(super) fn js(&self) -> &jetstream::Context {
        &self.js
    }

    pub(super) fn buckets(&self) -> &super::catalog::Buckets {
        &self.buckets
    }

    pub fn status(&self) -> NodeStatus {
        let (map, revision) = read(&self.map).clone();
        let scanned = *self.scanned.borrow();
        let catch_up_to = self.catch_up_to.load(Ordering::SeqCst);
        NodeStatus {
            name: self.name.clone(),
            scanned,
            catch_up_to,
            // A session under an older map has not scanned for the partitions gained since.
            ready: scanned >= catch_up_to
                && self.session.load(Ordering::SeqCst)
                    == self.map_generation.load(Ordering::SeqCst),
            nats: self.nats_up.load(Ordering::SeqCst),
            owned: map.owned_by(&self.name),
            map_revision: revision,
            behind: lock(&self.behind).clone(),
            diverged: lock(&self.diverged).clone(),
            writes_refused: self.writes_refused(),
            urls: self
                .cfg
                .nodes
                .iter()
                .map(|n| n.name.clone())
                .chain((0..map.partitions).flat_map(|p| map.owners(p).to_vec()))
                .filter_map(|n| self.url_of(&n).map(|u| (n, u)))
                .collect(),
            map: Some(map),
            buckets: Vec::new(),
        }
    }

    /// Why writes are refused, when they are: a NATS server that does not sync every write
    /// (unless the configuration accepts the risk).
    fn writes_refused(&self) -> Option<String> {
        if self.cfg.unsafe_acks_without_nats_fsync {
            return None;
        }
        lock(&self.unsynced).clone()
    }

    /// Whether this node's apply session runs under the current map and can apply (not behind
    /// the stream's retention): the outcomes it records are then real.
    fn applying(&self) -> bool {
        self.session.load(Ordering::SeqCst) == self.map_generation.load(Ordering::SeqCst)
            && lock(&self.behind).is_none()
    }

    /// What applying the message at `seq` whose checksum is `crc` did, once this node's apply
    /// loop has applied it (its commit may still be syncing: the stream holds the message
    /// durably, and a replay decides the same). `None` when it does not within `patience`: not
    /// applied yet, applied by an earlier process, or another message at that sequence (a stream
    /// that lost its tail gives its sequences again: the apply loop is asked to check, and once
    /// it has found that and replayed, the outcome of this message is recorded).
    pub async fn local_outcome(&self, seq: u64, crc: u32, patience: Duration) -> Option<Outcome> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut rx = self.decided.subscribe();
        loop {
            if self.applying() {
                let passed = tokio::time::timeout_at(deadline, rx.wait_for(|s| *s >= seq)).await;
                if !matches!(passed, Ok(Ok(_))) {
                    return None;
                }
                match lock(&self.outcomes).get(&seq) {
                    Some((c, o)) if *c == crc => return Some(o.clone()),
                    _ => self.check_stream.store(true, Ordering::SeqCst),
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The checksum of the message the stream holds at `seq` (its subject and body).
    async fn crc_at(&self, seq: u64) -> std::result::Result<u32, String> {
        let stream = self
            .js
            .get_stream(placement::STREAM)
            .await
            .map_err(|e| format!("the stream: {e}"))?;
        let m = stream
            .get_raw_message(seq)
            .await
            .map_err(|e| format!("sequence {seq} of the stream: {e}"))?;
        Ok(Mark::of("", seq, m.subject.as_str(), &m.payload).crc)
    }

    /// Publishes `change` of `bucket` and answers what applying it did (§ What a 201 means).
    /// A put that JetStream took for a duplicate of one the store refused (taken down at the
    /// time) is asked for again as a message of its own: a single node would take it now if the
    /// take-down has been lifted since, and a put applied again changes nothing.
    async fn write_change(
        &self,
        bucket: &str,
        change: &Change,
    ) -> std::result::Result<(Published, Outcome), ServiceError> {
        let sent = self.publish(bucket, change, false).await?;
        let outcome = self.settle(&sent).await?;
        let refused = matches!(
            outcome,
            Outcome::TakenDown | Outcome::Refused { .. } | Outcome::PreconditionFailed { .. }
        );
        if sent.duplicate && change.kind == Kind::Put && refused {
            let again = self.publish(bucket, change, true).await?;
            let outcome = self.settle(&again).await?;
            return Ok((again, outcome));
        }
        Ok((sent, outcome))
    }

    /// What applying a published message did, from the first owner of its partition that has
    /// applied it, this node included: the write's answer. 503 when no owner
    /// has within [`APPLY_PATIENCE`]: the write is in the stream and will be applied, but
    /// nothing is promised yet.
    async fn settle(&self, sent: &Published) -> std::result::Result<Outcome, ServiceError> {
        use futures_util::future::FutureExt as _;
        let Published {
            seq,
            partition,
            crc,
            ..
        } = *sent;
        let owners: Vec<String> = read(&self.map).0.owners(partition).to_vec();
        let mut asks = Vec::new();
        let mut own_at = None;
        for owner in &owners {
            if *owner == self.name {
                own_at = Some(asks.len());
                asks.push(
                    async move {
                        self.local_outcome(seq, crc, APPLY_PATIENCE)
                            .await
                            .ok_or_else(|| "not applied here in time".to_string())
                    }
                    .boxed(),
                );
            } else if let Some(url) = self.url_of(owner) {
                asks.push(ask_outcome(url, sent).boxed());
            }
        }
        let late = || {
            ServiceError::unavailable(
                format!(
                    "the write is in the stream at sequence {seq}, but no owner of partition \
                     {partition} ({}) applied it within {}s: it is not acknowledged (it may \
                     still be applied; retry it with the same tid)",
                    owners.join(", "),
                    APPLY_PATIENCE.as_secs()
                ),
                2,
            )
        };
        // An owner that applies asks itself first: the other owners are asked too (an HTTP
        // request each, held until they have applied) only when its own apply is slow to
        // decide, or has given up.
        if let Some(i) = own_at.filter(|_| self.applying()) {
            let mut own = asks.remove(i);
            match tokio::time::timeout(OWN_FIRST, &mut own).await {
                Ok(Ok(outcome)) => return Ok(outcome),
                Ok(Err(_)) => {}
                Err(_) => asks.push(own),
            }
        }
        if asks.is_empty() {
            return Err(late());
        }
        match tokio::time::timeout(
            APPLY_PATIENCE + Duration::from_secs(1),
            futures_util::future::select_ok(asks),
        )
        .await
        {
            Ok(Ok((outcome, _))) => Ok(outcome),
            _ => Err(late()),
        }
    }

    /// The `Authorization` of this node's requests to other nodes.
    pub fn bearer(&self) -> Option<hyper::header::HeaderValue> {
        self.auth.bearer()
    }

    /// How long an owner waits for its apply loop when asked for an outcome.
    pub fn apply_patience(&self) -> Duration {
        APPLY_PATIENCE
    }

    /// A node's URL: the configuration's, else the one its lease announces.
    pub(super) fn url_of(&self, name: &str) -> Option<String> {
        if let Some(n) = self.cfg.node(name) {
            return Some(n.url.clone());
        }
        read(&self.urls).get(name).cloned()
    }

    /// A tid for a write received here: from this node's clock, strictly increasing in this
    /// process, with a node id of its own (so two nodes never make the same tid).
    pub fn make_tid(&self) -> Uuid {
        let now = wink_engine::clock::SystemClock.now_ticks();
        let mut last = lock(&self.tids);
        let ticks = now.max(*last + 1);
        *last = ticks;
        let greg = (ticks.max(0) as u64).saturating_add(TICKS_TO_UNIX);
        uuid::Builder::from_gregorian_timestamp(greg, 0, &self.tid_node).into_uuid()
    }

    /// Publishes a change of `bucket` and waits for JetStream's ack: the stream sequence, or
    /// the problem to answer (413 over the message limit, 503 without an ack in time).
    async fn publish(
        &self,
        bucket: &str,
        change: &Change,
        again: bool,
    ) -> std::result::Result<Published, ServiceError> {
        let partition = message::partition_of(&change.domain, &change.title, self.cfg.partitions);
        let subject = message::subject(bucket, partition);
        let mut id = message::message_id(bucket, change);
        if again {
            // Not a retry of a lost ack but the same change asked for again: a message of its own.
            id.push_str(&format!("|{}", self.make_tid()));
        }
        let body = Bytes::from(change.encode());
        let crc = Mark::of("", 0, &subject, &body).crc;
        // Headers count against the limit: the id, its name, the framing of a header block.
        let size = body.len() + id.len() + 64;
        let limit = self.client.server_info().max_payload;
        if limit > 0 && size > limit {
            return Err(ServiceError::Refused(Refusal::TooLarge(format!(
                "a render of {} bytes makes a message of {size} bytes, over the cluster's \
                 message limit of {limit} (NATS max_payload)",
                change.value.len()
            ))));
        }
        if let Some(why) = self.writes_refused() {
            return Err(ServiceError::unavailable(
                format!("node {} refuses writes: {why}", self.name),
                5,
            ));
        }
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut last_error = String::new();
        while started.elapsed() < PUBLISH_PATIENCE {
            if !self.nats_up.load(Ordering::SeqCst) {
                return Err(ServiceError::unavailable(
                    format!(
                        "node {} has no connection to NATS: writes are refused",
                        self.name
                    ),
                    2,
                ));
            }
            let msg = jetstream::message::PublishMessage::build()
                .payload(body.clone())
                .message_id(&id);
            // The ack future is awaited at once: its timeout runs from here.
            match self.js.send_publish(subject.clone(), msg).await {
                Ok(ack) => match ack.await {
                    // A duplicate whose first copy the server has not stored yet (its leader
                    // froze or changed) comes back with sequence 0: not an ack. The same
                    // message, same id, is sent again until it has a real sequence.
                    Ok(ack) if ack.sequence == 0 => {
                        last_error = "JetStream answered without a stream sequence".into()
                    }
                    Ok(ack) if ack.duplicate => {
                        // The first copy's body differs from this one in its arrival stamp: its
                        // checksum is the stream's.
                        match self.crc_at(ack.sequence).await {
                            Ok(first) => {
                                return Ok(Published {
                                    seq: ack.sequence,
                                    partition,
                                    crc: first,
                                    duplicate: true,
                                })
                            }
                            Err(e) => last_error = e,
                        }
                    }
                    Ok(ack) => {
                        return Ok(Published {
                            seq: ack.sequence,
                            partition,
                            crc,
                            duplicate: false,
                        })
                    }
                    Err(e) => last_error = e.to_string(),
                },
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
        Err(ServiceError::unavailable(
            format!(
                "JetStream did not acknowledge the write within {}s ({last_error}); it may or \
                 may not be stored: retry it with the same tid",
                PUBLISH_PATIENCE.as_secs()
            ),
            2,
        ))
    }

    /// The message of a write received here: stamped with its arrival, with a tid made here when
    /// the request has none.
    fn message_of(
        &self,
        domain: String,
        title: String,
        change: wink_service::Change,
        arrival: i64,
    ) -> Change {
        let mut c = Change {
            kind: Kind::Put,
            arrival,
            rev: 0,
            tid: Uuid::nil(),
            domain,
            title,
            content_type: String::new(),
            labels: Default::default(),
            value: Bytes::new(),
            conditions: Default::default(),
            names_render: false,
        };
        let tid = match change {
            wink_service::Change::Put {
                rev,
                tid,
                content_type,
                labels,
                value,
                conditions,
            } => {
                c.rev = rev;
                c.content_type = content_type;
                c.labels = labels;
                c.value = value;
                c.conditions = conditions;
                c.names_render = tid.is_some();
                tid
            }
            wink_service::Change::TakeDown { rev } => {
                c.kind = if rev.is_some() {
                    Kind::TakeDown
                } else {
                    Kind::TakeDownTitle
                };
                c.rev = rev.unwrap_or(0);
                None
            }
            wink_service::Change::Lift { rev } => {
                c.kind = if rev.is_some() {
                    Kind::Lift
                } else {
                    Kind::LiftTitle
                };
                c.rev = rev.unwrap_or(0);
                None
            }
        };
        c.tid = tid.unwrap_or_else(|| self.make_tid());
        c
    }

    /// Waits (bounded) until the apply loop has passed `seq` in a durable commit.
    pub async fn wait_scanned(&self, seq: u64) -> bool {
        let mut rx = self.scanned.subscribe();
        tokio::time::timeout(MIN_SEQ_WAIT, rx.wait_for(|s| *s >= seq))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits (bounded) until what the apply loop has decided for `partition` (for every
    /// partition with `None`) is committed: a writer may have been answered already, and a
    /// read, a listing or a dump must show what it was answered.
    pub(super) async fn wait_committed(
        &self,
        partition: Option<u32>,
    ) -> std::result::Result<(), ServiceError> {
        let due = match partition {
            Some(p) => lock(&self.deciding).get(&p).copied().unwrap_or(0),
            None => *self.decided.borrow(),
        };
        if due <= *self.scanned.borrow() || self.wait_scanned(due).await {
            return Ok(());
        }
        let what = partition.map_or(String::new(), |p| format!(" for partition {p}"));
        Err(ServiceError::unavailable(
            format!("node {} has not committed what it applied{what}", self.name),
            1,
        ))
    }

    /// Records what a batch's messages of one bucket did, before their commit (called on the
    /// bucket's writer thread); the last of the batch's buckets moves `decided` to `through`.
    fn decide(
        &self,
        report: &apply::Report,
        msgs: &[Message],
        crcs: &HashMap<u64, u32>,
        through: u64,
        left: &AtomicUsize,
    ) {
        if !report.outcomes.is_empty() {
            let mut kept = lock(&self.outcomes);
            for (seq, o) in &report.outcomes {
                kept.insert(*seq, (crcs.get(seq).copied().unwrap_or(0), o.clone()));
            }
            while kept.len() > OUTCOMES_KEPT {
                kept.pop_first();
            }
        }
        let mut deciding = lock(&self.deciding);
        for m in msgs {
            let at = deciding.entry(m.partition).or_insert(0);
            *at = (*at).max(m.seq);
        }
        drop(deciding);
        if left.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.decided.send_modify(|d| *d = (*d).max(through));
        }
    }

    /// Commits a snapshot of `bucket` into `ROOT/.snapshots/`; answers its directory.
    pub async fn snapshot(
        &self,
        reg: &Registry,
        bucket: &str,
    ) -> std::result::Result<String, Problem> {
        let (_, dir) = super::seed::snapshot_into(reg, bucket, ".snapshots").await?;
        Ok(dir.display().to_string())
    }

    /// The nodes with a live lease.
    pub(super) fn live(&self) -> Vec<String> {
        read(&self.live).clone()
    }

    /// Whether this node answers for the partitions it owns: caught up, not behind the
    /// stream's retention, not out of step with the stream.
    pub(super) fn vouches(&self) -> bool {
        let status = self.status();
        status.ready && status.behind.is_none() && status.diverged.is_none()
    }

    /// Whether this node may answer for `partitions` from its own stores: it owns each and
    /// vouches for what it owns ([`Node::vouches`]); else the 503 to answer, naming why.
    pub(super) fn answers_for(
        &self,
        partitions: &[u32],
    ) -> std::result::Result<(), wink_serve::Problem> {
        let owned = read(&self.map).0.owned_by(&self.name);
        if let Some(p) = partitions.iter().find(|p| !owned.contains(p)) {
            return Err(wink_serve::Problem::unavailable(
                format!("node {} does not own partition {p}", self.name),
                1,
            ));
        }
        if !self.vouches() {
            return Err(wink_serve::Problem::unavailable(
                format!("node {} does not vouch for its partitions yet", self.name),
                1,
            ));
        }
        Ok(())
    }

    /// The key that seals listing cursors on every node: made once, at random, and kept in the
    /// placement bucket beside the map, so a cursor one node gave is taken by all.
    pub async fn cursor_secret(&self) -> Result<[u8; 32]> {
        let kv = self
            .js
            .get_key_value(placement::PLACEMENT_BUCKET)
            .await
            .map_err(|e| nats_err("the placement bucket", e))?;
        loop {
            if let Some(v) = kv
                .get(placement::CURSOR_KEY)
                .await
                .map_err(|e| nats_err("the cursor key", e))?
            {
                return <[u8; 32]>::try_from(v.as_ref()).map_err(|_| {
                    Error::invalid(format!(
                        "cluster: the placement bucket's {} is {} bytes, not 32",
                        placement::CURSOR_KEY,
                        v.len()
                    ))
                });
            }
            let mut secret = [0u8; 32];
            let random = std::path::Path::new("/dev/urandom");
            std::io::Read::read_exact(
                &mut std::fs::File::open(random).map_err(|e| Error::io(random, None, e))?,
                &mut secret,
            )
            .map_err(|e| Error::io(random, None, e))?;
            // Two nodes starting at once: one create wins, the other reads its key.
            let _ = kv
                .create(placement::CURSOR_KEY, Bytes::copy_from_slice(&secret))
                .await;
        }
    }
}

/// One GET to a node, its body whole (at most 1 MiB), within `deadline`.
pub(super) async fn get_small(
    base: &str,
    path: &str,
    deadline: Duration,
) -> std::result::Result<(StatusCode, Bytes), String> {
    let (status, _, body) = ask(base, hyper::Method::GET, path, None, 1 << 20, deadline).await?;
    Ok((status, body))
}

/// One request to a node (or a NATS server's monitor), with `bearer` when given; the body
/// whole, at most `limit` bytes, within `deadline`.
pub(super) async fn ask(
    base: &str,
    method: hyper::Method,
    path: &str,
    bearer: Option<hyper::header::HeaderValue>,
    limit: usize,
    deadline: Duration,
) -> std::result::Result<(StatusCode, hyper::HeaderMap, Bytes), String> {
    let authority = base
        .strip_prefix("http://")
        .unwrap_or(base)
        .trim_end_matches('/')
        .to_string();
    let go = async {
        let mut send = http1_connect(&authority).await?;
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, authority.as_str());
        if let Some(v) = bearer {
            req = req.header(hyper::header::AUTHORIZATION, v);
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let answer = send.send_request(req).await.map_err(|e| e.to_string())?;
        let (head, body) = answer.into_parts();
        let body = http_body_util::Limited::new(body, limit)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((head.status, head.headers, body))
    };
    tokio::time::timeout(deadline, go)
        .await
        .map_err(|_| format!("{base}{path}: no answer within {}s", deadline.as_secs()))?
}

/// Asks the owner at `base` what applying the message at `seq` did (it waits for its apply
/// loop, bounded).
async fn ask_outcome(base: String, sent: &Published) -> std::result::Result<Outcome, String> {
    let path = format!(
        "/_cluster/outcome/{}?partition={}&crc={:08x}",
        sent.seq, sent.partition, sent.crc
    );
    let (status, body) =
        get_small(&base, &path, APPLY_PATIENCE + Duration::from_millis(500)).await?;
    if status != StatusCode::OK {
        return Err(format!("{base} answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{base}: {e}"))
}

/// Reads each NATS server's `/varz` every few seconds: writes are refused while a server
/// answers that it does not sync every write, or while one was never asked successfully.
async fn watch_nats_sync(node: Arc<Node>) {
    let monitors = node.cfg.nats_monitor.clone();
    // The verdict of each server: kept while it does not answer (a server stopped or frozen is
    // still the server it was when it answered).
    let mut verdicts: Vec<Option<bool>> = vec![None; monitors.len()];
    loop {
        for (m, verdict) in monitors.iter().zip(verdicts.iter_mut()) {
            if let Ok((StatusCode::OK, body)) = get_small(m, "/varz", Duration::from_secs(2)).await
            {
                let varz: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                *verdict = Some(varz["jetstream"]["config"]["sync_always"] == true);
            }
        }
        let why = if monitors.is_empty() {
            Some(
                "the configuration lists no nats_monitor, so whether the NATS servers sync every \
                 write cannot be checked"
                    .to_string(),
            )
        } else {
            let bad: Vec<String> = monitors
                .iter()
                .zip(&verdicts)
                .filter_map(|(m, v)| match v {
                    Some(true) => None,
                    Some(false) => Some(format!("{m} does not sync every write")),
                    None => Some(format!("{m} has not answered")),
                })
                .collect();
            (!bad.is_empty()).then(|| {
                format!(
                    "{}: an acknowledged write could be lost in a power cut (set \
                     sync_interval: always in the servers' jetstream block)",
                    bad.join("; ")
                )
            })
        };
        {
            let mut now = lock(&node.unsynced);
            if *now != why {
                match &why {
                    Some(w) if !node.cfg.unsafe_acks_without_nats_fsync => {
                        tracing::error!(node = %node.name, "WRITES REFUSED: {w}")
                    }
                    Some(w) => tracing::error!(
                        node = %node.name,
                        "UNSAFE: writes acknowledged although {w}"
                    ),
                    None => {
                        tracing::info!(node = %node.name, "every NATS server syncs every write")
                    }
                }
                *now = why;
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // Plain data: a panic elsewhere leaves it consistent.
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Renews this node's lease every second; notes which nodes hold one.
async fn leases(node: Arc<Node>) {
    let mut bucket = None;
    loop {
        if bucket.is_none() {
            bucket = node.js.get_key_value(placement::LEASE_BUCKET).await.ok();
        }
        if let Some(b) = &bucket {
            let url = node
                .cfg
                .node(&node.name)
                .map(|n| n.url.clone())
                .unwrap_or_default();
            let _ = b.put(placement::lease_key(&node.name), url.into()).await;
            // Every lease, the configuration's nodes and the ones added since.
            if let Ok(leases) = all_leases(b).await {
                let mut urls = HashMap::new();
                for (name, url) in leases {
                    urls.insert(name, url);
                }
                *node.live.write().unwrap_or_else(|p| p.into_inner()) =
                    urls.keys().cloned().collect();
                *node.urls.write().unwrap_or_else(|p| p.into_inner()) = urls;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Gives each partition R live owners again when owners have been without a lease for longer
/// than `replace_after_secs`: the live node first by name adds owners to the map (compare-and-
/// set); they catch up by replaying the stream (docs/CLUSTER.md § A node lost for good).
async fn replace_lost(node: Arc<Node>) {
    let grace = Duration::from_secs(node.cfg.replace_after_secs);
    if grace.is_zero() {
        return;
    }
    let started = Instant::now();
    let mut seen: HashMap<String, Instant> = HashMap::new();
    let (mut leases, mut placement) = (None, None);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if leases.is_none() {
            leases = node.js.get_key_value(placement::LEASE_BUCKET).await.ok();
        }
        if placement.is_none() {
            placement = node
                .js
                .get_key_value(placement::PLACEMENT_BUCKET)
                .await
                .ok();
        }
        let (Some(l), Some(p)) = (&leases, &placement) else {
            continue;
        };
        // Only what NATS says now: a node that cannot ask decides nothing.
        let Ok(live) = all_leases(l).await else {
            continue;
        };
        let now = Instant::now();
        let live: Vec<String> = live.into_iter().map(|(name, _)| name).collect();
        for n in &live {
            seen.insert(n.clone(), now);
        }
        if live.iter().min() != Some(&node.name) {
            continue;
        }
        let Ok((map, revision)) = read_map(p, &node.cfg).await else {
            continue;
        };
        let configured: Vec<String> = node.cfg.nodes.iter().map(|n| n.name.clone()).collect();
        let members = map.members(&configured);
        let lapsed: Vec<&String> = members
            .iter()
            .filter(|n| now.duration_since(*seen.get(*n).unwrap_or(&started)) > grace)
            .collect();
        if lapsed.is_empty() {
            continue;
        }
        let alive: Vec<String> = members
            .iter()
            .filter(|n| !lapsed.contains(n))
            .cloned()
            .collect();
        let target = map.repaired(&alive);
        if target == map {
            continue;
        }
        let added: usize = (0..map.partitions)
            .map(|q| target.owners(q).len() - map.owners(q).len())
            .sum();
        let text = serde_json::to_vec(&target).unwrap_or_default();
        match p.update(placement::MAP_KEY, text.into(), revision).await {
            Ok(_) => tracing::warn!(
                node = %node.name,
                "{lapsed:?} without a lease for over {} s: {added} partition copies given to live \
                 nodes, which replay them from the stream",
                grace.as_secs()
            ),
            Err(e) => tracing::warn!(
                node = %node.name,
                "replacing {lapsed:?}: the map changed meanwhile ({e})"
            ),
        }
    }
}

/// Every live lease: node name → the URL it announces.
pub(crate) async fn all_leases(
    b: &kv::Store,
) -> std::result::Result<Vec<(String, String)>, String> {
    let mut keys = b.keys().await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(k) = keys.next().await {
        let k = k.map_err(|e| e.to_string())?;
        let Some(name) = k.strip_prefix("node.") else {
            continue;
        };
        if let Ok(Some(url)) = b.get(&k).await {
            out.push((name.to_string(), String::from_utf8_lossy(&url).into_owned()));
        }
    }
    Ok(out)
}

/// Re-reads the map four times a second; a change of this node's partitions starts a new apply
/// session.
async fn watch_map(node: Arc<Node>) {
    let mut bucket = None;
    loop {
        // A quarter second: a rebalance waits for every node to see its map.
        tokio::time::sleep(Duration::from_millis(250)).await;
        if bucket.is_none() {
            bucket = node
                .js
                .get_key_value(placement::PLACEMENT_BUCKET)
                .await
                .ok();
        }
        let Some(b) = &bucket else { continue };
        let Ok((map, revision)) = read_map(b, &node.cfg).await else {
            continue;
        };
        let mut guard = node.map.write().unwrap_or_else(|p| p.into_inner());
        if guard.1 == revision {
            continue;
        }
        let changed = guard.0.owned_by(&node.name) != map.owned_by(&node.name);
        *guard = (map, revision);
        drop(guard);
        if changed {
            node.map_generation.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Runs `f` on a bucket's writer thread, in its queue order.
pub(super) async fn on_writer<T: Send + 'static>(
    bucket: &wink_service::registry::Bucket,
    f: impl FnOnce(&mut wink_engine::store::Store) -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let work = ExclusiveWork(Box::new(move |s: &mut wink_engine::store::Store| {
        let _ = tx.send(f(s));
    }));
    if !bucket.submit(Job::Exclusive(work)) {
        return Err(Error::unavailable(format!(
            "bucket {} is closing",
            bucket.name
        )));
    }
    rx.await
        .map_err(|_| Error::unavailable(format!("bucket {} is closing", bucket.name)))?
}

/// Why an apply session ended before its consumer did.
#[derive(Debug)]
pub(super) enum SessionEnd {
    /// A store failed under the apply: what its bucket holds is known only once a restart's
    /// open has recovered it, so the process stops (exit status 3).
    StoreFailed(String),
    /// Anything else (NATS, the stream, a peer, a map change): a new session tries again.
    Retry(String),
}

impl SessionEnd {
    /// A store's failure.
    pub(super) fn store(e: Error) -> SessionEnd {
        SessionEnd::StoreFailed(e.to_string())
    }
}

impl From<String> for SessionEnd {
    fn from(why: String) -> SessionEnd {
        SessionEnd::Retry(why)
    }
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionEnd::StoreFailed(why) => write!(f, "a store failed: {why}"),
            SessionEnd::Retry(why) => f.write_str(why),
        }
    }
}

/// The apply loop: sessions of one ordered consumer each, restarted when the map changes this
/// node's partitions or the consumer fails.
async fn apply_loop(node: Arc<Node>, reg: Arc<Registry>) {
    let mut dirty = Dirty::default();
    loop {
        let mut ended = apply_session(&node, &reg, &mut dirty).await;
        // What a session applied and left uncommitted (whatever ended it) is committed before
        // the next session reads the records it starts from; never after a store failed.
        if !matches!(ended, Err(SessionEnd::StoreFailed(_))) {
            if let Err(e) = dirty.commit(&node).await {
                ended = Err(e);
            }
        }
        if let Err(e) = ended {
            if let SessionEnd::StoreFailed(e) = &e {
                // Written at once: the exit below would drop what the log's thread holds.
                eprintln!("wink cluster {}: apply: stopping: {e}", node.name);
                // The store failed mid-batch: the process must restart (the open recovers it).
                std::process::exit(3);
            }
            tracing::error!(node = %node.name, "apply: {e}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The stream's identity: its creation time, in nanoseconds since the epoch. A stream deleted
/// and made again counts its sequences anew, and has another.
fn incarnation(info: &stream::Info) -> String {
    info.created.unix_timestamp_nanos().to_string()
}

/// Whether two incarnations are the same stream. Each server of the stream's group keeps the
/// creation time it saw, microseconds apart, and the one asked answers; a stream made again is
/// made seconds later at the least.
fn same_stream(a: &str, b: &str) -> bool {
    match (a.parse::<i128>(), b.parse::<i128>()) {
        (Ok(a), Ok(b)) => (a - b).abs() < 1_000_000_000,
        _ => a == b,
    }
}

/// How many checks, [`DIVERGENCE_GAP`] apart, must all find the mark out of step before the
/// node diverges: a stream's info can lag what its consumers delivered (seen under load, a
/// leader answering from a moment before; and a leader frozen for 30 s answered from before its
/// freeze for over 2 s once thawed, until it learnt it had been replaced), while a lost tail or
/// another stream stays lost. A divergence stops the node vouching until an operator's replay,
/// so waiting 8 s more to be sure is cheap.
const DIVERGENCE_CHECKS: usize = 5;
/// Between two of those checks.
const DIVERGENCE_GAP: Duration = Duration::from_secs(2);

/// What a check of the mark found: a confirmed divergence (why, and the stream's first
/// sequence), none, or that the stream could not be asked.
type Divergence = std::result::Result<Option<(String, u64)>, String>;

/// Whether the stream has lost the message `mark` names, checked [`DIVERGENCE_CHECKS`] times
/// with fresh info: `Some((why, the stream's first sequence))` only when every check says so.
async fn confirmed_divergence(stream: &mut stream::Stream, mark: &Mark) -> Divergence {
    let mut found = None;
    for i in 0..DIVERGENCE_CHECKS {
        if i > 0 {
            tokio::time::sleep(DIVERGENCE_GAP).await;
        }
        let info = stream
            .info()
            .await
            .map_err(|e| format!("the stream's info: {e}"))?
            .clone();
        match check_mark(stream, &info, mark).await? {
            Some(why) => found = Some((why, info.state.first_sequence)),
            None => return Ok(None),
        }
    }
    Ok(found)
}

/// Whether the stream still holds the message `mark` names: `Ok(None)` when it does (or when
/// it can no longer tell: the message aged out of the stream), `Ok(Some(why))` when it does
/// not, `Err` when the stream could not be asked.
async fn check_mark(
    stream: &stream::Stream,
    info: &stream::Info,
    mark: &Mark,
) -> std::result::Result<Option<String>, String> {
    let created = incarnation(info);
    let (first, last) = (info.state.first_sequence, info.state.last_sequence);
    if !same_stream(&mark.stream, &created) {
        return Ok(Some(format!(
            "its records count sequences of another stream (created {}), not of the stream \
             created {created}",
            mark.stream
        )));
    }
    if mark.seq > last {
        return Ok(Some(format!(
            "its records say it applied sequence {}, but the stream ends at {last}: the stream \
             lost its tail",
            mark.seq
        )));
    }
    if mark.seq < first {
        return Ok(None);
    }
    match stream.get_raw_message(mark.seq).await {
        Ok(m) => {
            let now = Mark::of(&created, mark.seq, m.subject.as_str(), &m.payload);
            Ok((now.crc != mark.crc).then(|| {
                format!(
                    "the stream holds another message at sequence {} than the one it applied: \
                     the stream was restored or rewritten",
                    mark.seq
                )
            }))
        }
        Err(e) if e.to_string().to_lowercase().contains("not found") => Ok(Some(format!(
            "the stream no longer holds sequence {}, which it applied",
            mark.seq
        ))),
        Err(e) => Err(format!("reading sequence {} of the stream: {e}", mark.seq)),
    }
}

/// Marks every bucket's records as out of step with the stream, and rewinds them to replay
/// everything the stream holds (idempotent), so that no message the stream holds is skipped.
async fn diverge(
    node: &Node,
    buckets: &[Arc<wink_service::registry::Bucket>],
    why: &str,
    first: u64,
) -> std::result::Result<(), SessionEnd> {
    tracing::error!(
        node = %node.name,
        "NOT VOUCHING for its partitions: {why}; replaying the stream from sequence {first}; \
         `wink cluster replay` once the owners are repaired"
    );
    for b in buckets {
        let why = why.to_string();
        let to = first.saturating_sub(1);
        on_writer(b, move |s| apply::diverge(s, &why, to))
            .await
            .map_err(SessionEnd::store)?;
    }
    *lock(&node.diverged) = Some(why.to_string());
    Ok(())
}

/// A replay asked for by an operator (`wink cluster replay`): every bucket's records rewound to
/// the stream's first sequence and their divergence cleared; a new apply session starts.
pub async fn replay(node: &Arc<Node>, reg: &Registry) -> std::result::Result<u64, String> {
    let mut stream = node
        .js
        .get_stream(placement::STREAM)
        .await
        .map_err(|e| format!("the stream: {e}"))?;
    let first = stream
        .info()
        .await
        .map_err(|e| format!("the stream's info: {e}"))?
        .state
        .first_sequence;
    for b in reg.buckets() {
        on_writer(&b, move |s| apply::replay_from(s, first))
            .await
            .map_err(|e| e.to_string())?;
    }
    *lock(&node.diverged) = None;
    node.map_generation.fetch_add(1, Ordering::SeqCst);
    tracing::info!(node = %node.name, "replaying the stream from sequence {first}, as asked");
    Ok(first)
}

async fn apply_session(
    node: &Arc<Node>,
    reg: &Arc<Registry>,
    dirty: &mut Dirty,
) -> std::result::Result<(), SessionEnd> {
    let generation = node.map_generation.load(Ordering::SeqCst);
    let owned = node.map().owned_by(&node.name);
    let buckets = reg.buckets();
    let mut stream = node
        .js
        .get_stream(placement::STREAM)
        .await
        .map_err(|e| format!("the stream: {e}"))?;
    let info = stream
        .info()
        .await
        .map_err(|e| format!("the stream's info: {e}"))?
        .clone();
    let (first, last) = (info.state.first_sequence, info.state.last_sequence);
    let created = incarnation(&info);
    // No sequence number is trusted blindly: each bucket's records must name a message the
    // stream still holds, as it was.
    let mut diverged = None;
    for b in &buckets {
        let record = on_writer(b, |s| apply::read_record(s))
            .await
            .map_err(|e| e.to_string())?;
        if let Some(why) = record.diverged {
            diverged = Some(why);
        }
        if let Some(mark) = &record.mark {
            if let Some((why, first)) = confirmed_divergence(&mut stream, mark).await? {
                diverge(node, &buckets, &why, first).await?;
                diverged = Some(why);
            }
        }
    }
    *lock(&node.diverged) = diverged;
    // Where each partition of each bucket stopped; the session starts at the lowest.
    let mut start = u64::MAX;
    for b in &buckets {
        let applied = on_writer(b, |s| apply::read_applied(s))
            .await
            .map_err(|e| e.to_string())?;
        for p in &owned {
            start = start.min(applied.get(p).copied().unwrap_or(0) + 1);
        }
    }
    if start == u64::MAX {
        start = 1;
    }
    // Messages from `start` on were written (start ≤ last) but the stream no longer holds the
    // first of them (an empty stream's first sequence is last + 1): they cannot be replayed.
    if start <= last && start < first {
        let why = format!(
            "behind the stream's retention: needs sequence {start}, the stream starts at {first}; \
             copying the partitions from another owner"
        );
        *lock(&node.behind) = Some(why.clone());
        return match super::seed::take_over(node, reg, &owned, first, last).await {
            // The next session starts where the copies stand.
            Ok(()) => Ok(()),
            Err(SessionEnd::Retry(e)) => {
                let why = format!("{why}: {e}");
                *lock(&node.behind) = Some(why.clone());
                tokio::time::sleep(Duration::from_secs(5)).await;
                Err(SessionEnd::Retry(why))
            }
            Err(stop) => Err(stop),
        };
    }
    *lock(&node.behind) = None;
    node.scanned.send_replace(start - 1);
    node.decided.send_replace(start - 1);
    node.catch_up_to.store(last, Ordering::SeqCst);
    node.session.store(generation, Ordering::SeqCst);
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: "wink.>".to_string(),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| format!("creating the consumer: {e}"))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| format!("the consumer's messages: {e}"))?;
    let mut last_advance = Instant::now();
    let mut last_check = Instant::now();
    // The last message scanned.
    let mut mark: Option<Mark> = None;
    // The check of the mark against the stream under way, if one is.
    let mut checking: Option<tokio::task::JoinHandle<Divergence>> = None;
    loop {
        if node.map_generation.load(Ordering::SeqCst) != generation {
            return Ok(());
        }
        if let Some(done) = checking.take_if(|c| c.is_finished()) {
            // A stream that could not be asked is asked again at the next check.
            if let Ok(Ok(Some((why, first)))) = done.await {
                diverge(node, &reg.buckets(), &why, first).await?;
                return Err(why.into());
            }
        }
        // The check runs beside the apply: confirming a doubt takes seconds (a stream's info
        // lags under load), and applying meanwhile is safe (in stream order, idempotent, and
        // what a divergence finds is replayed from the stream's start).
        if checking.is_none()
            && (node.check_stream.swap(false, Ordering::SeqCst)
                || last_check.elapsed() > STREAM_CHECK)
        {
            last_check = Instant::now();
            if let Some(m) = mark.clone() {
                let js = node.js.clone();
                checking = Some(tokio::spawn(async move {
                    let mut stream = js
                        .get_stream(placement::STREAM)
                        .await
                        .map_err(|e| format!("the stream: {e}"))?;
                    confirmed_divergence(&mut stream, &m).await
                }));
            }
        }
        let mut batch: Vec<(String, Message)> = Vec::new();
        let mut crcs: HashMap<u64, u32> = HashMap::new();
        let mut bytes = 0usize;
        let mut last_seq = None;
        while batch.len() < BATCH_MESSAGES && bytes < BATCH_BYTES {
            // The first message is waited for; then the batch takes what the consumer already
            // holds and closes: waiting for more would add to every write's latency, and what
            // arrives while the batch applies makes the next batch.
            let next = if last_seq.is_none() {
                tokio::time::timeout(dirty.patience(), messages.next())
                    .await
                    .ok()
            } else {
                futures_util::FutureExt::now_or_never(messages.next())
            };
            let next = match next {
                None => break,
                Some(None) => return Err(SessionEnd::Retry("the consumer ended".into())),
                Some(Some(Err(e))) => return Err(format!("the consumer: {e}").into()),
                Some(Some(Ok(m))) => m,
            };
            let seq = match next.info() {
                Ok(i) => i.stream_sequence,
                Err(e) => return Err(format!("a message without stream info: {e}").into()),
            };
            last_seq = Some(seq);
            let m = Mark::of(&created, seq, next.subject.as_str(), &next.payload);
            crcs.insert(seq, m.crc);
            mark = Some(m);
            let Some((bucket, partition)) = message::parse_subject(next.subject.as_str()) else {
                continue;
            };
            if !owned.contains(&partition) {
                continue;
            }
            match Change::decode(&next.payload) {
                Ok(change) => {
                    bytes += change.value.len();
                    batch.push((
                        bucket.to_string(),
                        Message {
                            seq,
                            partition,
                            change,
                        },
                    ));
                }
                Err(why) => tracing::warn!(node = %node.name, "message {seq} skipped: {why}"),
            }
        }
        let Some(through) = last_seq else {
            if !dirty.is_empty() {
                dirty.commit(node).await?;
                continue;
            }
            // Idle: let every bucket's record catch up now and then, so a restart starts late.
            if last_advance.elapsed() > Duration::from_secs(5) {
                let at = *node.scanned.borrow();
                if at > 0 {
                    // Buckets opened since the session started included.
                    for b in &reg.buckets() {
                        let parts = owned.clone();
                        let m = mark.clone();
                        on_writer(b, move |s| {
                            apply::apply_batch(s, &[], Some((at, &parts)), m.as_ref())
                        })
                        .await
                        .map_err(SessionEnd::store)?;
                    }
                }
                last_advance = Instant::now();
            }
            continue;
        };
        let mut per_bucket: HashMap<String, Vec<Message>> = HashMap::new();
        for (b, m) in batch {
            per_bucket.entry(b).or_default().push(m);
        }
        // A bucket not open here yet is opened from the catalog before anything of the batch
        // is applied: a batch stopped half way would leave its messages behind the records of
        // the buckets applied.
        let mut opened = Vec::new();
        for (name, msgs) in per_bucket {
            match super::catalog::for_apply(node, &name).await {
                Ok(Some(b)) => opened.push((name, b, msgs)),
                Ok(None) => tracing::warn!(
                    node = %node.name,
                    "{} messages of bucket {name}, which the cluster has not, skipped",
                    msgs.len()
                ),
                Err(e) => return Err(format!("opening bucket {name}: {e}").into()),
            }
        }
        // The buckets apply side by side, each on its writer thread; writers are answered as
        // soon as every bucket of the batch has decided. The commit waits for the batch that
        // finds the last one COMMIT_EVERY old (or for a pause in the stream): a few commits
        // a second rather than one a batch, and none between a message and its answer.
        let commit = dirty.due();
        let crcs = Arc::new(crcs);
        let left = Arc::new(AtomicUsize::new(opened.len()));
        let applies = opened.into_iter().map(|(name, b, msgs)| {
            let (parts, m, n) = (owned.clone(), mark.clone(), node.clone());
            let (crcs, left) = (crcs.clone(), left.clone());
            async move {
                let report = on_writer(&b, move |s| {
                    apply::apply_batch_deciding(
                        s,
                        &msgs,
                        Some((through, &parts)),
                        m.as_ref(),
                        commit,
                        |r| n.decide(r, &msgs, &crcs, through, &left),
                    )
                })
                .await
                .map_err(|e| SessionEnd::StoreFailed(format!("bucket {name}: {e}")))?;
                for r in report.refused {
                    tracing::warn!(node = %node.name, "bucket {name}: refused {r}");
                }
                Ok::<_, SessionEnd>((name, b))
            }
        });
        let applied = futures_util::future::try_join_all(applies).await?;
        node.decided.send_modify(|d| *d = (*d).max(through));
        if commit {
            // The batch's buckets committed with it; the others applied to since commit now.
            for (name, _) in &applied {
                dirty.buckets.remove(name);
            }
            dirty.through = Some(through);
            dirty.commit(node).await?;
        } else {
            dirty.add(applied, through);
        }
    }
}

/// How long an apply may stay uncommitted while messages keep coming: what a read of a
/// partition that a write has just been answered for waits at most, beside the commit itself.
const COMMIT_EVERY: Duration = Duration::from_millis(10);

/// The batches applied and decided since the last commit: the buckets, through which
/// sequence, since when. Kept across apply sessions, so that the one ending commits them.
#[derive(Default)]
struct Dirty {
    buckets: HashMap<String, Arc<wink_service::registry::Bucket>>,
    /// Every message up to it is applied (`scanned` moves to it at the commit).
    through: Option<u64>,
    since: Option<Instant>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        self.through.is_none()
    }

    /// Whether the next batch commits.
    fn due(&self) -> bool {
        self.since.is_some_and(|t| t.elapsed() >= COMMIT_EVERY)
    }

    /// How long to wait for the next message before committing what is applied.
    fn patience(&self) -> Duration {
        match self.since {
            Some(t) => COMMIT_EVERY.saturating_sub(t.elapsed()),
            None => Duration::from_millis(500),
        }
    }

    fn add(&mut self, buckets: Vec<(String, Arc<wink_service::registry::Bucket>)>, through: u64) {
        self.buckets.extend(buckets);
        self.through = Some(through);
        self.since.get_or_insert_with(Instant::now);
    }

    /// Commits every bucket applied to since the last commit, then moves `scanned`.
    async fn commit(&mut self, node: &Node) -> std::result::Result<(), SessionEnd> {
        let Some(through) = self.through.take() else {
            return Ok(());
        };
        let commits = self.buckets.drain().map(|(name, b)| async move {
            on_writer(&b, |s| s.batch().commit().map(drop))
                .await
                .map_err(|e| SessionEnd::StoreFailed(format!("bucket {name}: {e}")))
        });
        futures_util::future::try_join_all(commits).await?;
        self.since = None;
        node.scanned.send_replace(through);
        Ok(())
    }
}

/// 100-ns ticks from the Gregorian epoch of version-1 UUIDs (1582-10-15) to the Unix epoch.
const TICKS_TO_UNIX: u64 = 0x01B2_1DD2_1381_4000;

/// A cluster's writes: published to the log (durably), acknowledged once an owner of the
/// title's partition has applied them (docs/CLUSTER.md § What a 201 means).
impl Writes for Node {
    fn write(&self, w: Write) -> Pending<'_, Receipt> {
        Box::pin(async move {
            let Write {
                bucket,
                domain,
                title,
                change,
                arrival,
            } = w;
            match super::catalog::knows(self, &bucket).await {
                Ok(true) => {}
                Ok(false) => return Err(wink_service::registry::missing(&bucket)),
                Err(e) => {
                    return Err(ServiceError::unavailable(
                        format!("the cluster's bucket catalog: {e}"),
                        2,
                    ))
                }
            }
            let change = self.message_of(domain, title, change, arrival);
            let (sent, outcome) = self.write_change(&bucket, &change).await?;
            let done = match outcome {
                Outcome::Stored => Done::Stored {
                    rev: change.rev,
                    tid: change.tid,
                },
                Outcome::Removed { removed } => Done::Removed(removed),
                Outcome::Lifted { lifted } => Done::Lifted(lifted),
                // Only a put is refused as taken down.
                Outcome::TakenDown => {
                    return Err(ServiceError::Refused(Refusal::TakenDown {
                        domain: change.domain,
                        title: change.title,
                        rev: change.rev,
                    }))
                }
                Outcome::Refused { why } => return Err(ServiceError::Refused(Refusal::Rule(why))),
                Outcome::PreconditionFailed { why } => {
                    return Err(ServiceError::Refused(Refusal::Precondition(why)))
                }
            };
            Ok(Receipt {
                done,
                seq: Some(sent.seq),
            })
        })
    }

    fn bucket_for_write(&self, name: String) -> Pending<'_, Arc<wink_service::registry::Bucket>> {
        Box::pin(async move {
            let reg = &self.buckets.registry;
            if let Ok(Some(b)) = reg.bucket(&name) {
                return Ok(b);
            }
            // Made through another node a moment ago: the catalog read again opens it here.
            if let Err(e) = super::catalog::knows(self, &name).await {
                return Err(ServiceError::unavailable(
                    format!("the cluster's bucket catalog: {e}"),
                    2,
                ));
            }
            reg.open_bucket(&name)
        })
    }

    fn create_bucket(
        &self,
        name: String,
        spec: wink_service::spec::BucketSpec,
    ) -> wink_service::Creating<'_> {
        Box::pin(super::catalog::create(self, name, spec))
    }
}

/// A cluster's reads: a node answers for the partitions it owns once it has caught up on them;
/// other reads go to an owner first (live leases first); a read that names a log sequence
/// (`x-wink-min-seq`) waits until this node has applied it (docs/CLUSTER.md § Reads).
impl ReadGate for Node {
    fn lists_titles(&self) -> bool {
        true
    }

    fn titles(
        &self,
        bucket: &str,
        domain: &str,
        after: Option<String>,
        limit: usize,
    ) -> Pending<'_, Vec<String>> {
        let (bucket, domain) = (bucket.to_string(), domain.to_string());
        Box::pin(async move { super::listing::titles(self, &bucket, &domain, after, limit).await })
    }

    fn admit(&self, bucket: &str, domain: &str) -> std::result::Result<(), ServiceError> {
        if domain == message::RESERVED_DOMAIN {
            return Err(ServiceError::Invalid(format!(
                "domain {domain} is reserved for the cluster's own records"
            )));
        }
        // Any bucket: one the cluster has not is 404 where it is looked for (the registry, the
        // catalog), and `PUT P` makes one.
        let _ = bucket;
        Ok(())
    }

    fn peers(&self, domain: &str, title: &str, forwarded: bool) -> Vec<Peer> {
        let partition = message::partition_of(domain, title, self.cfg.partitions);
        let owners: Vec<String> = read(&self.map).0.owners(partition).to_vec();
        let vouched = owners.contains(&self.name) && self.vouches();
        if vouched || forwarded {
            return Vec::new();
        }
        let live = read(&self.live).clone();
        let mut order: Vec<&String> = owners.iter().filter(|n| **n != self.name).collect();
        order.sort_by_key(|n| !live.contains(n));
        order
            .into_iter()
            .filter_map(|name| {
                Some(Peer {
                    name: name.clone(),
                    url: self.url_of(name)?,
                })
            })
            .collect()
    }

    fn ready(
        &self,
        domain: &str,
        title: &str,
        min_seq: Option<u64>,
        forwarded: bool,
    ) -> Pending<'_, ()> {
        let partition = message::partition_of(domain, title, self.cfg.partitions);
        Box::pin(async move {
            let owners: Vec<String> = read(&self.map).0.owners(partition).to_vec();
            let status = self.status();
            if let Some(why) = status.behind.as_ref().or(status.diverged.as_ref()) {
                return Err(ServiceError::unavailable(
                    format!(
                        "node {} cannot answer for partition {partition}: {why}",
                        self.name
                    ),
                    10,
                ));
            }
            if !owners.contains(&self.name) && !forwarded {
                return Err(ServiceError::unavailable(
                    format!(
                        "no owner of partition {partition} ({}) answers",
                        owners.join(", ")
                    ),
                    2,
                ));
            }
            if owners.contains(&self.name) {
                self.wait_committed(Some(partition)).await?;
            }
            if let Some(min) = min_seq {
                if !self.wait_scanned(min).await {
                    return Err(ServiceError::unavailable(
                        format!(
                            "node {} has applied the stream up to {}, not yet {min} ({MIN_SEQ})",
                            self.name,
                            *self.scanned.borrow()
                        ),
                        1,
                    ));
                }
            }
            Ok(())
        })
    }
}
