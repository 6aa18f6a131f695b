//! Per-route limits: request body size, whole-exchange timeout, concurrent requests and
//! a token-bucket rate limit.
//!
//! | setting | when exceeded |
//! |---|---|
//! | `MaxRequestBodySize` (bytes; `-1` unlimited; default: the server's `Limits.MaxRequestBodySize` — `Kestrel.Limits` in a YARP file — else 30,000,000 as Kestrel) | `Content-Length` over it: 413 before any destination is contacted; a streamed body is cut at the limit and the exchange fails with 413 if the response has not started |
//! | `Timeout` | 504 if the response has not started by then; an aborted response after |
//! | `MaxConcurrentRequests` | 503 with `Retry-After: 1`; a request counts until its response body ends |
//! | `RateLimit { PermitsPerSecond, Burst }` | 429 with `Retry-After` (seconds until a permit is free) |
//!
//! ```
//! use fuseway::limits::Limits;
//! use fuseway::stage::StageLayer;
//! let layer = StageLayer::new(Limits::new());
//! # let _ = layer;
//! ```

mod rate;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_LENGTH, RETRY_AFTER};
use http::{HeaderValue, StatusCode};

pub use rate::RateLimiter;

use crate::config::{ConfigError, RouteConfig};
use crate::request::{ProxyResponse, Routed};
use crate::stage::{InPlace, Stage};
use crate::state::ConcurrencyGuard;

/// Kestrel's default `MaxRequestBodySize`, used when a route does not set one.
pub const DEFAULT_MAX_REQUEST_BODY_SIZE: u64 = 30_000_000;

/// A route's limits, resolved from its configuration.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RouteLimits {
    /// Largest request body in bytes (`None`: unlimited).
    pub max_request_body_size: Option<u64>,
    /// Time allowed for the whole exchange.
    pub timeout: Option<Duration>,
    /// Most requests in flight at once.
    pub max_concurrent_requests: Option<usize>,
    /// Token bucket: (permits per second, burst).
    pub rate: Option<(f64, u32)>,
}

impl RouteLimits {
    /// A route's limits; `default_body`: the body limit when it sets none (the server's
    /// `MaxRequestBodySize`).
    pub(crate) fn from_config(
        config: &RouteConfig,
        default_body: Option<u64>,
    ) -> Result<Self, ConfigError> {
        Ok(RouteLimits {
            max_request_body_size: match config.max_request_body_size {
                None => default_body,
                Some(-1) => None,
                Some(n) => Some(n.max(0) as u64),
            },
            timeout: config.timeout.map(|d| d.get()),
            max_concurrent_requests: config.max_concurrent_requests.map(|n| n as usize),
            rate: config.rate_limit.as_ref().map(|r| {
                let burst = r
                    .burst
                    .unwrap_or_else(|| r.permits_per_second.ceil().max(1.0) as u32);
                (r.permits_per_second, burst)
            }),
        })
    }
}

/// A route's runtime state: in-flight requests and its rate limiter. Survives reloads
/// for routes whose id is unchanged.
#[derive(Debug, Default)]
pub struct RouteState {
    /// In a shared allocation of its own: a concurrency guard holds it, not the state.
    concurrent: Arc<AtomicUsize>,
    rate: RateLimiter,
}

impl RouteState {
    /// Requests of this route in flight.
    pub fn concurrent_requests(&self) -> usize {
        self.concurrent.load(Ordering::Relaxed)
    }

    fn try_enter(self: &Arc<Self>, max: usize) -> Option<ConcurrencyGuard> {
        let mut current = self.concurrent.load(Ordering::Relaxed);
        loop {
            if current >= max {
                return None;
            }
            match self.concurrent.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(ConcurrencyGuard::holding(self.concurrent.clone())),
                Err(now) => current = now,
            }
        }
    }
}

/// The limits stage: enforces the matched route's [`RouteLimits`].
#[derive(Debug, Clone, Default)]
pub struct Limits {
    _private: (),
}

impl Limits {
    /// The limits stage.
    pub fn new() -> Self {
        Limits::default()
    }
}

fn reject(status: StatusCode, retry_after: Option<u64>) -> ProxyResponse {
    let mut r = ProxyResponse::status(status);
    if let Some(secs) = retry_after {
        r.response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    r
}

impl<B> InPlace<Routed<B>> for Limits {
    /// [`Stage::on_request`] on the request where it lies (the default fused pipeline
    /// calls this: the request is not moved in and out).
    #[inline]
    fn on_request_in_place(
        &self,
        routed: &mut Routed<B>,
    ) -> Result<Option<ConcurrencyGuard>, ProxyResponse> {
        let route = routed.context.route();
        let limits = route.limits();
        if let Some(max) = limits.max_request_body_size {
            // Most requests (`GET`s) declare no length: one pass over a few names says so.
            let headers = routed.request.headers();
            let declared = crate::forwarding::headers::get_few(headers, &CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|len| len > max) {
                tracing::debug!(route = route.id(), max, "request body over the limit: 413");
                return Err(reject(StatusCode::PAYLOAD_TOO_LARGE, None).for_route(&routed.context));
            }
        }
        // The clock is read only for a route that needs it (rate limit, timeout).
        let now = (limits.rate.is_some() || limits.timeout.is_some()).then(crate::clock::now);
        if let (Some((per_second, burst)), Some(now)) = (limits.rate, now) {
            if let Err(wait) = route.state().rate.acquire(now, per_second, burst) {
                tracing::debug!(route = route.id(), "rate limit: 429");
                return Err(reject(
                    StatusCode::TOO_MANY_REQUESTS,
                    Some(wait.as_secs() + u64::from(wait.subsec_nanos() > 0)),
                )
                .for_route(&routed.context));
            }
        }
        let guard = match limits.max_concurrent_requests {
            Some(max) => match route.state().try_enter(max) {
                Some(g) => Some(g),
                None => {
                    tracing::debug!(route = route.id(), max, "route concurrency limit: 503");
                    return Err(
                        reject(StatusCode::SERVICE_UNAVAILABLE, Some(1)).for_route(&routed.context)
                    );
                }
            },
            None => None,
        };
        let body_limit = limits.max_request_body_size;
        let deadline = limits.timeout.zip(now).map(|(t, now)| now + t);
        let exchange = routed.context.limits_mut();
        exchange.max_request_body_size = body_limit;
        exchange.deadline = deadline;
        Ok(guard)
    }
}

impl<B> Stage<Routed<B>> for Limits {
    type Out = Routed<B>;
    type State = Option<ConcurrencyGuard>;

    fn on_request(
        &self,
        mut routed: Routed<B>,
    ) -> Result<(Routed<B>, Option<ConcurrencyGuard>), ProxyResponse> {
        let guard = self.on_request_in_place(&mut routed)?;
        Ok((routed, guard))
    }

    fn on_response(&self, guard: Option<ConcurrencyGuard>, response: &mut ProxyResponse) {
        if let Some(guard) = guard {
            response.hold_until_complete(guard);
        }
    }
}

/// Compiled for every route when a state is built (the limits stage's
/// [`RouteData`](crate::state::RouteData)).
impl crate::state::RouteData for RouteLimits {
    fn compile(
        source: &crate::state::RouteSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, crate::config::ConfigErrors> {
        let default_body = source.limits.default_max_request_body_size();
        Ok(Some(RouteLimits::from_config(source.config, default_body)?))
    }
}

/// A route's runtime state, carried from the snapshot it replaces (same route id) or
/// new: its in-flight count and rate limiter survive reloads.
impl crate::state::RouteData for Arc<RouteState> {
    fn compile(
        _source: &crate::state::RouteSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, crate::config::ConfigErrors> {
        Ok(Some(previous.cloned().unwrap_or_default()))
    }
}

impl crate::state::Route {
    /// Its limits (body size, timeout, concurrency, rate), compiled by the limits stage.
    pub fn limits(&self) -> &RouteLimits {
        static NONE_COMPILED: std::sync::LazyLock<RouteLimits> = std::sync::LazyLock::new(|| {
            RouteLimits::from_config(&RouteConfig::default(), Some(DEFAULT_MAX_REQUEST_BODY_SIZE))
                .expect("the defaults")
        });
        self.data::<RouteLimits>().unwrap_or_else(|| &NONE_COMPILED)
    }

    /// Its runtime state (in-flight counter, rate-limit bucket); survives reloads.
    pub fn state(&self) -> &Arc<RouteState> {
        static NONE_COMPILED: std::sync::LazyLock<Arc<RouteState>> =
            std::sync::LazyLock::new(Default::default);
        self.data::<Arc<RouteState>>()
            .unwrap_or_else(|| &NONE_COMPILED)
    }
}
