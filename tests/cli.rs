//! The `wink` CLI end to end: output bytes, the files it writes, and every exit code.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use wink::format::hindex::{HIndex, HIndexOptions};
use wink::format::kvseq::{KvSeq, KvSeqOptions};
use wink::format::perm::{Pair, Perm, PermOptions};
use wink::format::superblock::{var, Purpose};

mod common;
use common::cli::{bytes_at, file_command_installed, file_magic, patch, s, wink_at, Run};
use common::require;

const NOW: &str = "1700000000";

fn wink(args: &[&str]) -> Run {
    wink_at(NOW, args, b"")
}

/// `wink kv create F --delflag --purpose DEMO --fileincr 4096`.
fn create_demo(f: &Path) -> Run {
    let mut args = vec!["kv", "create", s(f)];
    args.extend(["--delflag", "--purpose", "DEMO", "--fileincr", "4096"]);
    wink(&args)
}

/// A kvseq made by the CLI with three entries at 4096, 4111 and 4132.
fn three_entries(dir: &Path) -> PathBuf {
    let f = dir.join("a.kvseq");
    create_demo(&f).expect(0);
    for (key, value) in [("alpha", "one"), ("beta", "from stdin"), ("gamma", "x")] {
        wink(&["kv", "append", s(&f), key, value]).expect(0);
    }
    f
}

#[test]
fn kv_round_trip_with_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.kvseq");
    assert!(create_demo(&f).expect(0).stdout.is_empty());
    let out = wink(&["kv", "append", s(&f), "alpha", "one"]).expect(0);
    assert_eq!(out.out(), "4096\n");
    let path = f.as_os_str();
    let append = |key: &[u8], value: Option<&str>, stdin: &[u8]| {
        let mut args = vec![
            OsStr::new("kv"),
            OsStr::new("append"),
            path,
            OsStr::from_bytes(key),
        ];
        args.extend(value.map(OsStr::new));
        wink_at(NOW, &args, stdin).expect(0).out()
    };
    assert_eq!(append(b"beta", None, b"from stdin"), "4111\n");
    assert_eq!(append(b"gamma", Some("-"), b"x"), "4132\n");
    assert_eq!(append(&[0xff, 0x01], None, &[0x00, 0xff]), "4145\n");
    assert_eq!(wink(&["kv", "get", s(&f), "4096"]).expect(0).stdout, b"one");
    assert_eq!(
        wink(&["kv", "get", s(&f), "4145"]).expect(0).stdout,
        [0x00, 0xff]
    );
    let del = wink_at(
        "1700000099",
        &[
            OsStr::new("kv"),
            OsStr::new("del"),
            path,
            OsStr::new("4096"),
        ],
        b"",
    );
    assert!(del.expect(0).stdout.is_empty());
    // delflag, int16 key length, key, int32 value length, value.
    assert_eq!(
        bytes_at(&f, 4096, 15),
        b"\x01\x00\x05alpha\x00\x00\x00\x03one"
    );
    assert_eq!(
        bytes_at(&f, 4145, 11),
        b"\x00\x00\x02\xff\x01\x00\x00\x00\x02\x00\xff"
    );
    assert_eq!(
        fs::metadata(&f).unwrap().len(),
        8192,
        "preallocated in FILEINCR steps"
    );
    let purpose = i64::from_be_bytes(*b"DEMO    ");
    let expected = format!(
        "SBSIZE\t4096\nFORMAT\t16\tkvseq\nPURPOSE\t{purpose}\t\"DEMO\"\nFILESIZE\t4156\nFILEINCR\t4096\n\
         SYNCSIZE\t4156\nSYNCTIME\t1700000099\nKEYREPR\t1\nVALREPR\t2\nKVDELFL\t1\nENTRIES\t4\nAENTRIES\t3\n\
         # pointer\tdelflag\tkey\tvalue_len\tvalue\n\
         4096\t1\t\"alpha\"\t3\t\"one\"\n4111\t0\t\"beta\"\t10\t\"from stdin\"\n\
         4132\t0\t\"gamma\"\t1\t\"x\"\n4145\t0\t0xff01\t2\t0x00ff\n"
    );
    assert_eq!(wink(&["dump", "--values", s(&f)]).expect(0).out(), expected);
    let check = wink(&["check", "--strict", s(&f)]).expect(0).out();
    assert_eq!(
        check,
        format!("{}: ok (kvseq \"DEMO\", 4 entries, 3 live)\n", f.display())
    );
}

#[test]
fn dump_json_lines_parse_for_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.kvseq");
    let mut kv = KvSeq::create_path(&data, &KvSeqOptions::default()).unwrap();
    let ptrs: Vec<_> = [&b"k1"[..], b"\xfe"]
        .iter()
        .map(|k| kv.append(k, b"v").unwrap())
        .collect();
    kv.sync().unwrap();
    let index_path = dir.path().join("x.hindex");
    let mut index = HIndex::create_path(&index_path, &HIndexOptions::default()).unwrap();
    let perm_path = dir.path().join("x.perm");
    let mut perm = Perm::create_path(&perm_path, &PermOptions::default()).unwrap();
    for (key, ptr) in [&b"k1"[..], b"\xfe"].iter().zip(&ptrs) {
        index.insert(key, *ptr, &kv).unwrap();
        perm.append(Pair {
            ptr: *ptr,
            hash: perm.hash_key(key),
        })
        .unwrap();
    }
    index.sync(0).unwrap();
    perm.sync().unwrap();
    let json = |path: &Path, values: bool| -> Vec<Value> {
        let mut args = vec!["dump", "--json", s(path)];
        if values {
            args.push("--values");
        }
        wink(&args).expect(0).json_lines()
    };
    let lines = json(&data, true);
    assert_eq!(
        (lines[0]["type"].as_str(), lines[0]["format"].as_str()),
        (Some("superblock"), Some("kvseq"))
    );
    assert_eq!(
        lines[0]["vars"][0],
        serde_json::json!({"name": "SBSIZE", "value": 4096})
    );
    assert_eq!(
        (&lines[1]["key"], &lines[1]["value"]),
        (&Value::from("k1"), &Value::from("v"))
    );
    assert_eq!(
        (&lines[2]["key"], &lines[2]["key_hex"]),
        (&Value::Null, &Value::from("fe"))
    );
    assert_eq!(
        json(&data, false)[1].get("value"),
        None,
        "no values without --values"
    );
    let cells = json(&index_path, false);
    assert_eq!(cells.len(), 3);
    for cell in &cells[1..] {
        assert_eq!(cell["type"], "cell");
        let stored = u64::from_str_radix(cell["stored_hash_hex"].as_str().unwrap(), 16).unwrap();
        assert_ne!(stored, 0);
        assert!(ptrs.iter().any(|p| Some(p.0) == cell["ptr"].as_u64()));
    }
    let pairs = json(&perm_path, false);
    assert_eq!(
        pairs[2],
        serde_json::json!({"type": "pair", "index": 1, "ptr": ptrs[1].0, "hash": perm.hash_key(b"\xfe")})
    );
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for args in [
        &["dump"][..],
        &["frob"],
        &["dump", "x", "--bogus"],
        &["kv", "append"],
        &["kv", "get", "f", "not-a-number"],
        &["kv"],
        &["check"],
    ] {
        let run = wink(args).expect(2);
        assert!(run.stdout.is_empty(), "{args:?}");
        assert!(
            run.stderr.contains("usage: wink") || run.stderr.contains("wink --help"),
            "{}",
            run.stderr
        );
    }
    let help = wink(&["--help"]).expect(0).out();
    assert!(
        help.contains("Exit status") && help.contains("WINK_NOW"),
        "{help}"
    );
    assert!(wink(&["dump", "--help"])
        .expect(0)
        .out()
        .contains("0x and lowercase hex"));
}

#[test]
fn invalid_input_exits_2_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    let before = fs::read(&f).unwrap();
    assert!(wink(&["kv", "create", s(&f)])
        .expect(2)
        .stderr
        .contains("exists"));
    for bad in [
        &["--purpose", "TOOLONGPURPOSE"][..],
        &["--keyrepr", "999"],
        &["--sbsize", "12"],
        &["--align", "3000000"],
    ] {
        let g = dir.path().join("new.kvseq");
        let mut args = vec!["kv", "create", s(&g)];
        args.extend_from_slice(bad);
        wink(&args).expect(2);
        assert!(!g.exists(), "{bad:?} left a file behind");
    }
    let long_key = "k".repeat(40000);
    wink(&["kv", "append", s(&f), &long_key, "v"]).expect(2);
    let args = [
        OsStr::new("kv"),
        OsStr::new("append"),
        f.as_os_str(),
        OsStr::new("k"),
        OsStr::new("v"),
    ];
    assert!(wink_at("soon", &args, b"")
        .expect(2)
        .stderr
        .contains("WINK_NOW"));
    let plain = dir.path().join("plain.kvseq");
    wink(&["kv", "create", s(&plain)]).expect(0);
    wink(&["kv", "append", s(&plain), "k", "v"]).expect(0);
    let plain_before = fs::read(&plain).unwrap();
    assert!(wink(&["kv", "del", s(&plain), "4096"])
        .expect(2)
        .stderr
        .contains("KVDELFL"));
    assert_eq!(fs::read(&plain).unwrap(), plain_before);
    assert_eq!(fs::read(&f).unwrap(), before);
}

#[test]
fn not_found_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    let before = fs::read(&f).unwrap();
    for ptr in ["1", "4097", "4112", "999999"] {
        let run = wink(&["kv", "get", s(&f), ptr]).expect_code(1);
        assert!(
            run.stdout.is_empty() && run.stderr.starts_with("wink: not found"),
            "{ptr}: {}",
            run.stderr
        );
        wink(&["kv", "del", s(&f), ptr]).expect_code(1);
    }
    assert_eq!(
        fs::read(&f).unwrap(),
        before,
        "a wrong pointer deleted nothing"
    );
    wink(&["kv", "del", s(&f), "4111"]).expect(0);
    assert!(wink(&["kv", "get", s(&f), "4111"])
        .expect_code(1)
        .stderr
        .contains("deleted"));
    assert!(wink(&["kv", "del", s(&f), "4111"])
        .expect_code(1)
        .stderr
        .contains("already deleted"));
    let missing = dir.path().join("missing.kvseq");
    let run = wink(&["check", s(&missing), s(&f)]).expect_code(1);
    assert!(
        run.out()
            .starts_with(&format!("{}: error: I/O error", missing.display())),
        "{}",
        run.out()
    );
}

#[test]
fn damaged_data_exits_3_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    patch(&f, 4111, &[7]); // the second entry's delflag
    let run = wink(&["kv", "get", s(&f), "4111"]).expect(3);
    assert!(
        run.stderr.contains(s(&f)) && run.stderr.contains("byte 4111"),
        "{}",
        run.stderr
    );
    let run = wink(&["dump", s(&f)]).expect(3);
    assert!(
        run.out().ends_with("4096\t0\t\"alpha\"\t3\n"),
        "printed up to the damage: {}",
        run.out()
    );
    assert!(run.stderr.contains("byte 4111"), "{}", run.stderr);
    // A get of an earlier entry does not read the damaged one.
    assert_eq!(wink(&["kv", "get", s(&f), "4096"]).expect(0).stdout, b"one");
    let check = wink(&["check", s(&f)]).expect_code(1);
    assert_eq!(check.out().lines().count(), 1, "{}", check.out());
    assert!(check
        .out()
        .starts_with(&format!("{}: error at byte 4111: delflag", f.display())));
    assert!(
        check.stderr.starts_with("wink: check: 1 errors"),
        "{}",
        check.stderr
    );
}

#[test]
fn truncated_file_exits_3_at_filesize() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    let filesize_at = KvSeq::open_path(&f, false)
        .unwrap()
        .superblock()
        .value_offset(var::FILESIZE)
        .unwrap();
    File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(4100)
        .unwrap();
    for args in [&["dump"][..], &["kv", "get"], &["kv", "append"]] {
        let mut args = args.to_vec();
        args.push(s(&f));
        args.extend(match args[0] {
            "kv" if args[1] == "get" => &["4096"][..],
            "kv" => &["k", "v"],
            _ => &[],
        });
        let run = wink(&args).expect(3);
        assert!(
            run.stderr.contains(&format!("byte {filesize_at}")),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert!(wink(&["check", s(&f)])
        .expect_code(1)
        .out()
        .contains(&format!("error at byte {filesize_at}: FILESIZE")));
}

#[test]
fn a_second_writer_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    let before = fs::read(&f).unwrap();
    let held = nix::fcntl::Flock::lock(
        File::open(&f).unwrap(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .unwrap();
    assert!(wink(&["kv", "append", s(&f), "k", "v"])
        .expect(4)
        .stderr
        .contains("in use"));
    wink(&["kv", "del", s(&f), "4096"]).expect(4);
    assert_eq!(
        wink(&["kv", "get", s(&f), "4096"]).expect(0).stdout,
        b"one",
        "readers need no lock"
    );
    drop(held);
    assert_eq!(fs::read(&f).unwrap(), before);
    wink(&["kv", "append", s(&f), "k", "v"]).expect(0);
}

#[test]
fn check_warnings_count_only_with_strict() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    let entries_at = KvSeq::open_path(&f, false)
        .unwrap()
        .superblock()
        .value_offset(var::ENTRIES)
        .unwrap();
    patch(&f, entries_at, &9i64.to_be_bytes());
    let out = wink(&["check", s(&f)]).expect(0).out();
    let warning = format!(
        "{}: warning at byte {entries_at}: ENTRIES is 9, but 3 were counted\n",
        f.display()
    );
    assert_eq!(
        out,
        format!(
            "{warning}{}: ok (kvseq \"DEMO\", 3 entries, 3 live; 1 warnings)\n",
            f.display()
        )
    );
    assert_eq!(
        wink(&["check", "--strict", s(&f)]).expect_code(1).out(),
        warning
    );
}

/// `wink check` draws its bar only on a terminal: script(1) gives it one.
#[test]
fn check_shows_progress_only_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let f = three_entries(dir.path());
    let piped = wink(&["check", s(&f)]).expect(0);
    assert!(
        piped.stderr.is_empty(),
        "no bar off a terminal: {:?}",
        piped.stderr
    );
    if !require::tool("script", "-V", "wink check's progress bar on a terminal") {
        return;
    }
    let command = format!("'{}' check '{}'", env!("CARGO_BIN_EXE_wink"), f.display());
    let tty = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        // Without a TERM the terminal counts as dumb, and indicatif draws nothing on it.
        .env("TERM", "xterm")
        .env("WINK_NOW", NOW)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{text}");
    assert!(
        text.contains(&format!("checking {}", f.display())),
        "{text:?}"
    );
    assert!(
        text.contains(&format!("{}: ok (kvseq", f.display())),
        "{text:?}"
    );
}

/// Runs the real file(1) with the project's magic on files the library wrote.
#[test]
fn file_magic_names_format_and_purpose() {
    if !file_command_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let purpose = |p: &str| Purpose::new(p).unwrap();
    let data = dir.path().join("d.kvseq");
    KvSeq::create_path(
        &data,
        &KvSeqOptions {
            purpose: purpose("MY DATA"),
            ..KvSeqOptions::default()
        },
    )
    .unwrap();
    let index = dir.path().join("d.hindex");
    HIndex::create_path(
        &index,
        &HIndexOptions {
            purpose: purpose("FSYSIDX"),
            ..HIndexOptions::default()
        },
    )
    .unwrap();
    let perm = dir.path().join("d.perm");
    Perm::create_path(
        &perm,
        &PermOptions {
            purpose: purpose("PERMUTED"),
            ..PermOptions::default()
        },
    )
    .unwrap();
    for (path, expected) in [
        (&data, "Wink peoplesearcher file, kvseq format, MY DATA"),
        (&index, "Wink peoplesearcher file, hindex format, FSYSIDX"),
        (&perm, "Wink peoplesearcher file, perm format, PERMUTED"),
    ] {
        assert_eq!(
            file_magic(path),
            format!("{expected}\n"),
            "{}",
            path.display()
        );
    }
}
