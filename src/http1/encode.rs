//! Response heads, and the framing of what follows them.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;

/// How a response's body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Content-Length: n` (the response's own `Content-Length` is replaced).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No framing header: the body ends when the connection closes (HTTP/1.0 clients).
    UntilClose,
    /// No body follows (a response to `HEAD`, `304`: their `Content-Length` is kept as
    /// it describes the resource; `1xx`, `204`: none is sent).
    Bodiless,
}

/// Write a response head into `dst`: status line, the response's fields (less the
/// framing ones, which `framing` decides), `Date` when missing, `Connection: close`
/// when the connection closes after it, `Connection: keep-alive` for an HTTP/1.0
/// client whose connection stays open.
pub(crate) fn write_response_head(
    dst: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    framing: Framing,
    connection: Connection,
) {
    if status == StatusCode::OK {
        // Most responses: the line as one copy.
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        write_status_line(dst, status);
    }
    let keep_length = framing == Framing::Bodiless
        && !(status.is_informational() || status == StatusCode::NO_CONTENT);
    // Whether the response has `Date` and `Connection`, seen on the way (a hashed
    // look-up each would cost more than the whole pass).
    let (mut date, mut connection_field) = (false, false);
    for (name, value) in headers {
        if (*name == header::CONTENT_LENGTH && !keep_length) || *name == header::TRANSFER_ENCODING {
            continue;
        }
        date |= *name == header::DATE;
        connection_field |= *name == header::CONNECTION;
        write_field(dst, name, value);
    }
    match framing {
        Framing::Length(n) => write_content_length(dst, n),
        Framing::Chunked => dst.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::UntilClose | Framing::Bodiless => {}
    }
    if !date {
        with_date_field(|field| dst.extend_from_slice(field));
    }
    match connection {
        Connection::Close if !connection_field => dst.extend_from_slice(b"connection: close\r\n"),
        Connection::KeepAlive => dst.extend_from_slice(b"connection: keep-alive\r\n"),
        _ => {}
    }
    dst.extend_from_slice(b"\r\n");
}

/// The status line of `status` (any but `200`).
#[inline(never)]
fn write_status_line(dst: &mut Vec<u8>, status: StatusCode) {
    dst.extend_from_slice(b"HTTP/1.1 ");
    dst.extend_from_slice(status.as_str().as_bytes());
    dst.push(b' ');
    dst.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    dst.extend_from_slice(b"\r\n");
}

/// How a request's body goes to the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestFraming {
    /// No body: the request's own framing fields, if any, are written as they are
    /// (`Content-Length: 0` on a `POST` is kept), less `Transfer-Encoding`.
    Empty,
    /// `Content-Length: n` (the request's own is replaced).
    Length(u64),
    /// `Transfer-Encoding: chunked` (the request's own `Content-Length` dropped).
    Chunked,
}

/// Write a request head into `dst`: request line (the URI's path and query: the
/// origin form, or `*`; a URI with a scheme, as for a proxy, in absolute form), the
/// request's fields less the framing ones `framing` decides.
pub(crate) fn write_request_head(
    dst: &mut Vec<u8>,
    method: &http::Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    added: &crate::forwarding::headers::Added,
    framing: RequestFraming,
) {
    dst.extend_from_slice(method.as_str().as_bytes());
    dst.push(b' ');
    if let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) {
        dst.extend_from_slice(scheme.as_str().as_bytes());
        dst.extend_from_slice(b"://");
        dst.extend_from_slice(authority.as_str().as_bytes());
    }
    dst.extend_from_slice(
        uri.path_and_query()
            .map_or("/", |pq| pq.as_str())
            .as_bytes(),
    );
    dst.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        let framing_field = *name == header::TRANSFER_ENCODING
            || (*name == header::CONTENT_LENGTH && framing != RequestFraming::Empty);
        if !framing_field {
            write_field(dst, name, value);
        }
    }
    for (name, value) in added.iter() {
        write_field(dst, name, value);
    }
    match framing {
        RequestFraming::Length(n) => write_content_length(dst, n),
        RequestFraming::Chunked => dst.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        RequestFraming::Empty => {}
    }
    dst.extend_from_slice(b"\r\n");
}

fn write_content_length(dst: &mut Vec<u8>, n: u64) {
    dst.extend_from_slice(b"content-length: ");
    let mut digits = [0u8; 20];
    dst.extend_from_slice(decimal(n, &mut digits));
    dst.extend_from_slice(b"\r\n");
}

/// One field line (`name: value` CRLF), of a head or of a trailer section.
#[inline(always)]
pub(crate) fn write_field(dst: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    dst.extend_from_slice(name.as_str().as_bytes());
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value.as_bytes());
    dst.extend_from_slice(b"\r\n");
}

/// What a response head says of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Connection {
    /// Nothing to say: the version's default holds (HTTP/1.1 stays open, HTTP/1.0
    /// closes).
    Default,
    /// An HTTP/1.0 client's connection stays open: `Connection: keep-alive`.
    KeepAlive,
    /// An HTTP/1.1 connection closes after this response: `Connection: close`.
    Close,
}

/// `n` in decimal, written at the end of `buf`.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// A chunk-size line for `len` bytes of data: hex digits and CRLF.
pub(crate) fn chunk_header(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    let mut i = buf.len() - 2;
    buf[i] = b'\r';
    buf[i + 1] = b'\n';
    let mut n = len;
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &buf[i..];
        }
    }
}

thread_local! {
    /// The `Date` field line of the current second (`date: ` IMF-fixdate CRLF),
    /// formatted once per second per thread.
    static DATE: RefCell<(u64, [u8; DATE_FIELD])> = const { RefCell::new((u64::MAX, [0; DATE_FIELD])) };
}

/// Length of a `Date` field line: `date: `, the 29 bytes of an IMF-fixdate, CRLF.
const DATE_FIELD: usize = 6 + 29 + 2;

/// Call `f` with the current `Date` value (IMF-fixdate).
pub(crate) fn with_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    with_date_field(|field| f(&field[6..DATE_FIELD - 2]))
}

/// Call `f` with the current `Date` field line (`date: ` value CRLF).
fn with_date_field<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            use std::io::Write;
            let mut line = [0u8; DATE_FIELD];
            let _ = write!(&mut line[..], "date: {}\r\n", httpdate::HttpDate::from(now));
            *cached = (second, line);
        }
        f(&cached.1)
    })
}
