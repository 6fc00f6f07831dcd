//! A replicated cluster of Wink nodes: NATS JetStream as the log and the placement store,
//! HAProxy in front. The design, its promises and its failure cases: docs/CLUSTER.md.
//!
//! | file | concept |
//! |---|---|
//! | `config.rs` | the configuration file ([`ClusterConfig`]): nodes, NATS servers, P, R, buckets |
//! | [`message`] | a change as a stream message: framing, subject, message id, partition of a key |
//! | `placement.rs` | the partition → owners map (compare-and-set in a KV bucket), leases |
//! | [`apply`] | a batch of messages into a store, with the applied sequences, in one commit |
//! | `node.rs` | a running node: publishing, the apply loop, forwarding, read-your-writes |
//! | `seed.rs` | a partition the stream cannot replay, copied from another owner |
//! | `routes.rs` | the node's own `/_cluster` routes, mounted on the HTTP front |
//! | [`admin`] | `wink cluster status`, `verify`, `rebalance` |
//!
//! Compiled with the `cluster` feature (in the default features); an embedder that turns the
//! default features off compiles neither this nor async-nats.

pub mod admin;
pub mod apply;
mod config;
pub mod message;
pub(crate) mod node;
mod placement;
pub(crate) mod routes;
mod seed;

pub use config::ClusterConfig;
