//! `HttpClient.MaxConnectionsPerServer`: at most that many HTTP/1.1 connections to a
//! destination at once, across every forwarder (each worker thread has its own);
//! further requests wait for a connection — and get 504 if none frees up within the
//! activity timeout.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::{mpsc, Semaphore};

/// A backend that counts its connections (accepted, and open now at most) and holds
/// every request to `/held` until a permit is added to `release`; it reports each
/// request's arrival on `arrived` and each connection's end on `closed`.
struct Gated {
    url: String,
    accepted: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
    arrived: mpsc::UnboundedReceiver<()>,
    closed: mpsc::UnboundedReceiver<()>,
    most_in_flight: Arc<AtomicUsize>,
}

async fn gated_backend() -> Gated {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let (tx, arrived) = mpsc::unbounded_channel();
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let g = Gated {
        url,
        accepted: accepted.clone(),
        release: release.clone(),
        arrived,
        closed,
        most_in_flight: most_in_flight.clone(),
    };
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            let (release, tx) = (release.clone(), tx.clone());
            let (in_flight, most) = (in_flight.clone(), most_in_flight.clone());
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (release, tx) = (release.clone(), tx.clone());
                let (in_flight, most) = (in_flight.clone(), most.clone());
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Counted out also when the proxy gives up and the handler is dropped.
                    let _out = InFlight(in_flight);
                    let _ = tx.send(());
                    if req.uri().path() == "/held" {
                        release.acquire().await.unwrap().forget();
                    }
                    Ok::<_, std::convert::Infallible>(Response::new(full("ok")))
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let _ = connection.await;
                let _ = closed_tx.send(());
            });
        }
    });
    g
}

struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn limited_config(url: &str, max: u32, activity: &str) -> String {
    simple_config(
        &[("d", url)],
        &format!(
            r#""HttpClient": {{ "MaxConnectionsPerServer": {max} }},
               "HttpRequest": {{ "ActivityTimeout": "{activity}" }},"#
        ),
    )
}

/// Six concurrent requests to `urls` (each on a client connection of its own) under a
/// limit of two: two reach the destination and the others wait in the proxy; once the
/// destination answers, all six complete over the same two connections.
async fn six_through_two_connections(b: &mut Gated, urls: impl Iterator<Item = String>) {
    let requests: Vec<_> = urls
        .take(6)
        .map(|url| {
            let client = h1_client();
            tokio::spawn(async move { client.get(url).send().await })
        })
        .collect();
    assert_eq!(requests.len(), 6);
    for _ in 0..2 {
        within("a request to arrive", b.arrived.recv())
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        b.arrived.try_recv().is_err(),
        "a third request went through"
    );
    assert_eq!(b.accepted.load(Ordering::SeqCst), 2);
    // Each release lets one more through, on a connection that came back.
    b.release.add_permits(6);
    for r in requests {
        let r = within("a response", r).await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    assert_eq!(
        b.accepted.load(Ordering::SeqCst),
        2,
        "no connection beyond the limit"
    );
    assert!(b.most_in_flight.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn requests_beyond_the_limit_wait_for_a_connection() {
    let mut b = gated_backend().await;
    let p = proxy(&limited_config(&b.url, 2, "10s")).await;
    six_through_two_connections(&mut b, std::iter::repeat_with(|| p.url("/held"))).await;
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}

/// The limit holds across forwarders (the binary runs one per worker thread): two
/// pipelines over the same state, served on two listeners, share it.
#[tokio::test]
async fn the_limit_holds_across_forwarders() {
    let mut b = gated_backend().await;
    let state = Arc::new(
        fuseway::state::ProxyState::new(
            serde_json::from_str(&limited_config(&b.url, 2, "10s")).unwrap(),
        )
        .unwrap(),
    );
    let mut stops = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let server = fuseway::server::Server::bind(&["127.0.0.1:0".parse().unwrap()])
            .await
            .unwrap();
        addrs.push(server.local_addrs()[0]);
        let service = fuseway::pipeline::FusedDefault::from_state(state.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(service, async {
            let _ = stopped.await;
        }));
        stops.push(stop);
    }
    let urls = addrs.iter().cycle().map(|a| format!("http://{a}/held"));
    six_through_two_connections(&mut b, urls).await;
    drop(stops);
}

/// A request that waits for a connection longer than its timeout gets 504 without
/// reaching the destination; the connection, once free, serves the next request.
#[tokio::test]
async fn a_request_waiting_past_the_activity_timeout_is_504() {
    let mut b = gated_backend().await;
    // `/fast` has a route timeout of 300 ms; `/held` only the cluster's 10 s.
    let p = proxy(&format!(
        r#"{{
  "Routes": {{
    "held": {{ "ClusterId": "c", "Match": {{ "Path": "/held" }} }},
    "fast": {{ "ClusterId": "c", "Timeout": "300ms", "Match": {{ "Path": "/fast" }} }}
  }},
  "Clusters": {{ "c": {{
    "HttpClient": {{ "MaxConnectionsPerServer": 1 }},
    "Destinations": {{ "d": {{ "Address": "{}" }} }}
  }} }}
}}"#,
        b.url
    ))
    .await;
    let client = h1_client();
    let holder = {
        let (client, url) = (client.clone(), p.url("/held"));
        tokio::spawn(async move { client.get(url).send().await })
    };
    within("the first request to arrive", b.arrived.recv())
        .await
        .unwrap();
    // The only connection is busy: this one waits, and times out waiting.
    let waiting = within("the waiting request", client.get(p.url("/fast")).send())
        .await
        .unwrap();
    assert_eq!(waiting.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        b.arrived.try_recv().is_err(),
        "it never reached the destination"
    );
    // Once the held request is answered its connection serves the next one.
    b.release.add_permits(1);
    let held = within("the held response", holder).await.unwrap().unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let r = within("a later request", client.get(p.url("/fast")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(
        b.most_in_flight.load(Ordering::SeqCst),
        1,
        "never two requests at the destination"
    );
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}

/// A reload that lifts the limit lets the destination's shared pool go: its idle
/// connection is closed, and requests go on through the forwarder's own pool.
#[tokio::test]
async fn a_reload_without_the_limit_closes_the_shared_pool() {
    let mut b = gated_backend().await;
    let p = proxy(&limited_config(&b.url, 2, "10s")).await;
    let client = h1_client();
    let r = within("a request", client.get(p.url("/fast")).send())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let unlimited = simple_config(&[("d", &b.url)], "");
    p.state
        .update(serde_json::from_str(&unlimited).unwrap())
        .unwrap();
    within(
        "the shared pool's idle connection to close",
        b.closed.recv(),
    )
    .await
    .unwrap();
    let r = within(
        "a request after the reload",
        client.get(p.url("/fast")).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(b.accepted.load(Ordering::SeqCst), 2, "a new connection");
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}
