//! The pooled HTTP clients the forwarder sends through.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryFutureExt;
use http::Uri;
use http_body::Body;
use hyper::rt;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tower_service::Service;

use crate::state::{HttpSettings, UpstreamVersion};

type Connector = HttpsConnector<TcpConnector>;

/// One pooled client per (HTTP version, certificate policy); connections are pooled
/// per destination authority inside each.
pub(crate) struct Clients<B> {
    h1: Client<Connector, B>,
    h2: Client<Connector, B>,
    h1_any_cert: Client<Connector, B>,
    h2_any_cert: Client<Connector, B>,
}

impl<B> Clients<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    pub(crate) fn new() -> Self {
        Clients {
            h1: client(false, false),
            h2: client(true, false),
            h1_any_cert: client(false, true),
            h2_any_cert: client(true, true),
        }
    }

    pub(crate) fn get(&self, http: &HttpSettings) -> &Client<Connector, B> {
        self.for_version(http.version, http.accept_any_certificate)
    }

    /// The client for `version` and this certificate policy (upgrades use HTTP/1.1
    /// whatever the cluster's version).
    pub(crate) fn for_version(
        &self,
        version: UpstreamVersion,
        accept_any: bool,
    ) -> &Client<Connector, B> {
        match (version, accept_any) {
            (UpstreamVersion::Http1, false) => &self.h1,
            (UpstreamVersion::Http2, false) => &self.h2,
            (UpstreamVersion::Http1, true) => &self.h1_any_cert,
            (UpstreamVersion::Http2, true) => &self.h2_any_cert,
        }
    }
}

fn client<B>(h2: bool, accept_any: bool) -> Client<Connector, B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let tls = super::tls::client_config(accept_any);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = if h2 {
        builder.enable_http2().wrap_connector(TcpConnector(http))
    } else {
        builder.enable_http1().wrap_connector(TcpConnector(http))
    };
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .http2_only(h2)
        .build(connector)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// hyper-util's [`HttpConnector`] without the `HttpInfo` its connections hand the
/// client, which the legacy client inserts into every response's extensions (three
/// allocations per response that nothing here reads).
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
