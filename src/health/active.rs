//! Active health, `ConsecutiveFailures`: probing every destination of the clusters
//! that enable it, and the task that does so.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HOST, USER_AGENT};
use http::{HeaderValue, Request, Uri, Version};
use http_body_util::Empty;
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};

use super::settings::ActiveSettings;
use super::HealthState;
use crate::forwarding::headers::Added;
use crate::forwarding::pool::{self, Pools};
use crate::state::{
    Cluster, Destination, DestinationState, HttpSettings, ProxyState, Snapshot, UpstreamVersion,
};

/// Most bytes of a probe's response body read (so that its connection can be reused).
const DRAIN_LIMIT: usize = 64 * 1024;
const PROBE_USER_AGENT: &str = concat!(
    "fuseway/",
    env!("CARGO_PKG_VERSION"),
    " (active health check)"
);

/// Count one probe result of `dest` by the `ConsecutiveFailures` policy: a success
/// makes it healthy and resets its failure count; the `threshold`-th failure in a row
/// makes it unhealthy; fewer leave its state as it was. Returns the new state.
pub(crate) fn record_probe(dest: &DestinationState, success: bool, threshold: u32) -> HealthState {
    let health = dest.health();
    let previous = health.active();
    let next = if success {
        health.consecutive_failures.store(0, Ordering::Relaxed);
        HealthState::Healthy
    } else {
        let failures = health
            .consecutive_failures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            })
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        if failures >= threshold {
            HealthState::Unhealthy
        } else {
            previous
        }
    };
    if next != previous {
        health.store_active(next);
        if next == HealthState::Unhealthy {
            tracing::warn!(
                cluster = dest.cluster_id(),
                destination = dest.id(),
                failures = health.consecutive_failures(),
                "active health: destination is Unhealthy (consecutive failed probes)"
            );
        } else {
            tracing::info!(
                cluster = dest.cluster_id(),
                destination = dest.id(),
                from = %previous,
                to = %next,
                "active health: destination state changed"
            );
        }
    }
    next
}

/// The probe URI of `destination`: its `Health` address, else its `Address`, with the
/// cluster's probe `Path` appended to the address' path, and the probe `Query`.
pub(crate) fn probe_uri(
    destination: &Destination,
    settings: &ActiveSettings,
) -> Result<Uri, String> {
    let (scheme, authority, base) = match destination.config().health.as_deref() {
        Some(health) => {
            let uri: Uri = health
                .parse()
                .map_err(|e| format!("health address `{health}`: {e}"))?;
            match (uri.scheme_str(), uri.authority()) {
                (Some(s), Some(a)) => (s.to_owned(), a.to_string(), uri.path().to_owned()),
                _ => return Err(format!("health address `{health}` is not absolute")),
            }
        }
        None => {
            let a = destination.address();
            (
                a.scheme.to_string(),
                a.authority.to_string(),
                a.path_prefix.clone(),
            )
        }
    };
    let path = match &settings.path {
        Some(p) => format!("{}{p}", base.trim_end_matches('/')),
        None if base.is_empty() => "/".to_owned(),
        None => base,
    };
    let uri = format!("{scheme}://{authority}{path}{}", settings.query);
    uri.parse().map_err(|e| format!("probe URI `{uri}`: {e}"))
}

/// Runs the active health checks of a [`ProxyState`]: every cluster with
/// `HealthCheck.Active.Enabled` is probed every `Interval`, the first time right away.
/// On every configuration reload ([`ProxyState::subscribe`]) clusters and destinations
/// that appear, disappear or change their settings are re-planned, and probed at once.
///
/// Probes go over HTTP/1.1, or HTTP/2 when the cluster's `HttpRequest.Version` is `"2"`;
/// `https://` addresses are verified against the web PKI roots, or not at all for
/// clusters with `DangerousAcceptAnyServerCertificate`, as the forwarder does.
///
/// The checks stop when the checker is dropped or [`shut down`](Self::shutdown).
///
/// ```no_run
/// # async fn run(state: std::sync::Arc<fuseway::state::ProxyState>) {
/// let checker = fuseway::health::ActiveHealthChecker::spawn(state);
/// // ... serve ...
/// checker.shutdown().await;
/// # }
/// ```
#[derive(Debug)]
pub struct ActiveHealthChecker {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl ActiveHealthChecker {
    /// Start checking `state`'s clusters on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn spawn(state: Arc<ProxyState>) -> Self {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(supervise(state, Arc::new(Prober::new()), stopped));
        ActiveHealthChecker {
            stop: Some(stop),
            task,
        }
    }

    /// Stop, and wait until no probe is running any more.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Keeps one probing task per cluster with active health, in line with the snapshot.
async fn supervise(
    state: Arc<ProxyState>,
    prober: Arc<Prober>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut plans: HashMap<Arc<str>, (Arc<ClusterPlan>, AbortHandle)> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut reloads = state.subscribe();
    let mut seen: Option<Arc<Snapshot>> = None;
    loop {
        let snapshot = state.snapshot();
        if !seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &snapshot)) {
            replan(&snapshot, &mut plans, &mut tasks, &prober);
            seen = Some(snapshot);
        }
        tokio::select! {
            // Stopped, or the handle was dropped.
            _ = &mut stopped => break,
            changed = reloads.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            Some(done) = tasks.join_next() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        tracing::error!(error = %e, "active health: a probing task panicked");
                    }
                }
            }
        }
    }
    tasks.shutdown().await;
}

fn replan(
    snapshot: &Snapshot,
    plans: &mut HashMap<Arc<str>, (Arc<ClusterPlan>, AbortHandle)>,
    tasks: &mut JoinSet<()>,
    prober: &Arc<Prober>,
) {
    let mut next = HashMap::with_capacity(plans.len());
    for cluster in snapshot.clusters() {
        let Some(plan) = ClusterPlan::new(cluster) else {
            continue;
        };
        let kept = match plans.remove(cluster.id()) {
            Some((old, handle)) if *old == plan => Some((old, handle)),
            Some((_, handle)) => {
                handle.abort();
                None
            }
            None => None,
        };
        let entry = kept.unwrap_or_else(|| {
            let plan = Arc::new(plan);
            let handle = tasks.spawn(run_cluster(plan.clone(), prober.clone()));
            (plan, handle)
        });
        next.insert(cluster.id.clone(), entry);
    }
    for (cluster, (_, handle)) in plans.drain() {
        handle.abort();
        tracing::info!(
            cluster = &*cluster,
            "active health: stopped probing cluster"
        );
    }
    *plans = next;
}

/// Probe rounds of one cluster, every interval, the first one at once.
async fn run_cluster(plan: Arc<ClusterPlan>, prober: Arc<Prober>) {
    let mut ticks = tokio::time::interval(plan.settings.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let results =
            futures_util::future::join_all(plan.probes.iter().map(|p| prober.probe(&plan, p)))
                .await;
        for (probe, success) in plan.probes.iter().zip(results) {
            if let Some(success) = success {
                record_probe(&probe.destination, success, plan.settings.threshold);
            }
        }
    }
}

/// What one cluster's probing task does; a different plan restarts the task.
#[derive(Debug)]
struct ClusterPlan {
    cluster: Arc<str>,
    settings: ActiveSettings,
    http: HttpSettings,
    probes: Vec<Probe>,
}

#[derive(Debug)]
struct Probe {
    destination: Arc<DestinationState>,
    target: Target,
    host: Option<HeaderValue>,
}

#[derive(Debug, PartialEq)]
enum Target {
    Uri(Uri),
    /// No valid probe URI: every probe fails.
    Invalid(String),
}

impl PartialEq for ClusterPlan {
    fn eq(&self, other: &Self) -> bool {
        self.cluster == other.cluster
            && self.settings == other.settings
            && self.http.version == other.http.version
            && self.http.tls_versions == other.http.tls_versions
            && self.http.accept_any_certificate == other.http.accept_any_certificate
            && self.http.multiple_http2_connections == other.http.multiple_http2_connections
            && self.probes.len() == other.probes.len()
            && self.probes.iter().zip(&other.probes).all(|(a, b)| {
                Arc::ptr_eq(&a.destination, &b.destination)
                    && a.target == b.target
                    && a.host == b.host
            })
    }
}

impl ClusterPlan {
    /// The plan of `cluster`, if it has active health enabled.
    fn new(cluster: &Cluster) -> Option<Self> {
        let settings = cluster.health().active()?.clone();
        let probes = cluster
            .destinations()
            .iter()
            .map(|d| Probe {
                destination: d.state().clone(),
                target: match probe_uri(d, &settings) {
                    Ok(uri) => Target::Uri(uri),
                    Err(e) => Target::Invalid(e),
                },
                host: d.config().host.is_some().then(|| d.host_header().clone()),
            })
            .collect();
        Some(ClusterPlan {
            cluster: cluster.id.clone(),
            settings,
            http: cluster.http().clone(),
            probes,
        })
    }
}

/// The HTTP clients probes are sent with: the forwarder's kind (HTTP/1.1 or HTTP/2, TLS
/// with the web PKI roots or, for `DangerousAcceptAnyServerCertificate` clusters, any
/// certificate), with their own connection pools.
struct Prober {
    pools: Pools<Empty<Bytes>>,
}

impl Prober {
    fn new() -> Self {
        Prober {
            pools: Pools::new(
                crate::server::Http1Engine::from_env(),
                crate::server::Http2Engine::from_env(),
                Default::default(),
            ),
        }
    }

    /// Probe one destination: `Some(true)` for a 2xx answer within the timeout,
    /// `Some(false)` for anything else, `None` when it is not probed.
    async fn probe(&self, plan: &ClusterPlan, probe: &Probe) -> Option<bool> {
        let cluster = &*plan.cluster;
        let destination = probe.destination.id();
        let uri = match &probe.target {
            Target::Uri(uri) => uri.clone(),
            Target::Invalid(error) => {
                tracing::debug!(cluster, destination, %error, "active health: no valid probe URI");
                return Some(false);
            }
        };
        let mut request = Request::new(Empty::<Bytes>::new());
        let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
        else {
            return Some(false);
        };
        let pool = self.pools.pool_for(&pool::Target {
            scheme: &scheme,
            authority: &authority,
            version: plan.http.version,
            accept_any_certificate: plan.http.accept_any_certificate,
            tls: plan.http.tls_versions,
            multiple_http2: plan.http.multiple_http2_connections,
            // As YARP's probes, which go through the cluster's client.
            proxy: plan.http.proxy_for(&authority),
            // Probes do not count towards `MaxConnectionsPerServer` (YARP's share the
            // cluster's client, and so its limit): a destination at its limit is still
            // probed.
            limit: None,
            cache: None,
        });
        // HTTP/1.1 sends the origin form, HTTP/2 the absolute URI.
        *request.version_mut() = match pool.version() {
            UpstreamVersion::Http2 => {
                *request.uri_mut() = uri;
                Version::HTTP_2
            }
            _ => {
                *request.uri_mut() = uri
                    .path_and_query()
                    .cloned()
                    .map_or_else(Uri::default, Uri::from);
                let headers = request.headers_mut();
                headers.insert(HOST, HeaderValue::from_str(authority.as_str()).ok()?);
                Version::HTTP_11
            }
        };
        let headers = request.headers_mut();
        headers.insert(USER_AGENT, HeaderValue::from_static(PROBE_USER_AGENT));
        if let Some(host) = &probe.host {
            headers.insert(HOST, host.clone());
        }
        let deadline = Instant::now() + plan.settings.timeout;
        let exchange = pool.send(request, false, &mut Added::default());
        let sent = pool::status_of(exchange, DRAIN_LIMIT);
        match tokio::time::timeout_at(deadline, sent).await {
            Ok(Ok(status)) => {
                tracing::debug!(
                    cluster,
                    destination,
                    status = status.as_u16(),
                    "active health: probe answered"
                );
                Some(status.is_success())
            }
            Ok(Err(error)) => {
                tracing::debug!(cluster, destination, %error, "active health: probe failed");
                Some(false)
            }
            Err(_) => {
                tracing::debug!(cluster, destination, timeout = ?plan.settings.timeout, "active health: probe timed out");
                Some(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Format};

    fn dest() -> DestinationState {
        crate::pipeline::builtins::destination_state()
    }

    #[test]
    fn consecutive_failures_reach_the_threshold() {
        let d = dest();
        assert_eq!(record_probe(&d, false, 2), HealthState::Unknown);
        assert_eq!(d.health().consecutive_failures(), 1);
        assert_eq!(record_probe(&d, false, 2), HealthState::Unhealthy);
        assert_eq!(record_probe(&d, false, 2), HealthState::Unhealthy);
        assert_eq!(record_probe(&d, true, 2), HealthState::Healthy);
        assert_eq!(d.health().consecutive_failures(), 0);
        // Below the threshold a healthy destination stays healthy.
        assert_eq!(record_probe(&d, false, 3), HealthState::Healthy);
        assert_eq!(record_probe(&d, false, 3), HealthState::Healthy);
        // A success in between starts the count over.
        assert_eq!(record_probe(&d, true, 3), HealthState::Healthy);
        assert_eq!(record_probe(&d, false, 3), HealthState::Healthy);
        assert_eq!(record_probe(&d, false, 3), HealthState::Healthy);
        assert_eq!(record_probe(&d, false, 3), HealthState::Unhealthy);
        assert_eq!(d.health().active(), HealthState::Unhealthy);
        // Threshold 1: the first failure.
        let d = dest();
        assert_eq!(record_probe(&d, false, 1), HealthState::Unhealthy);
    }

    #[test]
    fn failure_count_saturates() {
        let d = dest();
        d.health()
            .consecutive_failures
            .store(u32::MAX, Ordering::Relaxed);
        assert_eq!(record_probe(&d, false, u32::MAX), HealthState::Unhealthy);
        assert_eq!(d.health().consecutive_failures(), u32::MAX);
    }

    fn snapshot(cluster: &str) -> Arc<Snapshot> {
        let config = parse(
            &format!(r#"{{ "Clusters": {{ "c": {cluster} }} }}"#),
            Format::Json,
        )
        .unwrap();
        ProxyState::new(config).unwrap().snapshot()
    }

    fn uris(cluster: &str) -> Vec<String> {
        let snap = snapshot(cluster);
        let c = snap.cluster("c").unwrap();
        let settings = c.health().active().unwrap();
        c.destinations()
            .iter()
            .map(|d| probe_uri(d, settings).unwrap().to_string())
            .collect()
    }

    #[test]
    fn probe_uris() {
        let got = uris(
            r#"{ "HealthCheck": { "Active": { "Enabled": true, "Path": "/health", "Query": "?x=1" } },
                 "Destinations": {
                   "a": { "Address": "http://127.0.0.1:1/" },
                   "b": { "Address": "http://127.0.0.1:2/base/" },
                   "c": { "Address": "http://127.0.0.1:3/", "Health": "http://127.0.0.1:4/probe/" },
                   "d": { "Address": "https://example.com/" } } }"#,
        );
        assert_eq!(
            got,
            [
                "http://127.0.0.1:1/health?x=1",
                "http://127.0.0.1:2/base/health?x=1",
                "http://127.0.0.1:4/probe/health?x=1",
                "https://example.com/health?x=1",
            ]
        );
        let got = uris(
            r#"{ "HealthCheck": { "Active": { "Enabled": true } },
                 "Destinations": {
                   "a": { "Address": "http://127.0.0.1:1" },
                   "b": { "Address": "http://127.0.0.1:2/base/" },
                   "c": { "Address": "http://127.0.0.1:3/", "Health": "http://127.0.0.1:4/probe/" } } }"#,
        );
        assert_eq!(
            got,
            [
                "http://127.0.0.1:1/",
                "http://127.0.0.1:2/base",
                "http://127.0.0.1:4/probe/",
            ]
        );
    }

    #[test]
    fn plans_follow_the_configuration() {
        let cluster = r#"{ "HealthCheck": { "Active": { "Enabled": true, "Interval": "1s" } },
             "Destinations": { "a": { "Address": "http://127.0.0.1:1", "Host": "example.com" } } }"#;
        let config = parse(
            &format!(r#"{{ "Clusters": {{ "c": {cluster} }} }}"#),
            Format::Json,
        )
        .unwrap();
        let state = ProxyState::new(config.clone()).unwrap();
        let plan = |s: &ProxyState| ClusterPlan::new(s.snapshot().cluster("c").unwrap());
        let first = plan(&state).unwrap();
        assert_eq!(first.probes[0].host.as_ref().unwrap(), "example.com");
        // Reloading the same configuration keeps the plan (same destination state).
        state.update(config.clone()).unwrap();
        assert!(plan(&state).unwrap() == first);
        // A changed interval changes it.
        let mut changed = config.clone();
        let active = changed.clusters.get_mut("c").unwrap();
        active
            .health_check
            .as_mut()
            .unwrap()
            .active
            .as_mut()
            .unwrap()
            .interval = Some(std::time::Duration::from_secs(2).into());
        state.update(changed).unwrap();
        assert!(plan(&state).unwrap() != first);
        // Disabled: no plan.
        let mut off = config;
        off.clusters
            .get_mut("c")
            .unwrap()
            .health_check
            .as_mut()
            .unwrap()
            .active
            .as_mut()
            .unwrap()
            .enabled = Some(false);
        state.update(off).unwrap();
        assert!(plan(&state).is_none());
    }

    #[test]
    fn https_probes_of_accept_any_clusters_use_the_clusters_tls_policy() {
        let snap = snapshot(
            r#"{ "HealthCheck": { "Active": { "Enabled": true } },
                 "HttpClient": { "DangerousAcceptAnyServerCertificate": true },
                 "Destinations": { "a": { "Address": "https://127.0.0.1:1" },
                                   "b": { "Address": "http://127.0.0.1:2" } } }"#,
        );
        let plan = ClusterPlan::new(snap.cluster("c").unwrap()).unwrap();
        assert!(plan.http.accept_any_certificate);
        assert!(matches!(plan.probes[0].target, Target::Uri(_)));
        assert!(matches!(plan.probes[1].target, Target::Uri(_)));
    }
}
