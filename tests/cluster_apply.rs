//! The cluster's apply step on a real store, without NATS: precedence by (rev, tid) whatever the
//! order messages arrive in, the applied-sequence record committed with the renders, a replay
//! after a crash that applies nothing twice and misses nothing, arrival times from the message.
#![cfg(feature = "cluster")]

use std::collections::BTreeMap;
use std::path::Path;

use wink::cluster::apply::{apply_batch, read_applied, Message};
use wink::cluster::message::{Change, Kind, RESERVED_DOMAIN};
use wink::store::Which;
use wink::store::{key, Config, Labels, Page, Store, StoreOptions};

const D: &str = "en.wikipedia.org";

fn store(dir: &Path) -> Store {
    let opts = StoreOptions {
        clock: std::sync::Arc::new(wink::clock::StampedClock),
        ..StoreOptions::writer()
    };
    if !dir.join("store").exists() {
        Store::init(dir, &Config::default(), &opts).unwrap();
    }
    Store::open(dir, &opts).unwrap()
}

fn put(seq: u64, partition: u32, title: &str, rev: u64, tick: u16, body: &str) -> Message {
    Message {
        seq,
        partition,
        change: Change {
            kind: Kind::Put,
            arrival: 1_700_000_000 + seq as i64,
            rev,
            tid: key::tid_at(1_700_000_000, tick, [3; 6]),
            domain: D.into(),
            title: title.into(),
            content_type: "text/html".into(),
            labels: Default::default(),
            value: body.as_bytes().to_vec().into(),
            conditions: Default::default(),
            names_render: false,
        },
    }
}

/// A title's latest (rev, tid, bytes), and every render listed.
type Readable = (Option<(u64, String, Vec<u8>)>, Vec<String>);

/// Everything readable, by title.
fn contents(s: &Store, titles: &[&str]) -> BTreeMap<String, Readable> {
    titles
        .iter()
        .map(|t| {
            let latest = s
                .get(D, t, Which::Latest)
                .unwrap()
                .map(|g| (g.rev, g.tid.to_string(), g.value));
            let listed = s
                .list(D, t, Page::default())
                .unwrap()
                .into_iter()
                .map(|l| format!("{}/{} {}", l.rev, l.tid, l.size))
                .collect();
            (t.to_string(), (latest, listed))
        })
        .collect()
}

fn messages() -> Vec<Message> {
    vec![
        put(1, 0, "A", 5, 1, "a5"),
        put(2, 1, "B", 1, 2, "b1"),
        put(3, 0, "A", 7, 3, "a7"),
        put(4, 0, "A", 6, 4, "a6 arrives after 7"),
        put(5, 1, "B", 1, 9, "b1 newer tid"),
        put(6, 1, "B", 1, 5, "b1 older tid, later"),
        put(7, 0, "C", 2, 6, "c2"),
    ]
}

#[test]
fn apply_order_does_not_matter() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut forward = store(d1.path());
    let mut backward = store(d2.path());
    let msgs = messages();
    // One replica gets them in stream order, one batch each; the other in reverse, in one
    // batch (its record then says 7 after the first message, so the sequences are renumbered:
    // what is tested is the store's precedence, not the record).
    for m in &msgs {
        apply_batch(&mut forward, std::slice::from_ref(m), None, None).unwrap();
    }
    let reversed: Vec<Message> = msgs
        .iter()
        .rev()
        .enumerate()
        .map(|(i, m)| Message {
            seq: i as u64 + 1,
            ..m.clone()
        })
        .collect();
    let report = apply_batch(&mut backward, &reversed, None, None).unwrap();
    assert_eq!(report.applied, msgs.len());
    let titles = ["A", "B", "C"];
    let (a, b) = (contents(&forward, &titles), contents(&backward, &titles));
    assert_eq!(a, b);
    let latest_a = a["A"].0.as_ref().unwrap();
    assert_eq!((latest_a.0, latest_a.2.as_slice()), (7, b"a7".as_slice()));
    let latest_b = a["B"].0.as_ref().unwrap();
    assert_eq!(latest_b.2, b"b1 newer tid");
    // The default retention keeps a pushed-out render for a day after the put that pushed it
    // out, by that put's arrival: the messages' stamps are from 2023, so only the latest is
    // left (by the applying process's clock, all three would still be listed).
    assert_eq!(a["A"].1.len(), 1, "{:?}", a["A"].1);
}

#[test]
fn replay_after_crash_applies_once() {
    let dir = tempfile::tempdir().unwrap();
    let msgs = messages();
    {
        let mut s = store(dir.path());
        apply_batch(&mut s, &msgs[..3], Some((3, &[0, 1])), None).unwrap();
        assert_eq!(read_applied(&s).unwrap(), BTreeMap::from([(0, 3), (1, 3)]));
        // The next batch is applied but the process dies before its commit: put it in without
        // committing, then drop the batch and the handle (the next open recovers the last
        // commit).
        let mut batch = s.batch();
        for m in &msgs[3..5] {
            batch.put(&m.change.as_put()).unwrap();
        }
    }
    let mut s = store(dir.path());
    assert_eq!(read_applied(&s).unwrap(), BTreeMap::from([(0, 3), (1, 3)]));
    // The replay starts from the lowest record and sees every message again.
    let report = apply_batch(&mut s, &msgs, Some((7, &[0, 1])), None).unwrap();
    assert_eq!((report.applied, report.skipped), (4, 3));
    assert_eq!(read_applied(&s).unwrap(), BTreeMap::from([(0, 7), (1, 7)]));
    // A second replay of everything applies nothing.
    let again = apply_batch(&mut s, &msgs, Some((7, &[0, 1])), None).unwrap();
    assert_eq!((again.applied, again.skipped), (0, 7));

    let clean = tempfile::tempdir().unwrap();
    let mut once = store(clean.path());
    apply_batch(&mut once, &msgs, Some((7, &[0, 1])), None).unwrap();
    let titles = ["A", "B", "C"];
    assert_eq!(contents(&s, &titles), contents(&once, &titles));
    // The record lives in the reserved domain, never among the clients' titles.
    assert!(s
        .get(RESERVED_DOMAIN, "applied", Which::Latest)
        .unwrap()
        .is_some());
    assert!(s
        .titles_after(D, None, 100)
        .unwrap()
        .titles
        .iter()
        .all(|t| t != "applied"));
}

#[test]
fn arrival_times_come_from_the_message() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = store(d1.path());
    let mut b = store(d2.path());
    let msgs = messages();
    apply_batch(&mut a, &msgs, None, None).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    apply_batch(&mut b, &msgs, None, None).unwrap();
    // Same messages, applied a second apart: the same stamps, so the same renders readable.
    let dump = |s: &Store| {
        let mut out = Vec::new();
        let mut cursor = wink::store::TitleCursor::new();
        while !cursor.is_done() {
            for t in s.dump_step(&mut cursor, 100).unwrap() {
                for r in t.renders {
                    let state = r.state.as_str();
                    out.push(format!(
                        "{}/{} {}/{} {} {state}",
                        t.domain, t.title, r.rev, r.tid, r.size
                    ));
                }
            }
        }
        out.retain(|l| !l.starts_with(RESERVED_DOMAIN));
        out.sort();
        out
    };
    assert_eq!(dump(&a), dump(&b));
    // And re-applying a message (a put of the same (rev, tid), same bytes) changes nothing.
    let before = dump(&a);
    let again: Vec<Message> = msgs
        .iter()
        .map(|m| Message {
            seq: m.seq + 100,
            ..m.clone()
        })
        .collect();
    apply_batch(&mut a, &again, None, None).unwrap();
    assert_eq!(dump(&a), before);

    // The same messages stamped now: within the day of grace, every render of A is listed.
    let c = tempfile::tempdir().unwrap();
    let mut recent = store(c.path());
    let now = wink::clock::SystemClock;
    let fresh: Vec<Message> = msgs
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.change.arrival = wink::clock::Clock::now(&now);
            m
        })
        .collect();
    apply_batch(&mut recent, &fresh, None, None).unwrap();
    assert_eq!(recent.list(D, "A", Page::default()).unwrap().len(), 3);
    assert_eq!(a.list(D, "A", Page::default()).unwrap().len(), 1);
}

/// A put's labels travel in its message (framing version 4, through its bytes as the stream
/// carries them) and every owner that applies it stores them; a message without labels leaves
/// none.
#[test]
fn every_owner_stores_the_labels_a_message_carries() {
    let labelled = |seq, title: &str| {
        let mut m = put(seq, 0, title, 3, seq as u16, "<p>gz</p>");
        m.change.labels = Labels {
            encoding: Some("gzip".into()),
            language: Some("de".into()),
        };
        // As the stream carries it.
        m.change = Change::decode(&m.change.encode()).unwrap();
        m
    };
    let msgs = vec![labelled(1, "L"), put(2, 0, "P", 1, 2, "plain")];
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(dir.path());
        apply_batch(&mut s, &msgs, None, None).unwrap();
        let got = s.get(D, "L", Which::Latest).unwrap().unwrap();
        assert_eq!(got.labels, msgs[0].change.labels);
        assert_eq!(got.labels.encoding.as_deref(), Some("gzip"));
        assert_eq!(
            s.get(D, "P", Which::Latest).unwrap().unwrap().labels,
            Labels::NONE
        );
    }
}
