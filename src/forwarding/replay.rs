//! Replays a destination's bytes through one client engine (the forwarder's pooled
//! connection, over a real socket on 127.0.0.1): what the response-side differential
//! fuzz targets compare between the native clients and hyper's (HTTP/1.1) or the h2
//! crate's (HTTP/2).

use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Method, Request, StatusCode, Version};
use http_body_util::Empty;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::pool::{self, Pools};
use crate::config::TlsVersions;
use crate::http2::frame::{self, flag, kind};
use crate::server::{Http1Engine, Http2Engine};
use crate::state::UpstreamVersion;

/// A destination's answer as a client engine read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedResponse {
    /// Its status.
    pub status: StatusCode,
    /// Its version.
    pub version: Version,
    /// Its header fields.
    pub headers: HeaderMap,
    /// Its body, or `None` when reading it failed.
    pub body: Option<Vec<u8>>,
    /// Its trailer fields.
    pub trailers: Option<HeaderMap>,
}

/// Why a replay read no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoResponse {
    /// The exchange could not be set up (no listener on 127.0.0.1 for the destination,
    /// e.g. the machine's ports ran out, or no request): no verdict on the client.
    NoDestination(String),
    /// The client read none: it refused the head, or none came within a few seconds.
    Refused(String),
}

impl std::fmt::Display for NoResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoResponse::NoDestination(why) => write!(f, "no exchange set up: {why}"),
            NoResponse::Refused(why) => f.write_str(why),
        }
    }
}

/// Send a `method` request (no body) with `engine`'s client to a destination that
/// answers `input` and closes: the response the client read, or why it read none (it
/// refused the head, or timed out after a few seconds).
pub async fn replay_response(
    engine: Http1Engine,
    method: Method,
    input: &[u8],
) -> Result<ReceivedResponse, NoResponse> {
    let (listener, authority) = destination().await?;
    let input = input.to_vec();
    let destination = tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        // The request head, then the answer and the close.
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = socket.write_all(&input).await;
        let _ = socket.shutdown().await;
        let _ = socket.read_to_end(&mut Vec::new()).await;
    });
    let pools = Pools::<Empty<Bytes>>::new(engine, Default::default(), Default::default());
    let received = read_response(&pools, UpstreamVersion::Http1, &authority, method).await;
    destination.abort();
    received
}

/// Send a `method` request (no body) with `engine`'s HTTP/2 client (h2c) to a
/// destination that reads the connection preface, sends `settings` (its SETTINGS, or
/// whatever bytes), reads frames up to the request's HEADERS (answering PINGs), then
/// answers `answer` and closes: the response the client read, or why it read none (or
/// timed out, after a few seconds).
pub async fn replay_h2_response(
    engine: Http2Engine,
    method: Method,
    settings: &[u8],
    answer: &[u8],
) -> Result<ReceivedResponse, NoResponse> {
    let (listener, authority) = destination().await?;
    let (settings, answer) = (settings.to_vec(), answer.to_vec());
    let destination = tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        // One connection: a request the answer refuses unprocessed, sent again, finds
        // none (at once, rather than queued unaccepted until the time runs out).
        drop(listener);
        let mut preface = [0u8; frame::PREFACE.len()];
        if socket.read_exact(&mut preface).await.is_err()
            || socket.write_all(&settings).await.is_err()
        {
            return;
        }
        // The client's frames up to its request's header block.
        loop {
            let mut head = [0u8; frame::HEAD_LEN];
            if socket.read_exact(&mut head).await.is_err() {
                return;
            }
            let head = frame::Head::parse(&head);
            let mut payload = vec![0u8; head.len as usize];
            if socket.read_exact(&mut payload).await.is_err() {
                return;
            }
            if head.kind == kind::HEADERS {
                break;
            }
            // A PING is answered (the h2 crate's client pings before its first request).
            if head.kind == kind::PING && head.flags & flag::ACK == 0 && head.len == 8 {
                let mut ack = Vec::new();
                frame::write(&mut ack, kind::PING, flag::ACK, 0, &payload);
                if socket.write_all(&ack).await.is_err() {
                    return;
                }
            }
        }
        let _ = socket.write_all(&answer).await;
        let _ = socket.shutdown().await;
        let _ = socket.read_to_end(&mut Vec::new()).await;
    });
    let pools = Pools::<Empty<Bytes>>::new(Http1Engine::Native, engine, Default::default());
    let received = read_response(&pools, UpstreamVersion::Http2, &authority, method).await;
    destination.abort();
    received
}

/// A listener on 127.0.0.1 for the destination, and its address as an authority.
async fn destination() -> Result<(tokio::net::TcpListener, Authority), NoResponse> {
    let unset = |e: &dyn std::fmt::Display| NoResponse::NoDestination(e.to_string());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| unset(&e))?;
    let address = listener.local_addr().map_err(|e| unset(&e))?;
    let authority = Authority::try_from(address.to_string()).map_err(|e| unset(&e))?;
    Ok((listener, authority))
}

/// Send a `method` request through `pools` to `authority` on `version`, and read the
/// response whole (within a few seconds): the response, or why there is none.
async fn read_response(
    pools: &Pools<Empty<Bytes>>,
    version: UpstreamVersion,
    authority: &Authority,
    method: Method,
) -> Result<ReceivedResponse, NoResponse> {
    let uri = match version {
        UpstreamVersion::Http1 => "/".to_owned(),
        _ => format!("http://{authority}/"),
    };
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::HOST, "destination")
        .body(Empty::new())
        .map_err(|e| NoResponse::NoDestination(e.to_string()))?;
    let target = pool::Target {
        scheme: &Scheme::HTTP,
        authority,
        version,
        accept_any_certificate: false,
        tls: TlsVersions::Both,
        multiple_http2: false,
        proxy: None,
        limit: None,
        cache: None,
    };
    let mut exchange = pools
        .pool_for(&target)
        .send(request, false, &mut Default::default());
    let read = async {
        let response = std::future::poll_fn(|cx| exchange.as_mut().poll_response(cx))
            .await
            .map_err(|e| NoResponse::Refused(format!("no response: {e}")))?;
        let (parts, mut body) = response.into_parts();
        let mut data = Vec::new();
        let mut trailers = None;
        let whole = loop {
            let frame = std::future::poll_fn(|cx| body.poll_frame(Some(&mut exchange), cx)).await;
            match frame {
                None => break true,
                Some(Err(_)) => break false,
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(d) => data.extend_from_slice(&d),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                },
            }
        };
        Ok(ReceivedResponse {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body: whole.then_some(data),
            trailers,
        })
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap_or_else(|_| Err(NoResponse::Refused("no response within 5 s".to_owned())))
}
