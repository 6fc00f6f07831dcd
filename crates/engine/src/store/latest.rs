//! A title's answer to a get of its latest render, worked out once from its record and kept in
//! the record caches ([`super::recent`]) beside or instead of the record's bytes: a warm
//! `get_latest` then neither decodes the record nor holds its kilobyte in memory, only this.
//!
//! The answer depends on the record, on the store's retention and archive settings and on the
//! time: a render stops being readable at its deadline. So it carries the settings it was worked
//! out under (a hash of them: handles of one store in one process may have read different
//! settings) and the span of seconds in which no render of the record changes state: from the
//! time it was worked out to the first deadline after it. Outside that span, or under other
//! settings, it is not used. Only an answer settled in the hot tier is kept (the newest visible
//! render is of the current revision): one that needed a look at the archive is not.

use std::hash::{Hash, Hasher};

use uuid::Uuid;

use super::labels::Labels;
use super::record::{Location, Render, TitleRecord};
use super::{Config, State};

/// What a get of a title's latest render returns, but the value's bytes (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Latest {
    pub(super) rev: u64,
    pub(super) tid: Uuid,
    pub(super) content_type: Box<str>,
    /// `None`: no labels (the common case, kept without an allocation).
    labels: Option<Box<Labels>>,
    pub(super) location: Location,
    pub(super) state: State,
    /// The seconds in which it holds: `from..until`.
    from: i64,
    until: i64,
    /// The settings it was worked out under ([`settings_tag`]).
    tag: u64,
}

/// A hash of the settings an answer depends on (retention and archive policies).
pub(super) fn settings_tag(cfg: &Config) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}", (cfg.policy, cfg.archive)).hash(&mut h);
    h.finish()
}

impl Latest {
    /// The answer of `render`, the newest visible render of `rec` at `now` and of its current
    /// revision, under settings `cfg` (tagged `tag`).
    pub(super) fn of(
        rec: &TitleRecord,
        render: &Render,
        state: State,
        cfg: &Config,
        tag: u64,
        now: i64,
    ) -> Latest {
        // Every render's readability, hence what is visible and which revision is current, stays
        // as it is until the first deadline after now.
        let until = rec
            .renders
            .iter()
            .map(|r| cfg.policy.deadline(&r.stamps))
            .filter(|&d| d > now)
            .min()
            .unwrap_or(i64::MAX);
        let labels = (render.labels != Labels::NONE).then(|| Box::new(render.labels.clone()));
        Latest {
            rev: render.rev,
            tid: render.tid,
            content_type: (&*render.content_type).into(),
            labels,
            location: render.location,
            state,
            from: now,
            until,
            tag,
        }
    }

    /// Whether it is the answer at `now` under the settings tagged `tag`.
    pub(super) fn holds(&self, now: i64, tag: u64) -> bool {
        self.tag == tag && self.from <= now && now < self.until
    }

    /// An answer for tests: revision `rev`, holding `from..until` under the settings `tag`.
    #[cfg(test)]
    pub(super) fn at(rev: u64, from: i64, until: i64, tag: u64) -> Latest {
        Latest {
            rev,
            tid: Uuid::nil(),
            content_type: "text/html".into(),
            labels: None,
            location: Location {
                container: 1,
                offset: 0,
                len: 0,
                crc: 0,
            },
            state: State::Current,
            from,
            until,
            tag,
        }
    }

    /// Its labels.
    pub(super) fn labels(&self) -> Labels {
        self.labels.as_deref().cloned().unwrap_or(Labels::NONE)
    }

    /// What it costs in memory, for the caches' budget: itself, its allocations and their
    /// headers.
    pub(super) fn cost(&self) -> usize {
        let labels = self.labels.as_ref().map_or(0, |l| {
            std::mem::size_of::<Labels>()
                + 16
                + l.encoding.as_ref().map_or(0, |s| s.len() + 16)
                + l.language.as_ref().map_or(0, |s| s.len() + 16)
        });
        std::mem::size_of::<Latest>() + 16 + self.content_type.len() + 16 + labels
    }
}
