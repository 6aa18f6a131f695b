//! HPACK (RFC 7541): header blocks decoded into the `http` types, response and request
//! heads encoded.
//!
//! Decoding keeps what it made: the dynamic table holds each entry as the
//! [`Field`] it was decoded into (a `HeaderName` and a validated `HeaderValue`, or a
//! pseudo-header's bytes), so a field a client sends again by its index — most of
//! every request after a connection's first — costs a reference count, not a parse.
//! Literal values are slices of the frame they came in (no copy) or, Huffman-coded,
//! decoded into the decoder's scratch buffer and split off it. A client's decoder also
//! remembers the last few short Huffman-coded strings by their coded bytes
//! ([`Recent`]): a destination sends some values again on every response without
//! indexing them (the h2 crate never indexes `content-length`), and while an earlier
//! response still holds its copy, decoding one anew costs two allocations.
//!
//! Encoding sends every field as a literal without indexing (the static table's name
//! where it has one) and without Huffman coding: no state to keep per connection and
//! the least work per field, for a few more bytes on the wire.

use std::collections::VecDeque;
use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};

use super::huffman;

/// A pseudo-header field's name (RFC 9113 §8.3; `:protocol`, RFC 8441).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pseudo {
    Method,
    Scheme,
    Authority,
    Path,
    Protocol,
    Status,
}

impl Pseudo {
    fn name(self) -> &'static str {
        match self {
            Pseudo::Method => ":method",
            Pseudo::Scheme => ":scheme",
            Pseudo::Authority => ":authority",
            Pseudo::Path => ":path",
            Pseudo::Protocol => ":protocol",
            Pseudo::Status => ":status",
        }
    }

    fn from_bytes(name: &[u8]) -> Option<Pseudo> {
        Some(match name {
            b":method" => Pseudo::Method,
            b":scheme" => Pseudo::Scheme,
            b":authority" => Pseudo::Authority,
            b":path" => Pseudo::Path,
            b":protocol" => Pseudo::Protocol,
            b":status" => Pseudo::Status,
            _ => return None,
        })
    }
}

/// A decoded header field.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Field {
    Pseudo(Pseudo, Bytes),
    Header(HeaderName, HeaderValue),
    /// A field HTTP/2 does not allow (an upper-case or invalid name, an unknown
    /// pseudo-header, a value with a control character): the request it is in is
    /// malformed, but the block goes on being decoded (and the field takes its place in
    /// the dynamic table) so that the connection's decoding state stays right.
    Invalid {
        name_len: usize,
        value_len: usize,
    },
}

impl Field {
    /// The size of the field as the dynamic table counts it (RFC 7541 §4.1); also
    /// what `SETTINGS_MAX_HEADER_LIST_SIZE` counts (RFC 9113 §6.5.2).
    pub(crate) fn size(&self) -> usize {
        32 + match self {
            Field::Pseudo(name, value) => name.name().len() + value.len(),
            Field::Header(name, value) => name.as_str().len() + value.len(),
            Field::Invalid {
                name_len,
                value_len,
            } => name_len + value_len,
        }
    }
}

/// A header block could not be decoded: the connection's decoding state is lost, a
/// connection error of type `COMPRESSION_ERROR` (RFC 7541 §2.3.3, RFC 9113 §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CompressionError(pub(crate) &'static str);

/// The static table (RFC 7541, Appendix A).
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static table's entries as fields, made once.
fn static_fields() -> &'static [Field] {
    static FIELDS: OnceLock<Vec<Field>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        STATIC
            .iter()
            .map(|&(name, value)| match Pseudo::from_bytes(name.as_bytes()) {
                Some(pseudo) => Field::Pseudo(pseudo, Bytes::from_static(value.as_bytes())),
                None => Field::Header(
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                ),
            })
            .collect()
    })
}

/// The index of a field name in the static table, for encoding a field by its name's
/// index.
fn static_name_index(name: &HeaderName) -> Option<usize> {
    STATIC[14..]
        .iter()
        .position(|&(n, _)| n == name.as_str())
        .map(|i| i + 15)
}

/// The encoding side of a connection's HPACK state. The encoder indexes nothing (every
/// field is a literal without indexing, or the static table's), so it keeps no table;
/// but the peer's decoder takes it to have one of the size its
/// `SETTINGS_HEADER_TABLE_SIZE` allows, 4 096 at first. A peer that lowers that waits,
/// from when this endpoint acknowledges its SETTINGS, for a dynamic table size update
/// at the start of the next header block (RFC 7541 §4.2, §6.3), and without it fails
/// the connection (nghttp2: `COMPRESSION_ERROR`). The update says 0, which no later
/// setting can be under: it is sent once at most.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncoderTable {
    /// The peer takes the table to be 4 096 bytes (or more) and allows that.
    #[default]
    Default,
    /// The peer lowered its limit: the next block begins with the update.
    Lowered,
    /// The update to 0 is sent.
    Empty,
}

impl EncoderTable {
    /// The peer's `SETTINGS_HEADER_TABLE_SIZE` is `limit` (call as its SETTINGS is
    /// acknowledged: the next header block follows the acknowledgement).
    pub(crate) fn peer_limit(&mut self, limit: u32) {
        if *self == EncoderTable::Default && limit < DEFAULT_TABLE_SIZE {
            *self = EncoderTable::Lowered;
        }
    }

    /// Begin a header block in `dst`: with the size update the peer waits for, if it
    /// does.
    pub(crate) fn begin_block(&mut self, dst: &mut Vec<u8>) {
        if *self == EncoderTable::Lowered {
            put_integer(dst, 0x20, 5, 0);
            *self = EncoderTable::Empty;
        }
    }
}

/// HTTP/2's initial `SETTINGS_HEADER_TABLE_SIZE` (RFC 9113 §6.5.2).
const DEFAULT_TABLE_SIZE: u32 = 4_096;

/// The decoding side of a connection's HPACK state.
pub(crate) struct Decoder {
    /// Newest first.
    table: VecDeque<Field>,
    size: usize,
    /// The table's size now (the last size update's, at most `limit`). Both are 32-bit
    /// (`SETTINGS_HEADER_TABLE_SIZE` is): the connection's state stays small.
    max_size: u32,
    /// What this endpoint allows (its `SETTINGS_HEADER_TABLE_SIZE`).
    limit: u32,
    /// Where Huffman-coded strings are decoded, and split off.
    scratch: BytesMut,
    /// The last short Huffman-coded strings (a client's decoder only: a server's stays
    /// small for its idle connections).
    recent: Option<Box<Recent>>,
}

/// How many Huffman-coded strings [`Recent`] keeps, and the longest (coded) it keeps.
const RECENT: usize = 4;
const RECENT_CODED: usize = 16;

/// The last [`RECENT`] short Huffman-coded strings decoded: their coded bytes and what
/// they decoded to, which the same coded bytes decode to again.
#[derive(Default)]
struct Recent {
    coded: [([u8; RECENT_CODED], u8); RECENT],
    decoded: [Bytes; RECENT],
    /// The entry replaced next.
    next: usize,
}

impl Recent {
    fn get(&self, coded: &[u8]) -> Option<Bytes> {
        let at = self.coded.iter().position(|(bytes, len)| {
            usize::from(*len) == coded.len() && bytes[..coded.len()] == *coded
        })?;
        Some(self.decoded[at].clone())
    }

    fn put(&mut self, coded: &[u8], decoded: &Bytes) {
        if coded.is_empty() || coded.len() > RECENT_CODED {
            return;
        }
        let (bytes, len) = &mut self.coded[self.next];
        bytes[..coded.len()].copy_from_slice(coded);
        *len = coded.len() as u8;
        self.decoded[self.next] = decoded.clone();
        self.next = (self.next + 1) % RECENT;
    }
}

impl Decoder {
    /// A decoder whose table may grow to `limit` bytes (the `SETTINGS_HEADER_TABLE_SIZE`
    /// sent to the peer; 4 096 unless one was).
    pub(crate) fn new(limit: usize) -> Decoder {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: limit,
            limit,
            scratch: BytesMut::new(),
            recent: None,
        }
    }

    /// [`Decoder::new`] remembering the last few short Huffman-coded strings (see
    /// [`Recent`]): for a client, whose connections are few and busy.
    pub(crate) fn remembering(limit: usize) -> Decoder {
        Decoder {
            recent: Some(Box::default()),
            ..Decoder::new(limit)
        }
    }

    /// This endpoint's `SETTINGS_HEADER_TABLE_SIZE` is now `limit`: the peer has
    /// acknowledged it. Lowered below the table's size, the peer's next block must
    /// begin with a size update to at most it.
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = u32::try_from(limit).unwrap_or(u32::MAX);
    }

    /// Decode a whole header block (`block`: the HEADERS frame's fragment and those of
    /// its CONTINUATION frames, as one), handing each field to `sink` in order.
    pub(crate) fn decode(
        &mut self,
        block: &Bytes,
        mut sink: impl FnMut(Field),
    ) -> Result<(), CompressionError> {
        let mut at = 0;
        let mut fields = false;
        while at < block.len() {
            let first = block[at];
            if !fields && first & 0xe0 != 0x20 && self.max_size > self.limit {
                // RFC 7541 section 4.2: after the limit was lowered, a block begins
                // with the update that brings the table under it.
                return Err(CompressionError(
                    "no table size update to the lowered limit",
                ));
            }
            if first & 0x80 != 0 {
                let index = integer(block, &mut at, 7)?;
                sink(self.get(index)?.clone());
            } else if first & 0xe0 == 0x20 {
                // A dynamic table size update: only before the block's first field.
                if fields {
                    return Err(CompressionError("table size update after a field"));
                }
                let size = integer(block, &mut at, 5)?;
                if size > self.limit as usize {
                    return Err(CompressionError("table size update past the limit"));
                }
                // At most `limit`: fits.
                self.max_size = size as u32;
                self.evict(0);
                continue;
            } else {
                let (prefix, index) = if first & 0xc0 == 0x40 {
                    (6, true)
                } else {
                    (4, false)
                };
                let name = integer(block, &mut at, prefix)?;
                let field = if name == 0 {
                    let name = self.string(block, &mut at)?;
                    let value = self.string(block, &mut at)?;
                    literal(&name, value)
                } else {
                    let named = self.get(name)?.clone();
                    let value = self.string(block, &mut at)?;
                    with_value(named, value)
                };
                if index {
                    self.insert(detached(&field));
                }
                sink(field);
            }
            fields = true;
        }
        Ok(())
    }

    fn get(&self, index: usize) -> Result<&Field, CompressionError> {
        match index {
            0 => Err(CompressionError("index 0")),
            1..=61 => Ok(&static_fields()[index - 1]),
            _ => self
                .table
                .get(index - 62)
                .ok_or(CompressionError("index past the dynamic table")),
        }
    }

    fn insert(&mut self, field: Field) {
        let size = field.size();
        self.evict(size);
        if size <= self.max_size as usize {
            self.size += size;
            if self.table.len() == self.table.capacity() && self.table.len() < 8 {
                // A small table grows by one entry at a time: many clients index only a
                // few fields, and an idle connection then keeps no room it never uses.
                self.table.reserve_exact(1);
            }
            self.table.push_front(field);
        }
    }

    /// Drop the oldest entries until `room` more bytes fit (all of them if it cannot).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size as usize {
            match self.table.pop_back() {
                Some(old) => self.size -= old.size(),
                None => break,
            }
        }
    }

    /// A string literal (RFC 7541 §5.2) at `at`: a slice of `block`, or decoded from
    /// Huffman into the scratch buffer and split off it (or, the same coded bytes again,
    /// what they decoded to last time, where the decoder remembers it).
    fn string(&mut self, block: &Bytes, at: &mut usize) -> Result<Bytes, CompressionError> {
        let huffman = block.get(*at).ok_or(TRUNCATED)? & 0x80 != 0;
        let len = integer(block, at, 7)?;
        let end = at.checked_add(len).filter(|&end| end <= block.len());
        let end = end.ok_or(TRUNCATED)?;
        let raw = &block[*at..end];
        let out = if huffman {
            if let Some(again) = self.recent.as_ref().and_then(|r| r.get(raw)) {
                again
            } else {
                // Huffman coding is at least five bits a symbol: room for all of it.
                self.scratch.reserve(len * 8 / 5 + 1);
                huffman::decode(raw, &mut self.scratch)
                    .map_err(|()| CompressionError("invalid Huffman coding"))?;
                let decoded = self.scratch.split().freeze();
                if let Some(recent) = &mut self.recent {
                    recent.put(raw, &decoded);
                }
                decoded
            }
        } else {
            block.slice(*at..end)
        };
        *at = end;
        Ok(out)
    }
}

const TRUNCATED: CompressionError = CompressionError("truncated field");

/// An integer with an `n`-bit prefix (RFC 7541 §5.1) at `at`; at most 2^28, more than
/// any size or index fuseway allows.
fn integer(block: &[u8], at: &mut usize, n: u32) -> Result<usize, CompressionError> {
    let mask = (1usize << n) - 1;
    let mut value = usize::from(*block.get(*at).ok_or(TRUNCATED)?) & mask;
    *at += 1;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let byte = *block.get(*at).ok_or(TRUNCATED)?;
        *at += 1;
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(CompressionError("integer too large"));
        }
    }
}

/// `field` with its value in memory of its own: a table entry lives as long as the
/// connection, and must not keep the frame it came in (the connection's read buffer)
/// from being reused.
fn detached(field: &Field) -> Field {
    match field {
        Field::Pseudo(pseudo, value) => Field::Pseudo(*pseudo, Bytes::copy_from_slice(value)),
        Field::Header(name, value) => {
            // Valid as it was; the original kept were it not.
            let copy = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
            Field::Header(name.clone(), copy)
        }
        Field::Invalid { .. } => field.clone(),
    }
}

/// A field from a literal name and value.
fn literal(name: &[u8], value: Bytes) -> Field {
    let invalid = Field::Invalid {
        name_len: name.len(),
        value_len: value.len(),
    };
    if name.first() == Some(&b':') {
        return match Pseudo::from_bytes(name) {
            Some(pseudo) => Field::Pseudo(pseudo, value),
            None => invalid,
        };
    }
    match (
        HeaderName::from_lowercase(name),
        HeaderValue::from_maybe_shared(value),
    ) {
        (Ok(name), Ok(value)) => Field::Header(name, value),
        _ => invalid,
    }
}

/// A field named as `named` is, with `value`.
fn with_value(named: Field, value: Bytes) -> Field {
    let value_len = value.len();
    match named {
        Field::Pseudo(pseudo, _) => Field::Pseudo(pseudo, value),
        Field::Header(name, _) => match HeaderValue::from_maybe_shared(value) {
            Ok(value) => Field::Header(name, value),
            Err(_) => Field::Invalid {
                name_len: name.as_str().len(),
                value_len,
            },
        },
        Field::Invalid { name_len, .. } => Field::Invalid {
            name_len,
            value_len,
        },
    }
}

/// `value` as an integer with an `n`-bit prefix, the prefix's byte starting with the
/// bits of `flags` (RFC 7541 §5.1).
fn put_integer(dst: &mut Vec<u8>, flags: u8, n: u32, value: usize) {
    let mask = (1usize << n) - 1;
    if value < mask {
        dst.put_u8(flags | value as u8);
        return;
    }
    dst.put_u8(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        dst.put_u8(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    dst.put_u8(rest as u8);
}

/// A string literal, not Huffman-coded.
fn put_string(dst: &mut Vec<u8>, value: &[u8]) {
    put_integer(dst, 0, 7, value.len());
    dst.put_slice(value);
}

/// A field as a literal without indexing (RFC 7541 §6.2.2), its name by the static
/// table's index `name` or, with `0`, as a literal too.
fn put_literal(dst: &mut Vec<u8>, name: usize, literal_name: &[u8], value: &[u8]) {
    put_integer(dst, 0, 4, name);
    if name == 0 {
        put_string(dst, literal_name);
    }
    put_string(dst, value);
}

/// `:status` (RFC 9113 §8.3.2): the static table's entry for the usual ones.
pub(crate) fn encode_status(status: http::StatusCode, dst: &mut Vec<u8>) {
    let index = match status.as_u16() {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => return put_literal(dst, 8, b"", status.as_str().as_bytes()),
    };
    dst.put_u8(0x80 | index);
}

/// A pseudo-header field: the static table's entry where it has this one (`GET`,
/// `POST`, `/`, `http`, `https`), else its name's: the native client's requests (the
/// server sends only `:status`, see [`encode_status`]).
pub(crate) fn encode_pseudo(pseudo: Pseudo, value: &[u8], dst: &mut Vec<u8>) {
    let (name, whole) = match pseudo {
        Pseudo::Authority => (1, None),
        Pseudo::Method => (
            2,
            match value {
                b"GET" => Some(2),
                b"POST" => Some(3),
                _ => None,
            },
        ),
        Pseudo::Path => (4, (value == b"/").then_some(4)),
        Pseudo::Scheme => (
            6,
            match value {
                b"http" => Some(6),
                b"https" => Some(7),
                _ => None,
            },
        ),
        Pseudo::Status => (8, None),
        Pseudo::Protocol => (0, None),
    };
    match whole {
        Some(index) => dst.put_u8(0x80 | index),
        None => put_literal(dst, name, pseudo.name().as_bytes(), value),
    }
}

/// A header field (its name is lower case, as `HeaderName`s are; `value` a valid field
/// value, as a `HeaderValue`'s bytes are).
pub(crate) fn encode_header(name: &HeaderName, value: &[u8], dst: &mut Vec<u8>) {
    let index = static_name_index(name).unwrap_or(0);
    put_literal(dst, index, name.as_str().as_bytes(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Bytes {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    fn decode(decoder: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        decoder
            .decode(&hex(block), |field| {
                out.push(match field {
                    Field::Pseudo(p, v) => (p.name().to_owned(), string(&v)),
                    Field::Header(n, v) => (n.to_string(), string(v.as_bytes())),
                    Field::Invalid { .. } => ("<invalid>".to_owned(), String::new()),
                })
            })
            .expect("decodes");
        out
    }

    fn string(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn table(decoder: &Decoder) -> (Vec<usize>, usize) {
        (
            decoder.table.iter().map(Field::size).collect(),
            decoder.size,
        )
    }

    /// A client's decoder hands a short Huffman-coded value sent again without indexing
    /// (as the h2 crate sends `content-length`) the bytes it decoded the first time,
    /// while those are still held: no allocation. Other coded bytes decode as they are.
    #[test]
    fn a_clients_decoder_remembers_short_huffman_coded_values() {
        // `content-length` (static index 28), literal without indexing, Huffman "100"
        // and "200".
        let (hundred, two_hundred) = (hex("0f0d 8208 01"), hex("0f0d 8210 01"));
        let value = |decoder: &mut Decoder, block: &Bytes| {
            let mut value = None;
            decoder
                .decode(block, |field| match field {
                    Field::Header(name, v) if name == http::header::CONTENT_LENGTH => {
                        value = Some(v)
                    }
                    _ => panic!("not the content-length field"),
                })
                .unwrap();
            value.expect("a field")
        };
        let mut client = Decoder::remembering(4096);
        let first = value(&mut client, &hundred);
        let other = value(&mut client, &two_hundred);
        let again = value(&mut client, &hundred);
        assert!(first == "100" && other == "200" && again == "100");
        assert_eq!(first.as_bytes().as_ptr(), again.as_bytes().as_ptr());
        assert_ne!(first.as_bytes().as_ptr(), other.as_bytes().as_ptr());
        // More values than it keeps: the oldest is decoded anew, still right.
        for (coded, decoded) in [
            ("0803", "101"),
            ("0841", "110"),
            ("0843", "111"),
            ("1003", "201"),
        ] {
            assert_eq!(
                value(&mut client, &hex(&format!("0f0d 82{coded}"))),
                decoded
            );
        }
        assert_eq!(value(&mut client, &hundred), "100");
    }

    /// RFC 7541 C.3 (requests, no Huffman coding) and C.4 (the same with it): the
    /// fields of each of the three requests and the dynamic table after each.
    #[test]
    fn decodes_the_rfc_request_examples() {
        for blocks in [
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ] {
            let mut decoder = Decoder::new(4096);
            let first = [
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ];
            assert_eq!(decode(&mut decoder, blocks[0]), pairs(&first));
            assert_eq!(table(&decoder), (vec![57], 57));
            let mut second = first.to_vec();
            second.push(("cache-control", "no-cache"));
            assert_eq!(decode(&mut decoder, blocks[1]), pairs(&second));
            assert_eq!(table(&decoder), (vec![53, 57], 110));
            let third = [
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ];
            assert_eq!(decode(&mut decoder, blocks[2]), pairs(&third));
            assert_eq!(table(&decoder), (vec![54, 53, 57], 164));
        }
    }

    /// RFC 7541 C.5.1 and C.5.2: responses with a 256-byte table, the second evicting.
    #[test]
    fn decodes_the_rfc_response_examples_evicting() {
        let mut decoder = Decoder::new(256);
        let date = "Mon, 21 Oct 2013 20:13:21 GMT";
        let location = "https://www.example.com";
        assert_eq!(
            decode(
                &mut decoder,
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230
                 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65
                 7861 6d70 6c65 2e63 6f6d"
            ),
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", date),
                ("location", location)
            ])
        );
        assert_eq!(table(&decoder), (vec![63, 65, 52, 42], 222));
        assert_eq!(
            decode(&mut decoder, "4803 3330 37c1 c0bf"),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", date),
                ("location", location)
            ])
        );
        assert_eq!(table(&decoder), (vec![42, 63, 65, 52], 222));
    }

    #[test]
    fn what_http2_forbids_is_an_invalid_field_and_decoding_goes_on() {
        let mut decoder = Decoder::new(4096);
        let mut block = Vec::new();
        // Upper case, with incremental indexing, then referred to by its index.
        block.put_u8(0x40);
        put_string(&mut block, b"X-Upper");
        put_string(&mut block, b"v");
        block.put_u8(0x80 | 62);
        put_literal(&mut block, 0, b":unknown", b"v");
        put_literal(&mut block, 0, b"ok", b"bad\x01value");
        put_literal(&mut block, 0, b"ok", b"fine");
        let mut out = Vec::new();
        decoder
            .decode(&Bytes::from(block), |f| out.push(f))
            .unwrap();
        assert_eq!(out.len(), 5);
        assert!(out[..4].iter().all(|f| matches!(f, Field::Invalid { .. })));
        assert_eq!(
            out[4],
            Field::Header(
                HeaderName::from_static("ok"),
                HeaderValue::from_static("fine")
            )
        );
        // The invalid field took its place in the table: 32 + 7 + 1.
        assert_eq!(table(&decoder), (vec![40], 40));
    }

    #[test]
    fn broken_blocks_are_compression_errors() {
        for (block, why) in [
            ("80", "index 0"),
            ("be", "index past the dynamic table"),
            ("0f", "truncated field"),
            ("0085", "truncated field"),
            ("00 81 00 80", "invalid Huffman coding"),
            ("ff ff ff ff ff", "integer too large"),
            ("3fe21f", "table size update past the limit"),
            ("82 20", "table size update after a field"),
        ] {
            let mut decoder = Decoder::new(4096);
            assert_eq!(
                decoder.decode(&hex(block), |_| {}),
                Err(CompressionError(why)),
                "{block}"
            );
        }
        // A size update first is fine, and empties the table.
        let mut decoder = Decoder::new(4096);
        decode(&mut decoder, "4002 6f6b 0176");
        assert_eq!(table(&decoder).1, 32 + 2 + 1);
        decode(&mut decoder, "20 82");
        assert_eq!(table(&decoder), (vec![], 0));
    }

    /// A limit lowered (and acknowledged) below the table's size: the next block must
    /// begin with a size update to at most it (RFC 7541 section 4.2).
    #[test]
    fn a_lowered_limit_needs_a_size_update_first() {
        let mut decoder = Decoder::new(4096);
        decode(&mut decoder, "4002 6f6b 0176");
        decoder.set_limit(0);
        assert_eq!(
            decoder.decode(&hex("82"), |_| {}),
            Err(CompressionError(
                "no table size update to the lowered limit"
            ))
        );
        let mut decoder = Decoder::new(4096);
        decode(&mut decoder, "4002 6f6b 0176");
        decoder.set_limit(100);
        assert_eq!(
            decoder.decode(&hex("3f46"), |_| {}),
            Err(CompressionError("table size update past the limit"))
        );
        decode(&mut decoder, "3f45 82 be");
        assert_eq!(table(&decoder), (vec![35], 35));
        decode(&mut decoder, "82");
        // Raised again: no update needed.
        decoder.set_limit(4096);
        decode(&mut decoder, "82");
    }

    /// What the encoder writes, the decoder reads back; the usual statuses and pseudo
    /// values are one byte each.
    #[test]
    fn encoded_heads_decode_to_themselves() {
        let mut block = Vec::new();
        encode_status(http::StatusCode::OK, &mut block);
        assert_eq!(&block[..], &[0x88]);
        encode_status(http::StatusCode::IM_A_TEAPOT, &mut block);
        encode_pseudo(Pseudo::Method, b"GET", &mut block);
        encode_pseudo(Pseudo::Method, b"PATCH", &mut block);
        encode_pseudo(Pseudo::Scheme, b"https", &mut block);
        encode_pseudo(Pseudo::Path, b"/a?b", &mut block);
        encode_pseudo(Pseudo::Authority, b"example.com", &mut block);
        encode_pseudo(Pseudo::Protocol, b"websocket", &mut block);
        let long = "x".repeat(300);
        for (name, value) in [
            ("content-type", "text/plain"),
            ("www-authenticate", "Basic"),
            ("x-custom", long.as_str()),
        ] {
            encode_header(&HeaderName::from_static(name), value.as_bytes(), &mut block);
        }
        let mut decoder = Decoder::new(4096);
        let mut out = Vec::new();
        decoder
            .decode(&Bytes::from(block), |field| out.push(field))
            .unwrap();
        let text: Vec<(String, String)> = out
            .into_iter()
            .map(|f| match f {
                Field::Pseudo(p, v) => (p.name().to_owned(), string(&v)),
                Field::Header(n, v) => (n.to_string(), string(v.as_bytes())),
                Field::Invalid { .. } => panic!("invalid"),
            })
            .collect();
        assert_eq!(
            text,
            pairs(&[
                (":status", "200"),
                (":status", "418"),
                (":method", "GET"),
                (":method", "PATCH"),
                (":scheme", "https"),
                (":path", "/a?b"),
                (":authority", "example.com"),
                (":protocol", "websocket"),
                ("content-type", "text/plain"),
                ("www-authenticate", "Basic"),
                ("x-custom", long.as_str()),
            ])
        );
        assert!(decoder.table.is_empty(), "literals without indexing");
    }

    #[test]
    fn static_name_indices_follow_the_table() {
        for (i, (name, _)) in STATIC.iter().enumerate().skip(14) {
            assert_eq!(
                static_name_index(&HeaderName::from_static(name)),
                Some(i + 1)
            );
        }
        assert_eq!(static_name_index(&HeaderName::from_static("x-y")), None);
    }
}
