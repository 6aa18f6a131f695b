//! HTTP/2 (RFC 9113) for fuseway's own HTTP/2 engine: HPACK and its Huffman code,
//! and the frames.

pub(crate) mod frame;
pub(crate) mod hpack;
mod huffman;
