//! The server: listeners speaking HTTP/1.1 and HTTP/2 (h2c in clear, ALPN over TLS),
//! graceful shutdown.

mod drain;
mod idle;
pub(crate) mod native;
pub(crate) mod replay;
mod service;
mod tls;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::{Either, FutureExt};
use http::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use service::Served;
pub use service::{IntoResponse, ProxyService};
pub use tls::{tls_config_from_files, tls_config_from_pem, TlsError, TlsPart};

use crate::body::{Incoming, ProxyBody};
use crate::config::ListenConfig;
use crate::request::ConnectionInfo;

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
    /// The TLS configuration new connections are accepted with; swapped by
    /// [`TlsReloader::reload`].
    tls: Option<Arc<ArcSwap<rustls::ServerConfig>>>,
    /// The PEM files `tls` was read from (listeners bound from a configuration).
    tls_files: Option<(PathBuf, PathBuf)>,
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
    listeners: Vec<(PathBuf, PathBuf, Arc<ArcSwap<rustls::ServerConfig>>)>,
}

impl TlsReloader {
    /// Read every listener's files again; new connections use what was read. Returns
    /// how many listeners were reloaded, or the errors (each naming its files); the
    /// listeners that failed keep their certificates.
    pub fn reload(&self) -> Result<usize, Vec<String>> {
        let mut errors = Vec::new();
        for (cert, key, config) in &self.listeners {
            match tls_config_from_files(cert, key) {
                Ok(new) => config.store(new),
                Err(e) => errors.push(format!("{} / {}: {e}", cert.display(), key.display())),
            }
        }
        if errors.is_empty() {
            Ok(self.listeners.len())
        } else {
            Err(errors)
        }
    }
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
    /// closed (slowloris; default 30 s), counted from the accept or from the end of the
    /// previous response: also how long an idle keep-alive connection is kept. A
    /// response or request body taking longer is not cut (the cluster's
    /// `ActivityTimeout` bounds those).
    pub header_read_timeout: Duration,
    /// Largest request head on HTTP/1.1 (bytes); larger ones get 431 (default 64 KiB).
    pub max_header_size: usize,
    /// Longest request line on HTTP/1.1 (bytes); longer ones get 414 (default 8 KiB,
    /// nginx's). Applies to the native engine.
    pub max_request_line: usize,
    /// Which engine serves HTTP/1.1 (default [`Http1Engine::Native`], or what
    /// `FUSEWAY_HTTP1_ENGINE` names).
    pub http1_engine: Http1Engine,
    /// Largest header list on HTTP/2 (bytes; default 64 KiB).
    pub max_header_list_size: u32,
    /// How long in-flight requests may take after shutdown starts (default 30 s).
    pub graceful_timeout: Duration,
}

/// The engine that serves HTTP/1.1 connections (HTTP/2 is always hyper's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http1Engine {
    /// fuseway's own: one task and one state machine per connection, buffers reused
    /// across its messages, the edge-proxy checks of RFC 9112 (see the README).
    #[default]
    Native,
    /// hyper's HTTP/1.1 server: the reference the native engine is tested against, and
    /// a fallback.
    Hyper,
}

impl Http1Engine {
    /// The engine named by the `FUSEWAY_HTTP1_ENGINE` environment variable (`native`
    /// or `hyper`), else the default: lets a deployment, or a test run, pick hyper
    /// without a code change. An unknown name is ignored with a warning.
    pub fn from_env() -> Http1Engine {
        match std::env::var("FUSEWAY_HTTP1_ENGINE") {
            Ok(name) => name.parse().unwrap_or_else(|e| {
                tracing::warn!("FUSEWAY_HTTP1_ENGINE: {e}; using the native engine");
                Http1Engine::Native
            }),
            Err(_) => Http1Engine::Native,
        }
    }
}

impl std::str::FromStr for Http1Engine {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "native" => Ok(Http1Engine::Native),
            "hyper" => Ok(Http1Engine::Hyper),
            _ => Err(format!(
                "unknown HTTP/1.1 engine `{name}` (native or hyper)"
            )),
        }
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: 10_000,
            max_concurrent_streams: 100,
            header_read_timeout: Duration::from_secs(30),
            max_header_size: 64 * 1024,
            max_request_line: 8 * 1024,
            http1_engine: Http1Engine::from_env(),
            max_header_list_size: 64 * 1024,
            graceful_timeout: Duration::from_secs(30),
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
    /// `Certificate` and a `Key` (PEM files, read now), plain TCP otherwise.
    pub async fn bind_config(listen: &[ListenConfig]) -> io::Result<Server> {
        let mut server = Server::from_listeners(Vec::new());
        for (i, entry) in listen.iter().enumerate() {
            let addr: SocketAddr = entry.address().parse().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("Listen[{i}]: `{}`: {e}", entry.address()),
                )
            })?;
            let tls = match entry.tls_files() {
                Some((cert, key)) => Some(tls_config_from_files(cert, key).map_err(|e| {
                    let part = match e.part {
                        TlsPart::Certificate => "Certificate",
                        TlsPart::Key => "Key",
                    };
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("Listen[{i}].{part}: {e}"),
                    )
                })?),
                None => None,
            };
            let tcp = bind(&addr).await?;
            server.listeners.push(Listener {
                tcp,
                tls: tls.map(|t| Arc::new(ArcSwap::new(t))),
                tls_files: entry
                    .tls_files()
                    .map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
            });
        }
        Ok(server)
    }

    /// Serve on already bound listeners (plain TCP).
    pub fn from_listeners(listeners: Vec<TcpListener>) -> Server {
        Server {
            listeners: listeners
                .into_iter()
                .map(|tcp| Listener {
                    tcp,
                    tls: None,
                    tls_files: None,
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
            tls: Some(Arc::new(ArcSwap::new(tls))),
            tls_files: None,
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
                .filter_map(|l| {
                    let (cert, key) = l.tls_files.clone()?;
                    Some((cert, key, l.tls.clone()?))
                })
                .collect(),
        }
    }

    /// How long in-flight requests may take to finish after shutdown starts (default 30 s).
    pub fn graceful_timeout(mut self, grace: Duration) -> Server {
        self.options.graceful_timeout = grace;
        self
    }

    /// Serve HTTP/1.1 with `engine` (default: [`Http1Engine::from_env`]).
    pub fn http1_engine(mut self, engine: Http1Engine) -> Server {
        self.options.http1_engine = engine;
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

impl Server {
    /// Serve on `workers` threads, each running its own single-threaded tokio runtime
    /// with its own service from `make_service` (so its own connection pools), all
    /// accepting on the same listening sockets — nginx's worker model: a request is
    /// handled start to end on one thread, with no wake-ups across threads and no
    /// locks shared between workers on its path. Returns like [`Server::serve`] once
    /// `shutdown` completed and every worker has drained.
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
        let connections = Arc::new(Semaphore::new(self.options.max_connections));
        let options = Arc::new(self.options);
        let make_service = Arc::new(make_service);
        let listeners = self
            .listeners
            .into_iter()
            .map(|l| Ok((l.tcp.into_std()?, l.tls, l.tls_files)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut threads = Vec::with_capacity(workers);
        for i in 0..workers.max(1) {
            // Each worker accepts on a listening socket of its own (the first on the
            // one bound): a shared socket's connections go to whichever worker wakes
            // first, which under a burst of connects can be all of them.
            let mine = listeners
                .iter()
                .map(|(tcp, tls, files)| {
                    let tcp = if i == 0 {
                        tcp.try_clone()?
                    } else {
                        worker_listener(tcp)?
                    };
                    Ok((tcp, tls.clone(), files.clone()))
                })
                .collect::<io::Result<Vec<_>>>()?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, options, connections) =
                (stop_rx.clone(), options.clone(), connections.clone());
            let make_service = make_service.clone();
            let worker = move || {
                runtime.block_on(async move {
                    let service = make_service();
                    let mut tasks = JoinSet::new();
                    for (tcp, tls, tls_files) in mine {
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
                                tls_files,
                            },
                            service.clone(),
                            stop.clone(),
                            options.clone(),
                            connections.clone(),
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

async fn bind(addr: &SocketAddr) -> io::Result<TcpListener> {
    listen(addr)
        .and_then(TcpListener::from_std)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}

/// A listening socket on `addr`, as tokio's `TcpListener::bind` makes it
/// (`SO_REUSEADDR`, a backlog of 1024, non-blocking) and with `SO_REUSEPORT`, so that
/// each worker can listen on the same address with a socket of its own
/// ([`Server::serve_workers`]).
fn listen(addr: &SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(*addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    #[cfg(unix)]
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&(*addr).into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// A worker's own socket listening where `listener` does (`SO_REUSEPORT`: the kernel
/// spreads new connections over the workers' sockets by their addresses' hash), or,
/// where that cannot be (a listener bound without `SO_REUSEPORT`, given to
/// [`Server::from_listeners`]), a handle of the same socket.
fn worker_listener(listener: &std::net::TcpListener) -> io::Result<std::net::TcpListener> {
    match listener.local_addr().and_then(|addr| listen(&addr)) {
        Ok(own) => Ok(own),
        Err(e) => {
            tracing::debug!(error = %e, "a worker shares the listening socket");
            listener.try_clone()
        }
    }
}

/// Wait until the first bytes tell HTTP/1 from HTTP/2 (as hyper-util's detection
/// does: the HTTP/2 preface or anything else), or the client closes.
/// Tell HTTP/1 from HTTP/2 (prior knowledge) by the first bytes of a plain connection,
/// peeked at (not consumed) within `timeout`: `None` when none came in time, the
/// connection failed, or shutdown started first (`drain`).
///
/// A poll function rather than a `select!` of a timeout, a peeking `async fn` and the
/// listener's stop signal, and timed by the connection's drain deadline rather than a
/// `Sleep`: those made this the largest state of the connection's task, and a task is
/// as large as its largest state for as long as the connection lives.
async fn protocol_known(
    stream: &tokio::net::TcpStream,
    timeout: Duration,
    drain: &mut drain::Signal,
) -> Option<Protocol> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    /// How soon a partial preface is looked at again (peeking does not consume it,
    /// so its readiness does not change until more arrives).
    const AGAIN: Duration = Duration::from_millis(5);
    let deadline = Instant::now() + timeout;
    let mut arm = Some(timeout);
    std::future::poll_fn(|cx| {
        if drain.poll_draining(cx) {
            return Poll::Ready(None);
        }
        loop {
            let mut buf = [0u8; PREFACE.len()];
            let mut read = tokio::io::ReadBuf::new(&mut buf);
            match stream.poll_peek(cx, &mut read) {
                Poll::Ready(Ok(n)) if n == PREFACE.len() && read.filled() == PREFACE => {
                    return Poll::Ready(Some(Protocol::Http2))
                }
                Poll::Ready(Ok(n)) if n == 0 || read.filled() != &PREFACE[..n] => {
                    return Poll::Ready(Some(Protocol::Http1))
                }
                Poll::Ready(Ok(_)) => {
                    // Part of the preface: looked at again shortly.
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Poll::Ready(None);
                    }
                    arm = Some(AGAIN.min(left));
                }
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Pending => {}
            }
            std::task::ready!(drain.poll_deadline(cx, arm.take()));
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Poll::Ready(None);
            }
            arm = Some(left);
        }
    })
    .await
}

/// The protocol a client speaks on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// The service for one connection, and its activity when the header read timeout
/// applies: on HTTP/1.1 (as hyper's own did), not on HTTP/2, whose requests are streams
/// of a connection that stays open between them.
fn served<S>(
    service: S,
    info: ConnectionInfo,
    protocol: Protocol,
) -> (Served<S>, Option<Arc<idle::Activity>>) {
    let activity = (protocol == Protocol::Http1).then(idle::Activity::new);
    let svc = Served {
        inner: service,
        info,
        activity: activity.clone(),
    };
    (svc, activity)
}

/// Drive a connection to its end; an HTTP/1.1 one is closed once it has waited for a
/// request head longer than `timeout`.
async fn drive<F, E>(
    connection: F,
    activity: Option<Arc<idle::Activity>>,
    timeout: Duration,
    remote: SocketAddr,
) where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let ended = match activity {
        Some(activity) => idle::IdleLimited::new(connection, activity, timeout).await,
        None => Some(connection.await),
    };
    match ended {
        Some(Ok(())) => {}
        Some(Err(e)) => tracing::debug!(error = %e, %remote, "connection ended with an error"),
        None => tracing::debug!(%remote, "no request head within the header read timeout; closing"),
    }
}

/// The native engine's in-flight slots for pipeline `S`.
type NativeSlots<S> = native::Slots<native::CallOf<S>, idle::ServedBody>;

/// What every connection of a listener shares.
struct Shared<S: ServeService> {
    builder: Arc<auto::Builder<TokioExecutor>>,
    options: Arc<ServerOptions>,
    slots: Arc<NativeSlots<S>>,
}

impl<S: ServeService> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared {
            builder: self.builder.clone(),
            options: self.options.clone(),
            slots: self.slots.clone(),
        }
    }
}

/// Spawn a connection's task: `known` (the protocol detection, or the TLS handshake)
/// and then serving, chained rather than one `async` block — what the second step
/// captures is consumed when it starts, so the task holds the larger of the two, not
/// both (an idle keep-alive connection is mostly its task). The connection's slot under
/// the listener's limit is kept in its drain signal, and released when it ends.
fn spawn_connection<I, S, D>(known: D, service: S, info: ConnectionInfo, shared: Shared<S>)
where
    I: native::Io,
    S: ServeService,
    D: Future<Output = Option<(I, Protocol, drain::Signal)>> + Send + 'static,
{
    tokio::spawn(known.then(move |known| {
        let Some((io, protocol, drain)) = known else {
            return Either::Left(std::future::ready(()));
        };
        Either::Right(serve_known(io, protocol, service, info, &shared, drain))
    }));
}

/// Serve a connection whose protocol is known: HTTP/1.1 on the native engine when it
/// is chosen, else hyper's. Not an `async fn`, so that the arguments are not held
/// twice for the connection's life; hyper's connection is boxed, since the task's
/// size is that of its largest state and it would make every native connection's
/// task as large.
fn serve_known<I, S>(
    io: I,
    protocol: Protocol,
    service: S,
    info: ConnectionInfo,
    shared: &Shared<S>,
    drain: drain::Signal,
) -> impl Future<Output = ()>
where
    I: native::Io,
    S: ServeService,
{
    let remote = info.remote;
    if protocol == Protocol::Http1 && shared.options.http1_engine == Http1Engine::Native {
        let service = Served {
            inner: service,
            info,
            activity: None,
        };
        Either::Left(native::serve_connection(
            io,
            service,
            shared.slots.clone(),
            drain,
            false,
        ))
    } else {
        let (service, activity) = served(service, info, protocol);
        let connection = shared
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        let timeout = shared.options.header_read_timeout;
        Either::Right(Box::pin(drive(
            drain::watch(drain, connection),
            activity,
            timeout,
            remote,
        )))
    }
}

async fn accept_loop<S>(
    listener: Listener,
    service: S,
    mut stop: watch::Receiver<bool>,
    options: Arc<ServerOptions>,
    connections: Arc<Semaphore>,
) where
    S: ServeService,
{
    let Listener {
        tcp: listener, tls, ..
    } = listener;
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Kept per connection instead (`idle`): hyper's arms a timer per request.
        .header_read_timeout(None)
        .max_buf_size(options.max_header_size.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams)
        .max_header_list_size(options.max_header_list_size)
        // RFC 8441: WebSockets over HTTP/2 (extended CONNECT).
        .enable_connect_protocol();
    let graceful = drain::Drain::new(options.header_read_timeout);
    // The native engine's in-flight slots, shared by the listener's connections; plain
    // TCP connections park in a lot when idle.
    let slots = match (&tls, options.http1_engine) {
        (None, Http1Engine::Native) => native::slots_with_lot(
            options.clone(),
            service.clone(),
            local,
            graceful.signal(None),
        ),
        _ => native::Slots::new(options.clone()),
    };
    let shared = Shared {
        builder: Arc::new(builder),
        options: options.clone(),
        slots,
    };
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
        // A free connection slot, or wait for one with this connection in hand: the
        // clients after it queue in the kernel's backlog instead of consuming memory
        // here. Taken after the accept, not before: with a listening socket per worker,
        // a slot held by a worker waiting on its own socket would leave a connection
        // that came to another worker waiting for good.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let info = ConnectionInfo {
            remote,
            local,
            tls: tls.is_some(),
        };
        let service = service.clone();
        match &tls {
            None => {
                let mut drain = graceful.signal(Some(permit));
                let timeout = options.header_read_timeout;
                // hyper-util tells HTTP/1 from HTTP/2 by reading the first bytes, without
                // a time limit: a client sending nothing, or part of the HTTP/2 preface,
                // would hold its slot forever. It gets the header read timeout.
                let detect = async move {
                    match protocol_known(&stream, timeout, &mut drain).await {
                        Some(protocol) => Some((stream, protocol, drain)),
                        None => {
                            tracing::debug!(%remote, "no request within the header read timeout; closing");
                            None
                        }
                    }
                };
                spawn_connection(detect, service, info, shared.clone());
            }
            Some(config) => {
                // The configuration of the moment: a reload applies to new connections.
                let acceptor = TlsAcceptor::from(config.load_full());
                // The handshake runs on the connection's task, bounded like a request head.
                let timeout = options.header_read_timeout;
                let handshake = tokio::time::timeout(timeout, acceptor.accept(stream));
                let drain = graceful.signal(Some(permit));
                let handshake = async move {
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            let protocol = match stream.get_ref().1.alpn_protocol() {
                                Some(b"h2") => Protocol::Http2,
                                _ => Protocol::Http1,
                            };
                            Some((stream, protocol, drain))
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, %remote, "TLS handshake failed");
                            None
                        }
                        Err(_) => {
                            tracing::debug!(%remote, "TLS handshake timed out");
                            None
                        }
                    }
                };
                spawn_connection(handshake, service, info, shared.clone());
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(options.graceful_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("graceful shutdown timed out; closing remaining connections");
    }
}
