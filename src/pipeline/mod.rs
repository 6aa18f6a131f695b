//! Pipelines: the default stage list assembled as separate tower layers.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fuseway::{config, pipeline, server::{ProxyService, Server}, state::ProxyState};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = config::load_file("proxy.json".as_ref())?;
//! let state = Arc::new(ProxyState::new(config)?);
//! let service = ProxyService::new(pipeline::layered_default(state));
//! Server::bind(&["127.0.0.1:8080".parse()?]).await?
//!     .serve(service, std::future::pending())
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The same stages compose by hand with `tower::ServiceBuilder`, mixed with any tower
//! layer, as long as the request types line up (routing takes `http::Request<B>` and
//! gives [`Routed<B>`](crate::request::Routed), load balancing gives
//! [`Balanced<B>`](crate::request::Balanced), which the [`Forwarder`] takes):
//!
//! ```
//! use std::sync::Arc;
//! use fuseway::{balancing::LoadBalancing, forwarding::Forwarder, routing::Routing};
//! use fuseway::stage::StageLayer;
//! use fuseway::state::ProxyState;
//! use fuseway::body::Incoming;
//! use tower::ServiceBuilder;
//!
//! # fn build(state: Arc<ProxyState>) {
//! let svc = ServiceBuilder::new()
//!     .layer(StageLayer::new(Routing::new(state)))
//!     .layer(StageLayer::new(LoadBalancing::new()))
//!     .service(Forwarder::<Incoming>::new());
//! # let _ = svc; }
//! ```

pub(crate) mod builtins;
mod fused;
mod fused_future;

use std::sync::Arc;

use crate::body::Incoming;

pub use fused::FusedDefault;
pub use fused_future::{FusedFuture, FusedPipeline, FusedResponse, HyperTerminal, Terminal};

use crate::affinity::SessionAffinity;
use crate::balancing::LoadBalancing;
use crate::forwarding::Forwarder;
use crate::health::PassiveHealth;
use crate::limits::Limits;
use crate::routing::Routing;
use crate::stage::StageService;
use crate::state::ProxyState;
use crate::telemetry::Telemetry;

/// The default stages as separate layers over terminal `T`: telemetry -> routing ->
/// session affinity -> limits -> load balancing -> passive health -> `T`.
pub type Layered<T> = StageService<
    Telemetry,
    StageService<
        Routing,
        StageService<
            SessionAffinity,
            StageService<Limits, StageService<LoadBalancing, StageService<PassiveHealth, T>>>,
        >,
    >,
>;

/// The default pipeline as separate layers over the [`Forwarder`].
pub type LayeredDefault<B = Incoming> = Layered<Forwarder<B>>;

/// The default pipeline as separate tower layers over a new [`Forwarder`].
pub fn layered_default(state: Arc<ProxyState>) -> LayeredDefault {
    layered_default_with(state, Forwarder::new())
}

/// The default stages as separate tower layers over `terminal` (a [`Forwarder`], or any
/// tower service taking `Balanced<B>`, such as [`StubForwarder`](crate::testing::StubForwarder)).
pub fn layered_default_with<T>(state: Arc<ProxyState>, terminal: T) -> Layered<T> {
    StageService::new(
        Telemetry::new(&state),
        StageService::new(
            Routing::new(state),
            StageService::new(
                SessionAffinity::new(),
                StageService::new(
                    Limits::new(),
                    StageService::new(
                        LoadBalancing::new(),
                        StageService::new(PassiveHealth::new(), terminal),
                    ),
                ),
            ),
        ),
    )
}
