//! Metrics end to end: traffic through the real proxy, then a scrape of the admin
//! listener's `/metrics` finds the expected counter values, fused and layered.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use fuseway::admin::Admin;
use fuseway::server::Server;
use fuseway::state::ProxyState;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::sync::oneshot;

/// The admin listener on 127.0.0.1:0; stops when the sender is dropped.
async fn admin(state: Arc<ProxyState>) -> (SocketAddr, oneshot::Sender<()>) {
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    let addr = server.local_addrs()[0];
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(Admin::new(state), async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// The value of the series written exactly as `series` (name and labels).
fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

async fn scrape(addr: SocketAddr) -> String {
    let r = within(
        "a scrape",
        h1_client().get(format!("http://{addr}/metrics")).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    r.text().await.unwrap()
}

async fn traffic_then_scrape(form: Form) {
    // `/fail/...` answers 500, everything else 200.
    let b = backend(|req: Request<Incoming>| async move {
        let status = if req.uri().path().starts_with("/fail") {
            500
        } else {
            200
        };
        Response::builder().status(status).body(full("x")).unwrap()
    })
    .await;
    let refused = Refused::bind();
    let dead = refused.url();
    let config = format!(
        r#"{{
  "Routes": {{
    "ok": {{ "ClusterId": "c", "Match": {{ "Path": "/ok/{{**rest}}" }} }},
    "fail": {{ "ClusterId": "c", "Match": {{ "Path": "/fail/{{**rest}}" }} }},
    "dead": {{ "ClusterId": "gone", "Match": {{ "Path": "/dead/{{**rest}}" }} }},
    "small": {{ "ClusterId": "c", "MaxRequestBodySize": 4, "Match": {{ "Path": "/small/{{**rest}}" }} }},
    "lost": {{ "ClusterId": "missing", "Match": {{ "Path": "/lost/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }},
    "gone": {{ "Destinations": {{ "x": {{ "Address": "{dead}" }} }} }}
  }}
}}"#,
        b.url()
    );
    let p = proxy_with(&config, form).await;
    let (admin_addr, _stop) = admin(p.state.clone()).await;
    let client = h1_client();
    for (path, n, status) in [
        ("/ok/a", 5, 200),
        ("/fail/b", 3, 500),
        ("/dead/c", 2, 502),
        ("/nowhere", 4, 404),
        ("/small/d", 2, 413),
        ("/lost/e", 1, 503),
    ] {
        for _ in 0..n {
            let r = client
                .post(p.url(path))
                .body("0123456789")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), status, "{path}");
            r.bytes().await.unwrap();
        }
    }
    p.wait_idle("c", "d1").await;
    let m = scrape(admin_addr).await;
    let expect = [
        (
            r#"fuseway_requests_total{route="ok",cluster="c",destination="d1",status="200"}"#,
            5.0,
        ),
        (
            r#"fuseway_requests_total{route="fail",cluster="c",destination="d1",status="500"}"#,
            3.0,
        ),
        (
            r#"fuseway_requests_total{route="dead",cluster="gone",destination="x",status="502"}"#,
            2.0,
        ),
        (
            r#"fuseway_requests_total{route="",cluster="",destination="",status="404"}"#,
            4.0,
        ),
        // Answered before a destination was chosen: on their route (and cluster).
        (
            r#"fuseway_requests_total{route="small",cluster="c",destination="",status="413"}"#,
            2.0,
        ),
        (
            r#"fuseway_requests_total{route="lost",cluster="",destination="",status="503"}"#,
            1.0,
        ),
        (
            r#"fuseway_forward_errors_total{route="dead",cluster="gone",destination="x",kind="Request"}"#,
            2.0,
        ),
        (
            r#"fuseway_request_duration_seconds_count{route="ok",cluster="c",destination="d1"}"#,
            5.0,
        ),
        (
            r#"fuseway_request_duration_seconds_bucket{route="fail",cluster="c",destination="d1",le="+Inf"}"#,
            3.0,
        ),
        ("fuseway_requests_in_flight", 0.0),
        (
            r#"fuseway_destination_requests_in_flight{cluster="c",destination="d1"}"#,
            0.0,
        ),
        (
            r#"fuseway_destination_health{cluster="c",destination="d1",check="active",state="unknown"}"#,
            1.0,
        ),
        (
            r#"fuseway_destination_available{cluster="gone",destination="x"}"#,
            1.0,
        ),
    ];
    for (series, want) in expect {
        assert_eq!(value(&m, series), Some(want), "{form:?}: {series} in\n{m}");
    }
    // The finest bucket is 100 µs; the build and the process describe themselves.
    assert!(
        value(
            &m,
            r#"fuseway_request_duration_seconds_bucket{route="ok",cluster="c",destination="d1",le="0.0001"}"#
        )
        .is_some(),
        "{m}"
    );
    let version = format!(
        r#"fuseway_build_info{{version="{}"}}"#,
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&m, &version), Some(1.0), "{m}");
    for series in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(value(&m, series).unwrap_or(0.0) > 0.0, "{series} in\n{m}");
    }
    assert!(value(&m, "process_cpu_seconds_total").is_some(), "{m}");
    // The pools: 8 requests one after another to the backend, on connections kept
    // alive; every connect to the dead destination failed.
    let pool = |name: &str, address: &str| {
        value(&m, &format!(r#"{name}{{address="{address}"}}"#))
            .unwrap_or_else(|| panic!("{name} {address} in\n{m}"))
    };
    let live = b.url();
    let connects = pool("fuseway_pool_connects_total", &live);
    let reuses = pool("fuseway_pool_reuses_total", &live);
    assert!(connects >= 1.0 && reuses >= 1.0, "{connects} {reuses}");
    assert_eq!(
        connects + reuses,
        8.0,
        "every request either opened or reused one"
    );
    assert!(pool("fuseway_pool_idle_connections", &live) >= 1.0);
    // The backend keeps them all alive: every connection opened is open.
    assert_eq!(pool("fuseway_pool_open_connections", &live), connects);
    assert_eq!(pool("fuseway_pool_open_connections", &dead), 0.0);
    assert_eq!(pool("fuseway_pool_connect_errors_total", &live), 0.0);
    assert_eq!(
        pool("fuseway_pool_connect_errors_total", &dead),
        pool("fuseway_pool_connects_total", &dead)
    );
    assert!(pool("fuseway_pool_connect_errors_total", &dead) >= 2.0);
    let status = fuseway::admin::status(&p.state);
    let dests = &status["clusters"][1]["destinations"][0];
    assert_eq!(dests["id"], "x");
    assert_eq!(dests["recent_errors"], 2, "{status}");
    assert_eq!(
        status["clusters"][0]["destinations"][0]["recent_errors"], 3,
        "5xx answers count as errors"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn scrape_after_traffic_fused() {
    traffic_then_scrape(Form::Fused).await;
}

#[tokio::test]
async fn scrape_after_traffic_layered() {
    traffic_then_scrape(Form::Layered).await;
}

#[tokio::test]
async fn counters_keep_counting_across_reloads_and_in_flight_requests_show() {
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let b = backend(move |_req: Request<Incoming>| {
        let mut release = release_rx.clone();
        async move {
            let _ = release.wait_for(|r| *r).await;
            Response::new(full("done"))
        }
    })
    .await;
    let config = simple_config(&[("d1", &b.url())], "");
    let p = proxy(&config).await;
    let (admin_addr, _stop) = admin(p.state.clone()).await;
    let client = h1_client();
    let url = p.url("/x");
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.get(url).send().await.unwrap().text().await.unwrap() }
    });
    within("the request to be in flight", async {
        while p.concurrency("c", "d1") == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    let m = scrape(admin_addr).await;
    assert_eq!(value(&m, "fuseway_requests_in_flight"), Some(1.0), "{m}");
    assert_eq!(
        value(
            &m,
            r#"fuseway_destination_requests_in_flight{cluster="c",destination="d1"}"#
        ),
        Some(1.0)
    );
    // A reload while the request is in flight; it still counts on the same series.
    let config: fuseway::config::ProxyConfig = serde_json::from_str(&config).unwrap();
    p.state.update(config).unwrap();
    release_tx.send(true).unwrap();
    assert_eq!(within("the response", pending).await.unwrap(), "done");
    client.get(p.url("/y")).send().await.unwrap();
    p.wait_idle("c", "d1").await;
    let m = scrape(admin_addr).await;
    assert_eq!(
        value(
            &m,
            r#"fuseway_requests_total{route="all",cluster="c",destination="d1",status="200"}"#
        ),
        Some(2.0),
        "{m}"
    );
    assert_eq!(value(&m, "fuseway_requests_in_flight"), Some(0.0));
    p.shutdown().await;
}

#[tokio::test]
async fn admin_answers_only_its_paths_and_methods() {
    let p = proxy(&simple_config(&[("d1", "http://127.0.0.1:9")], "")).await;
    let (addr, _stop) = admin(p.state.clone()).await;
    let client = h1_client();
    let r = client
        .get(format!("http://{addr}/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .post(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    let r = client
        .get(format!("http://{addr}/status.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["routes"][0]["id"], "all");
    assert_eq!(v["clusters"][0]["destinations"][0]["id"], "d1");
    p.shutdown().await;
}

/// Client connections by protocol: accepted so far and open now (process-wide, so
/// other tests' connections may add to both: the test asserts at least its own).
#[tokio::test]
async fn connections_are_counted_by_protocol() {
    let b = backend(|_req: Request<Incoming>| async { Response::new(full("ok")) }).await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let (admin_addr, _stop) = admin(p.state.clone()).await;
    let before = scrape(admin_addr).await;
    let accepted = |m: &str, protocol: &str| {
        value(
            m,
            &format!(r#"fuseway_connections_accepted_total{{protocol="{protocol}"}}"#),
        )
        .unwrap()
    };
    let open = |m: &str, protocol: &str| {
        value(
            m,
            &format!(r#"fuseway_connections_open{{protocol="{protocol}"}}"#),
        )
        .unwrap()
    };
    // Three HTTP/1.1 connections and one h2c connection, each kept open.
    let clients = [h1_client(), h1_client(), h1_client(), h2c_client()];
    for client in &clients {
        let r = within("a request", client.get(p.url("/c")).send())
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    let after = scrape(admin_addr).await;
    assert!(
        accepted(&after, "http1") >= accepted(&before, "http1") + 3.0,
        "{before}\n{after}"
    );
    assert!(
        accepted(&after, "http2") >= accepted(&before, "http2") + 1.0,
        "{after}"
    );
    assert!(open(&after, "http1") >= 3.0, "{after}");
    assert!(open(&after, "http2") >= 1.0, "{after}");
    drop(clients);
    p.shutdown().await;
}

/// A destination connection counts as open while a request uses it (not idle), as
/// open and idle once the response is over, and not at all once the destination has
/// closed it.
#[tokio::test]
async fn pool_connections_are_open_while_in_use_and_until_closed() {
    let (arrived_tx, mut arrived) = tokio::sync::mpsc::unbounded_channel::<()>();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let b = backend({
        let release = release.clone();
        move |req: Request<Incoming>| {
            let (arrived_tx, release) = (arrived_tx.clone(), release.clone());
            async move {
                match req.uri().path() {
                    "/hold" => {
                        let _ = arrived_tx.send(());
                        release.acquire().await.unwrap().forget();
                        Response::new(full("held"))
                    }
                    _ => Response::builder()
                        .header("connection", "close")
                        .body(full("closing"))
                        .unwrap(),
                }
            }
        }
    })
    .await;
    let p = proxy(&simple_config(&[("d1", &b.url())], "")).await;
    let (admin_addr, _stop) = admin(p.state.clone()).await;
    let gauges = |m: &str| {
        let get =
            |name: &str| value(m, &format!(r#"{name}{{address="{}"}}"#, b.url())).unwrap_or(-1.0);
        (
            get("fuseway_pool_open_connections"),
            get("fuseway_pool_idle_connections"),
        )
    };
    // Scrapes until the gauges read (open, idle), the last scrape if they never do.
    let until = |want: (f64, f64)| async move {
        within(&format!("(open, idle) = {want:?}"), async {
            loop {
                let m = scrape(admin_addr).await;
                if gauges(&m) == want {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
    };

    let client = h1_client();
    let held = tokio::spawn({
        let url = p.url("/hold");
        let client = client.clone();
        async move { client.get(url).send().await.unwrap().text().await.unwrap() }
    });
    within("the held request at the backend", arrived.recv())
        .await
        .unwrap();
    assert_eq!(gauges(&scrape(admin_addr).await), (1.0, 0.0), "in use");
    release.add_permits(1);
    assert_eq!(within("the held response", held).await.unwrap(), "held");
    until((1.0, 1.0)).await;

    // The destination closes the connection after this response.
    let r = within("a request", client.get(p.url("/close")).send())
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "closing");
    until((0.0, 0.0)).await;
    p.shutdown().await;
}
