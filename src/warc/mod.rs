//! WARC 1.1 (ISO 28500:2017) interchange: a store's renders exported as web-archive records with
//! a CDXJ index, WARC files imported back into a store, and WARC files checked on their own.
//! `docs/WARC.md` has the record layout, the URI form, the index and the import mapping.
//!
//! | file          | what                                                                  |
//! |---------------|-----------------------------------------------------------------------|
//! | `record.rs`   | a record's header: fields, writing, parsing                           |
//! | `digest.rs`   | block and payload digests (`sha1:` base32 written; sha1/sha256/md5 read) |
//! | `date.rs`     | `WARC-Date` and 14-digit timestamps from and to 100-ns ticks          |
//! | `codec.rs`    | a gzip member or zstd frame per record; decoding member by member     |
//! | `reader.rs`   | records read one at a time: framing, fields and digests checked        |
//! | `mapping.rs`  | a render ↔ its URI and fields; where another WARC's record goes        |
//! | `payload.rs`  | the render a `resource` or `response` record carries                  |
//! | `surt.rs`     | SURT keys, as pywb and cdxj-indexer make them                         |
//! | `cdxj.rs`     | the index's lines, sorted with bounded memory                         |
//! | `outfile.rs`  | an output file written with drop-behind, synced and dropped at close  |
//! | `writer.rs`   | records compressed on every core, written in order, split, indexed    |
//! | `export.rs`   | `wink export`: the store's dump walk as records                       |
//! | `import.rs`   | `wink import --warc`: records as puts                                 |
//! | `check.rs`    | `wink check --warc`: the reader's checks alone, every problem reported |

pub mod cdxj;
pub mod check;
pub mod codec;
pub mod date;
pub mod digest;
pub mod export;
#[cfg(feature = "harness")]
pub mod fuzz;
pub mod import;
pub mod mapping;
pub mod outfile;
pub mod payload;
pub mod reader;
pub mod record;
pub mod surt;
pub mod writer;
