//! `--otlp-endpoint`: a span per request exported over OTLP/gRPC to a receiver the test
//! starts (opentelemetry-proto's generated tonic service), with the client's trace id
//! and the parent id the destination was sent; a trace started for a request without
//! one; an unsampled client trace not exported; a failed exchange's span an error; a
//! receiver over TLS, trusted through `SSL_CERT_FILE`. The real binary, a real backend
//! and an HTTP/1.1 client on 127.0.0.1.

mod common;

use std::collections::HashMap;

use common::{h1_client, stop_for_stdout, within, Refused, TempDir};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::net::TcpListener;
use tokio::process::Child;
use tokio::sync::mpsc;

/// An exported span with the `service.name` of its resource.
#[derive(Debug, Clone)]
struct Received {
    service: Option<String>,
    span: Span,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<AnyValue> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone()?.value)
    }

    fn string(&self, key: &str) -> Option<String> {
        match self.attribute(key)? {
            AnyValue::StringValue(s) => Some(s),
            other => panic!("{key} is not a string: {other:?}"),
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.attribute(key)? {
            AnyValue::IntValue(i) => Some(i),
            other => panic!("{key} is not an integer: {other:?}"),
        }
    }
}

/// The OTLP trace receiver: every span it is sent goes down the channel.
struct Receiver(mpsc::UnboundedSender<Received>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans.resource.as_ref().and_then(|r| {
                r.attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| match kv.value.clone()?.value? {
                        AnyValue::StringValue(s) => Some(s),
                        _ => None,
                    })
            });
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    let _ = self.0.send(Received {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn receiver() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (addr, rx)
}

/// Route `r1` (`/app/...`) to `live`, `r2` (`/dead/...`) to `dead`.
fn config(live: &str, dead: &str) -> String {
    format!(
        r#"{{ "Routes": {{
               "r1": {{ "ClusterId": "c1", "Match": {{ "Path": "/app/{{**rest}}" }} }},
               "r2": {{ "ClusterId": "c2", "Match": {{ "Path": "/dead/{{**rest}}" }} }} }},
             "Clusters": {{
               "c1": {{ "Destinations": {{ "d1": {{ "Address": "{live}" }} }} }},
               "c2": {{ "Destinations": {{ "d2": {{ "Address": "{dead}" }} }} }} }} }}"#
    )
}

/// The binary exporting to `endpoint` (batches sent every 50 ms), its JSON access log
/// on stdout.
async fn start(config: &str, endpoint: &str) -> (Child, std::net::SocketAddr, TempDir) {
    common::fuseway_binary(config, |command| {
        command
            .env("OTEL_BSP_SCHEDULE_DELAY", "50")
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .args(["--log-format", "json", "--otlp-endpoint", endpoint]);
    })
    .await
}

/// Lowercase hex digits of `bytes` (an id as `traceparent` writes it).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `00-<trace>-<parent>-<flags>` as (trace, parent, flags).
fn traceparent(value: &str) -> (String, String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00", "{value}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

/// The `traceparent` the destination was sent for a GET of `url` with `sent` (echoed
/// back by the echo backend).
async fn forwarded(url: String, sent: Option<&str>) -> (String, String, String) {
    let mut request = h1_client().get(url);
    if let Some(sent) = sent {
        request = request.header("traceparent", sent);
    }
    let response = within("a proxied GET", request.send()).await.unwrap();
    assert_eq!(response.status(), 200);
    let echoed = response.headers()["x-echo-traceparent"].to_str().unwrap();
    traceparent(echoed)
}

#[tokio::test]
async fn each_request_is_a_span_in_its_trace_at_the_receiver() {
    let (endpoint, mut spans) = receiver().await;
    let backend = common::echo_backend().await;
    let dead = Refused::bind();
    let (child, addr, _dir) = start(
        &config(&backend.url(), &dead.url()),
        &format!("http://{endpoint}"),
    )
    .await;

    // A client's sampled trace: continued, the destination sent the proxy's span.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let (trace, proxy_span, flags) = forwarded(
        format!("http://{addr}/app/joined?q=1"),
        Some(&format!("00-{client_trace}-{client_span}-01")),
    )
    .await;
    assert_eq!((trace.as_str(), flags.as_str()), (client_trace, "01"));
    assert_ne!(proxy_span, client_span);

    // No trace: one is started, sampled.
    let (new_trace, new_span, new_flags) =
        forwarded(format!("http://{addr}/app/started"), None).await;
    assert_eq!(new_flags, "01");
    assert_ne!(new_trace, client_trace);

    // A trace the client does not sample: passed on so, not exported.
    let unsampled = "0af7651916cd43dd8448eb211c80319c";
    let (trace, _, flags) = forwarded(
        format!("http://{addr}/app/unsampled"),
        Some(&format!("00-{unsampled}-b7ad6b7169203331-00")),
    )
    .await;
    assert_eq!((trace.as_str(), flags.as_str()), (unsampled, "00"));

    // A destination that refuses: a 502, and an error span.
    let failed = within(
        "a GET to a dead destination",
        h1_client().get(format!("http://{addr}/dead/x")).send(),
    )
    .await
    .unwrap();
    assert_eq!(failed.status(), 502);

    // Three spans arrive (batches every 50 ms), keyed by their route's path.
    let mut by_path = HashMap::new();
    within("three spans at the receiver", async {
        while by_path.len() < 3 {
            let received = spans.recv().await.unwrap();
            let path = received.string("url.path").unwrap();
            by_path.insert(path, received);
        }
    })
    .await;

    let joined = &by_path["/app/joined"];
    assert_eq!(hex(&joined.span.trace_id), client_trace);
    assert_eq!(hex(&joined.span.span_id), proxy_span);
    assert_eq!(hex(&joined.span.parent_span_id), client_span);
    assert_eq!(joined.span.kind, SpanKind::Server as i32);
    assert_eq!(joined.span.name, "GET r1");
    assert_eq!(joined.service.as_deref(), Some("fuseway"));
    assert_eq!(joined.string("url.query").as_deref(), Some("q=1"));
    assert_eq!(joined.string("http.request.method").as_deref(), Some("GET"));
    assert_eq!(joined.string("fuseway.route").as_deref(), Some("r1"));
    assert_eq!(joined.string("fuseway.cluster").as_deref(), Some("c1"));
    assert_eq!(joined.string("fuseway.destination").as_deref(), Some("d1"));
    assert_eq!(joined.int("http.response.status_code"), Some(200));
    assert_eq!(joined.int("server.port"), Some(i64::from(addr.port())));
    assert_eq!(
        joined.string("network.protocol.version").as_deref(),
        Some("1.1")
    );
    assert!(joined.span.end_time_unix_nano > joined.span.start_time_unix_nano);
    let status = joined.span.status.clone().unwrap_or_default();
    assert_eq!(status.code, StatusCode::Unset as i32);

    let started = &by_path["/app/started"];
    assert_eq!(hex(&started.span.trace_id), new_trace);
    assert_eq!(hex(&started.span.span_id), new_span);
    assert!(started.span.parent_span_id.is_empty());

    let dead_span = &by_path["/dead/x"];
    assert_eq!(dead_span.int("http.response.status_code"), Some(502));
    assert_eq!(
        dead_span.string("fuseway.destination").as_deref(),
        Some("d2")
    );
    assert_eq!(dead_span.string("error.type").as_deref(), Some("Request"));
    let status = dead_span.span.status.clone().unwrap();
    assert_eq!(status.code, StatusCode::Error as i32);

    // Stopped: whatever waited is sent (shutdown flushes); still nothing of the
    // unsampled trace.
    let log = stop_for_stdout(child).await;
    while let Ok(received) = spans.try_recv() {
        assert_ne!(hex(&received.span.trace_id), unsampled);
    }
    // The access log's request id is the trace id.
    let ids: Vec<(String, String)> = log
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (field("path"), field("request_id"))
        })
        .collect();
    assert!(
        ids.contains(&("/app/started".into(), new_trace.clone())),
        "{ids:?}"
    );
}

/// An endpoint nobody listens on loses spans, not requests; the binary still stops
/// within its bounds.
#[tokio::test]
async fn an_unreachable_receiver_stops_nothing() {
    let backend = common::echo_backend().await;
    let nobody = Refused::bind();
    let (child, addr, _dir) = start(&config(&backend.url(), &nobody.url()), &nobody.url()).await;
    for _ in 0..20 {
        forwarded(format!("http://{addr}/app/x"), None).await;
    }
    let log = stop_for_stdout(child).await;
    assert_eq!(log.lines().count(), 20, "{log}");
}

/// An `https://` endpoint: the collector's certificate checked against the trust store
/// (`SSL_CERT_FILE` here: a CA of the test's own), spans delivered over TLS.
#[tokio::test]
async fn spans_reach_a_tls_receiver_it_trusts() {
    let dir = TempDir::new("otlp-tls");
    let ca_file = common::localhost_certificates(&dir);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = listener.local_addr().unwrap();
    let (tx, mut spans) = mpsc::unbounded_channel();
    let tls =
        tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            std::fs::read(dir.path().join("server.pem")).unwrap(),
            std::fs::read(dir.path().join("server.key")).unwrap(),
        ));
    tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    let backend = common::echo_backend().await;
    let dead = Refused::bind();
    let (child, addr, _dir) = common::fuseway_binary(&config(&backend.url(), &dead.url()), |c| {
        c.env("OTEL_BSP_SCHEDULE_DELAY", "50")
            .env("SSL_CERT_FILE", &ca_file)
            .args(["--otlp-endpoint", &format!("https://{endpoint}")]);
    })
    .await;
    let (trace, span, _) = forwarded(format!("http://{addr}/app/over-tls"), None).await;
    let received = within("the span over TLS", spans.recv()).await.unwrap();
    assert_eq!(hex(&received.span.trace_id), trace);
    assert_eq!(hex(&received.span.span_id), span);
    assert_eq!(
        received.string("url.path").as_deref(),
        Some("/app/over-tls")
    );
    stop_for_stdout(child).await;
}
