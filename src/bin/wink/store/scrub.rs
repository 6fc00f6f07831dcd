//! `wink scrub DIR`: reads every value of a store and verifies its checksum.

use std::path::PathBuf;

use wink::maintenance;
use wink::maintenance::scrub::{ScrubOptions, ScrubProgress, ScrubReport, Tier};
use wink::Result;

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Reads every value reads could return now (retention at WINK_NOW when set) — every hot render,
container by container in offset order — and every archived revision, and verifies each against
its CRC-32. The page cache is left as it was found: a container's pages are dropped once its
values are read. A progress bar goes to stderr when it is a terminal.

One line on stdout per damaged value:
`DOMAIN/TITLE rev REV tid TID: TIER FILE at byte OFFSET: WHAT` (TIER is hot or archive), and
one per damaged title record or title index cell, checked first:
`DOMAIN/TITLE: meta FILE at byte OFFSET: WHAT` (each record under its checksum and its own key,
reachable through the index; each index cell against its key). When there is none,
`DIR: ok (N values, B bytes, A archived revisions)`.

With --quarantine, each damaged hot value is also copied, exactly as found, to
DIR/quarantine/cNNNNNN-OFFSET.bin with a JSON description beside it (cNNNNNN-OFFSET.json:
container, file, offset, length, expected and found CRC-32, title, rev, tid), and its line ends
with `; quarantined in PATH`. Nothing in the store is changed or truncated: the container keeps
the bytes, the title record still names them. Reads of a quarantined value then fail with a
message naming its entry (exit 3), `wink ls` marks it, `wink stat` counts the entries and
`wink check` warns about it (failing with --strict) until it is restored from a snapshot or put
again. An entry that exists already is kept. Archived revisions are reported, not quarantined.
Needs no writer lock (it writes only under DIR/quarantine).

Exit status: 0 when every value is intact; 1 when damage was found (quarantined or not); 3 when
the store itself (its configuration, title records or archive maps) cannot be read.";

/// Reads every value of a store and verifies its checksum.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Copy each damaged value, with a description, to DIR/quarantine/.
    #[arg(long)]
    quarantine: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    let store = super::open_reader(&args.dir)?;
    let bar = super::progress_bar(None, "{bar:40} {pos}/{len} {msg}, eta {eta}");
    let opts = ScrubOptions {
        quarantine: args.quarantine,
    };
    let result = maintenance::scrub_with(&store, opts, |p: ScrubProgress| {
        if bar.length() != Some(p.total) {
            bar.set_length(p.total);
            bar.set_message(p.what);
        }
        bar.set_position(p.done);
    });
    bar.finish_and_clear();
    let report = result?;
    print(args, &report)?;
    if report.is_clean() {
        return Ok(0);
    }
    let quarantined = report
        .damaged
        .iter()
        .filter(|d| d.quarantined.is_some())
        .count();
    let titles = report
        .damaged
        .iter()
        .filter(|d| d.tier == Tier::Meta)
        .count();
    eprintln!(
        "wink: scrub: {} damaged titles (records or index), {} damaged values of {} hot values \
         and {} archived revisions{}",
        titles,
        report.damaged.len() - titles,
        report.values,
        report.archived,
        if args.quarantine {
            format!(
                "; {quarantined} quarantined in {}",
                wink::store::quarantine::dir_of(&args.dir).display()
            )
        } else {
            String::new()
        }
    );
    Ok(1)
}

fn print(args: &Args, report: &ScrubReport) -> Result<()> {
    let mut out = Out::new();
    for d in &report.damaged {
        if d.tier == Tier::Meta {
            // Damage to a title record or its index: no value of it was read.
            out.line(&format!(
                "{}/{}: meta {} at byte {}: {}",
                d.domain,
                d.title,
                d.file.display(),
                d.offset,
                d.what.replace('\n', " ")
            ))?;
            continue;
        }
        out.line(&format!(
            "{}/{} rev {} tid {}: {} {} at byte {}: {}{}",
            d.domain,
            d.title,
            d.rev,
            d.tid,
            d.tier.as_str(),
            d.file.display(),
            d.offset,
            d.what.replace('\n', " "),
            d.quarantined
                .as_ref()
                .map(|q| format!("; quarantined in {}", q.display()))
                .unwrap_or_default()
        ))?;
    }
    if report.is_clean() {
        out.line(&format!(
            "{}: ok ({} values, {} bytes, {} archived revisions)",
            args.dir.display(),
            report.values,
            report.bytes,
            report.archived
        ))?;
    }
    out.finish()
}
