//! Resource bounds: the connection cap, the HTTP/2 stream cap, memory under 1 000
//! concurrent slow clients, and no file descriptors leaked by 10 000 failed upstream
//! connects.

mod common;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use fuseway::server::Http1Engine;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// The tests here measure process-wide figures (RSS, open descriptors), so they run one
/// at a time: each holds this lock for its whole run.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A proxy to an echo backend, with a cap of two connections.
async fn capped_at_two() -> (Backend, TestProxy) {
    let b = echo_backend().await;
    let p = start(
        &simple_config(&[("d", &b.url())], ""),
        options().max_connections(2),
    )
    .await;
    (b, p)
}

#[tokio::test]
async fn connections_over_the_cap_wait_for_a_free_slot() {
    let _serial = SERIAL.lock().await;
    let (_b, p) = capped_at_two().await;
    let mut first = TcpStream::connect(p.addr).await.unwrap();
    let mut second = TcpStream::connect(p.addr).await.unwrap();
    assert!(request_on(&mut first, "/1")
        .await
        .starts_with("HTTP/1.1 200"));
    assert!(request_on(&mut second, "/2")
        .await
        .starts_with("HTTP/1.1 200"));
    // Both begin a request (not idle: the limit never closes a connection in the
    // middle of one).
    for conn in [&mut first, &mut second] {
        conn.write_all(b"GET /busy HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
    }
    // The third connects (the kernel's backlog) but is not served while two are open.
    let mut third = TcpStream::connect(p.addr).await.unwrap();
    let waiting =
        tokio::time::timeout(Duration::from_millis(300), request_on(&mut third, "/3")).await;
    assert!(waiting.is_err(), "served over the cap: {waiting:?}");
    drop(first);
    // The request already written is served once a slot frees.
    let mut out = Vec::new();
    within("the third connection to be served", async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&out).ends_with("GET /3") {
            let n = third.read(&mut buf).await.unwrap();
            assert!(n > 0);
            out.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(out.starts_with(b"HTTP/1.1 200"));
    // The second's request, finished, is answered.
    second.write_all(b"\r\n").await.unwrap();
    let answer = within("the second's request", read_response(&mut second)).await;
    assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
    drop((second, third));
    p.shutdown().await;
}

/// An upgraded connection (a WebSocket) leaves the connection cap once upgraded, as
/// Kestrel releases it from `MaxConcurrentConnections`: at a cap of one, another
/// client is served while the socket stays open.
#[tokio::test]
async fn an_upgraded_connection_leaves_the_connection_cap() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let _serial = SERIAL.lock().await;
    let (ws_addr, _paths) = ws_echo().await;
    let b = echo_backend().await;
    let config = format!(
        r#"{{
  "Routes": {{
    "ws": {{ "ClusterId": "ws", "Match": {{ "Path": "/ws" }} }},
    "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "ws": {{ "Destinations": {{ "d": {{ "Address": "http://{ws_addr}" }} }} }},
    "c": {{ "Destinations": {{ "d": {{ "Address": "{}" }} }} }}
  }}
}}"#,
        b.url()
    );
    let p = start(&config, options().max_connections(1)).await;
    let (mut ws, _) = within(
        "the WebSocket handshake",
        tokio_tungstenite::connect_async(format!("ws://{}/ws", p.addr)),
    )
    .await
    .unwrap();
    let mut other = TcpStream::connect(p.addr).await.unwrap();
    let answer = within(
        "a request beside the socket",
        request_on(&mut other, "/plain"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(other);
    ws.send(Message::text("still open")).await.unwrap();
    let echoed = within("the echo", ws.next()).await.unwrap().unwrap();
    assert_eq!(echoed, Message::text("still open"));
    p.shutdown().await;
}

/// At the cap, an idle keep-alive connection is closed to admit a new one (as nginx,
/// out of `worker_connections`, does) — on the native engine, whose idle connections
/// park. hyper's keeps its idle connections: the new one waits.
#[tokio::test]
async fn at_the_cap_an_idle_connection_is_closed_to_admit_a_new_one() {
    let _serial = SERIAL.lock().await;
    let (_b, p) = capped_at_two().await;
    let mut idle = Vec::new();
    for path in ["/1", "/2"] {
        let mut conn = TcpStream::connect(p.addr).await.unwrap();
        assert!(request_on(&mut conn, path)
            .await
            .starts_with("HTTP/1.1 200"));
        idle.push(conn);
    }
    let mut third = TcpStream::connect(p.addr).await.unwrap();
    third
        .write_all(b"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    if Http1Engine::from_env() == Http1Engine::Hyper {
        // Past the time the native engine's connections take to park.
        let served =
            tokio::time::timeout(Duration::from_millis(1500), read_response(&mut third)).await;
        assert!(served.is_err(), "served over the cap: {served:?}");
        drop(idle.remove(0));
        let answer = within("the third, once one closed", read_response(&mut third)).await;
        assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
        p.shutdown().await;
        return;
    }
    // Served once the idle ones park (a second after their answers): one of them is
    // closed for it, the other still serves.
    let answer = within("the third, at the cap", read_response(&mut third)).await;
    assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
    let mut answered = 0;
    for conn in &mut idle {
        // A write to the closed one may still succeed; its read ends.
        let _ = conn.write_all(b"GET /4 HTTP/1.1\r\nHost: x\r\n\r\n").await;
        if let Some(answer) = within("an answer or the close", read_response(conn)).await {
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            answered += 1;
        }
    }
    assert_eq!(
        answered, 1,
        "one idle connection closed for the new one, one kept"
    );
    drop((idle, third));
    p.shutdown().await;
}

#[tokio::test]
async fn http2_streams_over_the_cap_are_not_served_concurrently() {
    let _serial = SERIAL.lock().await;
    // The backend counts requests in flight and holds each until released.
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (inf, mo, ga) = (in_flight.clone(), most.clone(), gate.clone());
    let b = backend(move |_req: Request<Incoming>| {
        let (inf, mo, ga) = (inf.clone(), mo.clone(), ga.clone());
        async move {
            let now = inf.fetch_add(1, Ordering::SeqCst) + 1;
            mo.fetch_max(now, Ordering::SeqCst);
            ga.acquire().await.unwrap().forget();
            inf.fetch_sub(1, Ordering::SeqCst);
            Response::new(full("done"))
        }
    })
    .await;
    let p = start(
        &simple_config(&[("d", &b.url())], ""),
        options().max_concurrent_streams(2),
    )
    .await;

    // The limit is advertised in the server's SETTINGS.
    let tcp = TcpStream::connect(p.addr).await.unwrap();
    let (_h2, conn) = h2::client::handshake(tcp).await.unwrap();
    let mut conn = std::pin::pin!(conn);
    within("the server's SETTINGS", async {
        while conn.max_concurrent_send_streams() != 2 {
            tokio::select! {
                _ = conn.as_mut() => panic!("the connection ended"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
    })
    .await;

    // A client that honours it: 6 requests on one connection, at most 2 at a time.
    let tcp = TcpStream::connect(p.addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    // One exchange first, so that the client has the server's SETTINGS: streams
    // opened before that over the limit are refused (REFUSED_STREAM, safe to retry).
    gate.add_permits(1);
    let mut first = send.clone();
    let req = Request::get(format!("http://{}/first", p.addr))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let r = within("the first response", first.send_request(req))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let mut requests = Vec::new();
    for i in 0..6 {
        let mut send = send.clone();
        let uri = format!("http://{}/{i}", p.addr);
        requests.push(tokio::spawn(async move {
            let req = Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
            send.send_request(req).await.map(|r| r.status())
        }));
    }
    within("two requests in flight", async {
        while in_flight.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(in_flight.load(Ordering::SeqCst), 2);
    gate.add_permits(6);
    for r in requests {
        assert_eq!(
            within("a response", r).await.unwrap().unwrap(),
            StatusCode::OK
        );
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "never more than 2 streams at once"
    );
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_1000_slow_clients() {
    let _serial = SERIAL.lock().await;
    const CLIENTS: usize = 1000;
    // Each uploading client costs 4 descriptors (client, proxy, proxy to backend,
    // backend), each slowloris client 2.
    let limit = raise_fd_limit(8192);
    if limit < 4096 {
        eprintln!("SKIPPED: the open-files limit is {limit}, 4096 are needed");
        return;
    }
    let started = Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let b = backend(move |req: Request<Incoming>| {
        let st = st.clone();
        async move {
            st.fetch_add(1, Ordering::SeqCst);
            // Reads the body as slowly as the client sends it.
            let n = req
                .into_body()
                .collect()
                .await
                .map_or(0, |b| b.to_bytes().len());
            Response::new(full(n.to_string()))
        }
    })
    .await;
    let p = start(
        &simple_config(&[("d", &b.url())], ""),
        options().header_read_timeout(Duration::from_secs(60)),
    )
    .await;
    // Warm up: pools, buffers, the allocator's arenas.
    let client = h1_client();
    for _ in 0..50 {
        let r = client.post(p.url("/warm")).body("x").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    drop(client);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fds_before = open_fds();
    let rss_before = rss_kib();

    // Half send a head one byte at a time; half send a head and then a body that
    // never ends.
    let mut clients = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Slow: a")
                .await
                .unwrap();
        } else {
            s.write_all(
                b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n0123456789",
            )
            .await
            .unwrap();
        }
        clients.push(s);
    }
    within("every upload to reach the backend", async {
        while started.load(Ordering::SeqCst) < 50 + CLIENTS / 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Everyone trickles a few more bytes.
    for round in 0..3 {
        for s in clients.iter_mut() {
            s.write_all(b"b").await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50 * round)).await;
    }
    assert_eq!(p.concurrency("c", "d").0, CLIENTS / 2);
    let rss_during = rss_kib();
    let grown_mib = rss_during.saturating_sub(rss_before) / 1024;
    eprintln!(
        "1000 slow clients: RSS {} -> {} KiB (+{grown_mib} MiB), fds {fds_before} -> {}",
        rss_before,
        rss_during,
        open_fds()
    );
    // The client, proxy and backend sides of 1000 connections together, generously.
    assert!(
        grown_mib < 160,
        "RSS grew by {grown_mib} MiB for {CLIENTS} slow clients"
    );

    drop(clients);
    p.wait_idle("c", "d").await;
    within("the descriptors to be closed", async {
        while open_fds() > fds_before + 16 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let r = h1_client()
        .post(p.url("/after"))
        .body("ok")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "2");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_upstream_connects_leak_no_file_descriptors() {
    let _serial = SERIAL.lock().await;
    let requests: usize = std::env::var("FUSEWAY_FD_LEAK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dead = Refused::bind();
    let p = start(&simple_config(&[("dead", &dead.url())], ""), options()).await;
    let client = h1_client();
    // 8 concurrent senders, so that 8 client connections are open.
    let burst = |requests: usize| {
        let sent = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let (client, sent, url) = (client.clone(), sent.clone(), p.url("/x"));
                tokio::spawn(async move {
                    while sent.fetch_add(1, Ordering::SeqCst) < requests {
                        let r = client.get(&url).send().await.unwrap();
                        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
                    }
                })
            })
            .collect();
        async move {
            for w in workers {
                tokio::time::timeout(Duration::from_secs(300), w)
                    .await
                    .expect("bounded")
                    .unwrap();
            }
        }
    };
    // Warm up the client's pool and the proxy's connections the same way.
    burst(400).await;
    let before = open_fds();
    burst(requests).await;
    p.wait_idle("c", "dead").await;
    let after = open_fds();
    eprintln!("{requests} failed connects: {before} -> {after} open descriptors");
    assert!(
        after <= before + 16,
        "{requests} failed connects: {before} -> {after} open descriptors"
    );
    p.shutdown().await;
}
