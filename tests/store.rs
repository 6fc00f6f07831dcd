//! The render store through its public API: precedence, retention deadlines, take-down,
//! historical puts, integrity, reopen, batches, bad input and the writer lock.

use std::path::Path;
use std::sync::Arc;

use wink::clock::{Clock, ManualClock};
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Page, Policy, Renders, Revisions, State, Store, StoreOptions, TidMaker};
use wink::Error;

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html; charset=utf-8";

fn open(dir: &Path, clock: &ManualClock, policy: Policy) -> Store {
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    if !dir.join("store").exists() {
        Store::init(
            dir,
            &Config {
                policy,
                ..Config::default()
            },
            &opts,
        )
        .unwrap();
    }
    Store::open(dir, &opts).unwrap()
}

/// A read-only handle on the store in `dir`, on `clock`.
fn open_reader(dir: &Path, clock: &ManualClock) -> Store {
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::read_only()
    };
    Store::open(dir, &opts).unwrap()
}

#[test]
fn precedence_by_revision_then_tid_not_write_order() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(
        dir.path(),
        &clock,
        Policy {
            renders: Renders::All,
            revisions: Revisions::All,
            ..Policy::default()
        },
    );
    let tids = TidMaker::new();
    let (old, new) = (tids.make(100), tids.make(200));
    s.put(&Put {
        tid: Some(new),
        ..Put::new(D, "Page", 7, HTML, b"rev 7 new render")
    })
    .unwrap();
    s.put(&Put::new(D, "Page", 9, HTML, b"rev 9")).unwrap();
    s.put(&Put {
        tid: Some(old),
        ..Put::new(D, "Page", 7, HTML, b"rev 7 old render")
    })
    .unwrap();
    s.put(&Put::new(D, "Page", 8, HTML, b"rev 8, arrived last"))
        .unwrap();
    let latest = s.get(D, "Page", Which::Latest).unwrap().unwrap();
    assert_eq!(
        (latest.rev, latest.value.as_slice(), latest.state),
        (9, &b"rev 9"[..], State::Current)
    );
    assert_eq!(
        s.get(D, "Page", Which::Rev(7)).unwrap().unwrap().value,
        b"rev 7 new render"
    );
    assert_eq!(
        s.get(D, "Page", Which::Render(7, old))
            .unwrap()
            .unwrap()
            .value,
        b"rev 7 old render"
    );
    let listed: Vec<(u64, State)> = s
        .list(D, "Page", Page::default())
        .unwrap()
        .iter()
        .map(|l| (l.rev, l.state))
        .collect();
    assert_eq!(
        listed,
        [
            (9, State::Current),
            (8, State::Recent),
            (7, State::Recent),
            (7, State::Recent)
        ]
    );
    let page: Vec<u64> = s
        .list(
            D,
            "Page",
            Page {
                offset: 1,
                limit: 2,
            },
        )
        .unwrap()
        .iter()
        .map(|l| l.rev)
        .collect();
    assert_eq!(page, [8, 7]);
    // Writing the same (revision, tid) again replaces the value.
    s.put(&Put {
        tid: Some(old),
        ..Put::new(D, "Page", 7, HTML, b"rewritten")
    })
    .unwrap();
    assert_eq!(
        s.get(D, "Page", Which::Render(7, old))
            .unwrap()
            .unwrap()
            .value,
        b"rewritten"
    );
    assert!(s.get(D, "Other", Which::Latest).unwrap().is_none());
}

#[test]
fn retention_deadlines_are_exact_whether_or_not_culling_ran() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let policy = Policy {
        revisions: Revisions::Recent { ttl: 100 },
        renders: Renders::Latest {
            count: 1,
            grace: 10,
        },
        historical_ttl: 50,
    };
    let mut s = open(dir.path(), &clock, policy);
    let r1a = s.put(&Put::new(D, "T", 1, HTML, b"1a")).unwrap();
    clock.advance(5);
    s.put(&Put::new(D, "T", 1, HTML, b"1b")).unwrap(); // pushes 1a out at t+5
    clock.advance(9);
    assert!(
        s.get(D, "T", Which::Render(1, r1a)).unwrap().is_some(),
        "within its grace"
    );
    clock.advance(1);
    assert!(
        s.get(D, "T", Which::Render(1, r1a)).unwrap().is_none(),
        "grace over: 10 s after it was pushed out"
    );
    s.put(&Put::new(D, "T", 2, HTML, b"2")).unwrap(); // supersedes revision 1 now
    let superseded_at = clock.now();
    clock.set(superseded_at + 99);
    assert_eq!(s.get(D, "T", Which::Rev(1)).unwrap().unwrap().value, b"1b");
    clock.set(superseded_at + 100);
    assert!(
        s.get(D, "T", Which::Rev(1)).unwrap().is_none(),
        "recent window over"
    );
    clock.advance(1_000_000);
    assert_eq!(
        s.get(D, "T", Which::Latest).unwrap().unwrap().value,
        b"2",
        "the current revision never expires"
    );
    // Historical: refused above the current revision, readable for its TTL.
    assert!(matches!(
        s.put(&Put {
            historical: true,
            ..Put::new(D, "T", 3, HTML, b"h3")
        }),
        Err(Error::Invalid(_))
    ));
    s.put(&Put {
        historical: true,
        ..Put::new(D, "T", 1, HTML, b"h1")
    })
    .unwrap();
    let got = s.get(D, "T", Which::Rev(1)).unwrap().unwrap();
    assert_eq!(
        (got.value.as_slice(), got.state),
        (&b"h1"[..], State::Historical)
    );
    clock.advance(50);
    assert!(s.get(D, "T", Which::Rev(1)).unwrap().is_none());
}

#[test]
fn take_down_persists_and_refuses_puts_until_lifted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(dir.path(), &clock, Policy::default());
    s.put(&Put::new(D, "T", 1, HTML, b"one")).unwrap();
    clock.advance(1);
    s.put(&Put::new(D, "T", 2, HTML, b"two")).unwrap();
    assert_eq!(s.take_down(D, "T", Some(2)).unwrap(), 1);
    assert_eq!(
        s.get(D, "T", Which::Latest).unwrap().unwrap().value,
        b"one",
        "the newest revision still retained"
    );
    let err = s.put(&Put::new(D, "T", 2, HTML, b"again")).unwrap_err();
    assert!(err.to_string().contains("taken down"), "{err}");
    drop(s);
    let mut s = open(dir.path(), &clock, Policy::default());
    assert!(s.get(D, "T", Which::Rev(2)).unwrap().is_none());
    assert!(s.lift(D, "T", Some(2)).unwrap());
    s.put(&Put::new(D, "T", 2, HTML, b"two again")).unwrap();
    s.take_down(D, "T", None).unwrap();
    assert!(s.get(D, "T", Which::Latest).unwrap().is_none());
    assert!(s.put(&Put::new(D, "T", 5, HTML, b"x")).is_err());
    assert!(s.list(D, "T", Page::default()).unwrap().is_empty());
}

#[test]
fn damaged_values_are_reported_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(dir.path(), &clock, Policy::default());
    s.put(&Put::new(D, "T", 1, HTML, b"precious content"))
        .unwrap();
    drop(s);
    let data = dir.path().join("c000001.data");
    let bytes = std::fs::read(&data).unwrap();
    let at = bytes.windows(9).position(|w| w == b"precious ").unwrap();
    let mut damaged = bytes.clone();
    damaged[at] ^= 0x20;
    std::fs::write(&data, damaged).unwrap();
    let s = Store::open(dir.path(), &StoreOptions::read_only()).unwrap();
    let err = s.get(D, "T", Which::Latest).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(err.exit_code(), 3);
    let text = err.to_string();
    assert!(
        text.contains("c000001.data") && text.contains(&at.to_string()),
        "{text}"
    );
}

#[test]
fn batches_reopen_and_one_writer() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(dir.path(), &clock, Policy::default());
    let mut batch = s.batch();
    for i in 0..200u64 {
        let title = format!("Title {}", i % 20);
        batch
            .put(&wink::store::Put {
                domain: D,
                title: &title,
                rev: i,
                tid: None,
                content_type: HTML,
                labels: &wink::store::Labels::NONE,
                value: format!("value {i}").as_bytes(),
                historical: false,
            })
            .unwrap();
    }
    assert_eq!(batch.commit().unwrap(), 200);
    assert!(matches!(
        Store::open(dir.path(), &StoreOptions::writer()),
        Err(Error::InUse { .. })
    ));
    let reader = open_reader(dir.path(), &clock);
    assert_eq!(
        reader
            .get(D, "Title 3", Which::Latest)
            .unwrap()
            .unwrap()
            .value,
        b"value 183"
    );
    let st = reader.stat().unwrap();
    assert_eq!(st.titles, 20);
    drop(s);
    let s = open(dir.path(), &clock, Policy::default());
    assert_eq!(
        s.get(D, "Title 19", Which::Latest).unwrap().unwrap().value,
        b"value 199"
    );
}

/// A batch that rewrites many titles holds kilobytes of in-place writes (the old records'
/// deleted flags, both indexes' cells), which its commit applies to the container and to the
/// records on two threads: every render reads back, from the writer, a reader and a reopen.
#[test]
fn a_large_batch_of_rewrites_commits_whole() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(dir.path(), &clock, Policy::default());
    for round in 0..2u64 {
        let mut batch = s.batch();
        for i in 0..300u64 {
            let (title, value) = (format!("Title {i}"), format!("value {i} of {round}"));
            batch
                .put(&Put::new(D, &title, round, HTML, value.as_bytes()))
                .unwrap();
        }
        assert_eq!(batch.commit().unwrap(), 300);
    }
    let reader = open_reader(dir.path(), &clock);
    let want = |i: u64| format!("value {i} of 1").into_bytes();
    for i in 0..300u64 {
        let title = format!("Title {i}");
        assert_eq!(
            s.get(D, &title, Which::Latest).unwrap().unwrap().value,
            want(i)
        );
        let got = reader.get(D, &title, Which::Latest).unwrap().unwrap();
        assert_eq!((got.rev, got.value), (1, want(i)));
    }
    drop((s, reader));
    let s = open(dir.path(), &clock, Policy::default());
    for i in (0..300u64).step_by(7) {
        let title = format!("Title {i}");
        assert_eq!(
            s.get(D, &title, Which::Latest).unwrap().unwrap().value,
            want(i)
        );
    }
    assert_eq!(s.stat().unwrap().titles, 300);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(dir.path(), &clock, Policy::default());
    let before = std::fs::read(dir.path().join("meta.data")).unwrap();
    for (domain, title) in [("", "T"), ("a/b", "T"), (D, ""), (D, &"t".repeat(1025)[..])] {
        assert!(
            matches!(
                s.put(&Put::new(domain, title, 1, HTML, b"x")),
                Err(Error::Invalid(_))
            ),
            "{domain:?} {title:?}"
        );
    }
    let v4 = uuid::Uuid::from_u128(0x6ba7b810_9dad_41d1_80b4_00c04fd430c8);
    assert!(matches!(
        s.put(&Put {
            tid: Some(v4),
            ..Put::new(D, "T", 1, HTML, b"x")
        }),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        s.put(&Put::new(D, "T", 1, "", b"x")),
        Err(Error::Invalid(_))
    ));
    let big = vec![0u8; (64 << 20) + 1];
    assert!(matches!(
        s.put(&Put::new(D, "T", 1, HTML, &big)),
        Err(Error::Invalid(_))
    ));
    assert_eq!(std::fs::read(dir.path().join("meta.data")).unwrap(), before);
}

#[test]
fn containers_roll_over_at_their_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    Store::init(
        dir.path(),
        &Config {
            container_bytes: 1 << 20,
            ..Config::default()
        },
        &opts,
    )
    .unwrap();
    let mut s = Store::open(dir.path(), &opts).unwrap();
    let value = vec![7u8; 100 << 10];
    for i in 0..30u64 {
        s.put(&Put::new(D, &format!("T{i}"), 1, HTML, &value))
            .unwrap();
    }
    assert!(s.stat().unwrap().containers >= 3);
    // A sealed container gives back its preallocated room (16 MiB steps).
    let sealed = std::fs::metadata(dir.path().join("c000001.data"))
        .unwrap()
        .len();
    assert!(sealed < 2 << 20, "sealed container is {sealed} bytes");
    for i in 0..30u64 {
        assert_eq!(
            s.get(D, &format!("T{i}"), Which::Latest)
                .unwrap()
                .unwrap()
                .value,
            value
        );
    }
}

/// A clock reading outside 1970 .. the last second a v1 UUID carries is refused by a put, before
/// anything is written. `i64::MIN` is the title record's "no time": a render superseded at that
/// "time" was recorded as never superseded, and stayed readable forever (found by fuzzing the
/// title record: `fuzz/regressions/title_record`).
#[test]
fn a_put_refuses_a_clock_the_store_cannot_stamp() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = open(dir.path(), &clock, Policy::default());
    s.put(&Put::new(D, "T", 1, HTML, b"one")).unwrap();
    let commits = s.commits();
    for now in [-1, i64::MIN, wink::store::key::MAX_NOW + 1] {
        clock.set(now);
        let err = s.put(&Put::new(D, "T", 2, HTML, b"two")).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        assert!(err.to_string().contains("the clock reads"), "{err}");
    }
    assert_eq!(s.commits(), commits, "nothing was committed");
    clock.set(wink::store::key::MAX_NOW);
    s.put(&Put::new(D, "T", 2, HTML, b"two")).unwrap();
    assert_eq!(s.get(D, "T", Which::Latest).unwrap().unwrap().value, b"two");
}
