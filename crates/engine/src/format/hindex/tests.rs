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
