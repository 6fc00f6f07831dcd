//! Tests of the hindex.

use super::*;
use crate::format::kvseq::KvSeqOptions;
use crate::storage::MemStorage;

fn setup(htsize: u64) -> (KvSeq, HIndex, MemStorage) {
    let kv = KvSeq::create(Box::new(MemStorage::new("d")), &KvSeqOptions::default()).unwrap();
    let s = MemStorage::new("i");
    let index = HIndex::create(
        Box::new(s.clone()),
        &HIndexOptions {
            htsize,
            ..Default::default()
        },
    )
    .unwrap();
    (kv, index, s)
}

#[test]
fn repoint_writes_the_pointer_and_keeps_the_stored_hash() {
    let (mut kv, mut index, _) = setup(16);
    let old = kv.append(b"k", b"v1").unwrap();
    let cell = index.insert(b"k", old, &kv).unwrap();
    let before = index.get(cell).unwrap();
    let new = kv.append(b"k", b"v2").unwrap();
    let found = index.lookup(b"k", &kv).unwrap().unwrap();
    index.repoint(found, new).unwrap();
    let mut via_set = index.get(cell).unwrap();
    assert_eq!(index.lookup(b"k", &kv).unwrap().unwrap().ptr, new);
    index.set_pointer(cell, new).unwrap();
    assert_eq!(index.get(cell).unwrap(), via_set);
    via_set = index.get(cell).unwrap();
    match (before, via_set) {
        (Cell::Used { stored_hash: a, .. }, Cell::Used { stored_hash: b, .. }) => {
            assert_eq!(a, b)
        }
        other => panic!("{other:?}"),
    }
    assert!(index.repoint(Found { cell: 99, ptr: new }, new).is_err());
}

#[test]
fn insert_lookup_delete_and_grow() {
    let (mut kv, mut index, s) = setup(4);
    let mut ptrs = Vec::new();
    for i in 0..100 {
        let key = format!("key-{i}");
        let ptr = kv.append(key.as_bytes(), b"v").unwrap();
        index.insert(key.as_bytes(), ptr, &kv).unwrap();
        ptrs.push(ptr);
    }
    assert!(index.htsize() >= 128, "grew to {}", index.htsize());
    for (i, ptr) in ptrs.iter().enumerate() {
        let found = index
            .lookup(format!("key-{i}").as_bytes(), &kv)
            .unwrap()
            .unwrap();
        assert_eq!(found.ptr, *ptr);
    }
    assert_eq!(index.remove(b"key-7", &kv).unwrap(), Some(ptrs[7]));
    assert_eq!(index.lookup(b"key-7", &kv).unwrap(), None);
    assert_eq!(index.lookup(b"absent", &kv).unwrap(), None);
    index.sync(5).unwrap();
    let reopened = HIndex::open(Box::new(s), false).unwrap();
    assert_eq!(reopened.live(), 99);
    assert_eq!(reopened.count().unwrap(), (100, 99));
    reopened.spot_check(&kv).unwrap();
    assert_eq!(reopened.used_cells().count(), 99);
}

#[test]
fn cellsz_one_still_works() {
    let kv0 = KvSeq::create(Box::new(MemStorage::new("d")), &KvSeqOptions::default());
    let mut kv = kv0.unwrap();
    let mut index = HIndex::create(
        Box::new(MemStorage::new("i")),
        &HIndexOptions {
            htsize: 8,
            cellsz: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let p = kv.append(b"x", b"1").unwrap();
    index.insert(b"x", p, &kv).unwrap();
    assert_eq!(index.lookup(b"x", &kv).unwrap().unwrap().ptr, p);
}

/// Two tables fed the same keys: one inserts each after a probe that missed
/// ([`HIndex::insert_probed`]), the other with [`HIndex::insert`]; deletions leave HTDEL cells
/// on the probe paths and a small table grows on the way.
#[test]
fn an_insert_after_a_probe_takes_the_cells_a_fresh_insert_takes() {
    let (mut kv, mut probed, probed_bytes) = setup(8);
    let (_, mut fresh, fresh_bytes) = setup(8);
    for i in 0..200u32 {
        let key = format!("title-{i}");
        let ptr = kv.append(key.as_bytes(), b"v").unwrap();
        let probe = probed
            .probe(key.as_bytes(), |p| Ok(kv.key_at(p)? == key.as_bytes()))
            .unwrap();
        assert_eq!(probe.found(), None);
        let a = probed.insert_probed(&probe, ptr, &kv).unwrap();
        let b = fresh.insert(key.as_bytes(), ptr, &kv).unwrap();
        assert_eq!(a, b, "{key}");
        if i % 3 == 0 {
            let gone = format!("title-{}", i / 2);
            let removed = probed.remove(gone.as_bytes(), &kv).unwrap();
            assert_eq!(fresh.remove(gone.as_bytes(), &kv).unwrap(), removed);
        }
    }
    assert!(probed.htsize() > 8, "grew to {}", probed.htsize());
    assert_eq!(
        (probed.entries(), probed.live()),
        (fresh.entries(), fresh.live())
    );
    probed.flush().unwrap();
    fresh.flush().unwrap();
    assert_eq!(probed_bytes.to_vec(), fresh_bytes.to_vec());
}

/// A probe is used only while the table is as it read it: after another insert took the cell
/// it ended at, and after a rebuild, the key is probed afresh.
#[test]
fn a_probe_outlived_by_a_write_or_a_rebuild_is_not_used() {
    let (mut kv, mut index, _) = setup(64);
    // Keys with the same home cell: the second's probe ends where the first goes.
    let home = |k: &str| index.home(k.as_bytes());
    let first = "k-0".to_string();
    let second = (1..)
        .map(|i| format!("k-{i}"))
        .find(|k| home(k) == home(&first))
        .unwrap();
    let stale = index.probe(second.as_bytes(), |_| Ok(false)).unwrap();
    let p1 = kv.append(first.as_bytes(), b"v").unwrap();
    let c1 = index.insert(first.as_bytes(), p1, &kv).unwrap();
    let p2 = kv.append(second.as_bytes(), b"v").unwrap();
    let c2 = index.insert_probed(&stale, p2, &kv).unwrap();
    assert_ne!(c1, c2);
    assert_eq!(
        index.lookup(first.as_bytes(), &kv).unwrap().unwrap().ptr,
        p1
    );
    assert_eq!(
        index.lookup(second.as_bytes(), &kv).unwrap().unwrap().ptr,
        p2
    );
    let third = b"another key";
    let before_rebuild = index.probe(third, |_| Ok(false)).unwrap();
    index.rebuild(256, &kv).unwrap();
    let p3 = kv.append(third, b"v").unwrap();
    let c3 = index.insert_probed(&before_rebuild, p3, &kv).unwrap();
    assert_eq!(c3, index.lookup(third, &kv).unwrap().unwrap().cell);
    for (key, ptr) in [(first.as_bytes(), p1), (second.as_bytes(), p2)] {
        assert_eq!(index.lookup(key, &kv).unwrap().unwrap().ptr, ptr);
    }
}

/// A miss whose probe passed a cell with a wrong stored hash fails, naming the index file and
/// the offset of the damaged word, whether the check reads the path itself or takes the cells
/// the lookup read.
#[test]
fn a_damaged_cell_on_the_probe_path_fails_a_miss_with_file_and_offset() {
    let (mut kv, mut index, s) = setup(16);
    for i in 0..10 {
        let key = format!("key-{i}");
        let ptr = kv.append(key.as_bytes(), b"v").unwrap();
        index.insert(key.as_bytes(), ptr, &kv).unwrap();
    }
    index.flush().unwrap();
    // A key that is not there whose probe passes a used cell.
    let (missing, cell) = (0..)
        .map(|i| format!("absent-{i}"))
        .find_map(|k| {
            let probe = index.probe(k.as_bytes(), |_| Ok(false)).unwrap();
            let used = probe
                .cells()
                .find(|(_, c)| matches!(c, Cell::Used { .. }))
                .map(|(cell, _)| cell);
            used.map(|cell| (k, cell))
        })
        .unwrap();
    let offset = index.cell_offset(cell) + 8;
    s.write_at(&[0xAB; 8], offset).unwrap();
    let probe = index
        .probe(missing.as_bytes(), |p| {
            Ok(kv.key_at(p)? == missing.as_bytes())
        })
        .unwrap();
    assert_eq!(probe.found(), None);
    for result in [
        index.check_probe(&probe, &kv),
        index.check_probe_path(missing.as_bytes(), &kv),
    ] {
        match result {
            Err(Error::Corrupt {
                path, offset: at, ..
            }) => {
                assert_eq!(path, Path::new("i"));
                assert_eq!(at, offset);
            }
            other => panic!("{other:?}"),
        }
    }
}
