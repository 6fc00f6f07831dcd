//! `wink import DIR --warc FILE...`: `resource`, `response` and `revisit` records put into a
//! store, in file order, committed in batches.
//!
//! A record Wink exported comes back with its domain, title, revision, tid and content type
//! (historical renders as historical). Any other record maps as [`foreign_key`] says; its tid
//! is a version-1 UUID at its `WARC-Date` whose node comes from its `WARC-Record-ID`, so an import
//! of the same file gives the same tids. A revisit (identical-payload-digest) takes its
//! original's payload from the store, found by `WARC-Refers-To-Target-URI` and
//! `WARC-Refers-To-Date` (and `WARC-Refers-To`). Records that hold no render (`warcinfo`,
//! `request`, `metadata`, ...) are passed over; a render that cannot be mapped (an HTTP status
//! other than 200, an unknown revisit profile, a taken-down revision, ...) is refused, record by
//! record, with the reason.
//!
//! Damage (a truncated member, a wrong `Content-Length`, a bad digest, a missing mandatory field,
//! a revisit whose original is absent) stops the import with an error naming the file, the
//! record's offset and the field: what came before it is committed, nothing after it is
//! imported. With `skip_damaged`, the damaged record is skipped, the reader moves to the next
//! record it can find, and the count is reported.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Instant;

use md5::{Digest as _, Md5};
use uuid::Uuid;

use crate::error::{Error, Result};
use wink_engine::store::{key, Batch, Labels, Put, State, Store, Which};

use super::date::Ticks;
use super::digest;
use super::mapping::{self, foreign_key, parse_render_uri, RenderKey};
use super::payload::{self, Payload};
use super::reader::{Damage, ReadError, Record, RecordReader};

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Puts per commit.
    pub batch: usize,
    /// Skip damaged records (counted) instead of stopping at the first.
    pub skip_damaged: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            batch: 1000,
            skip_damaged: false,
        }
    }
}

/// A record refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The file the record is in.
    pub file: PathBuf,
    /// The record's offset in the file.
    pub offset: u64,
    /// Why it was refused.
    pub reason: String,
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportReport {
    /// Files read.
    pub files: u64,
    /// Records read (damaged ones not counted).
    pub records: u64,
    /// Renders put: from `resource` and `response` records, and from revisits.
    pub renders: u64,
    /// Of those, the ones a revisit gave.
    pub revisits: u64,
    /// Records that hold no render.
    pub passed_over: u64,
    /// Records refused, each reported.
    pub refused: u64,
    /// Damaged records skipped (`skip_damaged`).
    pub damaged: u64,
    /// Bytes of the renders put.
    pub bytes: u64,
    /// Bytes of the files read.
    pub file_bytes: u64,
    /// Wall-clock time taken.
    pub seconds: f64,
}

/// The bytes of `files` (those that can be asked), for a progress display.
pub(crate) fn files_size(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum()
}

/// Imports `files` into `store`. `refused` is told of each refused record, `damaged` of each
/// damaged one skipped; `progress(file bytes read, file bytes in all)` after every record.
pub fn import_warc(
    store: &mut Store,
    files: &[PathBuf],
    opts: &ImportOptions,
    mut refused: impl FnMut(&Refusal),
    mut damaged: impl FnMut(&Error),
    mut progress: impl FnMut(u64, u64),
) -> Result<ImportReport> {
    let started = Instant::now();
    let total = files_size(files);
    let max = store.config().max_value;
    let mut report = ImportReport::default();
    let mut pending = 0usize;
    // Records are read, decompressed and checked on a thread of their own while this one puts
    // them: two cores at work. The channel bounds the records between them.
    let (tx, rx) = mpsc::sync_channel::<Item>(READ_AHEAD_RECORDS);
    let skip = opts.skip_damaged;
    let mut batch = store.batch();
    let result = std::thread::scope(|scope| {
        scope.spawn(move || read_files(files, max.saturating_add(64 << 10), skip, &tx));
        let mut done_before = 0u64;
        for item in rx {
            let (file, mut record) = match item {
                Item::Record(i, r) => (&files[i], r),
                Item::Damaged(e) => {
                    report.damaged += 1;
                    damaged(&e);
                    continue;
                }
                Item::FileDone(len) => {
                    report.files += 1;
                    done_before += len;
                    continue;
                }
                Item::Fatal(e) => return Err(e),
            };
            report.records += 1;
            let (at, length) = (record.offset, record.length.unwrap_or(0));
            match put_record(&mut batch, &mut record, max) {
                Ok(Outcome::Put { bytes, revisit }) => {
                    report.renders += 1;
                    report.revisits += u64::from(revisit);
                    report.bytes += bytes;
                    pending += 1;
                    if pending >= opts.batch.max(1) {
                        batch.commit()?;
                        pending = 0;
                    }
                }
                Ok(Outcome::PassedOver) => report.passed_over += 1,
                Ok(Outcome::Refused(reason)) => {
                    report.refused += 1;
                    refused(&Refusal {
                        file: file.clone(),
                        offset: at,
                        reason,
                    });
                }
                Err(Fault::Damage(d)) => {
                    let e = d.to_error(file);
                    if !skip {
                        return Err(e);
                    }
                    report.records -= 1;
                    report.damaged += 1;
                    damaged(&e);
                }
                Err(Fault::Store(e)) => return Err(e),
            }
            progress(done_before + at + length, total);
        }
        Ok(())
    });
    // What came before an error is kept: the batch under way is committed too.
    let committed = if pending > 0 {
        batch.commit().map(drop)
    } else {
        Ok(())
    };
    result?;
    committed?;
    report.file_bytes = total;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Records read ahead of the puts, at most.
const READ_AHEAD_RECORDS: usize = 16;

/// What the reading thread hands over.
enum Item {
    /// A record of `files[i]`, checked.
    Record(usize, Record),
    /// A damaged record skipped.
    Damaged(Error),
    /// A file read to its end (its length).
    FileDone(u64),
    /// The import stops: damage (not skipped) or an I/O error.
    Fatal(Error),
}

/// Reads every record of `files` in order into `tx`; stops at the first fatal error, or when
/// the receiver is gone.
fn read_files(files: &[PathBuf], keep: u64, skip: bool, tx: &mpsc::SyncSender<Item>) {
    let send = |item| tx.send(item).is_ok();
    for (i, file) in files.iter().enumerate() {
        let mut reader = match RecordReader::open(file, keep) {
            Ok(r) => r,
            Err(e) => {
                send(Item::Fatal(e));
                return;
            }
        };
        loop {
            let item = match reader.next_record() {
                Ok(Some(r)) => Item::Record(i, r),
                Ok(None) => break,
                Err(ReadError::Io(e)) => Item::Fatal(e),
                Err(ReadError::Damage(d)) if !skip => Item::Fatal(d.to_error(file)),
                Err(ReadError::Damage(d)) => {
                    if !send(Item::Damaged(d.to_error(file))) {
                        return;
                    }
                    match reader.skip_damage() {
                        Ok(true) => continue,
                        Ok(false) => break,
                        Err(e) => Item::Fatal(e),
                    }
                }
            };
            let fatal = matches!(item, Item::Fatal(_));
            if !send(item) || fatal {
                return;
            }
        }
        let len = std::fs::metadata(file).map_or(0, |m| m.len());
        if !send(Item::FileDone(len)) {
            return;
        }
    }
}

enum Outcome {
    Put { bytes: u64, revisit: bool },
    PassedOver,
    Refused(String),
}

enum Fault {
    Damage(Damage),
    Store(Error),
}

/// Where a record's render goes, and what it is.
struct Target {
    key: RenderKey,
    tid: Uuid,
    historical: bool,
}

/// A tid for a record of another WARC: at its date, the node from its record ID.
fn foreign_tid(date: Ticks, record_id: &str) -> Option<Uuid> {
    let digest = Md5::digest(record_id.as_bytes());
    let mut node = [0u8; 6];
    node.copy_from_slice(&digest[..6]);
    node[0] |= 0x01; // a multicast node: never a real MAC address
    mapping::tid_at(date, u16::from_be_bytes([digest[6], digest[7]]), node)
}

/// Where `uri` at `date` (record `id`) goes: a Wink render's own key, or the foreign mapping.
fn target_of(
    uri: &str,
    date: &str,
    id: &str,
    wink: Option<(u64, Uuid)>,
    state: Option<&str>,
) -> Result<Target, String> {
    let historical = state == Some(State::Historical.as_str());
    if let Some((rev, tid)) = wink {
        let key = parse_render_uri(uri)
            .ok_or_else(|| format!("WARC-Target-URI {uri:?} is not a render URI"))?;
        if key.rev != rev || key.tid.is_some_and(|t| t != tid) {
            return Err(format!(
                "WARC-Target-URI {uri:?} names another render than {} {rev} and {} {tid}",
                mapping::FIELD_REV,
                mapping::FIELD_TID
            ));
        }
        return Ok(Target {
            key,
            tid,
            historical,
        });
    }
    let date = Ticks::parse(date).map_err(|e| format!("WARC-Date: {e}"))?;
    let key = foreign_key(uri, date)?;
    let tid = match key.tid {
        Some(t) => t,
        None => foreign_tid(date, id).ok_or("WARC-Date out of a tid's range")?,
    };
    Ok(Target {
        key,
        tid,
        historical,
    })
}

/// `WARC-Wink-Rev` and `WARC-Wink-Tid`, when the record has them.
fn wink_fields(r: &Record) -> std::result::Result<Option<(u64, Uuid)>, String> {
    let (Some(rev), Some(tid)) = (
        r.header.get(mapping::FIELD_REV),
        r.header.get(mapping::FIELD_TID),
    ) else {
        return Ok(None);
    };
    let rev = key::parse_rev(rev).map_err(|e| format!("{}: {e}", mapping::FIELD_REV))?;
    let tid = key::parse_tid(tid).map_err(|e| format!("{}: {e}", mapping::FIELD_TID))?;
    Ok(Some((rev, tid)))
}

fn put_record(
    batch: &mut Batch<'_>,
    r: &mut Record,
    max: u64,
) -> std::result::Result<Outcome, Fault> {
    let kind = r.kind().to_string();
    if !matches!(kind.as_str(), "resource" | "response" | "revisit") {
        return Ok(Outcome::PassedOver);
    }
    let field = |name: &str| r.header.get(name).unwrap_or("").to_string();
    let (uri, date, id) = (
        field("WARC-Target-URI"),
        field("WARC-Date"),
        field("WARC-Record-ID"),
    );
    if uri.is_empty() {
        return Ok(Outcome::Refused("no WARC-Target-URI".into()));
    }
    let wink = match wink_fields(r) {
        Ok(w) => w,
        Err(why) => return Ok(Outcome::Refused(why)),
    };
    let target = match target_of(&uri, &date, &id, wink, r.header.get(mapping::FIELD_STATE)) {
        Ok(t) => t,
        Err(why) => return Ok(Outcome::Refused(why)),
    };
    let payload = match kind.as_str() {
        "resource" => {
            if !r.kept || r.block_len > max {
                return Ok(Outcome::Refused(format!(
                    "a block of {} bytes, over the store's maximum of {max}",
                    r.block_len
                )));
            }
            Payload {
                content_type: r
                    .header
                    .get("Content-Type")
                    .unwrap_or("application/octet-stream")
                    .to_string(),
                value: std::mem::take(&mut r.block),
                language: None,
            }
        }
        "response" => {
            if !r.header.get("Content-Type").is_some_and(is_http_response) {
                return Ok(Outcome::Refused(
                    "a response record whose block is not application/http".into(),
                ));
            }
            if !r.kept {
                return Ok(Outcome::Refused(format!(
                    "a block of {} bytes, over the store's maximum of {max}",
                    r.block_len
                )));
            }
            match payload::http_response(&r.block, r.payload_start, max) {
                Ok(p) => p,
                Err(why) => return Ok(Outcome::Refused(why)),
            }
        }
        _ => match original(batch.store(), r)? {
            Ok(p) => p,
            Err(why) => return Ok(Outcome::Refused(why)),
        },
    };
    let content_type = match (kind.as_str(), r.header.get(mapping::FIELD_CONTENT_TYPE)) {
        ("revisit", Some(t)) => t.to_string(),
        _ => payload.content_type,
    };
    // A Wink render's labels, from its own fields; another WARC's response keeps its
    // Content-Language (its body is decoded above, so it has no encoding).
    let labels = Labels {
        encoding: r
            .header
            .get(mapping::FIELD_CONTENT_ENCODING)
            .map(str::to_string),
        language: r
            .header
            .get(mapping::FIELD_CONTENT_LANGUAGE)
            .map(str::to_string)
            .or(payload.language.clone()),
    };
    let put = Put {
        domain: &target.key.domain,
        title: &target.key.title,
        rev: target.key.rev,
        tid: Some(target.tid),
        content_type: &content_type,
        labels: &labels,
        value: &payload.value,
        historical: target.historical,
    };
    match batch.put(&put) {
        Ok(_) => Ok(Outcome::Put {
            bytes: payload.value.len() as u64,
            revisit: kind == "revisit",
        }),
        Err(Error::Invalid(why)) => Ok(Outcome::Refused(why)),
        Err(e) => Err(Fault::Store(e)),
    }
}

fn is_http_response(content_type: &str) -> bool {
    let t = content_type.to_ascii_lowercase();
    t.starts_with("application/http") && !t.contains("msgtype=request")
}

/// A revisit's payload: its original's, from the store. `Err(Damage)` when the original is not
/// there or its payload is not the one the revisit names; `Ok(Err(why))` when the revisit is not
/// one whose payload can be rebuilt.
fn original(store: &Store, r: &Record) -> std::result::Result<Result<Payload, String>, Fault> {
    let profile = r.header.get("WARC-Profile").unwrap_or("");
    if profile != mapping::IDENTICAL_PAYLOAD && profile != mapping::IDENTICAL_PAYLOAD_1_0 {
        return Ok(Err(format!(
            "a revisit of profile {profile:?}: only identical-payload-digest revisits carry a \
             payload to rebuild"
        )));
    }
    let damage = |field: &str, expected: &str, found: String| {
        Fault::Damage(Damage {
            offset: r.offset,
            field: field.to_string(),
            expected: expected.to_string(),
            found,
        })
    };
    let (Some(uri), Some(date)) = (
        r.header.get("WARC-Refers-To-Target-URI"),
        r.header.get("WARC-Refers-To-Date"),
    ) else {
        return Err(damage(
            "WARC-Refers-To-Target-URI",
            "WARC-Refers-To-Target-URI and WARC-Refers-To-Date, to find the original",
            "none".into(),
        ));
    };
    let id = r.header.get("WARC-Refers-To").unwrap_or("");
    let target = match target_of(uri, date, id, None, None) {
        Ok(t) => t,
        Err(why) => {
            return Err(damage(
                "WARC-Refers-To-Target-URI",
                "the original's URI",
                why,
            ))
        }
    };
    let k = &target.key;
    let got = if id.is_empty() && k.tid.is_none() {
        store.get(&k.domain, &k.title, Which::Rev(k.rev))
    } else {
        store.get(&k.domain, &k.title, Which::Render(k.rev, target.tid))
    }
    .map_err(Fault::Store)?;
    let Some(got) = got else {
        return Err(damage(
            "WARC-Refers-To",
            "an original imported before the revisit",
            format!("no render of {uri} at {date} in the store"),
        ));
    };
    // A Wink render's payload is its stored value; another WARC's digest is of the payload as
    // it was sent (chunked, compressed), which the store does not keep: not comparable.
    let wink = r.header.get(mapping::FIELD_REV).is_some();
    if let Some(text) = r.header.get("WARC-Payload-Digest").filter(|_| wink) {
        if let Ok(d) = digest::Digest::parse(text) {
            let mut h = digest::Hasher::new(d.algorithm);
            h.update(&got.value);
            if h.finish() != d.bytes {
                return Err(damage(
                    "WARC-Payload-Digest",
                    text,
                    format!(
                        "the original's payload has another digest ({:?})",
                        d.algorithm
                    ),
                ));
            }
        }
    }
    Ok(Ok(Payload {
        content_type: got.content_type,
        value: got.value,
        language: got.labels.language,
    }))
}
