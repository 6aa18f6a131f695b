//! The admin listener: metrics and a status page, on an address of their own
//! (`fuseway --admin 127.0.0.1:9901`), never on the proxy's listeners.
//!
//! | path | what |
//! |---|---|
//! | `/` | an HTML status page that refreshes itself every 2 s: live charts per cluster and route (requests per second, p50 and p99 latency, 5xx share over the last 5 minutes, when [`spawn_history`] samples), destinations with their health as colours, in-flight requests and recent errors, the configuration's sources, the routes |
//! | `/status.json` | the same data as JSON |
//! | `/metrics` | every metric in the Prometheus text format (see [`telemetry`](crate::telemetry)) |
//! | `/healthz` | liveness: `200 ok` while the process answers |
//! | `/readyz` | readiness: `200 ready` once the configuration is loaded and the listeners are bound, `503` before and from the moment shutdown starts ([`Readiness`]) |
//!
//! Only `GET` and `HEAD` are answered (others: 405). The admin listener has no
//! authentication: bind it to a loopback or otherwise private address.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn run(state: Arc<fuseway::state::ProxyState>) -> std::io::Result<()> {
//! use fuseway::{admin::Admin, server::Server};
//! Server::bind(&["127.0.0.1:9901".parse().unwrap()]).await?
//!     .serve(Admin::new(state), std::future::pending())
//!     .await
//! # }
//! ```

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::ProxyBody;
use crate::state::ProxyState;
use crate::telemetry::{health_name, RECENT_ERRORS_WINDOW};

const PAGE: &str = include_str!("page.html");

/// The admin service (a `hyper` service for [`Server::serve`](crate::server::Server::serve)).
#[derive(Debug, Clone)]
pub struct Admin {
    state: Arc<ProxyState>,
    readiness: Readiness,
}

/// Whether the proxy takes traffic, as the admin listener's `/readyz` tells load
/// balancers and orchestrators: starting, ready, or draining (shutting down). Clones
/// share one value.
///
/// ```
/// use fuseway::admin::Readiness;
/// let readiness = Readiness::starting();
/// assert!(!readiness.is_ready());
/// readiness.ready();
/// assert!(readiness.is_ready());
/// readiness.drain();
/// assert!(!readiness.is_ready());
/// ```
#[derive(Debug, Clone)]
pub struct Readiness(Arc<AtomicU8>);

const STARTING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

impl Readiness {
    /// Not ready yet (`/readyz`: 503 `starting`).
    pub fn starting() -> Self {
        Readiness(Arc::new(AtomicU8::new(STARTING)))
    }

    /// Ready: the configuration is loaded and the listeners are bound.
    pub fn ready(&self) {
        // A drain is final.
        let _ = self
            .0
            .compare_exchange(STARTING, READY, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Shutting down (`/readyz`: 503 `draining`), for good.
    pub fn drain(&self) {
        self.0.store(DRAINING, Ordering::Relaxed);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed) == READY
    }

    fn name(&self) -> &'static str {
        match self.0.load(Ordering::Relaxed) {
            STARTING => "starting",
            READY => "ready",
            _ => "draining",
        }
    }
}

impl Admin {
    /// Serve `state`'s status and metrics; `/readyz` answers ready (see
    /// [`with_readiness`](Self::with_readiness)).
    pub fn new(state: Arc<ProxyState>) -> Self {
        let readiness = Readiness::starting();
        readiness.ready();
        Admin { state, readiness }
    }

    /// `/readyz` answers as `readiness` says.
    pub fn with_readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = readiness;
        self
    }

    /// The answer for `method` and `path`.
    pub fn respond(&self, method: &Method, path: &str) -> Response<ProxyBody> {
        if method != Method::GET && method != Method::HEAD {
            let mut r = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "GET or HEAD\n",
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        match path {
            "/" | "/index.html" => {
                // `<` escaped so that no value can close the script element.
                let data = status(&self.state).to_string().replace('<', "\\u003c");
                let page = PAGE.replace("__STATUS__", &data);
                text(StatusCode::OK, "text/html; charset=utf-8", page)
            }
            "/status.json" => text(
                StatusCode::OK,
                "application/json",
                status(&self.state).to_string(),
            ),
            "/metrics" => {
                let mut out = String::new();
                match self
                    .state
                    .metrics()
                    .encode(&self.state.snapshot(), &mut out)
                {
                    Ok(()) => text(StatusCode::OK, crate::telemetry::CONTENT_TYPE, out),
                    Err(_) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "text/plain",
                        "cannot encode the metrics\n",
                    ),
                }
            }
            "/healthz" => text(StatusCode::OK, "text/plain", "ok\n"),
            "/readyz" => {
                let status = if self.readiness.is_ready() {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                text(status, "text/plain", format!("{}\n", self.readiness.name()))
            }
            _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
        }
    }
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<String>,
) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::full(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Sample `state`'s metrics every `every` for the status page's charts (see
/// [`Metrics::sample_history`](crate::telemetry::Metrics::sample_history)), until the
/// task is aborted. The binary samples every 2 s while its admin listener runs.
pub fn spawn_history(
    state: Arc<ProxyState>,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            state.metrics().sample_history(&state.snapshot());
        }
    })
}

/// The status page's data: where the configuration comes from (each provider's source,
/// version and last error), routes, clusters and destinations (health, availability,
/// in-flight requests, recent errors).
pub fn status(state: &ProxyState) -> Value {
    let snapshot = state.snapshot();
    let metrics = state.metrics();
    let routes: Vec<Value> = snapshot
        .routes()
        .iter()
        .map(|r| {
            let m = &r.config().match_;
            json!({
                "id": r.id(),
                "cluster": r.config().cluster_id.as_deref().unwrap_or(""),
                "cluster_exists": r.cluster_index().is_some(),
                "order": r.config().order.unwrap_or(0),
                "path": m.path.as_deref().unwrap_or("/{**catchall}"),
                "hosts": m.hosts.as_deref().unwrap_or_default(),
                "methods": m.methods.as_deref().unwrap_or_default(),
                "transforms": r.config().transforms.len(),
            })
        })
        .collect();
    let clusters: Vec<Value> = snapshot
        .clusters()
        .iter()
        .map(|c| {
            let available = crate::health::available(c);
            let destinations: Vec<Value> = c
                .destinations()
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let health = d.state().health();
                    json!({
                        "id": d.id(),
                        "address": d.config().address,
                        "health": {
                            "active": health_name(health.active()),
                            "passive": health_name(health.passive()),
                        },
                        "available": available.contains(i),
                        "in_flight": d.state().concurrent_requests(),
                        "recent_errors": metrics.recent_errors_of(c.id(), d.id()),
                    })
                })
                .collect();
            json!({
                "id": c.id(),
                "load_balancing": c.config().load_balancing_policy.as_deref().unwrap_or("PowerOfTwoChoices"),
                "in_flight": c.state().concurrent_requests(),
                "destinations": destinations,
            })
        })
        .collect();
    let (route_charts, cluster_charts) = metrics.history();
    let charts = |charts: crate::telemetry::Charts| -> Vec<Value> {
        charts
            .into_iter()
            .map(|(id, points)| json!({ "id": &*id, "points": points }))
            .collect()
    };
    let generation = *state.subscribe().borrow();
    json!({
        "generation": generation,
        "uptime_seconds": metrics.uptime().as_secs_f64(),
        "in_flight": metrics.in_flight(),
        "recent_errors_window_seconds": RECENT_ERRORS_WINDOW.as_secs(),
        "config_sources": metrics.config_sources(),
        "history": {
            "points": crate::telemetry::POINTS,
            "routes": charts(route_charts),
            "clusters": charts(cluster_charts),
        },
        "routes": routes,
        "clusters": clusters,
    })
}

impl<B> hyper::service::Service<Request<B>> for Admin {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Ready<Result<Response<ProxyBody>, Infallible>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        ready(Ok(self.respond(request.method(), request.uri().path())))
    }
}
