//! The dump walk: every title's readable renders in both tiers, exactly what `list` and the reads
//! return, in steps of any size, on a writer's handle and a read-only one.

use std::collections::BTreeMap;
use std::sync::Arc;

use wink::clock::ManualClock;
use wink::maintenance;
use wink::store::policy::ArchivePolicy;
use wink::store::Put;
use wink::store::Which;
use wink::store::{
    Config, Page, Policy, Renders, Revisions, State, Store, StoreOptions, TitleCursor,
};

const HTML: &str = "text/html";

fn policy() -> Policy {
    Policy {
        revisions: Revisions::Recent { ttl: 100 },
        renders: Renders::Latest {
            count: 1,
            grace: 10,
        },
        historical_ttl: 50,
    }
}

fn page(title: &str, rev: u64, render: u32) -> Vec<u8> {
    format!(
        "<p>{title} {rev} {render}</p>{}",
        "x".repeat(rev as usize * 37)
    )
    .into_bytes()
}

/// A store with 12 titles in two domains: old revisions archived, a take-down, a historical
/// render, expired renders.
fn filled(dir: &std::path::Path, clock: &ManualClock) -> Store {
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        policy: policy(),
        archive: Some(ArchivePolicy::Newest),
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts).unwrap();
    let mut s = Store::open(dir, &opts).unwrap();
    for t in 0..12 {
        let (domain, title) = (["a.org", "b.org"][t % 2], format!("T/{t}"));
        for rev in 1..=5u64 {
            for render in 0..2 {
                clock.advance(3);
                s.put(&Put::new(
                    domain,
                    &title,
                    rev,
                    HTML,
                    &page(&title, rev, render),
                ))
                .unwrap();
            }
        }
    }
    clock.advance(500);
    maintenance::archive_due(&mut s, |_, _| {}).unwrap();
    for t in 0..12 {
        let (domain, title) = (["a.org", "b.org"][t % 2], format!("T/{t}"));
        s.put(&Put::new(domain, &title, 6, HTML, &page(&title, 6, 0)))
            .unwrap();
    }
    s.put(&Put {
        historical: true,
        ..Put::new("a.org", "T/0", 2, HTML, b"regenerated")
    })
    .unwrap();
    s.take_down("b.org", "T/1", Some(3)).unwrap();
    s
}

/// Every (domain, title) → its renders as (rev, tid, state, value), through the dump walk.
type Dumped = BTreeMap<(String, String), Vec<(u64, uuid::Uuid, State, Vec<u8>)>>;

fn dump(s: &Store, step: usize) -> Dumped {
    let mut out = Dumped::new();
    let mut cursor = TitleCursor::new();
    let mut reader = s.dump_reader().unwrap();
    while !cursor.is_done() {
        for t in s.dump_step(&mut cursor, step).unwrap() {
            let renders = t
                .renders
                .iter()
                .map(|r| {
                    let value = reader.read(&t, r).unwrap();
                    assert_eq!(value.len() as u64, r.size);
                    (r.rev, r.tid, r.state, value)
                })
                .collect();
            let key = (t.domain.clone(), t.title.clone());
            assert!(out.insert(key, renders).is_none(), "a title dumped twice");
        }
    }
    reader.finish().unwrap();
    out
}

#[test]
fn a_dump_is_every_listed_render_with_what_reads_return() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let s = filled(dir.path(), &clock);
    let dumped = dump(&s, 5);
    assert_eq!(dumped.len(), 12);
    let mut archived = 0;
    for ((domain, title), renders) in &dumped {
        let mut listed = s.list(domain, title, Page::default()).unwrap();
        listed.reverse(); // the dump is oldest first
        let keys: Vec<_> = listed.iter().map(|l| (l.rev, l.tid, l.state)).collect();
        let dumped_keys: Vec<_> = renders.iter().map(|r| (r.0, r.1, r.2)).collect();
        assert_eq!(dumped_keys, keys, "{domain}/{title}");
        for (rev, tid, state, value) in renders {
            let got = s
                .get(domain, title, Which::Render(*rev, *tid))
                .unwrap()
                .unwrap();
            assert_eq!((&got.value, got.state), (value, *state));
            archived += usize::from(*state == State::Archived);
        }
    }
    assert!(
        archived >= 12 * 4 - 1,
        "old revisions come from the archive: {archived}"
    );
    let t1 = &dumped[&("b.org".to_string(), "T/1".to_string())];
    assert!(
        t1.iter().all(|r| r.0 != 3),
        "a taken-down revision is not dumped"
    );
    let t0 = &dumped[&("a.org".to_string(), "T/0".to_string())];
    assert!(t0.iter().any(|r| r.2 == State::Historical));

    // The same from a read-only handle, in steps of one title and of all of them.
    let ro = Store::open(
        dir.path(),
        &StoreOptions {
            clock: Arc::new(clock.clone()),
            ..StoreOptions::read_only()
        },
    )
    .unwrap();
    assert_eq!(dump(&ro, 1), dumped);
    assert_eq!(dump(&ro, 1000), dumped);
    assert_eq!(
        ro.dump_title("a.org", "T/0")
            .unwrap()
            .unwrap()
            .renders
            .len(),
        t0.len()
    );
    assert!(ro.dump_title("a.org", "missing").unwrap().is_none());
}

#[test]
fn a_damaged_value_is_an_error_naming_its_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    Store::init(dir.path(), &Config::default(), &opts).unwrap();
    let mut s = Store::open(dir.path(), &opts).unwrap();
    s.put(&Put::new("d", "t", 1, HTML, b"precious bytes"))
        .unwrap();
    drop(s);
    let data = dir.path().join("c000001.data");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes
        .windows(14)
        .position(|w| w == b"precious bytes")
        .unwrap();
    bytes[at] ^= 1;
    std::fs::write(&data, bytes).unwrap();
    let s = Store::open(dir.path(), &opts).unwrap();
    let t = s.dump_title("d", "t").unwrap().unwrap();
    let err = s
        .dump_reader()
        .unwrap()
        .read(&t, &t.renders[0])
        .unwrap_err();
    let text = err.to_string();
    assert!(err.is_corruption(), "{text}");
    assert!(
        text.contains("c000001.data") && text.contains(&at.to_string()),
        "{text}"
    );
}
