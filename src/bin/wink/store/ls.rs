//! `wink ls DIR DOMAIN TITLE [--offset N] [--limit N] [--json]`.

use std::path::PathBuf;

use wink::store::{Listed, Page};
use wink::{Error, Result};

use super::{RenderJson, Title};
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Lists the title's readable renders (retention at WINK_NOW when set; take-downs excluded), newest
first: by revision, then by tid time. Text output: one tab-separated line per render: rev, tid,
size, content type, state (current, recent, historical or archived). With --json: one JSON array
of objects with rev, tid, size, content_type and state, and encoding and language for a render
put with them.

A render whose value is damaged and quarantined (`wink scrub --quarantine`; reads of it fail with
exit 3) has a sixth field, `quarantined PATH` (PATH: its quarantine entry's description); in
JSON, a `quarantined` key with that path. Other renders have neither.

--limit takes 1 or more (--limit 0 is a usage error, exit 2: leave it out to list them all).

Exit status 1, with nothing printed, when the title has no readable render (or none from
--offset on).";

/// Lists a title's renders, newest first.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    #[command(flatten)]
    title: Title,
    /// Skip the first N renders.
    #[arg(long, value_name = "N", default_value_t = 0)]
    offset: usize,
    /// List at most N renders.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// One JSON array instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    if args.limit == Some(0) {
        return Err(Error::invalid(
            "--limit 0: list at least 1 render (leave --limit out to list them all)",
        ));
    }
    let store = super::open_reader(&args.dir)?;
    let page = Page {
        offset: args.offset,
        limit: args.limit.unwrap_or(usize::MAX),
    };
    let listed = store.list(&args.title.domain, &args.title.title, page)?;
    if listed.is_empty() {
        return Err(Error::NotFound(format!(
            "{}: no readable render in {}{}",
            args.title.display(),
            args.dir.display(),
            if args.offset > 0 {
                " at that offset"
            } else {
                ""
            }
        )));
    }
    let quarantined = store.quarantined_title(&args.title.domain, &args.title.title)?;
    let damaged = |l: &Listed| {
        quarantined
            .iter()
            .find(|e| e.rev == l.rev && e.tid() == Some(l.tid))
            .map(|e| {
                wink::store::quarantine::description_path(&args.dir, e.container, e.offset)
                    .display()
                    .to_string()
            })
    };
    let mut out = Out::new();
    if args.json {
        let json: Vec<RenderJson> = listed
            .iter()
            .map(|l| RenderJson {
                quarantined: damaged(l),
                ..json(l)
            })
            .collect();
        out.json(&json)?;
    } else {
        for l in &listed {
            out.line(&format!(
                "{}\t{}\t{}\t{}\t{}{}",
                l.rev,
                l.tid,
                l.size,
                l.content_type,
                l.state.as_str(),
                damaged(l)
                    .map(|q| format!("\tquarantined {q}"))
                    .unwrap_or_default()
            ))?;
        }
    }
    out.finish()?;
    Ok(0)
}

fn json(l: &Listed) -> RenderJson<'_> {
    RenderJson::new(l.rev, l.tid, l.size, &l.content_type, &l.labels, l.state)
}
