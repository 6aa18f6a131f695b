//! Request heads: `httparse` finds the request line and header fields; the checks an
//! edge proxy owes the servers behind it (RFC 9112 sections 3.2, 6 and 11.2) decide
//! the message's framing or refuse it.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use smallvec::SmallVec;

/// Where something lies in a buffer: offset and length.
type Span = (usize, usize);

/// Header fields parsed in place (the default limit, hyper's and Kestrel's): a head
/// with more, where the limit allows more, is parsed again with room for them.
pub(crate) const MAX_HEADERS: usize = 100;

/// Size limits of a request head (`u32`s: they live in every connection's future).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The whole head, request line and header fields (431 beyond).
    max_head: u32,
    /// The request line (414 beyond).
    max_request_line: u32,
    /// Header fields (431 beyond).
    max_fields: u32,
}

impl Limits {
    /// The limits configured (each at most 4 GiB).
    pub(crate) fn new(max_head: usize, max_request_line: usize, max_fields: u32) -> Self {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Limits {
            max_head: clamp(max_head),
            max_request_line: clamp(max_request_line),
            max_fields,
        }
    }

    /// The whole head's limit.
    pub(crate) fn max_head(&self) -> usize {
        self.max_head as usize
    }

    fn max_request_line(&self) -> usize {
        self.max_request_line as usize
    }
}

/// Why a request head was refused, and so the status the client gets before the
/// connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Malformed or ambiguous: 400.
    Bad(&'static str),
    /// The request line is longer than its limit: 414.
    UriTooLong,
    /// The head is larger than its limit, or has too many fields: 431.
    HeadTooLarge,
}

impl ParseError {
    /// The status answered for it.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            ParseError::Bad(_) => StatusCode::BAD_REQUEST,
            ParseError::UriTooLong => StatusCode::URI_TOO_LONG,
            ParseError::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        }
    }

    /// What was wrong, for the log.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            ParseError::Bad(reason) => reason,
            ParseError::UriTooLong => "request line too long",
            ParseError::HeadTooLarge => "request head too large",
        }
    }
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLength {
    /// `Content-Length` (zero when neither framing header is present).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct RequestHead {
    /// Method, target, version and header fields (the body is the caller's).
    pub(crate) request: Request<()>,
    pub(crate) body: BodyLength,
    /// The connection may carry another request after this one (HTTP/1.1 without
    /// `Connection: close`; HTTP/1.0 with `Connection: keep-alive`).
    pub(crate) keep_alive: bool,
    /// `Expect: 100-continue` on HTTP/1.1: the body comes once the server asks for it.
    pub(crate) expect_continue: bool,
    /// `TE: trailers`: the client takes trailer fields in a chunked response.
    pub(crate) accepts_trailers: bool,
    /// `Connection` names `upgrade`: the request may ask for an upgrade (without it,
    /// none is looked for).
    pub(crate) connection_upgrade: bool,
}

/// Room left in a request's header map for what the forwarder adds
/// (`X-Forwarded-For`, `-Proto`, `-Host`, `-Prefix`, the destination's `Host`, a few
/// transforms): filling it then costs no reallocation.
const FORWARDING_ROOM: usize = 8;

/// Parse the request head at the start of `buf`. `Ok(None)`: not complete yet (read
/// more). On success the head's bytes are split off `buf`, which then starts with the
/// body or the next request. `new_headers(n)` gives the map the fields go into (with
/// room for `n`): empty, or with the names of an earlier head (see [`fields`]).
pub(crate) fn parse_request(
    buf: &mut BytesMut,
    limits: &Limits,
    new_headers: impl FnOnce(usize) -> HeaderMap,
) -> Result<Option<RequestHead>, ParseError> {
    let mut uninit = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut more;
    let max_fields = limits.max_fields as usize;
    let mut parsed = httparse::Request::new(&mut []);
    let mut result =
        parsed.parse_with_uninit_headers(buf, &mut uninit[..max_fields.min(MAX_HEADERS)]);
    if let Err(httparse::Error::TooManyHeaders) = result {
        if max_fields > MAX_HEADERS {
            // More fields than there is room for here, and a limit that allows more:
            // parsed again with room for as many as the limit or the head's lines.
            std::hint::cold_path();
            let lines =
                memchr::memchr_iter(b'\n', &buf[..buf.len().min(limits.max_head())]).count();
            more = vec![MaybeUninit::uninit(); max_fields.min(lines)];
            parsed = httparse::Request::new(&mut []);
            result = parsed.parse_with_uninit_headers(buf, &mut more);
        }
    }
    let len = match result {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            std::hint::cold_path();
            return match request_line_len(buf) {
                None if buf.len() > limits.max_request_line() => Err(ParseError::UriTooLong),
                Some(line) if line > limits.max_request_line() => Err(ParseError::UriTooLong),
                _ if buf.len() > limits.max_head() => Err(ParseError::HeadTooLarge),
                _ => Ok(None),
            };
        }
        Err(e) => {
            std::hint::cold_path();
            return Err(match e {
                httparse::Error::TooManyHeaders => ParseError::HeadTooLarge,
                e => ParseError::Bad(parse_error_reason(e)),
            });
        }
    };
    if len > limits.max_head() {
        std::hint::cold_path();
        return Err(ParseError::HeadTooLarge);
    }
    if request_line_len(buf).is_some_and(|line| line > limits.max_request_line()) {
        std::hint::cold_path();
        return Err(ParseError::UriTooLong);
    }
    let (Some(method), Some(path), Some(minor)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(ParseError::Bad("incomplete request line"));
    };
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| ParseError::Bad("method"))?;
    let version = version_of(minor);
    let target = span(buf, path.as_bytes());
    let mut spans = Spans::new();
    spans_of(buf, parsed.headers, &mut spans);
    let (head, headers, checks) = split_head(buf, len, &spans, FORWARDING_ROOM, new_headers)?;
    // Refusals drop what was read so far: out of the way of the head that parses.
    let (uri, body) = match (
        target_uri(&method, head.slice(target.0..target.0 + target.1)),
        checks.framing(version),
    ) {
        (Ok(uri), Ok(body)) => (uri, body),
        (Err(e), _) | (_, Err(e)) => {
            std::hint::cold_path();
            return Err(e);
        }
    };
    if version == Version::HTTP_11 && checks.hosts != 1 {
        std::hint::cold_path();
        return Err(ParseError::Bad(if checks.hosts == 0 {
            "no Host header"
        } else {
            "more than one Host header"
        }));
    }
    let keep_alive = match version {
        Version::HTTP_11 => !checks.close,
        _ => checks.keep_alive && !checks.close,
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    super::buffers::put_map(request.headers_mut(), headers);
    Ok(Some(RequestHead {
        request,
        body,
        keep_alive,
        expect_continue: checks.expect_continue && version == Version::HTTP_11,
        accepts_trailers: checks.trailers,
        connection_upgrade: checks.upgrade,
    }))
}

/// Where each header field's name and value lie in a head's buffer: filled as the
/// fields are read (a zeroed array for the most fields would cost a 3 KiB memset per
/// message); spills to the heap only past 24 fields.
type Spans = SmallVec<[(Span, Span); 24]>;

/// The version of a head whose version line says `HTTP/1.minor`.
fn version_of(minor: u8) -> Version {
    if minor == 1 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    }
}

/// Where `part`, a slice of `buf`, lies in it.
fn span(buf: &[u8], part: &[u8]) -> Span {
    (part.as_ptr() as usize - buf.as_ptr() as usize, part.len())
}

/// Where the header fields httparse found lie in `buf`, into `spans`: taken before the
/// head is split off the buffer (the parsed slices borrow it). Filled in place: the
/// array is too large to be returned by value for free.
#[inline]
fn spans_of(buf: &[u8], found: &[httparse::Header<'_>], spans: &mut Spans) {
    // Pushed one by one: `extend`'s reservation and its two loops cost more than the
    // few fields a head has.
    for field in found {
        spans.push((span(buf, field.name.as_bytes()), span(buf, field.value)));
    }
}

/// Split the head (its first `len` bytes) off `buf` and read its fields at `spans` into
/// a map from `new_headers` with room for `room` more: the head's bytes, the fields,
/// and what their framing and connection fields said.
fn split_head(
    buf: &mut BytesMut,
    len: usize,
    spans: &Spans,
    room: usize,
    new_headers: impl FnOnce(usize) -> HeaderMap,
) -> Result<(Bytes, HeaderMap, Checks), ParseError> {
    let head = buf.split_to(len).freeze();
    let mut checks = Checks::default();
    let headers = fields(&head, spans, &mut checks, new_headers(spans.len() + room))?;
    Ok((head, headers, checks))
}

/// The header fields at `spans` of `head`, into `headers`, each seen by `checks`.
/// Values are views of `head`, not copies. `headers` is empty, or holds the names of
/// an earlier head (see [`buffers`](super::buffers)): when this head has the same
/// names in the same order, only the values are replaced.
fn fields(
    head: &Bytes,
    spans: &Spans,
    checks: &mut Checks,
    mut headers: HeaderMap,
) -> Result<HeaderMap, ParseError> {
    if !headers.is_empty() {
        if same_names(head, spans, &headers) {
            refill(head, spans, checks, &mut headers)?;
            return Ok(headers);
        }
        headers.clear();
    }
    for &(name, value) in spans {
        let name = HeaderName::from_bytes(&head[name.0..name.0 + name.1])
            .map_err(|_| ParseError::Bad("header name"))?;
        let value = head.slice(value.0..value.0 + value.1);
        // A repeated, equal `Content-Length` is kept once (as hyper does): the
        // next hop gets one length.
        let repeated = name == header::CONTENT_LENGTH && checks.content_length.is_some();
        checks.see(&name, &value)?;
        if repeated {
            continue;
        }
        let value =
            HeaderValue::from_maybe_shared(value).map_err(|_| ParseError::Bad("header value"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// Whether the fields at `spans` are `headers`' names, one each, in its order (names
/// compared without regard to case, as a parsed name is lowered).
///
/// Most heads on a connection, and most responses of one destination, repeat the
/// fields of the one before: their names are then taken as they are, without parsing,
/// hashing or inserting any (about two thirds of what reading a field costs), and a
/// name that is not a standard one is not allocated again.
fn same_names(head: &[u8], spans: &Spans, headers: &HeaderMap) -> bool {
    // One value per name: a map's iteration order is the fields' only then.
    headers.keys_len() == spans.len()
        && headers.len() == spans.len()
        && headers
            .keys()
            .zip(spans)
            .all(|(known, &(name, _))| is_lowered(&head[name.0..name.0 + name.1], known))
}

/// Whether `raw`, a field name as sent, is `name` (lower case) in any case. Most
/// senders write names in lower case (HTTP/2's rule), many others capitalised:
/// compared as they are first, which is a `memcmp`, byte by byte only when that fails.
fn is_lowered(raw: &[u8], name: &HeaderName) -> bool {
    let name = name.as_str().as_bytes();
    raw == name || raw.eq_ignore_ascii_case(name)
}

/// Put the values at `spans` of `head` in place of `headers`' (the same names, see
/// [`same_names`]), each seen by `checks`.
fn refill(
    head: &Bytes,
    spans: &Spans,
    checks: &mut Checks,
    headers: &mut HeaderMap,
) -> Result<(), ParseError> {
    for ((name, slot), &(_, value)) in headers.iter_mut().zip(spans) {
        let value = head.slice(value.0..value.0 + value.1);
        checks.see(name, &value)?;
        *slot =
            HeaderValue::from_maybe_shared(value).map_err(|_| ParseError::Bad("header value"))?;
    }
    Ok(())
}

/// How a response's body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseBodyLength {
    /// `Content-Length`, or none at all (a response to `HEAD`, `1xx`, `204`, `304`).
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`.
    Chunked,
    /// Neither framing field, or a `Transfer-Encoding` not ending in `chunked`: the body
    /// ends when the destination closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// Status, version and header fields (the body is the caller's).
    pub(crate) response: Response<()>,
    pub(crate) body: ResponseBodyLength,
    /// The connection may carry another request after this response.
    pub(crate) keep_alive: bool,
    /// `Connection` names `keep-alive` (a `Keep-Alive` field may then say for how
    /// long: Node.js and Apache httpd send both).
    pub(crate) connection_keep_alive: bool,
}

/// Parse the response head at the start of `buf` (the answer to a `HEAD` request when
/// `to_head`). `Ok(None)`: not complete yet. On success the head's bytes are split off
/// `buf`, which then starts with the body. Refused (the connection cannot be used
/// further): a malformed head (obs-folds included), one larger than `max_head` (the
/// only bound on its number of fields), and ambiguous framing — both `Content-Length`
/// and `Transfer-Encoding`, differing lengths, a coding after `chunked` (`chunked`
/// twice, or not last), `Transfer-Encoding` in HTTP/1.0.
pub(crate) fn parse_response(
    buf: &mut BytesMut,
    max_head: usize,
    to_head: bool,
    new_headers: impl FnOnce(usize) -> HeaderMap,
) -> Result<Option<ResponseHead>, ParseError> {
    let config = httparse::ParserConfig::default();
    let mut uninit = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut more;
    let mut parsed = httparse::Response::new(&mut []);
    let mut result = config.parse_response_with_uninit_headers(&mut parsed, buf, &mut uninit);
    if let Err(httparse::Error::TooManyHeaders) = result {
        // Only the size bounds an answer's head, as in .NET's client under YARP (a
        // destination may set more cookies than a client sends fields): parsed again
        // with room for as many fields as the head's first `max_head` bytes have lines.
        std::hint::cold_path();
        let lines = memchr::memchr_iter(b'\n', &buf[..buf.len().min(max_head)]).count();
        more = vec![MaybeUninit::uninit(); lines];
        parsed = httparse::Response::new(&mut []);
        result = config.parse_response_with_uninit_headers(&mut parsed, buf, &mut more);
    }
    let len = match result {
        Ok(httparse::Status::Complete(len)) if len > max_head => {
            return Err(ParseError::HeadTooLarge)
        }
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > max_head => {
            return Err(ParseError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::HeadTooLarge),
        Err(e) => return Err(ParseError::Bad(parse_error_reason(e))),
    };
    let (Some(code), Some(minor)) = (parsed.code, parsed.version) else {
        return Err(ParseError::Bad("incomplete status line"));
    };
    let status = StatusCode::from_u16(code).map_err(|_| ParseError::Bad("status"))?;
    let version = version_of(minor);
    let mut spans = Spans::new();
    spans_of(buf, parsed.headers, &mut spans);
    let (_, headers, checks) = split_head(buf, len, &spans, 0, new_headers)?;
    let bodiless = to_head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let body = if bodiless {
        ResponseBodyLength::Length(0)
    } else if checks.transfer_encoding {
        if checks.content_length.is_some() {
            return Err(ParseError::Bad("both Content-Length and Transfer-Encoding"));
        }
        // RFC 9112 section 6.1: its framing is faulty.
        if version != Version::HTTP_11 {
            return Err(ParseError::Bad("Transfer-Encoding in an HTTP/1.0 response"));
        }
        // `chunked` applied twice, or not as the final coding (RFC 9112 section 6.1).
        if checks.chunked_twice {
            return Err(ParseError::Bad(
                "Transfer-Encoding with a coding after chunked",
            ));
        }
        if checks.chunked_last {
            ResponseBodyLength::Chunked
        } else {
            ResponseBodyLength::UntilClose
        }
    } else {
        match checks.content_length {
            Some(n) => ResponseBodyLength::Length(n),
            None => ResponseBodyLength::UntilClose,
        }
    };
    let keep_alive = body != ResponseBodyLength::UntilClose
        && match version {
            Version::HTTP_11 => !checks.close,
            _ => checks.keep_alive && !checks.close,
        };
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    super::buffers::put_map(response.headers_mut(), headers);
    Ok(Some(ResponseHead {
        response,
        body,
        keep_alive,
        connection_keep_alive: checks.keep_alive,
    }))
}

/// The request target as a URI: origin form (`/path?query`), absolute form, `*` for
/// `OPTIONS`, authority form for `CONNECT` only (RFC 9112 section 3.2).
fn target_uri(method: &Method, target: Bytes) -> Result<Uri, ParseError> {
    let first = target.first().copied();
    let uri = Uri::from_maybe_shared(target).map_err(|_| ParseError::Bad("request target"))?;
    let valid = match first {
        Some(b'/') => uri.authority().is_none(),
        Some(b'*') => *method == Method::OPTIONS && uri.path() == "*",
        _ if *method == Method::CONNECT => uri.scheme().is_none() && uri.authority().is_some(),
        _ => uri.scheme().is_some() && uri.authority().is_some(),
    };
    if valid {
        Ok(uri)
    } else {
        Err(ParseError::Bad("request target"))
    }
}

/// The length of the first line ending in LF, without its line ending; leading empty
/// lines (which a server ignores, RFC 9112 section 2.2) are skipped.
fn request_line_len(buf: &[u8]) -> Option<usize> {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let line = memchr::memchr(b'\n', &buf[start..])?;
    Some(line)
}

fn parse_error_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "header name (whitespace before the colon?)",
        httparse::Error::HeaderValue => "header value (a bare CR?)",
        httparse::Error::NewLine => "line ending",
        httparse::Error::Status => "status",
        httparse::Error::Token => "method or request target",
        httparse::Error::TooManyHeaders => "too many header fields",
        httparse::Error::Version => "HTTP version",
    }
}

/// What the framing and connection fields of a head say, gathered field by field.
#[derive(Debug, Default)]
struct Checks {
    content_length: Option<u64>,
    /// `Transfer-Encoding` present; whether its last coding so far is `chunked`, and
    /// whether `chunked` was seen before that.
    transfer_encoding: bool,
    chunked_last: bool,
    chunked_twice: bool,
    hosts: usize,
    close: bool,
    keep_alive: bool,
    /// `Connection: upgrade`.
    upgrade: bool,
    expect_continue: bool,
    trailers: bool,
}

impl Checks {
    fn see(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), ParseError> {
        if *name == header::CONTENT_LENGTH {
            // Repeated fields of one length are that length (RFC 9110 section 8.6);
            // a list in one field (`5, 5`) is refused, as hyper does.
            let length = parse_length(value.trim_ascii())
                .ok_or(ParseError::Bad("invalid Content-Length"))?;
            match self.content_length {
                Some(seen) if seen != length => {
                    return Err(ParseError::Bad("differing Content-Length values"))
                }
                _ => self.content_length = Some(length),
            }
        } else if *name == header::TRANSFER_ENCODING {
            self.transfer_encoding = true;
            for coding in value.split(|&b| b == b',') {
                let coding = coding.trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                if self.chunked_last {
                    // Anything after `chunked` (another `chunked` included).
                    self.chunked_twice = true;
                }
                self.chunked_last = coding.eq_ignore_ascii_case(b"chunked");
            }
        } else if *name == header::HOST {
            self.hosts += 1;
        } else if *name == header::CONNECTION {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    self.upgrade = true;
                }
            }
        } else if *name == header::EXPECT {
            self.expect_continue |= expects_continue(value);
        } else if *name == header::TE {
            self.trailers |= value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
        }
        Ok(())
    }

    /// The body's framing (RFC 9112 section 6.3), refusing every ambiguous case.
    fn framing(&self, version: Version) -> Result<BodyLength, ParseError> {
        if !self.transfer_encoding {
            return Ok(BodyLength::Length(self.content_length.unwrap_or(0)));
        }
        if self.content_length.is_some() {
            return Err(ParseError::Bad("both Content-Length and Transfer-Encoding"));
        }
        if version != Version::HTTP_11 {
            return Err(ParseError::Bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if !self.chunked_last || self.chunked_twice {
            return Err(ParseError::Bad(
                "Transfer-Encoding whose final coding is not (only once) chunked",
            ));
        }
        Ok(BodyLength::Chunked)
    }
}

/// Whether an `Expect` field's value asks for `100 Continue` (RFC 9110 §10.1.1: the
/// only expectation defined, case-insensitive), whatever the version it came in.
pub(crate) fn expects_continue(value: &[u8]) -> bool {
    value.trim_ascii().eq_ignore_ascii_case(b"100-continue")
}

/// A `Content-Length` value: decimal digits only, within `u64`.
pub(crate) fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}
