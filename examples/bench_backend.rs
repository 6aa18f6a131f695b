//! The end-to-end bench's backend: answers every request with `200 OK` and a 100-byte
//! body, over HTTP/1.1 (keep-alive) and HTTP/2 cleartext (prior knowledge) on one port;
//! a gRPC call (`content-type: application/grpc`) gets one 100-byte message and the
//! trailer `grpc-status: 0`. A request body is read before the answer; a query
//! `?bytes=N` asks for a body of `N` bytes instead (at most 64 KiB).
//!
//! ```text
//! cargo run --release --example bench_backend -- --listen 127.0.0.1:0 --threads 1
//! ```
//!
//! Prints `listening ADDR` on stdout once it accepts connections; runs until killed.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use clap::Parser;
use std::future::Ready;

use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

static BODY: [u8; 100] = [b'x'; 100];

/// The bodies `?bytes=N` asks for: a prefix of this.
static LARGE: [u8; 65_536] = [b'x'; 65_536];

/// A gRPC answer: one message of [`BODY`] behind its 5-byte prefix.
static GRPC_BODY: [u8; 105] = {
    let mut body = [b'x'; 105];
    body[0] = 0;
    body[1] = 0;
    body[2] = 0;
    body[3] = 0;
    body[4] = 100;
    body
};

type Answer =
    Either<Full<Bytes>, WithTrailers<Full<Bytes>, Ready<Option<Result<HeaderMap, Infallible>>>>>;

async fn answer(request: Request<Incoming>) -> Result<Response<Answer>, Infallible> {
    let grpc = request
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        // The request's message is read before answering, as a gRPC server does.
        let _ = request.into_body().collect().await;
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let body = Full::new(Bytes::from_static(&GRPC_BODY))
            .with_trailers(std::future::ready(Some(Ok(trailers))));
        return Ok(Response::builder()
            .header("content-type", "application/grpc")
            .body(Either::Right(body))
            .expect("valid response"));
    }
    let body = match requested_bytes(request.uri().query()) {
        Some(n) => &LARGE[..n.min(LARGE.len())],
        None => &BODY[..],
    };
    if !request.body().is_end_stream() {
        let _ = request.into_body().collect().await;
    }
    Ok(Response::builder()
        .header("content-type", "text/plain")
        .body(Either::Left(Full::new(Bytes::from_static(body))))
        .expect("valid response"))
}

/// `N` of a query holding `bytes=N`.
fn requested_bytes(query: Option<&str>) -> Option<usize> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("bytes="))
        .and_then(|n| n.parse().ok())
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?
        .block_on(serve(args.listen))
}

async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("listening {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}
