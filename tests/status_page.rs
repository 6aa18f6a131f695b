//! The status page: its JSON shows the destinations' health, and the HTML page loads
//! in headless Chromium (when installed; `.ci/run` installs it) and shows the same
//! after its script ran and refreshed itself.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
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

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
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
    let Some(chromium) = chromium() else {
        eprintln!(
            "SKIPPED: chromium is not installed (`apt-get install -y chromium`; .ci/run does)"
        );
        return;
    };
    let live = echo_backend().await;
    let dead = Refused::bind();
    let (p, checker) = probed_proxy(&live, &dead).await;
    let (addr, _stop) = admin(&p).await;
    let profile = std::env::temp_dir().join(format!("fuseway-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).unwrap();
    let run = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Let the page's 2 s refresh timer fire (virtual time: no real wait).
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("http://{addr}/"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("chromium finished within 90 s")
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}: {dom}", out.status);
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
