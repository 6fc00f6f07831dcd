//! SURT keys (Sort-friendly URI Reordering Transform) as pywb and cdxj-indexer make them: the
//! URI canonicalized the Internet Archive's way, then its host reversed, e.g.
//! `https://en.wikipedia.org/api/rest_v1/page/html/Caf%C3%A9/7/…` →
//! `org,wikipedia,en)/api/rest_v1/page/html/caf%c3%a9/7/…`.
//!
//! Why not a crate: the one SURT crate (`surt-rs`) decodes every percent-escape in its output, so
//! its key for a title with `é`, `%` or `#` differs from the key pywb looks up; so the rules this
//! exporter needs are implemented here, on the `url` crate's parse, and tested against the keys
//! of Python's `surt` package (which cdxj-indexer uses). The rules, in order:
//!
//! - host: percent-decoded, IDNA (the `url` crate's), `..` → `.`, dots trimmed, lowercased,
//!   a leading `www`/`wwwN.` dropped, labels reversed and joined with `,`; a port other than the
//!   scheme's default follows as `:PORT`, then `)`;
//! - path: percent-decoded until nothing changes, `.` and `..` segments resolved and empty
//!   segments dropped, re-escaped (bytes ≤ 0x20, `#`, `%` and ≥ 0x7f as `%XX`), lowercased, a
//!   trailing `/` dropped unless the path is `/`;
//! - query: decoded and re-escaped the same way, lowercased, its `&`-separated arguments sorted;
//!   dropped when empty; the fragment is dropped.
//!
//! Not done (no Wink URI needs them): session-id stripping and userinfo, which the IA rules also
//! remove.

use percent_encoding::percent_decode;

/// The SURT key of `uri`, or `None` when it is not an absolute `http`/`https` URI with a host.
pub(crate) fn surt(uri: &str) -> Option<String> {
    let url = url::Url::parse(uri).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let mut out = host_key(url.host_str()?)?;
    if let Some(port) = url.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push(')');
    let path = normalize_path(&unescape_repeatedly(url.path().as_bytes()));
    let mut path = escape_once(&path).to_ascii_lowercase();
    if path.len() > 1 && path.ends_with('/') {
        path.pop();
    }
    out.push_str(&path);
    if let Some(query) = url.query() {
        let query = escape_once(&unescape_repeatedly(query.as_bytes())).to_ascii_lowercase();
        if !query.is_empty() {
            out.push('?');
            out.push_str(&sort_query(&query));
        }
    }
    Some(out)
}

fn host_key(host: &str) -> Option<String> {
    let host = unescape_repeatedly(host.as_bytes());
    let mut host = String::from_utf8(host).ok()?.replace("..", ".");
    host = host.trim_matches('.').to_ascii_lowercase();
    let host = escape_once(host.as_bytes());
    let host = strip_www(&host);
    let mut labels: Vec<&str> = host.split('.').collect();
    labels.reverse();
    Some(labels.join(","))
}

/// `www.` or `www` + digits + `.` at the start, dropped.
fn strip_www(host: &str) -> &str {
    let Some(rest) = host.strip_prefix("www") else {
        return host;
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    rest.strip_prefix('.').unwrap_or(host)
}

/// Percent-decoding applied until it changes nothing.
fn unescape_repeatedly(bytes: &[u8]) -> Vec<u8> {
    let mut current = bytes.to_vec();
    loop {
        let next: Vec<u8> = percent_decode(&current).collect();
        if next == current {
            return current;
        }
        current = next;
    }
}

/// Bytes ≤ 0x20, `#`, `%` and ≥ 0x7f as `%XX` (uppercase hex); the rest as they are.
fn escape_once(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b <= 0x20 || b >= 0x7f || b == b'#' || b == b'%' {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// `.` and `..` segments resolved, empty segments dropped but a trailing one, `/` for nothing.
fn normalize_path(path: &[u8]) -> Vec<u8> {
    let mut kept: Vec<&[u8]> = Vec::new();
    for segment in path.split(|b| *b == b'/').skip(1) {
        match segment {
            b"." => {}
            b".." if !kept.is_empty() => {
                kept.pop();
            }
            _ => kept.push(segment),
        }
    }
    let mut out = b"/".to_vec();
    if let Some((last, rest)) = kept.split_last() {
        for segment in rest.iter().filter(|s| !s.is_empty()) {
            out.extend_from_slice(segment);
            out.push(b'/');
        }
        out.extend_from_slice(last);
    }
    out
}

/// The query's `&`-separated arguments sorted by (name, value).
fn sort_query(query: &str) -> String {
    let mut args: Vec<(&str, Option<&str>)> = query
        .split('&')
        .map(|a| match a.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (a, None),
        })
        .collect();
    args.sort();
    let args: Vec<String> = args
        .into_iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.to_string(),
        })
        .collect();
    args.join("&")
}

#[cfg(test)]
mod tests {
    use super::surt;

    /// Keys made by Python's `surt` 0.3.1 (`surt.surt(uri)`), the package cdxj-indexer uses.
    #[test]
    fn keys_match_the_python_surt_package() {
        let cases = [
            (
                "https://en.wikipedia.org/api/rest_v1/page/html/Main_Page/1234/\
                    6ba7b810-9dad-11d1-80b4-00c04fd430c8",
                "org,wikipedia,en)/api/rest_v1/page/html/main_page/1234/\
                    6ba7b810-9dad-11d1-80b4-00c04fd430c8",
            ),
            (
                "https://en.wikipedia.org/api/rest_v1/page/html/Caf%C3%A9_%26_Bar%2FX/7/\
                    6ba7b810-9dad-11d1-80b4-00c04fd430c8",
                "org,wikipedia,en)/api/rest_v1/page/html/caf%c3%a9_&_bar/x/7/\
                    6ba7b810-9dad-11d1-80b4-00c04fd430c8",
            ),
            (
                "https://www.wikipedia.org/api/rest_v1/page/html/A%20B%3Fc/7/\
                x",
                "org,wikipedia)/api/rest_v1/page/html/a%20b?c/7/x",
            ),
            (
                "https://corpus/api/rest_v1/page/html/badoo-privacy-policy/12/\
                abc",
                "corpus)/api/rest_v1/page/html/badoo-privacy-policy/12/abc",
            ),
            (
                "https://en.wikipedia.org/api/rest_v1/page/html/%25/7/\
                x",
                "org,wikipedia,en)/api/rest_v1/page/html/%25/7/x",
            ),
            (
                "https://en.wikipedia.org/api/rest_v1/page/html/a%23b/7/\
                x",
                "org,wikipedia,en)/api/rest_v1/page/html/a%23b/7/x",
            ),
            (
                "https://en.wikipedia.org/api/rest_v1/page/html/a+b~c(d)!*'/7/\
                x",
                "org,wikipedia,en)/api/rest_v1/page/html/a+b~c(d)!*'/7/x",
            ),
            (
                "https://EN.Wikipedia.org:443/api/rest_v1/page/html/A/7/\
                x",
                "org,wikipedia,en)/api/rest_v1/page/html/a/7/x",
            ),
            (
                "http://archive.org/goo/?a=2&b&a=1",
                "org,archive)/goo?a=1&a=2&b",
            ),
            (
                "http://www2.example.com:8080/a/./b/../c//d/",
                "com,example:8080)/a/c/d",
            ),
            ("http://example.com", "com,example)/"),
        ];
        for (uri, key) in cases {
            assert_eq!(surt(uri).as_deref(), Some(key), "{uri}");
        }
        assert_eq!(surt("ftp://example.com/"), None);
        assert_eq!(surt("not a uri"), None);
    }
}
