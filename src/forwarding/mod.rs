//! The forwarder: the terminal `Service<Balanced<B>>` that sends a request to its
//! destination and streams the response back.
//!
//! - Outgoing URI: destination address (scheme, authority, path prefix) + request path
//!   and query.
//! - HTTP/1.1 by default; HTTP/2 when the cluster's `HttpRequest.Version` is `"2"`
//!   (prior knowledge on `http://`, ALPN on `https://`); rustls for `https://`.
//! - Bodies are streamed both ways, never buffered whole.
//! - Headers: see [`headers`] (hop-by-hop removal both ways, `X-Forwarded-*`, `Host`).
//! - Errors as YARP maps them: connect/send failure 502, no answer within the
//!   cluster's `ActivityTimeout` 504; each logged with route, cluster, destination and
//!   cause. A client that goes away drops the future, which cancels the upstream
//!   request.
//! - The destination's and the cluster's concurrency counters are held for the whole
//!   exchange, response body included, and released on drop.

pub(crate) mod client;
mod future;
pub mod headers;
pub(crate) mod path;
mod request_body;
mod tls;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::uri::{PathAndQuery, Uri};
use http::{header, HeaderValue, Request, Version};
use http_body::Body;
use tower_service::Service;

pub use future::ResponseFuture;
pub use request_body::RequestBody;

use crate::health::PassiveRecord;
use crate::request::{Balanced, ConnectionInfo, ForwardError, ForwardErrorKind};
use crate::state::{ConcurrencyGuard, DestinationState, UpstreamVersion};
use client::Clients;

/// Everything that lives exactly as long as one exchange: the destination's and the
/// cluster's concurrency counters, guards stages asked to hold, and the passive-health
/// record. When the exchange ends the counters are released first, then the record is
/// made — exactly once, and never when the client abandoned the response.
#[derive(Debug)]
pub struct ExchangeGuard {
    destination: Option<ConcurrencyGuard>,
    cluster: Option<ConcurrencyGuard>,
    held: Option<ConcurrencyGuard>,
    passive: Option<PassiveRecord>,
    target: Arc<DestinationState>,
}

impl ExchangeGuard {
    fn new(target: &Arc<DestinationState>, cluster: ConcurrencyGuard) -> Self {
        ExchangeGuard {
            destination: Some(target.enter()),
            cluster: Some(cluster),
            held: None,
            passive: None,
            target: target.clone(),
        }
    }

    /// Log that the destination's response body failed (after the head was sent on).
    pub(crate) fn log_body_failure(&self, error: &ForwardError) {
        tracing::warn!(
            cluster = self.target.cluster_id(),
            destination = self.target.id(),
            error = %error,
            "response body from the destination failed; aborting the response"
        );
    }

    pub(crate) fn hold(&mut self, guard: ConcurrencyGuard) {
        self.held = Some(guard);
    }

    pub(crate) fn on_complete(&mut self, record: PassiveRecord) {
        self.passive = Some(record);
    }

    /// The exchange is over: `Some(result)` when the body ended or failed, `None` when
    /// it was abandoned (client gone).
    pub(crate) fn finish(&mut self, result: Option<Result<(), ForwardErrorKind>>) {
        self.destination.take();
        self.cluster.take();
        self.held.take();
        if let (Some(record), Some(result)) = (self.passive.take(), result) {
            record.complete(result);
        }
    }
}

impl Drop for ExchangeGuard {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// The terminal service of every pipeline: forwards a [`Balanced`] request.
///
/// `B` is the request body type; the forwarder keeps one pooled client per HTTP
/// version and certificate policy, shared by all its clones.
pub struct Forwarder<B> {
    clients: Arc<Clients<RequestBody<B>>>,
}

impl<B> Clone for Forwarder<B> {
    fn clone(&self) -> Self {
        Forwarder {
            clients: self.clients.clone(),
        }
    }
}

impl<B> std::fmt::Debug for Forwarder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder").finish_non_exhaustive()
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
    /// A forwarder with fresh connection pools.
    pub fn new() -> Self {
        Forwarder {
            clients: Arc::new(Clients::new()),
        }
    }

    /// Forward `request` (the body of [`Service::call`], usable through `&self`).
    pub fn forward(&self, request: Balanced<B>) -> ResponseFuture {
        let destination = request.destination_index();
        let cluster = request.context.cluster();
        let dest = &cluster.destinations()[destination];
        let guard = ExchangeGuard::new(dest.state(), cluster.state().enter());
        let http = cluster.http().clone();
        let client_version = request.request.version();
        let (req, context, _) = request.into_parts();
        match outgoing(req, &context, destination, http.version) {
            Ok(outgoing) => {
                let fut = self.clients.get(&http).request(outgoing);
                ResponseFuture::sending(
                    fut,
                    guard,
                    context,
                    destination,
                    http.activity_timeout,
                    client_version,
                )
            }
            Err(e) => ResponseFuture::failed(e, context, destination),
        }
    }
}

/// Build the request for the destination.
fn outgoing<B>(
    request: Request<B>,
    context: &crate::request::RouteContext,
    destination: usize,
    version: UpstreamVersion,
) -> Result<Request<RequestBody<B>>, ForwardError> {
    let dest = &context.cluster().destinations()[destination];
    let address = dest.address();
    let (mut parts, body) = request.into_parts();

    // The host the request was routed on: the URI authority (HTTP/2, absolute form;
    // without user info), else `Host`.
    let original_host = parts
        .uri
        .authority()
        .and_then(|a| {
            let host = a.as_str().rsplit_once('@').map_or(a.as_str(), |(_, h)| h);
            HeaderValue::from_str(host).ok()
        })
        .or_else(|| parts.headers.get(header::HOST).cloned());

    let normalized = path::normalize(parts.uri.path());
    let path_and_query = match parts.uri.path_and_query() {
        Some(pq) if address.path_prefix.is_empty() && normalized.is_none() => pq.clone(),
        None if address.path_prefix.is_empty() => PathAndQuery::from_static("/"),
        pq => {
            let path = normalized.as_deref().unwrap_or_else(|| parts.uri.path());
            let uri = match pq.and_then(|pq| pq.query()) {
                Some(q) => format!("{}{path}?{q}", address.path_prefix),
                None => format!("{}{path}", address.path_prefix),
            };
            PathAndQuery::try_from(uri)
                .map_err(|e| ForwardError::new(ForwardErrorKind::Request, e))?
        }
    };
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(address.scheme.clone());
    uri.authority = Some(address.authority.clone());
    uri.path_and_query = Some(path_and_query);
    parts.uri =
        Uri::from_parts(uri).map_err(|e| ForwardError::new(ForwardErrorKind::Request, e))?;

    let conn = parts.extensions.get::<ConnectionInfo>().copied();
    let host = match version {
        UpstreamVersion::Http1 => Some(dest.host_header()),
        UpstreamVersion::Http2 => dest.config().host.is_some().then(|| dest.host_header()),
    };
    headers::prepare_request(
        &mut parts.headers,
        parts.version,
        conn.as_ref(),
        false,
        host,
        original_host,
    );
    parts.version = match version {
        UpstreamVersion::Http1 => Version::HTTP_11,
        UpstreamVersion::Http2 => Version::HTTP_2,
    };
    let body = RequestBody::new(body, context.limits().max_request_body_size);
    Ok(Request::from_parts(parts, body))
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
