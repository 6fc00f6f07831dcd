//! What the service answers when it does not do what was asked: one kind per way a caller must
//! react, decided here and turned into an HTTP status (or an exit code) only at the edge.

use std::sync::Arc;

use wink_engine::Error;

/// Why a request to the service was not done.
#[derive(Debug, Clone)]
pub enum ServiceError {
    /// Refused by the store's rules, the same on every replica: asking again changes nothing.
    Refused(Refusal),
    /// Not now (a bucket that could not be opened, a server closing, NATS out of reach): the
    /// same request may succeed later.
    Unavailable(Unavailable),
    /// The request itself is wrong; nothing was changed.
    Invalid(String),
    /// What the request names does not exist (a bucket).
    NotFound(String),
    /// The store failed under the request (damaged data, I/O, a full disk): the error itself,
    /// whose message names files and offsets, for the edge to log and to classify.
    Store(Arc<Error>),
    /// A state that should not occur (a bug in Wink), described for the error log.
    Internal(String),
}

/// How the store's rules refused a write.
#[derive(Debug, Clone)]
pub enum Refusal {
    /// The revision (or its title) is taken down: a lift comes first.
    TakenDown {
        /// The domain of the title.
        domain: String,
        /// The title.
        title: String,
        /// The revision refused.
        rev: u64,
    },
    /// Larger than a limit allows (a value, a message).
    TooLarge(String),
    /// Another rule of the store (a tid out of order, a value the bucket refuses), as it said.
    Rule(String),
    /// A condition of the write (`If-Match`, `If-None-Match`) does not hold: why.
    Precondition(String),
}

/// A refusal for now.
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// What the caller is told (never a file path).
    pub why: String,
    /// Seconds after which trying again makes sense.
    pub retry_after: u32,
    /// What the error log gets, when there is more to it than `why` (paths, the store's error).
    pub log: Option<String>,
}

impl ServiceError {
    /// Not now, for `why`; try again after `retry_after` seconds.
    pub fn unavailable(why: impl Into<String>, retry_after: u32) -> ServiceError {
        ServiceError::Unavailable(Unavailable {
            why: why.into(),
            retry_after,
            log: None,
        })
    }

    /// The server is closing: nothing more is taken.
    pub fn closing() -> ServiceError {
        ServiceError::unavailable("the server is shutting down", 5)
    }

    /// The store's error for a request: what the store says is the caller's fault (invalid
    /// input, nothing there) keeps that kind; everything else is the store's failure.
    pub fn from_store(e: Error) -> ServiceError {
        match e {
            Error::Invalid(why) => ServiceError::Invalid(why),
            Error::NotFound(what) => ServiceError::NotFound(what),
            e => ServiceError::Store(Arc::new(e)),
        }
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Refused(Refusal::TakenDown { domain, title, rev }) => {
                write!(f, "{domain}/{title} revision {rev} is taken down")
            }
            ServiceError::Refused(
                Refusal::TooLarge(why) | Refusal::Rule(why) | Refusal::Precondition(why),
            ) => f.write_str(why),
            ServiceError::Unavailable(u) => f.write_str(&u.why),
            ServiceError::Invalid(why) | ServiceError::NotFound(why) => f.write_str(why),
            ServiceError::Store(e) => write!(f, "{e}"),
            ServiceError::Internal(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ServiceError {}
