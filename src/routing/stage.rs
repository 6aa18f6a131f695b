//! The routing stage: `http::Request<B>` -> [`Routed<B>`].

use std::sync::Arc;

use http::{Request, StatusCode};

use crate::policy::PolicyRequest;
use crate::request::{ProxyResponse, RouteContext, Routed};
use crate::stage::{ByRef, Stage};
use crate::state::ProxyState;

/// Finds the route for a request in the current snapshot. More than one `Host` header,
/// or a host the configuration's `AllowedHosts` does not name: 400. No route: 404. The route's [named policies](crate::policy) run next (and may
/// answer: the answer is attributed to the route and its cluster, for telemetry). A
/// route whose cluster does not exist: 503. The request continues with the cluster's
/// available destinations as candidates (possibly none: load balancing answers 503
/// then). On the way back, the route's policies see the response.
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

impl<B: 'static> ByRef<Request<B>> for Routing {
    type Decision = RouteContext;

    /// [`Stage::on_request`] without moving the request: the route's context, which
    /// [`Routing::into_out`] joins to the request (the default fused pipeline calls
    /// these two: the request is moved once, not into the stage and out of its result).
    #[inline]
    fn on_request_by_ref(&self, request: &Request<B>) -> Result<(RouteContext, ()), ProxyResponse> {
        // Two `Host` lines name two hosts, and which one counts is ambiguous
        // (RFC 9112 section 3.2: 400).
        if crate::forwarding::headers::repeated(request.headers(), &http::header::HOST) {
            return Err(ProxyResponse::status(StatusCode::BAD_REQUEST));
        }
        let snapshot = self.state.snapshot();
        let table = snapshot.route_table();
        // ASP.NET's host filtering (`AllowedHosts`), before any route is looked at.
        if !table.admits(request.uri(), request.headers()) {
            std::hint::cold_path();
            return Err(ProxyResponse::status(StatusCode::BAD_REQUEST));
        }
        let Some(route) = table.find(request.method(), request.uri(), request.headers()) else {
            return Err(ProxyResponse::status(StatusCode::NOT_FOUND));
        };
        let matched = &snapshot.routes()[route];
        for policy in matched.policies() {
            if let Err(mut answer) = policy.on_request(&PolicyRequest::new(request, matched.id())) {
                // Counted on its route (the route's policies do not see it: a stage's
                // own answer goes back through the stages before it only).
                if answer.outcome.route().is_none() {
                    let cluster = matched.cluster_index();
                    answer.outcome.set_route(snapshot.clone(), route, cluster);
                }
                return Err(answer);
            }
        }
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
            let mut answer = ProxyResponse::status(StatusCode::SERVICE_UNAVAILABLE);
            answer.outcome.set_route(snapshot.clone(), route, None);
            return Err(answer);
        };
        let candidates = crate::health::available(&snapshot.clusters()[cluster]);
        let context = RouteContext::new(snapshot, route, cluster, candidates);
        Ok((context, ()))
    }

    /// The routed request: `request` with the context [`Routing::on_request_by_ref`]
    /// found for it.
    #[inline]
    fn into_out(request: Request<B>, context: RouteContext) -> Routed<B> {
        Routed { request, context }
    }
}

impl<B: 'static> Stage<Request<B>> for Routing {
    type Out = Routed<B>;
    type State = ();

    fn on_request(&self, request: Request<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        let (context, state) = self.on_request_by_ref(&request)?;
        Ok((Self::into_out(request, context), state))
    }

    fn on_response(&self, _state: (), response: &mut ProxyResponse) {
        let outcome = &response.outcome;
        if outcome.route().is_none_or(|r| r.policies().is_empty()) {
            return;
        }
        // The route lives in the snapshot the response holds; keep it while the
        // policies change the response.
        let (Some(snapshot), Some(route)) = (outcome.snapshot().cloned(), outcome.route_index())
        else {
            return;
        };
        for policy in snapshot.routes()[route].policies() {
            policy.on_response(response);
        }
    }
}
