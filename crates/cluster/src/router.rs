//! HAProxy kept routing each key straight to a live owner (docs/CLUSTER.md § Routing straight to
//! an owner).
//!
//! HAProxy computes a request's partition from its path itself (`crc32` of `domain/title`,
//! modulo P, the same function as [`partition_of`](crate::message::partition_of)) and looks the
//! partition up in a map file whose value is a backend: `node_NAME`, which sends to NAME (and to
//! the other nodes as backups while NAME's health check fails). Every node keeps that map
//! current through HAProxy's runtime API (`set map`), whenever the placement or the set of live
//! nodes changes and again every few seconds (a restarted HAProxy reads the file as it was
//! written). Several nodes sending the same table is harmless: `set map` is idempotent. A key
//! sent to a node that does not own it is still forwarded, so a stale map costs a hop, never an
//! answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::node::Node;
use super::placement::Map;

/// One HAProxy in front of the cluster.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouterEntry {
    /// Its runtime API, `HOST:PORT` (a `stats socket ipv4@HOST:PORT level admin`).
    pub admin: String,
    /// The map file its configuration names in `map(…)`, as HAProxy knows it.
    pub map: String,
}

/// Between full sends of the table to every router, changed or not.
const RESEND: Duration = Duration::from_secs(5);
/// How long one exchange with a router's runtime API may take.
const DEADLINE: Duration = Duration::from_secs(2);
/// Commands per connection: HAProxy reads one line of commands at a time, into its buffer.
const PER_LINE: usize = 64;
/// The largest answer read back.
const MAX_ANSWER: u64 = 1 << 20;

/// The backend HAProxy should send partition p to, for every partition: the first live owner
/// (the map's order spreads the partitions over the nodes), or the first owner when none is
/// live (its backend's backups then answer).
pub fn table(map: &Map, live: &[String]) -> Vec<String> {
    (0..map.partitions)
        .map(|p| {
            let owners = map.owners(p);
            let chosen = owners
                .iter()
                .find(|o| live.contains(o))
                .or_else(|| owners.first());
            chosen.map_or_else(|| "nodes".to_string(), |o| backend(o))
        })
        .collect()
}

/// The backend of node `name` in the router's configuration.
pub fn backend(name: &str) -> String {
    format!("node_{name}")
}

/// The runtime API's command lines that set the map to `table`.
fn commands(map_file: &str, table: &[String]) -> Vec<String> {
    let sets: Vec<String> = table
        .iter()
        .enumerate()
        .map(|(p, b)| format!("set map {map_file} {p} {b}"))
        .collect();
    sets.chunks(PER_LINE).map(|c| c.join(";") + "\n").collect()
}

/// Sends `table` to one router; an error says what failed, with the router's answer.
async fn send(router: &RouterEntry, table: &[String]) -> Result<(), String> {
    for line in commands(&router.map, table) {
        let exchange = async {
            let mut s = TcpStream::connect(&router.admin).await?;
            s.write_all(line.as_bytes()).await?;
            let mut answer = Vec::new();
            (&mut s).take(MAX_ANSWER).read_to_end(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = tokio::time::timeout(DEADLINE, exchange)
            .await
            .map_err(|_| format!("router {}: no answer within {DEADLINE:?}", router.admin))?
            .map_err(|e| format!("router {}: {e}", router.admin))?;
        // Each `set map` that worked answers an empty line; anything else is its complaint.
        let text = String::from_utf8_lossy(&answer);
        if let Some(complaint) = text.lines().find(|l| !l.trim().is_empty()) {
            return Err(format!("router {}: {complaint}", router.admin));
        }
    }
    Ok(())
}

/// Keeps every configured router's map current, for as long as the node runs.
pub(super) async fn keep(node: Arc<Node>, routers: Vec<RouterEntry>) {
    if routers.is_empty() {
        return;
    }
    let mut sent: Vec<Option<(Vec<String>, Instant)>> = vec![None; routers.len()];
    let mut failing = vec![false; routers.len()];
    loop {
        let mut live = node.live();
        if !live.contains(&node.name) {
            live.push(node.name.clone());
        }
        let want = table(&node.map(), &live);
        for (i, router) in routers.iter().enumerate() {
            let fresh = matches!(&sent[i], Some((t, at)) if *t == want && at.elapsed() < RESEND);
            if fresh {
                continue;
            }
            match send(router, &want).await {
                Ok(()) => {
                    if std::mem::take(&mut failing[i]) {
                        tracing::info!(node = %node.name, "router {} takes the map again", router.admin);
                    }
                    sent[i] = Some((want.clone(), Instant::now()));
                }
                Err(e) => {
                    if !std::mem::replace(&mut failing[i], true) {
                        tracing::warn!(node = %node.name, "{e}; requests are forwarded meanwhile");
                    }
                    sent[i] = None;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_goes_to_its_first_live_owner() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let map = Map::round_robin(6, 2, &names);
        assert_eq!(
            table(&map, &names),
            ["node_a", "node_b", "node_c", "node_a", "node_b", "node_c"]
        );
        let without_b = ["a".to_string(), "c".to_string()];
        assert_eq!(
            table(&map, &without_b),
            ["node_a", "node_c", "node_c", "node_a", "node_c", "node_c"]
        );
        assert_eq!(table(&map, &[])[1], "node_b", "none live: the first owner");
    }

    #[test]
    fn commands_are_lines_of_at_most_per_line_sets() {
        let table: Vec<String> = (0..130).map(|p| format!("node_{}", p % 3)).collect();
        let lines = commands("/m/owners.map", &table);
        assert_eq!(lines.len(), 3);
        assert!(lines
            .iter()
            .all(|l| l.ends_with('\n') && !l[..l.len() - 1].contains('\n')));
        assert!(lines[0].starts_with("set map /m/owners.map 0 node_0;set map /m/owners.map 1 "));
        assert_eq!(
            lines[2],
            "set map /m/owners.map 128 node_2;set map /m/owners.map 129 node_0\n"
        );
    }
}
