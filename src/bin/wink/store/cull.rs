//! `wink cull DIR [--json] [--wait]`: rewrites title records without the renders no read can
//! return any more.

use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use wink::maintenance;
use wink::maintenance::CullReport;
use wink::{Error, Result};

use super::Writing;
use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Walks every title record and rewrites it without the renders that retention no longer lets
through at WINK_NOW (when set): what a put of the title would cull. The archive's candidates not
archived yet and take-down markers are kept. Reads return exactly what they did before, at this
time and any later one; the values culled become dead bytes in their containers, which
`wink compact` reclaims (it would have either way). The work is done in steps of 256 titles,
each committed: an interrupted cull loses nothing and a rerun goes on.

A progress bar goes to stderr when it is a terminal. Output: one `FIELD<TAB>VALUE` line each —
titles (records walked), titles_touched (records rewritten or removed), renders_culled,
dead_bytes (value bytes of the culled renders), seconds. --json: one object with those fields.

Exit status: 0 on success; 2 when DIR holds no store; 3 when data cannot be read or written
(what was culled before stays culled); 4 when another writer holds the store (unless --wait).";

/// Drops the renders no read can return any more from the title records.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// One JSON object instead of FIELD<TAB>VALUE lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    writing: Writing,
}

#[derive(Serialize)]
struct ReportJson {
    titles: u64,
    titles_touched: u64,
    renders_culled: u64,
    dead_bytes: u64,
    seconds: f64,
}

pub fn run(args: &Args) -> Result<Status> {
    let mut store = super::open_writer(&args.dir, &args.writing)?;
    let bar = super::progress_bar(None, "culling {bar:40} {percent}%, eta {eta}");
    let started = Instant::now();
    let result = maintenance::cull_all(&mut store, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = result?;
    let json = to_json(&report, started.elapsed().as_secs_f64());
    let mut out = Out::new();
    if args.json {
        out.line(&serde_json::to_string(&json).map_err(|e| Error::invalid(e.to_string()))?)?;
    } else {
        for (field, value) in [
            ("titles", json.titles.to_string()),
            ("titles_touched", json.titles_touched.to_string()),
            ("renders_culled", json.renders_culled.to_string()),
            ("dead_bytes", json.dead_bytes.to_string()),
            ("seconds", format!("{:.3}", json.seconds)),
        ] {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()?;
    Ok(0)
}

fn to_json(report: &CullReport, seconds: f64) -> ReportJson {
    ReportJson {
        titles: report.titles,
        titles_touched: report.titles_touched,
        renders_culled: report.renders_culled,
        dead_bytes: report.dead_bytes,
        seconds,
    }
}
