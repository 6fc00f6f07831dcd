//! Taking over a partition whose history the stream no longer holds: a copy of another owner's
//! store, page by page over HTTP, then the stream from where the copy stands
//! (docs/CLUSTER.md § A node lost for good).
//!
//! The giving owner snapshots the bucket (a consistent, committed state that never changes:
//! `POST /_cluster/copy/BUCKET`) and answers the sequence up to which each partition is applied
//! in it. The taker reads the partition's titles from that snapshot in pages
//! (`GET /_cluster/copy/BUCKET/ID/PARTITION?cursor=…`: renders with their bytes and arrival
//! times, take-downs), applies each page in a commit of its own, records the snapshot's sequence
//! as applied, and drops the snapshot (`DELETE /_cluster/copy/BUCKET/ID`). Its apply loop then
//! replays the stream from there. Until then it is behind, and vouches for nothing it owns.
//!
//! Every page is untrusted bytes: frames of a length and a stream message
//! ([`Change`]), each checked against what is left.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper::{Method, StatusCode};

use super::apply;
use super::message::{partition_of, Change, Kind, RESERVED_DOMAIN};
use super::node::{ask, on_writer, Node, SessionEnd};
use wink_engine::store::{CopyCursor, CopyItem, Store, StoreOptions};
use wink_serve::Problem;
use wink_service::commit::{ExclusiveWork, Job};
use wink_service::registry::Registry;

/// Where a node keeps the snapshots it gives copies from, beside its buckets.
const COPIES: &str = ".copies";
/// Value bytes a page holds (plus at most one value).
const PAGE_BYTES: u64 = 4 << 20;
/// A copy left behind by a taker that never came back is removed this long after it was made.
const COPY_KEPT: Duration = Duration::from_secs(3600);
/// How long the giver may take to snapshot a bucket, and to answer one page.
const SNAPSHOT_PATIENCE: Duration = Duration::from_secs(300);
const PAGE_PATIENCE: Duration = Duration::from_secs(60);
/// Header of a page's answer: the cursor of the next page (absent on the last).
pub const NEXT: &str = "x-wink-next";

/// What `POST /_cluster/copy/BUCKET` answers.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CopyStarted {
    /// The copy's name, for its pages.
    pub copy: String,
    /// Partition → the last stream sequence applied in the copy.
    pub applied: BTreeMap<u32, u64>,
}

/// Commits a snapshot of `bucket` into `ROOT/SUB/BUCKET.NANOS`; answers its name and directory.
pub(super) async fn snapshot_into(
    reg: &Registry,
    bucket: &str,
    sub: &str,
) -> Result<(String, PathBuf), Problem> {
    let b = match reg.bucket(bucket) {
        Ok(Some(b)) => b,
        _ => return Err(Problem::not_found(format!("no bucket {bucket}"))),
    };
    let root = b.dir.parent().map(|p| p.join(sub)).unwrap_or_default();
    wink_engine::vfs::Vfs::create_dir_all(&wink_engine::vfs::RealFs, &root)
        .map_err(|e| Problem::from_store(&e))?;
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{bucket}.{nanos}");
    let dest = root.join(&name);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let to = dest.clone();
    let work = ExclusiveWork(Box::new(move |s: &mut Store| {
        let _ = tx.send(wink_engine::maintenance::snapshot(s, &to).map(|_| ()));
    }));
    if !b.submit(Job::Exclusive(work)) {
        return Err(Problem::unavailable("the server is shutting down", 5));
    }
    match rx.await {
        Ok(Ok(())) => Ok((name, dest)),
        Ok(Err(e)) => Err(Problem::from_store(&e)),
        Err(_) => Err(Problem::unavailable("the server is shutting down", 5)),
    }
}

/// Where the copies of `bucket` are made: `ROOT/.copies`, beside the buckets (`None`: no such
/// bucket open).
fn copies_root(reg: &Registry, bucket: &str) -> Option<PathBuf> {
    let b = reg.bucket(bucket).ok()??;
    b.dir.parent().map(|p| p.join(COPIES))
}

/// The directory of copy `id` of `bucket`: `Err` 404 unless it is one this node made.
fn copy_dir(reg: &Registry, bucket: &str, id: &str) -> Result<PathBuf, Problem> {
    let missing = || Problem::not_found(format!("no copy {id} of bucket {bucket}"));
    let nanos = id
        .strip_prefix(bucket)
        .and_then(|r| r.strip_prefix('.'))
        .ok_or_else(missing)?;
    if nanos.is_empty() || nanos.len() > 39 || !nanos.bytes().all(|b| b.is_ascii_digit()) {
        return Err(missing());
    }
    let dir = copies_root(reg, bucket)
        .ok_or_else(|| Problem::not_found(format!("no bucket {bucket}")))?
        .join(id);
    if !dir.join("store").is_file() {
        return Err(missing());
    }
    Ok(dir)
}

/// Removes the copies older than [`COPY_KEPT`] (a taker that stopped halfway never drops its
/// own).
fn sweep_copies(reg: &Registry, bucket: &str) {
    let Some(root) = copies_root(reg, bucket) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > COPY_KEPT);
        if old {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `POST /_cluster/copy/BUCKET`: a snapshot to copy from, and how far each partition is applied
/// in it. Refused (503) by a node that does not vouch for its partitions.
pub async fn start_copy(node: &Node, reg: &Registry, bucket: &str) -> Result<CopyStarted, Problem> {
    let s = node.status();
    if let Some(why) = s.behind.as_ref().or(s.diverged.as_ref()) {
        return Err(Problem::unavailable(
            format!("node {} gives no copy: {why}", node.name),
            5,
        ));
    }
    sweep_copies(reg, bucket);
    let (copy, dir) = snapshot_into(reg, bucket, COPIES).await?;
    let record = tokio::task::spawn_blocking(move || {
        let store = Store::open(&dir, &StoreOptions::read_only())?;
        apply::read_record(&store)
    })
    .await
    .map_err(|e| Problem::unavailable(format!("the copy's record: {e}"), 1))?
    .map_err(|e| Problem::from_store(&e))?;
    Ok(CopyStarted {
        copy,
        applied: record.applied,
    })
}

/// `GET /_cluster/copy/BUCKET/ID/PARTITION?cursor=…`: one page of the partition's titles in
/// copy `id`, as frames (a big-endian u32 length, then a [`Change`]), and the next cursor.
pub async fn copy_page(
    node: &Node,
    reg: &Registry,
    bucket: &str,
    id: &str,
    partition: u32,
    cursor: Option<&str>,
) -> Result<(Vec<u8>, Option<String>), Problem> {
    let dir = copy_dir(reg, bucket, id)?;
    let from = match cursor {
        None => CopyCursor::new(),
        Some(c) => CopyCursor::from_token(c)
            .ok_or_else(|| Problem::bad_request(format!("cursor {c:?}")))?,
    };
    let partitions = node.map().partitions;
    let page = tokio::task::spawn_blocking(move || {
        let store = Store::open(&dir, &StoreOptions::read_only())?;
        store.copy_page(&from, PAGE_BYTES, |d, t| {
            d != RESERVED_DOMAIN && partition_of(d, t, partitions) == partition
        })
    })
    .await
    .map_err(|e| Problem::unavailable(format!("a copy's page: {e}"), 1))?
    .map_err(|e| Problem::from_store(&e))?;
    let mut body = Vec::new();
    for item in page.items {
        let frame = change_of(item).encode();
        body.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        body.extend_from_slice(&frame);
    }
    Ok((body, page.next.map(|c| c.token())))
}

/// `DELETE /_cluster/copy/BUCKET/ID`: the copy is no longer needed.
pub fn end_copy(reg: &Registry, bucket: &str, id: &str) -> Result<(), Problem> {
    let dir = copy_dir(reg, bucket, id)?;
    std::fs::remove_dir_all(&dir)
        .map_err(|e| Problem::from_store(&wink_engine::Error::io(&dir, None, e)))
}

/// A copy item as the stream message that would make it.
pub(super) fn change_of(item: CopyItem) -> Change {
    match item {
        CopyItem::Render {
            domain,
            title,
            rev,
            tid,
            content_type,
            labels,
            arrival,
            value,
        } => Change {
            kind: Kind::Put,
            arrival,
            rev,
            tid,
            domain,
            title,
            content_type,
            labels,
            value: value.into(),
            conditions: Default::default(),
            names_render: false,
        },
        CopyItem::TakeDown { domain, title, rev } => Change::take_down(domain, title, rev),
    }
}

/// The changes of a page's body (untrusted bytes).
pub fn parse_page(body: &[u8]) -> Result<Vec<Change>, String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        let Some(len) = body.get(at..at + 4) else {
            return Err(format!("offset {at}: a frame's length cut short"));
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let start = at + 4;
        let Some(frame) = start.checked_add(len).and_then(|end| body.get(start..end)) else {
            return Err(format!(
                "offset {at}: a frame of {len} bytes, {} left",
                body.len() - start
            ));
        };
        out.push(Change::decode(frame).map_err(|e| format!("offset {start}: {e}"))?);
        at = start + len;
    }
    Ok(out)
}

/// Makes every owned partition of every bucket that the stream can no longer replay (applied
/// below `first - 1`, with messages written since) whole again from a copy of another owner.
/// `Err` names the partitions no owner could give.
pub(super) async fn take_over(
    node: &Arc<Node>,
    reg: &Arc<Registry>,
    owned: &[u32],
    first: u64,
    last: u64,
) -> Result<(), SessionEnd> {
    let map = node.map();
    let live = node.live();
    for b in reg.buckets() {
        let applied = on_writer(&b, |s| apply::read_applied(s))
            .await
            .map_err(|e| e.to_string())?;
        let mut left: Vec<u32> = owned
            .iter()
            .copied()
            .filter(|p| {
                let a = applied.get(p).copied().unwrap_or(0);
                a + 1 < first && a < last
            })
            .collect();
        if left.is_empty() {
            continue;
        }
        let mut givers: Vec<String> = left
            .iter()
            .flat_map(|p| map.owners(*p).iter().cloned())
            .filter(|n| *n != node.name)
            .collect();
        givers.sort_by_key(|n| (!live.contains(n), n.clone()));
        givers.dedup();
        for giver in givers {
            let theirs: Vec<u32> = left
                .iter()
                .copied()
                .filter(|p| map.owners(*p).contains(&giver))
                .collect();
            if theirs.is_empty() {
                continue;
            }
            match copy_from(node, &b, &giver, &theirs, first).await {
                Ok(done) => left.retain(|p| !done.contains(p)),
                Err(stop @ SessionEnd::StoreFailed(_)) => return Err(stop),
                Err(e) => {
                    tracing::warn!(node = %node.name, "bucket {}: a copy from {giver}: {e}", b.name)
                }
            }
        }
        if !left.is_empty() {
            return Err(SessionEnd::Retry(format!(
                "bucket {}: partitions {left:?}: no other owner gave a copy that reaches the \
                 stream's first sequence {first}",
                b.name
            )));
        }
    }
    Ok(())
}

/// Copies `partitions` of bucket `b` from `giver`; answers the ones it made whole (a partition
/// the giver itself cannot replay from `first` is left).
async fn copy_from(
    node: &Node,
    b: &Arc<wink_service::registry::Bucket>,
    giver: &str,
    partitions: &[u32],
    first: u64,
) -> Result<Vec<u32>, SessionEnd> {
    let base = node
        .url_of(giver)
        .ok_or_else(|| format!("no URL for node {giver}"))?;
    let bearer = node.bearer();
    let (status, _, body) = ask(
        &base,
        Method::POST,
        &format!("/_cluster/copy/{}", b.name),
        bearer.clone(),
        1 << 20,
        SNAPSHOT_PATIENCE,
    )
    .await?;
    if status != StatusCode::OK {
        return Err(format!("answered {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    let started: CopyStarted =
        serde_json::from_slice(&body).map_err(|e| format!("the copy's answer: {e}"))?;
    let mut done = Vec::new();
    let result = async {
        for &p in partitions {
            let seq = started.applied.get(&p).copied().unwrap_or(0);
            if seq + 1 < first {
                tracing::warn!(
                    node = %node.name,
                    "{giver}'s copy of partition {p} is applied to {seq} only"
                );
                continue;
            }
            let mut cursor: Option<String> = None;
            let (mut pages, mut stored) = (0u64, 0usize);
            loop {
                let mut path = format!("/_cluster/copy/{}/{}/{p}", b.name, started.copy);
                if let Some(c) = &cursor {
                    let q: String = form_urlencoded::Serializer::new(String::new())
                        .append_pair("cursor", c)
                        .finish();
                    path = format!("{path}?{q}");
                }
                let limit = (PAGE_BYTES + b.config.max_value) as usize + (1 << 20);
                let (status, headers, body) = ask(
                    &base,
                    Method::GET,
                    &path,
                    bearer.clone(),
                    limit,
                    PAGE_PATIENCE,
                )
                .await?;
                if status != StatusCode::OK {
                    return Err(SessionEnd::Retry(format!(
                        "page {pages} of partition {p}: answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    )));
                }
                let changes =
                    parse_page(&body).map_err(|e| format!("page {pages} of partition {p}: {e}"))?;
                stored += on_writer(b, move |s| apply::apply_copy(s, &changes))
                    .await
                    .map_err(SessionEnd::store)?;
                pages += 1;
                cursor = headers
                    .get(NEXT)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                if cursor.is_none() {
                    break;
                }
            }
            on_writer(b, move |s| apply::seeded(s, p, seq))
                .await
                .map_err(SessionEnd::store)?;
            tracing::info!(
                node = %node.name,
                "bucket {}: partition {p} copied from {giver} ({stored} renders, {pages} pages), \
                 applied to sequence {seq}; the stream from {}",
                b.name,
                seq + 1
            );
            done.push(p);
        }
        Ok::<(), SessionEnd>(())
    }
    .await;
    // The copy is dropped whatever happened; one left behind is swept an hour later.
    let _ = ask(
        &base,
        Method::DELETE,
        &format!("/_cluster/copy/{}/{}", b.name, started.copy),
        bearer,
        1 << 20,
        PAGE_PATIENCE,
    )
    .await;
    result.map(|()| done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_read_back_and_damage_is_an_error_naming_the_offset() {
        let items = vec![
            CopyItem::TakeDown {
                domain: "d".into(),
                title: "t".into(),
                rev: None,
            },
            CopyItem::Render {
                domain: "d".into(),
                title: "u".into(),
                rev: 3,
                tid: wink_engine::store::key::tid_at(1_700_000_000, 1, *b"abcdef"),
                content_type: "text/html".into(),
                labels: Default::default(),
                arrival: 1_700_000_000,
                value: b"<p/>".to_vec(),
            },
        ];
        let mut body = Vec::new();
        for i in items {
            let f = change_of(i).encode();
            body.extend_from_slice(&(f.len() as u32).to_be_bytes());
            body.extend_from_slice(&f);
        }
        let changes = parse_page(&body).unwrap();
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].kind, Kind::TakeDownTitle);
        assert_eq!(changes[1].value, &b"<p/>"[..]);
        assert!(parse_page(&body[..body.len() - 1])
            .unwrap_err()
            .contains("offset"));
        assert!(parse_page(&[0, 0, 0]).is_err());
        assert!(parse_page(&[0xff, 0xff, 0xff, 0xff, 1]).is_err());
    }
}
