//! `wink fs` and `wink check BASE` end to end through the built binary: the bytes written to
//! BASE.data, the output of every read command, and every exit code.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;
use wink::filesys::{Filesys, OpenOptions};

mod common;
use common::cli::{
    bytes_at, file_command_installed, file_magic, patch, s, waits_for_lock, wink_at, Run,
};

const NOW: &str = "1700000000";

fn wink(args: &[&str]) -> Run {
    wink_at(NOW, args, b"")
}

/// A plain filesys `fs`, new, in a new temporary directory.
fn new_fs() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    wink(&["fs", "create", s(&base)]).expect(0);
    (dir, base)
}

/// A new filesys with `a` ("0123456789") and then `b`, a later commit, so that the last journal
/// does not hold a's inode; with the pointer of a's inode.
fn a_then_a_later_commit() -> (TempDir, PathBuf, u64) {
    let (dir, base) = new_fs();
    put(&base, "a", b"0123456789");
    put(&base, "b", b"later commit");
    let ptr = stat(&base, "a")["inode"].as_u64().unwrap();
    (dir, base, ptr)
}

/// `wink fs VERB BASE ARGS...` for `verb_args` = VERB ARGS....
fn fs_args<'a>(verb_args: &[&'a str], base: &'a Path) -> Vec<&'a str> {
    let mut full = vec!["fs", verb_args[0], s(base)];
    full.extend_from_slice(&verb_args[1..]);
    full
}

fn file(base: &Path, ext: &str) -> PathBuf {
    wink::filesys::file_path(base, ext)
}

/// The bytes of every file of the filesys, to show that a failed command changed nothing.
fn snapshot(base: &Path) -> Vec<Option<Vec<u8>>> {
    ["data", "idx", "time", "jnl"]
        .iter()
        .map(|ext| fs::read(file(base, ext)).ok())
        .collect()
}

fn stat(base: &Path, name: &str) -> Value {
    let run = wink(&["fs", "stat", s(base), name, "--json"]).expect(0);
    let mut lines = run.json_lines();
    assert_eq!(lines.len(), 1, "{}", run.out());
    lines.remove(0)
}

fn put(base: &Path, name: &str, content: &[u8]) {
    let run = wink_at(NOW, &["fs", "put", s(base), name], content).expect(0);
    assert!(
        run.stdout.is_empty() && run.stderr.is_empty(),
        "{}",
        run.stderr
    );
}

fn cat(base: &Path, name: &str) -> Vec<u8> {
    wink(&["fs", "cat", s(base), name]).expect(0).stdout
}

/// Where the value of the datafile entry at `ptr` with key `key` starts: delflag (1), key length
/// (2), key, value length (4).
fn value_offset(ptr: u64, key: &[u8]) -> u64 {
    ptr + 1 + 2 + key.len() as u64 + 4
}

/// A datafile entry as written: delflag, int16 key length, key, int32 value length, value.
fn entry(deleted: bool, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![u8::from(deleted)];
    out.extend_from_slice(&u16::try_from(key.len()).unwrap().to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&u32::try_from(value.len()).unwrap().to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// An inode as docs/FORMAT.md § Inode lays it out, CKSUM included, padded to `size`.
fn inode(
    fileid: i64,
    lsize: i64,
    ftype: i64,
    mtime: i64,
    pairs: &[(i64, i64)],
    size: usize,
) -> Vec<u8> {
    let mut out = vec![0u8; 8];
    for field in [0, fileid, lsize, ftype, mtime, pairs.len() as i64] {
        out.extend_from_slice(&field.to_be_bytes());
    }
    for (ptr, len) in pairs {
        out.extend_from_slice(&ptr.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
    }
    let cksum = i64::from(crc32fast::hash(&out[8..]));
    out[..8].copy_from_slice(&cksum.to_be_bytes());
    out.resize(size, 0);
    out
}

#[test]
fn put_append_cat_stat_with_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let run = wink(&["fs", "create", s(&base)]).expect(0);
    assert!(
        run.stdout.is_empty() && run.stderr.is_empty(),
        "{}",
        run.stderr
    );
    for ext in ["data", "idx", "jnl"] {
        assert!(file(&base, ext).exists(), "{ext}");
    }
    assert!(
        !file(&base, "time").exists(),
        "only an ao filesys has a time index"
    );

    let input = dir.path().join("input");
    fs::write(&input, "Hello, ").unwrap();
    wink(&[
        "fs",
        "put",
        s(&base),
        "readme.txt",
        s(&input),
        "--type",
        "3",
    ])
    .expect(0);
    // The data entry `1/D0` is the first entry (SBSIZE 4096); the inode follows it.
    let data = file(&base, "data");
    assert_eq!(bytes_at(&data, 4096, 18), entry(false, b"1/D0", b"Hello, "));
    let first = stat(&base, "readme.txt");
    let expected = serde_json::json!({
        "name": "readme.txt", "name_hex": "726561646d652e747874", "size": 7, "ftype": 3,
        "mtime": 1_700_000_000, "fileid": 1, "inode": 4114, "inode_size": 120, "data_entries": 1,
    });
    assert_eq!(first, expected);
    let key = b"readme.txt/I0";
    let value = inode(1, 7, 3, 1_700_000_000, &[(4096, 7)], 120);
    assert_eq!(bytes_at(&data, 4114, 140), entry(false, key, &value));

    // Appends from stdin (`-` and no argument) and from a file; a plain filesys moves the mtime.
    let stdin_args = ["fs", "append", s(&base), "readme.txt", "-"];
    wink_at("1700000100", &stdin_args, b"world!\n").expect(0);
    fs::write(&input, "A third piece.\n").unwrap();
    wink_at(
        1_700_000_200,
        &["fs", "append", s(&base), "readme.txt", s(&input)],
        b"",
    )
    .expect(0);
    wink_at(
        1_700_000_300,
        &["fs", "append", s(&base), "readme.txt"],
        b"",
    )
    .expect(0);
    let full = b"Hello, world!\nA third piece.\n";
    assert_eq!(cat(&base, "readme.txt"), full);
    let stat_now = stat(&base, "readme.txt");
    assert_eq!(
        (
            &stat_now["size"],
            &stat_now["mtime"],
            &stat_now["data_entries"],
            &stat_now["inode"]
        ),
        (
            &Value::from(29),
            &Value::from(1_700_000_200),
            &Value::from(3),
            &Value::from(4114)
        ),
        "the inode was rewritten in place; an empty append changes nothing"
    );
    let pairs = [(4096, 7), (4254, 7), (4272, 15)];
    let value = inode(1, 29, 3, 1_700_000_200, &pairs, 120);
    assert_eq!(bytes_at(&data, value_offset(4114, key), 120), value);
    assert_eq!(
        bytes_at(&data, 4254, 18),
        entry(false, b"1/D1", b"world!\n")
    );

    let range = |offset: &str, len: Option<&str>| {
        let mut args = vec!["fs", "cat", s(&base), "readme.txt", "--offset", offset];
        args.extend(len.map(|l| ["--len", l]).iter().flatten());
        wink(&args).expect(0).stdout
    };
    assert_eq!(range("5", Some("12")), b", world!\nA t");
    assert_eq!(range("0", Some("7")), &full[..7]);
    assert_eq!(range("7", Some("7")), &full[7..14]);
    assert_eq!(range("20", None), &full[20..]);
    assert_eq!(range("28", Some("100")), b"\n");
    assert!(range("29", None).is_empty());
    assert!(range("1000", Some("5")).is_empty());
    assert!(range("3", Some("0")).is_empty());

    let text = wink(&["fs", "stat", s(&base), "readme.txt"])
        .expect(0)
        .out();
    assert_eq!(
        text,
        "name\t\"readme.txt\"\nsize\t29\nftype\t3\nmtime\t1700000200\nfileid\t1\ninode\t4114\n\
         inode_size\t120\ndata_entries\t3\n"
    );

    // A put of an existing name is a new version; the old inode and data are marked deleted.
    let binary = [0u8, 0xff, b'\n', 0x80];
    put(&base, "readme.txt", &binary);
    assert_eq!(cat(&base, "readme.txt"), binary);
    let replaced = stat(&base, "readme.txt");
    assert_eq!(
        (&replaced["fileid"], &replaced["size"]),
        (&Value::from(2), &Value::from(4))
    );
    assert!(replaced["inode"].as_u64().unwrap() > 4272);
    for ptr in [4096, 4114, 4254, 4272] {
        assert_eq!(
            bytes_at(&data, ptr, 1),
            [1],
            "delflag of the entry at {ptr}"
        );
    }
    wink(&["check", "--strict", s(&base)]).expect(0);
}

#[test]
fn large_files_stream_across_chunks() {
    let (dir, base) = new_fs();
    let content: Vec<u8> = (0..(5u32 << 19)).map(|i| (i % 251) as u8).collect();
    let input = dir.path().join("big");
    fs::write(&input, &content).unwrap();
    wink(&["fs", "put", s(&base), "big", s(&input)]).expect(0);
    assert_eq!(cat(&base, "big"), content);
    let at = (1u64 << 20) - 3;
    let args = [
        "fs",
        "cat",
        s(&base),
        "big",
        "--offset",
        &at.to_string(),
        "--len",
        "10",
    ];
    assert_eq!(
        wink(&args).expect(0).stdout,
        &content[at as usize..at as usize + 10]
    );
}

#[test]
fn ls_lists_live_files_in_file_order() {
    let (_dir, base) = new_fs();
    put(&base, "a", b"first a");
    put(&base, "b", b"bb");
    let odd = OsStr::from_bytes(b"n\xff");
    let put_odd = [
        OsStr::new("fs"),
        OsStr::new("put"),
        base.as_os_str(),
        odd,
        OsStr::new("--type"),
        OsStr::new("7"),
    ];
    wink_at("1700000050", &put_odd, b"xyz").expect(0);
    put(&base, "c", b"");
    put(&base, "a", b"second a"); // a new version: its inode is now the last one
    wink(&["fs", "rm", s(&base), "c"]).expect(0);
    let text = wink(&["fs", "ls", s(&base)]).expect(0).out();
    assert_eq!(
        text,
        "# fileid\tsize\tftype\tmtime\tname\n\
         2\t2\t0\t1700000000\t\"b\"\n\
         3\t3\t7\t1700000050\t0x6eff\n\
         5\t8\t0\t1700000000\t\"a\"\n"
    );
    let lines = wink(&["fs", "ls", s(&base), "--json"])
        .expect(0)
        .json_lines();
    let names: Vec<&Value> = lines.iter().map(|l| &l["name"]).collect();
    assert_eq!(names, [&Value::from("b"), &Value::Null, &Value::from("a")]);
    assert_eq!(lines[1]["name_hex"], "6eff");
    assert_eq!(
        (
            &lines[1]["size"],
            &lines[1]["ftype"],
            &lines[1]["mtime"],
            &lines[1]["fileid"]
        ),
        (
            &Value::from(3),
            &Value::from(7),
            &Value::from(1_700_000_050),
            &Value::from(3)
        )
    );
    for line in &lines {
        let name = String::from_utf8(hex(line["name_hex"].as_str().unwrap())).unwrap_or_default();
        if !name.is_empty() {
            assert_eq!(line, &stat(&base, &name), "ls and stat agree");
        }
    }
    let read_odd = [OsStr::new("fs"), OsStr::new("cat"), base.as_os_str(), odd];
    assert_eq!(wink_at(NOW, &read_odd, b"").expect(0).stdout, b"xyz");
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn ao_time_ranges_follow_wink_now() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("ao");
    let create = [
        "fs",
        "create",
        s(&base),
        "--ao",
        "--timemp",
        "60",
        "--isz",
        "88",
    ];
    wink_at(960, &create, b"").expect(0);
    assert!(file(&base, "time").exists());
    // The clock steps back at 1050: the mtime stays at 1075, so files stay in mtime order.
    for (now, name) in [
        (960, "log/1"),
        (1010, "log/2"),
        (1075, "log/3"),
        (1050, "log/4"),
        (1200, "log/5"),
    ] {
        wink_at(now, &["fs", "put", s(&base), name], name.as_bytes()).expect(0);
    }
    assert_eq!(stat(&base, "log/4")["mtime"], 1075);
    let names = |range: &[&str]| -> Vec<String> {
        let mut args = vec!["fs", "ls", s(&base), "--json"];
        args.extend_from_slice(range);
        let lines = wink(&args).expect(0).json_lines();
        lines
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(&["--since", "1000", "--until", "1080"]),
        ["log/2", "log/3", "log/4"]
    );
    assert_eq!(
        names(&["--since", "1075", "--until", "1076"]),
        ["log/3", "log/4"]
    );
    assert!(names(&["--since", "1020", "--until", "1021"]).is_empty());
    assert!(names(&["--since", "1100", "--until", "1200"]).is_empty());
    assert_eq!(names(&["--since", "1200"]), ["log/5"]);
    assert_eq!(names(&["--until", "1010"]), ["log/1"]);
    assert_eq!(names(&[]).len(), 5);
    let text = wink(&["fs", "ls", s(&base), "--since", "1199", "--until", "1201"])
        .expect(0)
        .out();
    assert_eq!(
        text,
        "# fileid\tsize\tftype\tmtime\tname\n5\t5\t0\t1200\t\"log/5\"\n"
    );
    assert!(
        wink(&["fs", "ls", s(&base), "--since", "2000", "--until", "1000"])
            .expect(2)
            .stderr
            .contains("--since")
    );

    // ao: appends never move the mtime; the inode never grows; rename is refused.
    wink_at(5000, &["fs", "append", s(&base), "log/1"], b" more").expect(0);
    assert_eq!(cat(&base, "log/1"), b"log/1 more");
    assert_eq!(stat(&base, "log/1")["mtime"], 960);
    let before = snapshot(&base);
    let full = wink_at(5000, &["fs", "append", s(&base), "log/1"], b"x").expect(2);
    assert!(full.stderr.contains("--isz"), "{}", full.stderr);
    let mv = wink(&["fs", "mv", s(&base), "log/2", "renamed"]).expect(2);
    assert!(mv.stderr.contains("ao"), "{}", mv.stderr);
    assert_eq!(snapshot(&base), before, "refused writes change nothing");
    wink(&["check", "--strict", s(&base)]).expect(0);

    let plain = dir.path().join("plain");
    wink(&["fs", "create", s(&plain)]).expect(0);
    put(&plain, "x", b"x");
    for range in [&["--since", "0"][..], &["--until", "2000000000"]] {
        let mut args = vec!["fs", "ls", s(&plain)];
        args.extend_from_slice(range);
        assert!(wink(&args).expect(2).stderr.contains("ao filesys"));
    }
}

#[test]
fn rm_mv_and_missing_names() {
    let (dir, base) = new_fs();
    put(&base, "a", b"content of a");
    put(&base, "b", b"content of b");
    let before = snapshot(&base);
    for args in [
        &["rm", "nope"][..],
        &["mv", "nope", "c"],
        &["append", "nope"],
        &["cat", "nope"],
        &["stat", "nope"],
    ] {
        let full = fs_args(args, &base);
        let run = wink(&full).expect_code(1);
        assert!(run.stdout.is_empty(), "{args:?}");
        assert!(
            run.stderr.starts_with("wink: not found") && run.stderr.contains("nope"),
            "{}",
            run.stderr
        );
    }
    assert!(wink(&["fs", "mv", s(&base), "a", "b"])
        .expect(2)
        .stderr
        .contains("exists"));
    let long = "n".repeat(5000);
    wink(&["fs", "put", s(&base), &long]).expect(2);
    let missing = dir.path().join("no-such-input");
    wink(&["fs", "put", s(&base), "c", s(&missing)]).expect(2);
    wink(&["fs", "put", s(&base), "c", "--type", "256"]).expect(2);
    assert_eq!(snapshot(&base), before, "failed commands change nothing");

    let fileid = stat(&base, "a")["fileid"].clone();
    wink(&["fs", "mv", s(&base), "a", "renamed/a"]).expect(0);
    wink(&["fs", "stat", s(&base), "a"]).expect_code(1);
    assert_eq!(cat(&base, "renamed/a"), b"content of a");
    assert_eq!(
        stat(&base, "renamed/a")["fileid"],
        fileid,
        "rename keeps the file id"
    );
    wink(&["fs", "rm", s(&base), "b"]).expect(0);
    wink(&["fs", "cat", s(&base), "b"]).expect_code(1);
    wink(&["fs", "rm", s(&base), "b"]).expect_code(1);
    let lines = wink(&["fs", "ls", s(&base), "--json"])
        .expect(0)
        .json_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["name"], "renamed/a");
    wink(&["check", "--strict", s(&base)]).expect(0);
}

#[test]
fn reindex_repairs_a_stale_index_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    wink(&["fs", "create", s(&base), "--htsize", "4"]).expect(0);
    put(&base, "a", b"old a");
    let old = stat(&base, "a")["inode"].as_u64().unwrap();
    put(&base, "a", b"new a");
    let new = stat(&base, "a")["inode"].as_u64().unwrap();
    for i in 0..9 {
        put(&base, &format!("f{i}"), format!("file {i}").as_bytes());
    }
    wink(&["fs", "rm", s(&base), "f3"]).expect(0);
    // Point a's cell back at its deleted old inode: the key and its hash still match.
    let idx = file(&base, "idx");
    let cells = wink(&["dump", "--json", s(&idx)]).expect(0).json_lines();
    let cell = cells.iter().find(|c| c["ptr"] == new).expect("a's cell")["cell"]
        .as_u64()
        .unwrap();
    patch(&idx, 4096 + cell * 16, &old.to_be_bytes());
    wink(&["fs", "cat", s(&base), "a"]).expect_code(1);
    let check = wink(&["check", s(&base)]).expect_code(1);
    assert!(check.out().contains("reindex"), "{}", check.out());

    let run = wink(&["fs", "reindex", s(&base)]).expect(0);
    assert_eq!(run.out(), "9\n");
    assert_eq!(cat(&base, "a"), b"new a");
    for i in [0, 1, 2, 4, 5, 6, 7, 8] {
        assert_eq!(cat(&base, &format!("f{i}")), format!("file {i}").as_bytes());
    }
    wink(&["fs", "cat", s(&base), "f3"]).expect_code(1);
    wink(&["check", "--strict", s(&base)]).expect(0);
}

#[test]
fn create_refuses_bad_options_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let nothing = |why: &str| {
        for ext in ["data", "idx", "time", "jnl"] {
            assert!(
                file(&base, ext).symlink_metadata().is_err(),
                "{why}: BASE.{ext} was left"
            );
        }
    };
    for bad in [
        &["--isz", "10"][..],
        &["--isz", "99999999999"],
        &["--isz", "-1"],
        &["--ao", "--timemp", "0"],
        &["--ao", "--timemp=-60"],
        &["--timemp", "60"], // without --ao
        &["--htsize", "0"],
        &["--htsize", "1099511627776"],
        &["--bogus"],
    ] {
        let mut args = vec!["fs", "create", s(&base)];
        args.extend_from_slice(bad);
        wink(&args).expect(2);
        nothing(&format!("{bad:?}"));
    }
    assert!(wink_at("soon", &["fs", "create", s(&base)], b"")
        .expect(2)
        .stderr
        .contains("WINK_NOW"));
    nothing("bad WINK_NOW");

    // Any of the four files, even a dangling symlink, is someone's: refused, kept, nothing made.
    for ext in ["data", "idx", "time", "jnl"] {
        let path = file(&base, ext);
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &path).unwrap();
        let run = wink(&["fs", "create", s(&base), "--ao"]).expect(2);
        assert!(
            run.stderr.contains(s(&path)) && run.stderr.contains("exists"),
            "{}",
            run.stderr
        );
        assert!(
            path.symlink_metadata().unwrap().file_type().is_symlink(),
            "BASE.{ext} kept"
        );
        fs::remove_file(&path).unwrap();
        nothing(ext);
    }
    fs::write(file(&base, "idx"), "not mine").unwrap();
    wink(&["fs", "create", s(&base)]).expect(2);
    assert_eq!(fs::read(file(&base, "idx")).unwrap(), b"not mine");
    fs::remove_file(file(&base, "idx")).unwrap();
    nothing("an existing BASE.idx");

    // A creation that fails midway (here: the index is larger than the file size limit, so its
    // preallocation fails with EFBIG) leaves nothing behind either.
    let limited = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 2048 && trap '' XFSZ && exec \"$0\" fs create \"$1\" --ao --htsize 1048576")
        .arg(env!("CARGO_BIN_EXE_wink"))
        .arg(&base)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&limited.stderr);
    assert_eq!(limited.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("File too large"), "{stderr}");
    nothing("a failed preallocation");
    wink(&["fs", "create", s(&base), "--ao"]).expect(0);
}

#[test]
fn a_base_that_names_no_filesys_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for args in [&["ls"][..], &["cat", "x"], &["put", "x"], &["reindex"]] {
        let full = fs_args(args, &missing);
        assert!(
            wink(&full).expect(2).stderr.contains("no filesys"),
            "{args:?}"
        );
    }
    assert!(!file(&missing, "data").exists());
    let kv = dir.path().join("kv");
    wink(&["kv", "create", s(&file(&kv, "data"))]).expect(0);
    let before = fs::read(file(&kv, "data")).unwrap();
    for args in [&["ls"][..], &["put", "x"]] {
        let full = fs_args(args, &kv);
        let run = wink(&full).expect(2);
        assert!(
            run.stderr.contains("not a filesys datafile"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(fs::read(file(&kv, "data")).unwrap(), before);
    wink(&["fs"]).expect(2);
    wink(&["fs", "put"]).expect(2);
}

#[test]
fn check_reports_a_damaged_inode_with_file_and_offset() {
    let (_dir, base) = new_fs();
    let fresh = wink(&["check", "--strict", s(&base)]).expect(0).out();
    assert!(
        fresh.starts_with(&format!("{}: ok (", base.display())),
        "{fresh}"
    );
    assert_eq!(fresh.lines().count(), 1, "{fresh}");
    put(&base, "a.txt", b"some content");
    wink_at(NOW, &["fs", "append", s(&base), "a.txt"], b" and more").expect(0);
    // A later commit, so that the last journal does not hold a.txt's inode (see journal.rs:
    // readers lay the last commit's in-place writes over the files).
    put(&base, "b.txt", b"other");
    wink(&["check", "--strict", s(&base)]).expect(0);

    let ptr = stat(&base, "a.txt")["inode"].as_u64().unwrap();
    let cksum_at = value_offset(ptr, b"a.txt/I0");
    let data = file(&base, "data");
    let mut byte = bytes_at(&data, cksum_at + 7, 1);
    byte[0] ^= 0x01;
    patch(&data, cksum_at + 7, &byte);

    let check = wink(&["check", s(&base)]).expect_code(1);
    let damage = format!("{}: error at byte {cksum_at}: inode CKSUM", data.display());
    assert!(check.out().contains(&damage), "{}", check.out());
    assert!(
        check.stderr.starts_with("wink: check: "),
        "{}",
        check.stderr
    );
    for args in [&["cat", "a.txt"][..], &["stat", "a.txt"]] {
        let full = fs_args(args, &base);
        let run = wink(&full).expect(3);
        assert!(run.stdout.is_empty());
        assert!(
            run.stderr.contains(s(&data)) && run.stderr.contains(&format!("byte {cksum_at}")),
            "{}",
            run.stderr
        );
    }
    assert_eq!(cat(&base, "b.txt"), b"other", "other files still read");
    // A path that exists is checked as a file, even when PATH.data exists too.
    fs::write(&base, "").unwrap();
    let run = wink(&["check", s(&base)]).expect_code(1);
    assert!(
        run.out().starts_with(&format!("{}: error", base.display())),
        "{}",
        run.out()
    );
    assert!(!run.out().contains(s(&data)), "{}", run.out());
}

#[test]
fn a_second_writer_exits_4_or_waits() {
    let (dir, base) = new_fs();
    put(&base, "a", b"a");
    let before = snapshot(&base);
    let held = Filesys::open(&base, &OpenOptions::writer()).unwrap();
    for args in [
        &["put", "b"][..],
        &["append", "a"],
        &["rm", "a"],
        &["mv", "a", "b"],
        &["reindex"],
    ] {
        let full = fs_args(args, &base);
        let run = wink(&full).expect(4);
        assert!(run.stderr.contains("in use"), "{}", run.stderr);
    }
    assert_eq!(cat(&base, "a"), b"a", "readers need no lock");
    wink(&["fs", "ls", s(&base)]).expect(0);
    assert_eq!(snapshot(&base), before);

    // The content comes from a file, so that the child blocks on the lock, not on stdin.
    let input = dir.path().join("input");
    fs::write(&input, "waited").unwrap();
    let args = ["fs", "put", s(&base), "b", s(&input), "--wait"];
    waits_for_lock(&args, NOW, held).expect(0);
    assert_eq!(cat(&base, "b"), b"waited");
}

#[test]
fn recovery_actions_go_to_stderr() {
    let (_dir, base) = new_fs();
    put(&base, "a", b"a");
    fs::remove_file(file(&base, "jnl")).unwrap();
    let run = wink_at(NOW, &["fs", "put", s(&base), "b"], b"b").expect(0);
    let jnl = file(&base, "jnl");
    assert_eq!(
        run.stderr,
        format!(
            "wink: recovered: {}: created (a filesys written elsewhere)\n",
            jnl.display()
        )
    );
    put(&base, "c", b"c");
    wink(&["check", "--strict", s(&base)]).expect(0);
}

/// Runs the real file(1) with the project's magic on the files `wink fs create` writes.
#[test]
fn file_magic_names_every_filesys_file() {
    if !file_command_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    wink(&["fs", "create", s(&base), "--ao"]).expect(0);
    put(&base, "a", b"a");
    for (ext, expected) in [
        ("data", "kvseq format, FSYSDATA"),
        ("idx", "hindex format, FSYSIDX"),
        ("time", "kvseq format, FSYSTIME"),
        ("jnl", "kvseq format, FSYSJRNL"),
    ] {
        assert_eq!(
            file_magic(&file(&base, ext)),
            format!("Wink peoplesearcher file, {expected}\n"),
            "BASE.{ext}"
        );
    }
}

/// A forged inode (its CKSUM recomputed) whose data sizes add up past 2^64 made `wink fs cat`
/// panic with an add overflow in the library's read loop, even for a range that only needs the
/// first, genuine data entry. Now the range reads, and `wink check` names the bad pointers.
#[test]
fn a_forged_inode_with_huge_sizes_does_not_panic() {
    let (_dir, base, ptr) = a_then_a_later_commit();
    let huge = i64::MAX;
    let pairs = [(4096, 10), (4096, huge), (4096, huge)];
    let forged = inode(1, 10, 0, 1_700_000_000, &pairs, 120);
    patch(&file(&base, "data"), value_offset(ptr, b"a/I0"), &forged);
    let args = ["fs", "cat", s(&base), "a", "--len", "5"];
    assert_eq!(wink(&args).expect(0).stdout, b"01234");
    let check = wink(&["check", s(&base)]).expect_code(1).out();
    let at = format!(
        "{}: error at byte {ptr}: data pointer 1",
        file(&base, "data").display()
    );
    assert!(check.contains(&at), "{check}");
}

/// An inode whose data size disagrees with its data entry is damage (exit 3, file and offset),
/// whether the claimed size is small or large: no read of the claimed size is attempted, and
/// the disagreement is never taken for a wrong argument.
#[test]
fn a_data_size_that_disagrees_with_its_entry_is_damage() {
    let (_dir, base, ptr) = a_then_a_later_commit();
    let data = file(&base, "data");
    for claimed in [11, 1 << 40] {
        let forged = inode(1, claimed, 0, 1_700_000_000, &[(4096, claimed)], 120);
        patch(&data, value_offset(ptr, b"a/I0"), &forged);
        let run = wink(&["fs", "cat", s(&base), "a"]).expect(3);
        assert!(run.stdout.is_empty(), "{claimed}");
        assert!(
            run.stderr.contains(s(&data)) && run.stderr.contains("byte 4096"),
            "{claimed}: {}",
            run.stderr
        );
    }
}
