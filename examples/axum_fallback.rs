//! fuseway as the fallback of an axum application: axum serves its own routes, and
//! every other request goes through the fused default pipeline.
//!
//! ```text
//! cargo run --example axum_fallback -- proxy.json
//! ```

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
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

    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .fallback(move |req: Request<Body>| {
            let proxy = proxy.clone();
            async move {
                let response = proxy.call_fused(req).await.map_err(|e: Infallible| e)?;
                Ok::<_, Infallible>(
                    response
                        .into_response()
                        .map(|b| Body::new(b.map_err(axum::Error::new))),
                )
            }
        });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    println!("axum + fuseway on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
