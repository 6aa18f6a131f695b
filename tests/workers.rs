//! `Server::serve_workers`: each worker accepts on a listening socket of its own
//! (`SO_REUSEPORT`), so a burst of connections is spread over the workers instead of
//! going to whichever wakes first.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use fuseway::body::{Incoming, ProxyBody};
use fuseway::server::Server;
use http::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One `GET` on `stream`, its whole response read (the body is `worker N`).
async fn worker_of(stream: &mut TcpStream) -> usize {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the proxy closed the connection");
        response.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((_, body)) = text.split_once("\r\n\r\n") {
            if let Some(worker) = body.strip_prefix("worker ") {
                if let Ok(worker) = worker.parse() {
                    return worker;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_is_spread_over_the_workers() {
    const WORKERS: usize = 2;
    const CONNECTIONS: usize = 64;
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    let addr = server.local_addrs()[0];
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // Each worker makes its service once: it answers with the worker's number.
    let next = Arc::new(AtomicUsize::new(0));
    let serving = tokio::spawn(server.serve_workers(
        WORKERS,
        move || {
            let me = next.fetch_add(1, Ordering::SeqCst);
            hyper::service::service_fn(move |_request: Request<Incoming>| async move {
                Ok::<_, Infallible>(Response::new(ProxyBody::full(format!("worker {me}"))))
            })
        },
        async {
            let _ = stop_rx.await;
        },
    ));

    // Every connection opened at once, then held while each asks which worker it has.
    let connects = (0..CONNECTIONS).map(|_| TcpStream::connect(addr));
    let mut streams: Vec<TcpStream> =
        within("the connections", futures_util::future::join_all(connects))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    let mut served = [0usize; WORKERS];
    for stream in &mut streams {
        let worker = within("a response", worker_of(stream)).await;
        served[worker] += 1;
    }
    println!("connections per worker: {served:?}");
    // Spread by the connections' hash: about half each; a worker with fewer than an
    // eighth means the connections went to whichever worker woke first.
    for (worker, &n) in served.iter().enumerate() {
        assert!(
            n >= CONNECTIONS / 8,
            "worker {worker} served {n} of {CONNECTIONS} connections: {served:?}"
        );
    }
    drop(streams);
    let _ = stop_tx.send(());
    within("the proxy to stop", serving).await.unwrap().unwrap();
}
