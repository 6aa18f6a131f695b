//! The routing stage: `http::Request<B>` -> [`Routed<B>`].

use std::sync::Arc;

use http::{Request, StatusCode};

use crate::request::{ProxyResponse, RouteContext, Routed};
use crate::stage::Stage;
use crate::state::ProxyState;

/// Finds the route for a request in the current snapshot. More than one `Host` header:
/// 400. No route: 404. A route whose
/// cluster does not exist: 503. The request continues with the cluster's available
/// destinations as candidates (possibly none: load balancing answers 503 then).
#[derive(Debug, Clone)]
pub struct Routing {
    state: Arc<ProxyState>,
}

impl Routing {
    /// Route against `state`'s current snapshot.
    pub fn new(state: Arc<ProxyState>) -> Self {
        Routing { state }
    }
}

impl<B> Stage<Request<B>> for Routing {
    type Out = Routed<B>;
    type State = ();

    fn on_request(&self, request: Request<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        // Two `Host` lines name two hosts, and which one counts is ambiguous
        // (RFC 9112 section 3.2: 400).
        let mut hosts = request.headers().get_all(http::header::HOST).iter();
        if hosts.next().is_some() && hosts.next().is_some() {
            return Err(ProxyResponse::status(StatusCode::BAD_REQUEST));
        }
        let snapshot = self.state.snapshot();
        let Some(route) =
            snapshot
                .route_table()
                .find(request.method(), request.uri(), request.headers())
        else {
            return Err(ProxyResponse::status(StatusCode::NOT_FOUND));
        };
        let Some(cluster) = snapshot.routes()[route].cluster_index() else {
            tracing::warn!(
                route = snapshot.routes()[route].id(),
                cluster = snapshot.routes()[route]
                    .config()
                    .cluster_id
                    .as_deref()
                    .unwrap_or(""),
                "route's cluster does not exist: 503"
            );
            return Err(ProxyResponse::status(StatusCode::SERVICE_UNAVAILABLE));
        };
        let candidates = crate::health::available(&snapshot.clusters()[cluster]);
        let context = RouteContext::new(snapshot, route, cluster, candidates);
        Ok((Routed { request, context }, ()))
    }
}
