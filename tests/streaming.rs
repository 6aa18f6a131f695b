//! Streaming and `Expect: 100-continue` through the proxy, fused and layered.
//!
//! - Server-sent events reach the client one by one as the destination writes them
//!   (each arrives before the next is produced), with their spacing preserved, and the
//!   cluster's ActivityTimeout (per-chunk idle) does not kill a stream whose events
//!   keep flowing — only one that goes silent.
//! - `Expect: 100-continue`: a destination that rejects early never receives the body
//!   and the client gets its final status without a `100 Continue`; a destination that
//!   accepts gets the body after its own `100 Continue`, which the client sees only
//!   then.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{backend, h1_client, h2c_client, proxy_with, simple_config, within, Form, TestBody};
use futures_util::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

const FORMS: [Form; 2] = [Form::Fused, Form::Layered];

#[tokio::test]
async fn sse_events_arrive_one_by_one_with_their_spacing() {
    const EVENTS: usize = 5;
    let gap = Duration::from_millis(150);
    // Each request's event channel is handed to the test.
    let (streams_tx, mut streams_rx) = mpsc::unbounded_channel::<mpsc::UnboundedSender<Bytes>>();
    let sse = backend(move |_req: Request<Incoming>| {
        let streams_tx = streams_tx.clone();
        async move {
            let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
            streams_tx.send(tx).unwrap();
            let events = tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
                .map(|b| Ok::<_, common::BoxError>(Frame::data(b)));
            let body: TestBody = BodyExt::boxed(StreamBody::new(events));
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(body)
                .unwrap()
        }
    })
    .await;
    // Idle timeout shorter than the whole stream, longer than the gap between events.
    let config = simple_config(
        &[("d1", &sse.url())],
        r#""HttpRequest": { "ActivityTimeout": "400ms" },"#,
    );
    for form in FORMS {
        for (name, client) in [("h1", h1_client()), ("h2c", h2c_client())] {
            let proxy = proxy_with(&config, form).await;
            let response = client.get(proxy.url("/events")).send().await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["content-type"], "text/event-stream");
            let events = within("the backend to open the stream", streams_rx.recv())
                .await
                .unwrap();
            let mut body = response.bytes_stream();
            let mut arrivals = Vec::new();
            for i in 0..EVENTS {
                if i > 0 {
                    // The scenario's spacing between events (not a synchronisation).
                    tokio::time::sleep(gap).await;
                }
                let event = format!("id: {i}\ndata: event {i}\n\n");
                events.send(Bytes::from(event.clone())).unwrap();
                // The next event is produced only after this one arrived, so an event
                // the proxy held back (waiting for more bytes) never arrives: `within`
                // fails. No upper bound on the time it took: that is a bench's job, and
                // a busy CI machine's pauses would make it flaky.
                let chunk = within("an event", body.next()).await.unwrap().unwrap();
                assert_eq!(chunk, event.as_bytes(), "{form:?} {name}");
                arrivals.push(Instant::now());
            }
            for pair in arrivals.windows(2) {
                let spacing = pair[1] - pair[0];
                assert!(
                    spacing >= gap - Duration::from_millis(10),
                    "{form:?} {name}: {spacing:?}"
                );
            }
            let total = arrivals[EVENTS - 1] - arrivals[0];
            assert!(
                total > Duration::from_millis(400),
                "outlived the idle timeout: {total:?}"
            );
            assert_eq!(proxy.concurrency("c", "d1"), 1);

            // Silence past the ActivityTimeout: the proxy ends the stream with an error.
            // Counted from the last event's arrival, not from here, so that a pause of
            // this test's thread cannot shorten what it measures.
            let silent = arrivals[EVENTS - 1];
            let end = within("the idle stream to be cut", body.next()).await;
            assert!(matches!(end, Some(Err(_))), "{form:?} {name}: {end:?}");
            assert!(
                silent.elapsed() >= Duration::from_millis(300),
                "{:?}",
                silent.elapsed()
            );
            drop(events);
            proxy.wait_idle("c", "d1").await;
            proxy.shutdown().await;
        }
    }
}

/// Read one HTTP head (through the blank line) from `stream`; returns it and any bytes
/// read past it.
async fn read_head(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return (String::from_utf8(buf).unwrap(), rest);
        }
        let n = within("an HTTP head", stream.read(&mut chunk))
            .await
            .unwrap();
        assert!(
            n > 0,
            "closed before a complete head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Read until the peer closes; returns everything read.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    within("the connection to close", stream.read_to_end(&mut all))
        .await
        .unwrap_or(0);
    all
}

const UPLOAD: &str = "POST /upload HTTP/1.1\r\nHost: front\r\nContent-Type: text/plain\r\n\
                      Content-Length: 11\r\nExpect: 100-continue\r\n\r\n";

#[tokio::test]
async fn expect_continue_rejected_early_never_sends_the_body() {
    for form in FORMS {
        // A raw destination: reads the head, rejects at once without reading a body,
        // then records every further byte until the proxy closes the connection.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen_tx, seen_rx) = oneshot::channel::<(String, Vec<u8>)>();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (head, mut extra) = read_head(&mut s).await;
            s.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 6\r\nWWW-Authenticate: Basic\r\n\r\ndenied")
                .await
                .unwrap();
            extra.extend(read_to_close(&mut s).await);
            let _ = seen_tx.send((head, extra));
        });
        let proxy = proxy_with(
            &simple_config(&[("d1", &format!("http://{addr}"))], ""),
            form,
        )
        .await;

        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        client.write_all(UPLOAD.as_bytes()).await.unwrap();
        let (head, _) = read_head(&mut client).await;
        assert!(
            head.starts_with("HTTP/1.1 401"),
            "{form:?}: no 100 Continue first: {head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{head}"
        );

        let (dest_head, dest_extra) = within("the destination's record", seen_rx).await.unwrap();
        assert!(
            dest_head
                .to_ascii_lowercase()
                .contains("expect: 100-continue"),
            "{dest_head}"
        );
        assert!(
            dest_extra.is_empty(),
            "{form:?}: the destination received {dest_extra:?}"
        );
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn expect_continue_body_follows_the_destinations_100() {
    for form in FORMS {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (head_tx, head_rx) = oneshot::channel::<()>();
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let (body_tx, body_rx) = oneshot::channel::<Vec<u8>>();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (_head, mut body) = read_head(&mut s).await;
            assert!(body.is_empty(), "body sent before 100 Continue: {body:?}");
            head_tx.send(()).unwrap();
            go_rx.await.unwrap();
            s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.unwrap();
            while body.len() < 11 {
                let mut chunk = [0u8; 64];
                let n = s.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                body.extend_from_slice(&chunk[..n]);
            }
            s.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            body_tx.send(body).unwrap();
            let _ = read_to_close(&mut s).await;
        });
        let proxy = proxy_with(
            &simple_config(&[("d1", &format!("http://{addr}"))], ""),
            form,
        )
        .await;

        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        client.write_all(UPLOAD.as_bytes()).await.unwrap();
        within("the destination to get the head", head_rx)
            .await
            .unwrap();
        // The destination has the head but has not answered: the client has nothing yet.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut probe = [0u8; 64];
        assert!(
            matches!(client.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{form:?}: the client heard something before the destination's 100"
        );
        go_tx.send(()).unwrap();
        let (head, _) = read_head(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 100"), "{form:?}: {head}");
        client.write_all(b"hello world").await.unwrap();
        assert_eq!(
            within("the body at the destination", body_rx)
                .await
                .unwrap(),
            b"hello world"
        );
        let (head, rest) = read_head(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 201"), "{form:?}: {head}");
        let mut body = rest;
        while body.len() < 2 {
            let n = within("the response body", client.read(&mut probe))
                .await
                .unwrap();
            assert!(n > 0);
            body.extend_from_slice(&probe[..n]);
        }
        assert_eq!(body, b"ok");
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

/// An upload of `chunks` chunks of 10 bytes, one every `gap`.
fn slow_upload(chunks: usize, gap: Duration) -> reqwest::Body {
    reqwest::Body::wrap_stream(
        futures_util::stream::iter(0..chunks).then(move |_| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"0123456789"))
        }),
    )
}

/// An upload that sends one chunk, then nothing.
fn stalled_upload() -> reqwest::Body {
    let stalled =
        futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"only this"))])
            .chain(futures_util::stream::pending());
    reqwest::Body::wrap_stream(stalled)
}

/// YARP's `ActivityTimeout` restarts on progress in either direction: an upload that
/// keeps moving may take longer than the timeout while the destination waits for its
/// end; one that stalls still times out (504).
#[tokio::test]
async fn activity_timeout_restarts_on_request_body_progress() {
    const CHUNKS: usize = 16;
    let gap = Duration::from_millis(50);
    // Answers with the number of body bytes it read, once it has read them all.
    let counting = backend(|req: Request<Incoming>| async move {
        let n = req
            .into_body()
            .collect()
            .await
            .map_or(0, |b| b.to_bytes().len());
        Response::new(common::full(n.to_string()))
    })
    .await;
    // The whole upload (16 x 50 ms) lasts longer than the timeout; no gap comes near it.
    let config = simple_config(
        &[("d1", &counting.url())],
        r#""HttpRequest": { "ActivityTimeout": "500ms" },"#,
    );
    for form in FORMS {
        for (name, client) in [("h1", h1_client()), ("h2c", h2c_client())] {
            let proxy = proxy_with(&config, form).await;
            let started = Instant::now();
            let r = within(
                "the slow upload's answer",
                client
                    .post(proxy.url("/upload"))
                    .body(slow_upload(CHUNKS, gap))
                    .send(),
            )
            .await
            .unwrap();
            assert_eq!(r.status(), 200, "{name} {form:?}");
            assert_eq!(r.text().await.unwrap(), (CHUNKS * 10).to_string());
            assert!(
                started.elapsed() > Duration::from_millis(500),
                "the upload outlasted the timeout"
            );

            // One chunk, then nothing: the wait times out.
            let r = within(
                "the stalled upload's answer",
                client
                    .post(proxy.url("/upload"))
                    .body(stalled_upload())
                    .send(),
            )
            .await
            .unwrap();
            assert_eq!(r.status(), 504, "{name} {form:?}");
            proxy.shutdown().await;
        }
    }
}

/// The same while the response streams: a destination that answers its head at once
/// and its body's end only after reading the whole upload sends nothing for longer
/// than the timeout, but the upload keeps moving, so the response is not cut (YARP's
/// stream copier counts progress in either direction); a stalled upload still ends it.
#[tokio::test]
async fn activity_timeout_counts_request_body_progress_while_the_response_streams() {
    const CHUNKS: usize = 16;
    let gap = Duration::from_millis(50);
    let echoing = backend(|req: Request<Incoming>| async move {
        let read = async move {
            let n = req
                .into_body()
                .collect()
                .await
                .map_or(0, |b| b.to_bytes().len());
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Frame::data(Bytes::from(
                n.to_string(),
            )))
        };
        let frames = futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(b"read ")))])
            .chain(futures_util::stream::once(read));
        Response::new(BodyExt::boxed(StreamBody::new(frames)))
    })
    .await;
    let config = simple_config(
        &[("d1", &echoing.url())],
        r#""HttpRequest": { "ActivityTimeout": "500ms" },"#,
    );
    for form in FORMS {
        let proxy = proxy_with(&config, form).await;
        let client = h1_client();
        let started = Instant::now();
        let r = within(
            "the head",
            client
                .post(proxy.url("/echo"))
                .body(slow_upload(CHUNKS, gap))
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "{form:?}");
        let body = within("the body", r.text()).await.unwrap();
        assert_eq!(body, format!("read {}", CHUNKS * 10), "{form:?}");
        assert!(
            started.elapsed() > Duration::from_millis(500),
            "the response outlasted the timeout"
        );

        // One chunk, then nothing: the response is cut after the timeout.
        let r = within(
            "the stalled upload's head",
            client
                .post(proxy.url("/echo"))
                .body(stalled_upload())
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "{form:?}");
        assert!(
            within("the cut body", r.text()).await.is_err(),
            "{form:?}: the response is aborted"
        );
        proxy.shutdown().await;
    }
}
