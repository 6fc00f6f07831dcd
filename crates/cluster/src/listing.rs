//! A domain's titles over the whole cluster (docs/CLUSTER.md § Listings): each partition is
//! asked of one owner that answers for it (this node when it can), the answers merged in title
//! order. The cursor is the last title returned (sealed by the front with the cluster's key), so
//! the next page is served by any node under any placement.
//!
//! An owner answers `GET /_cluster/titles/BUCKET?domain=D&partitions=P,…&after=K&limit=N`
//! (the titles of those partitions after `K`, at most `N`, in order, and whether more follow)
//! from its own store, and 503 for a partition it does not answer for, as `/_cluster/outcome`
//! does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};

use super::message::partition_of;
use super::node::{self, Node};
use wink_serve::{titles_in_order, App, Problem, TitleSlice};
use wink_service::spec::valid_bucket_name;

/// The most titles an owner returns at once (a client's page is at most as many).
pub const MAX_TITLES: usize = 1000;
/// How long an owner has to answer for its partitions: it walks its store's titles of the
/// domain, so this is longer than a forwarded read's patience.
const PATIENCE: Duration = Duration::from_secs(20);
/// The largest answer taken from an owner (a thousand titles, JSON-escaped).
const MAX_ANSWER: usize = 16 << 20;

/// Where a partition's titles are asked.
#[derive(Clone)]
enum Source {
    Here,
    Peer { name: String, url: String },
}

impl Source {
    fn name<'a>(&'a self, node: &'a Node) -> &'a str {
        match self {
            Source::Here => &node.name,
            Source::Peer { name, .. } => name,
        }
    }
}

/// The titles of `domain` in `bucket` after `after`, at most `limit`, over every partition.
pub async fn gather(
    node: &Arc<Node>,
    app: &Arc<App>,
    bucket: &str,
    domain: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<TitleSlice, Problem> {
    let partitions = node.map().partitions;
    // Each partition's owners in the order they are tried: this node when it answers for the
    // partition itself, then the others, live leases first.
    let candidates: Vec<Vec<Source>> = (0..partitions)
        .map(|p| {
            let here = node.vouches(p).then_some(Source::Here);
            here.into_iter()
                .chain(node.other_owners(p).into_iter().map(|peer| Source::Peer {
                    name: peer.name,
                    url: peer.url,
                }))
                .collect()
        })
        .collect();
    let mut tried = vec![0usize; partitions as usize];
    let mut pending: Vec<u32> = (0..partitions).collect();
    let mut found = BTreeSet::new();
    let mut more = false;
    while !pending.is_empty() {
        // One request per owner for all the partitions it is asked for in this round.
        let mut rounds: BTreeMap<String, (Source, Vec<u32>)> = BTreeMap::new();
        for &p in &pending {
            let Some(source) = candidates[p as usize].get(tried[p as usize]) else {
                return Err(Problem::unavailable(
                    format!("no owner of partition {p} answers for its titles"),
                    2,
                ));
            };
            rounds
                .entry(source.name(node).to_string())
                .or_insert_with(|| (source.clone(), Vec::new()))
                .1
                .push(p);
        }
        let mut asked = Vec::new();
        let mut local = None;
        for (name, (source, parts)) in rounds {
            match source {
                Source::Here => local = Some(parts),
                Source::Peer { url, .. } => {
                    let path = titles_path(bucket, domain, &parts, after, limit);
                    let ask = tokio::spawn(ask_owner(url, path));
                    asked.push((name, parts, ask));
                }
            }
        }
        let mut answers = Vec::new();
        if let Some(parts) = local {
            // The peers' requests run meanwhile, on their own tasks.
            let here = tokio::task::block_in_place(|| {
                local_titles(node, app, bucket, domain, &parts, after, limit)
            })
            .map_err(|p| p.log.unwrap_or(p.detail));
            answers.push((node.name.clone(), parts, here));
        }
        for (name, parts, ask) in asked {
            let answer = match ask.await {
                Ok(a) => a.and_then(|s| checked(s, domain, &parts, partitions, after, limit)),
                Err(e) => Err(e.to_string()),
            };
            answers.push((name, parts, answer));
        }
        pending.clear();
        for (name, parts, answer) in answers {
            match answer {
                Ok(slice) => {
                    more |= slice.more;
                    found.extend(slice.titles);
                    while found.len() > limit {
                        found.pop_last();
                        more = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(owner = %name, "listing the titles of {parts:?}: {e}");
                    for p in parts {
                        tried[p as usize] += 1;
                        pending.push(p);
                    }
                }
            }
        }
    }
    Ok(TitleSlice {
        titles: found.into_iter().collect(),
        more,
    })
}

/// This node's titles of `parts` (which it answers for) after `after`, at most `limit`.
fn local_titles(
    node: &Node,
    app: &App,
    bucket: &str,
    domain: &str,
    parts: &[u32],
    after: Option<&str>,
    limit: usize,
) -> Result<TitleSlice, Problem> {
    let partitions = node.map().partitions;
    let wanted: BTreeSet<u32> = parts.iter().copied().collect();
    titles_in_order(app, bucket, domain, after, limit, |t| {
        wanted.contains(&partition_of(domain, t, partitions))
    })
}

/// The path that asks an owner for the titles of `parts`.
fn titles_path(
    bucket: &str,
    domain: &str,
    parts: &[u32],
    after: Option<&str>,
    limit: usize,
) -> String {
    let list: Vec<String> = parts.iter().map(u32::to_string).collect();
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("domain", domain)
        .append_pair("partitions", &list.join(","))
        .append_pair("limit", &limit.to_string());
    if let Some(a) = after {
        q.append_pair("after", a);
    }
    format!("/_cluster/titles/{bucket}?{}", q.finish())
}

async fn ask_owner(url: String, path: String) -> Result<TitleSlice, String> {
    let (status, _, body) = node::ask(&url, Method::GET, &path, None, MAX_ANSWER, PATIENCE).await?;
    if status != StatusCode::OK {
        return Err(format!("{url} answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))
}

/// An owner's answer, when it is one: titles in order, past `after`, of the partitions asked,
/// at most `limit` of them.
fn checked(
    slice: TitleSlice,
    domain: &str,
    parts: &[u32],
    partitions: u32,
    after: Option<&str>,
    limit: usize,
) -> Result<TitleSlice, String> {
    if slice.titles.len() > limit {
        return Err(format!(
            "{} titles for a limit of {limit}",
            slice.titles.len()
        ));
    }
    let mut last = after;
    for t in &slice.titles {
        if last.is_some_and(|l| t.as_str() <= l) {
            return Err(format!("title {t:?} out of order"));
        }
        if !parts.contains(&partition_of(domain, t, partitions)) {
            return Err(format!("title {t:?} of a partition not asked for"));
        }
        last = Some(t);
    }
    Ok(slice)
}

/// `GET /_cluster/titles/BUCKET?domain=D&partitions=P,…&after=K&limit=N`: this node's titles
/// of partitions it answers for.
pub fn titles_route(
    app: &App,
    node: &Node,
    req: &hyper::http::request::Parts,
    bucket: &str,
) -> Result<wink_serve::Answer, Problem> {
    if req.method != Method::GET {
        return Err(Problem::method_not_allowed("GET"));
    }
    if !valid_bucket_name(bucket) {
        return Err(Problem::bad_request(format!("bucket name {bucket:?}")));
    }
    let usage = "?domain=D&partitions=P,…&limit=N[&after=TITLE]";
    let query: Vec<(String, String)> = req
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let partitions = node.map().partitions;
    let (Some(domain), Some(list), Some(limit)) = (
        param("domain"),
        param("partitions"),
        param("limit")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=MAX_TITLES).contains(n)),
    ) else {
        return Err(Problem::bad_request(usage));
    };
    let parts: Vec<u32> = list
        .split(',')
        .map(|p| p.parse::<u32>().ok().filter(|p| *p < partitions))
        .collect::<Option<_>>()
        .filter(|v: &Vec<u32>| v.len() <= partitions as usize)
        .ok_or_else(|| Problem::bad_request(usage))?;
    if let Some(p) = parts.iter().find(|p| !node.vouches(**p)) {
        return Err(Problem::unavailable(
            format!("node {} does not answer for partition {p}", node.name),
            1,
        ));
    }
    let after = param("after").map(String::as_str);
    let slice = tokio::task::block_in_place(|| {
        local_titles(node, app, bucket, domain, &parts, after, limit)
    })?;
    Ok(wink_serve::json(StatusCode::OK, &slice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(titles: &[&str], more: bool) -> TitleSlice {
        TitleSlice {
            titles: titles.iter().map(|t| t.to_string()).collect(),
            more,
        }
    }

    #[test]
    fn an_owners_answer_is_taken_only_in_order_past_the_cursor_and_of_the_partitions_asked() {
        let d = "d.org";
        let p = |t: &str| partition_of(d, t, 4);
        let titles = ["A", "B", "C", "D", "E", "F", "G", "H"];
        let asked: Vec<u32> = vec![p("B")];
        let of: Vec<&str> = titles
            .iter()
            .copied()
            .filter(|t| p(t) == asked[0])
            .collect();
        let other = titles.iter().copied().find(|t| p(t) != asked[0]).unwrap();
        assert!(checked(slice(&of, true), d, &asked, 4, None, 8).is_ok());
        assert!(checked(slice(&of, false), d, &asked, 4, Some("0"), 8).is_ok());
        assert!(checked(slice(&of, false), d, &asked, 4, Some("B"), 8).is_err());
        assert!(checked(slice(&[other], false), d, &asked, 4, None, 8).is_err());
        assert!(checked(slice(&["B", "B"], false), d, &asked, 4, None, 8).is_err());
        assert!(checked(slice(&["B"], false), d, &asked, 4, None, 0).is_err());
    }

    #[test]
    fn the_path_asking_an_owner_carries_the_title_escaped() {
        let path = titles_path("html", "d.org", &[1, 5], Some("AC/DC & Café"), 7);
        assert_eq!(
            path,
            "/_cluster/titles/html?domain=d.org&partitions=1%2C5&limit=7&after=AC%2FDC+%26+Caf%C3%A9"
        );
        let query: Vec<(String, String)> =
            form_urlencoded::parse(path.split_once('?').unwrap().1.as_bytes())
                .into_owned()
                .collect();
        assert_eq!(query[3], ("after".into(), "AC/DC & Café".into()));
    }
}
