//! The archive tier through the store: revisions leaving the hot tier stay readable, from the
//! archive after a run; listings show them `archived`; take-down reaches the archive; a rerun
//! adds nothing; stores without an archive keep the hot-tier semantics.

use std::sync::Arc;

use wink::clock::ManualClock;
use wink::maintenance;
use wink::store::policy::ArchivePolicy;
use wink::store::Put;
use wink::store::Which;
use wink::store::{Config, Page, Policy, Renders, Revisions, State, Store, StoreOptions};

const D: &str = "en.wikipedia.org";
const HTML: &str = "text/html";

fn store(dir: &std::path::Path, clock: &ManualClock, archive: Option<ArchivePolicy>) -> Store {
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    let policy = Policy {
        revisions: Revisions::Recent { ttl: 100 },
        renders: Renders::Latest {
            count: 1,
            grace: 10,
        },
        historical_ttl: 50,
    };
    Store::init(
        dir,
        &Config {
            policy,
            archive,
            ..Config::default()
        },
        &opts,
    )
    .unwrap();
    Store::open(dir, &opts).unwrap()
}

fn page(rev: u64, render: u32) -> Vec<u8> {
    format!(
        "<html><body>revision {rev} render {render} {}</body></html>",
        "common text ".repeat(200)
    )
    .into_bytes()
}

#[test]
fn revisions_leaving_the_hot_tier_are_archived_and_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = store(dir.path(), &clock, Some(ArchivePolicy::Newest));
    let mut tids = Vec::new();
    for rev in 1..=20u64 {
        for render in 0..2 {
            clock.advance(5);
            tids.push(
                s.put(&Put::new(D, "Page", rev, HTML, &page(rev, render)))
                    .unwrap(),
            );
        }
    }
    clock.advance(1000); // every revision but the current one has left its recent window
                         // Before archiving, the candidates (newest render of each revision) are still readable.
    assert_eq!(
        s.get(D, "Page", Which::Rev(3)).unwrap().unwrap().value,
        page(3, 1)
    );
    assert!(
        s.get(D, "Page", Which::Render(3, tids[4]))
            .unwrap()
            .is_none(),
        "a non-candidate render expired"
    );
    let report = maintenance::archive_due(&mut s, |_, _| {}).unwrap();
    assert_eq!(report.revisions, 19);
    for rev in 1..20u64 {
        let got = s.get(D, "Page", Which::Rev(rev)).unwrap().unwrap();
        assert_eq!(
            (got.value, got.state),
            (page(rev, 1), State::Archived),
            "rev {rev}"
        );
    }
    let latest = s.get(D, "Page", Which::Latest).unwrap().unwrap();
    assert_eq!((latest.rev, latest.state), (20, State::Current));
    let listed = s.list(D, "Page", Page::default()).unwrap();
    assert_eq!(
        listed.iter().filter(|l| l.state == State::Archived).count(),
        19
    );
    assert!(listed.windows(2).all(|w| w[0].rev >= w[1].rev));
    // A rerun finds nothing to do; stats count what the archive holds.
    assert_eq!(
        maintenance::archive_due(&mut s, |_, _| {})
            .unwrap()
            .revisions,
        0
    );
    let st = s.stat().unwrap().archive.unwrap();
    assert_eq!(st.revisions, 19);
    assert_eq!(
        st.raw_bytes,
        (1..20u64).map(|r| page(r, 1).len() as u64).sum::<u64>()
    );
    assert!(st.stored_bytes > 0);
    // Take-down reaches the archive and persists.
    s.take_down(D, "Page", Some(7)).unwrap();
    assert!(s.get(D, "Page", Which::Rev(7)).unwrap().is_none());
    drop(s);
    let s = Store::open(
        dir.path(),
        &StoreOptions {
            clock: Arc::new(clock.clone()),
            ..StoreOptions::read_only()
        },
    )
    .unwrap();
    assert!(s.get(D, "Page", Which::Rev(7)).unwrap().is_none());
    assert_eq!(
        s.get(D, "Page", Which::Rev(8)).unwrap().unwrap().value,
        page(8, 1)
    );
}

#[test]
fn first_policy_keeps_the_first_render_and_no_archive_keeps_hot_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = store(dir.path(), &clock, Some(ArchivePolicy::First));
    for rev in 1..=3u64 {
        for render in 0..3 {
            clock.advance(5);
            s.put(&Put::new(D, "T", rev, HTML, &page(rev, render)))
                .unwrap();
        }
    }
    clock.advance(1000);
    maintenance::archive_due(&mut s, |_, _| {}).unwrap();
    assert_eq!(
        s.get(D, "T", Which::Rev(1)).unwrap().unwrap().value,
        page(1, 0)
    );
    let plain = tempfile::tempdir().unwrap();
    let mut p = store(plain.path(), &clock, None);
    p.put(&Put::new(D, "T", 1, HTML, b"one")).unwrap();
    clock.advance(5);
    p.put(&Put::new(D, "T", 2, HTML, b"two")).unwrap();
    clock.advance(100);
    assert!(
        p.get(D, "T", Which::Rev(1)).unwrap().is_none(),
        "without an archive, expired is gone"
    );
    assert!(maintenance::archive_due(&mut p, |_, _| {}).is_err());
}

#[test]
fn archiving_a_candidate_never_brings_back_a_render_past_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut s = store(dir.path(), &clock, Some(ArchivePolicy::Newest));
    // Revision 1 rendered twice, revision 2 soon after: no put comes once render 0's grace
    // has passed, so no put culls it; its record still lists it when revision 1 is archived.
    let old = s.put(&Put::new(D, "Page", 1, HTML, &page(1, 0))).unwrap();
    clock.advance(5);
    let newest = s.put(&Put::new(D, "Page", 1, HTML, &page(1, 1))).unwrap();
    clock.advance(5);
    s.put(&Put::new(D, "Page", 2, HTML, &page(2, 0))).unwrap();
    clock.advance(1000);
    assert!(s.get(D, "Page", Which::Render(1, old)).unwrap().is_none());

    let report = maintenance::archive_due(&mut s, |_, _| {}).unwrap();
    assert_eq!(report.revisions, 1);
    // With the newest render archived, the older one is not the newest of what is left in
    // the hot tier: it stays past its deadline, unreadable, and is never archived.
    assert!(s.get(D, "Page", Which::Render(1, old)).unwrap().is_none());
    let listed: Vec<_> = s
        .list(D, "Page", Page::default())
        .unwrap()
        .into_iter()
        .map(|l| (l.rev, l.tid, l.state))
        .collect();
    assert_eq!(
        listed,
        [
            (2, listed[0].1, State::Current),
            (1, newest, State::Archived)
        ]
    );
    assert_eq!(
        maintenance::archive_due(&mut s, |_, _| {})
            .unwrap()
            .revisions,
        0
    );
    assert!(s.get(D, "Page", Which::Render(1, old)).unwrap().is_none());
}

/// A store whose archive was written in format 1 (by an older wink: written here through the
/// archive directly, for titles that only the archive holds) reads on; `rewrite_archive` (what
/// `wink archive --rewrite` runs) converts it to format 2 while a read-only handle reads every
/// revision over and over, each byte for byte, and a handle opened after reads the v2 archive.
#[test]
fn a_v1_archive_converts_to_v2_while_reads_go_on() {
    use wink::archive::{Archive, ArchiveOptions, Item};
    use wink::filesys::OpenOptions;

    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000);
    drop(store(dir.path(), &clock, Some(ArchivePolicy::Newest)));
    let titles = ["Old one", "Old two"];
    let revs: Vec<Vec<u8>> = wink_harness::synth::histories(9, 1, 30, 30)
        .map(|r| r.html)
        .collect();
    {
        let open = OpenOptions {
            clock: Arc::new(clock.clone()),
            ..OpenOptions::writer()
        };
        let v1 = ArchiveOptions {
            format: 1,
            block_bytes: 64 << 10,
            ..ArchiveOptions::default()
        };
        let vfs: Arc<dyn wink::vfs::Vfs> = Arc::new(wink::vfs::RealFs);
        let mut a = Archive::open_in(vfs, &dir.path().join("archive"), &open, v1).unwrap();
        for title in titles {
            let key = format!("{D}/{title}");
            for (run, chunk) in revs.chunks(10).enumerate() {
                let items: Vec<Item> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, v)| Item {
                        rev: (run * 10 + i + 1) as u64,
                        tid: [7; 16],
                        content_type: HTML,
                        labels: &wink::store::Labels::NONE,
                        value: v,
                    })
                    .collect();
                a.add(key.as_bytes(), &items).unwrap();
                a.commit().unwrap();
            }
        }
    }
    let opts = |writable: bool| StoreOptions {
        clock: Arc::new(clock.clone()),
        ..if writable {
            StoreOptions::writer()
        } else {
            StoreOptions::read_only()
        }
    };
    // The archive was filled beside the store, so no title record says it holds these titles:
    // reads would take that for a lost record. The index rebuild gives each archived title one.
    let rebuilt = maintenance::rebuild_index(dir.path(), &opts(true)).unwrap();
    assert_eq!(rebuilt.archive_only.len(), titles.len());
    let mut writer = Store::open(dir.path(), &opts(true)).unwrap();
    let key = format!("{D}/{}", titles[0]);
    assert!(writer
        .archive()
        .unwrap()
        .map(key.as_bytes())
        .unwrap()
        .is_some());
    let reader = Store::open(dir.path(), &opts(false)).unwrap();
    let read_all = |s: &Store| {
        for title in titles {
            for (i, want) in revs.iter().enumerate() {
                let got = s.get(D, title, Which::Rev(i as u64 + 1)).unwrap().unwrap();
                assert_eq!(got.state, State::Archived);
                assert!(got.value == *want, "{title} rev {}", i + 1);
            }
        }
    };
    read_all(&reader);
    let done = std::sync::atomic::AtomicBool::new(false);
    let passes = std::thread::scope(|s| {
        let reads = s.spawn(|| {
            let mut passes = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || passes < 2 {
                read_all(&reader);
                passes += 1;
            }
            passes
        });
        let report = maintenance::rewrite_archive(&mut writer).unwrap();
        assert_eq!((report.titles, report.revisions), (2, 60));
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        reads.join().unwrap()
    });
    assert!(passes >= 2);
    let archive = writer.archive().unwrap();
    assert!(archive.map(key.as_bytes()).unwrap().is_none());
    assert!(archive.map_v2(key.as_bytes()).unwrap().is_some());
    read_all(&writer);
    drop(writer);
    read_all(&Store::open(dir.path(), &opts(false)).unwrap());
    let report = wink::store::check::check_store(dir.path());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
