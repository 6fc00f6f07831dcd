//! Bounds on what clients can make the server hold: a request body's size (refused at the limit
//! while it streams in, never buffered past it), the time a body may take, and the body bytes in
//! flight across all requests (503 with `Retry-After` once they are at their limit).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::http::request::Parts;
use hyper::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::metrics::Metrics;
use super::problem::Problem;

/// In-flight bytes are counted in units of this many (a semaphore's permits are `u32`).
const UNIT: u64 = 1024;
/// A body's buffer when its first bytes arrive, at least (then doubled as needed).
const FIRST_BUFFER: usize = 64 << 10;

/// The request-body limits of one server.
#[derive(Debug)]
pub struct BodyLimits {
    /// The largest body taken.
    pub max_body: u64,
    /// How long a whole body may take to arrive.
    pub timeout: Duration,
    /// Body bytes held across requests, in [`UNIT`]s.
    inflight: Arc<Semaphore>,
    /// The semaphore's permits in all.
    total_units: u32,
}

/// A body read in whole, and its share of the in-flight bytes (released when dropped).
#[derive(Debug)]
pub struct Body {
    pub bytes: Bytes,
    _held: Vec<OwnedSemaphorePermit>,
}

/// The body bytes a request's client has sent that the server read (for the access log): put in
/// the request's extensions, counted by [`BodyLimits::read`] and by the drain of a refused body.
#[derive(Clone, Debug, Default)]
pub struct Received(Arc<std::sync::atomic::AtomicU64>);

impl Received {
    pub fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A route's own bound on a body, below the server's (a bucket's `max_value`).
pub struct Within {
    pub bytes: u64,
    /// The 413's detail past it.
    pub over: String,
}

fn units(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

impl BodyLimits {
    pub fn new(max_body: u64, max_inflight: u64, timeout: Duration) -> BodyLimits {
        let total_units = units(max_inflight.max(max_body));
        BodyLimits {
            max_body,
            timeout,
            inflight: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
        }
    }

    /// Request-body bytes held now (buffers allocated, rounded up to whole KiB each), and the
    /// most that may be.
    pub fn inflight_bytes(&self) -> (u64, u64) {
        let total = u64::from(self.total_units);
        let free = self.inflight.available_permits() as u64;
        (total.saturating_sub(free) * UNIT, total * UNIT)
    }

    /// The in-flight gauges of `/metrics`.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let (held, limit) = self.inflight_bytes();
        let _ = writeln!(
            out,
            "# HELP wink_http_inflight_bytes Request-body buffer bytes held now.\n\
             # TYPE wink_http_inflight_bytes gauge\nwink_http_inflight_bytes {held}\n\
             # HELP wink_http_inflight_limit_bytes The most request-body bytes held at once.\n\
             # TYPE wink_http_inflight_limit_bytes gauge\nwink_http_inflight_limit_bytes {limit}"
        );
    }

    /// Reads a request's body: 413 past `max_body` (before reading when Content-Length says so,
    /// otherwise at the first chunk past it), 503 when the server holds as many body bytes as it
    /// may, 408 when the body takes longer than the timeout, 400 when the client breaks off.
    pub async fn read(
        &self,
        parts: &Parts,
        body: Incoming,
        metrics: &Metrics,
    ) -> Result<Body, Problem> {
        self.read_within(parts, body, metrics, None).await
    }

    /// [`BodyLimits::read`], and 413 past `within` too, in the same way (before reading when
    /// Content-Length says so, otherwise at the first chunk past it).
    pub async fn read_within(
        &self,
        parts: &Parts,
        body: Incoming,
        metrics: &Metrics,
        within: Option<Within>,
    ) -> Result<Body, Problem> {
        let headers = &parts.headers;
        let received = parts
            .extensions
            .get::<Received>()
            .cloned()
            .unwrap_or_default();
        let (max, over) = match within {
            Some(w) if w.bytes < self.max_body => (w.bytes, Some(w.over)),
            _ => (self.max_body, None),
        };
        let too_large = || match &over {
            Some(over) => Problem::too_large(over.clone()),
            None => self.too_large(),
        };
        let declared = match headers.get(CONTENT_LENGTH) {
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| Problem::bad_request("Content-Length: not a number"))?,
            ),
            None => None,
        };
        if declared.is_some_and(|len| len > max) {
            return Err(too_large());
        }
        // Charged for the buffer actually allocated, as it grows: a head that declares a large
        // body and sends nothing holds nothing, and a flood of tiny chunks holds their bytes.
        let mut held: Vec<OwnedSemaphorePermit> = Vec::new();
        let mut held_units = 0u32;
        let mut charge = |bytes: usize| -> Result<(), Problem> {
            let want = units(bytes as u64);
            if want > held_units {
                held.push(self.hold_units(want - held_units, metrics)?);
                held_units = want;
            }
            Ok(())
        };
        let cap = declared.unwrap_or(max).min(max);
        let read = async {
            // A Vec, grown exactly as asked: a BytesMut may allocate twice what it is asked for.
            let mut buf: Vec<u8> = Vec::new();
            let mut body = body;
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| Problem::bad_request(format!("request body: {e}")))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                received.add(data.len());
                let total = buf.len() as u64 + data.len() as u64;
                if total > max {
                    return Err(too_large());
                }
                if buf.capacity() - buf.len() < data.len() {
                    // Doubling, up to what the body may be at most.
                    let target = (buf.capacity() * 2)
                        .max(FIRST_BUFFER)
                        .min(cap.max(total) as usize)
                        .max(total as usize);
                    charge(target)?;
                    buf.reserve_exact(target - buf.len());
                }
                charge(buf.capacity())?;
                buf.extend_from_slice(&data);
            }
            Ok(Bytes::from(buf))
        };
        let bytes = match tokio::time::timeout(self.timeout, read).await {
            Ok(bytes) => bytes?,
            Err(_) => {
                return Err(Problem::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the body did not arrive within {:?}", self.timeout),
                ))
            }
        };
        metrics
            .bytes_in
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(Body { bytes, _held: held })
    }

    fn hold_units(&self, units: u32, metrics: &Metrics) -> Result<OwnedSemaphorePermit, Problem> {
        self.inflight
            .clone()
            .try_acquire_many_owned(units)
            .map_err(|_| {
                metrics.inflight_refused.fetch_add(1, Ordering::Relaxed);
                Problem::unavailable(
                    "the server holds as many request bodies as it may; retry shortly",
                    1,
                )
            })
    }

    fn too_large(&self) -> Problem {
        Problem::too_large(format!(
            "the body is over this server's limit of {} bytes (--max-body)",
            self.max_body
        ))
    }
}
