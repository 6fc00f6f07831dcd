//! Reading WARC records one at a time, each checked as it is read: its framing (a member that
//! decodes to its end, a header, exactly `Content-Length` bytes, then CRLF CRLF), its mandatory
//! fields, and the block and payload digests it declares. Damage is a [`Damage`] naming the
//! record's offset and the field; [`RecordReader::skip_damage`] moves past it.
//!
//! Memory is bounded: a header is at most [`MAX_HEADER`](super::record::MAX_HEADER) bytes and a
//! block is kept only up to the caller's limit; a longer one is still read and checked, in
//! pieces, and reported as not kept.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use super::codec::{Compression, Members};
use super::digest::{Digest, Hasher};
use super::record::{Header, END_OF_RECORD, MAX_HEADER};

/// Where to look in an HTTP message for the end of its header, bytes.
const MAX_HTTP_HEADER: usize = 64 << 10;

/// One record, read and checked.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    /// Offset of the record in the file: its member's first byte (compressed files), or its own.
    pub offset: u64,
    /// Bytes the record takes in the file (its member; `None` when it shares its member).
    pub length: Option<u64>,
    pub header: Header,
    /// `Content-Length`.
    pub block_len: u64,
    /// The block, when it was no longer than the reader's limit (else empty, `kept` false).
    pub block: Vec<u8>,
    pub kept: bool,
    /// Where the payload starts in the block: after the HTTP header of an `application/http`
    /// block, else 0.
    pub payload_start: usize,
}

impl Record {
    /// `WARC-Type`.
    pub fn kind(&self) -> &str {
        self.header.get("WARC-Type").unwrap_or("")
    }
}

/// Damage found in a record: where, which field (or part), what was expected and found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Where the damaged record starts in the file: its member's first byte in a compressed
    /// file.
    pub offset: u64,
    /// The field or part of the record that is wrong.
    pub field: String,
    /// What it should have been.
    pub expected: String,
    /// What was there instead.
    pub found: String,
}

impl Damage {
    /// As the library's error, naming the file.
    pub fn to_error(&self, path: &Path) -> Error {
        Error::corrupt(
            path,
            self.offset,
            format!("WARC record at byte {}: {}", self.offset, self.field),
            &self.expected,
            &self.found,
        )
    }
}

fn damage(
    offset: u64,
    field: &str,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Damage {
    Damage {
        offset,
        field: field.to_string(),
        expected: expected.into(),
        found: found.into(),
    }
}

/// A digest a record declares, and the running hash that checks it.
struct Check {
    field: &'static str,
    declared: Digest,
    text: String,
    hasher: Hasher,
}

impl Check {
    fn of(header: &Header, field: &'static str, offset: u64) -> Result<Option<Check>, Damage> {
        let Some(text) = header.get(field) else {
            return Ok(None);
        };
        let declared = Digest::parse(text)
            .map_err(|why| damage(offset, field, "ALGORITHM:VALUE (sha1, sha256 or md5)", why))?;
        Ok(Some(Check {
            field,
            hasher: Hasher::new(declared.algorithm),
            declared,
            text: text.to_string(),
        }))
    }

    fn verify(self, offset: u64) -> Result<(), Damage> {
        let found = self.hasher.finish();
        if found == self.declared.bytes {
            return Ok(());
        }
        let name = self.text.split(':').next().unwrap_or("");
        Err(damage(
            offset,
            self.field,
            format!("the digest of the bytes read, {}", self.text),
            format!("{name}:{}", data_encoding::BASE32.encode(&found)),
        ))
    }
}

/// Reads the records of one WARC file (gzip, zstd or plain, sniffed from its first bytes).
pub(crate) struct RecordReader<R: Read + Seek = File> {
    path: PathBuf,
    members: Members<R>,
    /// Decoded bytes of the current member not consumed yet.
    carry: Vec<u8>,
    /// Where `carry` starts in a plain file.
    plain_at: u64,
    keep: u64,
    /// Bytes of the last header read, its blank line included.
    header_len: usize,
    /// The offset of the record being read (for damage and resync).
    current: u64,
    /// Where the last resync went.
    resynced: u64,
    done: bool,
}

impl<R: Read + Seek> std::fmt::Debug for RecordReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordReader")
            .field("path", &self.path)
            .field("current", &self.current)
            .finish()
    }
}

impl RecordReader<File> {
    /// Opens a WARC file; blocks up to `keep` bytes are kept in the records read.
    pub fn open(path: &Path, keep: u64) -> Result<RecordReader<File>> {
        let file = File::open(path).map_err(|e| Error::io(path, None, e))?;
        RecordReader::new(path, file, keep)
    }
}

impl<R: Read + Seek> RecordReader<R> {
    /// Reads records from `file`, named `path` in errors.
    pub fn new(path: &Path, file: R, keep: u64) -> Result<RecordReader<R>> {
        let members = Members::new(file).map_err(|e| Error::io(path, Some(0), e))?;
        Ok(RecordReader {
            path: path.to_path_buf(),
            members,
            carry: Vec::new(),
            plain_at: 0,
            keep,
            header_len: 0,
            current: 0,
            resynced: 0,
            done: false,
        })
    }

    /// The file's compression.
    pub fn compression(&self) -> Compression {
        self.members.compression()
    }

    /// The next record; `Ok(None)` at the end of the file. After damage, the next call goes on
    /// only after [`RecordReader::skip_damage`] (until then it returns `Ok(None)`).
    pub fn next_record(&mut self) -> std::result::Result<Option<Record>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_record();
        if result.is_err() {
            self.done = true;
        }
        result
    }

    /// Moves past the damaged record to the next place a record may start; false when the file
    /// holds none.
    pub fn skip_damage(&mut self) -> Result<bool> {
        self.carry.clear();
        // Always forward: past the damaged record, and past where the last resync went.
        let after = self.current.max(self.resynced);
        let found = self
            .members
            .resync(after)
            .map_err(|e| Error::io(&self.path, Some(self.current), e))?;
        if let Some(at) = found {
            self.plain_at = at;
            self.resynced = at;
            self.done = false;
        }
        Ok(found.is_some())
    }

    /// Reads more decoded bytes of the current member into `carry`; false at its end.
    fn fill(&mut self) -> std::result::Result<bool, ReadError> {
        let mut buf = [0u8; 64 << 10];
        let n = self.members.read(&mut buf).map_err(|e| {
            ReadError::Damage(damage(
                e.member,
                "compressed member",
                format!("a {:?} member that decodes to its end", self.compression()),
                e.error.to_string(),
            ))
        })?;
        self.carry.extend_from_slice(&buf[..n]);
        Ok(n > 0)
    }

    /// Reads a header from `carry` (and the member): the version line to the blank line.
    fn read_header(&mut self, offset: u64) -> std::result::Result<Header, ReadError> {
        let mut searched = 0usize;
        let (end, blank) = loop {
            let from = searched.saturating_sub(3);
            let crlf = find(&self.carry[from..], b"\r\n\r\n").map(|i| (from + i, 4));
            let lf = find(&self.carry[from..], b"\n\n").map(|i| (from + i, 2));
            match (crlf, lf) {
                (Some(a), Some(b)) => break if a.0 < b.0 { a } else { b },
                (Some(a), None) | (None, Some(a)) => break a,
                (None, None) => {}
            }
            searched = self.carry.len();
            if searched > MAX_HEADER {
                return Err(damage(
                    offset,
                    "header",
                    format!("a header of at most {MAX_HEADER} bytes"),
                    "no blank line ending it",
                )
                .into());
            }
            if !self.fill()? {
                let found = if self.carry.is_empty() {
                    "nothing".to_string()
                } else {
                    format!(
                        "{} bytes and the end of the record's member or file",
                        self.carry.len()
                    )
                };
                return Err(
                    damage(offset, "header", "a header ended by a blank line", found).into(),
                );
            }
        };
        let header = Header::parse(&self.carry[..end + blank / 2])
            .map_err(|e| damage(offset, &e.field, e.expected, e.found))?;
        self.carry.drain(..end + blank);
        self.header_len = end + blank;
        Ok(header)
    }

    fn read_record(&mut self) -> std::result::Result<Option<Record>, ReadError> {
        // Where the record starts: in the rest of the current member, or in the next one.
        if self.carry.is_empty() && self.members.in_member() {
            // Nothing left means the member (or plain file) ended with the last record.
            self.fill()?;
        }
        if self.carry.is_empty() {
            match self.members.next_member() {
                // Damage from here on is this member's, and a resync starts past it.
                Ok(Some(at)) => self.current = at,
                Ok(None) => return Ok(None),
                Err(e) => return Err(ReadError::Io(Error::io(&self.path, None, e))),
            }
            if !self.fill()? {
                let at = self.members.member_start();
                self.current = at;
                return Err(ReadError::Damage(damage(
                    at,
                    "compressed member",
                    "a member holding a record",
                    "an empty member",
                )));
            }
        }
        let compressed = self.compression() != Compression::None;
        let offset = if compressed {
            self.members.member_start()
        } else {
            self.plain_at
        };
        self.current = offset;
        let header = self.read_header(offset)?;
        let block_len = header
            .content_length()
            .map_err(|e| damage(offset, &e.field, e.expected, e.found))?;
        if let Some(field) = header.missing_mandatory() {
            return Err(damage(
                offset,
                field,
                "the field (mandatory in every record)",
                "none",
            )
            .into());
        }
        let kind = header.get("WARC-Type").unwrap_or("").to_string();
        let http = matches!(kind.as_str(), "response" | "request" | "revisit")
            && header
                .get("Content-Type")
                .is_some_and(|t| t.to_ascii_lowercase().starts_with("application/http"));
        let mut block_check = Check::of(&header, "WARC-Block-Digest", offset)?;
        // A revisit's payload digest is the original's: it is checked against the original.
        let mut payload_check = match kind.as_str() {
            "revisit" => None,
            _ => Check::of(&header, "WARC-Payload-Digest", offset)?,
        };
        let kept = block_len <= self.keep;
        let mut block = Vec::with_capacity(if kept { block_len as usize } else { 0 });
        let mut head: Vec<u8> = Vec::new();
        let mut payload_start: Option<usize> = if http { None } else { Some(0) };
        // A payload that is the whole block, checked with the block's algorithm: one hash.
        let shared = !http
            && match (&block_check, &payload_check) {
                (Some(b), Some(p)) => b.declared.algorithm == p.declared.algorithm,
                _ => false,
            };
        let mut remaining = block_len;
        let mut seen = 0u64;
        while remaining > 0 {
            if self.carry.is_empty() && !self.fill()? {
                return Err(damage(
                    offset,
                    "Content-Length",
                    format!("{block_len} bytes of block"),
                    format!(
                        "{seen} bytes before the {} ended",
                        if compressed {
                            "record's member"
                        } else {
                            "file"
                        }
                    ),
                )
                .into());
            }
            let take = (remaining.min(self.carry.len() as u64)) as usize;
            let piece = &self.carry[..take];
            if let Some(c) = block_check.as_mut() {
                c.hasher.update(piece);
            }
            // The payload: after the HTTP header, found in the first bytes of the block.
            let payload_piece: &[u8] = match payload_start {
                Some(_) => piece,
                None => {
                    let before = head.len();
                    head.extend_from_slice(&piece[..piece.len().min(MAX_HTTP_HEADER + 4)]);
                    match find(&head, b"\r\n\r\n") {
                        Some(i) => {
                            payload_start = Some(i + 4);
                            &piece[(i + 4 - before).min(piece.len())..]
                        }
                        None if head.len() > MAX_HTTP_HEADER => {
                            return Err(damage(
                                offset,
                                "HTTP header",
                                format!("an HTTP header of at most {MAX_HTTP_HEADER} bytes"),
                                "no end of header",
                            )
                            .into());
                        }
                        None => &[],
                    }
                }
            };
            if let Some(c) = payload_check.as_mut().filter(|_| !shared) {
                c.hasher.update(payload_piece);
            }
            if kept {
                block.extend_from_slice(piece);
            }
            self.carry.drain(..take);
            remaining -= take as u64;
            seen += take as u64;
        }
        if payload_start.is_none() && block_len > 0 {
            return Err(damage(
                offset,
                "HTTP header",
                "CRLF CRLF ending the HTTP header",
                "none",
            )
            .into());
        }
        // The end of the record.
        while self.carry.len() < END_OF_RECORD.len() {
            if !self.fill()? {
                break;
            }
        }
        if !self.carry.starts_with(END_OF_RECORD) {
            let found = &self.carry[..self.carry.len().min(END_OF_RECORD.len())];
            return Err(damage(
                offset,
                "Content-Length",
                format!("CRLF CRLF after the {block_len} bytes of block it gives"),
                format!("{:?}", String::from_utf8_lossy(found)),
            )
            .into());
        }
        self.carry.drain(..END_OF_RECORD.len());
        if let (true, Some(b), Some(p)) = (shared, &block_check, payload_check.as_mut()) {
            p.hasher = b.hasher.clone();
        }
        if let Some(c) = block_check {
            c.verify(offset)?;
        }
        if let Some(c) = payload_check {
            c.verify(offset)?;
        }
        let header_bytes = self.header_len;
        let length = if compressed {
            // The member should end here; more bytes mean records sharing a member.
            if self.carry.is_empty() && !self.fill()? {
                Some(self.members.position() - offset)
            } else {
                None
            }
        } else {
            let len = header_bytes as u64 + block_len + END_OF_RECORD.len() as u64;
            self.plain_at = offset + len;
            Some(len)
        };
        Ok(Some(Record {
            offset,
            length,
            header,
            block_len,
            block,
            kept,
            payload_start: payload_start.unwrap_or(0),
        }))
    }
}

/// Why a record could not be read: damage in it, or an I/O error of the file.
#[derive(Debug)]
pub(crate) enum ReadError {
    Damage(Damage),
    Io(Error),
}

impl From<Damage> for ReadError {
    fn from(d: Damage) -> ReadError {
        ReadError::Damage(d)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
