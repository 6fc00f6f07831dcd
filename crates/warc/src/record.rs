//! A WARC record's header (ISO 28500:2017, WARC 1.1 §4–5): what it holds, how it is written and
//! how it is parsed.
//!
//! | part           | bytes                                                                  |
//! |----------------|------------------------------------------------------------------------|
//! | version line   | `WARC/1.1` CRLF (`WARC/1.0` is read too)                                |
//! | named fields   | `Name: value` CRLF each; a line starting with SP or HT continues a value  |
//! | end of header  | CRLF                                                                   |
//! | block          | `Content-Length` bytes                                                 |
//! | end of record  | CRLF CRLF                                                              |
//!
//! Field names are matched case-insensitively; a value is kept as written, without the
//! whitespace around it. A header is at most [`MAX_HEADER`] bytes.

use std::fmt;

/// The longest header read (version line to the blank line), bytes.
pub(crate) const MAX_HEADER: usize = 64 << 10;

/// The version this crate writes.
pub(crate) const VERSION: &str = "WARC/1.1";

/// What follows every block.
pub(crate) const END_OF_RECORD: &[u8] = b"\r\n\r\n";

/// Fields every record must have (WARC 1.1 §5.2–5.6).
pub(crate) const MANDATORY: [&str; 4] =
    ["WARC-Record-ID", "Content-Length", "WARC-Date", "WARC-Type"];

/// A record's version line and named fields, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Header {
    pub version: String,
    pub fields: Vec<(String, String)>,
}

/// Why a header does not parse: the field (or part) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderError {
    /// The field, or `version line` / `header`.
    pub field: String,
    /// What was expected.
    pub expected: String,
    /// What was found instead.
    pub found: String,
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, found {}",
            self.field, self.expected, self.found
        )
    }
}

fn bad(field: &str, expected: &str, found: impl Into<String>) -> HeaderError {
    HeaderError {
        field: field.to_string(),
        expected: expected.to_string(),
        found: found.into(),
    }
}

impl Header {
    /// An empty WARC/1.1 header.
    pub fn new() -> Header {
        Header {
            version: VERSION.to_string(),
            fields: Vec::new(),
        }
    }

    /// Appends a field. Values are ours (percent-encoded URIs, checked content types, numbers):
    /// they never hold CR or LF.
    pub fn push(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        debug_assert!(!value.contains(['\r', '\n']), "{name}: {value:?}");
        self.fields.push((name.to_string(), value));
    }

    /// The first value of a field (names match case-insensitively).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Content-Length` as a number.
    pub fn content_length(&self) -> Result<u64, HeaderError> {
        let text = self
            .get("Content-Length")
            .ok_or_else(|| bad("Content-Length", "the field (mandatory)", "none"))?;
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("Content-Length", "a decimal number", text));
        }
        text.parse()
            .map_err(|_| bad("Content-Length", "a number below 2^64", text))
    }

    /// The first mandatory field that is missing, if any.
    pub fn missing_mandatory(&self) -> Option<&'static str> {
        MANDATORY.into_iter().find(|f| self.get(f).is_none())
    }

    /// The header's bytes: version line, fields, blank line.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.version.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in &self.fields {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Parses a header's bytes: the version line to the blank line that ends it, excluded
    /// (lines end in CRLF; a bare LF is accepted, as readers in the field accept it).
    pub fn parse(bytes: &[u8]) -> Result<Header, HeaderError> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            bad(
                "header",
                "UTF-8 text",
                format!("a byte that is not at {}", e.valid_up_to()),
            )
        })?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let version = lines.next().unwrap_or("");
        if version != "WARC/1.1" && version != "WARC/1.0" {
            return Err(bad("version line", "WARC/1.1 or WARC/1.0", clip(version)));
        }
        let mut header = Header {
            version: version.to_string(),
            fields: Vec::new(),
        };
        for line in lines {
            if line.is_empty() {
                continue; // only the last line, after the final CRLF, is empty
            }
            if line.starts_with([' ', '\t']) {
                let Some((_, value)) = header.fields.last_mut() else {
                    return Err(bad(
                        "header",
                        "a field before a continuation line",
                        clip(line),
                    ));
                };
                value.push(' ');
                value.push_str(line.trim());
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(bad("header", "a `Name: value` line", clip(line)));
            };
            if name.is_empty() || !name.bytes().all(is_token) {
                return Err(bad("header", "a field name (a token)", clip(name)));
            }
            header
                .fields
                .push((name.to_string(), value.trim().to_string()));
        }
        Ok(header)
    }
}

/// A token character of a field name (RFC 2616 §2.2: no controls or separators).
fn is_token(b: u8) -> bool {
    b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b)
}

/// At most 80 characters of a bad line, for an error message.
fn clip(text: &str) -> String {
    let mut end = text.len().min(80);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_writes_and_parses_back() {
        let mut h = Header::new();
        h.push("WARC-Type", "resource");
        h.push("Content-Length", "12");
        let mut bytes = Vec::new();
        h.write_to(&mut bytes);
        assert_eq!(
            bytes,
            b"WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: 12\r\n\r\n"
        );
        let parsed = Header::parse(&bytes[..bytes.len() - 2]).unwrap();
        assert_eq!(parsed, h);
        assert_eq!(parsed.get("content-length"), Some("12"));
        assert_eq!(parsed.content_length(), Ok(12));
        assert_eq!(parsed.missing_mandatory(), Some("WARC-Record-ID"));
    }

    #[test]
    fn continuation_lines_and_bare_lf() {
        let h = Header::parse(b"WARC/1.0\nA: one\n  two\nB:three\n").unwrap();
        assert_eq!(h.get("a"), Some("one two"));
        assert_eq!(h.get("B"), Some("three"));
    }

    #[test]
    fn bad_headers_name_what_is_wrong() {
        let e = Header::parse(b"HTTP/1.1 200 OK\r\n").unwrap_err();
        assert_eq!(e.field, "version line");
        let e = Header::parse(b"WARC/1.1\r\nno colon here\r\n").unwrap_err();
        assert!(e.expected.contains("Name: value"), "{e}");
        let e = Header::parse(b"WARC/1.1\r\n continued\r\n").unwrap_err();
        assert!(e.expected.contains("continuation"), "{e}");
        let e = Header::parse(b"WARC/1.1\r\nContent-Length: 1x\r\n")
            .unwrap()
            .content_length()
            .unwrap_err();
        assert_eq!(e.field, "Content-Length");
        assert!(Header::parse(b"WARC/1.1\r\nA: \xff\r\n").is_err());
    }
}
