//! A render's labels: the content coding its bytes are in and the language of its text, kept
//! with the render as put (HTTP's `Content-Encoding` and `Content-Language`) and returned with
//! it. The store never decodes a value: a gzip render is stored and read back byte for byte.
//!
//! On disk they ride in the content-type tables of title records and archive maps: a table
//! string is the content type alone, or the content type, NUL, the encoding, NUL, the language
//! (an absent label empty). A content type never holds a NUL ([`Labels::check`]'s rules and the
//! store's content-type check), so a table written before labels existed reads as no labels.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// The longest content coding kept: registered codings are short words (`gzip`, `br`).
pub const MAX_ENCODING: usize = 64;
/// The longest language list kept: a few language tags (`de`, `en-GB, fr`).
pub const MAX_LANGUAGE: usize = 128;

/// A render's content coding and language, as put; `None` when not given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Labels {
    /// The content coding of the stored bytes (`gzip`, `br`, ...): one token.
    pub encoding: Option<String>,
    /// The language(s) of the content (`de`, `en-GB, fr`): visible ASCII and spaces.
    pub language: Option<String>,
}

impl Labels {
    /// No labels: what a put that gives none stores, and what records written before read as.
    pub const NONE: Labels = Labels {
        encoding: None,
        language: None,
    };

    /// True when neither label is given.
    pub fn is_none(&self) -> bool {
        self.encoding.is_none() && self.language.is_none()
    }

    /// Refuses labels a header could not carry or a table could not hold: an encoding is one
    /// token (RFC 9110 `tchar`s) of 1 to [`MAX_ENCODING`] bytes; a language is 1 to
    /// [`MAX_LANGUAGE`] bytes of visible ASCII and inner spaces.
    pub fn check(&self) -> Result<()> {
        if let Some(e) = &self.encoding {
            if e.is_empty() || e.len() > MAX_ENCODING || !e.bytes().all(is_tchar) {
                return Err(Error::invalid(format!(
                    "content encoding {e:?}: one token of 1 to {MAX_ENCODING} bytes"
                )));
            }
        }
        if let Some(l) = &self.language {
            let visible = l.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
            let trimmed = !l.starts_with(' ') && !l.ends_with(' ');
            if l.is_empty() || l.len() > MAX_LANGUAGE || !visible || !trimmed {
                return Err(Error::invalid(format!(
                    "content language {l:?}: 1 to {MAX_LANGUAGE} bytes of visible ASCII"
                )));
            }
        }
        Ok(())
    }

    /// The table string of a content type with these labels.
    pub(crate) fn join<'a>(&self, content_type: &'a str) -> Cow<'a, str> {
        if self.is_none() {
            return Cow::Borrowed(content_type);
        }
        let (e, l) = (
            self.encoding.as_deref().unwrap_or(""),
            self.language.as_deref().unwrap_or(""),
        );
        Cow::Owned(format!("{content_type}\0{e}\0{l}"))
    }

    /// A table string read from disk: the content type and its labels; `Err` names what is
    /// malformed (a table that could not have been written).
    pub(crate) fn split(s: &str) -> std::result::Result<(String, Labels), &'static str> {
        let mut parts = s.split('\0');
        let content_type = parts.next().unwrap_or("").to_string();
        let (e, l) = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => return Ok((content_type, Labels::NONE)),
            (Some(e), Some(l), None) => (e, l),
            _ => return Err("content type labels"),
        };
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let labels = Labels {
            encoding: some(e),
            language: some(l),
        };
        if labels.is_none() || labels.check().is_err() {
            return Err("content type labels");
        }
        Ok((content_type, labels))
    }
}

/// RFC 9110 § 5.6.2: the characters of a token.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(e: Option<&str>, l: Option<&str>) -> Labels {
        Labels {
            encoding: e.map(str::to_string),
            language: l.map(str::to_string),
        }
    }

    #[test]
    fn checks() {
        for ok in [
            labels(None, None),
            labels(Some("gzip"), None),
            labels(Some("x-compress"), Some("de")),
            labels(None, Some("en-GB, fr")),
        ] {
            assert!(ok.check().is_ok(), "{ok:?}");
        }
        let long = "a".repeat(MAX_ENCODING + 1);
        for bad in [
            labels(Some(""), None),
            labels(Some("gzip, br"), None),
            labels(Some(&long), None),
            labels(Some("gz\0ip"), None),
            labels(None, Some("")),
            labels(None, Some(" de")),
            labels(None, Some("de\n")),
            labels(None, Some("dé")),
            labels(None, Some(&"a".repeat(MAX_LANGUAGE + 1))),
        ] {
            let e = bad.check().unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn a_string_without_labels_is_the_content_type() {
        assert_eq!(Labels::NONE.join("text/html"), "text/html");
        assert_eq!(
            Labels::split("text/html; charset=utf-8").unwrap(),
            ("text/html; charset=utf-8".to_string(), Labels::NONE)
        );
        for bad in ["a\0", "a\0\0", "a\0gzip\0de\0", "a\0gz ip\0"] {
            assert!(Labels::split(bad).is_err(), "{bad:?}");
        }
    }

    fn arb_labels() -> impl Strategy<Value = Labels> {
        (
            proptest::option::of("[a-z0-9!#$%&'*+.^_`|~-]{1,64}"),
            proptest::option::of("[!-~]([ -~]{0,126}[!-~])?"),
        )
            .prop_map(|(encoding, language)| Labels { encoding, language })
    }

    proptest! {
        #[test]
        fn join_then_split_is_the_identity(
            ct in "[^\\x00-\\x1f\\x7f]{1,40}",
            labels in arb_labels(),
        ) {
            prop_assert!(labels.check().is_ok());
            let joined = labels.join(&ct);
            prop_assert_eq!(Labels::split(&joined).unwrap(), (ct.clone(), labels));
        }
    }
}
