//! A replicated cluster of Wink nodes: NATS JetStream as the log and the placement store,
//! HAProxy in front. The design, its promises and its failure cases: docs/CLUSTER.md.
//!
//! | file | concept |
//! |---|---|
//! | [`config`] | the configuration file: nodes, NATS servers, P, R, declared buckets |
//! | [`message`] | a change as a stream message: framing, subject, message id, partition of a key |
//! | [`placement`] | the partition → owners map (compare-and-set in a KV bucket), leases |
//! | [`apply`] | a batch of messages into a store, with the applied sequences, in one commit |
//! | [`node`] | a running node: publishing, the apply loop, forwarding, read-your-writes |
//! | [`seed`] | a partition the stream cannot replay, copied from another owner |
//! | [`admin`] | `wink cluster status`, `verify`, `rebalance` |
//!
//! Compiled with the `cluster` feature (in the default features); an embedder that turns the
//! default features off compiles neither this nor async-nats.

pub mod admin;
pub mod apply;
pub mod config;
pub mod message;
pub mod node;
pub mod placement;
pub mod routes;
pub mod seed;

pub use config::ClusterConfig;
