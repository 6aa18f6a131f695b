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
//! With a subscriber for [`access::TARGET`], it also writes the [access log](access):
//! one record per request when the exchange is over; with one for [`span::TARGET`], a
//! [span record](span) per request, the proxy's span in the request's trace (exported
//! over OTLP by [`otlp`] with the `otlp` feature).
//!
//! Durations are measured until the response headers are ready (response bodies
//! stream afterwards); errors while a body streams are not counted here. Requests the
//! proxy answers before choosing a destination (a route policy's own answer; 429, 413
//! or 503 from limits, affinity or balancing) are counted on their route and cluster
//! with an empty `destination` label; those without a route (404, 400) with all three
//! empty.

pub mod access;
mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod span;

use std::sync::Arc;

use tokio::time::Instant;
use tracing::field::Empty;

pub use metrics::history::{Charts, Point, POINTS};
pub use metrics::{
    health_name, kind_name, ConfigSourceStatus, Metrics, RouteTelemetry, CONTENT_TYPE,
    DURATION_BUCKETS, RECENT_ERRORS_WINDOW,
};

use crate::request::ProxyResponse;
use crate::stage::{InPlace, Stage};
use crate::state::ProxyState;
use metrics::{InFlight, TargetRef};

/// The telemetry stage (`http::Request<B>` in and out). See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Telemetry {
    metrics: Arc<Metrics>,
    in_flight: metrics::InFlightHandle,
}

/// What [`Telemetry`] keeps while a request is in the pipeline.
#[derive(Debug)]
pub struct Started {
    start: Instant,
    span: tracing::Span,
    _in_flight: InFlight,
    /// For the access log and the span record, when either is written.
    access: Option<access::Boxed>,
}

impl Telemetry {
    /// Record into `state`'s metrics.
    pub fn new(state: &Arc<ProxyState>) -> Self {
        Telemetry {
            in_flight: state.metrics().in_flight_handle(),
            metrics: state.metrics().clone(),
        }
    }
}

impl<B: 'static> InPlace<http::Request<B>> for Telemetry {
    /// [`Stage::on_request`] on the request where it lies (the default fused pipeline
    /// calls this: the request is not moved in and out).
    #[inline]
    fn on_request_in_place(
        &self,
        request: &mut http::Request<B>,
    ) -> Result<Started, ProxyResponse> {
        // The span is built out of line: the level check is all most requests run.
        let span = if tracing::level_enabled!(tracing::Level::DEBUG) {
            request_span(request)
        } else {
            tracing::Span::none()
        };
        let ids = span::enabled().then(|| {
            use crate::forwarding::trace_context::{OwnSpan, SpanIds};
            request.extensions_mut().insert(OwnSpan);
            SpanIds::enter(request.headers_mut())
        });
        let log = access::enabled();
        let started = Started {
            start: crate::clock::now(),
            span,
            _in_flight: self.in_flight.enter(),
            access: (log || ids.is_some())
                .then(|| access::Boxed::new(access::Arrival::of(request, log, ids))),
        };
        Ok(started)
    }
}

/// The `request` span of `request` (`Span::none()` where no subscriber wants it).
#[cold]
#[inline(never)]
fn request_span<B>(request: &http::Request<B>) -> tracing::Span {
    tracing::debug_span!(
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
    )
}

impl<B: 'static> Stage<http::Request<B>> for Telemetry {
    type Out = http::Request<B>;
    type State = Started;

    fn on_request(
        &self,
        mut request: http::Request<B>,
    ) -> Result<(http::Request<B>, Started), ProxyResponse> {
        let started = self.on_request_in_place(&mut request)?;
        Ok((request, started))
    }

    fn on_response(&self, started: Started, response: &mut ProxyResponse) {
        let elapsed = crate::clock::now().saturating_duration_since(started.start);
        let status = response.status_code().as_u16();
        let outcome = &response.outcome;
        let error = outcome.error.as_ref().map(|e| e.kind());
        let target = match (
            outcome.snapshot(),
            outcome.route(),
            outcome.cluster(),
            outcome.destination_index(),
        ) {
            (Some(snapshot), Some(route), Some(cluster), Some(index)) => {
                let cached = route
                    .cluster_index()
                    .map(|c| &snapshot.clusters()[c])
                    .filter(|c| std::ptr::eq(*c, cluster))
                    .and_then(|_| route.telemetry().target(index));
                Some(match cached {
                    Some(t) => TargetRef::Cached(t),
                    None => TargetRef::Other {
                        route: route.id(),
                        cluster: cluster.id(),
                        destination: cluster.destinations()[index].id(),
                    },
                })
            }
            // Answered before a destination was chosen: counted on its route, if any.
            (_, Some(route), _, None) => route.telemetry().early().map(TargetRef::Cached),
            _ => None,
        };
        self.metrics.record(target, status, elapsed, error);
        let span = &started.span;
        if !span.is_disabled() {
            if let (Some(route), Some(cluster), Some(destination)) =
                (outcome.route(), outcome.cluster(), outcome.destination())
            {
                span.record("route", route.id());
                span.record("cluster", cluster.id());
                span.record("destination", destination.id());
            }
            span.record("status", status);
            span.record("duration_ms", elapsed.as_secs_f64() * 1000.0);
            if let Some(kind) = error {
                span.record("error", kind_name(kind));
            }
            tracing::debug!(target: "fuseway::telemetry", parent: span, "request finished");
        }
        if let Some(arrival) = started.access {
            let upstream = outcome.destination().is_some().then_some(elapsed);
            let record = arrival.answered(started.start, upstream, status, outcome);
            response.on_exchange_report(move |report| record.write(report));
        }
    }
}

impl ProxyState {
    /// Its metrics (see [`telemetry`](crate::telemetry)): they live as long as the
    /// state and count across reloads.
    pub fn metrics(&self) -> &Arc<Metrics> {
        static NONE_KEPT: std::sync::LazyLock<Arc<Metrics>> =
            std::sync::LazyLock::new(Default::default);
        self.shared::<Arc<Metrics>>().unwrap_or_else(|| &NONE_KEPT)
    }
}

/// Compiled for every route when a state is built (the telemetry stage's
/// [`RouteData`](crate::state::RouteData)): the metric handles of each destination of
/// the route's cluster, from the state's metrics (made at each one's first request;
/// the previous snapshot's kept when the route's cluster and destinations are the same).
impl crate::state::RouteData for RouteTelemetry {
    fn compile(
        source: &crate::state::RouteSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, crate::config::ConfigErrors> {
        Ok(source
            .shared
            .get::<Arc<Metrics>>()
            .map(|metrics| metrics.route(&Arc::from(source.id), source.cluster, previous)))
    }
}

impl crate::state::Route {
    /// Its metric handles (each set made at its first request).
    pub fn telemetry(&self) -> &RouteTelemetry {
        static NONE_COMPILED: std::sync::LazyLock<RouteTelemetry> =
            std::sync::LazyLock::new(Default::default);
        self.data::<RouteTelemetry>()
            .unwrap_or_else(|| &NONE_COMPILED)
    }
}

/// Forget the per-destination series of destinations `snapshot` no longer has (run
/// with every snapshot built).
pub(crate) fn retain_destinations(
    shared: &crate::state::Shared,
    snapshot: &crate::state::Snapshot,
) {
    if let Some(metrics) = shared.get::<Arc<Metrics>>() {
        metrics.retain_destinations(snapshot);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::config::{parse, Format};
    use crate::state::ProxyState;
    use crate::testing::{block_on, SharedBuffer, StubForwarder, StubMode};

    crate::default_pipeline! {
        struct Stubbed(http::Request<http_body_util::Empty<bytes::Bytes>>) {
            => stub: crate::testing::StubForwarder,
        }
    }

    #[test]
    fn the_span_has_route_cluster_destination_status_and_duration() {
        let config = parse(
            r#"{ "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/x" } } },
                 "Clusters": { "c": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9" } } } } }"#,
            Format::Json,
        )
        .unwrap();
        let state = Arc::new(ProxyState::new(config).unwrap());
        let pipeline = Stubbed::from_state(state.clone(), StubForwarder::new(StubMode::Async));
        let buffer = SharedBuffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer({
                let b = buffer.clone();
                move || b.clone()
            })
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for path in ["/x", "/nowhere"] {
                let request = http::Request::get(path)
                    .body(http_body_util::Empty::new())
                    .unwrap();
                drop(block_on(pipeline.call_fused(request)).unwrap());
            }
        });
        let out = buffer.text();
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("request finished"))
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        for field in [
            "method=GET",
            "path=\"/x\"",
            "route=\"r\"",
            "cluster=\"c\"",
            "destination=\"d1\"",
            "status=200",
            "duration_ms=",
        ] {
            assert!(lines[0].contains(field), "{field} missing: {}", lines[0]);
        }
        assert!(
            lines[1].contains("status=404") && !lines[1].contains("route="),
            "{}",
            lines[1]
        );
        assert_eq!(state.metrics().in_flight(), 0);
    }
}
