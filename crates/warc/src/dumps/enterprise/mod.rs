//! Wikimedia Enterprise HTML snapshots: `{wiki}-NS{n}-{date}-ENTERPRISE-HTML.json.tar.gz`, a
//! tar.gz of NDJSON members, one article object per line. `docs/DUMPS.md` has the whole mapping;
//! here are its rules, shared by the import and the export.
//!
//! An article is one render: its domain is the host of its `url` (else of `is_part_of.url`,
//! else what its `is_part_of.identifier` names by Wikimedia's rule: `enwiki` is
//! `en.wikipedia.org`), its title is `name` in MediaWiki's database-key form (spaces as `_`, as
//! RESTBase keys titles), its revision `version.identifier`, its tid a version-1 UUID at
//! `date_modified` that the same article always gets again, its content type `text/html;
//! charset=utf-8` with the profile its HTML declares. What a render does not hold is made again
//! on export from the domain and the title by the same rules: `url` (MediaWiki's canonical URL,
//! `https://{domain}/wiki/{title}` percent-encoded as MediaWiki does), `is_part_of` and
//! `in_language`.

pub(crate) mod export;
pub(crate) mod import;

use md5::{Digest as _, Md5};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use uuid::Uuid;

use crate::date::Ticks;
use crate::mapping::tid_at;

/// The content type of every article's render, before its profile.
pub(crate) const HTML: &str = "text/html; charset=utf-8";

/// What MediaWiki's `wfUrlencode` leaves unescaped besides letters and digits (PHP's
/// `rawurlencode` keeps `-_.~`; MediaWiki puts `;@$!*(),/:` back).
const WF_URLENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b';')
    .remove(b'@')
    .remove(b'$')
    .remove(b'!')
    .remove(b'*')
    .remove(b'(')
    .remove(b')')
    .remove(b',')
    .remove(b'/')
    .remove(b':');

/// The Wikimedia projects whose wikis are per language: the host's suffix and the database
/// name's (`en.wiktionary.org` is `enwiktionary`).
const LANGUAGE_PROJECTS: [(&str, &str); 8] = [
    (".wikipedia.org", "wiki"),
    (".wiktionary.org", "wiktionary"),
    (".wikibooks.org", "wikibooks"),
    (".wikinews.org", "wikinews"),
    (".wikiquote.org", "wikiquote"),
    (".wikisource.org", "wikisource"),
    (".wikiversity.org", "wikiversity"),
    (".wikivoyage.org", "wikivoyage"),
];

/// Single wikis whose database name no rule gives.
const SINGLE_WIKIS: [(&str, &str); 4] = [
    ("www.wikidata.org", "wikidatawiki"),
    ("www.mediawiki.org", "mediawikiwiki"),
    ("www.wikifunctions.org", "wikifunctionswiki"),
    ("be-tarask.wikipedia.org", "be_x_oldwiki"),
];

/// A title as a render store keys it: MediaWiki's database key, spaces as underscores.
pub(crate) fn title_of_name(name: &str) -> String {
    name.replace(' ', "_")
}

/// An article's `name`: the title with its underscores as spaces (MediaWiki's text form).
pub(crate) fn name_of_title(title: &str) -> String {
    title.replace('_', " ")
}

/// The article's URL: MediaWiki's canonical URL of the title on `domain`.
pub(crate) fn article_url(domain: &str, title: &str) -> String {
    format!(
        "https://{domain}/wiki/{}",
        utf8_percent_encode(title, WF_URLENCODE)
    )
}

/// The wiki's database name (`is_part_of.identifier`): `en.wikipedia.org` → `enwiki`,
/// `de.wiktionary.org` → `dewiktionary`, `commons.wikimedia.org` → `commonswiki`; a domain no
/// rule covers names itself.
pub(crate) fn dbname_of_domain(domain: &str) -> String {
    if let Some((_, db)) = SINGLE_WIKIS.iter().find(|(d, _)| *d == domain) {
        return (*db).to_string();
    }
    let lang_db = |lang: &str, suffix: &str| format!("{}{suffix}", lang.replace('-', "_"));
    for (host, suffix) in LANGUAGE_PROJECTS {
        if let Some(lang) = domain.strip_suffix(host).filter(|l| is_subdomain(l)) {
            return lang_db(lang, suffix);
        }
    }
    if let Some(site) = domain
        .strip_suffix(".wikimedia.org")
        .filter(|l| is_subdomain(l))
    {
        return lang_db(site, "wiki");
    }
    domain.to_string()
}

/// The domain a database name stands for, when a rule covers it (the inverse of
/// [`dbname_of_domain`] for Wikimedia's wikis); `None` otherwise.
pub(crate) fn domain_of_dbname(db: &str) -> Option<String> {
    if let Some((d, _)) = SINGLE_WIKIS.iter().find(|(_, n)| *n == db) {
        return Some((*d).to_string());
    }
    const WIKIMEDIA: [&str; 6] = [
        "commons",
        "meta",
        "species",
        "foundation",
        "incubator",
        "outreach",
    ];
    // The longest suffix first: "wiki" ends every other one's prefix.
    let mut projects = LANGUAGE_PROJECTS;
    projects.sort_by_key(|(_, suffix)| std::cmp::Reverse(suffix.len()));
    for (host, suffix) in projects {
        let Some(lang) = db.strip_suffix(suffix) else {
            continue;
        };
        if lang.is_empty() || !lang.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return None;
        }
        if suffix == "wiki" && WIKIMEDIA.contains(&lang) {
            return Some(format!("{lang}.wikimedia.org"));
        }
        return Some(format!("{}{host}", lang.replace('_', "-")));
    }
    None
}

/// The language of a per-language wiki (`in_language.identifier`): its subdomain (`simple`
/// English is `en`); `None` for a domain no rule covers.
pub(crate) fn language_of_domain(domain: &str) -> Option<String> {
    LANGUAGE_PROJECTS.iter().find_map(|(host, _)| {
        let lang = domain.strip_suffix(host).filter(|l| is_subdomain(l))?;
        Some(if lang == "simple" { "en" } else { lang }.to_string())
    })
}

fn is_subdomain(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The tid of an article's render: at its `date_modified` (to the 100 ns), its clock sequence
/// the revision's low bits, its node from MD5(domain/title/revision) with the multicast bit set
/// (never a real MAC address). The same article gets the same tid on every import, so a re-run
/// or a later snapshot finds it. `None` when the time is outside what a tid carries.
pub(crate) fn tid_of(domain: &str, title: &str, rev: u64, at: Ticks) -> Option<Uuid> {
    let digest = Md5::digest(format!("{domain}/{title}/{rev}").as_bytes());
    let mut node = [0u8; 6];
    node.copy_from_slice(&digest[..6]);
    node[0] |= 0x01;
    tid_at(at, (rev & 0x3fff) as u16, node)
}

/// `date_modified` as Enterprise writes it: UTC to the second (`2024-04-23T16:53:55Z`); `None`
/// past the year 9999.
pub(crate) fn date_modified(at: Ticks) -> Option<String> {
    let date = at.warc_date()?;
    Some(format!("{}Z", &date[..19]))
}

/// The profile the HTML declares, as RESTBase names it in a content type: Parsoid's
/// `<meta property="mw:htmlVersion" content="2.8.0"/>` (or the older `mw:html:version`) in the
/// head is `https://www.mediawiki.org/wiki/Specification/HTML/2.8.0`. Only the head is looked
/// at (up to `</head>`, 64 KiB at most).
pub(crate) fn declared_profile(html: &str) -> Option<String> {
    let bytes = html.as_bytes();
    let limit = bytes.len().min(64 << 10);
    let head = &bytes[..find_ci(&bytes[..limit], b"</head").unwrap_or(limit)];
    let mut at = 0;
    while let Some(i) = find_ci(&head[at..], b"<meta") {
        let start = at + i + 5;
        let (attrs, end) = attributes(&head[start..]);
        at = start + end;
        let property = attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(b"property"));
        let content = attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(b"content"));
        let (Some((_, property)), Some((_, version))) = (property, content) else {
            continue;
        };
        let is_version = property.eq_ignore_ascii_case(b"mw:htmlVersion")
            || property.eq_ignore_ascii_case(b"mw:html:version");
        let plain = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+');
        if is_version && (1..=32).contains(&version.len()) && version.iter().all(plain) {
            let version = String::from_utf8_lossy(version);
            return Some(format!(
                "https://www.mediawiki.org/wiki/Specification/HTML/{version}"
            ));
        }
    }
    None
}

/// The content type of a render of `html`: [`HTML`], with the declared profile when there is
/// one.
pub(crate) fn content_type_of(html: &str) -> String {
    match declared_profile(html) {
        Some(p) => format!("{HTML}; profile=\"{p}\""),
        None => HTML.to_string(),
    }
}

/// Where `needle` (whose first byte has one case) first is in `hay`, ASCII case ignored.
fn find_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (first, rest) = needle.split_first()?;
    let mut at = 0;
    while at + needle.len() <= hay.len() {
        let i = at + hay[at..].iter().position(|b| b == first)?;
        let end = i + needle.len();
        if end <= hay.len() && hay[i + 1..end].eq_ignore_ascii_case(rest) {
            return Some(i);
        }
        at = i + 1;
    }
    None
}

/// An attribute of a tag: (name, value).
type Attribute<'a> = (&'a [u8], &'a [u8]);

/// A tag's attributes after its name, up to its `>`, and where the tag ends.
fn attributes(tag: &[u8]) -> (Vec<Attribute<'_>>, usize) {
    let mut out = Vec::new();
    let mut i = 0;
    let n = tag.len();
    loop {
        while i < n && (tag[i].is_ascii_whitespace() || tag[i] == b'/') {
            i += 1;
        }
        if i >= n || tag[i] == b'>' {
            return (out, i);
        }
        let name_start = i;
        while i < n && !tag[i].is_ascii_whitespace() && !matches!(tag[i], b'=' | b'>' | b'/') {
            i += 1;
        }
        let name = &tag[name_start..i];
        while i < n && tag[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < n && tag[i] == b'=' {
            i += 1;
            while i < n && tag[i].is_ascii_whitespace() {
                i += 1;
            }
            let value = match tag.get(i) {
                Some(&q) if q == b'"' || q == b'\'' => {
                    let end = tag[i + 1..]
                        .iter()
                        .position(|&b| b == q)
                        .map_or(n, |e| i + 1 + e);
                    let v = &tag[(i + 1).min(n)..end];
                    i = (end + 1).min(n);
                    v
                }
                _ => {
                    let s = i;
                    while i < n && !tag[i].is_ascii_whitespace() && tag[i] != b'>' {
                        i += 1;
                    }
                    &tag[s..i]
                }
            };
            out.push((name, value));
        } else if name.is_empty() {
            i += 1;
        } else {
            out.push((name, &[][..]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_urls_and_wikis() {
        assert_eq!(title_of_name("AC/DC (band)"), "AC/DC_(band)");
        assert_eq!(name_of_title("AC/DC_(band)"), "AC/DC (band)");
        assert_eq!(
            article_url("fr.wikipedia.org", "Café_au_lait"),
            "https://fr.wikipedia.org/wiki/Caf%C3%A9_au_lait"
        );
        assert_eq!(
            article_url("en.wikipedia.org", "AC/DC_(band)"),
            "https://en.wikipedia.org/wiki/AC/DC_(band)"
        );
        assert_eq!(
            article_url("en.wikipedia.org", "100%_#1_?x=1&y"),
            "https://en.wikipedia.org/wiki/100%25_%231_%3Fx%3D1%26y"
        );
        for (domain, db, lang) in [
            ("en.wikipedia.org", "enwiki", Some("en")),
            (
                "zh-min-nan.wikipedia.org",
                "zh_min_nanwiki",
                Some("zh-min-nan"),
            ),
            ("simple.wikipedia.org", "simplewiki", Some("en")),
            ("de.wiktionary.org", "dewiktionary", Some("de")),
            ("fr.wikisource.org", "frwikisource", Some("fr")),
            ("commons.wikimedia.org", "commonswiki", None),
            ("www.wikidata.org", "wikidatawiki", None),
            ("be-tarask.wikipedia.org", "be_x_oldwiki", Some("be-tarask")),
        ] {
            assert_eq!(dbname_of_domain(domain), db);
            assert_eq!(domain_of_dbname(db).as_deref(), Some(domain), "{db}");
            assert_eq!(language_of_domain(domain).as_deref(), lang, "{domain}");
        }
        assert_eq!(dbname_of_domain("corpus"), "corpus");
        assert_eq!(domain_of_dbname("corpus"), None);
        assert_eq!(domain_of_dbname("Bad wiki"), None);
    }

    #[test]
    fn tids_and_dates() {
        let at = Ticks::parse("2024-04-23T16:53:55Z").unwrap();
        let t = tid_of("en.wikipedia.org", "Not_Again_SU", 1_220_413_474, at).unwrap();
        assert_eq!(
            t,
            tid_of("en.wikipedia.org", "Not_Again_SU", 1_220_413_474, at).unwrap()
        );
        assert_ne!(
            t,
            tid_of("en.wikipedia.org", "Not_Again_SU", 1, at).unwrap()
        );
        assert_eq!(crate::mapping::tid_time(t), at);
        assert_eq!(date_modified(at).unwrap(), "2024-04-23T16:53:55Z");
        let frac = Ticks(at.0 + 1234);
        assert_eq!(date_modified(frac).unwrap(), "2024-04-23T16:53:55Z");
    }

    #[test]
    fn profiles_from_the_head() {
        let parsoid = "<!DOCTYPE html>\n<html prefix=\"dc: http://purl.org/dc/terms/\"><head \
            prefix=\"mwr: https://en.wikipedia.org/wiki/Special:Redirect/\"><meta charset=\"utf-8\"/>\
            <meta property=\"mw:pageId\" content=\"12\"/><meta property=\"mw:htmlVersion\" \
            content=\"2.8.0\"/></head><body></body></html>";
        assert_eq!(
            content_type_of(parsoid),
            "text/html; charset=utf-8; \
             profile=\"https://www.mediawiki.org/wiki/Specification/HTML/2.8.0\""
        );
        let old = "<html><head><META PROPERTY='mw:html:version' CONTENT=1.2.1></head></html>";
        assert_eq!(
            declared_profile(old).unwrap(),
            "https://www.mediawiki.org/wiki/Specification/HTML/1.2.1"
        );
        for none in [
            "<p>no head</p>",
            "<head></head><meta property=\"mw:htmlVersion\" content=\"2.8.0\"/>",
            "<head><meta property=\"mw:htmlVersion\" content=\"2.8.0\\\"><x>\"/></head>",
            "<head><meta property=\"mw:htmlVersion\" content=\"\"/></head>",
            "<head><meta property=\"mw:htmlVersion",
            "<head><meta",
        ] {
            assert_eq!(declared_profile(none), None, "{none}");
            assert_eq!(content_type_of(none), HTML);
        }
    }
}
