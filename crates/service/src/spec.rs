//! A bucket's settings as a `PUT` of the bucket gives them: RESTBase's retention policy
//! (`{"revisionRetentionPolicy":{"type":"latest","count":1,"grace_ttl":86400}}`) and Wink's own
//! fields, in the syntax of `wink init`'s options.
//!
//! | field | meaning | `wink init` option |
//! |---|---|---|
//! | `revisionRetentionPolicy` | RESTBase's: one of the four below | `--renders` |
//! | `retention_policy` | RESTBase's other name for it; not with it | `--renders` |
//! | `renders` | the same in Wink's syntax (`latest:1:86400`); not with the above | `--renders` |
//! | `revisions` | `all` or `recent:TTL` | `--revisions` |
//! | `historical_ttl` | seconds | `--historical-ttl` |
//! | `archive` | `none`, `first`, `newest`, `every:SECS` | `--archive` |
//! | `container_bytes` | 1 MiB .. 1 TiB | `--container-bytes` |
//! | `max_value` | 1 .. 256 MiB | `--max-value` |
//!
//! RESTBase's policies: `{"type":"all"}`, `{"type":"latest","count":C,"grace_ttl":G}` (and
//! `latest_hash`, taken as `latest`), `{"type":"interval","interval":S,"count":C,"grace_ttl":G}`,
//! `{"type":"ttl","ttl":T}`. RESTBase's table settings `valueType`, `keyType`, `version`,
//! `compression`, `updates` and `default_time_to_live` are taken and ignored.

use serde::Deserialize;

use wink_engine::store::config::MAX_VALUE;
use wink_engine::store::{Config, Renders, Revisions};
use wink_engine::{Error, Result};

/// RESTBase's `revisionRetentionPolicy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    #[serde(rename = "type")]
    kind: String,
    count: Option<u32>,
    grace_ttl: Option<i64>,
    interval: Option<i64>,
    ttl: Option<i64>,
}

/// The body of a bucket's `PUT`; every field may be left out.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketSpec {
    #[serde(rename = "revisionRetentionPolicy")]
    retention: Option<Retention>,
    /// RESTBase's other name for `revisionRetentionPolicy`.
    retention_policy: Option<Retention>,
    /// RESTBase's table settings that Wink has no use for (a value is bytes, a key a title,
    /// compression is the archive's, rows expire by the retention policy): taken, checked to be
    /// JSON of the right kind, and ignored.
    #[serde(rename = "valueType")]
    _value_type: Option<String>,
    #[serde(rename = "keyType")]
    _key_type: Option<String>,
    #[serde(rename = "version")]
    _version: Option<serde_json::Number>,
    #[serde(rename = "compression")]
    _compression: Option<Vec<serde_json::Value>>,
    #[serde(rename = "updates")]
    _updates: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(rename = "default_time_to_live")]
    _default_time_to_live: Option<u64>,
    renders: Option<String>,
    revisions: Option<String>,
    historical_ttl: Option<i64>,
    archive: Option<String>,
    container_bytes: Option<u64>,
    max_value: Option<u64>,
}

/// One setting a request gave, as `wink init` would print it, beside the bucket's.
struct Setting {
    name: &'static str,
    asked: String,
    has: String,
}

fn seconds(v: i64, what: &str) -> Result<i64> {
    if v < 0 {
        return Err(Error::invalid(format!(
            "{what} {v}: a number of seconds ≥ 0"
        )));
    }
    Ok(v)
}

impl Retention {
    fn renders(&self) -> Result<Renders> {
        let count = match self.count {
            Some(0) => return Err(Error::invalid("revisionRetentionPolicy.count: at least 1")),
            Some(c) => c,
            None => 1,
        };
        let grace = seconds(self.grace_ttl.unwrap_or(86_400), "grace_ttl")?;
        match self.kind.as_str() {
            "all" => Ok(Renders::All),
            // RESTBase's latest_hash also skips a render whose bytes equal the latest's; Wink
            // keeps every render put, so it is latest here.
            "latest" | "latest_hash" => Ok(Renders::Latest { count, grace }),
            "interval" => match self.interval {
                Some(secs) if secs > 0 => Ok(Renders::Interval { secs, count, grace }),
                _ => Err(Error::invalid(
                    "revisionRetentionPolicy of type interval: interval, seconds > 0",
                )),
            },
            "ttl" => match self.ttl {
                Some(ttl) => Ok(Renders::Ttl {
                    ttl: seconds(ttl, "ttl")?,
                }),
                None => Err(Error::invalid("revisionRetentionPolicy of type ttl: ttl")),
            },
            other => Err(Error::invalid(format!(
                "revisionRetentionPolicy type {other:?}: all, latest, latest_hash, interval or ttl"
            ))),
        }
    }
}

impl BucketSpec {
    /// Parses a request body (empty: every setting left to the defaults).
    pub fn parse(body: &[u8]) -> Result<BucketSpec> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(BucketSpec::default());
        }
        serde_json::from_slice(body).map_err(|e| Error::invalid(format!("bucket settings: {e}")))
    }

    /// The renders policy given, if any.
    fn renders(&self) -> Result<Option<Renders>> {
        let retention = match (&self.retention, &self.retention_policy) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "give revisionRetentionPolicy or retention_policy, not both",
                ))
            }
            (a, b) => a.as_ref().or(b.as_ref()),
        };
        match (retention, &self.renders) {
            (Some(_), Some(_)) => Err(Error::invalid(
                "give revisionRetentionPolicy or renders, not both",
            )),
            (Some(r), None) => r.renders().map(Some),
            (None, Some(text)) => text.parse().map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The configuration of a new bucket: the defaults, with what was given.
    pub fn config(&self) -> Result<Config> {
        let mut cfg = Config::default();
        if let Some(renders) = self.renders()? {
            cfg.policy.renders = renders;
        }
        if let Some(text) = &self.revisions {
            cfg.policy.revisions = text.parse::<Revisions>()?;
        }
        if let Some(ttl) = self.historical_ttl {
            cfg.policy.historical_ttl = seconds(ttl, "historical_ttl")?;
        }
        if let Some(text) = &self.archive {
            cfg.archive = match text.as_str() {
                "none" => None,
                text => Some(text.parse()?),
            };
        }
        if let Some(n) = self.container_bytes {
            if !(1 << 20..=1 << 40).contains(&n) {
                return Err(Error::invalid(format!(
                    "container_bytes {n}: 1 MiB to 1 TiB"
                )));
            }
            cfg.container_bytes = n;
        }
        if let Some(n) = self.max_value {
            if !(1..=MAX_VALUE).contains(&n) {
                return Err(Error::invalid(format!(
                    "max_value {n}: 1 to {MAX_VALUE} bytes"
                )));
            }
            cfg.max_value = n;
        }
        Ok(cfg)
    }

    /// The settings this request gave that differ from the bucket's `cfg` ("" when none does):
    /// a request that leaves a setting out accepts the bucket's.
    pub fn differences(&self, cfg: &Config) -> Result<String> {
        let asked = self.config()?;
        let archive = |a: Option<wink_engine::store::policy::ArchivePolicy>| {
            a.map_or("none".to_string(), |a| a.to_string())
        };
        let mut given = Vec::new();
        if self.renders()?.is_some() {
            given.push(Setting {
                name: "renders",
                asked: asked.policy.renders.to_string(),
                has: cfg.policy.renders.to_string(),
            });
        }
        let pairs: [(&'static str, bool, String, String); 5] = [
            (
                "revisions",
                self.revisions.is_some(),
                asked.policy.revisions.to_string(),
                cfg.policy.revisions.to_string(),
            ),
            (
                "historical_ttl",
                self.historical_ttl.is_some(),
                asked.policy.historical_ttl.to_string(),
                cfg.policy.historical_ttl.to_string(),
            ),
            (
                "archive",
                self.archive.is_some(),
                archive(asked.archive),
                archive(cfg.archive),
            ),
            (
                "container_bytes",
                self.container_bytes.is_some(),
                asked.container_bytes.to_string(),
                cfg.container_bytes.to_string(),
            ),
            (
                "max_value",
                self.max_value.is_some(),
                asked.max_value.to_string(),
                cfg.max_value.to_string(),
            ),
        ];
        for (name, given_here, a, h) in pairs {
            if given_here {
                given.push(Setting {
                    name,
                    asked: a,
                    has: h,
                });
            }
        }
        let differ: Vec<String> = given
            .iter()
            .filter(|s| s.asked != s.has)
            .map(|s| format!("{} {} (the bucket has {})", s.name, s.asked, s.has))
            .collect();
        Ok(differ.join("; "))
    }
}

/// The settings of a bucket, as `GET` of the bucket shows them.
pub fn describe(cfg: &Config) -> serde_json::Value {
    serde_json::json!({
        "revisions": cfg.policy.revisions.to_string(),
        "renders": cfg.policy.renders.to_string(),
        "historical_ttl": cfg.policy.historical_ttl,
        "archive": cfg.archive.map_or("none".to_string(), |a| a.to_string()),
        "container_bytes": cfg.container_bytes,
        "max_value": cfg.max_value,
    })
}

/// A bucket name: `[a-z0-9][a-z0-9._-]{0,63}`. Only such a name ever becomes a path.
pub fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    let first = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 64
        && first(&b[0])
        && b[1..]
            .iter()
            .all(|c| first(c) || matches!(c, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn restbase_retention_policies() {
        let spec = |json: &str| BucketSpec::parse(json.as_bytes()).and_then(|s| s.config());
        let r = |json| spec(json).unwrap().policy.renders;
        assert_eq!(
            r(r#"{"revisionRetentionPolicy":{"type":"latest","count":2,"grace_ttl":60}}"#),
            Renders::Latest {
                count: 2,
                grace: 60
            }
        );
        assert_eq!(
            r(r#"{"revisionRetentionPolicy":{"type":"all"}}"#),
            Renders::All
        );
        assert_eq!(
            r(r#"{"revisionRetentionPolicy":{"type":"interval","interval":3600}}"#),
            Renders::Interval {
                secs: 3600,
                count: 1,
                grace: 86_400
            }
        );
        assert_eq!(
            r(r#"{"revisionRetentionPolicy":{"type":"ttl","ttl":5}}"#),
            Renders::Ttl { ttl: 5 }
        );
        assert_eq!(
            r(r#"{"renders":"latest:3:10"}"#),
            Renders::Latest {
                count: 3,
                grace: 10
            }
        );
        assert_eq!(spec("").unwrap(), Config::default());
        // RESTBase's own bucket body, as its key_rev_value module sends it.
        let restbase = r#"{"valueType":"blob","keyType":"string","version":2,
            "compression":[{"algorithm":"deflate","block_size":256}],
            "updates":{"pattern":"timeseries"},"default_time_to_live":0,
            "retention_policy":{"type":"latest_hash","count":2,"grace_ttl":10}}"#;
        assert_eq!(
            r(restbase),
            Renders::Latest {
                count: 2,
                grace: 10
            }
        );
        for bad in [
            r#"{"revisionRetentionPolicy":{"type":"latest_hashes"}}"#,
            r#"{"revisionRetentionPolicy":{"type":"all"},"retention_policy":{"type":"all"}}"#,
            r#"{"valueType":3}"#,
            r#"{"compression":"deflate"}"#,
            r#"{"revisionRetentionPolicy":{"type":"latest","count":0}}"#,
            r#"{"revisionRetentionPolicy":{"type":"ttl"}}"#,
            r#"{"revisionRetentionPolicy":{"type":"all"},"renders":"all"}"#,
            r#"{"revisions":"some"}"#,
            r#"{"container_bytes":5}"#,
            r#"{"max_value":0}"#,
            r#"{"historical_ttl":-1}"#,
            r#"{"archive":"sometimes"}"#,
            r#"{"unknown":1}"#,
            r#"[1]"#,
            "{",
        ] {
            assert!(spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_given_settings_are_compared() {
        let cfg = BucketSpec::parse(br#"{"renders":"all","container_bytes":1048576}"#)
            .unwrap()
            .config()
            .unwrap();
        let diff = |json: &str| {
            BucketSpec::parse(json.as_bytes())
                .unwrap()
                .differences(&cfg)
                .unwrap()
        };
        assert_eq!(diff(""), "");
        assert_eq!(diff(r#"{"revisionRetentionPolicy":{"type":"all"}}"#), "");
        let d = diff(r#"{"revisionRetentionPolicy":{"type":"latest","count":1,"grace_ttl":5}}"#);
        assert_eq!(d, "renders latest:1:5 (the bucket has all)");
    }

    #[test]
    fn bucket_names() {
        for ok in ["a", "0", "html", "parsoid.html-v2_x", &"b".repeat(64)] {
            assert!(valid_bucket_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "-a",
            "_a",
            "A",
            "a/b",
            "a b",
            "a%2F",
            &"b".repeat(65),
            "é",
        ] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }
    proptest! {
        /// Any body given as bucket settings is a configuration or an error, never a panic.
        #[test]
        fn any_settings_body_is_a_config_or_an_error(
            body in prop_oneof![
                proptest::collection::vec(proptest::num::u8::ANY, 0..64),
                proptest::string::string_regex(
                    concat!(
                        r#"\{("(renders|revisions|archive|historical_ttl|container_bytes|"#,
                        r#"max_value|revisionRetentionPolicy)":("[a-z:0-9]{0,12}"|-?[0-9]{1,20}|"#,
                        r#"\{"type":"[a-z]{0,8}"(,"(count|grace_ttl|interval|ttl)":"#,
                        r#"-?[0-9]{1,12})*\}),?){0,4}\}"#,
                    )
                ).unwrap().prop_map(String::into_bytes),
            ]
        ) {
            if let Ok(spec) = BucketSpec::parse(&body) {
                if let Ok(cfg) = spec.config() {
                    prop_assert_eq!(spec.differences(&cfg).unwrap(), "");
                }
            }
        }
    }
}
