//! The server: listeners speaking HTTP/1.1 and h2c on one port, graceful shutdown.

mod service;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use service::Served;
pub use service::{IntoResponse, ProxyService};

use crate::body::ProxyBody;
use crate::request::ConnectionInfo;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Listens on one or more sockets and serves a hyper service on each connection
/// (HTTP/1.1 and HTTP/2 cleartext detected per connection).
///
/// ```no_run
/// # use fuseway::server::Server;
/// # async fn run<S>(service: S) -> std::io::Result<()>
/// # where S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<fuseway::body::ProxyBody>> + Clone + Send + Sync + 'static,
/// #       S::Future: Send + 'static, S::Error: Into<Box<dyn std::error::Error + Send + Sync>> {
/// let server = Server::bind(&["127.0.0.1:0".parse().unwrap()]).await?;
/// println!("listening on {:?}", server.local_addrs());
/// server.serve(service, async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
#[derive(Debug)]
pub struct Server {
    listeners: Vec<TcpListener>,
    options: ServerOptions,
}

/// Limits of the listening side, applied to every connection.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Most client connections open at once across all listeners; further accepts wait
    /// until one closes (default 10,000).
    pub max_connections: usize,
    /// Most concurrent HTTP/2 streams per connection (default 100).
    pub max_concurrent_streams: u32,
    /// Time allowed to receive a request's headers on HTTP/1.1 before the connection is
    /// closed (slowloris; default 30 s).
    pub header_read_timeout: Duration,
    /// Largest request head on HTTP/1.1 (bytes); larger ones get 431 (default 64 KiB).
    pub max_header_size: usize,
    /// Largest header list on HTTP/2 (bytes; default 64 KiB).
    pub max_header_list_size: u32,
    /// How long in-flight requests may take after shutdown starts (default 30 s).
    pub graceful_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: 10_000,
            max_concurrent_streams: 100,
            header_read_timeout: Duration::from_secs(30),
            max_header_size: 64 * 1024,
            max_header_list_size: 64 * 1024,
            graceful_timeout: Duration::from_secs(30),
        }
    }
}

impl Server {
    /// Bind every address.
    pub async fn bind(addrs: &[SocketAddr]) -> io::Result<Server> {
        let mut listeners = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            listeners.push(listener);
        }
        Ok(Server::from_listeners(listeners))
    }

    /// Serve on already bound listeners.
    pub fn from_listeners(listeners: Vec<TcpListener>) -> Server {
        Server {
            listeners,
            options: ServerOptions::default(),
        }
    }

    /// How long in-flight requests may take to finish after shutdown starts (default 30 s).
    pub fn graceful_timeout(mut self, grace: Duration) -> Server {
        self.options.graceful_timeout = grace;
        self
    }

    /// Replace all limits.
    pub fn options(mut self, options: ServerOptions) -> Server {
        self.options = options;
        self
    }

    /// The bound addresses.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serve `service` until `shutdown` completes; then stop accepting, let in-flight
    /// requests finish (bounded by the graceful timeout) and return.
    pub async fn serve<S>(self, service: S, shutdown: impl Future<Output = ()>) -> io::Result<()>
    where
        S: hyper::service::Service<Request<Incoming>, Response = Response<ProxyBody>>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let connections = Arc::new(Semaphore::new(self.options.max_connections));
        let options = Arc::new(self.options);
        for listener in self.listeners {
            tasks.spawn(accept_loop(
                listener,
                service.clone(),
                stop_rx.clone(),
                options.clone(),
                connections.clone(),
            ));
        }
        shutdown.await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// Wait until the first bytes tell HTTP/1 from HTTP/2 (as hyper-util's detection
/// does: the HTTP/2 preface or anything else), or the client closes.
async fn protocol_known(stream: &tokio::net::TcpStream) -> io::Result<()> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 || n == PREFACE.len() || buf[..n] != PREFACE[..n] {
            return Ok(());
        }
        // Part of the preface: peeking does not consume it, so wait before looking again.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn accept_loop<S>(
    listener: TcpListener,
    service: S,
    mut stop: watch::Receiver<bool>,
    options: Arc<ServerOptions>,
    connections: Arc<Semaphore>,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<ProxyBody>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(options.max_header_size.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams)
        .max_header_list_size(options.max_header_list_size);
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    loop {
        // Wait for a free connection slot before accepting: excess clients queue in the
        // kernel's backlog instead of consuming memory here.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = Served {
            inner: service.clone(),
            info: ConnectionInfo {
                remote,
                local,
                tls: false,
            },
        };
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let mut stop = stop.clone();
        let timeout = options.header_read_timeout;
        tokio::spawn(async move {
            // hyper-util tells HTTP/1 from HTTP/2 by reading the first bytes, without a
            // time limit: a client sending nothing, or part of the HTTP/2 preface, would
            // hold its slot forever. It gets the header read timeout.
            let known = tokio::select! {
                known = tokio::time::timeout(timeout, protocol_known(&stream)) => known,
                _ = stop.changed() => return,
            };
            if !matches!(known, Ok(Ok(()))) {
                tracing::debug!(%remote, "no request within the header read timeout; closing");
                return;
            }
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(options.graceful_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("graceful shutdown timed out; closing remaining connections");
    }
}
