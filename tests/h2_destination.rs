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

/// An h2c-only backend answering `200 ok`: its address, how many connections it has
/// accepted, and a channel that gets a message each time one of them ends.
struct H2Backend {
    url: String,
    accepted: Arc<AtomicUsize>,
    closed: mpsc::UnboundedReceiver<()>,
    _stop: oneshot::Sender<()>,
}

async fn h2_backend() -> H2Backend {
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
            let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                Ok::<_, std::convert::Infallible>(Response::new(full("ok")))
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
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
