//! The partition → owners map, kept in a JetStream key-value bucket and changed only by
//! compare-and-set (docs/CLUSTER.md § Partitions and placement).

use serde::{Deserialize, Serialize};

use super::config::ClusterConfig;

/// The key-value bucket of the map.
pub const PLACEMENT_BUCKET: &str = "wink_placement";
/// The map's key in it.
pub const MAP_KEY: &str = "map";
/// The key of the secret that seals listing cursors, in the same bucket.
pub const CURSOR_KEY: &str = "cursor_key";
/// The key-value bucket of node leases (its max age is the lease).
pub const LEASE_BUCKET: &str = "wink_leases";
/// A lease's length, and so the lease bucket's max age.
pub const LEASE_SECS: u64 = 5;
/// The stream of changes.
pub const STREAM: &str = "WINK";

/// The key of a node's lease.
pub fn lease_key(name: &str) -> String {
    format!("node.{name}")
}

/// Which nodes own each partition.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Map {
    pub partitions: u32,
    pub replicas: u32,
    /// `owners[p]`: the nodes owning partition p, by name.
    pub owners: Vec<Vec<String>>,
    /// Nodes removed for good (`wink cluster remove`): never given a partition again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

impl Map {
    /// Round robin over `nodes`: partition p is owned by nodes p, p+1, … p+R-1 (mod n).
    pub fn round_robin(partitions: u32, replicas: u32, nodes: &[String]) -> Map {
        let n = nodes.len().max(1);
        let r = (replicas as usize).min(nodes.len());
        let owners = (0..partitions as usize)
            .map(|p| (0..r).map(|i| nodes[(p + i) % n].clone()).collect())
            .collect();
        Map {
            partitions,
            replicas,
            owners,
            removed: Vec::new(),
        }
    }

    /// The first map of a cluster: round robin over its configured nodes.
    pub fn initial(cfg: &ClusterConfig) -> Map {
        let names: Vec<String> = cfg.nodes.iter().map(|n| n.name.clone()).collect();
        Map::round_robin(cfg.partitions, cfg.replicas, &names)
    }

    /// Parses a map read from the bucket, checked against the configuration.
    pub fn parse(bytes: &[u8], cfg: &ClusterConfig) -> std::result::Result<Map, String> {
        let map: Map = serde_json::from_slice(bytes)
            .map_err(|e| format!("the placement map is not JSON of a map: {e}"))?;
        if map.partitions != cfg.partitions || map.owners.len() != map.partitions as usize {
            return Err(format!(
                "the placement map has {} partitions ({} listed); the configuration says {}",
                map.partitions,
                map.owners.len(),
                cfg.partitions
            ));
        }
        Ok(map)
    }

    pub fn owners(&self, partition: u32) -> &[String] {
        self.owners
            .get(partition as usize)
            .map_or(&[][..], |v| v.as_slice())
    }

    pub fn owns(&self, node: &str, partition: u32) -> bool {
        self.owners(partition).iter().any(|n| n == node)
    }

    /// The partitions `node` owns, ascending.
    pub fn owned_by(&self, node: &str) -> Vec<u32> {
        (0..self.partitions)
            .filter(|p| self.owns(node, *p))
            .collect()
    }

    /// A map over `nodes` as close to this one as balance allows: owners that left `nodes` are
    /// replaced, and a node owning more than its share gives partitions to the least loaded
    /// node that does not own them yet. Partitions that need not move stay.
    pub fn balanced(&self, nodes: &[String]) -> Map {
        let mut out = self.clone();
        if nodes.is_empty() {
            return out;
        }
        let r = (self.replicas as usize).min(nodes.len());
        let quota = (self.partitions as usize * r).div_ceil(nodes.len());
        let mut load: std::collections::BTreeMap<&String, usize> =
            nodes.iter().map(|n| (n, 0)).collect();
        for owners in &mut out.owners {
            owners.retain(|o| nodes.contains(o));
            owners.truncate(r);
            for o in owners.iter() {
                *load
                    .entry(nodes.iter().find(|n| *n == o).unwrap_or(&nodes[0]))
                    .or_default() += 1;
            }
        }
        for owners in &mut out.owners {
            // Fill partitions that lost owners.
            while owners.len() < r {
                let pick = least_loaded(&load, owners);
                let Some(pick) = pick else { break };
                *load.entry(pick).or_default() += 1;
                owners.push(pick.clone());
            }
            // Move from owners over their share to the least loaded.
            for i in 0..owners.len() {
                let o = owners[i].clone();
                if load.get(&o).copied().unwrap_or(0) <= quota {
                    continue;
                }
                let Some(pick) = least_loaded(&load, owners) else {
                    continue;
                };
                if load[pick] + 1 >= load.get(&o).copied().unwrap_or(0) {
                    continue;
                }
                *load.entry(pick).or_default() += 1;
                if let Some(l) = load.iter_mut().find(|(n, _)| ***n == o) {
                    *l.1 -= 1;
                }
                owners[i] = pick.clone();
            }
        }
        out
    }

    /// The nodes that may own partitions: `configured` (the configuration's nodes) and every
    /// owner in the map, less the removed ones.
    pub fn members(&self, configured: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for n in configured.iter().chain(self.owners.iter().flatten()) {
            if !out.contains(n) && !self.removed.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// The map without `name`: its partitions spread over `members` (which must not hold it),
    /// and `name` listed as removed.
    pub fn without(&self, name: &str, members: &[String]) -> Map {
        let mut out = self.balanced(members);
        if !out.removed.iter().any(|n| n == name) {
            out.removed.push(name.to_string());
        }
        out
    }

    /// The partitions with fewer than R owners in `live`.
    pub fn under_replicated(&self, live: &[String]) -> Vec<u32> {
        let r = (self.replicas as usize).min(live.len().max(1));
        (0..self.partitions)
            .filter(|p| self.owners(*p).iter().filter(|o| live.contains(o)).count() < r)
            .collect()
    }

    /// This map with every partition that has fewer than R owners in `live` given more owners
    /// from `live` (the least loaded first) until it has R there or `live` is used up. Owners
    /// are only added, never dropped: a node that comes back finds its partitions, and a
    /// rebalance or a removal trims the extra owners later.
    pub fn repaired(&self, live: &[String]) -> Map {
        let mut out = self.clone();
        let live: Vec<String> = live
            .iter()
            .filter(|n| !self.removed.contains(n))
            .cloned()
            .collect();
        let r = (self.replicas as usize).min(live.len());
        let mut load: std::collections::BTreeMap<&String, usize> =
            live.iter().map(|n| (n, 0)).collect();
        for owners in &out.owners {
            for o in owners {
                if let Some(l) = load.get_mut(o) {
                    *l += 1;
                }
            }
        }
        for owners in &mut out.owners {
            while owners.iter().filter(|o| live.contains(o)).count() < r {
                let Some(pick) = least_loaded(&load, owners) else {
                    break;
                };
                *load.entry(pick).or_default() += 1;
                owners.push(pick.clone());
            }
        }
        out
    }

    /// The first step of a move to `target`: each partition owned by the union of its owners
    /// now and its target owners (the new ones catch up while the old ones still serve).
    pub fn widened(&self, target: &Map) -> Map {
        let mut out = self.clone();
        out.removed.clone_from(&target.removed);
        for (p, owners) in out.owners.iter_mut().enumerate() {
            for n in target.owners(p as u32) {
                if !owners.contains(n) {
                    owners.push(n.clone());
                }
            }
        }
        out
    }
}

fn least_loaded<'a>(
    load: &std::collections::BTreeMap<&'a String, usize>,
    exclude: &[String],
) -> Option<&'a String> {
    load.iter()
        .filter(|(n, _)| !exclude.contains(n))
        .min_by_key(|(_, l)| **l)
        .map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_spreads_and_widening_keeps_old_owners() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let m = Map::round_robin(6, 2, &names);
        assert_eq!(m.owners(0), ["a", "b"]);
        assert_eq!(m.owners(2), ["c", "a"]);
        assert_eq!(m.owned_by("a"), vec![0, 2, 3, 5]);
        let mut four = names.clone();
        four.push("d".into());
        let t = Map::round_robin(6, 2, &four);
        let w = m.widened(&t);
        for p in 0..6 {
            for n in m.owners(p).iter().chain(t.owners(p)) {
                assert!(w.owns(n, p));
            }
        }
        assert!(w.owned_by("d").len() >= 2);
        let big = Map::round_robin(64, 2, &names);
        let b = big.balanced(&four);
        for p in 0..64 {
            assert_eq!(b.owners(p).len(), 2);
            assert_ne!(b.owners(p)[0], b.owners(p)[1]);
        }
        for n in &four {
            assert!(
                (31..=33).contains(&b.owned_by(n).len()),
                "{n}: {}",
                b.owned_by(n).len()
            );
        }
        let moved = (0..64).filter(|p| b.owners(*p) != big.owners(*p)).count();
        assert!(moved <= 40, "{moved} partitions moved");
        assert_eq!(b.balanced(&four), b, "a balanced map stays");
    }

    #[test]
    fn a_lost_node_is_replaced_by_adding_owners_and_removed_by_a_new_map() {
        let names: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let m = Map::round_robin(16, 2, &names);
        let live: Vec<String> = ["a", "b", "d"].iter().map(|s| s.to_string()).collect();
        let lost = m.under_replicated(&live);
        assert_eq!(lost, m.owned_by("c"));
        let r = m.repaired(&live);
        assert!(r.under_replicated(&live).is_empty());
        for p in 0..16 {
            // Only added: every owner before is an owner after.
            for o in m.owners(p) {
                assert!(r.owns(o, p), "partition {p} lost owner {o}");
            }
            let kept = r.owners(p).iter().filter(|o| live.contains(o)).count();
            assert_eq!(kept, 2, "partition {p}: {:?}", r.owners(p));
        }
        assert_eq!(r.repaired(&live), r, "a repaired map stays");
        // The added owners are spread: no live node takes all of c's partitions.
        for n in &live {
            assert!(r.owned_by(n).len() <= 12, "{n}: {}", r.owned_by(n).len());
        }
        let gone = r.without("c", &live);
        assert_eq!(gone.removed, ["c"]);
        assert!(gone.owned_by("c").is_empty());
        assert!(gone.under_replicated(&live).is_empty());
        assert_eq!(gone.members(&names), live);
        // A removed node is never given partitions again, even when it is live.
        assert!(gone.repaired(&names).owned_by("c").is_empty());
    }
}
