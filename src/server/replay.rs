//! Replays a client's bytes through one HTTP/1.1 or HTTP/2 engine in process (an
//! in-memory socket, a recording service): what the differential fuzz targets and tests
//! compare between the native engines and hyper's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{drain, native, native_h2, Http1Engine, Http2Engine, ServerOptions};
use crate::body::{Incoming, ProxyBody};
use crate::request::ConnectionInfo;

/// A request as the pipeline received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Its method.
    pub method: Method,
    /// Its target.
    pub uri: Uri,
    /// Its version.
    pub version: Version,
    /// Its header fields.
    pub headers: HeaderMap,
    /// Its body, or `None` when reading it failed (or the request was cancelled first).
    pub body: Option<Vec<u8>>,
    /// Its trailer fields.
    pub trailers: Option<HeaderMap>,
}

/// What an engine made of a client's bytes.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// The requests the pipeline received, in order.
    pub requests: Vec<Received>,
    /// The status codes written back, in order (`100` included).
    pub statuses: Vec<u16>,
    /// HTTP/2: the error code of the GOAWAY the server sent, if it sent one.
    pub goaway: Option<u32>,
}

/// Serve `input` (then the client's close) on `engine` with a service that reads
/// each request's body and answers `200`; bounded to a few seconds.
pub async fn replay(engine: Http1Engine, input: &[u8]) -> Replayed {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = recording(&seen);
    let options = ServerOptions::default()
        .header_read_timeout(Duration::from_secs(2))
        .keep_alive_timeout(Duration::from_secs(2));
    let (client, server) = tokio::io::duplex(1 << 16);
    let serving = async move {
        match engine {
            Http1Engine::Native => {
                let drain = drain::Drain::new(options.header_read_timeout);
                native::serve_connection(
                    server,
                    service,
                    INFO,
                    native::Slots::new(Arc::new(options)),
                    drain.signal(None),
                    false,
                )
                .await;
            }
            Http1Engine::Hyper => {
                let served = super::service::Served {
                    inner: service,
                    info: INFO,
                    certificate: None,
                    activity: None,
                    fields: super::FieldLimits::new(&options),
                    upgrades: None,
                };
                let _ = super::accept::hyper_http1(&options)
                    .serve_connection(hyper_util::rt::TokioIo::new(server), served)
                    .await;
            }
        }
    };
    let output = talk(client, input, serving).await;
    let requests = std::mem::take(&mut *seen.lock().unwrap());
    Replayed {
        requests,
        statuses: statuses(&output),
        goaway: None,
    }
}

/// Serve `input` (then the client's close) on the HTTP/2 `engine` with a service that
/// reads each request's body and answers `200`; bounded to a few seconds. `statuses`
/// are those of the response heads the engine wrote (decoded with the native engine's
/// HPACK decoder).
pub async fn replay_h2(engine: Http2Engine, input: &[u8]) -> Replayed {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = recording(&seen);
    let options = ServerOptions::default().http2_idle_timeout(Duration::from_secs(2));
    let (client, server) = tokio::io::duplex(1 << 16);
    let serving = async move {
        match engine {
            Http2Engine::Native => {
                let drain = drain::Drain::new(options.header_read_timeout);
                native_h2::serve_connection(
                    server,
                    service,
                    INFO,
                    Arc::new(options),
                    drain.signal(None),
                )
                .await;
            }
            Http2Engine::Hyper => {
                let served = super::service::Served {
                    inner: service,
                    info: INFO,
                    certificate: None,
                    activity: None,
                    fields: super::FieldLimits::new(&options),
                    upgrades: None,
                };
                let _ = super::accept::hyper_http2(hyper_util::rt::TokioExecutor::new(), &options)
                    .serve_connection(hyper_util::rt::TokioIo::new(server), served)
                    .await;
            }
        }
    };
    let talking = async move {
        let mut client = client;
        let mut out = Vec::new();
        // A PING after the input: once its answer is read, every frame before it has
        // been handled; the streams hyper runs on tasks of their own get a few turns to
        // call the pipeline; then the client closes. An input that ends inside a frame
        // would take the PING for that frame's rest and wait for more: it is closed at
        // once instead (without this, such inputs waited out the replay's bound).
        let whole = ends_on_a_frame(input);
        let mut input = input.to_vec();
        if whole {
            input.extend_from_slice(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00replay!!");
        }
        if whole && client.write_all(&input).await.is_ok() {
            let mut buf = [0u8; 4096];
            while !answered(&out) {
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                }
            }
        }
        if !whole {
            let _ = client.write_all(&input).await;
        }
        for _ in 0..32 {
            tokio::task::yield_now().await;
        }
        let _ = client.shutdown().await;
        let _ = client.read_to_end(&mut out).await;
        out
    };
    let output = tokio::time::timeout(Duration::from_secs(5), async {
        let (_, out) = tokio::join!(serving, talking);
        out
    })
    .await
    .unwrap_or_default();
    let requests = std::mem::take(&mut *seen.lock().unwrap());
    let (statuses, goaway) = h2_statuses(&output);
    Replayed {
        requests,
        statuses,
        goaway,
    }
}

const INFO: ConnectionInfo = ConnectionInfo {
    remote: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        1,
    )),
    local: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        2,
    )),
    tls: false,
};

/// Write `input` and close, while `serving` runs; what the server wrote, within a few
/// seconds.
async fn talk(
    mut client: tokio::io::DuplexStream,
    input: &[u8],
    serving: impl std::future::Future<Output = ()>,
) -> Vec<u8> {
    let talking = async move {
        let _ = client.write_all(input).await;
        let _ = client.shutdown().await;
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
        out
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        let (_, out) = tokio::join!(serving, talking);
        out
    })
    .await
    .unwrap_or_default()
}

/// A service that records each request (its head when called, its body once read) in
/// `seen` and answers `200`.
fn recording(seen: &Arc<Mutex<Vec<Received>>>) -> impl crate::server::ServeService {
    let service = {
        let seen = seen.clone();
        // The head is recorded when the pipeline is called, the body when it has been
        // read (a client's close may cancel the request before).
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let (parts, body) = request.into_parts();
            let index = {
                let mut seen = seen.lock().unwrap();
                seen.push(Received {
                    method: parts.method,
                    uri: parts.uri,
                    version: parts.version,
                    headers: parts.headers,
                    body: None,
                    trailers: None,
                });
                seen.len() - 1
            };
            let seen = seen.clone();
            async move {
                if let Ok(collected) = body.collect().await {
                    let mut seen = seen.lock().unwrap();
                    seen[index].trailers = collected.trailers().cloned();
                    seen[index].body = Some(collected.to_bytes().to_vec());
                }
                Ok::<_, std::convert::Infallible>(Response::new(ProxyBody::empty()))
            }
        })
    };
    service
}

/// The status codes of the responses in `output`.
fn statuses(mut output: &[u8]) -> Vec<u16> {
    let mut statuses = Vec::new();
    while let Some(at) = memchr::memmem::find(output, b"HTTP/1.1 ") {
        let code = output
            .get(at + 9..at + 12)
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.parse::<u16>().ok());
        statuses.extend(code);
        output = &output[(at + 12).min(output.len())..];
    }
    statuses
}

/// Whether an HTTP/2 server's `output` holds the answer to the replay's PING.
/// Whether an HTTP/2 client's `input` (the connection preface, then frames) ends where
/// a frame ends. (Shorter than the preface: as if it did — what follows it cannot be
/// the preface, which the server refuses at once.)
fn ends_on_a_frame(input: &[u8]) -> bool {
    use crate::http2::frame::HEAD_LEN;
    const PREFACE: usize = 24;
    let mut at = PREFACE;
    while at < input.len() {
        let Some(head) = input.get(at..at + HEAD_LEN) else {
            return false;
        };
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        at += HEAD_LEN + length;
    }
    at == input.len() || input.len() < PREFACE
}

fn answered(output: &[u8]) -> bool {
    memchr::memmem::find(output, b"\x00\x00\x08\x06\x01\x00\x00\x00\x00replay!!").is_some()
}

/// The `:status` of each response head (HEADERS on a stream, not trailers) in an
/// HTTP/2 server's `output`, and the error code of its GOAWAY.
fn h2_statuses(output: &[u8]) -> (Vec<u16>, Option<u32>) {
    use crate::http2::frame::{flag, kind, Head, HEAD_LEN};
    use crate::http2::hpack::{Decoder, Field, Pseudo};
    let mut decoder = Decoder::new(65_536);
    let (mut statuses, mut at, mut block) = (Vec::new(), 0, Vec::new());
    let mut goaway = None;
    while at + HEAD_LEN <= output.len() {
        let head = Head::parse(&output[at..]);
        let end = at + HEAD_LEN + head.len as usize;
        let Some(payload) = output.get(at + HEAD_LEN..end) else {
            break;
        };
        at = end;
        let fragment = match head.kind {
            kind::HEADERS => {
                block.clear();
                payload
            }
            kind::CONTINUATION => payload,
            kind::GOAWAY if payload.len() >= 8 => {
                goaway = Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
                continue;
            }
            _ => continue,
        };
        block.extend_from_slice(fragment);
        if head.flags & flag::END_HEADERS == 0 {
            continue;
        }
        let mut status: Option<u16> = None;
        let decoded = decoder.decode(&bytes::Bytes::copy_from_slice(&block), |field| {
            if let Field::Pseudo(Pseudo::Status, value) = field {
                status = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|s| s.parse().ok());
            }
        });
        if decoded.is_err() {
            break;
        }
        statuses.extend(status);
    }
    (statuses, goaway)
}

#[cfg(test)]
mod tests {
    use super::ends_on_a_frame;

    #[test]
    fn inputs_ending_inside_a_frame_are_told_apart() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
        let data = [0u8, 0, 3, 0, 1, 0, 0, 0, 1, b'a', b'b', b'c'];
        assert!(ends_on_a_frame(&preface));
        assert!(ends_on_a_frame(&[&preface[..], &settings, &data].concat()));
        assert!(ends_on_a_frame(b"PRI * HT"));
        // A head cut short, a payload cut short.
        assert!(!ends_on_a_frame(&[&preface[..], &settings[..5]].concat()));
        assert!(!ends_on_a_frame(&[&preface[..], &data[..10]].concat()));
    }
}
