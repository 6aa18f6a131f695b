//! Destination health end to end: real backends, the real proxy, real clients.
//!
//! The load-balancing policy is not assumed: the tests only rely on a destination that
//! is unavailable receiving no traffic, and on an available one receiving some.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use fuseway::health::{available, ActiveHealthChecker, DestinationHealth, HealthState};
use fuseway::state::ProxyState;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A backend answering 200 with `name`, counting its requests.
async fn named_backend(name: &'static str, hits: Arc<AtomicUsize>) -> Backend {
    backend(move |_req: Request<Incoming>| {
        hits.fetch_add(1, Ordering::SeqCst);
        async move { Response::new(full(name)) }
    })
    .await
}

fn health(p: &Proxy, dest: &str, f: impl FnOnce(&DestinationHealth) -> HealthState) -> HealthState {
    let snap = p.state.snapshot();
    let (_, d) = snap.cluster("c").unwrap().destination(dest).unwrap();
    f(d.state().health())
}

fn passive(p: &Proxy, dest: &str) -> HealthState {
    health(p, dest, DestinationHealth::passive)
}

fn active(p: &Proxy, dest: &str) -> HealthState {
    health(p, dest, DestinationHealth::active)
}

fn passive_counts(p: &Proxy, dest: &str) -> (u64, u64) {
    let snap = p.state.snapshot();
    let (_, d) = snap.cluster("c").unwrap().destination(dest).unwrap();
    d.state().health().passive_counts()
}

/// Poll `cond` until it holds, failing the test after [`LIMIT`].
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    within(what, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// GET `path`: the status and the body (empty when the body failed).
async fn get(client: &reqwest::Client, p: &Proxy, path: &str) -> (StatusCode, String) {
    let r = within("a response", client.get(p.url(path)).send())
        .await
        .unwrap();
    let status = r.status();
    (status, r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn refused_destination_is_taken_out_after_the_minimal_count_then_reactivated() {
    let live_hits = Arc::new(AtomicUsize::new(0));
    let live = named_backend("live", live_hits.clone()).await;
    let refused = Refused::bind();
    let dead = refused.url();
    // Reactivation is max(ReactivationPeriod, window) = the 2 s window.
    let p = proxy(&simple_config(
        &[("dead", &dead), ("live", &live.url())],
        r#""HealthCheck": { "Passive": { "Enabled": true, "ReactivationPeriod": "200ms" } },
           "Metadata": { "TransportFailureRateHealthPolicy.DetectionWindowSize": "2s" },"#,
    ))
    .await;
    let client = h1_client();

    // Until the dead destination has failed 10 times it keeps being tried.
    let mut failures = 0;
    let first_sent = Instant::now();
    let mut last_sent = first_sent;
    for _ in 0..500 {
        last_sent = Instant::now();
        let (status, body) = get(&client, &p, "/x").await;
        if status == StatusCode::BAD_GATEWAY {
            failures += 1;
        } else {
            assert_eq!((status, body.as_str()), (StatusCode::OK, "live"));
        }
        if passive(&p, "dead") == HealthState::Unhealthy {
            break;
        }
        assert!(failures < 10, "10 failures of 10 must make it unhealthy");
    }
    assert_eq!(passive(&p, "dead"), HealthState::Unhealthy);
    assert!(failures >= 10, "unhealthy after only {failures} failures");

    // Out of rotation: everything goes to `live` until the reactivation (>= 2 s after
    // the last request that could have made it unhealthy).
    let before = live_hits.load(Ordering::SeqCst);
    let mut sent = 0;
    while sent < 20 && Instant::now() < last_sent + Duration::from_millis(1500) {
        let (status, body) = get(&client, &p, "/y").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "live"));
        sent += 1;
    }
    assert!(
        sent >= 5,
        "only {sent} requests fitted before the reactivation"
    );
    assert_eq!(live_hits.load(Ordering::SeqCst), before + sent);
    wait_for("live's successes to be recorded", || {
        passive(&p, "live") == HealthState::Healthy
    })
    .await;

    // Reactivated: Unknown with an empty window, and tried again.
    wait_for("the reactivation", || {
        passive(&p, "dead") == HealthState::Unknown
    })
    .await;
    assert!(
        first_sent.elapsed() >= Duration::from_secs(2),
        "reactivation follows the 2 s window, not the 200 ms period"
    );
    let mut tried = false;
    for _ in 0..200 {
        let (status, _) = get(&client, &p, "/z").await;
        if status == StatusCode::BAD_GATEWAY {
            tried = true;
            break;
        }
    }
    assert!(
        tried,
        "the reactivated destination must receive traffic again"
    );
    let (failed, total) = passive_counts(&p, "dead");
    assert!(
        failed >= 1 && total < 10,
        "a fresh window: {failed}/{total}"
    );
    p.wait_idle("c", "live").await;
    p.shutdown().await;
}

/// A backend answering `/ok` at once and anything else with a first chunk and then
/// nothing, forever.
async fn stalling_backend() -> Backend {
    backend(|req: Request<Incoming>| async move {
        if req.uri().path() == "/ok" {
            return Response::new(full("ok"));
        }
        if req.uri().path() == "/hang" {
            std::future::pending::<()>().await;
        }
        let stream = futures_util::stream::unfold(false, |sent| async move {
            if sent {
                std::future::pending::<()>().await;
            }
            Some((
                Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"first"))),
                true,
            ))
        });
        Response::new(BodyExt::boxed(StreamBody::new(stream)))
    })
    .await
}

#[tokio::test]
async fn client_aborts_count_in_the_total_never_as_failures() {
    let b = stalling_backend().await;
    // One failure of one would be enough to make it unhealthy.
    let p = proxy(&simple_config(
        &[("d1", &b.url())],
        r#""HealthCheck": { "Passive": { "Enabled": true } },
           "Metadata": { "TransportFailureRateHealthPolicy.MinimalTotalCountThreshold": "1" },"#,
    ))
    .await;
    for _ in 0..10 {
        // Mid-response: headers and a first chunk, then the client goes away.
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut seen = Vec::new();
        within("the first chunk", async {
            let mut buf = [0u8; 1024];
            while !String::from_utf8_lossy(&seen).contains("first") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the proxy closed early");
                seen.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
        drop(s);
        p.wait_idle("c", "d1").await;
    }
    for _ in 0..3 {
        // Before the response: the request is cancelled.
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        wait_for("the request to reach the destination", || {
            p.concurrency("c", "d1") == 1
        })
        .await;
        drop(s);
        p.wait_idle("c", "d1").await;
    }
    // The abandoned responses and the cancelled requests count in the window's total,
    // none as a failure (as YARP counts `ResponseBodyClient` and `RequestCanceled`).
    wait_for("the records", || passive_counts(&p, "d1") == (0, 13)).await;
    assert_eq!(passive(&p, "d1"), HealthState::Healthy);

    // A completed exchange is recorded too.
    let (status, body) = get(&h1_client(), &p, "/ok").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    p.wait_idle("c", "d1").await;
    wait_for("the record", || passive_counts(&p, "d1") == (0, 14)).await;
    assert_eq!(passive(&p, "d1"), HealthState::Healthy);
    p.shutdown().await;
}

/// A backend whose `/health` answers 200 or 500 as `healthy` says, counting probes.
async fn health_endpoint(healthy: Arc<AtomicBool>, probes: Arc<AtomicUsize>) -> Backend {
    backend(move |req: Request<Incoming>| {
        let ok = req.uri().path() == "/health" && healthy.load(Ordering::SeqCst);
        if req.uri().path() == "/health" {
            probes.fetch_add(1, Ordering::SeqCst);
        }
        async move {
            let mut r = Response::new(full(""));
            if !ok {
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            }
            r
        }
    })
    .await
}

#[tokio::test]
async fn active_probes_mark_unhealthy_and_recover() {
    let healthy = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(AtomicUsize::new(0));
    let health_a = health_endpoint(healthy.clone(), probes.clone()).await;
    let b_probes = Arc::new(AtomicUsize::new(0));
    let health_b = health_endpoint(Arc::new(AtomicBool::new(true)), b_probes.clone()).await;
    let hits = Arc::new(AtomicUsize::new(0));
    let a = named_backend("a", hits.clone()).await;
    let b = named_backend("b", hits.clone()).await;
    let config = format!(
        r#"{{
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{
    "HealthCheck": {{ "Active": {{ "Enabled": true, "Interval": "100ms", "Timeout": "1s",
                                   "Path": "/health" }} }},
    "Destinations": {{
      "a": {{ "Address": "{}", "Health": "{}" }},
      "b": {{ "Address": "{}", "Health": "{}" }} }} }} }}
}}"#,
        a.url(),
        health_a.url(),
        b.url(),
        health_b.url()
    );
    let p = proxy(&config).await;
    let checker = ActiveHealthChecker::spawn(p.state.clone());

    wait_for("a to be probed unhealthy", || {
        active(&p, "a") == HealthState::Unhealthy
    })
    .await;
    wait_for("b to be probed healthy", || {
        active(&p, "b") == HealthState::Healthy
    })
    .await;
    assert!(
        probes.load(Ordering::SeqCst) >= 2,
        "the threshold is 2 failures"
    );
    let client = h1_client();
    for _ in 0..10 {
        let (status, body) = get(&client, &p, "/x").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "b"));
    }

    healthy.store(true, Ordering::SeqCst);
    wait_for("a to recover", || active(&p, "a") == HealthState::Healthy).await;
    let mut a_served = false;
    for _ in 0..200 {
        let (status, body) = get(&client, &p, "/x").await;
        assert_eq!(status, StatusCode::OK);
        if body == "a" {
            a_served = true;
            break;
        }
    }
    assert!(a_served, "a recovered destination receives traffic again");

    checker.shutdown().await;
    let after = probes.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        probes.load(Ordering::SeqCst),
        after,
        "no probe after shutdown"
    );
    p.wait_idle("c", "a").await;
    p.wait_idle("c", "b").await;
    p.shutdown().await;
}

#[tokio::test]
async fn active_checker_follows_reloads() {
    let probes = Arc::new(AtomicUsize::new(0));
    let good = health_endpoint(Arc::new(AtomicBool::new(true)), probes.clone()).await;
    let bad_probes = Arc::new(AtomicUsize::new(0));
    let bad = health_endpoint(Arc::new(AtomicBool::new(false)), bad_probes.clone()).await;
    let dests = |list: &[(&str, &Backend)]| {
        list.iter()
            .map(|(id, b)| format!(r#""{id}": {{ "Address": "{}" }}"#, b.url()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let json = |active: &str, dests: String| {
        format!(
            r#"{{
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ {active} "Destinations": {{ {dests} }} }} }}
}}"#
        )
    };
    let config = |active: &str, dests: String| {
        fuseway::config::parse(&json(active, dests), fuseway::config::Format::Json).unwrap()
    };
    let enabled = r#""HealthCheck": { "Active": { "Enabled": true, "Interval": "100ms",
                      "Timeout": "1s", "Path": "/health" } },"#;

    // Without active health nothing is probed; enabling it by a reload starts probing.
    let p = proxy(&json("", dests(&[("good", &good)]))).await;
    let checker = ActiveHealthChecker::spawn(p.state.clone());
    p.state
        .update(config(enabled, dests(&[("good", &good)])))
        .unwrap();
    wait_for("good to be probed", || {
        active(&p, "good") == HealthState::Healthy
    })
    .await;

    // A destination added by a reload is probed too.
    p.state
        .update(config(enabled, dests(&[("good", &good), ("bad", &bad)])))
        .unwrap();
    wait_for("bad to be probed unhealthy", || {
        active(&p, "bad") == HealthState::Unhealthy
    })
    .await;
    assert_eq!(active(&p, "good"), HealthState::Healthy);
    checker.shutdown().await;
    p.shutdown().await;
}

#[global_allocator]
static ALLOCATOR: fuseway_alloc_count::Counting =
    fuseway_alloc_count::Counting::new(std::alloc::System);

#[test]
fn available_does_not_allocate_for_128_destinations() {
    let dests: Vec<String> = (0..128)
        .map(|i| {
            format!(
                r#""d{i:03}": {{ "Address": "http://127.0.0.1:{}" }}"#,
                2000 + i
            )
        })
        .collect();
    let json = format!(
        r#"{{ "Clusters": {{ "c": {{
             "HealthCheck": {{ "Passive": {{ "Enabled": true }}, "Active": {{ "Enabled": true }} }},
             "Destinations": {{ {} }} }} }} }}"#,
        dests.join(", ")
    );
    let config = fuseway::config::parse(&json, fuseway::config::Format::Json).unwrap();
    let state = ProxyState::new(config).unwrap();
    let snapshot = state.snapshot();
    let cluster = snapshot.cluster("c").unwrap();
    assert_eq!(available(cluster).len(), 128);
    let ((), counted) = fuseway_alloc_count::this_thread(|| {
        for _ in 0..1000 {
            std::hint::black_box(available(cluster));
        }
    });
    assert_eq!(counted.allocs, 0);
    // The counter sees allocations at all.
    let (v, counted) = fuseway_alloc_count::this_thread(|| vec![0u8; 8]);
    assert_eq!((v.len(), counted.allocs), (8, 1));
}
