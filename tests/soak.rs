//! Soak: many requests across mixed routes, over HTTP/1.1 and h2c, with about 1%
//! injected backend faults and configuration reloads while traffic flows. No request
//! may be lost or reach the wrong route; faults must surface as the expected errors
//! (counted separately); RSS must stay flat and every counter must return to 0.
//!
//! Ignored by default; `.ci/run` runs it with a bounded count:
//! `FUSEWAY_SOAK_REQUESTS=100000 cargo test --test soak -- --ignored` (add `--release`
//! for about 15 000 requests/s instead of 1 300).

mod common;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use support::*;

/// Echoes `{method} {path}` and the body, if any; with `x-fault`, starts a response and then fails its
/// body (the connection is cut mid-response).
async fn soak_backend() -> Backend {
    backend(|req: Request<Incoming>| async move {
        let mut echo = format!("{} {}", req.method(), req.uri().path());
        let fault = req.headers().contains_key("x-fault");
        // Read the whole body (and echo it): a backend that leaves it unread closes the
        // connection, and the keep-alive race that follows is a known limitation (see
        // `faults.rs`, `pooled_connection_closed_by_the_destination_under_a_request`).
        let body = req.into_body().collect().await.unwrap().to_bytes();
        if !body.is_empty() {
            echo.push(' ');
            echo.push_str(&String::from_utf8_lossy(&body));
        }
        if fault {
            let stream = futures_util::stream::iter([
                Ok::<_, BoxError>(Frame::data(Bytes::from("partial"))),
                Err::<Frame<Bytes>, BoxError>("injected fault".into()),
            ]);
            return Response::new(BodyExt::boxed(StreamBody::new(stream)));
        }
        Response::new(full(echo))
    })
    .await
}

/// Routes `r0`..`r3` (each to a cluster whose destinations carry the route id as path
/// prefix, so the echo names the route), `dead` (refused connections), and in every
/// other generation an extra route; the balancing policy changes with the generation.
fn config(a: &str, b: &str, dead: &str, generation: usize) -> String {
    let policy = ["RoundRobin", "Random", "LeastRequests", "PowerOfTwoChoices"][generation % 4];
    let extra = if generation % 2 == 1 {
        format!(
            r#""extra{generation}": {{ "ClusterId": "c0", "Match": {{ "Path": "/extra{generation}/{{**rest}}" }} }},"#
        )
    } else {
        String::new()
    };
    format!(
        r#"{{
  "Routes": {{
    {extra}
    "r0": {{ "ClusterId": "c0", "Match": {{ "Path": "/svc0/{{**rest}}" }} }},
    "r1": {{ "ClusterId": "c1", "Match": {{ "Path": "/svc1/{{id:int}}/{{**rest}}" }} }},
    "r2": {{ "ClusterId": "c2", "Match": {{ "Hosts": ["two.test"], "Path": "/{{**rest}}" }} }},
    "r3": {{ "ClusterId": "c3", "Order": -1, "Match": {{ "Path": "/svc3/{{**rest}}", "Methods": ["POST"] }} }},
    "dead": {{ "ClusterId": "dead", "Match": {{ "Path": "/dead/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "c0": {{ "LoadBalancingPolicy": "{policy}", "Destinations": {{ "a": {{ "Address": "{a}/r0" }}, "b": {{ "Address": "{b}/r0" }} }} }},
    "c1": {{ "Destinations": {{ "a": {{ "Address": "{a}/r1" }} }} }},
    "c2": {{ "HttpRequest": {{ "Version": "2", "VersionPolicy": "RequestVersionExact" }}, "Destinations": {{ "b": {{ "Address": "{b}/r2" }} }} }},
    "c3": {{ "LoadBalancingPolicy": "{policy}", "Destinations": {{ "a": {{ "Address": "{a}/r3" }}, "b": {{ "Address": "{b}/r3" }} }} }},
    "dead": {{ "Destinations": {{ "x": {{ "Address": "{dead}" }} }} }}
  }}
}}"#
    )
}

#[derive(Debug, Default)]
struct Tally {
    ok: AtomicUsize,
    faults: AtomicUsize,
    problems: Mutex<Vec<String>>,
}

impl Tally {
    fn problem(&self, p: String) {
        let mut all = self.problems.lock().unwrap();
        if all.len() < 20 {
            all.push(p);
        }
    }
}

/// Send request `i` and check its outcome.
async fn one(client: &reqwest::Client, base: &str, i: usize, tally: &Tally) {
    let kind = i % 100;
    let (request, expected) = match i % 4 {
        _ if kind == 37 => (client.get(format!("{base}/dead/{i}")), None),
        0 => (
            client.get(format!("{base}/svc0/req/{i}")),
            Some(format!("GET /r0/svc0/req/{i}")),
        ),
        1 => (
            client.get(format!("{base}/SVC1/{i}/x/../y")),
            Some(format!("GET /r1/SVC1/{i}/y")),
        ),
        2 => (
            client.get(format!(
                "http://two.test:{}/any/{i}",
                base.rsplit(':').next().unwrap()
            )),
            Some(format!("GET /r2/any/{i}")),
        ),
        _ => (
            client.post(format!("{base}/svc3/{i}")).body(i.to_string()),
            Some(format!("POST /r3/svc3/{i} {i}")),
        ),
    };
    let fault = kind == 71;
    let request = if fault {
        request.header("x-fault", "1")
    } else {
        request
    };
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => return tally.problem(format!("{i}: send failed: {e}")),
    };
    let status = response.status();
    let body = response.text().await;
    match (expected, fault) {
        (None, _) => {
            if status == StatusCode::BAD_GATEWAY {
                tally.faults.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.problem(format!("{i}: dead route answered {status}"));
            }
        }
        (Some(_), true) => {
            // Cut after the head (an aborted 200) or before it reached the proxy (502).
            if (status == StatusCode::OK && body.is_err()) || status == StatusCode::BAD_GATEWAY {
                tally.faults.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.problem(format!("{i}: fault not surfaced: {status} {body:?}"));
            }
        }
        (Some(expected), false) => match body {
            Ok(body) if status == StatusCode::OK && body == expected => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            other => tally.problem(format!("{i}: expected {expected}, got {status} {other:?}")),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: run by .ci/run with FUSEWAY_SOAK_REQUESTS"]
async fn soak_mixed_routes_faults_and_reloads() {
    let total: usize = std::env::var("FUSEWAY_SOAK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    const WORKERS: usize = 16;
    const RELOAD_EVERY: usize = 2_000;
    let logs = Logs::capture_global();
    let a = soak_backend().await;
    let b = soak_backend().await;
    let refused = Refused::bind();
    let dead = refused.url();
    let p = start(&config(&a.url(), &b.url(), &dead, 0), options()).await;
    let base = format!("http://{}", p.addr);
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicUsize::new(0));
    let reloads = Arc::new(AtomicUsize::new(0));
    let rss_samples = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        // `two.test` resolves to the proxy, so HTTP/2 requests carry it as authority.
        let builder = reqwest::Client::builder()
            .timeout(LIMIT)
            .no_proxy()
            .resolve("two.test", p.addr);
        let builder = if w % 2 == 0 {
            builder.http1_only()
        } else {
            builder.http2_prior_knowledge()
        };
        let client = builder.build().unwrap();
        let (tally, next, base) = (tally.clone(), next.clone(), base.clone());
        let (reloads, rss_samples, state) = (reloads.clone(), rss_samples.clone(), p.state.clone());
        let (a, b, dead) = (a.url(), b.url(), dead.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                if i > 0 && i % RELOAD_EVERY == 0 {
                    let generation = i / RELOAD_EVERY;
                    let config = fuseway::config::parse(
                        &config(&a, &b, &dead, generation),
                        fuseway::config::Format::Json,
                    )
                    .unwrap();
                    state.update(config).expect("reload");
                    reloads.fetch_add(1, Ordering::Relaxed);
                    rss_samples.lock().unwrap().push((i, rss_kib()));
                }
                one(&client, &base, i, &tally).await;
            }
        }));
    }
    for w in workers {
        tokio::time::timeout(Duration::from_secs(900), w)
            .await
            .expect("the soak is bounded")
            .unwrap();
    }
    let elapsed = started.elapsed();

    let problems = tally.problems.lock().unwrap().clone();
    if !problems.is_empty() {
        // The proxy's warnings (but the dead route's and the aborted bodies) help explain them.
        let unexpected: Vec<String> = logs
            .text()
            .lines()
            .filter(|l| !l.contains("route=\"dead\"") && !l.contains("aborting the response"))
            .take(20)
            .map(str::to_owned)
            .collect();
        panic!("lost or mis-routed requests: {problems:#?}\nproxy warnings: {unexpected:#?}");
    }
    let ok = tally.ok.load(Ordering::Relaxed);
    let faults = tally.faults.load(Ordering::Relaxed);
    let expected_faults = (0..total)
        .filter(|i| i % 100 == 37 || i % 100 == 71)
        .count();
    assert_eq!(faults, expected_faults, "every injected fault surfaced");
    assert_eq!(ok + faults, total, "no request lost");

    for (cluster, dest) in [
        ("c0", "a"),
        ("c0", "b"),
        ("c1", "a"),
        ("c2", "b"),
        ("c3", "a"),
        ("c3", "b"),
        ("dead", "x"),
    ] {
        p.wait_idle(cluster, dest).await;
    }
    let samples = rss_samples.lock().unwrap().clone();
    // Flat: after the first tenth (pools, buffers and allocator arenas warmed up),
    // RSS stays within a fixed margin.
    let warm: Vec<_> = samples.iter().filter(|(i, _)| *i >= total / 10).collect();
    let (min, max) = warm
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), (_, r)| (lo.min(*r), hi.max(*r)));
    eprintln!(
        "soak: {total} requests in {elapsed:.1?} ({:.0}/s), {ok} ok, {faults} injected faults, \
         {} reloads, RSS after warm-up {min}..{max} KiB",
        total as f64 / elapsed.as_secs_f64(),
        reloads.load(Ordering::Relaxed)
    );
    if warm.len() >= 2 {
        assert!(
            max - min < 32 * 1024,
            "RSS grew from {min} to {max} KiB: {samples:?}"
        );
    }
    p.shutdown().await;
}
