//! The render a record carries: a `resource` record's block as it is; a `response` record's
//! HTTP entity (status 200 only), de-chunked and decoded (gzip, deflate), with the response's
//! content type.

use std::io::Read;

use flate2::read::{MultiGzDecoder, ZlibDecoder};
use wink_engine::store::Labels;

/// A render's bytes, content type and language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Payload {
    pub content_type: String,
    pub value: Vec<u8>,
    /// A response's `Content-Language`, when it is one a render can keep.
    pub language: Option<String>,
}

/// The body of an HTTP response block whose header ends at `body_start`, at most `max` bytes;
/// the error says why the record is not a render.
pub(crate) fn http_response(block: &[u8], body_start: usize, max: u64) -> Result<Payload, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut response = httparse::Response::new(&mut headers);
    let head = &block[..body_start.min(block.len())];
    match response.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("an HTTP response header cut short".into()),
        Err(e) => return Err(format!("an HTTP response header that does not parse: {e}")),
    }
    let status = response.code.unwrap_or(0);
    if status != 200 {
        return Err(format!(
            "HTTP status {status}: only a 200 response is a render"
        ));
    }
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let content_type = header("Content-Type").unwrap_or_else(|| "application/octet-stream".into());
    let mut body = block[body_start.min(block.len())..].to_vec();
    if let Some(te) = header("Transfer-Encoding") {
        if te.eq_ignore_ascii_case("chunked") {
            body = dechunk(&body)?;
        } else if !te.eq_ignore_ascii_case("identity") {
            return Err(format!("Transfer-Encoding {te:?}"));
        }
    }
    let body = match header("Content-Encoding").map(|e| e.to_ascii_lowercase()) {
        None => body,
        Some(e) if e == "identity" => body,
        Some(e) if e == "gzip" || e == "x-gzip" => decode(MultiGzDecoder::new(&body[..]), max, &e)?,
        Some(e) if e == "deflate" => decode(ZlibDecoder::new(&body[..]), max, &e)?,
        Some(e) => {
            return Err(format!(
                "Content-Encoding {e:?} (gzip and deflate are decoded)"
            ))
        }
    };
    if body.len() as u64 > max {
        return Err(format!(
            "a body of {} bytes, over the store's maximum of {max}",
            body.len()
        ));
    }
    // Kept only when it is one a render can carry: a response is not refused for an odd label.
    let language = header("Content-Language").filter(|l| {
        Labels {
            encoding: None,
            language: Some(l.clone()),
        }
        .check()
        .is_ok()
    });
    Ok(Payload {
        content_type,
        value: body,
        language,
    })
}

/// At most `max` + 1 decoded bytes (one more says "too long").
fn decode(r: impl Read, max: u64, encoding: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    r.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("Content-Encoding {encoding}: {e}"))?;
    Ok(out)
}

/// A chunked body's data (RFC 9112 §7.1); trailers are dropped.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(body.len());
    loop {
        let (used, size) = match httparse::parse_chunk_size(body) {
            Ok(httparse::Status::Complete(c)) => c,
            _ => return Err("a chunked body that does not parse".into()),
        };
        body = &body[used..];
        if size == 0 {
            return Ok(out);
        }
        let size = usize::try_from(size).map_err(|_| "a chunk too large")?;
        if body.len() < size + 2 || &body[size..size + 2] != b"\r\n" {
            return Err("a chunk cut short".into());
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(head: &str, body: &[u8]) -> (Vec<u8>, usize) {
        let mut b = head.replace('\n', "\r\n").into_bytes();
        b.extend_from_slice(b"\r\n");
        let start = b.len();
        b.extend_from_slice(body);
        (b, start)
    }

    #[test]
    fn responses_give_their_entity() {
        let (b, s) = block("HTTP/1.1 200 OK\nContent-Type: text/html\n", b"<p>hi</p>");
        let p = http_response(&b, s, 100).unwrap();
        assert_eq!(
            (p.content_type.as_str(), &p.value[..]),
            ("text/html", &b"<p>hi</p>"[..])
        );
        let (b, s) = block(
            "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n",
            b"4\r\n<p>h\r\n5\r\ni</p>\r\n0\r\n\r\n",
        );
        assert_eq!(http_response(&b, s, 100).unwrap().value, b"<p>hi</p>");
        let gz = super::super::codec::Compression::Gzip
            .compress(b"zipped", 6)
            .unwrap();
        let (b, s) = block("HTTP/1.1 200 OK\nContent-Encoding: gzip\n", &gz);
        assert_eq!(http_response(&b, s, 100).unwrap().value, b"zipped");
    }

    #[test]
    fn a_responses_language_is_kept_when_a_render_can_carry_it() {
        let (b, s) = block("HTTP/1.1 200 OK\nContent-Language: de, en-GB\n", b"x");
        let p = http_response(&b, s, 100).unwrap();
        assert_eq!(p.language.as_deref(), Some("de, en-GB"));
        let (b, s) = block("HTTP/1.1 200 OK\n", b"x");
        assert_eq!(http_response(&b, s, 100).unwrap().language, None);
        // Too long for a render's label: dropped, the response still stored.
        let long = format!("HTTP/1.1 200 OK\nContent-Language: {}\n", "a".repeat(200));
        let (b, s) = block(&long, b"x");
        assert_eq!(http_response(&b, s, 100).unwrap().language, None);
    }

    #[test]
    fn other_responses_are_refused_with_the_reason() {
        let (b, s) = block("HTTP/1.1 302 Found\nLocation: /x\n", b"");
        assert!(http_response(&b, s, 100).unwrap_err().contains("302"));
        let (b, s) = block("HTTP/1.1 200 OK\nContent-Encoding: br\n", b"xx");
        assert!(http_response(&b, s, 100).unwrap_err().contains("br"));
        let (b, s) = block("HTTP/1.1 200 OK\n", &[b'x'; 200]);
        assert!(http_response(&b, s, 100).unwrap_err().contains("maximum"));
        let (b, s) = block("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n", b"zz\r\n");
        assert!(http_response(&b, s, 100).is_err());
    }
}
