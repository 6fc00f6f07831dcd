//! Fuzz harnesses: one function per cargo-fuzz target in `fuzz/`, shared with
//! `tests/fuzz_replay.rs`, which replays the committed corpora through this same code.
//!
//! Each harness treats its input as an untrusted file and drives the format readers over it. It
//! panics only when the library breaks its promise about untrusted bytes (docs/INTERNALS.md
//! § Errors): a panic inside the library, an error that does not name the file (or names an
//! offset past its end), or two read paths that disagree about the same bytes. Work per input is
//! bounded by the input's length, so a hang is a library bug too (libFuzzer reports it as a
//! timeout).

use std::path::Path;
use std::sync::OnceLock;

use wink_engine::format::hindex::{Cell, HIndex, KeySource};
use wink_engine::format::kvseq::{EntryInfo, KvPointer, KvSeq, KvSeqOptions};
use wink_engine::format::perm::{Pair, Perm};
use wink_engine::format::superblock::{Purpose, Superblock};
use wink_engine::storage::MemStorage;
use wink_engine::Error;

/// The name every fuzz input goes by in error messages.
pub const INPUT_PATH: &str = "fuzz-input";
/// The name of the fixed kvseq whose keys the hindex and perm harnesses look up.
pub const KEYS_PATH: &str = "fuzz-keys.kvseq";
/// How many keys the fixed kvseq holds.
pub const KEY_COUNT: usize = 24;
/// Most pairs or cells a harness reads one by one (keeps an execution short).
const ITEM_CAP: u64 = 1024;
/// Most used cells verified one by one (each verification may probe the whole table).
const VERIFY_CAP: usize = 16;
/// Largest perm grouped (an external merge of tiny runs is quadratic).
const GROUP_CAP: u64 = 256;

/// Panics unless `err` is an error a reader may return for damaged input. Corruption must name
/// one of `files` (path, length) and an offset within it; I/O errors must name one of them.
/// `Full` and `InUse` never come from a read.
pub fn check_error(err: &Error, files: &[(&Path, u64)]) {
    let text = err.to_string();
    let known = |path: &Path| files.iter().find(|(p, _)| *p == path).map(|(_, len)| *len);
    match err {
        Error::Corrupt { path, offset, .. } | Error::Unsupported { path, offset, .. } => {
            let len = known(path).unwrap_or_else(|| panic!("error names an unknown file: {text}"));
            assert!(
                *offset <= len,
                "offset past the end of the {len}-byte file: {text}"
            );
            assert!(
                text.contains(&*path.to_string_lossy()),
                "message lacks the path: {text}"
            );
        }
        Error::Io { path, .. } => {
            assert!(
                known(path).is_some(),
                "I/O error names an unknown file: {text}"
            );
        }
        Error::NotFound(_) | Error::Invalid(_) => {}
        other => panic!("a read returned {other:?}"),
    }
}

fn input_files(len: usize) -> [(&'static Path, u64); 2] {
    [
        (Path::new(INPUT_PATH), len as u64),
        (Path::new(KEYS_PATH), keys_bytes().len() as u64),
    ]
}

/// Unwraps `r`, checking any error with [`check_error`] against the input (and the keys file).
fn ok<T>(r: wink_engine::Result<T>, len: usize) -> Option<T> {
    r.map_err(|e| check_error(&e, &input_files(len))).ok()
}

/// Up to four integers from the input's last 32 bytes, to aim reads at input-chosen places.
fn tail_numbers(data: &[u8]) -> Vec<u64> {
    let tail = &data[data.len().saturating_sub(32)..];
    tail.chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("chunks_exact(8) gives 8 bytes")))
        .collect()
}

// ---- superblock --------------------------------------------------------------------------

/// Parses `data` as a superblock; a parsed one must re-encode to the bytes it came from.
pub fn superblock(data: &[u8]) {
    let path = Path::new(INPUT_PATH);
    let parsed = Superblock::parse(path, data, data.len() as u64);
    let read = Superblock::read(&MemStorage::from_bytes(INPUT_PATH, data.to_vec()));
    match (&parsed, &read) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "parse and read disagree"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "parse and read disagree"),
        _ => panic!("parse and read disagree: {parsed:?} / {read:?}"),
    }
    let sb = match parsed {
        Ok(sb) => sb,
        Err(e) => return check_error(&e, &input_files(data.len())),
    };
    let sbsize = sb.sbsize() as usize;
    assert!(sbsize <= data.len() && sbsize % 8 == 0, "SBSIZE {sbsize}");
    let vars = sb.encode_vars();
    assert!(vars.len() <= sbsize, "variables run past SBSIZE");
    assert_eq!(
        &data[..vars.len()],
        &vars[..],
        "re-encoding changed the variables"
    );
    let again =
        Superblock::parse(path, &sb.encode(), sb.sbsize()).expect("re-encoded superblock parses");
    assert_eq!(again, sb);
    for (name, value) in sb.vars() {
        let at = sb
            .value_offset(*name)
            .expect("a listed variable has an offset") as usize;
        assert_eq!(
            &data[at..at + 8],
            &value.to_be_bytes(),
            "value of {name} at {at}"
        );
        if let Err(e) = sb.get_u64(path, *name) {
            check_error(&e, &input_files(data.len()));
        }
    }
}

// ---- kvseq -------------------------------------------------------------------------------

/// Opens `data` as a kvseq, walks every entry both ways (iteration and point reads) and reads at
/// input-chosen pointers.
pub fn kvseq_walk(data: &[u8]) {
    let Some(kv) = ok(
        KvSeq::open(
            Box::new(MemStorage::from_bytes(INPUT_PATH, data.to_vec())),
            false,
        ),
        data.len(),
    ) else {
        return;
    };
    let all = walk(&kv, kv.first(), false, true, data.len());
    check_point_reads(&kv, &all, data.len());
    let live = walk(&kv, kv.first(), true, false, data.len());
    let expected_live: Vec<_> = all
        .iter()
        .filter(|e| !e.layout.deleted)
        .map(|e| (e.layout, &e.key))
        .collect();
    let got_live: Vec<_> = live.iter().map(|e| (e.layout, &e.key)).collect();
    // A walk that stopped at an error sees a prefix of the live entries.
    assert!(
        expected_live.starts_with(&got_live) || got_live.starts_with(&expected_live),
        "live walk disagrees"
    );
    if let Some(second) = all.get(1) {
        let rest = walk(&kv, second.layout.ptr, false, true, data.len());
        assert_eq!(rest[..], all[1..], "walk from the second entry");
    }
    for n in tail_numbers(data) {
        let ptr = KvPointer(n % (kv.filesize() + 64));
        if let Some(entry) = ok(kv.read(ptr), data.len()) {
            let (layout, key) = kv.read_key(ptr).expect("read succeeded, so read_key must");
            assert_eq!((layout.deleted, &key), (entry.deleted, &entry.key));
            assert_eq!(
                kv.layout(ptr).expect("read succeeded, so layout must"),
                layout
            );
        }
        walk(&kv, ptr, n % 2 == 0, n % 3 == 0, data.len());
    }
}

/// Collects the entries an iterator yields before its first error (checked).
fn walk(kv: &KvSeq, from: KvPointer, live_only: bool, values: bool, len: usize) -> Vec<EntryInfo> {
    let iter = if values {
        kv.iter_entries(from, live_only)
    } else {
        kv.iter(from, live_only)
    };
    let mut out = Vec::new();
    for item in iter {
        match item {
            Ok(info) => out.push(info),
            Err(e) => {
                check_error(&e, &input_files(len));
                break;
            }
        }
        // Every entry takes at least one byte: more entries than bytes means a walk that loops.
        assert!(out.len() <= len, "more entries than bytes in the file");
    }
    out
}

/// Every entry met by a walk reads back the same through the point-read APIs.
fn check_point_reads(kv: &KvSeq, all: &[EntryInfo], len: usize) {
    for (i, info) in all.iter().enumerate() {
        let ptr = info.layout.ptr;
        let entry = kv
            .read(ptr)
            .unwrap_or_else(|e| panic!("walk read {ptr} but read fails: {e}"));
        assert_eq!(
            (entry.deleted, &entry.key),
            (info.layout.deleted, &info.key)
        );
        assert_eq!(Some(&entry.value), info.value.as_ref());
        assert_eq!(
            kv.layout(ptr).expect("layout of a walked entry"),
            info.layout
        );
        assert_eq!(
            kv.read_key(ptr).expect("read_key of a walked entry").1,
            info.key
        );
        assert_eq!(
            kv.read_value(ptr).expect("read_value of a walked entry"),
            entry.value
        );
        let half = info.layout.value_len / 2;
        let mut buf = vec![0u8; (info.layout.value_len - half) as usize];
        if let Some(()) = ok(kv.read_value_at(&info.layout, half, &mut buf), len) {
            assert_eq!(&buf[..], &entry.value[half as usize..]);
        }
        if let Some(next) = all.get(i + 1) {
            assert_eq!(kv.next_after(&info.layout), next.layout.ptr);
        }
    }
}

// ---- the fixed keys kvseq ----------------------------------------------------------------

/// The `i`-th key of the fixed kvseq.
pub fn fuzz_key(i: usize) -> Vec<u8> {
    format!("fuzz-key-{i}").into_bytes()
}

/// The bytes of the fixed kvseq: [`KEY_COUNT`] entries `fuzz_key(i)` → `i`, in order, none
/// deleted; SBSIZE 256 so seeds built against it stay small.
pub fn keys_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let storage = MemStorage::new(KEYS_PATH);
        let opts = KvSeqOptions {
            sbsize: 256,
            purpose: Purpose(*b"FUZZKEYS"),
            fileincr: 0,
            clock: std::sync::Arc::new(wink_engine::clock::ManualClock::new(0)),
            ..KvSeqOptions::default()
        };
        let mut kv = KvSeq::create(Box::new(storage.clone()), &opts).expect("in-memory create");
        for i in 0..KEY_COUNT {
            kv.append(&fuzz_key(i), i.to_string().as_bytes())
                .expect("in-memory append");
        }
        kv.sync().expect("in-memory sync");
        storage.to_vec()
    })
}

/// The fixed kvseq, open read-only.
pub fn keys_kvseq() -> &'static KvSeq {
    static KV: OnceLock<KvSeq> = OnceLock::new();
    KV.get_or_init(|| {
        let storage = MemStorage::from_bytes(KEYS_PATH, keys_bytes().to_vec());
        KvSeq::open(Box::new(storage), false).expect("the fixed kvseq opens")
    })
}

/// Pointers of the fixed kvseq's entries, in order.
pub fn key_pointers() -> Vec<KvPointer> {
    let kv = keys_kvseq();
    kv.iter(kv.first(), false)
        .map(|e| e.expect("the fixed kvseq reads").layout.ptr)
        .collect()
}

// ---- hindex ------------------------------------------------------------------------------

/// Opens `data` as a hindex over the fixed kvseq: lookups of every fixed key and of keys taken
/// from the input, the used cells, counts, spot checks; then an insert and a removal on a copy.
pub fn hindex_lookup(data: &[u8]) {
    let len = data.len();
    let Some(index) = ok(
        HIndex::open(
            Box::new(MemStorage::from_bytes(INPUT_PATH, data.to_vec())),
            false,
        ),
        len,
    ) else {
        return;
    };
    let kv = keys_kvseq();
    let mut keys: Vec<Vec<u8>> = (0..KEY_COUNT).map(fuzz_key).collect();
    keys.push(data[len.saturating_sub(8)..].to_vec());
    keys.push(data[..len.min(12)].to_vec());
    for key in &keys {
        assert!(index.home(key) < index.htsize());
        check_lookup(&index, key, len);
    }
    let used: Vec<(u64, KvPointer)> = index.used_cells().map_while(|c| ok(c, len)).collect();
    for (k, &(cell, ptr)) in used.iter().enumerate().take(ITEM_CAP as usize) {
        match index.get(cell).expect("a listed used cell reads") {
            Cell::Used { ptr: p, .. } => assert_eq!(p, ptr, "cell {cell}"),
            other => panic!("used_cells listed cell {cell}, which reads {other:?}"),
        }
        if k < VERIFY_CAP {
            ok(index.verify_cell(cell, ptr, kv), len);
        }
    }
    if let Some((_, live)) = ok(index.count(), len) {
        assert_eq!(live, used.len() as u64, "count and used_cells disagree");
    }
    for cell in 0..index.htsize().min(ITEM_CAP) {
        ok(index.get(cell), len);
    }
    ok(index.spot_check(kv), len);
    drop(index);
    insert_and_remove(data);
}

/// A lookup that finds something found the right key, in a used cell holding that pointer.
fn check_lookup(index: &HIndex, key: &[u8], len: usize) {
    let Some(Some(found)) = ok(index.lookup(key, keys_kvseq()), len) else {
        return;
    };
    assert_eq!(
        keys_kvseq()
            .key_at(found.ptr)
            .expect("lookup read this key"),
        key
    );
    match index.get(found.cell).expect("the found cell reads") {
        Cell::Used { ptr, .. } => assert_eq!(ptr, found.ptr),
        other => panic!("lookup found cell {}, which reads {other:?}", found.cell),
    }
}

/// On a writable copy: insert the first fixed key the table lacks, find it, remove it.
fn insert_and_remove(data: &[u8]) {
    let len = data.len();
    let Some(mut index) = ok(
        HIndex::open(
            Box::new(MemStorage::from_bytes(INPUT_PATH, data.to_vec())),
            true,
        ),
        len,
    ) else {
        return;
    };
    let kv = keys_kvseq();
    let ptrs = key_pointers();
    let Some(i) = (0..KEY_COUNT).find(|i| matches!(index.lookup(&fuzz_key(*i), kv), Ok(None)))
    else {
        return;
    };
    let key = fuzz_key(i);
    match index.insert(&key, ptrs[i], kv) {
        Ok(cell) => {
            // The new cell lies before any free cell of the key's probe, so a lookup reaches it
            // (or fails on damage it meets on the way).
            if let Some(found) = ok(index.lookup(&key, kv), len) {
                let found = found.expect("an inserted key is found");
                assert_eq!(
                    found,
                    wink_engine::format::hindex::Found { cell, ptr: ptrs[i] }
                );
            }
            ok(index.remove(&key, kv), len);
        }
        Err(Error::Full { .. }) => {}
        Err(e) => check_error(&e, &input_files(len)),
    }
}

// ---- perm --------------------------------------------------------------------------------

/// Opens `data` as a perm: every pair one by one and in ranges, then a group on a copy, with an
/// in-memory or an external merge and a tie comparison that may fail.
pub fn perm_read(data: &[u8]) {
    let len = data.len();
    let Some(perm) = ok(
        Perm::open(
            Box::new(MemStorage::from_bytes(INPUT_PATH, data.to_vec())),
            false,
        ),
        len,
    ) else {
        return;
    };
    let n = perm.len().min(ITEM_CAP);
    let singles: Vec<Option<Pair>> = (0..n).map(|i| ok(perm.get(i), len)).collect();
    assert!(perm.get(perm.len()).is_err(), "a pair past PERMSIZE");
    if let Some(range) = ok(perm.read_range(0, n), len) {
        let singles: Vec<Pair> = singles
            .iter()
            .map(|p| p.expect("range read, so every pair reads"))
            .collect();
        assert_eq!(range, singles, "read_range and get disagree");
        let bound = perm.htsize().unwrap_or(1 << 63);
        assert!(
            range.iter().all(|p| p.hash < bound),
            "a hash past its bound was returned"
        );
    }
    for x in tail_numbers(data) {
        let (start, count) = (x % (perm.len() + 2), (x >> 32) % 5);
        if let Some(range) = ok(perm.read_range(start, count), len) {
            assert_eq!(range.len() as u64, count);
        }
    }
    drop(perm);
    group_copy(data);
}

/// Groups a writable copy; the result must be the stable sort of the pairs by (hash, ptr), or,
/// when the tie comparison fails, the pairs unchanged.
fn group_copy(data: &[u8]) {
    let len = data.len();
    let Some(mut perm) = ok(
        Perm::open(
            Box::new(MemStorage::from_bytes(INPUT_PATH, data.to_vec())),
            true,
        ),
        len,
    ) else {
        return;
    };
    if perm.len() > GROUP_CAP {
        return;
    }
    let Some(before) = ok(perm.read_range(0, perm.len()), len) else {
        return;
    };
    let last = data.last().copied().unwrap_or(0);
    perm.set_run_pairs(u64::from(last % 8) + 2);
    // A tie comparison that fails on its k-th call (k from the input; 0 = never).
    let fail_at = u64::from(last >> 4);
    let mut calls = 0u64;
    let result = perm.group(|a, b| {
        calls += 1;
        if calls == fail_at {
            return Err(Error::invalid("tie comparison failed"));
        }
        Ok(a.ptr.cmp(&b.ptr))
    });
    let after = perm
        .read_range(0, perm.len())
        .expect("a perm that read before grouping reads after");
    match result {
        Ok(()) => {
            let mut expected = before;
            expected.sort_by(|a, b| a.hash.cmp(&b.hash).then(a.ptr.cmp(&b.ptr)));
            assert_eq!(after, expected, "group did not sort");
        }
        Err(Error::Invalid(_)) => assert_eq!(after, before, "a failed group changed the perm"),
        Err(e) => check_error(&e, &input_files(len)),
    }
}

// ---- records with their own checksum: inode, title record, archive map --------------------
//
// Each of these decoders checks a CRC before it trusts any field, so random bytes almost never
// get past the checksum. The first input byte picks the mode: even, the bytes as they are; odd,
// the rest of the input with a valid checksum put in, so that the fuzzer explores the parser
// behind the check (a record damaged in a way its CRC does not catch, or written by a buggy
// writer). A decoded record must encode and decode back to itself.

/// The input as it is (`Some(false)`), or to be sealed with a valid checksum (`Some(true)`).
fn sealed_mode(data: &[u8]) -> Option<(bool, &[u8])> {
    let (&mode, rest) = data.split_first()?;
    Some((mode & 1 == 1, rest))
}

/// `body` followed by its CRC-32, big-endian: how title records and archive maps end.
fn with_crc(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    out
}

/// Decodes `data` as a filesys inode value; a decoded inode re-encodes to a decodable equal.
pub fn inode(data: &[u8]) {
    use wink_engine::filesys::inode::{Inode, HEADER, PAIR};
    let Some((seal, rest)) = sealed_mode(data) else {
        return;
    };
    let mut bytes = rest.to_vec();
    if seal && bytes.len() as u64 >= HEADER {
        // CKSUM (bytes 0..8) covers NEXTI up to the last of DCOUNT pairs (DCOUNT at byte 48).
        let dcount = i64::from_be_bytes(bytes[48..56].try_into().expect("8 bytes"));
        let capacity = Inode::capacity_of(bytes.len() as u64);
        let pairs = u64::try_from(dcount).unwrap_or(0).min(capacity);
        let end = (HEADER + pairs * PAIR) as usize;
        let cksum = i64::from(crc32fast::hash(&bytes[8..end]));
        bytes[..8].copy_from_slice(&cksum.to_be_bytes());
    }
    let path = Path::new(INPUT_PATH);
    let files = [(path, bytes.len() as u64)];
    let decoded = match Inode::decode(&bytes, path, 0) {
        Ok(i) => i,
        Err(e) => return check_error(&e, &files),
    };
    assert!(
        decoded.data.len() as u64 <= decoded.capacity(),
        "more pointers than room"
    );
    let again = Inode::decode(&decoded.encode(), path, 0).expect("a re-encoded inode decodes");
    assert_eq!(again, decoded, "inode changed in a round trip");
}

/// Decodes `data` as a title record of the render store, then runs what the store does with a
/// record it read (retention under several policies, a put, a cull, archive candidates, a
/// take-down and its lifting) at times taken from the input. None of it may panic; a decoded
/// record, and the record after the store's operations, encode and decode back to themselves.
pub fn title_record(data: &[u8]) {
    use wink_engine::store::policy::{ArchivePolicy, Policy, Renders, Revisions, Stamps};
    use wink_engine::store::record::{Location, Render, TitleRecord, MAGIC, MAGIC_V1, MAGIC_V3};
    let Some((seal, rest)) = sealed_mode(data) else {
        return;
    };
    // Sealed inputs are record bodies: of the current layout after a leading '2', of the
    // labelled one after a '3', else of the first (which the older seeds hold).
    let bytes = match (seal, rest.split_first()) {
        (true, Some((b'2', body))) => with_crc(&[MAGIC.as_slice(), body].concat()),
        (true, Some((b'3', body))) => with_crc(&[MAGIC_V3.as_slice(), body].concat()),
        (true, _) => with_crc(&[MAGIC_V1.as_slice(), rest].concat()),
        (false, _) => rest.to_vec(),
    };
    let path = Path::new(INPUT_PATH);
    let files = [(path, bytes.len() as u64)];
    let (key, record) = match TitleRecord::decode_any(&bytes, path, 0) {
        Ok(r) => r,
        Err(e) => return check_error(&e, &files),
    };
    let key = key.unwrap_or_else(|| b"d/T".to_vec());
    let round_trip = |r: &TitleRecord| {
        let again = TitleRecord::decode(&r.encode(&key), &key, path, 0)
            .expect("a re-encoded record decodes");
        assert_eq!(&again, r, "title record changed in a round trip");
    };
    round_trip(&record);
    let numbers = tail_numbers(data);
    let pick = |i: usize| numbers.get(i).copied().unwrap_or(0);
    // Reads and culls take any clock reading; a put only one the store accepts (`check_now`).
    let now = pick(0) as i64;
    let put_now = (pick(0) % (wink_engine::store::key::MAX_NOW as u64 + 1)) as i64;
    let rev = pick(1);
    let policies = [
        Policy::default(),
        Policy {
            revisions: Revisions::All,
            renders: Renders::All,
            historical_ttl: 1,
        },
        Policy {
            revisions: Revisions::Recent { ttl: i64::MAX },
            renders: Renders::Interval {
                secs: 3600,
                count: 2,
                grace: i64::MAX,
            },
            historical_ttl: i64::MAX,
        },
        Policy {
            revisions: Revisions::Recent { ttl: 1 },
            renders: Renders::Ttl { ttl: 60 },
            historical_ttl: 0,
        },
    ];
    for policy in &policies {
        for archive in [
            ArchivePolicy::First,
            ArchivePolicy::Newest,
            ArchivePolicy::Every { secs: 1 },
        ] {
            // Works out the archive's candidates, then culls around them.
            let _ = record.clone().cull_keeping(policy, now, Some(archive));
        }
        let _ = record.current_rev(policy, now);
        let _ = record.check_put(rev, pick(2) & 1 == 1, policy, now);
        let mut changed = record.clone();
        let template = record.renders.first();
        let render = Render {
            rev,
            tid: template.map_or(uuid::Uuid::nil(), |r| r.tid),
            content_type: "text/html".into(),
            labels: wink_engine::store::Labels::NONE,
            location: Location {
                container: 1,
                offset: pick(3),
                len: 1,
                crc: 0,
            },
            stamps: Stamps {
                arrival: put_now,
                superseded: None,
                pushed_out: None,
                historical: pick(2) & 1 == 1,
                first: false,
            },
        };
        let _ = changed.put(render, policy, put_now);
        let _ = changed.cull(policy, now.saturating_add(1));
        round_trip(&changed);
        let _ = changed.take_down(Some(rev));
        let _ = changed.lift(Some(rev));
        let _ = changed.take_down(None);
        round_trip(&changed);
    }
}

/// Decodes `data` as an archive title map, and as a map log (a snapshot and deltas) of format 1
/// and of formats 2 and 3 (with the units of a format 3 map walked as a read walks them); a
/// decoded map re-encodes, as a map and as a one-snapshot log, to itself.
pub fn archive_map(data: &[u8]) {
    use wink_engine::archive::map::{TitleMap, MAGIC};
    let Some((seal, rest)) = sealed_mode(data) else {
        return;
    };
    let path = Path::new(INPUT_PATH);
    let check_map = |map: &TitleMap| {
        let again = TitleMap::decode(&map.encode(), path, 0).expect("a re-encoded map decodes");
        assert_eq!(&again, map, "archive map changed in a round trip");
        let log = TitleMap::decode_log(&map.snapshot_record(), path, 0)
            .expect("a one-snapshot log of a map decodes");
        assert_eq!(&log, map, "archive map changed through its log");
    };
    let bytes = if seal {
        with_crc(&[MAGIC.as_slice(), rest].concat())
    } else {
        rest.to_vec()
    };
    match TitleMap::decode(&bytes, path, 0) {
        Ok(map) => check_map(&map),
        Err(e) => check_error(&e, &[(path, bytes.len() as u64)]),
    }
    let mut log = rest.to_vec();
    if seal {
        seal_log_records(&mut log);
    }
    match TitleMap::decode_log(&log, path, 0) {
        Ok(map) => check_map(&map),
        Err(e) => check_error(&e, &[(path, log.len() as u64)]),
    }
    // The same bytes as a format 2 log: a decoded map re-encodes, as a one-snapshot log, to
    // itself.
    use wink_engine::archive::v2::map::Map;
    match Map::decode_log(&log, path, 0) {
        Ok(map) => {
            let again = Map::decode_log(&map.snapshot_record(), path, 0)
                .expect("a one-snapshot log of a v2 map decodes");
            assert_eq!(again, map, "v2 archive map changed through its log");
            // A format 3 map's units: every frame's unit, path and decode cost, as a read
            // works them out, stay within the map.
            use wink_engine::archive::v2::chain;
            for n in 0..map.frames.len().min(256) {
                let (head, last) = chain::unit(&map, n);
                assert!(head <= n && n <= last && last < map.frames.len());
                assert!(map.frames[head].base.is_head());
                assert!(chain::path(&map, n).iter().all(|&i| i <= n));
                let _ = chain::decode_cost(&map, n);
            }
        }
        Err(e) => check_error(&e, &[(path, log.len() as u64)]),
    }
    archive_map_parts(&log);
}

/// The log as a format 3 map spread over part files: the map file from the last parts record
/// at a record boundary, the records before it split into as many parts as it names (one
/// record each, the last part the rest), each piece at its offset in the input. Decoded, it is
/// the map its records make without the parts record.
fn archive_map_parts(log: &[u8]) {
    use wink_engine::archive::v2::map::{log_parts, Map};
    let path = Path::new(INPUT_PATH);
    let mut bounds = vec![0usize];
    let mut head = None;
    while let Some(&at) = bounds.last() {
        let Some(len) = log.get(at..at + 4) else {
            break;
        };
        let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
        if log_parts(&log[at..]) > 0 {
            head = Some(bounds.len() - 1);
        }
        match (at + 8).checked_add(len).filter(|e| *e <= log.len()) {
            Some(end) => bounds.push(end),
            None => break,
        }
    }
    let Some(h) = head else {
        return;
    };
    let n = usize::from(log_parts(&log[bounds[h]..]));
    let mut pieces: Vec<(&[u8], u64)> = (0..n)
        .map(|i| {
            let from = bounds[i.min(h)];
            let to = if i + 1 == n {
                bounds[h]
            } else {
                bounds[(i + 1).min(h)]
            };
            (&log[from..to], from as u64)
        })
        .collect();
    pieces.push((&log[bounds[h]..], bounds[h] as u64));
    match Map::decode_log_parts(&pieces, path) {
        Ok(map) => {
            let skip = bounds.get(h + 1).copied().unwrap_or(log.len());
            let plain = [&log[..bounds[h]], &log[skip..]].concat();
            let again = Map::decode_log(&plain, path, 0).expect("the records alone decode");
            assert_eq!(again, map, "a map read from parts differs from its records");
            assert!(map.units, "a map in parts is format 3");
        }
        Err(e) => check_error(&e, &[(path, log.len() as u64)]),
    }
}

/// Puts a valid CRC-32 into every whole record of a map log: `[len: u32][len bytes][crc: u32]`.
fn seal_log_records(log: &mut [u8]) {
    let mut at = 0usize;
    while let Some(len) = log.get(at..at + 4) {
        let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
        let Some(end) = (at + 8).checked_add(len).filter(|e| *e <= log.len()) else {
            return;
        };
        let crc = crc32fast::hash(&log[at + 4..end - 4]);
        log[end - 4..end].copy_from_slice(&crc.to_be_bytes());
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_keys_are_all_there() {
        let ptrs = key_pointers();
        assert_eq!(ptrs.len(), KEY_COUNT);
        assert_eq!(keys_kvseq().key_at(ptrs[3]).unwrap(), fuzz_key(3));
    }

    #[test]
    fn harnesses_take_empty_and_tiny_inputs() {
        for data in [&b""[..], b"#!WINKME", &[0xff; 40]] {
            superblock(data);
            kvseq_walk(data);
            hindex_lookup(data);
            perm_read(data);
        }
    }
}
