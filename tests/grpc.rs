//! gRPC through the proxy, fused and layered: a tonic client and a hand-written tonic
//! service (prost messages derived by hand, no build-time codegen), HTTP/2 end to end.
//! Unary calls (OK with response metadata, and a non-OK status with custom metadata),
//! a bidirectional stream relayed message by message whose final non-OK status and
//! custom trailers arrive intact, and a destination failing after the headers: the
//! client sees the stream fail, never a hang or a fabricated OK.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use common::{backend, proxy_with, simple_config, within, Form, Proxy, TestBody};
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use http::uri::PathAndQuery;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use prost::Message;
use tokio::net::TcpListener;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

const FORMS: [Form; 2] = [Form::Fused, Form::Layered];
const H2: &str = r#""HttpRequest": { "Version": "2", "VersionPolicy": "RequestVersionExact" },"#;

#[derive(Clone, PartialEq, prost::Message)]
struct EchoRequest {
    #[prost(string, tag = "1")]
    message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct EchoReply {
    #[prost(string, tag = "1")]
    message: String,
    #[prost(uint32, tag = "2")]
    sequence: u32,
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<EchoReply, Status>> + Send>>;

/// The hand-written service `test.Echo` with `Unary` and `Chat` (bidirectional).
#[derive(Clone)]
struct EchoService;

impl tonic::server::NamedService for EchoService {
    const NAME: &'static str = "test.Echo";
}

impl tower::Service<Request<tonic::body::Body>> for EchoService {
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<tonic::body::Body>) -> Self::Future {
        match req.uri().path() {
            "/test.Echo/Unary" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(tower::service_fn(unary), req).await)
            }),
            "/test.Echo/Chat" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.streaming(tower::service_fn(chat), req).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

fn metadata(pairs: &[(&'static str, &str)]) -> MetadataMap {
    let mut md = MetadataMap::new();
    for (k, v) in pairs {
        md.insert(*k, v.parse().unwrap());
    }
    md
}

async fn unary(req: tonic::Request<EchoRequest>) -> Result<tonic::Response<EchoReply>, Status> {
    let message = req.into_inner().message;
    if let Some(reason) = message.strip_prefix("deny:") {
        return Err(Status::with_metadata(
            Code::PermissionDenied,
            reason.to_string(),
            metadata(&[("x-denied-by", "echo-service")]),
        ));
    }
    let mut response = tonic::Response::new(EchoReply {
        message,
        sequence: 1,
    });
    response
        .metadata_mut()
        .insert("x-served-by", "echo-service".parse().unwrap());
    Ok(response)
}

/// Echoes each message as it arrives; when the client's stream ends, ends with
/// `ABORTED` and custom trailers (status and trailers after data frames).
async fn chat(
    req: tonic::Request<tonic::Streaming<EchoRequest>>,
) -> Result<tonic::Response<ReplyStream>, Status> {
    let mut incoming = req.into_inner();
    let stream = async_stream(move |tx| async move {
        let mut sequence = 0;
        while let Some(msg) = incoming.next().await {
            let Ok(msg) = msg else { return };
            sequence += 1;
            let _ = tx.send(Ok(EchoReply {
                message: msg.message,
                sequence,
            }));
        }
        let _ = tx.send(Err(Status::with_metadata(
            Code::Aborted,
            format!("done after {sequence}"),
            metadata(&[
                ("x-trailer-count", &sequence.to_string()),
                ("x-custom", "kept"),
            ]),
        )));
    });
    Ok(tonic::Response::new(stream))
}

/// A stream fed by a task (no extra crate for generators).
fn async_stream<T, F, Fut>(f: F) -> Pin<Box<dyn Stream<Item = T> + Send>>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::UnboundedSender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
}

async fn grpc_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(EchoService)
            .serve_with_incoming(incoming),
    );
    addr
}

async fn client(proxy: &Proxy) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", proxy.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

async fn call_unary(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    message: &str,
) -> Result<tonic::Response<EchoReply>, Status> {
    grpc.ready().await.unwrap();
    let request = tonic::Request::new(EchoRequest {
        message: message.to_string(),
    });
    grpc.unary(
        request,
        PathAndQuery::from_static("/test.Echo/Unary"),
        tonic_prost::ProstCodec::default(),
    )
    .await
}

#[tokio::test]
async fn unary_ok_and_non_ok_with_metadata() {
    let backend = grpc_backend().await;
    for form in FORMS {
        let proxy = proxy_with(
            &simple_config(&[("d1", &format!("http://{backend}"))], H2),
            form,
        )
        .await;
        let mut grpc = client(&proxy).await;

        let ok = within("the unary call", call_unary(&mut grpc, "hi"))
            .await
            .unwrap();
        assert_eq!(
            ok.metadata().get("x-served-by").unwrap(),
            "echo-service",
            "{form:?}"
        );
        assert_eq!(
            ok.into_inner(),
            EchoReply {
                message: "hi".into(),
                sequence: 1
            }
        );

        let denied = within("the denied call", call_unary(&mut grpc, "deny:not today"))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied, "{form:?}");
        assert_eq!(denied.message(), "not today");
        assert_eq!(
            denied.metadata().get("x-denied-by").unwrap(),
            "echo-service"
        );
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn bidirectional_stream_is_relayed_message_by_message_with_trailers() {
    let backend = grpc_backend().await;
    for form in FORMS {
        let proxy = proxy_with(
            &simple_config(&[("d1", &format!("http://{backend}"))], H2),
            form,
        )
        .await;
        let mut grpc = client(&proxy).await;
        grpc.ready().await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        // The first message must be answered before the second is even produced: the
        // proxy relays frames as they come, both ways.
        tx.send(EchoRequest {
            message: "m1".into(),
        })
        .unwrap();
        let response = within(
            "the stream's headers",
            grpc.streaming(
                tonic::Request::new(outbound),
                PathAndQuery::from_static("/test.Echo/Chat"),
                tonic_prost::ProstCodec::<EchoRequest, EchoReply>::default(),
            ),
        )
        .await
        .unwrap();
        let mut inbound = response.into_inner();
        for i in 1..=5u32 {
            let reply = within("an echoed message", inbound.message())
                .await
                .unwrap()
                .expect("a message");
            assert_eq!(reply.message, format!("m{i}"), "{form:?}");
            assert_eq!(reply.sequence, i);
            assert_eq!(
                proxy.concurrency("c", "d1"),
                1,
                "{form:?}: held while streaming"
            );
            if i < 5 {
                tx.send(EchoRequest {
                    message: format!("m{}", i + 1),
                })
                .unwrap();
            }
        }
        drop(tx);
        let end = within("the final status", inbound.message())
            .await
            .unwrap_err();
        assert_eq!(end.code(), Code::Aborted, "{form:?}");
        assert_eq!(end.message(), "done after 5");
        assert_eq!(
            end.metadata().get("x-trailer-count").unwrap(),
            "5",
            "{form:?}"
        );
        assert_eq!(end.metadata().get("x-custom").unwrap(), "kept", "{form:?}");
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}

/// A gRPC frame: uncompressed flag, big-endian length, message.
fn grpc_frame(msg: &impl Message) -> Bytes {
    let body = msg.encode_to_vec();
    let mut b = BytesMut::with_capacity(5 + body.len());
    b.put_u8(0);
    b.put_u32(body.len() as u32);
    b.put_slice(&body);
    b.freeze()
}

#[tokio::test]
async fn destination_failure_after_headers_fails_the_stream() {
    // A raw hyper HTTP/2 destination: headers and one message, then — once the test
    // says so, i.e. after the client has them — the body fails (hyper resets the
    // stream): no trailers, no grpc-status.
    let crash = Arc::new(tokio::sync::Notify::new());
    let trigger = crash.clone();
    let failing = backend(move |_req: Request<Incoming>| {
        let crash = crash.clone();
        async move {
            let first = futures_util::stream::iter(vec![Ok(Frame::data(grpc_frame(&EchoReply {
                message: "first".into(),
                sequence: 1,
            })))]);
            let then_fail = futures_util::stream::once(async move {
                crash.notified().await;
                Err::<Frame<Bytes>, common::BoxError>("destination crashed".into())
            });
            let body: TestBody = BodyExt::boxed(StreamBody::new(first.chain(then_fail)));
            Response::builder()
                .header("content-type", "application/grpc")
                .body(body)
                .unwrap()
        }
    })
    .await;
    for form in FORMS {
        let proxy = proxy_with(&simple_config(&[("d1", &failing.url())], H2), form).await;
        let mut grpc = client(&proxy).await;
        grpc.ready().await.unwrap();
        let outbound = futures_util::stream::iter(vec![EchoRequest {
            message: "x".into(),
        }]);
        let response = within(
            "the headers",
            grpc.streaming(
                tonic::Request::new(outbound),
                PathAndQuery::from_static("/test.Echo/Chat"),
                tonic_prost::ProstCodec::<EchoRequest, EchoReply>::default(),
            ),
        )
        .await
        .expect("headers arrived");
        let mut inbound = response.into_inner();
        let first = within("the first message", inbound.message())
            .await
            .unwrap();
        assert_eq!(first.unwrap().message, "first", "{form:?}");
        trigger.notify_one();
        let end = within("the failure", inbound.message()).await;
        let status = end.expect_err("a failed stream, not a clean end");
        assert_ne!(status.code(), Code::Ok, "{form:?}");
        proxy.wait_idle("c", "d1").await;
        proxy.shutdown().await;
    }
}
