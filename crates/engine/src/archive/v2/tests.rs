//! Format 2 through the archive's interface: runs, reads, keys by budget, references between
//! titles, take-downs, damage, and a v1 title beside v2 ones.

use std::path::Path;
use std::sync::Arc;

use super::map::Base;
use super::*;
use crate::archive::tests::{as_items, flip_datafile_byte, open_sim as open};
use crate::archive::ArchiveOptions;
use crate::clock::{Clock, ManualClock};
use crate::filesys;
use crate::sim::SimDisk;
use crate::vfs::Vfs;

fn opts() -> ArchiveOptions {
    ArchiveOptions {
        level: 3,
        ..ArchiveOptions::default()
    }
}

fn revisions(seed: u64, n: usize) -> Vec<Vec<u8>> {
    crate::synth::histories(seed, 1, n, 30)
        .map(|r| r.html)
        .collect()
}

/// Rewrites `a` into a new archive at `dest` on the same disk; answers the rewrite's report and
/// the new archive, opened with `opts`.
fn rewritten(
    a: &Archive,
    disk: &SimDisk,
    dest: &str,
    opts: ArchiveOptions,
) -> (crate::archive::rewrite::RewriteReport, Archive) {
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1000));
    let open_opts = filesys::OpenOptions {
        clock,
        drop_behind: None,
        ..filesys::OpenOptions::writer()
    };
    let report = a
        .rewrite_into(vfs.clone(), Path::new(dest), &open_opts, |_, _| {})
        .unwrap();
    let b = Archive::open_in(vfs, Path::new(dest), &open_opts, opts).unwrap();
    (report, b)
}

fn reads_back(a: &Archive, key: &[u8], revs: &[Vec<u8>]) {
    for e in a.entries(key).unwrap() {
        a.clear_cache();
        assert_eq!(
            a.read(key, &e).unwrap(),
            revs[e.rev as usize],
            "rev {}",
            e.rev
        );
    }
}

#[test]
fn runs_append_one_frame_per_revision_and_rewrite_nothing() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let revs = revisions(1, 45);
    for (run, chunk) in revs.chunks(5).enumerate() {
        a.add(b"wiki/Page", &as_items(chunk, run * 5, [1; 16]))
            .unwrap();
        a.commit().unwrap();
    }
    let map = a.map_v2(b"wiki/Page").unwrap().unwrap();
    assert_eq!(map.frames.len(), 45);
    assert_eq!(map.frames[0].base, Base::Key);
    assert!(map.frames[1..].iter().all(|f| f.base == Base::Previous));
    assert_eq!(map.segments.len(), 1, "nine appends to one segment");
    assert_eq!(map.segments[0].appends, 9);
    // Nothing superseded: every datafile entry is live (the map log took nine records).
    let due = a.rewrite_due().unwrap();
    assert_eq!((due.dead_entries, due.taken_down), (0, 0), "{due:?}");
    drop(a);
    let a = open(&disk, opts());
    reads_back(&a, b"wiki/Page", &revs);
    let st = a.stats().unwrap();
    assert_eq!((st.titles, st.blocks, st.revisions), (1, 1, 45));
    assert!(a.verify().is_empty(), "{:?}", a.verify());
}

#[test]
fn keys_bound_what_a_read_decodes_and_the_cache_continues_a_chain() {
    let disk = SimDisk::new();
    let revs = revisions(2, 60);
    let largest = revs.iter().map(|r| r.len() as u64).max().unwrap();
    let budget = 8 * largest;
    let mut a = open(
        &disk,
        ArchiveOptions {
            chain_bytes: budget,
            ..opts()
        },
    );
    a.add(b"k", &as_items(&revs, 0, [0; 16])).unwrap();
    let map = a.map_v2(b"k").unwrap().unwrap();
    let keys = map.frames.iter().filter(|f| f.base.is_key()).count();
    assert!(keys >= 2, "{keys} keys");
    for e in a.entries(b"k").unwrap() {
        a.clear_cache();
        let before = a.decompressed_bytes();
        assert_eq!(a.read(b"k", &e).unwrap(), revs[e.rev as usize]);
        let cost = a.decompressed_bytes() - before;
        assert!(cost <= budget, "rev {} decoded {cost} > {budget}", e.rev);
    }
    // In order, each read decodes one frame past the last.
    a.clear_cache();
    let entries = a.entries(b"k").unwrap();
    a.read(b"k", &entries[10]).unwrap();
    let before = a.decompressed_bytes();
    a.read(b"k", &entries[11]).unwrap();
    let next = map.frames[11];
    if next.base == Base::Previous {
        assert_eq!(a.decompressed_bytes() - before, u64::from(next.raw));
    }
}

/// A page that goes back and forth between two looks (an A/B test, a vandal and the revert):
/// each revision deltas from the last of its own look, not from the one before it.
#[test]
fn a_revision_deltas_from_the_earlier_frame_it_resembles() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let looks = [revisions(7, 1).remove(0), revisions(8, 1).remove(0)];
    let revs: Vec<Vec<u8>> = (0..24)
        .map(|i| {
            let edit = format!("<p>edit {i}</p>");
            [looks[i % 2].as_slice(), edit.as_bytes()].concat()
        })
        .collect();
    // Two runs: the second starts from the title's last frame and the frames of its own run.
    a.add(b"ab", &as_items(&revs[..12], 0, [0; 16])).unwrap();
    a.add(b"ab", &as_items(&revs[12..], 12, [0; 16])).unwrap();
    a.commit().unwrap();
    let map = a.map_v2(b"ab").unwrap().unwrap();
    assert_eq!(
        map.frames[1].base,
        Base::Previous,
        "only one frame to delta from"
    );
    for n in 2..24 {
        if n == 12 {
            continue; // the first of the second run has only the title's last frame
        }
        let parent = chain::parent(&map, n).unwrap();
        assert_eq!(
            parent % 2,
            n % 2,
            "frame {n} deltas from {parent}, of the other look"
        );
    }
    let same_look: u32 = (2..24)
        .filter(|n| *n != 12)
        .map(|n| map.frames[n].stored)
        .sum();
    assert!(same_look < 21 * 100, "{same_look} bytes for 21 small edits");
    assert!(map.frames[12].stored > 500, "against the other look");
    reads_back(&a, b"ab", &revs);
    assert!(a.verify().is_empty(), "{:?}", a.verify());
    // A path skips the other look: frame 23 decodes 0, 1, 3, ..., 23 (12 frames), not 24.
    a.clear_cache();
    let before = a.decompressed_bytes();
    let entries = a.entries(b"ab").unwrap();
    assert_eq!(a.read(b"ab", &entries[23]).unwrap(), revs[23]);
    let decoded = a.decompressed_bytes() - before;
    let path: u64 = chain::path(&map, 23)
        .iter()
        .map(|&i| u64::from(map.frames[i].raw))
        .sum();
    assert_eq!(decoded, path);
    assert!(chain::path(&map, 23).len() <= 13);
}

#[test]
fn a_key_references_another_titles_key_and_reads_after_a_reopen() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let one = revisions(3, 6);
    // A second title of the same site: the same page with a different tail.
    let two: Vec<Vec<u8>> = one
        .iter()
        .map(|r| [r.as_slice(), b"<footer>other title</footer>"].concat())
        .collect();
    a.add(b"site/One", &as_items(&one, 0, [1; 16])).unwrap();
    a.add(b"site/Two", &as_items(&two, 0, [2; 16])).unwrap();
    a.commit().unwrap();
    let map = a.map_v2(b"site/Two").unwrap().unwrap();
    assert_eq!(map.refs, vec![b"site/One".to_vec()]);
    assert_eq!(map.frames[0].base, Base::Title { title: 0, frame: 0 });
    assert!(map.frames[0].stored < a.map_v2(b"site/One").unwrap().unwrap().frames[0].stored / 4);
    drop(a);
    let a = open(&disk, opts());
    reads_back(&a, b"site/Two", &two);
    reads_back(&a, b"site/One", &one);
    assert!(a.verify().is_empty());
}

#[test]
fn identical_revisions_share_a_frame_reruns_add_nothing_and_take_downs_hide() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let revs = revisions(4, 4);
    assert_eq!(a.add(b"k", &as_items(&revs, 0, [0; 16])).unwrap(), 4);
    assert_eq!(a.add(b"k", &as_items(&revs, 0, [0; 16])).unwrap(), 0);
    let again = Item {
        rev: 9,
        tid: [9; 16],
        content_type: "text/html",
        labels: &crate::store::Labels::NONE,
        value: &revs[1],
    };
    let twice = Item { rev: 10, ..again };
    assert_eq!(a.add(b"k", &[again, twice]).unwrap(), 2);
    let map = a.map_v2(b"k").unwrap().unwrap();
    assert_eq!(map.frames.len(), 4);
    let frame = |rev: u64| map.entries.iter().find(|e| e.rev == rev).unwrap().block;
    assert_eq!((frame(9), frame(10)), (frame(1), frame(1)));
    // A rewritten render: its new bytes replace the archived ones.
    let new = Item {
        rev: 2,
        tid: [0; 16],
        content_type: "text/html",
        labels: &crate::store::Labels::NONE,
        value: b"rewritten",
    };
    assert_eq!(a.add(b"k", &[new]).unwrap(), 1);
    assert_eq!(a.take_down(b"k", Some(1)).unwrap(), 1);
    a.commit().unwrap();
    drop(a);
    let a = open(&disk, opts());
    let live = a.entries(b"k").unwrap();
    assert_eq!(
        live.iter().map(|e| e.rev).collect::<Vec<_>>(),
        vec![0, 3, 9, 10, 2]
    );
    let e2 = live.iter().find(|e| e.rev == 2).unwrap();
    assert_eq!(a.read(b"k", e2).unwrap(), b"rewritten");
    let e9 = live.iter().find(|e| e.rev == 9).unwrap();
    assert_eq!(a.read(b"k", e9).unwrap(), revs[1]);
}

#[test]
fn a_damaged_frame_names_segment_title_and_offset_and_spares_others() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let revs = revisions(5, 6);
    for key in [b"t/one".as_slice(), b"t/two"] {
        a.add(key, &as_items(&revs, 0, [0; 16])).unwrap();
    }
    a.commit().unwrap();
    let name = segment_name(b"t/one", 0);
    let ext = a.filesys().extents(&name).unwrap().unwrap()[0];
    let map = a.map_v2(b"t/one").unwrap().unwrap();
    let f = map.frames[3];
    let at = ext.offset + f.offset + u64::from(f.stored) / 2;
    flip_datafile_byte(&disk, at);
    a.clear_cache();
    let e = a.entries(b"t/one").unwrap()[4].clone();
    let err = a.read(b"t/one", &e).unwrap_err();
    let text = err.to_string();
    assert!(
        err.is_corruption() && text.contains("v/t/one#0") && text.contains("frame 3"),
        "{text}"
    );
    assert!(
        text.contains(&(ext.offset + f.offset).to_string()),
        "{text}"
    );
    reads_back(&a, b"t/two", &revs);
    assert!(!a.verify().is_empty());
}

#[test]
fn a_v1_title_and_v2_titles_live_side_by_side() {
    let disk = SimDisk::new();
    let revs = revisions(6, 12);
    let mut a = open(
        &disk,
        ArchiveOptions {
            format: 1,
            ..opts()
        },
    );
    a.add(b"old", &as_items(&revs[..6], 0, [0; 16])).unwrap();
    a.commit().unwrap();
    drop(a);
    let mut a = open(&disk, opts());
    a.add(b"old", &as_items(&revs[6..], 6, [0; 16])).unwrap();
    a.add(b"new", &as_items(&revs, 0, [0; 16])).unwrap();
    a.commit().unwrap();
    assert!(a.map(b"old").unwrap().is_some(), "a v1 title stays v1");
    assert!(a.map_v2(b"new").unwrap().is_some());
    reads_back(&a, b"old", &revs);
    reads_back(&a, b"new", &revs);
    assert!(a.verify().is_empty());
    assert_eq!(a.stats().unwrap().revisions, 24);
}

#[test]
fn a_v2_rewrite_purges_a_taken_down_revision() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let mut revs = revisions(7, 10);
    let marker = b"MARKER-OF-A-TAKE-DOWN";
    let at = revs[4].len() / 2;
    revs[4][at..at + marker.len()].copy_from_slice(marker);
    a.add(b"k", &as_items(&revs, 0, [0; 16])).unwrap();
    a.take_down(b"k", Some(4)).unwrap();
    a.commit().unwrap();
    let due = a.rewrite_due().unwrap();
    assert_eq!(due.taken_down, 1, "{due:?}");
    let (report, b) = rewritten(&a, &disk, "/a/new", opts());
    assert_eq!((report.revisions, report.purged), (9, 1));
    let map = b.map_v2(b"k").unwrap().unwrap();
    assert_eq!(map.frames.len(), 9);
    let mut found = false;
    b.each_frame(b"k", &map, |_, raw| {
        found |= raw.windows(marker.len()).any(|w| w == marker);
        Ok(())
    })
    .unwrap();
    assert!(!found);
    reads_back(&b, b"k", &revs);
    assert!(b.entries(b"k").unwrap().iter().all(|e| e.rev != 4));
    assert!(!b.rewrite_due().unwrap().is_due());
}

#[test]
fn a_v2_title_taken_down_whole_is_purged_even_when_damaged() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts());
    let revs = revisions(8, 8);
    // "kept" first: "gone"'s key may be compressed against "kept"'s, never the other way.
    a.add(b"kept", &as_items(&revs, 0, [0; 16])).unwrap();
    a.add(b"gone", &as_items(&revs, 0, [0; 16])).unwrap();
    assert_eq!(a.take_down(b"gone", None).unwrap(), 8);
    a.commit().unwrap();
    let ext = a
        .filesys()
        .extents(&segment_name(b"gone", 0))
        .unwrap()
        .unwrap()[0];
    let path = filesys::file_path(Path::new("/a/archive"), "data");
    let s = disk.open(&path, true).unwrap();
    s.write_at(&[0xAA; 64], ext.offset + 8).unwrap();
    let (report, b) = rewritten(&a, &disk, "/a/new", opts());
    assert_eq!((report.titles, report.purged, report.taken_down), (2, 8, 8));
    let map = b.map_v2(b"gone").unwrap().unwrap();
    assert!(map.frames.is_empty() && map.entries.iter().all(Entry::is_purged));
    reads_back(&b, b"kept", &revs);
}

fn opts3() -> ArchiveOptions {
    ArchiveOptions {
        format: 3,
        ..opts()
    }
}

/// Format 3: a run's revisions are grouped into units of at most UNIT_MEMBERS, one zstd frame
/// each; runs never share a unit; every revision reads back alone, cold, and the map reopens.
#[test]
fn format_3_groups_a_run_into_units_that_read_back_member_by_member() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts3());
    let revs = revisions(3, 45);
    a.add(b"wiki/Bulk", &as_items(&revs, 0, [1; 16])).unwrap();
    for (run, chunk) in revs.chunks(10).enumerate() {
        a.add(b"wiki/Runs", &as_items(chunk, run * 10, [1; 16]))
            .unwrap();
        a.commit().unwrap();
    }
    a.commit().unwrap();
    drop(a);
    let a = open(&disk, opts3());
    for (key, heads) in [(b"wiki/Bulk".as_slice(), 3), (b"wiki/Runs", 5)] {
        let map = a.map_v2(key).unwrap().unwrap();
        assert!(map.units);
        assert_eq!(map.frames.len(), 45);
        let h: Vec<usize> = (0..45).filter(|&i| map.frames[i].base.is_head()).collect();
        assert_eq!(h.len(), heads, "{h:?}");
        assert!(map.frames.iter().all(|f| f.base.is_head() || f.stored == 0));
        reads_back(&a, key, &revs);
        // In reverse, each read decodes from the cache or its unit's path, never wrong.
        for e in a.entries(key).unwrap().iter().rev() {
            assert_eq!(a.read(key, e).unwrap(), revs[e.rev as usize]);
        }
    }
    assert!(a.verify().is_empty(), "{:?}", a.verify());
}

/// A v2 title stays v2 in an archive that writes format 3, and a rewrite converts it.
#[test]
fn format_3_beside_format_2_and_a_rewrite_converts() {
    let disk = SimDisk::new();
    let revs = revisions(4, 20);
    let mut a = open(&disk, opts());
    a.add(b"old", &as_items(&revs[..10], 0, [2; 16])).unwrap();
    a.commit().unwrap();
    drop(a);
    let mut a = open(&disk, opts3());
    a.add(b"old", &as_items(&revs[10..], 10, [2; 16])).unwrap();
    a.add(b"new", &as_items(&revs, 0, [2; 16])).unwrap();
    a.commit().unwrap();
    assert!(!a.map_v2(b"old").unwrap().unwrap().units);
    assert!(a.map_v2(b"new").unwrap().unwrap().units);
    reads_back(&a, b"old", &revs);
    reads_back(&a, b"new", &revs);
    let (_, b) = rewritten(&a, &disk, "/a/archive3", opts3());
    for key in [b"old".as_slice(), b"new"] {
        assert!(b.map_v2(key).unwrap().unwrap().units);
        reads_back(&b, key, &revs);
    }
    assert!(b.verify().is_empty(), "{:?}", b.verify());
}

/// Format 3: a map file full of records becomes the next part file and the map file starts
/// again with a parts record, instead of the whole map rewritten; after MAX_PARTS parts the
/// map is one snapshot again and its parts are gone. Every state reads back after a reopen; a
/// lost or damaged part fails the title's map as damage, and spares the other title.
#[test]
fn format_3_map_logs_span_part_files_until_a_snapshot_takes_them() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts3());
    let revs = revisions(6, 270);
    a.add(b"other", &as_items(&revs[..5], 0, [4; 16])).unwrap();
    let parts_of = |a: &Archive| map::log_parts(&a.fs.read(&map_name(b"t")).unwrap());
    for (run, chunk) in revs.chunks(1).enumerate() {
        a.add(b"t", &as_items(chunk, run, [4; 16])).unwrap();
        a.commit().unwrap();
        let runs = run + 1;
        // Part k is made at run 1 + 16k (the map file holds 16 records), until MAX_PARTS.
        let expect = if runs <= 256 { (runs - 1) / 16 } else { 0 };
        assert_eq!(usize::from(parts_of(&a)), expect, "after {runs} runs");
        if runs % 37 == 0 || runs == 241 || runs == 257 {
            drop(a);
            a = open(&disk, opts3());
            let map = a.map_v2(b"t").unwrap().unwrap();
            assert_eq!(map.frames.len(), runs);
            assert_eq!(map.entries.len(), runs);
        }
    }
    assert!(a.fs.stat(&part_name(b"t", 1)).unwrap().is_none());
    let all = revs.len();
    let sample: Vec<usize> = (0..all).step_by(23).chain([all - 1]).collect();
    let check = |a: &Archive| {
        let entries = a.entries(b"t").unwrap();
        for &i in &sample {
            a.clear_cache();
            assert_eq!(
                a.read(b"t", &entries[i]).unwrap(),
                revs[entries[i].rev as usize]
            );
        }
    };
    check(&a);
    assert!(a.verify().is_empty(), "{:?}", a.verify());
    // 10 runs more: one part again, then damage to it.
    for run in 0..10 {
        a.add(b"t", &as_items(&revs[run..run + 1], all + run, [4; 16]))
            .unwrap();
        a.commit().unwrap();
    }
    assert_eq!(parts_of(&a), 1);
    check(&a);
    let part = part_name(b"t", 1);
    let extents = a.fs.extents(&part).unwrap().unwrap();
    drop(a);
    flip_datafile_byte(&disk, extents[0].offset + 6);
    let a = open(&disk, opts3());
    let err = a.map_v2(b"t").unwrap_err();
    assert!(err.is_corruption(), "{err}");
    reads_back(&a, b"other", &revs[..5]);
    drop(a);
    flip_datafile_byte(&disk, extents[0].offset + 6);
    let mut a = open(&disk, opts3());
    check(&a);
    assert!(a.fs.delete(&part).unwrap());
    a.commit().unwrap();
    drop(a);
    let a = open(&disk, opts3());
    let err = a.map_v2(b"t").unwrap_err();
    assert!(err.is_corruption(), "{err}");
    reads_back(&a, b"other", &revs[..5]);
}

/// Format 3: a page that alternates between two looks (an A/B test) in runs of 10: the unit of
/// each run after the first is compressed against the whole unit before (base `After`), which
/// holds both looks, and is smaller for it; every revision reads back, after a reopen, cold and
/// through the cache, and after a rewrite.
#[test]
fn format_3_a_unit_after_a_unit_matches_all_of_it() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts3());
    let looks = [revisions(7, 1).remove(0), revisions(8, 1).remove(0)];
    let revs: Vec<Vec<u8>> = (0..40)
        .map(|i| [looks[i % 2].as_slice(), format!("<p>{i}</p>").as_bytes()].concat())
        .collect();
    for (run, chunk) in revs.chunks(10).enumerate() {
        a.add(b"ab", &as_items(chunk, run * 10, [5; 16])).unwrap();
        a.commit().unwrap();
    }
    drop(a);
    let a = open(&disk, opts3());
    let map = a.map_v2(b"ab").unwrap().unwrap();
    let heads: Vec<Base> = map
        .frames
        .iter()
        .map(|f| f.base)
        .filter(Base::is_head)
        .collect();
    assert_eq!(heads.len(), 4, "{heads:?}");
    assert!(heads[1..].iter().all(|b| *b == Base::After), "{heads:?}");
    // Against the unit before, a run's unit costs about its own changes: far less than the
    // first unit, which holds both looks whole.
    let stored: Vec<u32> = map
        .frames
        .iter()
        .map(|f| f.stored)
        .filter(|s| *s > 0)
        .collect();
    assert!(stored[1..].iter().all(|s| *s * 4 < stored[0]), "{stored:?}");
    reads_back(&a, b"ab", &revs);
    for e in a.entries(b"ab").unwrap().iter().rev() {
        assert_eq!(a.read(b"ab", e).unwrap(), revs[e.rev as usize]);
    }
    assert!(a.verify().is_empty(), "{:?}", a.verify());
    let (_, b) = rewritten(&a, &disk, "/a/archive-ab", opts3());
    reads_back(&b, b"ab", &revs);
    assert!(b.verify().is_empty(), "{:?}", b.verify());
}

/// Format 3: a read checks only the last member of a unit it needs, and a failed read is decoded
/// again checking every member: whatever byte of a unit is damaged, a read answers right or
/// fails naming the unit's first frame (zstd refused its bytes) or the first member whose own
/// read fails (it decoded to other bytes), never the member asked for behind a damaged one.
#[test]
fn format_3_damage_names_the_first_damaged_member_of_a_unit() {
    let disk = SimDisk::new();
    let mut a = open(&disk, opts3());
    // Incompressible members (zstd stores their literals raw, so that many flips decode to
    // other bytes rather than fail), each the one before with a few bytes changed.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut page: Vec<u8> = (0..6000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    // The first member small and of its own: the incompressible bytes lie in the second.
    let mut revs = vec![b"<p>a short first page</p>".to_vec()];
    for i in 0..5u8 {
        page[usize::from(i) * 1000] = i;
        revs.push(page.clone());
    }
    a.add(b"wiki/Unit", &as_items(&revs, 0, [1; 16])).unwrap();
    a.commit().unwrap();
    let map = a.map_v2(b"wiki/Unit").unwrap().unwrap();
    assert!(map.frames[1..].iter().all(|f| f.base == Base::Unit));
    let ext = a
        .filesys()
        .extents(&segment_name(b"wiki/Unit", 0))
        .unwrap()
        .unwrap()[0];
    let entries = a.entries(b"wiki/Unit").unwrap();
    let named = |text: &str| -> usize {
        let at = text.find(": frame ").expect(text) + 8;
        let digits: String = text[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    let (mut wrong_bytes, stored) = (0, u64::from(map.frames[0].stored));
    for k in (0..stored).step_by(7) {
        let at = ext.offset + map.frames[0].offset + k;
        flip_datafile_byte(&disk, at);
        let mut results = Vec::new();
        for e in &entries {
            a.clear_cache();
            results.push(match a.read(b"wiki/Unit", e) {
                Ok(v) => {
                    assert_eq!(v, revs[e.rev as usize], "a wrong answer at byte {k}");
                    None
                }
                Err(err) => {
                    assert!(err.is_corruption(), "{err}");
                    Some(named(&err.to_string()))
                }
            });
        }
        let first = results.iter().position(Option::is_some);
        for (i, r) in results.iter().enumerate() {
            if let Some(j) = *r {
                assert!(
                    j == 0 || Some(j) == first,
                    "byte {k}: read {i} names frame {j}"
                );
                wrong_bytes += usize::from(j > 0 && j < i);
            }
        }
        flip_datafile_byte(&disk, at);
    }
    // Some flips decoded to other bytes in a member before the one read.
    assert!(wrong_bytes > 0, "{wrong_bytes}");
}
