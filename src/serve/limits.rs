//! Bounds on what clients can make the server hold: a request body's size (refused at the limit
//! while it streams in, never buffered past it), the time a body may take, and the body bytes in
//! flight across all requests (503 with `Retry-After` once they are at their limit).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::{HeaderMap, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::metrics::Metrics;
use super::problem::Problem;

/// In-flight bytes are counted in units of this many (a semaphore's permits are `u32`).
const UNIT: u64 = 1024;

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

    /// Request-body bytes held now (in whole KiB), and the most that may be.
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
            "# HELP wink_http_inflight_bytes Request-body bytes held now (KiB units).\n\
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
        headers: &HeaderMap,
        body: Incoming,
        metrics: &Metrics,
    ) -> Result<Body, Problem> {
        let declared = match headers.get(CONTENT_LENGTH) {
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| Problem::bad_request("Content-Length: not a number"))?,
            ),
            None => None,
        };
        if let Some(len) = declared {
            if len > self.max_body {
                return Err(self.too_large());
            }
        }
        let mut held = Vec::new();
        if let Some(len) = declared {
            held.push(self.hold(len, metrics)?);
        }
        let read = async {
            let mut buf = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
            let mut body = body;
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| Problem::bad_request(format!("request body: {e}")))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let total = buf.len() as u64 + data.len() as u64;
                if total > self.max_body {
                    return Err(self.too_large());
                }
                if declared.is_none() {
                    held.push(self.hold(data.len() as u64, metrics)?);
                }
                buf.extend_from_slice(&data);
            }
            Ok(buf.freeze())
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

    fn hold(&self, bytes: u64, metrics: &Metrics) -> Result<OwnedSemaphorePermit, Problem> {
        self.inflight
            .clone()
            .try_acquire_many_owned(units(bytes))
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
