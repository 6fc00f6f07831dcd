//! Damage in a format 3 unit: a byte flipped at several places of one title's unit fails
//! revisions of that title, with the archive's datafile and an offset, never with a wrong
//! answer; the other title reads whole (or, where its key references the damaged title's key,
//! fails naming that title's unit).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use wink::archive::{Archive, ArchiveOptions, Item};
use wink::clock::{Clock, ManualClock};
use wink::filesys::OpenOptions;
use wink::vfs::{RealFs, Vfs};
use wink::Error;

fn open(base: &Path) -> Archive {
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_700_000_000));
    let open = OpenOptions {
        clock,
        ..OpenOptions::writer()
    };
    let opts = ArchiveOptions {
        format: 3,
        level: 3,
        ..ArchiveOptions::default()
    };
    Archive::open_in(vfs, base, &open, opts).unwrap()
}

#[test]
fn damage_in_a_unit_fails_only_its_title_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("archive");
    std::fs::create_dir_all(&base).unwrap();
    let base = base.join("a");
    let revs: Vec<Vec<u8>> = wink_harness::synth::histories(5, 1, 20, 30)
        .map(|r| r.html)
        .collect();
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_700_000_000));
    Archive::create_in(vfs, &base, clock).unwrap();
    let mut a = open(&base);
    for key in [b"wiki/Hit".as_slice(), b"wiki/Spared"] {
        let items: Vec<Item> = revs
            .iter()
            .enumerate()
            .map(|(i, v)| Item {
                rev: i as u64,
                tid: [7; 16],
                content_type: "text/html",
                labels: &wink::store::Labels::NONE,
                value: v,
            })
            .collect();
        a.add(key, &items).unwrap();
    }
    a.commit().unwrap();
    let map = a.map_v2(b"wiki/Hit").unwrap().unwrap();
    assert!(map.units);
    assert!(
        map.frames.iter().any(|f| !f.base.is_head()),
        "a unit of several"
    );
    let unit = map.frames[0];
    let extents = a.filesys().extents(b"v/wiki/Hit#0").unwrap().unwrap();
    let data = a.filesys().data().path().to_path_buf();
    drop(a);
    let start = extents[0].offset + unit.offset;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    for k in [
        0,
        1,
        7,
        u64::from(unit.stored) / 2,
        u64::from(unit.stored) - 1,
    ] {
        let at = start + k;
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ 0x20], at).unwrap();
        let a = open(&base);
        let mut failed = 0;
        for e in a.entries(b"wiki/Hit").unwrap() {
            a.clear_cache();
            match a.read(b"wiki/Hit", &e) {
                Ok(v) => assert_eq!(v, revs[e.rev as usize], "a wrong answer at flip {k}"),
                Err(Error::Corrupt { path, offset, .. }) => {
                    assert_eq!(path, data);
                    assert!(offset >= extents[0].offset, "offset {offset}");
                    failed += 1;
                }
                Err(e) => panic!("flip {k}: {e}"),
            }
        }
        assert!(failed > 0, "flip {k} went unnoticed");
        // The other title reads whole, unless its key references the damaged one: then its
        // reads fail naming the damaged title's unit, never with a wrong answer.
        let refs = !a.map_v2(b"wiki/Spared").unwrap().unwrap().refs.is_empty();
        for e in a.entries(b"wiki/Spared").unwrap() {
            a.clear_cache();
            match a.read(b"wiki/Spared", &e) {
                Ok(v) => assert_eq!(v, revs[e.rev as usize]),
                Err(Error::Corrupt { what, .. }) if refs => {
                    assert!(what.contains("\"wiki/Hit\""), "{what}")
                }
                Err(e) => panic!("flip {k}, the other title: {e}"),
            }
        }
        file.write_all_at(&b, at).unwrap();
    }
}
