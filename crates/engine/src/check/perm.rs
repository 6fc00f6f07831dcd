//! The perm checker: every pair decodes; with a sibling datafile, every pointer names an entry
//! whose key hashes to the pair's hash.

use std::path::Path;

use super::{key_at, open_datafile, Report, CHUNK};
use crate::format::kvseq::KvSeq;
use crate::format::perm::{Pair, Perm, PAIR_SIZE};

pub(super) fn check_perm(path: &Path, report: &mut Report) -> Option<String> {
    let perm = match Perm::open_path(path, false) {
        Ok(perm) => perm,
        Err(e) => {
            report.failed(&e);
            return None;
        }
    };
    let keys = open_datafile(path, report);
    let mut start = 0;
    while start < perm.len() {
        let n = CHUNK.min(perm.len() - start);
        // A chunk that does not decode is read again pair by pair, to report every bad pair.
        let pairs: Vec<_> = match perm.read_range(start, n) {
            Ok(pairs) => pairs.into_iter().map(Ok).collect(),
            Err(_) => (start..start + n).map(|i| perm.get(i)).collect(),
        };
        for (i, pair) in (start..).zip(pairs) {
            match (pair, keys.as_ref()) {
                (Err(e), _) => report.failed(&e),
                (Ok(pair), Some(kv)) => verify_pair(&perm, kv, i, pair, report),
                (Ok(_), None) => {}
            }
        }
        start += n;
    }
    let verified = if keys.is_some() {
        ", verified against the datafile"
    } else {
        ""
    };
    Some(format!("{} pairs{verified}", perm.len()))
}

fn verify_pair(perm: &Perm, kv: &KvSeq, i: u64, pair: Pair, report: &mut Report) {
    let at = perm.superblock().sbsize() + i * PAIR_SIZE;
    let Some((_, key)) = key_at(kv, pair.ptr, at, &format!("pair {i}"), report) else {
        return;
    };
    let expected = perm.hash_key(&key);
    if pair.hash != expected {
        let what = format!(
            "pair {i} has hash {}, but the key at {} hashes to {expected}",
            pair.hash, pair.ptr
        );
        report.error(at + 8, what);
    }
}
