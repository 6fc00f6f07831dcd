//! The routes: RESTBase's key_rev_value API under `/{domain}/sys/key_rev_value/{bucket}` (`P`),
//! plus `/_health` and `/metrics`. Every route, with examples, is in docs/HTTP.md.
//!
//! | path | methods |
//! |---|---|
//! | `P` | `PUT` (create the bucket, or check its settings), `GET` (its settings) |
//! | `P/` | `GET`: the domain's titles, paged |
//! | `P/{title}` | `GET`/`HEAD` the latest render (`?as_of=T`: the latest then), `DELETE` |
//! | `P/{title}/` | `GET`: the title's renders, newest first, paged |
//! | `P/{title}/{rev}` | `GET`/`HEAD` the newest render of the revision, `PUT`, `DELETE` |
//! | `P/{title}/{rev}/{tid}` | `GET`/`HEAD` that render, `PUT` |
//! | `P/{title}/_lift`, `P/{title}/{rev}/_lift` | `POST`: lift a take-down |
//!
//! axum's router matches the raw path; then each segment is percent-decoded on its own (so a
//! title's `/` arrives as `%2F` in one segment: axum's own path extractors decode the whole
//! path first). Nothing of a path but a validated bucket name ever names a file. (`DELETE` takes
//! down; `_lift` lifts.)
//!
//! A request passes, in order: [`handle`] (head size, request id, the answer's common headers,
//! metrics, logs, the body no route read), the router, [`admit`] (the path's segments decoded,
//! the read gate's admission, a title's reads answered elsewhere or later, the metrics label),
//! the route's methods (405 for another), its handler. A handler's [`Problem`]
//! is rendered by [`handle`], which knows the request's method and target.
//!
//! One file past 900 lines on purpose: the table above is the whole API, and each route's
//! handler sits beside the parsing of its path and query, so a reader checks one against the
//! other without leaving the file.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Instant, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::handler::Handler;
use axum::middleware::{from_fn_with_state, Next};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body as _, Incoming};
use hyper::header::{
    HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LANGUAGE, CONTENT_LENGTH,
    CONTENT_TYPE, ETAG, IF_MATCH, IF_NONE_MATCH, LAST_MODIFIED,
};
use hyper::http::request::Parts;
use hyper::{HeaderMap, Method, Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde::Serialize;
use tower::ServiceExt as _;
use uuid::Uuid;

use super::auth::Auth;
use super::limits::BodyLimits;
use super::metrics::{Metrics, Route};
use super::problem::Problem;
use wink_engine::store::Which;
use wink_engine::store::{
    key, Got, Labels, RenderCursor, State as RenderState, Store, TitlePosition,
};
use wink_service::registry::{self, Bucket, CreateError, Created, ReadError, Registry};
use wink_service::spec::{describe, valid_bucket_name, BucketSpec};
use wink_service::{Change, Done, Preconditions, ReadGate, Receipt, ServiceError, Tags};
use wink_service::{Write, Writes};

/// A listing's page size when the request does not say.
const DEFAULT_LIMIT: usize = 125;
/// The largest page a listing returns.
const MAX_LIMIT: usize = 1000;
/// The largest body of a bucket's settings.
const MAX_SETTINGS: usize = 64 << 10;

/// What every request handler shares.
pub struct App {
    /// The data root's buckets.
    pub registry: Arc<Registry>,
    /// Where writes go: this node's group commit, or the cluster's log.
    pub(crate) writes: Arc<dyn Writes>,
    pub(crate) metrics: Arc<Metrics>,
    /// The bearer token changes need.
    pub auth: Auth,
    pub(crate) limits: BodyLimits,
    /// Seals the listings' cursors (see [`super::cursor`]).
    pub(crate) cursors: super::cursor::CursorKey,
    /// Where reads are answered: here, or (in a cluster) by another node, or after a wait.
    pub gate: Arc<dyn ReadGate>,
    /// Routes of a layer above the API (a cluster node's `/_cluster`).
    pub extension: Option<Arc<dyn Extension>>,
}

impl App {
    /// The request's body, for a route of an [`Extension`]: read as the API's routes read
    /// theirs (the server's body limits, its timeout, its in-flight bytes), and refused (413,
    /// `over` its detail) past `within` bytes. The front keeps the body aside until a route
    /// takes it: a request's body is read once.
    pub async fn read_body(&self, parts: &Parts, within: u64, over: &str) -> Result<Bytes> {
        let unread = parts
            .extensions
            .get::<Unread>()
            .cloned()
            .ok_or_else(|| Problem::bad_request("the request has no body"))?;
        let within = super::limits::Within {
            bytes: within,
            over: over.to_string(),
        };
        let body = self
            .limits
            .read_within(parts, unread.take()?, &self.metrics, Some(within))
            .await?;
        Ok(body.bytes)
    }
}

/// Routes of a layer above the API (a cluster node's own), merged into the API's router.
pub trait Extension: Send + Sync {
    /// The routes; their paths are none of the API's.
    fn routes(&self) -> Router<Arc<App>>;
}

/// An answer: head and a whole body.
pub type Answer = Response<Full<Bytes>>;
type Result<T> = std::result::Result<T, Problem>;

/// The bucket and domain a request is about.
#[derive(Clone)]
struct Place {
    domain: String,
    bucket: String,
}

/// A route's pattern under `P`, in axum's syntax.
macro_rules! p {
    ($tail:literal) => {
        concat!("/{domain}/sys/key_rev_value/{bucket}", $tail)
    };
}

/// The router of the API (and of `app`'s extension), as the table above has it.
pub fn router(app: Arc<App>) -> Router {
    let mut router = Router::new()
        .route(
            p!(""),
            get(get_bucket)
                .put(put_bucket)
                .fallback(refuse("GET, HEAD, PUT")),
        )
        .route(p!("/"), get(get_titles).fallback(refuse("GET, HEAD")))
        .route(
            p!("/{title}"),
            get(get_latest)
                .delete(take_down_title)
                .fallback(refuse("GET, HEAD, DELETE")),
        )
        .route(
            p!("/{title}/"),
            get(get_renders).fallback(refuse("GET, HEAD")),
        )
        .route(
            p!("/{title}/{rev}"),
            get(get_revision)
                .put(put_revision)
                .delete(take_down_revision)
                .fallback(refuse("GET, HEAD, PUT, DELETE")),
        )
        .route(
            p!("/{title}/{rev}/{tid}"),
            get(get_render)
                .put(put_render_tid)
                .fallback(refuse("GET, HEAD, PUT")),
        )
        .route(
            p!("/{title}/_lift"),
            post(lift_title).fallback(refuse("POST")),
        )
        .route(
            p!("/{title}/{rev}/_lift"),
            post(lift_revision).fallback(refuse("POST")),
        )
        .route_layer(from_fn_with_state(app.clone(), admit))
        .route("/_health", get(health).fallback(refuse("GET, HEAD")))
        .route("/metrics", get(metrics).fallback(refuse("GET, HEAD")));
    if let Some(extension) = &app.extension {
        router = router.merge(extension.routes());
    }
    router.fallback(unrouted).with_state(app)
}

/// The metrics label of a request the router matched to `pattern` (a 405's is its route's), or
/// of one outside the API by its path.
fn route_of(pattern: &str, method: &Method, query: Option<&str>) -> Route {
    let Some(tail) = pattern.strip_prefix(p!("")) else {
        return match pattern {
            "/_health" => Route::Health,
            "/metrics" => Route::Metrics,
            _ => Route::Other,
        };
    };
    let write = *method == Method::PUT;
    let delete = *method == Method::DELETE;
    match tail {
        "" if write => Route::BucketPut,
        "" => Route::BucketGet,
        "/" => Route::Titles,
        "/{title}" if delete => Route::TakeDown,
        // A title's reads are counted apart with `as_of` and without: their costs differ.
        "/{title}" if as_of(query) => Route::AsOf,
        "/{title}" => Route::Latest,
        "/{title}/" => Route::Renders,
        "/{title}/{rev}" | "/{title}/{rev}/{tid}" if write => Route::Put,
        "/{title}/{rev}" if delete => Route::TakeDown,
        "/{title}/{rev}" => Route::Revision,
        "/{title}/{rev}/{tid}" => Route::Render,
        "/{title}/_lift" | "/{title}/{rev}/_lift" => Route::Lift,
        _ => Route::Other,
    }
}

fn as_of(query: Option<&str>) -> bool {
    query.is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "as_of"))
}

/// A route's answer to a method it does not take: our 405, whose `Allow` lists the methods
/// with a space after each comma (axum's own has none), as problem+json.
fn refuse(allow: &'static str) -> impl Handler<((),), Arc<App>> {
    move || async move { Problem::method_not_allowed(allow) }
}

/// Answers one request (never an error: problems are answers too), counts it and logs it.
pub async fn handle(
    app: Arc<App>,
    router: Router,
    req: hyper::Request<Incoming>,
) -> std::result::Result<Response<Body>, Infallible> {
    let started = Instant::now();
    let method = req.method().clone();
    let uri = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
    let id = super::log::request_id(req.headers());
    let (mut parts, body) = req.into_parts();
    let received = super::limits::Received::default();
    parts.extensions.insert(received.clone());
    // A client that waits for `100 Continue` has sent no body yet: one refused before its body
    // was read never sends it, and nothing is read of it (reading would ask for it).
    let waits = parts
        .headers
        .get(hyper::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let unread = Unread(Arc::new(Mutex::new(Some(body))));
    let mut answer = match head_within_limits(&parts) {
        Ok(()) => {
            parts.extensions.insert(unread.clone());
            let req = Request::from_parts(parts, Body::empty());
            match router.oneshot(req).await {
                Ok(a) => a,
                Err(never) => match never {},
            }
        }
        Err(p) => p.into_response(),
    };
    let route = answer
        .extensions()
        .get::<Route>()
        .copied()
        .unwrap_or_else(|| route_of(uri.split('?').next().unwrap_or(""), &method, None));
    if let Some(p) = problem_of(&mut answer).await {
        answer = rendered(p, &method, &uri, &id);
    }
    if method == Method::HEAD {
        answer = without_body(answer);
    }
    // The router gives an empty body its length; a 304's is the representation's, if any.
    if answer.status() == StatusCode::NOT_MODIFIED {
        answer.headers_mut().remove(CONTENT_LENGTH);
    }
    // On every answer, as RESTBase sends them: no cache keeps an answer without asking again
    // (renders say `no-cache` themselves), and no browser guesses another content type.
    let h = answer.headers_mut();
    if !h.contains_key(CACHE_CONTROL) {
        h.insert(CACHE_CONTROL, HeaderValue::from_static(NO_STORE));
    }
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert(HeaderName::from_static("x-request-id"), v);
    }
    let unread = unread.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    match unread {
        // Refused before its body was read: read a little of it, so that the connection closes
        // (or stays open) cleanly. Closed with the client's bytes unread, the kernel would reset
        // it, and the client could lose the answer.
        Some(unread) if !waits => drain(unread, &received).await,
        _ => {}
    }
    let out = answer.body().size_hint().exact().unwrap_or(0);
    let took = started.elapsed();
    app.metrics
        .request(route, answer.status().as_u16(), took, out);
    tracing::info!(
        target: super::log::ACCESS,
        request_id = %id,
        method = %method,
        path = %uri,
        status = answer.status().as_u16(),
        bytes_in = received.bytes(),
        bytes_out = out,
        us = took.as_micros() as u64,
    );
    Ok(answer)
}

/// The problem an answer stands for: a handler's [`Problem`], or an error of axum's own (its
/// rejections are plain text or empty), so that every refusal is problem+json. `None` for any
/// other answer: a success, a health check's 503 (JSON), a peer's relayed problem+json.
async fn problem_of(answer: &mut Response<Body>) -> Option<Problem> {
    if let Some(p) = answer.extensions_mut().remove::<Problem>() {
        return Some(p);
    }
    let status = answer.status();
    let plain = answer
        .headers()
        .get(CONTENT_TYPE)
        .is_none_or(|v| v.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return None;
    }
    let body = std::mem::take(answer.body_mut());
    let text = http_body_util::Limited::new(body, 4 << 10)
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let detail = match text.trim() {
        "" => status.canonical_reason().unwrap_or("refused").to_string(),
        t => t.to_string(),
    };
    Some(Problem::new(status, detail))
}

/// A problem as the client gets it; a failure of the server's own goes to the error log, under
/// the request's id, which the client is told.
fn rendered(mut p: Problem, method: &Method, uri: &str, id: &str) -> Response<Body> {
    if let Some(log) = p.log.take() {
        tracing::error!(
            request_id = %id,
            method = %method,
            path = %uri,
            status = p.status.as_u16(),
            "{log}"
        );
        p.detail = format!(
            "{}; the server's error log has the details under request id {id}",
            p.detail
        );
    }
    p.response(method, uri).map(Body::new)
}

/// The Cache-Control of every answer but a render's: RESTBase's.
const NO_STORE: &str = "private, max-age=0, s-maxage=0, must-revalidate";

/// A HEAD's answer: the GET's head, its Content-Length the GET's body's, no body.
fn without_body(a: Response<Body>) -> Response<Body> {
    let (mut head, body) = a.into_parts();
    let len = body.size_hint().exact().unwrap_or(0);
    let bodiless = matches!(
        head.status,
        StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
    );
    if !bodiless && (len > 0 || !head.headers.contains_key(CONTENT_LENGTH)) {
        head.headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    Response::from_parts(head, Body::empty())
}

/// Reads and drops up to [`DRAIN_BYTES`] of a body no route read, for at most [`DRAIN_TIME`].
async fn drain(mut body: Incoming, received: &super::limits::Received) {
    let read = async {
        let mut left = DRAIN_BYTES;
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len());
            received.add(n);
            left = left.saturating_sub(n);
            if left == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// What [`drain`] reads of a refused request's body at most: a larger one is cut off.
const DRAIN_BYTES: usize = 1 << 20;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// The longest request target (path and query) taken: a title is at most 255 bytes, 765
/// percent-encoded, and a cursor a few hundred.
const MAX_TARGET: usize = 8 << 10;
/// The most bytes of request headers taken (names and values).
const MAX_HEADERS: usize = 16 << 10;

/// 414 or 431, as problem+json, for a head longer than any request of the API needs. Heads past
/// hyper's own buffer (64 KiB) get hyper's answer, which has no body.
fn head_within_limits(req: &Parts) -> Result<()> {
    let target = req.uri.path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_TARGET {
        return Err(Problem::new(
            StatusCode::URI_TOO_LONG,
            format!("the request target is {target} bytes; at most {MAX_TARGET} are taken"),
        ));
    }
    let headers: usize = req
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum();
    if headers > MAX_HEADERS {
        return Err(Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("the request's headers are {headers} bytes; at most {MAX_HEADERS} are taken"),
        ));
    }
    Ok(())
}

/// What an API route's path names, decoded from its raw segments by the rules of each.
#[derive(Clone)]
struct Key {
    place: Place,
    title: Option<String>,
    rev: Option<u64>,
    tid: Option<Uuid>,
}

impl Key {
    /// The key of `path`, which the router matched to `pattern`: segment by segment, each
    /// decoded by its parameter's rule; the place first, then the title, revision and tid.
    fn decode(pattern: &str, path: &str) -> Result<Key> {
        let mut raw: [Option<&str>; 5] = [None; 5];
        for (name, segment) in pattern.split('/').zip(path.split('/')) {
            let at = match name {
                "{domain}" => 0,
                "{bucket}" => 1,
                "{title}" => 2,
                "{rev}" => 3,
                "{tid}" => 4,
                _ => continue,
            };
            raw[at] = Some(segment);
        }
        let [Some(domain), Some(bucket), title_at, rev_at, tid_at] = raw else {
            return Err(not_routed(pattern));
        };
        Ok(Key {
            place: place(domain, bucket)?,
            title: title_at.map(title).transpose()?,
            rev: rev_at.map(rev).transpose()?,
            tid: tid_at.map(tid).transpose()?,
        })
    }
}

/// A route whose pattern lacks what its handler takes: a bug of the table above, 500.
fn not_routed(pattern: &str) -> Problem {
    Problem::from_service(ServiceError::Internal(format!(
        "route {pattern} lacks a segment its handler takes"
    )))
}

/// The first step of every API route: its path decoded (400 for a segment its rule refuses),
/// the read gate's admission of its bucket and domain; then a read of a title this node does not
/// answer for is relayed to the first peer that answers it, or held until this node may answer
/// (the read gate says which). The key goes on to the handler; the answer is labelled with the
/// route for the metrics. One layer, not three: each costs a boxed future per request.
async fn admit(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response<Body> {
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let pattern = matched.as_ref().map_or("", |m| m.as_str());
    let route = route_of(pattern, req.method(), req.uri().query());
    let mut a = match admitted(&app, pattern, &mut req).await {
        Ok(None) => next.run(req).await,
        Ok(Some(relayed)) => relayed,
        Err(p) => p.into_response(),
    };
    a.extensions_mut().insert(route);
    a
}

/// The key of `req`, admitted; a peer's answer when the read was relayed.
async fn admitted(app: &App, pattern: &str, req: &mut Request) -> Result<Option<Response<Body>>> {
    let key = Key::decode(pattern, req.uri().path())?;
    app.gate.admit(&key.place.bucket, &key.place.domain)?;
    req.extensions_mut().insert(key);
    // Parts, not the request, are held across the awaits: its body is not Sync.
    let (parts, body) = std::mem::take(req).into_parts();
    let relayed = relayed(app, &parts).await;
    *req = Request::from_parts(parts, body);
    relayed
}

/// A peer's answer to a read of a title; `None` once this node may answer it.
async fn relayed(app: &App, parts: &Parts) -> Result<Option<Response<Body>>> {
    let read = parts.method == Method::GET || parts.method == Method::HEAD;
    let key = parts.extensions.get::<Key>().filter(|_| read);
    let Some((domain, title)) = key.and_then(|k| Some((&k.place.domain, k.title.as_ref()?))) else {
        return Ok(None);
    };
    let forwarded = parts.headers.contains_key(super::forward::FORWARDED);
    for peer in app.gate.peers(domain, title, forwarded) {
        match super::forward::forward_to(&peer.url, parts).await {
            Ok(mut a) => {
                if let Ok(v) = HeaderValue::from_str(&peer.name) {
                    a.headers_mut()
                        .insert(HeaderName::from_static(super::forward::FORWARDED_TO), v);
                }
                return Ok(Some(a.map(Body::new)));
            }
            Err(e) => tracing::warn!(peer = %peer.name, "forwarding a read: {e}"),
        }
    }
    let min_seq = match parts.headers.get(super::forward::MIN_SEQ) {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    Problem::bad_request(format!("{}: a sequence number", super::forward::MIN_SEQ))
                })?,
        ),
        None => None,
    };
    app.gate.ready(domain, title, min_seq, forwarded).await?;
    Ok(None)
}

/// The key [`admit`] decoded, taken by the route's handler.
fn take_key(parts: &mut Parts) -> Result<Key> {
    parts
        .extensions
        .remove::<Key>()
        .ok_or_else(|| not_routed(parts.uri.path()))
}

/// `P`, `P/` and the lifts of a title: the bucket and domain.
struct InBucket(Place);
/// `P/{title}`, `P/{title}/`.
struct OfTitle(Place, String);
/// `P/{title}/{rev}`.
struct OfRevision(Place, String, u64);
/// `P/{title}/{rev}/{tid}`.
struct OfRender(Place, String, u64, Uuid);

impl FromRequestParts<Arc<App>> for InBucket {
    type Rejection = Problem;
    async fn from_request_parts(parts: &mut Parts, _: &Arc<App>) -> Result<InBucket> {
        Ok(InBucket(take_key(parts)?.place))
    }
}

impl FromRequestParts<Arc<App>> for OfTitle {
    type Rejection = Problem;
    async fn from_request_parts(parts: &mut Parts, _: &Arc<App>) -> Result<OfTitle> {
        let k = take_key(parts)?;
        let title = k.title.ok_or_else(|| not_routed(parts.uri.path()))?;
        Ok(OfTitle(k.place, title))
    }
}

impl FromRequestParts<Arc<App>> for OfRevision {
    type Rejection = Problem;
    async fn from_request_parts(parts: &mut Parts, _: &Arc<App>) -> Result<OfRevision> {
        let k = take_key(parts)?;
        match (k.title, k.rev) {
            (Some(t), Some(r)) => Ok(OfRevision(k.place, t, r)),
            _ => Err(not_routed(parts.uri.path())),
        }
    }
}

impl FromRequestParts<Arc<App>> for OfRender {
    type Rejection = Problem;
    async fn from_request_parts(parts: &mut Parts, _: &Arc<App>) -> Result<OfRender> {
        let k = take_key(parts)?;
        match (k.title, k.rev, k.tid) {
            (Some(t), Some(r), Some(i)) => Ok(OfRender(k.place, t, r, i)),
            _ => Err(not_routed(parts.uri.path())),
        }
    }
}

/// A request's query, decoded.
struct Params(Vec<(String, String)>);

impl Params {
    /// The first value of `name`.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = Infallible;
    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> std::result::Result<Params, Infallible> {
        let query = parts.uri.query().unwrap_or_default();
        Ok(Params(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        ))
    }
}

/// The request's body, kept aside by [`handle`] until a route takes it: a body no route took
/// is drained there (or, when its client waits for `100 Continue`, never asked for).
#[derive(Clone)]
struct Unread(Arc<Mutex<Option<Incoming>>>);

impl Unread {
    /// The body, for the one route that reads it, once its checks passed.
    fn take(&self) -> Result<Incoming> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| Problem::bad_request("the request's body was read already"))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Unread {
    type Rejection = Infallible;
    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> std::result::Result<Unread, Infallible> {
        Ok(parts
            .extensions
            .get::<Unread>()
            .cloned()
            .unwrap_or_else(|| Unread(Arc::new(Mutex::new(None)))))
    }
}

// The handlers: one per route and method.

async fn health(State(app): State<Arc<App>>) -> Answer {
    let (ok, body) = app.registry.health();
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(status, &body)
}

async fn metrics(State(app): State<Arc<App>>) -> Answer {
    let mut text = String::new();
    app.metrics.render(&mut text);
    super::metrics::render_process(&mut text);
    app.limits.render(&mut text);
    super::log::render_metrics(&mut text);
    app.registry.render_metrics(&mut text);
    let mut a = Response::new(Full::new(Bytes::from(text)));
    a.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    a
}

async fn put_bucket(
    State(app): State<Arc<App>>,
    InBucket(place): InBucket,
    body: Unread,
    req: Request,
) -> Result<Answer> {
    app.auth.check(req.headers())?;
    let (parts, _) = req.into_parts();
    create_bucket(&app, &place, &parts, body.take()?).await
}

async fn get_bucket(State(app): State<Arc<App>>, InBucket(place): InBucket) -> Result<Answer> {
    let b = bucket(&app, &place)?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "bucket": b.name, "settings": describe(&b.config) }),
    ))
}

async fn get_titles(
    State(app): State<Arc<App>>,
    InBucket(place): InBucket,
    q: Params,
) -> Result<Answer> {
    if app.gate.lists_titles() {
        return list_all_titles(&app, &place, q.get("limit"), q.get("next")).await;
    }
    list_titles(&app, &place, q.get("limit"), q.get("next"))
}

async fn get_renders(
    State(app): State<Arc<App>>,
    OfTitle(place, title): OfTitle,
    q: Params,
) -> Result<Answer> {
    list_renders(&app, &place, &title, q.get("limit"), q.get("next"))
}

async fn get_latest(
    State(app): State<Arc<App>>,
    OfTitle(place, title): OfTitle,
    q: Params,
    req: Request,
) -> Result<Answer> {
    let which = match q.get("as_of") {
        Some(t) => Which::AsOf(
            wink_engine::clock::parse_instant(t)
                .map_err(|e| Problem::bad_request(format!("invalid as_of: {e}")))?,
        ),
        None => Which::Latest,
    };
    read_render(&app, &place, &title, which, &req)
}

async fn get_revision(
    State(app): State<Arc<App>>,
    OfRevision(place, title, rev): OfRevision,
    q: Params,
    req: Request,
) -> Result<Answer> {
    no_as_of(q.get("as_of"))?;
    read_render(&app, &place, &title, Which::Rev(rev), &req)
}

async fn get_render(
    State(app): State<Arc<App>>,
    OfRender(place, title, rev, tid): OfRender,
    q: Params,
    req: Request,
) -> Result<Answer> {
    no_as_of(q.get("as_of"))?;
    read_render(&app, &place, &title, Which::Render(rev, tid), &req)
}

async fn put_revision(
    State(app): State<Arc<App>>,
    OfRevision(place, title, rev): OfRevision,
    body: Unread,
    req: Request,
) -> Result<Answer> {
    let (parts, _) = req.into_parts();
    put_render(&app, place, title, rev, None, &parts, body).await
}

async fn put_render_tid(
    State(app): State<Arc<App>>,
    OfRender(place, title, rev, tid): OfRender,
    body: Unread,
    req: Request,
) -> Result<Answer> {
    let (parts, _) = req.into_parts();
    put_render(&app, place, title, rev, Some(tid), &parts, body).await
}

async fn take_down_title(
    State(app): State<Arc<App>>,
    OfTitle(place, title): OfTitle,
    headers: HeaderMap,
) -> Result<Answer> {
    app.auth.check(&headers)?;
    take_down(&app, place, title, None).await
}

async fn take_down_revision(
    State(app): State<Arc<App>>,
    OfRevision(place, title, rev): OfRevision,
    headers: HeaderMap,
) -> Result<Answer> {
    app.auth.check(&headers)?;
    take_down(&app, place, title, Some(rev)).await
}

async fn lift_title(
    State(app): State<Arc<App>>,
    OfTitle(place, title): OfTitle,
    headers: HeaderMap,
) -> Result<Answer> {
    app.auth.check(&headers)?;
    lift(&app, place, title, None).await
}

async fn lift_revision(
    State(app): State<Arc<App>>,
    OfRevision(place, title, rev): OfRevision,
    headers: HeaderMap,
) -> Result<Answer> {
    app.auth.check(&headers)?;
    lift(&app, place, title, Some(rev)).await
}

/// The answer to a path no route matched: 400 for a path of the API's shape whose segment its
/// rule refuses (the router matches no empty segment, where the rules refuse an empty title or
/// revision), 404 for any other.
async fn unrouted(uri: hyper::Uri) -> Problem {
    let path = uri.path();
    let not_found = || Problem::not_found(format!("no resource at {path}"));
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let [domain, "sys", "key_rev_value", bucket, rest @ ..] = segments.as_slice() else {
        return not_found();
    };
    let checked = place(domain, bucket).and_then(|_| match rest {
        [t] | [t, "" | "_lift"] => title(t).map(drop),
        [t, r] | [t, r, "_lift"] => title(t).and(rev(r)).map(drop),
        [t, r, i] => title(t).and(rev(r)).and(tid(i)).map(drop),
        _ => Ok(()),
    });
    checked.err().unwrap_or_else(not_found)
}

fn no_as_of(as_of: Option<&str>) -> Result<()> {
    match as_of {
        Some(_) => Err(Problem::bad_request(
            "as_of applies to a title's latest render (P/{title}?as_of=T)",
        )),
        None => Ok(()),
    }
}

/// One path segment, percent-decoded, as UTF-8.
fn decode(segment: &str, what: &str) -> Result<String> {
    percent_decode_str(segment)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| Problem::bad_request(format!("the {what} is not valid UTF-8")))
}

// The rules for each of a path's segments, in one place: the router matches a path's segments
// raw, as they arrived, then each is decoded and checked here.

/// The domain and bucket segments: decoded, the domain checked, the bucket name valid.
fn place(domain: &str, bucket: &str) -> Result<Place> {
    let domain = decode(domain, "domain")?;
    key::check_domain(&domain).map_err(|e| Problem::bad_request(strip(e)))?;
    let bucket = decode(bucket, "bucket name")?;
    if !valid_bucket_name(&bucket) {
        return Err(Problem::bad_request(format!(
            "bucket name {bucket:?}: [a-z0-9][a-z0-9._-]{{0,63}}"
        )));
    }
    Ok(Place { domain, bucket })
}

/// A title segment: decoded (its `/` arrives as `%2F`) and checked.
fn title(segment: &str) -> Result<String> {
    let t = decode(segment, "title")?;
    key::check_title(&t).map_err(|e| Problem::bad_request(strip(e)))?;
    Ok(t)
}

/// A revision segment: digits, never decoded.
fn rev(segment: &str) -> Result<u64> {
    key::parse_rev(segment)
        .map_err(|e| Problem::bad_request(format!("invalid revision: {}", strip(e))))
}

/// A tid segment: decoded, then a time-UUID.
fn tid(segment: &str) -> Result<Uuid> {
    key::parse_tid(&decode(segment, "tid")?)
        .map_err(|e| Problem::bad_request(format!("invalid tid: {}", strip(e))))
}

/// The store's message for an invalid argument, without its "invalid: " prefix.
fn strip(e: wink_engine::Error) -> String {
    match e {
        wink_engine::Error::Invalid(what) => what,
        e => e.to_string(),
    }
}

/// An answer of `status` with `body` as JSON.
pub fn json(status: StatusCode, body: &impl Serialize) -> Answer {
    // Values of plain fields and strings: serializing cannot fail.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut a = Response::new(Full::new(Bytes::from(bytes)));
    *a.status_mut() = status;
    a.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    a
}

/// The open bucket a request names: 404 when there is none, 503 when it could not be opened.
fn bucket(app: &App, place: &Place) -> Result<Arc<Bucket>> {
    Ok(app.registry.open_bucket(&place.bucket)?)
}

/// Runs a read on this worker's handle of the bucket (see the registry): 404 for no bucket.
fn read<T>(
    app: &App,
    place: &Place,
    f: impl FnOnce(&Bucket, &Store) -> wink_engine::Result<T>,
) -> Result<T> {
    match app.registry.read(&place.bucket, f) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(registry::missing(&place.bucket).into()),
        Err(ReadError::Failed(why)) => Err(registry::unopened(&place.bucket, &why).into()),
        Err(ReadError::Store(e)) => Err(Problem::from_store(&e)),
    }
}

/// Runs `f` through the bucket's writer (answers that may involve the archive tier): the lock
/// may be held by a commit, so the worker hands its other tasks to another thread meanwhile.
fn through_writer<T>(
    app: &App,
    b: &Bucket,
    f: impl FnOnce(&Store) -> wink_engine::Result<T>,
) -> wink_engine::Result<T> {
    app.registry
        .writer_fallbacks
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tokio::task::block_in_place(|| b.with_writer(f))
}

fn read_render(
    app: &App,
    place: &Place,
    title: &str,
    which: Which,
    req: &Request,
) -> Result<Answer> {
    let (head, headers) = (req.method() == Method::HEAD, req.headers());
    let domain = place.domain.as_str();
    let get = move |s: &Store| s.get(domain, title, which);
    let got = read(app, place, |b, s| {
        let got = get(s)?;
        let hot = got
            .as_ref()
            .is_some_and(|g| g.state != RenderState::Archived);
        // This handle's archive is its view as of its open: an archived answer, or a miss of a
        // title whose record says the archive holds some of it, is asked of the writer's.
        // Misses of titles that never reached the archive are answered here, without its lock.
        if b.has_archive() && !hot && (got.is_some() || s.archive_may_hold(domain, title)?) {
            return through_writer(app, b, get);
        }
        Ok(got)
    })?;
    let Some(got) = got else {
        let what = match which {
            Which::Latest => "any revision".to_string(),
            Which::AsOf(_) => "any revision at that time".to_string(),
            Which::Rev(rev) => format!("revision {rev}"),
            Which::Render(rev, tid) => format!("revision {rev} tid {tid}"),
        };
        return Err(Problem::not_found(format!(
            "{domain}/{title}: no render of {what} (never stored, taken down, or past retention)"
        )));
    };
    // RFC 9110 § 13.1.1: a read whose If-Match names none of the render's tags is 412.
    let tag = etag(got.rev, got.tid);
    if headers.contains_key(IF_MATCH) && !tag_listed(headers, IF_MATCH, &tag, false) {
        return Err(Problem::precondition_failed(format!(
            "If-Match: the render's ETag is {}",
            tag.to_str().unwrap_or_default()
        )));
    }
    Ok(render_answer(got, head, headers))
}

/// `"REV/TID"`: a render's entity tag.
fn etag(rev: u64, tid: Uuid) -> HeaderValue {
    // Digits, '/', hex and '-' only.
    HeaderValue::from_str(&format!("\"{rev}/{tid}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

/// The render an entity tag names: the inverse of [`etag`]; `None` for any other tag.
fn parse_etag(tag: &[u8]) -> Option<(u64, Uuid)> {
    let (rev, tid) = std::str::from_utf8(tag)
        .ok()?
        .strip_prefix('"')?
        .strip_suffix('"')?
        .split_once('/')?;
    Some((rev.parse().ok()?, tid.parse().ok()?))
}

/// Whether header `name` (`If-Match` or `If-None-Match`) lists `tag` or is `*`: by weak
/// comparison when `weak`, else strong (a `W/` tag never matches; RFC 9110 § 8.8.3.2).
fn tag_listed(headers: &HeaderMap, name: HeaderName, tag: &HeaderValue, weak: bool) -> bool {
    let tag = tag.as_bytes();
    entity_tags(headers, name).any(|(w, t)| (weak || !w) && (t == b"*" || t == tag))
}

/// The entity tags header `name` lists (`If-Match`, `If-None-Match`), each with whether it is
/// weak (`W/`, dropped) and its quotes kept; `*` is listed as it is.
fn entity_tags(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = (bool, &[u8])> {
    headers
        .get_all(name)
        .into_iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(|t| {
            let t = t.trim_ascii();
            match t.strip_prefix(b"W/") {
                Some(rest) => (true, rest),
                None => (false, t),
            }
        })
}

fn render_answer(got: Got, head: bool, headers: &HeaderMap) -> Answer {
    let tag = etag(got.rev, got.tid);
    let modified = key::tid_time(got.tid);
    let mut a = if tag_listed(headers, IF_NONE_MATCH, &tag, true) {
        let mut a = Response::new(Full::new(Bytes::new()));
        *a.status_mut() = StatusCode::NOT_MODIFIED;
        a
    } else {
        let len = got.value.len();
        let body = if head {
            Bytes::new()
        } else {
            Bytes::from(got.value)
        };
        let mut a = Response::new(Full::new(body));
        let h = a.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_str(&got.content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
        );
        h.insert(CONTENT_LENGTH, HeaderValue::from(len));
        // Checked when put: a stored label is always a valid header value.
        let labels = [
            (CONTENT_ENCODING, &got.labels.encoding),
            (CONTENT_LANGUAGE, &got.labels.language),
        ];
        for (name, label) in labels {
            if let Some(v) = label.as_deref().and_then(|l| HeaderValue::from_str(l).ok()) {
                h.insert(name, v);
            }
        }
        a
    };
    let h = a.headers_mut();
    h.insert(ETAG, tag);
    // An HTTP date covers 1970 to 9999; a tid may carry a time outside it.
    if modified >= UNIX_EPOCH
        && modified < UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_799)
    {
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
            h.insert(LAST_MODIFIED, v);
        }
    }
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    a
}

fn limit(text: Option<&str>) -> Result<usize> {
    match text {
        None => Ok(DEFAULT_LIMIT),
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| Problem::bad_request(format!("limit {t:?}: 1 to {MAX_LIMIT}"))),
    }
}

/// The store's cursor in a client's `next`: 400 unless this server gave it for this listing.
fn open_cursor(app: &App, scope: &[&str], next: &str) -> Result<String> {
    app.cursors.open(scope, next).ok_or_else(|| {
        Problem::bad_request("invalid next: not a cursor this server gave for this listing")
    })
}

fn bad_cursor(e: wink_engine::Error) -> Problem {
    Problem::bad_request(format!("invalid next: {}", strip(e)))
}

fn list_titles(
    app: &App,
    place: &Place,
    limit_text: Option<&str>,
    next: Option<&str>,
) -> Result<Answer> {
    let limit = limit(limit_text)?;
    let scope = [place.bucket.as_str(), place.domain.as_str()];
    let after = next
        .map(|n| {
            open_cursor(app, &scope, n)?
                .parse::<TitlePosition>()
                .map_err(bad_cursor)
        })
        .transpose()?;
    let domain = place.domain.as_str();
    let page = read(app, place, |b, s| {
        if b.has_archive() {
            return through_writer(app, b, |w| w.titles_after(domain, after, limit));
        }
        s.titles_after(domain, after, limit)
    })?;
    Ok(json(
        StatusCode::OK,
        &TitlesPage {
            items: page.titles,
            next: page.next.map(|n| app.cursors.seal(&scope, &n.to_string())),
        },
    ))
}

/// A title listing the gate answers (a cluster's, over every partition): in key order, its
/// cursor the last title given, so any node takes it whatever the placement is by then.
async fn list_all_titles(
    app: &App,
    place: &Place,
    limit_text: Option<&str>,
    next: Option<&str>,
) -> Result<Answer> {
    let limit = limit(limit_text)?;
    let scope = [
        place.bucket.as_str(),
        place.domain.as_str(),
        "titles in key order",
    ];
    let after = next.map(|n| open_cursor(app, &scope, n)).transpose()?;
    let mut titles = app
        .gate
        .titles(&place.bucket, &place.domain, after, limit)
        .await?;
    let more = titles.len() > limit;
    titles.truncate(limit);
    let next = match titles.last() {
        Some(last) if more => Some(app.cursors.seal(&scope, last)),
        _ => None,
    };
    Ok(json(
        StatusCode::OK,
        &TitlesPage {
            items: titles,
            next,
        },
    ))
}

/// A page of a title listing, as RESTBase's.
#[derive(Serialize)]
struct TitlesPage {
    items: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

fn list_renders(
    app: &App,
    place: &Place,
    title: &str,
    limit_text: Option<&str>,
    next: Option<&str>,
) -> Result<Answer> {
    let limit = limit(limit_text)?;
    let scope = [place.bucket.as_str(), place.domain.as_str(), title];
    let after = next
        .map(|n| {
            open_cursor(app, &scope, n)?
                .parse::<RenderCursor>()
                .map_err(bad_cursor)
        })
        .transpose()?;
    let domain = place.domain.as_str();
    let page = read(app, place, |b, s| {
        if b.has_archive() {
            return through_writer(app, b, |w| w.list_after(domain, title, after, limit));
        }
        s.list_after(domain, title, after, limit)
    })?;
    #[derive(Serialize)]
    struct Item {
        revision: u64,
        tid: String,
        size: u64,
        content_type: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        content_encoding: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        content_language: Option<String>,
        state: &'static str,
    }
    #[derive(Serialize)]
    struct Page {
        items: Vec<Item>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next: Option<String>,
    }
    let items = page
        .items
        .into_iter()
        .map(|l| Item {
            revision: l.rev,
            tid: l.tid.to_string(),
            size: l.size,
            content_type: l.content_type,
            content_encoding: l.labels.encoding,
            content_language: l.labels.language,
            state: l.state.as_str(),
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &Page {
            items,
            next: page.next.map(|n| app.cursors.seal(&scope, &n.to_string())),
        },
    ))
}

/// A render's content type: the request's, or `application/octet-stream`.
fn content_type(headers: &HeaderMap) -> Result<String> {
    let Some(v) = headers.get(CONTENT_TYPE) else {
        return Ok("application/octet-stream".to_string());
    };
    let text = v
        .to_str()
        .map_err(|_| Problem::bad_request("Content-Type: printable ASCII only"))?
        .trim();
    if text.is_empty() || text.len() > 255 {
        return Err(Problem::bad_request("Content-Type: 1 to 255 bytes"));
    }
    Ok(text.to_string())
}

/// A put's labels: its `Content-Encoding` (one content coding; `identity`, which is none, left
/// out) and `Content-Language`, stored with the render as given and returned by reads. The bytes
/// are stored as sent: a gzip render is kept and served gzip.
fn labels(headers: &HeaderMap) -> Result<Labels> {
    let mut codings = Vec::new();
    for v in headers.get_all(CONTENT_ENCODING) {
        let text = v
            .to_str()
            .map_err(|_| Problem::bad_request("Content-Encoding: printable ASCII only"))?;
        codings.extend(
            text.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity")),
        );
    }
    if codings.len() > 1 {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Encoding: {}: a render is stored in one content coding at most",
                codings.join(", ")
            ),
        ));
    }
    let mut languages = Vec::new();
    for v in headers.get_all(CONTENT_LANGUAGE) {
        let text = v
            .to_str()
            .map_err(|_| Problem::bad_request("Content-Language: printable ASCII only"))?
            .trim();
        if !text.is_empty() {
            languages.push(text);
        }
    }
    let labels = Labels {
        encoding: codings.first().map(|c| c.to_string()),
        language: (!languages.is_empty()).then(|| languages.join(", ")),
    };
    labels.check().map_err(|e| Problem::bad_request(strip(e)))?;
    Ok(labels)
}

async fn put_render(
    app: &App,
    place: Place,
    title: String,
    rev: u64,
    tid: Option<Uuid>,
    parts: &Parts,
    body: Unread,
) -> Result<Answer> {
    app.auth.check(&parts.headers)?;
    let b = app.writes.bucket_for_write(place.bucket.clone()).await?;
    let content_type = content_type(&parts.headers)?;
    let labels = labels(&parts.headers)?;
    // A client's own tid may run a little ahead of this server's clock, not far.
    if let Some(t) = tid {
        key::check_put_tid(
            t,
            wink_engine::clock::Clock::now_ticks(&wink_engine::clock::SystemClock),
        )
        .map_err(|e| Problem::bad_request(strip(e)))?;
    }
    // Taken only now: a request refused above has its body drained by `handle` (or, when
    // its client waits for `100 Continue`, never sent).
    let within = super::limits::Within {
        bytes: b.config.max_value,
        over: format!(
            "the render is over bucket {}'s maximum of {} bytes (max_value)",
            b.name, b.config.max_value
        ),
    };
    let body = app
        .limits
        .read_within(parts, body.take()?, &app.metrics, Some(within))
        .await?;
    if body.bytes.is_empty() {
        return Err(Problem::bad_request(
            "a render needs a body; this request has none",
        ));
    }
    let write = Write {
        bucket: place.bucket,
        domain: place.domain,
        title,
        change: Change::Put {
            rev,
            tid,
            content_type,
            labels,
            value: body.bytes.clone(),
            conditions: preconditions(&parts.headers),
        },
        arrival: wink_engine::clock::Clock::now(&wink_engine::clock::SystemClock),
    };
    let written = app.writes.write(write).await;
    // The body's bytes count against the in-flight budget until the write is answered.
    drop(body);
    let receipt = written?;
    let Done::Stored { rev, tid } = receipt.done else {
        return Err(unexpected(&receipt));
    };
    #[derive(Serialize)]
    struct Created {
        message: &'static str,
        rev: u64,
        tid: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    }
    let mut a = json(
        StatusCode::CREATED,
        &Created {
            message: "Created.",
            rev,
            tid: tid.to_string(),
            seq: receipt.seq,
        },
    );
    a.headers_mut().insert(ETAG, etag(rev, tid));
    with_seq(&mut a, receipt.seq);
    Ok(a)
}

/// A put's `If-Match` and `If-None-Match`, for the writer to check (RFC 9110 § 13.1.1-2):
/// `If-Match` compares strongly (a `W/` tag never matches), `If-None-Match` weakly; a tag that
/// is no render's (`"REV/TID"`) matches nothing.
fn preconditions(headers: &HeaderMap) -> Preconditions {
    let tags = |name: HeaderName, weak: bool| -> Option<Tags> {
        if !headers.contains_key(&name) {
            return None;
        }
        let mut list = Vec::new();
        for (_, t) in entity_tags(headers, name).filter(|(w, _)| weak || !w) {
            if t == b"*" {
                return Some(Tags::Any);
            }
            list.extend(parse_etag(t));
        }
        Some(Tags::List(list))
    };
    Preconditions {
        if_match: tags(IF_MATCH, false),
        if_none_match: tags(IF_NONE_MATCH, true),
    }
}

/// A receipt of another kind than the write's (a bug): 500.
fn unexpected(receipt: &Receipt) -> Problem {
    Problem::from_service(ServiceError::Internal(format!(
        "a write was answered {receipt:?}"
    )))
}

/// The cluster log's sequence of a write, in the header clients pass back as `x-wink-min-seq`
/// to read their own writes.
fn with_seq(a: &mut Answer, seq: Option<u64>) {
    if let Some(seq) = seq {
        a.headers_mut()
            .insert(HeaderName::from_static(SEQ), HeaderValue::from(seq));
    }
}

/// The header of a write's sequence in a cluster's log.
pub const SEQ: &str = "x-wink-seq";

async fn take_down(app: &App, place: Place, title: String, rev: Option<u64>) -> Result<Answer> {
    let receipt = change(app, place, title, Change::TakeDown { rev }).await?;
    let Done::Removed(removed) = receipt.done else {
        return Err(unexpected(&receipt));
    };
    let body = serde_json::json!({ "message": "Taken down.", "removed": removed });
    Ok(changed(body, receipt.seq))
}

async fn lift(app: &App, place: Place, title: String, rev: Option<u64>) -> Result<Answer> {
    let receipt = change(app, place, title, Change::Lift { rev }).await?;
    let Done::Lifted(lifted) = receipt.done else {
        return Err(unexpected(&receipt));
    };
    let message = if lifted {
        "Lifted."
    } else {
        "Nothing to lift."
    };
    let body = serde_json::json!({ "message": message, "lifted": lifted });
    Ok(changed(body, receipt.seq))
}

/// A take-down's or lift's 200, with the cluster log's sequence when there is one.
fn changed(mut body: serde_json::Value, seq: Option<u64>) -> Answer {
    if let Some(seq) = seq {
        body["seq"] = seq.into();
    }
    let mut a = json(StatusCode::OK, &body);
    with_seq(&mut a, seq);
    a
}

/// A take-down or lift, through the node's writes.
async fn change(app: &App, place: Place, title: String, change: Change) -> Result<Receipt> {
    app.writes.bucket_for_write(place.bucket.clone()).await?;
    let write = Write {
        bucket: place.bucket,
        domain: place.domain,
        title,
        change,
        arrival: wink_engine::clock::Clock::now(&wink_engine::clock::SystemClock),
    };
    Ok(app.writes.write(write).await?)
}

/// `PUT P`: creates the bucket, or checks the settings given against the bucket's.
async fn create_bucket(app: &App, place: &Place, parts: &Parts, body: Incoming) -> Result<Answer> {
    let body = app.limits.read(parts, body, &app.metrics).await?;
    if body.bytes.len() > MAX_SETTINGS {
        return Err(Problem::too_large(format!(
            "bucket settings are at most {MAX_SETTINGS} bytes"
        )));
    }
    if !body.bytes.trim_ascii().is_empty() {
        let is_json = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "bucket settings are JSON: Content-Type: application/json",
            ));
        }
    }
    let spec = BucketSpec::parse(&body.bytes).map_err(|e| Problem::bad_request(strip(e)))?;
    // On one node the registry makes it; in a cluster, the cluster's catalog and every node.
    match app.writes.create_bucket(place.bucket.clone(), spec).await {
        Ok(Created::New) => Ok(json(
            StatusCode::CREATED,
            &serde_json::json!({ "message": "Created.", "bucket": place.bucket }),
        )),
        Ok(Created::Existed) => Ok(json(
            StatusCode::OK,
            &serde_json::json!({ "message": "Exists.", "bucket": place.bucket }),
        )),
        Err(CreateError::Invalid(e)) => Err(Problem::bad_request(strip(e))),
        Err(CreateError::Differs(what)) => Err(Problem::conflict(what)),
        Err(CreateError::Failed(why)) => Err(registry::unopened(&place.bucket, &why).into()),
        Err(CreateError::Full(max)) => Err(Problem::new(
            StatusCode::INSUFFICIENT_STORAGE,
            format!("this server holds as many buckets as it may ({max}, --max-buckets)"),
        )),
        Err(CreateError::Store(e)) => Err(Problem::from_store(&e)),
    }
}

#[cfg(test)]
mod tests;
