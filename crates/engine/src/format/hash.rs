//! Hash algorithm 1 (HTALGO = 1): MD5 of the key.
//!
//! | derived value | bytes of MD5(key)        | use                                     |
//! |---------------|--------------------------|-----------------------------------------|
//! | `hash63`      | last 8, top bit cleared  | home cell = hash63 mod HTSIZE           |
//! | `stored_hash` | first 8                  | second word of a CELLSZ 2 cell          |
//!
//! Both are read as unsigned big-endian integers.

use md5::{Digest, Md5};

/// The only hash algorithm the spec defines.
pub const HTALGO_MD5: i64 = 1;

/// The MD5 digest of a key, from which both derived values come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash([u8; 16]);

impl KeyHash {
    /// Hashes `key` with algorithm 1.
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(Md5::digest(key).into())
    }

    /// The last 63 bits of the digest, as an unsigned big-endian integer.
    pub fn hash63(self) -> u64 {
        let tail: [u8; 8] = self.0[8..16].try_into().expect("8 bytes of 16");
        u64::from_be_bytes(tail) & (u64::MAX >> 1)
    }

    /// The home cell in a table of `htsize` cells (`htsize` > 0).
    pub fn home(self, htsize: u64) -> u64 {
        self.hash63() % htsize
    }

    /// The first 8 bytes of the digest, as kept in a stored-hash cell.
    pub fn stored(self) -> u64 {
        let head: [u8; 8] = self.0[..8].try_into().expect("8 bytes of 16");
        u64::from_be_bytes(head)
    }

    /// The digest.
    pub fn digest(self) -> [u8; 16] {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_from_the_independent_implementation() {
        // From shared/fixtures/fixtures.json, "hash_vectors".
        let h = KeyHash::of(b"");
        assert_eq!(h.hash63(), 7602086723416769150);
        assert_eq!(h.stored(), 0xd41d8cd98f00b204);
        assert_eq!(h.home(16), 14);
        let h = KeyHash::of(b"readme.txt/I0");
        assert_eq!(h.hash63(), 7140802366865836758);
        assert_eq!(h.stored(), 0xbedfe646724313c0);
        assert_eq!(h.home(16), 6);
        assert_eq!(KeyHash::of(&[0, 1, 2, 3, 4, 5, 6, 7]).home(16), 15);
    }
}
