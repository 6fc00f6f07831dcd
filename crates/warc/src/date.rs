//! `WARC-Date` values (W3C-ISO8601 in UTC, WARC 1.1 §5.4) and the 14-digit timestamps of CDX
//! indexes, to and from the 100-ns ticks a tid carries.
//!
//! A render's date is its tid's time with all seven sub-second digits, e.g.
//! `2024-05-01T12:00:00.1234567Z`, so the date alone gives the tid's time back exactly.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// 100-ns ticks per second.
pub(crate) const TICKS_PER_SECOND: i128 = 10_000_000;

/// A point in time as 100-ns ticks since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticks(pub i128);

impl Ticks {
    /// The instant `secs` seconds after the Unix epoch.
    pub fn from_unix_secs(secs: i64) -> Ticks {
        Ticks(i128::from(secs) * TICKS_PER_SECOND)
    }

    /// Whole seconds since the epoch (floor).
    pub fn unix_secs(self) -> i64 {
        // Ticks come from a tid (60 bits) or a parsed date (years 0 to 9999): they fit.
        self.0.div_euclid(TICKS_PER_SECOND) as i64
    }

    fn datetime(self) -> Option<OffsetDateTime> {
        OffsetDateTime::from_unix_timestamp_nanos(self.0.checked_mul(100)?).ok()
    }

    /// The `WARC-Date` value: UTC, seven sub-second digits. `None` past the year 9999.
    pub fn warc_date(self) -> Option<String> {
        let t = self.datetime()?;
        if t.year() > 9999 || t.year() < 0 {
            return None;
        }
        let frac = self.0.rem_euclid(TICKS_PER_SECOND);
        Some(format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{frac:07}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ))
    }

    /// The 14-digit `YYYYMMDDhhmmss` timestamp of CDX indexes (sub-seconds dropped).
    pub fn timestamp14(self) -> Option<String> {
        let date = self.warc_date()?;
        let digits: String = date.chars().take(19).filter(char::is_ascii_digit).collect();
        Some(digits)
    }

    /// Parses a `WARC-Date`: `YYYY-MM-DDThh:mm:ss` with optional fractional seconds, then `Z`
    /// (or a numeric offset). Digits past the seventh are dropped.
    pub fn parse(text: &str) -> Result<Ticks, String> {
        let t = OffsetDateTime::parse(text, &Rfc3339)
            .map_err(|e| format!("{text:?} is not a W3C-ISO8601 date-time: {e}"))?;
        Ok(Ticks(t.unix_timestamp_nanos().div_euclid(100)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_keep_every_tick() {
        let t = Ticks(1_714_564_800 * TICKS_PER_SECOND + 1_234_567);
        let date = t.warc_date().unwrap();
        assert_eq!(date, "2024-05-01T12:00:00.1234567Z");
        assert_eq!(Ticks::parse(&date), Ok(t));
        assert_eq!(t.timestamp14().unwrap(), "20240501120000");
        assert_eq!(t.unix_secs(), 1_714_564_800);
        assert_eq!(
            Ticks::parse("2024-05-01T12:00:00Z"),
            Ok(Ticks::from_unix_secs(1_714_564_800))
        );
        assert_eq!(
            Ticks(0).warc_date().unwrap(),
            "1970-01-01T00:00:00.0000000Z"
        );
        assert!(Ticks::parse("2024-05-01").is_err());
        assert!(Ticks::parse("yesterday").is_err());
        assert!(Ticks(i128::MAX).warc_date().is_none());
    }
}
