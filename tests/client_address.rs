//! The client's address reaches the destination (`X-Forwarded-For`) however the pipeline
//! is served: by fuseway's server with the pipeline moved to another task, and behind
//! `axum::serve` (as `examples/axum_fallback.rs` does it). Real backends, the real
//! proxy, real clients on 127.0.0.1.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::Router;
use common::*;
use fuseway::body::{Incoming, ProxyBody};
use fuseway::config::{parse, Format};
use fuseway::pipeline;
use fuseway::request::ConnectionInfo;
use fuseway::server::ProxyService;
use fuseway::state::ProxyState;
use http::{Request, Response};
use tokio::sync::oneshot;

/// Runs every request's pipeline — its call and its future — on a task of its own,
/// as `tower::buffer` or a user's spawning layer would: the thread the server polls
/// on never runs the stages.
#[derive(Clone)]
struct OnAnotherTask<S>(S);

type Answer<E> = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, E>> + Send>>;

impl<S> hyper::service::Service<Request<Incoming>> for OnAnotherTask<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<ProxyBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<ProxyBody>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move {
            tokio::spawn(async move { inner.call(request).await })
                .await
                .expect("the pipeline's task")
        })
    }
}

fn state_for(backend: &Backend) -> Arc<ProxyState> {
    let config = parse(&simple_config(&[("d1", &backend.url())], ""), Format::Json).unwrap();
    Arc::new(ProxyState::new(config).unwrap())
}

/// What the destination saw as `X-Forwarded-For` for a GET sent to `url`.
async fn forwarded_for(url: String) -> Vec<String> {
    let r = within("the response", h1_client().get(url).send())
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.headers()
        .get_all("x-echo-x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn x_forwarded_for_names_the_client_when_the_pipeline_runs_on_another_task() {
    let b = echo_backend().await;
    let state = state_for(&b);
    // The fused pipeline, then the same stages as tower layers.
    let fused = serve(OnAnotherTask(pipeline::FusedDefault::from_state(
        state.clone(),
    )))
    .await;
    let layered = serve(OnAnotherTask(ProxyService::new(pipeline::layered_default(
        state.clone(),
    ))))
    .await;
    for ((addr, stop, done), form) in [(fused, "fused"), (layered, "layered")] {
        let xff = forwarded_for(format!("http://{addr}/x")).await;
        assert_eq!(xff, ["127.0.0.1"], "{form}");
        let _ = stop.send(());
        within("the server to stop", done).await.unwrap();
    }
}

fuseway::default_pipeline! {
    /// The proxy behind axum's fallback, as in `examples/axum_fallback.rs`.
    pub struct AxumFallback(http::Request<axum::body::Body>) {
        => forwarder: fuseway::forwarding::Forwarder<axum::body::Body>,
    }
}

/// axum's own router, fuseway's pipeline as its fallback, the client handed over from
/// axum's `ConnectInfo` as the example does.
fn axum_app(proxy: AxumFallback, local: SocketAddr, hand_over: bool) -> Router {
    Router::new().fallback(move |mut req: Request<axum::body::Body>| {
        let proxy = proxy.clone();
        if hand_over {
            if let Some(&ConnectInfo(remote)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
                req.extensions_mut().insert(ConnectionInfo {
                    remote,
                    local,
                    tls: false,
                });
            }
        }
        async move {
            let response = proxy.call_fused(req).await.map_err(|e: Infallible| e)?;
            Ok::<_, Infallible>(response.into_response().map(|b| {
                axum::body::Body::new(http_body_util::BodyExt::map_err(b, axum::Error::new))
            }))
        }
    })
}

#[tokio::test]
async fn x_forwarded_for_names_the_client_behind_axum_serve() {
    let b = echo_backend().await;
    let state = state_for(&b);
    // With the hand-over the destination learns the client; without it (what the
    // example did before) it cannot: the check that the hand-over is what does it.
    for (hand_over, expected) in [(true, vec!["127.0.0.1".to_owned()]), (false, vec![])] {
        let proxy = AxumFallback::from_state(state.clone(), fuseway::forwarding::Forwarder::new());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let app = axum_app(proxy, local, hand_over);
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
        });
        let xff = forwarded_for(format!("http://{local}/x")).await;
        assert_eq!(xff, expected, "hand-over: {hand_over}");
        let _ = stop.send(());
        within("axum to stop", served).await.unwrap();
    }
}
