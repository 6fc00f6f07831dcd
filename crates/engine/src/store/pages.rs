//! Reads a page at a time, for callers that walk more than one answer should hold (the HTTP
//! service's listings): a title's renders after a cursor, and a domain's titles after a cursor.
//!
//! A cursor names where the last page ended, never an offset, so a page is the same whatever was
//! written before it: renders are paged by precedence (the last render returned), titles by a
//! position in the files that hold them.
//!
//! Titles are walked in the order their records lie in the meta datafile (the title records),
//! then in the archive's (titles whose every render has moved there have no record). Records are
//! appended, never moved back, so a title that exists for the whole walk is returned at least
//! once; one rewritten during the walk (a put to it) moves past the cursor and may come again.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::filesys::inode::{classify, KeyKind};
use crate::format::kvseq::{KvPointer, KvSeq};

use super::key::{self, cmp_tid};
use super::{record_name, Listed, Page, Store};

/// Where a page of a title's renders ended: the last render returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenderCursor {
    /// Revision of the last render returned.
    pub rev: u64,
    /// Tid of the last render returned.
    pub tid: Uuid,
}

impl fmt::Display for RenderCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.rev, self.tid.simple())
    }
}

impl FromStr for RenderCursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || Error::invalid(format!("cursor {text:?}: not one this store gave"));
        let (rev, tid) = text.split_once('_').ok_or_else(bad)?;
        Ok(RenderCursor {
            rev: key::parse_rev(rev).map_err(|_| bad())?,
            tid: key::parse_tid(tid).map_err(|_| bad())?,
        })
    }
}

/// One page of a title's renders, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderPage {
    /// The renders, newest first (revision, then tid precedence).
    pub items: Vec<Listed>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<RenderCursor>,
}

/// Where a walk over a store's titles stands: a position in the title records' datafile, then in
/// the archive's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TitlePosition {
    archive: bool,
    position: u64,
}

impl fmt::Display for TitlePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tier = if self.archive { 'a' } else { 'h' };
        write!(f, "{tier}{}", self.position)
    }
}

impl FromStr for TitlePosition {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || Error::invalid(format!("cursor {text:?}: not one this store gave"));
        let (archive, position) = match text.as_bytes().first() {
            Some(b'h') => (false, &text[1..]),
            Some(b'a') => (true, &text[1..]),
            _ => return Err(bad()),
        };
        if position.is_empty() || !position.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let position = position.parse().map_err(|_| bad())?;
        Ok(TitlePosition { archive, position })
    }
}

/// One page of a domain's titles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TitlePage {
    /// Titles, in the order of the files that hold them (not sorted).
    pub titles: Vec<String>,
    /// Where the next page starts; `None` once every title has been walked. A page may hold
    /// fewer than the limit (even none) and still have a next one: a page walks a bounded
    /// number of records.
    pub next: Option<TitlePosition>,
}

/// Records a title page walks at most per title it may return.
const WALK_PER_TITLE: usize = 16;
/// Records a title page may always walk, however small its limit.
const WALK_MIN: usize = 4096;

/// One tier's part of a title walk.
struct Scan<'a> {
    domain: &'a str,
    /// What the tier's file names put before `DOMAIN/TITLE`.
    prefix: &'a [u8],
    at: &'a mut TitlePosition,
    /// Records the page may still walk.
    budget: &'a mut usize,
    limit: usize,
}

impl Store {
    /// The readable renders of a title in both tiers after `after` (newest first), at most
    /// `limit` of them.
    pub fn list_after(
        &self,
        domain: &str,
        title: &str,
        after: Option<RenderCursor>,
        limit: usize,
    ) -> Result<RenderPage> {
        let all = self.list(domain, title, Page::default())?;
        let start = match after {
            None => 0,
            Some(c) => all
                .iter()
                .position(|l| l.rev < c.rev || (l.rev == c.rev && cmp_tid(l.tid, c.tid).is_lt()))
                .unwrap_or(all.len()),
        };
        let end = start.saturating_add(limit).min(all.len());
        let items = all[start..end].to_vec();
        let next = match items.last() {
            Some(last) if end < all.len() => Some(RenderCursor {
                rev: last.rev,
                tid: last.tid,
            }),
            _ => None,
        };
        Ok(RenderPage { items, next })
    }

    /// The titles of `domain` with a readable render, from `after` on, at most `limit` of them
    /// (see the module doc for the order and what a walk during writes returns).
    pub fn titles_after(
        &self,
        domain: &str,
        after: Option<TitlePosition>,
        limit: usize,
    ) -> Result<TitlePage> {
        self.check_failed()?;
        key::check_domain(domain)?;
        let limit = limit.max(1);
        let mut budget = limit.saturating_mul(WALK_PER_TITLE).max(WALK_MIN);
        let mut at = after.unwrap_or(TitlePosition {
            archive: false,
            position: 0,
        });
        let mut titles = Vec::new();
        if !at.archive {
            let data = self.records.fs.data();
            let mut scan = Scan {
                domain,
                prefix: b"",
                at: &mut at,
                budget: &mut budget,
                limit,
            };
            let walked = self.walk(data, &mut scan, &mut titles, |store, t| {
                Ok(!store
                    .list(
                        domain,
                        t,
                        Page {
                            offset: 0,
                            limit: 1,
                        },
                    )?
                    .is_empty())
            })?;
            if !walked {
                return Ok(TitlePage {
                    titles,
                    next: Some(at),
                });
            }
            at = TitlePosition {
                archive: true,
                position: 0,
            };
        }
        let Some(archive) = self.archive.as_ref() else {
            return Ok(TitlePage { titles, next: None });
        };
        let data = archive.filesys().data();
        // A title with a record was walked with the records.
        let mut scan = Scan {
            domain,
            prefix: b"m/",
            at: &mut at,
            budget: &mut budget,
            limit,
        };
        let walked = self.walk(data, &mut scan, &mut titles, |store, t| {
            let name = record_name(domain, t);
            Ok(store.load_fresh(&name)?.is_none()
                && !store
                    .list(
                        domain,
                        t,
                        Page {
                            offset: 0,
                            limit: 1,
                        },
                    )?
                    .is_empty())
        })?;
        Ok(TitlePage {
            titles,
            next: (!walked).then_some(at),
        })
    }

    /// Walks the files of `data` from `scan.at` whose names are `PREFIX DOMAIN/TITLE`, adding
    /// each title `keep` accepts to `titles`; true when the walk reached the end of `data`, false
    /// when the page is full or the budget spent (`scan.at` then says where to go on).
    fn walk(
        &self,
        data: &KvSeq,
        scan: &mut Scan<'_>,
        titles: &mut Vec<String>,
        keep: impl Fn(&Store, &str) -> Result<bool>,
    ) -> Result<bool> {
        let (domain, prefix) = (scan.domain, scan.prefix);
        let start = KvPointer(scan.at.position.max(data.first().0));
        let mut iter = data.iter(start, true);
        loop {
            if titles.len() >= scan.limit || *scan.budget == 0 {
                return Ok(false);
            }
            let Some(entry) = iter.next() else {
                return Ok(true);
            };
            let entry = entry?;
            scan.at.position = iter.position().0;
            *scan.budget -= 1;
            let KeyKind::Inode { name, n: 0 } = classify(&entry.key) else {
                continue;
            };
            let Some(rest) = name
                .strip_prefix(prefix)
                .and_then(|n| n.strip_prefix(domain.as_bytes()))
                .and_then(|n| n.strip_prefix(b"/"))
            else {
                continue;
            };
            // Titles are UTF-8 when put; other bytes are not a title of this store's.
            let Ok(title) = std::str::from_utf8(rest) else {
                continue;
            };
            if keep(self, title)? {
                titles.push(title.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_text() {
        let tid = key::tid_at(1_700_000_000, 3, [1, 2, 3, 4, 5, 6]);
        let c = RenderCursor { rev: 42, tid };
        assert_eq!(c.to_string().parse::<RenderCursor>().unwrap(), c);
        for bad in [
            "",
            "42",
            "x_y",
            "42_",
            "_",
            "-1_00000000000000000000000000000000",
        ] {
            assert!(bad.parse::<RenderCursor>().is_err(), "{bad}");
        }
        for t in [
            TitlePosition {
                archive: false,
                position: 0,
            },
            TitlePosition {
                archive: true,
                position: 123_456,
            },
        ] {
            assert_eq!(t.to_string().parse::<TitlePosition>().unwrap(), t);
        }
        for bad in ["", "h", "a", "x5", "h-1", "h1x", "h99999999999999999999999"] {
            assert!(bad.parse::<TitlePosition>().is_err(), "{bad}");
        }
    }
}
