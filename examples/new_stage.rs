//! Writing a stage once and using it both ways: as a tower layer in a layered pipeline,
//! and fused into the default pipeline by `default_pipeline!`.
//!
//! ```text
//! cargo run --example new_stage -- proxy.json
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fuseway::config::{ConfigError, ConfigErrors};
use fuseway::policy::Policies;
use fuseway::request::{ProxyResponse, Routed};
use fuseway::server::{ProxyService, Server};
use fuseway::stage::{Stage, StageLayer};
use fuseway::state::{ClusterData, ClusterSource, ProxyState};
use http::{HeaderValue, StatusCode};

/// A cluster whose metadata says `"RequiresKey": "true"`: compiled once per
/// configuration load (a typo is refused with its path), read per request without
/// parsing or allocating.
#[derive(Debug)]
pub struct RequiresKey;

impl ClusterData for RequiresKey {
    fn compile(
        cluster: &ClusterSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors> {
        match cluster
            .config
            .metadata
            .get("RequiresKey")
            .map(String::as_str)
        {
            Some("true") => Ok(Some(RequiresKey)),
            None | Some("false") => Ok(None),
            Some(other) => Err(ConfigError::new(
                format!("{}.Metadata.RequiresKey", cluster.path),
                format!("`{other}` is not true or false"),
            )
            .into()),
        }
    }
}

/// Blocks requests without `x-api-key` to clusters that require a key, and counts what it
/// let through.
#[derive(Debug, Default)]
pub struct ApiKey {
    passed: AtomicU64,
}

impl<B> Stage<Routed<B>> for ApiKey {
    type Out = Routed<B>;
    /// Whether the cluster needed a key: read on the way back.
    type State = bool;

    fn on_request(&self, req: Routed<B>) -> Result<(Routed<B>, bool), ProxyResponse> {
        let needs_key = req.context.cluster().data::<RequiresKey>().is_some();
        if needs_key && !req.request.headers().contains_key("x-api-key") {
            return Err(ProxyResponse::status(StatusCode::UNAUTHORIZED));
        }
        self.passed.fetch_add(1, Ordering::Relaxed);
        Ok((req, needs_key))
    }

    fn on_response(&self, needed_key: bool, response: &mut ProxyResponse) {
        if needed_key {
            response
                .response
                .headers_mut()
                .insert("x-key-checked", HeaderValue::from_static("1"));
        }
    }
}

// Fused: the stage runs right after routing, inside the one state machine.
fuseway::default_pipeline! {
    pub struct WithApiKey {
        after routing: api_key: ApiKey,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "proxy.json".into());
    // The stage's cluster data is compiled with the state, and again on every reload.
    let policies = Policies::new().cluster_data::<RequiresKey>();
    let config = fuseway::config::load_file(path.as_ref())?;
    let state = Arc::new(ProxyState::with_policies(config, policies)?);

    // Layered: the same stage as a tower layer, in front of the default layers.
    let layered = tower::ServiceBuilder::new()
        .layer(StageLayer::new(fuseway::routing::Routing::new(
            state.clone(),
        )))
        .layer(StageLayer::new(ApiKey::default()))
        .layer(StageLayer::new(fuseway::limits::Limits::new()))
        .layer(StageLayer::new(fuseway::balancing::LoadBalancing::new()))
        .service(fuseway::forwarding::Forwarder::<fuseway::body::Incoming>::new());
    let fused = WithApiKey::from_state(state, ApiKey::default());

    let layered_server = Server::bind(&["127.0.0.1:8081".parse()?]).await?;
    let fused_server = Server::bind(&["127.0.0.1:8080".parse()?]).await?;
    println!("fused on 127.0.0.1:8080, layered on 127.0.0.1:8081");
    tokio::try_join!(
        fused_server.serve(fused, fuseway::server::shutdown_signal()),
        layered_server.serve(
            ProxyService::new(layered),
            fuseway::server::shutdown_signal()
        ),
    )?;
    Ok(())
}
