//! OpenTelemetry export of the proxy's spans (feature `otlp`).
//!
//! [`layer`] is a `tracing` layer that turns each [span record](super::span) into an
//! OpenTelemetry span and hands it to a [`SpanProcessor`] (the SDK's
//! [`BatchSpanProcessor`] batches and exports on a thread of its own: a request never
//! waits for an export). [`grpc`] builds that processor with an OTLP/gRPC exporter; the
//! `fuseway` binary does so for `--otlp-endpoint`.
//!
//! One span per request, kind `SERVER`, named `<method> <route id>` (just the method
//! where no route matched), from the request's arrival in the pipeline to the end of the
//! exchange (the last body byte, or its failure), with the HTTP semantic conventions'
//! attributes: `http.request.method`, `url.path`, `url.query`, `server.address`,
//! `server.port`, `client.address`, `client.port`, `network.protocol.name`,
//! `network.protocol.version`, `http.response.status_code`, `http.request.body.size`,
//! `http.response.body.size`, `error.type` (fuseway's error kind, else the status code
//! of a 5xx), and fuseway's `fuseway.route`, `fuseway.cluster`, `fuseway.destination`
//! and `fuseway.upstream.duration` (seconds to the destination's response head). Its
//! status is an error for a 5xx answer or a failed exchange. Spans of traces the client
//! marked as not sampled are not exported (the parent's decision, as OpenTelemetry's
//! default `ParentBased` sampler does); traces started by the proxy are sampled.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let export = fuseway::telemetry::otlp::grpc("http://127.0.0.1:4317")?;
//! tracing_subscriber::registry()
//!     .with(fuseway::telemetry::otlp::layer(export.processor()))
//!     .init();
//! // ... serve; at the end, send what is left:
//! export.shutdown();
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use tracing::field::{Field, Visit};
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use super::span::TARGET;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `tracing` layer that turns span records into spans for `processor` (made by
/// [`layer`], which filters it to the span records' target).
#[derive(Debug)]
pub struct SpanLayer<P> {
    processor: Arc<P>,
    scope: InstrumentationScope,
}

/// A layer that hands each [span record](super::span) to `processor` as an OpenTelemetry
/// span, filtered to the records' target (so that it enables nothing else: with it,
/// requests are given spans, and nothing more is recorded). The processor's resource
/// is the caller's to set ([`grpc`] sets `service.name`).
pub fn layer<P, S>(processor: Arc<P>) -> Filtered<SpanLayer<P>, Targets, S>
where
    P: SpanProcessor + 'static,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    SpanLayer {
        processor,
        scope: InstrumentationScope::builder("fuseway")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
    .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO))
}

impl<P, S> Layer<S> for SpanLayer<P>
where
    P: SpanProcessor + 'static,
    S: tracing::Subscriber,
{
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut record = SpanRecord::default();
        event.record(&mut record);
        if let Some(span) = record.into_span(&self.scope, SystemTime::now()) {
            self.processor.on_end(span);
        }
    }
}

/// An OTLP/gRPC export of spans (see [`grpc`]).
#[derive(Debug)]
pub struct Export {
    processor: Arc<BatchSpanProcessor>,
    /// Stops the runtime the exporter's connection lives on.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: Option<std::thread::JoinHandle<()>>,
}

/// Export spans over OTLP/gRPC to `endpoint` (`http://HOST:4317`; `https://HOST:4317`
/// for TLS, the collector's certificate checked against the system's trust store, or
/// `SSL_CERT_FILE` / `SSL_CERT_DIR` when set), batched by the SDK's [`BatchSpanProcessor`] (its
/// `OTEL_BSP_*` variables apply: at most 2048 spans wait, sent every 5 s or by 512;
/// past that, spans are dropped, never a request delayed). The resource's
/// `service.name` is `fuseway` unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` say otherwise. The exporter's connection lives on a
/// runtime of its own, on a thread named `fuseway-otlp`. The endpoint is connected to
/// when the first batch goes; an unreachable one loses spans (reported by the
/// OpenTelemetry SDK's own logs), it stops nothing.
pub fn grpc(endpoint: &str) -> Result<Export, BoxError> {
    use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
    use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithTonicConfig};

    let endpoint = endpoint.to_owned();
    let (built, exporter) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = std::thread::Builder::new()
        .name("fuseway-otlp".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = built.send(Err(BoxError::from(e)));
                    return;
                }
            };
            let exporter = {
                // tonic's channel starts its tasks on the runtime it is made in.
                let _entered = runtime.enter();
                let tls = endpoint.starts_with("https://");
                let mut builder = SpanExporter::builder().with_tonic().with_endpoint(endpoint);
                if tls {
                    builder = builder.with_tls_config(ClientTlsConfig::new().with_native_roots());
                }
                builder.build().map_err(BoxError::from)
            };
            let ok = exporter.is_ok();
            let _ = built.send(exporter);
            if ok {
                let _ = runtime.block_on(stopped);
            }
        })?;
    let exporter = exporter
        .recv()
        .map_err(|_| "the OTLP exporter's thread ended")??;
    let mut processor = BatchSpanProcessor::builder(exporter).build();
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("fuseway");
    }
    processor.set_resource(&resource.build());
    Ok(Export {
        processor: Arc::new(processor),
        stop: Some(stop),
        runtime: Some(runtime),
    })
}

impl Export {
    /// The processor to give [`layer`].
    pub fn processor(&self) -> Arc<BatchSpanProcessor> {
        self.processor.clone()
    }

    /// Send the spans that wait (within 5 s) and stop exporting.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(stop) = self.stop.take() else {
            return;
        };
        if let Err(e) = self.processor.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!("OTLP export: the last spans were not sent: {e}");
        }
        let _ = stop.send(());
        if let Some(runtime) = self.runtime.take() {
            let _ = runtime.join();
        }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The fields of a span record, as the layer reads them.
#[derive(Debug, Default)]
struct SpanRecord {
    trace_id: u128,
    span_id: u64,
    parent_span_id: u64,
    trace_flags: u8,
    duration: Duration,
    upstream: Option<Duration>,
    status: u16,
    strings: Vec<(&'static str, String)>,
    bytes_in: Option<u64>,
    bytes_out: Option<u64>,
}

impl Visit for SpanRecord {
    fn record_u128(&mut self, field: &Field, value: u128) {
        if field.name() == "trace_id" {
            self.trace_id = value;
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "span_id" => self.span_id = value,
            "parent_span_id" => self.parent_span_id = value,
            "trace_flags" => self.trace_flags = value as u8,
            "duration_ns" => self.duration = Duration::from_nanos(value),
            "upstream_ns" => self.upstream = Some(Duration::from_nanos(value)),
            "status" => self.status = u16::try_from(value).unwrap_or(0),
            "bytes_in" => self.bytes_in = Some(value),
            "bytes_out" => self.bytes_out = Some(value),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.strings.push((field.name(), value.to_owned()));
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {
        // Only the message ("request").
    }
}

impl SpanRecord {
    fn string(&self, name: &str) -> Option<&str> {
        self.strings
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The span, ended at `end`; `None` if the record is not a sampled span's.
    fn into_span(self, scope: &InstrumentationScope, end: SystemTime) -> Option<SpanData> {
        if self.trace_id == 0 || self.span_id == 0 || self.trace_flags & 1 == 0 {
            return None;
        }
        let method = self.string("method").unwrap_or("").to_owned();
        let route = self.string("route");
        let name = match route {
            Some(route) => format!("{method} {route}"),
            None => method.clone(),
        };
        let mut attributes = Vec::with_capacity(20);
        attributes.push(KeyValue::new("http.request.method", method));
        if let Some(path) = self.string("path") {
            let (path, query) = match path.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (path, None),
            };
            attributes.push(KeyValue::new("url.path", path.to_owned()));
            if let Some(query) = query {
                attributes.push(KeyValue::new("url.query", query.to_owned()));
            }
        }
        if let Some(host) = self.string("host") {
            let (address, port) = split_port(host);
            attributes.push(KeyValue::new("server.address", address.to_owned()));
            if let Some(port) = port {
                attributes.push(KeyValue::new("server.port", port));
            }
        }
        if let Some(client) = self
            .string("client")
            .and_then(|c| c.parse::<std::net::SocketAddr>().ok())
        {
            attributes.push(KeyValue::new("client.address", client.ip().to_string()));
            attributes.push(KeyValue::new("client.port", i64::from(client.port())));
        }
        if let Some(protocol) = self.string("protocol") {
            let (name, version) = protocol.split_once('/').unwrap_or((protocol, ""));
            attributes.push(KeyValue::new(
                "network.protocol.name",
                name.to_ascii_lowercase(),
            ));
            attributes.push(KeyValue::new(
                "network.protocol.version",
                version.to_owned(),
            ));
        }
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(self.status),
        ));
        for (key, value) in [
            ("http.request.body.size", self.bytes_in),
            ("http.response.body.size", self.bytes_out),
        ] {
            if let Some(value) = value {
                attributes.push(KeyValue::new(key, i64::try_from(value).unwrap_or(i64::MAX)));
            }
        }
        for (field, key) in [
            ("route", "fuseway.route"),
            ("cluster", "fuseway.cluster"),
            ("destination", "fuseway.destination"),
        ] {
            if let Some(value) = self.string(field) {
                attributes.push(KeyValue::new(key, value.to_owned()));
            }
        }
        if let Some(upstream) = self.upstream {
            attributes.push(KeyValue::new(
                "fuseway.upstream.duration",
                upstream.as_secs_f64(),
            ));
        }
        let error = match self.string("error") {
            Some(kind) => Some(kind.to_owned()),
            None => (self.status >= 500).then(|| self.status.to_string()),
        };
        let status = match &error {
            Some(error) => {
                attributes.push(KeyValue::new("error.type", error.clone()));
                Status::error(error.clone())
            }
            None => Status::Unset,
        };
        Some(SpanData {
            span_context: SpanContext::new(
                TraceId::from(self.trace_id),
                SpanId::from(self.span_id),
                TraceFlags::new(self.trace_flags),
                false,
                TraceState::NONE,
            ),
            parent_span_id: match self.parent_span_id {
                0 => SpanId::INVALID,
                id => SpanId::from(id),
            },
            parent_span_is_remote: self.parent_span_id != 0,
            span_kind: SpanKind::Server,
            name: Cow::Owned(name),
            start_time: end.checked_sub(self.duration).unwrap_or(end),
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status,
            instrumentation_scope: scope.clone(),
        })
    }
}

/// `host[:port]` (a bracketed IPv6 address keeps its brackets off).
fn split_port(host: &str) -> (&str, Option<i64>) {
    let (address, port) = match host.rsplit_once(':') {
        Some((address, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!address.contains(':') || address.ends_with(']')) =>
        {
            (address, port.parse().ok())
        }
        _ => (host, None),
    };
    (address.trim_start_matches('[').trim_end_matches(']'), port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_split_into_address_and_port() {
        assert_eq!(split_port("example.com"), ("example.com", None));
        assert_eq!(split_port("example.com:8080"), ("example.com", Some(8080)));
        assert_eq!(split_port("[::1]:80"), ("::1", Some(80)));
        assert_eq!(split_port("[::1]"), ("::1", None));
        assert_eq!(split_port("::1"), ("::1", None));
    }

    #[test]
    fn unsampled_or_incomplete_records_are_no_spans() {
        let scope = InstrumentationScope::builder("t").build();
        let record = |trace_id, span_id, trace_flags| SpanRecord {
            trace_id,
            span_id,
            trace_flags,
            ..Default::default()
        };
        let now = SystemTime::now();
        assert!(record(1, 2, 1).into_span(&scope, now).is_some());
        assert!(record(1, 2, 0).into_span(&scope, now).is_none());
        assert!(record(0, 2, 1).into_span(&scope, now).is_none());
        assert!(record(1, 0, 1).into_span(&scope, now).is_none());
    }
}
