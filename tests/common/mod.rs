//! Shared helpers for integration tests: real hyper backends and the real proxy on
//! 127.0.0.1 with port 0, and real clients.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fuseway::config::{parse, Format};
use fuseway::pipeline;
use fuseway::server::{ProxyService, Server};
use fuseway::state::ProxyState;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type TestBody = BoxBody<Bytes, BoxError>;

/// Every wait in a test is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Await `f` or fail the test after [`LIMIT`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

pub fn full(b: impl Into<Bytes>) -> TestBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

/// A running backend; dropped = stops accepting.
pub struct Backend {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Backend {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Start a backend (HTTP/1.1 and h2c) whose requests are answered by `handler`.
pub async fn backend<F, Fut>(handler: F) -> Backend
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<TestBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                _ = &mut stop_rx => return,
            };
            let handler = handler.clone();
            let svc = service_fn(move |req| {
                let fut = handler(req);
                async move { Ok::<_, Infallible>(fut.await) }
            });
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Backend {
        addr,
        _stop: stop_tx,
    }
}

/// An address that refuses connections for as long as this lives: a socket bound to a
/// free port that never listens. Holding the port, rather than binding a listener and
/// dropping it, keeps the kernel from giving it to a socket bound later in the same
/// test binary (another test's backend or proxy), which would bring the "dead" address
/// to life mid-test.
pub struct Refused {
    pub addr: SocketAddr,
    _bound: tokio::net::TcpSocket,
}

impl Refused {
    pub fn bind() -> Refused {
        let bound = tokio::net::TcpSocket::new_v4().unwrap();
        bound.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Refused {
            addr: bound.local_addr().unwrap(),
            _bound: bound,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A backend answering `200` with `"{method} {path-and-query}"`, echoing the request
/// headers as `x-echo-<name>` response headers.
pub async fn echo_backend() -> Backend {
    backend(|req: Request<Incoming>| async move {
        let mut resp = Response::builder();
        for (name, value) in req.headers() {
            resp = resp.header(format!("x-echo-{name}"), value);
        }
        resp = resp.header("x-echo-version", format!("{:?}", req.version()));
        let body = format!(
            "{} {}",
            req.method(),
            req.uri().path_and_query().map_or("", |p| p.as_str())
        );
        resp.body(full(body)).unwrap()
    })
    .await
}

/// A running proxy.
pub struct Proxy {
    pub addr: SocketAddr,
    pub state: Arc<ProxyState>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Concurrent requests of destination `dest` in cluster `cluster`.
    pub fn concurrency(&self, cluster: &str, dest: &str) -> usize {
        let snap = self.state.snapshot();
        let c = snap.cluster(cluster).expect("cluster");
        c.destination(dest)
            .expect("destination")
            .1
            .state()
            .concurrent_requests()
    }

    /// Wait until destination `dest`'s counter is back to 0 (bodies are released when
    /// the server finishes writing them, just after the client saw the end).
    pub async fn wait_idle(&self, cluster: &str, dest: &str) {
        within("the concurrency counter to return to 0", async {
            loop {
                if self.concurrency(cluster, dest) == 0
                    && self
                        .state
                        .snapshot()
                        .cluster(cluster)
                        .unwrap()
                        .state()
                        .concurrent_requests()
                        == 0
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
    }

    /// Stop gracefully and wait for the server to return.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            within("the proxy to shut down", d).await.unwrap();
        }
    }
}

/// Which form of the default pipeline a test proxy serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `default_pipeline!`: one fused service (what the binary serves).
    Fused,
    /// The same stages as separate tower layers.
    Layered,
}

/// A path as a JSON string, for a config written in a test.
pub fn json_path(p: &std::path::Path) -> String {
    serde_json::to_string(p.to_str().unwrap()).unwrap()
}

/// The default pipeline in `form` with its listeners bound from the config's `Listen`,
/// TLS ones among them (as the binary does); `addr` is the first listener's.
pub async fn tls_proxy(config_json: &str, form: Form) -> Proxy {
    // Either shape (a Kestrel section's endpoints too), validated.
    let config = parse(config_json, Format::Json).expect("valid config");
    let server = Server::bind_config(&config.listen)
        .await
        .unwrap()
        .options(test_options());
    let state = Arc::new(ProxyState::new(config).unwrap());
    proxy_served(server, state, form)
}

/// Start the fused default pipeline on 127.0.0.1:0 with this JSON config.
pub async fn proxy(config_json: &str) -> Proxy {
    proxy_with(config_json, Form::Fused).await
}

/// Start the default pipeline in `form` on 127.0.0.1:0 with this JSON config.
pub async fn proxy_with(config_json: &str, form: Form) -> Proxy {
    let config = parse(config_json, Format::Json).expect("valid config");
    let state = Arc::new(ProxyState::new(config).expect("valid state"));
    proxy_on(state, form).await
}

/// [`proxy_with`], the server's options taking the config's `Limits` (Kestrel's), as
/// the binary's do.
pub async fn proxy_with_limits(config_json: &str, form: Form) -> Proxy {
    let config = parse(config_json, Format::Json).expect("valid config");
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap()
        .options(test_options().limits(&config.limits));
    let state = Arc::new(ProxyState::new(config).expect("valid state"));
    proxy_served(server, state, form)
}

/// Start the default pipeline in `form` on 127.0.0.1:0 serving `state`.
pub async fn proxy_on(state: Arc<ProxyState>, form: Form) -> Proxy {
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap()
        .options(test_options());
    proxy_served(server, state, form)
}

/// The default pipeline in `form` serving `state` on `server`'s listeners.
fn proxy_served(server: Server, state: Arc<ProxyState>, form: Form) -> Proxy {
    let (addr, stop, done) = match form {
        Form::Fused => serve_on(server, pipeline::FusedDefault::from_state(state.clone())),
        Form::Layered => serve_on(
            server,
            ProxyService::new(pipeline::layered_default(state.clone())),
        ),
    };
    Proxy {
        addr,
        state,
        stop: Some(stop),
        done: Some(done),
    }
}

/// The server options of the tests' proxies: a 5 s graceful timeout.
fn test_options() -> fuseway::server::ServerOptions {
    fuseway::server::ServerOptions::default().graceful_timeout(Duration::from_secs(5))
}

/// Serve `service` with fuseway's server on 127.0.0.1:0 (5 s graceful timeout) until
/// the returned sender fires or is dropped; the task ends when the server has stopped.
pub async fn serve<S: fuseway::server::ServeService>(
    service: S,
) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    serve_with(service, test_options()).await
}

/// [`serve`] with these server options.
pub async fn serve_with<S: fuseway::server::ServeService>(
    service: S,
    options: fuseway::server::ServerOptions,
) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap()
        .options(options);
    serve_on(server, service)
}

/// Serve `service` on `server` (its first listener's address) until the returned
/// sender fires or is dropped; the task ends when the server has stopped.
fn serve_on<S: fuseway::server::ServeService>(
    server: Server,
    service: S,
) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let addr = server.local_addrs()[0];
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(async move {
        server
            .serve(service, async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
    });
    (addr, stop, done)
}

/// A config with one catch-all route to one cluster of these destinations.
pub fn simple_config(destinations: &[(&str, &str)], cluster_extra: &str) -> String {
    let dests: Vec<String> = destinations
        .iter()
        .map(|(id, addr)| format!(r#""{id}": {{ "Address": "{addr}" }}"#))
        .collect();
    format!(
        r#"{{
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ {cluster_extra} "Destinations": {{ {} }} }} }}
}}"#,
        dests.join(", ")
    )
}

/// An HTTP/1.1 client (no pooling surprises: fresh connections per client).
pub fn h1_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http1_only()
        .timeout(LIMIT)
        .no_proxy()
        .build()
        .unwrap()
}

/// An h2c (prior knowledge) client.
pub fn h2c_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(LIMIT)
        .no_proxy()
        .build()
        .unwrap()
}

/// The address of a `fuseway` binary's `fuseway listening addr=…` log line, if `line`
/// (as written, colours and all) is one. Tests start the binary on port 0 and read its
/// address from here: a port picked beforehand (bind, note, drop) could be given to
/// another socket before the binary binds it.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    // With `--log-format json`: `{"message":"fuseway listening","addr":"..."}`.
    let addr: SocketAddr = if let Ok(record) = serde_json::from_str::<serde_json::Value>(line) {
        if record["message"] != "fuseway listening" {
            return None;
        }
        record["addr"].as_str()?.parse().ok()?
    } else {
        let line = strip_ansi(line);
        if !line.contains("fuseway listening") {
            return None;
        }
        line.split_whitespace()
            .find_map(|word| word.strip_prefix("addr="))
            .and_then(|addr| addr.parse().ok())?
    };
    // fuseway's listeners take `SO_REUSEPORT`: two tests on the default port would share
    // it, each getting some of the other's connections.
    assert_ne!(
        addr.port(),
        8080,
        "a test's fuseway must listen on port 0 (`--listen 127.0.0.1:0`), not the default"
    );
    Some(addr)
}

/// Wait for the `fuseway` binary `child`'s first listening line on its piped stderr,
/// then keep draining its log so that it never blocks on a full pipe: the address.
pub async fn listening(child: &mut tokio::process::Child) -> SocketAddr {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut log = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let addr = within("the listening log line", async {
        while let Some(line) = log.next_line().await.unwrap() {
            if let Some(addr) = listening_addr(&line) {
                return addr;
            }
        }
        panic!("fuseway exited before listening");
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
    addr
}

/// A `fuseway` binary started with `--admin`, its log (piped stderr) read line by line.
pub struct Logged {
    /// Its proxy listener's address.
    pub proxy: SocketAddr,
    /// Its admin listener's address.
    pub admin: SocketAddr,
    /// The log lines up to the listening ones, as written.
    pub early: Vec<String>,
    /// The lines after them.
    pub log: tokio::sync::mpsc::UnboundedReceiver<String>,
}

/// Read `child`'s log until its proxy and admin listening lines.
pub async fn proxy_and_admin(child: &mut tokio::process::Child) -> Logged {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let (tx, mut log) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    let mut early = Vec::new();
    let (proxy, admin) = within("the proxy and admin listening lines", async {
        let (mut proxy, mut admin) = (None, None);
        while let Some(line) = log.recv().await {
            proxy = proxy.or_else(|| listening_addr(&line));
            if line.contains("fuseway admin listening") {
                admin = line
                    .split_whitespace()
                    .find_map(|word| word.strip_prefix("addr="))
                    .and_then(|addr| addr.parse().ok());
            }
            early.push(line);
            if let (Some(proxy), Some(admin)) = (proxy, admin) {
                return (proxy, admin);
            }
        }
        panic!("fuseway exited before listening: {early:?}");
    })
    .await;
    Logged {
        proxy,
        admin,
        early,
        log,
    }
}

/// `s` without its terminal escape sequences (`ESC [ ... m` colours).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The next HTTP/2 frame from `stream`: its type, flags, stream and payload.
pub async fn h2_frame(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).await?;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    Ok((head[3], head[4], id, payload))
}

/// A request body-less h2c (prior knowledge) client connection to `addr`, driven by a
/// task of its own: what sends on it, and the task (it ends when the connection does).
pub async fn h2c_connection(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

/// A port for an outside program (etcd, nginx, HAProxy) that cannot be started on
/// port 0 and tell which it took. The port stays bound, without listening and with
/// `SO_REUSEADDR`, until the test binary ends: the program (which sets `SO_REUSEADDR`
/// on its listeners, as nginx, HAProxy, Go, Node and Python do) can listen on it, and
/// no other socket of this machine is given it — not a later `free_port`, not a
/// listener on port 0, not a connection's own end. (A port merely free when it is
/// picked comes back from the next bind to port 0; two nginx in one test binary were
/// once told the same port, and a test reached the wrong one.)
pub fn free_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<socket2::Socket>> = std::sync::Mutex::new(Vec::new());
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    HELD.lock().unwrap().push(socket);
    port
}

/// A fresh directory under the system temp dir (`fuseway-WHAT-PID-N`), removed on drop.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fuseway-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Write `contents` to the file `name` in it: its path.
    pub fn write(&self, name: &str, contents: &str) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `fuseway` binary on `config` (written to a directory of its own, kept as long as
/// the binary runs), listening on 127.0.0.1:0 with one worker, stdout and stderr piped,
/// `RUST_LOG=info`, `configure`d further (arguments, environment): the child, its
/// address and the directory.
pub async fn fuseway_binary(
    config: &str,
    configure: impl FnOnce(&mut tokio::process::Command),
) -> (tokio::process::Child, SocketAddr, TempDir) {
    let dir = TempDir::new("binary");
    let file = dir.write("proxy.json", config);
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_fuseway"));
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(&file)
        .args(["--listen", "127.0.0.1:0", "--workers", "1"])
        .kill_on_drop(true);
    configure(&mut command);
    let mut child = command.spawn().unwrap();
    let addr = listening(&mut child).await;
    (child, addr, dir)
}

/// SIGTERM to the binary `child`; everything it wrote to stdout (the access log) once it
/// has exited, which it must do successfully.
pub async fn stop_for_stdout(mut child: tokio::process::Child) -> String {
    use tokio::io::AsyncReadExt;
    let pid = child.id().unwrap() as libc::pid_t;
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut out = String::new();
    let mut stdout = child.stdout.take().expect("piped stdout");
    within("stdout to the end", stdout.read_to_string(&mut out))
        .await
        .unwrap();
    let status = within("fuseway to exit", child.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
    out
}

/// The parameters of a certificate authority (rcgen).
pub fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
}

/// A CA of the test's own and a certificate it signs for 127.0.0.1, written to `dir` as
/// `ca.pem`, `server.pem` and `server.key`: the CA's file.
pub fn localhost_certificates(dir: &TempDir) -> std::path::PathBuf {
    use rcgen::{CertificateParams, CertifiedIssuer, KeyPair};
    let ca = CertifiedIssuer::self_signed(ca_params(), KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    dir.write("server.pem", &server.pem());
    dir.write("server.key", &key.serialize_pem());
    dir.write("ca.pem", &ca.pem())
}

/// A tokio-tungstenite echo server: echoes text and binary messages, answers pings
/// (tungstenite does) and the close handshake. Reports the request path of each
/// handshake on the returned channel.
pub async fn ws_echo() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                #[allow(clippy::result_large_err)]
                let callback =
                    |req: &tokio_tungstenite::tungstenite::handshake::server::Request, resp| {
                        let _ = tx.send(req.uri().to_string());
                        Ok(resp)
                    };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// An outside program a test needs: the first of `names` on `PATH` or in the
/// directories Debian puts daemons in (a user's `PATH` may lack them), or `None` after
/// saying on stderr that `what` was not checked and which Debian package brings it
/// (`.ci/run` installs each).
pub fn installed(names: &[&str], package: &str, what: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<std::path::PathBuf> = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin"].map(Into::into))
        .collect();
    let found = names
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!(
            "SKIPPED: {} is not installed (Debian: apt-get install {package}); {what} was not \
             checked",
            names[0]
        );
    }
    found
}

/// Chromium, or `None` after saying that the test checking `what` is skipped.
pub fn chromium(what: &str) -> Option<std::path::PathBuf> {
    installed(
        &["chromium", "chromium-browser", "google-chrome"],
        "chromium",
        what,
    )
}

/// Headless chromium with `profile` as its profile, quiet (no first-run, background
/// or update traffic, no QUIC): the command, for a test's own arguments and URL.
pub fn chromium_command(chromium: &std::path::Path, profile: &TempDir) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()));
    command
}

/// Run headless chromium on `url` with `args`: its standard output.
pub async fn chromium_run(chromium: &std::path::Path, args: &[String], url: &str) -> Vec<u8> {
    let profile = TempDir::new("chromium");
    let run = chromium_command(chromium, &profile)
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("chromium finished within 90 s")
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    out.stdout
}

/// One of this machine's IPv4 TCP sockets, as `/proc/net/tcp` lists it.
#[derive(Debug)]
pub struct TcpSocket {
    pub local: u16,
    pub remote: u16,
    /// `01` established, `06` `TIME_WAIT` ...
    pub state: String,
    /// A process holds it: one its process has closed, left to the kernel to finish
    /// (orphaned), has no inode.
    pub held: bool,
}

/// This machine's IPv4 TCP sockets (`/proc/net/tcp`).
pub fn tcp_sockets() -> Vec<TcpSocket> {
    let port = |field: &str| u16::from_str_radix(field.rsplit(':').next().unwrap(), 16).unwrap();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            TcpSocket {
                local: port(fields[1]),
                remote: port(fields[2]),
                state: fields[3].to_owned(),
                held: fields[9] != "0",
            }
        })
        .collect()
}
