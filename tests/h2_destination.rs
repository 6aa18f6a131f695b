//! HTTP/2 to destinations (`"Version": "2"`): one connection opened for concurrent first
//! requests, idle connections closed, silent ones found by ping. Real h2c backends,
//! the real proxy and real clients on 127.0.0.1.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

const H2_EXACT: &str = r#""HttpRequest": { "Version": "2", "VersionPolicy": "RequestVersionExact", "ActivityTimeout": "00:01:00" },"#;

/// An h2c-only backend: its address, how many connections it has accepted, and a
/// channel that gets a message each time one of them ends.
struct H2Backend {
    url: String,
    accepted: Arc<AtomicUsize>,
    closed: mpsc::UnboundedReceiver<()>,
    _stop: oneshot::Sender<()>,
}

/// An h2c backend answering `200 ok`.
async fn h2_backend() -> H2Backend {
    h2_backend_limited(None, |_req: Request<Incoming>| async {
        Response::new(full("ok"))
    })
    .await
}

/// An h2c backend answering with `handler`, announcing `max_streams` as its
/// `SETTINGS_MAX_CONCURRENT_STREAMS` (hyper's 200 if `None`).
async fn h2_backend_limited<F, Fut, B>(max_streams: Option<u32>, handler: F) -> H2Backend
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let (stop, mut stopped) = oneshot::channel::<()>();
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                a = listener.accept() => a.unwrap(),
                _ = &mut stopped => return,
            };
            count.fetch_add(1, Ordering::SeqCst);
            let closed_tx = closed_tx.clone();
            let handler = handler.clone();
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = handler(req);
                async move { Ok::<_, std::convert::Infallible>(answer.await) }
            });
            tokio::spawn(async move {
                let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                if let Some(max) = max_streams {
                    builder.max_concurrent_streams(max);
                }
                let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                let _ = closed_tx.send(());
            });
        }
    });
    H2Backend {
        url: format!("http://{addr}"),
        accepted,
        closed,
        _stop: stop,
    }
}

/// The layered default pipeline over `forwarder`, on 127.0.0.1:0, for one cluster of
/// `destination` forwarding over HTTP/2.
async fn proxy_over(
    destination: &str,
    forwarder: fuseway::forwarding::Forwarder<fuseway::body::Incoming>,
) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    let config: fuseway::config::ProxyConfig =
        serde_json::from_str(&simple_config(&[("d1", destination)], H2_EXACT)).unwrap();
    let state = Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let service = fuseway::server::ProxyService::new(fuseway::pipeline::layered_default_with(
        state, forwarder,
    ));
    let (addr, stop, _done) = serve(service).await;
    (addr, stop)
}

/// 100 concurrent first requests to a fresh HTTP/2 destination share the one
/// connection the first of them opens; later requests take it too.
#[tokio::test]
async fn concurrent_first_requests_open_one_connection() {
    let b = h2_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url)], H2_EXACT)).await;
    let client = h1_client();
    let requests = (0..100).map(|i| {
        let request = client.get(p.url(&format!("/first/{i}"))).send();
        async move { request.await.unwrap().status() }
    });
    let statuses = within(
        "100 concurrent first requests",
        futures_util::future::join_all(requests),
    )
    .await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1, "connections opened");
    let r = within("a later request", client.get(p.url("/later")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1, "connections opened");
    p.shutdown().await;
}

/// 50 concurrent requests to a destination that takes 10 streams per connection:
/// with `EnableMultipleHttp2Connections` (YARP's default) they get five connections
/// and are all in flight at once; without, they share one connection and 40 queue
/// there until streams end; enabled with `MaxConnectionsPerServer` 2, two connections
/// carry 20 and the rest queue on them.
#[tokio::test]
async fn multiple_connections_past_the_stream_limit_only_when_enabled() {
    for (enabled, max, connections, at_once) in [
        (true, None, 5, 50),
        (false, None, 1, 10),
        (true, Some(2), 2, 20),
    ] {
        let (in_flight, mut seen) = tokio::sync::watch::channel(0usize);
        let (release, released) = tokio::sync::watch::channel(false);
        let in_flight = Arc::new(in_flight);
        let b = h2_backend_limited(Some(10), move |_req: Request<Incoming>| {
            let in_flight = in_flight.clone();
            let mut released = released.clone();
            async move {
                in_flight.send_modify(|n| *n += 1);
                let _ = released.wait_for(|r| *r).await;
                Response::new(full("ok"))
            }
        })
        .await;
        let max = max.map_or(String::new(), |n| {
            format!(r#", "MaxConnectionsPerServer": {n}"#)
        });
        let cluster = format!(
            r#"{H2_EXACT} "HttpClient": {{ "EnableMultipleHttp2Connections": {enabled}{max} }},"#
        );
        let p = proxy(&simple_config(&[("d1", &b.url)], &cluster)).await;
        let client = h1_client();
        let requests = futures_util::future::join_all((0..50).map(|i| {
            let request = client.get(p.url(&format!("/held/{i}"))).send();
            async move { request.await.unwrap().status() }
        }));
        let requests = tokio::spawn(requests);
        within(
            "the requests the destination can take at once",
            seen.wait_for(|n| *n == at_once),
        )
        .await
        .unwrap();
        assert_eq!(
            b.accepted.load(Ordering::SeqCst),
            connections,
            "connections opened (enabled: {enabled}, cap: {max})"
        );
        release.send(true).unwrap();
        let statuses = within("50 held requests", requests).await.unwrap();
        assert!(
            statuses.iter().all(|s| *s == StatusCode::OK),
            "{statuses:?}"
        );
        assert_eq!(*seen.borrow(), 50, "requests the destination saw");
        assert_eq!(
            b.accepted.load(Ordering::SeqCst),
            connections,
            "connections opened in all (enabled: {enabled}, cap: {max})"
        );
        p.shutdown().await;
    }
}

/// A destination that cannot be reached fails every request that waited for the
/// connection (502), and the next request tries again.
#[tokio::test]
async fn a_failed_open_fails_its_waiters_and_the_next_request_tries_again() {
    let dead = Refused::bind();
    let p = proxy(&simple_config(&[("d1", &dead.url())], H2_EXACT)).await;
    let client = h1_client();
    let requests = (0..10).map(|i| {
        let request = client.get(p.url(&format!("/dead/{i}"))).send();
        async move { request.await.unwrap().status() }
    });
    let statuses = within(
        "10 requests to a dead destination",
        futures_util::future::join_all(requests),
    )
    .await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::BAD_GATEWAY),
        "{statuses:?}"
    );
    let r = within("a request after", client.get(p.url("/again")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    p.shutdown().await;
}

/// An HTTP/2 connection no request has taken for the idle timeout is closed; the next
/// request opens another.
#[tokio::test]
async fn an_idle_h2_connection_is_closed_after_the_idle_timeout() {
    let mut b = h2_backend().await;
    let forwarder = fuseway::forwarding::Forwarder::builder()
        .idle_timeout(Duration::from_millis(300))
        .build();
    let (addr, _stop) = proxy_over(&b.url, forwarder).await;
    let client = h1_client();
    let r = within("a request", client.get(format!("http://{addr}/a")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "ok");
    within("the idle connection to close", b.closed.recv())
        .await
        .expect("the backend saw its connection end");
    let r = within(
        "a request after",
        client.get(format!("http://{addr}/b")).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(b.accepted.load(Ordering::SeqCst), 2, "connections opened");
}

/// A destination that completes the HTTP/2 handshake and then goes silent (it answers
/// neither the request nor pings) is found dead by the keep-alive ping well before the
/// one-minute activity timeout: the request gets a 502.
#[tokio::test]
async fn a_silent_destination_is_detected_by_ping() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let silent = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        // The client's preface and SETTINGS, answered with an empty SETTINGS and an ack.
        let mut preface = [0u8; 24];
        stream.read_exact(&mut preface).await.unwrap();
        assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        stream
            .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0])
            .await
            .unwrap();
        // The client's frames up to its first ping (the h2 crate's client pings as the
        // connection opens, fuseway's own after the first keep-alive interval), which
        // is answered: the connection is open.
        loop {
            let (kind, flags, _, payload) = h2_frame(&mut stream).await.unwrap();
            if kind == 6 && flags & 1 == 0 {
                let mut ack = vec![0, 0, 8, 6, 1, 0, 0, 0, 0];
                ack.extend_from_slice(&payload);
                stream.write_all(&ack).await.unwrap();
                break;
            }
        }
        // Then silence: nothing read, nothing written, the socket held open.
        stream
    });
    let forwarder = fuseway::forwarding::Forwarder::builder()
        .http2_keep_alive(Some(Duration::from_millis(200)), Duration::from_millis(300))
        .build();
    let (addr, _stop) = proxy_over(&url, forwarder).await;
    let r = within(
        "the silent destination to be found dead",
        h1_client().get(format!("http://{addr}/silent")).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    drop(silent);
}

/// An h2c backend echoing each request's body back as its response body, streamed: the
/// response head goes at once, each chunk as it arrives.
async fn h2_echo_backend() -> H2Backend {
    h2_backend_limited(None, |req: Request<Incoming>| async move {
        Response::new(req.into_body())
    })
    .await
}

/// Bodies far larger than HTTP/2's initial flow-control windows go both ways through an
/// h2c destination intact (the window is given back as the response is read, and the
/// request is written as the destination grants it).
#[tokio::test]
async fn large_bodies_cross_an_h2c_destination_both_ways() {
    let b = h2_echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url)], H2_EXACT)).await;
    let body: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    for client in [h1_client(), h2c_client()] {
        let r = within(
            "a 4 MiB echo",
            client.post(p.url("/echo")).body(body.clone()).send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let echoed = within("the echoed body", r.bytes()).await.unwrap();
        assert!(
            echoed == body,
            "the body came back changed ({} bytes)",
            echoed.len()
        );
    }
    p.shutdown().await;
}

/// A request body still being written after the response head has come back (the
/// destination answers at once and echoes as it reads): each chunk reaches the
/// destination and comes back before the next one is sent — full duplex through the
/// proxy, the request body written by the response body's reads.
#[tokio::test]
async fn the_request_body_streams_after_the_response_head() {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    let b = h2_echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url)], H2_EXACT)).await;
    let (tx, rx) = mpsc::channel::<Result<hyper::body::Frame<Bytes>, std::io::Error>>(1);
    let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let stream = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = Request::post(format!("http://{}/duplex", p.addr))
        .body(body)
        .unwrap();
    tx.send(Ok(hyper::body::Frame::data(Bytes::from_static(b"one"))))
        .await
        .unwrap();
    let response = within("the response head", sender.send_request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut echoed = response.into_body();
    for chunk in ["one", "two", "three"] {
        if chunk != "one" {
            tx.send(Ok(hyper::body::Frame::data(Bytes::from(chunk))))
                .await
                .unwrap();
        }
        let frame = within("a chunk's echo", echoed.frame())
            .await
            .expect("a frame")
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), chunk.as_bytes());
    }
    drop(tx);
    let rest = within("the end of the echo", echoed.collect())
        .await
        .unwrap()
        .to_bytes();
    assert!(rest.is_empty());
    p.shutdown().await;
}

/// An HTTP/2 destination's answer with many values under one name (20 cookies) leaves
/// its header map, once written to an HTTP/1.1 client, with more values than room for
/// names; the next request on the connection reads its head into that map (requests
/// sent on over HTTP/2 give theirs to the destination's stream) and must be served, not
/// end the connection.
#[tokio::test]
async fn an_answer_of_many_cookies_leaves_the_next_request_served() {
    let b = h2_backend_limited(None, |req: Request<Incoming>| async move {
        let mut response = Response::new(full("ok"));
        if req.uri().path() == "/cookies" {
            for i in 0..20 {
                let cookie = format!("c{i}=v").parse().unwrap();
                response.headers_mut().append("set-cookie", cookie);
            }
        }
        response
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url)], H2_EXACT)).await;
    let client = h1_client();
    for round in 0..3 {
        let r = client.get(p.url("/cookies")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers().get_all("set-cookie").iter().count(), 20);
        let r = within(
            "the next request",
            client
                .post(p.url("/after"))
                .header("x-a", "1")
                .header("x-b", "2")
                .body("x")
                .send(),
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    p.shutdown().await;
}

/// A request body from an HTTP/1.1 client that the HTTP/2 destination reads whole
/// before it answers (as most applications do): the body's end reaches it (`END_STREAM`)
/// whatever the size, so the answer comes.
#[tokio::test]
async fn a_body_read_whole_before_the_answer_reaches_its_end() {
    use http_body_util::BodyExt;
    let b = h2_backend_limited(None, |req: Request<Incoming>| async move {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        Response::new(full(format!("got {}", body.len())))
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url)], H2_EXACT)).await;
    for len in [1_000, 8_192, 100_000, 1_000_000] {
        for client in [h1_client(), h2c_client()] {
            let r = within(
                "the answer",
                client.post(p.url("/up")).body(vec![b'x'; len]).send(),
            )
            .await
            .unwrap_or_else(|e| panic!("{len} bytes: {e:?}"));
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.text().await.unwrap(), format!("got {len}"));
        }
    }
    p.shutdown().await;
}

/// A scripted HTTP/2 destination's side of `stream` up to the next HEADERS frame: the
/// client's frames read (the connection preface first when `preface`), its SETTINGS
/// acknowledged and its PINGs answered; the HEADERS' stream id, or `None` once the
/// connection has ended.
async fn script_until_headers(stream: &mut tokio::net::TcpStream, preface: bool) -> Option<u32> {
    if preface {
        stream
            .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        let mut preface = [0u8; 24];
        stream.read_exact(&mut preface).await.unwrap();
    }
    loop {
        let (kind, flags, id, payload) = h2_frame(stream).await.ok()?;
        match (kind, flags) {
            (1, _) => return Some(id),
            (4, 0) => stream
                .write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0])
                .await
                .unwrap(),
            (6, 0) => {
                stream
                    .write_all(&[0, 0, 8, 6, 1, 0, 0, 0, 0])
                    .await
                    .unwrap();
                stream.write_all(&payload).await.unwrap();
            }
            _ => {}
        }
    }
}

/// A scripted destination's answer to stream `id`: `200`, no content (HEADERS with
/// END_STREAM and END_HEADERS, `:status: 200` as HPACK index 8).
async fn answer_200(stream: &mut tokio::net::TcpStream, id: u32) {
    let mut answer = vec![0, 0, 1, 1, 5];
    answer.extend_from_slice(&id.to_be_bytes());
    answer.push(0x88);
    stream.write_all(&answer).await.unwrap();
}

/// The proxy in front of the scripted destination at `addr`, over h2c.
async fn proxy_to_scripted(addr: std::net::SocketAddr) -> Proxy {
    proxy(&simple_config(
        &[("d1", &format!("http://{addr}"))],
        H2_EXACT,
    ))
    .await
}

/// A destination that tells the connection to go away (GOAWAY, last stream 0) once it
/// has the request's HEADERS: the stream was not processed (RFC 9113 §6.8), so a request
/// without a body goes again on a new connection, as .NET's client does under YARP,
/// and the client gets its answer — on both HTTP/2 client engines.
#[tokio::test]
async fn a_request_refused_by_goaway_goes_again_on_a_new_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            if count.fetch_add(1, Ordering::SeqCst) > 0 {
                let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, std::convert::Infallible>(Response::new(full("ok")))
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc),
                );
                continue;
            }
            // The first connection: GOAWAY leaving every stream out, once the request's
            // HEADERS are in.
            tokio::spawn(async move {
                script_until_headers(&mut stream, true).await.unwrap();
                let goaway = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                stream.write_all(&goaway).await.unwrap();
                // No stream left: closed, as a destination going away gracefully does.
                let _ = stream.shutdown().await;
            });
        }
    });
    let p = proxy_to_scripted(addr).await;
    let r = within("the answer", h1_client().get(p.url("/a")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "ok");
    let opened = accepted.load(Ordering::SeqCst);
    assert_eq!(opened, 2, "sent again on a new connection");
    p.shutdown().await;
}

/// A destination that refuses a request's stream with `RST_STREAM(REFUSED_STREAM)`
/// (not processed, RFC 9113 §8.7) and answers the next: a request without a body goes
/// again — on the same connection, which stays open — and the client gets the answer;
/// one with a body gets 502 (its body went out). Both HTTP/2 client engines.
#[tokio::test]
async fn a_request_refused_by_refused_stream_goes_again() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen_tx = seen_tx.clone();
            tokio::spawn(async move {
                let mut preface = true;
                // Refuse a stream, answer the next `200` with no content, and so on.
                loop {
                    let refused = script_until_headers(&mut stream, preface).await.unwrap();
                    preface = false;
                    let _ = seen_tx.send(refused);
                    let mut reset = vec![0, 0, 4, 3, 0];
                    reset.extend_from_slice(&refused.to_be_bytes());
                    reset.extend_from_slice(&7u32.to_be_bytes());
                    stream.write_all(&reset).await.unwrap();
                    let answered = script_until_headers(&mut stream, false).await.unwrap();
                    let _ = seen_tx.send(answered);
                    answer_200(&mut stream, answered).await;
                }
            });
        }
    });
    let p = proxy_to_scripted(addr).await;
    let r = within("the answer", h1_client().get(p.url("/a")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "");
    let streams = [
        within("the first stream", seen.recv()).await.unwrap(),
        within("the second stream", seen.recv()).await.unwrap(),
    ];
    assert_eq!(
        streams,
        [1, 3],
        "refused on stream 1, sent again on stream 3"
    );
    // The next request is refused and has a body: 502, not sent again.
    let r = within(
        "the answer",
        h1_client().post(p.url("/b")).body("body").send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(within("the third stream", seen.recv()).await, Some(5));
    p.shutdown().await;
}

/// A destination that keeps a request's stream (GOAWAY naming it as the last) and then
/// closes the connection without answering it, as Hypercorn does at its request limit:
/// whether it was processed is not known, so only a request that can be sent twice —
/// idempotent and without a body — goes again, on a new connection, and only once; a
/// `POST` gets 502, with a body or without. Both HTTP/2 client engines.
#[tokio::test]
async fn a_request_cut_off_by_its_connections_end_goes_again_once_if_idempotent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    // How many of the next streams are cut off.
    let cuts = Arc::new(AtomicUsize::new(0));
    let (count, to_cut) = (accepted.clone(), cuts.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let to_cut = to_cut.clone();
            tokio::spawn(async move {
                let mut preface = true;
                while let Some(id) = script_until_headers(&mut stream, preface).await {
                    preface = false;
                    let cut = to_cut
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if cut {
                        // GOAWAY(last stream: this one, NO_ERROR): kept, never answered.
                        let mut goaway = vec![0, 0, 8, 7, 0, 0, 0, 0, 0];
                        goaway.extend_from_slice(&id.to_be_bytes());
                        goaway.extend_from_slice(&0u32.to_be_bytes());
                        stream.write_all(&goaway).await.unwrap();
                        let _ = stream.shutdown().await;
                        return;
                    }
                    answer_200(&mut stream, id).await;
                }
            });
        }
    });
    let p = proxy_to_scripted(addr).await;
    let client = h1_client();
    // The answer's status, and how many connections the destination took meanwhile.
    let send = |request: reqwest::RequestBuilder, streams_cut: usize| {
        cuts.store(streams_cut, Ordering::SeqCst);
        let before = accepted.load(Ordering::SeqCst);
        let accepted = accepted.clone();
        async move {
            let r = within("the answer", request.send()).await.unwrap();
            let status = r.status();
            let _ = within("the body", r.bytes()).await;
            (status, accepted.load(Ordering::SeqCst) - before)
        }
    };
    // Cut off once: sent again on a new connection, answered.
    let (status, opened) = send(client.get(p.url("/a")), 1).await;
    assert_eq!((status, opened), (StatusCode::OK, 2), "GET cut off once");
    let (status, opened) = send(client.delete(p.url("/a")), 1).await;
    assert_eq!((status, opened), (StatusCode::OK, 1), "DELETE cut off once");
    // Cut off twice: not a third time.
    let (status, opened) = send(client.get(p.url("/a")), 2).await;
    assert_eq!(
        (status, opened),
        (StatusCode::BAD_GATEWAY, 1),
        "GET cut off twice"
    );
    // Not idempotent, or with a body: not sent again.
    let (status, opened) = send(client.post(p.url("/a")), 1).await;
    assert_eq!(
        (status, opened),
        (StatusCode::BAD_GATEWAY, 1),
        "bodiless POST"
    );
    let (status, opened) = send(client.put(p.url("/a")).body("body"), 1).await;
    assert_eq!(
        (status, opened),
        (StatusCode::BAD_GATEWAY, 1),
        "PUT with a body"
    );
    // Answered as usual on the next connection.
    let (status, opened) = send(client.get(p.url("/a")), 0).await;
    assert_eq!((status, opened), (StatusCode::OK, 1));
    p.shutdown().await;
}

/// `block` as the header block of stream `id`: a HEADERS frame and as many CONTINUATION
/// frames as 16 KiB frames take, END_STREAM when `end_stream`.
fn header_frames(id: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let pieces: Vec<&[u8]> = block.chunks(16 * 1024).collect();
    let mut frames = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let kind = if i == 0 { 1 } else { 9 };
        let mut flags = if i + 1 == pieces.len() { 4 } else { 0 };
        if i == 0 && end_stream {
            flags |= 1;
        }
        frames.extend_from_slice(&(piece.len() as u32).to_be_bytes()[1..]);
        frames.extend_from_slice(&[kind, flags]);
        frames.extend_from_slice(&id.to_be_bytes());
        frames.extend_from_slice(piece);
    }
    frames
}

/// A scripted destination that answers its first request with `first(stream id)` and
/// every later one `200`, with no content; how many connections it took.
async fn scripted_first(first: fn(u32) -> Vec<u8>) -> (Proxy, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut preface = true;
                while let Some(id) = script_until_headers(&mut stream, preface).await {
                    if preface && n == 0 {
                        stream.write_all(&first(id)).await.unwrap();
                    } else {
                        answer_200(&mut stream, id).await;
                    }
                    preface = false;
                }
            });
        }
    });
    (proxy_to_scripted(addr).await, accepted)
}

/// A response head whose fields take more than 64 KiB as HTTP/2 counts them (each
/// field's name and value and 32 bytes), in a block of 40 KB: one field added to the
/// HPACK table, then referred to 40 000 times (1 byte each). Such a list fails its
/// request (502), and the next request is served: on the native client the stream alone
/// fails and the next request goes on the same connection; the h2 crate's client
/// (hyper's engine) ends the connection for a list this far over its limit (its "abuse
/// limit"). Before the limit the native client took any list, and its header map
/// panicked past 32 768 fields.
#[tokio::test]
async fn a_response_header_list_over_64_kib_fails_its_request_alone() {
    let (p, accepted) = scripted_first(|id| {
        // `:status: 200`, `x-a: b` with incremental indexing, then index 62 (it).
        let mut block = vec![0x88, 0x40, 3, b'x', b'-', b'a', 1, b'b'];
        block.extend(std::iter::repeat_n(0xbe, 40_000));
        header_frames(id, &block, true)
    })
    .await;
    let client = h1_client();
    let r = within("the answer", client.get(p.url("/a")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let r = within("the next answer", client.get(p.url("/b")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let native = fuseway::server::Http2Engine::from_env() == fuseway::server::Http2Engine::Native;
    let connections = accepted.load(Ordering::SeqCst);
    assert_eq!(connections, if native { 1 } else { 2 }, "connections");
    p.shutdown().await;
}

/// Interim (1xx) heads count in their response's 64 KiB on the native client, as in
/// .NET's client under YARP: 2 000 `103`s (42 bytes each as HTTP/2 counts them) before
/// the answer fail the request (502) instead of holding it as long as the destination
/// sends them; 100 are skipped. The h2 crate's client (hyper's engine) bounds each head
/// alone and takes any number of them.
#[tokio::test]
async fn interim_heads_count_in_the_response_header_list() {
    fn after_interim(id: u32, n: usize) -> Vec<u8> {
        let mut frames = Vec::new();
        for _ in 0..n {
            // `:status` (static index 8) as a literal without indexing: `103`.
            frames.extend(header_frames(id, &[0x08, 3, b'1', b'0', b'3'], false));
        }
        frames.extend(header_frames(id, &[0x88], true));
        frames
    }
    let native = fuseway::server::Http2Engine::from_env() == fuseway::server::Http2Engine::Native;
    for (first, status) in [
        (
            (|id| after_interim(id, 100)) as fn(u32) -> Vec<u8>,
            StatusCode::OK,
        ),
        (
            |id| after_interim(id, 2_000),
            if native {
                StatusCode::BAD_GATEWAY
            } else {
                StatusCode::OK
            },
        ),
    ] {
        let (p, _) = scripted_first(first).await;
        let r = within("the answer", h1_client().get(p.url("/a")).send())
            .await
            .unwrap();
        assert_eq!(r.status(), status);
        p.shutdown().await;
    }
}
