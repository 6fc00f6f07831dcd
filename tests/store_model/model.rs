//! The model of the render store's rules (docs/INTERNALS.md § The render store's rules) that
//! tests/store_model.rs checks the render store against: per render, the times of the events
//! deadlines count from, and reads computed from them alone.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use uuid::Uuid;
use wink::store::{Got, Labels, Listed, Page, Policy, Renders, Revisions, State};

/// The titles the test uses (an index into this is a title).
pub const TITLES: [&str; 3] = ["Main_Page", "Talk:Ünïcode/Sub page", "Z"];
/// Revisions 0..REVS are used.
pub const REVS: u64 = 6;

/// A tid's 60-bit timestamp (RFC 4122 §4.1.4): time_hi (12 bits), time_mid, time_low.
fn ticks(tid: Uuid) -> u64 {
    let b = tid.as_bytes();
    let low = u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let mid = u64::from(u16::from_be_bytes([b[4], b[5]]));
    let high = u64::from(u16::from_be_bytes([b[6], b[7]]) & 0x0fff);
    high << 48 | mid << 32 | low
}

/// A tid precedes by its timestamp, then by its remaining bytes (docs/FORMAT.md § Tids).
pub fn tid_order(a: Uuid, b: Uuid) -> Ordering {
    ticks(a)
        .cmp(&ticks(b))
        .then_with(|| a.as_bytes()[8..].cmp(&b.as_bytes()[8..]))
}

/// The tid's time in whole seconds since the Unix epoch.
fn tid_secs(tid: Uuid) -> i64 {
    const GREGORIAN_TO_UNIX: i64 = 122_192_928_000_000_000;
    (ticks(tid) as i64 - GREGORIAN_TO_UNIX).div_euclid(10_000_000)
}

/// The first second at which `r` is no longer returned.
pub fn deadline(p: &Policy, r: &MRender) -> i64 {
    if r.historical {
        return r.arrival + p.historical_ttl;
    }
    let mut end = i64::MAX;
    if let (Revisions::Recent { ttl }, Some(s)) = (p.revisions, r.superseded) {
        end = end.min(s + ttl);
    }
    match (p.renders, r.pushed_out) {
        (Renders::Ttl { ttl }, _) => end = end.min(r.arrival + ttl),
        (Renders::Latest { grace, .. } | Renders::Interval { grace, .. }, Some(at)) => {
            end = end.min(at + grace)
        }
        _ => {}
    }
    end
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MRender {
    pub rev: u64,
    pub tid: Uuid,
    pub ct: &'static str,
    pub labels: Labels,
    pub value: Arc<[u8]>,
    pub historical: bool,
    pub arrival: i64,
    pub superseded: Option<i64>,
    pub pushed_out: Option<i64>,
}

impl MRender {
    /// Newest first: revision, then tid.
    fn newest_first(&self, other: &MRender) -> Ordering {
        other
            .rev
            .cmp(&self.rev)
            .then_with(|| tid_order(other.tid, self.tid))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MTitle {
    pub renders: Vec<MRender>,
    pub title_down: bool,
    pub revs_down: BTreeSet<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    TakenDown,
    NewerThanCurrent(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub policy: Policy,
    pub titles: Vec<MTitle>,
}

impl Model {
    pub fn new(policy: Policy) -> Model {
        Model {
            policy,
            titles: vec![MTitle::default(); TITLES.len()],
        }
    }

    pub fn readable(&self, r: &MRender, now: i64) -> bool {
        now < deadline(&self.policy, r)
    }

    /// A title's readable renders, newest first.
    pub fn visible(&self, t: usize, now: i64) -> Vec<&MRender> {
        let mut v: Vec<&MRender> = self.titles[t]
            .renders
            .iter()
            .filter(|r| self.readable(r, now))
            .collect();
        v.sort_by(|a, b| a.newest_first(b));
        v
    }

    pub fn current_rev(&self, t: usize, now: i64) -> Option<u64> {
        self.visible(t, now)
            .iter()
            .filter(|r| !r.historical)
            .map(|r| r.rev)
            .max()
    }

    pub fn put(&mut self, t: usize, new: MRender, now: i64) -> Result<(), Refused> {
        // "a later put of a taken-down revision is refused unless the take-down is lifted"
        let title = &self.titles[t];
        if title.title_down || title.revs_down.contains(&new.rev) {
            return Err(Refused::TakenDown);
        }
        // "a historical put of a revision newer than the current one is refused"
        if new.historical {
            if let Some(current) = self.current_rev(t, now) {
                if new.rev > current {
                    return Err(Refused::NewerThanCurrent(current));
                }
            }
        }
        let newer_readable = self
            .visible(t, now)
            .iter()
            .any(|r| !r.historical && r.rev > new.rev);
        // "Writing the same (revision, tid) again replaces the value and restarts its deadlines."
        let title = &mut self.titles[t];
        title
            .renders
            .retain(|r| !(r.rev == new.rev && r.tid == new.tid));
        let mut fresh = MRender {
            arrival: now,
            superseded: None,
            pushed_out: None,
            ..new
        };
        if !fresh.historical {
            // "A revision superseded at time S (the arrival of a newer revision, …"
            for r in title.renders.iter_mut() {
                if !r.historical && r.rev < fresh.rev && r.superseded.is_none() {
                    r.superseded = Some(now);
                }
            }
            // "… or its own arrival if it came after a newer one)" — one still there to read.
            if newer_readable {
                fresh.superseded = Some(now);
            }
        }
        let (rev, historical) = (fresh.rev, fresh.historical);
        title.renders.push(fresh);
        if !historical {
            self.push_out(t, rev, now);
        }
        Ok(())
    }

    /// "latest COUNT with a grace; COUNT per interval of tid time with a grace": stamps the
    /// renders of `rev` that now have COUNT readable renders of higher precedence (in their
    /// interval) above them. The current render of the current revision is never among them.
    fn push_out(&mut self, t: usize, rev: u64, now: i64) {
        let (count, secs) = match self.policy.renders {
            Renders::Latest { count, .. } => (count as usize, None),
            Renders::Interval { secs, count, .. } => (count as usize, Some(secs)),
            Renders::All | Renders::Ttl { .. } => return,
        };
        let bucket = |tid: Uuid| secs.map(|s| tid_secs(tid).div_euclid(s));
        let kin: Vec<Uuid> = self.titles[t]
            .renders
            .iter()
            .filter(|r| r.rev == rev && !r.historical && self.readable(r, now))
            .map(|r| r.tid)
            .collect();
        let policy = self.policy;
        for r in self.titles[t].renders.iter_mut() {
            if r.rev != rev || r.historical || r.pushed_out.is_some() || now >= deadline(&policy, r)
            {
                continue;
            }
            let above = kin
                .iter()
                .filter(|k| bucket(**k) == bucket(r.tid) && tid_order(**k, r.tid).is_gt())
                .count();
            if above >= count {
                r.pushed_out = Some(now);
            }
        }
    }

    pub fn take_down(&mut self, t: usize, rev: Option<u64>, now: i64) -> usize {
        let gone = self
            .visible(t, now)
            .iter()
            .filter(|r| rev.is_none_or(|v| r.rev == v))
            .count();
        let title = &mut self.titles[t];
        match rev {
            Some(v) => {
                title.revs_down.insert(v);
                title.renders.retain(|r| r.rev != v);
            }
            None => {
                title.title_down = true;
                title.renders.clear();
            }
        }
        gone
    }

    pub fn lift(&mut self, t: usize, rev: Option<u64>) -> bool {
        let title = &mut self.titles[t];
        match rev {
            Some(v) => title.revs_down.remove(&v),
            None => std::mem::replace(&mut title.title_down, false),
        }
    }

    fn state(&self, t: usize, r: &MRender, now: i64) -> State {
        if r.historical {
            State::Historical
        } else if self.current_rev(t, now) == Some(r.rev) {
            State::Current
        } else {
            State::Recent
        }
    }

    pub fn got(&self, t: usize, r: &MRender, now: i64) -> Got {
        Got {
            rev: r.rev,
            tid: r.tid,
            content_type: r.ct.to_string(),
            labels: r.labels.clone(),
            state: self.state(t, r, now),
            value: r.value.to_vec(),
        }
    }

    pub fn find(&self, t: usize, now: i64, pick: impl Fn(&MRender) -> bool) -> Option<Got> {
        let v = self.visible(t, now);
        v.into_iter().find(|r| pick(r)).map(|r| self.got(t, r, now))
    }

    pub fn list(&self, t: usize, page: Page, now: i64) -> Vec<Listed> {
        self.visible(t, now)
            .into_iter()
            .skip(page.offset)
            .take(page.limit)
            .map(|r| Listed {
                rev: r.rev,
                tid: r.tid,
                size: r.value.len() as u64,
                content_type: r.ct.to_string(),
                labels: r.labels.clone(),
                state: self.state(t, r, now),
            })
            .collect()
    }

    /// Every deadline still ahead.
    pub fn deadlines(&self, now: i64) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .titles
            .iter()
            .flat_map(|t| t.renders.iter())
            .map(|r| deadline(&self.policy, r))
            .filter(|d| *d > now && *d < i64::MAX)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    pub fn snapshot(&self, now: i64) -> Snapshot {
        let titles = (0..TITLES.len())
            .map(|t| TitleView {
                list: self.list(t, Page::default(), now),
                latest: self.find(t, now, |_| true),
                by_rev: (0..REVS)
                    .map(|v| self.find(t, now, |r| r.rev == v))
                    .collect(),
                renders: self
                    .visible(t, now)
                    .iter()
                    .map(|r| self.got(t, r, now))
                    .collect(),
            })
            .collect::<Vec<_>>();
        let mut stat = [0u64; 4];
        for t in 0..TITLES.len() {
            let v = self.visible(t, now);
            if v.is_empty() {
                continue;
            }
            let revs: BTreeSet<u64> = v.iter().map(|r| r.rev).collect();
            stat[0] += 1;
            stat[1] += revs.len() as u64;
            stat[2] += v.len() as u64;
            stat[3] += v.iter().map(|r| r.value.len() as u64).sum::<u64>();
        }
        Snapshot { titles, stat }
    }
}

/// What reads show of a store: every title's listing, latest, latest per revision and each listed
/// render by (revision, tid), and the whole store's counts.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub titles: Vec<TitleView>,
    /// titles, revisions, renders, live bytes.
    pub stat: [u64; 4],
}

#[derive(Debug, PartialEq, Eq)]
pub struct TitleView {
    pub list: Vec<Listed>,
    pub latest: Option<Got>,
    pub by_rev: Vec<Option<Got>>,
    pub renders: Vec<Got>,
}
