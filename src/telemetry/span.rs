//! The proxy's own span of each request, as a record: one INFO event on the
//! `fuseway::span` target ([`TARGET`]) per request, written by the telemetry stage when
//! the exchange is over (like the [access log](super::access)). With the `otlp` feature,
//! [`otlp::SpanLayer`](super::otlp::SpanLayer) turns these records into OpenTelemetry
//! spans and exports them; any other `tracing` subscriber may take them too.
//!
//! While a subscriber takes the target, every request is given a span in a trace: a
//! child of the client's valid `traceparent` (same trace id and flags), else the root of
//! a new sampled trace. The destination is sent a `traceparent` naming that span as its
//! parent, so the destination's own spans nest under the proxy's; the access log's
//! `request_id` is then the trace id (unless the client sent an `X-Request-Id`).
//! Without such a subscriber nothing of this happens: a request without `traceparent`
//! goes on without one, and nothing is allocated for it.
//!
//! The record's fields: `trace_id` (`u128`), `span_id` (`u64`: the proxy's span),
//! `parent_span_id` (`u64`, 0 where the trace started here), `trace_flags` (bit 0:
//! sampled), `duration_ns` (from the request's arrival in the pipeline to the
//! exchange's end), `upstream_ns` (to the destination's response head; absent where
//! none was asked), and the access log's `client`, `method`, `host`, `path`, `protocol`,
//! `status`, `bytes_in`, `bytes_out`, `route`, `cluster`, `destination` and `error`.

use std::time::Duration;

use super::access::Record;
use super::kind_name;
use crate::forwarding::trace_context::SpanIds;
use crate::request::{ExchangeReport, ForwardErrorKind};

/// The `tracing` target of the span records.
pub const TARGET: &str = "fuseway::span";

/// Whether a subscriber takes span records now.
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "fuseway::span", tracing::Level::INFO)
}

/// Write the span record of `record`'s exchange.
pub(super) fn write(
    ids: &SpanIds,
    record: &Record,
    report: &ExchangeReport,
    duration: Duration,
    error: Option<ForwardErrorKind>,
) {
    let a = &record.arrival;
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let mut client = [0; 64];
    tracing::info!(
        target: "fuseway::span",
        trace_id = ids.trace_id,
        span_id = ids.span_id,
        parent_span_id = ids.parent_id,
        trace_flags = ids.flags,
        duration_ns = nanos(duration),
        upstream_ns = record.upstream.map(nanos),
        client = a.client(&mut client),
        method = a.method(),
        host = a.host(),
        path = a.path(),
        protocol = a.protocol(),
        status = record.status,
        bytes_in = report.request_bytes,
        bytes_out = report.response_bytes,
        route = record.route(),
        cluster = record.cluster(),
        destination = record.destination(),
        error = error.map(kind_name),
        "request"
    );
}
