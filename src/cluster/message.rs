//! A change as a stream message: Wink's own framing (docs/CLUSTER.md § Messages), the subject
//! and the message id. Every message read is untrusted bytes: each length is checked against
//! what is left, and a bad message is an error naming what is wrong, never a panic.

use sha1::{Digest, Sha1};
use uuid::Uuid;

/// The framing's version. Version 1 wrote a whole title's take-down or lift as kind 2 or 3 with
/// `rev` `u64::MAX`, which could not be told from a take-down of revision `u64::MAX`; version 2
/// gives them kinds of their own (4, 5). Both are read.
const VERSION: u8 = 2;
/// The reserved domain of a node's own records in its stores; refused on every route.
pub const RESERVED_DOMAIN: &str = "wink.cluster";
/// `rev` of a take-down or lift of a whole title in version 1 (and, unused, in version 2).
const WHOLE_TITLE: u64 = u64::MAX;

/// What a message asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Put,
    /// A take-down of one revision.
    TakeDown,
    /// A lift of one revision's take-down.
    Lift,
    /// A take-down of the whole title.
    TakeDownTitle,
    /// A lift of the whole title's take-down.
    LiftTitle,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Put => 1,
            Kind::TakeDown => 2,
            Kind::Lift => 3,
            Kind::TakeDownTitle => 4,
            Kind::LiftTitle => 5,
        }
    }

    /// The revision a take-down or lift of `rev` acts on: `None` for the whole title.
    pub fn of_rev(self, rev: u64) -> Option<u64> {
        match self {
            Kind::TakeDownTitle | Kind::LiftTitle => None,
            _ => Some(rev),
        }
    }
}

/// A change, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: Kind,
    /// Seconds since the epoch, by the clock of the node that received the request.
    pub arrival: i64,
    pub rev: u64,
    pub tid: Uuid,
    pub domain: String,
    pub title: String,
    pub content_type: String,
    pub value: Vec<u8>,
}

/// The partition of a key: FNV-1a (64 bits) of `domain 0x00 title`, modulo `partitions`. Fixed
/// by its definition, so every node and every version agree.
pub fn partition_of(domain: &str, title: &str, partitions: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    domain.bytes().for_each(&mut eat);
    eat(0);
    title.bytes().for_each(&mut eat);
    (h % u64::from(partitions.max(1))) as u32
}

/// The subject a change of `bucket` in `partition` is published to.
pub fn subject(bucket: &str, partition: u32) -> String {
    format!("wink.{bucket}.{partition}")
}

/// The bucket and partition of a subject, when it is one of ours.
pub fn parse_subject(subject: &str) -> Option<(&str, u32)> {
    let rest = subject.strip_prefix("wink.")?;
    let (bucket, part) = rest.rsplit_once('.')?;
    if !crate::service::spec::valid_bucket_name(bucket) {
        return None;
    }
    Some((bucket, part.parse().ok()?))
}

/// The message id (JetStream's deduplication):
/// `bucket|sha1(domain 0 title)|rev|tid|kind|crc32(content type 0 value)`. The key as a digest
/// keeps the id short and ASCII whatever the title holds. The value's checksum is in it because a
/// put of the same (rev, tid) with other bytes is a new change (a single node stores the new
/// bytes), not a retry to drop.
pub fn message_id(bucket: &str, c: &Change) -> String {
    let mut d = Sha1::new();
    d.update(c.domain.as_bytes());
    d.update([0]);
    d.update(c.title.as_bytes());
    let digest: String = d.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut crc = crc32fast::Hasher::new();
    crc.update(c.content_type.as_bytes());
    crc.update(&[0]);
    crc.update(&c.value);
    format!(
        "{bucket}|{digest}|{}|{}|{}|{:08x}",
        c.rev,
        c.tid,
        c.kind.byte(),
        crc.finalize()
    )
}

impl Change {
    /// The store's put of this change (of kind [`Kind::Put`]): the render with the tid the
    /// receiving node gave it, so that every replica stores the same one.
    pub fn as_put(&self) -> crate::store::Put<'_> {
        crate::store::Put {
            domain: &self.domain,
            title: &self.title,
            rev: self.rev,
            tid: Some(self.tid),
            content_type: &self.content_type,
            value: &self.value,
            historical: false,
        }
    }

    /// The framing's bytes besides the value.
    pub fn overhead(&self) -> usize {
        2 + 8 + 8 + 16 + 6 + self.domain.len() + self.title.len() + self.content_type.len()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.overhead() + self.value.len());
        out.push(VERSION);
        out.push(self.kind.byte());
        out.extend_from_slice(&self.arrival.to_be_bytes());
        out.extend_from_slice(&self.rev.to_be_bytes());
        out.extend_from_slice(self.tid.as_bytes());
        for s in [&self.domain, &self.title, &self.content_type] {
            // Checked lengths: a domain ≤ 255, a title ≤ 1024, a content type ≤ 255 bytes.
            out.extend_from_slice(&(s.len().min(u16::MAX as usize) as u16).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out.extend_from_slice(&self.value);
        out
    }

    /// Decodes a message's body.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Change, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.take(1)?[0];
        if version != 1 && version != VERSION {
            return Err(format!(
                "message version {version}, this node reads 1 and {VERSION}"
            ));
        }
        let mut kind = match (version, r.take(1)?[0]) {
            (_, 1) => Kind::Put,
            (_, 2) => Kind::TakeDown,
            (_, 3) => Kind::Lift,
            (2, 4) => Kind::TakeDownTitle,
            (2, 5) => Kind::LiftTitle,
            (_, k) => {
                return Err(format!(
                    "message kind {k} is not one of version {version}'s"
                ))
            }
        };
        let arrival = i64::from_be_bytes(r.array()?);
        let rev = u64::from_be_bytes(r.array()?);
        if version == 1 && rev == WHOLE_TITLE {
            kind = match kind {
                Kind::TakeDown => Kind::TakeDownTitle,
                Kind::Lift => Kind::LiftTitle,
                k => k,
            };
        }
        let tid = Uuid::from_bytes(r.array()?);
        let domain = r.string("domain")?;
        let title = r.string("title")?;
        let content_type = r.string("content type")?;
        let value = bytes[r.at..].to_vec();
        Ok(Change {
            kind,
            arrival,
            rev,
            tid,
            domain,
            title,
            content_type,
            value,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| format!("message cut short: {n} bytes wanted at offset {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn string(&mut self, what: &str) -> std::result::Result<String, String> {
        let len = u16::from_be_bytes(self.array()?) as usize;
        let at = self.at;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| format!("message's {what} at offset {at} is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn change() -> Change {
        Change {
            kind: Kind::Put,
            arrival: 1_700_000_000,
            rev: 42,
            tid: crate::store::key::tid_at(1_700_000_000, 7, [1; 6]),
            domain: "en.wikipedia.org".into(),
            title: "AC/DC ü".into(),
            content_type: "text/html".into(),
            value: b"<p>hi</p>".to_vec(),
        }
    }

    #[test]
    fn a_change_round_trips() {
        let c = change();
        let bytes = c.encode();
        assert_eq!(bytes.len(), c.overhead() + c.value.len());
        assert_eq!(Change::decode(&bytes).unwrap(), c);
        for cut in 0..c.overhead() {
            assert!(Change::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn version_1_whole_title_changes_still_read_and_version_2_tells_them_apart() {
        let mut c = change();
        c.kind = Kind::TakeDown;
        c.rev = u64::MAX;
        c.value.clear();
        let mut bytes = c.encode();
        // Version 2: a take-down of revision u64::MAX is just that.
        assert_eq!(Change::decode(&bytes).unwrap().kind, Kind::TakeDown);
        bytes[0] = 1;
        assert_eq!(Change::decode(&bytes).unwrap().kind, Kind::TakeDownTitle);
        c.kind = Kind::LiftTitle;
        let mut bytes = c.encode();
        assert_eq!(Change::decode(&bytes).unwrap(), c);
        bytes[0] = 1;
        assert!(Change::decode(&bytes).is_err(), "kind 5 is not version 1's");
    }

    #[test]
    fn other_bytes_under_the_same_rev_and_tid_are_another_message() {
        let a = change();
        let mut b = change();
        b.value.push(b'!');
        assert_ne!(message_id("html", &a), message_id("html", &b));
        assert_eq!(message_id("html", &a), message_id("html", &a.clone()));
    }

    #[test]
    fn subjects_and_partitions_are_stable() {
        assert_eq!(parse_subject(&subject("html", 17)), Some(("html", 17)));
        assert_eq!(parse_subject("wink.HTML.1"), None);
        assert_eq!(parse_subject("other.html.1"), None);
        // FNV-1a is fixed: these values must never change (they place every key).
        assert_eq!(partition_of("en.wikipedia.org", "Main_Page", 64), 26);
        assert_eq!(partition_of("", "", 64), partition_of("", "", 64));
        let id = message_id("html", &change());
        assert!(
            id.starts_with("html|") && id.is_ascii() && id.len() < 128,
            "{id}"
        );
    }

    proptest! {
        /// Any bytes decode into a change or an error, never a panic.
        #[test]
        fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Change::decode(&bytes);
        }
    }
}
