//! WARC 1.1 (ISO 28500:2017) interchange for a Wink render store, and the dumps built on it.
//!
//! A store's renders are exported as web-archive records with a CDXJ index ([`export_warc`]),
//! WARC files are imported back into a store ([`import_warc`]) and checked on their own
//! ([`check_warc`]). With the feature `dumps` (on by default), the same walk and records make
//! the dumps people already consume: Wikimedia Enterprise HTML snapshots in and out
//! ([`import_enterprise`], [`export_enterprise`]) and WACZ packages ([`export_wacz`]).
//! `docs/WARC.md` has the record layout, the URI form, the index and the import mapping;
//! `docs/DUMPS.md` the Enterprise field mapping and the WACZ layout.
//!
//! The crate stands on the engine (`wink_engine`) alone: it compiles no async runtime, HTTP
//! server, argument parser or NATS client. The `wink` binary's `export`, `import --warc`,
//! `import --enterprise` and `check --warc` are thin layers over the functions below.
//!
//! ```
//! use wink_engine::{Config, Put, Store, StoreOptions, Which};
//! use wink_warc::{export_warc, import_warc, ExportOptions, ImportOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
//! let opts = StoreOptions::writer();
//! Store::init(&src, &Config::default(), &opts)?;
//! let mut store = Store::open(&src, &opts)?;
//! store.put(&Put::new("en.wikipedia.org", "Main_Page", 1, "text/html", b"<p>one</p>"))?;
//!
//! // One gzip member per record, and the CDXJ index beside the WARC file.
//! let warc = dir.path().join("out.warc.gz");
//! let exported = export_warc(&store, &ExportOptions::new(&warc)?, |_| {})?;
//! assert_eq!(exported.resources, 1);
//!
//! // Read back into another store: the same render, byte for byte.
//! Store::init(&dst, &Config::default(), &opts)?;
//! let mut copy = Store::open(&dst, &opts)?;
//! let none = ImportOptions::default();
//! let imported = import_warc(&mut copy, &[warc], &none, |_| {}, |_| {}, |_, _| {})?;
//! assert_eq!(imported.renders, 1);
//! let got = copy.get("en.wikipedia.org", "Main_Page", Which::Latest)?.expect("imported");
//! assert_eq!(got.value, b"<p>one</p>");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The API is the list of names below; the modules are private, one per piece:
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

//!
//! and under `dumps/`: `enterprise/` (an article ↔ a render; the snapshot import and export),
//! `targz.rs` (a tar.gz written in one pass, compressed on every core) and `wacz.rs` (the WARC
//! export packaged as WACZ 1.1.1).

#![warn(missing_docs)]

mod cdxj;
mod check;
mod codec;
mod date;
mod digest;
#[cfg(feature = "dumps")]
mod dumps;
mod export;
#[cfg(feature = "harness")]
mod fuzz;
mod import;
mod mapping;
mod outfile;
mod payload;
mod reader;
mod record;
mod surt;
mod writer;

// The engine's error type, under the path the modules import it by.
mod error {
    pub(crate) use wink_engine::{Error, Result};
}

// The WARC export, and what it is made of.
pub use codec::Compression;
pub use date::Ticks;
pub use export::{
    export_source, export_warc, DumpSource, ExportOptions, ExportProgress, ExportReport, Filter,
    Order, SourceInfo, StoreSource,
};
pub use mapping::{parse_render_uri, RenderKey};
// The WARC import and check.
pub use check::{check_warc, FileSummary, Problem};
pub use import::{import_warc, ImportOptions, ImportReport, Refusal};
pub use reader::Damage;

// Wikimedia Enterprise HTML snapshots, and WACZ packages.
#[cfg(feature = "dumps")]
pub use dumps::enterprise::export::{
    export_enterprise, export_enterprise_from, EnterpriseExportOptions, EnterpriseExportProgress,
    EnterpriseExportReport,
};
#[cfg(feature = "dumps")]
pub use dumps::enterprise::import::{
    import_enterprise, EnterpriseImportOptions, EnterpriseImportProgress, EnterpriseImportReport,
    EnterpriseListener, EnterpriseNote, EnterprisePlace, QuietListener,
};
#[cfg(feature = "dumps")]
pub use dumps::wacz::{export_wacz, WaczReport};

// The fuzz entry point of the record reader.
#[cfg(feature = "harness")]
pub use fuzz::fuzz_warc_record;
