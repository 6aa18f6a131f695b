//! The forwarder: the terminal `Service<Balanced<B>>` that sends a request to its
//! destination and streams the response back.
//!
//! - Outgoing URI: destination address (scheme, authority, path prefix) + request path
//!   and query.
//! - HTTP/1.1 by default; HTTP/2 when the cluster's `HttpRequest.Version` is `"2"`
//!   (prior knowledge on `http://`, ALPN on `https://`); rustls for `https://`.
//! - Bodies are streamed both ways, never buffered whole.
//! - Headers: see [`headers`] (hop-by-hop removal both ways) and the route's
//!   [`transforms`](crate::transforms) (`X-Forwarded-*`, `Forwarded`, header, path and
//!   query rewrites, response headers and trailers); `Host` as YARP sets it.
//! - Errors as YARP maps them: connect/send failure 502, no answer within the
//!   cluster's `ActivityTimeout` 504; each logged with route, cluster, destination and
//!   cause. A client that goes away drops the future, which cancels the upstream
//!   request.
//! - The destination's and the cluster's concurrency counters are held for the whole
//!   exchange, response body included, and released on drop.
//! - HTTP/1.1 upgrades (WebSockets) become a bidirectional tunnel on `101` (see
//!   `upgrade`); `Expect: 100-continue` holds the body back until the destination asks
//!   for it (see [`CONTINUE_TIMEOUT`]); response trailers (gRPC) are forwarded.

pub(crate) mod client;
mod exchange;
mod expect;
mod future;
pub mod headers;
pub(crate) mod path;
pub(crate) mod pool;
pub(crate) mod progress;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod replay;
mod request_body;
pub(crate) mod tls;
pub(crate) mod trace_context;
pub(crate) mod upgrade;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::uri::{PathAndQuery, Scheme, Uri};
use http::{header, Request, Version};
use http_body::Body;
use tower_service::Service;

pub use exchange::ExchangeGuard;
pub use expect::CONTINUE_TIMEOUT;
pub use future::ResponseFuture;
pub use pool::{H2_PING_INTERVAL, H2_PING_TIMEOUT, IDLE_TIMEOUT, MAX_IDLE_PER_POOL};
pub use request_body::RequestBody;
pub use tls::trust_bundled_roots;

use crate::request::{Balanced, ClientCertificate, ConnectionInfo, ForwardError, ForwardErrorKind};
use crate::state::UpstreamVersion;
use crate::transforms::ClientRequest;
use expect::UpstreamBody;
use pool::Pools;

/// The terminal service of every pipeline: forwards a [`Balanced`] request.
///
/// `B` is the request body type. The forwarder's connection pools (one per
/// destination authority, HTTP version and certificate policy) are shared by all its
/// clones; the binary gives each worker thread a forwarder of its own.
pub struct Forwarder<B> {
    pools: Arc<Pools<UpstreamBody<RequestBody<B>>>>,
}

impl<B> Clone for Forwarder<B> {
    fn clone(&self) -> Self {
        Forwarder {
            pools: self.pools.clone(),
        }
    }
}

impl<B> std::fmt::Debug for Forwarder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder").finish_non_exhaustive()
    }
}

/// Builds a [`Forwarder`] ([`Forwarder::builder`]): the settings of its connection
/// pools. A destination's pool shared by every forwarder (its cluster sets
/// `MaxConnectionsPerServer`) takes the settings of the forwarder that opened it first.
#[must_use]
pub struct ForwarderBuilder<B> {
    engine: Option<crate::server::Http1Engine>,
    engine2: Option<crate::server::Http2Engine>,
    keep: pool::Keep,
    body: std::marker::PhantomData<fn(B)>,
}

impl<B> std::fmt::Debug for ForwarderBuilder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwarderBuilder")
            .field("engine", &self.engine)
            .field("http2_engine", &self.engine2)
            .field("idle_timeout", &self.keep.idle_timeout)
            .field("max_idle_per_pool", &self.keep.max_idle)
            .field("http2_ping_interval", &self.keep.h2_ping_interval)
            .field("http2_ping_timeout", &self.keep.h2_ping_timeout)
            .finish()
    }
}

impl<B> ForwarderBuilder<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// The engine of its HTTP/1.1 connections to destinations (default:
    /// [`Http1Engine::from_env`](crate::server::Http1Engine::from_env)).
    pub fn http1_engine(mut self, engine: crate::server::Http1Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The engine of its HTTP/2 connections to destinations (default:
    /// [`Http2Engine::from_env`](crate::server::Http2Engine::from_env)): fuseway's own
    /// client, or the h2 crate's (hyper's HTTP/2 stack).
    pub fn http2_engine(mut self, engine: crate::server::Http2Engine) -> Self {
        self.engine2 = Some(engine);
        self
    }

    /// How long an idle HTTP/1.1 connection is kept for reuse, and an HTTP/2 connection
    /// that no request has taken for as long is closed (default [`IDLE_TIMEOUT`], 90 s).
    pub fn idle_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.keep.idle_timeout = timeout;
        self
    }

    /// Idle HTTP/1.1 connections kept per pool (per destination, version and
    /// certificate policy; default [`MAX_IDLE_PER_POOL`]); more are closed when they come
    /// back. `0` keeps none: every request opens a connection.
    pub fn max_idle_per_pool(mut self, max: usize) -> Self {
        self.keep.max_idle = max;
        self
    }

    /// HTTP/2 keep-alive pings to destinations: a ping every `interval` (idle
    /// connections too), and the connection taken for dead —
    /// its requests failing as `502`, new ones going to a new connection — when the
    /// answer has not come within `timeout` (default [`H2_PING_INTERVAL`], 30 s, and
    /// [`H2_PING_TIMEOUT`], 20 s). `None` sends no pings.
    ///
    /// ```
    /// use std::time::Duration;
    /// let forwarder = fuseway::forwarding::Forwarder::<fuseway::body::Incoming>::builder()
    ///     .http2_keep_alive(Some(Duration::from_secs(10)), Duration::from_secs(5))
    ///     .build();
    /// # drop(forwarder);
    /// ```
    pub fn http2_keep_alive(
        mut self,
        interval: Option<std::time::Duration>,
        timeout: std::time::Duration,
    ) -> Self {
        self.keep.h2_ping_interval = interval;
        self.keep.h2_ping_timeout = timeout;
        self
    }

    /// The forwarder.
    pub fn build(self) -> Forwarder<B> {
        let engine = self
            .engine
            .unwrap_or_else(crate::server::Http1Engine::from_env);
        let engine2 = self
            .engine2
            .unwrap_or_else(crate::server::Http2Engine::from_env);
        Forwarder {
            pools: Arc::new(Pools::new(engine, engine2, self.keep)),
        }
    }
}

impl<B> Default for Forwarder<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<B> Forwarder<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// A forwarder with fresh connection pools, its HTTP/1.1 connections on the engine
    /// [`Http1Engine::from_env`](crate::server::Http1Engine::from_env) names (fuseway's
    /// own unless `FUSEWAY_HTTP1_ENGINE=hyper`).
    pub fn new() -> Self {
        Self::with_http1_engine(crate::server::Http1Engine::from_env())
    }

    /// A forwarder with fresh connection pools, its HTTP/1.1 connections to
    /// destinations on `engine`.
    ///
    /// ```
    /// use fuseway::{body::Incoming, forwarding::Forwarder, server::Http1Engine};
    /// let forwarder = Forwarder::<Incoming>::with_http1_engine(Http1Engine::Hyper);
    /// assert_eq!(forwarder.connections_opened(), 0);
    /// ```
    pub fn with_http1_engine(engine: crate::server::Http1Engine) -> Self {
        Self::builder().http1_engine(engine).build()
    }

    /// A builder for a forwarder whose pools are set otherwise than
    /// [`new`](Self::new)'s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fuseway::{body::Incoming, forwarding::Forwarder, server::Http1Engine};
    ///
    /// let forwarder = Forwarder::<Incoming>::builder()
    ///     .http1_engine(Http1Engine::Native)
    ///     .idle_timeout(Duration::from_secs(30))
    ///     .max_idle_per_pool(64)
    ///     .build();
    /// assert_eq!(forwarder.connections_opened(), 0);
    /// ```
    pub fn builder() -> ForwarderBuilder<B> {
        ForwarderBuilder {
            engine: None,
            engine2: None,
            keep: pool::Keep::default(),
            body: std::marker::PhantomData,
        }
    }

    /// How many connections this forwarder has opened (or tried to open) to
    /// destinations, over all its pools: with keep-alive working, far fewer than the
    /// requests it forwarded.
    pub fn connections_opened(&self) -> u64 {
        self.pools.connections_opened()
    }

    /// Forward `request` (the body of [`Service::call`], usable through `&self`).
    pub fn forward(&self, mut request: Balanced<B>) -> ResponseFuture {
        let destination = request.destination_index();
        // The request's parts are used as fields from here on: the pool found for it
        // may be borrowed from the context's snapshot until the request is sent.
        let cluster = request.context.cluster();
        let dest = &cluster.destinations()[destination];
        let guard = ExchangeGuard::new(dest.state(), cluster.state().enter());
        let http = cluster.http();
        let client_version = request.request.version();
        // Upgrades need HTTP/1.1 to the destination, whatever the cluster's version.
        let upgrade = upgrade::ClientUpgrade::take(&mut request.request);
        let address = dest.address();
        let pool = self.pools.pool_for(&pool::Target {
            scheme: &address.scheme,
            authority: &address.authority,
            version: match upgrade {
                Some(_) => UpstreamVersion::Http1,
                None => http.version,
            },
            accept_any_certificate: http.accept_any_certificate,
            tls: http.tls_versions,
            multiple_http2: http.multiple_http2_connections,
            proxy: http.proxy_for(&address.authority),
            limit: http
                .max_connections_per_server
                .map(|max| (&**dest.state(), max)),
            cache: upgrade.is_none().then(|| dest.pool_cache()),
        });
        let activity_timeout = http.activity_timeout;
        // What the request is shaped for (where the version is negotiated, what the
        // destination chose last).
        let version = pool.version();
        // The request is rewritten where it lies and its body wrapped once: each move
        // of a request is a `memcpy` of a few hundred bytes.
        let mut added = headers::Added::default();
        if let Err(e) = outgoing(
            &mut request.request,
            &request.context,
            destination,
            version,
            &mut added,
        ) {
            std::hint::cold_path();
            drop(pool);
            return ResponseFuture::failed(e, request.context, destination);
        }
        let gate = match version {
            UpstreamVersion::Http2 => None,
            _ => expect::hold_back(&mut request.request),
        };
        let body_limit = request.context.limits().max_request_body_size;
        // Only a request with a body can make progress after it is sent.
        let progress = (!request.request.body().is_end_stream())
            .then(|| Arc::new(progress::Progress::new(crate::clock::now())));
        let outgoing = request.request.map(|body| {
            UpstreamBody::new(RequestBody::new(body, body_limit), gate.clone())
                .with_progress(progress.clone())
        });
        let upstream = pool.send(outgoing, upgrade.is_some(), &mut added);
        drop(pool);
        let exchange = future::Exchange {
            upgrade,
            gate,
            progress,
        };
        ResponseFuture::sending(
            upstream,
            guard,
            request.context,
            destination,
            activity_timeout,
            client_version,
            exchange,
        )
    }
}

/// Rewrite `request` for the destination: the route's transforms (method, path,
/// query, headers, `X-Forwarded-*`), then the destination's address and `Host`.
/// Fields the request has none of may be put in `added` rather than in its map.
pub(crate) fn outgoing<B: 'static>(
    request: &mut Request<B>,
    context: &crate::request::RouteContext,
    destination: usize,
    version: UpstreamVersion,
    added: &mut headers::Added,
) -> Result<(), ForwardError> {
    let dest = &context.cluster().destinations()[destination];
    let address = dest.address();
    let transforms = context.route().transforms();
    // The parts it rewrites are taken out and put back (cheap: no allocation), so that
    // they can be borrowed apart; on an error the request is left without them.
    let mut method = std::mem::take(request.method_mut());
    let uri = std::mem::take(request.uri_mut());
    let mut headers = std::mem::take(request.headers_mut());
    let client_version = request.version();

    // The host the request was routed on: the URI authority (HTTP/2, absolute form;
    // without user info), else `Host`.
    let original_host = uri
        .authority()
        .and_then(|a| {
            // A short string: a plain scan costs a third of `rsplit_once`'s `memrchr`.
            let all = a.as_str();
            let host = match all.bytes().rposition(|b| b == b'@') {
                Some(at) => &all[at + 1..],
                None => all,
            };
            crate::transforms::host_value(host)
        })
        // Cloned, not taken out: the destination's `Host` then replaces the client's
        // where it lies (see below), which costs a third of removing one field and
        // adding another, and leaves the fields in the client's order.
        .or_else(|| headers::get_few(&headers, &header::HOST).cloned());
    let conn = ConnectionInfo::of(request);
    let normalized = path::normalize(uri.path());

    headers::prepare_request(&mut headers, client_version);
    if request
        .extensions()
        .get::<trace_context::OwnSpan>()
        .is_none()
    {
        trace_context::propagate(&mut headers);
    }
    // The client's `Host` never goes through as such: the destination's replaces it,
    // unless a transform sets one (or asks for the original host, routed on above).
    // Taken out first only when a transform may set one, to tell whether it did.
    let transform_host = transforms.may_set_host();
    if transform_host {
        headers.remove(header::HOST);
    }
    let client = ClientRequest {
        path: normalized.as_deref().unwrap_or_else(|| uri.path()),
        query: uri.query(),
        host: original_host.as_ref(),
        https: conn.is_some_and(|c| c.tls) || uri.scheme() == Some(&Scheme::HTTPS),
        connection: conn.as_ref(),
        client_certificate: request.extensions().get::<ClientCertificate>(),
    };
    let rewritten = transforms.apply_request_adding(&client, &mut method, &mut headers, added);

    let invalid =
        |e: http::uri::InvalidUri| ForwardError::new(ForwardErrorKind::RequestCreation, e);
    let path_and_query = match (rewritten, uri.path_and_query()) {
        // The client's path and query unchanged: moved over, not cloned.
        (None, Some(_)) if address.path_prefix.is_empty() && normalized.is_none() => uri
            .into_parts()
            .path_and_query
            .expect("the target has a path"),
        (Some(r), _) => {
            let mut uri = String::with_capacity(
                address.path_prefix.len()
                    + r.path.len()
                    + r.query.as_ref().map_or(0, |q| q.len() + 1),
            );
            uri.push_str(&address.path_prefix);
            uri.push_str(&r.path);
            if uri.is_empty() {
                uri.push('/');
            }
            if let Some(q) = r.query.filter(|q| !q.is_empty()) {
                uri.push('?');
                uri.push_str(&q);
            }
            PathAndQuery::try_from(uri).map_err(invalid)?
        }
        (None, None) if address.path_prefix.is_empty() => PathAndQuery::from_static("/"),
        (None, pq) => {
            let path = normalized.as_deref().unwrap_or_else(|| uri.path());
            let uri = match pq.and_then(|pq| pq.query()) {
                Some(q) => format!("{}{path}?{q}", address.path_prefix),
                None => format!("{}{path}", address.path_prefix),
            };
            PathAndQuery::try_from(uri).map_err(invalid)?
        }
    };
    // HTTP/1.1 sends the origin form; HTTP/2 takes `:scheme` and `:authority` from an
    // absolute URI.
    let mut target = http::uri::Parts::default();
    if version == UpstreamVersion::Http2 {
        target.scheme = Some(address.scheme.clone());
        target.authority = Some(address.authority.clone());
    }
    target.path_and_query = Some(path_and_query);
    let outgoing_uri = Uri::from_parts(target)
        .map_err(|e| ForwardError::new(ForwardErrorKind::RequestCreation, e))?;

    // `Host`: YARP's RequestHeaderOriginalHost rules. A `Host` set by a transform wins;
    // otherwise the destination's (its configured `Host`, else for HTTP/1.1 its
    // authority; HTTP/2 sends the authority as `:authority`), or with
    // `RequestHeaderOriginalHost` the client's. `insert` replaces the client's.
    if !(transform_host && headers.contains_key(header::HOST)) {
        let configured = dest.config().host.is_some().then(|| dest.host_header());
        let host = if transforms.uses_original_host() {
            original_host.or_else(|| configured.cloned())
        } else {
            match version {
                UpstreamVersion::Http2 => configured.cloned(),
                _ => Some(dest.host_header().clone()),
            }
        };
        match host {
            Some(h) => headers::set_few(&mut headers, header::HOST, h),
            None => {
                headers.remove(header::HOST);
            }
        }
    }
    *request.method_mut() = method;
    *request.uri_mut() = outgoing_uri;
    crate::http1::buffers::put_map(request.headers_mut(), headers);
    *request.version_mut() = match version {
        UpstreamVersion::Http2 => Version::HTTP_2,
        _ => Version::HTTP_11,
    };
    Ok(())
}

impl<B> crate::pipeline::Terminal<Balanced<B>> for Forwarder<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Future = ResponseFuture;
    type Error = Infallible;

    fn call_terminal(&self, request: Balanced<B>) -> ResponseFuture {
        self.forward(request)
    }
}

impl<B> Service<Balanced<B>> for Forwarder<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = crate::request::ProxyResponse;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Balanced<B>) -> ResponseFuture {
        self.forward(request)
    }
}
