//! The connectors the forwarder's pools open connections with: TCP, and rustls for
//! `https://` destinations (ALPN `http/1.1`, `h2`, or both, by the cluster's version).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::TryFutureExt;
use http::Uri;
use hyper::rt;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

use std::sync::Mutex;

use super::pool::OpenConnection;
use crate::config::TlsVersions;
use crate::state::UpstreamVersion;

/// Opens a connection to a `scheme://authority` URI.
pub(crate) type Connector = HttpsConnector<TcpConnector>;

/// A connection to a destination.
pub(crate) type Io = MaybeHttpsStream<TcpConnection>;

/// What a connector is made for: the HTTP version (its ALPN list on `https://`), the
/// certificate policy and the TLS versions.
pub(crate) type ConnectorKind = (UpstreamVersion, bool, TlsVersions);

/// The connectors, one per [`ConnectorKind`] in use, made when first needed (a pool
/// asks for one when it is created, not per request).
pub(crate) struct Connectors {
    made: Mutex<Vec<(ConnectorKind, Connector)>>,
}

impl Connectors {
    pub(crate) fn new() -> Self {
        Connectors {
            made: Mutex::new(Vec::new()),
        }
    }

    /// The connector for `kind`.
    pub(crate) fn get(&self, kind: ConnectorKind) -> Connector {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = made.iter().find(|(k, _)| *k == kind) {
            return c.clone();
        }
        let c = connector(kind);
        made.push((kind, c.clone()));
        c
    }
}

fn connector((version, accept_any, tls): ConnectorKind) -> Connector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let tls = super::tls::client_config(accept_any, tls);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    match version {
        UpstreamVersion::Http2 => builder.enable_http2().wrap_connector(TcpConnector(http)),
        UpstreamVersion::Http1 => builder.enable_http1().wrap_connector(TcpConnector(http)),
        UpstreamVersion::Negotiate => builder
            .enable_all_versions()
            .wrap_connector(TcpConnector(http)),
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// hyper-util's [`HttpConnector`], its connections reporting no `HttpInfo` (which
/// nothing here reads).
#[derive(Clone)]
pub(crate) struct TcpConnector(HttpConnector);

impl Service<Uri> for TcpConnector {
    type Response = TcpConnection;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TcpConnection, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // Once per new connection, not per request.
        Box::pin(
            self.0
                .call(uri)
                .map_ok(|tcp| TcpConnection(tcp, None))
                .map_err(Into::into),
        )
    }
}

/// A TCP connection that reports no extra connection information; counted open in its
/// pool's stats while it lives ([`count_open`]).
pub(crate) struct TcpConnection(TokioIo<TcpStream>, Option<OpenConnection>);

/// Count `io` as open (in the stats `open` belongs to) until it is dropped.
pub(crate) fn count_open(io: &mut Io, open: OpenConnection) {
    let tcp = match io {
        MaybeHttpsStream::Http(tcp) => tcp,
        MaybeHttpsStream::Https(tls) => tls.inner_mut().get_mut().0.inner_mut(),
    };
    tcp.1 = Some(open);
}

impl TcpConnection {
    /// The TCP stream itself: the native HTTP/1.1 client reads and writes it without
    /// hyper's I/O traits in between.
    pub(crate) fn stream_mut(&mut self) -> &mut TcpStream {
        self.0.inner_mut()
    }
}

impl Connection for TcpConnection {
    fn connected(&self) -> Connected {
        // `HttpConnector`'s connections: not proxied, no ALPN; only the `HttpInfo` left out.
        Connected::new()
    }
}

impl rt::Read for TcpConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl rt::Write for TcpConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}
