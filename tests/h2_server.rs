//! HTTP/2 serving: idle client connections closed after the idle timeout, silent ones
//! found by the keep-alive ping. The real server and pipeline, real sockets on
//! 127.0.0.1, and hyper's client (or raw frames, for a client that stays silent).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fuseway::server::ServerOptions;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The default pipeline to an answering backend, served with `options`; the address.
async fn serving(
    options: ServerOptions,
) -> (
    std::net::SocketAddr,
    Backend,
    tokio::sync::oneshot::Sender<()>,
) {
    let b = backend(|_req: Request<Incoming>| async { Response::new(full("ok")) }).await;
    let config = fuseway::config::parse(
        &simple_config(&[("d1", &b.url())], ""),
        fuseway::config::Format::Json,
    )
    .unwrap();
    let state = Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let (addr, stop, _done) =
        serve_with(fuseway::pipeline::FusedDefault::from_state(state), options).await;
    (addr, b, stop)
}

/// An h2c connection with no request in flight for the idle timeout is closed by the
/// server.
#[tokio::test]
async fn an_idle_h2c_connection_is_closed_after_the_idle_timeout() {
    let options = ServerOptions::default().http2_idle_timeout(Duration::from_millis(300));
    let (addr, _backend, _stop) = serving(options).await;
    let (mut sender, connection) = h2c_connection(addr).await;
    three_gets(&mut sender, addr, &[]).await;
    within("the server to close the idle connection", connection)
        .await
        .unwrap()
        .ok();
    assert!(sender.is_closed(), "the connection is closed");
}

/// Three `GET`s on `sender` to the server at `addr`, with `fields`, each answered 200.
async fn three_gets(
    sender: &mut hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    addr: std::net::SocketAddr,
    fields: &[(&str, &str)],
) {
    for i in 0..3 {
        let mut request = Request::get(format!("http://{addr}/r/{i}"));
        for (name, value) in fields {
            request = request.header(*name, *value);
        }
        let request = request
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = within("a response", sender.send_request(request))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

/// Reads HTTP/2 frames from `stream` until the server closes it: whether a PING came
/// first. Nothing is answered (a client that went silent).
async fn frames_until_closed(stream: &mut TcpStream) -> bool {
    let mut pinged = false;
    while let Ok((kind, flags, _, _)) = h2_frame(stream).await {
        // PING, not an acknowledgement.
        if kind == 6 && flags & 1 == 0 {
            pinged = true;
        }
    }
    pinged
}

/// A client that sends its preface and SETTINGS and then nothing (not even the
/// acknowledgement of a ping), to a server with `options`: whether the server pinged it
/// before closing the connection.
async fn silent_client(options: ServerOptions, what: &str) -> bool {
    let (addr, _backend, _stop) = serving(options).await;
    let mut stream = preface(addr).await;
    within(what, frames_until_closed(&mut stream)).await
}

/// A connection to `addr` that has sent HTTP/2's preface and empty SETTINGS.
async fn preface(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    stream
}

/// With keep-alive pings on, a client that stops answering is closed once the ping's
/// answer is overdue — long before the idle timeout.
#[tokio::test]
async fn a_silent_h2c_client_is_closed_after_an_unanswered_ping() {
    let options = ServerOptions::default()
        .http2_keep_alive(Some(Duration::from_millis(200)), Duration::from_millis(300))
        .http2_idle_timeout(Duration::from_secs(120));
    let pinged = silent_client(options, "the server to ping, then close").await;
    assert!(pinged, "the server sent a PING before closing");
}

/// Pings off (the default), a silent client's connection stays open until the idle
/// timeout: no PING is sent.
#[tokio::test]
async fn without_keep_alive_pings_none_is_sent() {
    let options = ServerOptions::default().http2_idle_timeout(Duration::from_millis(800));
    let pinged = silent_client(options, "the idle timeout to close the connection").await;
    assert!(!pinged, "no PING without keep-alive pings");
}

/// What a server with `options` opens an h2c connection with, read until it answers a
/// second PING, sent once it has answered the first (hyper's engine opens the
/// connection's window in its next turn): its SETTINGS and the connection's
/// WINDOW_UPDATE (none: `None`).
async fn opening(options: ServerOptions) -> (Vec<(u16, u32)>, Option<u32>) {
    let (addr, _backend, _stop) = serving(options).await;
    let mut stream = preface(addr).await;
    stream
        .write_all(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingping")
        .await
        .unwrap();
    let (mut settings, mut update, mut answered) = (Vec::new(), None, 0);
    loop {
        let (kind, flags, stream_id, payload) =
            within("a frame", h2_frame(&mut stream)).await.unwrap();
        match (kind, flags & 1) {
            // SETTINGS (not the acknowledgement of ours).
            (4, 0) => {
                for setting in payload.chunks(6) {
                    settings.push((
                        u16::from_be_bytes([setting[0], setting[1]]),
                        u32::from_be_bytes(setting[2..6].try_into().unwrap()),
                    ));
                }
            }
            (4, _) => {}
            (8, _) if stream_id == 0 => {
                update = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()) & 0x7fff_ffff);
            }
            // A PING's answer: what the connection opened with came before the second.
            (6, 1) => {
                answered += 1;
                if answered == 2 {
                    return (settings, update);
                }
                stream
                    .write_all(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingpong")
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
}

/// What a server with `options` opens an h2c connection with: its
/// `SETTINGS_INITIAL_WINDOW_SIZE` and the connection's WINDOW_UPDATE.
async fn opening_windows(options: ServerOptions) -> (Option<u32>, Option<u32>) {
    let (settings, update) = opening(options).await;
    (setting(&settings, 0x4), update)
}

/// The value of setting `id` in `settings`, the last one sent.
fn setting(settings: &[(u16, u32)], id: u16) -> Option<u32> {
    settings.iter().rev().find(|s| s.0 == id).map(|s| s.1)
}

/// The windows a client gets for its request bodies: 1 MiB each by default; Kestrel's
/// `Http2.InitialStreamWindowSize` and `InitialConnectionWindowSize` change them (the
/// connection's is opened by a WINDOW_UPDATE past HTTP/2's 65 535, none at 65 535).
#[tokio::test]
async fn the_initial_windows_are_the_configured_ones() {
    let default = opening_windows(ServerOptions::default()).await;
    assert_eq!(default, (Some(1 << 20), Some((1 << 20) - 65_535)));
    let limits: fuseway::config::ServerLimits = serde_json::from_str(
        r#"{ "Http2": { "InitialStreamWindowSize": 100000, "InitialConnectionWindowSize": 200000 } }"#,
    )
    .unwrap();
    let configured = opening_windows(ServerOptions::default().limits(&limits)).await;
    assert_eq!(configured, (Some(100_000), Some(200_000 - 65_535)));
    let smallest =
        opening_windows(ServerOptions::default().http2_initial_windows(65_535, 65_535)).await;
    assert_eq!(smallest, (Some(65_535), None));
}

/// Kestrel's `Http2.MaxFrameSize` is said in the server's SETTINGS (HTTP/2's 16 384
/// otherwise, said or not), on both engines; `MaxRequestHeadersTotalSize` is the
/// header list's limit, as in Kestrel.
#[tokio::test]
async fn the_frame_size_and_header_list_are_the_configured_ones() {
    let (settings, _) = opening(ServerOptions::default()).await;
    assert_eq!(setting(&settings, 0x5).unwrap_or(16_384), 16_384);
    assert_eq!(setting(&settings, 0x6), Some(64 * 1024));
    let limits: fuseway::config::ServerLimits = serde_json::from_str(
        r#"{ "MaxRequestHeadersTotalSize": 32768, "Http2": { "MaxFrameSize": 65536 } }"#,
    )
    .unwrap();
    let (settings, _) = opening(ServerOptions::default().limits(&limits)).await;
    assert_eq!(setting(&settings, 0x5), Some(65_536), "{settings:?}");
    assert_eq!(setting(&settings, 0x6), Some(32_768), "{settings:?}");
}

/// Kestrel's `Http2.HeaderTableSize`, on both engines: said in the server's SETTINGS
/// (HTTP/2's 4 096 otherwise, said or not); a client that follows it (h2's: a table size
/// update to 0 at the start of its next block) is served. A client that acknowledges
/// the lowered table and sends a block without the update: the native engine ends the
/// connection (COMPRESSION_ERROR, RFC 7541 §4.2), h2 serves it (a listed difference).
#[tokio::test]
async fn the_header_table_size_is_the_configured_one() {
    let (settings, _) = opening(ServerOptions::default()).await;
    assert_eq!(setting(&settings, 0x1).unwrap_or(4096), 4096);
    let limits: fuseway::config::ServerLimits =
        serde_json::from_str(r#"{ "Http2": { "HeaderTableSize": 0 } }"#).unwrap();
    let options = ServerOptions::default().limits(&limits);
    let (settings, _) = opening(options.clone()).await;
    assert_eq!(setting(&settings, 0x1), Some(0), "{settings:?}");

    let (addr, _backend, _stop) = serving(options).await;
    let (mut sender, _connection) = h2c_connection(addr).await;
    let repeated = ("x-repeated", "the same value, indexed were the table not 0");
    three_gets(&mut sender, addr, &[repeated]).await;

    let mut stream = preface(addr).await;
    // SETTINGS' acknowledgement, then GET / (`:method GET`, `:scheme http`, `:path /`,
    // all indexed) with no size update before it.
    stream
        .write_all(
            b"\x00\x00\x00\x04\x01\x00\x00\x00\x00\x00\x00\x03\x01\x05\x00\x00\x00\x01\x82\x86\x84",
        )
        .await
        .unwrap();
    let answer = within("the stale block's answer", async {
        loop {
            match h2_frame(&mut stream).await {
                Ok((1, _, 1, _)) => break "HEADERS",
                Ok((7, _, _, payload)) => {
                    break match u32::from_be_bytes(payload[4..8].try_into().unwrap()) {
                        0x9 => "GOAWAY COMPRESSION_ERROR",
                        _ => "another GOAWAY",
                    }
                }
                Ok(_) => {}
                Err(_) => break "closed",
            }
        }
    })
    .await;
    let expected = match fuseway::server::Http2Engine::from_env() {
        fuseway::server::Http2Engine::Native => "GOAWAY COMPRESSION_ERROR",
        fuseway::server::Http2Engine::Hyper => "HEADERS",
    };
    assert_eq!(answer, expected);
}
