//! The fuzz entry point of the WARC record reader (the cargo-fuzz target `warc_record` in
//! `fuzz/`, replayed by `tests/fuzz_replay.rs`). It lives here, beside the reader, and not in
//! the crate `wink_harness` with the engine's entry points: the harness builds on the engine
//! alone, and this package depends on the harness (for `wink demo`), not the other way round.

use std::path::Path;

use wink_harness::fuzzing::{check_error, INPUT_PATH};

use super::codec::Compression;
use super::reader::{ReadError, RecordReader};
use super::record::Header;

/// Reads `data[1..]` as a WARC file with the reader the import uses, skipping damage
/// as `wink import --skip-damaged` and `wink check --warc` do; `data[0]` picks how the bytes
/// reach the reader: as they are (compression sniffed), or wrapped in one gzip member or one
/// zstd frame, so the fuzzer explores the record parser behind a decoder too. Damage must name
/// an offset within the file; the walk must end (every resync moves forward).
pub fn fuzz_warc_record(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let file = match mode % 3 {
        0 => rest.to_vec(),
        1 => Compression::Gzip.compress(rest, 1).expect("in-memory gzip"),
        _ => Compression::Zstd.compress(rest, 1).expect("in-memory zstd"),
    };
    let len = file.len() as u64;
    let path = Path::new(INPUT_PATH);
    let Ok(mut reader) = RecordReader::new(path, std::io::Cursor::new(file), 1 << 20) else {
        return;
    };
    let mut last = None;
    for _ in 0..=len {
        match reader.next_record() {
            Ok(Some(r)) => {
                assert!(r.offset <= len, "a record at {} of {len} bytes", r.offset);
                assert!(r.block.len() as u64 <= r.block_len);
                assert!(r.payload_start <= r.block.len().max(1) || !r.kept);
                let mut bytes = Vec::new();
                r.header.write_to(&mut bytes);
                let again = Header::parse(&bytes[..bytes.len() - 2]);
                assert_eq!(
                    again.as_ref(),
                    Ok(&r.header),
                    "a header writes and parses back"
                );
            }
            Ok(None) => return,
            Err(ReadError::Io(e)) => return check_error(&e, &[(path, len)]),
            Err(ReadError::Damage(d)) => {
                assert!(d.offset <= len, "damage at {} of {len} bytes", d.offset);
                check_error(&d.to_error(path), &[(path, len)]);
                assert!(last.is_none_or(|l| d.offset >= l), "damage went backwards");
                last = Some(d.offset);
                match reader.skip_damage() {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => return check_error(&e, &[(path, len)]),
                }
            }
        }
    }
    panic!("more records than bytes: the walk does not end");
}
