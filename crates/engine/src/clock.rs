//! "Now", injectable: the one clock for sync times, mtimes, arrival times and generated tids.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// 100-ns ticks in a second: the resolution of a version-1 UUID's timestamp.
pub const TICKS_PER_SEC: i64 = 10_000_000;

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Seconds since the epoch.
    fn now(&self) -> i64;

    /// 100-ns ticks since the epoch, for generated tids. A clock that knows only whole seconds
    /// keeps this default, `now() × 10^7`; whole seconds are then `now_ticks()` divided (floor).
    fn now_ticks(&self) -> i64 {
        self.now().saturating_mul(TICKS_PER_SEC)
    }
}

/// The system's real-time clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    /// Since the epoch, negative for a clock set before 1970 (still ordered), in `unit`s of
    /// nanoseconds.
    fn since_epoch(unit: u128) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_nanos() / unit).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_nanos().div_ceil(unit)).unwrap_or(i64::MAX),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> i64 {
        SystemClock::since_epoch(1_000_000_000)
    }

    fn now_ticks(&self) -> i64 {
        SystemClock::since_epoch(100)
    }
}

/// A clock that says what it is told: for tests, simulations and `WINK_NOW`. It stands at a
/// whole second unless [`ManualClock::set_ticks`] moves it to a fraction of one.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    secs: Arc<AtomicI64>,
    /// 100-ns ticks into the second, 0 to 9_999_999.
    fraction: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: i64) -> Self {
        ManualClock {
            secs: Arc::new(AtomicI64::new(now)),
            fraction: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Moves the clock to `now` (backwards too: callers must cope with a clock that steps back).
    pub fn set(&self, now: i64) {
        self.fraction.store(0, Ordering::SeqCst);
        self.secs.store(now, Ordering::SeqCst);
    }

    /// Moves the clock to `ticks` (100 ns each) since the epoch. Not atomic with a concurrent
    /// read: a test that sets sub-second times does so between reads.
    pub fn set_ticks(&self, ticks: i64) {
        self.fraction
            .store(ticks.rem_euclid(TICKS_PER_SEC), Ordering::SeqCst);
        self.secs
            .store(ticks.div_euclid(TICKS_PER_SEC), Ordering::SeqCst);
    }

    /// Moves the clock forward by `secs`.
    pub fn advance(&self, secs: i64) {
        self.secs.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> i64 {
        self.secs.load(Ordering::SeqCst)
    }

    fn now_ticks(&self) -> i64 {
        self.now()
            .saturating_mul(TICKS_PER_SEC)
            .saturating_add(self.fraction.load(Ordering::SeqCst))
    }
}

/// The system's clock, unless the calling thread has stamped a time with [`StampedClock::with`]:
/// a replicated apply stores each render under the arrival time its message carries (stamped by
/// the node that received it), never under the applying node's clock, so replicas agree.
#[derive(Clone, Copy, Debug, Default)]
pub struct StampedClock;

thread_local! {
    /// The stamp of the calling thread, in 100-ns ticks since the epoch.
    static STAMP: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

impl StampedClock {
    /// Runs `f` with this thread's clock standing at `secs` (and restored after, even when `f`
    /// panics).
    pub fn with<T>(secs: i64, f: impl FnOnce() -> T) -> T {
        struct Restore(Option<i64>);
        impl Drop for Restore {
            fn drop(&mut self) {
                STAMP.with(|s| s.set(self.0));
            }
        }
        let _restore = Restore(STAMP.with(|s| s.replace(Some(secs.saturating_mul(TICKS_PER_SEC)))));
        f()
    }
}

impl Clock for StampedClock {
    fn now(&self) -> i64 {
        match STAMP.with(|s| s.get()) {
            Some(t) => t.div_euclid(TICKS_PER_SEC),
            None => SystemClock.now(),
        }
    }

    fn now_ticks(&self) -> i64 {
        STAMP
            .with(|s| s.get())
            .unwrap_or_else(|| SystemClock.now_ticks())
    }
}

/// The default clock for library users: the system's.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// Parses an instant given as RFC 3339 (`2024-05-01T12:00:00Z`, `…+02:00`, fractions of a
/// second too) or as seconds since the epoch (`1714564800`, `-5`, `1714564800.25`).
pub fn parse_instant(text: &str) -> crate::Result<SystemTime> {
    use std::time::Duration;
    let bad = || {
        crate::Error::invalid(format!(
            "time {text:?}: RFC 3339 (2024-05-01T12:00:00Z) or seconds since the epoch"
        ))
    };
    let text = text.trim();
    if text
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if !fraction.bytes().all(|b| b.is_ascii_digit()) || fraction.len() > 9 {
            return Err(bad());
        }
        let secs: u64 = whole.parse().map_err(|_| bad())?;
        let nanos: u32 = if fraction.is_empty() {
            0
        } else {
            format!("{fraction:0<9}").parse().map_err(|_| bad())?
        };
        let d = Duration::new(secs, nanos);
        let at = if negative {
            UNIX_EPOCH.checked_sub(d)
        } else {
            UNIX_EPOCH.checked_add(d)
        };
        return at.ok_or_else(bad);
    }
    let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| bad())?;
    let nanos = t.unix_timestamp_nanos();
    let d = Duration::from_nanos(u64::try_from(nanos.unsigned_abs()).map_err(|_| bad())?);
    let at = if nanos < 0 {
        UNIX_EPOCH.checked_sub(d)
    } else {
        UNIX_EPOCH.checked_add(d)
    };
    at.ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ticks_and_seconds_agree() {
        let c = ManualClock::new(1_700_000_000);
        assert_eq!(c.now_ticks(), 1_700_000_000 * TICKS_PER_SEC);
        c.set_ticks(1_700_000_000 * TICKS_PER_SEC + 1234);
        assert_eq!(
            (c.now(), c.now_ticks() % TICKS_PER_SEC),
            (1_700_000_000, 1234)
        );
        c.set(5);
        assert_eq!(c.now_ticks(), 5 * TICKS_PER_SEC, "set() is a whole second");
        c.set_ticks(-1);
        assert_eq!((c.now(), c.now_ticks()), (-1, -1), "floor before the epoch");
        let sys = SystemClock;
        let (secs, ticks) = (sys.now(), sys.now_ticks());
        assert!(
            ticks.div_euclid(TICKS_PER_SEC) - secs <= 1,
            "{secs} {ticks}"
        );
        assert_eq!(
            ManualClock::new(i64::MAX).now_ticks(),
            i64::MAX,
            "saturates"
        );
    }

    #[test]
    fn instants_in_both_forms() {
        let at = |s, n| UNIX_EPOCH + Duration::new(s, n);
        assert_eq!(parse_instant("1714564800").unwrap(), at(1_714_564_800, 0));
        assert_eq!(
            parse_instant("1714564800.25").unwrap(),
            at(1_714_564_800, 250_000_000)
        );
        assert_eq!(
            parse_instant("2024-05-01T12:00:00Z").unwrap(),
            at(1_714_564_800, 0)
        );
        assert_eq!(
            parse_instant("2024-05-01T14:00:00+02:00").unwrap(),
            at(1_714_564_800, 0)
        );
        assert_eq!(
            parse_instant("2024-05-01T12:00:00.5Z").unwrap(),
            at(1_714_564_800, 500_000_000)
        );
        assert_eq!(
            parse_instant("-1").unwrap(),
            UNIX_EPOCH - Duration::from_secs(1)
        );
        for bad in [
            "",
            "x",
            "1.2.3",
            "-",
            ".5",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "1e9",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
    }
}
