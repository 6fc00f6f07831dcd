//! `wink`: the command-line program over the Wink library.
//!
//! Exit codes are a stable contract: 0 success; 1 not found, or `check` or `scrub` found
//! problems; 2 bad usage or invalid input (nothing changed); 3 data could not be read (corruption
//! or I/O); 4 in use by another writer. Errors go to stderr as one line starting with `wink: `.

mod check;
#[cfg(feature = "cluster")]
mod cluster;
mod demo;
mod dump;
mod fs;
mod input;
mod kv;
mod recording;
#[cfg(feature = "server")]
mod serve;
mod show;
mod store;

use std::io;
use std::process::ExitCode;
use std::sync::Arc;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use wink::clock::{self, Clock, ManualClock};
use wink::Error;

/// mimalloc for the program (the library leaves the choice to its embedder): see Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const AFTER_HELP: &str = "\
Exit status: 0 success; 1 not found, or `check` or `scrub` found problems; 2 bad usage or invalid
input (nothing changed); 3 data could not be read (corruption or I/O error); 4 in use by another
writer.

Environment: WINK_NOW (seconds since the epoch), when set, is the clock for SYNCTIME, for the
mtimes of filesys files, and for the render store (arrival times, generated tids, retention).";

/// Store and read revisioned web documents; inspect, write and check Wink container files.
#[derive(Parser)]
#[command(name = "wink", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a file's superblock and contents (entries, used cells or pairs).
    Dump(dump::Args),
    /// Create, append to, read from and delete in a kvseq file.
    #[command(subcommand)]
    Kv(kv::Command),
    /// Create, write, read, list and rename files in a filesys (BASE.data, BASE.idx, ...).
    #[command(subcommand)]
    Fs(fs::Command),
    /// Check Wink files, filesys bases and stores for damage; exit 1 when a problem is found.
    Check(check::Args),
    /// Create a render store in a new directory, with its retention policy and limits.
    Init(store::init::Args),
    /// Store a render of a page revision; print its tid once it is durable.
    Put(store::put::Args),
    /// Write a render (the latest, of a revision, or one tid) to stdout, or its metadata.
    Get(store::get::Args),
    /// List a title's readable renders, newest first, with their states.
    Ls(store::ls::Args),
    /// Take a revision or a whole title down (or lift a take-down).
    Rm(store::rm::Args),
    /// Load a corpus (manifest.tsv and DOC/REV.html files) into a store.
    Import(store::import::Args),
    /// Print a store's counts, sizes and policy.
    Stat(store::stat::Args),
    /// Move the revisions that have left the hot tier into the store's archive.
    Archive(store::archive::Args),
    /// Read every value of a store and verify its checksum; exit 1 when one is damaged.
    Scrub(store::scrub::Args),
    /// Reclaim the space of expired, taken-down and replaced values (container by container).
    Compact(store::compact::Args),
    /// Drop the renders no read can return any more from the title records (reads unchanged).
    Cull(store::cull::Args),
    /// Repair what a crash left (as a writer's open does) and check the store.
    Recover(store::recover::Args),
    /// Copy a live store consistently to a new directory (a backup that opens on its own).
    Snapshot(store::snapshot::Args),
    /// Export a store's renders as WARC 1.1 records (gzip, zstd or plain) with a CDXJ index.
    #[cfg(feature = "warc")]
    Export(store::export::Args),
    /// Run the render store end to end on generated pages and print what it measured.
    Demo(demo::Args),
    /// Serve the render stores under a data root over HTTP (RESTBase's key_rev_value API).
    #[cfg(feature = "server")]
    Serve(serve::Args),
    /// A cluster's state: status, verify (every owner agrees), repair, rebalance (docs/CLUSTER.md).
    #[cfg(feature = "cluster")]
    #[command(subcommand)]
    Cluster(cluster::Command),
}

/// What a command that did not fail reports: 0, or 1 when `check` or `scrub` found problems.
type Status = u8;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        Command::Dump(args) => dump::run(&args),
        Command::Kv(command) => kv::run(command),
        Command::Fs(command) => fs::run(command),
        Command::Check(args) => check::run(&args),
        Command::Init(args) => store::init::run(&args),
        Command::Put(args) => store::put::run(&args),
        Command::Get(args) => store::get::run(&args),
        Command::Ls(args) => store::ls::run(&args),
        Command::Rm(args) => store::rm::run(&args),
        Command::Import(args) => store::import::run(&args),
        Command::Stat(args) => store::stat::run(&args),
        Command::Archive(args) => store::archive::run(&args),
        Command::Scrub(args) => store::scrub::run(&args),
        Command::Snapshot(args) => store::snapshot::run(&args),
        #[cfg(feature = "warc")]
        Command::Export(args) => store::export::run(&args),
        Command::Compact(args) => store::compact::run(&args),
        Command::Cull(args) => store::cull::run(&args),
        Command::Recover(args) => store::recover::run(&args),
        Command::Demo(args) => demo::run(&args),
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::run(&args),
        #[cfg(feature = "cluster")]
        Command::Cluster(command) => cluster::run(command),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        // A reader that went away (`wink dump F | head`) is not a failure of ours.
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.to_string(), e.exit_code()),
    }
}

/// Help and version go to stdout with status 0; usage errors are one line and status 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        print!("{e}");
        return ExitCode::SUCCESS;
    }
    let (mut message, usage) = clap_message(&e.to_string());
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // Clap renders the whole help here; its first paragraph is the about text.
        message = "a subcommand is required".into();
    }
    let hint = usage.map_or("see `wink --help`".into(), |u| format!("usage: {u}"));
    fail(&format!("{message}; {hint}"), 2)
}

/// Clap's multi-line message as (the message paragraph on one line, the usage line).
fn clap_message(rendered: &str) -> (String, Option<String>) {
    let mut paragraphs = rendered.split("\n\n");
    let message: Vec<&str> = paragraphs
        .next()
        .unwrap_or("")
        .lines()
        .map(str::trim)
        .collect();
    let message = message.join(" ");
    let message = message
        .strip_prefix("error: ")
        .unwrap_or(&message)
        .to_string();
    let usage = paragraphs.find_map(|p| p.trim().strip_prefix("Usage: ").map(str::to_string));
    (message, usage)
}

fn fail(message: &str, code: i32) -> ExitCode {
    eprintln!("wink: {}", message.replace('\n', " "));
    ExitCode::from(u8::try_from(code).unwrap_or(3))
}

/// The clock for SYNCTIME: `WINK_NOW` when set, else the system's.
fn clock_from_env() -> wink::Result<Arc<dyn Clock>> {
    match std::env::var("WINK_NOW") {
        Ok(text) => {
            let now = text.trim().parse::<i64>().map_err(|_| {
                Error::invalid(format!("WINK_NOW={text:?}: seconds since the epoch"))
            })?;
            // The store stamps and makes tids from it: one range for every verb.
            wink::store::key::check_now(now)
                .map_err(|e| Error::invalid(format!("WINK_NOW={text:?}: {e}")))?;
            Ok(Arc::new(ManualClock::new(now)))
        }
        Err(std::env::VarError::NotPresent) => Ok(clock::system()),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::invalid("WINK_NOW: seconds since the epoch"))
        }
    }
}
