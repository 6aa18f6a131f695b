//! A custom pipeline in code: fuseway's stages as tower layers, a stage of your own,
//! a tower-http layer and an ordinary tower layer mixed in.
//!
//! ```text
//! cargo run --example custom_pipeline -- path/to/proxy.json
//! ```

use std::sync::Arc;

use fuseway::balancing::LoadBalancing;
use fuseway::body::Incoming;
use fuseway::forwarding::Forwarder;
use fuseway::request::{ProxyResponse, Routed};
use fuseway::routing::Routing;
use fuseway::server::{ProxyService, Server};
use fuseway::stage::{Stage, StageLayer};
use fuseway::state::ProxyState;
use http::{HeaderName, HeaderValue, StatusCode};
use tower::limit::ConcurrencyLimitLayer;
use tower::util::MapResponseLayer;
use tower::ServiceBuilder;
use tower_http::set_header::SetRequestHeaderLayer;

/// Refuses routes whose metadata says `"Internal": "true"` unless the request carries
/// `x-internal-token`, and tags every response with the route id.
struct InternalOnly;

impl<B> Stage<Routed<B>> for InternalOnly {
    type Out = Routed<B>;
    type State = Arc<str>;

    fn on_request(&self, req: Routed<B>) -> Result<(Routed<B>, Arc<str>), ProxyResponse> {
        let route = req.context.route();
        let internal = route.config().metadata.get("Internal").map(String::as_str) == Some("true");
        if internal && !req.request.headers().contains_key("x-internal-token") {
            return Err(ProxyResponse::status(StatusCode::FORBIDDEN));
        }
        let id: Arc<str> = Arc::from(route.id());
        Ok((req, id))
    }

    fn on_response(&self, route: Arc<str>, response: &mut ProxyResponse) {
        if let Ok(v) = route.parse() {
            response.response.headers_mut().insert("x-route", v);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "proxy.json".into());
    let config = fuseway::config::load_file(path.as_ref())?;
    let state = Arc::new(ProxyState::new(config)?);

    let pipeline = ServiceBuilder::new()
        // A tower-http layer on the incoming `http::Request`, before routing.
        .layer(SetRequestHeaderLayer::overriding(
            HeaderName::from_static("x-proxied-by"),
            HeaderValue::from_static("fuseway"),
        ))
        // tower-http layers speak `http::Response`: turn the pipeline's `ProxyResponse`
        // into one below them.
        .layer(MapResponseLayer::new(ProxyResponse::into_response))
        .layer(StageLayer::new(Routing::new(state)))
        .layer(StageLayer::new(InternalOnly))
        // Any tower layer fits between stages; this one caps in-flight requests.
        .layer(ConcurrencyLimitLayer::new(1024))
        .layer(StageLayer::new(LoadBalancing::new()))
        .service(Forwarder::<Incoming>::new());

    let server = Server::bind(&["127.0.0.1:8080".parse()?]).await?;
    println!("listening on {:?}", server.local_addrs());
    server
        .serve(ProxyService::new(pipeline), async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
