//! A kvseq built in memory and written whole: the same bytes as [`KvSeq::create`](super::KvSeq::create), appends and a
//! flush would leave in a file, without a storage under them. For a caller that writes a small
//! file at once on every commit (a filesys journal slot).

use std::path::{Path, PathBuf};

use super::entry::Codec;
use super::{new_superblock, KvSeqOptions};
use crate::error::{Error, Result};
use crate::format::superblock::{var, Superblock};

/// A kvseq's bytes, built entry by entry.
#[derive(Debug)]
pub struct Image {
    name: PathBuf,
    sb: Superblock,
    codec: Codec,
    entries: Vec<u8>,
    count: i64,
}

impl Image {
    /// An empty kvseq with `opts` (no ALIGN); `name` names it in errors.
    pub fn new(name: &Path, opts: &KvSeqOptions) -> Result<Image> {
        if opts.align > 1 {
            return Err(Error::invalid("a kvseq image has no ALIGN"));
        }
        Ok(Image {
            name: name.to_path_buf(),
            sb: new_superblock(name, opts)?,
            codec: Codec {
                keyrepr: opts.keyrepr,
                valrepr: opts.valrepr,
                delflag: opts.delflag,
            },
            entries: Vec::new(),
            count: 0,
        })
    }

    /// Appends an entry; nothing is added when it does not fit its representations.
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let size = self.codec.encoded_size(key, value)?;
        self.entries.reserve(size as usize);
        self.codec.encode_into(&mut self.entries, key, value);
        self.count += 1;
        Ok(())
    }

    /// The entries' bytes so far (what follows the superblock).
    pub fn entries(&self) -> &[u8] {
        &self.entries
    }

    /// Returns the whole file: the superblock, with FILESIZE, ENTRIES and AENTRIES counting
    /// every entry, then the entries.
    pub fn finish(mut self) -> Result<Vec<u8>> {
        let filesize = self.sb.sbsize() + self.entries.len() as u64;
        for (name, value) in [
            (var::FILESIZE, filesize as i64),
            (var::ENTRIES, self.count),
            (var::AENTRIES, self.count),
        ] {
            self.sb.set(&self.name, name, value)?;
        }
        let mut bytes = self.sb.encode();
        bytes.extend_from_slice(&self.entries);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::kvseq::KvSeq;
    use crate::format::repr::Repr;
    use crate::format::superblock::{Purpose, VarName};
    use crate::storage::MemStorage;

    /// What the writer leaves: create (synced), appends, flush.
    fn written(opts: &KvSeqOptions, entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mem = MemStorage::new("image");
        let mut kv = KvSeq::create(Box::new(mem.clone()), opts).unwrap();
        for (k, v) in entries {
            kv.append(k, v).unwrap();
        }
        kv.flush().unwrap();
        let mut bytes = mem.to_vec();
        bytes.truncate(kv.filesize() as usize);
        bytes
    }

    fn built(opts: &KvSeqOptions, entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut image = Image::new(Path::new("image"), opts).unwrap();
        for (k, v) in entries {
            image.append(k, v).unwrap();
        }
        image.finish().unwrap()
    }

    #[test]
    fn an_image_is_the_bytes_the_writer_leaves() {
        let clock = std::sync::Arc::new(crate::clock::ManualClock::new(1234));
        let layouts = [
            (Repr::Fixed { len: 9 }, Repr::Prefixed { width: 4 }, false),
            (
                Repr::Prefixed { width: 2 },
                Repr::Prefixed { width: 4 },
                true,
            ),
            (
                Repr::Prefixed { width: 1 },
                Repr::Prefixed { width: 8 },
                false,
            ),
        ];
        for (keyrepr, valrepr, delflag) in layouts {
            let opts = KvSeqOptions {
                purpose: Purpose(*b"IMAGETST"),
                keyrepr,
                valrepr,
                delflag,
                fileincr: 0,
                extra: vec![(VarName::new(b"JSEQ"), 77)],
                clock: clock.clone(),
                ..KvSeqOptions::default()
            };
            let value = vec![7u8; 5000];
            let entries: [(&[u8], &[u8]); 3] = [
                (b"abcdefghi", b""),
                (b"123456789", &value),
                (b"zzzzzzzzz", b"x"),
            ];
            assert_eq!(built(&opts, &entries), written(&opts, &entries));
            assert_eq!(built(&opts, &[]), written(&opts, &[]));
        }
    }

    #[test]
    fn an_entry_that_does_not_fit_adds_nothing() {
        let opts = KvSeqOptions {
            keyrepr: Repr::Fixed { len: 9 },
            ..KvSeqOptions::default()
        };
        let mut image = Image::new(Path::new("image"), &opts).unwrap();
        image.append(b"123456789", b"v").unwrap();
        let before = image.entries().to_vec();
        let err = image.append(b"short", b"v").unwrap_err();
        assert!(err.to_string().contains("5-byte key"), "{err}");
        assert_eq!(image.entries(), &before[..]);
    }
}
