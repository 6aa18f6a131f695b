//! fuseway as the fallback of an axum application: axum serves its own routes, and
//! every other request goes through the fused default pipeline.
//!
//! axum accepts the connections here, so it is axum that knows the client: served with
//! `into_make_service_with_connect_info`, each request carries axum's `ConnectInfo`,
//! which the fallback hands to fuseway as a [`ConnectionInfo`] in the request's
//! extensions (`X-Forwarded-For` names the client from it; without it the destination
//! would not learn the client's address).
//!
//! ```text
//! cargo run --example axum_fallback -- proxy.json
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use fuseway::request::ConnectionInfo;
use fuseway::state::ProxyState;
use http::Request;
use http_body_util::BodyExt;

fuseway::default_pipeline! {
    /// The proxy behind axum's fallback. axum hands over `Request<axum::body::Body>`.
    pub struct Fallback(http::Request<axum::body::Body>) {
        => forwarder: fuseway::forwarding::Forwarder<axum::body::Body>,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "proxy.json".into());
    let state = Arc::new(ProxyState::new(fuseway::config::load_file(path.as_ref())?)?);
    let proxy = Fallback::from_state(state, fuseway::forwarding::Forwarder::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    let local = listener.local_addr()?;

    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .fallback(move |mut req: Request<Body>| {
            let proxy = proxy.clone();
            // The client axum accepted, for `X-Forwarded-For` and the affinity cookie's
            // `Secure` rule.
            if let Some(&ConnectInfo(remote)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
                req.extensions_mut().insert(ConnectionInfo {
                    remote,
                    local,
                    tls: false,
                });
            }
            async move {
                let response = proxy.call_fused(req).await.map_err(|e: Infallible| e)?;
                Ok::<_, Infallible>(
                    response
                        .into_response()
                        .map(|b| Body::new(b.map_err(axum::Error::new))),
                )
            }
        });

    println!("axum + fuseway on {local}");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
