//! A full export leaves the page cache as it found it: of the bytes it read from a store several
//! times larger than its indexes, at most 1% stay resident (mincore), the values a reader had
//! cached before it stay cached, and the WARC file it wrote is not left in the cache either.

mod common;

use std::path::Path;
use std::sync::Arc;

use wink::clock::ManualClock;
use wink::maintenance;
use wink::storage::{residency, PageMap};
use wink::store::policy::ArchivePolicy;
use wink::store::Which;
use wink::store::{Config, Store, StoreOptions};
use wink::warc::{export_warc, Compression, ExportOptions};

const NOW: i64 = 1_700_000_000;

/// (resident bytes, file bytes) of the store's value files: containers and the archive.
fn value_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.ends_with(".data") && (name.starts_with('c') || name.starts_with("archive"))
        })
        .collect();
    out.sort();
    out
}

fn resident(files: &[std::path::PathBuf]) -> u64 {
    files.iter().map(|f| residency(f).unwrap().0).sum()
}

#[test]
fn a_full_export_leaves_at_most_one_percent_of_what_it_read_in_the_page_cache() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path().join("store");
    let clock = ManualClock::new(NOW);
    let opts = StoreOptions {
        clock: Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        policy: common::recent_policy(100),
        archive: Some(ArchivePolicy::Newest),
        ..Config::default()
    };
    Store::init(&dir, &cfg, &opts).unwrap();
    let mut st = Store::open(&dir, &opts).unwrap();
    // 64 MiB of values in 1,024 titles; the first revision of each is archived.
    {
        let mut batch = st.batch();
        for t in 0..1024u64 {
            let title = format!("Title_{t}");
            let value = common::lettered(format!("<p>{title} 1</p>"), t, 16 << 10);
            batch
                .put(&wink::store::Put {
                    domain: "d.org",
                    title: &title,
                    rev: 1,
                    tid: None,
                    content_type: "text/html",
                    labels: &wink::store::Labels::NONE,
                    value: &value,
                    historical: false,
                })
                .unwrap();
        }
        batch.commit().unwrap();
    }
    clock.advance(10);
    {
        let mut batch = st.batch();
        for t in 0..1024u64 {
            let title = format!("Title_{t}");
            let value = common::lettered(format!("<p>{title} 2</p>"), t + 7, 48 << 10);
            batch
                .put(&wink::store::Put {
                    domain: "d.org",
                    title: &title,
                    rev: 2,
                    tid: None,
                    content_type: "text/html",
                    labels: &wink::store::Labels::NONE,
                    value: &value,
                    historical: false,
                })
                .unwrap();
        }
        batch.commit().unwrap();
    }
    clock.advance(1000);
    assert_eq!(
        maintenance::archive_due(&mut st, |_, _| {})
            .unwrap()
            .revisions,
        1024
    );
    drop(st);

    let files = value_files(&dir);
    let data: u64 = files.iter().map(|f| residency(f).unwrap().1).sum();
    let indexes: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !files.contains(p))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        data > 5 * indexes,
        "a store several times larger than its indexes: {data} / {indexes}"
    );
    for f in &files {
        PageMap::default().drop_others(f).unwrap();
    }
    if resident(&files) > data / 100 {
        common::require::skip(
            "the page-cache measurement of an export",
            "this file system keeps pages that were dropped (tmpfs?)",
        );
        return;
    }
    // A reader's working set: the latest render of 50 titles, read the usual way.
    let st = Store::open(
        &dir,
        &StoreOptions {
            clock: Arc::new(ManualClock::new(NOW + 2000)),
            ..StoreOptions::read_only()
        },
    )
    .unwrap();
    for t in 0..50 {
        st.get("d.org", &format!("Title_{t}"), Which::Latest)
            .unwrap()
            .unwrap();
    }
    let working = resident(&files);
    assert!(
        working >= 50 * (48 << 10),
        "the working set is cached: {working}"
    );

    let out = root.path().join("dump.warc");
    let mut eo = ExportOptions::new(&out).unwrap();
    eo.compression = Compression::None;
    let report = export_warc(&st, &eo, |_| {}).unwrap();
    assert_eq!(report.resources + report.revisits, 2048);
    let read = report.value_bytes;
    let after = resident(&files);
    let left = after.saturating_sub(working);
    eprintln!(
        "export read {read} bytes; resident before {working}, after {after}: {:.3}% left",
        left as f64 * 100.0 / read as f64
    );
    assert!(
        left * 100 <= read,
        "{left} of {read} bytes read left resident"
    );
    assert!(
        after >= working * 9 / 10,
        "the working set stayed: {after} of {working}"
    );
    let (written_resident, written) = residency(&out).unwrap();
    assert!(
        written_resident * 100 <= written,
        "the WARC written is not left cached: {written_resident} of {written}"
    );
}
