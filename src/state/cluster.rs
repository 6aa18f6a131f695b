//! Clusters and routes as the runtime snapshot holds them.

use super::{ClusterData, RouteData};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ClusterConfig, HttpVersion, HttpVersionPolicy, RouteConfig, TlsVersions};

use super::destination::{ClusterState, Destination};

/// The HTTP version used towards a cluster's destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamVersion {
    /// HTTP/1.1 (HTTP/1.0 configs are sent as 1.1): ALPN `http/1.1` on `https://`.
    Http1,
    /// HTTP/2: prior knowledge on `http://`, ALPN `h2` on `https://`.
    Http2,
    /// What the destination chooses: ALPN `h2` and `http/1.1` offered on `https://`,
    /// HTTP/1.1 on `http://` (.NET's rule where the version policy allows both).
    Negotiate,
}

impl UpstreamVersion {
    /// The version YARP's `HttpRequest.Version` and `VersionPolicy` give towards a
    /// destination, as .NET's `HttpClient` resolves them:
    ///
    /// | Version, policy | `http://` | `https://` |
    /// |---|---|---|
    /// | `1.x`, `OrLower` or `Exact` | HTTP/1.1 | HTTP/1.1 |
    /// | `1.x`, `OrHigher` | HTTP/1.1 | HTTP/2 or HTTP/1.1 by ALPN |
    /// | `2`, `OrLower` (the default) | HTTP/1.1 | HTTP/2 or HTTP/1.1 by ALPN |
    /// | `2`, `Exact` or `OrHigher` | HTTP/2, prior knowledge (h2c) | HTTP/2 (ALPN `h2` only) |
    ///
    /// Where both versions are allowed ([`Negotiate`](Self::Negotiate)), a new
    /// `https://` connection offers `h2` and `http/1.1` and speaks what the destination
    /// picks; once a destination has picked `http/1.1`, its later connections offer only
    /// that (as .NET stops trying HTTP/2 with a server that declined it), and requests
    /// are shaped for the version the destination last chose.
    ///
    /// ```
    /// use fuseway::config::{HttpVersion, HttpVersionPolicy as P};
    /// use fuseway::state::UpstreamVersion as V;
    /// assert_eq!(V::resolve(HttpVersion::Http2, P::RequestVersionOrLower), V::Negotiate);
    /// assert_eq!(V::resolve(HttpVersion::Http2, P::RequestVersionExact), V::Http2);
    /// assert_eq!(V::resolve(HttpVersion::Http11, P::RequestVersionOrHigher), V::Negotiate);
    /// assert_eq!(V::resolve(HttpVersion::Http11, P::RequestVersionOrLower), V::Http1);
    /// ```
    pub fn resolve(version: HttpVersion, policy: HttpVersionPolicy) -> Self {
        match (version, policy) {
            (HttpVersion::Http2, HttpVersionPolicy::RequestVersionExact)
            | (HttpVersion::Http2, HttpVersionPolicy::RequestVersionOrHigher) => {
                UpstreamVersion::Http2
            }
            (HttpVersion::Http2, HttpVersionPolicy::RequestVersionOrLower)
            | (_, HttpVersionPolicy::RequestVersionOrHigher) => UpstreamVersion::Negotiate,
            _ => UpstreamVersion::Http1,
        }
    }
}

/// Outgoing HTTP settings of a cluster, resolved from its configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpSettings {
    /// HTTP version towards destinations (`HttpRequest.Version` and `VersionPolicy`,
    /// see [`UpstreamVersion::resolve`]).
    pub version: UpstreamVersion,
    /// TLS versions offered to `https://` destinations (`HttpClient.SslProtocols`).
    pub tls_versions: TlsVersions,
    /// Longest idle time while waiting on the destination (YARP's `ActivityTimeout`, default 100 s).
    pub activity_timeout: Duration,
    /// Skip certificate validation towards `https://` destinations.
    pub accept_any_certificate: bool,
    /// Most HTTP/1.1 connections open at once to each destination (YARP's
    /// `HttpClient.MaxConnectionsPerServer`), across all worker threads; further
    /// requests wait for one. `None`: no limit.
    pub max_connections_per_server: Option<usize>,
    /// Open another HTTP/2 connection to a destination when the open ones are at its
    /// stream limit (YARP's `HttpClient.EnableMultipleHttp2Connections`, default
    /// `true`), up to `max_connections_per_server`; `false`: one connection, requests
    /// past the limit queue on it.
    pub multiple_http2_connections: bool,
    /// The HTTP proxy destinations are reached through (YARP's `HttpClient.WebProxy`).
    pub web_proxy: Option<WebProxy>,
}

/// An HTTP proxy a cluster's destinations are reached through (YARP's
/// `HttpClient.WebProxy`, as .NET's `HttpClient` uses it): requests to `http://`
/// destinations go to it in absolute form over HTTP/1.1; to `https://` destinations,
/// and HTTP/2 ones over `http://`, through a tunnel it opens with `CONNECT`.
///
/// ```
/// use fuseway::state::WebProxy;
///
/// let proxy = WebProxy::new("http://proxy.example.org:3128", true).unwrap();
/// assert_eq!(proxy.address().as_str(), "proxy.example.org:3128");
/// assert!(proxy.bypasses("localhost") && proxy.bypasses("127.0.0.1"));
/// assert!(proxy.bypasses("[::1]"));
/// assert!(proxy.bypasses("intranet"));
/// assert!(!proxy.bypasses("api.example.org"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebProxy {
    address: http::uri::Authority,
    bypass_on_local: bool,
}

impl WebProxy {
    /// The proxy at `address` (`http://host[:port]`, port 80 by default), reaching
    /// local destinations directly when `bypass_on_local`.
    pub fn new(address: &str, bypass_on_local: bool) -> Result<Self, String> {
        Ok(WebProxy {
            address: Self::authority_of(address)?,
            bypass_on_local,
        })
    }

    /// `host:port` of the proxy at `address`, or why it is not one fuseway can use.
    pub(crate) fn authority_of(address: &str) -> Result<http::uri::Authority, String> {
        let uri: http::Uri = address
            .trim()
            .parse()
            .map_err(|e| format!("`{address}` is not a URI: {e}"))?;
        match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => {}
            Some(s) => {
                return Err(format!(
                    "`{s}` proxies are not supported; an `http://` proxy is (it also \
                     tunnels to `https://` destinations)"
                ))
            }
            None => return Err(format!("`{address}` needs the scheme: `http://{address}`")),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("`{address}` names no host"))?;
        if authority.as_str().contains('@') {
            return Err(
                "user information in the address is not supported: fuseway sends no \
                        credentials to a proxy"
                    .to_string(),
            );
        }
        let port = authority.port_u16().unwrap_or(80);
        format!("{}:{port}", authority.host())
            .parse()
            .map_err(|e| format!("`{address}`: {e}"))
    }

    /// Where connections through the proxy go: its `host:port`.
    pub fn address(&self) -> &http::uri::Authority {
        &self.address
    }

    /// Whether a destination on `host` (an authority's host: a name, an IPv4 address
    /// or a bracketed IPv6 one) is reached directly: with `BypassOnLocal`,
    /// `localhost`, a loopback address or a name without a dot, as .NET's `WebProxy`
    /// tells a local address (the machine's other own addresses and names in its own
    /// domain go through the proxy here).
    pub fn bypasses(&self, host: &str) -> bool {
        if !self.bypass_on_local {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => host.eq_ignore_ascii_case("localhost") || !host.contains('.'),
        }
    }
}

/// YARP's default `ActivityTimeout`.
pub const DEFAULT_ACTIVITY_TIMEOUT: Duration = Duration::from_secs(100);

impl HttpSettings {
    /// The proxy a destination at `authority` is reached through: the `WebProxy`,
    /// unless it bypasses that destination.
    pub(crate) fn proxy_for(
        &self,
        authority: &http::uri::Authority,
    ) -> Option<&http::uri::Authority> {
        self.web_proxy
            .as_ref()
            .filter(|p| !p.bypasses(authority.host()))
            .map(WebProxy::address)
    }

    pub(crate) fn from_config(config: &ClusterConfig) -> Self {
        let request = config.http_request.as_ref();
        // Validation has checked both names.
        let version: HttpVersion = request
            .and_then(|r| r.version.as_deref())
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        let policy: HttpVersionPolicy = request
            .and_then(|r| r.version_policy.as_deref())
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        let client = config.http_client.as_ref();
        HttpSettings {
            version: UpstreamVersion::resolve(version, policy),
            tls_versions: client
                .and_then(|c| c.ssl_protocols.as_deref())
                .and_then(|p| TlsVersions::from_names(p).ok())
                .unwrap_or_default(),
            activity_timeout: request
                .and_then(|r| r.activity_timeout)
                .map_or(DEFAULT_ACTIVITY_TIMEOUT, |d| d.get()),
            accept_any_certificate: client
                .and_then(|c| c.dangerous_accept_any_server_certificate)
                .unwrap_or(false),
            max_connections_per_server: client
                .and_then(|c| c.max_connections_per_server)
                .map(|n| n as usize),
            multiple_http2_connections: client
                .and_then(|c| c.enable_multiple_http2_connections)
                .unwrap_or(true),
            // Validation has checked the address.
            web_proxy: client.and_then(|c| c.web_proxy.as_ref()).and_then(|p| {
                let address = p.address.as_deref()?;
                WebProxy::new(address, p.bypass_on_local.unwrap_or(false)).ok()
            }),
        }
    }
}

/// A cluster: its destinations, settings and runtime state. What a stage keeps per
/// cluster is its compiled [data](Self::data); the built-in stages read theirs with
/// methods of their own (`balancing()`, `affinity()`, `health()`).
#[derive(Debug)]
pub struct Cluster {
    pub(crate) id: Arc<str>,
    pub(crate) config: ClusterConfig,
    pub(crate) destinations: Vec<Destination>,
    pub(crate) state: Arc<ClusterState>,
    pub(crate) http: HttpSettings,
    /// What stages compiled from its configuration ([`ClusterData`]).
    pub(crate) data: super::DataSet,
}

impl Cluster {
    /// The `T` a stage compiled for this cluster when the state was built (see
    /// [`ClusterData`]): no lock, no allocation.
    pub fn data<T: ClusterData>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// The cluster's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Its destinations, ordered by id.
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }

    /// The destination with this id.
    pub fn destination(&self, id: &str) -> Option<(usize, &Destination)> {
        self.destinations
            .iter()
            .enumerate()
            .find(|(_, d)| d.id() == id)
    }

    /// Its runtime state (concurrency counter).
    pub fn state(&self) -> &Arc<ClusterState> {
        &self.state
    }

    /// Outgoing HTTP settings.
    pub fn http(&self) -> &HttpSettings {
        &self.http
    }
}

/// A route as the snapshot holds it. What a stage keeps per route is its compiled
/// [data](Self::data); the built-in stages read theirs with methods of their own
/// (`limits()`, `state()`, `transforms()`, `telemetry()`).
#[derive(Debug)]
pub struct Route {
    pub(crate) id: Arc<str>,
    pub(crate) config: RouteConfig,
    pub(crate) cluster: Option<usize>,
    pub(crate) policies: crate::policy::RoutePolicies,
    /// What stages compiled from its configuration ([`RouteData`]).
    pub(crate) data: super::DataSet,
}

impl Route {
    /// The `T` a stage compiled for this route when the state was built (see
    /// [`RouteData`]): no lock, no allocation.
    pub fn data<T: RouteData>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// The [named policies](crate::policy) the route names, in the order they run.
    pub fn policies(&self) -> &[std::sync::Arc<dyn crate::policy::RoutePolicy>] {
        self.policies.as_slice()
    }

    /// The route's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its configuration.
    pub fn config(&self) -> &RouteConfig {
        &self.config
    }

    /// Index of its cluster in the snapshot, if that cluster exists.
    pub fn cluster_index(&self) -> Option<usize> {
        self.cluster
    }
}
