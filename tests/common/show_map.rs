//! HAProxy's partition map as its runtime API prints it (`show map`), shared by the cluster
//! tests and the cluster benchmark.

/// Returns the map's entries, partition → node name, in partition order. A line reads
/// `ID PARTITION node_NAME`; any other line is skipped.
pub fn parse(answer: &str) -> Vec<(u32, String)> {
    let mut entries: Vec<(u32, String)> = answer
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(1);
            let p = w.next()?.parse().ok()?;
            Some((p, w.next()?.strip_prefix("node_")?.to_string()))
        })
        .collect();
    entries.sort();
    entries
}
