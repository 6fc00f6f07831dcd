//! Retention policies of the hot tier and the deadlines they give each render.
//!
//! Deadlines are computed from times stamped into each render's record when the event happens
//! (docs/INTERNALS.md § The render store's rules): `arrival` (its last write), `superseded` (the
//! arrival of the first render of a newer revision — or its own arrival when a newer revision was
//! readable then) and `pushed_out` (the arrival of the render that pushed it out of the kept set,
//! or its own arrival when it came in already outside it). Stamps are set once and only reset by a
//! rewrite of the same render, so a deadline never moves because of culling or of the order other
//! writes arrive in.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// How long superseded revisions stay readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revisions {
    /// Every revision, forever.
    All,
    /// A revision superseded at S stays readable until S + TTL seconds.
    Recent {
        /// Seconds after it was superseded.
        ttl: i64,
    },
}

/// Which renders of one revision stay readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renders {
    /// Every render of the revision.
    All,
    /// The newest `count` renders; an older one until `grace` seconds after it was pushed out.
    Latest {
        /// Renders kept.
        count: u32,
        /// Seconds an older render stays readable after it was pushed out.
        grace: i64,
    },
    /// Per epoch-aligned `secs`-long bucket of tid time, the newest `count`; the rest until
    /// `grace` after they were pushed out.
    Interval {
        /// Bucket length, seconds of tid time.
        secs: i64,
        /// Renders kept per bucket.
        count: u32,
        /// Seconds a render stays readable after it was pushed out.
        grace: i64,
    },
    /// Every render, the current one too, until `ttl` after its arrival (a stash).
    Ttl {
        /// Seconds after its arrival.
        ttl: i64,
    },
}

/// The retention configuration of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How long superseded revisions stay readable.
    pub revisions: Revisions,
    /// Which renders of one revision stay readable.
    pub renders: Renders,
    /// Seconds a historical put stays readable after its arrival.
    pub historical_ttl: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            revisions: Revisions::Recent { ttl: 864_000 },
            renders: Renders::Latest {
                count: 1,
                grace: 86_400,
            },
            historical_ttl: 86_400,
        }
    }
}

/// The times stamped into a render's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stamps {
    /// Its last write, seconds since the epoch.
    pub arrival: i64,
    /// When a newer revision superseded it, seconds since the epoch (`None`: not yet).
    pub superseded: Option<i64>,
    /// When it was pushed out of the kept renders, seconds since the epoch (`None`: not yet).
    pub pushed_out: Option<i64>,
    /// A historical put: its deadline is `historical_ttl` after its arrival, nothing else.
    pub historical: bool,
    /// The first render of its revision to arrive (the archive's `first` policy keeps it).
    pub first: bool,
}

impl Policy {
    /// The first second at which a render is no longer returned (`i64::MAX`: never).
    pub fn deadline(&self, s: &Stamps) -> i64 {
        if s.historical {
            return s.arrival.saturating_add(self.historical_ttl);
        }
        let revision = match (self.revisions, s.superseded) {
            (Revisions::Recent { ttl }, Some(at)) => at.saturating_add(ttl),
            _ => i64::MAX,
        };
        let render = match (self.renders, s.pushed_out) {
            (Renders::Ttl { ttl }, _) => s.arrival.saturating_add(ttl),
            (Renders::Latest { grace, .. } | Renders::Interval { grace, .. }, Some(at)) => {
                at.saturating_add(grace)
            }
            _ => i64::MAX,
        };
        revision.min(render)
    }

    /// True while the render is returned by reads.
    pub fn readable(&self, s: &Stamps, now: i64) -> bool {
        now < self.deadline(s)
    }
}

/// Which render of a revision leaving the hot tier the archive keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchivePolicy {
    /// The first render of the revision to arrive.
    First,
    /// The newest render (tid precedence) when the revision leaves the hot tier.
    Newest,
    /// One render per `secs` of tid time: oldest first, each at least `secs` after the last kept.
    Every {
        /// The interval, seconds of tid time.
        secs: i64,
    },
}

impl FromStr for ArchivePolicy {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.split(':').collect::<Vec<_>>().as_slice() {
            ["first"] => Ok(ArchivePolicy::First),
            ["newest"] => Ok(ArchivePolicy::Newest),
            ["every", s] => match secs(s, "interval")? {
                0 => Err(Error::invalid("an archive interval of 0 seconds")),
                secs => Ok(ArchivePolicy::Every { secs }),
            },
            _ => Err(Error::invalid(format!(
                "archive policy {text:?}: first, newest or every:SECS"
            ))),
        }
    }
}

impl fmt::Display for ArchivePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchivePolicy::First => write!(f, "first"),
            ArchivePolicy::Newest => write!(f, "newest"),
            ArchivePolicy::Every { secs } => write!(f, "every:{secs}"),
        }
    }
}

fn secs(text: &str, what: &str) -> Result<i64> {
    text.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| Error::invalid(format!("{what} {text:?}: a number of seconds ≥ 0")))
}

fn count(text: &str) -> Result<u32> {
    text.parse::<u32>()
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| Error::invalid(format!("count {text:?}: an integer ≥ 1")))
}

impl FromStr for Revisions {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.split(':').collect::<Vec<_>>().as_slice() {
            ["all"] => Ok(Revisions::All),
            ["recent", ttl] => Ok(Revisions::Recent {
                ttl: secs(ttl, "TTL")?,
            }),
            _ => Err(Error::invalid(format!(
                "revision policy {text:?}: all or recent:TTL"
            ))),
        }
    }
}

impl fmt::Display for Revisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revisions::All => write!(f, "all"),
            Revisions::Recent { ttl } => write!(f, "recent:{ttl}"),
        }
    }
}

impl FromStr for Renders {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.split(':').collect::<Vec<_>>().as_slice() {
            ["all"] => Ok(Renders::All),
            ["latest", c, g] => Ok(Renders::Latest {
                count: count(c)?,
                grace: secs(g, "grace")?,
            }),
            ["interval", s, c, g] => {
                let secs_ = secs(s, "interval")?;
                if secs_ == 0 {
                    return Err(Error::invalid("an interval of 0 seconds"));
                }
                Ok(Renders::Interval {
                    secs: secs_,
                    count: count(c)?,
                    grace: secs(g, "grace")?,
                })
            }
            ["ttl", t] => Ok(Renders::Ttl {
                ttl: secs(t, "TTL")?,
            }),
            _ => Err(Error::invalid(format!(
                "render policy {text:?}: all, latest:COUNT:GRACE, interval:SECS:COUNT:GRACE or \
                 ttl:TTL"
            ))),
        }
    }
}

impl fmt::Display for Renders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Renders::All => write!(f, "all"),
            Renders::Latest { count, grace } => write!(f, "latest:{count}:{grace}"),
            Renders::Interval { secs, count, grace } => {
                write!(f, "interval:{secs}:{count}:{grace}")
            }
            Renders::Ttl { ttl } => write!(f, "ttl:{ttl}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_roundtrip() {
        for text in ["all", "recent:864000"] {
            assert_eq!(text.parse::<Revisions>().unwrap().to_string(), text);
        }
        for text in ["all", "latest:1:86400", "interval:86400:2:3600", "ttl:60"] {
            assert_eq!(text.parse::<Renders>().unwrap().to_string(), text);
        }
        for bad in [
            "",
            "recent",
            "recent:-1",
            "latest:0:5",
            "interval:0:1:1",
            "ttl:x",
            "some",
        ] {
            assert!(
                bad.parse::<Renders>().is_err() && bad.parse::<Revisions>().is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn deadlines() {
        let p = Policy::default();
        let current = Stamps {
            arrival: 100,
            ..Stamps::default()
        };
        assert_eq!(p.deadline(&current), i64::MAX);
        let superseded = Stamps {
            arrival: 100,
            superseded: Some(200),
            ..Stamps::default()
        };
        assert_eq!(p.deadline(&superseded), 200 + 864_000);
        let pushed = Stamps {
            arrival: 100,
            pushed_out: Some(150),
            ..Stamps::default()
        };
        assert_eq!(p.deadline(&pushed), 150 + 86_400);
        assert!(p.readable(&pushed, 150 + 86_399) && !p.readable(&pushed, 150 + 86_400));
        let hist = Stamps {
            arrival: 10,
            historical: true,
            ..Stamps::default()
        };
        assert_eq!(p.deadline(&hist), 10 + 86_400);
        let stash = Policy {
            renders: Renders::Ttl { ttl: 5 },
            ..p
        };
        assert_eq!(stash.deadline(&current), 105);
    }
}
