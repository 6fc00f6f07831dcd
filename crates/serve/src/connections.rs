//! Accepting connections: a bounded number served at once, each by hyper's HTTP/1.1 with a
//! header read timeout; past the bound, a connection gets one 503 with `Retry-After` and is
//! closed (a bounded number of those too: past that, it is closed at once). On a stop, the
//! listener closes first, then every connection finishes its request under way.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceBuilder;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;

use super::problem::Problem;
use super::routes::{self, App};

/// Connections past the limit that are answered 503 at once, at most.
pub const OVERFLOW: usize = 64;

/// Connection settings.
#[derive(Clone, Debug)]
pub struct ConnLimits {
    pub max_connections: usize,
    /// How long a request's head may take to arrive (also an idle keep-alive connection's
    /// wait for its next request).
    pub header_timeout: Duration,
    /// How long a write may make no progress (a client that reads nothing): the connection is
    /// then cut, and what its answer held is given back.
    pub write_timeout: Duration,
    /// How long in-flight requests may take to finish once a stop began.
    pub drain_timeout: Duration,
}

fn builder(header_timeout: Duration) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true)
        .max_buf_size(64 << 10);
    b
}

/// gzip for clients that accept it (`Accept-Encoding`), on answers of text and JSON of 1 KiB or
/// more: renders (HTML) shrink to a fifth or less. `Vary: Accept-Encoding` is added.
fn compression() -> CompressionLayer<impl Predicate> {
    CompressionLayer::new()
        .gzip(true)
        .compress_when(SizeAbove::new(1024).and(NotForContentType::IMAGES))
}

/// Serves `listener` until `stop` resolves, then drains. Returns when every connection is done
/// (or the drain timeout passed).
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    limits: ConnLimits,
    stop: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW));
    let graceful = GracefulShutdown::new();
    let http = builder(limits.header_timeout);
    let router = routes::router(app.clone());
    tokio::pin!(stop);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                // Out of descriptors and the like: pause instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.write_timeout));
        let io = TokioIo::new(Box::pin(stream));
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let app = app.clone();
                let router = router.clone();
                let metrics = app.metrics.clone();
                metrics.connections_open.fetch_add(1, Ordering::Relaxed);
                let svc = ServiceBuilder::new()
                    .layer(compression())
                    .service_fn(move |req| routes::handle(app.clone(), router.clone(), req));
                let conn = graceful.watch(http.serve_connection(io, TowerToHyperService::new(svc)));
                tokio::spawn(async move {
                    let _ = conn.await;
                    metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
                    drop(slot);
                });
            }
            Err(_) => {
                app.metrics
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                let Ok(permit) = overflow.clone().try_acquire_owned() else {
                    continue; // dropped: closed at once
                };
                let mut http = builder(Duration::from_secs(2));
                http.keep_alive(false);
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let p = Problem::unavailable(
                        "the server has as many connections as it may; retry shortly",
                        1,
                    );
                    let r: Response<Full<Bytes>> = p.response(req.method(), req.uri().path());
                    Ok::<_, std::convert::Infallible>(r)
                });
                tokio::spawn(async move {
                    let conn = http.serve_connection(io, svc);
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.drain_timeout, graceful.shutdown()).await;
}
