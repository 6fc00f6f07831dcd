//! What an owner holds of a partition, as digests that two owners compare without shipping a
//! value (docs/CLUSTER.md § Verify over HTTP): `GET /_cluster/digest/BUCKET/PARTITION` answers
//! one digest of the whole partition; with `?titles=1[&after=CURSOR]`, a page of per-title
//! digests in key order, so a difference narrows to the titles that differ.
//!
//! A title's digest covers what the store records of it: its take-downs, and each readable
//! render's revision, tid, content type, labels, length and the CRC-32 its record keeps of the
//! value ([`TitleSummary`]). The bytes themselves are not read: a value damaged on disk after it
//! was stored keeps its recorded CRC. With `?check=1` they are: every value of the partition is
//! read back and checked against its CRC-32 first, and one that fails is quarantined on this
//! owner and left out of its title's digest, which then differs from a healthy owner's (and
//! `wink cluster repair` copies the render back). A render already in quarantine is left out
//! either way.
//!
//! The partition is walked in one exclusive job on the bucket's writer, so the digest is of one
//! committed state (writes wait for the walk).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha1::{Digest as _, Sha1};

use super::message::{partition_of, RESERVED_DOMAIN};
use super::node::{on_writer, Node};
use wink_engine::maintenance::checked_summary_step;
use wink_engine::store::{TitleCursor, TitleSummary};
use wink_serve::Problem;
use wink_service::registry::Registry;

/// Titles in one page of per-title digests.
pub const TITLES_PER_PAGE: usize = 1000;

/// `GET /_cluster/digest/BUCKET/PARTITION`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDigest {
    /// The node that answered.
    pub node: String,
    /// Titles it holds in the partition.
    pub titles: u64,
    /// SHA-1 (hex) of every title's key and digest, in key order.
    pub digest: String,
    /// With `?check=1`: the renders whose values failed their check (and were quarantined).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
}

/// One title's digest, and what it stands for, in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TitleDigest {
    /// The title's domain.
    pub domain: String,
    /// The title within its domain.
    pub title: String,
    /// SHA-1 (hex) of the title's summary.
    pub digest: String,
    /// The summary in words: take-downs, then `REV/TID len N crc X` per render.
    pub held: String,
}

/// `GET /_cluster/digest/BUCKET/PARTITION?titles=1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TitlePage {
    /// The node that answered.
    pub node: String,
    /// In key order.
    pub titles: Vec<TitleDigest>,
    /// The `after` of the next page; `None` on the last.
    pub next: Option<String>,
    /// With `?check=1`: the renders whose values failed their check (and were quarantined).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-1 of a title's summary: every field length-prefixed, so no two summaries share one.
fn title_digest(s: &TitleSummary) -> String {
    let mut h = Sha1::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_be_bytes());
        h.update(b);
    };
    field(&[s.title_down as u8]);
    for r in &s.revs_down {
        field(&r.to_be_bytes());
    }
    field(b"renders");
    for (rev, tid, ct, labels, len, crc) in &s.renders {
        field(&rev.to_be_bytes());
        field(tid.as_bytes());
        field(ct.as_bytes());
        field(labels.encoding.as_deref().unwrap_or("").as_bytes());
        field(labels.language.as_deref().unwrap_or("").as_bytes());
        field(&len.to_be_bytes());
        field(&crc.to_be_bytes());
    }
    hex(&h.finalize())
}

/// A title's summary in words, for a person reading what differs.
fn held(s: &TitleSummary) -> String {
    let mut parts = Vec::new();
    if s.title_down {
        parts.push("title taken down".to_string());
    }
    for r in &s.revs_down {
        parts.push(format!("rev {r} taken down"));
    }
    for (rev, tid, _, _, len, crc) in &s.renders {
        parts.push(format!("{rev}/{tid} len {len} crc {crc:08x}"));
    }
    parts.join(", ")
}

/// The title digests of `partition` of `bucket` on this node, in key order, and (`check`: every
/// value read and checked) the renders whose values failed. Refused (503) by a node that does
/// not own the partition, or does not vouch for what it owns.
async fn title_digests(
    node: &Node,
    reg: &Registry,
    bucket: &str,
    partition: u32,
    check: bool,
) -> Result<(BTreeMap<(String, String), TitleDigest>, Vec<String>), Problem> {
    let map = node.map();
    if !map.owned_by(&node.name).contains(&partition) {
        return Err(Problem::unavailable(
            format!("node {} does not own partition {partition}", node.name),
            1,
        ));
    }
    let s = node.status();
    if let Some(why) = s.behind.as_ref().or(s.diverged.as_ref()) {
        return Err(Problem::unavailable(
            format!("node {} vouches for nothing: {why}", node.name),
            5,
        ));
    }
    let b = match reg.bucket(bucket) {
        Ok(Some(b)) => b,
        _ => return Err(Problem::not_found(format!("no bucket {bucket}"))),
    };
    let partitions = map.partitions;
    let (summaries, damaged) = on_writer(&b, move |store| {
        let mut cursor = TitleCursor::new();
        let mut out = Vec::new();
        let mut damaged = Vec::new();
        let keep =
            |d: &str, t: &str| d != RESERVED_DOMAIN && partition_of(d, t, partitions) == partition;
        while !cursor.is_done() {
            if check {
                let (step, bad) = checked_summary_step(store, &mut cursor, 1024, keep)?;
                out.extend(step);
                damaged.extend(bad);
            } else {
                out.extend(store.summary_step(&mut cursor, 1024, keep)?);
            }
        }
        Ok((out, damaged))
    })
    .await
    .map_err(|e| Problem::from_store(&e))?;
    // Named by render only: what the store said names files, which no answer shows.
    let damaged = damaged
        .iter()
        .map(|d| {
            let fate = match d.quarantined {
                Some(_) => "quarantined",
                None => "not quarantined",
            };
            format!(
                "{}/{} {}/{}: the value fails its check ({} tier, {fate})",
                d.domain,
                d.title,
                d.rev,
                d.tid,
                d.tier.as_str()
            )
        })
        .collect();
    let titles = summaries
        .into_iter()
        .map(|s| {
            let d = TitleDigest {
                domain: s.domain.clone(),
                title: s.title.clone(),
                digest: title_digest(&s),
                held: held(&s),
            };
            ((s.domain, s.title), d)
        })
        .collect();
    Ok((titles, damaged))
}

/// The digest of `partition` of `bucket` on this node.
pub async fn partition_digest(
    node: &Arc<Node>,
    reg: &Registry,
    bucket: &str,
    partition: u32,
    check: bool,
) -> Result<PartitionDigest, Problem> {
    let (titles, damaged) = title_digests(node, reg, bucket, partition, check).await?;
    let mut h = Sha1::new();
    for ((domain, title), d) in &titles {
        for f in [domain.as_bytes(), title.as_bytes(), d.digest.as_bytes()] {
            h.update((f.len() as u64).to_be_bytes());
            h.update(f);
        }
    }
    Ok(PartitionDigest {
        node: node.name.clone(),
        titles: titles.len() as u64,
        digest: hex(&h.finalize()),
        damaged,
    })
}

/// The cursor after `(domain, title)`: both, hex, joined by `.`.
pub(super) fn cursor_of(domain: &str, title: &str) -> String {
    format!("{}.{}", hex(domain.as_bytes()), hex(title.as_bytes()))
}

fn unhex(text: &str) -> Option<String> {
    if text.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The `(domain, title)` of a cursor [`cursor_of`] made.
pub(super) fn parse_cursor(text: &str) -> Option<(String, String)> {
    let (d, t) = text.split_once('.')?;
    Some((unhex(d)?, unhex(t)?))
}

/// A page of the title digests of `partition` after the cursor `after` (from the start: `None`).
pub async fn title_page(
    node: &Arc<Node>,
    reg: &Registry,
    bucket: &str,
    partition: u32,
    after: Option<&str>,
    check: bool,
) -> Result<TitlePage, Problem> {
    let after = match after {
        None => None,
        Some(c) => {
            Some(parse_cursor(c).ok_or_else(|| Problem::bad_request(format!("cursor {c:?}")))?)
        }
    };
    let (titles, damaged) = title_digests(node, reg, bucket, partition, check).await?;
    let mut page: Vec<TitleDigest> = match &after {
        None => titles.into_values().take(TITLES_PER_PAGE + 1).collect(),
        Some(key) => titles
            .range((
                std::ops::Bound::Excluded(key.clone()),
                std::ops::Bound::Unbounded,
            ))
            .map(|(_, d)| d.clone())
            .take(TITLES_PER_PAGE + 1)
            .collect(),
    };
    let next = if page.len() > TITLES_PER_PAGE {
        page.truncate(TITLES_PER_PAGE);
        page.last().map(|d| cursor_of(&d.domain, &d.title))
    } else {
        None
    };
    Ok(TitlePage {
        node: node.name.clone(),
        titles: page,
        next,
        damaged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_junk_is_refused() {
        let c = cursor_of("de.wikipedia.org", "Straße/1");
        let (d, t) = c.split_once('.').unwrap();
        assert_eq!(unhex(d).unwrap(), "de.wikipedia.org");
        assert_eq!(unhex(t).unwrap(), "Straße/1");
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
        assert!(unhex("ff").is_none());
    }

    #[test]
    fn every_field_of_a_summary_changes_its_digest() {
        let base = TitleSummary {
            domain: "d".into(),
            title: "t".into(),
            title_down: false,
            revs_down: vec![],
            renders: vec![(
                3,
                uuid::Uuid::nil(),
                "text/html".into(),
                wink_engine::store::Labels::NONE,
                4,
                7,
            )],
        };
        let d = title_digest(&base);
        let mut s = base.clone();
        s.title_down = true;
        assert_ne!(title_digest(&s), d);
        let mut s = base.clone();
        s.revs_down = vec![3];
        assert_ne!(title_digest(&s), d);
        let mut s = base.clone();
        s.renders[0].5 = 8;
        assert_ne!(title_digest(&s), d);
        let mut s = base.clone();
        s.renders[0].4 = 5;
        assert_ne!(title_digest(&s), d);
        let mut s = base.clone();
        s.renders.clear();
        assert_ne!(title_digest(&s), d);
        assert_eq!(title_digest(&base.clone()), d);
    }
}
