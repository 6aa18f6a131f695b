//! The forwarder's connection pools: HTTP/1.1 on fuseway's own codec ([`native`], the
//! default) or `hyper::client::conn` (the hyper engine), HTTP/2 on fuseway's own client
//! ([`crate::http2::client`], the default) or the `h2` crate.
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
//! - **HTTP/2 connections are shared**, each driven by its own task; each request is
//!   one boxed exchange on the oldest connection with room for another stream. With
//!   `EnableMultipleHttp2Connections` a new one is opened when all are at the
//!   destination's stream limit (up to `MaxConnectionsPerServer`), else the pool keeps
//!   one. Requests that come while one is being opened wait for it (one connect for
//!   any number of concurrent requests; a failed one fails them all, and the next
//!   request tries again). Keep-alive pings, sent by the
//!   connection's driver task, find a destination that went silent
//!   ([`H2_PING_INTERVAL`], [`H2_PING_TIMEOUT`]); a connection no request has taken for
//!   the idle timeout leaves the pool and closes once its open streams end.
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
//! [`IDLE_TIMEOUT`] — less when the destination said it closes them sooner
//! (`Keep-Alive: timeout=N`, [`h1::idle_hint`]) — at most [`MAX_IDLE_PER_POOL`] per
//! pool; every few thousand requests a sweep closes expired ones everywhere and forgets
//! unused pools.
//!
//! The parts: `h1` (HTTP/1.1 connections driven inline, idle lists) on hyper's client
//! or `native` (fuseway's codec), `replay` (the keep-alive race), `limit`
//! (`MaxConnectionsPerServer`), `h2` (the shared HTTP/2 connection), `negotiate`
//! (ALPN), `upgrade` (WebSockets) and `timer` (the exchanges' timers).

use crate::forwarding::headers::Added;
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
use hyper::client::conn::http1;
use hyper_util::client::legacy::connect::Connection;
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_service::Service;

use super::client::{Connector, ConnectorKind, Io};
use crate::config::TlsVersions;
use crate::fxhash::FxBuild;
use crate::state::{DestinationState, PoolCache, UpstreamVersion};

mod h1;
mod h2;
mod limit;
mod native;
mod negotiate;
mod replay;
mod stats;
#[cfg(test)]
mod tests;
mod timer;
mod upgrade;

use h1::{closed_io, drop_expired, h1_link, idle_hint, H1Slot, Idle, Link};
use h2::{h2_exchange, h2_handshake, h2_on, H2Conns};
use limit::{Limit, Permit, Ticket};
use negotiate::{shape, Negotiating};
use replay::Replay;
use stats::PoolStats;
pub(crate) use stats::{pool_totals, OpenConnection, PoolTotals};
use timer::Deadline;
use upgrade::upgrade_exchange;

type BoxError = Box<dyn StdError + Send + Sync>;
type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;
/// An HTTP/1.1 connection's future, boxed once when the connection is opened.
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// How long an idle HTTP/1.1 connection is kept for reuse, unless the forwarder was
/// built with another ([`ForwarderBuilder::idle_timeout`](super::ForwarderBuilder::idle_timeout)).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle HTTP/1.1 connections kept per pool, unless the forwarder was built with another
/// number ([`ForwarderBuilder::max_idle_per_pool`](super::ForwarderBuilder::max_idle_per_pool));
/// more are closed when they come back.
pub const MAX_IDLE_PER_POOL: usize = 1024;

/// How often an HTTP/2 connection to a destination is pinged, unless the forwarder was
/// built with another
/// ([`ForwarderBuilder::http2_keep_alive`](super::ForwarderBuilder::http2_keep_alive)).
pub const H2_PING_INTERVAL: Duration = Duration::from_secs(30);

/// How long a ping's answer is awaited before the connection is taken for dead.
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// What a forwarder's pools keep idle and for how long, and how they tell that an
/// HTTP/2 connection is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keep {
    /// Idle HTTP/1.1 connections, and HTTP/2 connections no request has taken, are
    /// closed after this.
    pub(crate) idle_timeout: Duration,
    pub(crate) max_idle: usize,
    /// HTTP/2 keep-alive pings (`None`: none).
    pub(crate) h2_ping_interval: Option<Duration>,
    pub(crate) h2_ping_timeout: Duration,
}

impl Default for Keep {
    fn default() -> Self {
        Keep {
            idle_timeout: IDLE_TIMEOUT,
            max_idle: MAX_IDLE_PER_POOL,
            h2_ping_interval: Some(H2_PING_INTERVAL),
            h2_ping_timeout: H2_PING_TIMEOUT,
        }
    }
}

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
    /// More than one HTTP/2 connection when the open ones are at the destination's
    /// stream limit (`EnableMultipleHttp2Connections`).
    multiple_h2: bool,
    /// The HTTP proxy the destination is reached through (`WebProxy`).
    proxy: Option<Authority>,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.https == other.https
            && self.version == other.version
            && self.accept_any_certificate == other.accept_any_certificate
            && self.tls == other.tls
            && self.multiple_h2 == other.multiple_h2
            && self.authority.as_str() == other.authority.as_str()
            && self.proxy.as_ref().map(Authority::as_str)
                == other.proxy.as_ref().map(Authority::as_str)
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
            u8::from(self.https)
                | version << 1
                | u8::from(self.accept_any_certificate) << 3
                | u8::from(self.multiple_h2) << 4,
        );
    }
}

/// Where a request goes ([`Pools::pool_for`]), and how.
pub(crate) struct Target<'a> {
    pub(crate) scheme: &'a Scheme,
    pub(crate) authority: &'a Authority,
    pub(crate) version: UpstreamVersion,
    pub(crate) accept_any_certificate: bool,
    /// The TLS versions offered to an `https://` destination (`SslProtocols`).
    pub(crate) tls: TlsVersions,
    /// A new HTTP/2 connection when the open ones are at the destination's stream
    /// limit (`EnableMultipleHttp2Connections`), up to `limit`'s maximum.
    pub(crate) multiple_http2: bool,
    /// The HTTP proxy the destination is reached through (the cluster's `WebProxy`,
    /// unless it bypasses this destination).
    pub(crate) proxy: Option<&'a Authority>,
    /// The destination and its cluster's `MaxConnectionsPerServer`: the request goes
    /// through the destination's pool, shared by every forwarder, and waits for a
    /// connection at the limit.
    pub(crate) limit: Option<(&'a DestinationState, usize)>,
    /// Where the destination of the current snapshot keeps its pool (none: look it
    /// up every time, as for an upgrade, whose version is not the cluster's).
    pub(crate) cache: Option<&'a PoolCache>,
}

/// A pool found for a request: kept with the snapshot's destination, or an owned
/// reference to one found in the map.
pub(crate) enum PoolRef<'a, B> {
    Kept(&'a Arc<Pool<B>>),
    Found(Arc<Pool<B>>),
}

impl<B> std::ops::Deref for PoolRef<'_, B> {
    type Target = Arc<Pool<B>>;

    fn deref(&self) -> &Arc<Pool<B>> {
        match self {
            PoolRef::Kept(pool) => pool,
            PoolRef::Found(pool) => pool,
        }
    }
}

/// The forwarder's pools and the connectors they open connections with.
pub(crate) struct Pools<B> {
    /// Tells these pools from another forwarder's in a [`PoolCache`].
    id: u64,
    connectors: super::client::Connectors,
    pools: Mutex<PoolMap<B>>,
    opened: Arc<AtomicU64>,
    /// HTTP/1.1 on fuseway's own codec (else hyper's).
    native: bool,
    /// HTTP/2 on fuseway's own client (else the h2 crate's).
    native_h2: bool,
    keep: Keep,
}

struct PoolMap<B> {
    pools: HashMap<Key, Arc<Pool<B>>, FxBuild>,
    /// Look-ups since the last sweep.
    lookups: u32,
}

/// Look-ups between two sweeps of the pools.
const SWEEP_EVERY: u32 = 4096;

impl<B: SendBody> Pools<B> {
    /// Pools whose HTTP/1.1 connections run on `engine`, HTTP/2 connections on
    /// `engine2`, kept idle as `keep` says.
    pub(crate) fn new(
        engine: crate::server::Http1Engine,
        engine2: crate::server::Http2Engine,
        keep: Keep,
    ) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Pools {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            connectors: super::client::Connectors::new(),
            pools: Mutex::new(PoolMap {
                pools: HashMap::default(),
                lookups: 0,
            }),
            opened: Arc::new(AtomicU64::new(0)),
            native: engine == crate::server::Http1Engine::Native,
            native_h2: engine2 == crate::server::Http2Engine::Native,
            keep,
        }
    }

    /// Connections opened so far, over all pools.
    pub(crate) fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The pool `to` goes to (made when first asked for). Kept in `to.cache` when it
    /// has one: the next request to the destination finds it there without the map's
    /// lock; the map is then swept every [`SWEEP_EVERY`] such requests on each thread
    /// (as it is every [`SWEEP_EVERY`] look-ups).
    pub(crate) fn pool_for<'a>(&self, to: &Target<'a>) -> PoolRef<'a, B> {
        let https = *to.scheme == Scheme::HTTPS;
        // Nothing to negotiate without TLS: .NET speaks HTTP/1.1 there.
        let version = match to.version {
            UpstreamVersion::Negotiate if !https => UpstreamVersion::Http1,
            version => version,
        };
        let key = || Key {
            https,
            authority: to.authority.clone(),
            version,
            // HTTP/1.1 pools share whatever the HTTP/2 setting.
            multiple_h2: to.multiple_http2 && version != UpstreamVersion::Http1,
            accept_any_certificate: to.accept_any_certificate,
            // Plain connections share a pool whatever the TLS setting.
            tls: if https { to.tls } else { TlsVersions::Both },
            proxy: to.proxy.cloned(),
        };
        match (to.limit, to.cache) {
            (None, Some(cache)) => {
                thread_local! {
                    static UNTIL_SWEEP: std::cell::Cell<u32> = const { std::cell::Cell::new(SWEEP_EVERY) };
                }
                let sweeps = UNTIL_SWEEP.with(|n| {
                    let left = n.get().saturating_sub(1);
                    n.set(if left == 0 { SWEEP_EVERY } else { left });
                    left == 0
                });
                if sweeps {
                    let mut map = self.pools.lock().expect("pools lock");
                    map.lookups = 0;
                    sweep(&mut map.pools);
                }
                if let Some(pool) = cache.get::<Arc<Pool<B>>>(self.id) {
                    return PoolRef::Kept(pool);
                }
                let pool = self.pool(key());
                cache.fill(self.id, || pool.clone());
                PoolRef::Found(pool)
            }
            (None, None) => PoolRef::Found(self.pool(key())),
            (Some((destination, max)), _) => {
                let key = key();
                let pool = destination.shared_pool(
                    |pool: &Pool<B>| pool.key == key && pool.limit.is_some(),
                    || self.new_pool(key.clone(), Some(Limit::new(max))),
                );
                if let Some(limit) = &pool.limit {
                    // A reload may have changed it.
                    limit.set_max(max);
                }
                PoolRef::Found(pool)
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
            self.connectors.get(ConnectorKind {
                version,
                accept_any_certificate: key.accept_any_certificate,
                tls: key.tls,
                proxy: key.proxy.clone(),
            })
        };
        let address = format!(
            "{}://{}",
            if key.https { "https" } else { "http" },
            key.authority
        );
        let target: Uri = address.parse().expect("scheme and authority make a URI");
        Pool {
            absolute_form: key.proxy.is_some()
                && !key.https
                && key.version == UpstreamVersion::Http1,
            stats: PoolStats::register(address),
            connector: connector(key.version),
            h1_connector: (key.version == UpstreamVersion::Negotiate)
                .then(|| connector(UpstreamVersion::Http1)),
            learned: AtomicU8::new(UNKNOWN),
            target,
            key,
            idle: Mutex::new(Vec::new()),
            h2: Mutex::new(H2Conns::default()),
            h2_free: Mutex::new(Vec::new()),
            opened: self.opened.clone(),
            limit,
            native: self.native,
            native_h2: self.native_h2,
            keep: self.keep,
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

/// Close idle connections past their idle timeout in every pool, and forget pools that
/// nothing uses any more (destinations removed by a reload): without it they would
/// keep their idle sockets, since nobody takes from them.
fn sweep<B>(pools: &mut HashMap<Key, Arc<Pool<B>>, FxBuild>) {
    let now = Instant::now();
    pools.retain(|_, pool| {
        let mut idle = pool.idle.lock().expect("pool lock");
        drop_expired(&mut idle, now);
        pool.stats.set_idle(idle.len());
        let shared = pool.h2.lock().expect("pool lock").is_live();
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
    /// Requests go to an HTTP proxy (a plain destination's, over HTTP/1.1) and so
    /// name their target in absolute form.
    absolute_form: bool,
    key: Key,
    /// Idle HTTP/1.1 connections, the most recently used last.
    idle: Mutex<Vec<Idle<B>>>,
    /// The HTTP/2 connections.
    h2: Mutex<H2Conns>,
    /// HTTP/2 exchanges that have ended, kept for later requests (see [`h2::H2`]).
    h2_free: Mutex<Vec<Pin<Box<h2::H2<B>>>>>,
    opened: Arc<AtomicU64>,
    /// The cluster's `MaxConnectionsPerServer`, for a destination's pool shared by
    /// every forwarder.
    limit: Option<Arc<Limit>>,
    /// HTTP/1.1 on fuseway's own codec (else hyper's).
    native: bool,
    /// HTTP/2 on fuseway's own client (else the h2 crate's).
    native_h2: bool,
    keep: Keep,
    stats: Arc<PoolStats>,
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

    /// Start sending `request` and the fields `added` beside its map (an upgrade on
    /// a connection of its own), shaped for [`version`](Self::version). Only the
    /// HTTP/1.1 engine writes `added` as it is; for the other ways the fields go into
    /// the map first.
    pub(crate) fn send(
        self: &Arc<Self>,
        request: Request<B>,
        upgrade: bool,
        added: &mut Added,
    ) -> BoxExchange {
        let request = match self.absolute_form {
            true => absolute_form(request, &self.target),
            false => request,
        };
        match (self.key.version, upgrade) {
            (_, true) => upgrade_exchange(self, with_added(request, added)),
            (UpstreamVersion::Http1, false) => self.checkout_h1(request, added),
            (UpstreamVersion::Http2, false) => h2_exchange(self, with_added(request, added)),
            (UpstreamVersion::Negotiate, false) => match self.learned.load(Ordering::Relaxed) {
                CHOSE_H1 => {
                    self.checkout_h1(shape(request, UpstreamVersion::Http1, &self.target), added)
                }
                CHOSE_H2 => {
                    let request = shape(
                        with_added(request, added),
                        UpstreamVersion::Http2,
                        &self.target,
                    );
                    h2_exchange(self, request)
                }
                _ => Negotiating::start(self, with_added(request, added)),
            },
        }
    }

    fn connect_io(&self) -> impl Future<Output = Result<Io, BoxError>> + Send + 'static {
        self.connect_io_with(&self.connector)
    }

    fn connect_io_with(
        &self,
        connector: &Connector,
    ) -> impl Future<Output = Result<Io, BoxError>> + Send + 'static {
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.stats.connect();
        let stats = self.stats.clone();
        let mut connector = connector.clone();
        futures_util::FutureExt::map(connector.call(self.target.clone()), move |connected| {
            match connected {
                Ok(mut io) => {
                    super::client::count_open(&mut io, stats.opened());
                    Ok(io)
                }
                Err(e) => {
                    stats.connect_failed();
                    Err(e)
                }
            }
        })
    }
}

/// `request` naming its target in absolute form, `target`'s scheme and authority before
/// its path, for a proxy (`*`, for `OPTIONS`, is left as it is).
fn absolute_form<B>(mut request: Request<B>, target: &Uri) -> Request<B> {
    let uri = request.uri();
    if uri.scheme().is_none() && uri.path() != "*" {
        let mut parts = http::uri::Parts::default();
        parts.scheme = target.scheme().cloned();
        parts.authority = target.authority().cloned();
        parts.path_and_query = Some(
            uri.path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        if let Ok(absolute) = Uri::from_parts(parts) {
            *request.uri_mut() = absolute;
        }
    }
    request
}

/// `request` with the fields `added` beside it moved into its map: for every way of
/// sending but the HTTP/1.1 engine's.
pub(super) fn with_added<B>(mut request: Request<B>, added: &mut Added) -> Request<B> {
    added.move_into(request.headers_mut());
    request
}
