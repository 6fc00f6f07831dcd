//! How a render maps to a WARC record and back.
//!
//! A render is `https://{domain}/api/rest_v1/page/html/{title}/{rev}/{tid}` (RESTBase's URI of a
//! render), the title percent-encoded as JavaScript's `encodeURIComponent` does (everything but
//! `A–Z a–z 0–9 - _ . ! ~ * ' ( )`, so a `/` in a title is `%2F`), the domain as it is where it
//! is made of `A–Z a–z 0–9 - . _ ~` and percent-encoded elsewhere. Its `WARC-Date` is the tid's
//! time to the 100 ns; the store's own fields `WARC-Wink-Rev`, `WARC-Wink-Tid` and
//! `WARC-Wink-State` say what the URI says and where the render lived; a revisit carries the
//! render's content type in `WARC-Wink-Content-Type` (its block is empty).
//!
//! Other WARCs' records map as `docs/WARC.md` § Import describes ([`foreign_key`]).

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use uuid::Uuid;

use wink_engine::store::key;

use super::date::{Ticks, TICKS_PER_SECOND};

/// What `encodeURIComponent` escapes.
const TITLE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// What a domain keeps unescaped: the characters of a host name.
const DOMAIN_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The path every render URI has before its title.
pub(crate) const RENDER_PATH: &str = "/api/rest_v1/page/html/";

/// The revisit profile Wink writes (and the only one whose payload it can rebuild).
pub(crate) const IDENTICAL_PAYLOAD: &str =
    "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest";
/// The same profile as WARC 1.0 names it.
pub(crate) const IDENTICAL_PAYLOAD_1_0: &str =
    "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest";

/// Wink's own fields.
pub(crate) const FIELD_REV: &str = "WARC-Wink-Rev";
pub(crate) const FIELD_TID: &str = "WARC-Wink-Tid";
pub(crate) const FIELD_STATE: &str = "WARC-Wink-State";
pub(crate) const FIELD_CONTENT_TYPE: &str = "WARC-Wink-Content-Type";
/// A render's labels, when it has them: its block is the stored bytes, in that coding.
pub(crate) const FIELD_CONTENT_ENCODING: &str = "WARC-Wink-Content-Encoding";
pub(crate) const FIELD_CONTENT_LANGUAGE: &str = "WARC-Wink-Content-Language";

/// 100-ns ticks between the UUID epoch (1582-10-15) and the Unix epoch (RFC 9562 §5.1).
const GREGORIAN_TO_UNIX: i128 = 0x01B2_1DD2_1381_4000;

/// A render's URI.
pub(crate) fn render_uri(domain: &str, title: &str, rev: u64, tid: Uuid) -> String {
    format!(
        "https://{}{RENDER_PATH}{}/{rev}/{tid}",
        utf8_percent_encode(domain, DOMAIN_SET),
        utf8_percent_encode(title, TITLE_SET)
    )
}

/// What a render URI names: domain, title, revision and, when the URI has one, tid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderKey {
    /// The wiki's host name (`en.wikipedia.org`).
    pub domain: String,
    /// The page title, as the store keys it.
    pub title: String,
    /// The revision.
    pub rev: u64,
    /// The render's time-UUID, when the URI names one.
    pub tid: Option<Uuid>,
}

/// Parses `https://{domain}/api/rest_v1/page/html/{title}/{rev}[/{tid}]` (http too); `None` for
/// any other URI.
pub fn parse_render_uri(uri: &str) -> Option<RenderKey> {
    let rest = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"))?;
    let (domain, path) = rest.split_once('/')?;
    let path = path.strip_prefix(&RENDER_PATH[1..])?;
    let mut parts = path.split('/');
    let title = parts.next()?;
    let rev = key::parse_rev(parts.next()?).ok()?;
    let tid = match parts.next() {
        Some(t) => Some(key::parse_tid(t).ok()?),
        None => None,
    };
    if parts.next().is_some() || title.is_empty() {
        return None;
    }
    let domain = percent_decode_str(domain).decode_utf8().ok()?.into_owned();
    let title = percent_decode_str(title).decode_utf8().ok()?.into_owned();
    Some(RenderKey {
        domain,
        title,
        rev,
        tid,
    })
}

/// A tid's time as ticks since the Unix epoch.
pub(crate) fn tid_time(tid: Uuid) -> Ticks {
    Ticks(i128::from(key::tid_ticks(tid)) - GREGORIAN_TO_UNIX)
}

/// A version-1 tid at `time` (after 1582-10-15, before 5236), with `node` and `counter`.
pub(crate) fn tid_at(time: Ticks, counter: u16, node: [u8; 6]) -> Option<Uuid> {
    let ticks = u64::try_from(time.0.checked_add(GREGORIAN_TO_UNIX)?).ok()?;
    if ticks >= 1 << 60 {
        return None;
    }
    Some(uuid::Builder::from_gregorian_timestamp(ticks, counter & 0x3fff, &node).into_uuid())
}

/// A render's `WARC-Date`; `None` for a tid past the year 9999.
pub(crate) fn tid_date(tid: Uuid) -> Option<String> {
    tid_time(tid).warc_date()
}

/// The seconds of a tid's time (for filters).
pub(crate) fn tid_secs(tid: Uuid) -> i64 {
    tid_time(tid).0.div_euclid(TICKS_PER_SECOND) as i64
}

/// Where a record from another WARC goes: the domain, title and revision it becomes.
///
/// A render URI keeps its own parts. Any other `http(s)` URI: the domain is its host (with
/// `:port` when it has one), the title its path without the leading `/` plus `?query` (`/` is
/// the title `/`), as written (percent-escapes kept), and the revision the capture's date as the
/// number `YYYYMMDDhhmmss` — so each capture of a URL is a revision of its title, in time order.
pub(crate) fn foreign_key(uri: &str, date: Ticks) -> Result<RenderKey, String> {
    if let Some(k) = parse_render_uri(uri) {
        return Ok(k);
    }
    let url = url::Url::parse(uri).map_err(|e| format!("WARC-Target-URI {uri:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("WARC-Target-URI {uri:?}: not http or https"));
    }
    let host = url
        .host_str()
        .ok_or_else(|| format!("WARC-Target-URI {uri:?}: no host"))?;
    let domain = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let mut title = url
        .path()
        .strip_prefix('/')
        .unwrap_or(url.path())
        .to_string();
    if let Some(q) = url.query() {
        title.push('?');
        title.push_str(q);
    }
    if title.is_empty() {
        title.push('/');
    }
    let stamp = date
        .timestamp14()
        .ok_or_else(|| "WARC-Date out of range".to_string())?;
    let rev = stamp
        .parse()
        .map_err(|_| format!("WARC-Date {stamp}: not a revision number"))?;
    key::check_domain(&domain).map_err(|e| e.to_string())?;
    key::check_title(&title).map_err(|e| e.to_string())?;
    Ok(RenderKey {
        domain,
        title,
        rev,
        tid: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_uris_round_trip() {
        let tid = key::tid_at(1_700_000_000, 5, [1, 2, 3, 4, 5, 6]);
        for (domain, title) in [
            ("en.wikipedia.org", "Main_Page"),
            ("corpus", "AC/DC (band)"),
            ("d", "Café 100% #1 ?x=1&y"),
            ("weird domain", "日本"),
        ] {
            let uri = render_uri(domain, title, 42, tid);
            assert!(uri.is_ascii() && !uri.contains(' '), "{uri}");
            let k = parse_render_uri(&uri).unwrap();
            assert_eq!(
                k,
                RenderKey {
                    domain: domain.into(),
                    title: title.into(),
                    rev: 42,
                    tid: Some(tid)
                }
            );
        }
        assert_eq!(
            render_uri("en.wikipedia.org", "AC/DC (band)", 7, tid),
            format!("https://en.wikipedia.org/api/rest_v1/page/html/AC%2FDC%20(band)/7/{tid}")
        );
        assert!(parse_render_uri("https://d/api/rest_v1/page/html/T/x/y").is_none());
        assert!(parse_render_uri("https://d/wiki/T").is_none());
        assert_eq!(
            parse_render_uri("http://d/api/rest_v1/page/html/T/3")
                .unwrap()
                .tid,
            None
        );
    }

    #[test]
    fn tid_times_are_exact() {
        let tid = key::tid_at(1_700_000_000, 5, [1; 6]);
        assert_eq!(tid_time(tid), Ticks::from_unix_secs(1_700_000_000));
        assert_eq!(tid_date(tid).unwrap(), "2023-11-14T22:13:20.0000000Z");
        let t = Ticks(17_000_000_001_234_567);
        let made = tid_at(t, 9, [3; 6]).unwrap();
        assert_eq!(tid_time(made), t);
        key::check_tid(made).unwrap();
        assert!(tid_at(Ticks(-GREGORIAN_TO_UNIX - 1), 0, [0; 6]).is_none());
    }

    #[test]
    fn foreign_uris_map_to_a_title_per_url_and_a_revision_per_capture() {
        let date = Ticks::parse("2024-05-01T12:00:00Z").unwrap();
        let k = foreign_key("https://example.com:8443/a/b%20c?q=1", date).unwrap();
        assert_eq!(
            (k.domain.as_str(), k.title.as_str(), k.rev),
            ("example.com:8443", "a/b%20c?q=1", 20240501120000)
        );
        assert_eq!(foreign_key("http://example.com", date).unwrap().title, "/");
        assert!(foreign_key("dns:example.com", date).is_err());
    }
}
