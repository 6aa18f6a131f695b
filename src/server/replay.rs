//! Replays a client's bytes through one HTTP/1.1 engine in process (an in-memory
//! socket, a recording service): what the differential fuzz target and tests compare
//! between the native engine and hyper's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{drain, native, Http1Engine, ServerOptions};
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
}

/// Serve `input` (then the client's close) on `engine` with a service that reads
/// each request's body and answers `200`; bounded to a few seconds.
pub async fn replay(engine: Http1Engine, input: &[u8]) -> Replayed {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let seen = Arc::new(Mutex::new(Vec::new()));
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
    let options = ServerOptions::default().header_read_timeout(Duration::from_secs(2));
    let info = ConnectionInfo {
        remote: ([127, 0, 0, 1], 1).into(),
        local: ([127, 0, 0, 1], 2).into(),
        tls: false,
    };
    let serving = async move {
        match engine {
            Http1Engine::Native => {
                let drain = drain::Drain::new(options.header_read_timeout);
                native::serve_connection(
                    server,
                    service,
                    info,
                    native::Slots::new(Arc::new(options)),
                    drain.signal(None),
                    false,
                )
                .await;
            }
            Http1Engine::Hyper => {
                let served = super::service::Served {
                    inner: service,
                    info,
                    activity: None,
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .max_buf_size(options.max_header_size.max(8192))
                    .serve_connection(hyper_util::rt::TokioIo::new(server), served)
                    .await;
            }
        }
    };
    let talking = async move {
        let _ = client.write_all(input).await;
        let _ = client.shutdown().await;
        let mut out = Vec::new();
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
    Replayed {
        requests,
        statuses: statuses(&output),
    }
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
