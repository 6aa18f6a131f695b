//! HTTP/2 (RFC 9113) for fuseway's own HTTP/2 engine: HPACK and its Huffman code,
//! and the frames.

pub(crate) mod client;
pub(crate) mod frame;
pub(crate) mod hpack;
mod huffman;

use http::header::{self, HeaderName, HeaderValue};

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
