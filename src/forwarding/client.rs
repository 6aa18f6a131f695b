//! The connectors the forwarder's pools open connections with: TCP, and rustls for
//! `https://` destinations (ALPN `http/1.1`, `h2`, or both, by the cluster's version);
//! through a cluster's HTTP proxy, a `CONNECT` tunnel where one is needed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::TryFutureExt;
use http::uri::Authority;
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

/// What a connector is made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectorKind {
    /// The HTTP version (its ALPN list on `https://`).
    pub(crate) version: UpstreamVersion,
    /// Any server certificate accepted (`DangerousAcceptAnyServerCertificate`).
    pub(crate) accept_any_certificate: bool,
    /// The TLS versions offered.
    pub(crate) tls: TlsVersions,
    /// The HTTP proxy connections go through (`host:port`).
    pub(crate) proxy: Option<Authority>,
}

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
        let c = connector(&kind);
        made.push((kind, c.clone()));
        c
    }
}

/// How long a connection takes to open, and a proxy to answer `CONNECT`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn connector(kind: &ConnectorKind) -> Connector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let tls = super::tls::client_config(kind.accept_any_certificate, kind.tls);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let tcp = TcpConnector {
        http,
        proxy: kind.proxy.as_ref().map(|proxy| ThroughProxy {
            uri: format!("http://{proxy}")
                .parse()
                .expect("a proxy's authority makes a URI"),
            tunnel_plain: kind.version == UpstreamVersion::Http2,
        }),
    };
    match kind.version {
        UpstreamVersion::Http2 => builder.enable_http2().wrap_connector(tcp),
        UpstreamVersion::Http1 => builder.enable_http1().wrap_connector(tcp),
        UpstreamVersion::Negotiate => builder.enable_all_versions().wrap_connector(tcp),
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// hyper-util's [`HttpConnector`], its connections reporting no `HttpInfo` (which
/// nothing here reads); through an HTTP proxy when the cluster has one.
#[derive(Clone)]
pub(crate) struct TcpConnector {
    http: HttpConnector,
    proxy: Option<ThroughProxy>,
}

/// How a connector's connections go through an HTTP proxy, as .NET's `HttpClient`
/// takes them: to `https://` destinations, and HTTP/2 ones on `http://` (which need
/// the connection to themselves), through a tunnel the proxy opens with `CONNECT`;
/// HTTP/1.1 to `http://` destinations straight to the proxy, the requests naming their
/// target in absolute form.
#[derive(Clone)]
struct ThroughProxy {
    /// `http://host:port` of the proxy.
    uri: Uri,
    /// A tunnel to `http://` destinations too (HTTP/2).
    tunnel_plain: bool,
}

impl Service<Uri> for TcpConnector {
    type Response = TcpConnection;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TcpConnection, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // Once per new connection, not per request.
        let Some(proxy) = &self.proxy else {
            return Box::pin(
                self.http
                    .call(uri)
                    .map_ok(|tcp| TcpConnection(tcp, None))
                    .map_err(Into::into),
            );
        };
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let tunnel = (https || proxy.tunnel_plain).then(|| {
            let host = uri.host().unwrap_or_default();
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            format!("{host}:{port}")
        });
        let connecting = self.http.call(proxy.uri.clone());
        Box::pin(async move {
            let mut tcp = connecting.await?;
            if let Some(target) = tunnel {
                tokio::time::timeout(CONNECT_TIMEOUT, open_tunnel(tcp.inner_mut(), &target))
                    .await
                    .map_err(|_| format!("the proxy did not answer `CONNECT {target}`"))??;
            }
            Ok(TcpConnection(tcp, None))
        })
    }
}

/// The longest answer to `CONNECT` read.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// Ask the proxy at the other end of `stream` for a tunnel to `target` (`host:port`)
/// and read its answer: `Ok` on a 2xx, the stream then carrying the destination's
/// bytes. The answer's head is read without reading past it (the destination may
/// speak first, as an HTTP/2 server does).
async fn open_tunnel(stream: &mut TcpStream, target: &str) -> Result<(), BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await?;
    let mut head = Vec::new();
    let mut peeked = [0u8; 1024];
    loop {
        let n = stream.peek(&mut peeked).await?;
        if n == 0 {
            return Err(format!(
                "the proxy closed the connection before answering `CONNECT {target}`"
            )
            .into());
        }
        // The end of the head may straddle what was read before and these bytes.
        let from = head.len().saturating_sub(3);
        let before = head.len();
        head.extend_from_slice(&peeked[..n]);
        let end = memchr::memmem::find(&head[from..], b"\r\n\r\n").map(|i| from + i + 4);
        // Take from the socket what belongs to the head, and no more.
        let take = end.map_or(n, |end| end - before);
        stream.read_exact(&mut peeked[..take]).await?;
        if let Some(end) = end {
            head.truncate(end);
            break;
        }
        if head.len() > MAX_CONNECT_ANSWER {
            return Err(format!(
                "the proxy's answer to `CONNECT {target}` is over {MAX_CONNECT_ANSWER} bytes"
            )
            .into());
        }
    }
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut answer = httparse::Response::new(&mut fields);
    match answer.parse(&head) {
        Ok(httparse::Status::Complete(_)) => match answer.code {
            Some(code) if (200..300).contains(&code) => Ok(()),
            code => Err(format!(
                "the proxy answered `CONNECT {target}` with {} {}",
                code.unwrap_or_default(),
                answer.reason.unwrap_or_default()
            )
            .into()),
        },
        _ => Err(format!("the proxy's answer to `CONNECT {target}` is not HTTP").into()),
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
