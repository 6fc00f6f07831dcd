//! A cluster node's own routes, beside the API: `/_cluster` (the node's status),
//! `/_cluster/outcome/SEQ` (what applying a message did), `/_cluster/replay`,
//! `/_cluster/snapshot/BUCKET`, `/_cluster/copy/…`, `/_cluster/digest/…`, `/_cluster/held/…`,
//! `/_cluster/repair/…` and `/_cluster/dump/…` (docs/CLUSTER.md). The HTTP front mounts them as
//! an [`Extension`]; it does not know what they are.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Response, StatusCode};

use super::apply;
use super::digest;
use super::dump;
use super::listing;
use super::message::{partition_of, Change, Kind, RESERVED_DOMAIN};
use super::node::{on_writer, Node};
use super::seed;
use wink_serve::Problem;
use wink_serve::{json, Answer, App, Extension};
use wink_service::spec::valid_bucket_name;

type Result<T> = std::result::Result<T, Problem>;

/// The routes of `node`.
pub struct ClusterRoutes {
    node: Arc<Node>,
}

impl ClusterRoutes {
    /// The `/_cluster` routes of `node`.
    pub fn new(node: Arc<Node>) -> ClusterRoutes {
        ClusterRoutes { node }
    }
}

impl Extension for ClusterRoutes {
    /// `/_cluster` and everything under it, to one handler: their paths are few, and their
    /// segments (a bucket, an id, a partition) are checked by the route that takes them.
    fn routes(&self) -> Router<Arc<App>> {
        let node = self.node.clone();
        let answer = move |State(app): State<Arc<App>>, req: Request| {
            let node = node.clone();
            async move {
                let (parts, _) = req.into_parts();
                match cluster_route(&app, &node, &parts).await? {
                    Some(a) => Ok::<_, Problem>(a),
                    None => Err(Problem::not_found(format!("no route {}", parts.uri.path()))),
                }
            }
        };
        Router::new()
            .route("/_cluster", any(answer.clone()))
            .route("/_cluster/{*rest}", any(answer))
    }
}

/// `/_cluster/copy/BUCKET[/ID[/PARTITION]]`: copies of this node's stores that another owner
/// takes a partition over from (docs/CLUSTER.md § A node lost for good). With the token only.
async fn cluster_copy(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    app.auth.check(&req.headers)?;
    let parts: Vec<&str> = rest.split('/').collect();
    if !valid_bucket_name(parts[0]) {
        return Err(Problem::bad_request(format!("bucket name {:?}", parts[0])));
    }
    match (&req.method, parts.as_slice()) {
        (&Method::POST, [bucket]) => {
            let started = seed::start_copy(node, &app.registry, bucket).await?;
            Ok(json(StatusCode::OK, &started))
        }
        (&Method::DELETE, [bucket, id]) => {
            seed::end_copy(&app.registry, bucket, id)?;
            Ok(json(
                StatusCode::OK,
                &serde_json::json!({ "message": "Copy dropped." }),
            ))
        }
        (&Method::GET, [bucket, id, partition]) => {
            let partition: u32 = partition
                .parse()
                .map_err(|_| Problem::bad_request("/_cluster/copy/BUCKET/ID/PARTITION"))?;
            let cursor = Query::of(req).get("cursor").map(str::to_string);
            let (body, next) = seed::copy_page(
                node,
                &app.registry,
                bucket,
                id,
                partition,
                cursor.as_deref(),
            )
            .await?;
            let mut a = octets(body);
            if let Some(next) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
                a.headers_mut().insert(seed::NEXT, next);
            }
            Ok(a)
        }
        (_, [_]) => Err(Problem::method_not_allowed("POST")),
        (_, [_, _]) => Err(Problem::method_not_allowed("DELETE")),
        (_, [_, _, _]) => Err(Problem::method_not_allowed("GET")),
        _ => Err(Problem::not_found(format!("no route {}", req.uri.path()))),
    }
}

/// `/_cluster/titles/BUCKET/DOMAIN?partitions=P,…&limit=N[&after=TITLE]`: this node's part
/// of a whole-cluster title listing (docs/CLUSTER.md § Read), from its own store: the titles
/// of those partitions after `after` in key order, at most N, as a JSON array. Only for
/// partitions it owns and vouches for (503 otherwise: the asker tries no other way).
fn cluster_titles(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    let usage = "/_cluster/titles/BUCKET/DOMAIN?partitions=P,…&limit=N[&after=TITLE]";
    let (bucket, domain) = rest
        .split_once('/')
        .ok_or_else(|| Problem::bad_request(usage))?;
    let decode = |t: &str| percent_decode(t).ok_or_else(|| Problem::bad_request(usage));
    let (bucket, domain) = (decode(bucket)?, decode(domain)?);
    if !valid_bucket_name(&bucket) {
        return Err(Problem::bad_request(format!("bucket name {bucket:?}")));
    }
    let query = Query::of(req);
    let param = |name: &str| query.get(name);
    let map = node.map();
    let partitions: Vec<u32> = param("partitions")
        .ok_or_else(|| Problem::bad_request(usage))?
        .split(',')
        .map(|p| p.parse::<u32>().ok().filter(|p| *p < map.partitions))
        .collect::<Option<_>>()
        .ok_or_else(|| Problem::bad_request(usage))?;
    let limit = param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| (1..=listing::MAX_PART).contains(l))
        .ok_or_else(|| Problem::bad_request(usage))?;
    node.answers_for(&partitions)?;
    let titles = tokio::task::block_in_place(|| {
        listing::local_titles(
            &app.registry,
            &bucket,
            &domain,
            &partitions,
            map.partitions,
            param("after"),
            limit,
        )
    })?;
    Ok(json(StatusCode::OK, &titles))
}

/// `GET /_cluster/dump/BUCKET/PARTITION[?after=CURSOR][&domain=D][&max_bytes=N]`: a page of the
/// partition's titles with their renders and values, in key order, from this owner's store
/// (docs/CLUSTER.md § Export). With the token only; 503 from a node that does not own the
/// partition or does not vouch for it.
fn cluster_dump(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    if req.method != Method::GET {
        return Err(Problem::method_not_allowed("GET"));
    }
    app.auth.check(&req.headers)?;
    let usage = "/_cluster/dump/BUCKET/PARTITION[?after=CURSOR][&domain=D][&max_bytes=N]";
    let (bucket, partition) = rest
        .split_once('/')
        .ok_or_else(|| Problem::bad_request(usage))?;
    if !valid_bucket_name(bucket) {
        return Err(Problem::bad_request(format!("bucket name {bucket:?}")));
    }
    let partition: u32 = partition.parse().map_err(|_| Problem::bad_request(usage))?;
    let query = Query::of(req);
    let (body, next, settings) = dump::page(
        node,
        &app.registry,
        bucket,
        partition,
        query.get("after"),
        query.get("domain"),
        query.get("max_bytes"),
    )?;
    let mut a = octets(body);
    let h = a.headers_mut();
    if let Some(next) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        h.insert(seed::NEXT, next);
    }
    if let Ok(v) = HeaderValue::from_str(&settings) {
        h.insert(dump::SETTINGS, v);
    }
    Ok(a)
}

/// An answer of bytes in one of the node's own framings.
fn octets(body: Vec<u8>) -> Answer {
    let mut a = Response::new(Full::new(Bytes::from(body)));
    a.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    a
}

/// A path segment's percent-escapes decoded, when they make UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let decoded = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()?;
    Some(decoded.into_owned())
}

/// `GET /_cluster/digest/BUCKET/PARTITION[?titles=1[&after=CURSOR]]`: the digest of what this
/// owner holds of the partition, or a page of its per-title digests (docs/CLUSTER.md § Verify
/// over HTTP). With the token only; 503 from a node that does not own the partition.
async fn cluster_digest(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    if req.method != Method::GET {
        return Err(Problem::method_not_allowed("GET"));
    }
    app.auth.check(&req.headers)?;
    let Some((bucket, partition)) = rest.split_once('/') else {
        return Err(Problem::not_found(format!("no route {}", req.uri.path())));
    };
    if !valid_bucket_name(bucket) {
        return Err(Problem::bad_request(format!("bucket name {bucket:?}")));
    }
    let partition: u32 = partition
        .parse()
        .ok()
        .filter(|p| *p < node.map().partitions)
        .ok_or_else(|| Problem::bad_request("/_cluster/digest/BUCKET/PARTITION"))?;
    let query = Query::of(req);
    let param = |name: &str| query.get(name);
    let check = match param("check") {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => return Err(Problem::bad_request(format!("check={other:?}: 0 or 1"))),
    };
    let reg = &app.registry;
    if param("titles").is_some() {
        let page = digest::title_page(node, reg, bucket, partition, param("after"), check).await?;
        return Ok(json(StatusCode::OK, &page));
    }
    let d = digest::partition_digest(node, reg, bucket, partition, check).await?;
    Ok(json(StatusCode::OK, &d))
}

/// The bucket and partition of `/_cluster/held/BUCKET/PARTITION` or `/_cluster/repair/…`,
/// asked with `method` and the token: a partition this node owns and vouches for (503
/// otherwise), and the bucket open here.
fn owned_partition(
    app: &App,
    node: &Node,
    req: &hyper::http::request::Parts,
    rest: &str,
    method: Method,
) -> Result<(Arc<wink_service::registry::Bucket>, u32)> {
    if req.method != method {
        return Err(Problem::method_not_allowed(method.as_str()));
    }
    app.auth.check(&req.headers)?;
    let Some((bucket, partition)) = rest.split_once('/') else {
        return Err(Problem::not_found(format!("no route {}", req.uri.path())));
    };
    if !valid_bucket_name(bucket) {
        return Err(Problem::bad_request(format!("bucket name {bucket:?}")));
    }
    let map = node.map();
    let partition: u32 = partition
        .parse()
        .ok()
        .filter(|p| *p < map.partitions)
        .ok_or_else(|| Problem::bad_request("BUCKET/PARTITION"))?;
    node.answers_for(&[partition])?;
    match app.registry.bucket(bucket) {
        Ok(Some(b)) => Ok((b, partition)),
        _ => Err(Problem::not_found(format!("no bucket {bucket}"))),
    }
}

/// 400 unless `domain`/`title` is a title of `partition` (never of the reserved domain).
fn title_of_partition(node: &Node, domain: &str, title: &str, partition: u32) -> Result<()> {
    if domain == RESERVED_DOMAIN || partition_of(domain, title, node.map().partitions) != partition
    {
        return Err(Problem::bad_request(format!(
            "{domain}/{title} is not a title of partition {partition}"
        )));
    }
    Ok(())
}

/// `GET /_cluster/held/BUCKET/PARTITION?domain=D&title=T`: what this owner holds of one title
/// of the partition, with the values, for a repair to copy to an owner that lacks it
/// (docs/CLUSTER.md § Repair): frames (a big-endian u32 length, then a [`Change`]) of its
/// take-downs, then of each render whose value reads back intact. A render whose value fails
/// its check is never sent; the header `x-wink-damaged` counts them. With the token only.
///
/// [`Change`]: super::message::Change
async fn cluster_held(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    let (b, partition) = owned_partition(app, node, req, rest, Method::GET)?;
    let query = Query::of(req);
    let usage = "/_cluster/held/BUCKET/PARTITION?domain=D&title=T";
    let (Some(domain), Some(title)) = (query.get("domain"), query.get("title")) else {
        return Err(Problem::bad_request(usage));
    };
    let (domain, title) = (domain.to_string(), title.to_string());
    title_of_partition(node, &domain, &title, partition)?;
    let (items, damaged) = on_writer(&b, move |store| store.copy_title(&domain, &title))
        .await
        .map_err(|e| Problem::from_store(&e))?;
    let mut body = Vec::new();
    for item in items {
        let frame = seed::change_of(item).encode();
        body.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        body.extend_from_slice(&frame);
    }
    let mut a = octets(body);
    a.headers_mut()
        .insert(DAMAGED, HeaderValue::from(damaged.len()));
    Ok(a)
}

/// Header of `/_cluster/held/…`'s answer: renders left out because their values failed.
pub const DAMAGED: &str = "x-wink-damaged";

/// `POST /_cluster/repair/BUCKET/PARTITION` with one [`Change`] (a put or a take-down of a
/// title of the partition) as its body: applied to this owner's store by the store's
/// precedence, as any put or take-down, outside the stream (docs/CLUSTER.md § Repair). Answers
/// what applying it did ([`Outcome`]). With the token only.
///
/// [`Change`]: super::message::Change
/// [`Outcome`]: super::apply::Outcome
async fn cluster_repair(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    let (b, partition) = owned_partition(app, node, req, rest, Method::POST)?;
    // A value the store takes, and its framing (a key and a content type are far shorter).
    let limit = b.config.max_value.saturating_add(1 << 20);
    let over = format!("a repair's change is over this bucket's {limit} bytes");
    let bytes = app.read_body(req, limit, &over).await?;
    let change = Change::decode(&bytes).map_err(Problem::bad_request)?;
    title_of_partition(node, &change.domain, &change.title, partition)?;
    if matches!(change.kind, Kind::Lift | Kind::LiftTitle) {
        return Err(Problem::bad_request(
            "a repair applies puts and take-downs only",
        ));
    }
    let outcome = on_writer(&b, move |store| apply::apply_repair(store, &change))
        .await
        .map_err(|e| Problem::from_store(&e))?;
    Ok(json(StatusCode::OK, &outcome))
}

/// A request's query, decoded: name and value pairs.
struct Query(Vec<(String, String)>);

impl Query {
    fn of(req: &hyper::http::request::Parts) -> Query {
        let pairs = req
            .uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned());
        Query(pairs.map(Iterator::collect).unwrap_or_default())
    }

    /// The first value of `name`.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A node's own `/_cluster` routes; `None` for any other path.
async fn cluster_route(
    app: &App,
    node: &Arc<Node>,
    req: &hyper::http::request::Parts,
) -> Result<Option<Answer>> {
    let path = req.uri.path();
    if path == "/_cluster" {
        if req.method != Method::GET {
            return Err(Problem::method_not_allowed("GET"));
        }
        let mut status = node.status();
        status.buckets = app
            .registry
            .buckets()
            .iter()
            .map(|b| b.name.clone())
            .collect();
        return Ok(Some(json(StatusCode::OK, &status)));
    }
    if let Some(seq) = path.strip_prefix("/_cluster/outcome/") {
        if req.method != Method::GET {
            return Err(Problem::method_not_allowed("GET"));
        }
        let seq: u64 = seq
            .parse()
            .map_err(|_| Problem::bad_request("/_cluster/outcome/SEQUENCE"))?;
        let query = Query::of(req);
        let param = |name: &str| query.get(name);
        let (Some(partition), Some(crc)) = (
            param("partition").and_then(|p| p.parse::<u32>().ok()),
            param("crc").and_then(|c| u32::from_str_radix(c, 16).ok()),
        ) else {
            return Err(Problem::bad_request("?partition=P&crc=HEX"));
        };
        if !node.map().owned_by(&node.name).contains(&partition) {
            return Err(Problem::unavailable(
                format!("node {} does not own partition {partition}", node.name),
                1,
            ));
        }
        return match node.local_outcome(seq, crc, node.apply_patience()).await {
            Some(o) => Ok(Some(json(StatusCode::OK, &o))),
            None => Err(Problem::unavailable(
                format!(
                    "node {} has no outcome of sequence {seq} (not applied in time)",
                    node.name
                ),
                1,
            )),
        };
    }
    if path == "/_cluster/replay" {
        if req.method != Method::POST {
            return Err(Problem::method_not_allowed("POST"));
        }
        app.auth.check(&req.headers)?;
        let from = super::node::replay(node, &app.registry)
            .await
            .map_err(|e| Problem::unavailable(format!("replay: {e}"), 2))?;
        return Ok(Some(json(
            StatusCode::OK,
            &serde_json::json!({ "message": "Replaying.", "from": from }),
        )));
    }
    if let Some(rest) = path.strip_prefix("/_cluster/digest/") {
        return cluster_digest(app, node, req, rest).await.map(Some);
    }
    if let Some(rest) = path.strip_prefix("/_cluster/repair/") {
        return cluster_repair(app, node, req, rest).await.map(Some);
    }
    if let Some(rest) = path.strip_prefix("/_cluster/held/") {
        return cluster_held(app, node, req, rest).await.map(Some);
    }
    if let Some(rest) = path.strip_prefix("/_cluster/titles/") {
        if req.method != Method::GET {
            return Err(Problem::method_not_allowed("GET"));
        }
        committed(node).await?;
        return cluster_titles(app, node, req, rest).map(Some);
    }
    if let Some(rest) = path.strip_prefix("/_cluster/dump/") {
        committed(node).await?;
        return cluster_dump(app, node, req, rest).map(Some);
    }
    if let Some(rest) = path.strip_prefix("/_cluster/copy/") {
        return cluster_copy(app, node, req, rest).await.map(Some);
    }
    if let Some(bucket) = path.strip_prefix("/_cluster/snapshot/") {
        if req.method != Method::POST {
            return Err(Problem::method_not_allowed("POST"));
        }
        app.auth.check(&req.headers)?;
        if !valid_bucket_name(bucket) {
            return Err(Problem::bad_request(format!("bucket name {bucket:?}")));
        }
        let dir = node.snapshot(&app.registry, bucket).await?;
        return Ok(Some(json(
            StatusCode::OK,
            &serde_json::json!({ "snapshot": dir }),
        )));
    }
    Ok(None)
}

/// Waits until what this node has applied is committed: listings and dumps then show every
/// write a 201 answered for (its owner may answer before its commit has synced).
async fn committed(node: &Node) -> Result<()> {
    Ok(node.wait_committed(None).await?)
}
