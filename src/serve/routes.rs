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
//! A path is split into segments first, then each segment is percent-decoded on its own (so a
//! title's `/` arrives as `%2F` in one segment); nothing of a path but a validated bucket name
//! ever names a file. (`DELETE` takes down; `_lift` lifts.)
//!
//! One file past 900 lines on purpose: the table above is the whole API, and each route's
//! handler sits beside the parsing of its path and query, so a reader checks one against the
//! other without leaving the file.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{
    HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LAST_MODIFIED,
};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde::Serialize;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::auth::Auth;
use super::commit::{Job, PutError, PutJob};
use super::limits::BodyLimits;
use super::metrics::{Metrics, Route};
use super::problem::Problem;
use super::registry::{Bucket, CreateError, Created, ReadError, Registry};
use super::spec::{describe, valid_bucket_name, BucketSpec};
use crate::store::{key, Got, RenderCursor, State, Store, TitlePosition};

/// A listing's page size when the request does not say.
const DEFAULT_LIMIT: usize = 125;
/// The largest page a listing returns.
const MAX_LIMIT: usize = 1000;
/// The largest body of a bucket's settings.
const MAX_SETTINGS: usize = 64 << 10;

/// What every request handler shares.
pub struct App {
    pub registry: Registry,
    pub metrics: Arc<Metrics>,
    pub auth: Auth,
    pub limits: BodyLimits,
    /// Seals the listings' cursors (see [`super::cursor`]).
    pub cursors: super::cursor::CursorKey,
    /// The cluster node this server is part of (`wink serve --cluster`), once it has started.
    #[cfg(feature = "cluster")]
    pub cluster: std::sync::OnceLock<Arc<crate::cluster::node::Node>>,
}

type Answer = Response<Full<Bytes>>;
type Result<T> = std::result::Result<T, Problem>;

/// The bucket and domain a request is about.
struct Place {
    domain: String,
    bucket: String,
}

/// A request's path, parsed and decoded.
enum Target {
    Health,
    Metrics,
    Bucket(Place),
    Titles(Place),
    Title(Place, String),
    Renders(Place, String),
    Revision(Place, String, u64),
    Render(Place, String, u64, Uuid),
    Lift(Place, String, Option<u64>),
}

/// Which render a read asks for.
#[derive(Clone, Copy)]
enum Which {
    Latest,
    AsOf(SystemTime),
    Revision(u64),
    Render(u64, Uuid),
}

/// Answers one request (never an error: problems are answers too) and counts it.
pub async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
) -> std::result::Result<Answer, Infallible> {
    let started = Instant::now();
    let method = req.method().clone();
    let uri = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
    let mut route = Route::Other;
    let (parts, body) = req.into_parts();
    let mut body = Some(body);
    let answer = match answer(&app, &parts, &mut body, &mut route).await {
        Ok(a) => a,
        Err(p) => p.response(&method, &uri),
    };
    if let Some(unread) = body {
        // Refused before its body was read: read a little of it, so that the connection closes
        // (or stays open) cleanly. Closed with the client's bytes unread, the kernel would reset
        // it, and the client could lose the answer.
        drain(unread).await;
    }
    let out = answer.body().size_hint().exact().unwrap_or(0);
    app.metrics
        .request(route, answer.status().as_u16(), started.elapsed(), out);
    Ok(answer)
}

/// Reads and drops up to [`DRAIN_BYTES`] of a body no route read, for at most [`DRAIN_TIME`].
async fn drain(mut body: Incoming) {
    use http_body_util::BodyExt as _;
    let read = async {
        let mut left = DRAIN_BYTES;
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len());
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

/// The body of the request, for the one route that reads it.
fn take_body(body: &mut Option<Incoming>) -> Result<Incoming> {
    body.take()
        .ok_or_else(|| Problem::bad_request("the request's body was read already"))
}

async fn answer(
    app: &App,
    req: &hyper::http::request::Parts,
    body: &mut Option<Incoming>,
    route: &mut Route,
) -> Result<Answer> {
    #[cfg(feature = "cluster")]
    if let Some(node) = app.cluster.get() {
        if let Some(a) = cluster_gate(app, node, req).await? {
            return Ok(a);
        }
    }
    let target = parse_path(req.uri.path())?;
    let query: Vec<(String, String)> = req
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let method = req.method.clone();
    let head = method == Method::HEAD;
    match (target, &method) {
        (Target::Health, &Method::GET) => {
            *route = Route::Health;
            let (ok, body) = app.registry.health();
            let status = if ok {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            Ok(json(status, &body))
        }
        (Target::Metrics, &Method::GET) => {
            *route = Route::Metrics;
            let mut text = String::new();
            app.metrics.render(&mut text);
            app.limits.render(&mut text);
            app.registry.render_metrics(&mut text);
            let mut a = Response::new(Full::new(Bytes::from(text)));
            a.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            Ok(a)
        }
        (Target::Health | Target::Metrics, _) => Err(Problem::method_not_allowed("GET")),
        (Target::Bucket(place), &Method::PUT) => {
            *route = Route::BucketPut;
            app.auth.check(&req.headers)?;
            create_bucket(app, &place, req, take_body(body)?).await
        }
        (Target::Bucket(place), &Method::GET) => {
            *route = Route::BucketGet;
            let b = bucket(app, &place)?;
            Ok(json(
                StatusCode::OK,
                &serde_json::json!({ "bucket": b.name, "settings": describe(&b.config) }),
            ))
        }
        (Target::Bucket(_), _) => Err(Problem::method_not_allowed("GET, PUT")),
        (Target::Titles(place), &Method::GET) => {
            *route = Route::Titles;
            list_titles(app, &place, param("limit"), param("next"))
        }
        (Target::Renders(place, title), &Method::GET) => {
            *route = Route::Renders;
            list_renders(app, &place, &title, param("limit"), param("next"))
        }
        (Target::Titles(_) | Target::Renders(..), _) => Err(Problem::method_not_allowed("GET")),
        (Target::Title(place, title), &Method::GET | &Method::HEAD) => {
            let which = match param("as_of") {
                Some(t) => {
                    *route = Route::AsOf;
                    Which::AsOf(
                        crate::clock::parse_instant(t)
                            .map_err(|e| Problem::bad_request(format!("invalid as_of: {e}")))?,
                    )
                }
                None => {
                    *route = Route::Latest;
                    Which::Latest
                }
            };
            read_render(app, &place, &title, which, head, &req.headers)
        }
        (Target::Revision(place, title, rev), &Method::GET | &Method::HEAD) => {
            *route = Route::Revision;
            no_as_of(param("as_of"))?;
            read_render(
                app,
                &place,
                &title,
                Which::Revision(rev),
                head,
                &req.headers,
            )
        }
        (Target::Render(place, title, rev, tid), &Method::GET | &Method::HEAD) => {
            *route = Route::Render;
            no_as_of(param("as_of"))?;
            read_render(
                app,
                &place,
                &title,
                Which::Render(rev, tid),
                head,
                &req.headers,
            )
        }
        (Target::Revision(place, title, rev), &Method::PUT) => {
            *route = Route::Put;
            put_render(app, place, title, rev, None, req, body).await
        }
        (Target::Render(place, title, rev, tid), &Method::PUT) => {
            *route = Route::Put;
            put_render(app, place, title, rev, Some(tid), req, body).await
        }
        (Target::Title(place, title), &Method::DELETE) => {
            *route = Route::TakeDown;
            app.auth.check(&req.headers)?;
            take_down(app, place, title, None).await
        }
        (Target::Revision(place, title, rev), &Method::DELETE) => {
            *route = Route::TakeDown;
            app.auth.check(&req.headers)?;
            take_down(app, place, title, Some(rev)).await
        }
        (Target::Title(..), _) => Err(Problem::method_not_allowed("GET, HEAD, DELETE")),
        (Target::Revision(..), _) => Err(Problem::method_not_allowed("GET, HEAD, PUT, DELETE")),
        (Target::Render(..), _) => Err(Problem::method_not_allowed("GET, HEAD, PUT")),
        (Target::Lift(place, title, rev), &Method::POST) => {
            *route = Route::Lift;
            app.auth.check(&req.headers)?;
            lift(app, place, title, rev).await
        }
        (Target::Lift(..), _) => Err(Problem::method_not_allowed("POST")),
    }
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

fn parse_path(path: &str) -> Result<Target> {
    let not_found = || Problem::not_found(format!("no resource at {path}"));
    let segments: Vec<&str> = path
        .strip_prefix('/')
        .ok_or_else(not_found)?
        .split('/')
        .collect();
    match segments.as_slice() {
        ["_health"] => return Ok(Target::Health),
        ["metrics"] => return Ok(Target::Metrics),
        _ => {}
    }
    let [domain, "sys", "key_rev_value", bucket, rest @ ..] = segments.as_slice() else {
        return Err(not_found());
    };
    let domain = decode(domain, "domain")?;
    key::check_domain(&domain).map_err(|e| Problem::bad_request(strip(e)))?;
    let bucket = decode(bucket, "bucket name")?;
    if !valid_bucket_name(&bucket) {
        return Err(Problem::bad_request(format!(
            "bucket name {bucket:?}: [a-z0-9][a-z0-9._-]{{0,63}}"
        )));
    }
    let place = Place { domain, bucket };
    let title = |s: &str| -> Result<String> {
        let t = decode(s, "title")?;
        key::check_title(&t).map_err(|e| Problem::bad_request(strip(e)))?;
        Ok(t)
    };
    let rev = |s: &str| {
        key::parse_rev(s)
            .map_err(|e| Problem::bad_request(format!("invalid revision: {}", strip(e))))
    };
    let tid = |s: &str| {
        key::parse_tid(&decode(s, "tid")?)
            .map_err(|e| Problem::bad_request(format!("invalid tid: {}", strip(e))))
    };
    Ok(match rest {
        [] => Target::Bucket(place),
        [""] => Target::Titles(place),
        [t] => Target::Title(place, title(t)?),
        [t, ""] => Target::Renders(place, title(t)?),
        [t, "_lift"] => Target::Lift(place, title(t)?, None),
        [t, r] => Target::Revision(place, title(t)?, rev(r)?),
        [t, r, "_lift"] => Target::Lift(place, title(t)?, Some(rev(r)?)),
        [t, r, i] => Target::Render(place, title(t)?, rev(r)?, tid(i)?),
        _ => return Err(not_found()),
    })
}

/// The store's message for an invalid argument, without its "invalid: " prefix.
fn strip(e: crate::Error) -> String {
    match e {
        crate::Error::Invalid(what) => what,
        e => e.to_string(),
    }
}

fn json(status: StatusCode, body: &impl Serialize) -> Answer {
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
    match app.registry.bucket(&place.bucket) {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(no_bucket(&place.bucket)),
        Err(why) => Err(unreadable(&place.bucket, &why)),
    }
}

fn no_bucket(name: &str) -> Problem {
    Problem::not_found(format!("no bucket {name} (create it with PUT)"))
}

fn unreadable(name: &str, why: &str) -> Problem {
    Problem::unavailable(format!("bucket {name} cannot be read: {why}"), 10)
}

/// Runs a read on this worker's handle of the bucket (see the registry): 404 for no bucket.
fn read<T>(
    app: &App,
    place: &Place,
    f: impl FnOnce(&Bucket, &Store) -> crate::Result<T>,
) -> Result<T> {
    match app.registry.read(&place.bucket, f) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(no_bucket(&place.bucket)),
        Err(ReadError::Failed(why)) => Err(unreadable(&place.bucket, &why)),
        Err(ReadError::Store(e)) => Err(Problem::from_store(&e)),
    }
}

/// Runs `f` through the bucket's writer (answers that may involve the archive tier): the lock
/// may be held by a commit, so the worker hands its other tasks to another thread meanwhile.
fn through_writer<T>(
    app: &App,
    b: &Bucket,
    f: impl FnOnce(&Store) -> crate::Result<T>,
) -> crate::Result<T> {
    app.metrics
        .writer_fallbacks
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tokio::task::block_in_place(|| b.with_writer(f))
}

fn read_render(
    app: &App,
    place: &Place,
    title: &str,
    which: Which,
    head: bool,
    headers: &HeaderMap,
) -> Result<Answer> {
    let domain = place.domain.as_str();
    let get = move |s: &Store| match which {
        Which::Latest => s.get_latest(domain, title),
        Which::AsOf(at) => s.get_as_of(domain, title, at),
        Which::Revision(rev) => s.get_rev(domain, title, rev),
        Which::Render(rev, tid) => s.get_render(domain, title, rev, tid),
    };
    let got = read(app, place, |b, s| {
        let got = get(s)?;
        let hot = got.as_ref().is_some_and(|g| g.state != State::Archived);
        if b.has_archive() && !hot {
            return through_writer(app, b, get);
        }
        Ok(got)
    })?;
    let Some(got) = got else {
        let what = match which {
            Which::Latest => "any revision".to_string(),
            Which::AsOf(_) => "any revision at that time".to_string(),
            Which::Revision(rev) => format!("revision {rev}"),
            Which::Render(rev, tid) => format!("revision {rev} tid {tid}"),
        };
        return Err(Problem::not_found(format!(
            "{domain}/{title}: no render of {what} (never stored, taken down, or past retention)"
        )));
    };
    Ok(render_answer(got, head, headers))
}

/// `"REV/TID"`: a render's entity tag.
fn etag(rev: u64, tid: Uuid) -> HeaderValue {
    // Digits, '/', hex and '-' only.
    HeaderValue::from_str(&format!("\"{rev}/{tid}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

/// Whether `If-None-Match` names the current entity tag (or is `*`).
fn matches_etag(headers: &HeaderMap, tag: &HeaderValue) -> bool {
    let tag = tag.as_bytes();
    headers.get_all(IF_NONE_MATCH).iter().any(|v| {
        v.as_bytes().split(|b| *b == b',').any(|t| {
            let t = t.trim_ascii();
            let t = t.strip_prefix(b"W/").unwrap_or(t);
            t == b"*" || t == tag
        })
    })
}

fn render_answer(got: Got, head: bool, headers: &HeaderMap) -> Answer {
    let tag = etag(got.rev, got.tid);
    let modified = key::tid_time(got.tid);
    let mut a = if matches_etag(headers, &tag) {
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

fn bad_cursor(e: crate::Error) -> Problem {
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
    #[derive(Serialize)]
    struct Page {
        items: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next: Option<String>,
    }
    Ok(json(
        StatusCode::OK,
        &Page {
            items: page.titles,
            next: page.next.map(|n| app.cursors.seal(&scope, &n.to_string())),
        },
    ))
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

async fn put_render(
    app: &App,
    place: Place,
    title: String,
    rev: u64,
    tid: Option<Uuid>,
    parts: &hyper::http::request::Parts,
    body: &mut Option<Incoming>,
) -> Result<Answer> {
    app.auth.check(&parts.headers)?;
    let b = bucket(app, &place)?;
    let content_type = content_type(&parts.headers)?;
    // Taken only now: a request refused above has its body drained by `handle`.
    let body = app
        .limits
        .read(&parts.headers, take_body(body)?, &app.metrics)
        .await?;
    if body.bytes.is_empty() {
        return Err(Problem::bad_request(
            "a render needs a body; this request has none",
        ));
    }
    if body.bytes.len() as u64 > b.config.max_value {
        return Err(Problem::too_large(format!(
            "a render of {} bytes is over bucket {}'s maximum of {} (max_value)",
            body.bytes.len(),
            b.name,
            b.config.max_value
        )));
    }
    #[cfg(feature = "cluster")]
    if let Some(node) = app.cluster.get() {
        let mut change = node.change(
            crate::cluster::message::Kind::Put,
            &place.domain,
            &title,
            Some(rev),
            tid,
        );
        change.content_type = content_type;
        change.value = body.bytes.to_vec();
        drop(body);
        let (sent, outcome) = node.write(&place.bucket, &change).await?;
        let seq = sent.seq;
        use crate::cluster::apply::Outcome;
        return match outcome {
            Outcome::Stored => Ok(cluster_created(rev, change.tid, seq)),
            Outcome::TakenDown => Err(Problem::conflict(format!(
                "{}/{title} revision {rev} is taken down; lift it (POST …/_lift) to store it \
                 again",
                place.domain
            ))),
            Outcome::Refused { why } => Err(Problem::bad_request(why)),
            other => Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the put at sequence {seq} was applied as {other:?}"),
            )),
        };
    }
    let (tx, rx) = oneshot::channel();
    let job = PutJob {
        domain: place.domain,
        title,
        rev,
        tid,
        content_type,
        value: body.bytes.clone(),
    };
    let (domain, title) = (job.domain.clone(), job.title.clone());
    if !b.submit(Job::Put(job, tx)) {
        return Err(closing());
    }
    let result = rx.await.map_err(|_| closing())?;
    drop(body);
    match result {
        Ok(tid) => {
            #[derive(Serialize)]
            struct Created {
                message: &'static str,
                rev: u64,
                tid: String,
            }
            let mut a = json(
                StatusCode::CREATED,
                &Created {
                    message: "Created.",
                    rev,
                    tid: tid.to_string(),
                },
            );
            a.headers_mut().insert(ETAG, etag(rev, tid));
            Ok(a)
        }
        Err(PutError::TakenDown) => Err(Problem::conflict(format!(
            "{domain}/{title} revision {rev} is taken down; lift it (POST …/_lift) to store it \
                again"
        ))),
        Err(PutError::Store(e)) => Err(Problem::from_store(&e)),
        Err(PutError::Commit(e)) => Err(Problem::from_store(&e)),
    }
}

fn closing() -> Problem {
    Problem::unavailable("the server is shutting down", 5)
}

async fn take_down(app: &App, place: Place, title: String, rev: Option<u64>) -> Result<Answer> {
    let b = bucket(app, &place)?;
    #[cfg(feature = "cluster")]
    if let Some(node) = app.cluster.get() {
        let kind = crate::cluster::message::Kind::TakeDown;
        return cluster_change(node, kind, &place, &title, rev, "Taken down.").await;
    }
    let (reply, rx) = oneshot::channel();
    let job = Job::TakeDown {
        domain: place.domain,
        title,
        rev,
        reply,
    };
    if !b.submit(job) {
        return Err(closing());
    }
    let removed = rx
        .await
        .map_err(|_| closing())?
        .map_err(|e| Problem::from_store(&e))?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "message": "Taken down.", "removed": removed }),
    ))
}

async fn lift(app: &App, place: Place, title: String, rev: Option<u64>) -> Result<Answer> {
    let b = bucket(app, &place)?;
    #[cfg(feature = "cluster")]
    if let Some(node) = app.cluster.get() {
        let kind = crate::cluster::message::Kind::Lift;
        return cluster_change(node, kind, &place, &title, rev, "Lifted.").await;
    }
    let (reply, rx) = oneshot::channel();
    let job = Job::Lift {
        domain: place.domain,
        title,
        rev,
        reply,
    };
    if !b.submit(job) {
        return Err(closing());
    }
    let lifted = rx
        .await
        .map_err(|_| closing())?
        .map_err(|e| Problem::from_store(&e))?;
    let message = if lifted {
        "Lifted."
    } else {
        "Nothing to lift."
    };
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "message": message, "lifted": lifted }),
    ))
}

/// `PUT P`: creates the bucket, or checks the settings given against the bucket's.
async fn create_bucket(
    app: &App,
    place: &Place,
    parts: &hyper::http::request::Parts,
    body: Incoming,
) -> Result<Answer> {
    let body = app.limits.read(&parts.headers, body, &app.metrics).await?;
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
    let created = tokio::task::block_in_place(|| app.registry.create(&place.bucket, &spec));
    match created {
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
        Err(CreateError::Failed(why)) => Err(unreadable(&place.bucket, &why)),
        Err(CreateError::Store(e)) => Err(Problem::from_store(&e)),
    }
}

/// A cluster's 201 for a write: JetStream holds it at stream sequence `seq`.
#[cfg(feature = "cluster")]
fn cluster_created(rev: u64, tid: Uuid, seq: u64) -> Answer {
    let mut a = json(
        StatusCode::CREATED,
        &serde_json::json!({
            "message": "Created.", "rev": rev, "tid": tid.to_string(), "seq": seq
        }),
    );
    a.headers_mut().insert(ETAG, etag(rev, tid));
    a.headers_mut()
        .insert(crate::cluster::node::SEQ, HeaderValue::from(seq));
    a
}

/// A take-down or lift in a cluster: published, and answered as a single node answers once an
/// owner has applied it in a durable commit.
#[cfg(feature = "cluster")]
async fn cluster_change(
    node: &crate::cluster::node::Node,
    kind: crate::cluster::message::Kind,
    place: &Place,
    title: &str,
    rev: Option<u64>,
    message: &str,
) -> Result<Answer> {
    use crate::cluster::apply::Outcome;
    let change = node.change(kind, &place.domain, title, rev, None);
    let (sent, outcome) = node.write(&place.bucket, &change).await?;
    let seq = sent.seq;
    let body = match outcome {
        Outcome::Removed { removed } => {
            serde_json::json!({ "message": message, "removed": removed, "seq": seq })
        }
        Outcome::Lifted { lifted } => serde_json::json!({
            "message": if lifted { message } else { "Nothing to lift." },
            "lifted": lifted,
            "seq": seq
        }),
        Outcome::Refused { why } => return Err(Problem::bad_request(why)),
        other => {
            return Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the change at sequence {seq} was applied as {other:?}"),
            ))
        }
    };
    let mut a = json(StatusCode::OK, &body);
    a.headers_mut()
        .insert(crate::cluster::node::SEQ, HeaderValue::from(seq));
    Ok(a)
}

/// `/_cluster/copy/BUCKET[/ID[/PARTITION]]`: copies of this node's stores that another owner
/// takes a partition over from (docs/CLUSTER.md § A node lost for good). With the token only.
#[cfg(feature = "cluster")]
async fn cluster_copy(
    app: &App,
    node: &Arc<crate::cluster::node::Node>,
    req: &hyper::http::request::Parts,
    rest: &str,
) -> Result<Answer> {
    use crate::cluster::seed;
    app.auth.check(&req.headers)?;
    let parts: Vec<&str> = rest.split('/').collect();
    if !valid_bucket_name(parts[0]) {
        return Err(Problem::bad_request(format!("bucket name {:?}", parts[0])));
    }
    match (&req.method, parts.as_slice()) {
        (&Method::POST, [bucket]) => {
            let started = seed::start_copy(node, app, bucket).await?;
            Ok(json(StatusCode::OK, &started))
        }
        (&Method::DELETE, [bucket, id]) => {
            seed::end_copy(app, bucket, id)?;
            Ok(json(
                StatusCode::OK,
                &serde_json::json!({ "message": "Copy dropped." }),
            ))
        }
        (&Method::GET, [bucket, id, partition]) => {
            let partition: u32 = partition
                .parse()
                .map_err(|_| Problem::bad_request("/_cluster/copy/BUCKET/ID/PARTITION"))?;
            let cursor: Option<String> = req.uri.query().and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "cursor")
                    .map(|(_, v)| v.into_owned())
            });
            let (body, next) =
                seed::copy_page(node, app, bucket, id, partition, cursor.as_deref()).await?;
            let mut a = Response::new(Full::new(Bytes::from(body)));
            a.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
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

/// What a cluster node does before the single node's routes: its own `/_cluster` routes, the
/// reserved domain refused, buckets only as declared, reads forwarded to an owner or held until
/// `x-wink-min-seq` is applied. `None`: the route answers as on a single node.
#[cfg(feature = "cluster")]
async fn cluster_gate(
    app: &App,
    node: &Arc<crate::cluster::node::Node>,
    req: &hyper::http::request::Parts,
) -> Result<Option<Answer>> {
    let path = req.uri.path();
    if path == "/_cluster" {
        if req.method != Method::GET {
            return Err(Problem::method_not_allowed("GET"));
        }
        return Ok(Some(json(StatusCode::OK, &node.status())));
    }
    if let Some(seq) = path.strip_prefix("/_cluster/outcome/") {
        if req.method != Method::GET {
            return Err(Problem::method_not_allowed("GET"));
        }
        let seq: u64 = seq
            .parse()
            .map_err(|_| Problem::bad_request("/_cluster/outcome/SEQUENCE"))?;
        let query: Vec<(String, String)> = req
            .uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
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
        let from = crate::cluster::node::replay(node, app)
            .await
            .map_err(|e| Problem::unavailable(format!("replay: {e}"), 2))?;
        return Ok(Some(json(
            StatusCode::OK,
            &serde_json::json!({ "message": "Replaying.", "from": from }),
        )));
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
        let dir = node.snapshot(app, bucket).await?;
        return Ok(Some(json(
            StatusCode::OK,
            &serde_json::json!({ "snapshot": dir }),
        )));
    }
    let Ok(target) = parse_path(path) else {
        return Ok(None);
    };
    let place = match &target {
        Target::Bucket(p)
        | Target::Titles(p)
        | Target::Title(p, _)
        | Target::Renders(p, _)
        | Target::Revision(p, _, _)
        | Target::Render(p, _, _, _)
        | Target::Lift(p, _, _) => p,
        Target::Health | Target::Metrics => return Ok(None),
    };
    if place.domain == crate::cluster::message::RESERVED_DOMAIN {
        return Err(Problem::bad_request(format!(
            "domain {} is reserved for the cluster's own records",
            place.domain
        )));
    }
    if !node.cfg.buckets.contains_key(&place.bucket) {
        return Err(Problem::not_found(format!(
            "no bucket {} in this cluster (a cluster's buckets are declared in its configuration)",
            place.bucket
        )));
    }
    let read = req.method == Method::GET || req.method == Method::HEAD;
    let title = match &target {
        Target::Title(_, t)
        | Target::Renders(_, t)
        | Target::Revision(_, t, _)
        | Target::Render(_, t, _, _) => t,
        _ => return Ok(None),
    };
    if !read {
        return Ok(None);
    }
    node.before_read(&place.domain, title, req).await
}

#[cfg(test)]
mod tests;
