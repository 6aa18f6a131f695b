//! fuseway's own HTTP/1.1 codec: request heads (`httparse`, then the edge-proxy checks
//! of RFC 9112 and the request-smuggling literature), message bodies (`Content-Length`
//! and chunked, with trailers) and response heads. The connection driver that uses it
//! is [`server::native`](crate::server); hyper's codec stays the reference it is
//! tested against.
//!
//! Everything here works on a connection's own read buffer: a request head is split
//! off the buffer and frozen, and header values, the target and body chunks are views
//! of it (`HeaderValue::from_maybe_shared`, `Bytes::slice_ref`) rather than copies.
//! Once the message's views are dropped the buffer is unique again and its memory is
//! reused for the next message.

mod decode;
mod encode;
mod head;

pub(crate) use decode::{BodyDecoder, Decoded};
pub(crate) use encode::{chunk_header, write_response_head, Connection, Framing};
pub(crate) use head::{parse_length, parse_request, BodyLength, Limits, ParseError, RequestHead};

#[cfg(test)]
mod tests;
