//! HTTP/2 frames (RFC 9113 §4, §6): the nine-byte header, and writing the frames an
//! endpoint sends.

use super::hpack::EncoderTable;

/// What a client sends first (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub(crate) mod kind {
    pub(crate) const DATA: u8 = 0x0;
    pub(crate) const HEADERS: u8 = 0x1;
    pub(crate) const PRIORITY: u8 = 0x2;
    pub(crate) const RST_STREAM: u8 = 0x3;
    pub(crate) const SETTINGS: u8 = 0x4;
    pub(crate) const PUSH_PROMISE: u8 = 0x5;
    pub(crate) const PING: u8 = 0x6;
    pub(crate) const GOAWAY: u8 = 0x7;
    pub(crate) const WINDOW_UPDATE: u8 = 0x8;
    pub(crate) const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub(crate) mod flag {
    pub(crate) const END_STREAM: u8 = 0x1;
    pub(crate) const ACK: u8 = 0x1;
    pub(crate) const END_HEADERS: u8 = 0x4;
    pub(crate) const PADDED: u8 = 0x8;
    pub(crate) const PRIORITY: u8 = 0x20;
}

/// Settings' identifiers (RFC 9113 §6.5.2; RFC 8441 §3).
pub(crate) mod setting {
    pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;
    pub(crate) const ENABLE_PUSH: u16 = 0x2;
    pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub(crate) const MAX_FRAME_SIZE: u16 = 0x5;
    pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    pub(crate) const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// An error code (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reason(pub(crate) u32);

impl Reason {
    pub(crate) const NO_ERROR: Reason = Reason(0x0);
    pub(crate) const PROTOCOL_ERROR: Reason = Reason(0x1);
    pub(crate) const INTERNAL_ERROR: Reason = Reason(0x2);
    pub(crate) const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    pub(crate) const STREAM_CLOSED: Reason = Reason(0x5);
    pub(crate) const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    pub(crate) const REFUSED_STREAM: Reason = Reason(0x7);
    pub(crate) const CANCEL: Reason = Reason(0x8);
    pub(crate) const COMPRESSION_ERROR: Reason = Reason(0x9);
    pub(crate) const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            other => return write!(f, "error code {other:#x}"),
        };
        f.write_str(name)
    }
}

/// The size of a frame's header.
pub(crate) const HEAD_LEN: usize = 9;
/// The largest frame payload before a peer allows more (RFC 9113 §4.2).
pub(crate) const DEFAULT_MAX_FRAME: u32 = 16_384;
/// The initial flow-control window of a connection and of each stream (RFC 9113 §6.9.2).
pub(crate) const DEFAULT_WINDOW: u32 = 65_535;
/// The largest flow-control window (RFC 9113 §6.9.1).
pub(crate) const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) len: u32,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl Head {
    /// The header in the first nine bytes of `src` (the stream identifier's reserved
    /// bit ignored, RFC 9113 §4.1).
    pub(crate) fn parse(src: &[u8]) -> Head {
        Head {
            len: u32::from_be_bytes([0, src[0], src[1], src[2]]),
            kind: src[3],
            flags: src[4],
            stream: u32::from_be_bytes([src[5], src[6], src[7], src[8]]) & MAX_WINDOW,
        }
    }

    pub(crate) fn write(self, dst: &mut Vec<u8>) {
        dst.extend_from_slice(&self.bytes());
    }

    /// The header's nine bytes.
    fn bytes(self) -> [u8; HEAD_LEN] {
        let [_, l0, l1, l2] = self.len.to_be_bytes();
        let [s0, s1, s2, s3] = self.stream.to_be_bytes();
        [l0, l1, l2, self.kind, self.flags, s0, s1, s2, s3]
    }
}

/// A frame of `kind` with `payload`.
pub(crate) fn write(dst: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    Head {
        len: payload.len() as u32,
        kind,
        flags,
        stream,
    }
    .write(dst);
    dst.extend_from_slice(payload);
}

/// A SETTINGS frame with these settings.
pub(crate) fn settings(dst: &mut Vec<u8>, settings: &[(u16, u32)]) {
    Head {
        len: 6 * settings.len() as u32,
        kind: kind::SETTINGS,
        flags: 0,
        stream: 0,
    }
    .write(dst);
    for &(id, value) in settings {
        dst.extend_from_slice(&id.to_be_bytes());
        dst.extend_from_slice(&value.to_be_bytes());
    }
}

pub(crate) fn window_update(dst: &mut Vec<u8>, stream: u32, increment: u32) {
    write(
        dst,
        kind::WINDOW_UPDATE,
        0,
        stream,
        &increment.to_be_bytes(),
    );
}

pub(crate) fn rst_stream(dst: &mut Vec<u8>, stream: u32, reason: Reason) {
    write(dst, kind::RST_STREAM, 0, stream, &reason.0.to_be_bytes());
}

pub(crate) fn goaway(dst: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    let mut payload = [0; 8];
    payload[..4].copy_from_slice(&last_stream.to_be_bytes());
    payload[4..].copy_from_slice(&reason.0.to_be_bytes());
    write(dst, kind::GOAWAY, 0, 0, &payload);
}

/// The header block `encode` appends to `dst`, framed in place: one HEADERS frame
/// (no copy of the block), or, for a block longer than `max_frame`, a HEADERS frame
/// and CONTINUATION frames (the block moved to make room for their headers). The
/// block begins with the table size update `table` owes the peer, if any.
pub(crate) fn headers_with(
    dst: &mut Vec<u8>,
    table: &mut EncoderTable,
    stream: u32,
    end_stream: bool,
    max_frame: u32,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    let max_frame = max_frame as usize;
    let start = dst.len();
    dst.extend_from_slice(&[0; HEAD_LEN]);
    table.begin_block(dst);
    encode(dst);
    let len = dst.len() - start - HEAD_LEN;
    if len > max_frame {
        let block = dst.split_off(start + HEAD_LEN);
        dst.truncate(start);
        return headers(dst, stream, &block, end_stream, max_frame);
    }
    let head = Head {
        len: len as u32,
        kind: kind::HEADERS,
        flags: flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 },
        stream,
    };
    dst[start..start + HEAD_LEN].copy_from_slice(&head.bytes());
}

/// A header block as a HEADERS frame and as many CONTINUATION frames as `max_frame`
/// makes it need.
fn headers(dst: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let mut rest = chunks.peekable();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    write(dst, kind::HEADERS, flags, stream, first);
    while let Some(chunk) = rest.next() {
        let flags = if rest.peek().is_none() {
            flag::END_HEADERS
        } else {
            0
        };
        write(dst, kind::CONTINUATION, flags, stream, chunk);
    }
}

/// The payload of a padded frame (DATA, HEADERS) without its padding (RFC 9113 §6.1),
/// as a range of `payload`; `None` when the padding is longer than the frame.
pub(crate) fn unpadded(payload: &[u8], flags: u8) -> Option<std::ops::Range<usize>> {
    if flags & flag::PADDED == 0 {
        return Some(0..payload.len());
    }
    let pad = usize::from(*payload.first()?);
    let end = payload.len().checked_sub(pad)?;
    (end >= 1).then_some(1..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip_and_ignore_the_reserved_bit() {
        let head = Head {
            len: 0x01_02_03,
            kind: kind::HEADERS,
            flags: flag::END_HEADERS,
            stream: 7,
        };
        let mut out = Vec::new();
        head.write(&mut out);
        assert_eq!(out, [1, 2, 3, 1, 4, 0, 0, 0, 7]);
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out), head);
    }

    #[test]
    fn short_header_blocks_are_framed_in_place() {
        let mut out = vec![1, 2];
        headers_with(
            &mut out,
            &mut EncoderTable::Default,
            3,
            false,
            16_384,
            |dst| dst.extend_from_slice(b"abc"),
        );
        assert_eq!(&out[..2], [1, 2]);
        assert_eq!(
            Head::parse(&out[2..]),
            Head {
                len: 3,
                kind: kind::HEADERS,
                flags: flag::END_HEADERS,
                stream: 3
            }
        );
        assert_eq!(&out[11..], b"abc");
    }

    #[test]
    fn long_header_blocks_continue() {
        let mut out = Vec::new();
        headers_with(&mut out, &mut EncoderTable::Default, 1, true, 4, |dst| {
            dst.extend_from_slice(&[7; 10])
        });
        let frames: Vec<Head> = [0, 13, 26]
            .iter()
            .map(|&at| Head::parse(&out[at..]))
            .collect();
        assert_eq!(out.len(), 3 * 9 + 10);
        assert_eq!(
            frames,
            [
                Head {
                    len: 4,
                    kind: kind::HEADERS,
                    flags: flag::END_STREAM,
                    stream: 1
                },
                Head {
                    len: 4,
                    kind: kind::CONTINUATION,
                    flags: 0,
                    stream: 1
                },
                Head {
                    len: 2,
                    kind: kind::CONTINUATION,
                    flags: flag::END_HEADERS,
                    stream: 1
                },
            ]
        );
    }

    #[test]
    fn padding_is_taken_off_or_refused() {
        assert_eq!(unpadded(b"abc", 0), Some(0..3));
        assert_eq!(unpadded(b"\x02abcxx", flag::PADDED), Some(1..4));
        assert_eq!(unpadded(b"\x00", flag::PADDED), Some(1..1));
        assert_eq!(unpadded(b"\x05ab", flag::PADDED), None);
        assert_eq!(unpadded(b"", flag::PADDED), None);
    }
}
