//! The render store's paged and point-in-time reads through its public API: as-of reads, a
//! title's renders after a cursor, a domain's titles after a cursor (through the archive too),
//! and the take-down check.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use wink::clock::ManualClock;
use wink::store::key::tid_at;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Policy, Renders, Revisions, Store, StoreOptions};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";

fn open(dir: &Path, clock: &ManualClock, cfg: Config) -> Store {
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    Store::init(dir, &cfg, &opts).unwrap();
    Store::open(dir, &opts).unwrap()
}

fn keep_all() -> Config {
    Config {
        policy: Policy {
            revisions: Revisions::All,
            renders: Renders::All,
            ..Policy::default()
        },
        ..Config::default()
    }
}

#[test]
fn as_of_is_the_newest_render_whose_tid_is_not_later() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(2_000_000);
    let mut s = open(dir.path(), &clock, keep_all());
    // Out of order: revision 11 (time 300) arrives before revision 10 (times 100 and 200).
    s.put(&Put {
        tid: Some(tid_at(300, 0, [1; 6])),
        ..Put::new(D, "T", 11, HTML, b"r11")
    })
    .unwrap();
    s.put(&Put {
        tid: Some(tid_at(200, 0, [1; 6])),
        ..Put::new(D, "T", 10, HTML, b"r10b")
    })
    .unwrap();
    s.put(&Put {
        tid: Some(tid_at(100, 0, [1; 6])),
        ..Put::new(D, "T", 10, HTML, b"r10a")
    })
    .unwrap();
    let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    let value = |s: &Store, secs| {
        s.get(D, "T", Which::AsOf(at(secs)))
            .unwrap()
            .map(|g| g.value)
    };
    assert_eq!(value(&s, 99), None, "nothing existed yet");
    assert_eq!(
        value(&s, 100).as_deref(),
        Some(&b"r10a"[..]),
        "exactly at the tid's time"
    );
    assert_eq!(value(&s, 250).as_deref(), Some(&b"r10b"[..]));
    assert_eq!(value(&s, 300).as_deref(), Some(&b"r11"[..]));
    assert_eq!(value(&s, 1_000_000).as_deref(), Some(&b"r11"[..]));
    // A taken-down revision is not an answer, at any time.
    s.take_down(D, "T", Some(10)).unwrap();
    assert_eq!(value(&s, 250), None);
    assert!(s.is_taken_down(D, "T", Some(10)).unwrap());
    assert!(!s.is_taken_down(D, "T", Some(11)).unwrap());
    assert!(!s.is_taken_down(D, "T", None).unwrap());
    assert!(!s.is_taken_down(D, "Other", Some(10)).unwrap());
    s.take_down(D, "T", None).unwrap();
    assert!(s.is_taken_down(D, "T", None).unwrap() && s.is_taken_down(D, "T", Some(3)).unwrap());
}

#[test]
fn as_of_does_not_find_what_retention_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let cfg = Config {
        policy: Policy {
            revisions: Revisions::Recent { ttl: 100 },
            ..Policy::default()
        },
        ..Config::default()
    };
    let mut s = open(dir.path(), &clock, cfg);
    s.put(&Put::new(D, "T", 1, HTML, b"one")).unwrap();
    clock.set(2_000);
    s.put(&Put::new(D, "T", 2, HTML, b"two")).unwrap();
    let at_1500 = UNIX_EPOCH + Duration::from_secs(1_500);
    assert_eq!(
        s.get(D, "T", Which::AsOf(at_1500)).unwrap().unwrap().value,
        b"one"
    );
    clock.set(2_100);
    assert_eq!(
        s.get(D, "T", Which::AsOf(at_1500)).unwrap(),
        None,
        "revision 1 has expired"
    );
}

#[test]
fn render_pages_visit_each_render_once_while_renders_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(2_000_000);
    let mut s = open(dir.path(), &clock, keep_all());
    let mut batch = s.batch();
    for i in 0..300u64 {
        let tid = tid_at(1_000 + i as i64, 0, [2; 6]);
        batch
            .put(&wink::store::Put {
                domain: D,
                title: "T",
                rev: i / 3,
                tid: Some(tid),
                content_type: HTML,
                labels: &wink::store::Labels::NONE,
                value: format!("{i}").as_bytes(),
                historical: false,
            })
            .unwrap();
    }
    batch.commit().unwrap();
    let mut seen = Vec::new();
    let mut next = None;
    loop {
        let page = s.list_after(D, "T", next, 7).unwrap();
        assert!(page.items.len() <= 7);
        seen.extend(page.items.iter().map(|l| (l.rev, l.tid)));
        // A newer render arriving mid-walk does not shift the pages after the cursor.
        if seen.len() == 70 {
            s.put(&Put::new(D, "T", 500, HTML, b"newest")).unwrap();
        }
        match page.next {
            Some(c) => next = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 300);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 300, "each once");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.0.cmp(&a.0).then(wink::store::key::cmp_tid(b.1, a.1)));
    assert_eq!(seen, sorted, "newest first");
    let last = s.list_after(D, "T", None, 1000).unwrap();
    assert_eq!((last.items.len(), last.next), (301, None));
    assert!(s
        .list_after(D, "Nothing", None, 10)
        .unwrap()
        .items
        .is_empty());
}

#[test]
fn title_pages_visit_every_title_of_the_domain_at_least_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(2_000_000);
    let mut s = open(dir.path(), &clock, keep_all());
    let mut batch = s.batch();
    for i in 0..500 {
        for domain in [D, "de.wikipedia.org"] {
            batch
                .put(&wink::store::Put {
                    domain,
                    title: &format!("Title {i} / ü"),
                    rev: 1,
                    tid: None,
                    content_type: HTML,
                    labels: &wink::store::Labels::NONE,
                    value: b"x",
                    historical: false,
                })
                .unwrap();
        }
    }
    batch.commit().unwrap();
    s.take_down(D, "Title 7 / ü", None).unwrap();
    let mut seen = Vec::new();
    let mut next = None;
    let mut pages = 0;
    loop {
        let page = s.titles_after(D, next, 40).unwrap();
        pages += 1;
        seen.extend(page.titles.iter().cloned());
        if pages == 3 {
            // Titles rewritten behind and ahead of the cursor, and a new one.
            s.put(&Put::new(D, "Title 0 / ü", 2, HTML, b"y")).unwrap();
            s.put(&Put::new(D, "Title 499 / ü", 2, HTML, b"y")).unwrap();
            s.put(&Put::new(D, "New", 1, HTML, b"y")).unwrap();
        }
        match page.next {
            Some(c) => next = Some(c.to_string().parse().unwrap()),
            None => break,
        }
    }
    let set: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(
        set.len(),
        500,
        "499 old titles (one taken down) and the new one"
    );
    assert!(set.contains(&"New".to_string()) && !set.contains(&"Title 7 / ü".to_string()));
    assert!(
        seen.len() <= 502,
        "only the titles rewritten behind the cursor come twice"
    );
    assert!(s
        .titles_after("nowhere.org", None, 10)
        .unwrap()
        .titles
        .is_empty());
    assert!(s.titles_after("a/b", None, 10).is_err());
}
