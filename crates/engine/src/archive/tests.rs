//! Tests of the archive (format 1) through its public interface and a simulated disk.
use super::*;
use crate::clock::ManualClock;
use crate::sim::SimDisk;

/// An archive whose new titles are v1 (these tests are of format 1's blocks).
fn open(disk: &SimDisk, opts: ArchiveOptions) -> Archive {
    open_sim(disk, ArchiveOptions { format: 1, ..opts })
}

/// The archive at `/a/archive` of a simulated disk, created when missing (both formats' tests).
pub(super) fn open_sim(disk: &SimDisk, opts: ArchiveOptions) -> Archive {
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1000));
    let base = Path::new("/a/archive");
    if !vfs.exists(&filesys::file_path(base, "data")) {
        Archive::create_in(vfs.clone(), base, clock.clone()).unwrap();
    }
    let open = filesys::OpenOptions {
        clock,
        drop_behind: None,
        ..filesys::OpenOptions::writer()
    };
    Archive::open_in(vfs, base, &open, opts).unwrap()
}

/// Damages one byte of the archive datafile of `open_sim`'s archive on `disk`, at `at`.
pub(super) fn flip_datafile_byte(disk: &SimDisk, at: u64) {
    let path = filesys::file_path(Path::new("/a/archive"), "data");
    let s = disk.open(&path, true).unwrap();
    let mut b = [0u8; 1];
    s.read_at(&mut b, at).unwrap();
    s.write_at(&[b[0] ^ 0x55], at).unwrap();
}

fn revisions(n: usize) -> Vec<Vec<u8>> {
    crate::synth::histories(3, 1, n, 30)
        .map(|r| r.html)
        .collect()
}

/// `values` as revisions `first`, `first + 1`, … of one title, all with render id `tid`.
pub(super) fn as_items(values: &[Vec<u8>], first: usize, tid: [u8; 16]) -> Vec<Item<'_>> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Item {
            rev: (first + i) as u64,
            tid,
            content_type: "text/html",
            labels: &crate::store::Labels::NONE,
            value: v,
        })
        .collect()
}

#[test]
fn incremental_runs_blocks_and_reads() {
    let disk = SimDisk::new();
    let opts = ArchiveOptions {
        block_bytes: 64 << 10,
        key_every: 3,
        ..ArchiveOptions::default()
    };
    let mut a = open(&disk, opts);
    let revs = revisions(60);
    for chunk in revs.chunks(7).enumerate() {
        let items = as_items(chunk.1, chunk.0 * 7, [1; 16]);
        a.add(b"wiki/Page", &items).unwrap();
        a.commit().unwrap();
    }
    let map = a.map(b"wiki/Page").unwrap().unwrap();
    assert!(map.blocks.len() >= 3, "{} blocks", map.blocks.len());
    assert!(map.blocks.iter().rev().skip(1).all(|b| b.sealed));
    assert!(
        map.blocks.iter().any(|b| b.frames.len() > 1),
        "incremental runs append frames"
    );
    drop(a);
    let a = open(&disk, opts);
    for e in a.entries(b"wiki/Page").unwrap() {
        a.clear_cache();
        assert_eq!(
            a.read(b"wiki/Page", &e).unwrap(),
            revs[e.rev as usize],
            "rev {}",
            e.rev
        );
    }
    let st = a.stats().unwrap();
    assert_eq!((st.titles, st.revisions), (1, 60));
    assert_eq!(
        st.raw_bytes,
        revs.iter().map(|r| r.len() as u64).sum::<u64>()
    );
    assert!(a.verify().is_empty());
}

#[test]
fn a_read_decompresses_at_most_a_block_and_the_key_block_it_references() {
    let disk = SimDisk::new();
    let opts = ArchiveOptions {
        block_bytes: 32 << 10,
        ..ArchiveOptions::default()
    };
    assert_eq!(opts.key_every, 2);
    let mut a = open(&disk, opts);
    let revs = revisions(80);
    let items = as_items(&revs, 0, [0; 16]);
    a.add(b"k", &items).unwrap();
    let map = a.map(b"k").unwrap().unwrap();
    assert!(map.blocks.len() >= 6, "{} blocks", map.blocks.len());
    let largest = map.blocks.iter().map(|b| b.raw_len()).max().unwrap();
    for e in a.entries(b"k").unwrap() {
        a.clear_cache();
        let before = a.decompressed_bytes();
        assert_eq!(a.read(b"k", &e).unwrap(), revs[e.rev as usize]);
        let cost = a.decompressed_bytes() - before;
        assert!(
            cost <= 2 * largest,
            "rev {} cost {cost} > two blocks ({largest} each)",
            e.rev
        );
    }
}

#[test]
fn a_rewritten_render_replaces_its_archived_bytes() {
    let disk = SimDisk::new();
    let mut a = open(&disk, ArchiveOptions::default());
    let old = Item {
        rev: 1,
        tid: [1; 16],
        content_type: "text/html",
        labels: &crate::store::Labels::NONE,
        value: b"first bytes",
    };
    let new = Item {
        rev: 1,
        tid: [1; 16],
        content_type: "text/html",
        labels: &crate::store::Labels::NONE,
        value: b"rewritten bytes",
    };
    a.add(b"k", &[old]).unwrap();
    assert_eq!(
        a.add(b"k", &[old]).unwrap(),
        0,
        "the same bytes again: nothing to do"
    );
    assert_eq!(a.add(b"k", &[new]).unwrap(), 1);
    let live = a.entries(b"k").unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(a.read(b"k", &live[0]).unwrap(), b"rewritten bytes");
    a.commit().unwrap();
    drop(a);
    let a = open(&disk, ArchiveOptions::default());
    let live = a.entries(b"k").unwrap();
    assert_eq!(
        (live.len(), a.read(b"k", &live[0]).unwrap()),
        (1, b"rewritten bytes".to_vec())
    );
}

#[test]
fn rerun_dedupe_and_take_down() {
    let disk = SimDisk::new();
    let mut a = open(&disk, ArchiveOptions::default());
    let revs = revisions(3);
    let items: Vec<Item> = revs
        .iter()
        .enumerate()
        .map(|(i, v)| Item {
            rev: i as u64,
            tid: [i as u8; 16],
            content_type: "text/html",
            labels: &crate::store::Labels::NONE,
            value: v,
        })
        .collect();
    assert_eq!(a.add(b"k", &items).unwrap(), 3);
    assert_eq!(a.add(b"k", &items).unwrap(), 0, "a rerun adds nothing");
    let copy = Item {
        rev: 9,
        tid: [9; 16],
        content_type: "text/html",
        labels: &crate::store::Labels::NONE,
        value: &revs[1],
    };
    assert_eq!(a.add(b"k", &[copy]).unwrap(), 1);
    let map = a.map(b"k").unwrap().unwrap();
    let e9 = map.entries.iter().find(|e| e.rev == 9).unwrap();
    let e1 = map.entries.iter().find(|e| e.rev == 1).unwrap();
    assert_eq!(
        (e9.block, e9.offset),
        (e1.block, e1.offset),
        "identical bytes stored once"
    );
    assert_eq!(a.take_down(b"k", Some(1)).unwrap(), 1);
    assert!(a.entries(b"k").unwrap().iter().all(|e| e.rev != 1));
    assert_eq!(a.read(b"k", e9).unwrap(), revs[1]);
}

#[test]
fn a_damaged_block_names_block_and_title_and_spares_others() {
    let disk = SimDisk::new();
    let mut a = open(&disk, ArchiveOptions::default());
    let revs = revisions(4);
    for key in [b"t/one".as_slice(), b"t/two"] {
        let items = as_items(&revs, 0, [0; 16]);
        a.add(key, &items).unwrap();
    }
    a.commit().unwrap();
    let name = block_name(b"t/one", 0);
    let stat = a.filesys().stat(&name).unwrap().unwrap();
    let entry = a.filesys().data().read(stat.inode).unwrap();
    let inode = crate::filesys::inode::Inode::decode(&entry.value, Path::new("x"), 0).unwrap();
    let data_ptr = inode.data[0].0;
    let layout = a.filesys().data().layout(data_ptr).unwrap();
    let at = layout.value_offset + layout.value_len / 2;
    flip_datafile_byte(&disk, at);
    a.clear_cache();
    let e = a.entries(b"t/one").unwrap().pop().unwrap();
    let err = a.read(b"t/one", &e).unwrap_err();
    let text = err.to_string();
    assert!(
        err.is_corruption() && text.contains("t/one") && text.contains("b/t/one#0"),
        "{text}"
    );
    for e in a.entries(b"t/two").unwrap() {
        assert_eq!(a.read(b"t/two", &e).unwrap(), revs[e.rev as usize]);
    }
    assert!(!a.verify().is_empty());
}

/// A render's labels travel into the archive in every format, through deltas, a reopen, a
/// rearchived render whose labels changed, and a rewrite into a new archive.
#[test]
fn labels_are_kept_in_every_format_and_through_a_rewrite() {
    use crate::store::Labels;
    let gzip = Labels {
        encoding: Some("gzip".into()),
        language: Some("de".into()),
    };
    let lang = Labels {
        encoding: None,
        language: Some("en-GB, fr".into()),
    };
    let revs = revisions(6);
    let label_of = |rev: u64| match rev % 3 {
        0 => &gzip,
        1 => &lang,
        _ => &Labels::NONE,
    };
    for format in [1u8, 2, 3] {
        let disk = SimDisk::new();
        let opts = ArchiveOptions {
            format,
            ..ArchiveOptions::default()
        };
        let mut a = open_sim(&disk, opts);
        for run in revs.chunks(3).enumerate() {
            let items: Vec<Item<'_>> = as_items(run.1, run.0 * 3, [4; 16])
                .into_iter()
                .map(|i| Item {
                    labels: label_of(i.rev),
                    ..i
                })
                .collect();
            a.add(b"d/T", &items).unwrap();
            a.commit().unwrap();
        }
        // The same bytes again with other labels: a new entry, the labels put last.
        let again = Item {
            labels: &gzip,
            ..as_items(&revs[1..2], 1, [4; 16])[0]
        };
        assert_eq!(a.add(b"d/T", &[again]).unwrap(), 1, "format {format}");
        a.commit().unwrap();
        drop(a);
        let a = open_sim(&disk, opts);
        let check = |a: &Archive, what: &str| {
            let entries = a.entries(b"d/T").unwrap();
            assert_eq!(entries.len(), 6, "format {format} {what}");
            for e in &entries {
                let want = if e.rev == 1 { &gzip } else { label_of(e.rev) };
                assert_eq!(&e.labels, want, "format {format} {what} rev {}", e.rev);
                assert_eq!(e.content_type, "text/html");
                assert_eq!(a.read(b"d/T", e).unwrap(), revs[e.rev as usize]);
            }
        };
        check(&a, "reopened");
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        let open = filesys::OpenOptions {
            clock: Arc::new(ManualClock::new(1000)),
            drop_behind: None,
            ..filesys::OpenOptions::writer()
        };
        a.rewrite_into(vfs.clone(), Path::new("/b/archive"), &open, |_, _| {})
            .unwrap();
        let b = Archive::open_in(vfs, Path::new("/b/archive"), &open, opts).unwrap();
        check(&b, "rewritten");
    }
}
