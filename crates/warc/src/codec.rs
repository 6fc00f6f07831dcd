//! How records are compressed: each record its own gzip member (`.warc.gz`, WARC 1.1 Annex D) or
//! its own zstd frame (`.warc.zst`), or none (`.warc`), so a record can be read from its offset
//! alone; and [`Members`], which decodes a file member by member and says where each one starts.
//!
//! A `.warc.zst` may open with a dictionary in a skippable frame (magic `0x184D2A5D`, little-endian
//! length, the dictionary itself, zstd-compressed or not), as the IIPC's proposal for zstd WARCs
//! has it; the frames after it are decoded with it. Wink writes none.

use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::path::Path;

use flate2::bufread::GzDecoder;

/// How the records of a file are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// One gzip member per record (`.warc.gz`), as warcio and pywb expect.
    Gzip,
    /// One zstd frame per record (`.warc.zst`).
    Zstd,
    /// Not compressed (`.warc`).
    None,
}

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The skippable frame that holds a `.warc.zst`'s dictionary.
const ZSTD_DICTIONARY_MAGIC: [u8; 4] = [0x5d, 0x2a, 0x4d, 0x18];
/// The largest dictionary read.
const MAX_DICTIONARY: u32 = 64 << 20;

impl Compression {
    /// The file name's ending: `.warc.gz`, `.warc.zst` or `.warc`.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::Gzip => ".warc.gz",
            Compression::Zstd => ".warc.zst",
            Compression::None => ".warc",
        }
    }

    /// The compression a file name says (`.gz`, `.zst`, anything else none).
    pub fn of_path(path: &Path) -> Compression {
        let name = path.to_string_lossy();
        if name.ends_with(".gz") {
            Compression::Gzip
        } else if name.ends_with(".zst") {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The compression a file's first bytes show, whatever its name: a gzip member, a zstd
    /// frame (or the skippable frame of a dictionary); anything else is read as plain WARC.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&GZIP_MAGIC) {
            Compression::Gzip
        } else if head.starts_with(&ZSTD_MAGIC) || head.starts_with(&ZSTD_DICTIONARY_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The default level: gzip 6 (zlib's default), zstd 3 (zstd's).
    pub fn default_level(self) -> u32 {
        match self {
            Compression::Gzip => 6,
            Compression::Zstd => 3,
            Compression::None => 0,
        }
    }

    /// One record's bytes as one member (gzip), one frame (zstd), or as they are.
    pub fn compress(self, record: &[u8], level: u32) -> io::Result<Vec<u8>> {
        match self {
            Compression::Gzip => gzip_member(record, level),
            Compression::Zstd => zstd::bulk::compress(record, level.min(22) as i32),
            Compression::None => Ok(record.to_vec()),
        }
    }
}

/// One gzip member holding `record`, compressed at `level` (1-9, as zlib's levels) by
/// libdeflate: a record is compressed whole, so a one-shot compressor (about twice zlib's
/// speed at the same level and size) fits; one per thread and level, reused.
fn gzip_member(record: &[u8], level: u32) -> io::Result<Vec<u8>> {
    use libdeflater::{CompressionLvl, Compressor};
    thread_local! {
        static COMPRESSOR: std::cell::RefCell<Option<(u32, Compressor)>> =
            const { std::cell::RefCell::new(None) };
    }
    let level = level.clamp(1, 9);
    COMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        let compressor = match slot.as_mut() {
            Some((l, c)) if *l == level => c,
            _ => {
                let lvl = CompressionLvl::new(level as i32)
                    .map_err(|e| io::Error::other(format!("gzip level {level}: {e:?}")))?;
                &mut slot.insert((level, Compressor::new(lvl))).1
            }
        };
        let mut out = vec![0; compressor.gzip_compress_bound(record.len())];
        let n = compressor
            .gzip_compress(record, &mut out)
            .map_err(|e| io::Error::other(format!("gzip: {e:?}")))?;
        out.truncate(n);
        Ok(out)
    })
}

/// A reader that counts the bytes consumed from it: the position in the file.
#[derive(Debug)]
struct Counting<R> {
    inner: R,
    position: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.position += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.position += n as u64;
        self.inner.consume(n);
    }
}

type Source<R> = Counting<io::BufReader<R>>;

enum State<R: Read> {
    /// Between members (or before the first).
    Between(Source<R>),
    Gzip(Box<GzDecoder<Source<R>>>),
    Zstd(zstd::stream::read::Decoder<'static, Source<R>>),
    /// A plain file: one "member", the whole file.
    Plain(Source<R>),
    /// Only while a state changes.
    Moving,
}

/// A WARC file decoded member by member. A read never returns bytes of two members at once, so
/// the caller always knows which member a byte came from.
pub(crate) struct Members<R: Read> {
    state: State<R>,
    compression: Compression,
    dictionary: Option<Vec<u8>>,
    /// The file offset where the current member starts.
    member_start: u64,
}

impl<R: Read> std::fmt::Debug for Members<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members")
            .field("compression", &self.compression)
            .field("member_start", &self.member_start)
            .finish()
    }
}

/// How a member ended badly: the decoder's error.
#[derive(Debug)]
pub(crate) struct MemberError {
    /// Where the member starts.
    pub member: u64,
    pub error: io::Error,
}

impl<R: Read + Seek> Members<R> {
    /// Decodes `file`, whose compression is sniffed from its first bytes.
    pub fn new(file: R) -> io::Result<Members<R>> {
        let mut source = Counting {
            inner: io::BufReader::with_capacity(256 << 10, file),
            position: 0,
        };
        let compression = Compression::sniff(source.fill_buf()?);
        let mut members = Members {
            state: State::Between(source),
            compression,
            dictionary: None,
            member_start: 0,
        };
        if compression == Compression::None {
            members.state = match std::mem::replace(&mut members.state, State::Moving) {
                State::Between(s) => State::Plain(s),
                other => other,
            };
        } else if compression == Compression::Zstd {
            members.read_dictionary()?;
        }
        Ok(members)
    }

    /// The compression of the file.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Bytes of the file consumed so far.
    pub fn position(&self) -> u64 {
        match &self.state {
            State::Between(s) | State::Plain(s) => s.position,
            State::Gzip(d) => d.get_ref().position,
            State::Zstd(d) => d.get_ref().position,
            State::Moving => 0,
        }
    }

    /// Where the current (or last) member starts.
    pub fn member_start(&self) -> u64 {
        self.member_start
    }

    /// Whether a member is being decoded (for a plain file: always, until its end).
    pub fn in_member(&self) -> bool {
        matches!(
            self.state,
            State::Gzip(_) | State::Zstd(_) | State::Plain(_)
        )
    }

    fn read_dictionary(&mut self) -> io::Result<()> {
        let State::Between(source) = &mut self.state else {
            return Ok(());
        };
        let head = source.fill_buf()?;
        if !head.starts_with(&ZSTD_DICTIONARY_MAGIC) {
            return Ok(());
        }
        let mut frame = [0u8; 8];
        source.read_exact(&mut frame)?;
        let len = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if len > MAX_DICTIONARY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a zstd dictionary of {len} bytes (at most {MAX_DICTIONARY} read)"),
            ));
        }
        let mut dict = vec![0u8; len as usize];
        source.read_exact(&mut dict)?;
        if dict.starts_with(&ZSTD_MAGIC) {
            dict = zstd::stream::decode_all(&dict[..])?;
        }
        self.dictionary = Some(dict);
        Ok(())
    }

    /// Starts the next member; `None` at the end of the file (and, for a plain file, after its
    /// one member).
    pub fn next_member(&mut self) -> io::Result<Option<u64>> {
        let mut source = match std::mem::replace(&mut self.state, State::Moving) {
            State::Between(s) => s,
            other => {
                self.state = other;
                return Err(io::Error::other("next_member inside a member"));
            }
        };
        if self.compression == Compression::None || source.fill_buf()?.is_empty() {
            self.state = State::Between(source);
            return Ok(None);
        }
        self.member_start = source.position;
        self.state = match self.compression {
            Compression::Gzip => State::Gzip(Box::new(GzDecoder::new(source))),
            _ => {
                let decoder = match &self.dictionary {
                    Some(dict) => zstd::stream::read::Decoder::with_dictionary(source, dict)?,
                    None => zstd::stream::read::Decoder::with_buffer(source)?,
                };
                let mut decoder = decoder.single_frame();
                decoder.window_log_max(31)?;
                State::Zstd(decoder)
            }
        };
        Ok(Some(self.member_start))
    }

    /// Reads decoded bytes of the current member; 0 when it has ended (the next read needs
    /// [`Members::next_member`]). A member that cannot be decoded to its end is an error.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, MemberError> {
        let member = self.member_start;
        let result = match &mut self.state {
            State::Gzip(d) => d.read(buf),
            State::Zstd(d) => d.read(buf),
            State::Plain(s) => s.read(buf),
            State::Between(_) | State::Moving => return Ok(0),
        };
        match result {
            Ok(0) => {
                self.end_member();
                Ok(0)
            }
            Ok(n) => Ok(n),
            Err(error) => Err(MemberError { member, error }),
        }
    }

    fn end_member(&mut self) {
        self.state = match std::mem::replace(&mut self.state, State::Moving) {
            State::Gzip(d) => State::Between((*d).into_inner()),
            State::Zstd(d) => State::Between(d.finish()),
            State::Plain(s) => State::Between(s),
            other => other,
        };
    }

    /// Drops the member under way and moves to the first place after byte `after` where a
    /// member (or, in a plain file, a record's version line) starts: past damage. Returns that
    /// offset, or `None` when the file holds none.
    pub fn resync(&mut self, after: u64) -> io::Result<Option<u64>> {
        self.end_member();
        let State::Between(source) = std::mem::replace(&mut self.state, State::Moving) else {
            return Err(io::Error::other("resync: no source"));
        };
        let mut inner = source.inner;
        let mut at = after + 1;
        inner.seek(SeekFrom::Start(at))?;
        let magic: &[u8] = match self.compression {
            Compression::Gzip => &GZIP_MAGIC,
            Compression::Zstd => &ZSTD_MAGIC,
            Compression::None => b"WARC/1.",
        };
        let mut window: Vec<u8> = Vec::new();
        let found = loop {
            let buf = inner.fill_buf()?;
            if buf.is_empty() {
                break None;
            }
            window.extend_from_slice(buf);
            let n = buf.len();
            inner.consume(n);
            if let Some(i) = window.windows(magic.len()).position(|w| w == magic) {
                break Some(at + i as u64);
            }
            let keep = window.len().min(magic.len() - 1);
            at += (window.len() - keep) as u64;
            window.drain(..window.len() - keep);
        };
        let start = found.unwrap_or(at + window.len() as u64);
        inner.seek(SeekFrom::Start(start))?;
        let source = Counting {
            inner,
            position: start,
        };
        self.state = match self.compression {
            Compression::None => State::Plain(source),
            _ => State::Between(source),
        };
        self.member_start = start;
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members_of(file: Vec<u8>) -> Vec<(u64, Vec<u8>)> {
        let mut m = Members::new(io::Cursor::new(file)).unwrap();
        let mut out = Vec::new();
        while let Some(start) = m.next_member().unwrap() {
            let mut bytes = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                let n = m.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                bytes.extend_from_slice(&buf[..n]);
            }
            out.push((start, bytes));
        }
        out
    }

    #[test]
    fn members_decode_one_at_a_time_with_their_offsets() {
        for c in [Compression::Gzip, Compression::Zstd] {
            let (a, b) = (
                c.compress(b"first", 3).unwrap(),
                c.compress(b"second", 3).unwrap(),
            );
            let file = [a.clone(), b].concat();
            assert_eq!(
                members_of(file),
                vec![(0, b"first".to_vec()), (a.len() as u64, b"second".to_vec())],
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_truncated_member_is_an_error_and_resync_finds_the_next() {
        let a = Compression::Gzip.compress(&[7u8; 5000], 1).unwrap();
        let b = Compression::Gzip.compress(b"after", 1).unwrap();
        let file = [&a[..a.len() - 10], &b[..]].concat();
        let mut m = Members::new(io::Cursor::new(file)).unwrap();
        assert_eq!(m.next_member().unwrap(), Some(0));
        let mut buf = vec![0u8; 10000];
        let err = loop {
            match m.read(&mut buf) {
                Ok(0) => panic!("a truncated member ended cleanly"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(err.member, 0);
        let next = m.resync(0).unwrap().unwrap();
        assert_eq!(next, a.len() as u64 - 10);
        assert_eq!(m.next_member().unwrap(), Some(next));
        let n = m.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"after");
    }

    #[test]
    fn plain_files_are_one_member_and_sniffing_ignores_names() {
        let file = b"WARC/1.1\r\nrest".to_vec();
        let mut m = Members::new(io::Cursor::new(file)).unwrap();
        assert_eq!(m.compression(), Compression::None);
        assert!(m.in_member());
        let mut buf = [0u8; 64];
        assert_eq!(m.read(&mut buf).unwrap(), 14);
        assert_eq!(m.read(&mut buf).unwrap(), 0);
        assert_eq!(m.next_member().unwrap(), None);
        assert_eq!(
            Compression::of_path(Path::new("a.warc.zst")),
            Compression::Zstd
        );
    }

    #[test]
    fn a_zstd_dictionary_frame_is_used() {
        let dict = b"a dictionary of words that the record repeats".repeat(4);
        let mut cctx = zstd::bulk::Compressor::with_dictionary(3, &dict).unwrap();
        let frame = cctx.compress(b"words that the record repeats").unwrap();
        let mut file = ZSTD_DICTIONARY_MAGIC.to_vec();
        file.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        file.extend_from_slice(&dict);
        let start = file.len() as u64;
        file.extend_from_slice(&frame);
        assert_eq!(
            members_of(file),
            vec![(start, b"words that the record repeats".to_vec())]
        );
    }
}
