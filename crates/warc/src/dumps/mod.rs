//! Dumps people already consume, on the store's dump walk and the WARC export: Wikimedia
//! Enterprise HTML snapshots in and out, and WACZ packages. `docs/DUMPS.md` has the field
//! mapping (what is kept, what is dropped, why) and the layouts.
//!
//! | file                       | what                                                        |
//! |----------------------------|-------------------------------------------------------------|
//! | `enterprise/mod.rs`        | an article ↔ a render: domain, title, revision, time, type  |
//! | `enterprise/import.rs`     | `wink import --enterprise`: a snapshot's articles as puts   |
//! | `enterprise/export.rs`     | `wink export --format enterprise`: latest renders as articles |
//! | `targz.rs`                 | a tar.gz of members written in one pass, compressed on every core |
//! | `wacz.rs`                  | `wink export --wacz`: the WARC export packaged as WACZ 1.1.1 |

pub(crate) mod enterprise;
pub(crate) mod targz;
pub(crate) mod wacz;
