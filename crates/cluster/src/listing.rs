//! Title listings of the whole cluster (docs/CLUSTER.md § Read): `GET P/` on any node pages
//! over every partition, one owner each, merged in key order.
//!
//! The node that takes the listing picks, for each partition, itself when it owns the partition
//! and vouches for it, or else an owner with a live lease, and asks each node picked once for
//! the titles of its partitions that sort after the cursor (`GET /_cluster/titles/…`). The
//! answers are merged and cut to the page; the cursor the client gets is the last title given,
//! so the next page may be served by any node under any placement. An owner lists its titles
//! by walking its store (the walk is in file order, not key order), so a page costs a walk of
//! the partitions' records on each node asked: bounded, and fine for listings, which are rare
//! beside reads.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::StatusCode;
use percent_encoding::NON_ALPHANUMERIC;
use wink_engine::store::TitlePosition;
use wink_service::registry::{ReadError, Registry};
use wink_service::ServiceError;

use super::message::{partition_of, RESERVED_DOMAIN};
use super::node::{get_small, Node};

/// How long the node taking a listing waits for another node's part of a page (then another
/// owner of those partitions is asked).
const PART_DEADLINE: Duration = Duration::from_secs(5);
/// Titles asked of the store per step of its walk.
const WALK_STEP: usize = 1000;
/// The most titles one node's part of a page holds (a page's `limit`, plus one).
pub const MAX_PART: usize = 1001;

/// The titles of `domain` in `bucket` after `after` in key order, at most `limit + 1`, over
/// every partition of the cluster.
pub(super) async fn titles(
    node: &Node,
    bucket: &str,
    domain: &str,
    after: Option<String>,
    limit: usize,
) -> Result<Vec<String>, ServiceError> {
    let want = (limit + 1).min(MAX_PART);
    let map = node.map();
    let live = node.live();
    let vouched = node.vouches();
    let mut all = Vec::new();
    // A node that fails its part is asked no more; its partitions go to another owner, once.
    let mut failed: Vec<String> = Vec::new();
    let mut pending: Vec<u32> = (0..map.partitions).collect();
    let mut last_error = None;
    for _round in 0..2 {
        // Node → the partitions it is asked for.
        let mut parts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for &p in &pending {
            let owners = map.owners(p);
            let usable = |o: &&String| !failed.contains(o);
            let chosen = if vouched && owners.contains(&node.name) && usable(&&node.name) {
                Some(&node.name)
            } else {
                let others = || owners.iter().filter(|o| **o != node.name).filter(usable);
                others()
                    .find(|o| live.contains(o))
                    .or_else(|| others().next())
            };
            let Some(chosen) = chosen else {
                return Err(last_error.unwrap_or_else(|| {
                    ServiceError::unavailable(format!("partition {p} has no owner to list it"), 2)
                }));
            };
            parts.entry(chosen.clone()).or_default().push(p);
        }
        let asks = parts.into_iter().map(|(name, partitions)| {
            let after = after.clone();
            async move {
                let got = if name == node.name {
                    node.wait_committed(None).await.and_then(|()| {
                        let reg = node.buckets().registry.clone();
                        tokio::task::block_in_place(|| {
                            local_titles(
                                &reg,
                                bucket,
                                domain,
                                &partitions,
                                map.partitions,
                                after.as_deref(),
                                want,
                            )
                        })
                    })
                } else {
                    match node.url_of(&name) {
                        Some(url) => {
                            remote_titles(&url, bucket, domain, &partitions, after.as_deref(), want)
                                .await
                        }
                        None => Err(ServiceError::unavailable(
                            format!("no address for node {name}"),
                            2,
                        )),
                    }
                };
                (name, partitions, got)
            }
        });
        pending.clear();
        for (name, partitions, got) in futures_util::future::join_all(asks).await {
            match got {
                Ok(titles) => all.extend(titles),
                // A bucket that does not exist is missing everywhere: no other owner helps.
                Err(e @ ServiceError::NotFound(_)) => return Err(e),
                Err(e) => {
                    failed.push(name);
                    pending.extend(partitions);
                    last_error = Some(e);
                }
            }
        }
        if pending.is_empty() {
            break;
        }
    }
    if let Some(e) = last_error.filter(|_| !pending.is_empty()) {
        return Err(e);
    }
    all.sort_unstable();
    all.dedup();
    all.truncate(want);
    Ok(all)
}

/// One other node's part of a page.
async fn remote_titles(
    url: &str,
    bucket: &str,
    domain: &str,
    partitions: &[u32],
    after: Option<&str>,
    want: usize,
) -> Result<Vec<String>, ServiceError> {
    let list: Vec<String> = partitions.iter().map(u32::to_string).collect();
    // Built whole before any await: the serializer is not `Send`.
    let query = {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("partitions", &list.join(","));
        q.append_pair("limit", &want.to_string());
        if let Some(a) = after {
            q.append_pair("after", a);
        }
        q.finish()
    };
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
    let (bucket_enc, domain_enc) = (enc(bucket), enc(domain));
    let path = format!("/_cluster/titles/{bucket_enc}/{domain_enc}?{query}");
    let (status, body) = get_small(url, &path, PART_DEADLINE)
        .await
        .map_err(|e| ServiceError::unavailable(format!("listing titles: {e}"), 2))?;
    if status != StatusCode::OK {
        return Err(ServiceError::unavailable(
            format!("listing titles: {url} answered {status}"),
            2,
        ));
    }
    let titles: Vec<String> = serde_json::from_slice(&body)
        .map_err(|e| ServiceError::unavailable(format!("listing titles: {url}: {e}"), 2))?;
    if titles.len() > want {
        return Err(ServiceError::unavailable(
            format!(
                "listing titles: {url} gave {} titles, over {want}",
                titles.len()
            ),
            2,
        ));
    }
    Ok(titles)
}

/// This node's titles of `domain` in `bucket` whose partition (of `total`) is in
/// `partitions`, after `after` in key order, at most `want`.
pub(super) fn local_titles(
    reg: &Registry,
    bucket: &str,
    domain: &str,
    partitions: &[u32],
    total: u32,
    after: Option<&str>,
    want: usize,
) -> Result<Vec<String>, ServiceError> {
    if domain == RESERVED_DOMAIN {
        return Ok(Vec::new());
    }
    let walk = |b: &wink_service::registry::Bucket, s: &wink_engine::Store| {
        // A title that lives only in the archive tier is found through the writer.
        let mut out: Vec<String> = Vec::new();
        let mut at: Option<TitlePosition> = None;
        loop {
            let page = if b.has_archive() {
                b.with_writer(|w| w.titles_after(domain, at, WALK_STEP))?
            } else {
                s.titles_after(domain, at, WALK_STEP)?
            };
            out.extend(page.titles.into_iter().filter(|t| {
                after.is_none_or(|a| t.as_str() > a)
                    && partitions.contains(&partition_of(domain, t, total))
            }));
            // Only the `want` first in key order can be given: keep no more than that.
            if out.len() > want * 2 {
                out.sort_unstable();
                out.dedup();
                out.truncate(want);
            }
            match page.next {
                Some(n) => at = Some(n),
                None => break,
            }
        }
        out.sort_unstable();
        out.dedup();
        out.truncate(want);
        Ok(out)
    };
    match reg.read(bucket, walk) {
        Ok(Some(titles)) => Ok(titles),
        Ok(None) => Err(wink_service::registry::missing(bucket)),
        Err(ReadError::Failed(why)) => Err(wink_service::registry::unopened(bucket, &why)),
        Err(ReadError::Store(e)) => Err(ServiceError::from_store(e)),
    }
}
