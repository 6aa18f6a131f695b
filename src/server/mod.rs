//! The server: listeners speaking HTTP/1.1 and h2c on one port, graceful shutdown.

mod service;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
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
    grace: Duration,
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
            grace: Duration::from_secs(30),
        }
    }

    /// How long in-flight requests may take to finish after shutdown starts (default 30 s).
    pub fn graceful_timeout(mut self, grace: Duration) -> Server {
        self.grace = grace;
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
        for listener in self.listeners {
            tasks.spawn(accept_loop(
                listener,
                service.clone(),
                stop_rx.clone(),
                self.grace,
            ));
        }
        shutdown.await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

async fn accept_loop<S>(
    listener: TcpListener,
    service: S,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
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
        .header_read_timeout(Duration::from_secs(30));
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    loop {
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
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), svc)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("graceful shutdown timed out; closing remaining connections");
    }
}
