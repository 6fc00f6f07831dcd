//! A change as a stream message: Wink's own framing (docs/CLUSTER.md § Messages), the subject
//! and the message id. Every message read is untrusted bytes: each length is checked against
//! what is left, and a bad message is an error naming what is wrong, never a panic.

use bytes::Bytes;
use sha1::{Digest, Sha1};
use uuid::Uuid;

use wink_engine::store::Labels;
use wink_service::{Preconditions, Tags};

/// The framing's version. Version 1 wrote a whole title's take-down or lift as kind 2 or 3 with
/// `rev` `u64::MAX`, which could not be told from a take-down of revision `u64::MAX`; version 2
/// gives them kinds of their own (4, 5). Version 3 is version 2 with a put's conditions after
/// the content type; it is written only for a put that has some, so nodes that read 2 read
/// every other message. Version 4 is version 3 with a put's labels (content encoding and
/// language) before the conditions, whose flags byte may then be 0 (none); it is written only
/// for a put that has a label, so nodes that read 3 read every other message. All four are read.
const VERSION: u8 = 2;
const VERSION_CONDITIONAL: u8 = 3;
const VERSION_LABELS: u8 = 4;
/// The reserved domain of a node's own records in its stores; refused on every route.
pub const RESERVED_DOMAIN: &str = "wink.cluster";
/// `rev` of a take-down or lift of a whole title in version 1 (and, unused, in version 2).
const WHOLE_TITLE: u64 = u64::MAX;
/// The longest label read: longer than the store takes (the front checks labels before a write
/// is published), so a longer one is damage.
const LABEL_MAX: usize = 1024;

/// What a message asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A render to store.
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
    /// What it asks.
    pub kind: Kind,
    /// Seconds since the epoch, by the clock of the node that received the request.
    pub arrival: i64,
    /// The revision (0 for a whole title's take-down or lift).
    pub rev: u64,
    /// The render's tid (a put), or the change's own id.
    pub tid: Uuid,
    /// The title's domain.
    pub domain: String,
    /// The title.
    pub title: String,
    /// A put's content type.
    pub content_type: String,
    /// A put's content encoding and language.
    pub labels: Labels,
    /// A put's bytes: the request body's own buffer on the node that received it, so that the
    /// body is copied once between the socket and the message ([`Change::encode`]).
    pub value: Bytes,
    /// A put's conditions (`If-Match`, `If-None-Match`), checked by every replica when it
    /// applies the message.
    pub conditions: Preconditions,
    /// Whether the conditions are of the render the put names (its client gave the tid), or
    /// of the revision's newest.
    pub names_render: bool,
}

/// The partition of a key: the CRC-32 (IEEE, as zlib's and HAProxy's `crc32` converter) of
/// `domain "/" title`, modulo `partitions`. Fixed by its definition, so every node and every
/// version agree, and a router computes it from the path itself (docs/CLUSTER.md § Routing).
pub fn partition_of(domain: &str, title: &str, partitions: u32) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(domain.as_bytes());
    h.update(b"/");
    h.update(title.as_bytes());
    h.finalize() % partitions.max(1)
}

/// The subject a change of `bucket` in `partition` is published to.
pub fn subject(bucket: &str, partition: u32) -> String {
    format!("wink.{bucket}.{partition}")
}

/// The bucket and partition of a subject, when it is one of ours.
pub fn parse_subject(subject: &str) -> Option<(&str, u32)> {
    let rest = subject.strip_prefix("wink.")?;
    let (bucket, part) = rest.rsplit_once('.')?;
    if !wink_service::spec::valid_bucket_name(bucket) {
        return None;
    }
    Some((bucket, part.parse().ok()?))
}

/// The message id (JetStream's deduplication):
/// `bucket|sha1(domain 0 title)|rev|tid|kind|crc32(content type 0 value)`, the content type
/// followed by `0 encoding 0 language` when the put has a label. The key as a digest keeps the id
/// short and ASCII whatever the title holds. The value's checksum is in it because a put of the
/// same (rev, tid) with other bytes (or labels) is a new change (a single node stores the new
/// bytes), not a retry to drop.
pub fn message_id(bucket: &str, c: &Change) -> String {
    let mut d = Sha1::new();
    d.update(c.domain.as_bytes());
    d.update([0]);
    d.update(c.title.as_bytes());
    let digest: String = d.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut crc = crc32fast::Hasher::new();
    crc.update(c.content_type.as_bytes());
    if !c.labels.is_none() {
        for l in [&c.labels.encoding, &c.labels.language] {
            crc.update(&[0]);
            crc.update(l.as_deref().unwrap_or("").as_bytes());
        }
    }
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
    /// A take-down of `rev`, or of the whole title: a change with no arrival, tid or value
    /// (what a copy or a repair carries of a take-down another owner holds).
    pub fn take_down(domain: String, title: String, rev: Option<u64>) -> Change {
        Change {
            kind: if rev.is_some() {
                Kind::TakeDown
            } else {
                Kind::TakeDownTitle
            },
            arrival: 0,
            rev: rev.unwrap_or(0),
            tid: Uuid::nil(),
            domain,
            title,
            content_type: String::new(),
            labels: Labels::NONE,
            value: Bytes::new(),
            conditions: Default::default(),
            names_render: false,
        }
    }

    /// The store's put of this change (of kind [`Kind::Put`]): the render with the tid the
    /// receiving node gave it, so that every replica stores the same one.
    pub fn as_put(&self) -> wink_engine::store::Put<'_> {
        wink_engine::store::Put {
            domain: &self.domain,
            title: &self.title,
            rev: self.rev,
            tid: Some(self.tid),
            content_type: &self.content_type,
            labels: &self.labels,
            value: &self.value,
            historical: false,
        }
    }

    /// The framing's bytes besides the value.
    pub fn overhead(&self) -> usize {
        2 + 8
            + 8
            + 16
            + 6
            + self.domain.len()
            + self.title.len()
            + self.content_type.len()
            + self.labels_bytes()
            + self.conditions_bytes()
    }

    /// The bytes of the labels (version 4 only).
    fn labels_bytes(&self) -> usize {
        if self.labels.is_none() {
            return 0;
        }
        let len = |s: &Option<String>| 2 + s.as_ref().map_or(0, String::len);
        len(&self.labels.encoding) + len(&self.labels.language)
    }

    /// The bytes of the conditions block (version 3, and 4 where it may be one byte of 0).
    fn conditions_bytes(&self) -> usize {
        if self.conditions.is_empty() {
            return usize::from(!self.labels.is_none());
        }
        let list = |t: &Option<Tags>| match t {
            Some(Tags::List(l)) => 2 + 24 * l.len().min(u16::MAX as usize),
            _ => 0,
        };
        1 + list(&self.conditions.if_match) + list(&self.conditions.if_none_match)
    }

    /// The message's body (framing version 2, 3 for a put with conditions, 4 for a put with
    /// labels).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.overhead() + self.value.len());
        let conditional = !self.conditions.is_empty();
        let labelled = !self.labels.is_none();
        out.push(match (labelled, conditional) {
            (true, _) => VERSION_LABELS,
            (false, true) => VERSION_CONDITIONAL,
            (false, false) => VERSION,
        });
        out.push(self.kind.byte());
        out.extend_from_slice(&self.arrival.to_be_bytes());
        out.extend_from_slice(&self.rev.to_be_bytes());
        out.extend_from_slice(self.tid.as_bytes());
        for s in [&self.domain, &self.title, &self.content_type] {
            // Checked lengths: a domain ≤ 255, a title ≤ 1024, a content type ≤ 255 bytes.
            out.extend_from_slice(&(s.len().min(u16::MAX as usize) as u16).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        if labelled {
            for l in [&self.labels.encoding, &self.labels.language] {
                // Checked lengths: at most 128 bytes; absent is empty.
                let l = l.as_deref().unwrap_or("");
                out.extend_from_slice(&(l.len() as u16).to_be_bytes());
                out.extend_from_slice(l.as_bytes());
            }
        }
        if conditional || labelled {
            self.encode_conditions(&mut out);
        }
        out.extend_from_slice(&self.value);
        out
    }

    /// Flags (bit 0: of the named render; 1: If-Match; 2: its `*`; 3: If-None-Match; 4: its
    /// `*`), then each list that is not `*`, If-Match's first: a u16 count and `(rev, tid)`s.
    fn encode_conditions(&self, out: &mut Vec<u8>) {
        let c = &self.conditions;
        let mut flags = u8::from(self.names_render);
        for (tags, present, any) in [(&c.if_match, 2, 4), (&c.if_none_match, 8, 16)] {
            match tags {
                Some(Tags::Any) => flags |= present | any,
                Some(Tags::List(_)) => flags |= present,
                None => {}
            }
        }
        out.push(flags);
        for tags in [&c.if_match, &c.if_none_match] {
            if let Some(Tags::List(list)) = tags {
                let list = &list[..list.len().min(u16::MAX as usize)];
                out.extend_from_slice(&(list.len() as u16).to_be_bytes());
                for (rev, tid) in list {
                    out.extend_from_slice(&rev.to_be_bytes());
                    out.extend_from_slice(tid.as_bytes());
                }
            }
        }
    }

    /// Decodes a message's body.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Change, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.take(1)?[0];
        if !(1..=VERSION_LABELS).contains(&version) {
            return Err(format!(
                "message version {version}, this node reads 1 to {VERSION_LABELS}"
            ));
        }
        let mut kind = match (version, r.take(1)?[0]) {
            (_, 1) => Kind::Put,
            (_, 2) => Kind::TakeDown,
            (_, 3) => Kind::Lift,
            (2..=4, 4) => Kind::TakeDownTitle,
            (2..=4, 5) => Kind::LiftTitle,
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
        let labels = if version == VERSION_LABELS {
            let mut label = |what| -> std::result::Result<Option<String>, String> {
                let at = r.at;
                let s = r.string(what)?;
                if s.len() > LABEL_MAX {
                    return Err(format!("message's {what} at offset {at} is too long"));
                }
                Ok((!s.is_empty()).then_some(s))
            };
            Labels {
                encoding: label("content encoding")?,
                language: label("content language")?,
            }
        } else {
            Labels::NONE
        };
        let (conditions, names_render) = match version {
            VERSION_CONDITIONAL => r.conditions(false)?,
            VERSION_LABELS => r.conditions(true)?,
            _ => (Preconditions::default(), false),
        };
        let value = Bytes::copy_from_slice(&bytes[r.at..]);
        Ok(Change {
            kind,
            arrival,
            rev,
            tid,
            domain,
            title,
            content_type,
            labels,
            value,
            conditions,
            names_render,
        })
    }
}

/// The fuzz entry point of the decoder (the cargo-fuzz target `cluster_message` in `fuzz/`,
/// replayed by `tests/fuzz_replay.rs`): any bytes decode or are refused with a message, never a
/// panic or an allocation larger than the input; a message that decodes encodes to one that
/// decodes the same.
pub fn fuzz(data: &[u8]) {
    if let Ok(c) = Change::decode(data) {
        let again = Change::decode(&c.encode()).expect("an encoded change decodes");
        assert_eq!(again, c, "a decoded change survives its encoding");
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

    /// A version-3 conditions block (see [`Change::encode`]); `may_be_none` (version 4): its
    /// flags may be 0, no conditions.
    fn conditions(
        &mut self,
        may_be_none: bool,
    ) -> std::result::Result<(Preconditions, bool), String> {
        let at = self.at;
        let flags = self.take(1)?[0];
        if may_be_none && flags == 0 {
            return Ok((Preconditions::default(), false));
        }
        if flags & !0x1f != 0 || flags & 0x0a == 0 {
            return Err(format!(
                "message's conditions at offset {at}: flags {flags:#04x}"
            ));
        }
        let mut tags = |present: u8, any: u8| -> std::result::Result<Option<Tags>, String> {
            if flags & present == 0 {
                return Ok(None);
            }
            if flags & any != 0 {
                return Ok(Some(Tags::Any));
            }
            let n = u16::from_be_bytes(self.array()?) as usize;
            let mut list = Vec::with_capacity(n.min(self.bytes.len() / 24));
            for _ in 0..n {
                let rev = u64::from_be_bytes(self.array()?);
                list.push((rev, Uuid::from_bytes(self.array()?)));
            }
            Ok(Some(Tags::List(list)))
        };
        let if_match = tags(2, 4)?;
        let if_none_match = tags(8, 16)?;
        let conditions = Preconditions {
            if_match,
            if_none_match,
        };
        Ok((conditions, flags & 1 != 0))
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
            tid: wink_engine::store::key::tid_at(1_700_000_000, 7, [1; 6]),
            domain: "en.wikipedia.org".into(),
            title: "AC/DC ü".into(),
            content_type: "text/html".into(),
            labels: Labels::NONE,
            value: Bytes::from_static(b"<p>hi</p>"),
            conditions: Preconditions::default(),
            names_render: false,
        }
    }

    /// `c` encoded in framing `version`: its length is its overhead and value, it decodes back
    /// to itself (returned), and every cut of its head is refused.
    fn round_trips(c: &Change, version: u8) -> Change {
        let bytes = c.encode();
        assert_eq!(bytes[0], version);
        assert_eq!(bytes.len(), c.overhead() + c.value.len());
        let back = Change::decode(&bytes).unwrap();
        assert_eq!(&back, c);
        for cut in 0..c.overhead() {
            assert!(Change::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        back
    }

    #[test]
    fn a_change_round_trips() {
        round_trips(&change(), VERSION);
    }

    /// Writes the seeds of the fuzz target `cluster_message`:
    /// `cargo test --lib message -- --ignored write_fuzz_seeds`.
    #[test]
    #[ignore]
    fn write_fuzz_seeds() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/cluster_message");
        std::fs::create_dir_all(&dir).unwrap();
        let tid = wink_engine::store::key::tid_at(1_700_000_000, 9, [2; 6]);
        let conditional = Change {
            conditions: Preconditions {
                if_match: Some(Tags::List(vec![(42, tid)])),
                if_none_match: Some(Tags::Any),
            },
            names_render: true,
            ..change()
        };
        let take_down = Change {
            kind: Kind::TakeDownTitle,
            rev: 0,
            content_type: String::new(),
            value: Bytes::new(),
            ..change()
        };
        let labelled = Change {
            labels: gzip_de(),
            ..conditional.clone()
        };
        for (name, c) in [
            ("seed-put", change()),
            ("seed-conditional", conditional),
            ("seed-take-down-title", take_down),
            ("seed-labels", labelled),
        ] {
            std::fs::write(dir.join(name), c.encode()).unwrap();
        }
    }

    fn gzip_de() -> Labels {
        Labels {
            encoding: Some("gzip".into()),
            language: Some("de".into()),
        }
    }

    #[test]
    fn a_put_with_labels_round_trips_as_version_4() {
        let tid = wink_engine::store::key::tid_at(1_700_000_000, 9, [2; 6]);
        let only_language = Labels {
            encoding: None,
            language: Some("en-GB, fr".into()),
        };
        for (labels, conditions) in [
            (gzip_de(), Preconditions::default()),
            (only_language, Preconditions::default()),
            (
                gzip_de(),
                Preconditions {
                    if_match: Some(Tags::List(vec![(42, tid)])),
                    if_none_match: Some(Tags::Any),
                },
            ),
        ] {
            let c = Change {
                labels,
                conditions,
                ..change()
            };
            let back = round_trips(&c, VERSION_LABELS);
            assert_eq!(back.as_put().labels, &c.labels);
        }
        // Version 4 is version 3 (or 2) with the labels inserted: what an older node reads of
        // every message without labels is unchanged.
        let plain = change().encode();
        let mut v4 = plain[..plain.len() - change().value.len()].to_vec();
        v4[0] = VERSION_LABELS;
        v4.extend_from_slice(&[0, 0, 0, 0, 0]);
        v4.extend_from_slice(&change().value);
        assert_eq!(Change::decode(&v4).unwrap(), change());
        // A label longer than any the store takes is refused.
        let mut long = v4.clone();
        let at = plain.len() - change().value.len();
        long.splice(at..at + 2, [0x08, 0x00].into_iter().chain([b'x'; 2048]));
        assert!(Change::decode(&long).unwrap_err().contains("too long"));
    }

    #[test]
    fn other_labels_under_the_same_rev_and_tid_are_another_message() {
        let a = change();
        let b = Change {
            labels: gzip_de(),
            ..change()
        };
        assert_ne!(message_id("html", &a), message_id("html", &b));
    }

    #[test]
    fn a_conditional_put_round_trips_as_version_3() {
        let tid = wink_engine::store::key::tid_at(1_700_000_000, 9, [2; 6]);
        for (if_match, if_none_match, names_render) in [
            (Some(Tags::Any), None, false),
            (None, Some(Tags::Any), true),
            (
                Some(Tags::List(vec![(42, tid), (41, tid)])),
                Some(Tags::List(vec![])),
                false,
            ),
        ] {
            let c = Change {
                conditions: Preconditions {
                    if_match,
                    if_none_match,
                },
                names_render,
                ..change()
            };
            round_trips(&c, VERSION_CONDITIONAL);
        }
        assert_eq!(change().encode()[0], VERSION, "no conditions: version 2");
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
        b.value = [&b.value[..], b"!"].concat().into();
        assert_ne!(message_id("html", &a), message_id("html", &b));
        assert_eq!(message_id("html", &a), message_id("html", &a.clone()));
    }

    #[test]
    fn subjects_and_partitions_are_stable() {
        assert_eq!(parse_subject(&subject("html", 17)), Some(("html", 17)));
        assert_eq!(parse_subject("wink.HTML.1"), None);
        assert_eq!(parse_subject("other.html.1"), None);
        // The CRC is fixed: these values must never change (they place every key). Python's
        // `zlib.crc32(b"en.wikipedia.org/Main_Page") % 64` is 15 too.
        assert_eq!(partition_of("en.wikipedia.org", "Main_Page", 64), 15);
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
            fuzz(&bytes);
        }

        /// A conditional put with bytes changed: decoded (and round-tripped) or refused.
        #[test]
        fn changed_conditional_puts_decode_or_fail(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            cut in any::<usize>(),
        ) {
            let tid = wink_engine::store::key::tid_at(1_700_000_000, 9, [2; 6]);
            let mut bytes = Change {
                conditions: Preconditions {
                    if_match: Some(Tags::List(vec![(42, tid), (7, tid)])),
                    if_none_match: Some(Tags::List(vec![(1, tid)])),
                },
                labels: if cut % 2 == 0 { gzip_de() } else { Labels::NONE },
                ..change()
            }
            .encode();
            for (at, b) in edits {
                let at = at % bytes.len();
                bytes[at] = b;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            fuzz(&bytes);
        }
    }
}
