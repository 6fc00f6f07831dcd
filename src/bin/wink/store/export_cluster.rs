//! `wink export --cluster URL --bucket NAME -o OUT.warc.gz [filters]`: a whole cluster's bucket
//! as one WARC export, each partition read from one owner and the partitions merged in key
//! order (docs/CLUSTER.md § Export): the same records as `wink export --key-order` of a store
//! holding the same renders.

use std::collections::HashMap;

use uuid::Uuid;
use wink::cluster::dump::{ClusterDump, DumpStats};
use wink::store::{DumpRender, DumpTitle};
use wink::warc::{DumpSource, ExportOptions, ExportReport, SourceInfo};
use wink::{Error, Result};

/// Titles handed to the export per step.
const STEP_TITLES: usize = 64;

/// A cluster dump as the export's source: its titles in key order, their values held for the
/// step that gives them.
pub struct ClusterSource {
    dump: ClusterDump,
    values: HashMap<(String, String, u64, Uuid), Vec<u8>>,
    titles: u64,
    /// The export's time (`WINK_NOW` when set, as a local export's).
    now: i64,
}

impl DumpSource for ClusterSource {
    fn info(&self) -> SourceInfo {
        let s = self.dump.settings();
        SourceInfo {
            revisions: s.revisions.clone(),
            renders: s.renders.clone(),
            historical_ttl: s.historical_ttl,
            archive: s.archive.clone(),
            now: self.now,
        }
    }

    fn next_titles(&mut self) -> Result<Option<Vec<DumpTitle>>> {
        self.values.clear();
        let mut out = Vec::new();
        while out.len() < STEP_TITLES {
            let Some(t) = self.dump.next_title()? else {
                break;
            };
            for (r, v) in t.title.renders.iter().zip(t.values) {
                let key = (t.title.domain.clone(), t.title.title.clone(), r.rev, r.tid);
                self.values.insert(key, v);
            }
            out.push(t.title);
        }
        self.titles += out.len() as u64;
        Ok((!out.is_empty()).then_some(out))
    }

    fn read(&mut self, title: &DumpTitle, render: &DumpRender) -> Result<Vec<u8>> {
        let key = (
            title.domain.clone(),
            title.title.clone(),
            render.rev,
            render.tid,
        );
        self.values
            .remove(&key)
            .ok_or_else(|| Error::internal("a cluster dump's value read twice or not given"))
    }

    fn walked(&self) -> (u64, u64) {
        let s = self.dump.stats();
        (u64::from(s.partitions_done), u64::from(s.partitions))
    }
}

/// The titles of `bucket` of the cluster at `url` (of `domain` only, when given) in key order,
/// as an export's source; the first page of every partition is read.
pub fn source(
    url: &str,
    bucket: &str,
    auth: &wink::serve::Auth,
    domain: Option<&str>,
) -> Result<ClusterSource> {
    Ok(ClusterSource {
        dump: ClusterDump::open(url, bucket, auth, domain)?,
        values: HashMap::new(),
        titles: 0,
        now: crate::clock_from_env()?.now(),
    })
}

/// Exports bucket `bucket` of the cluster at `url` as `opts` says; also answers what was
/// fetched.
pub fn export(
    url: &str,
    bucket: &str,
    auth: &wink::serve::Auth,
    opts: &ExportOptions,
    progress: impl FnMut(&wink::warc::ExportProgress),
) -> Result<(ExportReport, DumpStats)> {
    // The output's name and index are checked before the cluster is asked anything.
    opts.base()?;
    if let Some(p) = Some(opts.index_path()?).filter(|p| opts.index && p.exists()) {
        return Err(Error::invalid(format!(
            "{} exists; remove it or choose another name",
            p.display()
        )));
    }
    let mut source = source(url, bucket, auth, opts.filter.domain.as_deref())?;
    let report = wink::warc::export_source(&mut source, opts, progress)?;
    Ok((report, source.dump.stats()))
}
