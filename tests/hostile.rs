//! Client faults and hostile input, end to end through the real proxy: clients that go
//! away at every phase, slow clients, oversized and malformed heads, request
//! smuggling, `Host` spoofing, path tricks, spoofed `X-Forwarded-*` and hop-by-hop
//! headers smuggled through `Connection`.

mod common;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use fuseway::server::{Http1Engine, Http2Engine, MinDataRate, ServerOptions};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

// ===== a backend that records exactly what reached it =====

/// One request as a raw HTTP/1.1 backend received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    /// Lower-case names, in order, repeats kept.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The body was complete by the framing the head announced.
    complete: bool,
    /// Bytes that followed the framed message before the backend answered: anything
    /// here is a second request hidden in the first.
    leftover: Vec<u8>,
}

impl Seen {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} repeated: {all:?}");
        all.first().copied()
    }

    /// Content-Length and Transfer-Encoding lines together.
    fn framing_headers(&self) -> usize {
        self.all("content-length").len() + self.all("transfer-encoding").len()
    }
}

type Record = Arc<Mutex<Vec<Seen>>>;

/// Read into `buf` until it holds at least `len` bytes; false on EOF or error.
async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> bool {
    let mut chunk = [0u8; 8192];
    while buf.len() < len {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

fn position(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Read one request with a strict parser (httparse) and the framing its head
/// announces (`Transfer-Encoding: chunked` or `Content-Length`, as RFC 9112 orders
/// them), then answer `200` with the path as body and close.
async fn read_request(s: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(e) = position(&buf, b"\r\n\r\n") {
            break e + 4;
        }
        let len = buf.len() + 1;
        if !fill(s, &mut buf, len).await {
            return None;
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 256];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = req.parse(&buf[..head_end]);
    assert!(
        matches!(parsed, Ok(httparse::Status::Complete(_))),
        "the proxy sent a head a strict parser rejects: {parsed:?}\n{}",
        String::from_utf8_lossy(&buf[..head_end])
    );
    let mut seen = Seen {
        method: req.method.unwrap().to_owned(),
        path: req.path.unwrap().to_owned(),
        headers: req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        body: Vec::new(),
        complete: false,
        leftover: Vec::new(),
    };
    let mut pos = head_end;
    let chunked = seen
        .all("transfer-encoding")
        .iter()
        .any(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            match httparse::parse_chunk_size(&buf[pos..]) {
                Ok(httparse::Status::Complete((used, 0))) => {
                    pos += used;
                    // No trailers: the final CRLF.
                    if !fill(s, &mut buf, pos + 2).await || &buf[pos..pos + 2] != b"\r\n" {
                        break;
                    }
                    pos += 2;
                    seen.complete = true;
                    break;
                }
                Ok(httparse::Status::Complete((used, size))) => {
                    let size = size as usize;
                    pos += used;
                    if !fill(s, &mut buf, pos + size + 2).await {
                        break;
                    }
                    seen.body.extend_from_slice(&buf[pos..pos + size]);
                    pos += size + 2;
                }
                Ok(httparse::Status::Partial) => {
                    let len = buf.len() + 1;
                    if !fill(s, &mut buf, len).await {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    } else if let Some(len) = seen.one("content-length") {
        let len: usize = len.parse().expect("a valid Content-Length");
        seen.complete = fill(s, &mut buf, pos + len).await;
        if seen.complete {
            seen.body = buf[pos..pos + len].to_vec();
            pos += len;
        }
    } else {
        seen.complete = true;
    }
    seen.leftover = buf[pos.min(buf.len())..].to_vec();
    // Anything the proxy sends before it has the answer is smuggled too.
    let mut more = [0u8; 4096];
    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(30), s.read(&mut more)).await {
        seen.leftover.extend_from_slice(&more[..n]);
    }
    Some(seen)
}

/// A raw backend recording each request; every answer closes the connection, so each
/// upstream connection carries exactly one request.
async fn recording_backend() -> (RawBackend, Record) {
    let record: Record = Arc::default();
    let r = record.clone();
    let b = raw_backend(move |mut s| {
        let r = r.clone();
        async move {
            let Some(seen) = read_request(&mut s).await else {
                return;
            };
            let body = seen.path.clone();
            let complete = seen.complete;
            r.lock().unwrap().push(seen);
            if complete {
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            }
            let _ = s.shutdown().await;
        }
    })
    .await;
    (b, record)
}

/// `/api/**` to a recording backend, `/admin/**` to another one.
struct Recorded {
    proxy: TestProxy,
    api: RawBackend,
    api_seen: Record,
    admin: RawBackend,
    admin_seen: Record,
}

impl Recorded {
    async fn new(options: ServerOptions) -> Recorded {
        let (api, api_seen) = recording_backend().await;
        let (admin, admin_seen) = recording_backend().await;
        let config = format!(
            r#"{{
  "Routes": {{
    "api": {{ "ClusterId": "api", "Match": {{ "Path": "/api/{{**rest}}" }} }},
    "admin": {{ "ClusterId": "admin", "Match": {{ "Path": "/admin/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "api": {{ "Destinations": {{ "a": {{ "Address": "{}" }} }} }},
    "admin": {{ "Destinations": {{ "a": {{ "Address": "{}" }} }} }}
  }}
}}"#,
            api.url(),
            admin.url()
        );
        let proxy = start(&config, options).await;
        Recorded {
            proxy,
            api,
            api_seen,
            admin,
            admin_seen,
        }
    }

    fn api_seen(&self) -> Vec<Seen> {
        self.api_seen.lock().unwrap().clone()
    }

    fn admin_seen(&self) -> Vec<Seen> {
        self.admin_seen.lock().unwrap().clone()
    }

    async fn idle(&self) {
        self.proxy.wait_idle("api", "a").await;
        self.proxy.wait_idle("admin", "a").await;
    }

    /// The proxy still answers a plain request.
    async fn still_serves(&self) {
        let r = h1_client()
            .get(self.proxy.url("/api/still"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "/api/still");
    }
}

/// Every status line in a raw HTTP/1.1 exchange.
fn statuses(raw: &str) -> Vec<u16> {
    raw.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| raw.get(i + 9..i + 12)?.parse().ok())
        .collect()
}

/// Send `bytes` on one connection and read what comes back until the proxy closes
/// the connection or is silent for 1 s.
async fn exchange_until_quiet(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ===== request smuggling =====

#[tokio::test]
async fn conflicting_framing_is_never_forwarded_ambiguously() {
    let f = Recorded::new(options()).await;
    let smuggled = "GET /admin/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let chunked_smuggle = format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len());
    // (name, request bytes, must the proxy reject it with 400?)
    let attacks: Vec<(&str, String, bool)> = vec![
        (
            "CL.TE",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}",
                5 + smuggled.len()
            ),
            false,
        ),
        (
            "TE.CL",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{chunked_smuggle}"
            ),
            false,
        ),
        (
            "TE.TE with a non-chunked final coding",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nContent-Length: 4\r\n\r\n{chunked_smuggle}"
            ),
            true,
        ),
        (
            "obfuscated TE value",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\n{chunked_smuggle}"
            ),
            true,
        ),
        (
            "space before the colon",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n{chunked_smuggle}"
            ),
            true,
        ),
        (
            "obs-fold",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nX-Fold: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{chunked_smuggle}"
            ),
            true,
        ),
        (
            "two different Content-Lengths",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: {}\r\n\r\nabcd{smuggled}",
                4 + smuggled.len()
            ),
            true,
        ),
        (
            "Content-Length list",
            format!("POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 40\r\n\r\nabcd{smuggled}"),
            true,
        ),
        (
            "signed Content-Length",
            format!("POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: +4\r\n\r\nabcd{smuggled}"),
            true,
        ),
        (
            "chunk size overflow",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000001\r\nabcd\r\n0\r\n\r\n{smuggled}"
            ),
            false,
        ),
        // Chunk framing with a bare CR or LF: the body fails and the connection ends
        // (what follows is not read as a request; RFC 9112 section 7.1).
        (
            "bare CR in a chunk-size line",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\r\n\r\n{smuggled}"
            ),
            false,
        ),
        (
            "trailer section ended by a bare LF",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\n{smuggled}"
            ),
            false,
        ),
        (
            "trailer line ended by a bare LF",
            format!(
                "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\n\r\n{smuggled}"
            ),
            false,
        ),
        (
            "Transfer-Encoding on HTTP/1.0",
            format!(
                "POST /api/x HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{chunked_smuggle}"
            ),
            true,
        ),
    ];
    for (name, attack, rejected) in &attacks {
        let raw = exchange_until_quiet(f.proxy.addr, attack.as_bytes()).await;
        let codes = statuses(&raw);
        if *rejected {
            assert_eq!(codes.first(), Some(&400), "{name}: {raw}");
        }
        assert!(
            codes.iter().all(|c| [200, 400, 502].contains(c)),
            "{name}: {codes:?}"
        );
    }
    f.idle().await;
    let api = f.api_seen();
    for seen in &api {
        assert!(seen.framing_headers() <= 1, "ambiguous framing: {seen:?}");
        assert!(
            seen.leftover.is_empty(),
            "bytes after the message: {seen:?}"
        );
        assert_eq!(
            (seen.method.as_str(), seen.path.as_str()),
            ("POST", "/api/x")
        );
        let body = String::from_utf8_lossy(&seen.body);
        // A smuggled request may reach the backend only as body bytes, framed.
        if body.contains("/admin/smuggled") {
            assert!(seen.complete, "{seen:?}");
        }
    }
    // Requests with a conflict never reuse the client connection: what follows them
    // is never served as a request of its own.
    assert!(
        f.admin_seen().is_empty(),
        "a smuggled request reached /admin: {:?}",
        f.admin_seen()
    );
    assert_eq!(f.admin.accepted(), 0);
    f.still_serves().await;
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn http2_content_length_mismatch_never_reaches_the_backend_as_extra_bytes() {
    let f = Recorded::new(options()).await;
    // The `h2` crate as client: it sends what it is told, including a DATA frame
    // longer than the announced content-length.
    let tcp = TcpStream::connect(f.proxy.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let request = Request::post(format!("http://{}/api/x", f.proxy.addr))
        .header("content-length", "4")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    let extra = "abcdGET /admin/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    send.send_data(Bytes::from(extra), true).unwrap();
    // The stream is reset (or answered with an error); never a clean 200.
    match within("the h2 response", response).await {
        Ok(r) => {
            let status = r.status();
            let body = r.into_body();
            let mut body = body;
            let mut ok = true;
            while let Some(chunk) = body.data().await {
                ok &= chunk.is_ok();
            }
            assert!(
                status != StatusCode::OK || !ok,
                "a content-length mismatch was answered cleanly"
            );
        }
        Err(e) => assert!(e.is_reset() || e.is_go_away(), "{e}"),
    }
    f.idle().await;
    for seen in f.api_seen() {
        assert!(seen.body.len() <= 4, "more than Content-Length: {seen:?}");
        assert!(seen.leftover.is_empty(), "{seen:?}");
    }
    assert!(f.admin_seen().is_empty());
    f.still_serves().await;
    f.proxy.shutdown().await;
}

// ===== malformed and oversized heads =====

#[tokio::test]
async fn invalid_header_bytes_are_400_and_never_forwarded() {
    let f = Recorded::new(options()).await;
    let heads: [&[u8]; 7] = [
        b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-Bad: a\x7fb\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-Bad: a\rb\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nHost: x\r\nX Bad: ab\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-B(d): ab\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nHost: x\r\n: empty-name\r\n\r\n",
        b"GET /api/x\x00y HTTP/1.1\r\nHost: x\r\n\r\n",
    ];
    for head in heads {
        let raw = raw_exchange(f.proxy.addr, head).await;
        assert_eq!(
            status_of(&raw),
            Some(400),
            "{:?} -> {raw}",
            String::from_utf8_lossy(head)
        );
    }
    assert!(f.api_seen().is_empty(), "{:?}", f.api_seen());
    assert_eq!(f.api.accepted(), 0);
    f.still_serves().await;
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn heads_over_the_limit_are_431() {
    let f = Recorded::new(
        options()
            .max_header_size(8 * 1024)
            .max_header_list_size(8 * 1024),
    )
    .await;
    let big = "v".repeat(16 * 1024);
    // HTTP/1.1: one huge header, and very many small ones.
    let raw = raw_exchange(
        f.proxy.addr,
        format!("GET /api/x HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&raw), Some(431), "{raw}");
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let raw = raw_exchange(
        f.proxy.addr,
        format!("GET /api/x HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&raw), Some(431), "{raw}");
    // HTTP/2.
    let r = h2c_client()
        .get(f.proxy.url("/api/x"))
        .header("x-big", &big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    // Just under the limit passes.
    let r = h1_client()
        .get(f.proxy.url("/api/x"))
        .header("x-big", "v".repeat(6 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(f.api_seen().len(), 1, "only the last request was forwarded");
    f.proxy.shutdown().await;
}

/// Kestrel's `MaxRequestHeaderCount` (here 150, past the 100 the native engine parses
/// in place) on both protocols, and `Http2.MaxRequestHeaderFieldSize` (here 1 KiB) on
/// HTTP/2, its `:path` included: past them 431, at them served; HTTP/1.1's fields are
/// bounded by the head's size alone.
#[tokio::test]
async fn header_counts_and_field_lengths_are_kept_to_their_limits() {
    let f = Recorded::new(
        options()
            .max_request_headers(150)
            .http2_max_header_field_size(Some(1024)),
    )
    .await;
    // HTTP/1.1: `Host`, `Connection` and `n` more.
    let head = |n: usize| {
        let fields: String = (0..n).map(|i| format!("X-H{i}: v\r\n")).collect();
        format!("GET /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{fields}\r\n")
    };
    let raw = raw_exchange(f.proxy.addr, head(148).as_bytes()).await;
    assert_eq!(status_of(&raw), Some(200), "{raw}");
    let raw = raw_exchange(f.proxy.addr, head(149).as_bytes()).await;
    assert_eq!(status_of(&raw), Some(431), "{raw}");
    let long = "v".repeat(2000);
    let r = h1_client()
        .get(f.proxy.url("/api/x"))
        .header("x-long", &long)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // HTTP/2 (the client adds `accept`).
    let h2 = |n: usize, value: &str, path: &str| {
        let mut request = h2c_client().get(f.proxy.url(path));
        for i in 0..n {
            request = request.header(format!("x-h{i}"), value);
        }
        request.send()
    };
    assert_eq!(
        h2(140, "v", "/api/x").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        h2(160, "v", "/api/x").await.unwrap().status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    assert_eq!(
        h2(1, &"v".repeat(1000), "/api/x").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        h2(1, &"v".repeat(1100), "/api/x").await.unwrap().status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    let path = format!("/api/{}", "p".repeat(1100));
    assert_eq!(
        h2(0, "", &path).await.unwrap().status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    assert_eq!(f.api_seen().len(), 4, "only the requests within the limits");
    f.proxy.shutdown().await;
}

// ===== slow clients =====

/// A 300 ms header read timeout and an 800 ms keep-alive timeout.
fn slow_options() -> ServerOptions {
    options()
        .header_read_timeout(Duration::from_millis(300))
        .keep_alive_timeout(KEEP_ALIVE)
}

/// `slow_options`' keep-alive timeout.
const KEEP_ALIVE: Duration = Duration::from_millis(800);

/// Wait (bounded) until the proxy closes `s`; returns how long that took.
async fn closed_within(s: &mut TcpStream, what: &str) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    within(what, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    started.elapsed()
}

#[tokio::test]
async fn slowloris_headers_are_cut_off_by_the_header_read_timeout() {
    let f = Recorded::new(slow_options()).await;
    let mut s = TcpStream::connect(f.proxy.addr).await.unwrap();
    let head = b"GET /api/x HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    s.write_all(head).await.unwrap();
    // One more byte every 50 ms, forever: the connection must be closed anyway.
    let started = Instant::now();
    let closed = within("the slow connection to be closed", async {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if s.write_all(b"a").await.is_err() {
                return started.elapsed();
            }
            let mut buf = [0u8; 256];
            if let Ok(Ok(0)) =
                tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await
            {
                return started.elapsed();
            }
        }
    })
    .await;
    assert!(
        closed < Duration::from_secs(3),
        "closed after {closed:?} for a 300 ms timeout"
    );
    assert!(f.api_seen().is_empty());
    f.still_serves().await;
    f.proxy.shutdown().await;
}

/// Connections that send nothing, or part of a head, are closed by the header read
/// timeout; an idle keep-alive connection by the keep-alive timeout, not before.
#[tokio::test]
async fn silent_connections_are_closed_by_the_header_read_timeout() {
    let f = Recorded::new(slow_options()).await;
    // Nothing at all; half of the HTTP/2 preface; a complete request and then an idle
    // keep-alive connection; the HTTP/1 prefix of a request line.
    let mut silent = TcpStream::connect(f.proxy.addr).await.unwrap();
    let mut preface = TcpStream::connect(f.proxy.addr).await.unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut idle = TcpStream::connect(f.proxy.addr).await.unwrap();
    idle.write_all(b"GET /api/idle HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut partial = TcpStream::connect(f.proxy.addr).await.unwrap();
    partial.write_all(b"GET /api/x HTT").await.unwrap();
    let started = Instant::now();
    for (s, what) in [
        (&mut silent, "a silent connection"),
        (&mut preface, "half an HTTP/2 preface"),
        (&mut partial, "half a request line"),
    ] {
        closed_within(s, what).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "{what}: closed after {took:?}"
        );
    }
    closed_within(&mut idle, "an idle keep-alive connection").await;
    let took = started.elapsed();
    assert!(
        took >= KEEP_ALIVE - Duration::from_millis(100) && took < Duration::from_secs(3),
        "an idle keep-alive connection: closed after {took:?}, for a {KEEP_ALIVE:?} keep-alive timeout"
    );
    assert_eq!(f.api_seen().len(), 1, "the complete request was served");
    f.still_serves().await;
    f.proxy.shutdown().await;
}

/// After a response, a kept connection waits for the keep-alive timeout; a head that
/// begins meanwhile must end within the header read timeout of its first byte (here
/// 200 ms, begun 300 ms into a 990 ms wait: closed at ~500 ms, not at the wait's end).
#[tokio::test]
async fn a_head_begun_on_a_kept_connection_gets_the_header_read_timeout() {
    let options = options()
        .header_read_timeout(Duration::from_millis(200))
        .keep_alive_timeout(Duration::from_millis(990));
    let f = Recorded::new(options).await;
    let mut s = TcpStream::connect(f.proxy.addr).await.unwrap();
    s.write_all(b"GET /api/one HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    assert!(fill(&mut s, &mut buf, 1).await, "the first answer");
    let answered = Instant::now();
    // Past the header read timeout, within the keep-alive one: still open.
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.write_all(b"GET /api/two HTT").await.unwrap();
    closed_within(&mut s, "a kept connection with part of a head").await;
    let took = answered.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(850),
        "closed {took:?} after the response, for a head begun at 300 ms and a 200 ms header read timeout"
    );
    assert_eq!(
        f.api_seen().len(),
        1,
        "only the complete request was served"
    );
    f.still_serves().await;
    f.proxy.shutdown().await;
}

/// A `GET` of `path` with no body.
fn get(path: &str) -> Request<TestBody> {
    Request::get(path)
        .header("host", "x")
        .body(BodyExt::boxed(
            Empty::<Bytes>::new().map_err(|e| match e {}),
        ))
        .unwrap()
}

/// One HTTP/1.1 client connection to `addr` (hyper's), driven on its own task.
async fn h1_connection(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http1::SendRequest<TestBody>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake::<_, TestBody>(TokioIo::new(stream))
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

/// A keep-alive connection that waits past the park time (1 s; the native engine's
/// task ends and a smaller one waits on the socket) and past the header read timeout
/// answers its next request as before (it waits for the keep-alive timeout); a head
/// that starts while it is parked gets the header read timeout from its first byte;
/// and a parked connection closes on shutdown.
#[tokio::test]
async fn parked_keep_alive_connections_resume_and_keep_their_deadlines() {
    const HEADER: Duration = Duration::from_millis(1500);
    const WAIT: Duration = Duration::from_secs(6);
    let b = backend(|req: Request<Incoming>| async move {
        Response::new(full(req.uri().path().to_string()))
    })
    .await;
    let options = options()
        .header_read_timeout(HEADER)
        .keep_alive_timeout(WAIT);
    let proxy = start(&simple_config(&[("d", &b.url())], ""), options).await;

    // Idle past the park time and the header read timeout, twice: every request is
    // answered on the same connection.
    let (mut sender, connection) = h1_connection(proxy.addr).await;
    for path in ["/first", "/after-parking", "/after-parking-again"] {
        let r = within("a request on the kept connection", async {
            let r = sender.send_request(get(path)).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            r.into_body().collect().await.unwrap().to_bytes()
        })
        .await;
        assert_eq!(&r[..], path.as_bytes());
        // The idle time under test (not a synchronisation): past the park time and
        // the header read timeout.
        tokio::time::sleep(Duration::from_millis(2000)).await;
    }

    // Part of a head after parking: closed the header read timeout after its first
    // byte (2 + 1.5 s after the response), long before the keep-alive wait would have
    // ended (6 s).
    let mut raw = TcpStream::connect(proxy.addr).await.unwrap();
    raw.write_all(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    assert!(fill(&mut raw, &mut buf, 1).await);
    let answered = Instant::now();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    raw.write_all(b"GET /two HTT").await.unwrap();
    closed_within(&mut raw, "a parked connection with part of a head").await;
    let took = answered.elapsed();
    let due = Duration::from_millis(2000) + HEADER;
    assert!(
        took >= due - Duration::from_millis(100) && took < due + Duration::from_millis(1200),
        "closed {took:?} after the response, for a head begun 2 s after it and a {HEADER:?} header read timeout"
    );

    // Shutdown closes a parked connection at once.
    let mut parked = TcpStream::connect(proxy.addr).await.unwrap();
    parked
        .write_all(b"GET /three HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    assert!(fill(&mut parked, &mut buf, 1).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(sender);
    let _ = within("the client connection to end", connection).await;
    proxy.shutdown().await;
    let took = closed_within(&mut parked, "a parked connection on shutdown").await;
    assert!(took < HEADER, "closed after {took:?}");
}

/// The header read timeout bounds only the wait for a request head: a response that
/// streams, or an upload that trickles, for longer than the timeout is not cut, and the
/// keep-alive wait after it starts when the response has ended.
#[tokio::test]
async fn slow_bodies_outlive_the_header_read_timeout_and_idle_starts_after_them() {
    let chunk_every = Duration::from_millis(100);
    let b = backend(move |req: Request<Incoming>| async move {
        if req.uri().path() == "/stream" {
            // Eight chunks over 800 ms: well past the 300 ms header read timeout.
            let stream = futures_util::stream::unfold(0u8, move |i| async move {
                if i == 8 {
                    return None;
                }
                tokio::time::sleep(chunk_every).await;
                Some((
                    Ok::<_, BoxError>(Frame::data(Bytes::from(vec![b'a' + i]))),
                    i + 1,
                ))
            });
            Response::new(BodyExt::boxed(StreamBody::new(stream)))
        } else {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            Response::new(full(format!("got {}", body.len())))
        }
    })
    .await;
    let proxy = start(&simple_config(&[("d", &b.url())], ""), slow_options()).await;

    let (mut sender, connection) = h1_connection(proxy.addr).await;

    let started = Instant::now();
    let r = within("the slow response", async {
        let r = sender.send_request(get("/stream")).await.unwrap();
        r.into_body().collect().await.unwrap().to_bytes()
    })
    .await;
    assert_eq!(&r[..], b"abcdefgh", "the whole slow response arrived");
    assert!(started.elapsed() > Duration::from_millis(700));

    // An upload trickling for 500 ms on the same connection.
    let upload = futures_util::stream::unfold(0u8, move |i| async move {
        if i == 5 {
            return None;
        }
        tokio::time::sleep(chunk_every).await;
        Some((
            Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"0123456789"))),
            i + 1,
        ))
    });
    let post = Request::post("/upload")
        .header("host", "x")
        .body(BodyExt::boxed(StreamBody::new(upload)))
        .unwrap();
    let r = within("the slow upload", async {
        let r = sender.send_request(post).await.unwrap();
        r.into_body().collect().await.unwrap().to_bytes()
    })
    .await;
    assert_eq!(&r[..], b"got 50", "the whole slow upload arrived");

    // Idle for half the timeout after that response: still open.
    tokio::time::sleep(Duration::from_millis(150)).await;
    within("the keep-alive connection to be ready", sender.ready())
        .await
        .expect("the connection is still open");
    let r = within("a request after a short idle", async {
        let r = sender.send_request(get("/stream")).await.unwrap();
        r.into_body().collect().await.unwrap().to_bytes()
    })
    .await;
    assert_eq!(&r[..], b"abcdefgh");

    // Then idle past the timeout: the proxy closes it.
    let idle = Instant::now();
    within("the idle connection to be closed", connection)
        .await
        .unwrap()
        .expect("closed cleanly");
    let took = idle.elapsed();
    assert!(
        took >= KEEP_ALIVE - Duration::from_millis(100) && took < Duration::from_secs(3),
        "closed {took:?} after the last response for a {KEEP_ALIVE:?} keep-alive timeout"
    );
    proxy.shutdown().await;
}

// ===== clients that go away =====

/// `/gate*` waits forever (until cancelled); `/stream*` sends a first chunk and
/// then waits; anything else reads the whole request body. Each reports its start on
/// `started` and, when its handler or body is dropped, whether it finished on `ended`
/// (false: cancelled, the proxy dropped the upstream request).
struct Gated {
    proxy: TestProxy,
    _backend: Backend,
    started: mpsc::UnboundedReceiver<String>,
    ended: mpsc::UnboundedReceiver<(String, bool)>,
    /// Passive-health counts expected now.
    recorded: (u64, u64),
}

struct EndGuard {
    what: String,
    finished: bool,
    tx: mpsc::UnboundedSender<(String, bool)>,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let _ = self.tx.send((self.what.clone(), self.finished));
    }
}

impl Gated {
    async fn new() -> Gated {
        Gated::with_options(options()).await
    }

    async fn with_options(options: ServerOptions) -> Gated {
        let (started_tx, started) = mpsc::unbounded_channel();
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let release = Arc::new(Notify::new());
        let b = backend(move |req: Request<Incoming>| {
            let started_tx = started_tx.clone();
            let ended_tx = ended_tx.clone();
            let rel = release.clone();
            async move {
                let path = req.uri().path().to_owned();
                let mut guard = EndGuard {
                    what: path.clone(),
                    finished: false,
                    tx: ended_tx,
                };
                let _ = started_tx.send(path.clone());
                if path.starts_with("/gate") {
                    rel.notified().await;
                    guard.finished = true;
                    Response::new(full("released"))
                } else if path.starts_with("/stream") {
                    let stream = futures_util::stream::unfold(Some(guard), |g| async move {
                        let mut g = g?;
                        if !g.finished {
                            g.finished = true;
                            let first = Frame::data(Bytes::from_static(b"first"));
                            return Some((Ok::<_, BoxError>(first), Some(g)));
                        }
                        std::future::pending::<()>().await;
                        None
                    });
                    Response::new(BodyExt::boxed(StreamBody::new(stream)))
                } else {
                    // Read the whole body (fails when the client goes away).
                    let body = req.into_body().collect().await;
                    guard.finished = body.is_ok();
                    Response::new(full("read"))
                }
            }
        })
        .await;
        let config = simple_config(
            &[("d", &b.url())],
            r#""HealthCheck": { "Passive": { "Enabled": true } },"#,
        );
        Gated {
            proxy: start(&config, options).await,
            _backend: b,
            started,
            ended,
            recorded: (0, 0),
        }
    }

    async fn started(&mut self) -> String {
        within("the backend request to start", self.started.recv())
            .await
            .unwrap()
    }

    async fn ended(&mut self) -> (String, bool) {
        within("the backend request to end", self.ended.recv())
            .await
            .unwrap()
    }

    /// Like `assert_clean`, for a request the client abandoned once it reached the
    /// destination (before or after the response head, or mid-upload): counted exactly
    /// once in the window's total, never as a failure (as YARP counts
    /// `RequestCanceled`, `ResponseBodyClient` and `RequestBodyClient`).
    async fn assert_abandoned(&mut self, what: &str) {
        self.recorded.1 += 1;
        self.assert_clean(what).await;
    }

    /// Counters at 0, nothing recorded against the destination but `self.recorded`,
    /// still serving.
    async fn assert_clean(&mut self, what: &str) {
        self.proxy.wait_idle("c", "d").await;
        // The record is made just after the counters' release.
        let expected = self.recorded.1;
        within("the passive records", async {
            while self.proxy.passive("c", "d").1 < expected {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let (failed, total) = self.proxy.passive("c", "d");
        assert_eq!(failed, self.recorded.0, "{what}: counted as a failure");
        assert_eq!(
            total, self.recorded.1,
            "{what}: requests recorded (expected {:?})",
            self.recorded
        );
        let r = h1_client().get(self.proxy.url("/ok")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "read");
        assert_eq!(self.started().await, "/ok");
        assert_eq!(self.ended().await, ("/ok".to_owned(), true));
        self.proxy.wait_idle("c", "d").await;
        self.recorded.1 += 1;
        assert_eq!(self.proxy.passive("c", "d"), self.recorded);
    }
}

/// One HTTP/2 connection to the proxy, driven in the background.
async fn h2_connection(
    addr: std::net::SocketAddr,
) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

#[tokio::test]
async fn client_gone_during_the_head_reaches_no_backend() {
    let mut g = Gated::new().await;
    for part in [
        &b"GET /gate HTTP/1.1\r\nHost: x\r\nX-Half"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM",
    ] {
        let mut s = TcpStream::connect(g.proxy.addr).await.unwrap();
        s.write_all(part).await.unwrap();
        drop(s);
    }
    // Give the proxy the chance to (wrongly) forward something.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        g.started.try_recv().is_err(),
        "a half request was forwarded"
    );
    g.assert_clean("half a head").await;
    g.proxy.shutdown().await;
}

#[tokio::test]
async fn client_gone_during_the_body_cancels_the_upstream_request() {
    let mut g = Gated::new().await;
    // HTTP/1.1: 10 of 1000 announced bytes, then gone.
    let mut s = TcpStream::connect(g.proxy.addr).await.unwrap();
    s.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    assert_eq!(g.started().await, "/upload");
    drop(s);
    assert_eq!(g.ended().await, ("/upload".to_owned(), false));
    g.assert_abandoned("h1 upload").await;

    // HTTP/2: the stream is reset mid-body.
    let tcp = TcpStream::connect(g.proxy.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let request = Request::post(format!("http://{}/upload2", g.proxy.addr))
        .body(())
        .unwrap();
    let (_response, mut send) = client.send_request(request, false).unwrap();
    send.send_data(Bytes::from_static(b"0123456789"), false)
        .unwrap();
    assert_eq!(g.started().await, "/upload2");
    send.send_reset(h2::Reason::CANCEL);
    assert_eq!(g.ended().await, ("/upload2".to_owned(), false));
    g.assert_abandoned("h2 upload").await;
    g.proxy.shutdown().await;
}

/// A request body trickling in slower than the minimum data rate (Kestrel's
/// `MinRequestBodyDataRate`) is answered `408` once the time spent waiting for it is
/// past the grace period, the connection closed and the destination's request
/// cancelled; a body that pauses within the grace period is not cut. (Native engine;
/// hyper's keeps no minimum rate.)
#[tokio::test]
async fn a_request_body_slower_than_the_minimum_rate_is_answered_408() {
    let rate = MinDataRate::new(1_000, Duration::from_secs(1));
    let mut g = Gated::with_options(options().min_request_body_data_rate(Some(rate))).await;
    let native = Http1Engine::from_env() == Http1Engine::Native;

    // 10 of 1 000 bytes, then the rest after a pause within the grace period: served.
    let mut s = TcpStream::connect(g.proxy.addr).await.unwrap();
    s.write_all(b"POST /paused HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    assert_eq!(g.started().await, "/paused");
    tokio::time::sleep(Duration::from_millis(250)).await;
    s.write_all(&[b'a'; 990]).await.unwrap();
    let answer = within("the paused body's answer", read_response(&mut s)).await;
    assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
    assert_eq!(g.ended().await, ("/paused".to_owned(), true));
    g.proxy.wait_idle("c", "d").await;
    g.recorded.1 += 1;

    // Then a byte every 50 ms (20 bytes a second) on the same connection.
    s.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    assert_eq!(g.started().await, "/upload");
    let (mut read, mut write) = s.into_split();
    let trickle = tokio::spawn(async move {
        while write.write_all(b"a").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let started = Instant::now();
    if native {
        let mut answer = Vec::new();
        within("the 408 and the close", read.read_to_end(&mut answer))
            .await
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(700),
            "cut within the grace period"
        );
    } else {
        // Past the grace period and then some: hyper's engine still reads it.
        let mut byte = [0u8; 1];
        let got = tokio::time::timeout(Duration::from_secs(2), read.read(&mut byte)).await;
        assert!(got.is_err(), "answered or closed: {got:?}");
    }
    trickle.abort();
    drop(read);
    assert_eq!(g.ended().await, ("/upload".to_owned(), false));
    g.assert_abandoned("a body below the minimum rate").await;

    // A body that stops: the connection is woken to answer it.
    if native {
        let mut s = TcpStream::connect(g.proxy.addr).await.unwrap();
        s.write_all(b"POST /stopped HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
            .await
            .unwrap();
        assert_eq!(g.started().await, "/stopped");
        let mut answer = Vec::new();
        within("the 408 and the close", s.read_to_end(&mut answer))
            .await
            .unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 408"));
        assert_eq!(g.ended().await, ("/stopped".to_owned(), false));
        g.assert_abandoned("a body that stopped").await;
    }
    g.proxy.shutdown().await;
}

/// HTTP/2 request bodies are held to the minimum data rate over the connection (as
/// Kestrel does for HTTP/2: the bytes of its bodies together, against the time their
/// readers waited for the client): a body that pauses within the grace period is
/// served; one trickling in slower, or stopping, closes the connection with GOAWAY
/// (INTERNAL_ERROR) once the waits are past the grace period, and the destination's
/// request is cancelled. (Native engine; hyper's keeps no minimum rate.)
#[tokio::test]
async fn http2_request_bodies_slower_than_the_minimum_rate_close_the_connection() {
    let rate = MinDataRate::new(1_000, Duration::from_secs(1));
    let mut g = Gated::with_options(options().min_request_body_data_rate(Some(rate))).await;
    let native = Http2Engine::from_env() == Http2Engine::Native;
    let addr = g.proxy.addr;
    let post = |path: &str| {
        Request::post(format!("http://{addr}{path}"))
            .header("content-length", "1000")
            .body(())
            .unwrap()
    };
    let connect = || async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        (client, tokio::spawn(conn))
    };

    // 10 of 1 000 bytes, then the rest after a pause within the grace period: served.
    let (client, conn) = connect().await;
    let mut client = client.ready().await.unwrap();
    let (response, mut send) = client.send_request(post("/paused"), false).unwrap();
    send.send_data(Bytes::from_static(b"0123456789"), false)
        .unwrap();
    assert_eq!(g.started().await, "/paused");
    tokio::time::sleep(Duration::from_millis(250)).await;
    send.send_data(Bytes::from(vec![b'a'; 990]), true).unwrap();
    let response = within("the paused body's answer", response).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(g.ended().await, ("/paused".to_owned(), true));
    g.proxy.wait_idle("c", "d").await;
    g.recorded.1 += 1;

    // Then, on the same connection, a byte every 50 ms (20 bytes a second).
    let mut client = client.ready().await.unwrap();
    let (response, mut send) = client.send_request(post("/upload"), false).unwrap();
    send.send_data(Bytes::from_static(b"0123456789"), false)
        .unwrap();
    assert_eq!(g.started().await, "/upload");
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if send.send_data(Bytes::from_static(b"a"), false).is_err() {
                break;
            }
        }
    });
    if native {
        let ended = within("the connection's end", conn).await.unwrap();
        let e = ended.expect_err("the connection ended without an error");
        assert!(e.is_go_away(), "{e:?}");
        assert_eq!(e.reason(), Some(h2::Reason::INTERNAL_ERROR), "{e:?}");
        assert!(
            started.elapsed() >= Duration::from_millis(700),
            "cut within the grace period"
        );
        assert!(within("the response", response).await.is_err());
    } else {
        // Past the grace period and then some: hyper's engine still reads it.
        let got = tokio::time::timeout(Duration::from_secs(2), response).await;
        assert!(got.is_err(), "answered or reset: {got:?}");
        conn.abort();
    }
    trickle.abort();
    drop(client);
    assert_eq!(g.ended().await, ("/upload".to_owned(), false));
    g.assert_abandoned("an HTTP/2 body below the minimum rate")
        .await;

    // A body that stops: the connection is woken to close.
    if native {
        let (client, conn) = connect().await;
        let mut client = client.ready().await.unwrap();
        let (_response, mut send) = client.send_request(post("/stopped"), false).unwrap();
        send.send_data(Bytes::from_static(b"0123456789"), false)
            .unwrap();
        assert_eq!(g.started().await, "/stopped");
        let e = within("the connection's end", conn)
            .await
            .unwrap()
            .expect_err("the connection ended without an error");
        assert_eq!(e.reason(), Some(h2::Reason::INTERNAL_ERROR), "{e:?}");
        assert_eq!(g.ended().await, ("/stopped".to_owned(), false));
        g.assert_abandoned("an HTTP/2 body that stopped").await;
    }
    g.proxy.shutdown().await;
}

/// The size of `/big`, the answer of [`big_response_backend`].
const BIG: usize = 24 << 20;

/// A proxy keeping a minimum response rate of 1 MB a second (2 s of grace) in front of
/// a destination answering every request with [`BIG`] bytes, in 64 KiB chunks; the
/// destination tells whether each response body was sent to its end when it is dropped.
async fn big_response_proxy() -> (TestProxy, Backend, mpsc::UnboundedReceiver<bool>) {
    const CHUNK: usize = 64 * 1024;
    struct Ends(mpsc::UnboundedSender<bool>, bool);
    impl Drop for Ends {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }
    let (ends_tx, ends) = mpsc::unbounded_channel::<bool>();
    let b = backend(move |_req: Request<Incoming>| {
        let ends = Ends(ends_tx.clone(), false);
        async move {
            let chunks = futures_util::stream::unfold((0, ends), |(sent, mut ends)| async move {
                if sent == BIG {
                    return None;
                }
                // The last chunk: hyper may not poll past it, the length being met.
                ends.1 = sent + CHUNK == BIG;
                let chunk = Frame::data(Bytes::from(vec![b'x'; CHUNK]));
                Some((Ok::<_, BoxError>(chunk), (sent + CHUNK, ends)))
            });
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(chunks)));
            response.headers_mut().insert("content-length", BIG.into());
            response
        }
    })
    .await;
    let rate = MinDataRate::new(1_000_000, Duration::from_secs(2));
    let proxy = start(
        &simple_config(&[("d", &b.url())], ""),
        options().min_response_data_rate(Some(rate)),
    )
    .await;
    (proxy, b, ends)
}

/// A client that stops reading a response is cut once a write to it has waited past
/// what the minimum response data rate allows (Kestrel's `MinResponseDataRate`), and the
/// destination's response is dropped; one that reads on gets all of it. (Native engine;
/// hyper's keeps no minimum.)
#[tokio::test]
async fn a_client_taking_a_response_slower_than_the_minimum_rate_is_cut() {
    let (proxy, _b, mut ends) = big_response_proxy().await;

    // A client that reads: the whole body.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    within("the whole response", async {
        // The head, then the body.
        while got < BIG + 20 {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {got} bytes");
            got += n;
        }
    })
    .await;
    assert!(within("the body's end", ends.recv()).await.unwrap());

    // One that stops reading after the head, with a small receive buffer.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    if Http1Engine::from_env() == Http1Engine::Native {
        // The response is dropped before the client reads on, and the connection ends
        // short of the body.
        let ended = within("the response to be dropped", ends.recv()).await;
        assert_eq!(ended, Some(false));
        let mut read = 0;
        within("the close", async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
        })
        .await;
        assert!(read < BIG, "the whole body came");
    } else {
        let ended = tokio::time::timeout(Duration::from_secs(3), ends.recv()).await;
        assert!(ended.is_err(), "the response ended: {ended:?}");
    }
    drop(s);
    proxy.shutdown().await;
}

/// HTTP/2: a client that stops reading its connection is cut once writes to it have
/// waited past what the minimum response data rate allows (over the connection, as
/// Kestrel keeps it for HTTP/2), and the destination's response is dropped; one that
/// reads on gets all of it. (Native engine; hyper's keeps no minimum.)
#[tokio::test]
async fn an_http2_client_taking_responses_slower_than_the_minimum_rate_is_cut() {
    let (proxy, _b, mut ends) = big_response_proxy().await;

    // A client that reads: the whole body.
    let body = within("the whole response", async {
        let r = h2c_client().get(proxy.url("/big")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.bytes().await.unwrap()
    })
    .await;
    assert_eq!(body.len(), BIG);
    assert!(within("the body's end", ends.recv()).await.unwrap());

    // One that stops reading once the head has come, with a small receive buffer and
    // windows open wide (flow control does not stop the proxy: the socket does).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(proxy.addr).await.unwrap();
    let (client, mut conn) = h2::client::Builder::new()
        .initial_window_size(i32::MAX as u32)
        .initial_connection_window_size(i32::MAX as u32)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let mut client = client.ready().await.unwrap();
    let request = Request::get(format!("http://{}/big", proxy.addr))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = within("the response head", async {
        tokio::select! {
            response = response => response.unwrap(),
            ended = &mut conn => panic!("the connection ended: {ended:?}"),
        }
    })
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    // `conn` is no longer polled: nothing more is read.
    if Http2Engine::from_env() == Http2Engine::Native {
        let ended = within("the response to be dropped", ends.recv()).await;
        assert_eq!(ended, Some(false));
    } else {
        let ended = tokio::time::timeout(Duration::from_secs(3), ends.recv()).await;
        assert!(ended.is_err(), "the response ended: {ended:?}");
    }
    drop((response, client, conn));
    proxy.shutdown().await;
}

#[tokio::test]
async fn client_gone_while_waiting_cancels_the_upstream_request() {
    let mut g = Gated::new().await;
    // HTTP/1.1: the connection closes.
    let mut s = TcpStream::connect(g.proxy.addr).await.unwrap();
    s.write_all(b"GET /gate1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(g.started().await, "/gate1");
    drop(s);
    assert_eq!(g.ended().await, ("/gate1".to_owned(), false));
    g.assert_abandoned("h1 wait").await;

    // HTTP/2: the stream is reset, the connection stays.
    let mut send = h2_connection(g.proxy.addr).await;
    let req = Request::get(format!("http://{}/gate2", g.proxy.addr))
        .body(Empty::new())
        .unwrap();
    let pending = send.send_request(req);
    let pending = tokio::spawn(pending);
    assert_eq!(g.started().await, "/gate2");
    pending.abort();
    assert_eq!(g.ended().await, ("/gate2".to_owned(), false));
    g.assert_abandoned("h2 wait").await;
    let req = Request::get(format!("http://{}/after", g.proxy.addr))
        .body(Empty::new())
        .unwrap();
    let r = within("a later stream", send.send_request(req))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    g.proxy.shutdown().await;
}

#[tokio::test]
async fn client_gone_mid_response_releases_everything() {
    let mut g = Gated::new().await;
    // HTTP/1.1: head and first chunk read, then the connection closes.
    let mut s = TcpStream::connect(g.proxy.addr).await.unwrap();
    s.write_all(b"GET /stream1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(g.started().await, "/stream1");
    let mut got = Vec::new();
    within("the first chunk", async {
        let mut buf = [0u8; 1024];
        while position(&got, b"first").is_none() {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    drop(s);
    assert_eq!(g.ended().await, ("/stream1".to_owned(), true));
    g.assert_abandoned("h1 mid-response").await;

    // HTTP/2: the response body is dropped (stream reset), the connection stays.
    let mut send = h2_connection(g.proxy.addr).await;
    let req = Request::get(format!("http://{}/stream2", g.proxy.addr))
        .body(Empty::new())
        .unwrap();
    let r = within("the head", send.send_request(req)).await.unwrap();
    assert_eq!(g.started().await, "/stream2");
    let mut body = r.into_body();
    let first = within("the first chunk", body.frame())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "first");
    drop(body);
    assert_eq!(g.ended().await, ("/stream2".to_owned(), true));
    g.assert_abandoned("h2 mid-response").await;
    g.proxy.shutdown().await;
}

// ===== Host spoofing =====

/// `admin` only for `Host: admin.internal`, `public` for the rest; both echo.
async fn host_fixture() -> (TestProxy, Backend) {
    let b = echo_backend().await;
    let config = format!(
        r#"{{
  "Routes": {{
    "admin": {{ "ClusterId": "admin", "Match": {{ "Hosts": ["admin.internal"], "Path": "/{{**rest}}" }} }},
    "public": {{ "ClusterId": "public", "Match": {{ "Path": "/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "admin": {{ "Destinations": {{ "a": {{ "Address": "{0}/admin-side" }} }} }},
    "public": {{ "Destinations": {{ "a": {{ "Address": "{0}/public-side" }} }} }}
  }}
}}"#,
        b.url()
    );
    (start(&config, options()).await, b)
}

/// (status, side the request reached, X-Forwarded-Host the backend saw, Host it saw)
async fn host_probe(p: &TestProxy, request: &str) -> (u16, String, String, String) {
    let raw = raw_exchange(p.addr, request.as_bytes()).await;
    let status = status_of(&raw).unwrap_or(0);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let side = body
        .split_once(' ')
        .map(|(_, p)| p.trim_start_matches('/').split('/').next().unwrap_or(""))
        .unwrap_or("")
        .to_owned();
    (
        status,
        side,
        header("x-echo-x-forwarded-host"),
        header("x-echo-host"),
    )
}

#[tokio::test]
async fn host_spoofing_cannot_split_the_route_from_what_the_backend_is_told() {
    let (p, b) = host_fixture().await;
    let backend_host = b.addr.to_string();
    let cases = [
        // (request, side, X-Forwarded-Host)
        (
            "GET /x HTTP/1.1\r\nHost: admin.internal\r\nConnection: close\r\n\r\n",
            "admin-side",
            "admin.internal",
        ),
        (
            "GET /x HTTP/1.1\r\nHost: ADMIN.Internal.\r\nConnection: close\r\n\r\n",
            "admin-side",
            "ADMIN.Internal.",
        ),
        (
            "GET /x HTTP/1.1\r\nHost: public.example\r\nConnection: close\r\n\r\n",
            "public-side",
            "public.example",
        ),
        // Absolute form: the URI's authority is the request's host (RFC 9112 3.2.2),
        // for the route and for X-Forwarded-Host alike.
        (
            "GET http://public.example/x HTTP/1.1\r\nHost: admin.internal\r\nConnection: close\r\n\r\n",
            "public-side",
            "public.example",
        ),
        (
            "GET http://admin.internal/x HTTP/1.1\r\nHost: public.example\r\nConnection: close\r\n\r\n",
            "admin-side",
            "admin.internal",
        ),
        // Look-alikes stay public.
        (
            "GET /x HTTP/1.1\r\nHost: admin.internal.evil\r\nConnection: close\r\n\r\n",
            "public-side",
            "admin.internal.evil",
        ),
        (
            "GET /x HTTP/1.1\r\nHost: evil@admin.internal\r\nConnection: close\r\n\r\n",
            "public-side",
            "evil@admin.internal",
        ),
        (
            "GET /x HTTP/1.1\r\nHost: admin.internal..\r\nConnection: close\r\n\r\n",
            "public-side",
            "admin.internal..",
        ),
    ];
    for (request, side, forwarded_host) in cases {
        let (status, seen_side, xfh, host) = host_probe(&p, request).await;
        assert_eq!(
            (status, seen_side.as_str(), xfh.as_str()),
            (200, side, forwarded_host),
            "{request:?}"
        );
        assert_eq!(
            host, backend_host,
            "the backend sees its own Host: {request:?}"
        );
    }
    // Two Host headers: which one is meant is ambiguous (RFC 9112 3.2: 400).
    let (status, ..) = host_probe(
        &p,
        "GET /x HTTP/1.1\r\nHost: public.example\r\nHost: admin.internal\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400, "duplicate Host");
    // No Host at all on HTTP/1.1: 400 too (RFC 9112 3.2); HTTP/1.0 needs none.
    let (status, ..) = host_probe(&p, "GET /x HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status, 400, "no Host");
    let (status, ..) = host_probe(
        &p,
        "GET http://public.example/x HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400, "absolute form without Host");
    let (status, ..) = host_probe(&p, "GET /x HTTP/1.0\r\n\r\n").await;
    assert_ne!(status, 400, "HTTP/1.0 without Host");
    p.shutdown().await;
}

#[tokio::test]
async fn http2_authority_wins_over_a_spoofed_host_header() {
    let (p, _b) = host_fixture().await;
    let tcp = TcpStream::connect(p.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    for (authority, host, side) in [
        ("public.example", "admin.internal", "public-side"),
        ("admin.internal", "public.example", "admin-side"),
    ] {
        let req = Request::get(format!("http://{authority}/x"))
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        let r = send.send_request(req).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["x-echo-x-forwarded-host"], authority);
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&body).starts_with(&format!("GET /{side}/")),
            "{authority} / {host}: {body:?}"
        );
    }
    p.shutdown().await;
}

// ===== path tricks =====

#[tokio::test]
async fn path_tricks_cannot_escape_their_route() {
    let b = echo_backend().await;
    let config = format!(
        r#"{{
  "Routes": {{
    "api": {{ "ClusterId": "api", "Match": {{ "Path": "/api/{{**rest}}" }} }},
    "admin": {{ "ClusterId": "admin", "Match": {{ "Path": "/admin/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "api": {{ "Destinations": {{ "a": {{ "Address": "{0}/api-side" }} }} }},
    "admin": {{ "Destinations": {{ "a": {{ "Address": "{0}/admin-side" }} }} }}
  }}
}}"#,
        b.url()
    );
    let p = start(&config, options()).await;
    // (raw request target, the path the backend must see (None: 404))
    let cases: [(&str, Option<&str>); 18] = [
        ("/API/../ADMIN/x", Some("/admin-side/ADMIN/x")),
        ("/api/%2E%2e/admin/x", Some("/admin-side/admin/x")),
        ("/api/.%2E/admin/x", Some("/admin-side/admin/x")),
        ("/api/%2e/x", Some("/api-side/api/x")),
        ("/api//..//admin/x", Some("/admin-side/admin/x")),
        ("/api/x/../../admin", Some("/admin-side/admin")),
        // An encoded slash is data: it neither splits nor climbs, and reaches the
        // backend still encoded.
        ("/api/..%2Fadmin", Some("/api-side/api/..%2Fadmin")),
        (
            "/api/x%2F..%2F..%2Fadmin",
            Some("/api-side/api/x%2F..%2F..%2Fadmin"),
        ),
        ("/admin%2Fx", None),
        // Double encoding is decoded once: `%252e%252e` is the text `%2e%2e`.
        (
            "/api/%252e%252e/admin",
            Some("/api-side/api/%252e%252e/admin"),
        ),
        // Look-alike segments are not dot segments.
        ("/api/.../admin", Some("/api-side/api/.../admin")),
        ("/api/..;/admin", Some("/api-side/api/..;/admin")),
        ("/admin./x", None),
        ("/admin%20/x", None),
        ("/%61dmin/x", Some("/admin-side/%61dmin/x")),
        // Nothing climbs above the root.
        ("/../../../admin/x", Some("/admin-side/admin/x")),
        ("/api/../../../../etc/passwd", None),
        // Absolute form: the same rules.
        ("http://x/api/../admin/y", Some("/admin-side/admin/y")),
    ];
    for (target, expected) in cases {
        let raw = raw_exchange(
            p.addr,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await;
        let status = status_of(&raw);
        match expected {
            None => assert_eq!(status, Some(404), "{target}: {raw}"),
            Some(path) => {
                assert_eq!(status, Some(200), "{target}: {raw}");
                let body = raw.split_once("\r\n\r\n").unwrap().1;
                assert_eq!(body, format!("GET {path}"), "{target}");
            }
        }
    }
    // The same over HTTP/2, where the client sends `:path` verbatim.
    let tcp = TcpStream::connect(p.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    for (target, expected) in [
        ("/api/../admin/x", "/admin-side/admin/x"),
        ("/api/%2e%2e/admin/x", "/admin-side/admin/x"),
        ("/api/..%2Fadmin", "/api-side/api/..%2Fadmin"),
    ] {
        let req = Request::get(format!("http://x{target}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let r = send.send_request(req).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{target}");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("GET {expected}"), "h2 {target}");
    }
    p.shutdown().await;
}

#[tokio::test]
async fn odd_request_targets_do_not_hurt_the_destination() {
    let b = echo_backend().await;
    let config = simple_config(
        &[("d", &b.url())],
        r#""HealthCheck": { "Passive": { "Enabled": true } },"#,
    );
    let p = start(&config, options()).await;
    for request in [
        "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "CONNECT admin.internal:443 HTTP/1.1\r\nHost: admin.internal:443\r\nConnection: close\r\n\r\n",
        "GET /x?a=%zz&%00=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ] {
        let raw = raw_exchange(p.addr, request.as_bytes()).await;
        let status = status_of(&raw);
        assert!(status.is_some(), "{request:?}: no answer");
    }
    p.wait_idle("c", "d").await;
    let (failed, _) = p.passive("c", "d");
    assert_eq!(
        failed, 0,
        "a client's odd request counted against the destination"
    );
    let r = h1_client().get(p.url("/still")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    p.shutdown().await;
}

// ===== forwarded headers and hop-by-hop smuggling =====

#[tokio::test]
async fn spoofed_forwarding_headers_are_replaced() {
    let b = echo_backend().await;
    let p = start(&simple_config(&[("d", &b.url())], ""), options()).await;
    for (client, name) in [(h1_client(), "h1"), (h2c_client(), "h2c")] {
        let r = client
            .get(p.url("/x"))
            .header("X-Forwarded-For", "6.6.6.6")
            .header("x-forwarded-for", "7.7.7.7, 8.8.8.8")
            .header("X-FORWARDED-PROTO", "https")
            .header("X-Forwarded-Host", "admin.internal")
            .header("X-Forwarded-Prefix", "/admin")
            .header("Forwarded", "for=6.6.6.6;proto=https;host=admin.internal")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{name}");
        let h = r.headers();
        let all = |n: &str| {
            h.get_all(n)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("x-echo-x-forwarded-for"), ["127.0.0.1"], "{name}");
        assert_eq!(all("x-echo-x-forwarded-proto"), ["http"], "{name}");
        assert_eq!(
            all("x-echo-x-forwarded-host"),
            [p.addr.to_string()],
            "{name}"
        );
        assert!(all("x-echo-x-forwarded-prefix").is_empty(), "{name}");
        assert!(all("x-echo-forwarded").is_empty(), "{name}");
    }
    p.shutdown().await;
}

#[tokio::test]
async fn connection_tokens_cannot_strip_what_the_proxy_adds() {
    let seen_body = Arc::new(AtomicUsize::new(0));
    let sb = seen_body.clone();
    let b = backend(move |req: Request<Incoming>| {
        let sb = sb.clone();
        async move {
            let mut resp = Response::builder();
            for (name, value) in req.headers() {
                resp = resp.header(format!("x-echo-{name}"), value);
            }
            let body = req.into_body().collect().await.unwrap().to_bytes();
            sb.fetch_max(body.len(), Ordering::SeqCst);
            resp.header("connection", "x-backend-secret")
                .header("x-backend-secret", "leak")
                .header("x-kept", "1")
                .body(full(body))
                .unwrap()
        }
    })
    .await;
    let p = start(&simple_config(&[("d", &b.url())], ""), options()).await;
    let request = "POST /x HTTP/1.1\r\nHost: front.example\r\n\
        Connection: keep-alive, x-forwarded-for, x-forwarded-proto, x-forwarded-host, host, content-length, x-private\r\n\
        X-Private: secret\r\nX-Other: kept\r\nContent-Length: 5\r\n\r\nhello\
        GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let raw = raw_exchange(p.addr, request.as_bytes()).await;
    let first = raw.split("HTTP/1.1 ").nth(1).expect("a first response");
    let header = |name: &str| {
        first
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(first.starts_with("200"), "{raw}");
    assert_eq!(header("x-echo-x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(header("x-echo-x-forwarded-proto"), ["http"]);
    assert_eq!(header("x-echo-x-forwarded-host"), ["front.example"]);
    assert_eq!(header("x-echo-host"), [b.addr.to_string()]);
    assert!(header("x-echo-x-private").is_empty(), "named in Connection");
    assert_eq!(header("x-echo-x-other"), ["kept"]);
    assert!(header("x-echo-connection").is_empty());
    assert_eq!(
        seen_body.load(Ordering::SeqCst),
        5,
        "the body kept its framing"
    );
    // Response side: the backend's Connection tokens are honoured too.
    assert!(header("x-backend-secret").is_empty(), "{first}");
    assert_eq!(header("x-kept"), ["1"]);
    // The pipelined second request was served as one of its own.
    assert_eq!(statuses(&raw), [200, 200], "{raw}");
    p.shutdown().await;
}
