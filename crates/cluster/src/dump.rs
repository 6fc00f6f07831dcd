//! A dump of a whole cluster (docs/CLUSTER.md § Export): each partition read from one owner, in
//! key order, a page at a time, and the partitions merged in key order.
//!
//! `GET /_cluster/dump/BUCKET/PARTITION[?after=CURSOR][&domain=D][&max_bytes=N]` (with the
//! token) answers a page of the partition's titles after the cursor, each with its readable
//! renders oldest first and their values, from an owner that vouches for the partition (503
//! otherwise); the header
//! `x-wink-next` carries the cursor of the next page, absent on the last, and
//! `x-wink-settings` the bucket's settings (what an export's `warcinfo` says of the store).
//!
//! A page is `WINKDMP1`, then frames: a 4-byte big-endian length, the CRC-32 of the payload,
//! the payload. A title's payload is `T`, its domain and title, and its renders (revision, tid,
//! state, content type, labels, arrival, the value's recorded CRC-32 and the value, each string
//! and the value length-prefixed); the last frame is `Z` and the number of titles before it, so
//! a page cut short is told from a short one. A reader checks every length against what is
//! left before it allocates, and every error names the URL and the offset.
//!
//! [`ClusterDump`] reads the cluster: the map and the nodes' URLs from `URL/_cluster`, then for
//! every partition a page from an owner (the next owner when one fails or answers damaged
//! bytes, from the same cursor), and gives the titles in key order across partitions, holding
//! one page per partition.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use hyper::StatusCode;
use uuid::Uuid;

use super::digest::{cursor_of, parse_cursor};
use super::message::{partition_of, RESERVED_DOMAIN};
use super::node::{Node, NodeStatus};
use wink_engine::store::{DumpRender, DumpTitle, Labels, State};
use wink_engine::{Error, Result};
use wink_serve::{Auth, Problem};
use wink_service::registry::{ReadError, Registry};

/// The first bytes of a page.
pub const MAGIC: &[u8; 8] = b"WINKDMP1";
/// The header that carries the bucket's settings.
pub const SETTINGS: &str = "x-wink-settings";
/// Titles in a page at most.
pub const PAGE_TITLES: usize = 256;
/// A page ends after the title that takes it past this many bytes (a title larger than that is
/// a page of its own), or past the reader's `max_bytes` when smaller.
pub const PAGE_BYTES: usize = 8 << 20;
/// What a reader holds of all partitions' pages together, about: each page is asked for at most
/// this divided by the number of partitions (64 KiB at least, [`PAGE_BYTES`] at most).
pub const READER_BYTES: usize = 256 << 20;
/// The largest page a reader takes: a title's renders are bounded by the store's policy and
/// largest value, this bounds what one answer may make a reader hold.
pub const MAX_PAGE: usize = 1 << 30;
/// How long a reader waits for one page.
const PAGE_DEADLINE: Duration = Duration::from_secs(300);

// ---- The page's bytes ----

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Domains, titles, content types and labels are checked shorter than 64 KiB on put.
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..usize::from(len)]);
}

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
    }
}

fn state_code(s: State) -> u8 {
    match s {
        State::Current => 0,
        State::Recent => 1,
        State::Historical => 2,
        State::Archived => 3,
    }
}

fn state_of(code: u8) -> Option<State> {
    Some(match code {
        0 => State::Current,
        1 => State::Recent,
        2 => State::Historical,
        3 => State::Archived,
        _ => return None,
    })
}

/// Appends one frame holding `payload`.
fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A title's frame payload.
fn title_payload(t: &DumpTitle, values: &[Vec<u8>]) -> Vec<u8> {
    let bytes: usize = values.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(bytes + 256 * (values.len() + 1));
    out.push(b'T');
    put_str(&mut out, &t.domain);
    put_str(&mut out, &t.title);
    out.extend_from_slice(&(t.renders.len() as u32).to_be_bytes());
    for (r, v) in t.renders.iter().zip(values) {
        out.extend_from_slice(&r.rev.to_be_bytes());
        out.extend_from_slice(r.tid.as_bytes());
        out.push(state_code(r.state));
        put_str(&mut out, &r.content_type);
        put_opt(&mut out, r.labels.encoding.as_deref());
        put_opt(&mut out, r.labels.language.as_deref());
        out.extend_from_slice(&r.arrival.to_be_bytes());
        out.extend_from_slice(&r.crc().to_be_bytes());
        out.extend_from_slice(&(v.len() as u64).to_be_bytes());
        out.extend_from_slice(v);
    }
    out
}

/// One title of a page, with its values in the order of its renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpedTitle {
    /// The title and its renders, oldest first.
    pub title: DumpTitle,
    /// The value of each render.
    pub values: Vec<Vec<u8>>,
}

/// A page's bytes read defensively; every error names `url` and the offset in the page.
struct PageReader<'a> {
    url: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Where the part being read (the page, or one frame) ends.
    end: usize,
}

/// Damaged bytes in a page: the owner that sent them is not used for that page (another is
/// asked), so the error says "unavailable", with the URL and the offset.
fn damaged(
    url: &str,
    at: usize,
    what: &str,
    expected: impl std::fmt::Display,
    found: impl std::fmt::Display,
) -> Error {
    Error::unavailable(format!(
        "{url}: damaged page at byte {at}: {what} (expected {expected}, found {found})"
    ))
}

impl<'a> PageReader<'a> {
    fn damaged(
        &self,
        what: &str,
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
    ) -> Error {
        damaged(self.url, self.at, what, expected, found)
    }

    fn left(&self) -> usize {
        self.end - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let left = self.left();
        if n > left {
            return Err(self.damaged(what, format!("{n} bytes"), format!("{left} left")));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = u16::from_be_bytes(self.array(what)?);
        let start = self.at;
        let b = self.take(usize::from(len), what)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| damaged(self.url, start, what, "UTF-8", "other bytes"))
    }

    fn opt(&mut self, what: &str) -> Result<Option<String>> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => self.string(what).map(Some),
            b => Err(self.damaged(what, "0 or 1", b)),
        }
    }

    /// A reader of the next frame's payload, its CRC checked; this one moves past it.
    fn frame(&mut self) -> Result<PageReader<'a>> {
        let len = self.u32("frame length")? as usize;
        let crc = self.u32("frame checksum")?;
        let start = self.at;
        let payload = self.take(len, "frame")?;
        let got = crc32fast::hash(payload);
        if got != crc {
            let (want, got) = (format!("{crc:08x}"), format!("{got:08x}"));
            return Err(damaged(self.url, start, "frame checksum", want, got));
        }
        Ok(PageReader {
            url: self.url,
            bytes: self.bytes,
            at: start,
            end: start + len,
        })
    }
}

/// The titles of a page (`url` names it in errors).
pub fn parse_page(url: &str, bytes: &[u8]) -> Result<Vec<DumpedTitle>> {
    let mut page = PageReader {
        url,
        bytes,
        at: 0,
        end: bytes.len(),
    };
    if page.take(MAGIC.len(), "page magic")? != MAGIC {
        return Err(damaged(url, 0, "page magic", "WINKDMP1", "other bytes"));
    }
    let mut titles = Vec::new();
    loop {
        let mut f = page.frame()?;
        match f.u8("frame kind")? {
            b'T' => {
                titles.push(title_of(&mut f)?);
                if titles.len() > PAGE_TITLES {
                    return Err(page.damaged("page", format!("{PAGE_TITLES} titles"), "more"));
                }
            }
            b'Z' => {
                let n = f.u32("title count")?;
                if n as usize != titles.len() {
                    return Err(page.damaged("title count", n, titles.len()));
                }
                if page.at != bytes.len() {
                    return Err(page.damaged(
                        "end of page",
                        "no more bytes",
                        bytes.len() - page.at,
                    ));
                }
                return Ok(titles);
            }
            k => return Err(page.damaged("frame kind", "T or Z", k)),
        }
    }
}

fn title_of(f: &mut PageReader<'_>) -> Result<DumpedTitle> {
    let domain = f.string("domain")?;
    let title = f.string("title")?;
    let n = f.u32("render count")? as usize;
    // Each render takes more than 40 bytes: a count past what is left is damage, not memory.
    let left = f.left();
    if n > left / 40 {
        return Err(f.damaged("render count", format!("at most {}", left / 40), n));
    }
    let mut renders = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let rev = f.u64("revision")?;
        let tid = Uuid::from_bytes(f.array("tid")?);
        let code = f.u8("state")?;
        let state = state_of(code).ok_or_else(|| f.damaged("state", "0 to 3", code))?;
        let content_type = f.string("content type")?;
        let labels = Labels {
            encoding: f.opt("content encoding")?,
            language: f.opt("content language")?,
        };
        let arrival = f.u64("arrival")? as i64;
        let crc = f.u32("value checksum")?;
        let len = f.u64("value length")?;
        let value = f
            .take(usize::try_from(len).unwrap_or(usize::MAX), "value")?
            .to_vec();
        renders.push(DumpRender::carried(
            rev,
            tid,
            content_type,
            labels,
            state,
            len,
            arrival,
            crc,
        ));
        values.push(value);
    }
    if f.left() != 0 {
        return Err(f.damaged("title frame", "its end", "more bytes"));
    }
    Ok(DumpedTitle {
        title: DumpTitle {
            domain,
            title,
            renders,
        },
        values,
    })
}

// ---- The owner's side ----

/// Names a walk keeps in key order (the pages after this one take them without a walk).
const WALK_TITLES: usize = 4096;
/// Walks' names kept for the pages after them, at most (the oldest is dropped).
const AHEAD_KEPT: usize = 64;

/// What a page's names continue from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AheadKey {
    node: String,
    bucket: String,
    partition: u32,
    domain: Option<String>,
    /// The last title of the page served.
    after: (String, String),
}

/// The names a walk found past the pages it served, and whether the walk went to the end:
/// each page would otherwise walk every title record of the store. A title put since the walk
/// in that range is not in the dump, as if it had come after its page; one gone since has no
/// render left and is skipped.
static AHEAD: Mutex<VecDeque<(AheadKey, Names, bool)>> = Mutex::new(VecDeque::new());

/// Titles as (domain, title), in key order.
type Names = Vec<(String, String)>;

fn take_ahead(key: &AheadKey) -> Option<(Names, bool)> {
    let mut ahead = AHEAD.lock().unwrap_or_else(|p| p.into_inner());
    let i = ahead.iter().position(|(k, _, _)| k == key)?;
    ahead.remove(i).map(|(_, names, all)| (names, all))
}

fn keep_ahead(key: AheadKey, names: Names, walked_all: bool) {
    let mut ahead = AHEAD.lock().unwrap_or_else(|p| p.into_inner());
    if ahead.len() >= AHEAD_KEPT {
        ahead.pop_front();
    }
    ahead.push_back((key, names, walked_all));
}

/// One page of `partition` of `bucket` from this node's store: the page's bytes, the next
/// page's cursor and the bucket's settings (JSON). 503 from a node that does not own the
/// partition or does not vouch for what it owns.
pub(super) fn page(
    node: &Node,
    reg: &Registry,
    bucket: &str,
    partition: u32,
    after: Option<&str>,
    domain: Option<&str>,
    max_bytes: Option<&str>,
) -> std::result::Result<(Vec<u8>, Option<String>, String), Problem> {
    let map = node.map();
    let page_bytes = match max_bytes {
        None => PAGE_BYTES,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|m| *m > 0)
            .ok_or_else(|| Problem::bad_request(format!("max_bytes {m:?}")))?
            .min(PAGE_BYTES),
    };
    if partition >= map.partitions {
        return Err(Problem::bad_request(format!("partition {partition}")));
    }
    let after = match after {
        None => None,
        Some(c) => {
            Some(parse_cursor(c).ok_or_else(|| Problem::bad_request(format!("cursor {c:?}")))?)
        }
    };
    node.answers_for(&[partition])?;
    let total = map.partitions;
    let walk = |_: &wink_service::registry::Bucket, s: &wink_engine::Store| {
        let key = |after: (String, String)| AheadKey {
            node: node.name.clone(),
            bucket: bucket.to_string(),
            partition,
            domain: domain.map(str::to_string),
            after,
        };
        // The names a walk found past the page before, when this node served it; else a walk.
        let (mut names, walked_all) = match after.clone().and_then(|a| take_ahead(&key(a))) {
            Some(ahead) => ahead,
            None => {
                let names = s.titles_in_key_order(
                    after.as_ref().map(|(d, t)| (d.as_str(), t.as_str())),
                    |d, t| {
                        d != RESERVED_DOMAIN
                            && domain.is_none_or(|x| x == d)
                            && partition_of(d, t, total) == partition
                    },
                    WALK_TITLES,
                )?;
                let all = names.len() < WALK_TITLES;
                (names, all)
            }
        };
        let mut rest = names.split_off(names.len().min(PAGE_TITLES));
        let mut titles = Vec::with_capacity(names.len());
        for (d, t) in &names {
            titles.push(s.dump_title(d, t)?);
        }
        let mut reader = s.dump_reader()?;
        for r in titles.iter().flatten().flat_map(|t| &t.renders) {
            reader.plan(r);
        }
        let mut body = MAGIC.to_vec();
        let (mut given, mut cut) = (0u32, None);
        for (i, t) in titles.iter().enumerate() {
            if let Some(t) = t {
                let values = t
                    .renders
                    .iter()
                    .map(|r| reader.read(t, r))
                    .collect::<wink_engine::Result<Vec<_>>>()?;
                frame(&mut body, &title_payload(t, &values));
                given += 1;
            }
            if body.len() >= page_bytes && i + 1 < names.len() {
                cut = Some(i);
                break;
            }
        }
        reader.finish()?;
        let mut end = vec![b'Z'];
        end.extend_from_slice(&given.to_be_bytes());
        frame(&mut body, &end);
        let last = match cut {
            Some(i) => {
                let unsent = names.split_off(i + 1);
                rest.splice(0..0, unsent);
                names.last()
            }
            None => names.last(),
        };
        let next = match last {
            Some(last) if !rest.is_empty() || !walked_all => Some(last.clone()),
            _ => None,
        };
        if let Some(last) = next.clone().filter(|_| !rest.is_empty()) {
            keep_ahead(key(last), rest, walked_all);
        }
        let settings = wink_service::spec::describe(s.config()).to_string();
        Ok((body, next.map(|(d, t)| cursor_of(&d, &t)), settings))
    };
    match tokio::task::block_in_place(|| reg.read(bucket, walk)) {
        Ok(Some(page)) => Ok(page),
        Ok(None) => Err(Problem::not_found(format!("no bucket {bucket}"))),
        Err(ReadError::Failed(why)) => Err(Problem::unavailable(
            format!("bucket {bucket} is not open: {why}"),
            5,
        )),
        Err(ReadError::Store(e)) => Err(Problem::from_store(&e)),
    }
}

// ---- The reader's side ----

/// The bucket's settings, as an owner gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Settings {
    /// The revisions policy.
    pub revisions: String,
    /// The renders policy.
    pub renders: String,
    /// Seconds a historical render stays readable.
    pub historical_ttl: i64,
    /// The archive policy, or `none`.
    pub archive: String,
}

/// One partition's part of a cluster dump.
struct Part {
    partition: u32,
    /// The owners' base URLs, the one that answered last first.
    owners: Vec<(String, String)>,
    /// Titles fetched and not given yet.
    titles: VecDeque<DumpedTitle>,
    /// The cursor of the next page; `None` with `done`.
    next: Option<String>,
    done: bool,
}

/// What a cluster dump fetched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Pages fetched.
    pub pages: u64,
    /// Bytes of the pages.
    pub bytes: u64,
    /// Requests that failed and were asked of another owner.
    pub retries: u64,
    /// Partitions whose titles were all given.
    pub partitions_done: u32,
    /// Partitions in all.
    pub partitions: u32,
}

/// A whole cluster's titles of one bucket in key order, each partition read from one owner
/// (module doc). Holds one page per partition, all of them about [`READER_BYTES`] (a title
/// larger than its partition's share is a page of its own).
pub struct ClusterDump {
    rt: tokio::runtime::Runtime,
    auth: Auth,
    bucket: String,
    domain: Option<String>,
    parts: Vec<Part>,
    /// The first title of each partition that has one, smallest first.
    heads: BinaryHeap<Reverse<((String, String), usize)>>,
    settings: Settings,
    stats: DumpStats,
}

impl ClusterDump {
    /// Starts a dump of `bucket` on the cluster `url` (a node's or the router's), of `domain`
    /// only when given; reads the first page of every partition.
    pub fn open(url: &str, bucket: &str, auth: &Auth, domain: Option<&str>) -> Result<ClusterDump> {
        let url = url.trim_end_matches('/');
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io(Path::new("."), None, e))?;
        let status: NodeStatus = rt
            .block_on(super::admin::get_json(
                &format!("{url}/_cluster"),
                auth,
                Duration::from_secs(10),
            ))
            .map_err(|e| Error::unavailable(format!("cluster: {url}/_cluster: {e}")))?;
        let map = status.map.clone().ok_or_else(|| {
            Error::invalid(format!("cluster: {url}/_cluster answers no placement map"))
        })?;
        if !status.buckets.iter().any(|b| b == bucket) {
            return Err(Error::invalid(format!(
                "cluster: {url} serves no bucket {bucket:?} (it serves {})",
                status.buckets.join(", ")
            )));
        }
        let mut parts = Vec::new();
        for p in 0..map.partitions {
            let owners: Vec<(String, String)> = map
                .owners(p)
                .iter()
                .filter(|o| !map.removed.contains(o))
                .filter_map(|o| {
                    let u = status.urls.get(o)?;
                    Some((o.clone(), u.trim_end_matches('/').to_string()))
                })
                .collect();
            if owners.is_empty() {
                return Err(Error::unavailable(format!(
                    "cluster: partition {p} has no owner with a known URL"
                )));
            }
            parts.push(Part {
                partition: p,
                owners,
                titles: VecDeque::new(),
                next: None,
                done: false,
            });
        }
        let mut dump = ClusterDump {
            rt,
            auth: auth.clone(),
            bucket: bucket.to_string(),
            domain: domain.map(str::to_string),
            heads: BinaryHeap::new(),
            stats: DumpStats {
                partitions: map.partitions,
                ..DumpStats::default()
            },
            parts,
            settings: Settings::default(),
        };
        for i in 0..dump.parts.len() {
            dump.refill(i)?;
        }
        Ok(dump)
    }

    /// The bucket's settings, as the first owner asked gave them.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// What was fetched so far.
    pub fn stats(&self) -> DumpStats {
        self.stats
    }

    /// The next title in key order, with its values; `None` once every partition is done.
    pub fn next_title(&mut self) -> Result<Option<DumpedTitle>> {
        let Some(Reverse((_, i))) = self.heads.pop() else {
            return Ok(None);
        };
        let Some(t) = self.parts[i].titles.pop_front() else {
            return Err(Error::internal("a partition's head without its title"));
        };
        if self.parts[i].titles.is_empty() {
            self.refill(i)?;
        } else {
            self.push_head(i);
        }
        Ok(Some(t))
    }

    fn push_head(&mut self, i: usize) {
        if let Some(t) = self.parts[i].titles.front() {
            let key = (t.title.domain.clone(), t.title.title.clone());
            self.heads.push(Reverse((key, i)));
        }
    }

    /// Fetches pages of part `i` until it has a title or is done.
    fn refill(&mut self, i: usize) -> Result<()> {
        while self.parts[i].titles.is_empty() && !self.parts[i].done {
            let (titles, next) = self.fetch(i)?;
            let part = &mut self.parts[i];
            part.titles.extend(titles);
            part.done = next.is_none();
            part.next = next;
            if part.done {
                self.stats.partitions_done += 1;
            }
        }
        self.push_head(i);
        Ok(())
    }

    /// One page of part `i`, from its owners in turn (one that fails goes last).
    fn fetch(&mut self, i: usize) -> Result<(Vec<DumpedTitle>, Option<String>)> {
        let n = self.parts[i].owners.len();
        let mut last_error = None;
        for _ in 0..n {
            let (name, base) = self.parts[i].owners[0].clone();
            match self.fetch_from(i, &base) {
                Ok(page) => return Ok(page),
                Err(e @ Error::Invalid(_)) => return Err(e),
                Err(e) => {
                    tracing::warn!(partition = self.parts[i].partition, node = %name, "dump: {e}");
                    self.stats.retries += 1;
                    self.parts[i].owners.rotate_left(1);
                    last_error = Some(e);
                }
            }
        }
        let p = self.parts[i].partition;
        Err(match last_error {
            Some(e @ Error::Invalid(_)) => e,
            Some(e) => Error::unavailable(format!(
                "cluster: no owner of partition {p} gave its titles; the last: {e}"
            )),
            None => Error::unavailable(format!("cluster: partition {p} has no owner")),
        })
    }

    fn fetch_from(&mut self, i: usize, base: &str) -> Result<(Vec<DumpedTitle>, Option<String>)> {
        let part = &self.parts[i];
        let query = {
            let mut q = form_urlencoded::Serializer::new(String::new());
            if let Some(a) = &part.next {
                q.append_pair("after", a);
            }
            if let Some(d) = &self.domain {
                q.append_pair("domain", d);
            }
            let share = READER_BYTES / self.parts.len().max(1);
            q.append_pair("max_bytes", &share.clamp(64 << 10, PAGE_BYTES).to_string());
            q.finish()
        };
        let url = format!(
            "{base}/_cluster/dump/{}/{}?{query}",
            self.bucket, part.partition
        );
        let started = Instant::now();
        let (status, headers, body) = self
            .rt
            .block_on(super::admin::request_full(
                hyper::Method::GET,
                &url,
                self.auth.bearer(),
                bytes::Bytes::new(),
                PAGE_DEADLINE,
                MAX_PAGE,
            ))
            .map_err(|e| Error::unavailable(format!("{url}: {e}")))?;
        if status != StatusCode::OK.as_u16() {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            let e = format!("{url}: answered {status}: {}", text.trim());
            return Err(match status {
                // Bad usage, or a token the nodes refuse (--token-file): no owner answers better.
                400 | 401 | 403 | 404 => Error::invalid(e),
                _ => Error::unavailable(e),
            });
        }
        let titles = parse_page(&url, &body)?;
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let next = header(super::seed::NEXT).map(str::to_string);
        if let Some(s) = header(SETTINGS) {
            self.settings = serde_json::from_str(s)
                .map_err(|e| Error::unavailable(format!("{url}: settings {s:?}: {e}")))?;
        }
        // Each title must sort after the cursor and the one before it, and be the partition's.
        let mut prev = part.next.as_deref().and_then(parse_cursor);
        let total = self.stats.partitions;
        for t in &titles {
            let key = (t.title.domain.clone(), t.title.title.clone());
            if prev.as_ref().is_some_and(|p| key <= *p)
                || partition_of(&key.0, &key.1, total) != part.partition
                || self.domain.as_ref().is_some_and(|d| *d != key.0)
            {
                return Err(Error::unavailable(format!(
                    "{url}: title {}/{} is out of key order or not of partition {}",
                    key.0, key.1, part.partition
                )));
            }
            prev = Some(key);
        }
        if next.is_some() && next.as_deref().and_then(parse_cursor).is_none() {
            return Err(Error::unavailable(format!(
                "{url}: a next cursor it did not make"
            )));
        }
        tracing::debug!(
            url,
            titles = titles.len(),
            ms = started.elapsed().as_millis() as u64
        );
        self.stats.pages += 1;
        self.stats.bytes += body.len() as u64;
        Ok((titles, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (DumpTitle, Vec<Vec<u8>>) {
        let t = DumpTitle {
            domain: "en.wikipedia.org".into(),
            title: "Straße/1".into(),
            renders: vec![DumpRender::carried(
                3,
                Uuid::from_u128(7),
                "text/html".into(),
                Labels {
                    encoding: None,
                    language: Some("de".into()),
                },
                State::Current,
                5,
                1_700_000_000,
                9,
            )],
        };
        (t, vec![b"hello".to_vec()])
    }

    fn page_of(titles: &[(DumpTitle, Vec<Vec<u8>>)]) -> Vec<u8> {
        let mut body = MAGIC.to_vec();
        for (t, v) in titles {
            frame(&mut body, &title_payload(t, v));
        }
        let mut end = vec![b'Z'];
        end.extend_from_slice(&(titles.len() as u32).to_be_bytes());
        frame(&mut body, &end);
        body
    }

    #[test]
    fn a_page_reads_back() {
        let (t, v) = sample();
        let got = parse_page("http://x", &page_of(&[(t.clone(), v.clone())])).unwrap();
        assert_eq!(
            got,
            vec![DumpedTitle {
                title: t,
                values: v
            }]
        );
        assert!(parse_page("http://x", &page_of(&[])).unwrap().is_empty());
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_an_error_naming_the_url() {
        let (t, v) = sample();
        let body = page_of(&[(t, v)]);
        for n in 0..body.len() {
            let e = parse_page("http://x/p", &body[..n])
                .unwrap_err()
                .to_string();
            assert!(e.contains("http://x/p"), "{e}");
        }
        for i in 0..body.len() {
            let mut b = body.clone();
            b[i] ^= 0x40;
            assert!(parse_page("http://x/p", &b).is_err(), "byte {i}");
        }
        let mut long = body.clone();
        long.push(0);
        assert!(parse_page("http://x/p", &long).is_err());
    }

    #[test]
    fn a_huge_length_allocates_nothing() {
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        body.extend_from_slice(&[0; 4]);
        assert!(parse_page("http://x", &body).is_err());
        let mut payload = vec![b'T'];
        put_str(&mut payload, "d");
        put_str(&mut payload, "t");
        payload.extend_from_slice(&u32::MAX.to_be_bytes());
        let mut body = MAGIC.to_vec();
        frame(&mut body, &payload);
        let e = parse_page("http://x", &body).unwrap_err().to_string();
        assert!(e.contains("render count"), "{e}");
    }
}
