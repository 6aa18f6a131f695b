//! WebSockets through the proxy, fused and layered: a tokio-tungstenite client and
//! echo server; text, binary, ping/pong and the close handshake; concurrent sockets;
//! the concurrency counter held while a socket is open; the cluster's ActivityTimeout
//! as the tunnel's idle timeout; refused upgrades passed through.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{
    backend, full, proxy_with, proxy_with_limits, simple_config, within, ws_echo, Form, Proxy,
};
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

const FORMS: [Form; 2] = [Form::Fused, Form::Layered];

async fn ws_proxy(
    form: Form,
    cluster_extra: &str,
) -> (Proxy, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let (addr, paths) = ws_echo().await;
    let config = simple_config(&[("d1", &format!("http://{addr}"))], cluster_extra);
    (proxy_with(&config, form).await, paths)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(proxy: &Proxy, path: &str) -> Ws {
    let url = format!("ws://{}{path}", proxy.addr);
    let (ws, response) = within(
        "the WebSocket handshake",
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("handshake through the proxy");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert!(response.headers()["upgrade"]
        .to_str()
        .unwrap()
        .eq_ignore_ascii_case("websocket"));
    ws
}

/// A WebSocket handshake through `proxy` that is refused: the answer.
async fn refused(proxy: &Proxy, path: &str) -> http::Response<Option<Vec<u8>>> {
    let url = format!("ws://{}{path}", proxy.addr);
    let err = within(
        "the refused handshake",
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect_err("a refused handshake");
    let WsError::Http(response) = err else {
        panic!("{err:?}");
    };
    *response
}

/// The next data or control message (pongs included).
async fn next(ws: &mut Ws) -> Message {
    within("a WebSocket message", ws.next())
        .await
        .expect("stream open")
        .expect("no error")
}

#[tokio::test]
async fn echo_text_binary_ping_and_close() {
    for form in FORMS {
        let (proxy, mut paths) = ws_proxy(form, "").await;
        let mut ws = connect(&proxy, "/chat/room?x=1").await;
        assert_eq!(paths.recv().await.unwrap(), "/chat/room?x=1", "{form:?}");
        assert_eq!(proxy.concurrency("c", "d1"), 1, "{form:?}: held while open");

        ws.send(Message::text("hello")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("hello"), "{form:?}");
        let blob: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        ws.send(Message::binary(blob.clone())).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::binary(blob), "{form:?}");
        ws.send(Message::Ping(b"are you there".to_vec().into()))
            .await
            .unwrap();
        assert_eq!(
            next(&mut ws).await,
            Message::Pong(b"are you there".to_vec().into()),
            "{form:?}"
        );
        assert_eq!(proxy.concurrency("c", "d1"), 1, "{form:?}");

        ws.close(None).await.unwrap();
        // The server's close frame comes back, then the stream ends.
        assert!(matches!(next(&mut ws).await, Message::Close(_)), "{form:?}");
        let end = within("the end of the stream", ws.next()).await;
        assert!(
            matches!(end, None | Some(Err(WsError::ConnectionClosed))),
            "{form:?}: {end:?}"
        );
        // The tunnel lives until both directions are closed: the server has closed
        // its side; the counter is released once the client closes its own.
        assert_eq!(proxy.concurrency("c", "d1"), 1, "{form:?}");
        drop(ws);
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn concurrent_sockets_hold_one_count_each() {
    const N: usize = 8;
    for form in FORMS {
        let (proxy, _paths) = ws_proxy(form, "").await;
        let mut sockets = Vec::new();
        for _ in 0..N {
            sockets.push(connect(&proxy, "/ws").await);
        }
        assert_eq!(proxy.concurrency("c", "d1"), N, "{form:?}");
        // Interleave: every socket sends, then every socket reads its own echo.
        for round in 0..3 {
            for (i, ws) in sockets.iter_mut().enumerate() {
                ws.send(Message::text(format!("{i}:{round}")))
                    .await
                    .unwrap();
            }
            for (i, ws) in sockets.iter_mut().enumerate() {
                assert_eq!(next(ws).await, Message::text(format!("{i}:{round}")));
            }
        }
        // Closing half of them releases exactly their counts.
        for mut ws in sockets.drain(..N / 2) {
            ws.close(None).await.unwrap();
            while let Some(Ok(_)) = within("close", ws.next()).await {}
        }
        within("half the counts released", async {
            while proxy.concurrency("c", "d1") != N - N / 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        for mut ws in sockets {
            ws.close(None).await.unwrap();
            while let Some(Ok(_)) = within("close", ws.next()).await {}
        }
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn activity_timeout_closes_a_silent_tunnel_but_not_a_busy_one() {
    // Margins sized for a loaded 2-core CI machine: messages every 100 ms against a
    // 500 ms idle timeout.
    let idle = Duration::from_millis(500);
    for form in FORMS {
        let (proxy, _paths) =
            ws_proxy(form, r#""HttpRequest": { "ActivityTimeout": "500ms" },"#).await;

        // Busy: a message every 100 ms for well past the timeout.
        let mut ws = connect(&proxy, "/busy").await;
        let started = Instant::now();
        let mut i = 0;
        let mut last;
        loop {
            ws.send(Message::text(format!("{i}"))).await.unwrap();
            assert_eq!(
                next(&mut ws).await,
                Message::text(format!("{i}")),
                "{form:?}"
            );
            last = Instant::now();
            if started.elapsed() > idle * 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            i += 1;
        }
        assert_eq!(proxy.concurrency("c", "d1"), 1, "{form:?}: still open");

        // Silent: closed by the proxy after the timeout, counter released.
        let end = within("the idle tunnel to be closed", ws.next()).await;
        let waited = last.elapsed();
        assert!(
            matches!(
                end,
                None | Some(Err(WsError::ConnectionClosed))
                    | Some(Err(WsError::Protocol(_)))
                    | Some(Err(WsError::Io(_)))
            ),
            "{form:?}: {end:?}"
        );
        assert!(
            waited >= idle - Duration::from_millis(20),
            "{form:?}: closed after {waited:?}"
        );
        assert!(waited < idle * 5, "{form:?}: closed after {waited:?}");
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn refused_upgrade_is_passed_through() {
    for form in FORMS {
        let refusing = backend(|req: Request<Incoming>| async move {
            if !req.headers().contains_key("upgrade") {
                return Response::new(full("plain"));
            }
            Response::builder()
                .status(StatusCode::UPGRADE_REQUIRED)
                .header("x-why", "wrong protocol version")
                .body(full("use v2"))
                .unwrap()
        })
        .await;
        let proxy = proxy_with(&simple_config(&[("d1", &refusing.url())], ""), form).await;
        let response = refused(&proxy, "/ws").await;
        assert_eq!(response.status(), StatusCode::UPGRADE_REQUIRED, "{form:?}");
        assert_eq!(response.headers()["x-why"], "wrong protocol version");
        assert_eq!(response.body().as_deref(), Some(&b"use v2"[..]), "{form:?}");
        proxy.wait_idle("c", "d1").await;

        // And a plain request to the same proxy still works afterwards.
        let ok = common::h1_client()
            .get(proxy.url("/plain"))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.text().await.unwrap(), "plain");
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn upgrade_to_an_http2_cluster_goes_over_http1() {
    for form in FORMS {
        let (proxy, mut paths) = ws_proxy(
            form,
            r#""HttpRequest": { "Version": "2", "VersionPolicy": "RequestVersionExact" },"#,
        )
        .await;
        let mut ws = connect(&proxy, "/h2-cluster").await;
        assert_eq!(paths.recv().await.unwrap(), "/h2-cluster");
        ws.send(Message::text("over h1")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("over h1"), "{form:?}");
        drop(ws);
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

/// Open an HTTP/2 connection to `addr` and send an extended CONNECT for `path`
/// (`:protocol websocket`).
async fn h2_connect(addr: SocketAddr, path: &str) -> Response<Incoming> {
    use hyper::ext::Protocol;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    // A first request so that the server's SETTINGS (ENABLE_CONNECT_PROTOCOL) have
    // been received before the extended CONNECT is sent.
    let warmup = Request::builder()
        .uri(format!("http://{addr}/warmup"))
        .version(http::Version::HTTP_2)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let _ = within("the warm-up request", send.send_request(warmup)).await;
    let mut connect = Request::builder()
        .method(http::Method::CONNECT)
        .uri(format!("http://{addr}{path}"))
        .version(http::Version::HTTP_2)
        .header("sec-websocket-version", "13")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    connect
        .extensions_mut()
        .insert(Protocol::from_static("websocket"));
    within("the CONNECT response", send.send_request(connect))
        .await
        .unwrap()
}

/// The WebSocket an accepted extended CONNECT (`response`) opens, its client's side.
async fn h2_websocket(
    response: &mut Response<Incoming>,
) -> tokio_tungstenite::WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>> {
    let upgraded = within("the upgrade", hyper::upgrade::on(response))
        .await
        .unwrap();
    tokio_tungstenite::WebSocketStream::from_raw_socket(
        hyper_util::rt::TokioIo::new(upgraded),
        tokio_tungstenite::tungstenite::protocol::Role::Client,
        None,
    )
    .await
}

/// RFC 8441: an HTTP/2 client opens a WebSocket with extended CONNECT; the proxy
/// translates it into an HTTP/1.1 upgrade towards the destination.
#[tokio::test]
async fn http2_extended_connect_is_translated_to_an_http1_upgrade() {
    for form in FORMS {
        let (proxy, mut paths) = ws_proxy(form, "").await;
        let mut response = h2_connect(proxy.addr, "/h2-chat").await;
        assert_eq!(response.status(), StatusCode::OK, "{form:?}");
        assert!(!response.headers().contains_key("sec-websocket-accept"));
        assert_eq!(
            within("the upgrade path", paths.recv()).await.unwrap(),
            "/h2-chat"
        );
        let mut ws = h2_websocket(&mut response).await;
        assert_eq!(proxy.concurrency("c", "d1"), 1, "{form:?}");
        ws.send(Message::text("over h2")).await.unwrap();
        let echoed = within("the echo", ws.next()).await.unwrap().unwrap();
        assert_eq!(echoed, Message::text("over h2"), "{form:?}");
        ws.close(None).await.unwrap();
        while let Some(Ok(_)) = within("close", ws.next()).await {}
        drop(ws);
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

/// An extended CONNECT the destination refuses gets the refusal; one it "accepts"
/// without switching protocols gets 502 (a 2xx would open a tunnel to nothing).
#[tokio::test]
async fn http2_extended_connect_refusals() {
    let destination = backend(|req: Request<Incoming>| async move {
        let status = match req.uri().path() {
            "/refuse" => StatusCode::UPGRADE_REQUIRED,
            _ => StatusCode::OK,
        };
        Response::builder()
            .status(status)
            .body(full("no websocket here"))
            .unwrap()
    })
    .await;
    for form in FORMS {
        let proxy = proxy_with(&simple_config(&[("d1", &destination.url())], ""), form).await;
        let refused = h2_connect(proxy.addr, "/refuse").await;
        assert_eq!(refused.status(), StatusCode::UPGRADE_REQUIRED, "{form:?}");
        let body = http_body_util::BodyExt::collect(refused.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(body, "no websocket here");
        let ok = h2_connect(proxy.addr, "/ok").await;
        assert_eq!(ok.status(), StatusCode::BAD_GATEWAY, "{form:?}");
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

/// Kestrel's `MaxConcurrentUpgradedConnections`: past it, an upgrade the destination
/// agrees to is refused as Kestrel's `UpgradeAsync` refuses it under YARP — the client
/// answered 502, the destination's upgraded connection closed —; the slot comes back
/// when a socket closes. HTTP/1.1 upgrades and HTTP/2 extended CONNECT count together.
#[tokio::test]
async fn upgraded_connections_past_the_limit_are_refused() {
    // A WebSocket destination that says when each of its sockets has ended.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let ended = ended_tx.clone();
            tokio::spawn(async move {
                if let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await {
                    while let Some(Ok(msg)) = ws.next().await {
                        if msg.is_text() && ws.send(msg).await.is_err() {
                            break;
                        }
                    }
                    let _ = ended.send(());
                }
            });
        }
    });
    let config = format!(
        r#"{{ "Limits": {{ "MaxConcurrentUpgradedConnections": 1 }},
        {} "#,
        &simple_config(&[("d1", &format!("http://{addr}"))], "")[1..]
    );
    for form in FORMS {
        let proxy = proxy_with_limits(&config, form).await;
        let mut first = connect(&proxy, "/first").await;
        let response = refused(&proxy, "/second").await;
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{form:?}");
        // The destination's side of the refused one closes; the first stays open.
        within("the refused socket's end", ended.recv())
            .await
            .unwrap();
        // Over HTTP/2 too: extended CONNECT is refused the same way.
        let response = h2_connect(proxy.addr, "/over-h2").await;
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{form:?}");
        within("the refused tunnel's end", ended.recv())
            .await
            .unwrap();
        first.send(Message::text("still open")).await.unwrap();
        assert_eq!(next(&mut first).await, Message::text("still open"));
        first.close(None).await.unwrap();
        while let Some(Ok(_)) = within("close", first.next()).await {}
        drop(first);
        within("the first socket's end", ended.recv())
            .await
            .unwrap();
        proxy.wait_idle("c", "d1").await;
        // Its slot is back: an HTTP/2 tunnel now opens, and works.
        let mut response = h2_connect(proxy.addr, "/after").await;
        assert_eq!(response.status(), StatusCode::OK, "{form:?}");
        let mut ws = h2_websocket(&mut response).await;
        ws.send(Message::text("after")).await.unwrap();
        assert_eq!(
            within("the echo", ws.next()).await.unwrap().unwrap(),
            Message::text("after")
        );
        drop(ws);
        within("the tunnel's end", ended.recv()).await.unwrap();
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}
