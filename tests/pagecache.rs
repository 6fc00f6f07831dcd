//! Page-cache policy: what the filesys writes does not stay in the page cache; the same bytes
//! written with plain `write()` do. Measured with mincore(2) on a real disk file system (the
//! target directory, not a tmpfs, where pages could never be dropped).

use std::io::Write;

use wink::filesys::{file_path, Filesys, FsOptions, OpenOptions};
use wink::storage::residency;

const TOTAL: usize = 256 << 20;
const DOC: usize = 64 << 10;

#[test]
fn filesys_writes_leave_little_resident_and_plain_writes_do_not() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let doc: Vec<u8> = (0..DOC).map(|i| (i * 31 % 251) as u8).collect();

    let base = dir.path().join("fs");
    let mut fs = Filesys::create(
        &base,
        &FsOptions {
            ao: true,
            ..FsOptions::default()
        },
        &OpenOptions::writer(),
    )
    .unwrap();
    for i in 0..TOTAL / DOC {
        fs.put(format!("doc/{i}").as_bytes(), 0, &doc).unwrap();
    }
    fs.sync().unwrap();
    let (fs_resident, fs_len) = residency(&file_path(&base, "data")).unwrap();
    assert!(fs_len >= TOTAL as u64);

    let plain = dir.path().join("plain");
    let mut f = std::fs::File::create(&plain).unwrap();
    for _ in 0..TOTAL / DOC {
        f.write_all(&doc).unwrap();
    }
    f.sync_data().unwrap();
    let (plain_resident, _) = residency(&plain).unwrap();

    eprintln!(
        "resident after 256 MiB: filesys {} KiB, plain write {} KiB",
        fs_resident >> 10,
        plain_resident >> 10
    );
    assert!(
        fs_resident < 16 << 20,
        "filesys left {fs_resident} bytes of its datafile resident"
    );
    assert!(
        plain_resident > 128 << 20,
        "plain write left only {plain_resident} bytes resident: the comparison shows nothing"
    );
}
