//! The render store's verbs: `wink init`, `put`, `get`, `ls`, `rm`, `import`, `stat`, `archive`,
//! all taking the store's directory first.
//!
//! Every argument is validated before the store is opened, so that bad input (exit 2) never
//! takes the writer lock or touches a file. Writing verbs take the store's writer lock (`--wait`
//! waits for it instead of exit 4) and succeed only after their commit is durable. Every verb
//! reads the clock from `WINK_NOW` when set: it stamps arrivals and generated tids, and decides
//! which renders retention still lets through.

pub mod archive;
pub mod compact;
pub mod cull;
#[cfg(feature = "warc")]
pub mod export;
#[cfg(feature = "cluster")]
pub mod export_cluster;
#[cfg(feature = "dumps")]
pub mod export_enterprise;
pub mod get;
pub mod import;
#[cfg(feature = "dumps")]
pub mod import_enterprise;
#[cfg(feature = "warc")]
pub mod import_warc;
pub mod init;
pub mod ls;
pub mod put;
pub mod recover;
pub mod rm;
pub mod scrub;
pub mod snapshot;
pub mod stat;

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use uuid::Uuid;
use wink::store::{key, Labels, State, Store, StoreOptions};
use wink::{Error, Result};

/// The option every writing verb takes.
#[derive(clap::Args)]
pub struct Writing {
    /// Wait for another writer's lock instead of exiting with status 4.
    #[arg(long)]
    wait: bool,
}

/// A title as given on the command line: `DOMAIN TITLE`.
#[derive(clap::Args)]
pub struct Title {
    /// The domain, e.g. en.wikipedia.org: 1 to 255 bytes, no `/`.
    domain: String,
    /// The page title: 1 to 1024 bytes.
    title: String,
}

impl Title {
    /// "DOMAIN/TITLE" for messages.
    fn display(&self) -> String {
        format!("{}/{}", self.domain, self.title)
    }
}

/// A revision argument: a non-negative decimal integer.
fn parse_rev(text: &str) -> Result<u64> {
    key::parse_rev(text)
}

/// A tid argument: a version-1 UUID.
fn parse_tid(text: &str) -> Result<Uuid> {
    key::parse_tid(text)
}

/// Opens the store in `dir` read-only, with the `WINK_NOW` clock (retention depends on it).
fn open_reader(dir: &Path) -> Result<Store> {
    let clock = crate::clock_from_env()?;
    expect_store(dir)?;
    Store::open(
        dir,
        &StoreOptions {
            clock,
            ..StoreOptions::read_only()
        },
    )
}

/// Opens the store in `dir` for writing, and reports on stderr what the open repaired.
/// The start of an import of `files` (each must be a file) into the store at `dir`: the
/// writer's handle and a bytes progress bar drawn with `template`.
fn start_import(
    dir: &Path,
    files: &[std::path::PathBuf],
    writing: &Writing,
    template: &'static str,
) -> Result<(Store, ProgressBar)> {
    for f in files {
        if !f.is_file() {
            return Err(Error::invalid(format!("{}: not a file", f.display())));
        }
    }
    let store = open_writer(dir, writing)?;
    Ok((store, progress_bar(Some(0), template)))
}

fn open_writer(dir: &Path, writing: &Writing) -> Result<Store> {
    let store = open_writer_quietly(dir, writing)?;
    for action in repairs(&store) {
        eprintln!("wink: recovered: {action}");
    }
    Ok(store)
}

/// Opens the store in `dir` for writing; what the open repaired is left to [`repairs`].
fn open_writer_quietly(dir: &Path, writing: &Writing) -> Result<Store> {
    let clock = crate::clock_from_env()?;
    expect_store(dir)?;
    Store::open(
        dir,
        &StoreOptions {
            wait: writing.wait,
            clock,
            ..StoreOptions::writer()
        },
    )
}

/// What a writer's open repaired (the title records', then the containers' and compaction's),
/// one line each.
fn repairs(store: &Store) -> Vec<String> {
    let meta = store.meta().recovery().actions.iter();
    meta.chain(store.recovery())
        .map(|a| a.replace('\n', " "))
        .collect()
}

/// A directory that holds no store is a usage mistake (exit 2), as a base that names no filesys
/// is for `wink fs`, not a missing render (exit 1).
fn expect_store(dir: &Path) -> Result<()> {
    let config = dir.join("store");
    if config.symlink_metadata().is_err() {
        return Err(Error::invalid(format!(
            "{}: no store there ({} does not exist; create one with `wink init`)",
            dir.display(),
            config.display()
        )));
    }
    Ok(())
}

/// A render as JSON, for `get --meta` and `ls --json`.
#[derive(Serialize)]
struct RenderJson<'a> {
    rev: u64,
    tid: String,
    size: u64,
    content_type: &'a str,
    state: &'static str,
    /// The render's content coding, when it was put with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding: Option<&'a str>,
    /// The render's language, when it was put with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    language: Option<&'a str>,
    /// The quarantine entry of a damaged value (`wink scrub --quarantine`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    quarantined: Option<String>,
}

impl<'a> RenderJson<'a> {
    fn new(
        rev: u64,
        tid: Uuid,
        size: u64,
        content_type: &'a str,
        labels: &'a Labels,
        state: State,
    ) -> Self {
        RenderJson {
            rev,
            tid: tid.to_string(),
            size,
            content_type,
            state: state.as_str(),
            encoding: labels.encoding.as_deref(),
            language: labels.language.as_deref(),
            quarantined: None,
        }
    }
}

/// A progress bar on stderr when it is a terminal; hidden otherwise, so that logs and pipes get
/// only the verb's report. `template` names only indicatif's own keys.
pub(crate) fn progress_bar(len: Option<u64>, template: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    // A template is a constant of one of the verbs: it parses, or the bar keeps its default look.
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}
