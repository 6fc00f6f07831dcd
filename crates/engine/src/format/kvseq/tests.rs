//! Tests of the kvseq reader and writer.

use super::*;
use crate::storage::{HintLog, MemStorage, Watched};

fn mem(opts: &KvSeqOptions) -> (MemStorage, KvSeq) {
    let s = MemStorage::new("mem.kvseq");
    let kv = KvSeq::create(Box::new(s.clone()), opts).unwrap();
    (s, kv)
}

#[test]
fn delete_read_is_delete_without_the_read() {
    let (_, mut kv) = mem(&KvSeqOptions::default());
    let a = kv.append(b"alpha", b"one").unwrap();
    let b = kv.append(b"beta", b"two").unwrap();
    let entry = kv.read(a).unwrap();
    assert!(kv.delete_read(&entry).unwrap());
    assert!(kv.read(a).unwrap().deleted);
    assert!(!kv.delete_read(&kv.read(a).unwrap()).unwrap());
    assert!(!kv.read(b).unwrap().deleted);
    assert_eq!(kv.live_entries(), Some(1));
}

#[test]
fn append_read_iterate_reopen() {
    let (s, mut kv) = mem(&KvSeqOptions::default());
    let a = kv.append(b"alpha", b"one").unwrap();
    let b = kv.append(b"", b"").unwrap();
    let c = kv.append(b"gamma", &[7u8; 5000]).unwrap();
    assert_eq!(a, kv.first());
    assert_eq!(kv.read(a).unwrap().value, b"one");
    assert_eq!(kv.read(b).unwrap().key, b"");
    assert_eq!(kv.read(c).unwrap().value.len(), 5000);
    assert!(kv.delete(b).unwrap());
    assert!(!kv.delete(b).unwrap());
    kv.sync().unwrap();
    let kv = KvSeq::open(Box::new(s), false).unwrap();
    assert_eq!(kv.entries(), Some(3));
    assert_eq!(kv.live_entries(), Some(2));
    let live: Vec<_> = kv.iter(kv.first(), true).map(|e| e.unwrap().key).collect();
    assert_eq!(live, vec![b"alpha".to_vec(), b"gamma".to_vec()]);
    let all: Vec<_> = kv
        .iter_entries(kv.first(), false)
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(all.len(), 3);
    assert!(all[1].layout.deleted);
    assert_eq!(all[2].value.as_deref(), Some(&[7u8; 5000][..]));
    assert_eq!(
        kv.superblock().get(var::SYNCSIZE),
        Some(kv.filesize() as i64)
    );
}

#[test]
fn read_value_then_key_returns_the_entrys_own_bytes() {
    let opts = KvSeqOptions {
        keyrepr: Repr::Padded { max: 20 },
        align: 8,
        ..KvSeqOptions::default()
    };
    let (_, mut kv) = mem(&opts);
    let a = kv.append(b"ab", b"0123456789").unwrap();
    let b = kv.append(b"abcd", b"short").unwrap();
    let mut buf = [0u8; 4];
    // Right key length: the value read ahead is kept.
    let (l, key) = kv.read_value_then_key(a, 2, 3, &mut buf).unwrap();
    assert_eq!(
        (key.as_slice(), &buf, l.value_len),
        (&b"ab"[..], b"3456", 10)
    );
    // A wrong key length guesses the wrong place; the bytes are still the entry's own.
    let mut buf = [0u8; 5];
    let (l, key) = kv.read_value_then_key(b, 9, 0, &mut buf).unwrap();
    assert_eq!((key.as_slice(), &buf, l.ptr), (&b"abcd"[..], b"short", b));
    // Past the entry's value (though inside the file): refused.
    let mut buf = [0u8; 8];
    assert!(kv.read_value_then_key(a, 2, 5, &mut buf).is_err());
    assert!(kv
        .read_value_then_key(KvPointer(5), 2, 0, &mut buf)
        .is_err());
}

#[test]
fn append_entry_layout_matches_a_read() {
    for opts in [
        KvSeqOptions::default(),
        KvSeqOptions {
            keyrepr: Repr::Padded { max: 20 },
            valrepr: Repr::Padded { max: 30 },
            align: 8,
            ..KvSeqOptions::default()
        },
        KvSeqOptions {
            keyrepr: Repr::Fixed { len: 3 },
            valrepr: Repr::Prefixed { width: 8 },
            delflag: false,
            ..KvSeqOptions::default()
        },
    ] {
        let (_, mut kv) = mem(&opts);
        kv.append(b"abc", b"x").unwrap();
        let l = kv.append_entry(b"key", b"value").unwrap();
        assert_eq!(l, kv.layout(l.ptr).unwrap());
    }
}

#[test]
fn alignment_and_padding() {
    let opts = KvSeqOptions {
        keyrepr: Repr::Padded { max: 41 },
        valrepr: Repr::Padded { max: 41 },
        align: 8,
        ..KvSeqOptions::default()
    };
    let (_, mut kv) = mem(&opts);
    let a = kv.append(b"", b"").unwrap();
    let b = kv.append(b"mid", b"value").unwrap();
    assert_eq!(a.0, 4096);
    assert_eq!(b.0, 4096 + 88); // 85-byte entries rounded up to 8
    assert_eq!(kv.filesize(), 4096 + 88 + 85);
    assert_eq!(kv.read(b).unwrap().value, b"value");
    assert!(kv.append(&[b'k'; 42], b"").is_err());
    assert!(kv.read(KvPointer(4097)).is_err());
}

#[test]
fn replace_same_size_or_last() {
    let (_, mut kv) = mem(&KvSeqOptions::default());
    let a = kv.append(b"k", b"v1").unwrap();
    let b = kv.append(b"last", b"short").unwrap();
    kv.replace(a, b"k", b"v2").unwrap();
    assert!(kv.replace(a, b"k", b"longer").is_err());
    kv.replace(b, b"last", b"a much longer value").unwrap();
    assert_eq!(kv.read(b).unwrap().value, b"a much longer value");
    assert_eq!(kv.read(a).unwrap().value, b"v2");
    assert_eq!(kv.filesize(), kv.layout(b).unwrap().end);
}

#[test]
fn too_long_for_repr_writes_nothing() {
    let opts = KvSeqOptions {
        keyrepr: Repr::Prefixed { width: 1 },
        valrepr: Repr::Fixed { len: 8 },
        delflag: false,
        ..KvSeqOptions::default()
    };
    let (s, mut kv) = mem(&opts);
    let before = s.to_vec();
    assert!(matches!(
        kv.append(&[0u8; 128], &[0u8; 8]),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(kv.append(b"k", &[0u8; 7]), Err(Error::Invalid(_))));
    assert!(matches!(kv.delete(kv.first()), Err(Error::Invalid(_))));
    assert_eq!(s.to_vec(), before);
    kv.append(&[1u8; 127], &[2u8; 8]).unwrap();
}

/// A kvseq on a [`Watched`] memory file with drop-behind of `chunk`, `bytes` appended.
fn logged_appends(chunk: u64, bytes: u64) -> (KvSeq, HintLog, u64) {
    let log = HintLog::default();
    let storage = Watched {
        inner: MemStorage::new("logged.kvseq"),
        hints: log.clone(),
        ..Watched::default()
    };
    let mut kv = KvSeq::create(Box::new(storage), &KvSeqOptions::default()).unwrap();
    kv.set_drop_behind(Some(DropBehind { chunk }));
    let from = kv.filesize();
    let value = vec![1u8; 64 << 10];
    while kv.filesize() < from + bytes {
        kv.append(b"k", &value).unwrap();
    }
    (kv, log, from)
}

#[test]
fn a_sync_drops_everything_drop_behind_has_not() {
    // Less than a chunk: nothing dropped yet, so the sync drops from the first byte appended.
    let (mut kv, log, from) = logged_appends(4 * WRITEBACK_KICK, 3 * WRITEBACK_KICK);
    kv.sync().unwrap();
    let synced: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.0 == "synced")
        .copied()
        .collect();
    assert_eq!(synced, [("synced", from, kv.filesize() - from)]);
    // Past two chunks: the first dropped by drop-behind, the sync drops the rest.
    let (mut kv, log, _) = logged_appends(4 * WRITEBACK_KICK, 9 * WRITEBACK_KICK);
    kv.sync().unwrap();
    let log = log.lock().unwrap().clone();
    let dropped = log.iter().find(|e| e.0 == "drop").unwrap();
    let synced = log.iter().find(|e| e.0 == "synced").unwrap();
    // From the page the dropped chunk ended in: the kernel keeps a page a range starts inside.
    let page = crate::storage::PAGE;
    assert_eq!(synced.1, (dropped.1 + dropped.2) / page * page, "{log:?}");
    assert_eq!(synced.1 + synced.2, kv.filesize());
}

#[test]
fn drop_behind_starts_writeback_per_kick_and_drops_per_chunk() {
    let chunk = 4 * WRITEBACK_KICK;
    let (kv, log, from) = logged_appends(chunk, 9 * WRITEBACK_KICK);
    let log = log.lock().unwrap().clone();
    let starts: Vec<_> = log.iter().filter(|e| e.0 == "start").collect();
    let drops: Vec<_> = log.iter().filter(|e| e.0 == "drop").collect();
    // Every byte handed to writeback once, in order, a kick at a time, all but the last kick.
    assert!(starts.len() >= 8, "{log:?}");
    assert_eq!(starts[0].1, from);
    let end = starts.last().map(|s| s.1 + s.2).unwrap();
    assert!(end <= kv.filesize() && kv.filesize() - end < WRITEBACK_KICK);
    for pair in starts.windows(2) {
        assert_eq!(pair[0].1 + pair[0].2, pair[1].1);
        assert!(pair[0].2 >= WRITEBACK_KICK && pair[0].2 < WRITEBACK_KICK + (64 << 10) + 64);
    }
    // The first chunk is dropped once the second is under way, not before.
    assert_eq!(drops.len(), 1, "{log:?}");
    assert_eq!(drops[0].1, from);
    assert!(drops[0].2 >= chunk && drops[0].2 < chunk + (64 << 10) + 64);
}
