//! Named route policies: YARP's `AuthorizationPolicy`, `CorsPolicy`,
//! `RateLimiterPolicy`, `TimeoutPolicy` and `OutputCachePolicy`.
//!
//! In YARP these keys name ASP.NET policies the application registered; a route that
//! names one is served only through it. fuseway does the same and never ignores one:
//!
//! * the values that need nothing work as they do in ASP.NET — `AuthorizationPolicy:
//!   "Anonymous"` (no authorization; fuseway has no authentication of its own),
//!   `"Disable"` for `CorsPolicy`, `RateLimiterPolicy` and `TimeoutPolicy`;
//! * any other name must be registered by the embedding program in a [`Policies`]
//!   given to [`ProxyState::with_policies`](crate::state::ProxyState::with_policies):
//!   a [`RoutePolicy`] (a check that may answer the request itself, and a hook on the
//!   response) for the four request policies, a duration for `TimeoutPolicy`;
//! * a configuration naming a policy that is not registered is refused with the route
//!   and key in the error, at start (the binary registers none) and on reload.
//!
//! Names match ignoring case, as ASP.NET's policy maps do. A route's policies run right
//! after routing — CORS, then authorization, then rate limiting, then output caching —
//! in the fused and the layered pipeline alike, and cost nothing on routes that name
//! none.
//!
//! ```
//! use std::sync::Arc;
//! use http::StatusCode;
//! use fuseway::config::{parse, Format};
//! use fuseway::policy::{Policies, PolicyKind, PolicyRequest, RoutePolicy};
//! use fuseway::request::ProxyResponse;
//! use fuseway::state::ProxyState;
//!
//! /// Lets a request through only with the right API key.
//! struct ApiKey;
//!
//! impl RoutePolicy for ApiKey {
//!     fn on_request(&self, request: &PolicyRequest<'_>) -> Result<(), ProxyResponse> {
//!         match request.headers.get("x-api-key") {
//!             Some(key) if key == "secret" => Ok(()),
//!             _ => Err(ProxyResponse::status(StatusCode::UNAUTHORIZED)),
//!         }
//!     }
//! }
//!
//! let config = parse(r#"{
//!   "Routes": { "admin": { "ClusterId": "c1", "AuthorizationPolicy": "api-key",
//!                          "Match": { "Path": "/admin/{**rest}" } } },
//!   "Clusters": { "c1": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9" } } } }
//! }"#, Format::Json).unwrap();
//!
//! // Without the policy registered, the configuration is refused...
//! let err = ProxyState::new(config.clone()).unwrap_err();
//! assert_eq!(err.iter().next().unwrap().path, "Routes.admin.AuthorizationPolicy");
//! // ...with it, the route is served through it.
//! let policies = Policies::new().with(PolicyKind::Authorization, "api-key", ApiKey);
//! let state = ProxyState::with_policies(config, policies).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, HeaderMap, Method, Uri, Version};

use crate::config::{ConfigErrors, LoadBalancingPolicyName, RouteConfig};
use crate::request::{Candidates, ProxyResponse};
use crate::state::{Cluster, ClusterData, Compilers, RouteData, SnapshotData};

/// The kinds of named policy a YARP route may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// `CorsPolicy`.
    Cors,
    /// `AuthorizationPolicy`.
    Authorization,
    /// `RateLimiterPolicy`.
    RateLimiter,
    /// `OutputCachePolicy`.
    OutputCache,
    /// `TimeoutPolicy` (registered with [`Policies::timeout`]).
    Timeout,
}

impl PolicyKind {
    /// The request policies, in the order they run.
    const REQUEST: [PolicyKind; 4] = [
        PolicyKind::Cors,
        PolicyKind::Authorization,
        PolicyKind::RateLimiter,
        PolicyKind::OutputCache,
    ];

    /// The route key naming a policy of this kind.
    pub fn key(self) -> &'static str {
        match self {
            PolicyKind::Cors => "CorsPolicy",
            PolicyKind::Authorization => "AuthorizationPolicy",
            PolicyKind::RateLimiter => "RateLimiterPolicy",
            PolicyKind::OutputCache => "OutputCachePolicy",
            PolicyKind::Timeout => "TimeoutPolicy",
        }
    }

    /// The value that asks for nothing (ASP.NET's `Anonymous` / `Disable`), if the kind
    /// has one.
    pub fn no_op_value(self) -> Option<&'static str> {
        match self {
            PolicyKind::Authorization => Some("Anonymous"),
            PolicyKind::Cors | PolicyKind::RateLimiter | PolicyKind::Timeout => Some("Disable"),
            PolicyKind::OutputCache => None,
        }
    }

    /// The name `route` gives for this kind.
    fn name(self, route: &RouteConfig) -> Option<&str> {
        match self {
            PolicyKind::Cors => route.cors_policy.as_deref(),
            PolicyKind::Authorization => route.authorization_policy.as_deref(),
            PolicyKind::RateLimiter => route.rate_limiter_policy.as_deref(),
            PolicyKind::OutputCache => route.output_cache_policy.as_deref(),
            PolicyKind::Timeout => route.timeout_policy.as_deref(),
        }
    }
}

/// What a [`RoutePolicy`] sees of a request: its head, its connection, and the route it
/// matched.
#[derive(Debug)]
#[non_exhaustive]
pub struct PolicyRequest<'a> {
    /// The method.
    pub method: &'a Method,
    /// The target.
    pub uri: &'a Uri,
    /// The HTTP version.
    pub version: Version,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions.
    pub extensions: &'a Extensions,
    /// The connection the request arrived on, as [`ConnectionInfo::of`](crate::request::ConnectionInfo::of) finds it (the
    /// client's address), when known.
    pub connection: Option<crate::request::ConnectionInfo>,
    /// The id of the route the request matched.
    pub route: &'a str,
}

impl<'a> PolicyRequest<'a> {
    /// The view of `request` for the route `route`.
    pub fn new<B: 'static>(request: &'a http::Request<B>, route: &'a str) -> Self {
        PolicyRequest {
            connection: crate::request::ConnectionInfo::of(request),
            method: request.method(),
            uri: request.uri(),
            version: request.version(),
            headers: request.headers(),
            extensions: request.extensions(),
            route,
        }
    }
}

/// A load-balancing policy: picks one destination among at least two candidates.
///
/// Implement it and register it under a name in the [`Policies`] a state is built with
/// ([`Policies::load_balancing`]); clusters select it with
/// `"LoadBalancingPolicy": "<name>"`. It is called on the request path, so it should
/// be quick and must not block; state it needs across requests lives in the
/// implementing type (one instance serves every cluster that names it).
pub trait LoadBalancingPolicy: Send + Sync + 'static {
    /// The index (into `cluster.destinations()`) of the chosen candidate, or `None` to
    /// answer 503. `candidates` holds at least two destinations. Returning an index
    /// that is not among `candidates` is a bug in the policy: the request is answered
    /// 503 and an error is logged.
    fn pick(&self, cluster: &Cluster, candidates: &Candidates) -> Option<usize>;
}

/// A shared policy (the program keeps a handle to it, to read its state).
impl<P: LoadBalancingPolicy + ?Sized> LoadBalancingPolicy for Arc<P> {
    fn pick(&self, cluster: &Cluster, candidates: &Candidates) -> Option<usize> {
        (**self).pick(cluster, candidates)
    }
}

/// A named policy the embedding program registers: it runs for the routes that name
/// it, after routing.
pub trait RoutePolicy: Send + Sync + 'static {
    /// Let the request through (`Ok`), or answer it (`Err`: a 401, a 429, a CORS
    /// preflight's 204 ...) without forwarding it.
    #[allow(clippy::result_large_err)] // answers are responses, by value like the Stage trait's
    fn on_request(&self, request: &PolicyRequest<'_>) -> Result<(), ProxyResponse>;

    /// Adjust a forwarded request's response (CORS headers, caching headers ...).
    fn on_response(&self, response: &mut ProxyResponse) {
        let _ = response;
    }
}

/// What the embedding program registers for a state (given to
/// [`ProxyState::with_policies`](crate::state::ProxyState::with_policies), kept for its
/// reloads): the named route policies (see the [module docs](self)), custom
/// load-balancing policies ([`load_balancing`](Self::load_balancing)) and the data its
/// stages compile from the configuration ([`cluster_data`](Self::cluster_data),
/// [`route_data`](Self::route_data)).
#[derive(Clone, Default)]
pub struct Policies {
    request: HashMap<(PolicyKind, String), Arc<dyn RoutePolicy>>,
    timeouts: HashMap<String, Duration>,
    balancing: HashMap<String, Arc<dyn LoadBalancingPolicy>>,
    data: Compilers,
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self
            .request
            .keys()
            .map(|(k, n)| format!("{}={n}", k.key()))
            .chain(self.timeouts.keys().map(|n| format!("TimeoutPolicy={n}")))
            .chain(
                self.balancing
                    .keys()
                    .map(|n| format!("LoadBalancingPolicy={n}")),
            )
            .collect();
        names.sort();
        f.debug_struct("Policies")
            .field("names", &names)
            .field("data", &self.data)
            .finish()
    }
}

impl Policies {
    /// No policies: only the values that need nothing are accepted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `policy` as the `kind` policy called `name` (ignoring case).
    ///
    /// # Panics
    /// For [`PolicyKind::Timeout`]: a timeout policy is a duration, registered with
    /// [`Policies::timeout`].
    pub fn with(mut self, kind: PolicyKind, name: &str, policy: impl RoutePolicy) -> Self {
        assert!(
            kind != PolicyKind::Timeout,
            "a TimeoutPolicy is a duration: use Policies::timeout"
        );
        self.request
            .insert((kind, name.to_ascii_lowercase()), Arc::new(policy));
        self
    }

    /// Register the `TimeoutPolicy` called `name`: routes naming it get this
    /// [`Timeout`](crate::config::RouteConfig::timeout).
    pub fn timeout(mut self, name: &str, timeout: Duration) -> Self {
        self.timeouts.insert(name.to_ascii_lowercase(), timeout);
        self
    }

    /// Register the custom load-balancing policy called `name` (ignoring case): clusters
    /// select it with `"LoadBalancingPolicy": "<name>"`. One instance serves every
    /// cluster that names it, in this state and its reloads.
    ///
    /// # Panics
    /// If `name` is one of the built-in policies (`RoundRobin`, ... in any case): those
    /// names always mean the built-in policy.
    pub fn load_balancing(mut self, name: &str, policy: impl LoadBalancingPolicy) -> Self {
        assert!(
            name.parse::<LoadBalancingPolicyName>().is_err(),
            "`{name}` is a built-in load balancing policy and cannot be replaced"
        );
        self.balancing
            .insert(name.to_ascii_lowercase(), Arc::new(policy));
        self
    }

    /// Compile a [`SnapshotData`] `T` from the whole configuration when the state is
    /// built or reloaded: stages read it with [`Snapshot::data`](crate::state::Snapshot::data).
    pub fn snapshot_data<T: SnapshotData>(mut self) -> Self {
        self.data.add_snapshot::<T>();
        self
    }

    /// Compile a [`ClusterData`] `T` for every cluster when the state is built or
    /// reloaded: stages read it with [`Cluster::data`](crate::state::Cluster::data).
    pub fn cluster_data<T: ClusterData>(mut self) -> Self {
        self.data.add_cluster::<T>();
        self
    }

    /// Compile a [`RouteData`] `T` for every route when the state is built or reloaded:
    /// stages read it with [`Route::data`](crate::state::Route::data).
    pub fn route_data<T: RouteData>(mut self) -> Self {
        self.data.add_route::<T>();
        self
    }

    /// The data types registered with [`cluster_data`](Self::cluster_data) and
    /// [`route_data`](Self::route_data).
    pub(crate) fn compilers(&self) -> &Compilers {
        &self.data
    }

    /// The custom load-balancing policy registered as `name`.
    pub(crate) fn load_balancing_policy(&self, name: &str) -> Option<Arc<dyn LoadBalancingPolicy>> {
        self.balancing.get(&name.to_ascii_lowercase()).cloned()
    }

    /// The policies `route` names, in the order they run, and the timeout its
    /// `TimeoutPolicy` stands for. Names not registered are errors at `path.Key`.
    pub(crate) fn resolve(
        &self,
        route: &RouteConfig,
        path: &str,
        errors: &mut ConfigErrors,
    ) -> (RoutePolicies, Option<Duration>) {
        let mut found = Vec::new();
        for kind in PolicyKind::REQUEST {
            let Some(name) = kind.name(route) else {
                continue;
            };
            if is_no_op(kind, name) {
                continue;
            }
            match self.request.get(&(kind, name.to_ascii_lowercase())) {
                Some(policy) => found.push(policy.clone()),
                None => errors.push(format!("{path}.{}", kind.key()), unregistered(kind, name)),
            }
        }
        let mut timeout = None;
        if let Some(name) = PolicyKind::Timeout.name(route) {
            if !is_no_op(PolicyKind::Timeout, name) {
                match self.timeouts.get(&name.to_ascii_lowercase()) {
                    Some(_) if route.timeout.is_some() => errors.push(
                        format!("{path}.TimeoutPolicy"),
                        "a route may have `Timeout` or `TimeoutPolicy`, not both (as in YARP)",
                    ),
                    Some(t) => timeout = Some(*t),
                    None => errors.push(
                        format!("{path}.TimeoutPolicy"),
                        unregistered(PolicyKind::Timeout, name),
                    ),
                }
            }
        }
        (RoutePolicies(found.into_boxed_slice()), timeout)
    }
}

/// The policies one route runs, in order (empty for most routes).
#[derive(Clone, Default)]
pub(crate) struct RoutePolicies(Box<[Arc<dyn RoutePolicy>]>);

impl RoutePolicies {
    pub(crate) fn as_slice(&self) -> &[Arc<dyn RoutePolicy>] {
        &self.0
    }
}

impl fmt::Debug for RoutePolicies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} policies", self.0.len())
    }
}

fn is_no_op(kind: PolicyKind, name: &str) -> bool {
    kind.no_op_value()
        .is_some_and(|v| v.eq_ignore_ascii_case(name))
}

fn unregistered(kind: PolicyKind, name: &str) -> String {
    let need_nothing = match kind.no_op_value() {
        Some(v) => format!("only `{v}` needs none"),
        None => "every name needs one".to_string(),
    };
    format!(
        "policy `{name}` is not registered: a route naming a policy is served only through \
         it, and {need_nothing}. Register it in the embedding program \
         (fuseway::policy::Policies), or remove the key"
    )
}
