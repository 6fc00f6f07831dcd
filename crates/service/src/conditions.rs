//! Conditional writes (RFC 9110 § 13.1): a put that says which render it expects to replace or
//! join (`If-Match`), or not (`If-None-Match`), is checked by the bucket's writer against what
//! the store holds when the put is applied, so two conditional puts never both win. In a
//! cluster the conditions travel in the message and every replica checks them at the same
//! point of the log.

use uuid::Uuid;

use wink_engine::store::Store;
use wink_engine::store::Which;
use wink_engine::Result;

/// The entity tags a condition names: any render at all (`*`), or these `(rev, tid)`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tags {
    /// `*`.
    Any,
    /// Renders by revision and tid (a render's ETag is `"REV/TID"`).
    List(Vec<(u64, Uuid)>),
}

impl Tags {
    fn hold(&self, held: Option<(u64, Uuid)>) -> bool {
        match (self, held) {
            (_, None) => false,
            (Tags::Any, Some(_)) => true,
            (Tags::List(tags), Some(h)) => tags.contains(&h),
        }
    }
}

/// The conditions of a put. The render they are checked against is the one the put names
/// (`P/TITLE/REV/TID`), or the revision's newest (`P/TITLE/REV`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The render must be one of these (`If-Match`; `*`: there must be one).
    pub if_match: Option<Tags>,
    /// The render must be none of these (`If-None-Match`; `*`: there must be none).
    pub if_none_match: Option<Tags>,
}

impl Preconditions {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.if_match.is_none() && self.if_none_match.is_none()
    }

    /// Checks the conditions against what `store` holds now: `Ok(Err(why))` when they fail
    /// (nothing is written), `Err` when the store could not be read.
    pub fn check(
        &self,
        store: &Store,
        domain: &str,
        title: &str,
        rev: u64,
        tid: Option<Uuid>,
    ) -> Result<std::result::Result<(), String>> {
        if self.is_empty() {
            return Ok(Ok(()));
        }
        let got = match tid {
            Some(tid) => store.get(domain, title, Which::Render(rev, tid))?,
            None => store.get(domain, title, Which::Rev(rev))?,
        };
        let held = got.map(|g| (g.rev, g.tid));
        let what = match held {
            Some((rev, tid)) => format!("the render's ETag is \"{rev}/{tid}\""),
            None => "there is no such render".to_string(),
        };
        if let Some(tags) = &self.if_match {
            if !tags.hold(held) {
                return Ok(Err(format!("If-Match: {what}")));
            }
        }
        if let Some(tags) = &self.if_none_match {
            if tags.hold(held) {
                return Ok(Err(format!("If-None-Match: {what}")));
            }
        }
        Ok(Ok(()))
    }
}
