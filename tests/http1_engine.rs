//! fuseway's own HTTP/1.1 engine against hyper's, end to end over real sockets: the
//! same raw requests sent to a proxy on each engine must get the same answers (status,
//! fields, decoded body) and reach the destination the same way; and what RFC 9112
//! tells an edge proxy to refuse, the native engine refuses with the right status and
//! a closed connection, forwarding nothing.

mod common;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use fuseway::server::{Http1Engine, ServerOptions};
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn engine(engine: Http1Engine) -> ServerOptions {
    options()
        .http1_engine(engine)
        .max_request_line(1024)
        .max_header_size(8 * 1024)
}

/// A destination that answers with what it saw: method, target, version, framing
/// fields, body and trailers; `/stream` answers with a body of unknown length; every
/// request is counted.
async fn seeing_backend(count: Arc<AtomicUsize>) -> Backend {
    backend(move |req: Request<Incoming>| {
        let count = count.clone();
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            let head = format!(
                "{} {} {:?} cl={:?} te={:?} expect={:?}",
                req.method(),
                req.uri(),
                req.version(),
                req.headers().get("content-length"),
                req.headers().get("transfer-encoding"),
                req.headers().get("expect"),
            );
            if req.uri().path() == "/stream" {
                let frames = ["one ", "two ", "three"]
                    .map(|s| Ok::<_, BoxError>(Frame::data(Bytes::from_static(s.as_bytes()))));
                let body = StreamBody::new(futures_util::stream::iter(frames));
                return Response::new(BodyExt::boxed(body));
            }
            let collected = req.into_body().collect().await.unwrap();
            let trailers = collected.trailers().cloned();
            let body = collected.to_bytes();
            Response::builder()
                .header("x-seen", head)
                .header("x-trailers", format!("{trailers:?}"))
                .body(full(body))
                .unwrap()
        }
    })
    .await
}

const CONFIG: &str = r#"{
  "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/{**rest}" } } },
  "Clusters": { "c": { "Destinations": { "d": { "Address": "BACKEND" } } } }
}"#;

/// A proxy on each engine in front of one counting backend.
async fn pair() -> (TestProxy, TestProxy, Arc<AtomicUsize>, Backend) {
    let count = Arc::new(AtomicUsize::new(0));
    let b = seeing_backend(count.clone()).await;
    let config = CONFIG.replace("BACKEND", &b.url());
    let native = start(&config, engine(Http1Engine::Native)).await;
    let hyper = start(&config, engine(Http1Engine::Hyper)).await;
    (native, hyper, count, b)
}

/// A parsed response: status, fields (less `date`), decoded body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Parse every response in `raw` (a HEAD's carries no body).
fn answers(mut raw: &[u8], head_request: bool) -> Vec<Answer> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let mut fields = [httparse::EMPTY_HEADER; 256];
        let mut response = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(len)) = response.parse(raw) else {
            panic!("unparsable response: {:?}", String::from_utf8_lossy(raw));
        };
        let status = response.code.unwrap();
        let mut fields: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .filter(|(n, _)| n != "date")
            .collect();
        fields.sort();
        raw = &raw[len..];
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if status == 100 {
            continue;
        }
        if head_request || status == 204 || status == 304 {
        } else if field("transfer-encoding").as_deref() == Some("chunked") {
            loop {
                let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
                let size =
                    usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap(), 16)
                        .unwrap();
                raw = &raw[line_end + 2..];
                if size == 0 {
                    let end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
                    raw = &raw[end + 2..];
                    break;
                }
                body.extend_from_slice(&raw[..size]);
                raw = &raw[size + 2..];
            }
        } else if let Some(length) = field("content-length") {
            let length: usize = length.parse().unwrap();
            body.extend_from_slice(&raw[..length]);
            raw = &raw[length..];
        } else {
            body.extend_from_slice(raw);
            raw = &[];
        }
        // The framing is each engine's choice; what it frames must be the same.
        fields.retain(|(n, _)| n != "transfer-encoding" && n != "content-length");
        out.push(Answer {
            status,
            fields,
            body,
        });
    }
    out
}

/// Send `request` on a fresh connection; read until the proxy closes it.
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
    within("an exchange", async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        out
    })
    .await
}

#[tokio::test]
async fn both_engines_answer_valid_requests_alike() {
    let (native, hyper, _count, _b) = pair().await;
    let requests: &[&str] = &[
        "GET /plain?q=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "POST /length HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
        "POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
        "HEAD /head HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /old HTTP/1.0\r\n\r\n",
        "GET /stream HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /stream HTTP/1.0\r\n\r\n",
        "GET http://a/absolute HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "POST /expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\nPOST /three HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: close\r\n\r\n3",
    ];
    for request in requests {
        let head = request.starts_with("HEAD");
        let mut from_native = answers(&exchange(native.addr, request.as_bytes()).await, head);
        let mut from_hyper = answers(&exchange(hyper.addr, request.as_bytes()).await, head);
        assert!(!from_native.is_empty(), "{request:?}: no answer");
        // A difference the README lists: the native client forwards a request's
        // trailer fields to the destination; hyper's sends only those its `Trailer`
        // field announced.
        if request.contains("X-T: 1") {
            let trailers = |answers: &mut Vec<Answer>| {
                let at = answers[0]
                    .fields
                    .iter()
                    .position(|(n, _)| n == "x-trailers");
                answers[0].fields.remove(at.expect("x-trailers")).1
            };
            assert_eq!(trailers(&mut from_native), r#"Some({"x-t": "1"})"#);
            assert_eq!(trailers(&mut from_hyper), "None");
        }
        assert_eq!(from_native, from_hyper, "{request:?}");
    }
}

/// A difference the README lists: the native engine keeps an HTTP/1.0 client's
/// connection open when it asks (`Connection: keep-alive`), as nginx does; hyper's
/// closes it after the first response.
#[tokio::test]
async fn http10_keep_alive_is_honoured() {
    let (native, hyper, _count, _b) = pair().await;
    let request =
        b"GET /keep HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /closing HTTP/1.0\r\n\r\n";
    let got = answers(&exchange(native.addr, request).await, false);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0]
        .fields
        .contains(&("connection".into(), "keep-alive".into())));
    assert!(!got[1].fields.iter().any(|(n, _)| n == "connection"));
    assert_eq!(
        answers(&exchange(hyper.addr, request).await, false).len(),
        1
    );
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let (native, _hyper, count, _b) = pair().await;
    let mut request = String::new();
    for i in 0..20 {
        request.push_str(&format!("GET /p{i} HTTP/1.1\r\nHost: a\r\n\r\n"));
    }
    request.push_str("GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let got = answers(&exchange(native.addr, request.as_bytes()).await, false);
    assert_eq!(got.len(), 21);
    for (i, answer) in got.iter().take(20).enumerate() {
        let seen = &answer.fields.iter().find(|(n, _)| n == "x-seen").unwrap().1;
        assert!(seen.starts_with(&format!("GET /p{i} ")), "{i}: {seen}");
    }
    assert_eq!(count.load(Ordering::SeqCst), 21);
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let (native, _hyper, _count, _b) = pair().await;
    let mut s = TcpStream::connect(native.addr).await.unwrap();
    s.write_all(
        b"PUT /upload HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    within("100 Continue", async {
        while !got.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed before 100");
            got.push(byte[0]);
        }
    })
    .await;
    assert_eq!(got, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"12345").await.unwrap();
    let mut response = vec![0u8; 4096];
    let n = within("the response", s.read(&mut response)).await.unwrap();
    let answer = &answers(&response[..n], false)[0];
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, b"12345");
}

#[tokio::test]
async fn what_rfc_9112_refuses_is_refused_and_never_forwarded() {
    let (native, _hyper, count, _b) = pair().await;
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(2000));
    let big_head = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(9000)
    );
    let cases: Vec<(&str, String, u16)> = vec![
        ("no Host", "GET / HTTP/1.1\r\n\r\n".into(), 400),
        ("two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into(), 400),
        (
            "CL and TE",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
            400,
        ),
        (
            "differing CLs",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".into(),
            400,
        ),
        (
            "TE not ending in chunked",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n".into(),
            400,
        ),
        ("obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n".into(), 400),
        ("space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n".into(), 400),
        ("bare CR", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n".into(), 400),
        ("request line over its limit", long_target, 414),
        ("head over its limit", big_head, 431),
    ];
    for (what, request, status) in cases {
        let raw = exchange(native.addr, request.as_bytes()).await;
        let raw = String::from_utf8_lossy(&raw);
        assert_eq!(status_of(&raw), Some(status), "{what}: {raw}");
        assert!(raw.contains("connection: close"), "{what}: {raw}");
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "nothing reached the destination"
    );

    // A bad chunk after the head: the request was forwarded, its body fails, and the
    // connection carries nothing after it (no smuggled second request).
    let smuggle = "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let raw = exchange(native.addr, smuggle.as_bytes()).await;
    let raw = String::from_utf8_lossy(&raw);
    assert!(!raw.contains("/smuggled"), "{raw}");
    assert!(raw.matches("HTTP/1.1 ").count() <= 1, "{raw}");
}

/// A keep-alive client that sends each request only once it has read the answer to the
/// one before, and a destination slow to answer: each wait for the next request head
/// follows a wait (for the destination) in which the connection watched its client
/// for going away. The native engine then checks the socket's readiness instead of
/// reading it again (`read_client`); were the task not registered for it, the next
/// request would sit unread until the keep-alive timeout closed the connection —
/// one second here, short enough that the connection never parks (where another
/// poller would find the request).
#[tokio::test]
async fn a_client_waiting_for_each_answer_gets_every_one() {
    let (slow, arrived, release) = gated_backend(|req| req.uri().path().to_owned()).await;
    for kind in [Http1Engine::Native, Http1Engine::Hyper] {
        let p = start(
            &CONFIG.replace("BACKEND", &slow.url()),
            engine(kind)
                .header_read_timeout(std::time::Duration::from_secs(1))
                .keep_alive_timeout(std::time::Duration::from_secs(1)),
        )
        .await;
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        for i in 0..4 {
            let path = format!("/r{i}");
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
                .await
                .unwrap();
            within("the request to reach the destination", arrived.notified()).await;
            release.notify_one();
            let raw = within("the answer", read_response(&mut s)).await;
            let answer = &answers(&raw, false)[0];
            assert_eq!(answer.body, path.as_bytes(), "{kind:?}");
        }
    }
}

/// A destination that holds each request until released: `arrived` (returned second)
/// is notified as a request reaches it, `release` (third) lets one answer go, its body
/// made by `body`.
async fn gated_backend(
    body: fn(&Request<Incoming>) -> String,
) -> (Backend, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let (a, r) = (arrived.clone(), release.clone());
    let slow = backend(move |req: Request<Incoming>| {
        let (a, r) = (a.clone(), r.clone());
        async move {
            a.notify_one();
            r.notified().await;
            Response::new(full(body(&req)))
        }
    })
    .await;
    (slow, arrived, release)
}

/// Read one response with a `Content-Length` from `s`.
async fn read_response(s: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    loop {
        let mut chunk = [0u8; 1024];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&chunk[..n]);
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        if let Ok(httparse::Status::Complete(len)) = response.parse(&raw) {
            let length = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .unwrap()
                        .parse::<usize>()
                        .unwrap()
                })
                .expect("content-length");
            if raw.len() >= len + length {
                return raw;
            }
        }
    }
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_ends_in_flight_ones_with_close() {
    let (slow, arrived, release) = gated_backend(|_| "late".to_owned()).await;
    let p = start(
        &CONFIG.replace("BACKEND", &slow.url()),
        engine(Http1Engine::Native),
    )
    .await;
    let mut idle = TcpStream::connect(p.addr).await.unwrap();
    let mut busy = TcpStream::connect(p.addr).await.unwrap();
    busy.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    within("the request to reach the destination", arrived.notified()).await;
    let shutdown = tokio::spawn(p.shutdown());
    let mut out = Vec::new();
    within("the idle connection to close", idle.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(out.is_empty());
    release.notify_one();
    let mut out = Vec::new();
    within("the in-flight response", busy.read_to_end(&mut out))
        .await
        .unwrap();
    let answer = &answers(&out, false)[0];
    assert_eq!(answer.body, b"late");
    assert!(
        answer
            .fields
            .contains(&("connection".into(), "close".into())),
        "{answer:?}"
    );
    within("shutdown", shutdown).await.unwrap();
}

/// A client that leaves its request body unfinished after its response keeps the
/// connection busy while the rest is read and dropped; a shutdown closes it at once
/// instead of waiting for the body (or for the graceful timeout, a minute here).
#[tokio::test]
async fn shutdown_closes_a_connection_waiting_for_an_unread_body() {
    let early =
        backend(|_req: Request<Incoming>| async move { Response::new(full("early")) }).await;
    let p = start(
        &CONFIG.replace("BACKEND", &early.url()),
        engine(Http1Engine::Native).graceful_timeout(std::time::Duration::from_secs(60)),
    )
    .await;
    let mut uploading = TcpStream::connect(p.addr).await.unwrap();
    uploading
        .write_all(b"POST /early HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nonly ten..")
        .await
        .unwrap();
    let mut out = Vec::new();
    within("the early answer", async {
        let mut buf = [0u8; 1024];
        while !out.ends_with(b"early") {
            let n = uploading.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the answer");
            out.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(out.starts_with(b"HTTP/1.1 200 OK"), "{out:?}");
    let shutdown = tokio::spawn(p.shutdown());
    let mut rest = Vec::new();
    within("the connection to close", uploading.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    within("shutdown", shutdown).await.unwrap();
}

/// An answer setting 150 cookies: more fields than a request may carry (100).
static MANY_FIELDS: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..150 {
        answer.extend_from_slice(format!("Set-Cookie: c{i}=v\r\n").as_bytes());
    }
    answer.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
    answer
});

/// `n` interim `102 Processing` answers, then `200 ok`.
fn after_interim(n: usize) -> Vec<u8> {
    let mut answer = b"HTTP/1.1 102 Processing\r\n\r\n".repeat(n);
    answer.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    answer
}

/// 100 interim answers (2 800 bytes) before the answer.
static SOME_INTERIM: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| after_interim(100));

/// 3 000 interim answers (84 000 bytes, more than a head may have) before the answer.
static MANY_INTERIM: std::sync::LazyLock<Vec<u8>> =
    std::sync::LazyLock::new(|| after_interim(3_000));

/// What a scripted destination answers to `path`, and whether it closes the connection
/// after (close-delimited bodies, and the refused answers).
fn scripted(path: &str) -> (&'static [u8], bool) {
    match path {
        "/length" => (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello", false),
        "/chunked" => (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n", false),
        "/early-hints" => (b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false),
        "/no-content" => (b"HTTP/1.1 204 No Content\r\nX-B: 1\r\n\r\n", false),
        "/not-modified" => (b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 99\r\n\r\n", false),
        "/head" => (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false),
        "/http10" => (b"HTTP/1.0 200 OK\r\nX-Old: 1\r\n\r\nuntil the close", true),
        "/gzip-until-close" => (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nraw bytes", true),
        "/no-reason" => (b"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", false),
        "/empty-value" => (b"HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Spaces:   v  \r\nContent-Length: 0\r\n\r\n", false),
        // Refused by both engines: 502.
        "/garbage" => (b"HTTP/1.1 2x0 OK\r\n\r\n", true),
        "/differing-lengths" => (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", true),
        "/bad-chunk" => (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true),
        "/obs-fold" => (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 0\r\n\r\n", true),
        "/te-in-http10" => (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true),
        // Relayed by the native client, as by .NET's under YARP (only the head's size,
        // 64 KiB, bounds it); refused by hyper's (100 fields at most): 502.
        "/many-fields" => (&MANY_FIELDS, false),
        "/some-interim" => (&SOME_INTERIM, false),
        // Refused by the native client (502): the interim heads count in the head's
        // 64 KiB, as in .NET's client; hyper's takes any number of them.
        "/many-interim" => (&MANY_INTERIM, true),
        // Refused by the native client (502); hyper's takes the coding.
        "/length-and-chunked" => (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", true),
        _ => (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false),
    }
}

/// The client side of the two engines: the same destination answers relayed alike —
/// every framing (length, chunked with extensions and trailers, close-delimited,
/// `Transfer-Encoding` other than chunked), interim `1xx` answers skipped, bodiless
/// statuses, `HEAD`, and the malformed answers both refuse (502) — and the pooled
/// connection reused after each clean answer and never after a refused one.
#[tokio::test]
async fn both_engines_relay_destination_answers_alike() {
    let b = raw_backend(|mut s| async move {
        while let Some(head) = read_head(&mut s).await {
            let path = head.split(' ').nth(1).unwrap_or("").to_owned();
            let (answer, close) = scripted(&path);
            if s.write_all(answer).await.is_err() || close {
                let _ = s.shutdown().await;
                return;
            }
        }
    })
    .await;
    let config = CONFIG.replace("BACKEND", &b.url());
    let native = start(&config, engine(Http1Engine::Native)).await;
    let hyper = start(&config, engine(Http1Engine::Hyper)).await;
    let paths = [
        ("GET", "/length"),
        ("GET", "/chunked"),
        ("GET", "/early-hints"),
        ("GET", "/no-content"),
        ("GET", "/not-modified"),
        ("HEAD", "/head"),
        ("GET", "/http10"),
        ("GET", "/gzip-until-close"),
        ("GET", "/no-reason"),
        ("GET", "/empty-value"),
        ("GET", "/garbage"),
        ("GET", "/differing-lengths"),
        ("GET", "/obs-fold"),
        ("GET", "/te-in-http10"),
        ("GET", "/length"),
    ];
    let mut relayed = Vec::new();
    for proxy in [&native, &hyper] {
        let before = b.accepted();
        let mut answers_of = Vec::new();
        for (method, path) in paths {
            let request =
                format!("{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
            let raw = exchange(proxy.addr, request.as_bytes()).await;
            let answer = answers(&raw, method == "HEAD");
            assert_eq!(
                answer.len(),
                1,
                "{method} {path}: {:?}",
                String::from_utf8_lossy(&raw)
            );
            answers_of.push(answer);
        }
        // A connection for the first request, then one after each answer that closed
        // (hyper's client also lets one go after a response with trailers).
        let closing = paths.iter().filter(|(_, p)| scripted(p).1).count();
        let opened = b.accepted() - before;
        if proxy.addr == native.addr {
            assert_eq!(opened, 1 + closing, "connections the native client opened");
        } else {
            assert!(
                opened > closing,
                "connections hyper's client opened: {opened}"
            );
        }
        relayed.push(answers_of);
    }
    for (i, (method, path)) in paths.iter().enumerate() {
        let (native, hyper) = (&relayed[0][i][0], &relayed[1][i][0]);
        assert_eq!(native, hyper, "{method} {path}");
        if scripted(path).1 && !path.contains("http10") && !path.contains("until") {
            assert_eq!(native.status, 502, "{path}");
        }
    }
    // An answer with both framings: the native client refuses it; hyper's takes the
    // coding, and the client gets the body it framed, without the length (RFC 9112
    // §6.3), not a length the body does not have.
    let request = b"GET /length-and-chunked HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let native_answer = &answers(&exchange(native.addr, request).await, false)[0];
    assert_eq!(native_answer.status, 502);
    let raw = exchange(hyper.addr, request).await;
    let hyper_answers = answers(&raw, false);
    assert_eq!(
        hyper_answers.len(),
        1,
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    let hyper_answer = &hyper_answers[0];
    assert_eq!(
        (hyper_answer.status, &hyper_answer.body[..]),
        (200, &b"ok"[..]),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    assert!(
        !hyper_answer
            .fields
            .iter()
            .any(|(n, v)| n == "content-length" && v == "5"),
        "{hyper_answer:?}"
    );

    // An answer with more fields than a request may have: relayed whole by the native
    // client; hyper's refuses it.
    let request = b"GET /many-fields HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let raw = exchange(native.addr, request).await;
    let native_answer = &answers(&raw, false)[0];
    let cookies = native_answer
        .fields
        .iter()
        .filter(|(n, _)| n == "set-cookie");
    assert_eq!(
        (
            native_answer.status,
            cookies.count(),
            &native_answer.body[..]
        ),
        (200, 150, &b"ok"[..]),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    let hyper_answer = &answers(&exchange(hyper.addr, request).await, false)[0];
    assert_eq!(hyper_answer.status, 502);

    // Interim answers: skipped by both, unless they are more than a head may have — then
    // the native client refuses the answer.
    for (path, native_status) in [("/some-interim", 200), ("/many-interim", 502)] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        for (proxy, status) in [(&native, native_status), (&hyper, 200)] {
            let raw = exchange(proxy.addr, request.as_bytes()).await;
            let answer = &answers(&raw, false)[0];
            assert_eq!(answer.status, status, "{path}");
            if status == 200 {
                assert_eq!(&answer.body[..], b"ok", "{path}");
            }
        }
    }

    // A response chunk cut short fails the response after its head: the client sees
    // the connection end without the body's end on both.
    for proxy in [&native, &hyper] {
        let raw = exchange(
            proxy.addr,
            b"GET /bad-chunk HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .await;
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.starts_with("HTTP/1.1 200 OK") && !text.ends_with("0\r\n\r\n"),
            "{text}"
        );
    }
    native.shutdown().await;
    hyper.shutdown().await;
}

/// A route that takes request bodies of at most 1 000 bytes.
const LIMITED: &str = r#"{
  "Routes": { "r": { "ClusterId": "c", "MaxRequestBodySize": 1000, "Match": { "Path": "/{**rest}" } } },
  "Clusters": { "c": { "Destinations": { "d": { "Address": "BACKEND" } } } }
}"#;

/// More than the kernel's socket buffers hold on either side, so that a client
/// writing all of it needs the proxy to read it.
const LARGE: usize = 32 * 1024 * 1024;

/// Write `head` and then all of `body` before reading anything, as Python's
/// `http.client` and many SDKs do, then read one answer: a connection closed with the
/// body unread would end the writes or the read with a reset.
async fn send_all_then_read(s: &mut TcpStream, head: &[u8], body: &[u8]) -> Vec<u8> {
    within("the whole request", async {
        s.write_all(head).await.unwrap();
        if let Err(e) = s.write_all(body).await {
            panic!("the body could not be sent: {e}");
        }
    })
    .await;
    within("the answer", read_response(s)).await
}

/// The proxy has shut its side of the connection (its answer is whole): the read ends
/// with its `FIN`, not a reset.
async fn closed_cleanly(s: &mut TcpStream) {
    let mut rest = Vec::new();
    let read = within("the close", s.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "{read:?}");
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
}

/// Wait until the proxy's end of `s` is no longer held by the process (its socket
/// closed: the kernel's line for it in `/proc/net/tcp` gone, or orphaned, inode 0).
#[cfg(target_os = "linux")]
async fn released_by_the_proxy(s: &TcpStream) {
    let (ours, theirs) = (
        s.local_addr().unwrap().port(),
        s.peer_addr().unwrap().port(),
    );
    let held = || {
        tcp_sockets()
            .iter()
            .any(|socket| socket.local == theirs && socket.remote == ours && socket.held)
    };
    within("the proxy to close the connection", async {
        while held() {
            // The kernel tells no one when a process closes a socket that has sent
            // its FIN: its table is looked at again.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A body the proxy refuses (`413`) or a head it refuses (`400`) is read and thrown
/// away after the answer, until the client closes (nginx's lingering close), so that a
/// client that sends all of its request before it reads gets the answer rather than a
/// reset: on both engines.
#[tokio::test]
async fn a_client_that_sends_everything_before_reading_gets_the_refusal() {
    // A destination that takes what comes: the chunked body streams to it until the
    // limit stops it.
    let b = backend(|req: Request<Incoming>| async move {
        let _ = req.into_body().collect().await;
        Response::new(full("taken"))
    })
    .await;
    let body = vec![b'x'; LARGE];
    let mut chunked = Vec::with_capacity(LARGE + LARGE / 1000);
    for piece in body.chunks(64 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let cases: [(&str, String, &[u8], &str); 3] = [
        (
            "a length over the route's limit",
            format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {LARGE}\r\n\r\n"),
            &body,
            "HTTP/1.1 413",
        ),
        (
            "a chunked body over the route's limit",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
            &chunked,
            "HTTP/1.1 413",
        ),
        (
            "a head refused, its body after it",
            format!(
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {LARGE}\r\nContent-Length: 1\r\n\r\n"
            ),
            &body,
            "HTTP/1.1 400",
        ),
    ];
    for kind in [Http1Engine::Native, Http1Engine::Hyper] {
        let p = start(&LIMITED.replace("BACKEND", &b.url()), engine(kind)).await;
        for (what, head, body, status) in &cases {
            let mut s = TcpStream::connect(p.addr).await.unwrap();
            let answer = send_all_then_read(&mut s, head.as_bytes(), body).await;
            assert!(
                answer.starts_with(status.as_bytes()),
                "{kind:?}, {what}: {:?}",
                String::from_utf8_lossy(&answer)
            );
            // The client closes its side: the proxy's lingering ends with it.
            s.shutdown().await.unwrap();
            closed_cleanly(&mut s).await;
        }
        p.shutdown().await;
    }
}

/// The lingering is bounded: a client that stops sending after the answer is closed
/// once the header read timeout passes without a byte, and one that keeps sending a
/// byte at a time, after six of those timeouts in all (nginx's `lingering_timeout` and
/// `lingering_time`, at most 5 and 30 s).
#[tokio::test]
async fn the_lingering_close_ends_when_the_client_stops_or_takes_too_long() {
    let count = Arc::new(AtomicUsize::new(0));
    let b = seeing_backend(count.clone()).await;
    let head = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {LARGE}\r\n\r\n");
    let some = vec![b'x'; 1024 * 1024];
    for kind in [Http1Engine::Native, Http1Engine::Hyper] {
        let p = start(
            &LIMITED.replace("BACKEND", &b.url()),
            engine(kind).header_read_timeout(std::time::Duration::from_millis(300)),
        )
        .await;

        // Part of the body, the answer, then silence (the connection left open).
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        let answer = send_all_then_read(&mut s, head.as_bytes(), &some).await;
        assert!(answer.starts_with(b"HTTP/1.1 413"), "{kind:?}: {answer:?}");
        closed_cleanly(&mut s).await;
        #[cfg(target_os = "linux")]
        released_by_the_proxy(&s).await;

        // A byte every 50 ms, for ever: the proxy closes the connection all the same
        // (the test's bound is far past the 1.8 s the lingering may take), and a write
        // after its close is answered with a reset, which fails the next one.
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        let answer = send_all_then_read(&mut s, head.as_bytes(), &some).await;
        assert!(answer.starts_with(b"HTTP/1.1 413"), "{kind:?}: {answer:?}");
        within("the close of a trickling client", async {
            while s.write_all(b"x").await.is_ok() {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
        .await;
        p.shutdown().await;
    }
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

/// A destination that answers before it has read the request body and then closes the
/// connection with the body unread (a reset, not a lingering close): its answer is
/// relayed whole, as .NET's `HttpClient` under YARP relays it (nginx answers 502).
#[tokio::test]
async fn an_answer_given_before_the_destination_reset_the_connection_is_relayed() {
    let refusing = raw_backend(|mut s: TcpStream| async move {
        if read_head(&mut s).await.is_none() {
            return;
        }
        let _ = s
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big!")
            .await;
        // Dropped with the body unread: the kernel answers it with a reset.
    })
    .await;
    let unlimited = LIMITED
        .replace("BACKEND", &refusing.url())
        .replace("\"MaxRequestBodySize\": 1000", "\"MaxRequestBodySize\": -1");
    let p = start(&unlimited, engine(Http1Engine::Native)).await;
    let body = vec![b'x'; LARGE];
    let head = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {LARGE}\r\n\r\n");
    for i in 0..3 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        let answer = send_all_then_read(&mut s, head.as_bytes(), &body).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.starts_with("HTTP/1.1 413") && text.ends_with("\r\n\r\ntoo big!"),
            "{i}: {text:?}"
        );
        s.shutdown().await.unwrap();
        closed_cleanly(&mut s).await;
    }
    // No connection the destination closed was used again.
    assert_eq!(refusing.accepted(), 3);
    p.shutdown().await;
}

/// A final answer to an `Expect: 100-continue` request before the `100` (here the
/// route's body limit) closes the connection: the client may send its body or not
/// (RFC 9110 §10.1.1), so the proxy cannot tell the rest of the message from the next
/// one. Both engines say `Connection: close` and close, as nginx does.
#[tokio::test]
async fn an_answer_before_100_continue_closes_the_connection() {
    let count = Arc::new(AtomicUsize::new(0));
    let b = seeing_backend(count.clone()).await;
    let config = LIMITED.replace("BACKEND", &b.url());
    for kind in [Http1Engine::Native, Http1Engine::Hyper] {
        let p = start(&config, engine(kind)).await;
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2000\r\n\r\n",
        )
        .await
        .unwrap();
        let answer = within("the answer", read_response(&mut s)).await;
        let answer = &answers(&answer, false)[0];
        assert_eq!(answer.status, 413, "{kind:?}");
        assert!(
            answer
                .fields
                .contains(&("connection".into(), "close".into())),
            "{kind:?}: {answer:?}"
        );
        // The body never comes: the connection ends all the same.
        closed_cleanly(&mut s).await;
        p.shutdown().await;
    }
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

/// A service that reads the request body to its end before it answers (a handler
/// collecting it, as an axum fallback does): a body of known length that arrives in
/// several reads ends with its last bytes, on both engines — the native engine's
/// reader was never told, and waited for an end that no byte would bring. (And over
/// h2c, the HTTP/2 engine's body, alike.)
#[tokio::test]
async fn a_body_read_to_its_end_ends_with_its_last_bytes() {
    use fuseway::body::{Incoming as Body, ProxyBody};
    let collecting = hyper::service::service_fn(|request: Request<Body>| async move {
        let body = request.into_body();
        let ended_early = http_body::Body::is_end_stream(&body);
        let len = body.collect().await.map(|b| b.to_bytes().len());
        let answer = ProxyBody::full(format!("{len:?} {ended_early}"));
        Ok::<_, std::convert::Infallible>(Response::new(answer))
    });
    // The body whole (`Content-Length`), or streamed in pieces (chunked over HTTP/1.1).
    let body = |len: usize, streamed: bool| {
        let body = vec![b'x'; len];
        if !streamed {
            return reqwest::Body::from(body);
        }
        let pieces: Vec<_> = body
            .chunks(30_000)
            .map(|c| Ok::<_, std::convert::Infallible>(Bytes::copy_from_slice(c)))
            .collect();
        reqwest::Body::wrap_stream(futures_util::stream::iter(pieces))
    };
    for kind in [Http1Engine::Native, Http1Engine::Hyper] {
        let (addr, stop, done) = serve_with(collecting, engine(kind)).await;
        for (client, name) in [(h1_client(), "HTTP/1.1"), (h2c_client(), "h2c")] {
            for len in [1_000, 8_192, 100_000, 1_000_000] {
                for streamed in [false, true] {
                    let request = client.post(format!("http://{addr}/up"));
                    let r = within("the answer", request.body(body(len, streamed)).send())
                        .await
                        .unwrap_or_else(|e| {
                            panic!("{kind:?}, {name}, {len} bytes, streamed {streamed}: {e:?}")
                        });
                    assert_eq!(r.text().await.unwrap(), format!("Ok({len}) false"));
                }
            }
        }
        let _ = stop.send(());
        within("the server to stop", done).await.unwrap();
    }
}
