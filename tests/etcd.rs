//! A fleet fed from one etcd: two `fuseway --config etcd://...` binaries on one prefix,
//! against a real etcd server started here (Debian's `etcd-server`, installed by
//! `.ci/run`; where it is absent the tests say so and check nothing), real backends and
//! real clients on 127.0.0.1.

#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{backend, free_port, full, h1_client, within, TempDir};
use etcd_client::{Certificate, Client, ConnectOptions, PutOptions, TlsOptions};
use http::Response;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const PREFIX: &str = "/fuseway";

/// A single-member etcd on 127.0.0.1, its data in a directory of its own.
struct Etcd {
    binary: PathBuf,
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    /// Serving clients over TLS: the CA's PEM file (the server's certificate and key
    /// are beside it).
    tls: Option<PathBuf>,
    /// The test's own credentials, once authentication is on.
    user: Option<(String, String)>,
}

impl Etcd {
    /// Start one, or `None` (said on stderr) where etcd is not installed.
    async fn start() -> Option<Etcd> {
        Etcd::start_with(false).await
    }

    /// Serving clients over TLS when `tls`, with a certificate signed by a CA of its
    /// own.
    async fn start_with(tls: bool) -> Option<Etcd> {
        let binary = common::installed(&["etcd"], "etcd-server", "the fleet on etcd")?;
        let mut etcd = Etcd {
            binary,
            dir: TempDir::new("etcd"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
            tls: None,
            user: None,
        };
        if tls {
            etcd.tls = Some(common::localhost_certificates(&etcd.dir));
        }
        etcd.run().await;
        Some(etcd)
    }

    fn connect_options(&self) -> Option<ConnectOptions> {
        let mut options = ConnectOptions::new();
        if let Some(ca) = &self.tls {
            let pem = std::fs::read(ca).unwrap();
            options =
                options.with_tls(TlsOptions::new().ca_certificate(Certificate::from_pem(pem)));
        }
        if let Some((user, password)) = &self.user {
            options = options.with_user(user, password);
        }
        Some(options)
    }

    fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}{PREFIX}", self.client_port)
    }

    fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// Start the server (again, on the same data) and wait until it answers.
    async fn run(&mut self) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new(&self.binary);
        if self.tls.is_some() {
            command
                .arg("--cert-file")
                .arg(self.dir.path().join("server.pem"))
                .arg("--key-file")
                .arg(self.dir.path().join("server.key"));
        }
        let child = command
            .arg("--name")
            .arg("fuseway-test")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .arg("--initial-cluster")
            .arg(format!("fuseway-test={peer}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let options = self.connect_options();
        within("etcd to answer", async {
            loop {
                if let Ok(mut c) = Client::connect([client.as_str()], options.clone()).await {
                    if c.status().await.is_ok() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }

    /// Kill the server and wait until it is gone.
    async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    async fn client(&self) -> Client {
        within(
            "an etcd client",
            Client::connect([self.endpoint().as_str()], self.connect_options()),
        )
        .await
        .unwrap()
    }
}

/// One `fuseway` binary reading `etcd`.
struct Instance {
    _child: Child,
    proxy: SocketAddr,
    admin: SocketAddr,
    /// The log up to the listening lines.
    early: Vec<String>,
    log: mpsc::UnboundedReceiver<String>,
}

impl Instance {
    async fn start(etcd: &Etcd) -> Instance {
        Instance::start_with(etcd, &[]).await
    }

    /// With more `--config` sources before etcd's.
    async fn start_with(etcd: &Etcd, configs: &[&std::path::Path]) -> Instance {
        Instance::spawn(etcd, configs, Some("info")).await
    }

    /// With `RUST_LOG` set to `rust_log`, or not set (`None`: the configuration's
    /// `Logging` filters the log).
    async fn spawn(etcd: &Etcd, configs: &[&std::path::Path], rust_log: Option<&str>) -> Instance {
        let mut command = fuseway(etcd);
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        for config in configs {
            command.arg("--config").arg(config);
        }
        let mut child = command
            .args(["--config", &etcd.url()])
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--workers", "1", "--access-log", "off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let common::Logged {
            proxy,
            admin,
            early,
            log,
        } = common::proxy_and_admin(&mut child).await;
        Instance {
            _child: child,
            proxy,
            admin,
            early,
            log,
        }
    }

    /// `GET path` through the proxy: status and body.
    async fn get(&self, path: &str) -> (u16, String) {
        let r = within(
            path,
            h1_client()
                .get(format!("http://{}{path}", self.proxy))
                .send(),
        )
        .await
        .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// The admin listener's `/status.json`.
    async fn status(&self) -> serde_json::Value {
        let r = within(
            "status.json",
            h1_client()
                .get(format!("http://{}/status.json", self.admin))
                .send(),
        )
        .await
        .unwrap();
        serde_json::from_str(&r.text().await.unwrap()).unwrap()
    }

    /// The ids of `cluster`'s destinations now.
    async fn destinations(&self, cluster: &str) -> Vec<String> {
        let status = self.status().await;
        status["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["id"] == cluster)
            .flat_map(|c| c["destinations"].as_array().unwrap().iter())
            .map(|d| d["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// The etcd source's last error on the status page.
    async fn source_error(&self) -> Option<String> {
        let status = self.status().await;
        status["config_sources"][0]["error"]
            .as_str()
            .map(str::to_string)
    }

    /// Wait for a log line containing `text`.
    async fn log_until(&mut self, text: &str) -> String {
        within(&format!("a log line with `{text}`"), async {
            while let Some(line) = self.log.recv().await {
                if line.contains(text) {
                    return line;
                }
            }
            panic!("the log ended before `{text}`");
        })
        .await
    }
}

/// The binary, with `etcd`'s credentials and CA.
fn fuseway(etcd: &Etcd) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fuseway"));
    if let Some(ca) = &etcd.tls {
        command.arg("--etcd-ca").arg(ca);
    }
    if let Some((user, password)) = &etcd.user {
        command
            .args(["--etcd-user", user])
            .env("FUSEWAY_ETCD_PASSWORD", password);
    }
    command
}

/// Poll (every 10 ms, bounded by `limit`) until `check` holds; how long it took.
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A backend answering every request with `name`.
async fn named(name: &'static str) -> common::Backend {
    backend(move |_| async move { Response::new(full(name)) }).await
}

fn key(rest: &str) -> String {
    format!("{PREFIX}/{rest}")
}

/// Put `value` at `PREFIX/rest`.
async fn put(client: &mut Client, rest: &str, value: impl Into<Vec<u8>>) {
    within("an etcd put", client.put(key(rest), value, None))
        .await
        .unwrap();
}

/// The route `api` (`/api/...`) to the cluster `backend`.
const API_ROUTE: &str = r#"{ "ClusterId": "backend", "Match": { "Path": "/api/{**rest}" } }"#;

/// The route `api` to `backend`, whose one destination `d1` is `address`.
async fn seed(client: &mut Client, address: &str) {
    put(client, "Routes/api", API_ROUTE).await;
    put(
        client,
        "Clusters/backend/Destinations/d1",
        destination(address),
    )
    .await;
}

fn destination(address: &str) -> String {
    format!(r#"{{ "Address": "{address}" }}"#)
}

/// Two instances on one prefix serve the same routes; a cluster change reaches both
/// within 1 s; a destination registered under a 2 s lease appears in both and goes when
/// the lease expires.
#[tokio::test]
async fn two_instances_serve_one_prefix_and_follow_its_changes() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let mut client = etcd.client().await;
    put(&mut client, "Routes/api", API_ROUTE).await;
    // The cluster, its one destination `d1` at `address`, picked first of any.
    let cluster = |address: String| {
        format!(
            r#"{{ "LoadBalancingPolicy": "FirstAlphabetical", "Destinations": {{ "d1": {} }} }}"#,
            destination(&address)
        )
    };
    put(&mut client, "Clusters/backend", cluster(a.url())).await;
    let fleet = [Instance::start(&etcd).await, Instance::start(&etcd).await];
    for instance in &fleet {
        assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
        assert_eq!(instance.get("/other").await.0, 404);
        let status = instance.status().await;
        let source = &status["config_sources"][0];
        assert_eq!(source["source"], etcd.url());
        assert!(
            source["version"].as_str().unwrap().starts_with("revision "),
            "{source}"
        );
    }

    // A cluster change: both instances move to the new destination within 1 s.
    put(&mut client, "Clusters/backend", cluster(b.url())).await;
    let changed = Instant::now();
    for instance in &fleet {
        until(
            "the change to reach an instance",
            Duration::from_secs(1),
            || async { instance.get("/api/x").await.1 == "b" },
        )
        .await;
    }
    let elapsed = changed.elapsed();
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");

    // A destination registering itself under a 2 s lease (and not keeping it alive).
    let lease = client.lease_grant(2, None).await.unwrap().id();
    client
        .put(
            key("Clusters/backend/Destinations/a0"),
            destination(&c.url()),
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    for instance in &fleet {
        until(
            "the registered destination",
            Duration::from_secs(1),
            || async {
                instance
                    .destinations("backend")
                    .await
                    .contains(&"a0".to_string())
            },
        )
        .await;
        // First alphabetically: it takes the requests.
        assert_eq!(instance.get("/api/x").await, (200, "c".to_string()));
    }
    for instance in &fleet {
        until("the lease to expire", Duration::from_secs(10), || async {
            !instance
                .destinations("backend")
                .await
                .contains(&"a0".to_string())
        })
        .await;
        assert_eq!(instance.get("/api/x").await, (200, "b".to_string()));
    }
}

/// The fleet's log levels and host filter from etcd: `PREFIX/Logging` filters an
/// instance's log from its start (no file sets them) and a change re-filters it;
/// `PREFIX/AllowedHosts` answers 400 to requests for other hosts until it changes.
#[tokio::test]
async fn the_fleets_log_levels_and_allowed_hosts_come_from_etcd() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let a = named("a").await;
    let mut client = etcd.client().await;
    seed(&mut client, &a.url()).await;
    put(
        &mut client,
        "Logging",
        r#"{ "LogLevel": { "Default": "Information", "Yarp": "Debug" } }"#,
    )
    .await;
    put(&mut client, "AllowedHosts", r#""example.com""#).await;
    let mut instance = Instance::spawn(&etcd, &[], None).await;
    assert!(
        instance
            .early
            .iter()
            .any(|l| l.contains("log levels from the configuration") && l.contains("fuseway=debug")),
        "{:#?}",
        instance.early
    );
    let for_host = |host: &'static str| {
        let proxy = instance.proxy;
        async move {
            let r = within(
                "a request",
                h1_client()
                    .get(format!("http://{proxy}/api/x"))
                    .header("host", host)
                    .send(),
            )
            .await
            .unwrap();
            r.status().as_u16()
        }
    };
    assert_eq!(for_host("example.com").await, 200);
    assert_eq!(for_host("other.example").await, 400);
    put(&mut client, "AllowedHosts", r#""*""#).await;
    until("any host allowed", Duration::from_secs(1), || async {
        for_host("other.example").await == 200
    })
    .await;
    put(
        &mut client,
        "Logging",
        r#"{ "LogLevel": { "Default": "Information" } }"#,
    )
    .await;
    let line = instance
        .log_until("log levels from the configuration")
        .await;
    assert!(line.contains("filter=info"), "{line}");
}

/// An invalid route value keeps the old configuration serving and is reported with its
/// key (log, status page, metrics); removing it clears the error.
#[tokio::test]
async fn an_invalid_key_keeps_the_old_configuration_and_names_the_key() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let a = named("a").await;
    let mut client = etcd.client().await;
    seed(&mut client, &a.url()).await;
    let mut instance = Instance::start(&etcd).await;
    assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));

    // Not JSON at all: the provider refuses it.
    put(&mut client, "Routes/broken", "{ not json").await;
    let line = instance.log_until("configuration rejected").await;
    assert!(line.contains("/fuseway/Routes/broken"), "{line}");
    assert!(line.contains("invalid JSON"), "{line}");
    assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
    let error = instance
        .source_error()
        .await
        .expect("an error on the status page");
    assert!(error.contains("/fuseway/Routes/broken"), "{error}");

    // JSON, but a route template that does not compile: refused when the merged
    // configuration is built, and still named by its key.
    client.delete(key("Routes/broken"), None).await.unwrap();
    put(
        &mut client,
        "Routes/bad",
        r#"{ "ClusterId": "backend", "Match": { "Path": "/{oops" } }"#,
    )
    .await;
    let line = instance.log_until("/fuseway/Routes/bad").await;
    assert!(line.contains("Match.Path"), "{line}");
    assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
    let metrics = within(
        "metrics",
        h1_client()
            .get(format!("http://{}/metrics", instance.admin))
            .send(),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let series = format!("fuseway_config_source_error{{source=\"{}\"}} 1", etcd.url());
    assert!(metrics.contains(&series), "{metrics}");

    client.delete(key("Routes/bad"), None).await.unwrap();
    until("the error to clear", Duration::from_secs(5), || async {
        instance.source_error().await.is_none()
    })
    .await;
    assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
}

/// etcd stopped: both instances keep serving (and say etcd is unreachable); etcd back
/// with a change: both converge on it.
#[tokio::test]
async fn instances_keep_serving_while_etcd_is_down_and_converge_after() {
    let Some(mut etcd) = Etcd::start().await else {
        return;
    };
    let (a, b) = (named("a").await, named("b").await);
    let mut client = etcd.client().await;
    seed(&mut client, &a.url()).await;
    drop(client);
    let fleet = [Instance::start(&etcd).await, Instance::start(&etcd).await];
    for instance in &fleet {
        assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
    }

    etcd.stop().await;
    for instance in &fleet {
        until(
            "etcd unreachable on the status page",
            Duration::from_secs(10),
            || async {
                instance
                    .source_error()
                    .await
                    .is_some_and(|e| e.contains("unreachable"))
            },
        )
        .await;
        assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
    }

    etcd.run().await;
    let mut client = etcd.client().await;
    put(
        &mut client,
        "Clusters/backend/Destinations/d1",
        destination(&b.url()),
    )
    .await;
    for instance in &fleet {
        // The provider retries with backoff (at most 5 s between attempts). The new
        // configuration is swapped in just before the status page's sources are
        // updated, so a request may see it a moment before the error clears.
        until(
            "the instance to converge",
            Duration::from_secs(10),
            || async { instance.get("/api/x").await.1 == "b" },
        )
        .await;
        until(
            "the unreachable error to clear",
            Duration::from_secs(2),
            || async { instance.source_error().await.is_none() },
        )
        .await;
    }
}

/// A file and etcd together: their routes and clusters are merged (an etcd route to a
/// cluster of the file works), and an id both define is refused, naming both sources.
#[tokio::test]
async fn a_file_and_etcd_are_merged_and_an_id_in_both_is_refused() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let a = named("a").await;
    let dir = TempDir::new("etcd-file");
    let file = dir.write(
        "proxy.json",
        &format!(
            r#"{{ "Routes": {{ "local": {{ "ClusterId": "backend", "Match": {{ "Path": "/local" }} }} }},
                 "Clusters": {{ "backend": {{ "Destinations": {{ "d1": {} }} }} }} }}"#,
            destination(&a.url())
        ),
    );
    let mut client = etcd.client().await;
    put(&mut client, "Routes/api", API_ROUTE).await;
    let mut instance = Instance::start_with(&etcd, &[&file]).await;
    assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));
    assert_eq!(instance.get("/local").await, (200, "a".to_string()));
    let status = instance.status().await;
    assert_eq!(
        status["config_sources"].as_array().unwrap().len(),
        2,
        "{status}"
    );

    put(
        &mut client,
        "Routes/local",
        r#"{ "ClusterId": "backend", "Match": { "Path": "/elsewhere" } }"#,
    )
    .await;
    let line = instance.log_until("configuration rejected").await;
    assert!(line.contains("route `local` is defined by both"), "{line}");
    assert!(line.contains(&file.display().to_string()), "{line}");
    assert!(line.contains(&etcd.url()), "{line}");
    assert_eq!(instance.get("/local").await, (200, "a".to_string()));
    assert_eq!(instance.get("/elsewhere").await.0, 404);
}

/// etcd over TLS (its certificate signed by a CA given with `--etcd-ca`) and with
/// authentication on (`--etcd-user`, the password from `FUSEWAY_ETCD_PASSWORD`); a
/// wrong password never gets a configuration, and the start says why.
#[tokio::test]
async fn tls_and_authentication() {
    let Some(mut etcd) = Etcd::start_with(true).await else {
        return;
    };
    let a = named("a").await;
    let mut client = etcd.client().await;
    seed(&mut client, &a.url()).await;
    // Authentication on: a root user with the root role.
    client.user_add("root", "s3cret", None).await.unwrap();
    let _ = client.role_add("root").await;
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();
    etcd.user = Some(("root".into(), "s3cret".into()));

    let instance = Instance::start(&etcd).await;
    assert_eq!(instance.get("/api/x").await, (200, "a".to_string()));

    let stderr = gives_up(
        "fuseway with a wrong password",
        fuseway(&etcd).env("FUSEWAY_ETCD_PASSWORD", "wrong"),
        &etcd,
    )
    .await;
    assert!(stderr.contains("authentication failed"), "{stderr}");

    // With another CA, the server's certificate is not trusted.
    let other = {
        let ca = common::ca_params().self_signed(&rcgen::KeyPair::generate().unwrap());
        etcd.dir.write("other-ca.pem", &ca.unwrap().pem())
    };
    gives_up(
        "fuseway trusting another CA",
        Command::new(env!("CARGO_BIN_EXE_fuseway"))
            .arg("--etcd-ca")
            .arg(&other)
            .args(["--etcd-user", "root"])
            .env("FUSEWAY_ETCD_PASSWORD", "s3cret"),
        &etcd,
    )
    .await;
}

/// Run `command` on `etcd` with `--config-timeout 1s`: it must give up (exit 1, the
/// source not read in time); its log.
async fn gives_up(what: &str, command: &mut Command, etcd: &Etcd) -> String {
    let out = within(
        &format!("{what} to give up"),
        command
            .args(["--config", &etcd.url(), "--config-timeout", "1s"])
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = common::strip_ansi(&String::from_utf8_lossy(&out.stderr));
    assert!(stderr.contains("not read within"), "{stderr}");
    stderr
}
