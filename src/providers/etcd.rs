//! The etcd provider: routes, clusters and destinations as keys under a prefix, and
//! the fleet's `Logging` levels and `AllowedHosts`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::{ConfigProvider, ProviderSnapshot};
use crate::config::{self, ConfigError, ConfigErrors, ProxyConfig};

/// How an [`EtcdProvider`] connects: credentials, TLS, timeouts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EtcdOptions {
    /// User name and password (etcd's authentication).
    pub user: Option<(String, String)>,
    /// PEM file of the certificate authority that signs etcd's certificates: the
    /// endpoints are then reached over TLS.
    pub ca: Option<PathBuf>,
    /// PEM files of a client certificate and its key, for etcd's `--client-cert-auth`
    /// (with `ca`).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// How long a connection, the initial read and the start of the watch may take
    /// before the attempt counts as failed (and is retried). Default 5 s.
    pub timeout: Duration,
    /// The longest wait between two attempts to reach etcd; waits double from 100 ms up
    /// to it. Default 5 s.
    pub max_backoff: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            user: None,
            ca: None,
            identity: None,
            timeout: Duration::from_secs(5),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl EtcdOptions {
    /// Authenticate as `user` with `password`.
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Reach etcd over TLS, trusting the certificate authority in this PEM file.
    pub fn with_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.ca = Some(ca.into());
        self
    }

    /// Present this client certificate and key (PEM files) to etcd.
    pub fn with_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    fn connect_options(&self) -> Result<ConnectOptions, String> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_keep_alive(Duration::from_secs(5), self.timeout)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        if let Some(ca) = &self.ca {
            let read = |p: &PathBuf| {
                std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
            };
            let mut tls = etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
            if let Some((cert, key)) = &self.identity {
                tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
            }
            options = options.with_tls(tls);
        }
        Ok(options)
    }
}

/// Routes, clusters and destinations kept in etcd (v3), as a [`ConfigProvider`]: a
/// fleet of instances reads one configuration, teams change their routes
/// independently, and a backend can register itself under a lease and vanish when it
/// dies.
///
/// The source is `etcd://HOST:PORT[,HOST:PORT...]/PREFIX` (port 2379 by default); under
/// the prefix, as written:
///
/// | key | value |
/// |---|---|
/// | `PREFIX/Routes/<routeId>` | one route, YARP's route object |
/// | `PREFIX/Clusters/<clusterId>` | one cluster; its `Destinations` may be left out |
/// | `PREFIX/Clusters/<clusterId>/Destinations/<destinationId>` | one destination (`{"Address": ...}`), merged into that cluster |
///
/// A destination key for a cluster without a key of its own makes a cluster with
/// default settings. Any other key under the prefix is an error.
///
/// The prefix is read at one revision and watched from the next, so no change is
/// missed; each batch of changes becomes a whole new configuration (validated whole,
/// then swapped in by [`Providers`](super::Providers)). A key that is not valid keeps
/// the last good configuration, the error naming the key; while etcd cannot be reached
/// the last configuration keeps serving and the provider retries with backoff, reading
/// the prefix afresh when it is back (also when the watch's revision was compacted).
/// The version is `revision N`.
pub struct EtcdProvider {
    source: String,
    snapshot: Arc<watch::Sender<ProviderSnapshot>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for EtcdProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdProvider")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl EtcdProvider {
    /// Start reading and watching the prefix `url` names (`etcd://127.0.0.1:2379/fuseway`).
    /// Must be called within a tokio runtime; the work stops when the provider is
    /// dropped.
    pub fn spawn(url: &str, options: EtcdOptions) -> Result<EtcdProvider, ConfigError> {
        let (endpoints, prefix) = parse_url(url, options.ca.is_some())
            .map_err(|why| ConfigError::new("", format!("`{url}`: {why}")))?;
        let connect = options
            .connect_options()
            .map_err(|why| ConfigError::new("", format!("{url}: {why}")))?;
        let snapshot = Arc::new(watch::Sender::new(ProviderSnapshot::default()));
        let session = Session {
            source: url.to_string(),
            endpoints,
            prefix,
            connect,
            options,
            snapshot: snapshot.clone(),
        };
        Ok(EtcdProvider {
            source: url.to_string(),
            snapshot,
            task: Mutex::new(Some(tokio::spawn(session.run()))),
        })
    }
}

impl Drop for EtcdProvider {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl ConfigProvider for EtcdProvider {
    fn source(&self) -> &str {
        &self.source
    }

    fn subscribe(&self) -> watch::Receiver<ProviderSnapshot> {
        self.snapshot.subscribe()
    }
}

/// The endpoints (`http://host:port`, or `https://` with TLS) and the key prefix of an
/// `etcd://` URL.
fn parse_url(url: &str, tls: bool) -> Result<(Vec<String>, String), String> {
    let rest = url
        .strip_prefix("etcd://")
        .ok_or("expected `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`")?;
    let (hosts, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let scheme = if tls { "https" } else { "http" };
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() || host.contains('@') {
            return Err(format!(
                "`{host}` is not a `HOST:PORT` (credentials go in --etcd-user)"
            ));
        }
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && !p.contains(']'));
        let host = if has_port {
            host.to_string()
        } else {
            format!("{host}:2379")
        };
        let uri = format!("{scheme}://{host}");
        uri.parse::<http::Uri>()
            .map_err(|e| format!("`{host}`: {e}"))?;
        endpoints.push(uri);
    }
    let prefix = prefix.trim_end_matches('/').to_string();
    Ok((endpoints, prefix))
}

/// The task reading and watching the prefix.
struct Session {
    source: String,
    endpoints: Vec<String>,
    prefix: String,
    connect: ConnectOptions,
    options: EtcdOptions,
    snapshot: Arc<watch::Sender<ProviderSnapshot>>,
}

/// Why a session ended.
enum End {
    /// etcd could not be reached, or the connection broke.
    Unreachable(String),
    /// The watch was cancelled (its revision compacted): read afresh at once.
    Resync(String),
}

impl From<etcd_client::Error> for End {
    fn from(e: etcd_client::Error) -> Self {
        End::Unreachable(e.to_string())
    }
}

impl Session {
    async fn run(self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut read = false;
            match self.session(&mut read).await {
                End::Resync(why) => {
                    tracing::info!(config = %self.source, why, "reading the etcd prefix afresh");
                    continue;
                }
                End::Unreachable(why) => {
                    if read {
                        backoff = Duration::from_millis(100);
                    }
                    tracing::warn!(
                        config = %self.source,
                        error = %why,
                        retry_in = ?backoff,
                        "etcd unreachable; the last configuration keeps serving"
                    );
                    let error = ConfigErrors::from(ConfigError::new(
                        "",
                        format!("{}: etcd unreachable: {why}", self.source),
                    ));
                    self.snapshot.send_modify(|s| *s = s.failed(error, true));
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.options.max_backoff);
        }
    }

    /// Read the prefix and follow its changes until something breaks. `read` is set once
    /// the prefix has been read.
    async fn session(&self, read: &mut bool) -> End {
        let timeout = self.options.timeout;
        let within = |what: &'static str| {
            move |_| End::Unreachable(format!("no answer to {what} within {timeout:?}"))
        };
        let connect = Client::connect(&self.endpoints, Some(self.connect.clone()));
        let mut client = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return e.into(),
            Err(e) => return within("the connection")(e),
        };
        let dir = format!("{}/", self.prefix);
        let get = client.get(dir.as_str(), Some(GetOptions::new().with_prefix()));
        let response = match tokio::time::timeout(timeout, get).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return e.into(),
            Err(e) => return within("the read")(e),
        };
        let mut revision = response.header().map_or(0, |h| h.revision());
        let mut kvs: BTreeMap<String, Vec<u8>> = response
            .kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.value().to_vec(),
                )
            })
            .collect();
        *read = true;
        self.publish(&kvs, revision);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let watch = client.watch(dir.as_str(), Some(options));
        let mut stream = match tokio::time::timeout(timeout, watch).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return e.into(),
            Err(e) => return within("the watch")(e),
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return End::Unreachable("the watch ended".into()),
                Err(e) => return e.into(),
            };
            if response.canceled() || response.compact_revision() > 0 {
                return End::Resync(format!(
                    "watch cancelled (compacted to revision {}): {}",
                    response.compact_revision(),
                    response.cancel_reason()
                ));
            }
            if response.events().is_empty() {
                continue;
            }
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                match event.event_type() {
                    EventType::Put => {
                        kvs.insert(key, kv.value().to_vec());
                    }
                    EventType::Delete => {
                        kvs.remove(&key);
                    }
                }
                revision = revision.max(kv.mod_revision());
            }
            if let Some(header) = response.header() {
                revision = revision.max(header.revision());
            }
            self.publish(&kvs, revision);
        }
    }

    /// Build the configuration the keys hold at `revision` and hand it on; when they
    /// are not valid, the error (naming the key) goes on with the last good
    /// configuration.
    fn publish(&self, kvs: &BTreeMap<String, Vec<u8>>, revision: i64) {
        match assemble(&self.prefix, kvs) {
            Ok((config, origins)) => {
                let mut snapshot = ProviderSnapshot::read(config, format!("revision {revision}"));
                snapshot.origins = origins;
                self.snapshot.send_replace(snapshot);
            }
            Err(errors) => {
                tracing::debug!(config = %self.source, revision, "invalid keys");
                self.snapshot.send_modify(|s| {
                    let mut failed = s.failed(errors, false);
                    // The revision read, although it was not applied.
                    failed.version = s.version.clone();
                    *s = failed;
                });
            }
        }
    }
}

/// The configuration `kvs` (keys under `prefix`) hold, with the key of each part.
#[allow(clippy::type_complexity)]
fn assemble(
    prefix: &str,
    kvs: &BTreeMap<String, Vec<u8>>,
) -> Result<(ProxyConfig, Arc<[(String, String)]>), ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let mut routes = Map::new();
    let mut clusters: BTreeMap<String, (Option<String>, Map<String, Value>)> = BTreeMap::new();
    let mut destinations: Vec<(String, String, String, Value)> = Vec::new();
    let mut origins: Vec<(String, String)> = Vec::new();
    let mut document = Map::new();
    for (key, value) in kvs {
        let Some(rest) = key.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let section = |i: usize, name: &str| parts[i].eq_ignore_ascii_case(name);
        // The fleet's host filter: a string (`"example.com;*.example.org"`).
        if parts.len() == 1 && section(0, "AllowedHosts") {
            match serde_json::from_slice::<Value>(value) {
                Ok(hosts @ Value::String(_)) => {
                    origins.push(("AllowedHosts".to_string(), key.clone()));
                    document.insert("AllowedHosts".into(), hosts);
                }
                Ok(_) => errors.push(key, "the value must be a JSON string of host names"),
                Err(e) => errors.push(key, format!("invalid JSON: {e}")),
            }
            continue;
        }
        let value = match object(value) {
            Ok(v) => v,
            Err(why) => {
                errors.push(key, why);
                continue;
            }
        };
        match parts.len() {
            // The fleet's log levels: ASP.NET's `Logging` object.
            1 if section(0, "Logging") => {
                origins.push(("Logging".to_string(), key.clone()));
                document.insert("Logging".into(), value);
            }
            2 if section(0, "Routes") && !parts[1].is_empty() => {
                origins.push((format!("Routes.{}", parts[1]), key.clone()));
                routes.insert(parts[1].to_string(), value);
            }
            2 if section(0, "Clusters") && !parts[1].is_empty() => {
                let Value::Object(map) = value else {
                    unreachable!("object() returns objects")
                };
                clusters.insert(parts[1].to_string(), (Some(key.clone()), map));
            }
            4 if section(0, "Clusters")
                && section(2, "Destinations")
                && !parts[1].is_empty()
                && !parts[3].is_empty() =>
            {
                destinations.push((
                    parts[1].to_string(),
                    parts[3].to_string(),
                    key.clone(),
                    value,
                ));
            }
            _ => errors.push(
                key,
                format!(
                    "not a fuseway key: expected {prefix}/Routes/<routeId>, \
                     {prefix}/Clusters/<clusterId>, \
                     {prefix}/Clusters/<clusterId>/Destinations/<destinationId>, \
                     {prefix}/Logging or {prefix}/AllowedHosts"
                ),
            ),
        }
    }
    for (cluster, id, key, value) in destinations {
        let entry = clusters.entry(cluster.clone()).or_default();
        let list = entry
            .1
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case("Destinations"))
            .map(|(_, v)| v);
        let list = match list {
            Some(Value::Object(list)) => list,
            Some(_) => {
                // The cluster's own value is wrong; its parsing below says so.
                continue;
            }
            None => {
                entry
                    .1
                    .insert("Destinations".to_string(), Value::Object(Map::new()));
                match entry.1.get_mut("Destinations") {
                    Some(Value::Object(list)) => list,
                    _ => unreachable!("just inserted"),
                }
            }
        };
        if list.contains_key(&id) {
            let cluster_key = entry.0.clone().unwrap_or_default();
            errors.push(
                &key,
                format!("destination `{id}` is also in the Destinations of {cluster_key}"),
            );
            continue;
        }
        list.insert(id.clone(), value);
        origins.push((format!("Clusters.{cluster}.Destinations.{id}"), key));
    }
    let mut cluster_values = Map::new();
    for (id, (key, map)) in clusters {
        let key = key.unwrap_or_else(|| format!("{prefix}/Clusters/{id}"));
        origins.push((format!("Clusters.{id}"), key));
        cluster_values.insert(id, Value::Object(map));
    }
    // Most specific first, so that a path finds the key of its destination before its
    // cluster's (and `Clusters.a.b` before `Clusters.a`).
    origins.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    let origins: Arc<[(String, String)]> = origins.into();
    errors.into_result()?;
    document.insert("Routes".into(), Value::Object(routes));
    document.insert("Clusters".into(), Value::Object(cluster_values));
    let located = ProviderSnapshot {
        origins: origins.clone(),
        ..ProviderSnapshot::default()
    };
    let config = config::parse_value(Value::Object(document))
        .map_err(|e| ConfigErrors(e.0.into_iter().map(|e| located.locate(e)).collect()))?;
    Ok((config, origins))
}

/// A key's value: a JSON object.
fn object(value: &[u8]) -> Result<Value, String> {
    let value: Value = serde_json::from_slice(value).map_err(|e| format!("invalid JSON: {e}"))?;
    if !value.is_object() {
        return Err("the value must be a JSON object".to_string());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvs(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn urls() {
        let (endpoints, prefix) =
            parse_url("etcd://127.0.0.1:2379,10.0.0.2/fuseway/", false).unwrap();
        assert_eq!(endpoints, ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]);
        assert_eq!(prefix, "/fuseway");
        let (endpoints, prefix) = parse_url("etcd://[::1]:2380", true).unwrap();
        assert_eq!(endpoints, ["https://[::1]:2380"]);
        assert_eq!(prefix, "");
        assert!(parse_url("http://127.0.0.1/x", false).is_err());
        assert!(parse_url("etcd://user:pw@127.0.0.1/x", false).is_err());
        assert!(parse_url("etcd:///x", false).is_err());
    }

    #[test]
    fn keys_assemble_into_a_configuration() {
        let (config, _) = assemble(
            "/fw",
            &kvs(&[
                (
                    "/fw/Routes/r1",
                    r#"{ "ClusterId": "c1", "Match": { "Path": "/a" } }"#,
                ),
                (
                    "/fw/Clusters/c1",
                    r#"{ "LoadBalancingPolicy": "RoundRobin" }"#,
                ),
                (
                    "/fw/Clusters/c1/Destinations/d1",
                    r#"{ "Address": "http://127.0.0.1:1" }"#,
                ),
                (
                    "/fw/clusters/c2/destinations/d2",
                    r#"{ "Address": "http://127.0.0.1:2" }"#,
                ),
                ("/other/Routes/x", "not even JSON"),
            ]),
        )
        .unwrap();
        assert_eq!(config.routes["r1"].cluster_id.as_deref(), Some("c1"));
        assert_eq!(
            config.clusters["c1"].destinations["d1"].address,
            "http://127.0.0.1:1"
        );
        assert_eq!(
            config.clusters["c2"].destinations["d2"].address,
            "http://127.0.0.1:2"
        );
        assert!(config.logging.is_empty() && config.allowed_hosts.is_none());
        // The fleet's log levels and host filter.
        let (config, _) = assemble(
            "/fw",
            &kvs(&[
                (
                    "/fw/Logging",
                    r#"{ "LogLevel": { "Default": "Warning", "Yarp": "Debug" } }"#,
                ),
                ("/fw/allowedhosts", r#""example.com;*.example.org""#),
            ]),
        )
        .unwrap();
        assert_eq!(
            config.logging.directives().as_deref(),
            Some("warn,fuseway=debug")
        );
        assert_eq!(
            config.allowed_hosts.as_deref(),
            Some("example.com;*.example.org")
        );
    }

    #[test]
    fn errors_name_the_key() {
        let error = |pairs: &[(&str, &str)]| {
            let errors = assemble("/fw", &kvs(pairs)).unwrap_err();
            let e = errors.iter().next().unwrap().clone();
            (e.path, e.message)
        };
        let (path, message) = error(&[("/fw/Routes/r1", "{ nope")]);
        assert_eq!(path, "/fw/Routes/r1");
        assert!(message.starts_with("invalid JSON"), "{message}");
        let (path, message) = error(&[("/fw/Routes/r1", r#"{ "ClusterId": "c", "Order": "x" }"#)]);
        assert_eq!(path, "/fw/Routes/r1");
        assert!(message.starts_with("Order: "), "{message}");
        let (path, message) = error(&[
            ("/fw/Clusters/c", "{}"),
            (
                "/fw/Clusters/c/Destinations/d",
                r#"{ "Address": "not a url" }"#,
            ),
        ]);
        assert_eq!(path, "/fw/Clusters/c/Destinations/d");
        assert!(message.starts_with("Address: "), "{message}");
        let (path, message) = error(&[("/fw/Logging", r#"{ "LogLevel": { "Yarp": "Loud" } }"#)]);
        assert_eq!(path, "/fw/Logging");
        assert!(message.contains("`Loud` is not a log level"), "{message}");
        let (path, message) = error(&[("/fw/AllowedHosts", r#"["example.com"]"#)]);
        assert_eq!(path, "/fw/AllowedHosts");
        assert!(message.contains("JSON string"), "{message}");
        let (path, message) = error(&[("/fw/Listen/x", "{}")]);
        assert_eq!(path, "/fw/Listen/x");
        assert!(message.contains("not a fuseway key"), "{message}");
        let (path, message) = error(&[
            (
                "/fw/Clusters/c",
                r#"{ "Destinations": { "d": { "Address": "http://a" } } }"#,
            ),
            (
                "/fw/Clusters/c/Destinations/d",
                r#"{ "Address": "http://b" }"#,
            ),
        ]);
        assert_eq!(path, "/fw/Clusters/c/Destinations/d");
        assert!(
            message.contains("also in the Destinations of /fw/Clusters/c"),
            "{message}"
        );
    }
}
