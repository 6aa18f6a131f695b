//! Helpers of the reliability tests (`faults`, `hostile`, `bounds`, `soak`): a proxy
//! started with explicit [`ServerOptions`], raw TCP backends, log capture, and
//! process measurements (RSS, open file descriptors).
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fuseway::pipeline;
use fuseway::server::{ServeService, ServerOptions};
use fuseway::state::ProxyState;
use fuseway::testing::SharedBuffer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::common::{within, LIMIT};

// ===== a proxy with explicit server options =====

/// A running proxy (like `common::Proxy`, but started with chosen [`ServerOptions`]
/// or service).
pub struct TestProxy {
    pub addr: SocketAddr,
    pub state: Arc<ProxyState>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

/// Options for tests: defaults, a short graceful timeout.
pub fn options() -> ServerOptions {
    ServerOptions::default().graceful_timeout(Duration::from_secs(2))
}

/// Start the fused default pipeline with this JSON config and these options (its
/// forwarder's HTTP/1.1 client on the options' engine too).
pub async fn start(config_json: &str, options: ServerOptions) -> TestProxy {
    let state = state(config_json);
    let service =
        pipeline::FusedDefault::from_state_with_engine(state.clone(), options.http1_engine);
    start_service(state, service, options).await
}

/// A proxy state from a JSON config.
pub fn state(config_json: &str) -> Arc<ProxyState> {
    let config = fuseway::config::parse(config_json, fuseway::config::Format::Json)
        .unwrap_or_else(|e| panic!("invalid test config: {e}\n{config_json}"));
    Arc::new(ProxyState::new(config).expect("valid state"))
}

/// Serve `service` (built over `state`) on 127.0.0.1:0 with `options`.
pub async fn start_service<S: ServeService>(
    state: Arc<ProxyState>,
    service: S,
    options: ServerOptions,
) -> TestProxy {
    let (addr, stop_tx, done) = crate::common::serve_with(service, options).await;
    TestProxy {
        addr,
        state,
        stop: Some(stop_tx),
        done: Some(done),
    }
}

impl TestProxy {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Concurrent requests of destination `dest` of `cluster`, and of the cluster.
    pub fn concurrency(&self, cluster: &str, dest: &str) -> (usize, usize) {
        let snap = self.state.snapshot();
        let c = snap.cluster(cluster).expect("cluster");
        let d = c.destination(dest).expect("destination").1;
        (
            d.state().concurrent_requests(),
            c.state().concurrent_requests(),
        )
    }

    /// Passive health window of `dest`: (failed, total).
    pub fn passive(&self, cluster: &str, dest: &str) -> (u64, u64) {
        let snap = self.state.snapshot();
        let c = snap.cluster(cluster).expect("cluster");
        let d = c.destination(dest).expect("destination").1;
        d.state().health().passive_counts()
    }

    /// Wait until the destination's and the cluster's counters are back to 0.
    pub async fn wait_idle(&self, cluster: &str, dest: &str) {
        let mut last = (0, 0);
        let idle = tokio::time::timeout(LIMIT, async {
            loop {
                last = self.concurrency(cluster, dest);
                if last == (0, 0) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            idle.is_ok(),
            "{cluster}/{dest}: counters stuck at {last:?} (destination, cluster)"
        );
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

// ===== raw TCP backends =====

/// A raw TCP backend: every accepted connection is handed to `handler`.
pub struct RawBackend {
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
    _stop: oneshot::Sender<()>,
}

impl RawBackend {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Start a raw backend on 127.0.0.1:0.
pub async fn raw_backend<F, Fut>(handler: F) -> RawBackend
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                a = listener.accept() => match a { Ok((s, _)) => s, Err(_) => continue },
                _ = &mut stop_rx => return,
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handler(stream));
        }
    });
    RawBackend {
        addr,
        accepted,
        _stop: stop_tx,
    }
}

/// Read one request head (up to the blank line) from `stream`; `None` on EOF first.
pub async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            buf.truncate(end + 4);
            return Some(String::from_utf8_lossy(&buf).into_owned());
        }
        match stream.read(&mut byte).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Send one keep-alive `GET` of `path` on `s` and read its (small, Content-Length)
/// response.
pub async fn request_on(s: &mut TcpStream, path: &str) -> String {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_response(s).await.expect("a response, not the close")
}

/// Read one response (sized by `Content-Length`, or none) from `s`: `None` if the
/// connection closes (or fails) before it is whole.
pub async fn read_response(s: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                return Some(text.into_owned());
            }
        }
    }
}

/// Send raw bytes on a fresh connection and read until the proxy closes it (bounded).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    within("a raw exchange", async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
}

/// The status code of a raw HTTP/1.1 response, `None` if there is none.
pub fn status_of(response: &str) -> Option<u16> {
    response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
}

// ===== log capture =====

/// Log lines written by code running on this thread while the guard of
/// [`Logs::capture`] lives (`#[tokio::test]` runs the proxy, backends and client on
/// the test's thread).
#[derive(Clone, Default)]
pub struct Logs(SharedBuffer);

impl Logs {
    /// Capture DEBUG and above on this thread until the guard is dropped.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let sink = logs.0.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Capture WARN and above from every thread for the rest of the process (for
    /// multi-threaded tests; at most one per test binary).
    pub fn capture_global() -> Logs {
        let logs = Logs::default();
        let sink = logs.0.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        logs
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        self.0.text()
    }

    /// Forget what was captured so far.
    pub fn clear(&self) {
        self.0.clear();
    }

    /// The first line containing every one of `parts`.
    pub fn line_with(&self, parts: &[&str]) -> Option<String> {
        self.text()
            .lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned)
    }

    /// Wait (bounded) for a line containing every one of `parts`, and return it.
    pub async fn wait_line(&self, parts: &[&str]) -> String {
        let found = tokio::time::timeout(LIMIT, async {
            loop {
                if let Some(l) = self.line_with(parts) {
                    return l;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        match found {
            Ok(l) => l,
            Err(_) => panic!("no log line with {parts:?}; captured:\n{}", self.text()),
        }
    }
}

// ===== process measurements =====

/// Resident set size of this process, in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Raise the soft limit on open files to at least `wanted` (up to the hard limit);
/// returns the soft limit in force afterwards.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted.min(lim.rlim_max),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
        lim.rlim_cur
    }
}
