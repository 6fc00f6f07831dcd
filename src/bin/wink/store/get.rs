//! `wink get DIR DOMAIN TITLE [REV [TID]] [--meta]`.

use std::path::PathBuf;

use serde::Serialize;
use wink::store::Got;
use wink::store::Which;
use wink::{Error, Result};

use super::{RenderJson, Title};
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Writes the render's bytes, exactly as stored, to stdout: the latest render of the latest
revision; with REV, the latest render of that revision; with REV and TID, that render. Only
renders that retention still keeps (at WINK_NOW when set) and that are not taken down are found.

--as-of T writes what was the latest render at time T (RFC 3339, e.g. 2024-05-01T12:00:00Z, or
seconds since the epoch): the newest render, by revision then tid, whose tid carries a time at
or before T — if retention still keeps it (exit status 1 otherwise). It takes no REV or TID.

--meta prints one JSON object instead: domain, title, rev, tid, size, content_type, state
(current, recent, historical or archived), encoding and language (only for a render put with
them) and etag (an HTTP entity tag, quotes included:
\"REV/TID\").

Every value is verified against its CRC-32 before a byte is written: damage is reported with the
container file and byte offset (exit status 3). Exit status 1 when there is no such render.";

/// Writes a render to stdout.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    #[command(flatten)]
    title: Title,
    /// A revision (default: the latest).
    #[arg(allow_negative_numbers = true)]
    rev: Option<String>,
    /// A render of REV, by its tid (default: the latest render of REV).
    tid: Option<String>,
    /// What was the latest render at this time (RFC 3339 or seconds since the epoch).
    #[arg(long, value_name = "T", conflicts_with_all = ["rev", "tid"], allow_hyphen_values = true)]
    as_of: Option<String>,
    /// Print the render's metadata as JSON instead of its content.
    #[arg(long)]
    meta: bool,
}

#[derive(Serialize)]
struct MetaJson<'a> {
    domain: &'a str,
    title: &'a str,
    #[serde(flatten)]
    render: RenderJson<'a>,
    etag: String,
}

pub fn run(args: &Args) -> Result<Status> {
    let rev = args.rev.as_deref().map(super::parse_rev).transpose()?;
    let tid = args.tid.as_deref().map(super::parse_tid).transpose()?;
    let as_of = args
        .as_of
        .as_deref()
        .map(wink::clock::parse_instant)
        .transpose()?;
    let store = super::open_reader(&args.dir)?;
    let (domain, title) = (args.title.domain.as_str(), args.title.title.as_str());
    let got = match (as_of, rev, tid) {
        (Some(at), _, _) => store.get(domain, title, Which::AsOf(at))?,
        (None, Some(rev), Some(tid)) => store.get(domain, title, Which::Render(rev, tid))?,
        (None, Some(rev), None) => store.get(domain, title, Which::Rev(rev))?,
        _ => store.get(domain, title, Which::Latest)?,
    };
    let Some(got) = got else {
        return Err(not_found(args));
    };
    let mut out = Out::new();
    if args.meta {
        out.json(&meta(args, &got))?;
    } else {
        out.bytes(&got.value)?;
    }
    out.finish()?;
    Ok(0)
}

fn meta<'a>(args: &'a Args, got: &'a Got) -> MetaJson<'a> {
    MetaJson {
        domain: &args.title.domain,
        title: &args.title.title,
        render: RenderJson::new(
            got.rev,
            got.tid,
            got.value.len() as u64,
            &got.content_type,
            &got.labels,
            got.state,
        ),
        etag: format!("\"{}/{}\"", got.rev, got.tid),
    }
}

fn not_found(args: &Args) -> Error {
    let which = match (&args.rev, &args.tid) {
        _ if args.as_of.is_some() => {
            format!(
                "any revision as of {}",
                args.as_of.as_deref().unwrap_or_default()
            )
        }
        (Some(rev), Some(tid)) => format!("revision {rev} tid {tid}"),
        (Some(rev), None) => format!("revision {rev}"),
        _ => "any revision".to_string(),
    };
    Error::NotFound(format!(
        "{}: no render of {} in {} (never stored, taken down, or past retention)",
        args.title.display(),
        which,
        args.dir.display()
    ))
}
