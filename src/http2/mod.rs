//! HTTP/2 (RFC 9113) for fuseway's own HTTP/2 engine: HPACK and its Huffman code,
//! and the frames.

pub(crate) mod client;
pub(crate) mod frame;
pub(crate) mod hpack;
mod huffman;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The connection-specific fields HTTP/2 does not carry (RFC 9113 §8.2.2): never sent on
/// HTTP/2, and a request carrying one is malformed. (`te` is one too, but for the value
/// `trailers`.)
pub(crate) const CONNECTION_SPECIFIC: [HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// Whether a message carrying `name: value` is malformed for it (RFC 9113 §8.2.2): a
/// [`CONNECTION_SPECIFIC`] field, or `te` other than `trailers`.
pub(crate) fn forbidden_field(name: &HeaderName, value: &HeaderValue) -> bool {
    CONNECTION_SPECIFIC.contains(name) || (name == header::TE && value != "trailers")
}

/// A message's `content-length`, or none: each value must be digits only, and a field
/// repeated must repeat the same number (then it is one length, RFC 9110 §8.6). A request or
/// response with any other is malformed (RFC 9113 §8.1.1). The native HTTP/2 server
/// and client both read it here.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, &'static str> {
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        let n = crate::http1::parse_length(value.as_bytes()).ok_or("an invalid content-length")?;
        if length.is_some_and(|l| l != n) {
            return Err("content-lengths that differ");
        }
        length = Some(n);
    }
    Ok(length)
}
