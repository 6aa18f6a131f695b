//! A bare hyper 1 reverse proxy to one backend: the floor the end-to-end bench measures
//! fuseway against, with either of hyper-util's connection pools.
//!
//! - `--client legacy`: hyper-util's pooled `client::legacy::Client` (a task and a
//!   channel per connection, a global pool lock, a boxed future per request).
//! - `--client pool`: hyper-util's composable pool pieces — a `client::pool::cache`
//!   of `hyper::client::conn::http1` connections, each driven by its own task. (One
//!   backend, so no `map` of caches is needed; HTTP/1.1 only, so no `negotiate` or
//!   `singleton`.) A connection goes back to the cache when its response body ends.
//! - `--client pinned`: no pool at all. Each client connection gets its own
//!   `hyper::client::conn::http1` connection to the backend, opened when the client
//!   connects, and its requests go out on it one after another; the response body is
//!   the backend's, not boxed. No real proxy can work like this (a client's requests
//!   would wait on one backend connection, HTTP/2 streams included), but it is about the
//!   least any proxy on hyper (at its default settings) can spend per request: hyper's
//!   server, its client connection and tokio's I/O, nothing else.
//!
//! It only forwards: no routing, no header transforms, no `X-Forwarded-*`, no hop-by-hop
//! header handling, no timeouts, no retry — everything a real proxy adds costs more, so
//! its CPU per request is a floor for any proxy built on hyper and these pools. Served
//! like fuseway: `--workers` threads, each a single-threaded runtime with its own pool,
//! all accepting on one listener; HTTP/1.1 and h2c (prior knowledge) on one port.
//!
//! ```text
//! cargo run --release --example bare_proxy -- --listen 127.0.0.1:0 \
//!     --backend 127.0.0.1:8080 --client pool --workers 2
//! ```
//!
//! Prints `listening ADDR` on stdout once it accepts connections; runs until killed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::pool::cache;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;
type ProxyBody = BoxBody<Bytes, BoxError>;

#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The backend every request goes to.
    #[arg(long)]
    backend: SocketAddr,
    /// How requests reach the backend: through one of hyper-util's pools, or on
    /// pinned connections.
    #[arg(long, value_enum, default_value_t = ClientKind::Pool)]
    client: ClientKind,
    /// Worker threads, each with its own single-threaded runtime (and pool).
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ClientKind {
    /// `hyper_util::client::legacy::Client`.
    Legacy,
    /// `hyper_util::client::pool::cache` over `hyper::client::conn::http1`.
    Pool,
    /// One backend connection per client connection, no pool.
    Pinned,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    assert!(
        args.listen.ip().is_loopback() && args.backend.ip().is_loopback(),
        "bare_proxy only listens on and forwards to this machine"
    );
    let listener = std::net::TcpListener::bind(args.listen)?;
    listener.set_nonblocking(true)?;
    println!("listening {}", listener.local_addr()?);
    let workers = (0..args.workers.max(1))
        .map(|_| {
            let listener = listener.try_clone()?;
            let (backend, pool) = (args.backend, args.client);
            Ok(std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                // Each worker its own pool, built on its runtime.
                runtime.block_on(async move {
                    let host = HeaderValue::from_str(&backend.to_string())
                        .expect("an address is a header value");
                    match pool {
                        ClientKind::Legacy => {
                            let client = Client::builder(TokioExecutor::new()).build_http();
                            let base = format!("http://{backend}");
                            serve(listener, Legacy { client, base, host }).await
                        }
                        ClientKind::Pool => {
                            let cache = cache::builder().build(Connect(backend));
                            serve(listener, Cached { cache, host }).await
                        }
                        ClientKind::Pinned => serve_pinned(listener, backend, host).await,
                    }
                })
            }))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    for worker in workers {
        worker.join().expect("worker panicked")?;
    }
    Ok(())
}

async fn serve(listener: std::net::TcpListener, forward: impl Forward) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    let forward = Arc::new(forward);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let forward = forward.clone();
        tokio::spawn(async move {
            let service = service_fn(move |mut request: Request<Incoming>| {
                let forward = forward.clone();
                async move {
                    // HTTP/1.1 to the backend whatever the client spoke.
                    *request.version_mut() = Version::HTTP_11;
                    let response = forward.send(request).await;
                    Ok::<_, Infallible>(response.unwrap_or_else(failed))
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `--client pinned`: each client connection with its own backend connection.
async fn serve_pinned(
    listener: std::net::TcpListener,
    backend: SocketAddr,
    host: HeaderValue,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let host = host.clone();
        tokio::spawn(async move {
            let sender = match Connect(backend).call(()).await {
                Ok(Connection(sender)) => Arc::new(tokio::sync::Mutex::new(sender)),
                Err(error) => return eprintln!("bare_proxy: cannot connect: {error}"),
            };
            let service = service_fn(move |mut request: Request<Incoming>| {
                let (sender, host) = (sender.clone(), host.clone());
                async move {
                    *request.version_mut() = Version::HTTP_11;
                    request.headers_mut().insert(header::HOST, host);
                    if let Some(pq) = request.uri().path_and_query().cloned() {
                        *request.uri_mut() = Uri::from(pq);
                    }
                    // The lock is held only until the request is queued on the
                    // connection, not while its response comes back.
                    let sending = {
                        let mut sender = sender.lock().await;
                        sender.ready().await?;
                        sender.send_request(request)
                    };
                    sending.await
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Sends a request to the backend through one of the pools.
trait Forward: Send + Sync + 'static {
    fn send(
        &self,
        request: Request<Incoming>,
    ) -> impl Future<Output = Result<Response<ProxyBody>, BoxError>> + Send;
}

/// hyper-util's legacy pooled client.
struct Legacy {
    client: Client<HttpConnector, Incoming>,
    /// `http://backend`, the absolute URI's start.
    base: String,
    host: HeaderValue,
}

impl Forward for Legacy {
    async fn send(&self, mut request: Request<Incoming>) -> Result<Response<ProxyBody>, BoxError> {
        request
            .headers_mut()
            .insert(header::HOST, self.host.clone());
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        *request.uri_mut() = format!("{}{path}", self.base).parse::<Uri>()?;
        let response = self.client.request(request).await?;
        Ok(response.map(|body| body.map_err(BoxError::from).boxed()))
    }
}

/// hyper-util's composable cache of connections (its type cannot be named: generic).
struct Cached<C> {
    cache: C,
    host: HeaderValue,
}

impl<C, S> Forward for Cached<C>
where
    C: Service<(), Response = S, Error = BoxError> + Clone + Send + Sync + 'static,
    C::Future: Send,
    S: Service<Request<Incoming>, Response = Response<Incoming>, Error = BoxError>,
    S: Send + Sync + Unpin + 'static,
    S::Future: Send,
{
    /// Take a connection from the cache (or open one), send, and keep the connection
    /// out of the cache until the response body has ended.
    async fn send(&self, mut request: Request<Incoming>) -> Result<Response<ProxyBody>, BoxError> {
        request
            .headers_mut()
            .insert(header::HOST, self.host.clone());
        if let Some(pq) = request.uri().path_and_query().cloned() {
            *request.uri_mut() = Uri::from(pq);
        }
        let mut cache = self.cache.clone();
        let mut connection = cache.ready().await?.call(()).await?;
        let response = connection.ready().await?.call(request).await?;
        Ok(response.map(|body| {
            HoldConnection {
                body,
                connection: Some(connection),
            }
            .boxed()
        }))
    }
}

fn failed(error: BoxError) -> Response<ProxyBody> {
    eprintln!("bare_proxy: forwarding failed: {error}");
    let mut response = Response::new(Empty::new().map_err(BoxError::from).boxed());
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

/// Opens a connection to the backend and spawns its driver: the cache's connector.
#[derive(Clone)]
struct Connect(SocketAddr);

impl Service<()> for Connect {
    type Response = Connection;
    type Error = BoxError;
    type Future = BoxFuture<Connection>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, (): ()) -> Self::Future {
        let addr = self.0;
        Box::pin(async move {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (sender, driver) = http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(driver);
            Ok(Connection(sender))
        })
    }
}

/// An HTTP/1.1 connection as a tower `Service`, what the cache hands out. hyper's
/// `send_request` future cannot be named, so each request boxes it.
struct Connection(http1::SendRequest<Incoming>);

impl Service<Request<Incoming>> for Connection {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<Response<Incoming>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let sending = self.0.send_request(request);
        Box::pin(async move { Ok(sending.await?) })
    }
}

/// The response body, holding its connection until the body ends: dropped then (or with
/// the body), the connection goes back to the cache, free for the next request.
struct HoldConnection<S> {
    body: Incoming,
    connection: Option<S>,
}

impl<S: Unpin> Body for HoldConnection<S> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.connection = None;
        }
        polled.map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
