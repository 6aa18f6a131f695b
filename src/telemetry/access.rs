//! The access log: one record per request, an INFO event on the `fuseway::access`
//! target ([`TARGET`]) written by the telemetry stage when the exchange is over (the
//! response body sent, failed, or abandoned by the client).
//!
//! Its fields: `client` (address and port), `method`, `host` (the URI's authority, else
//! `Host`), `path` (with the query),
//! `protocol`, `status`, `bytes_in` and `bytes_out` (request body bytes sent on to the
//! destination, response body bytes passed on to the client), `duration_ms` (from the
//! request's arrival in the pipeline to the exchange's end), `upstream_ms` (to the
//! destination's response head, or to the failure of forwarding; absent for answers
//! the proxy gave itself), `route`,
//! `cluster`, `destination` (absent where none was chosen), `error` (YARP's kind
//! names, `ResponseBodyClient` for a client that went away while the body streamed)
//! and `request_id`: the client's `X-Request-Id`, else the trace id of its
//! `traceparent` (if valid: the one the forwarder passes on), else one generated (16
//! hex digits, unique in the process).
//!
//! Nothing is captured when no subscriber takes the target, so a program without an
//! access log pays one filter check per request. The `fuseway` binary writes it to
//! stdout (or a file) from a thread of its own, as text or JSON (`--access-log`,
//! `--log-format`): a worker never waits for the log.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{HeaderValue, Method, Uri, Version};
use tokio::time::Instant;

use super::kind_name;
use crate::forwarding::trace_context::{hex, trace_id, SpanIds, TRACEPARENT};
use crate::kept::Kept;
use crate::request::{ExchangeEnd, ExchangeReport, ForwardErrorKind, Outcome};

/// The `tracing` target of the access log's records.
pub const TARGET: &str = "fuseway::access";

/// Whether a subscriber takes access records now.
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "fuseway::access", tracing::Level::INFO)
}

/// What the access log and the [span record](super::span) keep of a request from its
/// arrival.
#[derive(Debug)]
pub(crate) struct Arrival {
    /// Whether an access record is written (a subscriber took it when the request came).
    log: bool,
    /// The proxy's span, when a span record is written.
    pub(super) span: Option<SpanIds>,
    method: Method,
    uri: Uri,
    /// `Host`, where the URI has no authority (HTTP/1.1 in origin form).
    host: Option<HeaderValue>,
    version: Version,
    client: Option<SocketAddr>,
    request_id: RequestId,
}

impl Arrival {
    /// `request`'s, for an access record if `log`, for a span record if `span`.
    pub(crate) fn of<B: 'static>(
        request: &http::Request<B>,
        log: bool,
        span: Option<SpanIds>,
    ) -> Self {
        static X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");
        let headers = request.headers();
        let get_few = crate::forwarding::headers::get_few;
        let request_id = match get_few(headers, &X_REQUEST_ID) {
            Some(id) => RequestId::Header(id.clone()),
            None => match get_few(headers, &TRACEPARENT).filter(|t| trace_id(t).is_some()) {
                Some(traceparent) => RequestId::Trace(traceparent.clone()),
                None => RequestId::generate(),
            },
        };
        Arrival {
            log,
            span,
            method: request.method().clone(),
            uri: request.uri().clone(),
            host: match request.uri().authority() {
                Some(_) => None,
                None => headers.get(http::header::HOST).cloned(),
            },
            version: request.version(),
            client: crate::request::ConnectionInfo::of(request).map(|c| c.remote),
            request_id,
        }
    }
}

/// An [`Arrival`] in a box kept by its thread: 8 bytes in the telemetry stage's state
/// and in the record, where the arrival itself is ~300 — the state lives in every
/// request's future (which is moved and copied, with or without a record) and the
/// record in the exchange's end hook, a heap allocation of its own. A request with a
/// record takes a box and its record gives it back, emptied, when written: a warm
/// worker allocates none.
pub(crate) type Boxed = Kept<Arrival>;

crate::kept::kept_boxes!(Arrival, 1024);

impl Boxed {
    /// The record so far, once the pipeline has answered: written by
    /// [`Record::write`] when the exchange is over.
    pub(crate) fn answered(
        self,
        start: Instant,
        upstream: Option<Duration>,
        status: u16,
        outcome: &Outcome,
    ) -> Record {
        Record {
            arrival: self,
            start,
            upstream,
            status,
            place: outcome.place(),
            error: outcome.error.as_ref().map(|e| e.kind()),
        }
    }
}

/// An access record waiting for its exchange's end.
#[derive(Debug)]
pub(crate) struct Record {
    pub(super) arrival: Boxed,
    start: Instant,
    pub(super) upstream: Option<Duration>,
    pub(super) status: u16,
    /// Route, cluster and destination.
    place: Outcome,
    error: Option<ForwardErrorKind>,
}

impl Record {
    /// Write it (and the span record, if one is kept), for an exchange that ended as
    /// `report` says.
    pub(crate) fn write(self, report: &ExchangeReport) {
        let duration = crate::clock::now().saturating_duration_since(self.start);
        let error = match report.end {
            ExchangeEnd::Failed(kind) => Some(kind),
            ExchangeEnd::Abandoned => Some(ForwardErrorKind::ResponseBodyClient),
            _ => self.error,
        };
        if let Some(ids) = &self.arrival.span {
            super::span::write(ids, &self, report, duration, error);
        }
        if !self.arrival.log {
            return;
        }
        let a = &self.arrival;
        let (mut client, mut request_id) = ([0; 64], [0; 16]);
        let client = a.client(&mut client);
        tracing::info!(
            target: "fuseway::access",
            client,
            method = a.method(),
            host = a.host(),
            path = a.path(),
            protocol = a.protocol(),
            status = self.status,
            bytes_in = report.request_bytes,
            bytes_out = report.response_bytes,
            duration_ms = millis(duration),
            upstream_ms = self.upstream.map(millis),
            route = self.route(),
            cluster = self.cluster(),
            destination = self.destination(),
            error = error.map(kind_name),
            request_id = a.request_id.text(&mut request_id),
            "request"
        );
    }
}

impl Record {
    pub(super) fn route(&self) -> Option<&str> {
        self.place.route().map(|r| r.id())
    }

    pub(super) fn cluster(&self) -> Option<&str> {
        self.place.cluster().map(|c| c.id())
    }

    /// Where one was chosen.
    pub(super) fn destination(&self) -> Option<&str> {
        self.place.destination().map(|d| d.id())
    }
}

impl Arrival {
    pub(super) fn method(&self) -> &str {
        self.method.as_str()
    }

    /// The URI's authority, else `Host`.
    pub(super) fn host(&self) -> Option<&str> {
        self.uri
            .authority()
            .map(|authority| authority.as_str())
            .or_else(|| self.host.as_ref().and_then(|h| h.to_str().ok()))
    }

    /// The path, with the query.
    pub(super) fn path(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }

    pub(super) fn protocol(&self) -> &'static str {
        protocol(self.version)
    }

    /// The client's address, written into `buf`.
    pub(super) fn client<'a>(&self, buf: &'a mut [u8; 64]) -> Option<&'a str> {
        self.client.map(|c| client_text(c, buf))
    }
}

fn millis(d: Duration) -> f64 {
    // Microsecond resolution: enough, and short in the log.
    (d.as_micros() as f64) / 1000.0
}

fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP",
    }
}

/// A request's id in the access log.
#[derive(Debug)]
enum RequestId {
    /// The client's `X-Request-Id`.
    Header(HeaderValue),
    /// The client's `traceparent` (its trace id is shown).
    Trace(HeaderValue),
    /// Made here.
    Generated(u64),
}

impl RequestId {
    /// An id unique in the process and unlikely to repeat across processes: a count per
    /// thread (the thread's number in its top 24 bits; no counter shared between
    /// workers) from a random start, mixed by a bijection (so never two alike).
    fn generate() -> Self {
        static THREADS: AtomicU64 = AtomicU64::new(0);
        static SEED: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        });
        thread_local! {
            static NEXT: std::cell::Cell<u64> =
                std::cell::Cell::new(THREADS.fetch_add(1, Ordering::Relaxed) << 40);
        }
        let count = NEXT.with(|next| {
            let n = next.get();
            next.set(n + 1);
            n
        });
        let n = SEED.wrapping_add(count);
        // An odd multiplier and an xor-shift: both invertible.
        let mixed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        RequestId::Generated(mixed ^ (mixed >> 31))
    }
}

impl RequestId {
    /// As the log writes it (a generated one's hex digits into `buf`).
    fn text<'a>(&'a self, buf: &'a mut [u8; 16]) -> &'a str {
        match self {
            RequestId::Header(id) => id.to_str().unwrap_or("(not text)"),
            RequestId::Trace(traceparent) => trace_id(traceparent).unwrap_or("-"),
            RequestId::Generated(n) => {
                hex(&n.to_be_bytes(), buf);
                std::str::from_utf8(buf).unwrap_or("-")
            }
        }
    }
}

/// `addr` as `Display` writes it, into `buf`: an IPv4 one without `fmt`'s machinery
/// (the access log writes one per request).
fn client_text(addr: SocketAddr, buf: &mut [u8; 64]) -> &str {
    let mut len = 0;
    match addr {
        SocketAddr::V4(v4) => {
            let mut push = |n: u16, separator: Option<u8>| {
                if let Some(separator) = separator {
                    buf[len] = separator;
                    len += 1;
                }
                for &d in crate::http1::decimal(u64::from(n), &mut [0; 20]) {
                    buf[len] = d;
                    len += 1;
                }
            };
            for (i, octet) in v4.ip().octets().into_iter().enumerate() {
                push(u16::from(octet), (i > 0).then_some(b'.'));
            }
            push(v4.port(), Some(b':'));
        }
        SocketAddr::V6(_) => {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut buf[..]);
            let _ = write!(cursor, "{addr}");
            len = cursor.position() as usize;
        }
    }
    std::str::from_utf8(&buf[..len]).unwrap_or("-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kept::KeptBoxes;

    #[test]
    fn client_addresses_are_written_as_std_writes_them() {
        for addr in [
            "0.0.0.0:0",
            "127.0.0.1:8080",
            "255.255.255.255:65535",
            "[::1]:443",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(client_text(addr, &mut [0; 64]), addr.to_string());
        }
    }

    #[test]
    fn an_arrivals_box_is_kept_by_its_thread_emptied_and_reused() {
        let request = http::Request::get("http://example.test/a")
            .body(())
            .unwrap();
        let first = Boxed::new(Arrival::of(&request, true, None));
        assert_eq!(first.path(), "/a");
        let at = std::ptr::from_ref::<Arrival>(&first) as usize;
        drop(first);
        // What the thread kept holds nothing of the request.
        Arrival::boxes().with(|boxes| assert!(boxes.borrow().last().is_some_and(|b| b.is_none())));
        let request = http::Request::get("http://example.test/b")
            .body(())
            .unwrap();
        let second = Boxed::new(Arrival::of(&request, true, None));
        assert_eq!(
            std::ptr::from_ref::<Arrival>(&second) as usize,
            at,
            "the same box"
        );
        assert_eq!(second.path(), "/b");
    }

    #[test]
    fn request_ids_come_from_the_client_or_are_made_unique() {
        fn id(headers: &[(&'static str, &str)]) -> String {
            let mut request = http::Request::get("/").body(()).unwrap();
            for (k, v) in headers {
                request
                    .headers_mut()
                    .insert(*k, HeaderValue::from_str(v).unwrap());
            }
            Arrival::of(&request, true, None)
                .request_id
                .text(&mut [0; 16])
                .to_owned()
        }
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(id(&[("x-request-id", "abc-1")]), "abc-1");
        assert_eq!(
            id(&[("traceparent", traceparent)]),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            id(&[("x-request-id", "abc-1"), ("traceparent", traceparent)]),
            "abc-1"
        );
        // Not a traceparent (an all-zero trace id is invalid): one is made.
        let zero = [(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        )];
        let made: Vec<String> = (0..1000)
            .map(|i| id(if i == 0 { &zero } else { &[] }))
            .collect();
        assert!(made
            .iter()
            .all(|m| m.len() == 16 && m.bytes().all(|b| b.is_ascii_hexdigit())));
        let unique: std::collections::HashSet<&String> = made.iter().collect();
        assert_eq!(unique.len(), made.len());
        // Counted per thread: another thread's are others.
        let elsewhere: Vec<String> =
            std::thread::spawn(move || (0..1000).map(|_| id(&[])).collect())
                .join()
                .unwrap();
        assert!(elsewhere.iter().all(|id| !unique.contains(id)));
    }
}
