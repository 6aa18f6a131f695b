//! The status page: its JSON shows the destinations' health, and the HTML page loads
//! in headless Chromium (when installed; `.ci/run` installs it) and shows the same
//! after its script ran and refreshed itself.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use fuseway::admin::Admin;
use fuseway::health::{ActiveHealthChecker, HealthState};
use fuseway::server::Server;
use tokio::sync::oneshot;

async fn admin(p: &Proxy) -> (SocketAddr, oneshot::Sender<()>) {
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    let addr = server.local_addrs()[0];
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(Admin::new(p.state.clone()), async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// A proxy over one healthy and one dead destination with fast active probes, once
/// the probes have marked them.
async fn probed_proxy(live: &Backend, dead: &Refused) -> (Proxy, ActiveHealthChecker) {
    let config = simple_config(
        &[("live", &live.url()), ("dead", &dead.url())],
        r#""HealthCheck": { "Active": { "Enabled": true, "Interval": "100ms", "Timeout": "1s", "Path": "/" } },
           "Metadata": { "ConsecutiveFailuresHealthPolicy.Threshold": "1" },"#,
    );
    let p = proxy(&config).await;
    let checker = ActiveHealthChecker::spawn(p.state.clone());
    let mut seen = (HealthState::Unknown, HealthState::Unknown);
    let marked = tokio::time::timeout(LIMIT, async {
        loop {
            let snap = p.state.snapshot();
            let c = snap.cluster("c").unwrap();
            let health = |id| c.destination(id).unwrap().1.state().health().active();
            seen = (health("live"), health("dead"));
            if seen == (HealthState::Healthy, HealthState::Unhealthy) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        marked.is_ok(),
        "the probes did not mark both destinations within {LIMIT:?}: live {:?}, dead {:?}",
        seen.0,
        seen.1
    );
    (p, checker)
}

#[tokio::test]
async fn status_json_shows_health() {
    let live = echo_backend().await;
    let dead = Refused::bind();
    let (p, checker) = probed_proxy(&live, &dead).await;
    let (addr, _stop) = admin(&p).await;
    let text = h1_client()
        .get(format!("http://{addr}/status.json"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dests = v["clusters"][0]["destinations"].as_array().unwrap();
    let by_id = |id: &str| dests.iter().find(|d| d["id"] == id).unwrap().clone();
    assert_eq!(by_id("live")["health"]["active"], "healthy");
    assert_eq!(by_id("live")["available"], true);
    assert_eq!(by_id("dead")["health"]["active"], "unhealthy");
    assert_eq!(by_id("dead")["available"], false);
    assert_eq!(v["routes"][0]["id"], "all");
    checker.shutdown().await;
    p.shutdown().await;
}

/// The `<tr>` of destination `id` in the dumped DOM.
fn row<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("data-destination=\"{id}\""))
        .unwrap_or_else(|| panic!("no row for {id} in:\n{dom}"));
    let end = dom[start..].find("</tr>").unwrap() + start;
    &dom[start..end]
}

#[tokio::test]
async fn status_page_loads_in_headless_chromium_and_shows_health() {
    let Some(chromium) = chromium("the status page in a browser") else {
        return;
    };
    let live = echo_backend().await;
    let dead = Refused::bind();
    let (p, checker) = probed_proxy(&live, &dead).await;
    let (addr, _stop) = admin(&p).await;
    // Let the page's 2 s refresh timer fire (virtual time: no real wait).
    let dom = chromium_run(
        &chromium,
        &["--virtual-time-budget=5000".into(), "--dump-dom".into()],
        &format!("http://{addr}/"),
    )
    .await;
    let dom = String::from_utf8_lossy(&dom);
    let live_row = row(&dom, "live");
    assert!(
        live_row.contains(r#"data-check="active" data-health="healthy""#),
        "{live_row}"
    );
    let dead_row = row(&dom, "dead");
    assert!(
        dead_row.contains(r#"data-check="active" data-health="unhealthy""#),
        "{dead_row}"
    );
    assert!(dom.contains(r#"data-route="all""#), "{dom}");
    assert!(
        !dom.contains(r#"data-refreshes="0""#) && dom.contains(r#"class="live""#),
        "the page refreshed itself from status.json: {dom}"
    );
    checker.shutdown().await;
    p.shutdown().await;
}

/// The number of samples the status page's data has for route `all` (0: none yet).
async fn route_points(addr: SocketAddr) -> usize {
    let status: serde_json::Value =
        serde_json::from_str(&get(&format!("http://{addr}/status.json")).await).unwrap();
    status["history"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "all")
        .map_or(0, |r| r["points"].as_array().unwrap().len())
}

async fn get(url: &str) -> String {
    let r = within(url, h1_client().get(url).send()).await.unwrap();
    r.text().await.unwrap()
}

/// Under load the page charts each cluster and route (requests per second, latency,
/// 5xx share), and the charts move: two screenshots a few samples apart differ. With
/// `FUSEWAY_STATUS_SCREENSHOT=PATH` the second screenshot is kept there (the README's
/// picture: `docs/status-page.png`).
#[tokio::test]
async fn status_page_charts_traffic_live_in_headless_chromium() {
    let Some(chromium) = chromium("the status page's charts in a browser") else {
        return;
    };
    let live = echo_backend().await;
    let dead = Refused::bind();
    let (p, checker) = probed_proxy(&live, &dead).await;
    let (addr, _stop) = admin(&p).await;
    let sampler = fuseway::admin::spawn_history(p.state.clone(), Duration::from_millis(200));
    // Load: a client sending requests one after another until stopped.
    let (stop_load, mut stopped) = tokio::sync::watch::channel(false);
    let url = p.url("/load");
    let load = tokio::spawn(async move {
        let client = h1_client();
        let mut n = 0u64;
        while !*stopped.borrow_and_update() {
            let r = client.get(&url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
            n += 1;
        }
        n
    });
    let wait_points = |at_least: usize| async move {
        within("history samples", async {
            while route_points(addr).await < at_least {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    };
    wait_points(3).await;

    let dom = String::from_utf8_lossy(
        &chromium_run(
            &chromium,
            &["--virtual-time-budget=1000".into(), "--dump-dom".into()],
            &format!("http://{addr}/"),
        )
        .await,
    )
    .into_owned();
    for chart in [
        "route:all:rps",
        "route:all:latency",
        "route:all:err",
        "cluster:c:rps",
    ] {
        let at = dom
            .find(&format!("data-chart=\"{chart}\""))
            .unwrap_or_else(|| panic!("no chart {chart} in:\n{dom}"));
        let points: usize = dom[at..]
            .split("data-points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(points >= 3, "{chart}: {points} points");
    }
    assert!(dom.contains("<polyline"), "{dom}");
    assert!(!dom.contains(r#"id="no-traffic""#), "{dom}");

    let shots = common::TempDir::new("screenshots");
    let shoot = |name: &str| {
        let path = shots.path().join(name);
        let chromium = chromium.clone();
        async move {
            chromium_run(
                &chromium,
                &[
                    "--virtual-time-budget=1000".into(),
                    format!("--screenshot={}", path.display()),
                ],
                &format!("http://{addr}/"),
            )
            .await;
            std::fs::read(&path).unwrap()
        }
    };
    let first = shoot("first.png").await;
    let before = route_points(addr).await;
    // For the README's picture, a fuller window (40 samples: 8 s).
    let keep = std::env::var_os("FUSEWAY_STATUS_SCREENSHOT");
    wait_points(if keep.is_some() { 40 } else { before + 3 }).await;
    let second = shoot("second.png").await;
    assert!(
        first.len() > 10_000 && second.len() > 10_000,
        "{} {}",
        first.len(),
        second.len()
    );
    assert_ne!(first, second, "the charts moved between the screenshots");
    if let Some(keep) = keep {
        std::fs::write(keep, &second).unwrap();
    }

    stop_load.send(true).unwrap();
    let sent = within("the load to stop", load).await.unwrap();
    assert!(sent > 0);
    sampler.abort();
    checker.shutdown().await;
    p.shutdown().await;
}
