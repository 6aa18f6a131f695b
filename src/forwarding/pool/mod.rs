//! The forwarder's connection pools: HTTP/1.1 on fuseway's own codec ([`native`], the
//! default) or `hyper::client::conn` (the hyper engine), HTTP/2 on hyper's.
//!
//! One pool per destination scheme and authority, HTTP version and certificate policy.
//!
//! - **HTTP/1.1 connections are driven inline**, by the request that holds them: the
//!   forwarder's future polls the connection while it waits for the response head and
//!   the response body polls it while the body streams, so one request costs no task,
//!   no channel hop between tasks and no wake-up of another thread — the client
//!   connection's task does all the work, as an nginx worker does. When the response
//!   has ended cleanly the connection goes back to its pool, and the next request that
//!   takes it drives it. A pooled connection is one allocation made when it is opened;
//!   requests reuse it (the in-flight send future lives inside it), so a request that
//!   finds an idle connection allocates nothing here.
//! - A connection found closed when taken (the destination closed it while idle), or
//!   that fails before the request was written, is replaced by another idle one or a
//!   new one and the request goes there: it was never sent, so any method is safe to
//!   send again. One that closes *after* the request was written (the keep-alive race)
//!   gets an idempotent body-less request once more, on a new connection ([`Replay`]).
//! - **HTTP/2 connections are shared**: one per pool, driven by its own task; each
//!   request is one boxed exchange.
//! - **Negotiated versions** (`https://` where the version policy allows HTTP/2 and
//!   HTTP/1.1): a new connection offers both by ALPN ([`Negotiating`]); the request
//!   goes on as whichever exchange the destination chose, and the pool remembers the
//!   choice: later requests are shaped for it ([`Pool::version`]), HTTP/1.1 connections
//!   then offer `http/1.1` only, and a new HTTP/2 connection negotiates again.
//! - **Upgrades** (WebSockets) get a connection of their own, driven by a task that
//!   hands the upgraded stream over on `101`.
//! - A destination whose cluster sets `MaxConnectionsPerServer` has **one pool for the
//!   process**, kept in its [`DestinationState`] and shared by every forwarder, with a
//!   [`Limit`]: a request finding no idle connection and no room for a new one queues
//!   until a connection comes back (it takes that one) or closes (it opens one).
//! - Each exchange has a [`Deadline`] timer for the activity timeout; a pooled
//!   HTTP/1.1 connection keeps one for all its requests.
//!
//! Idle HTTP/1.1 connections are not polled while they wait: a destination's close is
//! seen when a request takes the connection. Idle connections are kept for
//! [`IDLE_TIMEOUT`], at most [`MAX_IDLE_PER_POOL`] per pool; every few thousand
//! requests a sweep closes expired ones everywhere and forgets unused pools.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_service::Service;

use super::client::{Connector, Io};
use crate::config::TlsVersions;
use crate::fxhash::FxBuild;
use crate::state::{DestinationState, UpstreamVersion};

mod native;

type BoxError = Box<dyn StdError + Send + Sync>;
type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;
/// An HTTP/1.1 connection's future, boxed once when the connection is opened.
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// How long an idle HTTP/1.1 connection is kept for reuse.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle HTTP/1.1 connections kept per pool; more are closed when they come back.
pub const MAX_IDLE_PER_POOL: usize = 1024;

/// A request body the pooled connections can send (`Default`: the empty body of a
/// request sent again, see [`Replay`]).
pub(crate) trait SendBody:
    Body<Data = Bytes, Error: Into<BoxError>> + Default + Send + Unpin + 'static
{
}

impl<T> SendBody for T where
    T: Body<Data = Bytes, Error: Into<BoxError>> + Default + Send + Unpin + 'static
{
}

/// One request's exchange with its destination, type-erased so that the forwarder's
/// future and the response body name neither the request body type nor the
/// connection's.
pub(crate) trait Exchange: Send {
    /// Drive the connection and the request until the response head arrives.
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>>;

    /// Drive the connection while the response body streams.
    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>);

    /// The response body's next frame, for a [`ResponseBody::Native`] (hyper's bodies
    /// are polled themselves).
    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(None)
    }

    /// The response body has been read to its end (a [`ResponseBody::Native`]).
    fn body_ended(&self) -> bool {
        true
    }

    /// Ready once `deadline` has passed: the exchange's timer (see [`Deadline`]).
    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()>;

    /// The exchange is over; `reusable` when its response ended cleanly and the
    /// connection may carry another request.
    fn finish(self: Pin<Box<Self>>, reusable: bool);
}

/// An exchange handed out by the pools.
pub(crate) type BoxExchange = Pin<Box<dyn Exchange>>;

/// A destination's response body: hyper's (HTTP/2, upgrades, the hyper engine), or one
/// a native exchange reads from its connection when polled through it.
#[derive(Debug)]
pub(crate) enum ResponseBody {
    Hyper(Incoming),
    /// Read by [`Exchange::poll_frame`]: `remaining` bytes of a `Content-Length` body.
    Native {
        remaining: Option<u64>,
        ended: bool,
    },
}

impl ResponseBody {
    /// The next frame. `exchange`: the exchange the body belongs to, while it runs; its
    /// connection is driven first (an HTTP/1.1 connection is driven by whoever reads
    /// its response body: it may still be writing the request's).
    pub(crate) fn poll_frame(
        &mut self,
        mut exchange: Option<&mut BoxExchange>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(exchange) = exchange.as_mut() {
            exchange.as_mut().poll_connection(cx);
        }
        match self {
            ResponseBody::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            ResponseBody::Native { ended: true, .. } => Poll::Ready(None),
            ResponseBody::Native { remaining, ended } => {
                let Some(exchange) = exchange else {
                    *ended = true;
                    return Poll::Ready(Some(Err("the exchange is over".into())));
                };
                let polled = exchange.as_mut().poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(left), Some(data)) = (remaining.as_mut(), frame.data_ref()) {
                            *left = left.saturating_sub(data.len() as u64);
                        }
                        *ended = exchange.body_ended();
                    }
                    Poll::Ready(_) => *ended = true,
                    Poll::Pending => {}
                }
                polled
            }
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Hyper(body) => body.is_end_stream(),
            ResponseBody::Native { ended, .. } => *ended,
        }
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Hyper(body) => body.size_hint(),
            ResponseBody::Native { ended: true, .. } => SizeHint::with_exact(0),
            ResponseBody::Native {
                remaining: Some(n), ..
            } => SizeHint::with_exact(*n),
            ResponseBody::Native { .. } => SizeHint::default(),
        }
    }
}

/// Which pool a request goes to. Compared and hashed on the authority's bytes as
/// written in the config (`Authority`'s own `Hash` lowercases byte by byte).
#[derive(Clone, Debug)]
struct Key {
    https: bool,
    authority: Authority,
    version: UpstreamVersion,
    accept_any_certificate: bool,
    tls: TlsVersions,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.https == other.https
            && self.version == other.version
            && self.accept_any_certificate == other.accept_any_certificate
            && self.tls == other.tls
            && self.authority.as_str() == other.authority.as_str()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let version: u8 = match self.version {
            UpstreamVersion::Http1 => 0,
            UpstreamVersion::Http2 => 1,
            UpstreamVersion::Negotiate => 2,
        };
        state.write(self.authority.as_str().as_bytes());
        state.write_u8(
            u8::from(self.https) | version << 1 | u8::from(self.accept_any_certificate) << 3,
        );
    }
}

/// Where [`Pools::send`] sends a request, and how.
pub(crate) struct Target<'a> {
    pub(crate) scheme: &'a Scheme,
    pub(crate) authority: &'a Authority,
    pub(crate) version: UpstreamVersion,
    pub(crate) accept_any_certificate: bool,
    /// The TLS versions offered to an `https://` destination (`SslProtocols`).
    pub(crate) tls: TlsVersions,
    /// An upgrade (WebSocket): a connection of its own, outside the pool.
    pub(crate) upgrade: bool,
    /// The destination and its cluster's `MaxConnectionsPerServer`: the request goes
    /// through the destination's pool, shared by every forwarder, and waits for a
    /// connection at the limit.
    pub(crate) limit: Option<(&'a DestinationState, usize)>,
}

/// The forwarder's pools and the connectors they open connections with.
pub(crate) struct Pools<B> {
    connectors: super::client::Connectors,
    pools: Mutex<PoolMap<B>>,
    opened: Arc<AtomicU64>,
    /// HTTP/1.1 on fuseway's own codec (else hyper's).
    native: bool,
}

struct PoolMap<B> {
    pools: HashMap<Key, Arc<Pool<B>>, FxBuild>,
    /// Look-ups since the last sweep.
    lookups: u32,
}

/// Look-ups between two sweeps of the pools.
const SWEEP_EVERY: u32 = 4096;

impl<B: SendBody> Pools<B> {
    /// Pools whose HTTP/1.1 connections run on `engine`.
    pub(crate) fn new(engine: crate::server::Http1Engine) -> Self {
        Pools {
            connectors: super::client::Connectors::new(),
            pools: Mutex::new(PoolMap {
                pools: HashMap::default(),
                lookups: 0,
            }),
            opened: Arc::new(AtomicU64::new(0)),
            native: engine == crate::server::Http1Engine::Native,
        }
    }

    /// Connections opened so far, over all pools.
    pub(crate) fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Start sending `request` to `to` (an upgrade on a connection of its own). The
    /// request's URI is sent as it is: origin-form for HTTP/1.1, absolute for HTTP/2
    /// (see [`Pool::version`] for the pools that negotiate it).
    pub(crate) fn send(&self, request: Request<B>, to: Target<'_>) -> BoxExchange {
        self.pool_for(&to).send(request, to.upgrade)
    }

    /// The pool `to` goes to (made when first asked for).
    pub(crate) fn pool_for(&self, to: &Target<'_>) -> Arc<Pool<B>> {
        let https = *to.scheme == Scheme::HTTPS;
        let key = Key {
            https,
            authority: to.authority.clone(),
            // Nothing to negotiate without TLS: .NET speaks HTTP/1.1 there.
            version: match to.version {
                UpstreamVersion::Negotiate if !https => UpstreamVersion::Http1,
                version => version,
            },
            accept_any_certificate: to.accept_any_certificate,
            // Plain connections share a pool whatever the TLS setting.
            tls: if https { to.tls } else { TlsVersions::Both },
        };
        match to.limit {
            None => self.pool(key),
            Some((destination, max)) => {
                let pool = destination.shared_pool(
                    |pool: &Pool<B>| pool.key == key && pool.limit.is_some(),
                    || self.new_pool(key.clone(), Some(Limit::new(max))),
                );
                if let Some(limit) = &pool.limit {
                    // A reload may have changed it.
                    limit.set_max(max);
                }
                pool
            }
        }
    }

    fn pool(&self, key: Key) -> Arc<Pool<B>> {
        let mut map = self.pools.lock().expect("pools lock");
        map.lookups += 1;
        if map.lookups >= SWEEP_EVERY {
            map.lookups = 0;
            sweep(&mut map.pools);
        }
        if let Some(pool) = map.pools.get(&key) {
            return pool.clone();
        }
        let pool = Arc::new(self.new_pool(key.clone(), None));
        map.pools.insert(key, pool.clone());
        pool
    }

    fn new_pool(&self, key: Key, limit: Option<Arc<Limit>>) -> Pool<B> {
        let connector = |version| {
            self.connectors
                .get((version, key.accept_any_certificate, key.tls))
        };
        Pool {
            connector: connector(key.version),
            h1_connector: (key.version == UpstreamVersion::Negotiate)
                .then(|| connector(UpstreamVersion::Http1)),
            learned: AtomicU8::new(UNKNOWN),
            target: format!(
                "{}://{}",
                if key.https { "https" } else { "http" },
                key.authority
            )
            .parse()
            .expect("scheme and authority make a URI"),
            key,
            idle: Mutex::new(Vec::new()),
            shared: Mutex::new(None),
            opened: self.opened.clone(),
            limit,
            native: self.native,
        }
    }
}

/// Drive `exchange` to its response and read at most `limit` bytes of the body, so
/// that the connection goes back to its pool (for active health probes): the status.
pub(crate) async fn status_of(
    mut exchange: BoxExchange,
    limit: usize,
) -> Result<http::StatusCode, BoxError> {
    let response = std::future::poll_fn(|cx| exchange.as_mut().poll_response(cx)).await?;
    let status = response.status();
    let mut body = response.into_body();
    let mut read = 0;
    let ended = std::future::poll_fn(|cx| loop {
        match body.poll_frame(Some(&mut exchange), cx) {
            Poll::Ready(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                if read > limit {
                    return Poll::Ready(false);
                }
            }
            Poll::Ready(Some(Err(_))) => return Poll::Ready(false),
            Poll::Ready(None) => return Poll::Ready(true),
            Poll::Pending => return Poll::Pending,
        }
    })
    .await;
    exchange.finish(ended);
    Ok(status)
}

/// Close idle connections past [`IDLE_TIMEOUT`] in every pool, and forget pools that
/// nothing uses any more (destinations removed by a reload): without it they would
/// keep their idle sockets, since nobody takes from them.
fn sweep<B>(pools: &mut HashMap<Key, Arc<Pool<B>>, FxBuild>) {
    let now = Instant::now();
    pools.retain(|_, pool| {
        let mut idle = pool.idle.lock().expect("pool lock");
        drop_expired(&mut idle, now);
        let shared = pool
            .shared
            .lock()
            .expect("pool lock")
            .as_ref()
            .is_some_and(|s| !s.is_closed());
        // Exchanges in flight hold it weakly: one that ends after this finds no pool
        // and closes its connection.
        !idle.is_empty() || shared || Arc::strong_count(pool) > 1
    });
}

/// The connections to one destination authority.
pub(crate) struct Pool<B> {
    connector: Connector,
    /// A pool that negotiates the version: the connector offering `http/1.1` only,
    /// for new HTTP/1.1 connections once the destination has chosen that.
    h1_connector: Option<Connector>,
    /// A pool that negotiates the version: what the destination chose last
    /// ([`UNKNOWN`], [`CHOSE_H1`] or [`CHOSE_H2`]).
    learned: AtomicU8,
    /// `scheme://authority`, what the connector is called with.
    target: Uri,
    key: Key,
    /// Idle HTTP/1.1 connections, the most recently used last.
    idle: Mutex<Vec<Idle<B>>>,
    /// The shared HTTP/2 connection.
    shared: Mutex<Option<http2::SendRequest<B>>>,
    opened: Arc<AtomicU64>,
    /// The cluster's `MaxConnectionsPerServer`, for a destination's pool shared by
    /// every forwarder.
    limit: Option<Arc<Limit>>,
    /// HTTP/1.1 on fuseway's own codec (else hyper's).
    native: bool,
}

/// The HTTP/1.1 connections a pool may have open at once, and the exchanges waiting
/// for one (in arrival order).
#[derive(Debug)]
struct Limit {
    max: AtomicUsize,
    state: Mutex<LimitState>,
}

#[derive(Debug, Default)]
struct LimitState {
    open: usize,
    queue: std::collections::VecDeque<(u64, Waker)>,
    next_ticket: u64,
}

/// One open connection under a [`Limit`]; dropped when the connection closes.
#[derive(Debug)]
struct Permit(Arc<Limit>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.state.lock().expect("limit lock").open -= 1;
        self.0.wake_one();
    }
}

impl Limit {
    fn new(max: usize) -> Arc<Limit> {
        Arc::new(Limit {
            max: AtomicUsize::new(max),
            state: Mutex::default(),
        })
    }

    /// Whether exchanges are queued: a new one queues behind them.
    fn queued(&self) -> bool {
        !self.state.lock().expect("limit lock").queue.is_empty()
    }

    /// A new connection may be opened (nobody is queued ahead).
    fn try_open(self: &Arc<Self>) -> Option<Permit> {
        let mut state = self.state.lock().expect("limit lock");
        if state.open < self.max.load(Ordering::Relaxed) && state.queue.is_empty() {
            state.open += 1;
            return Some(Permit(self.clone()));
        }
        None
    }

    /// A new connection may be opened for the exchange holding `ticket` (its turn has
    /// come); else it is, or stays, queued with `waker`, to be woken when a connection
    /// comes back to the pool or closes.
    fn open_or_queue(
        self: &Arc<Self>,
        waker: &Waker,
        ticket: &mut Option<Ticket>,
    ) -> Option<Permit> {
        let mut state = self.state.lock().expect("limit lock");
        let position = ticket
            .as_ref()
            .map(|t| state.queue.iter().position(|(q, _)| *q == t.id));
        // Taken off the queue by a wake-up (its turn), or nobody queued.
        let turn = match position {
            Some(None) => true,
            Some(Some(_)) => false,
            None => state.queue.is_empty(),
        };
        if turn && state.open < self.max.load(Ordering::Relaxed) {
            state.open += 1;
            drop(state);
            Ticket::leave(ticket);
            return Some(Permit(self.clone()));
        }
        match (position, ticket.as_ref()) {
            (Some(Some(at)), _) => state.queue[at].1.clone_from(waker),
            // Woken but beaten to the connection: first again.
            (Some(None), Some(t)) => state.queue.push_front((t.id, waker.clone())),
            _ => {
                let id = state.next_ticket;
                state.next_ticket += 1;
                state.queue.push_back((id, waker.clone()));
                drop(state);
                *ticket = Some(Ticket {
                    limit: self.clone(),
                    id,
                    done: false,
                });
            }
        }
        None
    }

    /// A connection came back to the pool, or one closed: wake the first exchange
    /// queued.
    fn wake_one(&self) {
        let next = self.state.lock().expect("limit lock").queue.pop_front();
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }

    /// The configured limit changed (a reload): queued exchanges look again.
    fn set_max(&self, max: usize) {
        if self.max.load(Ordering::Relaxed) != max && self.max.swap(max, Ordering::Relaxed) != max {
            let queue = std::mem::take(&mut self.state.lock().expect("limit lock").queue);
            for (_, waker) in queue {
                waker.wake();
            }
        }
    }
}

/// An exchange's place in a [`Limit`]'s queue. Dropped without having got a
/// connection after it was woken for one, it passes the turn on.
#[derive(Debug)]
struct Ticket {
    limit: Arc<Limit>,
    id: u64,
    /// It got a connection: nothing to pass on.
    done: bool,
}

impl Ticket {
    /// The exchange got a connection.
    fn leave(ticket: &mut Option<Ticket>) {
        if let Some(mut t) = ticket.take() {
            t.done = true;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.limit.state.lock().expect("limit lock");
        let queued = state.queue.iter().position(|(q, _)| *q == self.id);
        let next = match queued {
            Some(at) => {
                state.queue.remove(at);
                None
            }
            None if !self.done => state.queue.pop_front(),
            None => None,
        };
        drop(state);
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }
}

struct Idle<B> {
    connection: Pin<Box<dyn H1Slot<B>>>,
    since: Instant,
}

impl<B> Idle<B> {
    /// It has been idle for [`IDLE_TIMEOUT`] at `now`.
    fn expired_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= IDLE_TIMEOUT
    }
}

/// Close the connections of `idle` (oldest first) that have been idle for
/// [`IDLE_TIMEOUT`] at `now`. Nothing expired (the common case) costs one comparison.
fn drop_expired<B>(idle: &mut Vec<Idle<B>>, now: Instant) {
    let expired = |i: &Idle<B>| i.expired_at(now);
    if idle.first().is_some_and(expired) {
        let expired = idle.partition_point(expired);
        idle.drain(..expired);
    }
}

/// [`Pool::learned`]: the destination has not chosen a version yet.
const UNKNOWN: u8 = 0;
/// [`Pool::learned`]: the destination chose HTTP/1.1 (or offered no ALPN).
const CHOSE_H1: u8 = 1;
/// [`Pool::learned`]: the destination chose HTTP/2.
const CHOSE_H2: u8 = 2;

impl<B: SendBody> Pool<B> {
    /// The version to shape a request for (never [`UpstreamVersion::Negotiate`]): the
    /// pool's own, or for a pool that negotiates, what the destination chose last
    /// (HTTP/1.1 until it has chosen; [`send`](Self::send) reshapes a request whose
    /// destination turns out to choose otherwise).
    pub(crate) fn version(&self) -> UpstreamVersion {
        match self.key.version {
            UpstreamVersion::Negotiate if self.learned.load(Ordering::Relaxed) == CHOSE_H2 => {
                UpstreamVersion::Http2
            }
            UpstreamVersion::Negotiate => UpstreamVersion::Http1,
            version => version,
        }
    }

    /// Start sending `request` (an upgrade on a connection of its own), shaped for
    /// [`version`](Self::version).
    pub(crate) fn send(self: &Arc<Self>, request: Request<B>, upgrade: bool) -> BoxExchange {
        match (self.key.version, upgrade) {
            (_, true) => upgrade_exchange(self, request),
            (UpstreamVersion::Http1, false) => self.checkout_h1(request),
            (UpstreamVersion::Http2, false) => h2_exchange(self, request),
            (UpstreamVersion::Negotiate, false) => match self.learned.load(Ordering::Relaxed) {
                CHOSE_H1 => self.checkout_h1(shape(request, UpstreamVersion::Http1, &self.target)),
                CHOSE_H2 => h2_exchange(self, shape(request, UpstreamVersion::Http2, &self.target)),
                _ => Negotiating::start(self, request),
            },
        }
    }

    /// Open a connection: TCP (and TLS; ALPN `http/1.1` only, also in a pool that
    /// negotiates), then (hyper) the HTTP/1.1 handshake.
    fn connect_h1(&self, permit: Option<Permit>) -> Connecting<Link<B>> {
        let io = self.connect_io_with(self.h1_connector.as_ref().unwrap_or(&self.connector));
        let native = self.native;
        Box::pin(async move { h1_link(io.await?, permit, native).await })
    }

    /// An HTTP/1.1 exchange for `request` on `link` (a new connection).
    fn h1_on(self: &Arc<Self>, link: Link<B>, request: Request<B>) -> BoxExchange {
        if self.native {
            return native::Native::on_link(self, link, request);
        }
        H1::on_link(
            self,
            link,
            request,
            |sender: &mut http1::SendRequest<B>, request| sender.try_send_request(request),
        )
    }

    /// A new connection, or (at the pool's limit) a place in its queue.
    fn new_link(&self) -> Link<B> {
        match &self.limit {
            None => Link::Connecting(self.connect_h1(None)),
            Some(limit) => match limit.try_open() {
                Some(permit) => Link::Connecting(self.connect_h1(Some(permit))),
                None => Link::Waiting { ticket: None },
            },
        }
    }

    /// For an exchange waiting at the pool's limit: an idle connection, or a new one
    /// once a connection has closed; until then the exchange is queued.
    fn poll_link(&self, cx: &mut Context<'_>, ticket: &mut Option<Ticket>) -> Poll<Link<B>> {
        let Some(limit) = &self.limit else {
            return Poll::Ready(Link::Connecting(self.connect_h1(None)));
        };
        // Queue first, then look: a connection coming back in between wakes us.
        if let Some(permit) = limit.open_or_queue(cx.waker(), ticket) {
            return Poll::Ready(Link::Connecting(self.connect_h1(Some(permit))));
        }
        while let Some(mut idle) = self.take_idle() {
            let link = idle.as_mut().take_link();
            if link.is_open() {
                Ticket::leave(ticket);
                return Poll::Ready(link);
            }
        }
        Poll::Pending
    }

    fn connect_io(&self) -> impl Future<Output = Result<Io, BoxError>> + Send + 'static {
        self.connect_io_with(&self.connector)
    }

    fn connect_io_with(
        &self,
        connector: &Connector,
    ) -> impl Future<Output = Result<Io, BoxError>> + Send + 'static {
        self.opened.fetch_add(1, Ordering::Relaxed);
        let mut connector = connector.clone();
        connector.call(self.target.clone())
    }

    /// The most recently used idle connection that is still fresh.
    fn take_idle(&self) -> Option<Pin<Box<dyn H1Slot<B>>>> {
        let mut idle = self.idle.lock().expect("pool lock");
        let fresh = idle.pop()?;
        if !fresh.expired_at(crate::clock::now()) {
            return Some(fresh.connection);
        }
        // Everything below it is older still.
        idle.clear();
        None
    }

    fn put_idle(&self, connection: Pin<Box<dyn H1Slot<B>>>) {
        let now = crate::clock::now();
        let mut idle = self.idle.lock().expect("pool lock");
        drop_expired(&mut idle, now);
        if idle.len() < MAX_IDLE_PER_POOL {
            idle.push(Idle {
                connection,
                since: now,
            });
        }
        drop(idle);
        if let Some(limit) = &self.limit {
            limit.wake_one();
        }
    }

    /// An HTTP/1.1 exchange on an idle connection, or on a new one (behind those
    /// queued at the pool's limit).
    fn checkout_h1(self: &Arc<Self>, request: Request<B>) -> BoxExchange {
        let queued = self.limit.as_ref().is_some_and(|l| l.queued());
        match (!queued).then(|| self.take_idle()).flatten() {
            Some(mut connection) => {
                connection.as_mut().start(request);
                connection
            }
            None => self.h1_on(self.new_link(), request),
        }
    }

    /// A link for a request whose connection was found closed before it was sent.
    fn relink_h1(&self) -> Link<B> {
        while let Some(mut idle) = self.take_idle() {
            let link = idle.as_mut().take_link();
            if link.is_open() {
                return link;
            }
        }
        self.new_link()
    }
}

// ---- Timers ----

pin_project! {
    /// An exchange's timer (the activity timeout while it waits for the response head
    /// and between body frames), moved lazily: a deadline later than the one the
    /// timer is set for is only noted, and the timer is moved when it fires. A pooled
    /// HTTP/1.1 connection keeps one for all its requests, so with the same timeout
    /// each request's later deadline costs no registration in the runtime's timer
    /// wheel (and no removal when the request ends) — only a timer that fires before
    /// a deadline is re-registered, once per timeout period.
    pub(crate) struct Deadline {
        #[pin]
        sleep: tokio::time::Sleep,
    }
}

/// What a new timer is set to before its first deadline: far enough never to fire.
const UNSET: Duration = Duration::from_secs(365 * 24 * 3600);

impl Deadline {
    fn new() -> Self {
        Deadline {
            sleep: tokio::time::sleep(UNSET),
        }
    }

    /// Ready once `deadline` has passed.
    fn poll_until(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let mut sleep = self.project().sleep;
        if deadline < sleep.deadline() {
            sleep.as_mut().reset(deadline);
        }
        loop {
            std::task::ready!(sleep.as_mut().poll(cx));
            // Set for an earlier deadline (an earlier request's): move it on.
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(deadline);
        }
    }

    /// Let go of the waker of the task that polled it last (before the connection
    /// waits in its pool): when it fires, it wakes nothing.
    fn release(self: Pin<&mut Self>) {
        let _ = self
            .project()
            .sleep
            .poll(&mut Context::from_waker(Waker::noop()));
    }
}

// ---- HTTP/1.1, driven inline ----

/// The state of an HTTP/1.1 exchange's connection.
// The connection lives inline in its exchange's one allocation: boxing the native
// one (the largest) would cost a second allocation per connection for nothing.
#[allow(clippy::large_enum_variant)]
enum Link<B> {
    Connecting(Connecting<Link<B>>),
    /// Waiting for a connection of a pool at its connection limit: `ticket` is the
    /// exchange's place in the pool's queue, once it has one.
    Waiting {
        ticket: Option<Ticket>,
    },
    Open {
        sender: http1::SendRequest<B>,
        /// The connection's future; `None` once it has completed (see [`drive`]).
        connection: Option<Driver>,
        /// The connection's place under its pool's limit, released when it closes.
        _permit: Option<Permit>,
    },
    /// A connection of the native engine.
    Native {
        conn: native::Conn,
        _permit: Option<Permit>,
    },
    None,
}

impl<B: SendBody> Link<B> {
    /// An open connection (of either engine).
    fn is_open(&self) -> bool {
        matches!(self, Link::Open { .. } | Link::Native { .. })
    }

    /// Wait until the exchange has a connection: taken from the pool after a wait at
    /// its limit (`reused` then says so), or opened.
    fn poll_open(
        &mut self,
        pool: &Weak<Pool<B>>,
        reused: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BoxError>> {
        if let Link::Waiting { ticket } = self {
            let Some(pool) = pool.upgrade() else {
                return Poll::Ready(Err("the forwarder was dropped".into()));
            };
            let link = std::task::ready!(pool.poll_link(cx, ticket));
            *reused = link.is_open();
            *self = link;
        }
        if let Link::Connecting(connecting) = self {
            match std::task::ready!(connecting.as_mut().poll(cx)) {
                Ok(link) => *self = link,
                Err(e) => {
                    *self = Link::None;
                    return Poll::Ready(Err(e));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// What the pool holds of an idle HTTP/1.1 connection (an exchange between requests).
trait H1Slot<B>: Exchange {
    /// Give it the next request.
    fn start(self: Pin<&mut Self>, request: Request<B>);
    /// Take its connection out (to relink another exchange).
    fn take_link(self: Pin<&mut Self>) -> Link<B>;
}

pin_project! {
    /// An HTTP/1.1 exchange, and the connection it drives: `F` is hyper's send future,
    /// kept in place so that a reused connection costs no allocation.
    struct H1<B, F, S> {
        pool: Weak<Pool<B>>,
        link: Link<B>,
        pending: Option<Request<B>>,
        #[pin]
        in_flight: Option<F>,
        send: S,
        // Whether the connection may be replaced if it turns out closed (not when it
        // was opened for this request).
        reused: bool,
        replay: Replay,
        #[pin]
        timer: Deadline,
    }
}

impl<B, F, S> H1<B, F, S>
where
    B: SendBody,
    F: Future<Output = Result<Response<Incoming>, http1_error::TrySend<B>>> + Send + 'static,
    S: Fn(&mut http1::SendRequest<B>, Request<B>) -> F + Send + Copy + 'static,
{
    /// An exchange for `request` on `link`: a new connection, or a wait for one at
    /// the pool's limit (the one allocation a pooled connection costs).
    fn on_link(pool: &Arc<Pool<B>>, link: Link<B>, request: Request<B>, send: S) -> BoxExchange {
        Box::pin(H1 {
            pool: Arc::downgrade(pool),
            link,
            pending: Some(request),
            in_flight: None,
            send,
            reused: false,
            replay: Replay::default(),
            timer: Deadline::new(),
        })
    }
}

mod http1_error {
    pub(super) type TrySend<B> = hyper::client::conn::TrySendError<http::Request<B>>;
}

impl<B, F, S> Exchange for H1<B, F, S>
where
    B: SendBody,
    F: Future<Output = Result<Response<Incoming>, http1_error::TrySend<B>>> + Send + 'static,
    S: Fn(&mut http1::SendRequest<B>, Request<B>) -> F + Send + Copy + 'static,
{
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let mut this = self.project();
        loop {
            std::task::ready!(this.link.poll_open(this.pool, this.reused, cx))?;
            let Link::Open {
                sender, connection, ..
            } = this.link
            else {
                return Poll::Ready(Err("the exchange has no connection".into()));
            };
            // Drive the connection: it writes the request and reads the response. A
            // ready connection with a request still to send is driven after the send
            // (one dispatcher pass fewer).
            let mut failure = None;
            let send_first =
                this.in_flight.is_none() && this.pending.is_some() && sender.is_ready();
            if !send_first {
                if let Poll::Ready(error) = drive(connection, cx) {
                    failure = error;
                }
            }
            let unsent = match this.in_flight.as_mut().as_pin_mut() {
                Some(sending) => match sending.poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(response)) => {
                        this.in_flight.set(None);
                        this.replay.disarm();
                        return Poll::Ready(Ok(response.map(ResponseBody::Hyper)));
                    }
                    Poll::Ready(Err(mut e)) => {
                        this.in_flight.set(None);
                        let replay = match e.message() {
                            None if *this.reused && closed_under(e.error()) => this.replay.take(),
                            _ => None,
                        };
                        this.replay.disarm();
                        match (e.take_message(), replay) {
                            (Some(request), _) if *this.reused => (request, false),
                            // Written, then the connection closed under it: the
                            // keep-alive race. Idempotent and body-less: send it again,
                            // on a new connection (the idle ones may be as stale).
                            (None, Some(replay)) => {
                                tracing::debug!(error = %e.error(), "reused connection closed under an idempotent request; sending it again");
                                (replay, true)
                            }
                            _ => return Poll::Ready(Err(e.into_error().into())),
                        }
                    }
                },
                None => {
                    let Some(request) = this.pending.take() else {
                        return Poll::Ready(Err(
                            "the exchange was polled after its response".into()
                        ));
                    };
                    match sender.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {
                            this.in_flight.set(Some((this.send)(sender, request)));
                            // Drive the connection again: it writes the request.
                            continue;
                        }
                        Poll::Pending if !*this.reused && connection.is_some() => {
                            *this.pending = Some(request);
                            return Poll::Pending;
                        }
                        // A reused connection is ready when it is handed out: not
                        // ready means closed.
                        Poll::Pending | Poll::Ready(Err(_)) if *this.reused => (request, false),
                        Poll::Pending | Poll::Ready(Err(_)) => {
                            let e: BoxError = match failure {
                                Some(e) => e.into(),
                                None => "the connection closed before the request was sent".into(),
                            };
                            return Poll::Ready(Err(e));
                        }
                    }
                }
            };
            // Not written (or replayable): send it on another connection.
            let (unsent, fresh) = unsent;
            *this.pending = Some(unsent);
            let Some(pool) = this.pool.upgrade() else {
                return Poll::Ready(Err("the forwarder was dropped".into()));
            };
            *this.link = if fresh {
                // The closed connection goes first: it frees its place under the limit.
                *this.link = Link::None;
                pool.new_link()
            } else {
                tracing::debug!("pooled connection closed before the request was sent; retrying");
                pool.relink_h1()
            };
            *this.reused = this.link.is_open();
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        let this = self.project();
        if let Link::Open { connection, .. } = this.link {
            let _ = drive(connection, cx);
        }
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(mut self: Pin<Box<Self>>, reusable: bool) {
        if !reusable || self.pending.is_some() || self.in_flight.is_some() {
            return;
        }
        let this = self.as_mut().project();
        let Link::Open {
            sender,
            connection: connection @ Some(_),
            ..
        } = this.link
        else {
            return;
        };
        // Let the connection settle after the response's end, polled with a waker
        // that wakes nothing: the last waker it keeps is then not this task's, and the
        // next request that takes it does not wake this task when it sends.
        let mut cx = Context::from_waker(Waker::noop());
        if drive(connection, &mut cx).is_ready() || !sender.is_ready() {
            return;
        }
        this.timer.release();
        if let Some(pool) = this.pool.upgrade() {
            *this.reused = true;
            pool.put_idle(self);
        }
    }
}

impl<B, F, S> H1Slot<B> for H1<B, F, S>
where
    B: SendBody,
    F: Future<Output = Result<Response<Incoming>, http1_error::TrySend<B>>> + Send + 'static,
    S: Fn(&mut http1::SendRequest<B>, Request<B>) -> F + Send + Copy + 'static,
{
    fn start(self: Pin<&mut Self>, request: Request<B>) {
        let mut this = self.project();
        this.replay.arm(&request);
        *this.reused = true;
        // A connection handed out of the pool is ready for a request: it goes in now
        // (written when the exchange is first polled) rather than waiting in `pending`
        // — one move of the request less.
        match this.link {
            Link::Open { sender, .. } if sender.is_ready() => {
                this.in_flight.set(Some((this.send)(sender, request)));
            }
            _ => *this.pending = Some(request),
        }
    }

    fn take_link(self: Pin<&mut Self>) -> Link<B> {
        std::mem::replace(self.project().link, Link::None)
    }
}

/// Drive an HTTP/1.1 connection until it closes. Once its future has completed it is
/// dropped: hyper hands a request still queued on it (sent into it, never written —
/// the connection was found closed) back to its send future only then, as unsent, so
/// that the exchange can take it to another connection instead of waiting for ever.
/// Ready with the connection's end (its error, if it failed); a closed connection is
/// `Ready(None)`.
fn drive(connection: &mut Option<Driver>, cx: &mut Context<'_>) -> Poll<Option<hyper::Error>> {
    let Some(future) = connection else {
        return Poll::Ready(None);
    };
    let end = std::task::ready!(future.as_mut().poll(cx));
    *connection = None;
    Poll::Ready(end.err())
}

/// The head of an idempotent request without a body, kept while it goes out on a
/// reused connection: if the destination closed that connection while it was idle
/// and the close crosses the request (the keep-alive race), the request is sent once
/// more on a new connection, as .NET's `SocketsHttpHandler` (YARP) and nginx do.
///
/// It is kept as bytes — the target, then each header's name and value — in buffers
/// that live in the pooled connection, so arming it per request copies a few hundred
/// bytes and allocates nothing once they have grown (no reference-counted clone of
/// every header, which cost about twice as much); the rare replay parses them back.
#[derive(Default)]
struct Replay {
    /// Whether the request in flight can be sent again.
    armed: bool,
    method: http::Method,
    /// The request's target, then each header's name and value.
    bytes: Vec<u8>,
    /// Where the target ends in `bytes`.
    target: usize,
    /// Each header: where its name and its value end in `bytes`, and whether the
    /// value is sensitive.
    headers: Vec<(usize, usize, bool)>,
}

impl Replay {
    fn arm<B: Body>(&mut self, request: &Request<B>) {
        self.armed = request.method().is_idempotent() && request.body().is_end_stream();
        if !self.armed {
            return;
        }
        self.method.clone_from(request.method());
        self.bytes.clear();
        self.headers.clear();
        let uri = request.uri();
        if let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) {
            self.bytes.extend_from_slice(scheme.as_str().as_bytes());
            self.bytes.extend_from_slice(b"://");
            self.bytes.extend_from_slice(authority.as_str().as_bytes());
        }
        if let Some(path) = uri.path_and_query() {
            self.bytes.extend_from_slice(path.as_str().as_bytes());
        }
        self.target = self.bytes.len();
        for (name, value) in request.headers() {
            self.bytes.extend_from_slice(name.as_str().as_bytes());
            let name_end = self.bytes.len();
            self.bytes.extend_from_slice(value.as_bytes());
            self.headers
                .push((name_end, self.bytes.len(), value.is_sensitive()));
        }
    }

    /// The request is answered. (Buffers grown past 16 KiB by one large head are let
    /// go rather than kept for the connection's life.)
    fn disarm(&mut self) {
        self.armed = false;
        if self.bytes.capacity() > 16 * 1024 {
            self.bytes = Vec::new();
        }
    }

    /// The request to send again, once (`None` if it cannot be: not armed, or its
    /// head does not parse back, which a head that went out once always does).
    fn take<B: Default>(&mut self) -> Option<Request<B>> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let mut request = Request::new(B::default());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = Uri::try_from(&self.bytes[..self.target]).ok()?;
        let headers = request.headers_mut();
        headers.reserve(self.headers.len());
        let mut start = self.target;
        for &(name_end, value_end, sensitive) in &self.headers {
            let name = http::header::HeaderName::from_bytes(&self.bytes[start..name_end]).ok()?;
            let mut value = http::HeaderValue::from_bytes(&self.bytes[name_end..value_end]).ok()?;
            value.set_sensitive(sensitive);
            headers.append(name, value);
            start = value_end;
        }
        Some(request)
    }
}

/// Whether `error` says the connection closed (or was reset) before a response came:
/// not a response the destination got wrong.
fn closed_under(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() || error.is_closed() || error.is_canceled() {
        return true;
    }
    std::error::Error::source(error)
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .is_some_and(closed_io)
}

/// Whether a socket error says the destination closed (or reset) the connection.
fn closed_io(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
    )
}

// ---- HTTP/2, shared connection ----

pin_project! {
    /// An HTTP/2 exchange on the pool's shared connection.
    struct H2<B, F, S> {
        connecting: Option<Connecting<http2::SendRequest<B>>>,
        pending: Option<Request<B>>,
        #[pin]
        in_flight: Option<F>,
        send: S,
        #[pin]
        timer: Deadline,
    }
}

/// An HTTP/2 exchange on the pool's shared connection, or on a new one (in a pool
/// that negotiates, a new connection negotiates again).
fn h2_exchange<B: SendBody>(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
    let shared = pool
        .shared
        .lock()
        .expect("pool lock")
        .as_ref()
        .filter(|s| !s.is_closed())
        .cloned();
    match shared {
        Some(sender) => h2(Ok(sender), request),
        None if pool.key.version == UpstreamVersion::Negotiate => Negotiating::start(pool, request),
        None => {
            let io = pool.connect_io();
            let pool = pool.clone();
            h2(
                Err(Box::pin(async move { h2_handshake(pool, io.await?).await })),
                request,
            )
        }
    }
}

/// An HTTP/2 exchange for `request` on `sender`, or on the connection `connecting`.
fn h2<B: SendBody>(
    sender: Result<http2::SendRequest<B>, Connecting<http2::SendRequest<B>>>,
    request: Request<B>,
) -> BoxExchange {
    let send = |sender: &mut http2::SendRequest<B>, request| sender.send_request(request);
    let mut exchange = H2 {
        connecting: None,
        pending: None,
        in_flight: None,
        send,
        timer: Deadline::new(),
    };
    match sender {
        Ok(mut sender) => exchange.in_flight = Some(send(&mut sender, request)),
        Err(connecting) => {
            exchange.connecting = Some(connecting);
            exchange.pending = Some(request);
        }
    }
    Box::pin(exchange)
}

/// The HTTP/2 handshake on `io`; the connection is driven by a task of its own and
/// becomes `pool`'s shared one.
async fn h2_handshake<B: SendBody>(
    pool: Arc<Pool<B>>,
    io: Io,
) -> Result<http2::SendRequest<B>, BoxError> {
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(io)
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "HTTP/2 connection to a destination ended");
        }
    });
    *pool.shared.lock().expect("pool lock") = Some(sender.clone());
    Ok(sender)
}

/// An HTTP/1.1 connection on `io`: fuseway's codec (`native`) or hyper's handshake.
async fn h1_link<B: SendBody>(
    io: Io,
    permit: Option<Permit>,
    native: bool,
) -> Result<Link<B>, BoxError> {
    if native {
        return Ok(Link::Native {
            conn: native::Conn::new(io),
            _permit: permit,
        });
    }
    let (sender, connection) = http1::Builder::new().handshake(io).await?;
    Ok(Link::Open {
        sender,
        connection: Some(Box::pin(connection)),
        _permit: permit,
    })
}

// ---- Negotiated by ALPN ----

pin_project! {
    /// A request on a new connection of a pool that negotiates the version: the
    /// connection offers `h2` and `http/1.1`, and once the destination has chosen, the
    /// request goes on as an HTTP/2 or HTTP/1.1 exchange on it (reshaped if it was
    /// shaped for the other version), and the pool remembers the choice.
    struct Negotiating<B> {
        pool: Arc<Pool<B>>,
        connecting: Option<Connecting<Io>>,
        // The connection's place under the pool's limit, if it turns out HTTP/1.1.
        permit: Option<Permit>,
        request: Option<Request<B>>,
        then: Option<BoxExchange>,
        #[pin]
        timer: Deadline,
    }
}

impl<B: SendBody> Negotiating<B> {
    fn start(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
        let permit = match &pool.limit {
            None => None,
            Some(limit) => match limit.try_open() {
                Some(permit) => Some(permit),
                // At the limit: wait for an HTTP/1.1 connection like the others.
                None => {
                    return pool.checkout_h1(shape(request, UpstreamVersion::Http1, &pool.target))
                }
            },
        };
        Box::pin(Negotiating {
            pool: pool.clone(),
            connecting: Some(Box::pin(pool.connect_io())),
            permit,
            request: Some(request),
            then: None,
            timer: Deadline::new(),
        })
    }
}

impl<B: SendBody> Exchange for Negotiating<B> {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let this = self.project();
        if let Some(connecting) = this.connecting.as_mut() {
            let io = std::task::ready!(connecting.as_mut().poll(cx));
            *this.connecting = None;
            let io = io?;
            let h2 = io.connected().is_negotiated_h2();
            let pool = &*this.pool;
            pool.learned
                .store(if h2 { CHOSE_H2 } else { CHOSE_H1 }, Ordering::Relaxed);
            let Some(request) = this.request.take() else {
                return Poll::Ready(Err("the exchange was polled after its response".into()));
            };
            *this.then = Some(if h2 {
                drop(this.permit.take());
                let connecting = Box::pin(h2_handshake(pool.clone(), io));
                self::h2(
                    Err(connecting),
                    shape(request, UpstreamVersion::Http2, &pool.target),
                )
            } else {
                let link = Link::Connecting(Box::pin(h1_link(io, this.permit.take(), pool.native)));
                pool.h1_on(link, shape(request, UpstreamVersion::Http1, &pool.target))
            });
        }
        match this.then {
            Some(then) => then.as_mut().poll_response(cx),
            None => Poll::Ready(Err("the exchange was polled after its response".into())),
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        if let Some(then) = self.project().then {
            then.as_mut().poll_connection(cx);
        }
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().then {
            Some(then) => then.as_mut().poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn body_ended(&self) -> bool {
        self.then.as_ref().is_none_or(|then| then.body_ended())
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let this = self.project();
        match this.then {
            Some(then) => then.as_mut().poll_deadline(cx, deadline),
            None => this.timer.poll_until(cx, deadline),
        }
    }

    fn finish(mut self: Pin<Box<Self>>, reusable: bool) {
        if let Some(then) = self.as_mut().project().then.take() {
            then.finish(reusable);
        }
    }
}

/// `request`, shaped for HTTP/1.1 or HTTP/2 (as its version says), reshaped for `to`
/// on a connection to `target` (`scheme://authority`): HTTP/2 takes the absolute URI
/// (a `Host` equal to the authority goes: it is `:authority`), HTTP/1.1 the origin form
/// and a `Host` (the authority, unless one is set). A body held back for
/// `Expect: 100-continue` goes at once on HTTP/2.
fn shape<B>(mut request: Request<B>, to: UpstreamVersion, target: &Uri) -> Request<B> {
    let is_h2 = request.version() == http::Version::HTTP_2;
    match to {
        UpstreamVersion::Http2 if !is_h2 => {
            let mut parts = http::uri::Parts::default();
            parts.scheme = target.scheme().cloned();
            parts.authority = target.authority().cloned();
            parts.path_and_query = Some(
                request
                    .uri()
                    .path_and_query()
                    .cloned()
                    .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            );
            if let Ok(uri) = Uri::from_parts(parts) {
                *request.uri_mut() = uri;
            }
            let authority = target.authority().map_or("", |a| a.as_str());
            let headers = request.headers_mut();
            if headers
                .get(http::header::HOST)
                .is_some_and(|h| h.as_bytes() == authority.as_bytes())
            {
                headers.remove(http::header::HOST);
            }
            *request.version_mut() = http::Version::HTTP_2;
            if let Some(gate) = request
                .extensions()
                .get::<crate::forwarding::expect::ContinueGate>()
            {
                gate.0.continued();
            }
        }
        UpstreamVersion::Http1 | UpstreamVersion::Negotiate if is_h2 => {
            let origin = request
                .uri()
                .path_and_query()
                .cloned()
                .map_or_else(|| Uri::from_static("/"), Uri::from);
            *request.uri_mut() = origin;
            if !request.headers().contains_key(http::header::HOST) {
                if let Some(host) = target
                    .authority()
                    .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
                {
                    request.headers_mut().insert(http::header::HOST, host);
                }
            }
            *request.version_mut() = http::Version::HTTP_11;
        }
        _ => {}
    }
    request
}

impl<B, F, S> Exchange for H2<B, F, S>
where
    B: SendBody,
    F: Future<Output = hyper::Result<Response<Incoming>>> + Send + 'static,
    S: Fn(&mut http2::SendRequest<B>, Request<B>) -> F + Send + 'static,
{
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let mut this = self.project();
        if let Some(connecting) = this.connecting.as_mut() {
            let mut sender = match connecting.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => {
                    *this.connecting = None;
                    result?
                }
            };
            let request = this.pending.take().expect("a request to send");
            this.in_flight.set(Some((this.send)(&mut sender, request)));
        }
        match this.in_flight.as_mut().as_pin_mut() {
            Some(sending) => sending
                .poll(cx)
                .map(|r| r.map(|r| r.map(ResponseBody::Hyper)).map_err(Into::into)),
            None => Poll::Ready(Err("the exchange was polled after its response".into())),
        }
    }

    fn poll_connection(self: Pin<&mut Self>, _cx: &mut Context<'_>) {}

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(self: Pin<Box<Self>>, _reusable: bool) {}
}

// ---- Upgrades: a connection of their own ----

pin_project! {
    struct Upgrade {
        #[pin]
        response: Connecting<Response<Incoming>>,
        #[pin]
        timer: Deadline,
    }
}

fn upgrade_exchange<B: SendBody>(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
    let io = pool.connect_io();
    Box::pin(Upgrade {
        response: Box::pin(async move {
            let (mut sender, connection) = http1::Builder::new().handshake(io.await?).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.with_upgrades().await {
                    tracing::debug!(error = %e, "upgrade connection to a destination ended");
                }
            });
            Ok(sender.send_request(request).await?)
        }),
        timer: Deadline::new(),
    })
}

impl Exchange for Upgrade {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        self.project()
            .response
            .poll(cx)
            .map_ok(|r| r.map(ResponseBody::Hyper))
    }

    fn poll_connection(self: Pin<&mut Self>, _cx: &mut Context<'_>) {}

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(self: Pin<Box<Self>>, _reusable: bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Empty, Full};

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counted() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    /// A request armed for the keep-alive replay comes back as it went out: method,
    /// target (origin or absolute form), every header in order with repeated names,
    /// non-ASCII bytes and sensitivity kept; only once; never when not idempotent.
    #[test]
    fn a_replayed_request_is_the_request_that_went_out() {
        use http::header::{HeaderValue, COOKIE};
        let mut secret = HeaderValue::from_static("token");
        secret.set_sensitive(true);
        for target in ["/a/b?x=1&y=%20", "http://10.0.0.1:8080/p?q", "*"] {
            let method = if target == "*" {
                http::Method::OPTIONS
            } else {
                http::Method::GET
            };
            let request = Request::builder()
                .method(method.clone())
                .uri(target)
                .header("x-one", "1")
                .header(COOKIE, "a=1")
                .header("x-one", "2")
                .header("x-latin", HeaderValue::from_bytes(b"caf\xe9").unwrap())
                .header("x-empty", "")
                .header("authorization", secret.clone())
                .body(Empty::<Bytes>::new())
                .unwrap();
            let mut replay = Replay::default();
            // Armed twice on one connection: the second head replaces the first.
            replay.arm(
                &Request::get("/first")
                    .header("x-old", "o")
                    .body(Empty::<Bytes>::new())
                    .unwrap(),
            );
            replay.disarm();
            replay.arm(&request);
            let again: Request<Empty<Bytes>> = replay.take().expect("armed");
            assert_eq!(again.method(), method);
            assert_eq!(again.uri(), request.uri(), "{target}");
            let sent: Vec<_> = request.headers().iter().collect();
            let replayed: Vec<_> = again.headers().iter().collect();
            assert_eq!(replayed, sent);
            let auth = again.headers().get("authorization").unwrap();
            assert!(auth.is_sensitive());
            assert!(!again.headers().get(COOKIE).unwrap().is_sensitive());
            assert!(replay.take::<Empty<Bytes>>().is_none(), "once");
        }
        let mut replay = Replay::default();
        replay.arm(&Request::post("/").body(Empty::<Bytes>::new()).unwrap());
        assert!(
            replay.take::<Empty<Bytes>>().is_none(),
            "POST is not sent again"
        );
        replay.arm(
            &Request::get("/")
                .body(Full::new(Bytes::from_static(b"x")))
                .unwrap(),
        );
        assert!(
            replay.take::<Full<Bytes>>().is_none(),
            "nor a request with a body"
        );
    }

    #[test]
    fn a_limit_queues_in_order_and_passes_an_unused_turn_on() {
        let limit = Limit::new(1);
        let first = limit.try_open().expect("below the limit");
        assert!(limit.try_open().is_none(), "at the limit");
        let ((a_count, a), (b_count, b)) = (counted(), counted());
        let (mut a_ticket, mut b_ticket) = (None, None);
        assert!(limit.open_or_queue(&a, &mut a_ticket).is_none());
        assert!(limit.open_or_queue(&b, &mut b_ticket).is_none());
        assert!(limit.queued());
        assert!(limit.try_open().is_none(), "a newcomer queues behind them");
        // The connection closes: the first in the queue is woken, and its turn it is.
        drop(first);
        assert_eq!(a_count.0.load(Ordering::SeqCst), 1);
        assert_eq!(b_count.0.load(Ordering::SeqCst), 0);
        assert!(
            limit.open_or_queue(&b, &mut b_ticket).is_none(),
            "not b's turn"
        );
        // `a` gives up without taking its turn: it passes to `b`.
        drop(a_ticket);
        assert_eq!(b_count.0.load(Ordering::SeqCst), 1);
        let second = limit.open_or_queue(&b, &mut b_ticket).expect("b's turn");
        assert!(b_ticket.is_none() && !limit.queued());
        // A connection coming back to the pool wakes the first one queued.
        let (c_count, c) = counted();
        let mut c_ticket = None;
        assert!(limit.open_or_queue(&c, &mut c_ticket).is_none());
        limit.wake_one();
        assert_eq!(c_count.0.load(Ordering::SeqCst), 1);
        Ticket::leave(&mut c_ticket);
        drop(second);
        assert!(limit.try_open().is_some(), "below the limit again");
    }

    fn key(authority: &'static str) -> Key {
        Key {
            https: false,
            authority: Authority::from_static(authority),
            version: UpstreamVersion::Http1,
            accept_any_certificate: false,
            tls: TlsVersions::Both,
        }
    }

    #[test]
    fn sweeps_forget_pools_nothing_uses() {
        let pools = Pools::<Empty<Bytes>>::new(crate::server::Http1Engine::Hyper);
        let kept = pools.pool(key("127.0.0.1:1"));
        drop(pools.pool(key("127.0.0.1:2")));
        assert!(
            Arc::ptr_eq(&kept, &pools.pool(key("127.0.0.1:1"))),
            "one pool per key"
        );
        let mut map = pools.pools.lock().unwrap();
        assert_eq!(map.pools.len(), 2);
        sweep(&mut map.pools);
        assert_eq!(map.pools.len(), 1, "the unused pool is forgotten");
        assert!(map.pools.contains_key(&key("127.0.0.1:1")));
    }

    #[tokio::test]
    async fn idle_connections_past_the_timeout_are_closed_oldest_first() {
        let pools = Pools::<Empty<Bytes>>::new(crate::server::Http1Engine::Hyper);
        let pool = pools.pool(key("127.0.0.1:1"));
        let slot = || -> Pin<Box<dyn H1Slot<Empty<Bytes>>>> {
            Box::pin(H1 {
                pool: Arc::downgrade(&pool),
                link: Link::None,
                pending: None,
                in_flight: None,
                send: |s: &mut http1::SendRequest<Empty<Bytes>>, r| s.try_send_request(r),
                reused: true,
                replay: Replay::default(),
                timer: Deadline::new(),
            })
        };
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut idle: Vec<Idle<Empty<Bytes>>> = [t0, t0, t0 + 60 * second]
            .into_iter()
            .map(|since| Idle {
                connection: slot(),
                since,
            })
            .collect();
        drop_expired(&mut idle, t0 + IDLE_TIMEOUT - second);
        assert_eq!(idle.len(), 3, "nothing has been idle for the timeout yet");
        drop_expired(&mut idle, t0 + IDLE_TIMEOUT);
        assert_eq!(idle.len(), 1, "the two oldest are closed");
        assert_eq!(idle[0].since, t0 + 60 * second, "the youngest is kept");
        drop_expired(&mut idle, t0 + 60 * second + IDLE_TIMEOUT);
        assert!(idle.is_empty());
    }

    #[test]
    fn keys_hash_and_compare_on_the_authority_as_written() {
        use std::hash::BuildHasher;
        let build = FxBuild::default();
        assert_eq!(
            build.hash_one(key("a.example:80")),
            build.hash_one(key("a.example:80"))
        );
        assert_ne!(key("a.example:80"), key("a.example:81"));
        let mut h2 = key("a.example:80");
        h2.version = UpstreamVersion::Http2;
        assert_ne!(key("a.example:80"), h2);
        assert_ne!(
            build.hash_one(key("a.example:80")),
            build.hash_one(h2.clone())
        );
        let mut negotiate = key("a.example:80");
        negotiate.version = UpstreamVersion::Negotiate;
        assert_ne!(h2, negotiate);
        assert_ne!(build.hash_one(h2), build.hash_one(negotiate));
    }

    #[test]
    fn requests_are_reshaped_for_the_version_a_destination_chose() {
        let target: Uri = "https://d.example:8443".parse().unwrap();
        let h1 = |host: Option<&'static str>| {
            let mut r = Request::builder()
                .uri("/p?q=1")
                .version(http::Version::HTTP_11);
            if let Some(host) = host {
                r = r.header(http::header::HOST, host);
            }
            r.body(Empty::<Bytes>::new()).unwrap()
        };
        // HTTP/1.1 -> HTTP/2: the absolute URI; a `Host` that is the authority goes.
        let r = shape(h1(Some("d.example:8443")), UpstreamVersion::Http2, &target);
        assert_eq!(r.version(), http::Version::HTTP_2);
        assert_eq!(r.uri(), "https://d.example:8443/p?q=1");
        assert!(r.headers().get(http::header::HOST).is_none());
        // Another `Host` (configured, or the client's) stays.
        let r = shape(h1(Some("other.example")), UpstreamVersion::Http2, &target);
        assert_eq!(r.headers()[http::header::HOST], "other.example");
        // HTTP/2 -> HTTP/1.1: the origin form, `Host` the authority unless set.
        let h2 = shape(h1(None), UpstreamVersion::Http2, &target);
        let r = shape(h2, UpstreamVersion::Http1, &target);
        assert_eq!(r.version(), http::Version::HTTP_11);
        assert_eq!(r.uri(), "/p?q=1");
        assert_eq!(r.headers()[http::header::HOST], "d.example:8443");
        let h2 = shape(h1(Some("other.example")), UpstreamVersion::Http2, &target);
        let r = shape(h2, UpstreamVersion::Http1, &target);
        assert_eq!(r.headers()[http::header::HOST], "other.example");
        // Already shaped: unchanged.
        let r = shape(h1(Some("x")), UpstreamVersion::Http1, &target);
        assert_eq!(
            (r.uri().to_string().as_str(), r.version()),
            ("/p?q=1", http::Version::HTTP_11)
        );
    }

    #[test]
    fn a_held_back_body_goes_at_once_on_http2() {
        let target: Uri = "https://d.example".parse().unwrap();
        let mut request = Request::builder()
            .uri("/upload")
            .header(http::header::EXPECT, "100-continue")
            .body(Full::new(Bytes::from_static(b"body")))
            .unwrap();
        let gate = crate::forwarding::expect::hold_back(&mut request).expect("held back");
        let _ = shape(request, UpstreamVersion::Http2, &target);
        // Open: a final response no longer finds the body held back.
        assert!(gate.final_response().is_none());
    }
}
