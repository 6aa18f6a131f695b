//! Validation of a whole configuration: every problem is collected, each naming the
//! dotted path of its field.
//!
//! Route *match* criteria (path templates, hosts, headers ...) are compiled, and so
//! checked, by routing when a state is built (`RouteTable::build`, its errors naming the
//! same kind of paths); this module checks everything else: the model alone.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::str::FromStr;

use http::uri::{Authority, Scheme, Uri};

use super::names::{
    ActiveHealthPolicyName, AffinityFailurePolicyName, AvailableDestinationsPolicyName,
    CookieSameSite, CookieSecurePolicy, HttpVersion, HttpVersionPolicy, PassiveHealthPolicyName,
    SessionAffinityPolicyName,
};
use super::transforms::collect_transforms;
use super::ListenProtocols;
use super::{
    ClusterConfig, ConfigDuration, ConfigErrors, DestinationConfig, HealthCheckConfig,
    HttpClientConfig, HttpRequestConfig, ListenConfig, ProxyConfig, RouteConfig, ServerLimits,
    SessionAffinityConfig, TlsVersions,
};

impl ProxyConfig {
    /// Check everything; any error rejects the whole configuration.
    ///
    /// All problems are reported, in document order (listeners, routes, clusters), each
    /// with the dotted path of its field (`Clusters.c1.Destinations.d1.Address`). A route
    /// naming a cluster that does not exist is accepted with a warning: as in YARP, its
    /// requests are answered 503.
    ///
    /// Route match criteria are checked when a state is built (routing compiles them):
    /// [`ProxyState::new`](crate::state::ProxyState::new) reports these errors and the
    /// ones here together.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for (i, listen) in self.listen.iter().enumerate() {
            check_listen(listen, i, &mut errors);
        }
        for (id, route) in &self.routes {
            check_route(id, route, &self.clusters, &mut errors);
        }
        for (id, cluster) in &self.clusters {
            check_cluster(id, cluster, &mut errors);
        }
        check_limits(&self.limits, "Limits", &mut errors);
        if let Some(hosts) = &self.allowed_hosts {
            if let Err(e) = crate::routing::AllowedHosts::parse(hosts) {
                errors.push("AllowedHosts", e);
            }
        }
        errors.into_result()
    }
}

/// The server's limits (at `prefix`: `Limits`, or `Kestrel.Limits`), with Kestrel's
/// own bounds: counts, sizes and timeouts above zero, a minimum rate's grace period over
/// a second (Kestrel's heartbeat).
pub(super) fn check_limits(limits: &ServerLimits, prefix: &str, errors: &mut ConfigErrors) {
    let mut positive = |value: Option<u64>, key: &str| {
        if value == Some(0) {
            errors.push(format!("{prefix}.{key}"), "must be greater than 0");
        }
    };
    positive(
        limits.max_concurrent_connections,
        "MaxConcurrentConnections",
    );
    positive(limits.max_request_line_size, "MaxRequestLineSize");
    positive(
        limits.max_request_headers_total_size,
        "MaxRequestHeadersTotalSize",
    );
    positive(
        limits.max_request_header_count.map(u64::from),
        "MaxRequestHeaderCount",
    );
    let http2 = limits.http2.as_ref();
    positive(
        http2
            .and_then(|h| h.max_request_header_field_size)
            .map(u64::from),
        "Http2.MaxRequestHeaderFieldSize",
    );
    positive(
        http2
            .and_then(|h| h.max_streams_per_connection)
            .map(u64::from),
        "Http2.MaxStreamsPerConnection",
    );
    // Kestrel's bounds, HTTP/2's (RFC 9113 section 6.5.2).
    if http2
        .and_then(|h| h.max_frame_size)
        .is_some_and(|n| !(16_384..=16_777_215).contains(&n))
    {
        errors.push(
            format!("{prefix}.Http2.MaxFrameSize"),
            "must be from 16384 (HTTP/2's default) to 16777215",
        );
    }
    for (value, key) in [
        (
            http2.and_then(|h| h.initial_connection_window_size),
            "Http2.InitialConnectionWindowSize",
        ),
        (
            http2.and_then(|h| h.initial_stream_window_size),
            "Http2.InitialStreamWindowSize",
        ),
    ] {
        // Kestrel's bounds: HTTP/2's default window, and its largest.
        if value.is_some_and(|n| !(65_535..=0x7fff_ffff).contains(&n)) {
            errors.push(
                format!("{prefix}.{key}"),
                "must be from 65535 (HTTP/2's default window) to 2147483647",
            );
        }
    }
    for (value, key) in [
        (limits.keep_alive_timeout, "KeepAliveTimeout"),
        (limits.request_headers_timeout, "RequestHeadersTimeout"),
        (
            http2.and_then(|h| h.keep_alive_ping_timeout),
            "Http2.KeepAlivePingTimeout",
        ),
        (
            http2.and_then(|h| h.keep_alive_ping_delay),
            "Http2.KeepAlivePingDelay",
        ),
    ] {
        if value.is_some_and(|d| d.get().is_zero()) {
            errors.push(format!("{prefix}.{key}"), "must be longer than 0");
        }
    }
    for (rate, key) in [
        (limits.min_request_body_data_rate, "MinRequestBodyDataRate"),
        (limits.min_response_data_rate, "MinResponseDataRate"),
    ] {
        if let Some(Some(rate)) = rate {
            if rate.grace_period.get() <= std::time::Duration::from_secs(1) {
                errors.push(
                    format!("{prefix}.{key}.GracePeriod"),
                    "must be longer than 1 second (as Kestrel requires)",
                );
            }
        }
    }
}

fn check_listen(listen: &ListenConfig, i: usize, errors: &mut ConfigErrors) {
    let path = match listen {
        ListenConfig::Address(_) => format!("Listen[{i}]"),
        ListenConfig::Full(_) => format!("Listen[{i}].Address"),
    };
    let address = listen.address();
    if let Err(e) = address.parse::<SocketAddr>() {
        errors.push(
            path,
            format!("`{address}` is not an `ip:port` socket address ({e})"),
        );
    }
    let ListenConfig::Full(entry) = listen else {
        return;
    };
    let prefix = format!("Listen[{i}]");
    check_site(
        &prefix,
        "a listener",
        [&entry.certificate, &entry.key, &entry.password],
        &entry.protocols,
        false,
        errors,
    );
    let development = entry.development_certificate == Some(true);
    if development && entry.certificate.is_some() {
        errors.push(
            format!("{prefix}.DevelopmentCertificate"),
            "a listener with a Certificate of its own needs no development certificate",
        );
    }
    let tls = entry.certificate.is_some() || !entry.sni.is_empty() || development;
    check_tls_settings(
        &prefix,
        &entry.ssl_protocols,
        &entry.client_certificate_mode,
        tls,
        errors,
    );
    let mut names = std::collections::BTreeSet::new();
    for (name, sni) in &entry.sni {
        let path = format!("{prefix}.Sni.{name}");
        let host = name.strip_prefix("*.").unwrap_or(name);
        if name != "*" && (host.is_empty() || host.contains('*') || host.contains(':')) {
            errors.push(
                &path,
                "a host name, `*.` and a domain (its sub-domains), or `*` (any)",
            );
        }
        if !names.insert(name.to_ascii_lowercase()) {
            errors.push(&path, "named twice (host names match ignoring case)");
        }
        check_site(
            &path,
            "an entry",
            [&sni.certificate, &sni.key, &sni.password],
            &sni.protocols,
            entry.certificate.is_none() && !development,
            errors,
        );
        check_tls_settings(
            &path,
            &sni.ssl_protocols,
            &sni.client_certificate_mode,
            true,
            errors,
        );
    }
}

/// A listener's (`what`: "a listener") or `Sni` entry's files — `Certificate`, `Key`,
/// `Password` — and `Protocols`, at `path`; `required`: it must name a certificate (an
/// entry of a listener without one).
fn check_site(
    path: &str,
    what: &str,
    [certificate, key, password]: [&Option<String>; 3],
    protocols: &Option<String>,
    required: bool,
    errors: &mut ConfigErrors,
) {
    if let Some(protocols) = protocols {
        if let Err(e) = check_protocols(protocols) {
            errors.push(format!("{path}.Protocols"), e);
        }
    }
    match (certificate, key, password) {
        (None, None, None) if required => errors.push(
            format!("{path}.Certificate"),
            "no certificate: give this entry one, or the listener",
        ),
        (None, Some(_), _) => errors.push(
            format!("{path}.Certificate"),
            format!("{what} with a Key needs its Certificate"),
        ),
        (None, None, Some(_)) => errors.push(
            format!("{path}.Password"),
            "a Password without a Certificate (a PKCS#12 file's)",
        ),
        // The files themselves are read by the server (`Server::check_listeners`, and
        // when binding): the configuration is plain data. A Certificate without a Key
        // is a PKCS#12 archive; a Key with a Password, an encrypted one.
        _ => {}
    }
}

/// A TLS listener's (or `Sni` entry's) `SslProtocols` and `ClientCertificateMode`, at
/// `path`; `tls`: whether the listener terminates TLS (else they are an error).
fn check_tls_settings(
    path: &str,
    ssl_protocols: &Option<Vec<String>>,
    client_certificate_mode: &Option<String>,
    tls: bool,
    errors: &mut ConfigErrors,
) {
    for (key, set) in [
        ("SslProtocols", ssl_protocols.is_some()),
        ("ClientCertificateMode", client_certificate_mode.is_some()),
    ] {
        if set && !tls {
            errors.push(
                format!("{path}.{key}"),
                "only for a listener that terminates TLS (one with a Certificate, Sni or DevelopmentCertificate)",
            );
        }
    }
    if let Some(protocols) = ssl_protocols {
        if let Err(message) = TlsVersions::from_names(protocols) {
            errors.push(format!("{path}.SslProtocols"), message);
        }
    }
    if let Some(mode) = client_certificate_mode {
        if let Err(message) = mode.parse::<super::ClientCertificateMode>() {
            errors.push(format!("{path}.ClientCertificateMode"), message);
        }
    }
}

/// A listener's `Protocols` (Kestrel's names), or the error for one fuseway does not
/// serve. `Http1AndHttp2AndHttp3` is HTTP/1.1 and HTTP/2, as Kestrel serves it where the
/// platform has no QUIC (.NET's templates write it); HTTP/3 alone is refused, as there.
pub(super) fn check_protocols(protocols: &str) -> Result<ListenProtocols, String> {
    if protocols
        .trim()
        .eq_ignore_ascii_case("Http1AndHttp2AndHttp3")
    {
        return Ok(ListenProtocols::Http1AndHttp2);
    }
    protocols.parse::<ListenProtocols>().map_err(|e| {
        if protocols.to_ascii_lowercase().contains("http3") {
            format!(
                "`{protocols}`: fuseway serves no HTTP/3; use `Http1`, `Http2` or `Http1AndHttp2`"
            )
        } else {
            e
        }
    })
}

fn check_route(
    id: &str,
    route: &RouteConfig,
    clusters: &BTreeMap<String, ClusterConfig>,
    errors: &mut ConfigErrors,
) {
    let path = format!("Routes.{id}");
    if id.trim().is_empty() {
        errors.push(&path, "a route id must not be empty");
    }
    match route.cluster_id.as_deref().map(str::trim) {
        None | Some("") => errors.push(format!("{path}.ClusterId"), "a route needs a ClusterId"),
        Some(cluster) if !clusters.contains_key(cluster) => tracing::warn!(
            route = id,
            cluster,
            "route refers to a cluster that does not exist; its requests will get 503"
        ),
        Some(_) => {}
    }
    if let Some(size) = route.max_request_body_size {
        if size < -1 {
            errors.push(
                format!("{path}.MaxRequestBodySize"),
                format!("must be -1 (unlimited) or a size in bytes, not {size}"),
            );
        }
    }
    positive(route.timeout, &format!("{path}.Timeout"), errors);
    if route.max_concurrent_requests == Some(0) {
        errors.push(
            format!("{path}.MaxConcurrentRequests"),
            "must be greater than 0",
        );
    }
    if let Some(rate) = &route.rate_limit {
        if !(rate.permits_per_second.is_finite() && rate.permits_per_second > 0.0) {
            errors.push(
                format!("{path}.RateLimit.PermitsPerSecond"),
                format!(
                    "must be a number greater than 0, not {}",
                    rate.permits_per_second
                ),
            );
        }
        if rate.burst == Some(0) {
            errors.push(format!("{path}.RateLimit.Burst"), "must be greater than 0");
        }
    }
    if route.timeout.is_some() && route.timeout_policy.is_some() {
        errors.push(
            format!("{path}.TimeoutPolicy"),
            "give either Timeout or TimeoutPolicy, not both",
        );
    }
    collect_transforms(&route.transforms, &format!("{path}.Transforms"), errors);
}

fn check_cluster(id: &str, cluster: &ClusterConfig, errors: &mut ConfigErrors) {
    let path = format!("Clusters.{id}");
    if id.trim().is_empty() {
        errors.push(&path, "a cluster id must not be empty");
    }
    // `LoadBalancingPolicy` names a built-in policy or a custom one registered in the
    // embedding program: checked when the state is built (`ClusterBalancing`).
    if let Some(affinity) = &cluster.session_affinity {
        check_affinity(affinity, &format!("{path}.SessionAffinity"), errors);
    }
    if let Some(health) = &cluster.health_check {
        check_health(health, &format!("{path}.HealthCheck"), errors);
    }
    if let Some(request) = &cluster.http_request {
        check_http_request(request, &format!("{path}.HttpRequest"), errors);
    }
    if let Some(client) = &cluster.http_client {
        check_http_client(client, &format!("{path}.HttpClient"), errors);
    }
    for (dest_id, dest) in &cluster.destinations {
        check_destination(dest_id, dest, &format!("{path}.Destinations"), errors);
    }
}

fn check_affinity(affinity: &SessionAffinityConfig, path: &str, errors: &mut ConfigErrors) {
    if affinity.enabled == Some(true)
        && affinity
            .affinity_key_name
            .as_deref()
            .is_none_or(|k| k.trim().is_empty())
    {
        errors.push(
            format!("{path}.AffinityKeyName"),
            "required when session affinity is enabled",
        );
    }
    name::<SessionAffinityPolicyName>(
        affinity.policy.as_deref(),
        &format!("{path}.Policy"),
        errors,
    );
    name::<AffinityFailurePolicyName>(
        affinity.failure_policy.as_deref(),
        &format!("{path}.FailurePolicy"),
        errors,
    );
    // `EncryptionKey` is checked where it is used: by session affinity, when a state
    // is built for an enabled cluster (as YARP checks only enabled affinity).
    if let Some(cookie) = &affinity.cookie {
        name::<CookieSecurePolicy>(
            cookie.secure_policy.as_deref(),
            &format!("{path}.Cookie.SecurePolicy"),
            errors,
        );
        name::<CookieSameSite>(
            cookie.same_site.as_deref(),
            &format!("{path}.Cookie.SameSite"),
            errors,
        );
    }
}

fn check_health(health: &HealthCheckConfig, path: &str, errors: &mut ConfigErrors) {
    if let Some(passive) = &health.passive {
        let path = format!("{path}.Passive");
        name::<PassiveHealthPolicyName>(
            passive.policy.as_deref(),
            &format!("{path}.Policy"),
            errors,
        );
        positive(
            passive.reactivation_period,
            &format!("{path}.ReactivationPeriod"),
            errors,
        );
    }
    if let Some(active) = &health.active {
        let path = format!("{path}.Active");
        name::<ActiveHealthPolicyName>(active.policy.as_deref(), &format!("{path}.Policy"), errors);
        positive(active.interval, &format!("{path}.Interval"), errors);
        positive(active.timeout, &format!("{path}.Timeout"), errors);
        if active.threshold == Some(0) {
            errors.push(format!("{path}.Threshold"), "must be greater than 0");
        }
        if let Some(probe) = &active.path {
            if !probe.starts_with('/') {
                errors.push(
                    format!("{path}.Path"),
                    format!("`{probe}` must start with `/`"),
                );
            }
        }
    }
    name::<AvailableDestinationsPolicyName>(
        health.available_destinations_policy.as_deref(),
        &format!("{path}.AvailableDestinationsPolicy"),
        errors,
    );
}

fn check_http_request(request: &HttpRequestConfig, path: &str, errors: &mut ConfigErrors) {
    name::<HttpVersion>(
        request.version.as_deref(),
        &format!("{path}.Version"),
        errors,
    );
    name::<HttpVersionPolicy>(
        request.version_policy.as_deref(),
        &format!("{path}.VersionPolicy"),
        errors,
    );
    positive(
        request.activity_timeout,
        &format!("{path}.ActivityTimeout"),
        errors,
    );
}

fn check_http_client(client: &HttpClientConfig, path: &str, errors: &mut ConfigErrors) {
    if client.max_connections_per_server == Some(0) {
        errors.push(
            format!("{path}.MaxConnectionsPerServer"),
            "must be greater than 0",
        );
    }
    if let Some(protocols) = &client.ssl_protocols {
        if let Err(message) = TlsVersions::from_names(protocols) {
            errors.push(format!("{path}.SslProtocols"), message);
        }
    }
    if let Some(proxy) = &client.web_proxy {
        if let Some(address) = &proxy.address {
            if let Err(message) = crate::state::WebProxy::authority_of(address) {
                errors.push(format!("{path}.WebProxy.Address"), message);
            }
        }
        if proxy.use_default_credentials == Some(true) {
            errors.push(
                format!("{path}.WebProxy.UseDefaultCredentials"),
                "`true` is not supported: fuseway sends no credentials to a proxy",
            );
        }
    }
    for (key, encoding) in [
        ("RequestHeaderEncoding", &client.request_header_encoding),
        ("ResponseHeaderEncoding", &client.response_header_encoding),
    ] {
        if let Some(encoding) = encoding {
            if !byte_preserving_encoding(encoding) {
                errors.push(
                    format!("{path}.{key}"),
                    format!(
                        "`{encoding}` is not supported: fuseway passes header bytes through \
                         unchanged, which is what `utf-8` or `latin1` (on both sides) does in \
                         YARP; those two are accepted"
                    ),
                );
            }
        }
    }
}

/// Header encodings under which YARP, configured alike on both sides, forwards a
/// header's bytes unchanged, as fuseway always does.
fn byte_preserving_encoding(name: &str) -> bool {
    ["utf-8", "utf8", "latin1", "iso-8859-1", "iso8859-1"]
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name.trim()))
}

fn check_destination(id: &str, dest: &DestinationConfig, path: &str, errors: &mut ConfigErrors) {
    let path = format!("{path}.{id}");
    if id.trim().is_empty() {
        errors.push(&path, "a destination id must not be empty");
    }
    if let Err(message) = base_address(&dest.address) {
        errors.push(format!("{path}.Address"), message);
    }
    if let Some(health) = &dest.health {
        if let Err(message) = base_address(health) {
            errors.push(format!("{path}.Health"), message);
        }
    }
    if let Some(host) = &dest.host {
        if let Err(message) = host_header(host) {
            errors.push(format!("{path}.Host"), message);
        }
    }
    if let Some(weight) = dest.weight {
        if !(1..=MAX_WEIGHT).contains(&weight) {
            errors.push(
                format!("{path}.Weight"),
                format!("must be between 1 and {MAX_WEIGHT}, not {weight}"),
            );
        }
    }
}

/// A destination's base address: absolute `http`/`https` with a host, no query or fragment.
fn base_address(address: &str) -> Result<(), String> {
    if address.trim().is_empty() {
        return Err("an address is required".into());
    }
    let uri =
        Uri::from_str(address).map_err(|e| format!("`{address}` is not a valid URI ({e})"))?;
    let scheme_ok = uri
        .scheme()
        .is_some_and(|s| *s == Scheme::HTTP || *s == Scheme::HTTPS);
    if !scheme_ok {
        return Err(format!(
            "`{address}` must be an absolute `http://` or `https://` URI"
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("`{address}` has no host"));
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(format!("`{address}` must not contain user information"));
    }
    if uri.query().is_some() || address.contains('#') {
        return Err(format!("`{address}` must not have a query or fragment"));
    }
    Ok(())
}

/// A `Host` header override: `host` or `host:port`.
fn host_header(host: &str) -> Result<(), String> {
    let invalid = || format!("`{host}` is not a valid `host[:port]` for the Host header");
    if host.contains('@') || http::HeaderValue::from_str(host).is_err() {
        return Err(invalid());
    }
    match Authority::from_str(host) {
        // `Authority` accepts any port text; insist on a number.
        Ok(a) if !a.host().is_empty() && (a.as_str() == a.host() || a.port_u16().is_some()) => {
            Ok(())
        }
        _ => Err(invalid()),
    }
}

/// Checks an optional name against the accepted ones.
fn name<T: FromStr<Err = String>>(value: Option<&str>, path: &str, errors: &mut ConfigErrors) {
    if let Some(Err(message)) = value.map(str::parse::<T>) {
        errors.push(path, message);
    }
}

/// The largest destination `Weight`.
pub const MAX_WEIGHT: u32 = 10_000;

/// Checks that an optional duration is greater than zero.
fn positive(value: Option<ConfigDuration>, path: &str, errors: &mut ConfigErrors) {
    if value.is_some_and(|d| d.get().is_zero()) {
        errors.push(path, "must be greater than 0");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_addresses() {
        for ok in [
            "http://127.0.0.1:5000",
            "https://example.com/prefix/",
            "http://[::1]:8080",
        ] {
            assert_eq!(base_address(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "required"),
            ("   ", "required"),
            ("127.0.0.1:5000", "absolute"),
            ("ftp://example.com", "absolute"),
            ("/relative", "absolute"),
            ("http://example.com/?a=b", "query"),
            ("http://example.com/#top", "fragment"),
            ("http://user:pw@example.com", "user information"),
            ("http://exa mple.com", "valid URI"),
        ] {
            let err = base_address(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn host_headers() {
        assert_eq!(host_header("example.com"), Ok(()));
        assert_eq!(host_header("example.com:8443"), Ok(()));
        assert_eq!(host_header("[::1]:80"), Ok(()));
        for bad in ["", "a b", "user@host", "host/path", "host:port"] {
            assert!(host_header(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn empty_config_is_valid() {
        assert_eq!(ProxyConfig::default().validate(), Ok(()));
    }

    #[test]
    fn missing_cluster_is_only_a_warning() {
        let mut config = ProxyConfig::default();
        config.routes.insert(
            "r1".into(),
            RouteConfig {
                cluster_id: Some("nowhere".into()),
                match_: crate::config::RouteMatch {
                    path: Some("/{**rest}".into()),
                    ..Default::default()
                },
                ..RouteConfig::default()
            },
        );
        assert_eq!(config.validate(), Ok(()));
    }
}
