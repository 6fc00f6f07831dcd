//! Tests of the file checks.

use super::*;
use crate::format::hindex::{HIndex, HIndexOptions};
use crate::format::kvseq::KvSeqOptions;
use crate::format::perm::{Pair, Perm, PermOptions, PAIR_SIZE};
use crate::format::repr::Repr;
use crate::format::superblock::{var, Purpose};
use std::fs;

fn kvseq(dir: &Path, name: &str, opts: &KvSeqOptions, n: usize) -> (PathBuf, Vec<KvPointer>) {
    let path = dir.join(name);
    let mut kv = KvSeq::create_path(&path, opts).unwrap();
    let ptrs = (0..n)
        .map(|i| {
            kv.append(
                format!("key-{i}").as_bytes(),
                format!("value {i}").as_bytes(),
            )
            .unwrap()
        })
        .collect();
    kv.sync().unwrap();
    (path, ptrs)
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    let mut data = fs::read(path).unwrap();
    data[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
    fs::write(path, data).unwrap();
}

fn only(report: &Report, severity: Severity, offset: u64, text: &str) {
    assert_eq!(report.problems.len(), 1, "{:#?}", report.problems);
    let p = &report.problems[0];
    assert_eq!((p.severity, p.offset), (severity, Some(offset)), "{p}");
    assert!(p.what.contains(text), "{p}");
}

#[test]
fn clean_kvseq_and_damage_at_the_right_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ptrs) = kvseq(dir.path(), "a.kvseq", &KvSeqOptions::default(), 3);
    let report = check_file(&path);
    assert!(report.is_clean(true), "{:#?}", report.problems);
    assert_eq!(report.summary, "kvseq \"KVSEQ\", 3 entries, 3 live");
    patch(&path, ptrs[1].0, &[7]);
    only(&check_file(&path), Severity::Error, ptrs[1].0, "delflag");
}

#[test]
fn alignment_gaps_and_value_padding_must_be_zero() {
    let dir = tempfile::tempdir().unwrap();
    let opts = KvSeqOptions {
        valrepr: Repr::Padded { max: 20 },
        align: 64,
        ..KvSeqOptions::default()
    };
    let (path, ptrs) = kvseq(dir.path(), "p.kvseq", &opts, 3);
    assert!(check_file(&path).is_clean(true));
    let kv = KvSeq::open_path(&path, false).unwrap();
    let layout = kv.layout(ptrs[0]).unwrap();
    drop(kv);
    patch(&path, layout.end, &[1]);
    only(&check_file(&path), Severity::Error, layout.end, "gap");
    patch(&path, layout.end, &[0]);
    let pad = layout.value_offset + layout.value_len + 2;
    patch(&path, pad, &[9]);
    only(&check_file(&path), Severity::Error, pad, "value padding");
}

#[test]
fn counts_and_syncsize_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = kvseq(dir.path(), "c.kvseq", &KvSeqOptions::default(), 2);
    let sb = KvSeq::open_path(&path, false).unwrap().superblock().clone();
    let entries_at = sb.value_offset(var::ENTRIES).unwrap();
    patch(&path, entries_at, &5i64.to_be_bytes());
    let report = check_file(&path);
    only(
        &report,
        Severity::Warning,
        entries_at,
        "ENTRIES is 5, but 2",
    );
    assert!(report.is_clean(false) && !report.is_clean(true));
    patch(&path, entries_at, &2i64.to_be_bytes());
    let sync_at = sb.value_offset(var::SYNCSIZE).unwrap();
    patch(&path, sync_at, &1_000_000i64.to_be_bytes());
    only(&check_file(&path), Severity::Warning, sync_at, "SYNCSIZE");
}

#[test]
fn unreadable_files_are_problems() {
    let dir = tempfile::tempdir().unwrap();
    let missing = check_file(&dir.path().join("nope"));
    assert_eq!(missing.errors(), 1);
    assert_eq!(missing.problems[0].offset, None);
    let path = dir.path().join("junk");
    fs::write(&path, b"#!WINKMEnot a superblock at all").unwrap();
    only(&check_file(&path), Severity::Error, 8, "SBSIZE");
    let (path, _) = kvseq(dir.path(), "f.kvseq", &KvSeqOptions::default(), 1);
    patch(&path, FORMAT_VALUE_OFFSET, &0x99i64.to_be_bytes());
    only(
        &check_file(&path),
        Severity::Error,
        FORMAT_VALUE_OFFSET,
        "unknown FORMAT 0x99",
    );
}

fn indexed(dir: &Path, n: usize) -> (PathBuf, PathBuf, Vec<KvPointer>) {
    let (data, ptrs) = kvseq(dir, "x.kvseq", &KvSeqOptions::default(), n);
    let kv = KvSeq::open_path(&data, false).unwrap();
    let path = dir.join("x.hindex");
    let opts = HIndexOptions {
        htsize: 16,
        ..HIndexOptions::default()
    };
    let mut index = HIndex::create_path(&path, &opts).unwrap();
    for (i, ptr) in ptrs.iter().enumerate() {
        index
            .insert(format!("key-{i}").as_bytes(), *ptr, &kv)
            .unwrap();
    }
    index.sync(0).unwrap();
    (data, path, ptrs)
}

#[test]
fn hindex_cells_are_verified_against_the_datafile() {
    let dir = tempfile::tempdir().unwrap();
    let (data, path, ptrs) = indexed(dir.path(), 5);
    let report = check_file(&path);
    assert!(report.is_clean(true), "{:#?}", report.problems);
    assert!(
        report.summary.contains("5 used, 0 deleted, verified"),
        "{}",
        report.summary
    );
    let index = HIndex::open_path(&path, false).unwrap();
    let (cell, ptr) = index.used_cells().next().unwrap().unwrap();
    drop(index);
    let at = 4096 + cell * 16;
    // A pointer to another key's entry: the stored hash no longer matches.
    let wrong = ptrs.iter().find(|p| **p != ptr).unwrap();
    patch(&path, at, &(wrong.0 as i64).to_be_bytes());
    only(&check_file(&path), Severity::Error, at + 8, "stored hash");
    // Without the datafile only the structure is checked.
    fs::remove_file(&data).unwrap();
    assert!(check_file(&path).is_clean(true));
}

#[test]
fn hindex_free_cells_need_zero_hashes_and_counts_match() {
    let dir = tempfile::tempdir().unwrap();
    let (_, path, _) = indexed(dir.path(), 2);
    let index = HIndex::open_path(&path, false).unwrap();
    let free = (0..16)
        .find(|c| index.get(*c).unwrap() == crate::format::hindex::Cell::Free)
        .unwrap();
    let aentries_at = index.superblock().value_offset(var::AENTRIES).unwrap();
    drop(index);
    patch(&path, aentries_at, &9i64.to_be_bytes());
    only(
        &check_file(&path),
        Severity::Warning,
        aentries_at,
        "AENTRIES is 9, but 2",
    );
    patch(&path, aentries_at, &2i64.to_be_bytes());
    let at = 4096 + free * 16;
    patch(&path, at, &(-5i64).to_be_bytes());
    // The open's spot check or the full scan finds it; either way at the cell's offset.
    only(&check_file(&path), Severity::Error, at, "-5");
}

#[test]
fn perm_hashes_are_verified_against_the_datafile() {
    let dir = tempfile::tempdir().unwrap();
    let (_, ptrs) = kvseq(dir.path(), "y.kvseq", &KvSeqOptions::default(), 3);
    let path = dir.path().join("y.perm");
    let opts = PermOptions {
        htsize: Some(7),
        purpose: Purpose::new("P").unwrap(),
        ..PermOptions::default()
    };
    let mut perm = Perm::create_path(&path, &opts).unwrap();
    for (i, ptr) in ptrs.iter().enumerate() {
        let hash = perm.hash_key(format!("key-{i}").as_bytes());
        perm.append(Pair { ptr: *ptr, hash }).unwrap();
    }
    perm.sync().unwrap();
    let wrong = (perm.hash_key(b"key-1") + 1) % 7;
    drop(perm);
    assert!(check_file(&path).is_clean(true));
    let at = 4096 + PAIR_SIZE + 8;
    patch(&path, at, &(wrong as i64).to_be_bytes());
    only(&check_file(&path), Severity::Error, at, "pair 1 has hash");
    patch(&path, at - 8, &1i64.to_be_bytes());
    only(&check_file(&path), Severity::Error, at - 8, "not an entry");
}

#[test]
fn superblock_room_and_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = kvseq(dir.path(), "s.kvseq", &KvSeqOptions::default(), 0);
    patch(&path, 4000, &[1]);
    only(&check_file(&path), Severity::Warning, 4000, "free room");
    patch(&path, 4000, &[0]);
    patch(&path, PURPOSE_VALUE_OFFSET, b"AB\0\0    ");
    only(
        &check_file(&path),
        Severity::Warning,
        PURPOSE_VALUE_OFFSET + 2,
        "PURPOSE",
    );
}

#[test]
fn entry_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ptrs) = kvseq(dir.path(), "e.kvseq", &KvSeqOptions::default(), 3);
    let kv = KvSeq::open_path(&path, false).unwrap();
    assert!(is_entry_start(&kv, ptrs[2]).unwrap());
    assert!(!is_entry_start(&kv, KvPointer(ptrs[1].0 + 1)).unwrap());
    assert!(!is_entry_start(&kv, KvPointer(1 << 40)).unwrap());
}
