//! Message bodies: `Content-Length`, chunked (RFC 9112 section 7.1, with trailers) and,
//! for responses, delimited by the connection's close.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Longest chunk-size line: 16 hex digits and this much of chunk extensions (which
/// are ignored, and a way to make a server buffer without bound if not limited).
pub(crate) const MAX_CHUNK_LINE: usize = 4096;

/// What [`BodyDecoder::decode`] found in the buffer.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    /// Body bytes (a view of the read buffer).
    Data(Bytes),
    /// The trailer fields of a chunked body; the body has ended.
    Trailers(HeaderMap),
    /// The body has ended.
    End,
    /// Read more first.
    NeedMore,
}

/// A body that cannot be decoded: the connection cannot be used further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for DecodeError {}

/// Decodes one message body from a connection's read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyDecoder {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes left.
    Length(u64),
    /// Expecting a chunk-size line.
    ChunkSize,
    /// Inside a chunk's data: this many bytes left.
    ChunkData(u64),
    /// Expecting the CRLF after a chunk's data.
    ChunkDataEnd,
    /// After the last chunk: trailer fields, then an empty line.
    Trailers,
    /// Everything until the connection closes.
    UntilClose,
    Done,
}

impl BodyDecoder {
    /// A body of `length` bytes.
    pub(crate) fn length(length: u64) -> Self {
        BodyDecoder {
            state: if length == 0 {
                State::Done
            } else {
                State::Length(length)
            },
        }
    }

    /// A chunked body.
    pub(crate) fn chunked() -> Self {
        BodyDecoder {
            state: State::ChunkSize,
        }
    }

    /// A body that ends when the connection closes (responses only).
    pub(crate) fn until_close() -> Self {
        BodyDecoder {
            state: State::UntilClose,
        }
    }

    /// The body has been decoded to its end.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes still to come, when known.
    pub(crate) fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The connection was closed by the peer: the end of a close-delimited body, an
    /// error for any other unfinished one.
    pub(crate) fn closed(&mut self) -> Result<Decoded, DecodeError> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(Decoded::End)
            }
            _ => Err(DecodeError("connection closed before the body's end")),
        }
    }

    /// Decode what `buf` holds (consuming it), up to the next data, the end, or the
    /// point where more bytes are needed.
    pub(crate) fn decode(
        &mut self,
        buf: &mut BytesMut,
        max_trailers: usize,
    ) -> Result<Decoded, DecodeError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::End),
                State::Length(left) | State::ChunkData(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    self.state = match self.state {
                        State::Length(_) if left == 0 => State::Done,
                        State::Length(_) => State::Length(left),
                        _ if left == 0 => State::ChunkDataEnd,
                        _ => State::ChunkData(left),
                    };
                    return Ok(Decoded::Data(data));
                }
                State::UntilClose => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    return Ok(Decoded::Data(buf.split().freeze()));
                }
                State::ChunkSize => match chunk_size(buf)? {
                    None => return Ok(Decoded::NeedMore),
                    Some((line, 0)) => {
                        buf.advance(line);
                        self.state = State::Trailers;
                    }
                    Some((line, size)) => {
                        buf.advance(line);
                        self.state = State::ChunkData(size);
                    }
                },
                State::ChunkDataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(DecodeError("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    if buf.starts_with(b"\r\n") {
                        buf.advance(2);
                        self.state = State::Done;
                        return Ok(Decoded::End);
                    }
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    return match trailers(buf, max_trailers)? {
                        None => Ok(Decoded::NeedMore),
                        Some(trailers) => {
                            self.state = State::Done;
                            Ok(Decoded::Trailers(trailers))
                        }
                    };
                }
            }
        }
    }
}

/// A chunk-size line at the start of `buf`: its length with the CRLF, and the size.
/// `1*16HEXDIG [BWS] *( ";" ext )` CRLF, extensions of visible characters, spaces and
/// tabs (ignored, but limited in length).
fn chunk_size(buf: &[u8]) -> Result<Option<(usize, u64)>, DecodeError> {
    let window = &buf[..buf.len().min(MAX_CHUNK_LINE + 2)];
    let Some(lf) = memchr::memchr(b'\n', window) else {
        return if buf.len() > MAX_CHUNK_LINE {
            Err(DecodeError("chunk-size line too long"))
        } else {
            Ok(None)
        };
    };
    if lf == 0 || buf[lf - 1] != b'\r' {
        return Err(DecodeError("chunk-size line not ended by CRLF"));
    }
    let line = &buf[..lf - 1];
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(DecodeError("chunk size missing"));
    }
    if digits > 16 {
        return Err(DecodeError("chunk size too large"));
    }
    let size = line[..digits]
        .iter()
        .fold(0u64, |n, &d| (n << 4) | u64::from(hex(d)));
    let rest = &line[digits..];
    // BWS (RFC 9110 section 5.6.3) is spaces and tabs only: a CR or a form feed is not
    // one, and the extension rule below refuses it.
    let blank = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let ext = &rest[blank..];
    if !ext.is_empty()
        && (ext[0] != b';' || ext.iter().any(|&b| b != b'\t' && b.is_ascii_control()))
    {
        return Err(DecodeError("invalid chunk extension"));
    }
    Ok(Some((lf + 1, size)))
}

fn hex(d: u8) -> u8 {
    match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        _ => d - b'A' + 10,
    }
}

/// The trailer section at the start of `buf` (ended by an empty line), consumed when
/// complete. Its lines end with CRLF, as the chunk lines before it do: httparse takes a
/// bare LF too, which in a chunked body is a framing a peer may read otherwise.
fn trailers(buf: &mut BytesMut, max: usize) -> Result<Option<HeaderMap>, DecodeError> {
    let mut fields = [httparse::EMPTY_HEADER; super::head::MAX_HEADERS];
    let len = match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((len, _))) => len,
        Ok(httparse::Status::Partial) if buf.len() > max => {
            return Err(DecodeError("trailer section too large"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(DecodeError("invalid trailer field")),
    };
    if len > max {
        return Err(DecodeError("trailer section too large"));
    }
    if memchr::memchr_iter(b'\n', &buf[..len]).any(|lf| lf == 0 || buf[lf - 1] != b'\r') {
        return Err(DecodeError("trailer line not ended by CRLF"));
    }
    let mut trailers = HeaderMap::new();
    for field in fields.iter().take_while(|f| !f.name.is_empty()) {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| DecodeError("invalid trailer name"))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| DecodeError("invalid trailer value"))?;
        trailers.append(name, value);
    }
    buf.advance(len);
    Ok(Some(trailers))
}
