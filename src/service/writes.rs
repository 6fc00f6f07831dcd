//! Writes, wherever they are made durable: [`Writes`] takes a [`Write`] and answers once it is
//! acknowledged. [`LocalWrites`] hands it to the bucket's group commit on this node; the cluster
//! publishes it to its log and answers once an owner has applied it in a durable commit. The
//! callers (the HTTP front) do not know which.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::commit::{Job, PutError, PutJob};
use super::error::{Refusal, ServiceError};
use super::registry::Registry;

/// A change to one title of a bucket, as received.
#[derive(Debug, Clone)]
pub struct Write {
    /// The bucket.
    pub bucket: String,
    /// The title's domain.
    pub domain: String,
    /// The title.
    pub title: String,
    /// What to do.
    pub change: Change,
    /// When the write arrived, seconds since the Unix epoch: a replicated write is applied at
    /// this time on every replica, so retention counts the same everywhere.
    pub arrival: i64,
}

/// What a [`Write`] does.
#[derive(Debug, Clone)]
pub enum Change {
    /// Stores a render (a tid is made when it has none).
    Put {
        /// The revision.
        rev: u64,
        /// The render's tid, when the client chose it.
        tid: Option<Uuid>,
        /// Its content type.
        content_type: String,
        /// Its bytes.
        value: Bytes,
    },
    /// Takes down a revision, or (`None`) the whole title.
    TakeDown {
        /// The revision, or the title.
        rev: Option<u64>,
    },
    /// Lifts a take-down of a revision, or (`None`) of the title.
    Lift {
        /// The revision, or the title.
        rev: Option<u64>,
    },
}

/// What an acknowledged write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// A render stored, under this tid.
    Stored {
        /// The revision.
        rev: u64,
        /// The tid it is stored under.
        tid: Uuid,
    },
    /// A take-down, and the renders it removed.
    Removed(usize),
    /// A lift, and whether there was a take-down to lift.
    Lifted(bool),
}

/// An acknowledgement: what the write did, and where a cluster's log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// What it did.
    pub done: Done,
    /// The cluster log's sequence of the write (`None` on a single node).
    pub seq: Option<u64>,
}

/// A future of the service, boxed so that an implementation can be chosen at run time.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, ServiceError>> + Send + 'a>>;

/// Where writes go. An answer is given only once the write is durable (`Ok`), or refused, or
/// known not to be promised (`Err`).
pub trait Writes: Send + Sync {
    /// Makes `write` durable and answers what it did.
    fn write(&self, write: Write) -> Pending<'_, Receipt>;
}

/// The writes of a single node: each bucket's group commit.
pub struct LocalWrites {
    registry: Arc<Registry>,
}

impl LocalWrites {
    /// Writes through the buckets of `registry`.
    pub fn new(registry: Arc<Registry>) -> LocalWrites {
        LocalWrites { registry }
    }
}

impl Writes for LocalWrites {
    fn write(&self, w: Write) -> Pending<'_, Receipt> {
        Box::pin(async move {
            let b = self.registry.open_bucket(&w.bucket)?;
            let Write {
                domain,
                title,
                change,
                ..
            } = w;
            let done = match change {
                Change::Put {
                    rev,
                    tid,
                    content_type,
                    value,
                } => {
                    let (reply, rx) = oneshot::channel();
                    let job = PutJob {
                        domain: domain.clone(),
                        title: title.clone(),
                        rev,
                        tid,
                        content_type,
                        value,
                    };
                    if !b.submit(Job::Put(job, reply)) {
                        return Err(ServiceError::closing());
                    }
                    match rx.await.map_err(|_| ServiceError::closing())? {
                        Ok(tid) => Done::Stored { rev, tid },
                        Err(PutError::TakenDown) => {
                            return Err(ServiceError::Refused(Refusal::TakenDown {
                                domain,
                                title,
                                rev,
                            }))
                        }
                        Err(PutError::Store(e)) => return Err(ServiceError::from_store(e)),
                        Err(PutError::Commit(e)) => return Err(ServiceError::Store(e)),
                    }
                }
                Change::TakeDown { rev } => {
                    let (reply, rx) = oneshot::channel();
                    let job = Job::TakeDown {
                        domain,
                        title,
                        rev,
                        reply,
                    };
                    if !b.submit(job) {
                        return Err(ServiceError::closing());
                    }
                    let removed = rx.await.map_err(|_| ServiceError::closing())?;
                    Done::Removed(removed.map_err(ServiceError::from_store)?)
                }
                Change::Lift { rev } => {
                    let (reply, rx) = oneshot::channel();
                    let job = Job::Lift {
                        domain,
                        title,
                        rev,
                        reply,
                    };
                    if !b.submit(job) {
                        return Err(ServiceError::closing());
                    }
                    let lifted = rx.await.map_err(|_| ServiceError::closing())?;
                    Done::Lifted(lifted.map_err(ServiceError::from_store)?)
                }
            };
            Ok(Receipt { done, seq: None })
        })
    }
}
