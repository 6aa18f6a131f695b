//! The serde model of a fuseway configuration, in YARP's shape.
//!
//! Keys are PascalCase as in YARP's `appsettings.json` (files may write them in any
//! case, as .NET binds them: see [`parse`](super::parse)); unknown keys are rejected so
//! that a typo never silently disables a setting.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::duration::ConfigDuration;
use super::{LoggingConfig, ServerLimits};

/// A whole proxy configuration: listeners, routes, clusters, the allowed hosts, the
/// server's limits and the log levels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// Addresses the server listens on (`"127.0.0.1:8080"`); the command line may add more.
    #[serde(default)]
    pub listen: Vec<ListenConfig>,
    /// Routes by id.
    #[serde(default)]
    pub routes: BTreeMap<String, RouteConfig>,
    /// Clusters by id.
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterConfig>,
    /// ASP.NET's host filtering: the hosts requests may name, separated by `;`
    /// (`example.com;*.example.org`, without ports; `*`: any). A request naming another
    /// is answered 400. The top-level `AllowedHosts` of a YARP `appsettings.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<String>,
    /// The server's limits, with Kestrel's keys (`Kestrel.Limits` in a YARP
    /// `appsettings.json`).
    #[serde(default, skip_serializing_if = "ServerLimits::is_empty")]
    pub limits: ServerLimits,
    /// ASP.NET's log levels (`Logging` in a YARP `appsettings.json`): the binary's log
    /// filter when `RUST_LOG` is not set (reloads change it).
    #[serde(default, skip_serializing_if = "LoggingConfig::is_empty")]
    pub logging: LoggingConfig,
}

/// Where a server listens when neither the configuration nor the command line says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

impl ProxyConfig {
    /// The addresses its `Listen` names, or [`DEFAULT_LISTEN`] when it names none.
    ///
    /// ```
    /// use fuseway::config::{parse, Format};
    ///
    /// let config = parse(r#"{ "Listen": ["127.0.0.1:9000"] }"#, Format::Json).unwrap();
    /// assert_eq!(config.listen_addrs().unwrap(), ["127.0.0.1:9000".parse().unwrap()]);
    /// let none = parse("{}", Format::Json).unwrap();
    /// assert_eq!(none.listen_addrs().unwrap(), ["127.0.0.1:8080".parse().unwrap()]);
    /// ```
    pub fn listen_addrs(&self) -> Result<Vec<std::net::SocketAddr>, super::ConfigError> {
        if self.listen.is_empty() {
            return Ok(vec![DEFAULT_LISTEN.parse().expect("a socket address")]);
        }
        self.listen
            .iter()
            .enumerate()
            .map(|(i, l)| {
                l.address().parse().map_err(|e| {
                    super::ConfigError::new(
                        format!("Listen[{i}]"),
                        format!("`{}`: {e}", l.address()),
                    )
                })
            })
            .collect()
    }
}

/// One listening socket.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ListenConfig {
    /// Just an address: `"127.0.0.1:8080"`.
    Address(String),
    /// The long form.
    Full(ListenEntry),
}

/// The long form of a listener.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ListenEntry {
    /// `ip:port` to bind.
    pub address: String,
    /// The listener terminates TLS (ALPN `h2`, `http/1.1`) with this certificate: a
    /// PEM file with the chain (leaf first) and `Key`, or without `Key` a PKCS#12
    /// (PFX) archive holding the chain and the key, opened with `Password`. Relative
    /// paths are relative to the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    /// PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1; with
    /// `Password`, an encrypted PKCS#8 key). Requires a PEM `Certificate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The password of a PKCS#12 `Certificate` (none: an archive without one), or of
    /// an encrypted `Key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// What the listener serves: `Http1`, `Http2` or `Http1AndHttp2` (the default), as
    /// Kestrel's `Protocols` ([`ListenProtocols`](super::ListenProtocols)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<String>,
    /// The TLS versions a TLS listener accepts: Kestrel's `SslProtocols` (`Tls12`,
    /// `Tls13`; none, `None` or `Default`: both; see
    /// [`TlsVersions`](super::TlsVersions)).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "protocol_names"
    )]
    pub ssl_protocols: Option<Vec<String>>,
    /// Whether a TLS listener asks clients for a certificate: Kestrel's
    /// `ClientCertificateMode` ([`ClientCertificateMode`](super::ClientCertificateMode)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_mode: Option<String>,
    /// Kestrel's `Sni`: the certificate and settings by the host name a TLS client asks
    /// for. Keys are a host name (matched ignoring case), `*.example.org` (any name
    /// ending in `.example.org`; the longest such suffix wins) or `*` (any name, and
    /// clients that send none). Each entry's unset fields are the listener's; a
    /// listener with `Sni` refuses a client whose name no entry matches, as Kestrel.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sni: BTreeMap<String, SniEntry>,
    /// Terminate TLS with a self-signed certificate for `localhost` that fuseway makes
    /// when it starts, instead of a `Certificate` (for development only: no client
    /// trusts it). An ASP.NET `https` endpoint naming no certificate gets it in the
    /// `Development` environment, where Kestrel serves its development certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub development_certificate: Option<bool>,
}

impl fmt::Debug for ListenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenEntry")
            .field("address", &self.address)
            .field("certificate", &self.certificate)
            .field("key", &self.key)
            // Never shown.
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("protocols", &self.protocols)
            .field("ssl_protocols", &self.ssl_protocols)
            .field("client_certificate_mode", &self.client_certificate_mode)
            .field("sni", &self.sni)
            .field("development_certificate", &self.development_certificate)
            .finish()
    }
}

/// A TLS listener's settings for the host names of an [`Sni`](ListenEntry::sni) key:
/// Kestrel's `Sni` entries. A field left out is the listener's.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct SniEntry {
    /// The certificate for these names (as [`ListenEntry::certificate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    /// Its key, for a PEM certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The password of a PKCS#12 certificate or of an encrypted key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// What is served to these names (`Http1`, `Http2`, `Http1AndHttp2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<String>,
    /// The TLS versions accepted from these names.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "protocol_names"
    )]
    pub ssl_protocols: Option<Vec<String>>,
    /// Whether clients asking for these names are asked for a certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_mode: Option<String>,
}

impl fmt::Debug for SniEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SniEntry")
            .field("certificate", &self.certificate)
            .field("key", &self.key)
            // Never shown.
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("protocols", &self.protocols)
            .field("ssl_protocols", &self.ssl_protocols)
            .field("client_certificate_mode", &self.client_certificate_mode)
            .finish()
    }
}

// By hand rather than `#[serde(untagged)]`, so that errors say what was expected and
// errors inside the long form keep their path.
impl<'de> Deserialize<'de> for ListenConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListenVisitor;

        impl<'de> Visitor<'de> for ListenVisitor {
            type Value = ListenConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an `ip:port` string or an object with `Address` (and `Certificate`, `Key`, \
                     `Password`, `Protocols`)",
                )
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ListenConfig, E> {
                Ok(ListenConfig::Address(v.to_string()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ListenConfig, A::Error> {
                // Bound again: keys of the long form match ignoring case, as elsewhere.
                ListenEntry::deserialize(super::binder::Binder(
                    de::value::MapAccessDeserializer::new(map),
                ))
                .map(ListenConfig::Full)
            }
        }

        d.deserialize_any(ListenVisitor)
    }
}

impl ListenConfig {
    /// The `ip:port` this listener binds.
    pub fn address(&self) -> &str {
        match self {
            ListenConfig::Address(a) => a,
            ListenConfig::Full(e) => &e.address,
        }
    }

    /// What this listener serves (its `Protocols`; both HTTP/1.1 and HTTP/2 when it
    /// names none, or a name validation refuses).
    pub fn protocols(&self) -> super::ListenProtocols {
        match self {
            ListenConfig::Full(ListenEntry {
                protocols: Some(p), ..
            }) => super::validate::check_protocols(p).unwrap_or_default(),
            _ => super::ListenProtocols::default(),
        }
    }

    /// Where the certificate and key are read from, when this listener terminates TLS
    /// with a certificate of its own (a listener whose `Sni` entries each name theirs
    /// may have none).
    pub fn tls_files(&self) -> Option<crate::server::TlsFiles> {
        let ListenConfig::Full(entry) = self else {
            return None;
        };
        match entry.development_certificate {
            Some(true) if entry.certificate.is_none() => Some(crate::server::TlsFiles::Development),
            _ => tls_files(&entry.certificate, &entry.key, &entry.password),
        }
    }

    /// How this listener terminates TLS (`None`: it does not): its certificate and its
    /// settings, by host name when it has `Sni`. Values validation refuses are read as
    /// their defaults.
    pub(crate) fn tls_setup(&self) -> Option<crate::server::tls::TlsSetup> {
        use crate::server::tls::{Site, TlsSetup, TlsSite};
        let ListenConfig::Full(entry) = self else {
            return None;
        };
        let files = self.tls_files();
        if files.is_none() && entry.sni.is_empty() {
            return None;
        }
        let own = Site {
            protocols: self.protocols(),
            versions: tls_versions(&entry.ssl_protocols).unwrap_or_default(),
            client_certificates: client_certificates(&entry.client_certificate_mode)
                .unwrap_or_default(),
        };
        let sites = if entry.sni.is_empty() {
            vec![TlsSite {
                name: "*".to_string(),
                files: None,
                site: own,
            }]
        } else {
            entry
                .sni
                .iter()
                .map(|(name, sni)| TlsSite {
                    name: name.clone(),
                    files: tls_files(&sni.certificate, &sni.key, &sni.password),
                    site: Site {
                        protocols: sni
                            .protocols
                            .as_deref()
                            .and_then(|p| super::validate::check_protocols(p).ok())
                            .unwrap_or(own.protocols),
                        versions: tls_versions(&sni.ssl_protocols).unwrap_or(own.versions),
                        client_certificates: client_certificates(&sni.client_certificate_mode)
                            .unwrap_or(own.client_certificates),
                    },
                })
                .collect()
        };
        Some(TlsSetup {
            files,
            sites,
            sni: !entry.sni.is_empty(),
        })
    }
}

/// The files a `Certificate`, `Key` and `Password` name: PEM files with a `Key`, else a
/// PKCS#12 archive.
fn tls_files(
    certificate: &Option<String>,
    key: &Option<String>,
    password: &Option<String>,
) -> Option<crate::server::TlsFiles> {
    let certificate = certificate.as_ref()?;
    Some(match key {
        Some(key) => crate::server::TlsFiles::Pem {
            certificate: certificate.into(),
            key: key.into(),
            password: password.clone(),
        },
        None => crate::server::TlsFiles::Pkcs12 {
            file: certificate.into(),
            password: password.clone().unwrap_or_default(),
        },
    })
}

/// `SslProtocols`, when given and valid.
fn tls_versions(names: &Option<Vec<String>>) -> Option<super::TlsVersions> {
    super::TlsVersions::from_names(names.as_ref()?).ok()
}

/// `ClientCertificateMode`, when given and valid.
fn client_certificates(mode: &Option<String>) -> Option<super::ClientCertificateMode> {
    mode.as_deref()?.parse().ok()
}

/// A route: which requests it matches and which cluster serves them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteConfig {
    /// The cluster that serves this route.
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// Lower values win over higher ones (default 0).
    #[serde(default)]
    pub order: Option<i32>,
    /// What the route matches.
    #[serde(rename = "Match", default)]
    pub match_: RouteMatch,
    /// Largest request body in bytes; `-1` is unlimited; absent is the server default.
    #[serde(default)]
    pub max_request_body_size: Option<i64>,
    /// Time limit for the whole exchange (504 when exceeded before the response starts).
    #[serde(default)]
    pub timeout: Option<ConfigDuration>,
    /// Most requests of this route in flight at once (fuseway extension); more get 503
    /// with `Retry-After`.
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    /// Token-bucket rate limit of this route (fuseway extension); over it: 429 with
    /// `Retry-After`.
    #[serde(default)]
    pub rate_limit: Option<RateLimitConfig>,
    /// Request and response transforms, in YARP's dictionary form.
    #[serde(default)]
    pub transforms: Vec<BTreeMap<String, String>>,
    /// Authorization policy: `Anonymous`, or a name registered in code
    /// ([`policy`](crate::policy)); an unregistered name is refused.
    #[serde(default)]
    pub authorization_policy: Option<String>,
    /// CORS policy: `Disable`, or a name registered in code ([`policy`](crate::policy)).
    #[serde(default)]
    pub cors_policy: Option<String>,
    /// Rate limiter policy: `Disable`, or a name registered in code
    /// ([`policy`](crate::policy)).
    #[serde(default)]
    pub rate_limiter_policy: Option<String>,
    /// Timeout policy: `Disable`, or a name registered in code with its duration
    /// ([`policy`](crate::policy)).
    #[serde(default)]
    pub timeout_policy: Option<String>,
    /// Output cache policy: a name registered in code ([`policy`](crate::policy)).
    #[serde(default)]
    pub output_cache_policy: Option<String>,
    /// Free-form data for custom stages.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// A token-bucket rate limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimitConfig {
    /// Tokens added per second.
    pub permits_per_second: f64,
    /// Bucket size: requests allowed in a burst (default: `PermitsPerSecond`, at least 1).
    #[serde(default)]
    pub burst: Option<u32>,
}

/// The match criteria of a route. All given criteria must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteMatch {
    /// Path template: literals, `{param}`, `{param?}`, `{*rest}`, `{**rest}`.
    #[serde(default)]
    pub path: Option<String>,
    /// Host names: `example.com`, `*.example.com`, `example.com:8080`, `*:8080`.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// HTTP methods; absent matches every method.
    #[serde(default)]
    pub methods: Option<Vec<String>>,
    /// Header rules; all must match.
    #[serde(default)]
    pub headers: Option<Vec<HeaderMatch>>,
    /// Query parameter rules; all must match.
    #[serde(default)]
    pub query_parameters: Option<Vec<QueryParameterMatch>>,
}

/// How a header rule compares values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HeaderMatchMode {
    /// The value equals one of `Values`.
    #[default]
    ExactHeader,
    /// The value starts with one of `Values`.
    HeaderPrefix,
    /// The value contains one of `Values`.
    Contains,
    /// The value contains none of `Values` (also matches when the header is absent).
    NotContains,
    /// The header is present and not empty.
    Exists,
    /// The header is absent.
    NotExists,
}

/// A header rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct HeaderMatch {
    /// Header name.
    pub name: String,
    /// Values to compare with; any one may match.
    #[serde(default)]
    pub values: Option<Vec<String>>,
    /// Comparison mode.
    #[serde(default)]
    pub mode: HeaderMatchMode,
    /// Compare values case-sensitively (default false).
    #[serde(default)]
    pub is_case_sensitive: bool,
}

/// How a query parameter rule compares values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QueryParameterMatchMode {
    /// The value equals one of `Values`.
    #[default]
    Exact,
    /// The value starts with one of `Values`.
    Prefix,
    /// The value contains one of `Values`.
    Contains,
    /// The value contains none of `Values` (also matches when absent).
    NotContains,
    /// The parameter is present and not empty.
    Exists,
}

/// A query parameter rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct QueryParameterMatch {
    /// Parameter name.
    pub name: String,
    /// Values to compare with; any one may match.
    #[serde(default)]
    pub values: Option<Vec<String>>,
    /// Comparison mode.
    #[serde(default)]
    pub mode: QueryParameterMatchMode,
    /// Compare values case-sensitively (default false).
    #[serde(default)]
    pub is_case_sensitive: bool,
}

/// A cluster: a set of destinations and how requests are spread over them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ClusterConfig {
    /// `PowerOfTwoChoices` (default), `RoundRobin`, `Random`, `LeastRequests`, `FirstAlphabetical`.
    #[serde(default)]
    pub load_balancing_policy: Option<String>,
    /// Session affinity settings.
    #[serde(default)]
    pub session_affinity: Option<SessionAffinityConfig>,
    /// Health check settings.
    #[serde(default)]
    pub health_check: Option<HealthCheckConfig>,
    /// Outgoing request settings.
    #[serde(default)]
    pub http_request: Option<HttpRequestConfig>,
    /// Outgoing connection settings.
    #[serde(default)]
    pub http_client: Option<HttpClientConfig>,
    /// Destinations by id.
    #[serde(default)]
    pub destinations: BTreeMap<String, DestinationConfig>,
    /// Free-form data for custom stages.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// Session affinity settings of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionAffinityConfig {
    /// Turn affinity on.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `HashCookie` (default), `ArrCookie`, `Cookie`, `CustomHeader`.
    #[serde(default)]
    pub policy: Option<String>,
    /// `Redistribute` (default) or `Return503Error`.
    #[serde(default)]
    pub failure_policy: Option<String>,
    /// Cookie or header name carrying the key (required when enabled).
    #[serde(default)]
    pub affinity_key_name: Option<String>,
    /// Cookie attributes.
    #[serde(default)]
    pub cookie: Option<AffinityCookieConfig>,
    /// Key sealing destination ids for the `Cookie` and `CustomHeader` policies: 32 bytes,
    /// base64 (fuseway extension; YARP uses ASP.NET Data Protection). Without it a random
    /// key is generated at start, and keys do not survive a restart.
    #[serde(default)]
    pub encryption_key: Option<String>,
}

/// Attributes of the affinity cookie.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct AffinityCookieConfig {
    /// Cookie `Path` (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// Cookie `Domain`.
    #[serde(default)]
    pub domain: Option<String>,
    /// `HttpOnly` (default true).
    #[serde(default)]
    pub http_only: Option<bool>,
    /// `SameAsRequest` (default), `Always`, `None`.
    #[serde(default)]
    pub secure_policy: Option<String>,
    /// `Unspecified` (default), `None`, `Lax`, `Strict`.
    #[serde(default)]
    pub same_site: Option<String>,
    /// Cookie lifetime written as `Expires`.
    #[serde(default)]
    pub expiration: Option<ConfigDuration>,
    /// Cookie `Max-Age`.
    #[serde(default)]
    pub max_age: Option<ConfigDuration>,
    /// ASP.NET's cookie-consent flag. fuseway has no consent policy, so the cookie is
    /// always written, as ASP.NET does without one; either value is accepted.
    #[serde(default)]
    pub is_essential: Option<bool>,
}

/// Health check settings of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct HealthCheckConfig {
    /// Passive (traffic-based) health.
    #[serde(default)]
    pub passive: Option<PassiveHealthConfig>,
    /// Active (probing) health.
    #[serde(default)]
    pub active: Option<ActiveHealthConfig>,
    /// `HealthyOrPanic` (default) or `HealthyAndUnknown`.
    #[serde(default)]
    pub available_destinations_policy: Option<String>,
}

/// Passive health settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct PassiveHealthConfig {
    /// Turn passive health on.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `TransportFailureRate` (default).
    #[serde(default)]
    pub policy: Option<String>,
    /// How long an unhealthy destination stays out of rotation.
    #[serde(default)]
    pub reactivation_period: Option<ConfigDuration>,
    /// Also count 5xx responses as failures (fuseway extension; YARP counts transport
    /// failures only).
    #[serde(default)]
    pub count_server_errors: Option<bool>,
}

/// Active health settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ActiveHealthConfig {
    /// Turn probing on.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Time between probes (default 15 s).
    #[serde(default)]
    pub interval: Option<ConfigDuration>,
    /// Probe timeout (default 10 s).
    #[serde(default)]
    pub timeout: Option<ConfigDuration>,
    /// `ConsecutiveFailures` (default).
    #[serde(default)]
    pub policy: Option<String>,
    /// Probe path.
    #[serde(default)]
    pub path: Option<String>,
    /// Probe query string.
    #[serde(default)]
    pub query: Option<String>,
    /// Consecutive failures that make a destination unhealthy (default 2; YARP's
    /// `ConsecutiveFailuresHealthPolicy.Threshold` cluster metadata is honoured too).
    #[serde(default)]
    pub threshold: Option<u32>,
}

/// Outgoing request settings of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpRequestConfig {
    /// Idle time allowed while waiting for the destination (default 100 s).
    #[serde(default)]
    pub activity_timeout: Option<ConfigDuration>,
    /// `"1.1"` or `"2"` (default), with `VersionPolicy` (see
    /// [`UpstreamVersion::resolve`](crate::state::UpstreamVersion::resolve)).
    #[serde(default)]
    pub version: Option<String>,
    /// `RequestVersionOrLower` (default), `RequestVersionOrHigher`, `RequestVersionExact`.
    #[serde(default)]
    pub version_policy: Option<String>,
    /// Responses stream either way, as under Kestrel, where `true` changes nothing
    /// either (only IIS buffers a response YARP lets it).
    #[serde(default)]
    pub allow_response_buffering: Option<bool>,
}

/// Outgoing connection settings of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpClientConfig {
    /// Most connections to one destination.
    #[serde(default)]
    pub max_connections_per_server: Option<u32>,
    /// Skip TLS certificate validation towards destinations (tests only).
    #[serde(default)]
    pub dangerous_accept_any_server_certificate: Option<bool>,
    /// Another HTTP/2 connection to a destination when the open ones are at its stream
    /// limit (default `true`, as in YARP); `false`: one per destination.
    #[serde(default)]
    pub enable_multiple_http2_connections: Option<bool>,
    /// TLS versions towards `https://` destinations: `Tls12`, `Tls13` (see
    /// [`TlsVersions`](super::TlsVersions)); older ones are refused.
    #[serde(default, deserialize_with = "protocol_names")]
    pub ssl_protocols: Option<Vec<String>>,
    /// `utf-8` or `latin1`: header bytes pass through unchanged either way; other
    /// encodings are refused.
    #[serde(default)]
    pub request_header_encoding: Option<String>,
    /// As `RequestHeaderEncoding`, for response headers.
    #[serde(default)]
    pub response_header_encoding: Option<String>,
    /// The HTTP proxy connections to destinations go through (YARP's `WebProxy`; none
    /// by default, and the environment's `HTTP_PROXY` is not read, as in YARP).
    #[serde(default)]
    pub web_proxy: Option<WebProxyConfig>,
}

/// An HTTP proxy to reach a cluster's destinations through (YARP's `WebProxy`): plain
/// `http://` destinations get requests in absolute form on connections to it, `https://`
/// ones (and `h2c` ones) a tunnel it opens with `CONNECT`, as .NET's `HttpClient` does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct WebProxyConfig {
    /// The proxy, `http://host[:port]` (port 80 by default). None: no proxy.
    #[serde(default)]
    pub address: Option<String>,
    /// Destinations on this machine (`localhost`, loopback addresses) and host names
    /// without a dot are reached directly (default `false`).
    #[serde(default)]
    pub bypass_on_local: Option<bool>,
    /// `false` (default); `true` (the process's Windows credentials) is refused.
    #[serde(default)]
    pub use_default_credentials: Option<bool>,
}

/// One destination of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct DestinationConfig {
    /// Base address, e.g. `http://127.0.0.1:5000/prefix`.
    pub address: String,
    /// Address active health probes go to instead of `Address`.
    #[serde(default)]
    pub health: Option<String>,
    /// `Host` header sent instead of the address' authority.
    #[serde(default)]
    pub host: Option<String>,
    /// Relative weight for `RoundRobin` and `Random` (fuseway extension; default 1).
    #[serde(default)]
    pub weight: Option<u32>,
    /// Free-form data for custom stages.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// `SslProtocols` as a list of names, or as one string (`"Tls13"`, `"Tls12, Tls13"`: a
/// .NET flags value, as YARP's own sample writes it), read as the list of its names.
pub(crate) fn protocol_names<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    struct Names;
    impl<'de> Visitor<'de> for Names {
        type Value = Option<Vec<String>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of TLS versions, or one string of them")
        }

        fn visit_str<E: de::Error>(self, names: &str) -> Result<Self::Value, E> {
            Ok(Some(
                names
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            ))
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut names = Vec::new();
            while let Some(name) = seq.next_element::<String>()? {
                names.push(name);
            }
            Ok(Some(names))
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(Names)
}
