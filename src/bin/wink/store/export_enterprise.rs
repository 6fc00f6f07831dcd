//! `wink export DIR --format enterprise -o NAME.json.tar.gz [--domain D] [--as-of T]
//! [--member-bytes N] [--level N] [--threads N] [--json]`: the latest render of every title as a
//! Wikimedia Enterprise HTML snapshot (the options are `wink export`'s).

use std::path::Path;

use serde::Serialize;
use wink::store::key;
use wink::warc::{export_enterprise, EnterpriseExportOptions, EnterpriseExportReport};
use wink::{Error, Result};

use super::export::Args;
use crate::show::Out;
use crate::Status;

pub fn run(dir: &Path, output: Option<&Path>, args: &Args) -> Result<Status> {
    let opts = options(output, args)?;
    let store = super::open_reader(dir)?;
    export(args, |progress| export_enterprise(&store, &opts, progress))
}

/// `--format enterprise --cluster URL --bucket NAME`: a whole cluster's bucket.
#[cfg(feature = "cluster")]
pub fn run_cluster(
    url: &str,
    bucket: &str,
    auth: &wink::serve::Auth,
    output: Option<&Path>,
    args: &Args,
) -> Result<Status> {
    let opts = options(output, args)?;
    if opts.out.exists() {
        return Err(Error::invalid(format!(
            "{} exists; remove it or choose another name",
            opts.out.display()
        )));
    }
    let mut source = super::export_cluster::source(url, bucket, auth, opts.domain.as_deref())?;
    export(args, |progress| {
        wink::warc::export_enterprise_from(&mut source, &opts, progress)
    })
}

fn export(
    args: &Args,
    run: impl FnOnce(
        &mut dyn FnMut(&wink::warc::EnterpriseExportProgress),
    ) -> Result<EnterpriseExportReport>,
) -> Result<Status> {
    let bar = super::progress_bar(Some(0), "exporting {bar:40} {percent}% {msg}, eta {eta}");
    let result = run(&mut |p| {
        bar.set_length(p.walked.1);
        bar.set_position(p.walked.0);
        bar.set_message(format!(
            "{} articles, {:.0} MB of HTML, {:.0} MB written",
            p.articles,
            p.html_bytes as f64 / 1e6,
            p.written_bytes as f64 / 1e6
        ));
    });
    bar.finish_and_clear();
    summary(&result?, args.json)?;
    Ok(0)
}

fn options(output: Option<&Path>, args: &Args) -> Result<EnterpriseExportOptions> {
    let Some(output) = output else {
        return Err(Error::invalid("--format enterprise -o NAME.json.tar.gz"));
    };
    let warc_only = [
        (args.title.is_some(), "--title"),
        (args.current || args.all, "--current/--all"),
        (
            args.since.is_some() || args.until.is_some(),
            "--since/--until",
        ),
        (args.compress.is_some(), "--compress"),
        (args.max_file_bytes.is_some(), "--max-file-bytes"),
        (args.no_index, "--no-index"),
    ];
    if let Some((_, flag)) = warc_only.iter().find(|(given, _)| *given) {
        return Err(Error::invalid(format!(
            "{flag} goes with a WARC export, not --format enterprise"
        )));
    }
    if let Some(d) = &args.domain {
        key::check_domain(d)?;
    }
    let mut opts = EnterpriseExportOptions::new(output)?;
    opts.domain = args.domain.clone();
    opts.as_of = args.as_of;
    if let Some(n) = args.member_bytes {
        if n == 0 {
            return Err(Error::invalid("--member-bytes 0"));
        }
        opts.member_bytes = n;
    }
    if let Some(level) = args.level {
        if !(1..=9).contains(&level) {
            return Err(Error::invalid(format!(
                "--level {level}: gzip levels are 1 to 9"
            )));
        }
        opts.level = level;
    }
    if let Some(t) = args.threads {
        opts.threads = t.max(1);
    }
    if args.key_order {
        opts.order = wink::warc::Order::Key;
    }
    Ok(opts)
}

#[derive(Serialize)]
struct ReportJson {
    articles: u64,
    not_html: u64,
    not_utf8: u64,
    html_bytes: u64,
    raw_bytes: u64,
    written_bytes: u64,
    members: Vec<String>,
    seconds: f64,
    mb_per_s: f64,
}

fn summary(r: &EnterpriseExportReport, json: bool) -> Result<()> {
    let rate = if r.seconds > 0.0 {
        r.html_bytes as f64 / 1e6 / r.seconds
    } else {
        0.0
    };
    let members: Vec<String> = r.members.iter().map(|(m, _)| m.clone()).collect();
    let mut out = Out::new();
    if json {
        out.json(&ReportJson {
            articles: r.articles,
            not_html: r.not_html,
            not_utf8: r.not_utf8,
            html_bytes: r.html_bytes,
            raw_bytes: r.raw_bytes,
            written_bytes: r.written_bytes,
            members,
            seconds: r.seconds,
            mb_per_s: rate,
        })?;
    } else {
        for (field, value) in [
            ("articles", r.articles.to_string()),
            ("not_html", r.not_html.to_string()),
            ("not_utf8", r.not_utf8.to_string()),
            ("html_bytes", r.html_bytes.to_string()),
            ("raw_bytes", r.raw_bytes.to_string()),
            ("written_bytes", r.written_bytes.to_string()),
            ("members", members.join(" ")),
            ("seconds", format!("{:.3}", r.seconds)),
            ("mb_per_s", format!("{rate:.1}")),
        ] {
            out.line(&format!("{field}\t{value}"))?;
        }
    }
    out.finish()
}
