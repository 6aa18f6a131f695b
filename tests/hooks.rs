//! Exchange hooks: any number of stages hold guards and register end hooks for the
//! life of the response body (the limits stage's guard among them), released when the
//! body ends or the client goes away.

mod common;
mod support;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use fuseway::request::{Balanced, ExchangeEnd, ProxyResponse};
use fuseway::stage::Stage;
use fuseway::state::ConcurrencyGuard;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};

/// A user stage that holds a guard on the destination's and one on the cluster's
/// counter until the exchange ends, and reports how it ended.
#[derive(Debug, Clone)]
pub struct Holder {
    ends: mpsc::UnboundedSender<ExchangeEnd>,
}

impl<B> Stage<Balanced<B>> for Holder {
    type Out = Balanced<B>;
    type State = (ConcurrencyGuard, ConcurrencyGuard);

    fn on_request(
        &self,
        request: Balanced<B>,
    ) -> Result<(Balanced<B>, Self::State), ProxyResponse> {
        let destination = request.destination_state().enter();
        let cluster = request.context.cluster().state().enter();
        Ok((request, (destination, cluster)))
    }

    fn on_response(&self, (destination, cluster): Self::State, response: &mut ProxyResponse) {
        response.hold_until_complete(destination);
        response.hold_until_complete(cluster);
        let ends = self.ends.clone();
        response.on_exchange_end(move |end| {
            let _ = ends.send(end);
        });
    }
}

fuseway::default_pipeline! {
    /// The default stages with `Holder` after load balancing.
    pub struct FusedHolder {
        after balancing: holder: Holder,
    }
}

/// The requests in flight on route `all` (the limits stage's counter).
fn route_concurrency(p: &TestProxy) -> usize {
    let snapshot = p.state.snapshot();
    let route = snapshot.routes().iter().find(|r| r.id() == "all").unwrap();
    route.state().concurrent_requests()
}

/// Read from `s` until `needle` has been seen; what was read.
async fn read_until(s: &mut TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    within("the expected bytes", async {
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&seen).contains(needle) {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    String::from_utf8(seen).unwrap()
}

#[tokio::test]
async fn every_guard_and_hook_lives_until_the_exchange_ends() {
    // `/slow` streams "first", then "second" once released.
    let release = Arc::new(Notify::new());
    let rel = release.clone();
    let b = backend(move |_req: Request<Incoming>| {
        let rel = rel.clone();
        async move {
            let stream = futures_util::stream::unfold(0, move |n| {
                let rel = rel.clone();
                async move {
                    match n {
                        0 => Some((Ok::<_, BoxError>(Frame::data(Bytes::from("first"))), 1)),
                        1 => {
                            rel.notified().await;
                            Some((Ok(Frame::data(Bytes::from("second"))), 2))
                        }
                        _ => None,
                    }
                }
            });
            Response::new(BodyExt::boxed(StreamBody::new(stream)))
        }
    })
    .await;
    // The limits stage holds a guard of its own on the route's counter.
    let config = simple_config(&[("d1", &b.url())], "").replace(
        r#""ClusterId": "c""#,
        r#""ClusterId": "c", "MaxConcurrentRequests": 10"#,
    );
    assert!(config.contains("MaxConcurrentRequests"), "{config}");
    let state = state(&config);
    let (ends_tx, mut ends) = mpsc::unbounded_channel();
    let service = FusedHolder::from_state(state.clone(), Holder { ends: ends_tx });
    let p = start_service(state, service, options()).await;

    // The body ends: every guard is held while it streams, released after it.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_until(&mut s, "first")
        .await
        .starts_with("HTTP/1.1 200"));
    // The forwarder's own counters and the stage's two guards.
    assert_eq!(
        p.concurrency("c", "d1"),
        (2, 2),
        "both of the stage's guards held"
    );
    assert_eq!(route_concurrency(&p), 1, "the limits stage's guard held");
    release.notify_one();
    read_until(&mut s, "second").await;
    p.wait_idle("c", "d1").await;
    let end = within("the end hook", ends.recv()).await.unwrap();
    assert_eq!(end, ExchangeEnd::Completed);
    assert_eq!(route_concurrency(&p), 0);

    // The client goes away mid-body: released all the same, and the hook says so.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_until(&mut s, "first").await;
    assert_eq!(p.concurrency("c", "d1"), (2, 2));
    drop(s);
    p.wait_idle("c", "d1").await;
    let end = within("the end hook", ends.recv()).await.unwrap();
    assert_eq!(end, ExchangeEnd::Abandoned);
    release.notify_one();
    p.shutdown().await;
}
