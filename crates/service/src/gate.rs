//! Where a read is answered. On a single node every read is answered here ([`LocalGate`]); in a
//! cluster a node answers only for the partitions it owns and has caught up on, sends the
//! others to an owner, and holds a read that names a log sequence until it has applied it.
//! The HTTP front asks the gate before each read and does what it says; it does not know which
//! gate it has.

use super::error::ServiceError;
use super::writes::Pending;

/// Another node that may answer a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its name.
    pub name: String,
    /// Its base URL (`http://host:port`).
    pub url: String,
}

/// Decides where requests about a bucket, a domain or a title are answered.
pub trait ReadGate: Send + Sync {
    /// Whether this service takes requests about `domain` in `bucket` at all (a cluster's
    /// buckets are declared; its own records' domain is reserved).
    fn admit(&self, bucket: &str, domain: &str) -> Result<(), ServiceError>;

    /// The nodes to ask first, in order, for a read of `title`: none when this node answers it
    /// itself, or when the read was forwarded here by another node already.
    fn peers(&self, domain: &str, title: &str, forwarded: bool) -> Vec<Peer>;

    /// Waits until this node may answer a read of `title` (its log applied up to `min_seq`,
    /// when the reader names one), or says why it may not.
    fn ready(
        &self,
        domain: &str,
        title: &str,
        min_seq: Option<u64>,
        forwarded: bool,
    ) -> Pending<'_, ()>;

    /// Whether a title listing spans more than this node's store (a cluster's): then
    /// [`ReadGate::titles`] answers it, in key order, rather than the local store's walk.
    fn lists_titles(&self) -> bool {
        false
    }

    /// The titles of `domain` in `bucket` that sort after `after` (bytewise), in that order: at
    /// most `limit + 1` of them, so that the caller knows whether more follow. Asked only of a
    /// gate whose [`ReadGate::lists_titles`] is true.
    fn titles(
        &self,
        bucket: &str,
        domain: &str,
        after: Option<String>,
        limit: usize,
    ) -> Pending<'_, Vec<String>> {
        let _ = (bucket, domain, after, limit);
        Box::pin(async {
            Err(ServiceError::Internal(
                "this gate lists no titles itself".into(),
            ))
        })
    }
}

/// A single node's gate: every read is answered here, at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalGate;

impl ReadGate for LocalGate {
    fn admit(&self, _bucket: &str, _domain: &str) -> Result<(), ServiceError> {
        Ok(())
    }

    fn peers(&self, _domain: &str, _title: &str, _forwarded: bool) -> Vec<Peer> {
        Vec::new()
    }

    fn ready(&self, _: &str, _: &str, _: Option<u64>, _: bool) -> Pending<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}
