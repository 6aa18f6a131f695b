//! Listening sockets, the accept loop, and the start of each connection: protocol
//! detection or the TLS handshake, then the native engine or hyper's.

use super::balance::Lane;
use super::streams::{StreamExecutor, WithStreams};
use super::*;
use crate::config::ListenProtocols;

pub(super) async fn bind(addr: &SocketAddr) -> io::Result<TcpListener> {
    listen(addr)
        .and_then(TcpListener::from_std)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}

/// A listening socket on `addr`, as tokio's `TcpListener::bind` makes it
/// (`SO_REUSEADDR`, a backlog of 1024, non-blocking) and with `SO_REUSEPORT`, so that
/// each worker can listen on the same address with a socket of its own
/// ([`Server::serve_workers`]).
pub(super) fn listen(addr: &SocketAddr) -> io::Result<std::net::TcpListener> {
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
pub(super) fn worker_listener(
    listener: &std::net::TcpListener,
) -> io::Result<std::net::TcpListener> {
    match listener.local_addr().and_then(|addr| listen(&addr)) {
        Ok(own) => Ok(own),
        Err(e) => {
            tracing::debug!(error = %e, "a worker shares the listening socket");
            listener.try_clone()
        }
    }
}

/// Tell HTTP/1 from HTTP/2 (prior knowledge) by the first bytes of a plain connection,
/// peeked at (not consumed) within `timeout`: `None` when none came in time, the
/// connection failed, or shutdown started first (`drain`).
///
/// A poll function rather than a `select!` of a timeout, a peeking `async fn` and the
/// listener's stop signal, and timed by the connection's drain deadline rather than a
/// `Sleep`: those made this the largest state of the connection's task, and a task is
/// as large as its largest state for as long as the connection lives.
pub(super) async fn protocol_known(
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
pub(super) enum Protocol {
    Http1,
    Http2,
}

/// The TLS handshake of a client connection: with the listener's one configuration,
/// or, when it has `Sni` entries, the one for the name the client's hello asks for
/// (none matching: the handshake fails, as Kestrel's). Also says what the chosen site
/// serves.
async fn tls_handshake(
    stream: tokio::net::TcpStream,
    terminator: &tls::Terminator,
) -> io::Result<(
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    ListenProtocols,
)> {
    if let Some(only) = terminator.only() {
        let acceptor = tokio_rustls::TlsAcceptor::from(only.config.clone());
        return Ok((acceptor.accept(stream).await?, only.protocols));
    }
    let start =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await?;
    let hello = start.client_hello();
    let name = hello.server_name();
    let Some(site) = terminator.choose(name) else {
        let name = name.map_or_else(|| "none".to_string(), |n| format!("`{n}`"));
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no `Sni` entry for the server name the client asked for ({name})"),
        ));
    };
    let (config, protocols) = (site.config.clone(), site.protocols);
    Ok((start.into_stream(config).await?, protocols))
}

/// Whether a listener serving `protocols` serves a connection speaking `protocol`. One
/// that does not is closed unanswered: hyper's engine would serve whichever protocol it
/// finds, and a client that speaks the other one has the wrong port.
fn serves(protocols: ListenProtocols, protocol: Protocol) -> bool {
    match protocols {
        ListenProtocols::Http1 => protocol == Protocol::Http1,
        ListenProtocols::Http2 => protocol == Protocol::Http2,
        ListenProtocols::Http1AndHttp2 => true,
    }
}

/// The service for one connection served by hyper, and the connection's activity (the
/// requests it has in flight, for its idle limit).
pub(super) fn served<S>(
    service: S,
    info: ConnectionInfo,
    certificate: Option<ClientCertificate>,
    options: &ServerOptions,
) -> (Served<S>, Arc<idle::Activity>) {
    let activity = idle::Activity::new();
    let svc = Served {
        inner: service,
        info,
        certificate,
        activity: Some(activity.clone()),
        fields: FieldLimits::new(options),
        upgrades: options.upgrade_limit().cloned(),
    };
    (svc, activity)
}

/// Drive a connection to its end; it is closed once it has waited too long with no
/// request in flight (on HTTP/1.1 the header read and keep-alive timeouts, see
/// [`idle::Activity`]; on HTTP/2 the idle timeout, given as both).
pub(super) async fn drive<F, E>(
    connection: F,
    activity: Arc<idle::Activity>,
    (header, keep_alive): (Duration, Duration),
    remote: SocketAddr,
) where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let ended = idle::IdleLimited::new(connection, activity, header, keep_alive).await;
    match ended {
        Some(Ok(())) => {}
        Some(Err(e)) => tracing::debug!(error = %e, %remote, "connection ended with an error"),
        None => {
            tracing::debug!(%remote, "no request in flight for the connection's idle limit; closing")
        }
    }
}

/// The native engine's in-flight slots for pipeline `S`.
pub(super) type NativeSlots<S> = native::Slots<native::CallOf<S>, crate::body::ProxyBody>;

/// hyper's HTTP/1.1 connection builder as `options` configure it (the hyper engine's,
/// and the one the differential replays compare the native engine with).
pub(super) fn hyper_http1(options: &ServerOptions) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Kept per connection instead (`idle`): hyper's arms a timer per request.
        .header_read_timeout(None)
        .max_buf_size(options.max_header_size.max(8192));
    if options.max_request_headers != 100 {
        // 100 is hyper's default, its fields' room on the stack; any other count has
        // hyper allocate that room for each request, so it is set only when asked.
        builder.max_headers(options.max_request_headers as usize);
    }
    builder
}

/// hyper's HTTP/2 connection builder as `options` configure it, its streams run by
/// `executor`.
pub(super) fn hyper_http2<E>(executor: E, options: &ServerOptions) -> http2::Builder<E> {
    let mut builder = http2::Builder::new(executor);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams)
        .max_header_list_size(options.max_header_list_size)
        .header_table_size(options.http2_header_table_size)
        .initial_stream_window_size(options.http2_initial_stream_window)
        .initial_connection_window_size(options.http2_initial_connection_window)
        .max_frame_size(options.http2_max_frame_size)
        .keep_alive_interval(options.http2_keep_alive_interval)
        .keep_alive_timeout(options.http2_keep_alive_timeout)
        // RFC 8441: WebSockets over HTTP/2 (extended CONNECT).
        .enable_connect_protocol();
    builder
}

/// hyper's connection builders, one per protocol: the protocol is known before a
/// connection is served (prior knowledge, or ALPN).
pub(super) struct HyperBuilders {
    http1: http1::Builder,
    http2: http2::Builder<StreamExecutor>,
}

/// What every connection of a listener shares.
pub(super) struct Shared<S: ServeService> {
    hyper: Arc<HyperBuilders>,
    options: Arc<ServerOptions>,
    slots: Arc<NativeSlots<S>>,
}

impl<S: ServeService> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared {
            hyper: self.hyper.clone(),
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
pub(super) fn spawn_connection<I, S, D>(
    known: D,
    service: S,
    info: ConnectionInfo,
    shared: Shared<S>,
) where
    I: native::Io,
    S: ServeService,
    D: Future<Output = Option<(I, Protocol, drain::Signal)>> + Send + 'static,
{
    tokio::spawn(known.then(move |known| {
        let Some((io, protocol, mut drain)) = known else {
            return Either::Left(std::future::ready(()));
        };
        drain.count(super::counts::Open::enter(protocol));
        Either::Right(serve_known(io, protocol, service, info, &shared, drain))
    }));
}

/// Serve a connection whose protocol is known: HTTP/1.1 on the native engine when it
/// is chosen, else hyper's. Not an `async fn`, so that the arguments are not held
/// twice for the connection's life; hyper's connection is boxed, since the task's
/// size is that of its largest state and it would make every native connection's
/// task as large.
pub(super) fn serve_known<I, S>(
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
        Either::Left(native::serve_connection(
            io,
            service,
            info,
            shared.slots.clone(),
            drain,
            false,
        ))
    } else if protocol == Protocol::Http2 && shared.options.http2_engine == Http2Engine::Native {
        Either::Right(Either::Left(native_h2::serve_connection(
            io,
            service,
            info,
            shared.options.clone(),
            drain,
        )))
    } else {
        let certificate = super::tls::certificate_of(&io).cloned();
        let (service, activity) = served(service, info, certificate, &shared.options);
        let io = TokioIo::new(super::linger::Lingering::new(
            io,
            shared.options.header_read_timeout,
            activity.clone(),
        ));
        let options = &shared.options;
        let (connection, timeout) = match protocol {
            Protocol::Http1 => (
                Either::Left(drain::watch(
                    drain,
                    shared
                        .hyper
                        .http1
                        .serve_connection(io, service)
                        .with_upgrades(),
                )),
                (options.header_read_timeout, options.keep_alive_timeout),
            ),
            Protocol::Http2 => (
                Either::Right(drain::watch(
                    drain,
                    shared.hyper.http2.serve_connection(io, service),
                )),
                (options.http2_idle_timeout, options.http2_idle_timeout),
            ),
        };
        Either::Right(Either::Right(Box::pin(drive(
            WithStreams::new(connection),
            activity,
            timeout,
            remote,
        ))))
    }
}

pub(super) async fn accept_loop<S>(
    listener: Listener,
    service: S,
    mut stop: watch::Receiver<bool>,
    options: Arc<ServerOptions>,
    mut lane: Lane,
) where
    S: ServeService,
{
    let Listener {
        tcp: listener,
        tls,
        protocols,
        ..
    } = listener;
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
    let graceful = drain::Drain::new(options.header_read_timeout);
    // The native engine's in-flight slots, shared by the listener's connections; plain
    // TCP connections park in a lot when idle.
    let slots = match (&tls, options.http1_engine) {
        (None, Http1Engine::Native) => native::slots_with_lot(
            options.clone(),
            service.clone(),
            local,
            graceful.signal(None),
            &lane.balance,
        ),
        _ => native::Slots::new(options.clone()),
    };
    let shared = Shared {
        hyper: Arc::new(HyperBuilders {
            http1: hyper_http1(&options),
            http2: hyper_http2(StreamExecutor, &options),
        }),
        options: options.clone(),
        slots,
    };
    loop {
        let (stream, remote, place) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    // A free place under the connection limit, or wait for one with
                    // this connection in hand: the clients after it queue in the
                    // kernel's backlog instead of consuming memory here. Taken after
                    // the accept, not before: with a listening socket per worker, a
                    // place held by a worker waiting on its own socket would leave a
                    // connection that came to another worker waiting for good.
                    let place = tokio::select! {
                        place = lane.balance.admit(lane.worker) => match place {
                            Some(place) => place,
                            None => break,
                        },
                        _ = stop.changed() => break,
                    };
                    if place.worker() == lane.worker {
                        (stream, remote, place)
                    } else {
                        match lane.hand(stream, remote, place) {
                            Some(kept) => kept,
                            None => continue,
                        }
                    }
                }
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            Some(handed) = lane.inbox.recv() => match handed.take() {
                Some(taken) => taken,
                None => continue,
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
                let mut drain = graceful.signal(Some(place));
                let timeout = options.header_read_timeout;
                // hyper-util tells HTTP/1 from HTTP/2 by reading the first bytes, without
                // a time limit: a client sending nothing, or part of the HTTP/2 preface,
                // would hold its slot forever. It gets the header read timeout.
                let detect = async move {
                    match protocol_known(&stream, timeout, &mut drain).await {
                        Some(protocol) if serves(protocols, protocol) => {
                            Some((stream, protocol, drain))
                        }
                        Some(protocol) => {
                            tracing::debug!(%remote, ?protocol, "a protocol this listener does not serve; closing");
                            None
                        }
                        None => {
                            tracing::debug!(%remote, "no request within the header read timeout; closing");
                            None
                        }
                    }
                };
                spawn_connection(detect, service, info, shared.clone());
            }
            Some(terminator) => {
                // The configurations of the moment: a reload applies to new connections.
                let terminator = terminator.load_full();
                // The handshake runs on the connection's task, bounded like a request head.
                let timeout = options.header_read_timeout;
                let drain = graceful.signal(Some(place));
                let handshake = async move {
                    match tokio::time::timeout(timeout, tls_handshake(stream, &terminator)).await {
                        Ok(Ok((stream, served))) => {
                            // ALPN offers only what the site serves; a client that
                            // negotiated none speaks HTTP/1.1.
                            let protocol = match stream.get_ref().1.alpn_protocol() {
                                Some(b"h2") => Protocol::Http2,
                                _ => Protocol::Http1,
                            };
                            if !serves(served, protocol) {
                                tracing::debug!(%remote, "HTTP/2 was not negotiated on an HTTP/2-only listener (as Kestrel, closing)");
                                return None;
                            }
                            Some((tls::TlsIo::new(stream), protocol, drain))
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
