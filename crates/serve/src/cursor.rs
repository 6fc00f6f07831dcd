//! Listing cursors as clients see them: opaque and authenticated.
//!
//! A store's cursor names a position in its files; read at a position the store never gave, it
//! finds no entry there and the read fails as damage would. So the server never reads a cursor
//! it did not make: it hands out `base64url(cursor ‖ tag)`, the tag being the first 16 bytes of
//! HMAC-SHA-256 over the listing's scope (bucket, domain, and title for a render listing) and
//! the cursor, keyed by a secret of the data root (`ROOT/.cursor-key`, 32 random bytes made at
//! the first start). A cursor edited by hand, or given for another listing, is 400.

use std::io::{Read as _, Write as _};
use std::path::Path;

use data_encoding::BASE64URL_NOPAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use wink_engine::{Error, Result};

/// Bytes of the tag a cursor carries.
const TAG: usize = 16;
/// The longest cursor text taken (a store's cursors are a few dozen bytes).
const MAX_CURSOR: usize = 1024;

/// The data root's key for cursors.
#[derive(Clone)]
pub struct CursorKey([u8; 32]);

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never goes to a log.
        f.write_str("CursorKey(…)")
    }
}

impl CursorKey {
    /// The key kept in `root/.cursor-key`, made (from the system's random source) when absent.
    pub fn load_or_create(root: &Path) -> Result<CursorKey> {
        let path = root.join(".cursor-key");
        let mut key = [0u8; 32];
        match std::fs::File::open(&path) {
            Ok(mut f) => {
                f.read_exact(&mut key)
                    .map_err(|e| Error::io(&path, None, e))?;
                return Ok(CursorKey(key));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, None, e)),
        }
        let random = Path::new("/dev/urandom");
        std::fs::File::open(random)
            .and_then(|mut r| r.read_exact(&mut key))
            .map_err(|e| Error::io(random, None, e))?;
        // Written whole under another name, then renamed: a crash never leaves half a key.
        let tmp = root.join(".cursor-key.tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, None, e))?;
        f.write_all(&key)
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(&tmp, None, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, None, e))?;
        wink_engine::storage::sync_parent_dir(&path).map_err(|e| Error::io(&path, None, e))?;
        Ok(CursorKey(key))
    }

    /// A key shared by several servers (a cluster's), so each takes the cursors any gave.
    pub fn from_secret(secret: [u8; 32]) -> CursorKey {
        CursorKey(secret)
    }

    fn tag(&self, scope: &[&str], cursor: &[u8]) -> [u8; TAG] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        for part in scope {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac.update(cursor);
        let mut out = [0u8; TAG];
        out.copy_from_slice(&mac.finalize().into_bytes()[..TAG]);
        out
    }

    /// The cursor a client is given for `cursor` of the listing `scope`.
    pub fn seal(&self, scope: &[&str], cursor: &str) -> String {
        let mut bytes = cursor.as_bytes().to_vec();
        bytes.extend_from_slice(&self.tag(scope, cursor.as_bytes()));
        BASE64URL_NOPAD.encode(&bytes)
    }

    /// The store's cursor inside `sealed`, when this key sealed it for `scope`; `None` for any
    /// other text.
    pub fn open(&self, scope: &[&str], sealed: &str) -> Option<String> {
        if sealed.len() > MAX_CURSOR {
            return None;
        }
        let bytes = BASE64URL_NOPAD.decode(sealed.as_bytes()).ok()?;
        let split = bytes.len().checked_sub(TAG)?;
        let (cursor, tag) = bytes.split_at(split);
        let want = self.tag(scope, cursor);
        // Compared in constant time: a tag is not guessed byte by byte.
        let same = subtle::ConstantTimeEq::ct_eq(tag, want.as_slice());
        if !bool::from(same) {
            return None;
        }
        String::from_utf8(cursor.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_this_key_sealed_for_this_listing_opens() {
        let dir = tempfile::tempdir().unwrap();
        let key = CursorKey::load_or_create(dir.path()).unwrap();
        let again = CursorKey::load_or_create(dir.path()).unwrap();
        assert_eq!(key.0, again.0, "the key is kept");
        let sealed = key.seal(&["html", "d.org"], "h4369");
        assert_eq!(
            again.open(&["html", "d.org"], &sealed).as_deref(),
            Some("h4369")
        );
        assert!(key.open(&["html", "e.org"], &sealed).is_none());
        assert!(key.open(&["htm", "ld.org"], &sealed).is_none());
        assert!(key.open(&["html", "d.org"], "h4369").is_none());
        let mut forged = sealed.into_bytes();
        forged[0] ^= 1;
        let forged = String::from_utf8(forged).unwrap();
        assert!(key.open(&["html", "d.org"], &forged).is_none());
        let other = CursorKey::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(other
            .open(&["html", "d.org"], &key.seal(&["html", "d.org"], "h1"))
            .is_none());
    }
}
