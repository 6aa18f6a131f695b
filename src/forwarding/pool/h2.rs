//! HTTP/2: connections shared by the pool's requests, each driven by a task of its own
//! (one per destination, or more when the open ones are at the destination's stream
//! limit); concurrent requests that need a new one wait for the one being opened.
//!
//! Connections are fuseway's own client ([`crate::http2::client`], the native engine):
//! an exchange writes its frames into the connection's outgoing buffer itself and
//! reads its response from its stream's slot, which the connection's task fills.
//!
//! With the hyper engine the exchanges are on the `h2` crate directly (hyper's HTTP/2
//! client is h2 behind a request channel, a response callback and a task per request
//! body). Either way a request is sent on the shared connection from the exchange
//! itself, its body is written by the exchange while it waits for the response head
//! and then by the response body's reads (which drive the exchange), and the response
//! body is read through the exchange, its flow-control window given back as it is
//! read. An ended exchange goes back to its pool for a later request.

use crate::http2::client;
use ::h2::client::{ResponseFuture, SendRequest};
use ::h2::{RecvStream, SendStream};
use futures_util::future::{FutureExt, Shared};

use super::*;

/// What sends on an HTTP/2 connection: fuseway's own client, or the h2 crate's.
#[derive(Clone)]
pub(super) enum H2Sender {
    Native(client::Sender),
    Crate(SendRequest<Bytes>),
}

impl H2Sender {
    /// Whether the connection has closed (it takes no new stream). The pool's own
    /// handle is asked: it never opens a stream, so it is never waiting for one and
    /// the waker is never kept.
    fn is_closed(&mut self) -> bool {
        match self {
            H2Sender::Native(sender) => sender.is_closed(),
            H2Sender::Crate(sender) => {
                let waker = futures_util::task::noop_waker();
                matches!(
                    sender.poll_ready(&mut Context::from_waker(&waker)),
                    Poll::Ready(Err(_))
                )
            }
        }
    }

    /// The destination's stream limit (`SETTINGS_MAX_CONCURRENT_STREAMS`).
    fn max_streams(&self) -> usize {
        match self {
            H2Sender::Native(sender) => sender.max_streams(),
            H2Sender::Crate(sender) => sender.current_max_send_streams(),
        }
    }
}

/// Ended HTTP/2 exchanges a pool keeps for later requests.
const KEEP_FREE: usize = 64;

pin_project! {
    /// An HTTP/2 exchange on the pool's shared connection. Once it has ended it goes
    /// back to its pool ([`Pool::h2_free`]), which hands it to a later request: a
    /// steady request allocates no exchange.
    pub(super) struct H2<B> {
        state: State<B>,
        // The pool it goes back to when it ends (none: it is dropped).
        home: Option<Arc<Pool<B>>>,
        // Counts the exchange on its connection, once it has one.
        count: Option<StreamCount>,
        // The request body still to be written.
        pipe: Option<Pipe<B>>,
        // The response body.
        recv: Option<RecvStream>,
        // The stream, on the native client.
        native: Option<NativeStream<B>>,
        // The response's data has all been read (then its trailers are next).
        data_ended: bool,
        ended: bool,
        // A request without a body, kept until its answer comes (on the h2 crate's
        // client, a copy: h2 takes the head it sends): refused unprocessed (a GOAWAY
        // that leaves its stream out, `REFUSED_STREAM`), or cut off by its
        // connection's end, it goes again ([`again`]).
        unanswered: Option<Request<B>>,
        // How often the request has gone again ([`MAX_RESENDS`] at most).
        resent: u8,
        #[pin]
        timer: Deadline,
    }
}

/// How often a request goes again ([`again`]).
const MAX_RESENDS: u8 = 3;

/// Where an HTTP/2 exchange is.
enum State<B> {
    /// Waiting for the pool's connection being opened; then the pool is asked again.
    Awaiting(Opening, Arc<Pool<B>>, Option<Request<B>>),
    /// Waiting for a connection opened for this exchange (a pool that negotiates).
    Connecting(Connecting<Taken>, Option<Request<B>>),
    /// The connection open: the request goes once it can take another stream.
    Ready(H2Sender, Option<Request<B>>),
    /// Sent: waiting for the response head.
    Waiting(ResponseFuture),
    /// Sent on the native client: waiting for the response head.
    NativeWaiting,
    /// The response head has been handed out.
    Answered,
}

/// A request body being written to its stream, as the peer's flow control allows.
struct Pipe<B> {
    body: B,
    stream: SendStream<Bytes>,
    // Data read from the body, not yet sent (waiting for window).
    pending: Bytes,
}

impl<B: SendBody> Pipe<B> {
    /// Write what the body has and the stream takes; ready when the body has been sent
    /// to its end (or failed: the stream is reset).
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        loop {
            if !self.pending.is_empty() {
                self.stream.reserve_capacity(self.pending.len());
                let granted = match std::task::ready!(self.stream.poll_capacity(cx)) {
                    Some(Ok(n)) => n,
                    Some(Err(e)) => return Poll::Ready(Err(e.into())),
                    None => return Poll::Ready(Err("the destination closed the stream".into())),
                };
                let chunk = self.pending.split_to(granted.min(self.pending.len()));
                self.stream.send_data(chunk, false)?;
                continue;
            }
            match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => {
                    self.stream.send_data(Bytes::new(), true)?;
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => {
                    self.stream.send_reset(::h2::Reason::CANCEL);
                    return Poll::Ready(Err(e.into()));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.stream.send_trailers(trailers)?;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
            }
        }
    }
}

/// A request on the native client: its stream, and its body while it is written.
struct NativeStream<B> {
    stream: client::Stream,
    body: Option<B>,
    // Data read from the body, not yet sent (waiting for window).
    pending: Bytes,
    // The body has ended: its end is still to be sent.
    end: bool,
}

impl<B: SendBody> NativeStream<B> {
    /// Write what the body has and the stream takes; a body that fails resets the
    /// stream (the response then fails too).
    fn poll_write(&mut self, cx: &mut Context<'_>) {
        while let Some(body) = self.body.as_mut() {
            if !self.pending.is_empty() || self.end {
                match self.stream.poll_send(cx, &mut self.pending, self.end) {
                    Poll::Pending => return,
                    // Sent; the body goes on (unless the destination stopped it).
                    Poll::Ready(Ok(true)) if !self.end => continue,
                    Poll::Ready(result) => {
                        if let Err(e) = result {
                            tracing::debug!(error = %e, "writing a request body to an HTTP/2 destination failed");
                        }
                        self.body = None;
                        return;
                    }
                }
            }
            match Pin::new(body).poll_frame(cx) {
                Poll::Pending => return,
                Poll::Ready(None) => self.end = true,
                Poll::Ready(Some(Err(e))) => {
                    let e: BoxError = e.into();
                    tracing::debug!(error = %e, "a request body for an HTTP/2 destination failed");
                    self.stream.reset(crate::http2::frame::Reason::CANCEL);
                    self.body = None;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            if let Err(e) = self.stream.send_trailers(&trailers) {
                                tracing::debug!(error = %e, "writing request trailers to an HTTP/2 destination failed");
                            }
                            self.body = None;
                        }
                    }
                },
            }
        }
    }
}

/// The pool's HTTP/2 connections.
#[derive(Default)]
pub(super) struct H2Conns {
    /// Open connections, the oldest first: a request takes the first one with room for
    /// another stream (with one connection per destination, the one).
    open: Vec<H2Open>,
    /// One being opened: requests that find no open connection with room wait for it,
    /// so concurrent first requests open one connection, not one each.
    opening: Option<Opening>,
}

/// An open HTTP/2 connection of a pool.
struct H2Open {
    sender: H2Sender,
    /// Tells its driver it is still the pool's.
    id: u64,
    /// When a request last took it: starts its idle timeout.
    last_used: Instant,
    /// Exchanges on it now.
    streams: Arc<AtomicUsize>,
    /// The destination's stream limit (`SETTINGS_MAX_CONCURRENT_STREAMS`) as last asked
    /// of h2; asked again when `streams` reaches it (h2 answers under its lock).
    max_streams: usize,
}

impl H2Open {
    /// Whether it takes another stream now (or would queue it).
    fn has_room(&mut self) -> bool {
        let streams = self.streams.load(Ordering::Relaxed);
        if streams < self.max_streams {
            return true;
        }
        self.max_streams = self.sender.max_streams();
        streams < self.max_streams
    }

    /// Take it for one exchange.
    fn take(&mut self) -> Taken {
        self.last_used = Instant::now();
        self.streams.fetch_add(1, Ordering::Relaxed);
        Taken {
            sender: self.sender.clone(),
            count: StreamCount(self.streams.clone()),
        }
    }
}

impl H2Conns {
    /// Whether one is open or being opened (the pool is in use).
    pub(super) fn is_live(&mut self) -> bool {
        self.open.retain_mut(|open| !open.sender.is_closed());
        self.opening.is_some() || !self.open.is_empty()
    }
}

/// A connection taken for one exchange.
pub(super) struct Taken {
    sender: H2Sender,
    count: StreamCount,
}

/// Counts an exchange on its connection (see [`H2Open::streams`]) while it lasts.
struct StreamCount(Arc<AtomicUsize>);

impl Drop for StreamCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection being opened, awaited by every request that wants it; once it is
/// open (in the pool's list), they ask the pool again.
pub(super) type Opening = Shared<Pin<Box<dyn Future<Output = Result<(), OpenError>> + Send>>>;

/// Why opening an HTTP/2 connection failed, for every request that waited for it.
#[derive(Clone, Debug)]
pub(super) struct OpenError(Arc<BoxError>);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl StdError for OpenError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// The identity of each HTTP/2 connection a pool opens (see [`H2Open::id`]).
static NEXT_H2_ID: AtomicU64 = AtomicU64::new(0);

/// Where a request goes on a pool's HTTP/2 connections.
enum Choice {
    /// An open connection with room (or the one connection, or at the connection cap
    /// the least busy one: h2 queues the stream there).
    Taken(Taken),
    /// The connection being opened.
    Wait(Opening),
    /// A new connection that negotiates the version (a pool that negotiates opens its
    /// connections for the request that needs one).
    Negotiate,
}

/// Where a request goes on `pool`'s HTTP/2 connections, opening one where none has
/// room: with `EnableMultipleHttp2Connections` a new connection is opened when every
/// open one is at the destination's stream limit (up to `MaxConnectionsPerServer`),
/// else the request shares the one connection.
fn choose<B: SendBody>(pool: &Arc<Pool<B>>) -> Choice {
    let mut conns = pool.h2.lock().expect("pool lock");
    let multiple = pool.key.multiple_h2;
    let mut i = 0;
    while i < conns.open.len() {
        let open = &mut conns.open[i];
        if open.sender.is_closed() {
            conns.open.remove(i);
            continue;
        }
        if !multiple || open.has_room() {
            return Choice::Taken(open.take());
        }
        i += 1;
    }
    if let Some(opening) = &conns.opening {
        return Choice::Wait(opening.clone());
    }
    let cap = pool.limit.as_ref().map_or(usize::MAX, |limit| limit.max());
    if conns.open.len() >= cap {
        if let Some(least) = conns
            .open
            .iter_mut()
            .min_by_key(|open| open.streams.load(Ordering::Relaxed))
        {
            return Choice::Taken(least.take());
        }
    }
    if pool.key.version == UpstreamVersion::Negotiate {
        return Choice::Negotiate;
    }
    let io = pool.connect_io();
    let handshake = h2_handshake(pool);
    let weak = Arc::downgrade(pool);
    let open: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
        let opened = match io.await {
            // Open and in the pool's list: the waiters find it there.
            Ok(io) => handshake(io).await.map(drop),
            Err(e) => Err(e),
        };
        // No longer being opened; if it failed, the next request tries again.
        if let Some(pool) = weak.upgrade() {
            pool.h2.lock().expect("pool lock").opening = None;
        }
        opened.map_err(|e| OpenError(Arc::new(e)))
    });
    let opening = open.shared();
    conns.opening = Some(opening.clone());
    Choice::Wait(opening)
}

/// Where `request`, already an exchange's, goes next on `pool` ([`choose`]): ready on a
/// connection with room (`count` then counts it there) or waiting for the one being
/// opened; `None` in a pool that negotiates, which has no connection to share.
fn place<B: SendBody>(
    pool: &Arc<Pool<B>>,
    request: &mut Option<Request<B>>,
    count: &mut Option<StreamCount>,
) -> Option<State<B>> {
    match choose(pool) {
        Choice::Taken(taken) => {
            *count = Some(taken.count);
            Some(State::Ready(taken.sender, request.take()))
        }
        Choice::Wait(opening) => {
            *count = None;
            Some(State::Awaiting(opening, pool.clone(), request.take()))
        }
        Choice::Negotiate => None,
    }
}

/// An HTTP/2 exchange on one of `pool`'s connections, on the one being opened, or on
/// a new one (in a pool that negotiates, a new connection negotiates again).
pub(super) fn h2_exchange<B: SendBody>(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
    match choose(pool) {
        Choice::Taken(taken) => exchange(
            State::Ready(taken.sender, Some(request)),
            Some(taken.count),
            Some(pool),
        ),
        Choice::Wait(opening) => exchange(
            State::Awaiting(opening, pool.clone(), Some(request)),
            None,
            Some(pool),
        ),
        Choice::Negotiate => Negotiating::start(pool, request),
    }
}

/// An HTTP/2 exchange for `request` on the connection `connecting` opens for it.
pub(super) fn h2_on<B: SendBody>(
    connecting: Connecting<Taken>,
    request: Request<B>,
) -> BoxExchange {
    exchange(State::Connecting(connecting, Some(request)), None, None)
}

/// An exchange in `state`: one `home` kept, else a new one.
fn exchange<B: SendBody>(
    state: State<B>,
    count: Option<StreamCount>,
    home: Option<&Arc<Pool<B>>>,
) -> BoxExchange {
    if let Some(pool) = home {
        let kept = pool.h2_free.lock().expect("pool lock").pop();
        if let Some(mut kept) = kept {
            let this = kept.as_mut().project();
            *this.state = state;
            *this.count = count;
            *this.home = Some(pool.clone());
            return kept;
        }
    }
    Box::pin(H2 {
        state,
        home: home.cloned(),
        count,
        pipe: None,
        recv: None,
        native: None,
        data_ended: false,
        ended: false,
        unanswered: None,
        resent: 0,
        timer: Deadline::new(),
    })
}

/// The HTTP/2 handshake on a connection to `pool`'s destination, on the pool's engine
/// (hyper's client settings: 2 MiB stream and 5 MiB connection windows), waiting for
/// the destination's settings: the connection joins `pool`'s list knowing the
/// destination's stream limit, driven by a task of its own ([`drive`]), and is taken
/// for the exchange that opened it.
pub(super) fn h2_handshake<B: SendBody>(
    pool: &Arc<Pool<B>>,
) -> impl FnOnce(Io) -> Connecting<Taken> {
    let weak = Arc::downgrade(pool);
    let keep = pool.keep;
    let multiple = pool.key.multiple_h2;
    let native = pool.native_h2;
    move |io| {
        Box::pin(async move {
            let id = NEXT_H2_ID.fetch_add(1, Ordering::Relaxed);
            let io = hyper_util::rt::TokioIo::new(io);
            let sender = if native {
                let (sender, driver) =
                    tokio::time::timeout(keep.h2_ping_timeout, client::handshake(io))
                        .await
                        .map_err(|_| "the destination sent no HTTP/2 settings in time")??;
                let pinger = NativePinger(driver.connection());
                tokio::spawn(drive(driver, pinger, weak.clone(), id, keep));
                H2Sender::Native(sender)
            } else {
                let (sender, connection, ping_pong) = crate_handshake(io, keep).await?;
                tokio::spawn(drive(connection, ping_pong, weak.clone(), id, keep));
                H2Sender::Crate(sender)
            };
            let streams = Arc::new(AtomicUsize::new(1));
            if let Some(pool) = weak.upgrade() {
                let mut conns = pool.h2.lock().expect("pool lock");
                if !multiple {
                    // One per destination: the newest replaces any other (a pool that
                    // negotiates may have opened two at once); the old one closes when
                    // its streams end.
                    conns.open.clear();
                }
                conns.open.push(H2Open {
                    sender: sender.clone(),
                    id,
                    last_used: Instant::now(),
                    streams: streams.clone(),
                    max_streams: sender.max_streams(),
                });
            }
            Ok(Taken {
                sender,
                count: StreamCount(streams),
            })
        })
    }
}

/// The h2 connection to a destination.
type H2Connection = ::h2::client::Connection<hyper_util::rt::TokioIo<Io>, Bytes>;

/// The h2 crate's handshake (1 MiB send buffer besides the windows, the native
/// client's header list limit), then a first
/// ping, whose answer comes after the destination's settings.
async fn crate_handshake(
    io: hyper_util::rt::TokioIo<Io>,
    keep: Keep,
) -> Result<(SendRequest<Bytes>, H2Connection, ::h2::PingPong), BoxError> {
    let (sender, mut connection) = ::h2::client::Builder::new()
        .initial_window_size(2 * 1024 * 1024)
        .initial_connection_window_size(5 * 1024 * 1024)
        .max_send_buffer_size(1024 * 1024)
        .max_header_list_size(crate::http2::client::MAX_HEADER_LIST as u32)
        .handshake::<_, Bytes>(io)
        .await?;
    let mut ping_pong = connection
        .ping_pong()
        .ok_or("h2 gave no ping handle for a new connection")?;
    ping_pong.send_ping(::h2::Ping::opaque())?;
    let settled = std::future::poll_fn(|cx| {
        if let Poll::Ready(pong) = ping_pong.poll_pong(cx) {
            return Poll::Ready(pong.map(drop).map_err(BoxError::from));
        }
        match Pin::new(&mut connection).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Err(BoxError::from(
                "the destination closed the connection after the HTTP/2 handshake",
            ))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
            Poll::Pending => Poll::Pending,
        }
    });
    tokio::time::timeout(keep.h2_ping_timeout, settled)
        .await
        .map_err(|_| "the destination sent no HTTP/2 settings in time")??;
    Ok((sender, connection, ping_pong))
}

/// A connection's keep-alive pings.
trait Pinger: Send + 'static {
    /// Send one; `false` when it cannot go (no more pings are tried).
    fn send_ping(&mut self) -> bool;
    /// Ready once it is answered (`false`: the connection failed).
    fn poll_pong(&mut self, cx: &mut Context<'_>) -> Poll<bool>;
}

impl Pinger for ::h2::PingPong {
    fn send_ping(&mut self) -> bool {
        ::h2::PingPong::send_ping(self, ::h2::Ping::opaque()).is_ok()
    }

    fn poll_pong(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        ::h2::PingPong::poll_pong(self, cx).map(|pong| pong.is_ok())
    }
}

/// The native client's pings, sent on the connection (not through a sender, which
/// would keep it open).
struct NativePinger(Arc<client::Connection>);

impl Pinger for NativePinger {
    fn send_ping(&mut self) -> bool {
        self.0.send_ping()
    }

    fn poll_pong(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        self.0.poll_pong(cx).map(|pong| pong.is_ok())
    }
}

/// Drive the HTTP/2 connection `id` of `pool` to its end: ping it as `keep` says
/// (closing it when an answer is overdue: its requests fail), and take it out of the
/// pool once no request has taken it for the idle timeout (it closes when its last
/// stream ends).
async fn drive<B, C, E>(
    mut connection: C,
    mut pinger: impl Pinger,
    pool: Weak<Pool<B>>,
    id: u64,
    keep: Keep,
) where
    C: Future<Output = Result<(), E>> + Unpin,
    E: std::fmt::Display,
{
    let mut idle_at = Some(Instant::now() + keep.idle_timeout);
    let far = || Instant::now() + Duration::from_secs(86_400);
    // When the next ping goes, or (while one is out) when its answer is overdue.
    let mut ping_at = keep.h2_ping_interval.map(|i| Instant::now() + i);
    let mut awaiting_pong = false;
    loop {
        tokio::select! {
            ended = &mut connection => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "HTTP/2 connection to a destination ended");
                }
                return;
            }
            () = tokio::time::sleep_until(idle_at.unwrap_or_else(far)), if idle_at.is_some() => {
                idle_at = idle_check(&pool, id, keep.idle_timeout);
            }
            () = tokio::time::sleep_until(ping_at.unwrap_or_else(far)), if ping_at.is_some() => {
                if awaiting_pong {
                    tracing::debug!("an HTTP/2 destination did not answer a ping in time; closing its connection");
                    return;
                }
                if !pinger.send_ping() {
                    ping_at = None;
                    continue;
                }
                awaiting_pong = true;
                ping_at = Some(Instant::now() + keep.h2_ping_timeout);
            }
            answered = std::future::poll_fn(|cx| pinger.poll_pong(cx)), if awaiting_pong => {
                if !answered {
                    return;
                }
                awaiting_pong = false;
                ping_at = keep.h2_ping_interval.map(|i| Instant::now() + i);
            }
        }
    }
}

/// When the connection `id` is next to be checked for idleness: `None` once it is no
/// longer `pool`'s (taken out here when idle, replaced, or the pool is gone).
fn idle_check<B>(pool: &Weak<Pool<B>>, id: u64, idle_timeout: Duration) -> Option<Instant> {
    let pool = pool.upgrade()?;
    let mut conns = pool.h2.lock().expect("pool lock");
    let at = conns.open.iter().position(|open| open.id == id)?;
    let expires = conns.open[at].last_used + idle_timeout;
    if expires > Instant::now() {
        return Some(expires);
    }
    conns.open.remove(at);
    None
}

/// A response body's receiving side, on either client.
trait RecvSide {
    type Error: Into<BoxError>;
    /// The next data (its flow-control window given back).
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>>;
    /// The trailers, once the data has ended.
    fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<http::HeaderMap>, Self::Error>>;
    /// Nothing more to read.
    fn is_end_stream(&self) -> bool;
}

impl RecvSide for client::Stream {
    type Error = client::Error;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, client::Error>>> {
        client::Stream::poll_data(self, cx)
    }

    fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<http::HeaderMap>, client::Error>> {
        client::Stream::poll_trailers(self, cx)
    }

    fn is_end_stream(&self) -> bool {
        client::Stream::is_end_stream(self)
    }
}

impl RecvSide for RecvStream {
    type Error = ::h2::Error;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, ::h2::Error>>> {
        let polled = RecvStream::poll_data(self, cx);
        if let Poll::Ready(Some(Ok(data))) = &polled {
            let _ = self.flow_control().release_capacity(data.len());
        }
        polled
    }

    fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<http::HeaderMap>, ::h2::Error>> {
        RecvStream::poll_trailers(self, cx)
    }

    fn is_end_stream(&self) -> bool {
        RecvStream::is_end_stream(self)
    }
}

/// The next frame of the response body `recv` receives: its data, then its trailers
/// (`data_ended` once the data has all been read); `ended` once nothing is left.
fn poll_body<R: RecvSide>(
    recv: &mut R,
    data_ended: &mut bool,
    ended: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    if !*data_ended {
        match std::task::ready!(recv.poll_data(cx)) {
            Some(Ok(data)) => {
                *ended = recv.is_end_stream();
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            Some(Err(e)) => {
                *ended = true;
                return Poll::Ready(Some(Err(e.into())));
            }
            None => *data_ended = true,
        }
    }
    let trailers = std::task::ready!(recv.poll_trailers(cx));
    *ended = true;
    match trailers {
        Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
        Ok(None) => Poll::Ready(None),
        Err(e) => Poll::Ready(Some(Err(e.into()))),
    }
}

/// The response body read through the exchange, with its `content-length`.
fn native_body(headers: &http::HeaderMap, ended: bool) -> ResponseBody {
    let remaining = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    ResponseBody::Native { remaining, ended }
}

/// An HTTP/2 client's error, which says whether the destination refused the stream
/// unprocessed (RFC 9113 §6.8, §8.7), or the stream's connection ended under it.
trait Refusal: Into<BoxError> + std::fmt::Display {
    fn refused(&self) -> bool;
    /// The connection ended (closed, failed) under the stream: whether the
    /// destination processed it is not known.
    fn cut(&self) -> bool;
}

/// The native client says so with `REFUSED_STREAM`, for a GOAWAY that left the stream
/// out too.
impl Refusal for client::Error {
    fn refused(&self) -> bool {
        self.reason == crate::http2::frame::Reason::REFUSED_STREAM
    }

    fn cut(&self) -> bool {
        client::Error::cut(self)
    }
}

/// The h2 crate: the destination's GOAWAY left the stream out (or came before it
/// opened), or its `REFUSED_STREAM`. A stream a GOAWAY kept, cut when the connection
/// closes, fails as a broken pipe instead.
impl Refusal for ::h2::Error {
    fn refused(&self) -> bool {
        self.is_remote()
            && (self.is_go_away() || self.reason() == Some(::h2::Reason::REFUSED_STREAM))
    }

    fn cut(&self) -> bool {
        self.is_io()
    }
}

/// A copy of `head` (its extensions left out), kept to send it again.
fn copy_head(head: &Request<()>) -> Request<()> {
    let mut copy = Request::new(());
    *copy.method_mut() = head.method().clone();
    *copy.uri_mut() = head.uri().clone();
    *copy.version_mut() = head.version();
    *copy.headers_mut() = head.headers().clone();
    copy
}

/// `request`'s head for h2: the fields HTTP/2 forbids (RFC 9113 section 8.2.2)
/// removed, as hyper's client does.
fn h2_head<B>(request: Request<B>) -> (Request<()>, B) {
    let (mut parts, body) = request.into_parts();
    let headers = &mut parts.headers;
    for name in crate::http2::CONNECTION_SPECIFIC {
        headers.remove(name);
    }
    if headers
        .get(http::header::TE)
        .is_some_and(|te| te != "trailers")
    {
        headers.remove(http::header::TE);
    }
    (Request::from_parts(parts, ()), body)
}

/// Where `request` goes again after `error`, if it may: one the destination refused
/// unprocessed (RFC 9113 §6.8, §8.7: a GOAWAY that leaves it out, `REFUSED_STREAM`);
/// one whose connection ended under it before its answer ([`Refusal::cut`]: a
/// destination that closes with streams it kept, as Hypercorn does at its request
/// limit) only if sending it twice does no harm — idempotent (RFC 9110 §9.2.2) and
/// without a body — and only once, as the HTTP/1.1 client's keep-alive replay. It goes
/// to another of `home`'s connections (the one that failed it takes no new stream, and
/// is left out), unless there is no pool to choose from, it negotiates its version, or
/// the request has gone again [`MAX_RESENDS`] times (counted here); then the error
/// stands.
fn again<B: SendBody, E: Refusal>(
    error: E,
    home: &Option<Arc<Pool<B>>>,
    resent: &mut u8,
    request: &mut Option<Request<B>>,
    count: &mut Option<StreamCount>,
) -> Result<State<B>, BoxError> {
    let (Some(pool), Some(head)) = (home.as_ref(), request.as_ref()) else {
        return Err(error.into());
    };
    // Not refused: whether the destination processed it is not known.
    let unknown = !error.refused();
    let twice_harmless =
        error.cut() && head.method().is_idempotent() && head.body().is_end_stream();
    if (unknown && !twice_harmless) || *resent >= MAX_RESENDS {
        return Err(error.into());
    }
    let Some(state) = place(pool, request, count) else {
        return Err(error.into());
    };
    // Cut off once, not sent again after.
    *resent = if unknown { MAX_RESENDS } else { *resent + 1 };
    tracing::debug!(
        error = %error,
        "an HTTP/2 destination left a request unanswered; sending it again"
    );
    Ok(state)
}

impl<B: SendBody> H2<B> {
    /// Write the request body while the stream takes it; a body that fails resets the
    /// stream (the response then fails too).
    fn poll_pipe(pipe: &mut Option<Pipe<B>>, cx: &mut Context<'_>) {
        if let Some(writing) = pipe.as_mut() {
            if let Poll::Ready(result) = writing.poll_write(cx) {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "writing a request body to an HTTP/2 destination failed");
                }
                *pipe = None;
            }
        }
    }
}

impl<B: SendBody> Exchange for H2<B> {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let this = self.project();
        loop {
            match this.state {
                State::Awaiting(opening, pool, request) => {
                    std::task::ready!(Pin::new(opening).poll(cx))?;
                    // Only pools that do not negotiate open a connection to wait for.
                    *this.state = place(pool, request, this.count)
                        .ok_or("no HTTP/2 connection to wait for in a pool that negotiates")?;
                }
                State::Connecting(connecting, request) => {
                    let taken = std::task::ready!(connecting.as_mut().poll(cx))?;
                    *this.count = Some(taken.count);
                    *this.state = State::Ready(taken.sender, request.take());
                }
                State::Ready(H2Sender::Native(sender), request) => {
                    let Some(head) = request.as_ref() else {
                        return Poll::Ready(Err(
                            "the exchange was polled after its response".into()
                        ));
                    };
                    let end = head.body().is_end_stream();
                    let stream = match std::task::ready!(sender.poll_open(cx, head, end)) {
                        Ok(stream) => stream,
                        // Told to go away before the stream opened: another connection.
                        Err(e) => {
                            *this.state = again(e, this.home, this.resent, request, this.count)?;
                            continue;
                        }
                    };
                    let Some(request) = request.take() else {
                        return Poll::Ready(Err("the exchange lost its request".into()));
                    };
                    let body = if end {
                        // Kept whole until answered (its map then serves a later head).
                        *this.unanswered = Some(request);
                        None
                    } else {
                        let (parts, body) = request.into_parts();
                        // Its fields are in the header block: the map serves a later head.
                        crate::http1::buffers::Heads::Requests.release(parts.headers);
                        Some(body)
                    };
                    *this.native = Some(NativeStream {
                        stream,
                        body,
                        pending: Bytes::new(),
                        end: false,
                    });
                    *this.state = State::NativeWaiting;
                }
                State::Ready(H2Sender::Crate(sender), request) => {
                    if let Err(e) = std::task::ready!(sender.poll_ready(cx)) {
                        // Told to go away: another connection.
                        *this.state = again(e, this.home, this.resent, request, this.count)?;
                        continue;
                    }
                    let Some(request) = request.take() else {
                        return Poll::Ready(Err(
                            "the exchange was polled after its response".into()
                        ));
                    };
                    let (head, body) = h2_head(request);
                    let end = body.is_end_stream();
                    let body = if end {
                        *this.unanswered = Some(copy_head(&head).map(|()| body));
                        None
                    } else {
                        Some(body)
                    };
                    let (response, stream) = match sender.send_request(head, end) {
                        Ok(sent) => sent,
                        // Told to go away: a request kept whole goes again.
                        Err(e) => {
                            *this.state =
                                again(e, this.home, this.resent, this.unanswered, this.count)?;
                            continue;
                        }
                    };
                    if let Some(body) = body {
                        *this.pipe = Some(Pipe {
                            body,
                            stream,
                            pending: Bytes::new(),
                        });
                    }
                    *this.state = State::Waiting(response);
                }
                State::NativeWaiting => {
                    let Some(native) = this.native.as_mut() else {
                        return Poll::Ready(Err("the exchange lost its stream".into()));
                    };
                    native.poll_write(cx);
                    let response = match std::task::ready!(native.stream.poll_response(cx)) {
                        Ok(response) => response,
                        // Not processed, or cut off: a request without a body goes again.
                        Err(e) => {
                            *this.state =
                                again(e, this.home, this.resent, this.unanswered, this.count)?;
                            *this.native = None;
                            continue;
                        }
                    };
                    if let Some(request) = this.unanswered.take() {
                        crate::http1::buffers::Heads::Requests
                            .release(request.into_parts().0.headers);
                    }
                    *this.state = State::Answered;
                    *this.ended = native.stream.is_end_stream();
                    let body = native_body(response.headers(), *this.ended);
                    return Poll::Ready(Ok(response.map(|()| body)));
                }
                State::Waiting(response) => {
                    Self::poll_pipe(this.pipe, cx);
                    let response = match std::task::ready!(Pin::new(response).poll(cx)) {
                        Ok(response) => response,
                        // Not processed, or cut off: a request without a body goes again.
                        Err(e) => {
                            *this.state =
                                again(e, this.home, this.resent, this.unanswered, this.count)?;
                            continue;
                        }
                    };
                    *this.unanswered = None;
                    *this.state = State::Answered;
                    let (parts, recv) = response.into_parts();
                    *this.ended = recv.is_end_stream();
                    let body = native_body(&parts.headers, *this.ended);
                    *this.recv = Some(recv);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                State::Answered => {
                    return Poll::Ready(Err("the exchange was polled after its response".into()))
                }
            }
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        let this = self.project();
        Self::poll_pipe(this.pipe, cx);
        if let Some(native) = this.native.as_mut() {
            native.poll_write(cx);
        }
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(native) = this.native.as_mut() {
            return poll_body(&mut native.stream, this.data_ended, this.ended, cx);
        }
        match this.recv.as_mut() {
            Some(recv) => poll_body(recv, this.data_ended, this.ended, cx),
            None => Poll::Ready(None),
        }
    }

    fn body_ended(&self) -> bool {
        self.ended
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    /// Back to its pool, emptied: its stream ends here (reset if it had not), its
    /// timer lets go of the task's waker.
    fn finish(mut self: Pin<Box<Self>>, _reusable: bool) {
        let this = self.as_mut().project();
        let Some(pool) = this.home.take() else {
            return;
        };
        *this.state = State::Answered;
        *this.count = None;
        *this.pipe = None;
        *this.recv = None;
        *this.native = None;
        *this.data_ended = false;
        *this.ended = false;
        *this.unanswered = None;
        *this.resent = 0;
        this.timer.release();
        let mut free = pool.h2_free.lock().expect("pool lock");
        if free.len() < KEEP_FREE {
            free.push(self);
        }
    }
}
