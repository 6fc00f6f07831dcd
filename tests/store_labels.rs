//! A render's labels (content encoding and language) through the store's public interface: kept
//! with the render as put and returned by reads and listings, through an archive run (read back
//! from the archive tier), a compaction that moves live values and repoints their records, a
//! dump, a copy and a reopen; labels a header could not carry are refused and change nothing.

mod common;

use std::sync::Arc;

use wink::clock::ManualClock;
use wink::maintenance;
use wink::store::policy::ArchivePolicy;
use wink::store::Which;
use wink::store::{
    Config, CopyCursor, CopyItem, Labels, Page, Put, State, Store, StoreOptions, TitleCursor,
};
use wink::CompactOptions;

const D: &str = "de.wikipedia.org";
const HTML: &str = "text/html; charset=utf-8";

fn labels(rev: u64) -> Labels {
    match rev % 3 {
        0 => Labels::NONE,
        1 => Labels {
            encoding: Some("gzip".into()),
            language: Some("de".into()),
        },
        _ => Labels {
            encoding: None,
            language: Some("de-CH, fr".into()),
        },
    }
}

fn value(title: &str, rev: u64) -> Vec<u8> {
    let seed = rev.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ title.len() as u64;
    common::lettered(format!("<p>{title} {rev}</p>"), seed, 200 << 10)
}

fn put(s: &mut Store, title: &str, rev: u64) {
    let v = value(title, rev);
    s.put(&Put {
        domain: D,
        title,
        rev,
        tid: None,
        content_type: HTML,
        labels: &labels(rev),
        value: &v,
        historical: false,
    })
    .unwrap();
}

/// Every readable render of `title` reads back with its labels, by get and by listing.
fn assert_labelled(s: &Store, title: &str, revs: &[u64], archived: &[u64]) {
    for &rev in revs {
        let got = s.get(D, title, Which::Rev(rev)).unwrap().unwrap();
        assert_eq!(got.labels, labels(rev), "{title} {rev}");
        assert_eq!(
            (got.content_type.as_str(), got.value),
            (HTML, value(title, rev))
        );
        assert_eq!(
            got.state == State::Archived,
            archived.contains(&rev),
            "{rev}"
        );
    }
    let listed = s.list(D, title, Page::default()).unwrap();
    assert_eq!(listed.len(), revs.len());
    for l in listed {
        assert_eq!(l.labels, labels(l.rev), "{title} {} listed", l.rev);
    }
}

#[test]
fn labels_travel_with_their_render_through_archive_compaction_dump_and_copy() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let opts = StoreOptions {
        clock: clock.clone(),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        policy: common::recent_policy(100),
        archive: Some(ArchivePolicy::Newest),
        container_bytes: 1 << 20,
        ..Config::default()
    };
    Store::init(dir.path(), &cfg, &opts).unwrap();
    let mut s = Store::open(dir.path(), &opts).unwrap();
    // One live value of "Kept" among "Page"'s revisions, which leave the hot tier: its
    // container is mostly dead after the archive run, and compaction moves it.
    put(&mut s, "Page", 1);
    put(&mut s, "Kept", 4);
    for rev in 2..=12 {
        clock.advance(5);
        put(&mut s, "Page", rev);
    }
    let all: Vec<u64> = (1..=12).collect();
    assert_labelled(&s, "Page", &all, &[]);
    assert_labelled(&s, "Kept", &[4], &[]);

    clock.advance(1000);
    assert_eq!(
        maintenance::archive_due(&mut s, |_, _| {})
            .unwrap()
            .revisions,
        11
    );
    assert_labelled(&s, "Page", &all, &all[..11]);

    let report = maintenance::compact(&mut s, &CompactOptions::default(), |_, _| {}).unwrap();
    assert!(
        report
            .containers
            .iter()
            .any(|c| c.action.as_str() == "rewrite"),
        "{:#?}",
        report.containers
    );
    assert_labelled(&s, "Page", &all, &all[..11]);
    assert_labelled(&s, "Kept", &[4], &[]);

    // A dump and a copy carry them.
    let mut cursor = TitleCursor::new();
    let mut dumped = 0;
    while !cursor.is_done() {
        for t in s.dump_step(&mut cursor, 10).unwrap() {
            for r in &t.renders {
                assert_eq!(r.labels, labels(r.rev), "{} {} dumped", t.title, r.rev);
                dumped += 1;
            }
        }
    }
    assert_eq!(dumped, 13);
    let page = s
        .copy_page(&CopyCursor::new(), u64::MAX, |_, _| true)
        .unwrap();
    let mut copied = 0;
    for item in page.items {
        if let CopyItem::Render { rev, labels: l, .. } = item {
            assert_eq!(l, labels(rev));
            copied += 1;
        }
    }
    assert_eq!(copied, 13);

    // Refused labels change nothing.
    for bad in [
        Labels {
            encoding: Some("gzip, br".into()),
            language: None,
        },
        Labels {
            encoding: None,
            language: Some("de\r\nX-Evil: 1".into()),
        },
    ] {
        let e = s
            .put(&Put {
                domain: D,
                title: "Kept",
                rev: 5,
                tid: None,
                content_type: HTML,
                labels: &bad,
                value: b"<p/>",
                historical: false,
            })
            .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
    }
    assert!(s.get(D, "Kept", Which::Rev(5)).unwrap().is_none());

    drop(s);
    let r = Store::open(dir.path(), &StoreOptions::read_only()).unwrap();
    assert_labelled(&r, "Page", &all, &all[..11]);
    assert_labelled(&r, "Kept", &[4], &[]);
}
