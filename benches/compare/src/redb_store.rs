//! redb (a copy-on-write B-tree in one file) with its defaults (4 KiB pages, 1 GiB cache).
//!
//! One table: key = domain, 0, title, 0, revision (8 bytes big-endian), tid precedence key (the
//! 60-bit timestamp as 8 bytes big-endian, then tid bytes 8..16); value = the bytes. Key order is
//! precedence order, so the latest render of a title is the last key of its prefix: one reverse
//! range step. A write batch is one write transaction committed with `Durability::Immediate`; a
//! read is one read transaction (as a server handling one request would).

use std::path::{Path, PathBuf};

use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use uuid::Uuid;
use wink::store::key::tid_ticks;

use crate::contender::{Contender, Files, Res, Seen};
use crate::workload::PutBuf;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("renders");
const FILE: &str = "renders.redb";

pub struct Redb {
    db: Database,
}

fn prefix(domain: &str, title: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(domain.as_bytes());
    out.push(0);
    out.extend_from_slice(title.as_bytes());
    out.push(0);
}

fn key(domain: &str, title: &str, rev: u64, tid: Uuid, out: &mut Vec<u8>) {
    prefix(domain, title, out);
    out.extend_from_slice(&rev.to_be_bytes());
    out.extend_from_slice(&tid_ticks(tid).to_be_bytes());
    out.extend_from_slice(&tid.as_bytes()[8..]);
}

/// (revision, tid) back from a key's last 24 bytes.
fn rev_tid(key: &[u8]) -> Option<(u64, Uuid)> {
    let n = key.len().checked_sub(24)?;
    let rev = u64::from_be_bytes(key[n..n + 8].try_into().ok()?);
    let ticks = u64::from_be_bytes(key[n + 8..n + 16].try_into().ok()?);
    Some((rev, tid_from(ticks, key[n + 16..].try_into().ok()?)))
}

fn tid_from(ticks: u64, rest: [u8; 8]) -> Uuid {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&(ticks as u32).to_be_bytes());
    b[4..6].copy_from_slice(&((ticks >> 32) as u16).to_be_bytes());
    b[6..8].copy_from_slice(&((((ticks >> 48) & 0x0fff) as u16) | 0x1000).to_be_bytes());
    b[8..].copy_from_slice(&rest);
    Uuid::from_bytes(b)
}

impl Contender for Redb {
    fn create(dir: &Path) -> Res<Self> {
        Ok(Redb {
            db: Database::create(dir.join(FILE))?,
        })
    }

    fn open(dir: &Path) -> Res<Self> {
        Ok(Redb {
            db: Database::open(dir.join(FILE))?,
        })
    }

    fn write_batch(&mut self, n: u64, fill: &mut dyn FnMut(u64, &mut PutBuf)) -> Res<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        {
            let mut table = txn.open_table(TABLE)?;
            let (mut buf, mut k) = (PutBuf::default(), Vec::new());
            for i in 0..n {
                fill(i, &mut buf);
                key(buf.domain, &buf.title, buf.rev, buf.tid, &mut k);
                table.insert(k.as_slice(), buf.value.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn get_latest(&self, domain: &str, title: &str, seen: Seen<'_>) -> Res<bool> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        let mut lo = Vec::new();
        prefix(domain, title, &mut lo);
        let mut hi = lo.clone();
        // The prefix ends with the 0 after the title: bumping it bounds every key of the title.
        *hi.last_mut().ok_or("empty prefix")? = 1;
        let mut range = table.range(lo.as_slice()..hi.as_slice())?;
        let Some(last) = range.next_back() else {
            return Ok(false);
        };
        let (k, v) = last?;
        let (rev, tid) = rev_tid(k.value()).ok_or("short key")?;
        seen(rev, tid, v.value());
        Ok(true)
    }

    fn get_render(
        &self,
        domain: &str,
        title: &str,
        rev: u64,
        tid: Uuid,
        seen: Seen<'_>,
    ) -> Res<bool> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        let mut k = Vec::new();
        key(domain, title, rev, tid, &mut k);
        Ok(match table.get(k.as_slice())? {
            Some(v) => {
                seen(rev, tid, v.value());
                true
            }
            None => false,
        })
    }

    /// One file holds everything: it is the data, and there is no separate index to keep.
    fn visit(dir: &Path, kind: Files, f: &mut dyn FnMut(&Path)) -> Res<()> {
        if kind == Files::Data {
            let path: PathBuf = dir.join(FILE);
            f(&path);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tid_survives_the_key() {
        let tid = wink::store::key::tid_at(1_650_000_000, 77, [1, 2, 3, 4, 5, 6]);
        let mut k = Vec::new();
        key("d", "t", 9, tid, &mut k);
        assert_eq!(rev_tid(&k), Some((9, tid)));
    }
}
