//! A replicated cluster of Wink nodes: NATS JetStream as the log and the placement store,
//! HAProxy in front. The design, its promises and its failure cases: docs/CLUSTER.md.
//!
//! | file | concept |
//! |---|---|
//! | `config.rs` | the configuration file ([`ClusterConfig`]): nodes, NATS servers, P, R, buckets |
//! | [`message`] | a change as a stream message: framing, subject, message id, partition of a key |
//! | `placement.rs` | the partition → owners map (compare-and-set in a KV bucket), leases |
//! | `catalog.rs` | the cluster's buckets (compare-and-set in the same KV bucket), opened by all |
//! | [`apply`] | a batch of messages into a store, with the applied sequences, in one commit |
//! | `node.rs` | a running node: publishing, the apply loop, forwarding, read-your-writes |
//! | `seed.rs` | a partition the stream cannot replay, copied from another owner |
//! | `listing.rs` | title listings of the whole cluster, one owner per partition, key order |
//! | [`dump`] | a whole cluster's titles and values in key order, for `wink export --cluster` |
//! | `routes.rs` | the node's own `/_cluster` routes, mounted on the HTTP front |
//! | `router.rs` | HAProxy's partition map, kept current through its runtime API |
//! | [`admin`] | `wink cluster status`, `verify`, `rebalance` |
//!
//! It sits on the service core (the crate `wink_service`), whose `Writes` and `ReadGate` a
//! running node implements, and on the HTTP front (the crate `wink_serve`), which [`serve`] starts
//! with the node in place of the local writes and reads, and its routes mounted.
//!
//! ```no_run
//! use wink_cluster::{serve, ClusterConfig};
//! use wink_serve::ServeOptions;
//!
//! let cfg = ClusterConfig::read(std::path::Path::new("cluster.toml"))?;
//! serve(ServeOptions::new("/srv/wink".into()), cfg, |addr| println!("node on {addr}"))?;
//! # Ok::<(), wink_engine::Error>(())
//! ```

#![warn(missing_docs)]

pub mod admin;
pub mod apply;
mod catalog;
mod config;
pub mod digest;
pub mod dump;
mod listing;
pub mod message;
mod node;
mod placement;
mod router;
mod routes;
mod seed;

use std::net::SocketAddr;
use std::sync::Arc;

use wink_engine::Result;
use wink_serve::{Front, ServeOptions};

pub use config::ClusterConfig;
use node::Node;
pub use router::RouterEntry;

/// Runs the HTTP front as a node of the cluster `cfg` describes (`wink serve --cluster FILE`):
/// writes go through the cluster's log, reads wait for or are forwarded to the owners, and the
/// node's `/_cluster` routes are mounted. Returns after a graceful stop, as
/// [`wink_serve::run`] does.
pub fn serve(opts: ServeOptions, cfg: ClusterConfig, ready: impl FnOnce(SocketAddr)) -> Result<()> {
    let auth = opts.auth.clone();
    wink_serve::run_with(
        opts,
        |registry| async move {
            let node = Node::start(cfg, registry, auth).await?;
            let cursor_secret = Some(node.cursor_secret().await?);
            Ok(Front {
                writes: node.clone(),
                gate: node.clone(),
                extension: Some(Arc::new(routes::ClusterRoutes::new(node))),
                cursor_secret,
            })
        },
        ready,
    )
}
