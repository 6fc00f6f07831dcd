//! Verifiable take-down in the archive tier: revisions carrying a unique marker are taken down —
//! one in the middle of a block of several frames, one as the last revision of a block, every
//! revision of a title — in a v1 archive, which is rewritten (into format 2). The source still
//! holds the marker in its decompressed blocks (checked first, so the checks below can fail); the
//! new archive holds it in no file and in no frame decoded with its prefix, while every readable
//! revision reads back byte for byte, take-downs stay, and a damaged source block makes the
//! rewrite fail with an error naming file and block instead of dropping a revision.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wink::archive::map::TitleMap;
use wink::archive::{Archive, ArchiveOptions, Item};
use wink::clock::{Clock, ManualClock};
use wink::filesys;
use wink::vfs::{RealFs, Vfs};
use wink_harness::sim::SimDisk;

const MARKER: &[u8] = b"TAKEDOWN-MARKER-7f3a9c";
const MID: &[u8] = b"wiki/Mid";
const LAST: &[u8] = b"wiki/Last";
const WHOLE: &[u8] = b"wiki/Whole";
const PLAIN: &[u8] = b"wiki/Plain";
const PER_RUN: usize = 2;
const TID: [u8; 16] = [3; 16];

mod common;
use common::{contains, decompressed_blocks};

/// The sources are v1 archives (what the markers' places are picked by); a rewrite writes v2.
fn options() -> ArchiveOptions {
    ArchiveOptions {
        block_bytes: 128 << 10,
        level: 3,
        format: 1,
        ..ArchiveOptions::default()
    }
}

fn fs_open() -> filesys::OpenOptions {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_000_000));
    filesys::OpenOptions {
        clock,
        ..filesys::OpenOptions::writer()
    }
}

fn open(vfs: Arc<dyn Vfs>, base: &Path) -> Archive {
    if !vfs.exists(&filesys::file_path(base, "data")) {
        Archive::create_in(vfs.clone(), base, fs_open().clock).unwrap();
    }
    Archive::open_in(vfs, base, &fs_open(), options()).unwrap()
}

/// Archives `revs` as revisions 0.. of `key`, a few per run (so blocks hold several frames).
fn archive(a: &mut Archive, key: &[u8], revs: &[Vec<u8>]) {
    for (run, chunk) in revs.chunks(PER_RUN).enumerate() {
        let items: Vec<Item> = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| Item {
                rev: (run * PER_RUN + i) as u64,
                tid: TID,
                content_type: "text/html",
                labels: &wink::store::Labels::NONE,
                value: v,
            })
            .collect();
        a.add(key, &items).unwrap();
        a.commit().unwrap();
    }
}

/// The map the revisions get: blocks are cut by lengths only, so a scratch archive of the same
/// lengths shows where a revision will lie before its marker is planted.
fn layout(revs: &[Vec<u8>]) -> TitleMap {
    let mut a = open(Arc::new(SimDisk::new()), Path::new("/scratch"));
    archive(&mut a, b"t", revs);
    a.map(b"t").unwrap().unwrap()
}

/// Overwrites bytes in the middle of a revision with the marker (same length, same layout).
fn plant(rev: &mut [u8], tag: usize) {
    let mark = [MARKER, format!("-{tag}").as_bytes()].concat();
    let at = rev.len() / 2;
    rev[at..at + mark.len()].copy_from_slice(&mark);
}

fn marked_blocks(a: &Archive) -> Vec<(String, u32)> {
    decompressed_blocks(a)
        .into_iter()
        .filter(|(_, _, content)| contains(content, MARKER))
        .map(|(key, n, _)| (String::from_utf8_lossy(&key).into_owned(), n))
        .collect()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

struct Fixture {
    _tmp: tempfile::TempDir,
    src: PathBuf,
    revs: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    gone: BTreeMap<Vec<u8>, Vec<u64>>,
}

/// Four titles of realistic histories; markers planted and taken down as the module doc says.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src/archive");
    std::fs::create_dir_all(src.parent().unwrap()).unwrap();
    let mut a = open(Arc::new(RealFs), &src);
    let mut revs = BTreeMap::new();
    let mut gone = BTreeMap::new();
    for (i, key) in [MID, LAST, WHOLE, PLAIN].into_iter().enumerate() {
        let mut title: Vec<Vec<u8>> = wink_harness::synth::histories(40 + i as u64, 1, 40, 30)
            .map(|r| r.html)
            .collect();
        let map = layout(&title);
        assert!(map.blocks.len() >= 4, "{} blocks", map.blocks.len());
        let down: Vec<u64> = match key {
            MID => {
                // A revision with revisions before and after it in the same block, which holds
                // several frames: later frames were compressed against it.
                let block = (1..map.blocks.len() - 1)
                    .find(|&n| map.blocks[n].frames.len() >= 3)
                    .expect("a block of several frames") as u32;
                let in_block: Vec<_> = map.entries.iter().filter(|e| e.block == block).collect();
                vec![in_block[in_block.len() / 2].rev]
            }
            LAST => {
                let end = map.blocks[1].frames.iter().map(|f| f.raw).sum::<u64>();
                let e = map
                    .entries
                    .iter()
                    .find(|e| e.block == 1 && e.offset + e.len == end);
                vec![e.expect("block 1's last revision").rev]
            }
            WHOLE => (0..title.len() as u64).filter(|r| r % 3 == 0).collect(),
            _ => Vec::new(),
        };
        for &rev in &down {
            plant(&mut title[rev as usize], rev as usize);
        }
        archive(&mut a, key, &title);
        let taken = if key == WHOLE {
            a.take_down(key, None).unwrap()
        } else {
            down.iter()
                .map(|&r| a.take_down(key, Some(r)).unwrap())
                .sum()
        };
        a.commit().unwrap();
        let down = if key == WHOLE {
            (0..title.len() as u64).collect()
        } else {
            down
        };
        assert_eq!(taken, down.len());
        revs.insert(key.to_vec(), title);
        gone.insert(key.to_vec(), down);
    }
    Fixture {
        _tmp: tmp,
        src,
        revs,
        gone,
    }
}

fn rewrite(src: &Archive, dest: &Path) -> wink::Result<wink::archive::rewrite::RewriteReport> {
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    src.rewrite_into(Arc::new(RealFs), dest, &fs_open(), |_, _| {})
}

#[test]
fn taken_down_markers_are_in_no_file_and_no_decompressed_block_of_the_rewritten_archive() {
    let f = fixture();
    let src = open(Arc::new(RealFs), &f.src);
    // The source holds every marker: in the middle of a block, ending block 1, all over WHOLE.
    let before = marked_blocks(&src);
    for key in [MID, LAST, WHOLE] {
        let key = String::from_utf8_lossy(key);
        assert!(before.iter().any(|(k, _)| *k == key), "{key}: {before:?}");
    }
    assert!(before.contains(&("wiki/Last".to_string(), 1)), "{before:?}");
    // And its datafile holds it as it is (literals), so the search of the new files can fail.
    let raw = std::fs::read(filesys::file_path(&f.src, "data")).unwrap();
    assert!(contains(&raw, MARKER));
    let due = src.rewrite_due().unwrap();
    assert!(due.is_due(), "{due:?}");
    assert_eq!(due.taken_down, 2 + 40);

    let dest = f._tmp.path().join("new/archive");
    let report = rewrite(&src, &dest).unwrap();
    assert_eq!(
        (report.titles, report.titles_copied, report.titles_reencoded),
        (4, 0, 4)
    );
    assert_eq!(
        (report.revisions, report.taken_down, report.purged),
        (39 + 39 + 40, 42, 42)
    );

    let new = open(Arc::new(RealFs), &dest);
    let after = marked_blocks(&new);
    assert!(after.is_empty(), "marker in decompressed blocks {after:?}");
    let files = files_under(dest.parent().unwrap());
    assert!(files.len() >= 3, "{files:?}");
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        assert!(!contains(&bytes, MARKER), "marker in {}", path.display());
    }
    // Every remaining revision, byte for byte; every taken-down one still taken down.
    for (key, title) in &f.revs {
        let gone = &f.gone[key];
        let live = new.entries(key).unwrap();
        assert_eq!(live.len(), title.len() - gone.len(), "{key:?}");
        for e in &live {
            assert!(!gone.contains(&e.rev));
            assert_eq!(&new.read(key, e).unwrap(), &title[e.rev as usize]);
        }
        let map = new.map_v2(key).unwrap().unwrap();
        for rev in gone {
            let record = map.entries.iter().find(|e| e.rev == *rev).unwrap();
            assert!(record.taken_down && record.is_purged(), "{record:?}");
        }
    }
    assert!(new.verify().is_empty());
    assert!(!new.rewrite_due().unwrap().is_due());
}

#[test]
fn a_damaged_source_block_fails_the_rewrite_with_file_and_block_named() {
    let f = fixture();
    let src = open(Arc::new(RealFs), &f.src);
    let data = filesys::file_path(&f.src, "data");
    let block = b"b/wiki/Plain#2";
    let extent = src.filesys().extents(block).unwrap().unwrap()[0];
    drop(src);
    let pristine = std::fs::read(&data).unwrap();
    for (i, at) in [extent.len / 3, extent.len / 2, 2 * extent.len / 3]
        .into_iter()
        .enumerate()
    {
        let mut bytes = pristine.clone();
        bytes[(extent.offset + at) as usize] ^= 0x5a;
        std::fs::write(&data, &bytes).unwrap();
        let src = open(Arc::new(RealFs), &f.src);
        let dest = f._tmp.path().join(format!("new{i}/archive"));
        let err = rewrite(&src, &dest).unwrap_err();
        let text = err.to_string();
        assert!(err.is_corruption(), "{text}");
        assert!(
            text.contains(&*data.to_string_lossy()) && text.contains("b/wiki/Plain#2"),
            "{text}"
        );
        let vfs = RealFs;
        Archive::remove_in(&vfs, &dest).unwrap();
        assert!(files_under(dest.parent().unwrap()).is_empty());
    }
}
