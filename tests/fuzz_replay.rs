//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) and the inputs of past crashes
//! (`fuzz/regressions/<target>/`) through the harnesses in `wink_harness::fuzzing`, the same code the
//! cargo-fuzz targets run, so the corpora keep guarding in every `cargo test`.
//!
//! `cargo test --test fuzz_replay -- --ignored write_seeds` rewrites the `seed-*` files of each
//! corpus from the library (valid files of every shape the targets read) and the fixtures in
//! `../shared/fixtures`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wink::archive::map::{Delta, TitleMap};
use wink::archive::{Archive, ArchiveOptions, Item};
use wink::clock::ManualClock;
use wink::filesys::{self, inode::Inode};
use wink::format::hindex::{Cell, HIndex, HIndexOptions};
use wink::format::kvseq::{KvPointer, KvSeq, KvSeqOptions};
use wink::format::perm::{Pair, Perm, PermOptions};
use wink::format::repr::Repr;
use wink::format::superblock::{var, Superblock};
use wink::storage::MemStorage;
use wink::store::policy::{Policy, Stamps};
use wink::store::record::{Location, Render, TitleRecord};
use wink::vfs::Vfs;
use wink::Error;
use wink_harness::fuzzing::{self, fuzz_key, key_pointers, keys_kvseq, KEY_COUNT};
use wink_harness::sim::SimDisk;

const TARGETS: [&str; 7] = [
    "superblock",
    "kvseq_walk",
    "hindex_lookup",
    "perm_read",
    "inode",
    "title_record",
    "archive_map",
];

/// The harness of each of [`TARGETS`], in the same order.
const HARNESSES: [fn(&[u8]); 7] = [
    fuzzing::superblock,
    fuzzing::kvseq_walk,
    fuzzing::hindex_lookup,
    fuzzing::perm_read,
    fuzzing::inode,
    fuzzing::title_record,
    fuzzing::archive_map,
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Names the input being replayed when a harness panics (the panic message alone does not).
struct Replaying<'a>(&'a Path);

impl Drop for Replaying<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("harness panicked on {}", self.0.display());
        }
    }
}

/// Runs `harness` over every file of `fuzz/<kind>/<target>/`; returns how many there were.
fn replay(kind: &str, target: &str, harness: fn(&[u8])) -> usize {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(listing) = fs::read_dir(&dir) else {
        return 0;
    };
    let mut files: Vec<PathBuf> = listing.map(|e| e.expect("corpus entry").path()).collect();
    files.sort();
    for file in &files {
        let data = fs::read(file).expect("corpus file reads");
        let _guard = Replaying(file);
        harness(&data);
    }
    files.len()
}

fn replay_target(target: &str, harness: fn(&[u8])) {
    let n = replay("corpus", target, harness);
    assert!(n > 0, "fuzz/corpus/{target} is empty or missing");
    replay("regressions", target, harness);
}

#[test]
fn superblock_corpus() {
    replay_target("superblock", fuzzing::superblock);
}

#[test]
fn kvseq_walk_corpus() {
    replay_target("kvseq_walk", fuzzing::kvseq_walk);
}

#[test]
fn hindex_lookup_corpus() {
    replay_target("hindex_lookup", fuzzing::hindex_lookup);
}

#[test]
fn perm_read_corpus() {
    replay_target("perm_read", fuzzing::perm_read);
}

#[test]
fn inode_corpus() {
    replay_target("inode", fuzzing::inode);
}

#[test]
fn title_record_corpus() {
    replay_target("title_record", fuzzing::title_record);
}

#[test]
fn archive_map_corpus() {
    replay_target("archive_map", fuzzing::archive_map);
}

/// Its seeds are small exports (plain, gzip, zstd) and damaged copies of them, written once by
/// hand: `wink export` of a store of a few renders, with a mode byte in front.
#[test]
fn warc_record_corpus() {
    replay_target("warc_record", wink::warc::fuzz_warc_record);
}

/// Its seeds are a put, a conditional put and a take-down of a whole title as the cluster
/// frames them, written by `cargo test --lib message -- --ignored write_fuzz_seeds`.
#[test]
fn cluster_message_corpus() {
    replay_target("cluster_message", wink::cluster::message::fuzz);
}

// ---- seeds -------------------------------------------------------------------------------

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_700_000_000))
}

/// Small kvseqs, one per representation family, with and without KVDELFL and ALIGN.
fn kvseq_seeds() -> Vec<(String, Vec<u8>)> {
    let prefixed = |w| Repr::Prefixed { width: w };
    let shapes = [
        ("p1-p2-del", prefixed(1), prefixed(2), true, 0),
        ("p2-p4", prefixed(2), prefixed(4), false, 0),
        ("p4-p8-del-a16", prefixed(4), prefixed(8), true, 16),
        ("p8-p1", prefixed(8), prefixed(1), false, 0),
        (
            "fixed8-fixed3-del",
            Repr::Fixed { len: 8 },
            Repr::Fixed { len: 3 },
            true,
            0,
        ),
        (
            "fixed8-fixed0",
            Repr::Fixed { len: 8 },
            Repr::Fixed { len: 0 },
            false,
            0,
        ),
        (
            "pad12-pad20-del-a8",
            Repr::Padded { max: 12 },
            Repr::Padded { max: 20 },
            true,
            8,
        ),
        (
            "pad12-p2-a4",
            Repr::Padded { max: 12 },
            prefixed(2),
            false,
            4,
        ),
    ];
    shapes
        .iter()
        .map(|&(name, keyrepr, valrepr, delflag, align)| {
            let storage = MemStorage::new("seed");
            let opts = KvSeqOptions {
                sbsize: 256,
                keyrepr,
                valrepr,
                delflag,
                align,
                fileincr: 0,
                clock: clock(),
                ..KvSeqOptions::default()
            };
            let mut kv = KvSeq::create(Box::new(storage.clone()), &opts).expect("create");
            let mut ptrs = Vec::new();
            for i in 0..5u8 {
                let key = fit(keyrepr, &[b'k', b'0' + i]);
                let value = fit(valrepr, &vec![b'v'; usize::from(i) * 2]);
                ptrs.push(kv.append(&key, &value).expect("append"));
            }
            if delflag {
                kv.delete(ptrs[1]).expect("delete");
            }
            kv.sync().expect("sync");
            (format!("seed-{name}"), storage.to_vec())
        })
        .collect()
}

/// `data` cut or zero-padded to what `repr` holds.
fn fit(repr: Repr, data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    match repr {
        Repr::Fixed { len } => out.resize(usize::from(len), b'.'),
        _ => out.truncate(repr.max_len().min(data.len() as u64) as usize),
    }
    out
}

/// Hindexes over the fixed keys kvseq: CELLSZ 1 and 2, small tables (wrap-around likely), some
/// keys removed (HTDEL cells on probe paths), one grown from 4 cells.
fn hindex_seeds() -> Vec<(String, Vec<u8>)> {
    let kv = keys_kvseq();
    let ptrs = key_pointers();
    let mut seeds = Vec::new();
    for (htsize, cellsz, keys) in [(16, 2, 10), (16, 1, 10), (32, 2, 20), (4, 2, KEY_COUNT)] {
        let storage = MemStorage::new("seed");
        let opts = HIndexOptions {
            sbsize: 256,
            htsize,
            cellsz,
            time: 1_700_000_000,
            ..HIndexOptions::default()
        };
        let mut index = HIndex::create(Box::new(storage.clone()), &opts).expect("create");
        for (i, ptr) in ptrs.iter().enumerate().take(keys) {
            index.insert(&fuzz_key(i), *ptr, kv).expect("insert");
        }
        for i in (0..keys).step_by(4) {
            index.remove(&fuzz_key(i), kv).expect("remove");
        }
        index.sync(1_700_000_000).expect("sync");
        drop(index);
        seeds.push((
            format!("seed-h{htsize}-c{cellsz}-k{keys}"),
            storage.to_vec(),
        ));
    }
    seeds
}

/// Perms of the fixed keys' entries: with and without HTSIZE, in file order and grouped.
fn perm_seeds() -> Vec<(String, Vec<u8>)> {
    let kv = keys_kvseq();
    let ptrs = key_pointers();
    let mut seeds = Vec::new();
    for (htsize, grouped) in [
        (None, false),
        (Some(16), false),
        (Some(16), true),
        (Some(4), true),
    ] {
        let storage = MemStorage::new("seed");
        let opts = PermOptions {
            sbsize: 256,
            htsize,
            fileincr: 0,
            ..PermOptions::default()
        };
        let mut perm = Perm::create(Box::new(storage.clone()), &opts).expect("create");
        for (i, ptr) in ptrs.iter().enumerate().take(12) {
            let hash = perm.hash_key(&fuzz_key(i));
            perm.append(Pair { ptr: *ptr, hash }).expect("append");
        }
        perm.sync().expect("sync");
        if grouped {
            perm.group(|a, b| Ok(kv.read_key(a.ptr)?.1.cmp(&kv.read_key(b.ptr)?.1)))
                .expect("group");
        }
        drop(perm);
        let name = format!(
            "seed-{}-{}",
            htsize.map_or("h63".into(), |n| format!("h{n}")),
            if grouped { "grouped" } else { "unsorted" }
        );
        seeds.push((name, storage.to_vec()));
    }
    seeds
}

/// Fixture files (from an independent implementation) that each target can read.
fn fixture_seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let names: &[&str] = match target {
        "kvseq_walk" => &[
            "kv_var.kvseq",
            "kv_fixed.kvseq",
            "kv_padded.kvseq",
            "fs_normal.data",
            "fs_ao.data",
            "fs_ao.time",
        ],
        "hindex_lookup" => &["kv_var.hindex", "fs_normal.idx", "fs_ao.idx"],
        "perm_read" => &["kv_var.perm"],
        "superblock" => &["kv_fixed.kvseq", "kv_var.hindex", "kv_var.perm"],
        // The record targets read values inside files, not files.
        _ => &[],
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    names
        .iter()
        .map(|n| {
            (
                format!("seed-fixture-{n}"),
                fs::read(dir.join(n)).expect("fixture reads"),
            )
        })
        .collect()
}

/// A record that ends in its own checksum, as the record harnesses take it: mode byte 0 and the
/// bytes as they are, and mode byte 1 with the bytes between `skip` and the 4-byte CRC (the
/// harness puts the magic and the checksum back).
fn both_modes(name: &str, bytes: &[u8], skip: usize) -> [(String, Vec<u8>); 2] {
    [
        (format!("seed-{name}-raw"), [&[0u8][..], bytes].concat()),
        (
            format!("seed-{name}-sealed"),
            [&[1u8][..], &bytes[skip..bytes.len() - 4]].concat(),
        ),
    ]
}

/// Inodes: empty, with a few pointers, full.
fn inode_seeds() -> Vec<(String, Vec<u8>)> {
    let inode = |n: u64, size: u64| Inode {
        fileid: 0x2a,
        lsize: n * 100,
        ftype: 1,
        mtime: 1_700_000_000,
        data: (0..n).map(|i| (KvPointer(4096 + i * 200), 100)).collect(),
        size,
    };
    [(0, 128), (3, 128), (4, 120)]
        .into_iter()
        .flat_map(|(n, size)| {
            let bytes = inode(n, size).encode();
            // An inode's checksum is at its start: the harness seals it in place.
            [
                (format!("seed-inode-{n}-raw"), [&[0u8][..], &bytes].concat()),
                (
                    format!("seed-inode-{n}-sealed"),
                    [&[1u8][..], &bytes].concat(),
                ),
            ]
        })
        .collect()
}

/// Title records as the store writes them: renders of several revisions and content types,
/// a superseded and a historical one, and take-downs.
fn title_record_seeds() -> Vec<(String, Vec<u8>)> {
    let policy = Policy::default();
    let render = |rev: u64, secs: u64, historical: bool, content_type: &str| Render {
        labels: wink::store::Labels::NONE,
        rev,
        tid: uuid::Uuid::from_fields(secs as u32, 0x1000, 0x11ef, &[0x80, 1, 2, 3, 4, 5, 6, 7]),
        content_type: content_type.into(),
        location: Location {
            container: 1,
            offset: 4096 * rev,
            len: 1000,
            crc: 0xdead_beef,
        },
        stamps: Stamps {
            arrival: 1_700_000_000 + secs as i64,
            superseded: None,
            pushed_out: None,
            historical,
            first: false,
        },
    };
    let mut record = TitleRecord::default();
    record.put(render(5, 10, false, "text/html"), &policy, 1_700_000_010);
    record.put(render(5, 20, false, "text/html"), &policy, 1_700_000_020);
    record.put(
        render(7, 30, false, "application/json"),
        &policy,
        1_700_000_030,
    );
    record.put(render(2, 40, true, "text/html"), &policy, 1_700_000_040);
    let key = b"en.wikipedia.org/Main_Page";
    let plain = record.encode(key);
    record.take_down(Some(5));
    record.archive = wink::store::record::InArchive::Yes;
    let down = record.encode(key);
    record.take_down(None);
    let title_down = record.encode(key);
    let mut labelled = TitleRecord::default();
    labelled.put(render(5, 10, false, "text/html"), &policy, 1_700_000_010);
    let mut gzip = render(6, 20, false, "text/html");
    gzip.labels = wink::store::Labels {
        encoding: Some("gzip".into()),
        language: Some("de".into()),
    };
    labelled.put(gzip, &policy, 1_700_000_020);
    let labelled = labelled.encode(key);
    let mut seeds = Vec::new();
    for (name, bytes, version) in [
        ("record", plain, b'2'),
        ("record-rev-down", down, b'2'),
        ("record-title-down", title_down, b'2'),
        ("record-labels", labelled, b'3'),
    ] {
        // Sealed: the harness puts the magic back in front of a body after a '2' or '3'.
        let [raw, _] = both_modes(name, &bytes, 4);
        seeds.push(raw);
        seeds.push((
            format!("seed-{name}-sealed"),
            [&[1u8, version][..], &bytes[4..bytes.len() - 4]].concat(),
        ));
    }
    seeds
}

/// Labels a seed's render carries.
fn gzip_de() -> wink::store::Labels {
    wink::store::Labels {
        encoding: Some("gzip".into()),
        language: Some("de".into()),
    }
}

/// Archive maps of a real archive (several blocks, key blocks), as a map and as a log of a
/// snapshot and a take-down delta.
fn archive_map_seeds() -> Vec<(String, Vec<u8>)> {
    let opts = ArchiveOptions {
        block_bytes: 16 << 10,
        level: 3,
        format: 1,
        ..ArchiveOptions::default()
    };
    let vfs: Arc<dyn Vfs> = Arc::new(SimDisk::new());
    let base = Path::new("/seed/archive");
    let fs_opts = filesys::OpenOptions {
        clock: clock(),
        ..filesys::OpenOptions::writer()
    };
    Archive::create_in(vfs.clone(), base, fs_opts.clock.clone()).expect("archive created");
    let mut archive = Archive::open_in(vfs, base, &fs_opts, opts).expect("archive opens");
    let values: Vec<Vec<u8>> = wink_harness::synth::histories(5, 1, 12, 30)
        .map(|r| r.html)
        .collect();
    let gzip = gzip_de();
    for (run, chunk) in values.chunks(4).enumerate() {
        let items: Vec<Item> = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| Item {
                rev: (run * 4 + i) as u64,
                tid: [3; 16],
                content_type: "text/html",
                // Some with labels: the map's type table holds a labelled string too.
                labels: if i == 0 {
                    &gzip
                } else {
                    &wink::store::Labels::NONE
                },
                value: v,
            })
            .collect();
        archive.add(b"seed/Title", &items).expect("archived");
        archive.commit().expect("committed");
    }
    let map = archive
        .map(b"seed/Title")
        .expect("map reads")
        .expect("a map");
    assert!(map.blocks.len() >= 2, "{} blocks", map.blocks.len());
    let delta = Delta {
        down: vec![(1, [3; 16])],
        ..Delta::default()
    };
    let log = [map.snapshot_record(), delta.record()].concat();
    let mut seeds = both_modes("map", &map.encode(), 4).to_vec();
    seeds.push(("seed-map-log".into(), [&[0u8][..], &log].concat()));
    seeds.push(("seed-map-log-sealed".into(), [&[1u8][..], &log].concat()));
    seeds.extend(archive_map_v2_seeds());
    seeds
}

/// Format 2 map logs of a real archive: two titles (the second's key references the first's),
/// runs of four revisions (a snapshot and deltas), a take-down and a rewritten render.
fn archive_map_v2_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = archive_map_seeds_of(2);
    seeds.extend(archive_map_seeds_of(3));
    seeds
}

/// [`archive_map_v2_seeds`] in format 2 or 3 (whose runs of four are units).
fn archive_map_seeds_of(format: u8) -> Vec<(String, Vec<u8>)> {
    let opts = ArchiveOptions {
        level: 3,
        chain_bytes: 64 << 10,
        format,
        ..ArchiveOptions::default()
    };
    let vfs: Arc<dyn Vfs> = Arc::new(SimDisk::new());
    let base = Path::new("/seed/archive");
    let fs_opts = filesys::OpenOptions {
        clock: clock(),
        ..filesys::OpenOptions::writer()
    };
    Archive::create_in(vfs.clone(), base, fs_opts.clock.clone()).expect("archive created");
    let mut archive = Archive::open_in(vfs, base, &fs_opts, opts).expect("archive opens");
    let values: Vec<Vec<u8>> = wink_harness::synth::histories(6, 1, 12, 30)
        .map(|r| r.html)
        .collect();
    for key in [b"seed/One".as_slice(), b"seed/Two"] {
        for (run, chunk) in values.chunks(4).enumerate() {
            let items: Vec<Item> = chunk
                .iter()
                .enumerate()
                .map(|(i, v)| Item {
                    rev: (run * 4 + i) as u64,
                    tid: [3; 16],
                    content_type: "text/html",
                    labels: &wink::store::Labels::NONE,
                    value: v,
                })
                .collect();
            archive.add(key, &items).expect("archived");
            archive.commit().expect("committed");
        }
    }
    archive.take_down(b"seed/Two", Some(1)).expect("taken down");
    // Rewritten with labels: the map's type table holds a labelled string.
    let rewritten = Item {
        rev: 2,
        tid: [3; 16],
        content_type: "text/plain",
        labels: &gzip_de(),
        value: b"rewritten",
    };
    archive.add(b"seed/Two", &[rewritten]).expect("archived");
    archive.commit().expect("committed");
    let map = archive
        .map_v2(b"seed/Two")
        .expect("map reads")
        .expect("a v2 map");
    assert!(matches!(
        map.frames[0].base,
        wink::archive::v2::map::Base::Title { .. }
    ));
    let log = archive
        .filesys()
        .read(b"m/seed/Two")
        .expect("the map log reads");
    let mut seeds = Vec::new();
    if format == 3 {
        // 18 runs: the map file's first 16 records became part 1, and it starts again with a
        // parts record; the seed is the part, then the map file.
        for run in 0..18 {
            let value = [&values[run % values.len()][..], format!("{run}").as_bytes()].concat();
            let item = Item {
                rev: run as u64,
                tid: [5; 16],
                content_type: "text/html",
                labels: &wink::store::Labels::NONE,
                value: &value,
            };
            archive.add(b"seed/Long", &[item]).expect("archived");
            archive.commit().expect("committed");
        }
        let fs = archive.filesys();
        let part = fs.read(b"p/seed/Long#1").expect("the part reads");
        let head = fs.read(b"m/seed/Long").expect("the map file reads");
        let pieces = [(part.as_slice(), 0), (head.as_slice(), part.len() as u64)];
        let map = wink::archive::v2::map::Map::decode_log_parts(&pieces, Path::new("/seed"))
            .expect("a map in parts decodes");
        assert_eq!(map.frames.len(), 18);
        let log = [part, head].concat();
        seeds.push(("seed-v3-map-parts".into(), [&[0u8][..], &log].concat()));
        seeds.push((
            "seed-v3-map-parts-sealed".into(),
            [&[1u8][..], &log].concat(),
        ));
    }
    seeds.extend(vec![
        (
            format!("seed-v{format}-map-log"),
            [&[0u8][..], &log].concat(),
        ),
        (
            format!("seed-v{format}-map-log-sealed"),
            [&[1u8][..], &log].concat(),
        ),
        (
            format!("seed-v{format}-map-snapshot"),
            [&[0u8][..], &map.snapshot_record()].concat(),
        ),
    ]);
    seeds
}

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut seeds = match target {
        "kvseq_walk" => kvseq_seeds(),
        "hindex_lookup" => hindex_seeds(),
        "perm_read" => perm_seeds(),
        "inode" => inode_seeds(),
        "title_record" => title_record_seeds(),
        "archive_map" => archive_map_seeds(),
        _ => {
            // The superblock target parses only the header: one of each format's.
            let mut all = kvseq_seeds();
            all.truncate(2);
            all.extend(hindex_seeds().into_iter().take(1));
            all.extend(perm_seeds().into_iter().take(1));
            all
        }
    };
    seeds.extend(fixture_seeds(target));
    seeds
}

#[test]
fn seeds_pass_their_harness() {
    for (target, harness) in TARGETS.iter().zip(HARNESSES) {
        for (name, data) in seeds(target) {
            let _guard = Replaying(Path::new(&name));
            harness(&data);
        }
    }
}

#[test]
fn seeds_are_valid_files() {
    for (name, data) in kvseq_seeds() {
        let kv = KvSeq::open(Box::new(MemStorage::from_bytes(&name, data)), false)
            .expect("seed kvseq opens");
        assert_eq!(
            kv.iter(kv.first(), false).filter(|e| e.is_ok()).count(),
            5,
            "{name}"
        );
    }
    let kv = keys_kvseq();
    for (name, data) in hindex_seeds() {
        let index = HIndex::open(Box::new(MemStorage::from_bytes(&name, data)), false)
            .expect("seed hindex opens");
        index.spot_check(kv).expect("seed hindex is consistent");
        assert!(
            index.lookup(&fuzz_key(1), kv).expect("lookup").is_some(),
            "{name}"
        );
    }
    for (name, data) in perm_seeds() {
        let perm = Perm::open(Box::new(MemStorage::from_bytes(&name, data)), false)
            .expect("seed perm opens");
        assert_eq!(perm.len(), 12, "{name}");
    }
    // The record seeds as they are (mode byte 0) decode: the fuzzer starts past the checksums.
    let raw = |seeds: &[(String, Vec<u8>)]| {
        seeds
            .iter()
            .filter(|(name, _)| name.ends_with("-raw"))
            .map(|(name, data)| (name.clone(), data[1..].to_vec()))
            .collect::<Vec<_>>()
    };
    let at = Path::new("seed");
    for (name, data) in raw(&inode_seeds()) {
        Inode::decode(&data, at, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, data) in raw(&title_record_seeds()) {
        TitleRecord::decode(&data, b"en.wikipedia.org/Main_Page", at, 0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Built once: the map seeds come from a real archive.
    let map_seeds = archive_map_seeds();
    for (name, data) in raw(&map_seeds) {
        TitleMap::decode(&data, at, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let log = map_seeds
        .iter()
        .find(|(name, _)| name == "seed-map-log")
        .expect("a log seed");
    let map = TitleMap::decode_log(&log.1[1..], at, 0).expect("the log seed decodes");
    assert!(
        map.entries.iter().any(|e| e.taken_down),
        "the delta took one down"
    );
}

#[test]
#[ignore = "writes fuzz/corpus/*/seed-*; run by hand when the seeds change"]
fn write_seeds() {
    for target in TARGETS {
        let dir = fuzz_dir().join("corpus").join(target);
        fs::create_dir_all(&dir).expect("corpus dir");
        for (name, data) in seeds(target) {
            fs::write(dir.join(name), data).expect("seed writes");
        }
    }
}

// ---- regressions -------------------------------------------------------------------------

fn regression(target: &str, name: &str) -> Vec<u8> {
    fs::read(fuzz_dir().join("regressions").join(target).join(name)).expect("regression input")
}

fn corrupt_at(r: wink::Result<impl std::fmt::Debug>) -> u64 {
    match r {
        Err(Error::Corrupt { offset, .. }) => offset,
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// A hindex whose ENTRIES and AENTRIES said 2,490,378 and 2^35 (of 16 cells) made the first
/// insert of a writable open grow the table to hold 2^35 keys: a 1 TiB allocation, and an abort
/// under the fuzzer. Open now rejects ENTRIES or AENTRIES above HTSIZE as corruption at the
/// variable's value (ENTRIES, the first of the two).
#[test]
fn regression_counts_above_htsize_are_refused() {
    let data = regression("hindex_lookup", "aentries-2pow35-sizes-growth");
    let sb = Superblock::parse(Path::new("r"), &data, data.len() as u64).expect("superblock");
    for writable in [false, true] {
        let r = HIndex::open(
            Box::new(MemStorage::from_bytes("r", data.clone())),
            writable,
        );
        assert_eq!(Some(corrupt_at(r)), sb.value_offset(var::ENTRIES));
    }
}

/// A hindex (CELLSZ 1) whose one used cell, fuzz key 0's, lay behind a free cell on its probe
/// path: lookups could not see the key, so a caller inserted it, and the insert's growth
/// rehashed the unreachable cell back to life — the key was in the table twice, and removing
/// it left the other copy answering. A rebuild now carries over only cells a lookup can reach
/// and reports any other as corruption at that cell.
#[test]
fn regression_growth_does_not_resurrect_unreachable_cells() {
    let data = regression("hindex_lookup", "unreachable-cell-resurrected-by-growth");
    let storage = MemStorage::from_bytes("r", data);
    let mut index = HIndex::open(Box::new(storage.clone()), true).expect("opens");
    let (kv, ptrs) = (keys_kvseq(), key_pointers());
    assert_eq!(
        index.get(3).expect("cell 3"),
        Cell::Used {
            ptr: ptrs[0],
            stored_hash: 0
        }
    );
    assert_eq!(index.lookup(&fuzz_key(0), kv).expect("lookup"), None);
    let before = storage.to_vec();
    let r = index.insert(&fuzz_key(0), ptrs[0], kv);
    assert_eq!(corrupt_at(r), index.superblock().sbsize() + 3 * 8);
    assert_eq!(
        storage.to_vec(),
        before,
        "a failed growth changed the table"
    );
}
