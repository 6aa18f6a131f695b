//! HTTP/1.1 upgrades (WebSockets and any other `Upgrade` protocol but `h2c`, see
//! [`upgrade_protocol`]).
//!
//! An upgrade request is forwarded over HTTP/1.1 whatever the cluster's version, with
//! its `Upgrade` and `Connection: upgrade` headers. When the destination answers `101`,
//! the proxy answers `101` too and, once both connections have been handed over by
//! hyper, copies bytes both ways until both directions are closed. Any other answer
//! (`400`, `426`, ...) is forwarded as an ordinary response and nothing is upgraded.
//!
//! HTTP/2 clients use RFC 8441's extended CONNECT (`:method CONNECT`, `:protocol
//! websocket`): the request is translated into an HTTP/1.1 upgrade towards the
//! destination (`GET`, `Upgrade`, `Connection: upgrade`, a fresh `Sec-WebSocket-Key`),
//! and the destination's `101` into `200` for the client.
//!
//! The exchange's [`ExchangeGuard`] (concurrency counters, guards held by stages, the
//! passive-health record) travels from the `101` response's body into the tunnel and
//! is released when the tunnel ends. The cluster's `ActivityTimeout` is the tunnel's
//! idle timeout: when no byte has moved in either direction for that long, both
//! connections are closed.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::ExchangeGuard;
use crate::request::{ForwardErrorKind, RouteContext};
use crate::server::counts::{UpgradeLimit, UpgradeSlot};
use crate::server::{native, native_h2};

/// Whether `headers` name `token` in `Connection` (comma-separated, case-insensitive).
pub(crate) fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    // Most messages have no `Connection` field (the forwarder removes the
    // destination's): a pass over the few names present is cheaper than a look-up.
    if !headers.keys().any(|name| name == header::CONNECTION) {
        return false;
    }
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The protocol an HTTP/1.1 request asks to upgrade to: `Connection: upgrade` and a
/// non-empty `Upgrade` header (its first value) that does not name `h2c`. `None` for
/// anything else, HTTP/2 and HTTP/1.0 included.
///
/// An upgrade to `h2c` (HTTP/2 over cleartext, RFC 7540 §3.2 — Java's `HttpClient`
/// and `curl --http2` ask for it on every `http://` request) is no upgrade here: the
/// request goes on as an ordinary one, its `Upgrade` removed with the other hop-by-hop
/// fields, as YARP (which upgrades only to WebSocket and SPDY) and Envoy do.
/// Forwarded, it would cost a destination connection of its own per request, and a
/// destination that switched would give the client an HTTP/2 connection of its own to
/// it, past the routes (h2c smuggling).
pub(crate) fn upgrade_protocol(headers: &HeaderMap, version: Version) -> Option<&HeaderValue> {
    if version != Version::HTTP_11 {
        return None;
    }
    headers
        .get(header::UPGRADE)
        .filter(|p| !p.as_bytes().trim_ascii().is_empty())
        .filter(|_| connection_has(headers, "upgrade"))
        .filter(|_| !upgrade_names_h2c(headers))
}

/// Whether any `Upgrade` field of `headers` lists `h2c`.
fn upgrade_names_h2c(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::UPGRADE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"))
}

/// Where the client's connection comes from once upgraded: hyper, or fuseway's own
/// HTTP/1.1 or HTTP/2 engine.
enum ClientSide {
    Hyper(OnUpgrade),
    Native(native::OnUpgrade),
    NativeH2(native_h2::OnUpgrade),
}

impl ClientSide {
    async fn upgraded(self) -> io::Result<Box<dyn native::Io>> {
        match self {
            ClientSide::Hyper(on) => match on.await {
                Ok(upgraded) => Ok(Box::new(TokioIo::new(upgraded))),
                Err(e) => Err(io::Error::other(e)),
            },
            ClientSide::Native(on) => Ok(Box::new(on.upgraded().await?)),
            ClientSide::NativeH2(on) => Ok(Box::new(on.upgraded().await?)),
        }
    }
}

/// The client's side of an upgrade request, taken from the request before it is
/// forwarded.
pub(crate) struct ClientUpgrade {
    on_upgrade: ClientSide,
    protocol: HeaderValue,
    /// The client used HTTP/2 extended CONNECT (answered `200`, not `101`).
    extended_connect: bool,
    /// The server's count of upgraded connections, where it has a limit.
    limit: Option<UpgradeLimit>,
}

impl std::fmt::Debug for ClientUpgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientUpgrade")
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl ClientUpgrade {
    /// Take the upgrade from `request` if it is an upgrade request served by hyper
    /// (requests built in process have nothing to upgrade). An HTTP/2 extended
    /// CONNECT is rewritten in place into the HTTP/1.1 upgrade request to forward.
    /// Boxed: upgrades are rare, and every forwarding future has room for one.
    pub(crate) fn take<B>(request: &mut Request<B>) -> Option<Box<ClientUpgrade>> {
        let mut upgrade = Self::take_client_side(request)?;
        upgrade.limit = request.extensions_mut().remove::<UpgradeLimit>();
        Some(Box::new(upgrade))
    }

    /// A slot among the server's upgraded connections for this one, now that the
    /// destination has agreed (`Ok(None)`: the server keeps no count); the limit, when
    /// it has none left.
    pub(crate) fn take_slot(&self) -> Result<Option<UpgradeSlot>, usize> {
        match &self.limit {
            None => Ok(None),
            Some(limit) => limit.try_take().map(Some).ok_or(limit.limit()),
        }
    }

    fn take_client_side<B>(request: &mut Request<B>) -> Option<ClientUpgrade> {
        if let Some(native) = request.extensions_mut().remove::<native::OnUpgrade>() {
            let protocol = upgrade_protocol(request.headers(), request.version())?.clone();
            return Some(ClientUpgrade {
                on_upgrade: ClientSide::Native(native),
                protocol,
                extended_connect: false,
                limit: None,
            });
        }
        if let Some(h2) = request.extensions_mut().remove::<native_h2::OnUpgrade>() {
            let protocol = h2.protocol.clone();
            return Some(Self::extended_connect(
                request,
                ClientSide::NativeH2(h2),
                protocol,
            ));
        }
        request.extensions().get::<OnUpgrade>()?;
        if let Some(protocol) = upgrade_protocol(request.headers(), request.version()) {
            let protocol = protocol.clone();
            return Some(ClientUpgrade {
                on_upgrade: ClientSide::Hyper(hyper::upgrade::on(request)),
                protocol,
                extended_connect: false,
                limit: None,
            });
        }
        if request.version() != Version::HTTP_2 || request.method() != Method::CONNECT {
            return None;
        }
        let protocol = request.extensions().get::<hyper::ext::Protocol>()?;
        let protocol = HeaderValue::from_str(protocol.as_str()).ok()?;
        let on_upgrade = ClientSide::Hyper(hyper::upgrade::on(&mut *request));
        Some(Self::extended_connect(request, on_upgrade, protocol))
    }

    /// An HTTP/2 extended CONNECT rewritten in place into the HTTP/1.1 upgrade request
    /// to forward.
    fn extended_connect<B>(
        request: &mut Request<B>,
        on_upgrade: ClientSide,
        protocol: HeaderValue,
    ) -> ClientUpgrade {
        *request.method_mut() = Method::GET;
        *request.version_mut() = Version::HTTP_11;
        let headers = request.headers_mut();
        headers.insert(header::UPGRADE, protocol.clone());
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        if protocol.as_bytes().eq_ignore_ascii_case(b"websocket")
            && !headers.contains_key(header::SEC_WEBSOCKET_KEY)
        {
            headers.insert(header::SEC_WEBSOCKET_KEY, websocket_key());
        }
        ClientUpgrade {
            on_upgrade,
            protocol,
            extended_connect: true,
            limit: None,
        }
    }

    /// Whether the client used HTTP/2 extended CONNECT.
    pub(crate) fn is_extended_connect(&self) -> bool {
        self.extended_connect
    }

    /// The response sent to the client for the destination's `101`: `101` with the
    /// destination's end-to-end headers plus `Upgrade` (the destination's, else the
    /// one asked for) and `Connection: upgrade`; for an HTTP/2 extended CONNECT, `200`
    /// without the HTTP/1.1 handshake headers.
    pub(crate) fn response_head(&self, parts: &mut http::response::Parts) {
        let protocol = parts
            .headers
            .get(header::UPGRADE)
            .cloned()
            .unwrap_or_else(|| self.protocol.clone());
        super::headers::remove_hop_by_hop(&mut parts.headers);
        if self.extended_connect {
            parts.status = http::StatusCode::OK;
            parts.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
        } else {
            parts.headers.insert(header::UPGRADE, protocol);
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
    }
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes, base64.
fn websocket_key() -> HeaderValue {
    use base64::Engine;
    let mut key = [0u8; 16];
    fastrand::fill(&mut key);
    let encoded = base64::engine::general_purpose::STANDARD.encode(key);
    HeaderValue::try_from(encoded).expect("base64 is a valid header value")
}

/// Carries the exchange from the `101` response's body to the tunnel: stages reach
/// the guard through the body while the response travels back through the pipeline;
/// when hyper drops the body (having written the `101`), the guard moves on to the
/// tunnel task.
#[derive(Debug)]
pub(crate) struct Handoff {
    guard: Option<ExchangeGuard>,
    to_tunnel: Option<oneshot::Sender<ExchangeGuard>>,
}

impl Handoff {
    pub(crate) fn guard_mut(&mut self) -> Option<&mut ExchangeGuard> {
        self.guard.as_mut()
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if let (Some(guard), Some(tx)) = (self.guard.take(), self.to_tunnel.take()) {
            // The tunnel task is gone only if the runtime is shutting down; the guard
            // is then released here.
            let _ = tx.send(guard);
        }
    }
}

/// Start the tunnel of an accepted upgrade: returns the handoff to put in the `101`
/// response's body. The tunnel waits for both sides to be handed over by hyper, and
/// holds `slot` (its place among the server's upgraded connections) while it lasts.
pub(crate) fn spawn_tunnel(
    client: ClientUpgrade,
    upstream: OnUpgrade,
    guard: ExchangeGuard,
    idle_timeout: Duration,
    (context, destination): (RouteContext, usize),
    slot: Option<UpgradeSlot>,
) -> Handoff {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(tunnel(
        client.on_upgrade,
        upstream,
        rx,
        idle_timeout,
        (context, destination),
        slot,
    ));
    Handoff {
        guard: Some(guard),
        to_tunnel: Some(tx),
    }
}

/// How a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Both directions closed.
    Closed,
    /// Nothing moved for the idle timeout.
    Idle,
    /// The client's side failed (not the destination's fault).
    Client,
    /// The destination's side failed.
    Destination,
}

async fn tunnel(
    client: ClientSide,
    upstream: OnUpgrade,
    guard: oneshot::Receiver<ExchangeGuard>,
    idle_timeout: Duration,
    (context, destination): (RouteContext, usize),
    slot: Option<UpgradeSlot>,
) {
    // The body is dropped once hyper has taken the `101` head: from then on, the
    // tunnel owns the exchange.
    let mut guard = guard.await.ok();
    let (end, bytes) = match (client.upgraded().await, upstream.await) {
        (Ok(client), Ok(upstream)) => {
            copy(client, Box::new(TokioIo::new(upstream)), idle_timeout).await
        }
        (Err(e), _) => {
            tracing::debug!(error = %e, "the client's connection was not upgraded");
            (End::Client, (0, 0))
        }
        (_, Err(e)) => {
            tracing::debug!(error = %e, "the destination's connection was not upgraded");
            (End::Destination, (0, 0))
        }
    };
    // Both connections are closed: the server may upgrade another.
    drop(slot);
    let dest = &context.cluster().destinations()[destination];
    tracing::debug!(
        route = context.route().id(),
        cluster = context.cluster().id(),
        destination = dest.id(),
        end = ?end,
        to_destination = bytes.0,
        to_client = bytes.1,
        "upgraded connection closed"
    );
    if let Some(guard) = guard.as_mut() {
        guard.response_bytes = bytes.1;
        guard.finish_sent(
            match end {
                // A silent socket timing out is the client's choice, not a failure.
                End::Closed | End::Idle => Some(Ok(())),
                End::Client => None,
                End::Destination => Some(Err(ForwardErrorKind::ResponseBodyDestination)),
            },
            bytes.0,
        );
    }
}

/// Copy both ways until both directions are closed, a side fails, or nothing moved
/// for `idle_timeout`. Returns how it ended and the bytes sent (to the destination,
/// to the client).
async fn copy(
    client: Box<dyn native::Io>,
    upstream: Box<dyn native::Io>,
    idle_timeout: Duration,
) -> (End, (u64, u64)) {
    let activity = Arc::new(Activity::new());
    let mut client = Tracked::new(client, Side::Client, activity.clone());
    let mut upstream = Tracked::new(upstream, Side::Destination, activity.clone());
    let copy = tokio::io::copy_bidirectional(&mut client, &mut upstream);
    tokio::pin!(copy);
    let idle = tokio::time::sleep(idle_timeout);
    tokio::pin!(idle);
    loop {
        tokio::select! {
            result = &mut copy => {
                return match result {
                    Ok(bytes) => (End::Closed, bytes),
                    Err(e) => {
                        let side = activity.failed_side();
                        tracing::debug!(error = %e, side = ?side, "upgraded connection failed");
                        (if side == Some(Side::Destination) { End::Destination } else { End::Client }, (0, 0))
                    }
                };
            }
            () = &mut idle => {
                let last = activity.last();
                if last.elapsed() >= idle_timeout {
                    return (End::Idle, (0, 0));
                }
                idle.as_mut().reset(last + idle_timeout);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client = 1,
    Destination = 2,
}

/// What both halves of a tunnel share: when a byte last moved, and which side failed
/// first.
struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last read.
    last_ms: AtomicU64,
    failed: AtomicU8,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            failed: AtomicU8::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    fn fail(&self, side: Side) {
        let _ = self
            .failed
            .compare_exchange(0, side as u8, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn failed_side(&self) -> Option<Side> {
        match self.failed.load(Ordering::Relaxed) {
            1 => Some(Side::Client),
            2 => Some(Side::Destination),
            _ => None,
        }
    }
}

/// One side of a tunnel: records reads as activity and failures by side.
struct Tracked {
    io: Box<dyn native::Io>,
    side: Side,
    activity: Arc<Activity>,
}

impl Tracked {
    fn new(io: Box<dyn native::Io>, side: Side, activity: Arc<Activity>) -> Self {
        Tracked { io, side, activity }
    }

    fn note<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(_)) = &result {
            self.activity.fail(self.side);
        }
        result
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        self.note(result)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(result)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.io).poll_flush(cx);
        self.note(result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.io).poll_shutdown(cx);
        self.note(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_upgrade_requests() {
        let protocol = |version, conn: &str, upgrade: Option<&str>| {
            let mut h = HeaderMap::new();
            h.insert(header::CONNECTION, conn.parse().unwrap());
            if let Some(u) = upgrade {
                h.insert(header::UPGRADE, u.parse().unwrap());
            }
            upgrade_protocol(&h, version).map(|p| p.to_str().unwrap().to_owned())
        };
        let h11 = Version::HTTP_11;
        assert_eq!(
            protocol(h11, "keep-alive, Upgrade", Some("websocket")).as_deref(),
            Some("websocket")
        );
        assert_eq!(protocol(h11, "keep-alive", Some("websocket")), None);
        assert_eq!(protocol(h11, "upgrade", None), None);
        // An empty `Upgrade` names no protocol (found by cargo-fuzz).
        assert_eq!(protocol(h11, "upgrade", Some("")), None);
        assert_eq!(protocol(h11, "upgrade", Some("  ")), None);
        // h2c is no upgrade, in any case or place in the list.
        assert_eq!(protocol(h11, "Upgrade, HTTP2-Settings", Some("h2c")), None);
        assert_eq!(protocol(h11, "upgrade", Some("H2C")), None);
        assert_eq!(protocol(h11, "upgrade", Some("websocket, h2c")), None);
        assert_eq!(
            protocol(h11, "upgrade", Some("h2c-x")).as_deref(),
            Some("h2c-x")
        );
        assert_eq!(
            protocol(Version::HTTP_10, "upgrade", Some("websocket")),
            None
        );
        assert_eq!(
            protocol(Version::HTTP_2, "upgrade", Some("websocket")),
            None
        );
    }
}
