//! The end-to-end bench's backend: answers every request with `200 OK` and a 100-byte
//! body, over HTTP/1.1 (keep-alive) and HTTP/2 cleartext (prior knowledge) on one port.
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
use http::{Request, Response};
use http_body_util::Full;
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

async fn answer(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::builder()
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(&BODY)))
        .expect("valid response"))
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
