//! The end-to-end bench's load generator: `N` keep-alive connections to one URL, each
//! sending one request at a time (HTTP/1.1, or HTTP/2 cleartext with prior knowledge
//! and `--streams` requests in flight per connection), for a warm-up and then a fixed
//! measurement window. Latency goes into an HDR histogram (µs).
//!
//! ```text
//! cargo run --release --example loadgen -- --url http://127.0.0.1:8080/ --http 2 \
//!     --connections 32 --warmup 5 --duration 10
//! ```
//!
//! With `--grpc` (HTTP/2 only) each request is a gRPC unary call: a `POST` of one
//! length-prefixed 10-byte message, `content-type: application/grpc`; it succeeds when
//! the response ends with the trailer `grpc-status: 0`. With `--body N` each request is a
//! `POST` of `N` bytes (with `Content-Length`) instead of a `GET`.
//!
//! Prints `MEASURE start` and `MEASURE end` on stdout as the window opens and closes
//! (the e2e bench samples the proxy's counters then), and at the end one line
//! `LOADGEN requests=N errors=E duration_s=D rps=R p50_us=.. p90_us=.. p99_us=.. p999_us=..`.
//! Only 127.0.0.1 / localhost targets are accepted.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use http::uri::Authority;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

#[derive(Parser)]
struct Args {
    /// Target URL (http://127.0.0.1:PORT/path).
    #[arg(long)]
    url: Uri,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// HTTP version: 1 (HTTP/1.1) or 2 (h2c, prior knowledge).
    #[arg(long, default_value_t = 1)]
    http: u8,
    /// gRPC unary calls instead of `GET`s (with `--http 2`).
    #[arg(long)]
    grpc: bool,
    /// `POST` a body of this many bytes instead of a `GET` (0: `GET`).
    #[arg(long, default_value_t = 0)]
    body: usize,
    /// Requests in flight per HTTP/2 connection.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Warm-up seconds (not counted).
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Measurement seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// TLS (an `https://` URL) trusting the certificates in this PEM file; ALPN offers
    /// `h2` with `--http 2`, `http/1.1` otherwise.
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// The TLS client made from `--tls-ca`.
    #[arg(skip)]
    tls: Option<TlsConnector>,
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const DONE: u8 = 2;

type Hist = Histogram<u64>;

struct Tally {
    latency: Hist,
    errors: u64,
}

fn new_hist() -> Hist {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

fn main() {
    let mut args = Args::parse();
    let host = args.url.host().unwrap_or_default();
    assert!(
        host == "127.0.0.1" || host == "localhost" || host == "[::1]",
        "loadgen only targets this machine (127.0.0.1 / localhost), not `{host}`"
    );
    assert!(args.http == 1 || args.http == 2, "--http is 1 or 2");
    assert!(!args.grpc || args.http == 2, "--grpc needs --http 2");
    assert!(!args.grpc || args.body == 0, "--grpc sends its own body");
    assert_eq!(
        args.url.scheme_str() == Some("https"),
        args.tls_ca.is_some(),
        "an https:// URL goes with --tls-ca"
    );
    args.tls = args
        .tls_ca
        .as_deref()
        .map(|ca| tls_connector(ca, args.http));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let args = Arc::new(args);
    let per_conn = if args.http == 2 {
        args.streams.max(1)
    } else {
        1
    };
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        tasks.push(tokio::spawn(connection(
            args.clone(),
            phase.clone(),
            per_conn,
        )));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    phase.store(MEASURE, Ordering::SeqCst);
    let started = Instant::now();
    println!("MEASURE start");
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    phase.store(DONE, Ordering::SeqCst);
    let elapsed = started.elapsed().as_secs_f64();
    println!("MEASURE end");
    let mut all = new_hist();
    let mut errors = 0;
    for t in tasks {
        let tally = t.await.expect("connection task");
        all.add(&tally.latency).expect("same bounds");
        errors += tally.errors;
    }
    let requests = all.len();
    println!(
        "LOADGEN requests={requests} errors={errors} duration_s={elapsed:.3} rps={:.0} p50_us={} p90_us={} p99_us={} p999_us={}",
        requests as f64 / elapsed,
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.9),
        all.value_at_quantile(0.99),
        all.value_at_quantile(0.999),
    );
}

/// One connection (re-opened after an error), `streams` request loops on it.
async fn connection(args: Arc<Args>, phase: Arc<AtomicU8>, streams: usize) -> Tally {
    let mut tally = Tally {
        latency: new_hist(),
        errors: 0,
    };
    let authority = args.url.authority().expect("url has host:port").clone();
    let addr = authority.as_str().to_owned();
    while phase.load(Ordering::Relaxed) != DONE {
        let stream = match TcpStream::connect(&addr).await {
            Ok(s) => s,
            Err(_) => {
                count_error(&phase, &mut tally);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match &args.tls {
            Some(tls) => {
                let name = ServerName::try_from(args.url.host().unwrap_or_default().to_owned())
                    .expect("a TLS server name");
                match tls.connect(name, stream).await {
                    Ok(stream) => {
                        let io = TokioIo::new(stream);
                        exchange(io, &args, &phase, streams, &authority, &mut tally).await
                    }
                    Err(_) => count_error(&phase, &mut tally),
                }
            }
            None => {
                let io = TokioIo::new(stream);
                exchange(io, &args, &phase, streams, &authority, &mut tally).await
            }
        }
    }
    tally
}

/// Requests on one connection (`streams` loops of them on HTTP/2) until the run ends or
/// one fails.
async fn exchange<T>(
    io: TokioIo<T>,
    args: &Arc<Args>,
    phase: &Arc<AtomicU8>,
    streams: usize,
    authority: &Authority,
    tally: &mut Tally,
) where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let body = Bytes::from(vec![b'x'; args.body]);
    if args.http == 2 {
        let Ok((send, conn)) =
            hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(TokioExecutor::new(), io)
                .await
        else {
            count_error(phase, tally);
            return;
        };
        tokio::spawn(conn);
        let loops: Vec<_> = (0..streams)
            .map(|_| {
                let body = body.clone();
                let mut send = send.clone();
                let (args, phase) = (args.clone(), phase.clone());
                tokio::spawn(async move {
                    let mut t = Tally {
                        latency: new_hist(),
                        errors: 0,
                    };
                    while phase.load(Ordering::Relaxed) != DONE {
                        if send.ready().await.is_err() {
                            count_error(&phase, &mut t);
                            break;
                        }
                        let request = h2_request(&args, &body);
                        let started = Instant::now();
                        let ok = match send.send_request(request).await {
                            Ok(r) if r.status().is_success() => {
                                match r.into_body().collect().await {
                                    Ok(body) => !args.grpc || grpc_ok(body.trailers()),
                                    Err(_) => false,
                                }
                            }
                            _ => false,
                        };
                        record(&phase, &mut t, started, ok);
                        if !ok {
                            break;
                        }
                    }
                    t
                })
            })
            .collect();
        for l in loops {
            let t = l.await.expect("stream loop");
            tally.latency.add(&t.latency).expect("same bounds");
            tally.errors += t.errors;
        }
    } else {
        let Ok((mut send, conn)) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(io).await
        else {
            count_error(phase, tally);
            return;
        };
        tokio::spawn(conn);
        let path = args
            .url
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_owned();
        while phase.load(Ordering::Relaxed) != DONE {
            if send.ready().await.is_err() {
                count_error(phase, tally);
                break;
            }
            let request = get_or_post(&body)
                .uri(path.as_str())
                .header("host", authority.as_str())
                .body(Full::new(body.clone()))
                .expect("request");
            let started = Instant::now();
            let ok = match send.send_request(request).await {
                Ok(r) => {
                    let ok = r.status().is_success();
                    ok && r.into_body().collect().await.is_ok()
                }
                Err(_) => false,
            };
            record(phase, tally, started, ok);
            if !ok {
                break;
            }
        }
    }
}

/// A TLS client trusting the certificates of the PEM file `ca`, offering `h2` (HTTP/2)
/// or `http/1.1` by ALPN.
fn tls_connector(ca: &Path, http: u8) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read --tls-ca") {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a usable CA certificate");
    }
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![if http == 2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    TlsConnector::from(Arc::new(config))
}

/// A request without its URI: a `GET`, or a `POST` when the run sends a `body`.
fn get_or_post(body: &Bytes) -> http::request::Builder {
    let method = if body.is_empty() {
        http::Method::GET
    } else {
        http::Method::POST
    };
    Request::builder().method(method)
}

/// One HTTP/2 request: a `GET` of the URL, a `POST` of `body` to it, or a gRPC unary
/// call to it.
fn h2_request(args: &Args, body: &Bytes) -> Request<Full<Bytes>> {
    if !args.grpc {
        return get_or_post(body)
            .uri(args.url.clone())
            .body(Full::new(body.clone()))
            .expect("request");
    }
    // One uncompressed message of 10 bytes behind gRPC's 5-byte prefix.
    static MESSAGE: [u8; 15] = [
        0, 0, 0, 0, 10, b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x',
    ];
    Request::post(args.url.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&MESSAGE)))
        .expect("request")
}

/// Whether a gRPC call's trailers say it succeeded.
fn grpc_ok(trailers: Option<&http::HeaderMap>) -> bool {
    trailers
        .and_then(|t| t.get("grpc-status"))
        .is_some_and(|status| status == "0")
}

fn record(phase: &AtomicU8, tally: &mut Tally, started: Instant, ok: bool) {
    if phase.load(Ordering::Relaxed) != MEASURE {
        return;
    }
    if ok {
        let us = started.elapsed().as_micros().max(1) as u64;
        let _ = tally.latency.record(us.min(60_000_000));
    } else {
        tally.errors += 1;
    }
}

fn count_error(phase: &AtomicU8, tally: &mut Tally) {
    if phase.load(Ordering::Relaxed) == MEASURE {
        tally.errors += 1;
    }
}
