//! wink's render store through its public API: one `Store::batch` per batch (its puts, one
//! commit), `Store::get_latest` / `Store::get_render` per read (each returns a fresh `Vec`,
//! verified against its CRC-32). Retention keeps everything (revisions `all`, renders `all`), as
//! the other contenders do.

use std::path::Path;

use uuid::Uuid;
use wink::store::{Config, Policy, Put, Renders, Revisions, Store, StoreOptions};
use wink::store::Which;

use crate::contender::{files_in, Contender, Files, Res, Seen};
use crate::workload::{PutBuf, CONTENT_TYPE};

pub struct Wink {
    store: Store,
    /// With `WINK_BENCH_READ_HANDLE=read-only`: gets go through a read-only handle opened beside
    /// the writer, as `wink serve` reads.
    reader: Option<Store>,
    /// Wall seconds spent in `Store::commit` and commits made (reported on drop when
    /// `WINK_BENCH_COMMIT_TIMES=1`, to split a load's time between puts and commits).
    commit_secs: f64,
    commits: u64,
}

impl Drop for Wink {
    fn drop(&mut self) {
        if self.commits > 0 && std::env::var("WINK_BENCH_COMMIT_TIMES").is_ok_and(|v| v == "1") {
            eprintln!(
                "  wink: {} commits, {:.3} s in Store::commit ({:.2} ms each)",
                self.commits,
                self.commit_secs,
                1e3 * self.commit_secs / self.commits as f64
            );
        }
    }
}

impl Wink {
    /// The handle gets go through.
    fn reading(&self) -> &Store {
        self.reader.as_ref().unwrap_or(&self.store)
    }
}

impl Contender for Wink {
    fn create(dir: &Path) -> Res<Self> {
        let cfg = Config {
            policy: Policy {
                revisions: Revisions::All,
                renders: Renders::All,
                ..Policy::default()
            },
            ..Config::default()
        };
        Store::init(dir, &cfg, &StoreOptions::writer())?;
        Wink::open(dir)
    }

    fn open(dir: &Path) -> Res<Self> {
        let store = Store::open(dir, &StoreOptions::writer())?;
        let read_only = std::env::var("WINK_BENCH_READ_HANDLE").is_ok_and(|v| v == "read-only");
        let reader = match read_only {
            true => Some(Store::open(dir, &StoreOptions::read_only())?),
            false => None,
        };
        Ok(Wink {
            store,
            reader,
            commit_secs: 0.0,
            commits: 0,
        })
    }

    fn write_batch(&mut self, n: u64, fill: &mut dyn FnMut(u64, &mut PutBuf)) -> Res<()> {
        let mut buf = PutBuf::default();
        let mut batch = self.store.batch();
        for i in 0..n {
            fill(i, &mut buf);
            batch.put(&Put {
                domain: buf.domain,
                title: &buf.title,
                rev: buf.rev,
                tid: Some(buf.tid),
                content_type: CONTENT_TYPE,
                labels: &wink::store::Labels::NONE,
                value: &buf.value,
                historical: false,
            })?;
        }
        let start = std::time::Instant::now();
        batch.commit()?;
        self.commit_secs += start.elapsed().as_secs_f64();
        self.commits += 1;
        Ok(())
    }

    fn get_latest(&self, domain: &str, title: &str, seen: Seen<'_>) -> Res<bool> {
        Ok(match self.reading().get(domain, title, Which::Latest)? {
            Some(got) => {
                seen(got.rev, got.tid, &got.value);
                true
            }
            None => false,
        })
    }

    fn get_render(
        &self,
        domain: &str,
        title: &str,
        rev: u64,
        tid: Uuid,
        seen: Seen<'_>,
    ) -> Res<bool> {
        Ok(match self.reading().get(domain, title, Which::Render(rev, tid))? {
            Some(got) => {
                seen(got.rev, got.tid, &got.value);
                true
            }
            None => false,
        })
    }

    /// Data: the containers `cNNNNNN.*`. Index: the title records, `meta.*`.
    fn visit(dir: &Path, kind: Files, f: &mut dyn FnMut(&Path)) -> Res<()> {
        let prefix = match kind {
            Files::Data => "c",
            Files::Index => "meta.",
        };
        for path in files_in(dir, |name| name.starts_with(prefix))? {
            f(&path);
        }
        Ok(())
    }
}
