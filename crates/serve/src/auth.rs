//! Bearer-token authorization of the requests that change a bucket (PUT, DELETE, POST, and the
//! creation of a bucket). Reads need none: a node serves whoever can reach its port, which is why
//! a listener beyond loopback without a token is refused at start ([`check_listen`]).

use std::net::SocketAddr;
use std::path::Path;

use hyper::header::{HeaderValue, AUTHORIZATION};
use hyper::{HeaderMap, StatusCode};
use subtle::ConstantTimeEq;

use super::problem::Problem;
use wink_engine::{Error, Result};

/// The token the changing requests need, if any.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Vec<u8>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token itself never goes to a log.
        f.debug_struct("Auth")
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Auth {
    /// No token: every request is let through.
    pub fn none() -> Auth {
        Auth::default()
    }

    /// The token in `path`: its first line, without surrounding whitespace; it may not be empty.
    pub fn from_file(path: &Path) -> Result<Auth> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, None, e))?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() {
            return Err(Error::invalid(format!(
                "{}: the token file is empty",
                path.display()
            )));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid(format!(
                "{}: a token is printable ASCII without spaces",
                path.display()
            )));
        }
        Ok(Auth {
            token: Some(token.as_bytes().to_vec()),
        })
    }

    /// Whether a token is required.
    pub fn is_set(&self) -> bool {
        self.token.is_some()
    }

    /// The `Authorization` header a client sends with a change, when there is a token; marked
    /// sensitive so that it is never logged.
    pub fn bearer(&self) -> Option<HeaderValue> {
        let token = self.token.as_ref()?;
        let mut value = HeaderValue::from_bytes(&[b"Bearer ".as_slice(), token].concat()).ok()?;
        value.set_sensitive(true);
        Some(value)
    }

    /// Lets a changing request through when it carries `Authorization: Bearer <token>`; the
    /// comparison takes the same time wherever the tokens differ.
    pub fn check(&self, headers: &HeaderMap) -> std::result::Result<(), Problem> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .unwrap_or(b"");
        if bool::from(given.ct_eq(token)) {
            return Ok(());
        }
        Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "this request changes data: it needs Authorization: Bearer <token>",
        ))
    }
}

/// Refuses to listen beyond loopback without a token: anyone who can reach the port could
/// otherwise write and take down renders.
pub fn check_listen(addr: &SocketAddr, auth: &Auth) -> Result<()> {
    if addr.ip().is_loopback() || auth.is_set() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "refusing to listen on {addr} without --token-file: beyond loopback, anyone who reaches \
         the port could write and take down renders (give a token file, or listen on 127.0.0.1)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let auth = Auth::from_file(&path).unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(auth.check(&h).unwrap_err().status, 401);
        h.insert(AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert!(auth.check(&h).is_err());
        h.insert(AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(auth.check(&h).is_ok());
        h.insert(AUTHORIZATION, "bearer s3cret".parse().unwrap());
        assert!(auth.check(&h).is_err());
        assert!(Auth::none().check(&HeaderMap::new()).is_ok());
        std::fs::write(&path, "\n").unwrap();
        assert!(Auth::from_file(&path).is_err());
    }

    #[test]
    fn a_clients_bearer_header_passes_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, " s3cret \nsecond line\n").unwrap();
        let auth = Auth::from_file(&path).unwrap();
        let value = auth.bearer().unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.as_bytes(), b"Bearer s3cret");
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, value);
        assert!(auth.check(&h).is_ok());
        assert!(Auth::none().bearer().is_none());
    }

    #[test]
    fn beyond_loopback_needs_a_token() {
        let any: SocketAddr = "0.0.0.0:7233".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:7233".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7233".parse().unwrap();
        assert!(check_listen(&any, &Auth::none()).is_err());
        assert!(check_listen(&lo, &Auth::none()).is_ok());
        assert!(check_listen(&lo6, &Auth::none()).is_ok());
        let with = Auth {
            token: Some(b"t".to_vec()),
        };
        assert!(check_listen(&any, &with).is_ok());
    }
}
