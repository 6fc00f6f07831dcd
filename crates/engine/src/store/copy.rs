//! A copy of a store's titles, page by page, for a reader in another process: what a store holds
//! of the titles a caller keeps (every readable render in both tiers, with its bytes, and every
//! take-down), in bounded pages, each ending at a [`CopyCursor`] that the next page starts from.
//!
//! A cluster node that must take over a partition whose history the stream no longer holds reads
//! one this way from a snapshot of an owner's store (docs/CLUSTER.md § A node lost for good): a
//! snapshot never changes, so the cursor's positions stay valid between pages. On a live store a
//! title rewritten during the walk moves past the pass's end and is not copied (see [`walk`]).
//!
//! [`walk`]: super::walk

use uuid::Uuid;

use std::collections::HashSet;

use crate::error::{Error, Result};

use super::dump::{split_name, DumpRender, DumpTitle};
use super::{Store, TitleCursor};

/// What a copy holds of one title: a take-down, or one readable render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyItem {
    /// A take-down of revision `rev`, or of the whole title when `None`.
    TakeDown {
        /// The title's domain.
        domain: String,
        /// The title within its domain.
        title: String,
        /// The revision taken down; `None`: the whole title.
        rev: Option<u64>,
    },
    /// A readable render and its value.
    Render {
        /// The title's domain.
        domain: String,
        /// The title within its domain.
        title: String,
        /// Revision number.
        rev: u64,
        /// Render id.
        tid: Uuid,
        /// Content type, as put.
        content_type: String,
        /// Content encoding and language, as put.
        labels: super::Labels,
        /// When it arrived, seconds since the epoch: the time its retention counts from.
        arrival: i64,
        /// The render's bytes.
        value: Vec<u8>,
    },
}

impl CopyItem {
    /// Render `r` of title `t`, with its value.
    fn render(t: &DumpTitle, r: &DumpRender, value: Vec<u8>) -> CopyItem {
        CopyItem::Render {
            domain: t.domain.clone(),
            title: t.title.clone(),
            rev: r.rev,
            tid: r.tid,
            content_type: r.content_type.clone(),
            labels: r.labels.clone(),
            arrival: r.arrival,
            value,
        }
    }
}

/// Where a copy stands: the title being copied and how many of its renders were copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyCursor {
    titles: TitleCursor,
    skip: usize,
}

impl CopyCursor {
    /// The start of a copy.
    pub fn new() -> CopyCursor {
        CopyCursor::default()
    }

    /// The cursor as text (`TITLES/SKIP`), for a reader that asks for pages over HTTP.
    pub fn token(&self) -> String {
        format!("{}/{:x}", self.titles.token(), self.skip)
    }

    /// The cursor [`CopyCursor::token`] wrote; `None` for any other text.
    pub fn from_token(text: &str) -> Option<CopyCursor> {
        let (titles, skip) = text.rsplit_once('/')?;
        if skip.len() > 16 {
            return None;
        }
        Some(CopyCursor {
            titles: TitleCursor::from_token(titles)?,
            skip: usize::from_str_radix(skip, 16).ok()?,
        })
    }
}

/// A render whose value failed its check: (rev, tid, what is wrong).
pub type Unreadable = (u64, Uuid, String);

/// One page of a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyPage {
    /// A title's take-downs come before its renders; titles in the records' file order.
    pub items: Vec<CopyItem>,
    /// Where the next page starts; `None` when the copy is complete.
    pub next: Option<CopyCursor>,
}

/// What a store records of one title, without its bytes: its take-downs and each readable
/// render's key, type, labels, length and the value's CRC-32 as the record keeps it. Two stores
/// that hold the same title alike answer the same summary; comparing summaries finds where two
/// owners differ without shipping a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TitleSummary {
    /// The title's domain.
    pub domain: String,
    /// The title within its domain.
    pub title: String,
    /// The whole title is taken down.
    pub title_down: bool,
    /// Revisions taken down, ascending.
    pub revs_down: Vec<u64>,
    /// Readable renders, oldest first: (rev, tid, content type, labels, length, CRC-32).
    pub renders: Vec<(u64, Uuid, String, super::Labels, u64, u32)>,
}

impl Store {
    /// The next page of a copy of the titles `keep` accepts (by domain and title), from `from`:
    /// items until their values add up to `budget` bytes (at least one render when one is left,
    /// so a page holds at most `budget` plus one value).
    pub fn copy_page(
        &self,
        from: &CopyCursor,
        budget: u64,
        keep: impl Fn(&str, &str) -> bool,
    ) -> Result<CopyPage> {
        let mut at = from.clone();
        let mut page = CopyPage::default();
        let mut bytes = 0u64;
        // A page ends only after a render: a title's take-downs travel with its first render.
        let mut rendered = false;
        let mut reader = self.dump_reader()?;
        loop {
            let mut after = at.titles.clone();
            let walk = self.walk_titles(&mut after, 1)?;
            if let Some((domain, title)) = walk.titles.first().and_then(|(n, _)| split_name(n)) {
                if keep(domain, title) {
                    if at.skip == 0 {
                        page.items.extend(self.take_downs_of(domain, title)?);
                    }
                    if let Some(t) = self.dump_title(domain, title)? {
                        for (i, r) in t.renders.iter().enumerate().skip(at.skip) {
                            if bytes >= budget && rendered {
                                at.skip = i;
                                page.next = Some(at);
                                reader.finish()?;
                                return Ok(page);
                            }
                            let value = reader.read(&t, r)?;
                            bytes += value.len() as u64;
                            rendered = true;
                            page.items.push(CopyItem::render(&t, r, value));
                        }
                    }
                }
            }
            walk.finish(&mut after);
            at = CopyCursor {
                titles: after,
                skip: 0,
            };
            if at.titles.is_done() {
                reader.finish()?;
                return Ok(page);
            }
            if bytes >= budget {
                page.next = Some(at);
                reader.finish()?;
                return Ok(page);
            }
        }
    }

    /// The summaries of the next titles from `cursor` that `keep` accepts, at most `max_titles`
    /// records walked; titles with neither a readable render nor a take-down are left out. The
    /// cursor moves past them as [`Store::dump_step`]'s does. A render whose value is in
    /// quarantine is left out: the store holds no good copy of it, so a comparison with another
    /// store shows it missing here (and a repair brings it back).
    pub fn summary_step(
        &self,
        cursor: &mut TitleCursor,
        max_titles: usize,
        keep: impl Fn(&str, &str) -> bool,
    ) -> Result<Vec<TitleSummary>> {
        let quarantined: HashSet<(u32, u64)> = self
            .quarantined()?
            .into_iter()
            .map(|e| (e.container, e.offset))
            .collect();
        self.summary_step_with(cursor, max_titles, keep, |_, r| {
            Ok(r.hot()
                .is_none_or(|l| !quarantined.contains(&(l.container, l.offset))))
        })
    }

    /// [`Store::summary_step`] with the renders `good` accepts (the others are left out).
    pub(crate) fn summary_step_with(
        &self,
        cursor: &mut TitleCursor,
        max_titles: usize,
        keep: impl Fn(&str, &str) -> bool,
        mut good: impl FnMut(&DumpTitle, &DumpRender) -> Result<bool>,
    ) -> Result<Vec<TitleSummary>> {
        let walk = self.walk_titles(cursor, max_titles)?;
        let mut out = Vec::new();
        for (name, _) in &walk.titles {
            let Some((domain, title)) = split_name(name) else {
                continue;
            };
            if !keep(domain, title) {
                continue;
            }
            let mut s = TitleSummary {
                domain: domain.to_string(),
                title: title.to_string(),
                title_down: false,
                revs_down: Vec::new(),
                renders: Vec::new(),
            };
            if let Some(rec) = self.load_fresh(name)? {
                s.title_down = rec.title_down;
                s.revs_down = rec.revs_down.iter().copied().collect();
            }
            if let Some(t) = self.dump_title(domain, title)? {
                for r in &t.renders {
                    if good(&t, r)? {
                        let ct = r.content_type.clone();
                        s.renders
                            .push((r.rev, r.tid, ct, r.labels.clone(), r.size, r.crc()));
                    }
                }
            }
            if s.title_down || !s.revs_down.is_empty() || !s.renders.is_empty() {
                out.push(s);
            }
        }
        walk.finish(cursor);
        Ok(out)
    }

    /// What the store holds of one title, as copy items: its take-downs (the whole title's
    /// first), then every readable render whose value reads back intact. A render whose value
    /// fails its check is never copied: it is answered apart, as (rev, tid, what is wrong).
    pub fn copy_title(
        &self,
        domain: &str,
        title: &str,
    ) -> Result<(Vec<CopyItem>, Vec<Unreadable>)> {
        let mut items = self.take_downs_of(domain, title)?;
        let mut damaged = Vec::new();
        if let Some(t) = self.dump_title(domain, title)? {
            let mut reader = self.dump_reader()?;
            for r in &t.renders {
                match reader.read(&t, r) {
                    Ok(value) => items.push(CopyItem::render(&t, r, value)),
                    Err(e @ (Error::Corrupt { .. } | Error::Io { .. } | Error::Damaged { .. })) => {
                        damaged.push((r.rev, r.tid, e.to_string()))
                    }
                    Err(e) => return Err(e),
                }
            }
            reader.finish()?;
        }
        Ok((items, damaged))
    }

    /// A title's take-downs, as copy items: the whole title's first.
    fn take_downs_of(&self, domain: &str, title: &str) -> Result<Vec<CopyItem>> {
        let name = super::record_name(domain, title);
        let Some(rec) = self.load_fresh(&name)? else {
            return Ok(Vec::new());
        };
        let item = |rev| CopyItem::TakeDown {
            domain: domain.to_string(),
            title: title.to_string(),
            rev,
        };
        let whole = rec.title_down.then(|| item(None));
        Ok(whole
            .into_iter()
            .chain(rec.revs_down.iter().map(|r| item(Some(*r))))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Config, Put, StoreOptions};

    fn put(s: &mut Store, title: &str, rev: u64, value: &[u8]) {
        s.put(&Put {
            domain: "d.org",
            title,
            rev,
            tid: None,
            content_type: "text/html",
            labels: &crate::store::Labels::NONE,
            value,
            historical: false,
        })
        .unwrap();
    }

    /// Every page, through the cursor's text as a remote reader would carry it.
    fn copy_all(s: &Store, budget: u64, keep: impl Fn(&str, &str) -> bool) -> Vec<CopyItem> {
        let mut items = Vec::new();
        let mut at = CopyCursor::new();
        loop {
            let page = s.copy_page(&at, budget, &keep).unwrap();
            items.extend(page.items);
            match page.next {
                Some(next) => at = CopyCursor::from_token(&next.token()).unwrap(),
                None => return items,
            }
        }
    }

    #[test]
    fn a_copy_holds_every_render_and_take_down_of_the_kept_titles_whatever_the_page_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        Store::init(&path, &Config::default(), &StoreOptions::writer()).unwrap();
        let mut s = Store::open(&path, &StoreOptions::writer()).unwrap();
        for t in 0..20u64 {
            for rev in 1..=3 {
                put(
                    &mut s,
                    &format!("T{t}"),
                    rev,
                    format!("<p>{t} {rev}</p>").as_bytes(),
                );
            }
        }
        s.take_down("d.org", "T3", Some(2)).unwrap();
        s.take_down("d.org", "T4", None).unwrap();
        let keep = |_: &str, t: &str| t != "T5";
        let whole = copy_all(&s, u64::MAX, keep);
        for budget in [0, 1, 40] {
            assert_eq!(copy_all(&s, budget, keep), whole, "budget {budget}");
        }
        let renders = whole
            .iter()
            .filter(|i| matches!(i, CopyItem::Render { .. }))
            .count();
        // 19 titles kept, one of them down whole, one revision of another down.
        assert_eq!(renders, 18 * 3 - 1);
        assert!(whole.contains(&CopyItem::TakeDown {
            domain: "d.org".into(),
            title: "T4".into(),
            rev: None
        }));
        assert!(whole.contains(&CopyItem::TakeDown {
            domain: "d.org".into(),
            title: "T3".into(),
            rev: Some(2)
        }));
        let value = whole.iter().find_map(|i| match i {
            CopyItem::Render {
                title,
                rev: 2,
                value,
                ..
            } if title == "T7" => Some(value.clone()),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some(b"<p>7 2</p>".as_slice()));
        assert!(CopyCursor::from_token("x/1").is_none());
        assert!(CopyCursor::from_token("1.2/zz").is_none());
    }

    /// Every title's summary, by title (a walk is in the records' file order, which a rewrite
    /// changes).
    fn summaries(s: &Store) -> Vec<TitleSummary> {
        let mut cursor = TitleCursor::new();
        let mut out = Vec::new();
        while !cursor.is_done() {
            out.extend(s.summary_step(&mut cursor, 3, |_, _| true).unwrap());
        }
        out.sort_by(|a, b| a.title.cmp(&b.title));
        out
    }

    #[test]
    fn a_checked_summary_quarantines_a_damaged_value_and_nothing_copies_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        Store::init(&path, &Config::default(), &StoreOptions::writer()).unwrap();
        let mut s = Store::open(&path, &StoreOptions::writer()).unwrap();
        let value = |t: u64, rev: u64| format!("<p>value of T{t} revision {rev}</p>").into_bytes();
        for t in 0..6u64 {
            for rev in 1..=2 {
                put(&mut s, &format!("T{t}"), rev, &value(t, rev));
            }
        }
        let before = summaries(&s);
        let data = path.join("c000001.data");
        let mut bytes = std::fs::read(&data).unwrap();
        let victim = value(3, 2);
        let at = bytes
            .windows(victim.len())
            .position(|w| w == victim.as_slice())
            .unwrap();
        bytes[at + 4] ^= 0x20;
        std::fs::write(&data, bytes).unwrap();
        // Recorded CRCs: the damage is not seen.
        assert_eq!(summaries(&s), before);

        let mut cursor = TitleCursor::new();
        let mut checked = Vec::new();
        let mut damaged = Vec::new();
        while !cursor.is_done() {
            let (step, bad) =
                crate::maintenance::checked_summary_step(&s, &mut cursor, 4, |_, _| true).unwrap();
            checked.extend(step);
            damaged.extend(bad);
        }
        assert_eq!(damaged.len(), 1, "{damaged:?}");
        let d = &damaged[0];
        assert_eq!((d.title.as_str(), d.rev), ("T3", 2));
        assert!(d.quarantined.is_some(), "{d:?}");
        assert_eq!(s.quarantined().unwrap().len(), 1);
        let t3 = |all: &[TitleSummary]| {
            let t = all.iter().find(|t| t.title == "T3").unwrap();
            t.renders.iter().map(|r| r.0).collect::<Vec<_>>()
        };
        assert_eq!(t3(&checked), vec![1]);
        // Quarantined: every summary from now on leaves it out; the rest is as before.
        let after = summaries(&s);
        assert_eq!(t3(&after), vec![1]);
        assert_eq!(after.len(), before.len());
        for (a, b) in after.iter().zip(&before).filter(|(a, _)| a.title != "T3") {
            assert_eq!(a, b);
        }
        // A copy of the title never holds the damaged value.
        let (items, unreadable) = s.copy_title("d.org", "T3").unwrap();
        assert_eq!(unreadable.len(), 1);
        assert_eq!(unreadable[0].0, 2);
        let revs: Vec<u64> = items
            .iter()
            .filter_map(|i| match i {
                CopyItem::Render { rev, .. } => Some(*rev),
                _ => None,
            })
            .collect();
        assert_eq!(revs, vec![1]);
        // The render put again under its own tid (as a repair does): read back whole,
        // summarised as before.
        let tid = damaged[0].tid;
        s.put(&Put {
            domain: "d.org",
            title: "T3",
            rev: 2,
            tid: Some(tid),
            content_type: "text/html",
            labels: &crate::store::Labels::NONE,
            value: &victim,
            historical: false,
        })
        .unwrap();
        let (_, unreadable) = s.copy_title("d.org", "T3").unwrap();
        assert!(unreadable.is_empty());
        assert_eq!(summaries(&s), before);
    }
}
