//! fuseway's own HTTP/2 engine (`Http2Engine::Native`), whatever engine the rest of
//! the suites run on: what an h2 client cannot be made to send (raw frames: malformed
//! requests, protocol errors) and what needs flow control and CONTINUATION frames to
//! work (hyper's client with small windows, large heads and bodies). The real server,
//! pipeline and backends on 127.0.0.1.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use fuseway::server::{Http2Engine, ServerOptions};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The default pipeline on the native HTTP/2 engine (with `options` besides) to a
/// backend that answers with the request's path, body length and `x-big` length, or
/// with a body of `?n` bytes (`/early`: `early`, the request body unread).
async fn serving(
    options: ServerOptions,
) -> (
    std::net::SocketAddr,
    Backend,
    tokio::sync::oneshot::Sender<()>,
) {
    let b = backend(|req: Request<Incoming>| async move {
        let path = req.uri().path().to_owned();
        if path == "/early" {
            return Response::new(full("early"));
        }
        let n: usize = req
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("n="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let big = req.headers().get("x-big").map_or(0, |v| v.len());
        let Ok(body) = req.into_body().collect().await else {
            return Response::new(full("the request body failed"));
        };
        let body = body.to_bytes();
        if n > 0 {
            return Response::new(full(vec![b'x'; n]));
        }
        Response::new(full(format!("{path} {} {big}", body.len())))
    })
    .await;
    let config = fuseway::config::parse(
        &simple_config(&[("d1", &b.url())], ""),
        fuseway::config::Format::Json,
    )
    .unwrap();
    let state = Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let options = options.http2_engine(Http2Engine::Native);
    let (addr, stop, _done) =
        serve_with(fuseway::pipeline::FusedDefault::from_state(state), options).await;
    (addr, b, stop)
}

/// A client writing frames by hand.
struct Raw {
    stream: TcpStream,
}

/// A frame as read: type, flags, stream, payload.
type Frame = (u8, u8, u32, Vec<u8>);

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
/// GOAWAY's code for a peer that sends too much of something.
const ENHANCE_YOUR_CALM: u32 = 0xb;
const END_HEADERS: u8 = 4;

impl Raw {
    /// Connected, its preface and (empty) SETTINGS sent.
    async fn connect(addr: std::net::SocketAddr) -> Raw {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut raw = Raw { stream };
        raw.send(SETTINGS, 0, 0, &[]).await;
        raw
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut frame = Vec::new();
        put_frame(&mut frame, kind, flags, stream, payload);
        self.stream.write_all(&frame).await.unwrap();
    }

    /// The next frame, or `None` once the server has closed the connection.
    async fn next(&mut self) -> Option<Frame> {
        within("a frame", h2_frame(&mut self.stream)).await.ok()
    }

    /// The next frame that is not connection housekeeping (SETTINGS, WINDOW_UPDATE).
    async fn next_event(&mut self) -> Option<Frame> {
        loop {
            let frame = self.next().await?;
            if frame.0 != SETTINGS && frame.0 != 8 {
                return Some(frame);
            }
        }
    }

    /// Frames until the connection closes: the GOAWAY's error code, if one came.
    async fn goaway(&mut self) -> Option<u32> {
        let mut code = None;
        while let Some((kind, _, _, payload)) = self.next().await {
            if kind == GOAWAY {
                code = Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
            }
        }
        code
    }
}

/// A frame, appended to `out` (to write several at once).
fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A string literal, not Huffman-coded (lengths under 127).
fn string(s: &[u8]) -> Vec<u8> {
    assert!(s.len() < 127);
    let mut out = vec![s.len() as u8];
    out.extend_from_slice(s);
    out
}

/// A field as a literal without indexing, with a literal name.
fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x00];
    out.extend(string(name));
    out.extend(string(value));
    out
}

/// `GET path` as a header block: `:method GET`, `:scheme http` (static table),
/// `:path`, `:authority x` (literals with the static table's names).
fn get(path: &str) -> Vec<u8> {
    request(0x82, path)
}

/// The header block of a `POST` to `path` (its body to follow).
fn post(path: &str) -> Vec<u8> {
    request(0x83, path)
}

/// A request's header block: `method` (a static table index, as one byte), `:scheme
/// http`, `:path`, `:authority x`.
fn request(method: u8, path: &str) -> Vec<u8> {
    let mut block = vec![method, 0x86, 0x04];
    block.extend(string(path.as_bytes()));
    block.push(0x01);
    block.extend(string(b"x"));
    block
}

/// A request the RFC 9113 §8 rules make malformed is reset with PROTOCOL_ERROR, and
/// the connection goes on serving the next one.
#[tokio::test]
async fn malformed_requests_are_reset_and_the_connection_serves_on() {
    let (addr, _backend, _stop) = serving(ServerOptions::default()).await;
    let mut raw = Raw::connect(addr).await;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "an upper-case name",
            [get("/a"), literal(b"X-Upper", b"v")].concat(),
        ),
        ("no :path", vec![0x82, 0x86, 0x01, 1, b'x']),
        (
            "a connection field",
            [get("/a"), literal(b"connection", b"close")].concat(),
        ),
        (
            "te other than trailers",
            [get("/a"), literal(b"te", b"gzip")].concat(),
        ),
        (
            "a pseudo-header after a field",
            [literal(b"accept", b"*/*"), get("/a")].concat(),
        ),
        ("a :status", [get("/a"), vec![0x88]].concat()),
        (
            "an unknown pseudo-header",
            [get("/a"), literal(b":nope", b"v")].concat(),
        ),
        (
            "a value with a NUL",
            [get("/a"), literal(b"x-a", b"a\x00b")].concat(),
        ),
        (
            "a content-length and no body",
            [get("/a"), literal(b"content-length", b"5")].concat(),
        ),
        // `u64`'s parser takes a sign; a length is digits only (RFC 9110 §8.6).
        (
            "a content-length with a sign",
            [get("/a"), literal(b"content-length", b"+0")].concat(),
        ),
        (
            "content-lengths that differ",
            [
                get("/a"),
                literal(b"content-length", b"0"),
                literal(b"content-length", b"1"),
            ]
            .concat(),
        ),
    ];
    let mut id = 1;
    for (why, block) in &cases {
        raw.send(HEADERS, END_STREAM | END_HEADERS, id, block).await;
        let (kind, _, stream, payload) = raw.next_event().await.expect("an answer");
        assert_eq!((kind, stream), (RST_STREAM, id), "{why}");
        assert_eq!(payload, 1u32.to_be_bytes(), "{why}: PROTOCOL_ERROR");
        id += 2;
    }
    raw.send(HEADERS, END_STREAM | END_HEADERS, id, &get("/ok"))
        .await;
    let (kind, _, stream, _) = raw.next_event().await.expect("a response");
    assert_eq!((kind, stream), (HEADERS, id));
    let (kind, flags, _, body) = raw.next_event().await.expect("its body");
    assert_eq!(kind, DATA);
    assert_eq!(body, b"/ok 0 0");
    assert_eq!(flags & END_STREAM, END_STREAM);
}

/// Connection errors end the connection with GOAWAY and their code (RFC 9113 §5.4.1).
#[tokio::test]
async fn protocol_errors_end_the_connection_with_goaway() {
    let (addr, _backend, _stop) = serving(ServerOptions::default()).await;
    let big = vec![0u8; 16_385];
    // What is wrong, the frame (type, flags, stream, payload), the GOAWAY's code.
    type Case = (&'static str, u8, u8, u32, Vec<u8>, u32);
    let cases: Vec<Case> = vec![
        ("a frame over 16 KiB", DATA, 0, 1, big, 0x6),
        (
            "HPACK index 0",
            HEADERS,
            END_STREAM | END_HEADERS,
            1,
            vec![0x80],
            0x9,
        ),
        ("DATA on stream 0", DATA, 0, 0, b"x".to_vec(), 0x1),
        (
            "an even stream",
            HEADERS,
            END_STREAM | END_HEADERS,
            2,
            get("/"),
            0x1,
        ),
        (
            "CONTINUATION alone",
            CONTINUATION,
            END_HEADERS,
            1,
            get("/"),
            0x1,
        ),
        ("DATA on an idle stream", DATA, 0, 5, b"x".to_vec(), 0x1),
        ("a PING of 7 bytes", PING, 0, 0, vec![0; 7], 0x6),
        ("a GOAWAY of 5 bytes", GOAWAY, 0, 0, vec![0; 5], 0x6),
        ("a WINDOW_UPDATE of 0", 8, 0, 0, vec![0; 4], 0x1),
    ];
    for (why, kind, flags, stream, payload, code) in cases {
        let mut raw = Raw::connect(addr).await;
        raw.send(kind, flags, stream, &payload).await;
        assert_eq!(raw.goaway().await, Some(code), "{why}");
    }
    // A connection that does not start with the preface is closed.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    within("the close", stream.read_to_end(&mut rest))
        .await
        .ok();
}

/// A PING is answered with its payload; a header block in CONTINUATION frames is put
/// together; a request past the stream limit is refused with REFUSED_STREAM; a header
/// list past its limit is answered 431.
#[tokio::test]
async fn pings_continuations_and_limits() {
    let options = ServerOptions::default()
        .max_concurrent_streams(1)
        .max_header_list_size(1024);
    let (addr, _backend, _stop) = serving(options).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(PING, 0, 0, b"12345678").await;
    assert_eq!(
        raw.next_event().await,
        Some((PING, 1, 0, b"12345678".to_vec()))
    );
    let block = get("/split");
    raw.send(HEADERS, END_STREAM, 1, &block[..3]).await;
    raw.send(CONTINUATION, 0, 1, &block[3..6]).await;
    raw.send(CONTINUATION, END_HEADERS, 1, &block[6..]).await;
    let (kind, _, stream, _) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream), (HEADERS, 1));
    let (_, _, _, body) = raw.next_event().await.unwrap();
    assert_eq!(body, b"/split 0 0");
    // Stream 3 stays open (its body still to come; the backend answers once it has
    // read it): stream 5 is one too many. (A `POST`: a `GET` whose body length is
    // unknown goes to the backend as if it had none on hyper's HTTP/1.1 client, which
    // would answer stream 3 at once.)
    raw.send(HEADERS, END_HEADERS, 3, &post("/open")).await;
    raw.send(HEADERS, END_STREAM | END_HEADERS, 5, &get("/more"))
        .await;
    let (kind, _, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!(
        (kind, stream, payload),
        (RST_STREAM, 5, 7u32.to_be_bytes().to_vec())
    );
    // The header list limit: 431, and the stream's rest refused.
    raw.send(RST_STREAM, 0, 3, &8u32.to_be_bytes()).await;
    let long = vec![b'v'; 120];
    let mut block = get("/long");
    for i in 0..10 {
        block.extend(literal(format!("x-{i}").as_bytes(), &long));
    }
    raw.send(HEADERS, END_STREAM | END_HEADERS, 7, &block).await;
    let (kind, _, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream), (HEADERS, 7));
    // `:status 431` as a literal with the static table's name (index 8).
    assert_eq!(&payload[..5], &[0x08, 3, b'4', b'3', b'1']);
}

/// Request trailers past the header list limit fail the request body (as a chunked
/// HTTP/1.1 body's trailer section over its limit does): the exchange is answered 400,
/// the client's fault; trailers within it end the body, and the request is answered.
#[tokio::test]
async fn request_trailers_past_the_header_list_limit_fail_the_body() {
    let (addr, _backend, _stop) =
        serving(ServerOptions::default().max_header_list_size(1024)).await;
    let mut raw = Raw::connect(addr).await;
    let status = |payload: &[u8]| {
        // `:status` indexed in the static table (8: 200, 12: 400), or a literal with
        // its name.
        match payload[0] {
            0x08 => String::from_utf8_lossy(&payload[2..5]).into_owned(),
            0x88 => "200".to_owned(),
            0x8c => "400".to_owned(),
            other => panic!("a :status field starting {other:#x}"),
        }
    };
    let long = vec![b'v'; 120];
    for (stream, fields, expected) in [(1u32, 2, "200"), (3, 10, "400")] {
        raw.send(HEADERS, END_HEADERS, stream, &post("/trailers"))
            .await;
        raw.send(DATA, 0, stream, b"abc").await;
        let mut trailers = Vec::new();
        for i in 0..fields {
            trailers.extend(literal(format!("x-{i}").as_bytes(), &long));
        }
        raw.send(HEADERS, END_STREAM | END_HEADERS, stream, &trailers)
            .await;
        let (kind, mut flags, id, payload) = raw.next_event().await.unwrap();
        assert_eq!((kind, id), (HEADERS, stream));
        assert_eq!(status(&payload), expected, "{fields} trailer fields");
        // The rest of the answer.
        while flags & END_STREAM == 0 {
            let (_, more, id, _) = raw.next_event().await.expect("the answer's end");
            if id == stream {
                flags = more;
            }
        }
    }
}

/// A response sent before the request's END_STREAM: a request body whole by its
/// `content-length` is not refused — the client's END_STREAM comes after the answer and
/// is taken without a word (httpx fails a request whose stream is reset under it) —
/// while one with more to come is refused with `RST_STREAM(NO_ERROR)` (RFC 9113 §8.1).
#[tokio::test]
async fn an_answer_before_the_end_stream_refuses_only_a_body_with_more_to_come() {
    let (addr, _b, _stop) = serving(ServerOptions::default()).await;
    let mut raw = Raw::connect(addr).await;
    // The frames after the answer's end, up to a PING's acknowledgement.
    async fn until_pong(raw: &mut Raw, ping: &[u8; 8]) -> Vec<(u8, u32)> {
        raw.send(PING, 0, 0, ping).await;
        let mut seen = Vec::new();
        loop {
            let (kind, flags, stream, payload) = raw.next_event().await.unwrap();
            if kind == PING && flags & 1 == 1 && payload == ping {
                return seen;
            }
            seen.push((kind, stream));
        }
    }
    async fn answered(raw: &mut Raw, id: u32) {
        loop {
            let (kind, flags, stream, _) = raw.next_event().await.unwrap();
            assert_eq!(stream, id, "a frame of stream {id}");
            if (kind == DATA || kind == HEADERS) && flags & END_STREAM != 0 {
                return;
            }
        }
    }
    // Whole by its length (5), its END_STREAM held back until after the answer.
    let mut block = post("/whole");
    block.extend(literal(b"content-length", b"5"));
    raw.send(HEADERS, END_HEADERS, 1, &block).await;
    raw.send(DATA, 0, 1, b"hello").await;
    answered(&mut raw, 1).await;
    assert_eq!(until_pong(&mut raw, b"pingpong").await, [], "no reset");
    raw.send(DATA, END_STREAM, 1, b"").await;
    assert_eq!(
        until_pong(&mut raw, b"pongping").await,
        [],
        "the late END_STREAM taken"
    );
    // More to come (5 of 10): refused once answered.
    let mut block = post("/early");
    block.extend(literal(b"content-length", b"10"));
    raw.send(HEADERS, END_HEADERS, 3, &block).await;
    raw.send(DATA, 0, 3, b"hello").await;
    answered(&mut raw, 3).await;
    let (kind, _, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream, payload), (RST_STREAM, 3, vec![0; 4]));
}

/// `expect: 100-continue` (RFC 9110 §10.1.1): a client that holds its body back until
/// `100 Continue` (Apache's HTTP/2 proxy waits for it without end) gets it once the
/// request's destination asks for the body, and then its answer; a request answered
/// without its body is never told to send it.
#[tokio::test]
async fn a_client_that_expects_100_continue_gets_it_when_the_body_is_wanted() {
    let (addr, _b, _stop) = serving(ServerOptions::default()).await;
    let mut raw = Raw::connect(addr).await;
    let mut block = post("/upload");
    block.extend(literal(b"content-length", b"5"));
    block.extend(literal(b"expect", b"100-continue"));
    raw.send(HEADERS, END_HEADERS, 1, &block).await;
    // Nothing of the body sent until the interim answer: a HEADERS without END_STREAM
    // holding `:status: 100` (name from the static table, value a literal).
    let (kind, flags, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream), (HEADERS, 1), "the 100 Continue first");
    assert_eq!(flags & END_STREAM, 0, "an interim answer");
    assert_eq!(payload, b"\x08\x03100", "`:status: 100`");
    raw.send(DATA, END_STREAM, 1, b"hello").await;
    let (kind, flags, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream, payload[0]), (HEADERS, 1, 0x88), "then 200");
    assert_eq!(flags & END_STREAM, 0);
    let (kind, _, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream), (DATA, 1));
    assert_eq!(payload, b"/upload 5 0", "the body reached the destination");

    // The destination answers without reading the body: a final answer, no 100, and
    // the body refused (RST_STREAM NO_ERROR).
    let mut block = post("/early");
    block.extend(literal(b"content-length", b"5"));
    block.extend(literal(b"expect", b"100-continue"));
    raw.send(HEADERS, END_HEADERS, 3, &block).await;
    let (kind, _, stream, payload) = raw.next_event().await.unwrap();
    assert_eq!(
        (kind, stream, payload[0]),
        (HEADERS, 3, 0x88),
        "200, no 100"
    );
    loop {
        let (kind, _, stream, payload) = raw.next_event().await.unwrap();
        assert_eq!(stream, 3);
        if kind == RST_STREAM {
            assert_eq!(payload, [0; 4], "NO_ERROR");
            break;
        }
        assert_eq!(kind, DATA, "the answer's body, then the reset");
    }
}

/// A client that sends frames the server must answer (PINGs) as fast as it can and
/// reads none of the answers is stopped by TCP: the server reads no more of its frames
/// while its own are left unread, instead of holding an acknowledgement for each
/// (CVE-2019-9512; a gigabyte in six seconds before).
#[tokio::test]
async fn a_client_that_reads_nothing_cannot_make_the_server_hold_its_answers() {
    let (addr, _b, _stop) = serving(ServerOptions::default()).await;
    let mut raw = Raw::connect(addr).await;
    let mut ping = Vec::new();
    put_frame(&mut ping, PING, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let batch = ping.repeat(4096);
    // What the kernel's buffers take (a few MB each way on 127.0.0.1) can be written
    // whatever the server does; 64 MB only if it reads them all.
    const LIMIT: usize = 64 << 20;
    let mut written = 0;
    while written < LIMIT {
        // Writes that make no progress for two seconds: the server has stopped reading.
        match tokio::time::timeout(
            std::time::Duration::from_secs(2),
            raw.stream.write_all(&batch),
        )
        .await
        {
            Ok(result) => result.unwrap(),
            Err(_) => break,
        }
        written += batch.len();
    }
    assert!(
        written < LIMIT,
        "the server read {written} bytes of PINGs from a client that read none of its answers"
    );
}

/// "Rapid reset" (CVE-2023-44487): a client that opens streams and resets them at once,
/// each a request started towards the destination and cancelled, is closed with GOAWAY
/// (ENHANCE_YOUR_CALM) once it has reset twice the stream limit (100) more than it let
/// finish; one whose resets are matched by answered streams is served on, as is one
/// that cancels every stream it has open (a browser leaving a page).
#[tokio::test]
async fn a_client_resetting_streams_as_it_opens_them_is_closed() {
    const CANCEL: [u8; 4] = [0, 0, 0, 8];
    let (addr, _b, _stop) = serving(ServerOptions::default()).await;
    // A request whose body is still to come: open until the client resets it.
    fn open_and_reset(frames: &mut Vec<u8>, id: u32) {
        put_frame(frames, HEADERS, END_HEADERS, id, &post("/r"));
        put_frame(frames, RST_STREAM, 0, id, &CANCEL);
    }
    async fn answered(raw: &mut Raw, id: u32) {
        loop {
            let (kind, flags, stream, _) = raw.next_event().await.unwrap();
            assert_ne!(kind, GOAWAY, "closed");
            if stream == id && flags & END_STREAM != 0 {
                return;
            }
        }
    }
    let mut raw = Raw::connect(addr).await;
    // 100 streams open, all reset: served on.
    let mut frames = Vec::new();
    for n in 0..100 {
        open_and_reset(&mut frames, 2 * n + 1);
    }
    raw.stream.write_all(&frames).await.unwrap();
    raw.send(HEADERS, END_HEADERS | END_STREAM, 201, &get("/a"))
        .await;
    answered(&mut raw, 201).await;
    // Answered streams (each read to its end): the count of resets ahead goes from
    // 100 - 1 (the first 100, less `/a`) to -121; then 320 more reset streams bring it
    // to 199, one short of the limit: still served on.
    let mut id = 203;
    for _ in 0..220 {
        raw.send(HEADERS, END_HEADERS | END_STREAM, id, &get("/a"))
            .await;
        answered(&mut raw, id).await;
        id += 2;
    }
    let mut frames = Vec::new();
    for _ in 0..320 {
        open_and_reset(&mut frames, id);
        id += 2;
    }
    raw.stream.write_all(&frames).await.unwrap();
    raw.send(HEADERS, END_HEADERS | END_STREAM, id, &get("/after"))
        .await;
    answered(&mut raw, id).await;

    // Nothing but resets: closed after 200 of them.
    let mut raw = Raw::connect(addr).await;
    let mut frames = Vec::new();
    for n in 0..300 {
        open_and_reset(&mut frames, 2 * n + 1);
    }
    // The server may close before it has read them all.
    let _ = raw.stream.write_all(&frames).await;
    assert_eq!(raw.goaway().await, Some(ENHANCE_YOUR_CALM));
}

/// A header block that never ends (CONTINUATION frames without END_HEADERS, CVE-2024-27316)
/// is refused once it is twice the header list limit and a frame long: GOAWAY with
/// ENHANCE_YOUR_CALM, the connection closed, nothing decoded or kept past that.
#[tokio::test]
async fn a_header_block_without_end_is_refused_at_its_bound() {
    let (addr, _b, _stop) = serving(ServerOptions::default().max_header_list_size(8192)).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(HEADERS, 0, 1, &get("/never")).await;
    let mut junk = Vec::new();
    put_frame(&mut junk, CONTINUATION, 0, 1, &[0x40; 16_384]);
    // 2 × 8 KiB + 16 KiB is the bound; a few frames past it, should the server read
    // late.
    for _ in 0..4 {
        if raw.stream.write_all(&junk).await.is_err() {
            break;
        }
    }
    assert_eq!(raw.goaway().await, Some(ENHANCE_YOUR_CALM));
}

/// Kestrel's `Http2.MaxFrameSize` and `HeaderTableSize`: both said in the server's
/// SETTINGS; a frame up to the larger size is taken; a table lowered to 0 applies once
/// the client has acknowledged it, and the client's next block must then begin with the
/// size update (RFC 7541 §4.2), else COMPRESSION_ERROR.
#[tokio::test]
async fn a_larger_frame_size_and_a_smaller_table_follow_the_configuration() {
    let limits: fuseway::config::ServerLimits =
        serde_json::from_str(r#"{ "Http2": { "MaxFrameSize": 32768, "HeaderTableSize": 0 } }"#)
            .unwrap();
    let (addr, _backend, _stop) = serving(ServerOptions::default().limits(&limits)).await;
    let mut raw = Raw::connect(addr).await;
    let settings = loop {
        let (kind, flags, _, payload) = raw.next().await.expect("the server's SETTINGS");
        if kind == SETTINGS && flags & 1 == 0 {
            break payload;
        }
    };
    let settings: Vec<(u16, u32)> = settings
        .chunks(6)
        .map(|s| {
            (
                u16::from_be_bytes([s[0], s[1]]),
                u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
            )
        })
        .collect();
    assert!(settings.contains(&(0x5, 32_768)), "{settings:?}");
    assert!(settings.contains(&(0x1, 0)), "{settings:?}");
    // Not acknowledged yet: HTTP/2's default table; a body in one 20 000-byte frame.
    raw.send(HEADERS, END_HEADERS, 1, &post("/big")).await;
    raw.send(DATA, END_STREAM, 1, &[b'x'; 20_000]).await;
    let (kind, _, stream, _) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream), (HEADERS, 1));
    let (_, _, _, body) = raw.next_event().await.unwrap();
    assert_eq!(body, b"/big 20000 0");
    // Acknowledged: the next block begins with the update to 0, and is served.
    raw.send(SETTINGS, 1, 0, &[]).await;
    let mut block = vec![0x20];
    block.extend(get("/updated"));
    raw.send(HEADERS, END_STREAM | END_HEADERS, 3, &block).await;
    let (kind, _, stream, _) = raw.next_event().await.unwrap();
    assert_eq!((kind, stream), (HEADERS, 3));
    let (_, _, _, body) = raw.next_event().await.unwrap();
    assert_eq!(body, b"/updated 0 0");
    // Without the update: COMPRESSION_ERROR.
    let mut raw = Raw::connect(addr).await;
    raw.send(SETTINGS, 1, 0, &[]).await;
    raw.send(HEADERS, END_STREAM | END_HEADERS, 1, &get("/stale"))
        .await;
    assert_eq!(raw.goaway().await, Some(0x9));
}

/// A client that lowers its HPACK table under 4 096 bytes (`SETTINGS_HEADER_TABLE_SIZE`,
/// as nghttp2's `h2load --header-table-size` does) waits, from the server's
/// acknowledgement, for a table size update at the start of the next header block (RFC
/// 7541 §4.2): it comes once, first in that block (nghttp2 closes the connection with
/// COMPRESSION_ERROR without it; the server used to send none). A client that raises
/// the table gets none.
#[tokio::test]
async fn a_client_lowering_its_table_gets_the_size_update_once() {
    let (addr, _backend, _stop) = serving(ServerOptions::default()).await;
    for (size, update) in [(0u32, true), (100, true), (8_192, false)] {
        let mut raw = Raw::connect(addr).await;
        let mut setting = vec![0, 1];
        setting.extend_from_slice(&size.to_be_bytes());
        raw.send(SETTINGS, 0, 0, &setting).await;
        let mut firsts = Vec::new();
        let mut acks = 0;
        for (id, path) in [(1, "/first"), (3, "/second")] {
            raw.send(HEADERS, END_STREAM | END_HEADERS, id, &get(path))
                .await;
            loop {
                let (kind, flags, stream, payload) = raw.next().await.expect("a frame");
                if kind == SETTINGS && flags & 1 != 0 {
                    acks += 1;
                }
                if kind == HEADERS {
                    // Both SETTINGS (the preface's empty one, and this) acknowledged
                    // before the first block.
                    assert_eq!((stream, acks), (id, 2), "table size {size}");
                    if payload[0] == 0x20 {
                        assert_eq!(payload[1], 0x88, "the status after the update");
                    }
                    firsts.push(payload[0]);
                    break;
                }
            }
            let (kind, _, _, body) = raw.next_event().await.expect("the body");
            assert_eq!((kind, &body[..]), (DATA, format!("{path} 0 0").as_bytes()));
        }
        // The update to 0 is 0x20; `:status 200` the static table's 8 (0x88).
        let expected = if update { [0x20, 0x88] } else { [0x88, 0x88] };
        assert_eq!(firsts, expected, "table size {size}");
    }
}

/// Flow control both ways with hyper's client: a response body far larger than the
/// client's stream window, and a request body larger than the server's 1 MiB windows;
/// a head too large for one frame (CONTINUATION) reaches the destination whole.
#[tokio::test]
async fn bodies_larger_than_the_windows_and_heads_larger_than_a_frame() {
    let (addr, _backend, _stop) = serving(ServerOptions::default()).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(1024)
            .handshake::<_, http_body_util::Full<Bytes>>(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let response = within(
        "a large response",
        send.send_request(
            Request::get(format!("http://{addr}/big?n=300000"))
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = within("its body", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(body.len(), 300_000);
    let upload = Bytes::from(vec![b'u'; 3 << 20]);
    let big_head = "h".repeat(40_000);
    let response = within(
        "the upload's answer",
        send.send_request(
            Request::post(format!("http://{addr}/up"))
                .header("x-big", &big_head)
                .body(http_body_util::Full::new(upload))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = within("its body", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(body, format!("/up {} 40000", 3 << 20).as_bytes());
}

fuseway::default_pipeline! {
    /// The default stages over the in-process stub terminal, whose responses carry no
    /// fields and an empty body.
    struct StubbedDefault(http::Request<fuseway::body::Incoming>) {
        => stub: fuseway::testing::StubForwarder,
    }
}

/// A response without `date` or `content-length` gets both (as hyper's engine adds
/// them): the date in HTTP's format, the length its body's.
#[tokio::test]
async fn date_and_content_length_are_added_where_the_response_lacks_them() {
    let config = fuseway::config::parse(
        &simple_config(&[("d1", "http://127.0.0.1:9")], ""),
        fuseway::config::Format::Json,
    )
    .unwrap();
    let state = Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let pipeline = StubbedDefault::from_state(
        state,
        fuseway::testing::StubForwarder::new(fuseway::testing::StubMode::Sync),
    );
    let options = ServerOptions::default().http2_engine(Http2Engine::Native);
    let (addr, _stop, _done) = serve_with(pipeline, options).await;
    let (mut send, _connection) = h2c_connection(addr).await;
    let response = within(
        "the stub's answer",
        send.send_request(
            Request::get(format!("http://{addr}/a"))
                .body(http_body_util::Empty::new())
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-length"], "0");
    let date = response.headers()["date"].to_str().unwrap();
    assert!(date.len() == 29 && date.ends_with(" GMT"), "date: {date:?}");
}
