//! Loading a configuration from JSON or TOML text.
//!
//! Files are read the way .NET reads YARP's `appsettings.json`, so that a YARP user's
//! file works unchanged:
//!
//! * Two shapes: YARP's `appsettings.json`, where the proxy object is under
//!   `ReverseProxy` and other top-level keys are ignored, but for a top-level `Listen`
//!   and `Kestrel.Endpoints.*.Url` (else `Urls`) read as listeners, `Kestrel.Limits` as
//!   the server's limits, `AllowedHosts` as the host filter and `Logging`'s log levels;
//!   or the bare proxy object (`Listen`, `Routes`, `Clusters`, `Limits`, `AllowedHosts`,
//!   `Logging`).
//! * JSON may have `//` and `/* */` comments and trailing commas (as .NET's reader
//!   allows; `#` line comments are skipped too).
//! * Keys match ignoring case and scalars convert from strings, as .NET's binder does
//!   (see `binder.rs`): `"clusterId"`, `"Order": "5"`, `"Enabled": "True"`.
//! * Unknown keys inside the proxy object are errors, so a typo never silently
//!   disables a setting.
//! * [`parse_with_overrides`] applies .NET-style environment overrides
//!   (`ReverseProxy__Clusters__c1__Destinations__d1__Address=...`) on top of the file,
//!   and ASP.NET's host variables (`ASPNETCORE_Kestrel__Certificates__Default__Path`)
//!   under it.
//! * `appsettings.json` has `appsettings.{Environment}.json` beside it layered on top
//!   when that file exists ([`environment_file`], [`parse_layered`]), as ASP.NET's host
//!   reads them: `ASPNETCORE_ENVIRONMENT`, else `DOTNET_ENVIRONMENT`, else `Production`
//!   (through [`env_overrides`]).
//!
//! Error paths are relative to the proxy object in both shapes (`Routes.r1.Match.Path`)
//! and name keys as the file wrote them.
//!
//! ```
//! use fuseway::config::{parse, Format};
//! let config = parse(
//!     r#"{
//!       // YARP's sample, as it is
//!       "Logging": { "LogLevel": { "Default": "Information" } },
//!       "reverseProxy": { "clusters": { "c1": {}, }, },
//!     }"#,
//!     Format::Json,
//! )
//! .unwrap();
//! assert!(config.clusters.contains_key("c1"));
//!
//! let err = parse("[Routes.r1]\nClusterIdd = \"c1\"\n", Format::Toml).unwrap_err();
//! assert_eq!(err.iter().next().unwrap().path, "Routes.r1");
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use serde_path_to_error::Segment;

use super::binder::Binder;
use super::{
    ConfigError, ConfigErrors, ListenConfig, ListenEntry, ListenProtocols, LoggingConfig,
    ProxyConfig, ServerLimits, SniEntry,
};

/// The top-level key of the proxy object in YARP's `appsettings.json`.
const WRAPPER: &str = "ReverseProxy";

/// The top-level keys of an ASP.NET configuration fuseway reads, which environment
/// variables may set (`ReverseProxy__...`, `Kestrel__Limits__MaxRequestBodySize`,
/// `Logging__LogLevel__Default`, `AllowedHosts`): the proxy's section, Kestrel's,
/// fuseway's `Listen`, and ASP.NET's `Logging`, `AllowedHosts` and `Urls`.
const OVERRIDABLE: [&str; 6] = [
    WRAPPER,
    "Kestrel",
    "Listen",
    "Logging",
    "AllowedHosts",
    "Urls",
];

/// The keys the bare shape's object has that a YARP file has at its top: with a bare
/// object, a variable naming one sets the object's.
const INSIDE_TOO: [&str; 3] = ["Listen", "Logging", "AllowedHosts"];

/// The prefixes of ASP.NET's host configuration variables, the first over the second.
/// Their keys lie under the configuration's files, as `WebApplicationBuilder` (.NET 7
/// on) reads them: a file's key wins over `ASPNETCORE_Kestrel__...`.
const HOST_PREFIXES: [&str; 2] = ["DOTNET_", "ASPNETCORE_"];

/// Whether the first `__`-separated section of `key` is one of `names` (any case).
fn first_section_in(key: &str, names: &[&str]) -> bool {
    let first = key.split("__").next().unwrap_or(key);
    names.iter().any(|name| name.eq_ignore_ascii_case(first))
}

/// A host configuration variable's prefix (its rank in [`HOST_PREFIXES`]) and key: the
/// prefix matched ignoring case, as .NET matches it. `None` for any other name.
fn host_variable(name: &str) -> Option<(usize, &str)> {
    HOST_PREFIXES.iter().enumerate().find_map(|(rank, prefix)| {
        name.get(..prefix.len())
            .filter(|p| p.eq_ignore_ascii_case(prefix))
            .map(|_| (rank, &name[prefix.len()..]))
    })
}

/// The syntax of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, as YARP's `appsettings.json` (comments and trailing commas allowed).
    Json,
    /// TOML with the same keys.
    Toml,
}

impl Format {
    /// The format a file name's extension (`.json`, `.toml`, any case) stands for.
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?;
        if ext.eq_ignore_ascii_case("json") {
            Some(Format::Json)
        } else if ext.eq_ignore_ascii_case("toml") {
            Some(Format::Toml)
        } else {
            None
        }
    }
}

/// YARP's `appsettings.json` shape; keys other than these are ignored.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Document {
    /// Absent in an ASP.NET file that has no proxy section yet (no routes).
    #[serde(default)]
    reverse_proxy: ProxyConfig,
    #[serde(default)]
    listen: Vec<ListenConfig>,
    #[serde(default)]
    allowed_hosts: Option<String>,
    /// ASP.NET's `Urls`: listeners when `Kestrel.Endpoints` names none.
    #[serde(default)]
    urls: Option<String>,
    #[serde(default)]
    kestrel: Kestrel,
    /// ASP.NET's `Logging`: its log levels.
    #[serde(default)]
    logging: Option<LoggingConfig>,
    /// The host's environment (`ASPNETCORE_ENVIRONMENT`, else `DOTNET_ENVIRONMENT`, as
    /// [`env_overrides`] sets it): `Development` gives `https` endpoints that name no
    /// certificate the development certificate, as Kestrel.
    #[serde(default)]
    environment: Option<String>,
}

/// The parts of ASP.NET's `Kestrel` section fuseway reads: its endpoints (with their
/// defaults' `Protocols` and the default certificate) and its limits. Kestrel's other
/// settings are not read.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct Kestrel {
    #[serde(default)]
    endpoints: BTreeMap<String, KestrelEndpoint>,
    #[serde(default)]
    limits: ServerLimits,
    #[serde(default)]
    endpoint_defaults: KestrelEndpointDefaults,
    #[serde(default)]
    certificates: KestrelCertificates,
}

/// `Kestrel.Certificates`: its `Default`, the certificate of `https` endpoints that name
/// none.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct KestrelCertificates {
    #[serde(default)]
    default: Option<KestrelCertificate>,
}

/// `Kestrel.EndpointDefaults`: what its endpoints have unless they say otherwise (its
/// `Protocols`; `SslProtocols` and `ClientCertificateMode` for `https` ones; the rest
/// configures ASP.NET).
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct KestrelEndpointDefaults {
    #[serde(default)]
    protocols: Option<String>,
    #[serde(default, deserialize_with = "super::model::protocol_names")]
    ssl_protocols: Option<Vec<String>>,
    #[serde(default)]
    client_certificate_mode: Option<String>,
}

/// `Kestrel.Endpoints.<name>`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct KestrelEndpoint {
    url: String,
    #[serde(default)]
    protocols: Option<String>,
    #[serde(default)]
    certificate: Option<KestrelCertificate>,
    #[serde(default, deserialize_with = "super::model::protocol_names")]
    ssl_protocols: Option<Vec<String>>,
    #[serde(default)]
    client_certificate_mode: Option<String>,
    #[serde(default)]
    sni: BTreeMap<String, KestrelSni>,
}

/// `Kestrel.Endpoints.<name>.Sni.<host name>`: an `https` endpoint's settings for the
/// host names a client asks for.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct KestrelSni {
    #[serde(default)]
    protocols: Option<String>,
    #[serde(default, deserialize_with = "super::model::protocol_names")]
    ssl_protocols: Option<Vec<String>>,
    #[serde(default)]
    certificate: Option<KestrelCertificate>,
    #[serde(default)]
    client_certificate_mode: Option<String>,
}

/// `Kestrel.Endpoints.<name>.Certificate` (or `Kestrel.Certificates.Default`): PEM files
/// (`Path` and `KeyPath`, with `Password` when the key is encrypted), or a PKCS#12
/// archive (`Path` alone, with its `Password`).
#[derive(Deserialize, Clone)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct KestrelCertificate {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    key_path: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// A certificate store's (`Subject`, `Store`, `Location`, `AllowInvalid`): a
    /// `Subject` is refused, named; the others, beside a file, are ignored as Kestrel
    /// ignores them.
    #[serde(default)]
    subject: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    #[expect(dead_code, reason = "accepted, and ignored beside a file")]
    store: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    #[expect(dead_code, reason = "accepted, and ignored beside a file")]
    location: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    #[expect(dead_code, reason = "accepted, and ignored beside a file")]
    allow_invalid: Option<serde::de::IgnoredAny>,
}

impl Document {
    /// The proxy object, with the top-level listeners first, then Kestrel's endpoints.
    fn into_config(mut self) -> Result<ProxyConfig, ConfigError> {
        let development = self
            .environment
            .as_deref()
            .is_some_and(|e| e.trim().eq_ignore_ascii_case("Development"));
        let mut config = self.reverse_proxy;
        let mut listen = self.listen;
        let endpoints = std::mem::take(&mut self.kestrel.endpoints);
        let urls = self.urls.take().unwrap_or_default();
        if endpoints.is_empty() {
            // As ASP.NET: `Urls` binds when Kestrel's own endpoints name none.
            for (i, url) in urls
                .split(';')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .enumerate()
            {
                let endpoint = KestrelEndpoint {
                    url: url.to_string(),
                    ..KestrelEndpoint::default()
                };
                let path = format!("Urls[{i}]");
                listen.push(endpoint.listener(&path, &self.kestrel, development)?);
            }
        }
        for (name, endpoint) in endpoints {
            let path = format!("Kestrel.Endpoints.{name}");
            listen.push(endpoint.listener(&path, &self.kestrel, development)?);
        }
        if !listen.is_empty() {
            let inner = std::mem::replace(&mut config.listen, listen);
            config.listen.extend(inner);
        }
        if let Some(hosts) = self.allowed_hosts {
            once(
                "AllowedHosts",
                "the allowed hosts",
                config.allowed_hosts.is_some(),
            )?;
            config.allowed_hosts = Some(hosts);
        }
        if !self.kestrel.limits.is_empty() {
            let mut errors = ConfigErrors::default();
            super::validate::check_limits(&self.kestrel.limits, "Kestrel.Limits", &mut errors);
            if let Some(error) = errors.iter().next() {
                return Err(error.clone());
            }
            once("Kestrel.Limits", "the limits", !config.limits.is_empty())?;
            config.limits = self.kestrel.limits;
        }
        if let Some(logging) = self.logging.filter(|l| !l.is_empty()) {
            once("Logging", "the log levels", !config.logging.is_empty())?;
            config.logging = logging;
        }
        Ok(config)
    }
}

/// A setting a YARP file gives at `key`, beside `ReverseProxy`, where the proxy object
/// may set it too (`inside`): an error unless it is set in one place.
fn once(key: &str, what: &str, inside: bool) -> Result<(), ConfigError> {
    if !inside {
        return Ok(());
    }
    let name = key.rsplit('.').next().unwrap_or(key);
    Err(ConfigError::new(
        key,
        format!("{what} are set in `ReverseProxy.{name}` too: set them in one place"),
    ))
}

impl KestrelEndpoint {
    /// The listener a Kestrel endpoint URL stands for: `http://localhost:5000` binds
    /// `127.0.0.1:5000`; `*`, `+`, `0.0.0.0` and host names bind every IPv4 address
    /// (`0.0.0.0`); an IP binds itself. The port defaults to 80 (443 for `https`). In
    /// the `Development` environment (`development`) an `https` endpoint naming no
    /// certificate gets the development certificate.
    fn listener(
        self,
        path: &str,
        kestrel: &Kestrel,
        development: bool,
    ) -> Result<ListenConfig, ConfigError> {
        let url = self.url.trim();
        let bad = |why: &str| ConfigError::new(format!("{path}.Url"), format!("`{url}`: {why}"));
        let (https, rest) = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
            _ => return Err(bad("expected an `http://` or `https://` URL")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('/') {
            return Err(bad("a path base is not supported (Kestrel refuses it too)"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => {
                let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
                (host, port)
            }
            _ => (authority, if https { 443 } else { 80 }),
        };
        let ip = match host.trim_start_matches('[').trim_end_matches(']') {
            h if h.eq_ignore_ascii_case("localhost") => "127.0.0.1".to_string(),
            h => match h.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
                Ok(ip) => ip.to_string(),
                // `*`, `+` and names: every address, as Kestrel binds them.
                Err(_) if !h.is_empty() => "0.0.0.0".to_string(),
                Err(_) => return Err(bad("the host is empty")),
            },
        };
        let protocols = match self
            .protocols
            .or_else(|| kestrel.endpoint_defaults.protocols.clone())
        {
            // The default is left unsaid.
            Some(protocols) => Some(kestrel_protocols(&protocols, path)?)
                .filter(|p| *p != ListenProtocols::default().as_str()),
            None => None,
        };
        let address = format!("{ip}:{port}");
        if !https {
            // As Kestrel: HTTPS-only settings on an `http` endpoint are an error.
            for (key, set) in [
                ("Certificate", self.certificate.is_some()),
                ("SslProtocols", self.ssl_protocols.is_some()),
                (
                    "ClientCertificateMode",
                    self.client_certificate_mode.is_some(),
                ),
                ("Sni", !self.sni.is_empty()),
            ] {
                if set {
                    return Err(ConfigError::new(
                        format!("{path}.{key}"),
                        "HTTPS-only, on an `http` endpoint: use an `https://` URL",
                    ));
                }
            }
            return Ok(match protocols {
                None => ListenConfig::Address(address),
                protocols => ListenConfig::Full(ListenEntry {
                    address,
                    protocols,
                    ..ListenEntry::default()
                }),
            });
        }
        let defaults = &kestrel.endpoint_defaults;
        let mut entry = ListenEntry {
            address,
            protocols,
            ssl_protocols: self
                .ssl_protocols
                .or_else(|| defaults.ssl_protocols.clone()),
            client_certificate_mode: self
                .client_certificate_mode
                .or_else(|| defaults.client_certificate_mode.clone()),
            ..ListenEntry::default()
        };
        let certificate = self
            .certificate
            .or_else(|| kestrel.certificates.default.clone());
        match certificate {
            Some(certificate) => {
                let (file, key, password) = certificate.files(&format!("{path}.Certificate"))?;
                entry.certificate = Some(file);
                entry.key = key;
                entry.password = password;
            }
            // With `Sni`, entries may each name their own.
            None if !self.sni.is_empty() => {}
            // Where Kestrel serves its development certificate.
            None if development => entry.development_certificate = Some(true),
            None => {
                return Err(ConfigError::new(
                    format!("{path}.Certificate"),
                    "an `https` endpoint needs a certificate, its own or \
                     `Kestrel.Certificates.Default`: `Path` and `KeyPath` (PEM files) or \
                     `Path` and `Password` (a PFX file); in the `Development` environment \
                     (`ASPNETCORE_ENVIRONMENT=Development`) fuseway makes a development \
                     certificate of its own, as Kestrel serves .NET's",
                ))
            }
        }
        for (name, sni) in self.sni {
            let at = format!("{path}.Sni.{name}");
            let mut site = SniEntry {
                protocols: sni
                    .protocols
                    .map(|protocols| kestrel_protocols(&protocols, &at))
                    .transpose()?,
                ssl_protocols: sni.ssl_protocols,
                client_certificate_mode: sni.client_certificate_mode,
                ..SniEntry::default()
            };
            if let Some(certificate) = sni.certificate {
                let (file, key, password) = certificate.files(&format!("{at}.Certificate"))?;
                site.certificate = Some(file);
                site.key = key;
                site.password = password;
            }
            entry.sni.insert(name, site);
        }
        Ok(ListenConfig::Full(entry))
    }
}

/// Kestrel's `Protocols` at `at` (an endpoint's or an `Sni` entry's), in fuseway's
/// spelling; errors name Kestrel's key.
fn kestrel_protocols(protocols: &str, at: &str) -> Result<String, ConfigError> {
    super::validate::check_protocols(protocols)
        .map(|parsed| parsed.as_str().to_string())
        .map_err(|e| ConfigError::new(format!("{at}.Protocols"), e))
}

impl KestrelCertificate {
    /// The files it names: (`Path`, `KeyPath`, `Password`); a certificate store's (a
    /// `Subject`) is refused, at `at`.
    fn files(self, at: &str) -> Result<(String, Option<String>, Option<String>), ConfigError> {
        let KestrelCertificate {
            path: file,
            key_path,
            password,
            subject,
            ..
        } = self;
        // As Kestrel: `Store`, `Location` and `AllowInvalid` only qualify a `Subject`.
        if subject.is_some() {
            return Err(ConfigError::new(
                at,
                "a certificate from a certificate store (`Subject`, `Store`, `Location`) is \
                 not supported: give its files (`Path` and `KeyPath`, or a PFX `Path` and \
                 `Password`)",
            ));
        }
        let Some(file) = file else {
            return Err(ConfigError::new(at, "`Path` is missing"));
        };
        Ok((file, key_path, password))
    }
}

/// Parse and validate a configuration, in either accepted shape.
///
/// Syntax errors give the line and column; other errors name the path of the bad field.
pub fn parse(text: &str, format: Format) -> Result<ProxyConfig, ConfigErrors> {
    parse_with_overrides(text, format, &[])
}

/// [`parse`], with .NET-style overrides applied on top of the text before it is read:
/// each `(name, value)` sets the key its `__`-separated name gives, matched ignoring
/// case (`ReverseProxy__Routes__r1__Match__Path`, `Kestrel__Endpoints__Http__Url`,
/// `ReverseProxy__Routes__r1__Match__Hosts__0` for a list's first item), creating
/// sections that do not exist. A name prefixed `DOTNET_` or `ASPNETCORE_` (ASP.NET's
/// host variables: `ASPNETCORE_Kestrel__Certificates__Default__Path`) lies under the
/// text instead: it sets its key only where neither the text nor an unprefixed name
/// does (`DOTNET_` over `ASPNETCORE_`), as `WebApplicationBuilder` reads them. With a
/// bare proxy object, `Listen__...`, `Logging__...` and `AllowedHosts` set the object's
/// own. [`env_overrides`] collects them from the environment, as containers set them.
///
/// ```
/// use fuseway::config::{parse_with_overrides, Format};
/// let overrides = [(
///     "ReverseProxy__Clusters__c1__Destinations__d1__Address".to_string(),
///     "http://127.0.0.1:5002/".to_string(),
/// )];
/// let config = parse_with_overrides(
///     r#"{"ReverseProxy": {"Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://127.0.0.1:5001/"}}}}}}"#,
///     Format::Json,
///     &overrides,
/// )
/// .unwrap();
/// assert_eq!(config.clusters["c1"].destinations["d1"].address, "http://127.0.0.1:5002/");
/// ```
pub fn parse_with_overrides(
    text: &str,
    format: Format,
    overrides: &[(String, String)],
) -> Result<ProxyConfig, ConfigErrors> {
    // Editors on Windows like to start appsettings.json with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let config = match format {
        Format::Json => parse_json(text, overrides)?,
        Format::Toml => parse_toml(text, overrides)?,
    };
    config.validate()?;
    Ok(config)
}

/// Read and validate the bare proxy object (`Listen`, `Routes`, `Clusters`) already
/// parsed as JSON, with the same rules as [`parse`] (keys ignoring case, scalars from
/// strings). Providers that assemble a configuration from pieces (one etcd key per route,
/// say) build the object and read it here; errors name the path inside it.
///
/// ```
/// use fuseway::config::parse_value;
/// let value = serde_json::json!({ "routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "/a" } } } });
/// let config = parse_value(value).unwrap();
/// assert_eq!(config.routes["r1"].cluster_id.as_deref(), Some("c1"));
/// let err = parse_value(serde_json::json!({ "Routes": { "r1": { "Order": "x" } } })).unwrap_err();
/// assert_eq!(err.iter().next().unwrap().path, "Routes.r1.Order");
/// ```
pub fn parse_value(value: Value) -> Result<ProxyConfig, ConfigErrors> {
    let config: ProxyConfig = typed(value, false, |e: serde_json::Error| e.to_string())?;
    config.validate()?;
    Ok(config)
}

/// [`parse_with_overrides`] of `text` with `layers` — JSON documents, each a (name,
/// text) — on top of it, in order, as .NET's configuration layers
/// `appsettings.{Environment}.json` over `appsettings.json`: a key a layer sets replaces
/// the one below it (matched ignoring case), objects merge key by key, and lists item by
/// item (a layer's first item over the first, and so on). Errors name the layer's file
/// for its syntax; a field's error names its path, without a line.
///
/// ```
/// use fuseway::config::{parse_layered, Format};
/// let base = r#"{"ReverseProxy": {"Clusters": {"c1": {"Destinations": {
///     "d1": {"Address": "http://127.0.0.1:5001/"}, "d2": {"Address": "http://127.0.0.1:5002/"}}}}}}"#;
/// let production = r#"{"ReverseProxy": {"clusters": {"c1": {"Destinations": {
///     "d2": {"Address": "http://10.0.0.2:5002/"}}}}}}"#;
/// let layers = [("appsettings.Production.json".to_string(), production.to_string())];
/// let config = parse_layered(base, Format::Json, &layers, &[]).unwrap();
/// let destinations = &config.clusters["c1"].destinations;
/// assert_eq!(destinations["d1"].address, "http://127.0.0.1:5001/");
/// assert_eq!(destinations["d2"].address, "http://10.0.0.2:5002/");
/// ```
pub fn parse_layered(
    text: &str,
    format: Format,
    layers: &[(String, String)],
    overrides: &[(String, String)],
) -> Result<ProxyConfig, ConfigErrors> {
    if layers.is_empty() {
        return parse_with_overrides(text, format, overrides);
    }
    let document = |text: &str, format| -> Result<Value, ConfigError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        match format {
            Format::Json => json_document(text).map(|(_, value)| value),
            Format::Toml => toml_value(&toml_document(text)?),
        }
    };
    let mut value = document(text, format)?;
    for (name, layer) in layers {
        let layer = document(layer, Format::Json)
            .map_err(|e| ConfigError::new("", format!("{name}: {}", e.message)))?;
        merge(&mut value, layer);
    }
    let config = from_value(value, overrides)?;
    config.validate()?;
    Ok(config)
}

/// Lay `over` on `base` as .NET's configuration layers sources: objects key by key
/// (ignoring case), lists item by item, anything else replaced.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (k, v) in over {
                match base
                    .iter_mut()
                    .find(|(key, _)| key.eq_ignore_ascii_case(&k))
                {
                    Some((_, existing)) => merge(existing, v),
                    None => {
                        base.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(over)) => {
            for (i, v) in over.into_iter().enumerate() {
                match base.get_mut(i) {
                    Some(existing) => merge(existing, v),
                    None => base.push(v),
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// The file ASP.NET's host layers over the configuration file `path`: for an
/// `appsettings.json`, `appsettings.{Environment}.json` beside it, whether or not it
/// exists yet; the environment is the `Environment` of `overrides` ([`env_overrides`]
/// sets it from `ASPNETCORE_ENVIRONMENT`, else `DOTNET_ENVIRONMENT`), else
/// `Production`. `None` for other files.
pub fn environment_file(path: &Path, overrides: &[(String, String)]) -> Option<PathBuf> {
    let environment = overrides
        .iter()
        .rfind(|(name, _)| name.eq_ignore_ascii_case("Environment"))
        .map_or("Production", |(_, value)| value.trim());
    environment_file_for(path, environment)
}

fn environment_file_for(path: &Path, environment: &str) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    name.eq_ignore_ascii_case("appsettings.json")
        .then(|| path.with_file_name(format!("appsettings.{environment}.json")))
}

/// Read, parse and validate a configuration file; the format follows the extension
/// (`.json` or `.toml`). An `appsettings.json` has its environment's file layered on
/// top when there is one ([`environment_file`]).
pub fn load_file(path: &Path) -> Result<ProxyConfig, ConfigErrors> {
    load_file_with_overrides(path, &[])
}

/// [`load_file`] with overrides, as [`parse_with_overrides`].
pub fn load_file_with_overrides(
    path: &Path,
    overrides: &[(String, String)],
) -> Result<ProxyConfig, ConfigErrors> {
    let format = Format::from_path(path).ok_or_else(|| {
        ConfigError::new(
            "",
            format!(
                "{}: unsupported configuration file type; expected a `.json` or `.toml` file",
                path.display()
            ),
        )
    })?;
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("", format!("cannot read {}: {e}", path.display())))
    };
    let text = read(path)?;
    let layers = match environment_file(path, overrides).filter(|layer| layer.is_file()) {
        Some(layer) => vec![(layer.display().to_string(), read(&layer)?)],
        None => Vec::new(),
    };
    parse_layered(&text, format, &layers, overrides)
}

/// The environment variables that override configuration keys, .NET style, in name
/// order: those whose name is `ReverseProxy__...`, `Kestrel__...`, `Listen__...`,
/// `Logging__...`, `AllowedHosts` or `Urls` (any case), and the same prefixed `DOTNET_`
/// or `ASPNETCORE_` (ASP.NET's host variables, which [`parse_with_overrides`] lays under
/// the file); where no `DOTNET_URLS` or `ASPNETCORE_URLS` is set, ASP.NET 8's
/// `HTTP_PORTS` and `HTTPS_PORTS` (either prefix; `8080;8081`: every address), as
/// `ASPNETCORE_URLS` (listeners when `Kestrel.Endpoints` names none), as a YARP
/// container has them; and the host's environment, `ASPNETCORE_ENVIRONMENT` else
/// `DOTNET_ENVIRONMENT`, as `Environment` (its `appsettings.{Environment}.json`, and in
/// `Development` the development certificate).
pub fn env_overrides() -> Vec<(String, String)> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    overrides_of(&env)
}

/// [`env_overrides`] of the variables `env`.
fn overrides_of(env: &[(String, String)]) -> Vec<(String, String)> {
    let read = |name: &str| {
        let key = host_variable(name).map_or(name, |(_, key)| key);
        first_section_in(key, &OVERRIDABLE)
    };
    let mut vars: Vec<(String, String)> = env.iter().filter(|(k, _)| read(k)).cloned().collect();
    vars.sort();
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    // ASP.NET 8's ports on every address, where no `URLS` is set among the host's
    // variables (`HTTP_PORTS` and `HTTPS_PORTS` together; `DOTNET_` over `ASPNETCORE_`).
    let urls_set = vars
        .iter()
        .any(|(k, _)| host_variable(k).is_some_and(|(_, key)| key.eq_ignore_ascii_case("Urls")));
    if !urls_set {
        let ports = |name: &str, scheme: &str| {
            HOST_PREFIXES
                .iter()
                .find_map(|prefix| var(&format!("{prefix}{name}")))
                .into_iter()
                .flat_map(|ports| ports.split(';'))
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|port| format!("{scheme}://*:{port}"))
                .collect::<Vec<_>>()
        };
        let mut urls = ports("HTTP_PORTS", "http");
        urls.extend(ports("HTTPS_PORTS", "https"));
        if !urls.is_empty() {
            vars.push(("ASPNETCORE_URLS".to_string(), urls.join(";")));
        }
    }
    // The host's environment, as ASP.NET's web host reads it.
    if let Some(environment) = var("ASPNETCORE_ENVIRONMENT").or_else(|| var("DOTNET_ENVIRONMENT")) {
        vars.push(("Environment".to_string(), environment.to_string()));
    }
    vars
}

/// JSON text as .NET reads it — comments and trailing commas become spaces, so lines
/// and columns stay as written — and the document it holds, which must be an object.
fn json_document(text: &str) -> Result<(String, Value), ConfigError> {
    let mut text = text.to_string();
    json_strip_comments::strip(&mut text)
        .map_err(|e| ConfigError::new("", format!("invalid JSON: {e}")))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| ConfigError::new("", format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ConfigError::new(
            "",
            "the configuration must be a JSON object",
        ));
    }
    Ok((text, value))
}

/// A TOML document's table.
fn toml_document(text: &str) -> Result<toml::Table, ConfigError> {
    text.parse().map_err(|e: toml::de::Error| {
        ConfigError::new("", format!("invalid TOML: {}", toml_message(text, &e)))
    })
}

/// A TOML table as the JSON value overrides and layers are applied to.
fn toml_value(table: &toml::Table) -> Result<Value, ConfigError> {
    serde_json::to_value(table).map_err(|e| ConfigError::new("", format!("invalid TOML: {e}")))
}

fn parse_json(text: &str, overrides: &[(String, String)]) -> Result<ProxyConfig, ConfigError> {
    // A first pass finds syntax errors and which shape the document has.
    let (text, value) = json_document(text)?;
    if !overrides.is_empty() {
        return from_value(value, overrides);
    }
    // The second pass reads the text again so that errors keep their line and column.
    let json = |e: serde_json::Error| e.to_string();
    if wrapped(value.as_object().into_iter().flat_map(|o| o.keys())) {
        let doc: Document = typed(&mut serde_json::Deserializer::from_str(&text), true, json)?;
        doc.into_config()
    } else {
        typed(&mut serde_json::Deserializer::from_str(&text), false, json)
    }
}

fn parse_toml(text: &str, overrides: &[(String, String)]) -> Result<ProxyConfig, ConfigError> {
    let table = toml_document(text)?;
    if !overrides.is_empty() {
        return from_value(toml_value(&table)?, overrides);
    }
    let wrapped = wrapped(table.keys());
    let message = |e: toml::de::Error| toml_message(text, &e);
    if wrapped {
        let doc: Document = typed(toml::Deserializer::new(text), true, message)?;
        doc.into_config()
    } else {
        typed(toml::Deserializer::new(text), false, message)
    }
}

/// A parsed document with overrides applied, read in the wrapped shape (a bare proxy
/// object is put under `ReverseProxy` first, so `ReverseProxy__...` reaches it).
fn from_value(
    mut value: Value,
    overrides: &[(String, String)],
) -> Result<ProxyConfig, ConfigError> {
    let bare = !wrapped(value.as_object().into_iter().flat_map(|o| o.keys()));
    if bare {
        value = Value::Object([(WRAPPER.to_string(), value)].into_iter().collect());
    }
    // The key a variable sets: a bare object's own `Listen`, `Logging`, `AllowedHosts`.
    fn key_in(bare: bool, key: &str) -> std::borrow::Cow<'_, str> {
        if bare && first_section_in(key, &INSIDE_TOO) {
            format!("{WRAPPER}__{key}").into()
        } else {
            key.into()
        }
    }
    let key = |key| key_in(bare, key);
    for (name, setting) in overrides {
        if host_variable(name).is_none() {
            apply_override(&mut value, name, &key(name), setting, false)?;
        }
    }
    // ASP.NET's host variables, under all of that: each sets what nothing above set,
    // the higher prefix first.
    let mut host: Vec<_> = overrides
        .iter()
        .filter_map(|(name, setting)| {
            host_variable(name).map(|(rank, host_key)| (rank, name, host_key, setting))
        })
        .collect();
    host.sort_by_key(|&(rank, ..)| rank);
    for (_, name, host_key, setting) in host {
        apply_override(&mut value, name, &key(host_key), setting, true)?;
    }
    let doc: Document = typed(value, true, |e: serde_json::Error| e.to_string())?;
    doc.into_config()
}

/// Whether a document with these top-level keys is an ASP.NET `appsettings.json`: it
/// has `ReverseProxy`, or keys only such a file has (`Kestrel`, `Urls`: an ASP.NET
/// file whose proxy section is still to come) and none only the bare shape has
/// (`Routes`, `Clusters`, `Limits`: a bare object with a stray key, refused as such).
fn wrapped<'a>(keys: impl Iterator<Item = &'a String>) -> bool {
    let is = |k: &str, names: &[&str]| names.iter().any(|n| k.eq_ignore_ascii_case(n));
    let (mut aspnet, mut bare) = (false, false);
    for k in keys {
        if is(k, &[WRAPPER]) {
            return true;
        }
        aspnet |= is(k, &["Kestrel", "Urls"]);
        bare |= is(k, &["Routes", "Clusters", "Limits"]);
    }
    aspnet && !bare
}

/// Set the key `key` (`A__B__0__C`) names to `setting` (from the variable `name`), as
/// .NET's environment provider does: sections are matched ignoring case and made when
/// missing; a list's items are numbered (an index one past the end appends). `under`:
/// only where the key has no value yet (a value where a section would be stays too).
fn apply_override(
    root: &mut Value,
    name: &str,
    key: &str,
    setting: &str,
    under: bool,
) -> Result<(), ConfigError> {
    let segments: Vec<&str> = key.split("__").collect();
    let bad = |why: String| ConfigError::new("", format!("environment variable {name}: {why}"));
    if segments.iter().any(|s| s.is_empty()) {
        return Err(bad("empty section name".into()));
    }
    let mut node = root;
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let fresh = || match segments.get(i + 1) {
            None => Value::String(setting.to_string()),
            Some(next) if next.parse::<usize>().is_ok() => Value::Array(Vec::new()),
            Some(_) => Value::Object(Default::default()),
        };
        node = match node {
            Value::Object(map) => {
                let existing = map
                    .keys()
                    .find(|k| k.eq_ignore_ascii_case(segment))
                    .cloned();
                let set = last && !(under && existing.is_some());
                let k = existing.unwrap_or_else(|| segment.to_string());
                let child = map.entry(k).or_insert_with(fresh);
                if set {
                    *child = Value::String(setting.to_string());
                }
                child
            }
            Value::Array(items) => {
                let index: usize = segment
                    .parse()
                    .map_err(|_| bad(format!("`{segment}` is not an index into a list")))?;
                let existing = index < items.len();
                if index == items.len() {
                    items.push(fresh());
                }
                let len = items.len();
                let child = items.get_mut(index).ok_or_else(|| {
                    bad(format!(
                        "index {index} is past the list's end ({len} items)"
                    ))
                })?;
                if last && !(under && existing) {
                    *child = Value::String(setting.to_string());
                }
                child
            }
            // What the file (or a variable over it) set stands.
            _ if under => return Ok(()),
            _ => {
                return Err(bad(format!(
                    "`{}` is a value, not a section",
                    segments[..i].join("__")
                )))
            }
        };
    }
    Ok(())
}

/// Deserialize `T` with the .NET binder's rules, turning an error into one that names
/// the field's dotted path (as written).
fn typed<'de, T, D>(
    de: D,
    wrapped: bool,
    message: impl FnOnce(D::Error) -> String,
) -> Result<T, ConfigError>
where
    T: DeserializeOwned,
    D: serde::Deserializer<'de>,
{
    let mut track = serde_path_to_error::Track::new();
    let result = T::deserialize(Binder(serde_path_to_error::Deserializer::new(
        de, &mut track,
    )));
    result.map_err(|e| {
        let path = track.path();
        let segments: Vec<&Segment> = path.iter().collect();
        let message = message(e);
        let path = dotted_path(&segments, wrapped, &message);
        ConfigError::new(path, with_suggestion(message))
    })
}

/// An "unknown field" message with the expected key the unknown one most likely meant,
/// where one is close: the same but for case, spaces and punctuation (YARP's own sample
/// writes `"Authorization Policy"`), or two edits away.
fn with_suggestion(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message;
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message;
    };
    let squeeze = |key: &str| -> String {
        key.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let wanted = squeeze(unknown);
    let keys = || expected.split('`').skip(1).step_by(2);
    // Keys YARP renamed, which its later versions ignore under the old name.
    let renamed = RENAMED.iter().find_map(|&(old, new, why)| {
        (old.eq_ignore_ascii_case(unknown) && keys().any(|k| k == new)).then_some((new, why))
    });
    let meant = renamed.or_else(|| {
        keys()
            .map(|key| (edits(&wanted, &squeeze(key)), key))
            .filter(|&(n, _)| n == 0 || (n <= 2 && wanted.len() > 4))
            .min_by_key(|&(n, _)| n)
            .map(|(_, key)| (key, ""))
    });
    match meant {
        Some((key, why)) => {
            let at = message.len() - expected.len();
            format!(
                "{} (did you mean `{key}`?{why}){}",
                &message[..at],
                &message[at..]
            )
        }
        None => message,
    }
}

/// YARP keys renamed since its first versions: (old name, new name, why it matters).
const RENAMED: [(&str, &str, &str); 1] = [(
    "Timeout",
    "ActivityTimeout",
    " `Timeout` is YARP 1.0's name, which YARP 1.1 and later ignore",
)];

/// Levenshtein distance between two short keys.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// `Routes.r1.Match.Hosts[0]`; drops the leading `ReverseProxy` of the wrapped shape,
/// and the unknown key itself from an "unknown field" error so that the path names the
/// object that does not have it.
fn dotted_path(mut segments: &[&Segment], wrapped: bool, message: &str) -> String {
    if let (true, [Segment::Map { key }, rest @ ..]) = (wrapped, segments) {
        if key.eq_ignore_ascii_case(WRAPPER) {
            segments = rest;
        }
    }
    if let [rest @ .., Segment::Map { key }] = segments {
        if message.starts_with(&format!("unknown field `{key}`")) {
            segments = rest;
        }
    }
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// A TOML error's message with `at line L column C` instead of a source excerpt.
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', ": ");
    match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("{message} at line {line} column {column}")
        }
        None => message,
    }
}

/// One-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_files_layer_as_dotnet_layers_sources() {
        let base = r#"{
          // The base file, as YARP's sample.
          "Logging": { "LogLevel": { "Default": "Information" } },
          "ReverseProxy": {
            "Routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "/a", "Hosts": ["a.example", "b.example"] } } },
            "Clusters": { "c1": { "Destinations": { "d1": { "Address": "http://127.0.0.1:1/" } } } },
          }
        }"#;
        let layer = |text: &str| [("appsettings.Production.json".to_string(), text.to_string())];
        // Keys by any case; lists item by item; what a layer does not name stays.
        let config = parse_layered(
            base,
            Format::Json,
            &layer(
                r#"{ "reverseproxy": { "routes": { "R1": { "Match": { "hosts": ["c.example"] } } },
                     "Clusters": { "c1": { "Destinations": { "d2": { "Address": "http://127.0.0.1:2/" } } } } },
                     "Logging": { "LogLevel": { "Yarp": "Debug" } } }"#,
            ),
            &[],
        )
        .unwrap();
        assert_eq!(config.routes["r1"].match_.path.as_deref(), Some("/a"));
        assert_eq!(
            config.routes["r1"].match_.hosts.as_deref(),
            Some(&["c.example".to_string(), "b.example".to_string()][..])
        );
        let destinations = &config.clusters["c1"].destinations;
        assert_eq!(destinations.len(), 2);
        assert_eq!(destinations["d1"].address, "http://127.0.0.1:1/");
        // Environment overrides go on top of both.
        let overrides = [(
            "ReverseProxy__Clusters__c1__Destinations__d2__Address".to_string(),
            "http://127.0.0.1:3/".to_string(),
        )];
        let layered = layer(
            r#"{ "ReverseProxy": { "Clusters": { "c1": { "Destinations": { "d2": { "Address": "http://127.0.0.1:2/" } } } } } }"#,
        );
        let config = parse_layered(base, Format::Json, &layered, &overrides).unwrap();
        assert_eq!(
            config.clusters["c1"].destinations["d2"].address,
            "http://127.0.0.1:3/"
        );
        // A layer's own errors name it; a field's name its path.
        let e = parse_layered(base, Format::Json, &layer("{ nope"), &[]).unwrap_err();
        let e = e.iter().next().unwrap();
        assert!(
            e.message
                .starts_with("appsettings.Production.json: invalid JSON"),
            "{e}"
        );
        let e = parse_layered(
            base,
            Format::Json,
            &layer(r#"{ "ReverseProxy": { "Routes": { "r1": { "Order": "first" } } } }"#),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.iter().next().unwrap().path, "Routes.r1.Order");
        // Which file: `appsettings.json` only.
        assert_eq!(
            environment_file_for(Path::new("/etc/yarp/AppSettings.json"), "Staging"),
            Some(PathBuf::from("/etc/yarp/appsettings.Staging.json"))
        );
        assert_eq!(
            environment_file_for(Path::new("proxy.json"), "Staging"),
            None
        );
    }

    #[test]
    fn an_aspnet_file_without_its_proxy_section_is_read_as_one() {
        // YARP's Direct sample: Kestrel's endpoints, no `ReverseProxy` yet.
        let config = parse(
            r#"{ "Logging": { "LogLevel": { "Default": "Information" } }, "AllowedHosts": "*",
                 "Kestrel": { "Endpoints": { "http": { "Url": "http://localhost:5000" } } } }"#,
            Format::Json,
        )
        .unwrap();
        assert!(config.routes.is_empty() && config.clusters.is_empty());
        assert_eq!(config.listen.len(), 1);
        let config = parse(r#"{ "Urls": "http://localhost:5001" }"#, Format::Json).unwrap();
        assert_eq!(config.listen.len(), 1);
        // Other keys still tell the bare shape, whose unknown keys are errors.
        let e = first_error(r#"{ "ControllerUrl": "x" }"#, Format::Json);
        assert!(
            e.message.starts_with("unknown field `ControllerUrl`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_name_the_key_they_likely_meant() {
        let e = first_error(
            r#"{"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c", "Authorization Policy": "Anonymous"}}}}"#,
            Format::Json,
        );
        assert_eq!(e.path, "Routes.r1");
        assert!(
            e.message.starts_with(
                "unknown field `Authorization Policy` (did you mean `AuthorizationPolicy`?), expected one of"
            ),
            "{e}"
        );
        let e = first_error(r#"{"Clusters": {"c": {"Destinatons": {}}}}"#, Format::Json);
        assert!(
            e.message
                .contains("`Destinatons` (did you mean `Destinations`?)"),
            "{e}"
        );
        // A key YARP renamed (its own Config sample still has the old one).
        let e = first_error(
            r#"{"Clusters": {"c": {"HttpRequest": {"Timeout": "00:02:00"}}}}"#,
            Format::Json,
        );
        assert!(
            e.message.contains(
                "`Timeout` (did you mean `ActivityTimeout`? `Timeout` is YARP 1.0's name"
            ),
            "{e}"
        );
        // Nothing close: no guess.
        let e = first_error(r#"{"Clusters": {"c": {"Backends": {}}}}"#, Format::Json);
        assert!(!e.message.contains("did you mean"), "{e}");
        assert_eq!(edits("kitten", "sitting"), 3);
    }

    fn first_error(text: &str, format: Format) -> ConfigError {
        match parse(text, format) {
            Ok(config) => panic!("expected an error, got {config:?}"),
            Err(errors) => errors.0.into_iter().next().expect("at least one error"),
        }
    }

    #[test]
    fn unknown_field_names_its_parent() {
        let e = first_error(
            r#"{"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c", "Match": {"Pathh": "/"}}}}}"#,
            Format::Json,
        );
        assert_eq!(e.path, "Routes.r1.Match");
        assert!(e.message.contains("unknown field `Pathh`"), "{e}");
        assert!(e.message.contains("line 1"), "{e}");
    }

    #[test]
    fn sequence_indexes_use_brackets() {
        let e = first_error(
            r#"{"Routes": {"r1": {"Match": {"Hosts": ["a", {}]}}}}"#,
            Format::Json,
        );
        assert_eq!(e.path, "Routes.r1.Match.Hosts[1]");
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        let e = first_error("{\n  \"Routes\": {\"r1\" 1},\n}", Format::Json);
        assert_eq!(e.path, "");
        assert!(e.message.contains("line 2 column"), "{e}");

        let e = first_error("[Routes.r1]\nClusterId = \n", Format::Toml);
        assert_eq!(e.path, "");
        assert!(e.message.contains("line 2 column"), "{e}");
        assert!(!e.message.contains('|'), "no source excerpt: {e}");
    }

    #[test]
    fn toml_type_errors_name_the_field_and_line() {
        let e = first_error(
            "[ReverseProxy.Routes.r1]\nClusterId = \"c\"\nOrder = \"first\"\n",
            Format::Toml,
        );
        assert_eq!(e.path, "Routes.r1.Order");
        assert!(e.message.contains("line 3"), "{e}");
    }

    #[test]
    fn top_level_listen_comes_first() {
        let config = parse(
            r#"{"Listen": ["127.0.0.1:1"], "ReverseProxy": {"Listen": ["127.0.0.1:2"]}}"#,
            Format::Json,
        )
        .unwrap();
        let addresses: Vec<&str> = config.listen.iter().map(|l| l.address()).collect();
        assert_eq!(addresses, ["127.0.0.1:1", "127.0.0.1:2"]);
    }

    /// `Kestrel.Limits` with .NET's binding (any case, numbers as strings, `null`), and
    /// `Limits` in the bare shape (TOML too); errors name the key where it was written.
    #[test]
    fn kestrel_limits_are_read_in_either_shape() {
        let config = parse(
            r#"{ "kestrel": { "limits": {
                "maxConcurrentConnections": "200",
                "MaxRequestBodySize": null,
                "MinResponseDataRate": null,
                "MinRequestBodyDataRate": { "bytesPerSecond": 100, "GracePeriod": "00:00:10" },
                "MaxRequestHeaderCount": "20",
                "Http3": { "MaxRequestHeaderFieldSize": 1 },
                "Http2": { "MaxStreamsPerConnection": 50, "InitialStreamWindowSize": "100000", "HeaderTableSize": 1 }
            } }, "ReverseProxy": {} }"#,
            Format::Json,
        )
        .unwrap();
        let limits = &config.limits;
        assert_eq!(limits.max_concurrent_connections, Some(200));
        assert_eq!(limits.max_request_body_size, Some(None));
        assert_eq!(limits.default_max_request_body_size(), None);
        assert_eq!(limits.min_response_data_rate, Some(None));
        let rate = limits.min_request_body_data_rate.unwrap().unwrap();
        assert_eq!(
            (rate.bytes_per_second, rate.grace_period.get().as_secs()),
            (100, 10)
        );
        assert_eq!(
            limits.http2.as_ref().unwrap().max_streams_per_connection,
            Some(50)
        );
        assert_eq!(
            limits.http2.as_ref().unwrap().initial_stream_window_size,
            Some(100_000)
        );
        assert_eq!(limits.max_request_header_count, Some(20));
        assert_eq!(limits.http2.as_ref().unwrap().header_table_size, Some(1));
        assert_eq!(limits.unapplied(), ["Http3"]);

        let config = parse(
            "[Limits]\nMaxRequestBodySize = 1000\nKeepAliveTimeout = \"5s\"\n",
            Format::Toml,
        )
        .unwrap();
        assert_eq!(config.limits.default_max_request_body_size(), Some(1000));
        assert!(parse("{}", Format::Json).unwrap().limits.is_empty());
        // Environment overrides reach them as they reach the endpoints.
        let overrides = [(
            "Kestrel__Limits__MaxRequestBodySize".to_string(),
            "77".to_string(),
        )];
        let config =
            parse_with_overrides(r#"{ "ReverseProxy": {} }"#, Format::Json, &overrides).unwrap();
        assert_eq!(config.limits.default_max_request_body_size(), Some(77));
        assert_eq!(
            parse("{}", Format::Json)
                .unwrap()
                .limits
                .default_max_request_body_size(),
            Some(crate::limits::DEFAULT_MAX_REQUEST_BODY_SIZE)
        );

        for (text, path) in [
            (
                r#"{ "Kestrel": { "Limits": { "KeepAliveTimeut": "00:01:00" } }, "ReverseProxy": {} }"#,
                "Kestrel.Limits",
            ),
            (
                r#"{ "Kestrel": { "Limits": { "KeepAliveTimeout": "00:00:00" } }, "ReverseProxy": {} }"#,
                "Kestrel.Limits.KeepAliveTimeout",
            ),
            (
                r#"{ "Kestrel": { "Limits": { "MinResponseDataRate": { "BytesPerSecond": 1, "GracePeriod": "00:00:01" } } }, "ReverseProxy": {} }"#,
                "Kestrel.Limits.MinResponseDataRate.GracePeriod",
            ),
            (
                r#"{ "Limits": { "MaxConcurrentConnections": 0 } }"#,
                "Limits.MaxConcurrentConnections",
            ),
            (
                r#"{ "Limits": { "Http2": { "InitialConnectionWindowSize": 1000 } } }"#,
                "Limits.Http2.InitialConnectionWindowSize",
            ),
            (
                r#"{ "Limits": { "Http2": { "MaxFrameSize": 16383 } } }"#,
                "Limits.Http2.MaxFrameSize",
            ),
            (
                r#"{ "Limits": { "Http2": { "MaxRequestHeaderFieldSize": 0 } } }"#,
                "Limits.Http2.MaxRequestHeaderFieldSize",
            ),
            (
                r#"{ "Limits": { "MaxRequestHeaderCount": 0 } }"#,
                "Limits.MaxRequestHeaderCount",
            ),
            (
                r#"{ "Kestrel": { "Limits": { "MaxRequestBodySize": 1 } }, "ReverseProxy": { "Limits": { "MaxRequestBodySize": 2 } } }"#,
                "Kestrel.Limits",
            ),
        ] {
            assert_eq!(first_error(text, Format::Json).path, path, "{text}");
        }
    }

    /// ASP.NET's `AllowedHosts` at the top of a YARP file (as its template has it), or in
    /// the bare shape; validated where it was written.
    #[test]
    fn allowed_hosts_are_read_in_either_shape() {
        let yarp = parse(
            r#"{ "AllowedHosts": "*", "ReverseProxy": {} }"#,
            Format::Json,
        )
        .unwrap();
        assert_eq!(yarp.allowed_hosts.as_deref(), Some("*"));
        let bare = parse("AllowedHosts = \"a.com;*.b.com\"\n", Format::Toml).unwrap();
        assert_eq!(bare.allowed_hosts.as_deref(), Some("a.com;*.b.com"));
        for text in [
            r#"{ "AllowedHosts": "a.com:80", "ReverseProxy": {} }"#,
            r#"{ "AllowedHosts": "a.com", "ReverseProxy": { "AllowedHosts": "b.com" } }"#,
        ] {
            assert_eq!(
                first_error(text, Format::Json).path,
                "AllowedHosts",
                "{text}"
            );
        }
    }

    /// Which of the configuration's listeners terminate TLS.
    fn tls(config: &ProxyConfig) -> Vec<bool> {
        config
            .listen
            .iter()
            .map(|l| matches!(l, ListenConfig::Full(e) if e.certificate.is_some()))
            .collect()
    }

    /// The environment as `overrides_of` reads it.
    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        overrides_of(&vars)
    }

    /// ASP.NET's `ASPNETCORE_URLS` (else `ASPNETCORE_HTTP_PORTS`) set the top-level
    /// `Urls` where the file sets none (a host variable, under the file); the listeners
    /// they name, unless Kestrel has endpoints.
    #[test]
    fn aspnetcore_urls_and_ports_become_urls() {
        let listen = |text: &str, overrides: &[(String, String)]| {
            parse_with_overrides(text, Format::Json, overrides)
                .unwrap()
                .listen
                .iter()
                .map(|l| l.address().to_string())
                .collect::<Vec<_>>()
        };
        let without_urls = r#"{ "ReverseProxy": {} }"#;
        let with_urls = r#"{ "Urls": "http://localhost:1", "ReverseProxy": {} }"#;
        assert_eq!(listen(with_urls, &env(&[])), ["127.0.0.1:1"]);
        let urls = env(&[
            ("ASPNETCORE_URLS", "http://127.0.0.1:5000;http://+:5001"),
            ("ASPNETCORE_HTTP_PORTS", "9"),
            ("Kestrel__Limits__MaxRequestBodySize", "5"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(urls.len(), 2, "{urls:?}");
        assert_eq!(
            listen(without_urls, &urls),
            ["127.0.0.1:5000", "0.0.0.0:5001"]
        );
        // The file's `Urls` wins, as in ASP.NET since .NET 7.
        assert_eq!(listen(with_urls, &urls), ["127.0.0.1:1"]);
        // An unprefixed `Urls` is over the file.
        let over = env(&[("URLS", "http://127.0.0.1:2")]);
        assert_eq!(listen(with_urls, &over), ["127.0.0.1:2"]);
        let ports = env(&[("ASPNETCORE_HTTP_PORTS", "8080; 8081")]);
        assert_eq!(
            listen(without_urls, &ports),
            ["0.0.0.0:8080", "0.0.0.0:8081"]
        );
        assert_eq!(listen(with_urls, &ports), ["127.0.0.1:1"]);
        // HTTPS ports too, with the default certificate (ASP.NET 8's
        // `ASPNETCORE_HTTPS_PORTS`), after the HTTP ones; `DOTNET_` over `ASPNETCORE_`.
        let ports = env(&[
            ("ASPNETCORE_HTTPS_PORTS", "8443"),
            ("ASPNETCORE_HTTP_PORTS", "8080"),
            ("DOTNET_HTTP_PORTS", "8000"),
        ]);
        assert_eq!(
            ports.last().unwrap(),
            &(
                "ASPNETCORE_URLS".to_string(),
                "http://*:8000;https://*:8443".to_string()
            )
        );
        let text = r#"{ "ReverseProxy": {}, "Kestrel": { "Certificates": { "Default": { "Path": "c.pem", "KeyPath": "k.pem" } } } }"#;
        let config = parse_with_overrides(text, Format::Json, &ports).unwrap();
        assert_eq!(tls(&config), [false, true]);
        // Without a certificate for it, the HTTPS port is refused, named.
        let e = parse_with_overrides("{}", Format::Json, &ports).unwrap_err();
        assert_eq!(e.iter().next().unwrap().path, "Urls[1].Certificate", "{e}");
    }

    /// ASP.NET's host variables (`DOTNET_`, `ASPNETCORE_`, any case) lie under the
    /// file, `DOTNET_` over `ASPNETCORE_`, as `WebApplicationBuilder` reads them; the
    /// unprefixed ones over it. Microsoft's guide to HTTPS in Docker gives the default
    /// certificate so; `Logging__LogLevel__Default` sets a level.
    #[test]
    fn host_variables_lie_under_the_file_and_plain_ones_over_it() {
        let text =
            r#"{ "ReverseProxy": {}, "Kestrel": { "Limits": { "MaxRequestBodySize": 100 } } }"#;
        let limits = |overrides: Vec<(String, String)>| {
            parse_with_overrides(text, Format::Json, &overrides)
                .unwrap()
                .limits
        };
        let limits_of = limits(env(&[
            ("ASPNETCORE_Kestrel__Limits__MaxRequestBodySize", "5"),
            ("aspnetcore_Kestrel__Limits__KeepAliveTimeout", "00:01:00"),
            ("DOTNET_KESTREL__LIMITS__KEEPALIVETIMEOUT", "00:02:00"),
        ]));
        assert_eq!(limits_of.max_request_body_size, Some(Some(100)));
        assert_eq!(
            limits_of.keep_alive_timeout.map(|d| d.get().as_secs()),
            Some(120)
        );
        let limits_of = limits(env(&[
            ("ASPNETCORE_Kestrel__Limits__MaxRequestBodySize", "5"),
            ("Kestrel__Limits__MaxRequestBodySize", "7"),
        ]));
        assert_eq!(limits_of.max_request_body_size, Some(Some(7)));

        let docker = env(&[
            ("ASPNETCORE_URLS", "https://+:443;http://+:80"),
            (
                "ASPNETCORE_Kestrel__Certificates__Default__Path",
                "/https/app.pem",
            ),
            (
                "ASPNETCORE_Kestrel__Certificates__Default__KeyPath",
                "/https/app.key",
            ),
        ]);
        let config =
            parse_with_overrides(r#"{ "ReverseProxy": {} }"#, Format::Json, &docker).unwrap();
        assert_eq!(tls(&config), [true, false]);

        let logging =
            r#"{ "Logging": { "LogLevel": { "Default": "Warning" } }, "ReverseProxy": {} }"#;
        for (vars, expected) in [
            (&[("Logging__LogLevel__Default", "Debug")][..], "debug"),
            (
                &[("ASPNETCORE_Logging__LogLevel__Default", "Debug")][..],
                "warn",
            ),
        ] {
            let config = parse_with_overrides(logging, Format::Json, &env(vars)).unwrap();
            assert_eq!(
                config.logging.directives().as_deref(),
                Some(expected),
                "{vars:?}"
            );
        }
        // A bare object's own `AllowedHosts`, `Logging` and `Listen` are what the
        // variables set.
        let bare = r#"{ "AllowedHosts": "a.example", "Listen": ["127.0.0.1:1"], "Routes": {} }"#;
        let config = parse_with_overrides(
            bare,
            Format::Json,
            &env(&[
                ("AllowedHosts", "b.example"),
                ("Logging__LogLevel__Default", "Error"),
                ("Listen__0", "127.0.0.1:2"),
            ]),
        )
        .unwrap();
        assert_eq!(config.allowed_hosts.as_deref(), Some("b.example"));
        assert_eq!(config.logging.directives().as_deref(), Some("error"));
        let addresses: Vec<&str> = config.listen.iter().map(|l| l.address()).collect();
        assert_eq!(addresses, ["127.0.0.1:2"]);
    }

    /// ASP.NET reads configuration keys from unprefixed environment variables too:
    /// `AllowedHosts` (any case) overrides the file's.
    #[test]
    fn allowed_hosts_from_the_environment() {
        let env = [("ALLOWEDHOSTS".to_string(), "example.com".to_string())];
        let config = parse_with_overrides(
            r#"{ "AllowedHosts": "*", "ReverseProxy": {} }"#,
            Format::Json,
            &overrides_of(&env),
        )
        .unwrap();
        assert_eq!(config.allowed_hosts.as_deref(), Some("example.com"));
    }

    #[test]
    fn document_must_be_an_object() {
        let e = first_error("[1, 2]", Format::Json);
        assert_eq!(e.path, "");
        assert!(e.message.contains("must be a JSON object"), "{e}");
    }

    #[test]
    fn listen_entries_say_what_they_expect() {
        let e = first_error(r#"{"Listen": ["127.0.0.1:1", 5]}"#, Format::Json);
        assert_eq!(e.path, "Listen[1]");
        assert!(
            e.message.contains("an `ip:port` string or an object"),
            "{e}"
        );
        let e = first_error(r#"{"Listen": [{"Adress": "x"}]}"#, Format::Json);
        assert_eq!(e.path, "Listen[0]");
        assert!(e.message.contains("unknown field `Adress`"), "{e}");
        let config = parse(r#"{"Listen": [{"Address": "[::1]:80"}]}"#, Format::Json).unwrap();
        assert_eq!(config.listen[0].address(), "[::1]:80");
    }

    #[test]
    fn byte_order_mark_is_skipped() {
        assert!(parse("\u{feff}{}", Format::Json).is_ok());
    }

    #[test]
    fn line_columns() {
        assert_eq!(line_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é\nx", 3), (2, 1));
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(Format::from_path(Path::new("a.JSON")), Some(Format::Json));
        assert_eq!(Format::from_path(Path::new("a/b.toml")), Some(Format::Toml));
        assert_eq!(Format::from_path(Path::new("a.yaml")), None);
        assert_eq!(Format::from_path(Path::new("json")), None);
    }
}
