//! The service core: what `wink serve` does with a data root, whatever the protocol in front.
//!
//! | module | what |
//! |---|---|
//! | [`registry`] | the buckets of a root, opened once, with their read handles and counts |
//! | [`commit`] | group commit: one writer thread per bucket makes batches of writes durable |
//! | [`spec`] | a bucket's settings as clients give them (RESTBase's bucket bodies included) |
//! | [`writes`] | where writes go: [`Writes`], on this node ([`LocalWrites`]) or a cluster's |
//! | [`gate`] | where a read is answered: here ([`LocalGate`]), by another node, or after a wait |
//! | [`conditions`] | conditional puts (`If-Match`, `If-None-Match`), checked by the writer |
//! | [`error`] | why a request was not done ([`ServiceError`]), typed to the edge |
//! | [`histogram`] | fixed-bound histograms of the commits' batches and times |
//!
//! It knows no HTTP: the HTTP front (the crate `wink_serve`) and the cluster (`wink_cluster`)
//! sit on it, never the reverse; Cargo enforces it, as this crate depends on neither (nor on
//! hyper or NATS).
//!
//! ```
//! use std::sync::Arc;
//! use wink_service::registry::Registry;
//!
//! let root = tempfile::tempdir()?;
//! // A data root's buckets, without background maintenance, at most 16 of them.
//! let registry = Arc::new(Registry::open(root.path(), None, 16)?);
//! assert!(registry.buckets().is_empty());
//! registry.close();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod commit;
pub mod conditions;
pub mod error;
pub mod gate;
pub mod histogram;
pub mod registry;
pub mod spec;
pub mod writes;

pub use conditions::{Preconditions, Tags};
pub use error::{Refusal, ServiceError};
pub use gate::{LocalGate, Peer, ReadGate};
pub use histogram::Histogram;
pub use writes::{Change, Creating, Done, LocalWrites, Pending, Receipt, Write, Writes};
