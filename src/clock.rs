//! "Now", injectable: the one clock for sync times, mtimes, arrival times and generated tids.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in seconds since the epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Seconds since the epoch.
    fn now(&self) -> i64;
}

/// The system's real-time clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            // A clock set before 1970 still gives an ordered, if negative, time.
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that says what it is told: for tests, simulations and `WINK_NOW`.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(now)))
    }

    /// Moves the clock to `now` (backwards too: callers must cope with a clock that steps back).
    pub fn set(&self, now: i64) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the clock forward by `secs`.
    pub fn advance(&self, secs: i64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The default clock for library users: the system's.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}
