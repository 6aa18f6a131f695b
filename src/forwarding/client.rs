//! The connectors the forwarder's pools open connections with: TCP, and rustls for
//! `https://` destinations (ALPN `http/1.1` or `h2` by the cluster's version).

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

use crate::state::UpstreamVersion;

/// Opens a connection to a `scheme://authority` URI.
pub(crate) type Connector = HttpsConnector<TcpConnector>;

/// A connection to a destination.
pub(crate) type Io = MaybeHttpsStream<TcpConnection>;

/// One connector per (HTTP version, certificate policy).
pub(crate) struct Connectors {
    h1: Connector,
    h2: Connector,
    h1_any_cert: Connector,
    h2_any_cert: Connector,
}

impl Connectors {
    pub(crate) fn new() -> Self {
        Connectors {
            h1: connector(false, false),
            h2: connector(true, false),
            h1_any_cert: connector(false, true),
            h2_any_cert: connector(true, true),
        }
    }

    /// The connector for `version` and this certificate policy.
    pub(crate) fn get(&self, version: UpstreamVersion, accept_any: bool) -> &Connector {
        match (version, accept_any) {
            (UpstreamVersion::Http1, false) => &self.h1,
            (UpstreamVersion::Http2, false) => &self.h2,
            (UpstreamVersion::Http1, true) => &self.h1_any_cert,
            (UpstreamVersion::Http2, true) => &self.h2_any_cert,
        }
    }
}

fn connector(h2: bool, accept_any: bool) -> Connector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let tls = super::tls::client_config(accept_any);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if h2 {
        builder.enable_http2().wrap_connector(TcpConnector(http))
    } else {
        builder.enable_http1().wrap_connector(TcpConnector(http))
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
        Box::pin(self.0.call(uri).map_ok(TcpConnection).map_err(Into::into))
    }
}

/// A TCP connection that reports no extra connection information.
pub(crate) struct TcpConnection(TokioIo<TcpStream>);

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
