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
use wink_engine::store::Labels;

use super::commit::{Job, PutError, PutJob};
use super::conditions::Preconditions;
use super::error::{Refusal, ServiceError};
use super::registry::{Bucket, CreateError, Created, Registry};
use super::spec::BucketSpec;

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
        /// Its content encoding and language.
        labels: Labels,
        /// Its bytes.
        value: Bytes,
        /// What the store must hold for the put to be made (`If-Match`, `If-None-Match`).
        conditions: Preconditions,
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

/// A future of a bucket's creation.
pub type Creating<'a> = Pin<Box<dyn Future<Output = Result<Created, CreateError>> + Send + 'a>>;

/// Where writes go. An answer is given only once the write is durable (`Ok`), or refused, or
/// known not to be promised (`Err`).
pub trait Writes: Send + Sync {
    /// Makes `write` durable and answers what it did.
    fn write(&self, write: Write) -> Pending<'_, Receipt>;

    /// Creates bucket `name` with `spec`'s settings wherever this service keeps buckets, or
    /// checks them against the bucket's when it exists ([`Registry::create`]'s answers).
    fn create_bucket(&self, name: String, spec: BucketSpec) -> Creating<'_>;

    /// The open bucket `name` a write goes to (its settings bound the write); 404 when the
    /// service has no such bucket. A cluster node opens a bucket made through another node a
    /// moment ago first.
    fn bucket_for_write(&self, name: String) -> Pending<'_, Arc<Bucket>>;
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
                    labels,
                    value,
                    conditions,
                } => {
                    let job = PutJob {
                        domain: domain.clone(),
                        title: title.clone(),
                        rev,
                        tid,
                        content_type,
                        labels,
                        value,
                        conditions,
                    };
                    match on_writer(&b, |reply| Job::Put(job, reply)).await? {
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
                        Err(PutError::Precondition(why)) => {
                            return Err(ServiceError::Refused(Refusal::Precondition(why)))
                        }
                    }
                }
                Change::TakeDown { rev } => {
                    let removed = on_writer(&b, |reply| Job::TakeDown {
                        domain,
                        title,
                        rev,
                        reply,
                    });
                    Done::Removed(removed.await?.map_err(ServiceError::from_store)?)
                }
                Change::Lift { rev } => {
                    let lifted = on_writer(&b, |reply| Job::Lift {
                        domain,
                        title,
                        rev,
                        reply,
                    });
                    Done::Lifted(lifted.await?.map_err(ServiceError::from_store)?)
                }
            };
            Ok(Receipt { done, seq: None })
        })
    }

    fn bucket_for_write(&self, name: String) -> Pending<'_, Arc<Bucket>> {
        Box::pin(async move { self.registry.open_bucket(&name) })
    }

    fn create_bucket(&self, name: String, spec: BucketSpec) -> Creating<'_> {
        let registry = self.registry.clone();
        Box::pin(async move {
            // Making a store's files blocks: off the runtime's workers.
            tokio::task::spawn_blocking(move || registry.create(&name, &spec))
                .await
                .map_err(|e| {
                    CreateError::Store(wink_engine::Error::internal(format!(
                        "creating a bucket: {e}"
                    )))
                })?
        })
    }
}

/// Hands the job `make` builds around its answer's sender to the bucket's writer thread, and
/// waits for the answer; a bucket that closes first is unavailable.
async fn on_writer<T>(
    b: &Bucket,
    make: impl FnOnce(oneshot::Sender<T>) -> Job,
) -> Result<T, ServiceError> {
    let (reply, rx) = oneshot::channel();
    if !b.submit(make(reply)) {
        return Err(ServiceError::closing());
    }
    rx.await.map_err(|_| ServiceError::closing())
}
