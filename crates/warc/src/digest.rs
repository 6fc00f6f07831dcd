//! `WARC-Block-Digest` and `WARC-Payload-Digest` values: `ALGORITHM:VALUE` (WARC 1.1 §5.8–5.9).
//!
//! Written as `sha1:` and the digest in RFC 4648 base32 (uppercase, 32 characters), what the
//! field's tools write and index. Read: `sha1`, `sha256` and `md5`, the value in base32, base16
//! or base64 (RFC 3548 allows any of them, and WARCs in the field use all three).

use data_encoding::{BASE32, BASE32_NOPAD, BASE64, BASE64_NOPAD, HEXLOWER_PERMISSIVE};
use md5::Md5;
use sha1::{Digest as _, Sha1};
use sha2::Sha256;

/// A digest algorithm a WARC names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Sha1,
    Sha256,
    Md5,
}

impl Algorithm {
    fn named(name: &str) -> Option<Algorithm> {
        match name.to_ascii_lowercase().replace('-', "").as_str() {
            "sha1" => Some(Algorithm::Sha1),
            "sha256" => Some(Algorithm::Sha256),
            "md5" => Some(Algorithm::Md5),
            _ => None,
        }
    }

    fn len(self) -> usize {
        match self {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
            Algorithm::Md5 => 16,
        }
    }
}

/// A parsed digest field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Digest {
    pub algorithm: Algorithm,
    pub bytes: Vec<u8>,
}

impl Digest {
    /// Parses `ALGORITHM:VALUE`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Digest, String> {
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?} is not ALGORITHM:VALUE"))?;
        let algorithm = Algorithm::named(name)
            .ok_or_else(|| format!("algorithm {name:?} (sha1, sha256 and md5 are checked)"))?;
        let value = value.trim();
        let upper = value.to_ascii_uppercase();
        let decoded = [
            BASE32.decode(upper.as_bytes()),
            BASE32_NOPAD.decode(upper.as_bytes()),
            HEXLOWER_PERMISSIVE.decode(value.as_bytes()),
            BASE64.decode(value.as_bytes()),
            BASE64_NOPAD.decode(value.as_bytes()),
        ];
        decoded
            .into_iter()
            .flatten()
            .find(|b| b.len() == algorithm.len())
            .map(|bytes| Digest { algorithm, bytes })
            .ok_or_else(|| {
                format!(
                    "{value:?}: not a {name} digest in base32, base16 or base64 ({} bytes)",
                    algorithm.len()
                )
            })
    }
}

/// The `sha1:BASE32` field value of a SHA-1 digest.
pub(crate) fn sha1_label(digest: &[u8; 20]) -> String {
    format!("sha1:{}", BASE32.encode(digest))
}

/// The SHA-1 of `bytes`.
pub(crate) fn sha1(bytes: &[u8]) -> [u8; 20] {
    Sha1::digest(bytes).into()
}

/// A running digest of one algorithm.
#[derive(Clone, Debug)]
pub(crate) enum Hasher {
    Sha1(Sha1),
    Sha256(Sha256),
    Md5(Md5),
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Hasher {
        match algorithm {
            Algorithm::Sha1 => Hasher::Sha1(Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
            Algorithm::Md5 => Hasher::Md5(Md5::new()),
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha1(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Md5(h) => h.update(bytes),
        }
    }

    pub fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Md5(h) => h.finalize().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_base32_as_the_field_writes_it() {
        // warcio's digest of b"hello": sha1:VL2MMHO4YXUKFWV63YHTWSBM3GXKSQ2N
        assert_eq!(
            sha1_label(&sha1(b"hello")),
            "sha1:VL2MMHO4YXUKFWV63YHTWSBM3GXKSQ2N"
        );
        let d = Digest::parse("sha1:VL2MMHO4YXUKFWV63YHTWSBM3GXKSQ2N").unwrap();
        assert_eq!(d.bytes, sha1(b"hello"));
    }

    #[test]
    fn every_encoding_and_algorithm_parses() {
        let hex = "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d";
        assert_eq!(
            Digest::parse(&format!("sha1:{hex}")).unwrap().bytes,
            sha1(b"hello")
        );
        assert_eq!(
            Digest::parse("sha1:qvTGHdzF6KLavt4PO0gs2a6pQ00=")
                .unwrap()
                .bytes,
            sha1(b"hello")
        );
        let mut h = Hasher::new(Algorithm::Sha256);
        h.update(b"hello");
        let sha256 = h.finish();
        let text = format!("sha256:{}", data_encoding::HEXLOWER.encode(&sha256));
        assert_eq!(Digest::parse(&text).unwrap().bytes, sha256);
        assert!(Digest::parse("sha1:short").is_err());
        assert!(Digest::parse("crc32:abcd")
            .unwrap_err()
            .contains("algorithm"));
        assert!(Digest::parse("nocolon").is_err());
    }
}
