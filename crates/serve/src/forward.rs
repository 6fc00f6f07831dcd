//! Reads relayed to another node (a cluster's owner of the title), and the HTTP/1 client
//! connections nodes use to talk to each other.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};

type Answer = Response<Full<Bytes>>;

/// How long a forwarded read waits for one owner: two owners tried in turn stay under the
/// router's 20 s server timeout, so a frozen owner costs a retry at the next, not a 504.
const FORWARD_PATIENCE: Duration = Duration::from_secs(8);
/// The largest answer a forwarded read relays.
const MAX_FORWARDED: usize = 512 << 20;
/// Header of a forwarded request: its receiver answers it itself, never forwards it again.
pub const FORWARDED: &str = "x-wink-forwarded";
/// Header of a read that waits until a cluster node has applied its log up to a sequence.
pub const MIN_SEQ: &str = "x-wink-min-seq";
/// Header of a node that answered a forwarded read.
pub const FORWARDED_TO: &str = "x-wink-forwarded-to";

/// An HTTP/1 connection to `authority` (`HOST:PORT`), its driver spawned: what a node sends
/// another node or `wink cluster` sends a node goes through one of these.
pub async fn http1_connect(
    authority: &str,
) -> std::result::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(authority.to_string())
        .await
        .map_err(|e| e.to_string())?;
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

/// One GET or HEAD to `base`, answered whole.
pub async fn forward_to(
    base: &str,
    parts: &hyper::http::request::Parts,
) -> std::result::Result<Answer, String> {
    let authority = base
        .strip_prefix("http://")
        .unwrap_or(base)
        .trim_end_matches('/');
    let mut send = tokio::time::timeout(Duration::from_secs(2), http1_connect(authority))
        .await
        .map_err(|_| "connect timed out".to_string())??;
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut req = Request::builder().method(parts.method.clone()).uri(path);
    for (k, v) in &parts.headers {
        if k != hyper::header::HOST && k != hyper::header::CONNECTION {
            req = req.header(k, v);
        }
    }
    let req = req
        .header(hyper::header::HOST, authority)
        .header(FORWARDED, "1")
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(FORWARD_PATIENCE, send.send_request(req))
        .await
        .map_err(|_| format!("no answer within {}s", FORWARD_PATIENCE.as_secs()))?
        .map_err(|e| e.to_string())?;
    let (head, body) = answer.into_parts();
    let body = http_body_util::Limited::new(body, MAX_FORWARDED)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let mut a = Response::from_parts(head, Full::new(body));
    a.headers_mut().remove(hyper::header::TRANSFER_ENCODING);
    if a.status() == StatusCode::SERVICE_UNAVAILABLE {
        return Err("the owner answered 503".into());
    }
    Ok(a)
}
