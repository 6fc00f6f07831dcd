//! Interop: files written by an independent implementation (`../shared/fixtures`) read through
//! the public API exactly as `fixtures.json` describes them, and `wink check` finds each clean.
//!
//! The shared directory sits beside the checkout; CI has it, and there a missing one fails the
//! tests; elsewhere they skip loudly (`common::require`).

use std::cmp::Ordering;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

mod common;
use wink::format::hash::KeyHash;
use wink::format::hindex::{Cell, HIndex};
use wink::format::kvseq::{KvPointer, KvSeq};
use wink::format::perm::Perm;
use wink::storage::FileStorage;
use wink::Superblock;

struct Fixtures {
    dir: PathBuf,
    json: Value,
}

impl Fixtures {
    fn load() -> Option<Fixtures> {
        let dir = common::require::shared("fixtures", "the interop test")?;
        let bytes = fs::read(dir.join("fixtures.json")).expect("fixtures.json reads");
        let json = serde_json::from_slice(&bytes).expect("fixtures.json parses");
        Some(Fixtures { dir, json })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The described files of one kind (kvseq, hindex, perm), by name.
    fn of_kind(&self, kind: &str) -> Vec<(&str, &Value)> {
        let files = self.json["files"].as_object().expect("files");
        let found: Vec<_> = files
            .iter()
            .filter(|(_, f)| f["kind"] == kind)
            .map(|(name, f)| (name.as_str(), f))
            .collect();
        assert!(!found.is_empty(), "no {kind} fixtures");
        found
    }

    /// Every (file name, superblock) pair fixtures.json lists, the filesys files included.
    fn superblocks(&self) -> Vec<(String, &Value)> {
        let files = self.json["files"].as_object().expect("files");
        let plain = files
            .iter()
            .filter(|(_, f)| f.get("superblock").is_some())
            .map(|(name, f)| (name.clone(), &f["superblock"]));
        let filesystems = self.json["filesystems"].as_object().expect("filesystems");
        let fs_files = filesystems
            .values()
            .flat_map(|fs| fs["superblocks"].as_object().expect("superblocks"))
            .map(|(name, sb)| (name.clone(), sb));
        plain.chain(fs_files).collect()
    }
}

fn unhex(text: &str) -> Vec<u8> {
    assert!(text.len() % 2 == 0, "odd hex {text:?}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn hex_u64(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string"), 16).expect("hex u64")
}

fn be64(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

#[test]
fn every_file_is_described_and_its_superblock_matches() {
    let Some(fx) = Fixtures::load() else { return };
    let described = fx.superblocks();
    let on_disk: Vec<String> = fs::read_dir(&fx.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "README.md" && n != "fixtures.json")
        .collect();
    for name in &on_disk {
        assert!(
            described.iter().any(|(d, _)| d == name),
            "{name} is not described"
        );
    }
    for (name, expected) in &described {
        let path = fx.path(name);
        let size = u64_of(&fx.json["files"][name.as_str()]["size"]);
        assert_eq!(fs::metadata(&path).unwrap().len(), size, "{name}: size");
        let sb = Superblock::read(&FileStorage::open(&path, false).unwrap()).unwrap();
        let got: Vec<(String, i64)> = sb.vars().iter().map(|(n, v)| (n.trimmed(), *v)).collect();
        let want: Vec<(String, i64)> = expected
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_i64().unwrap()))
            .collect();
        assert_eq!(got, want, "{name}: superblock variables in order");
        if let Some(purpose) = fx.json["files"][name.as_str()]["purpose"].as_str() {
            assert_eq!(sb.purpose().text(), purpose, "{name}: PURPOSE");
        }
    }
}

#[test]
fn kvseq_entries_match() {
    let Some(fx) = Fixtures::load() else { return };
    for (name, f) in fx.of_kind("kvseq") {
        let kv = KvSeq::open_path(&fx.path(name), false).unwrap();
        assert_eq!(kv.filesize(), u64_of(&f["filesize"]), "{name}: FILESIZE");
        let got: Vec<_> = kv
            .iter_entries(kv.first(), false)
            .map(|e| e.unwrap())
            .collect();
        let want = f["entries"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}: entry count");
        for (entry, w) in got.iter().zip(want) {
            let at = u64_of(&w["offset"]);
            assert_eq!(entry.layout.ptr, KvPointer(at), "{name}: offset");
            assert_eq!(
                entry.layout.deleted,
                w["deleted"] == true,
                "{name} at {at}: deleted"
            );
            assert_eq!(
                entry.key,
                unhex(w["key_hex"].as_str().unwrap()),
                "{name} at {at}: key"
            );
            let value = unhex(w["value_hex"].as_str().unwrap());
            assert_eq!(
                entry.value.as_deref(),
                Some(&value[..]),
                "{name} at {at}: value"
            );
            let point = kv.read(KvPointer(at)).unwrap();
            assert_eq!(
                (point.key, point.value),
                (entry.key.clone(), value),
                "{name} at {at}: read"
            );
        }
        let live = got.iter().filter(|e| !e.layout.deleted).count() as u64;
        assert_eq!(
            (kv.entries(), kv.live_entries()),
            (Some(got.len() as u64), Some(live))
        );
    }
}

#[test]
fn hindex_cells_and_lookups_match() {
    let Some(fx) = Fixtures::load() else { return };
    for (name, f) in fx.of_kind("hindex") {
        let index = HIndex::open_path(&fx.path(name), false).unwrap();
        let kv = KvSeq::open_path(&fx.path(f["datafile"].as_str().unwrap()), false).unwrap();
        let listed = f["cells"].as_array().unwrap();
        for cell in 0..index.htsize() {
            let want = listed.iter().find(|c| u64_of(&c["index"]) == cell);
            let expected = match want.map(|c| (c["state"].as_str().unwrap(), c)) {
                None => Cell::Free,
                Some(("deleted", c)) => {
                    assert_eq!(hex_u64(&c["stored_hash_hex"]), 0);
                    Cell::Deleted
                }
                Some(("used", c)) => Cell::Used {
                    ptr: KvPointer(u64_of(&c["ptr"])),
                    stored_hash: hex_u64(&c["stored_hash_hex"]),
                },
                Some((state, _)) => panic!("{name}: unknown cell state {state}"),
            };
            assert_eq!(index.get(cell).unwrap(), expected, "{name}: cell {cell}");
        }
        for l in f["lookups"].as_array().unwrap() {
            let key = unhex(l["key_hex"].as_str().unwrap());
            assert_eq!(index.home(&key), u64_of(&l["home"]), "{name}: home of {l}");
            let found = index.lookup(&key, &kv).unwrap();
            assert_eq!(found.is_some(), l["found"] == true, "{name}: lookup {l}");
            if let Some(found) = found {
                assert_eq!(found.cell, u64_of(&l["cell"]), "{name}: cell of {l}");
                assert_eq!(
                    found.ptr,
                    KvPointer(u64_of(&l["ptr"])),
                    "{name}: ptr of {l}"
                );
            }
        }
        index.spot_check(&kv).unwrap();
    }
}

#[test]
fn perm_pairs_match_and_group_reproduces_their_order() {
    let Some(fx) = Fixtures::load() else { return };
    for (name, f) in fx.of_kind("perm") {
        let kv = KvSeq::open_path(&fx.path(f["datafile"].as_str().unwrap()), false).unwrap();
        let perm = Perm::open_path(&fx.path(name), false).unwrap();
        let want = f["pairs"].as_array().unwrap();
        assert_eq!(perm.len(), want.len() as u64, "{name}: PERMSIZE");
        let mut expected = Vec::new();
        for w in want {
            let pair = perm.get(u64_of(&w["index"])).unwrap();
            assert_eq!(pair.ptr, KvPointer(u64_of(&w["ptr"])), "{name}: {w}");
            assert_eq!(pair.hash, u64_of(&w["hash"]), "{name}: {w}");
            let key = kv.read_key(pair.ptr).unwrap().1;
            assert_eq!(
                key,
                unhex(w["key_hex"].as_str().unwrap()),
                "{name}: key of {w}"
            );
            assert_eq!(perm.hash_key(&key), pair.hash, "{name}: hash of {w}");
            expected.push(pair);
        }
        for run_pairs in [1 << 20, 2] {
            let dir = tempfile::tempdir().unwrap();
            let copy = dir.path().join(name);
            fs::copy(fx.path(name), &copy).unwrap();
            let mut perm = Perm::open_path(&copy, true).unwrap();
            perm.set_run_pairs(run_pairs);
            for i in 0..perm.len() / 2 {
                perm.swap(i, perm.len() - 1 - i).unwrap();
            }
            let by_key = |a: &wink::format::perm::Pair, b: &wink::format::perm::Pair| {
                Ok::<Ordering, wink::Error>(kv.read_key(a.ptr)?.1.cmp(&kv.read_key(b.ptr)?.1))
            };
            perm.group(by_key).unwrap();
            assert_eq!(
                perm.read_range(0, perm.len()).unwrap(),
                expected,
                "{name}: group, run {run_pairs}"
            );
        }
    }
}

#[test]
fn hash_and_crc_vectors() {
    let Some(fx) = Fixtures::load() else { return };
    for v in fx.json["hash_vectors"].as_array().unwrap() {
        let h = KeyHash::of(&unhex(v["key_hex"].as_str().unwrap()));
        let md5: String = h.digest().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(md5, v["md5_hex"].as_str().unwrap(), "{v}");
        assert_eq!(h.hash63(), u64_of(&v["htalgo1_hash63"]), "{v}");
        assert_eq!(h.hash63(), hex_u64(&v["htalgo1_hash63_hex"]), "{v}");
        assert_eq!(h.stored(), hex_u64(&v["stored_hash_hex"]), "{v}");
        assert_eq!(h.home(16), u64_of(&v["home_mod_16"]), "{v}");
    }
    for v in fx.json["crc32_vectors"].as_array().unwrap() {
        let data = unhex(v["data_hex"].as_str().unwrap());
        assert_eq!(
            u64::from(crc32fast::hash(&data)),
            u64_of(&v["crc32"]),
            "{v}"
        );
    }
}

/// The filesys files are read here as the basic formats they are built of; the filesys layer
/// has its own tests.
#[test]
fn filesys_files_parse_as_kvseq_and_hindex() {
    let Some(fx) = Fixtures::load() else { return };
    for (base, fsys) in fx.json["filesystems"].as_object().unwrap() {
        let data = KvSeq::open_path(&fx.path(&format!("{base}.data")), false).unwrap();
        let all: Vec<_> = data.iter(data.first(), false).map(|e| e.unwrap()).collect();
        assert_eq!(
            Some(all.len() as u64),
            data.entries(),
            "{base}.data: ENTRIES"
        );
        for inode in fsys["inode_entries"].as_array().unwrap() {
            let (layout, key) = data.read_key(KvPointer(u64_of(&inode["offset"]))).unwrap();
            let name = unhex(inode["name_hex"].as_str().unwrap());
            assert_eq!(key, [&name[..], b"/I0"].concat(), "{base}: inode {inode}");
            assert_eq!(
                layout.deleted,
                inode["state"] == "deleted",
                "{base}: inode {inode}"
            );
        }
        let index = HIndex::open_path(&fx.path(&format!("{base}.idx")), false).unwrap();
        for file in fsys["live"].as_array().unwrap() {
            let key = [&unhex(file["name_hex"].as_str().unwrap())[..], b"/I0"].concat();
            let found = index
                .lookup(&key, &data)
                .unwrap()
                .expect("live file indexed");
            assert_eq!(
                found.ptr,
                KvPointer(u64_of(&file["inode_offset"])),
                "{base}: {file}"
            );
        }
        for file in fsys["absent"].as_array().unwrap() {
            let key = [&unhex(file["name_hex"].as_str().unwrap())[..], b"/I0"].concat();
            assert_eq!(index.lookup(&key, &data).unwrap(), None, "{base}: {file}");
        }
        for item in index.used_cells() {
            let (cell, ptr) = item.unwrap();
            index.verify_cell(cell, ptr, &data).unwrap();
        }
        if fsys["ao"] == true {
            check_time_marks(&fx, base, fsys);
        }
    }
}

/// Time marks: key = the period's start, value = the inode's pointer, both 8-byte big-endian.
fn check_time_marks(fx: &Fixtures, base: &str, fsys: &Value) {
    let time = KvSeq::open_path(&fx.path(&format!("{base}.time")), false).unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = time
        .iter_entries(time.first(), false)
        .map(|e| e.unwrap())
        .map(|e| (e.key, e.value.unwrap()))
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = fsys["time_marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                be64(m["mark"].as_i64().unwrap()),
                be64(m["inode_offset"].as_i64().unwrap()),
            )
        })
        .collect();
    assert_eq!(got, want, "{base}.time: marks");
}

#[test]
fn wink_check_finds_every_fixture_clean() {
    let Some(fx) = Fixtures::load() else { return };
    let names: Vec<String> = fx.superblocks().into_iter().map(|(n, _)| n).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_wink"))
        .arg("check")
        .arg("--strict")
        .args(names.iter().map(|n| fx.path(n)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), names.len(), "{stdout}");
    assert!(stdout.lines().all(|l| l.contains(": ok (")), "{stdout}");
    for (name, _) in fx.of_kind("hindex").into_iter().chain(fx.of_kind("perm")) {
        let line = stdout.lines().find(|l| l.contains(name)).unwrap();
        assert!(line.contains("verified against the datafile"), "{line}");
    }
}

#[test]
fn wink_dump_json_lists_what_fixtures_json_lists() {
    let Some(fx) = Fixtures::load() else { return };
    for (name, f) in fx.of_kind("kvseq") {
        let out = Command::new(env!("CARGO_BIN_EXE_wink"))
            .args(["dump", "--json", "--values"])
            .arg(fx.path(name))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let vars: Vec<Value> = lines[0]["vars"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| serde_json::json!([v["name"], v["value"]]))
            .collect();
        assert_eq!(Value::Array(vars), f["superblock"], "{name}");
        for (line, w) in lines[1..].iter().zip(f["entries"].as_array().unwrap()) {
            assert_eq!(line["ptr"], w["offset"], "{name}");
            assert_eq!(line["deleted"], w["deleted"], "{name}");
            assert_eq!(line["key_hex"], w["key_hex"], "{name}");
            assert_eq!(line["value_hex"], w["value_hex"], "{name}");
            if let Some(key) = w.get("key") {
                assert_eq!(&line["key"], key, "{name}");
            }
        }
        assert_eq!(
            lines.len() - 1,
            f["entries"].as_array().unwrap().len(),
            "{name}"
        );
    }
}
