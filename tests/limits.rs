//! Per-route limits end to end: 413, 429, 503 and 504, through the real proxy.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

/// A backend that reads the whole request body and answers its length.
async fn counting_backend() -> Backend {
    backend(|req: Request<Incoming>| async move {
        let n = req.into_body().collect().await.map(|b| b.to_bytes().len());
        match n {
            Ok(n) => Response::new(full(n.to_string())),
            Err(_) => Response::builder().status(499).body(full("")).unwrap(),
        }
    })
    .await
}

fn route_config(backend: &Backend, route_extra: &str) -> String {
    format!(
        r#"{{ "Routes": {{ "r": {{ "ClusterId": "c", {route_extra} "Match": {{ "Path": "/{{**x}}" }} }} }},
             "Clusters": {{ "c": {{ "Destinations": {{ "d": {{ "Address": "{}" }} }} }} }} }}"#,
        backend.url()
    )
}

#[tokio::test]
async fn content_length_over_the_limit_is_413_before_any_destination() {
    let b = counting_backend().await;
    let p = proxy(&route_config(&b, r#""MaxRequestBodySize": 10,"#)).await;
    let c = h1_client();
    let r = c.post(p.url("/")).body("0123456789").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "10");
    let r = c.post(p.url("/")).body("0123456789a").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}

#[tokio::test]
async fn streamed_body_over_the_limit_is_413() {
    let b = counting_backend().await;
    let p = proxy(&route_config(&b, r#""MaxRequestBodySize": 1000,"#)).await;
    let (tx, mut rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let body =
        reqwest::Body::wrap_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let send = tokio::spawn(h1_client().post(p.url("/")).body(body).send());
    for _ in 0..3 {
        tx.send(Ok(Bytes::from(vec![0u8; 400]))).await.unwrap();
    }
    drop(tx);
    let r = within("the response", send).await.unwrap().unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}

#[tokio::test]
async fn unlimited_body_with_minus_one() {
    let b = counting_backend().await;
    let p = proxy(&route_config(&b, r#""MaxRequestBodySize": -1,"#)).await;
    let r = h1_client()
        .post(p.url("/"))
        .body(vec![1u8; 3 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), (3 * 1024 * 1024).to_string());
    p.shutdown().await;
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let b = echo_backend().await;
    let p = proxy(&route_config(
        &b,
        r#""RateLimit": { "PermitsPerSecond": 0.5, "Burst": 3 },"#,
    ))
    .await;
    let c = h1_client();
    for i in 0..3 {
        let r = c.get(p.url("/")).send().await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::OK,
            "request {i} is within the burst"
        );
    }
    let r = c.get(p.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    p.shutdown().await;
}

#[tokio::test]
async fn concurrency_limit_answers_503_and_frees_the_slot_after_the_body() {
    let (started_tx, mut started_rx) = mpsc::channel::<()>(4);
    let (release_tx, release_rx) = mpsc::channel::<()>(1);
    let release_rx = std::sync::Arc::new(tokio::sync::Mutex::new(release_rx));
    let b = backend(move |_req: Request<Incoming>| {
        let started_tx = started_tx.clone();
        let release_rx = release_rx.clone();
        async move {
            started_tx.send(()).await.unwrap();
            release_rx.lock().await.recv().await;
            Response::new(full("done"))
        }
    })
    .await;
    let p = proxy(&route_config(&b, r#""MaxConcurrentRequests": 1,"#)).await;
    let c = h1_client();
    let first = tokio::spawn(c.get(p.url("/slow")).send());
    within("the first request to reach the backend", started_rx.recv())
        .await
        .unwrap();
    let r = c.get(p.url("/second")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    release_tx.send(()).await.unwrap();
    let r = within("the first response", first).await.unwrap().unwrap();
    assert_eq!(r.text().await.unwrap(), "done");
    let route_state = p.state.snapshot().routes()[0].state().clone();
    within("the route slot to be released", async {
        while route_state.concurrent_requests() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // The slot is free again.
    let third = tokio::spawn(c.get(p.url("/third")).send());
    within("the third request to reach the backend", started_rx.recv())
        .await
        .unwrap();
    release_tx.send(()).await.unwrap();
    assert_eq!(
        within("third", third).await.unwrap().unwrap().status(),
        StatusCode::OK
    );
    p.shutdown().await;
}

#[tokio::test]
async fn route_timeout_is_504() {
    let b = backend(|_req: Request<Incoming>| async move {
        std::future::pending::<()>().await;
        unreachable!()
    })
    .await;
    // ActivityTimeout stays at its 100 s default: the route's Timeout must win.
    let p = proxy(&route_config(&b, r#""Timeout": "300ms","#)).await;
    let started = std::time::Instant::now();
    let r = h1_client().get(p.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(5));
    p.wait_idle("c", "d").await;
    p.shutdown().await;
}
