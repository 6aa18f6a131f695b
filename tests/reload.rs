//! Hot reload through the file provider the binary uses (`providers::FileProvider`): a
//! changed file is validated whole and swapped in; an invalid one is rejected and the
//! old routes keep working; requests in flight finish on the configuration they
//! started with; destination state survives for unchanged ids. Plus the binary itself:
//! `--config` + `--admin`, reloading when the file is edited.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fuseway::health::HealthState;
use fuseway::providers::{ConfigProvider, FileProvider, Providers, ProvidersTask};
use fuseway::state::ProxyState;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Replace `path` the way editors do: write a temporary file, rename it over.
fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The proxy's state, running from `file`, with the binary's file provider on it.
async fn watched(file: &Path) -> (Proxy, ProvidersTask) {
    let text = std::fs::read_to_string(file).unwrap();
    let p = proxy(&text).await;
    let provider = Arc::new(FileProvider::open(file.to_path_buf(), Vec::new()));
    provider.watch().unwrap();
    let providers: Vec<Arc<dyn ConfigProvider>> = vec![provider];
    let task = Arc::new(Providers::new(providers)).spawn(p.state.clone());
    (p, task)
}

/// Wait until the state has been updated `generation` times.
async fn wait_generation(state: &ProxyState, generation: u64) {
    let mut rx = state.subscribe();
    within("the reload", rx.wait_for(|g| *g >= generation))
        .await
        .unwrap();
}

/// Reloads by result, read from the metrics.
fn reloads(state: &ProxyState, result: &str) -> u64 {
    let mut out = String::new();
    state.metrics().encode(&state.snapshot(), &mut out).unwrap();
    let series = format!("fuseway_config_reloads_total{{result=\"{result}\"}} ");
    out.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.parse().unwrap())
}

/// Routes `held` (only in generation 0) and `/gen/{n}` to cluster `c` = `backend`.
fn generation_config(backend: &str, n: usize) -> String {
    let held = if n == 0 {
        r#""held": { "ClusterId": "c", "Match": { "Path": "/held" } },"#
    } else {
        ""
    };
    format!(
        r#"{{
  "Routes": {{
    {held}
    "gen": {{ "ClusterId": "c", "Match": {{ "Path": "/gen/{n}" }} }}
  }},
  "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{backend}" }} }} }} }}
}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_requests_in_flight_across_twenty_reloads_all_succeed() {
    const IN_FLIGHT: usize = 200;
    const RELOADS: usize = 20;
    // The backend holds `/held` requests until released.
    let arrived = Arc::new(AtomicUsize::new(0));
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let b = backend({
        let arrived = arrived.clone();
        move |req: Request<Incoming>| {
            let arrived = arrived.clone();
            let mut release = release_rx.clone();
            async move {
                if req.uri().path() == "/held" {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let _ = release.wait_for(|r| *r).await;
                }
                Response::new(full(format!("ok {}", req.uri().path())))
            }
        }
    })
    .await;
    let dir = TempDir::new("reload-inflight");
    let file = dir.path().join("proxy.json");
    std::fs::write(&file, generation_config(&b.url(), 0)).unwrap();
    let (p, _watcher) = watched(&file).await;

    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let held: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let req = client.get(p.url("/held"));
            tokio::spawn(async move {
                let r = req.send().await?;
                let status = r.status();
                Ok::<_, reqwest::Error>((status, r.text().await?))
            })
        })
        .collect();
    within("every request to reach the backend", async {
        while arrived.load(Ordering::SeqCst) < IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    for n in 1..=RELOADS {
        write_config(&file, &generation_config(&b.url(), n));
        wait_generation(&p.state, n as u64).await;
        let r = client
            .get(p.url(&format!("/gen/{n}")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::OK,
            "generation {n} serves its route"
        );
        assert_eq!(r.text().await.unwrap(), format!("ok /gen/{n}"));
        let r = client.get(p.url("/held")).send().await.unwrap();
        assert_eq!(r.status(), 404, "new requests see generation {n}");
        // d1 kept its id: its runtime state (the in-flight counter) carried over.
        assert_eq!(p.concurrency("c", "d1"), IN_FLIGHT);
    }
    release_tx.send(true).unwrap();
    let mut failed = 0;
    for h in held {
        match within("a held response", h).await.unwrap() {
            Ok((StatusCode::OK, body)) if body == "ok /held" => {}
            other => {
                failed += 1;
                eprintln!("failed: {other:?}");
            }
        }
    }
    assert_eq!(
        failed, 0,
        "requests in flight across {RELOADS} reloads failed"
    );
    within("every reload to be counted", async {
        while reloads(&p.state, "success") < RELOADS as u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(reloads(&p.state, "success"), RELOADS as u64);
    p.wait_idle("c", "d1").await;
    p.shutdown().await;
}

#[tokio::test]
async fn an_invalid_file_is_rejected_and_the_old_routes_keep_working() {
    let b = echo_backend().await;
    let dir = TempDir::new("reload-invalid");
    let file = dir.path().join("proxy.json");
    std::fs::write(&file, generation_config(&b.url(), 0)).unwrap();
    let (p, _watcher) = watched(&file).await;
    let client = h1_client();

    // Invalid JSON, then valid JSON that fails validation (the field is named).
    let invalid = [
        "{ \"Routes\": ".to_string(),
        generation_config(&b.url(), 1).replace("/gen/1", "/gen/{oops"),
    ];
    for (i, text) in invalid.iter().enumerate() {
        write_config(&file, text);
        within("the rejection", async {
            while reloads(&p.state, "failure") < i as u64 + 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert_eq!(*p.state.subscribe().borrow(), 0, "nothing was swapped in");
        let r = client.get(p.url("/held")).send().await.unwrap();
        assert_eq!(r.status(), 200, "the old routes keep working");
        let r = client.get(p.url("/gen/0")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "GET /gen/0");
    }
    // A valid file is picked up again.
    write_config(&file, &generation_config(&b.url(), 2));
    wait_generation(&p.state, 1).await;
    let r = client.get(p.url("/gen/2")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The reloader counts the reload just after the swap it waited for above.
    within("the successful reload to be counted", async {
        while reloads(&p.state, "success") < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(reloads(&p.state, "success"), 1);
    p.shutdown().await;
}

/// Cluster `a` (destinations `bad`, a closed port, and `good`; passive health) and
/// cluster `b` whose destination address is `b_address`.
fn two_clusters(good: &str, bad: &str, b_address: &str) -> String {
    format!(
        r#"{{
  "Routes": {{
    "a": {{ "ClusterId": "a", "Match": {{ "Path": "/a/{{**rest}}" }} }},
    "b": {{ "ClusterId": "b", "Match": {{ "Path": "/b/{{**rest}}" }} }}
  }},
  "Clusters": {{
    "a": {{
      "LoadBalancingPolicy": "FirstAlphabetical",
      "HealthCheck": {{ "Passive": {{ "Enabled": true, "ReactivationPeriod": "00:10:00" }} }},
      "Metadata": {{ "TransportFailureRateHealthPolicy.MinimalTotalCountThreshold": "3" }},
      "Destinations": {{ "bad": {{ "Address": "{bad}" }}, "good": {{ "Address": "{good}" }} }}
    }},
    "b": {{ "Destinations": {{ "only": {{ "Address": "{b_address}" }} }} }}
  }}
}}"#
    )
}

#[tokio::test]
async fn unhealthy_state_survives_a_reload_that_changes_another_cluster() {
    let good = echo_backend().await;
    let b1 = echo_backend().await;
    let b2 = echo_backend().await;
    let refused = Refused::bind();
    let bad = refused.url();
    let dir = TempDir::new("reload-health");
    let file = dir.path().join("proxy.json");
    std::fs::write(&file, two_clusters(&good.url(), &bad, &b1.url())).unwrap();
    let (p, _watcher) = watched(&file).await;
    let client = h1_client();
    let passive = |p: &Proxy| {
        let snap = p.state.snapshot();
        let (_, d) = snap.cluster("a").unwrap().destination("bad").unwrap();
        d.state().health().passive()
    };

    // FirstAlphabetical sends everything to `bad` until passive health removes it.
    let mut failures = 0;
    while passive(&p) != HealthState::Unhealthy {
        let r = client.get(p.url("/a/x")).send().await.unwrap();
        assert_eq!(r.status(), 502);
        failures += 1;
        assert!(
            failures <= 10,
            "passive health never marked `bad` unhealthy"
        );
    }
    let r = client.get(p.url("/a/x")).send().await.unwrap();
    assert_eq!(r.status(), 200, "`good` serves once `bad` is out");

    // Only cluster `b` changes.
    write_config(&file, &two_clusters(&good.url(), &bad, &b2.url()));
    wait_generation(&p.state, 1).await;
    let b2_port = b2.addr.port().to_string();
    let r = client.get(p.url("/b/x")).send().await.unwrap();
    assert!(
        r.headers()["x-echo-host"]
            .to_str()
            .unwrap()
            .ends_with(&b2_port),
        "cluster b moved to its new address"
    );
    assert_eq!(
        passive(&p),
        HealthState::Unhealthy,
        "`bad` is still unhealthy"
    );
    for _ in 0..5 {
        let r = client.get(p.url("/a/x")).send().await.unwrap();
        assert_eq!(r.status(), 200, "still routed around `bad`");
    }
    let status = fuseway::admin::status(&p.state);
    let a = &status["clusters"][0];
    assert_eq!(a["id"], "a");
    assert_eq!(a["destinations"][0]["id"], "bad");
    assert_eq!(a["destinations"][0]["health"]["passive"], "unhealthy");
    assert_eq!(a["destinations"][0]["available"], false);
    p.shutdown().await;
}

#[tokio::test]
async fn the_binary_reloads_an_edited_file_and_serves_its_admin_listener() {
    let b = echo_backend().await;
    let dir = TempDir::new("reload-binary");
    let file = dir.path().join("proxy.json");
    std::fs::write(&file, generation_config(&b.url(), 0)).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fuseway"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&file)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    // `... fuseway listening addr=127.0.0.1:PORT ...` (ANSI colours aside).
    let addr_in = |line: &str| -> String {
        let clean: String = strip_ansi(line);
        let at = clean.find("addr=").unwrap() + 5;
        clean[at..].split_whitespace().next().unwrap().to_owned()
    };
    let (mut proxy_addr, mut admin_addr) = (None, None);
    within("the listening log lines", async {
        while proxy_addr.is_none() || admin_addr.is_none() {
            let line = log.next_line().await.unwrap().expect("fuseway exited");
            if line.contains("fuseway admin listening") {
                admin_addr = Some(addr_in(&line));
            } else if line.contains("fuseway listening") {
                proxy_addr = Some(addr_in(&line));
            }
        }
    })
    .await;
    let (proxy_addr, admin_addr) = (proxy_addr.unwrap(), admin_addr.unwrap());
    let client = h1_client();
    let get = |url: String| {
        let client = client.clone();
        async move {
            let r = within("a response", client.get(url).send()).await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    assert_eq!(
        get(format!("http://{proxy_addr}/gen/0")).await,
        (StatusCode::OK, "GET /gen/0".to_string())
    );
    std::fs::write(&file, generation_config(&b.url(), 1)).unwrap();
    within("the reload log line", async {
        loop {
            let line = log.next_line().await.unwrap().expect("fuseway exited");
            if line.contains("configuration reloaded") {
                return;
            }
        }
    })
    .await;
    assert_eq!(get(format!("http://{proxy_addr}/gen/1")).await.0, 200);
    assert_eq!(get(format!("http://{proxy_addr}/gen/0")).await.0, 404);
    let (status, metrics) = get(format!("http://{admin_addr}/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("fuseway_config_reloads_total{result=\"success\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"fuseway_requests_total{route="gen",cluster="c",destination="d1",status="200"} 2"#
        ),
        "{metrics}"
    );
    let (status, page) = get(format!("http://{admin_addr}/")).await;
    assert_eq!(status, 200);
    assert!(page.contains("fuseway status"));
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// A reload that changes `Listen` applies the rest and says the listeners need a
/// restart (it is never silently ignored); one that does not change it says nothing.
#[test]
fn a_changed_listen_is_logged_as_needing_a_restart() {
    let dir = TempDir::new("listen-change");
    let file = dir.path().join("proxy.json");
    let config = |listen: &str, path: &str| {
        format!(
            r#"{{ "Listen": ["{listen}"],
                 "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "{path}" }} }} }},
                 "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "http://127.0.0.1:9" }} }} }} }} }}"#
        )
    };
    let text = config("127.0.0.1:1", "/a");
    std::fs::write(&file, &text).unwrap();
    let state = Arc::new(
        ProxyState::new(fuseway::config::parse(&text, fuseway::config::Format::Json).unwrap())
            .unwrap(),
    );
    let provider: Arc<dyn ConfigProvider> = Arc::new(FileProvider::open(file.clone(), Vec::new()));
    let reloader = Providers::new(vec![provider]);

    let logs = fuseway::testing::SharedBuffer::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let logged = || logs.text();

    write_config(&file, &config("127.0.0.1:1", "/b"));
    reloader.reload(&state).unwrap();
    assert!(!logged().contains("needs a restart"), "{}", logged());

    write_config(&file, &config("127.0.0.1:2", "/c"));
    reloader.reload(&state).unwrap();
    assert!(logged().contains("`Listen` changed"), "{}", logged());
    // The rest was applied.
    let snapshot = state.snapshot();
    assert_eq!(
        snapshot.config().routes["r"].match_.path.as_deref(),
        Some("/c")
    );

    // Without a hook applying them (the binary has one), changed log levels are said to
    // need a restart.
    assert!(!logged().contains("`Logging` changed"), "{}", logged());
    let with_levels = config("127.0.0.1:2", "/c").replacen(
        "{ \"Listen\"",
        r#"{ "Logging": { "LogLevel": { "Default": "Debug" } }, "Listen""#,
        1,
    );
    write_config(&file, &with_levels);
    reloader.reload(&state).unwrap();
    assert!(logged().contains("`Logging` changed"), "{}", logged());

    // A listener whose certificate files do not load: the whole reload is refused,
    // naming the field, and the previous configuration stays.
    let broken = r#"{ "Listen": [{ "Address": "127.0.0.1:3", "Certificate": "/nonexistent/c.pem", "Key": "/nonexistent/k.pem" }],
                 "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/d" } } },
                 "Clusters": { "c": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9" } } } } }"#;
    write_config(&file, broken);
    let errors = reloader.reload(&state).unwrap_err();
    assert_eq!(errors.0[0].path, "Listen[0].Certificate", "{errors}");
    assert_eq!(
        state.snapshot().config().routes["r"].match_.path.as_deref(),
        Some("/c")
    );
}
