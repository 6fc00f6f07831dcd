//! Errors as HTTP answers: `application/problem+json` bodies in RESTBase's (HyperSwitch's) form,
//! `{"type":"https://mediawiki.org/wiki/HyperSwitch/errors/not_found","title":"Not found.",
//! "method":"get","uri":"…","detail":"…"}`, and the mapping of the store's errors to statuses.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Response, StatusCode};
use serde::Serialize;

use wink_engine::Error;
use wink_service::{Refusal, ServiceError};

/// Where the problem types live (RESTBase's error type URIs).
const TYPE_BASE: &str = "https://mediawiki.org/wiki/HyperSwitch/errors/";

/// An answer other than success, with what the client needs to know.
#[derive(Clone, Debug)]
pub struct Problem {
    /// The answer's status.
    pub status: StatusCode,
    /// What the client is told, in the body's `detail`.
    pub detail: String,
    /// Seconds to wait before trying again (503).
    pub retry_after: Option<u32>,
    /// The methods a route takes (405): owned, as a router computes it.
    pub allow: Option<String>,
    /// A failure of the server's own, as the error log records it (with its files and
    /// offsets): the client's `detail` says only what kind it was, never a path.
    pub log: Option<String>,
}

impl Problem {
    /// A problem of `status`, telling the client `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
            retry_after: None,
            allow: None,
            log: None,
        }
    }

    /// A failure of the server's own: the client is told `what` kind; the error log gets
    /// `log` under the request's id.
    pub fn server_side(status: StatusCode, what: &str, log: String) -> Problem {
        Problem {
            log: Some(log),
            ..Problem::new(status, what)
        }
    }

    /// 400: the request is not valid.
    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }

    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, detail)
    }

    /// 409: the request contradicts what is stored.
    pub fn conflict(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::CONFLICT, detail)
    }

    /// 412: a condition of the request does not hold.
    pub fn precondition_failed(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::PRECONDITION_FAILED, detail)
    }

    /// 413: the body is larger than allowed.
    pub fn too_large(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::PAYLOAD_TOO_LARGE, detail)
    }

    /// 503: try again after `retry_after` seconds.
    pub fn unavailable(detail: impl Into<String>, retry_after: u32) -> Problem {
        Problem {
            retry_after: Some(retry_after),
            ..Problem::new(StatusCode::SERVICE_UNAVAILABLE, detail)
        }
    }

    /// 405: the route takes only the methods `allow` lists.
    pub fn method_not_allowed(allow: impl Into<String>) -> Problem {
        let allow = allow.into();
        let mut p = Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("this resource takes {allow}"),
        );
        p.allow = Some(allow);
        p
    }

    /// The store's error for a request: what the client got wrong is 4xx; a full disk is 507,
    /// a writer elsewhere or a failed writer being reopened 503, the rest (damage, I/O, a bug in
    /// Wink) 500. Those are the server's own failures: their messages name files and offsets, so
    /// they go to the error log and the client is told only their kind.
    pub fn from_store(e: &Error) -> Problem {
        let log = e.to_string();
        match e {
            Error::Invalid(what) => Problem::bad_request(what.clone()),
            Error::NotFound(what) => Problem::not_found(what.clone()),
            Error::Full { .. } => {
                Problem::server_side(StatusCode::INSUFFICIENT_STORAGE, "the store is full", log)
            }
            Error::Io { .. } if e.is_disk_full() => {
                Problem::server_side(StatusCode::INSUFFICIENT_STORAGE, "the disk is full", log)
            }
            Error::InUse { .. } | Error::Stale { .. } => Problem {
                retry_after: Some(1),
                ..Problem::server_side(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the bucket is busy (another writer, or a view being renewed); retry shortly",
                    log,
                )
            },
            // The bucket's writer thread reopens a failed writer before its next job.
            Error::WriterFailed { .. } => Problem {
                retry_after: Some(1),
                ..Problem::server_side(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the bucket's writer failed a sync and is being reopened; retry shortly",
                    log,
                )
            },
            Error::Unavailable(why) => Problem {
                retry_after: Some(2),
                ..Problem::server_side(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "something the request needs is out of reach; retry shortly",
                    why.clone(),
                )
            },
            Error::Corrupt { .. } => {
                Problem::server_side(StatusCode::INTERNAL_SERVER_ERROR, "damaged data", log)
            }
            Error::Io { .. } => {
                Problem::server_side(StatusCode::INTERNAL_SERVER_ERROR, "an I/O error", log)
            }
            // Never the client's fault, and retrying will not help until the bug is fixed.
            _ => Problem::server_side(StatusCode::INTERNAL_SERVER_ERROR, "an internal error", log),
        }
    }

    /// The service's refusal or failure as an answer: each kind has its status here, and only
    /// here.
    pub fn from_service(e: ServiceError) -> Problem {
        match e {
            ServiceError::Refused(Refusal::TakenDown { domain, title, rev }) => {
                Problem::conflict(format!(
                    "{domain}/{title} revision {rev} is taken down; lift it (POST …/_lift) to \
                     store it again"
                ))
            }
            ServiceError::Refused(Refusal::TooLarge(why)) => Problem::too_large(why),
            ServiceError::Refused(Refusal::Precondition(why)) => Problem::precondition_failed(why),
            ServiceError::Refused(Refusal::Rule(why)) | ServiceError::Invalid(why) => {
                Problem::bad_request(why)
            }
            ServiceError::NotFound(what) => Problem::not_found(what),
            ServiceError::Unavailable(u) => Problem {
                retry_after: Some(u.retry_after),
                log: u.log,
                ..Problem::new(StatusCode::SERVICE_UNAVAILABLE, u.why)
            },
            ServiceError::Store(e) => Problem::from_store(&e),
            ServiceError::Internal(why) => {
                Problem::server_side(StatusCode::INTERNAL_SERVER_ERROR, "an internal error", why)
            }
        }
    }

    /// The problem type's last path segment and its title.
    fn kind(&self) -> (&'static str, &'static str) {
        match self.status {
            StatusCode::BAD_REQUEST => ("bad_request", "Bad request."),
            StatusCode::UNAUTHORIZED => ("unauthorized", "Unauthorized."),
            StatusCode::NOT_FOUND => ("not_found", "Not found."),
            StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "Method not allowed."),
            StatusCode::REQUEST_TIMEOUT => ("request_timeout", "Request timeout."),
            StatusCode::CONFLICT => ("conflict", "Conflict."),
            StatusCode::PRECONDITION_FAILED => ("precondition_failed", "Precondition failed."),
            StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "Payload too large."),
            StatusCode::URI_TOO_LONG => ("uri_too_long", "URI too long."),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
                "request_header_fields_too_large",
                "Request header fields too large.",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                ("unsupported_media_type", "Unsupported media type.")
            }
            StatusCode::SERVICE_UNAVAILABLE => ("service_unavailable", "Service unavailable."),
            StatusCode::INSUFFICIENT_STORAGE => ("insufficient_storage", "Insufficient storage."),
            _ => ("server_error", "Internal server error."),
        }
    }

    /// The answer: status, problem+json body and the headers the status calls for.
    pub fn response(&self, method: &Method, uri: &str) -> Response<Full<Bytes>> {
        #[derive(Serialize)]
        struct Body<'a> {
            #[serde(rename = "type")]
            kind: String,
            title: &'a str,
            method: String,
            uri: &'a str,
            detail: &'a str,
        }
        let (kind, title) = self.kind();
        let body = Body {
            kind: format!("{TYPE_BASE}{kind}"),
            title,
            method: method.as_str().to_ascii_lowercase(),
            uri,
            detail: &self.detail,
        };
        // Serializing strings and a number into a String cannot fail.
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut resp = Response::new(Full::new(Bytes::from(json)));
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // A list of method names: always a valid header value.
        if let Some(v) = self
            .allow
            .as_deref()
            .and_then(|a| HeaderValue::from_str(a).ok())
        {
            h.insert(ALLOW, v);
        }
        resp
    }
}

/// A handler's problem, as the router carries it back: its status, and the problem itself,
/// which the front renders (`routes::handle`: the body names the request's method and target,
/// which a handler does not hold, and a failure of the server's own is logged under its id).
impl axum::response::IntoResponse for Problem {
    fn into_response(self) -> axum::response::Response {
        let mut a = self.status.into_response();
        a.extensions_mut().insert(self);
        a
    }
}

impl From<ServiceError> for Problem {
    fn from(e: ServiceError) -> Problem {
        Problem::from_service(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_statuses() {
        let io = |errno| {
            Error::io(std::path::Path::new("/d/c000001.data"), Some(7), {
                std::io::Error::from_raw_os_error(errno)
            })
        };
        assert_eq!(Problem::from_store(&io(libc::ENOSPC)).status, 507);
        let p = Problem::from_store(&io(libc::EIO));
        assert_eq!(p.status, 500);
        assert!(!p.detail.contains("/d/") && p.log.unwrap().contains("/d/c000001.data"));
        assert_eq!(Problem::from_store(&Error::invalid("x")).status, 400);
        assert_eq!(Problem::from_store(&Error::internal("x")).status, 500);
        let p = Problem::from_store(&Error::InUse { path: "/d".into() });
        assert_eq!((p.status.as_u16(), p.retry_after), (503, Some(1)));
        let p = Problem::from_store(&Error::writer_failed("/d/meta.data".as_ref()));
        assert_eq!((p.status.as_u16(), p.retry_after), (503, Some(1)));
        assert!(!p.detail.contains("/d/") && p.log.unwrap().contains("/d/meta.data"));
    }

    #[test]
    fn bodies_are_problem_json() {
        let r = Problem::not_found("no render").response(&Method::GET, "/a/b");
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
    }
}
