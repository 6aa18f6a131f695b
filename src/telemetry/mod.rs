//! Telemetry: the first stage of the default pipeline. It records every request in the
//! [`Metrics`] of its [`ProxyState`] (Prometheus counters and histograms, served by the
//! [admin listener](crate::admin)) and opens a `tracing` span per request.
//!
//! The stage keeps the request's start time in its state and records on the way back,
//! when it sees the final [`ProxyResponse`] and its [`Outcome`](crate::request::Outcome):
//! route, cluster, destination (where the request was finally sent, reassignments
//! included), status, duration and the forwarding error's kind. Recording takes no lock
//! and allocates nothing: each snapshot caches the metric handles of every (route,
//! destination) pair when the configuration is loaded.
//!
//! The span is `fuseway::telemetry` / `request` at DEBUG level (enable it with
//! `RUST_LOG=fuseway::telemetry=debug`), with fields `method`, `path`, `route`,
//! `cluster`, `destination`, `status`, `duration_ms` and `error`; a DEBUG event
//! `request finished` is emitted inside it when the response headers are ready.
//!
//! Durations are measured until the response headers are ready (response bodies
//! stream afterwards); errors while a body streams are not counted here. Requests the
//! proxy answers before choosing a destination (404, 429, 503 from limits or
//! affinity) are counted with empty `route`, `cluster` and `destination` labels.

mod metrics;

use std::sync::Arc;

use std::time::Instant;
use tracing::field::Empty;

pub use metrics::{
    health_name, kind_name, Metrics, RouteTelemetry, CONTENT_TYPE, DURATION_BUCKETS,
    RECENT_ERRORS_WINDOW,
};

use crate::request::ProxyResponse;
use crate::stage::Stage;
use crate::state::ProxyState;
use metrics::{InFlight, TargetRef};

/// The telemetry stage (`http::Request<B>` in and out). See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Telemetry {
    metrics: Arc<Metrics>,
}

/// What [`Telemetry`] keeps while a request is in the pipeline.
#[derive(Debug)]
pub struct Started {
    start: Instant,
    span: tracing::Span,
    _in_flight: InFlight,
}

impl Telemetry {
    /// Record into `state`'s metrics.
    pub fn new(state: &Arc<ProxyState>) -> Self {
        Telemetry {
            metrics: state.metrics().clone(),
        }
    }
}

impl<B> Stage<http::Request<B>> for Telemetry {
    type Out = http::Request<B>;
    type State = Started;

    fn on_request(
        &self,
        request: http::Request<B>,
    ) -> Result<(http::Request<B>, Started), ProxyResponse> {
        let span = tracing::debug_span!(
            target: "fuseway::telemetry",
            "request",
            method = %request.method(),
            path = request.uri().path(),
            route = Empty,
            cluster = Empty,
            destination = Empty,
            status = Empty,
            duration_ms = Empty,
            error = Empty,
        );
        let started = Started {
            start: Instant::now(),
            span,
            _in_flight: self.metrics.enter(),
        };
        Ok((request, started))
    }

    fn on_response(&self, started: Started, response: &mut ProxyResponse) {
        let elapsed = started.start.elapsed();
        let status = response.status_code().as_u16();
        let outcome = &response.outcome;
        let error = outcome.error.as_ref().map(|e| e.kind());
        let target = match (outcome.context(), outcome.destination_index()) {
            (Some(context), Some(index)) => {
                let route = context.route();
                let cached = route
                    .cluster_index()
                    .map(|c| &context.snapshot().clusters()[c])
                    .filter(|c| std::ptr::eq(*c, context.cluster()))
                    .and_then(|_| route.telemetry().target(index));
                Some(match cached {
                    Some(t) => TargetRef::Cached(t),
                    None => TargetRef::Other {
                        route: route.id(),
                        cluster: context.cluster().id(),
                        destination: context.cluster().destinations()[index].id(),
                    },
                })
            }
            _ => None,
        };
        self.metrics.record(target, status, elapsed, error);
        let span = &started.span;
        if !span.is_disabled() {
            if let (Some(context), Some(destination)) = (outcome.context(), outcome.destination()) {
                span.record("route", context.route().id());
                span.record("cluster", context.cluster().id());
                span.record("destination", destination.id());
            }
            span.record("status", status);
            span.record("duration_ms", elapsed.as_secs_f64() * 1000.0);
            if let Some(kind) = error {
                span.record("error", kind_name(kind));
            }
            tracing::debug!(target: "fuseway::telemetry", parent: span, "request finished");
        }
    }
}
