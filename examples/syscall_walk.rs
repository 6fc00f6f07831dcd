//! One warm `get_latest` and one committed put, between markers, for counting their syscalls:
//!
//! ```text
//! cargo build --release --example syscall_walk
//! strace -f -o trace.txt target/release/examples/syscall_walk
//! ```
//!
//! The markers are writes of `== NAME ==` to stderr; `benches/syscalls.sh` runs this under
//! strace and counts the syscalls between them (docs/ARCHITECTURE.md § Two walks).

use std::io::Write;

use wink::store::Put;
use wink::store::Which;
use wink::{Config, Store, StoreOptions};

fn mark(name: &str) {
    // One write(2) each: the counting script finds them in the trace.
    let _ = std::io::stderr().write_all(format!("== {name} ==\n").as_bytes());
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let opts = StoreOptions::writer();
    Store::init(dir.path(), &Config::default(), &opts)?;
    let mut store = Store::open(dir.path(), &opts)?;
    let value = vec![b'x'; 8 << 10];
    for rev in 1..=10 {
        store.put(&Put::new(
            "en.wikipedia.org",
            "Main_Page",
            rev,
            "text/html",
            &value,
        ))?;
    }
    // Warm: the title's record and value were just read once.
    store.get("en.wikipedia.org", "Main_Page", Which::Latest)?;
    mark("get_latest");
    let got = store.get("en.wikipedia.org", "Main_Page", Which::Latest)?;
    mark("put");
    store.put(&Put::new(
        "en.wikipedia.org",
        "Main_Page",
        11,
        "text/html",
        &value,
    ))?;
    mark("end");
    assert_eq!(got.map(|g| g.rev), Some(10));
    Ok(())
}
