//! Forwarding end to end: real backends, the real proxy, real clients, 127.0.0.1.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use futures_util::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Send raw bytes, read until the proxy closes the connection.
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    within("a raw exchange", async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
}

fn header_of<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
        .collect()
}

#[tokio::test]
async fn http1_and_h2c_clients_reach_the_backend() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    for (client, name) in [(h1_client(), "h1"), (h2c_client(), "h2c")] {
        let r = client
            .get(p.url("/some/path?x=1&y=%20"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{name}");
        assert_eq!(
            r.headers()["x-echo-version"],
            "HTTP/1.1",
            "{name}: upstream is HTTP/1.1"
        );
        assert_eq!(
            r.text().await.unwrap(),
            "GET /some/path?x=1&y=%20",
            "{name}"
        );
    }
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

#[tokio::test]
async fn destination_path_prefix_is_prepended() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &format!("{}/base/", b.url()))], "")).await;
    let r = h1_client()
        .post(p.url("/x?q"))
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "POST /base/x?q");
    p.shutdown().await;
}

#[tokio::test]
async fn http2_destination() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(
        &[("d1", &b.url())],
        r#""HttpRequest": { "Version": "2", "VersionPolicy": "RequestVersionExact" },"#,
    ))
    .await;
    for client in [h1_client(), h2c_client()] {
        let r = client.get(p.url("/h2")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["x-echo-version"], "HTTP/2.0");
        assert_eq!(r.text().await.unwrap(), "GET /h2");
    }
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

#[tokio::test]
async fn cluster_without_destinations_is_503() {
    let p = proxy(&simple_config(&[], "")).await;
    let r = h1_client().get(p.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    p.shutdown().await;
}

#[tokio::test]
async fn route_to_missing_cluster_is_503() {
    let p = proxy(
        r#"{ "Routes": { "r": { "ClusterId": "nope", "Match": { "Path": "/{**x}" } } },
             "Clusters": {} }"#,
    )
    .await;
    let r = h1_client().get(p.url("/a")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    p.shutdown().await;
}

#[tokio::test]
async fn connect_refused_is_502_and_counters_return_to_zero() {
    let dead = Refused::bind();
    let p = proxy(&simple_config(&[("dead", &dead.url())], "")).await;
    for client in [h1_client(), h2c_client()] {
        let r = client.get(p.url("/x")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    }
    p.wait_idle("c", "dead").await;
    p.shutdown().await;
}

#[tokio::test]
async fn stalled_backend_is_504_after_activity_timeout() {
    let b = backend(|_req: Request<Incoming>| async move {
        std::future::pending::<()>().await;
        unreachable!()
    })
    .await;
    let p = proxy(&simple_config(
        &[("slow", &b.url())],
        r#""HttpRequest": { "ActivityTimeout": "200ms" },"#,
    ))
    .await;
    let r = h1_client().get(p.url("/x")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
    p.wait_idle("c", "slow").await;
    p.shutdown().await;
}

#[tokio::test]
async fn body_that_stalls_after_headers_is_aborted_by_activity_timeout() {
    let b = backend(|_req: Request<Incoming>| async move {
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
        tokio::spawn(async move {
            tx.send(Ok(Frame::data(Bytes::from_static(b"first"))))
                .await
                .ok();
            std::future::pending::<()>().await;
            drop(tx);
        });
        let stream = tokio_stream(rx);
        Response::new(BodyExt::boxed(StreamBody::new(stream)))
    })
    .await;
    let p = proxy(&simple_config(
        &[("slow", &b.url())],
        r#""HttpRequest": { "ActivityTimeout": "200ms" },"#,
    ))
    .await;
    let r = h1_client().get(p.url("/x")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let err = within("the aborted body", r.bytes()).await;
    assert!(
        err.is_err(),
        "the client must see an aborted body, not a clean end"
    );
    p.wait_idle("c", "slow").await;
    p.shutdown().await;
}

/// The activity timeout of a request on a reused connection counts from that request,
/// not from an earlier one on the same connection (the connection's timer is moved
/// lazily), also after the timer fired while the connection was idle in its pool.
#[tokio::test]
async fn the_activity_timeout_of_a_reused_connection_counts_from_its_request() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                if req.uri().path() == "/slow" {
                    std::future::pending::<()>().await;
                }
                Ok::<_, std::convert::Infallible>(Response::new(full("fast")))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
            );
        }
    });
    let timeout = Duration::from_millis(300);
    let p = proxy(&simple_config(
        &[("d", &format!("http://{addr}"))],
        r#""HttpRequest": { "ActivityTimeout": "300ms" },"#,
    ))
    .await;
    let client = h1_client();

    // 1. A fast request leaves its connection in the pool with the timer set for its
    //    deadline; 200 ms later a stalled request takes that connection.
    let r = client.get(p.url("/fast")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "fast");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let took = stalled(&client, &p.url("/slow")).await;
    assert!(
        took >= timeout - Duration::from_millis(20),
        "timed out after {took:?}: the earlier request's deadline was used"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the pooled connection was reused"
    );

    // 2. The timer fires while the connection waits in the pool; the next request on
    //    it still gets its whole timeout.
    let r = client.get(p.url("/fast")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "fast");
    let opened = accepted.load(Ordering::SeqCst);
    tokio::time::sleep(timeout + Duration::from_millis(200)).await;
    let took = stalled(&client, &p.url("/slow")).await;
    assert!(
        took >= timeout - Duration::from_millis(20),
        "timed out after {took:?}: the timer that fired in the pool was taken as expired"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), opened, "reused again");
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}

/// Send a request the destination never answers: it must get 504; how long that took.
async fn stalled(client: &reqwest::Client, url: &str) -> Duration {
    let sent = Instant::now();
    let r = within("the stalled request", client.get(url).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
    sent.elapsed()
}

fn tokio_stream<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_both_ways() {
    let b = backend(|req: Request<Incoming>| async move {
        let mut names: Vec<String> = req.headers().keys().map(|k| k.to_string()).collect();
        names.sort();
        Response::builder()
            .header("connection", "x-resp-hop")
            .header("x-resp-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("proxy-authenticate", "Basic")
            .header("alt-svc", "h3=\":443\"")
            .header("x-resp-kept", "1")
            .body(full(names.join(",")))
            .unwrap()
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let resp = raw(
        p.addr,
        "GET /x HTTP/1.1\r\nHost: front\r\nConnection: close, X-Custom-Hop\r\nX-Custom-Hop: 1\r\n\
         Keep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n\
         TE: trailers\r\nUpgrade-Insecure-Requests: 1\r\nX-Kept: 1\r\n\r\n",
    )
    .await;
    let (head, body) = resp.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen: Vec<&str> = body.split(',').collect();
    assert!(seen.contains(&"x-kept"), "{body}");
    for hop in [
        "x-custom-hop",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "upgrade-insecure-requests",
    ] {
        assert!(!seen.contains(&hop), "{hop} reached the backend: {body}");
    }
    assert_eq!(header_of(head, "x-resp-kept"), ["1"]);
    for hop in ["x-resp-hop", "keep-alive", "proxy-authenticate", "alt-svc"] {
        assert!(
            header_of(head, hop).is_empty(),
            "{hop} reached the client: {head}"
        );
    }
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

/// Java's `HttpClient` and `curl --http2` ask every `http://` request to upgrade to
/// `h2c`. Such a request is forwarded as an ordinary one: without `Upgrade` and
/// `HTTP2-Settings`, so that a destination willing to switch (as the h2c-smuggling
/// attack needs) cannot, and the client's connection carries on over HTTP/1.1.
#[tokio::test]
async fn an_h2c_upgrade_request_is_forwarded_as_an_ordinary_request() {
    let b = backend(|req: Request<Incoming>| async move {
        if req.headers().contains_key("upgrade") {
            return Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("connection", "upgrade")
                .header("upgrade", "h2c")
                .body(full(""))
                .unwrap();
        }
        let mut names: Vec<String> = req.headers().keys().map(|n| n.to_string()).collect();
        names.sort();
        let method = req.method().clone();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let text = format!("{method} {} [{}]", body.len(), names.join(","));
        Response::new(full(text))
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let upgrade = "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n";
    let resp = raw(
        p.addr,
        &format!(
            "GET /a HTTP/1.1\r\nHost: front\r\nConnection: Upgrade, HTTP2-Settings\r\n{upgrade}\r\n\
             POST /b HTTP/1.1\r\nHost: front\r\nConnection: Upgrade, close\r\n{upgrade}\
             Content-Length: 5\r\n\r\nhello"
        ),
    )
    .await;
    let answers: Vec<&str> = resp.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(answers.len(), 2, "two answers on one connection: {resp}");
    for (answer, method) in answers.iter().zip(["GET 0", "POST 5"]) {
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("200"), "{answer}");
        assert!(body.starts_with(method), "{body}");
        for hop in ["upgrade", "http2-settings", "connection"] {
            assert!(!body.contains(hop), "{hop} reached the destination: {body}");
        }
    }
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

#[tokio::test]
async fn x_forwarded_headers_are_replaced_not_appended() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let r = h1_client()
        .get(p.url("/x"))
        .header("x-forwarded-for", "6.6.6.6")
        .header("x-forwarded-proto", "gopher")
        .header("x-forwarded-host", "evil.example")
        .header("x-forwarded-prefix", "/evil")
        .header("forwarded", "for=6.6.6.6")
        .send()
        .await
        .unwrap();
    let h = r.headers();
    let all = |n: &str| {
        h.get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(all("x-echo-x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(all("x-echo-x-forwarded-proto"), ["http"]);
    assert_eq!(all("x-echo-x-forwarded-host"), [p.addr.to_string()]);
    assert!(all("x-echo-x-forwarded-prefix").is_empty());
    assert!(all("x-echo-forwarded").is_empty());
    assert_eq!(
        all("x-echo-host"),
        [b.addr.to_string()],
        "Host is the destination's authority"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn destination_host_overrides_host_header() {
    let b = echo_backend().await;
    let p = proxy(&format!(
        r#"{{ "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**x}}" }} }} }},
             "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}", "Host": "internal.example" }} }} }} }} }}"#,
        b.url()
    ))
    .await;
    let r = h1_client().get(p.url("/x")).send().await.unwrap();
    assert_eq!(r.headers()["x-echo-host"], "internal.example");
    p.shutdown().await;
}

const MB: usize = 1024 * 1024;

#[tokio::test]
async fn large_response_streams_before_the_backend_finishes() {
    let (release_tx, release_rx) = mpsc::channel::<()>(1);
    let release_rx = std::sync::Arc::new(tokio::sync::Mutex::new(release_rx));
    let b = backend(move |_req: Request<Incoming>| {
        let release_rx = release_rx.clone();
        async move {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
            tokio::spawn(async move {
                tx.send(Ok(Frame::data(Bytes::from(vec![b'a'; MB]))))
                    .await
                    .ok();
                // The rest only once the client has seen the first megabyte.
                release_rx.lock().await.recv().await;
                for _ in 0..4 {
                    tx.send(Ok(Frame::data(Bytes::from(vec![b'b'; MB]))))
                        .await
                        .ok();
                }
            });
            Response::new(BodyExt::boxed(StreamBody::new(tokio_stream(rx))))
        }
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let r = h1_client().get(p.url("/big")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let mut stream = r.bytes_stream();
    let mut got = 0usize;
    while got < MB {
        let chunk = within("the first megabyte", stream.next())
            .await
            .unwrap()
            .unwrap();
        got += chunk.len();
    }
    assert_eq!(got, MB, "only the first megabyte exists before the release");
    release_tx.send(()).await.unwrap();
    while let Some(chunk) = within("the rest", stream.next()).await {
        got += chunk.unwrap().len();
    }
    assert_eq!(got, 5 * MB);
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

#[tokio::test]
async fn large_request_streams_before_the_client_finishes() {
    let (first_tx, mut first_rx) = mpsc::channel::<()>(1);
    let b = backend(move |req: Request<Incoming>| {
        let first_tx = first_tx.clone();
        async move {
            let mut body = req.into_body();
            let mut total = 0usize;
            let mut signalled = false;
            while let Some(frame) = body.frame().await {
                if let Ok(d) = frame.unwrap().into_data() {
                    total += d.len();
                }
                if total >= MB && !signalled {
                    signalled = true;
                    first_tx.send(()).await.unwrap();
                }
            }
            Response::new(full(total.to_string()))
        }
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let send = tokio::spawn(
        h1_client()
            .post(p.url("/upload"))
            .body(reqwest::Body::wrap_stream(tokio_stream(rx)))
            .send(),
    );
    tx.send(Ok(Bytes::from(vec![1u8; MB]))).await.unwrap();
    within("the backend to see the first megabyte", first_rx.recv())
        .await
        .unwrap();
    for _ in 0..4 {
        tx.send(Ok(Bytes::from(vec![2u8; MB]))).await.unwrap();
    }
    drop(tx);
    let r = within("the response", send).await.unwrap().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), (5 * MB).to_string());
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

/// Dropped when the backend's handler future is dropped (its connection closed).
struct DropSignal(Option<oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = s.send(());
        }
    }
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    let (started_tx, mut started_rx) = mpsc::channel::<()>(1);
    let (cancelled_tx, cancelled_rx) = oneshot::channel::<()>();
    let cancelled_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(cancelled_tx)));
    let b = backend(move |_req: Request<Incoming>| {
        let started_tx = started_tx.clone();
        let guard = DropSignal(cancelled_tx.lock().unwrap().take());
        async move {
            let _guard = guard;
            started_tx.send(()).await.unwrap();
            std::future::pending::<()>().await;
            unreachable!()
        }
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    within("the backend to start", started_rx.recv())
        .await
        .unwrap();
    assert_eq!(p.concurrency("c", "d1"), 1);
    drop(s);
    within("the upstream request to be cancelled", cancelled_rx)
        .await
        .unwrap();
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

#[tokio::test]
async fn graceful_shutdown_lets_in_flight_requests_finish() {
    let (started_tx, mut started_rx) = mpsc::channel::<()>(1);
    let (finish_tx, finish_rx) = oneshot::channel::<()>();
    let finish_rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(finish_rx)));
    let b = backend(move |_req: Request<Incoming>| {
        let started_tx = started_tx.clone();
        let finish_rx = finish_rx.clone();
        async move {
            started_tx.send(()).await.unwrap();
            let rx = finish_rx.lock().await.take().unwrap();
            rx.await.ok();
            Response::new(full("done"))
        }
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let req = tokio::spawn(h1_client().get(p.url("/slow")).send());
    within("the backend to start", started_rx.recv())
        .await
        .unwrap();
    let addr = p.addr;
    let shutdown = tokio::spawn(p.shutdown());
    // New connections are refused once shutdown has begun.
    within("the listener to close", async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    finish_tx.send(()).unwrap();
    let r = within("the in-flight response", req)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "done");
    within("shutdown", shutdown).await.unwrap();
}

/// Shutdown asks idle keep-alive connections to close at once — HTTP/1.1 and h2c — and
/// does not wait the graceful timeout (5 s here) for them.
#[tokio::test]
async fn graceful_shutdown_closes_idle_connections_at_once() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let request = || {
        Request::get("/x")
            .header("host", "x")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap()
    };
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (mut h1, h1_conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let h1_conn = tokio::spawn(h1_conn);
    let (mut h2, h2_conn) = h2c_connection(p.addr).await;
    for (name, r) in [
        ("h1", within("h1", h1.send_request(request())).await),
        ("h2c", within("h2c", h2.send_request(request())).await),
    ] {
        let r = r.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{name}");
        r.into_body().collect().await.unwrap();
    }
    p.wait_idle("c", "d1").await;
    let started = Instant::now();
    p.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "shutdown took {took:?}: it waited for idle connections"
    );
    within("the HTTP/1.1 connection to close", h1_conn)
        .await
        .unwrap()
        .expect("closed cleanly");
    within("the h2c connection to close", h2_conn)
        .await
        .unwrap()
        .expect("closed cleanly (GOAWAY)");
}

/// The client's address reaches `X-Forwarded-For` on HTTP/1.1 and on h2c, where hyper
/// runs each stream's pipeline on a task of its own.
#[tokio::test]
async fn x_forwarded_for_names_the_client_on_h1_and_h2c() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    for (client, name) in [(h1_client(), "h1"), (h2c_client(), "h2c")] {
        let r = within(name, client.get(p.url("/x")).send()).await.unwrap();
        let xff: Vec<_> = r
            .headers()
            .get_all("x-echo-x-forwarded-for")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(xff, ["127.0.0.1"], "{name}");
    }
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

/// A backend that counts the connections it accepted (HTTP/1.1), answering by path:
/// `/empty` 204, `/chunked` a streamed body, anything else a fixed body; POST bodies
/// are read and echoed.
async fn counting_backend() -> (
    String,
    oneshot::Sender<()>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, mut stopped) = oneshot::channel::<()>();
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                a = listener.accept() => a.unwrap(),
                _ = &mut stopped => return,
            };
            count.fetch_add(1, Ordering::SeqCst);
            let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                let path = req.uri().path().to_owned();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let response = match path.as_str() {
                    "/empty" => Response::builder().status(204).body(full("")),
                    "/chunked" => {
                        let chunks = futures_util::stream::iter(
                            ["a", "bb", "ccc"]
                                .map(|c| Ok::<_, std::io::Error>(Frame::data(Bytes::from(c)))),
                        );
                        Response::builder()
                            .body(StreamBody::new(chunks).map_err(|e| e.into()).boxed())
                    }
                    _ => Response::builder().body(full(format!("{path} {}", body.len()))),
                };
                Ok::<_, std::convert::Infallible>(response.unwrap())
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
            );
        }
    });
    (format!("http://{addr}"), stop, accepted)
}

#[tokio::test]
async fn connections_to_the_destination_are_kept_alive_and_reused() {
    use std::sync::atomic::Ordering;
    let (url, _stop, accepted) = counting_backend().await;
    let p = proxy(&simple_config(&[("d1", &url)], "")).await;
    for (client, name) in [(h1_client(), "h1"), (h2c_client(), "h2c")] {
        for i in 0..50 {
            let (path, expected) = match i % 5 {
                0 => ("/empty", ""),
                1 => ("/chunked", "abbccc"),
                _ => ("/fixed", "/fixed 0"),
            };
            let r = client.get(p.url(path)).send().await.unwrap();
            let status = r.status();
            assert_eq!(r.text().await.unwrap(), expected, "{name} {path}");
            assert!(status.is_success(), "{name} {path}: {status}");
            let r = client.head(p.url("/fixed")).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let r = client
                .post(p.url("/post"))
                .body(vec![b'x'; 10_000])
                .send()
                .await
                .unwrap();
            assert_eq!(r.text().await.unwrap(), "/post 10000", "{name}");
        }
    }
    // 600 sequential exchanges of every body framing: one connection did it all.
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // Concurrent requests each need a connection, and give them back.
    let client = h1_client();
    let burst = || {
        futures_util::future::join_all((0..8).map(|_| {
            let r = client.get(p.url("/fixed")).send();
            async move { r.await.unwrap().text().await.unwrap() }
        }))
    };
    for _ in 0..5 {
        for body in within("a burst of 8", burst()).await {
            assert_eq!(body, "/fixed 0");
        }
    }
    let opened = accepted.load(Ordering::SeqCst);
    assert!(
        (2..=8).contains(&opened),
        "{opened} connections for bursts of 8"
    );
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

/// Connections `forwarder` opens for 20 sequential requests through the layered
/// pipeline (one client connection), and how many the destination accepted.
async fn connections_for_20_requests(
    forwarder: fuseway::forwarding::Forwarder<fuseway::body::Incoming>,
) -> (u64, usize) {
    use std::sync::atomic::Ordering;
    let (url, _stop, accepted) = counting_backend().await;
    let config: fuseway::config::ProxyConfig =
        serde_json::from_str(&simple_config(&[("d1", &url)], "")).unwrap();
    let state = Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let service = fuseway::server::ProxyService::new(fuseway::pipeline::layered_default_with(
        state,
        forwarder.clone(),
    ));
    let server = fuseway::server::Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    let addr = server.local_addrs()[0];
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(server.serve(service, async {
        let _ = stopped.await;
    }));
    let client = h1_client();
    for i in 0..20 {
        let r = within(
            "a response",
            client.get(format!("http://{addr}/n/{i}")).send(),
        )
        .await
        .unwrap();
        assert_eq!(r.text().await.unwrap(), format!("/n/{i} 0"));
    }
    let _ = stop.send(());
    within("the server to stop", served).await.unwrap().unwrap();
    (
        forwarder.connections_opened(),
        accepted.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn the_forwarder_counts_the_connections_it_opens() {
    let forwarder = fuseway::forwarding::Forwarder::new();
    assert_eq!(connections_for_20_requests(forwarder).await, (1, 1));
}

/// The pool settings a forwarder is built with are the ones its pools keep: no idle
/// connection kept, or none fresh enough, means a connection per request.
#[tokio::test]
async fn the_forwarder_builder_sets_what_its_pools_keep() {
    use fuseway::forwarding::Forwarder;
    for engine in [
        fuseway::server::Http1Engine::Native,
        fuseway::server::Http1Engine::Hyper,
    ] {
        let none_kept = Forwarder::builder()
            .http1_engine(engine)
            .max_idle_per_pool(0)
            .build();
        assert_eq!(
            connections_for_20_requests(none_kept).await,
            (20, 20),
            "{engine:?}, max_idle_per_pool(0)"
        );
        let none_fresh = Forwarder::builder()
            .http1_engine(engine)
            .idle_timeout(Duration::ZERO)
            .build();
        assert_eq!(
            connections_for_20_requests(none_fresh).await,
            (20, 20),
            "{engine:?}, idle_timeout(0)"
        );
        let kept = Forwarder::builder()
            .http1_engine(engine)
            .idle_timeout(Duration::from_secs(60))
            .max_idle_per_pool(1)
            .build();
        assert_eq!(
            connections_for_20_requests(kept).await,
            (1, 1),
            "{engine:?}, one kept for 60 s"
        );
    }
}

/// W3C trace context: a valid `traceparent` reaches the destination as a child (same
/// trace id and flags, a new parent id), `tracestate` unchanged, over HTTP/1.1 and h2c
/// clients; an invalid one is dropped with its `tracestate`; none is started.
#[tokio::test]
async fn trace_context_goes_on_as_a_child() {
    let b = echo_backend().await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for client in [h1_client(), h2c_client()] {
        let r = within(
            "a traced request",
            client
                .get(p.url("/traced"))
                .header("traceparent", incoming)
                .header("tracestate", "vendor=abc")
                .send(),
        )
        .await
        .unwrap();
        let sent = r.headers()["x-echo-traceparent"].to_str().unwrap();
        assert_eq!(sent.len(), incoming.len(), "{sent}");
        assert_eq!(&sent[..36], &incoming[..36], "same version and trace id");
        assert_ne!(&sent[36..52], &incoming[36..52], "a new parent id");
        assert_eq!(&sent[52..], &incoming[52..], "same flags");
        assert_eq!(r.headers()["x-echo-tracestate"], "vendor=abc");

        let r = within(
            "a request with a broken traceparent",
            client
                .get(p.url("/broken"))
                .header("traceparent", "00-xyz")
                .header("tracestate", "vendor=abc")
                .send(),
        )
        .await
        .unwrap();
        assert!(r.headers().get("x-echo-traceparent").is_none());
        assert!(r.headers().get("x-echo-tracestate").is_none());

        let r = within("an untraced request", client.get(p.url("/plain")).send())
            .await
            .unwrap();
        assert!(r.headers().get("x-echo-traceparent").is_none());
    }
    p.shutdown().await;
}
