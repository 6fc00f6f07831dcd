//! Keys of the render store: domain, title, revision and tid, with their validation and the
//! precedence order of tids.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use uuid::Uuid;

use crate::clock::TICKS_PER_SEC;
use crate::error::{Error, Result};

/// Longest domain, bytes.
pub const MAX_DOMAIN: usize = 255;
/// Longest title, bytes.
pub const MAX_TITLE: usize = 1024;
/// 100-ns ticks between 1582-10-15 (the UUID epoch) and 1970-01-01.
const TICKS_TO_UNIX: u64 = 0x01B2_1DD2_1381_4000;

/// The last second (since the epoch) whose 100-ns ticks fit a v1 UUID's 60-bit timestamp
/// (the year 5236).
pub const MAX_NOW: i64 = (((1u64 << 60) - 1 - TICKS_TO_UNIX) / 10_000_000) as i64;

/// Checks a clock reading a write is about to stamp (arrival, superseded, pushed out) and make
/// tids from: seconds since the epoch, 0 to [`MAX_NOW`]. Outside that range a generated tid
/// could not carry the time, and `i64::MIN` is what a title record writes for "no time".
pub fn check_now(now: i64) -> Result<()> {
    if (0..=MAX_NOW).contains(&now) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "the clock reads {now}: the store takes seconds since the epoch from 0 to {MAX_NOW} \
         (the last second a version-1 UUID can carry)"
    )))
}

/// Checks a domain: UTF-8 (guaranteed by `&str`), 1..=255 bytes, no `/`.
pub fn check_domain(domain: &str) -> Result<()> {
    if domain.is_empty() || domain.len() > MAX_DOMAIN {
        return Err(Error::invalid(format!(
            "a domain has 1 to {MAX_DOMAIN} bytes ({} given)",
            domain.len()
        )));
    }
    if domain.contains('/') || domain.contains('\0') {
        return Err(Error::invalid(format!(
            "domain {domain:?}: no '/' or NUL allowed"
        )));
    }
    Ok(())
}

/// Checks a title: 1..=1024 bytes of UTF-8, no NUL.
pub fn check_title(title: &str) -> Result<()> {
    if title.is_empty() || title.len() > MAX_TITLE {
        return Err(Error::invalid(format!(
            "a title has 1 to {MAX_TITLE} bytes ({} given)",
            title.len()
        )));
    }
    if title.contains('\0') {
        return Err(Error::invalid("a title cannot contain NUL"));
    }
    Ok(())
}

/// A title checked once: domain and title valid, its record name (`DOMAIN/TITLE`, the name of
/// its title record and the prefix of its values' names) built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TitleKey {
    /// `DOMAIN/TITLE`: valid UTF-8, since both halves were.
    name: String,
    domain_len: usize,
}

impl TitleKey {
    /// Checks `domain` and `title` ([`check_domain`], [`check_title`]).
    pub fn new(domain: &str, title: &str) -> Result<TitleKey> {
        check_domain(domain)?;
        check_title(title)?;
        let mut name = String::with_capacity(domain.len() + 1 + title.len());
        name.push_str(domain);
        name.push('/');
        name.push_str(title);
        Ok(TitleKey {
            name,
            domain_len: domain.len(),
        })
    }

    /// The record name, `DOMAIN/TITLE`.
    pub fn name(&self) -> &[u8] {
        self.name.as_bytes()
    }

    /// The domain half of the name.
    pub fn domain(&self) -> &str {
        &self.name[..self.domain_len]
    }

    /// The title half of the name.
    pub fn title(&self) -> &str {
        &self.name[self.domain_len + 1..]
    }
}

/// Parses a revision: a non-negative decimal integer.
pub fn parse_rev(text: &str) -> Result<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid(format!(
            "revision {text:?}: a non-negative integer"
        )));
    }
    text.parse()
        .map_err(|_| Error::invalid(format!("revision {text:?} is too large")))
}

/// Parses a tid: a version-1 (time-based) UUID.
pub fn parse_tid(text: &str) -> Result<Uuid> {
    let tid = Uuid::parse_str(text).map_err(|e| Error::invalid(format!("tid {text:?}: {e}")))?;
    check_tid(tid)?;
    Ok(tid)
}

/// How far past a store's clock a put's own tid may be: clients make tids with their own clocks,
/// which may run somewhat ahead; a tid further ahead would make every later render of its
/// revision carry a time past it.
pub const MAX_TID_AHEAD_SECS: i64 = 3600;

/// A put's own tid: a version-1 UUID at most [`MAX_TID_AHEAD_SECS`] past `now_ticks` (100-ns
/// ticks since the Unix epoch, the store's clock).
pub fn check_put_tid(tid: Uuid, now_ticks: i64) -> Result<()> {
    check_tid(tid)?;
    let limit = (now_ticks.max(0) as u64)
        .saturating_add(TICKS_TO_UNIX)
        .saturating_add(MAX_TID_AHEAD_SECS as u64 * TICKS_PER_SEC as u64);
    if tid_ticks(tid) > limit {
        return Err(Error::invalid(format!(
            "tid {tid} is {} s past this store's clock; at most {MAX_TID_AHEAD_SECS} s ahead \
             is taken",
            (tid_ticks(tid) - limit) / TICKS_PER_SEC as u64 + MAX_TID_AHEAD_SECS as u64
        )));
    }
    Ok(())
}

/// Checks that a tid is a version-1 UUID.
pub fn check_tid(tid: Uuid) -> Result<()> {
    if tid.get_version_num() != 1 || tid.get_variant() != uuid::Variant::RFC4122 {
        return Err(Error::invalid(format!(
            "tid {tid}: not a version-1 time UUID"
        )));
    }
    Ok(())
}

/// The 60-bit timestamp of a v1 UUID: 100-ns ticks since 1582-10-15.
pub fn tid_ticks(tid: Uuid) -> u64 {
    let b = tid.as_bytes();
    let low = u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let mid = u64::from(u16::from_be_bytes([b[4], b[5]]));
    let high = u64::from(u16::from_be_bytes([b[6], b[7]]) & 0x0fff);
    (high << 48) | (mid << 32) | low
}

/// The tid's time in seconds since the Unix epoch (floor).
pub fn tid_unix_secs(tid: Uuid) -> i64 {
    (tid_ticks(tid) as i64 - TICKS_TO_UNIX as i64).div_euclid(10_000_000)
}

/// The 100-ns ticks (since 1582-10-15, as a v1 UUID counts them) of an instant; 0 for one
/// before the UUID epoch, and the 60-bit maximum for one past what a tid can carry.
pub fn ticks_at(at: std::time::SystemTime) -> u64 {
    let max = (1u64 << 60) - 1;
    match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => {
            let ticks = u128::from(TICKS_TO_UNIX)
                + d.as_secs() as u128 * 10_000_000
                + u128::from(d.subsec_nanos() / 100);
            u64::try_from(ticks).map_or(max, |t| t.min(max))
        }
        Err(before) => {
            let back = before.duration().as_nanos() / 100;
            u64::try_from(back).map_or(0, |b| TICKS_TO_UNIX.saturating_sub(b))
        }
    }
}

/// The instant a tid carries (100-ns resolution).
pub fn tid_time(tid: Uuid) -> std::time::SystemTime {
    let ticks = tid_ticks(tid);
    let epoch = std::time::UNIX_EPOCH;
    // Whole seconds and the rest: 2^60 ticks in nanoseconds do not fit in a u64.
    let span = |t: u64| {
        std::time::Duration::from_secs(t / TICKS_PER_SEC as u64)
            + std::time::Duration::from_nanos(t % TICKS_PER_SEC as u64 * 100)
    };
    if ticks >= TICKS_TO_UNIX {
        epoch + span(ticks - TICKS_TO_UNIX)
    } else {
        epoch - span(TICKS_TO_UNIX - ticks)
    }
}

/// Precedence of tids: the 60-bit timestamp, then the remaining bytes (clock sequence, node).
pub fn cmp_tid(a: Uuid, b: Uuid) -> Ordering {
    tid_ticks(a)
        .cmp(&tid_ticks(b))
        .then_with(|| a.as_bytes()[8..].cmp(&b.as_bytes()[8..]))
}

/// A tid for a known time (seconds since the epoch), made deterministic by `node` and `counter`
/// (imports give every document its own node, so tids never collide).
pub fn tid_at(secs: i64, counter: u16, node: [u8; 6]) -> Uuid {
    let ticks = (secs.max(0) as u64)
        .saturating_mul(10_000_000)
        .saturating_add(TICKS_TO_UNIX);
    uuid::Builder::from_gregorian_timestamp(ticks, counter & 0x3fff, &node).into_uuid()
}

/// The greatest 60-bit timestamp of a version-1 UUID, in 100-ns ticks since 1582-10-15.
const MAX_TICKS: u64 = (1 << 60) - 1;

/// Makes tids from a clock at its full resolution (100-ns ticks): strictly increasing within
/// this process even when the clock stands still or steps back (ticks continue from the last
/// one issued), and, with [`TidMaker::make_after`], greater than a given tid.
#[derive(Debug)]
pub struct TidMaker {
    last_ticks: AtomicU64,
    node: [u8; 6],
}

impl TidMaker {
    /// A maker with a random multicast node id (RFC 9562 §6.10: no MAC address is used).
    pub fn new() -> TidMaker {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let bits = h.finish().to_be_bytes();
        let mut node = [0u8; 6];
        node.copy_from_slice(&bits[..6]);
        node[0] |= 0x01;
        TidMaker {
            last_ticks: AtomicU64::new(0),
            node,
        }
    }

    /// A tid for `now` (seconds since the epoch); past the last time a tid can carry, that
    /// last tid again.
    pub fn make(&self, now: i64) -> Uuid {
        let ticks = now.saturating_mul(TICKS_PER_SEC);
        self.issue(ticks, None)
            .unwrap_or_else(|| self.build(MAX_TICKS))
    }

    /// A tid for `now_ticks` (100-ns ticks since the epoch) that is greater, by precedence,
    /// than `after` (the newest render of the revision it is for): its timestamp is the later
    /// of the clock and one tick past `after`'s. Invalid when `after` is at the last tick a
    /// version-1 UUID can carry.
    pub fn make_after(&self, now_ticks: i64, after: Option<Uuid>) -> Result<Uuid> {
        self.issue(now_ticks, after).ok_or_else(|| {
            Error::invalid(format!(
                "no tid is left after {}: it carries the last time a version-1 UUID can",
                after.map_or_else(String::new, |t| t.to_string())
            ))
        })
    }

    fn issue(&self, now_ticks: i64, after: Option<Uuid>) -> Option<Uuid> {
        let base = (now_ticks.max(0) as u64).saturating_add(TICKS_TO_UNIX);
        let floor = after.map_or(0, |t| tid_ticks(t).saturating_add(1));
        let mut prev = self.last_ticks.load(AtomicOrdering::SeqCst);
        loop {
            let next = base.max(prev.saturating_add(1));
            let ticks = next.max(floor);
            if ticks > MAX_TICKS {
                return None;
            }
            // A tid past the clock (`after`'s) never moves the clock: the next tid of another
            // revision is the clock's again.
            match self.last_ticks.compare_exchange(
                prev,
                next,
                AtomicOrdering::SeqCst,
                AtomicOrdering::SeqCst,
            ) {
                Ok(_) => return Some(self.build(ticks)),
                Err(actual) => prev = actual,
            }
        }
    }

    fn build(&self, ticks: u64) -> Uuid {
        let counter = (ticks & 0x3fff) as u16;
        uuid::Builder::from_gregorian_timestamp(ticks, counter, &self.node).into_uuid()
    }
}

impl Default for TidMaker {
    fn default() -> Self {
        TidMaker::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tids_carry_their_time_and_order() {
        let maker = TidMaker::new();
        let a = maker.make(1_700_000_000);
        let b = maker.make(1_700_000_000);
        let c = maker.make(1_600_000_000); // clock stepped back
        assert_eq!(a.get_version_num(), 1);
        assert_eq!(tid_unix_secs(a), 1_700_000_000);
        assert_eq!(cmp_tid(a, b), Ordering::Less);
        assert_eq!(cmp_tid(b, c), Ordering::Less);
        check_tid(a).unwrap();
        assert!(parse_tid(&a.to_string()).is_ok());
        assert!(
            parse_tid("6ba7b810-9dad-41d1-80b4-00c04fd430c8").is_err(),
            "a v4 uuid"
        );
        assert!(parse_tid("not a uuid").is_err());
    }

    #[test]
    fn a_tid_past_the_clock_never_moves_the_clock_and_tid_times_cover_the_whole_range() {
        let maker = TidMaker::new();
        let now = 1_700_000_000 * TICKS_PER_SEC;
        let far = tid_at(32_503_680_000, 1, *b"future"); // the year 3000
        let after = maker.make_after(now, Some(far)).unwrap();
        assert_eq!(cmp_tid(far, after), Ordering::Less);
        // The next tid of another revision is the clock's, not the year 3000's.
        let next = maker.make_after(now, None).unwrap();
        assert_eq!(tid_unix_secs(next), 1_700_000_000);
        // The last tid a version-1 UUID carries: no tid after it, and the maker still works.
        let last = uuid::Builder::from_gregorian_timestamp(MAX_TICKS, 0, b"abcdef").into_uuid();
        assert!(maker.make_after(now, Some(last)).is_err());
        assert!(maker.make_after(now, None).is_ok());
        // Its time is in the year 5236, not an overflow.
        let secs = tid_time(last)
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(secs, (MAX_TICKS - TICKS_TO_UNIX) / TICKS_PER_SEC as u64);
        // A put's own tid: up to an hour ahead of the store's clock.
        let ahead = |secs: i64| maker.make_after(now + secs * TICKS_PER_SEC, None).unwrap();
        check_put_tid(ahead(MAX_TID_AHEAD_SECS - 1), now).unwrap();
        let err = check_put_tid(ahead(2 * MAX_TID_AHEAD_SECS), now).unwrap_err();
        assert!(err.to_string().contains("7200 s past"), "{err}");
    }

    #[test]
    fn tids_carry_100ns_and_follow_the_newest_render() {
        let maker = TidMaker::new();
        let at = 1_700_000_000 * TICKS_PER_SEC;
        let a = maker.make_after(at + 5, None).unwrap();
        assert_eq!(
            tid_ticks(a),
            at as u64 + 5 + TICKS_TO_UNIX,
            "100-ns resolution"
        );
        // Another process's maker, its clock behind this one's render: still after it.
        let other = TidMaker::new();
        let b = other.make_after(at, Some(a)).unwrap();
        assert_eq!(tid_ticks(b), tid_ticks(a) + 1);
        assert_eq!(cmp_tid(a, b), Ordering::Less);
        // A clock ahead of the render wins.
        let c = other.make_after(at + 1000, Some(a)).unwrap();
        assert_eq!(tid_ticks(c), at as u64 + 1000 + TICKS_TO_UNIX);
        // Nothing after the last time a tid carries.
        let last = uuid::Builder::from_gregorian_timestamp(MAX_TICKS, 0, &[1; 6]).into_uuid();
        assert!(other.make_after(at, Some(last)).is_err());
    }

    #[test]
    fn the_clock_range_is_what_a_tid_can_carry() {
        assert!(check_now(0).is_ok());
        assert!(check_now(MAX_NOW).is_ok());
        for bad in [-1, MAX_NOW + 1, i64::MIN, i64::MAX] {
            assert!(check_now(bad).is_err(), "{bad}");
        }
        let last = tid_at(MAX_NOW, 0, [1; 6]);
        assert_eq!(tid_unix_secs(last), MAX_NOW, "the last second round-trips");
        // ... and it is the last one: the next second's ticks do not fit 60 bits.
        let next = (MAX_NOW as u64 + 1) * 10_000_000 + TICKS_TO_UNIX;
        assert!(next >= 1 << 60, "{next}");
    }

    #[test]
    fn instants_and_ticks_round_trip() {
        use std::time::{Duration, UNIX_EPOCH};
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_700);
        let tid = uuid::Builder::from_gregorian_timestamp(ticks_at(t), 0, &[1; 6]).into_uuid();
        assert_eq!(tid_time(tid), t);
        assert_eq!(tid_unix_secs(tid), 1_700_000_000);
        assert_eq!(ticks_at(UNIX_EPOCH), TICKS_TO_UNIX);
        assert_eq!(ticks_at(UNIX_EPOCH - Duration::from_secs(1u64 << 40)), 0);
        assert_eq!(
            ticks_at(UNIX_EPOCH + Duration::from_secs(1u64 << 60)),
            (1 << 60) - 1
        );
        // A tid at exactly the instant counts as at it, one tick later does not.
        let later = uuid::Builder::from_gregorian_timestamp(ticks_at(t) + 1, 0, &[1; 6]);
        assert!(tid_ticks(later.into_uuid()) > ticks_at(t));
    }

    #[test]
    fn argument_rules() {
        assert!(check_domain("en.wikipedia.org").is_ok());
        assert!(check_domain("").is_err());
        assert!(check_domain("a/b").is_err());
        assert!(check_domain(&"d".repeat(256)).is_err());
        assert!(check_title(&"t".repeat(1024)).is_ok());
        assert!(check_title(&"t".repeat(1025)).is_err());
        assert_eq!(parse_rev("42").unwrap(), 42);
        assert!(parse_rev("-1").is_err());
        assert!(parse_rev("4x").is_err());
        assert!(parse_rev("99999999999999999999999").is_err());
    }
}
