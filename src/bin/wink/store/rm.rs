//! `wink rm DIR DOMAIN TITLE [REV] [--wait]` and `wink rm --lift DIR DOMAIN TITLE [REV]`.

use std::path::PathBuf;

use wink::{Error, Result};

use super::{Title, Writing};
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
A take-down of revision REV, or without REV of the whole title: its renders are never returned
again, and a later put of it is refused (exit status 2) until the take-down is lifted. The
take-down is a tombstone that persists, even for a title or revision not stored yet. Prints the
number of renders removed.

--lift removes the take-down of REV (or of the title) again; renders removed by it stay removed.
Exit status 1 when there was no such take-down to lift.";

/// Takes a revision or a title down, or lifts a take-down.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    #[command(flatten)]
    title: Title,
    /// The revision to take down (default: the whole title).
    #[arg(allow_negative_numbers = true)]
    rev: Option<String>,
    /// Lift the take-down instead.
    #[arg(long)]
    lift: bool,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let rev = args.rev.as_deref().map(super::parse_rev).transpose()?;
    let mut store = super::open_writer(&args.dir, &args.writing)?;
    let (domain, title) = (args.title.domain.as_str(), args.title.title.as_str());
    if args.lift {
        if !store.lift(domain, title, rev)? {
            let what = rev.map_or("the title".to_string(), |r| format!("revision {r}"));
            return Err(Error::NotFound(format!(
                "{}: {what} is not taken down; nothing to lift",
                args.title.display()
            )));
        }
        return Ok(0);
    }
    let removed = store.take_down(domain, title, rev)?;
    let mut out = Out::new();
    out.line(&removed.to_string())?;
    out.finish()?;
    Ok(0)
}
