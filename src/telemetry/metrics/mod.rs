//! The metrics registry and the per-route handles cached in each snapshot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::request::ForwardErrorKind;
use crate::state::{Cluster, Snapshot};

/// Upper bounds (seconds) of the request duration histogram's buckets: from 100 µs (a
/// proxied request on loopback takes a few hundred) to 30 s.
pub const DURATION_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// How long an error counts as recent on the status page.
pub const RECENT_ERRORS_WINDOW: Duration = Duration::from_secs(300);
const RECENT_SLOTS: usize = 5;
const SLOT_SECONDS: u64 = RECENT_ERRORS_WINDOW.as_secs() / RECENT_SLOTS as u64;

/// Status-code counters cached per (route, destination) without locking.
const STATUS_SLOTS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TargetLabels {
    route: Arc<str>,
    cluster: Arc<str>,
    destination: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: Arc<str>,
    cluster: Arc<str>,
    destination: Arc<str>,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    route: Arc<str>,
    cluster: Arc<str>,
    destination: Arc<str>,
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// (cluster id, destination id).
type DestinationKey = (Arc<str>, Arc<str>);

/// Every metric of one [`ProxyState`](crate::state::ProxyState), in a
/// `prometheus-client` registry. Counters keep counting across reloads: the handles a
/// new snapshot caches are the same series as before for unchanged ids.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, ThreadCounter>,
    durations: Family<TargetLabels, DurationHistogram>,
    errors: Family<ErrorLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    in_flight: ThreadGauge,
    recent: Mutex<HashMap<DestinationKey, Arc<RecentErrors>>>,
    unrouted: Target,
    started: Instant,
    sources: ConfigSources,
    history: history::History,
}

/// Where the configuration comes from, as the status page and the metrics show it: one
/// entry per configuration provider (a file, an etcd prefix).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConfigSourceStatus {
    /// The provider's source: a file's path, an `etcd://` URL.
    pub source: String,
    /// Which version of the source the running configuration holds (an etcd revision, a
    /// digest of the file); empty before the first read.
    pub version: String,
    /// The provider's last error, while it lasts (an invalid key, etcd unreachable).
    pub error: Option<String>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("in_flight", &self.in_flight.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with fuseway's metrics, all at zero.
    pub fn new() -> Self {
        let requests = Family::<RequestLabels, ThreadCounter>::default();
        let durations = Family::<TargetLabels, DurationHistogram>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        let in_flight = ThreadGauge::default();
        let mut registry = Registry::default();
        registry.register(
            "fuseway_requests",
            "Requests answered, by route, cluster, destination and status (destination empty when the proxy answered before choosing one; route and cluster too when no route matched)",
            requests.clone(),
        );
        registry.register(
            "fuseway_request_duration_seconds",
            "Time from a request's arrival until its response headers were ready",
            durations.clone(),
        );
        registry.register(
            "fuseway_requests_in_flight",
            "Requests in the pipeline now (until their response headers are ready)",
            in_flight.clone(),
        );
        registry.register(
            "fuseway_forward_errors",
            "Forwarding errors before the response started, by route, cluster, destination and kind",
            errors.clone(),
        );
        registry.register(
            "fuseway_config_reloads",
            "Configuration reloads by the binary, by result (success, failure)",
            reloads.clone(),
        );
        registry.register_collector(Box::new(ProcessMetrics {
            start: std::time::SystemTime::now(),
        }));
        let sources = ConfigSources::default();
        registry.register_collector(Box::new(sources.clone()));
        let empty: Arc<str> = Arc::from("");
        let unrouted = Target::new(
            TargetLabels {
                route: empty.clone(),
                cluster: empty.clone(),
                destination: empty,
            },
            &durations,
            None,
        );
        Metrics {
            registry,
            requests,
            durations,
            errors,
            reloads,
            in_flight,
            recent: Mutex::default(),
            unrouted,
            started: Instant::now(),
            sources,
            history: history::History::default(),
        }
    }

    /// The handles a snapshot caches for a route of `cluster` (`None`: the route's
    /// cluster does not exist): `previous`'s (the same route's in the snapshot before)
    /// when the cluster and its destinations are the same, else new ones, each set made
    /// at its first request.
    pub(crate) fn route(
        self: &Arc<Self>,
        route: &Arc<str>,
        cluster: Option<&Cluster>,
        previous: Option<&RouteTelemetry>,
    ) -> RouteTelemetry {
        let cluster_id = cluster.map_or("", |c| c.id());
        if let Some(previous) = previous.and_then(|p| p.0.as_ref()) {
            let same = Arc::ptr_eq(&previous.metrics, self)
                && previous.route == *route
                && &*previous.cluster == cluster_id
                && cluster.map_or(0, |c| c.destinations().len()) == previous.destinations.len()
                && cluster.is_none_or(|c| {
                    c.destinations()
                        .iter()
                        .zip(previous.destinations.iter())
                        .all(|(d, p)| d.id() == &**p)
                });
            if same {
                return RouteTelemetry(Some(previous.clone()));
            }
        }
        let destinations: Box<[Arc<str>]> = cluster.map_or_else(Default::default, |c| {
            c.destinations().iter().map(|d| Arc::from(d.id())).collect()
        });
        RouteTelemetry(Some(Arc::new(RouteTargets {
            metrics: self.clone(),
            route: route.clone(),
            cluster: Arc::from(cluster_id),
            targets: destinations.iter().map(|_| OnceLock::new()).collect(),
            destinations,
            early: OnceLock::new(),
        })))
    }

    /// Forget the recent-error windows of destinations no longer in `snapshot`.
    pub(crate) fn retain_destinations(&self, snapshot: &Snapshot) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|(c, d), _| {
            snapshot
                .cluster(c)
                .is_some_and(|c| c.destination(d).is_some())
        });
    }

    fn recent_errors(&self, cluster: &Arc<str>, destination: &Arc<str>) -> Arc<RecentErrors> {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .entry((cluster.clone(), destination.clone()))
            .or_default()
            .clone()
    }

    /// Errors (forwarding failures and 5xx answers) of a destination within the last
    /// [`RECENT_ERRORS_WINDOW`].
    pub fn recent_errors_of(&self, cluster: &str, destination: &str) -> u64 {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let key: DestinationKey = (Arc::from(cluster), Arc::from(destination));
        recent.get(&key).map_or(0, |r| r.count(self.slot_now()))
    }

    fn slot_now(&self) -> u64 {
        self.started.elapsed().as_secs() / SLOT_SECONDS
    }

    /// Time since these metrics were created.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Requests in the pipeline now.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// A handle on the in-flight gauge for one worker's pipeline: its guards count on
    /// it, so that their reference counting stays on that worker's core.
    pub(crate) fn in_flight_handle(&self) -> InFlightHandle {
        InFlightHandle(Arc::new(self.in_flight.clone()))
    }

    /// Record a reload done by the binary.
    pub fn record_reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// Take a sample for the status page's charts: each route's and cluster's requests
    /// per second, p50 and p99 latency and 5xx share since the last sample (see
    /// [`Point`](crate::telemetry::Point)). The admin listener of the binary samples every 2 s
    /// ([`admin::spawn_history`](crate::admin::spawn_history)).
    pub fn sample_history(&self, snapshot: &Snapshot) {
        self.history.sample(snapshot, Instant::now());
    }

    /// The charted series: the routes' and the clusters', the busiest first.
    pub fn history(&self) -> (history::Charts, history::Charts) {
        self.history.charts()
    }

    /// Set what the configuration providers report (see [`ConfigSourceStatus`]).
    pub fn set_config_sources(&self, sources: Vec<ConfigSourceStatus>) {
        *self.sources.0.lock().unwrap_or_else(|e| e.into_inner()) = sources;
    }

    /// What the configuration providers last reported.
    pub fn config_sources(&self) -> Vec<ConfigSourceStatus> {
        self.sources
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Record one answered request. `target` is `None` for requests the proxy answered
    /// without a route.
    pub(crate) fn record(
        &self,
        target: Option<TargetRef<'_>>,
        status: u16,
        elapsed: Duration,
        error: Option<ForwardErrorKind>,
    ) {
        let owned;
        let target = match target {
            None => &self.unrouted,
            Some(TargetRef::Cached(t)) => t,
            Some(TargetRef::Other {
                route,
                cluster,
                destination,
            }) => {
                // A request reassigned to another cluster: not cached, found by label.
                let recent = self.recent_errors(&Arc::from(cluster), &Arc::from(destination));
                owned = Target::new(
                    TargetLabels {
                        route: Arc::from(route),
                        cluster: Arc::from(cluster),
                        destination: Arc::from(destination),
                    },
                    &self.durations,
                    Some(recent),
                );
                &owned
            }
        };
        target.count(&self.requests, status, true);
        target.duration.observe(elapsed);
        if let Some(kind) = error {
            let labels = ErrorLabels {
                route: target.labels.route.clone(),
                cluster: target.labels.cluster.clone(),
                destination: target.labels.destination.clone(),
                kind: kind_name(kind),
            };
            self.errors.get_or_create(&labels).inc();
        }
        if error.is_some() || status >= 500 {
            if let Some(recent) = &target.recent {
                recent.record(self.slot_now());
            }
        }
    }

    /// Write every metric in the Prometheus text format (version 0.0.4), including the
    /// destination gauges read from `snapshot` now.
    pub fn encode(&self, snapshot: &Arc<Snapshot>, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::prometheus_text::encode(out, &self.registry)?;
        let mut now = Registry::default();
        now.register_collector(Box::new(SnapshotGauges(snapshot.clone())));
        prometheus_client::encoding::prometheus_text::encode(out, &now)
    }
}

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The name of an error kind in metrics and on the status page.
pub fn kind_name(kind: ForwardErrorKind) -> &'static str {
    // `_`: kinds added later are still counted (as `Other`) until named here.
    #[allow(unreachable_patterns)]
    match kind {
        ForwardErrorKind::NoAvailableDestinations => "NoAvailableDestinations",
        ForwardErrorKind::Request => "Request",
        ForwardErrorKind::RequestCreation => "RequestCreation",
        ForwardErrorKind::RequestTimedOut => "RequestTimedOut",
        ForwardErrorKind::RequestCanceled => "RequestCanceled",
        ForwardErrorKind::RequestBodyClient => "RequestBodyClient",
        ForwardErrorKind::RequestBodyTooLarge => "RequestBodyTooLarge",
        ForwardErrorKind::RequestBodyDestination => "RequestBodyDestination",
        ForwardErrorKind::ResponseBodyDestination => "ResponseBodyDestination",
        ForwardErrorKind::ResponseBodyClient => "ResponseBodyClient",
        ForwardErrorKind::UpgradeResponseClient => "UpgradeResponseClient",
        _ => "Other",
    }
}

/// See [`Metrics::in_flight_handle`] (a clone shares the handle).
#[derive(Debug, Clone)]
pub(crate) struct InFlightHandle(Arc<ThreadGauge>);

impl InFlightHandle {
    /// One more request in flight, until the guard is dropped.
    pub(crate) fn enter(&self) -> InFlight {
        self.0.enter()
    }
}

/// Decrements the in-flight gauge when dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<ThreadGauge>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Where a request went, for [`Metrics::record`].
pub(crate) enum TargetRef<'a> {
    Cached(&'a Target),
    Other {
        route: &'a str,
        cluster: &'a str,
        destination: &'a str,
    },
}

/// A route's metric handles: one set per destination of its cluster and one for the
/// answers given before a destination was chosen. Each set is made at its first request
/// (after that, recording takes no lock and allocates nothing), and the sets carry over
/// a reload when the route's cluster and its destinations are the same, so that a
/// configuration of many routes over large clusters neither builds nor keeps handles
/// for pairs that see no traffic.
#[derive(Debug, Default)]
pub struct RouteTelemetry(Option<Arc<RouteTargets>>);

#[derive(Debug)]
struct RouteTargets {
    metrics: Arc<Metrics>,
    route: Arc<str>,
    /// The cluster's id, empty when it does not exist.
    cluster: Arc<str>,
    destinations: Box<[Arc<str>]>,
    targets: Box<[OnceLock<Box<Target>>]>,
    early: OnceLock<Box<Target>>,
}

impl RouteTargets {
    /// The handles of `destination` (an index in `destinations`), or of the early
    /// answers.
    fn make(&self, destination: Option<usize>) -> Box<Target> {
        let metrics = &self.metrics;
        let labels = |destination: Arc<str>| TargetLabels {
            route: self.route.clone(),
            cluster: self.cluster.clone(),
            destination,
        };
        Box::new(match destination {
            None => Target::new(labels(Arc::from("")), &metrics.durations, None),
            Some(i) => {
                let destination = self.destinations[i].clone();
                let recent = metrics.recent_errors(&self.cluster, &destination);
                let target = Target::new(labels(destination), &metrics.durations, Some(recent));
                // The common status, so the route's next requests do not allocate.
                target.count(&metrics.requests, 200, false);
                target
            }
        })
    }
}

impl RouteTelemetry {
    pub(crate) fn target(&self, destination: usize) -> Option<&Target> {
        let targets = self.0.as_ref()?;
        let slot = targets.targets.get(destination)?;
        Some(slot.get_or_init(|| targets.make(Some(destination))))
    }

    /// The handles of the route's answers given before a destination was chosen.
    pub(crate) fn early(&self) -> Option<&Target> {
        let targets = self.0.as_ref()?;
        Some(targets.early.get_or_init(|| targets.make(None)))
    }
}

/// The handles of one (route, cluster, destination).
#[derive(Debug)]
pub(crate) struct Target {
    labels: TargetLabels,
    statuses: [OnceLock<(u16, ThreadCounter)>; STATUS_SLOTS],
    duration: DurationHistogram,
    recent: Option<Arc<RecentErrors>>,
}

impl Target {
    fn new(
        labels: TargetLabels,
        durations: &Family<TargetLabels, DurationHistogram>,
        recent: Option<Arc<RecentErrors>>,
    ) -> Self {
        Target {
            duration: durations.get_or_create_owned(&labels),
            labels,
            statuses: Default::default(),
            recent,
        }
    }

    fn request_labels(&self, status: u16) -> RequestLabels {
        RequestLabels {
            route: self.labels.route.clone(),
            cluster: self.labels.cluster.clone(),
            destination: self.labels.destination.clone(),
            status,
        }
    }

    /// Count a request of `status` (or only create its series when `!inc`): a lookup in
    /// the slots, filled on first use; the family (a lock) only when they are full.
    fn count(&self, family: &Family<RequestLabels, ThreadCounter>, status: u16, inc: bool) {
        let start = usize::from(status) % STATUS_SLOTS;
        for i in 0..STATUS_SLOTS {
            let slot = &self.statuses[(start + i) % STATUS_SLOTS];
            let (s, counter) = slot.get_or_init(|| {
                (
                    status,
                    family.get_or_create_owned(&self.request_labels(status)),
                )
            });
            if *s == status {
                if inc {
                    counter.inc();
                }
                return;
            }
        }
        let counter = family.get_or_create(&self.request_labels(status));
        if inc {
            counter.inc();
        }
    }
}

/// Errors of one destination per time slot, over the last [`RECENT_ERRORS_WINDOW`].
#[derive(Debug, Default)]
struct RecentErrors {
    slots: [(AtomicU64, AtomicU64); RECENT_SLOTS],
}

impl RecentErrors {
    fn record(&self, now: u64) {
        let (slot, count) = &self.slots[now as usize % RECENT_SLOTS];
        // Slot numbers start at 1 so that a fresh slot (0) is never current.
        let stamp = now + 1;
        if slot.swap(stamp, Ordering::AcqRel) != stamp {
            count.store(0, Ordering::Release);
        }
        count.fetch_add(1, Ordering::AcqRel);
    }

    fn count(&self, now: u64) -> u64 {
        self.slots
            .iter()
            .filter(|(slot, _)| {
                let stamp = slot.load(Ordering::Acquire);
                stamp != 0 && stamp + RECENT_SLOTS as u64 > now + 1
            })
            .map(|(_, count)| count.load(Ordering::Acquire))
            .sum()
    }
}

mod collectors;
pub(super) mod history;
#[cfg(test)]
mod tests;
mod types;

pub use collectors::health_name;
use collectors::{ConfigSources, ProcessMetrics, SnapshotGauges};
use types::{DurationHistogram, ThreadCounter, ThreadGauge};
