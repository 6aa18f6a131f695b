//! The server: listeners speaking HTTP/1.1 and HTTP/2 (h2c in clear, ALPN over TLS),
//! each on fuseway's own engine by default or on hyper's ([`Http1Engine`],
//! [`Http2Engine`]), graceful shutdown.

mod accept;
mod balance;
mod chunked;
pub(crate) mod counts;
mod drain;
mod idle;
mod linger;
pub(crate) mod native;
pub(crate) mod native_h2;
mod options;
mod pace;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod replay;
mod service;
mod streams;
pub(crate) mod tls;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::{Either, FutureExt};
use http::{Request, Response};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use accept::{accept_loop, bind, worker_listener};
use balance::Balance;
pub(crate) use balance::Place;
pub use options::{Http1Engine, Http2Engine, MinDataRate, ServerOptions};
use service::{FieldLimits, Served};
pub use service::{IntoResponse, ProxyService};
pub use tls::{
    tls_config_from_encrypted_pem, tls_config_from_files, tls_config_from_pem,
    tls_config_from_pkcs12, TlsError, TlsFiles, TlsPart,
};
use tls::{Terminator, TlsSetup};

use crate::body::{Incoming, ProxyBody};
use crate::config::{ListenConfig, ListenProtocols};
use crate::request::{ClientCertificate, ConnectionInfo};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What [`Server`] serves: a hyper service taking requests with an [`Incoming`] body
/// (whichever engine read them) and answering with [`ProxyBody`] responses,
/// shareable across connections and threads (every pipeline, fused or layered through
/// [`ProxyService`], is one).
pub trait ServeService:
    hyper::service::Service<
        Request<Incoming>,
        Response = Response<ProxyBody>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> ServeService for S where
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<ProxyBody>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Listens on one or more sockets and serves a hyper service on each connection
/// (HTTP/1.1 and HTTP/2 detected per connection); a listener may terminate TLS
/// (rustls, ALPN `h2` and `http/1.1`), in which case requests carry
/// [`ConnectionInfo`] with `tls: true`.
///
/// ```no_run
/// # use fuseway::server::{Server, ServeService};
/// # async fn run<S: ServeService>(service: S) -> std::io::Result<()> {
/// let server = Server::bind(&["127.0.0.1:0".parse().unwrap()]).await?;
/// println!("listening on {:?}", server.local_addrs());
/// server.serve(service, async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
#[derive(Debug)]
pub struct Server {
    listeners: Vec<Listener>,
    options: ServerOptions,
}

struct Listener {
    tcp: TcpListener,
    /// The TLS configurations new connections are accepted with; swapped by
    /// [`TlsReloader::reload`].
    tls: Option<Arc<ArcSwap<Terminator>>>,
    /// What `tls` was read from (listeners bound from a configuration).
    tls_setup: Option<TlsSetup>,
    /// What it serves.
    protocols: ListenProtocols,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.tcp.local_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Re-reads the certificate and key files of a server's TLS listeners (see
/// [`Server::tls_reloader`]). A pair that cannot be read keeps its listener on the
/// certificate it had.
#[derive(Debug, Clone)]
pub struct TlsReloader {
    listeners: Vec<(TlsSetup, Arc<ArcSwap<Terminator>>)>,
}

impl TlsReloader {
    /// Read every listener's files again; new connections use what was read. Returns
    /// how many listeners were reloaded, or the errors (each naming its files); the
    /// listeners that failed keep their certificates.
    pub fn reload(&self) -> Result<usize, Vec<String>> {
        let mut errors = Vec::new();
        for (setup, config) in &self.listeners {
            match setup.load() {
                Ok(new) => config.store(Arc::new(new)),
                Err(e) => errors.push(format!("{setup}: {e}")),
            }
        }
        if errors.is_empty() {
            Ok(self.listeners.len())
        } else {
            Err(errors)
        }
    }
}

impl Server {
    /// Bind every address (plain TCP).
    pub async fn bind(addrs: &[SocketAddr]) -> io::Result<Server> {
        let mut listeners = Vec::with_capacity(addrs.len());
        for addr in addrs {
            listeners.push(bind(addr).await?);
        }
        Ok(Server::from_listeners(listeners))
    }

    /// Bind a configuration's `Listen` entries: TLS where an entry names a
    /// `Certificate` or `Sni` entries (their files read now), plain TCP otherwise.
    pub async fn bind_config(listen: &[ListenConfig]) -> io::Result<Server> {
        let mut server = Server::from_listeners(Vec::new());
        for (i, entry) in listen.iter().enumerate() {
            let addr: SocketAddr = entry.address().parse().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("Listen[{i}]: `{}`: {e}", entry.address()),
                )
            })?;
            let (tls_setup, tls) = listener_tls(entry, i)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?
                .unzip();
            let tcp = bind(&addr).await?;
            server.listeners.push(Listener {
                tcp,
                tls: tls.map(|t| Arc::new(ArcSwap::from_pointee(t))),
                tls_setup,
                protocols: entry.protocols(),
            });
        }
        Ok(server)
    }

    /// Check that the listeners of `listen` can be set up short of binding them: the
    /// certificate and key files of those that terminate TLS load and match (errors at
    /// `Listen[i].Certificate` / `Listen[i].Key`). The binary runs it for `--check` and
    /// on every reload (a reload naming unreadable files is refused); binding runs the
    /// same loading.
    pub fn check_listeners(listen: &[ListenConfig]) -> Result<(), crate::config::ConfigErrors> {
        let mut errors = crate::config::ConfigErrors::default();
        for (i, entry) in listen.iter().enumerate() {
            if let Err(e) = listener_tls(entry, i) {
                errors.0.push(e);
            }
        }
        errors.into_result()
    }

    /// Serve on already bound listeners (plain TCP).
    pub fn from_listeners(listeners: Vec<TcpListener>) -> Server {
        Server {
            listeners: listeners
                .into_iter()
                .map(|tcp| Listener {
                    tcp,
                    tls: None,
                    tls_setup: None,
                    protocols: ListenProtocols::default(),
                })
                .collect(),
            options: ServerOptions::default(),
        }
    }

    /// Also serve on `listener`, terminating TLS with `tls` (see
    /// [`tls_config_from_files`]; its ALPN list decides whether HTTP/2 is offered).
    pub fn with_tls_listener(
        mut self,
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
    ) -> Server {
        self.listeners.push(Listener {
            tcp: listener,
            tls: Some(Arc::new(ArcSwap::from_pointee(Terminator::single(
                tls,
                ListenProtocols::default(),
            )))),
            tls_setup: None,
            protocols: ListenProtocols::default(),
        });
        self
    }

    /// A handle that re-reads the certificate and key files of the TLS listeners bound
    /// from a configuration ([`bind_config`](Self::bind_config)), for certificate
    /// rotation without a restart (the binary does it on `SIGHUP`). Take it before
    /// serving.
    pub fn tls_reloader(&self) -> TlsReloader {
        TlsReloader {
            listeners: self
                .listeners
                .iter()
                .filter_map(|l| Some((l.tls_setup.clone()?, l.tls.clone()?)))
                .collect(),
        }
    }

    /// How long in-flight requests may take to finish after shutdown starts (default 30 s).
    pub fn graceful_timeout(mut self, grace: Duration) -> Server {
        self.options.graceful_timeout = grace;
        self
    }

    /// Most client connections open at once, over all listeners and workers (default
    /// 10 000; see [`ServerOptions::max_connections`]).
    pub fn max_connections(mut self, max: usize) -> Server {
        self.options.max_connections = max;
        self
    }

    /// How long an HTTP/1.1 head may take (default 30 s; see
    /// [`ServerOptions::header_read_timeout`]).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Server {
        self.options.header_read_timeout = timeout;
        self
    }

    /// How long an HTTP/1.1 connection waits for its next request (default 130 s; see
    /// [`ServerOptions::keep_alive_timeout`]).
    pub fn keep_alive_timeout(mut self, timeout: Duration) -> Server {
        self.options.keep_alive_timeout = timeout;
        self
    }

    /// The slowest a request body may arrive (default 240 bytes a second
    /// after 5 s; see [`ServerOptions::min_request_body_data_rate`]).
    pub fn min_request_body_data_rate(mut self, rate: Option<MinDataRate>) -> Server {
        self.options.min_request_body_data_rate = rate;
        self
    }

    /// The slowest a client may take a response (default 240 bytes a second
    /// after 5 s; see [`ServerOptions::min_response_data_rate`]).
    pub fn min_response_data_rate(mut self, rate: Option<MinDataRate>) -> Server {
        self.options.min_response_data_rate = rate;
        self
    }

    /// Serve HTTP/2 with `engine` (default: [`Http2Engine::from_env`]).
    pub fn http2_engine(mut self, engine: Http2Engine) -> Server {
        self.options.http2_engine = engine;
        self
    }

    /// Serve HTTP/1.1 with `engine` (default: [`Http1Engine::from_env`]).
    pub fn http1_engine(mut self, engine: Http1Engine) -> Server {
        self.options.http1_engine = engine;
        self
    }

    /// Apply a configuration's server limits (Kestrel's `Limits`; see
    /// [`ServerOptions::limits`]).
    pub fn limits(mut self, limits: &crate::config::ServerLimits) -> Server {
        self.options = self.options.limits(limits);
        self
    }

    /// Replace all limits.
    pub fn options(mut self, options: ServerOptions) -> Server {
        self.options = options;
        self
    }

    /// The bound addresses, in the order the listeners were added.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.tcp.local_addr().ok())
            .collect()
    }

    /// Serve `service` until `shutdown` completes; then stop accepting, let in-flight
    /// requests finish (bounded by the graceful timeout) and return.
    pub async fn serve<S>(self, service: S, shutdown: impl Future<Output = ()>) -> io::Result<()>
    where
        S: ServeService,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        // One worker: the balance only keeps the connection limit.
        let lanes = Balance::lanes(self.options.max_connections, 1, self.listeners.len());
        let options = Arc::new(self.options.own_upgrade_count());
        let lanes = lanes.into_iter().flatten();
        for (listener, lane) in self.listeners.into_iter().zip(lanes) {
            tasks.spawn(accept_loop(
                listener,
                service.clone(),
                stop_rx.clone(),
                options.clone(),
                lane,
            ));
        }
        shutdown.await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

impl Server {
    /// Serve on `workers` threads, each running its own single-threaded tokio runtime
    /// with its own service from `make_service` (so its own connection pools), all
    /// accepting on the same listening sockets — nginx's worker model: a request is
    /// handled start to end on one thread, with no wake-ups across threads and no
    /// locks shared between workers on its path. Connections are kept even over the
    /// workers: one that a worker holding two more than another accepts is handed to
    /// the least-loaded worker before anything is read from it. Returns like
    /// [`Server::serve`] once `shutdown` completed and every worker has drained.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use fuseway::{pipeline::FusedDefault, server::Server, state::ProxyState};
    /// # async fn run(state: Arc<ProxyState>) -> std::io::Result<()> {
    /// let server = Server::bind(&["127.0.0.1:8080".parse().unwrap()]).await?;
    /// server
    ///     .serve_workers(2, move || FusedDefault::from_state(state.clone()), async {
    ///         tokio::signal::ctrl_c().await.ok();
    ///     })
    ///     .await
    /// # }
    /// ```
    pub async fn serve_workers<S, F>(
        self,
        workers: usize,
        make_service: F,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()>
    where
        F: Fn() -> S + Send + Sync + 'static,
        S: ServeService,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let workers = workers.max(1);
        let lanes = Balance::lanes(self.options.max_connections, workers, self.listeners.len());
        let options = Arc::new(self.options.own_upgrade_count());
        let make_service = Arc::new(make_service);
        let listeners = self
            .listeners
            .into_iter()
            .map(|l| Ok((l.tcp.into_std()?, l.tls, l.tls_setup, l.protocols)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut threads = Vec::with_capacity(workers);
        for (i, lanes) in lanes.into_iter().enumerate() {
            // Each worker accepts on a listening socket of its own (the first on the
            // one bound): a shared socket's connections go to whichever worker wakes
            // first, which under a burst of connects can be all of them. The kernel
            // spreads them by a hash; the balance evens out what that leaves uneven.
            let mine = listeners
                .iter()
                .map(|(tcp, tls, files, protocols)| {
                    let tcp = if i == 0 {
                        tcp.try_clone()?
                    } else {
                        worker_listener(tcp)?
                    };
                    Ok((tcp, tls.clone(), files.clone(), *protocols))
                })
                .collect::<io::Result<Vec<_>>>()?;
            let runtime = crate::clock::worker_runtime().build()?;
            let (stop, options) = (stop_rx.clone(), options.clone());
            let make_service = make_service.clone();
            let worker = move || {
                runtime.block_on(async move {
                    let service = make_service();
                    let mut tasks = JoinSet::new();
                    for ((tcp, tls, tls_setup, protocols), lane) in mine.into_iter().zip(lanes) {
                        let tcp = match TcpListener::from_std(tcp) {
                            Ok(tcp) => tcp,
                            Err(e) => {
                                tracing::error!(error = %e, "worker cannot register a listener");
                                continue;
                            }
                        };
                        tasks.spawn(accept_loop(
                            Listener {
                                tcp,
                                tls,
                                tls_setup,
                                protocols,
                            },
                            service.clone(),
                            stop.clone(),
                            options.clone(),
                            lane,
                        ));
                    }
                    while tasks.join_next().await.is_some() {}
                })
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fuseway-worker-{i}"))
                    .spawn(worker)?,
            );
        }
        drop(listeners);
        shutdown.await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        let _ = stop_tx.send(true);
        for thread in threads {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        Ok(())
    }
}

/// How listener `i` terminates TLS and its configurations, its files read now (`None`:
/// plain TCP); errors name the file's key (`Listen[i].Certificate`,
/// `Listen[i].Sni.<name>.Key`).
fn listener_tls(
    entry: &ListenConfig,
    i: usize,
) -> Result<Option<(TlsSetup, Terminator)>, crate::config::ConfigError> {
    let Some(setup) = entry.tls_setup() else {
        return Ok(None);
    };
    setup
        .load()
        .map(|terminator| Some((setup, terminator)))
        .map_err(|e| {
            let part = match e.error.part {
                TlsPart::Certificate => "Certificate",
                TlsPart::Key => "Key",
            };
            let at = match &e.sni {
                Some(name) => format!("Listen[{i}].Sni.{name}.{part}"),
                None => format!("Listen[{i}].{part}"),
            };
            crate::config::ConfigError::new(at, e.error.message)
        })
}

/// Completes on Ctrl-C or SIGTERM: the `shutdown` future to give
/// [`Server::serve`] in a program that stops on those signals.
pub async fn shutdown_signal() {
    Signals::new().next().await;
}

/// `SIGTERM` and `SIGINT` (Ctrl-C), caught from [`Signals::new`] on, one after
/// another (the binary makes them before it announces anything, so that a signal sent
/// as soon as it says it listens starts the drain rather than killing the process, and
/// a second one is seen).
pub(crate) struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub(crate) fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let catch = |kind| {
                signal(kind)
                    .map_err(|e| tracing::warn!(error = %e, "cannot catch a shutdown signal"))
                    .ok()
            };
            Signals {
                term: catch(SignalKind::terminate()),
                int: catch(SignalKind::interrupt()),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next signal's name.
    pub(crate) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = recv(&mut self.term) => "SIGTERM",
                () = recv(&mut self.int) => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
