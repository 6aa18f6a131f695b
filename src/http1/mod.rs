//! fuseway's own HTTP/1.1 codec: request heads (`httparse`, then the edge-proxy checks
//! of RFC 9112 and the request-smuggling literature), response heads (`httparse`, with
//! the framing rules of RFC 9112 section 6.3), message bodies (`Content-Length`,
//! chunked with trailers, close-delimited) and the heads fuseway writes. The drivers
//! that use it are the server's (`server::native`) and the forwarder's pooled
//! destination connections (`forwarding::native`); hyper's codec stays the reference
//! both are tested against.
//!
//! Everything here works on a connection's own read buffer: a request head is split
//! off the buffer and frozen, and header values, the target and body chunks are views
//! of it (`HeaderValue::from_maybe_shared`, `Bytes::slice_ref`) rather than copies.
//! Once the message's views are dropped the buffer is unique again and its memory is
//! reused for the next message.

pub(crate) mod buffers;
mod decode;
mod encode;
mod head;
mod write;

pub(crate) use decode::{BodyDecoder, DecodeError, Decoded};
pub(crate) use encode::{
    chunk_header, decimal, with_date, write_field, write_request_head, write_response_head,
    Connection, Framing, RequestFraming,
};
pub(crate) use head::{
    expects_continue, parse_length, parse_request, parse_response, BodyLength, Limits, ParseError,
    RequestHead, ResponseBodyLength, ResponseHead,
};
pub(crate) use write::{poll_write_vectored, Outgoing};

/// Decode a chunked body fed in pieces ending at `cuts`, then closed (for the fuzz
/// targets: `fuseway::__private::decode_chunked`).
pub(crate) fn decode_chunked_in_pieces(
    input: &[u8],
    cuts: &[usize],
) -> Result<(Vec<u8>, Option<http::HeaderMap>), &'static str> {
    let mut decoder = BodyDecoder::chunked();
    let mut buf = bytes::BytesMut::new();
    let mut data = Vec::new();
    let mut fed = 0;
    let mut cuts = cuts
        .iter()
        .copied()
        .filter(|&c| c <= input.len())
        .collect::<Vec<_>>();
    cuts.sort_unstable();
    cuts.push(input.len());
    let mut cuts = cuts.into_iter();
    loop {
        match decoder.decode(&mut buf, 8 * 1024).map_err(|e| e.0)? {
            Decoded::Data(d) => data.extend_from_slice(&d),
            Decoded::Trailers(t) => return Ok((data, Some(t))),
            Decoded::End => return Ok((data, None)),
            Decoded::NeedMore => match cuts.next() {
                Some(cut) => {
                    buf.extend_from_slice(&input[fed..cut.max(fed)]);
                    fed = cut.max(fed);
                }
                None => {
                    return match decoder.closed().map_err(|e| e.0)? {
                        Decoded::End => Ok((data, None)),
                        _ => Err("closed"),
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests;
