//! The metrics registry and the per-route handles cached in each snapshot.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::health::HealthState;
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
    requests: Family<RequestLabels, Counter>,
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

/// The providers' statuses, also a collector of their metrics.
#[derive(Debug, Clone, Default)]
struct ConfigSources(Arc<Mutex<Vec<ConfigSourceStatus>>>);

impl Collector for ConfigSources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let sources = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if sources.is_empty() {
            return Ok(());
        }
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_config_source_info",
                "1 for each configuration provider, labelled with its source and the version the running configuration holds (etcd revision, file digest)",
                None,
                MetricType::Gauge,
            )?;
            for s in &sources {
                ConstGauge::new(1).encode(m.encode_family(&[
                    ("source", s.source.as_str()),
                    ("version", s.version.as_str()),
                ])?)?;
            }
        }
        let rows = sources
            .iter()
            .map(|s| (s.source.as_str(), u64::from(s.error.is_some())));
        encode_rows(
            &mut encoder,
            (
                "fuseway_config_source_error",
                "1 while a configuration provider's last read failed (the previous configuration keeps serving), else 0",
            ),
            MetricType::Gauge,
            "source",
            rows,
        )
    }
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
        let requests = Family::<RequestLabels, Counter>::default();
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

    pub(crate) fn enter(&self) -> InFlight {
        self.in_flight.enter()
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
        _ => "Other",
    }
}

/// Decrements the in-flight gauge when dropped.
#[derive(Debug)]
pub(crate) struct InFlight(ThreadGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.add(-1);
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
    statuses: [OnceLock<(u16, Counter)>; STATUS_SLOTS],
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
    fn count(&self, family: &Family<RequestLabels, Counter>, status: u16, inc: bool) {
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

/// Destination gauges read from the current snapshot at scrape time.
#[derive(Debug)]
struct SnapshotGauges(Arc<Snapshot>);

/// A health state's name on the status page and in metrics.
pub fn health_name(state: HealthState) -> &'static str {
    match state {
        HealthState::Unknown => "unknown",
        HealthState::Healthy => "healthy",
        HealthState::Unhealthy => "unhealthy",
    }
}

impl Collector for SnapshotGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let clusters = self.0.clusters();
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_destination_health",
                "Health of each destination per check (active, passive): 1 for its current state",
                None,
                MetricType::Gauge,
            )?;
            for c in clusters {
                for d in c.destinations() {
                    let health = d.state().health();
                    for (check, current) in
                        [("active", health.active()), ("passive", health.passive())]
                    {
                        for state in [
                            HealthState::Unknown,
                            HealthState::Healthy,
                            HealthState::Unhealthy,
                        ] {
                            let labels = [
                                ("cluster", c.id()),
                                ("destination", d.id()),
                                ("check", check),
                                ("state", health_name(state)),
                            ];
                            ConstGauge::new(i64::from(current == state))
                                .encode(m.encode_family(&labels)?)?;
                        }
                    }
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_destination_available",
                "1 when the destination is among its cluster's available destinations now",
                None,
                MetricType::Gauge,
            )?;
            for c in clusters {
                let available = crate::health::available(c);
                for (i, d) in c.destinations().iter().enumerate() {
                    let labels = [("cluster", c.id()), ("destination", d.id())];
                    ConstGauge::new(i64::from(available.contains(i)))
                        .encode(m.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_destination_requests_in_flight",
                "Requests being forwarded to the destination now, response bodies included",
                None,
                MetricType::Gauge,
            )?;
            for c in clusters {
                for d in c.destinations() {
                    let labels = [("cluster", c.id()), ("destination", d.id())];
                    ConstGauge::new(d.state().concurrent_requests() as i64)
                        .encode(m.encode_family(&labels)?)?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "fuseway_cluster_requests_in_flight",
            "Requests being forwarded to the cluster now, response bodies included",
            None,
            MetricType::Gauge,
        )?;
        for c in clusters {
            ConstGauge::new(c.state().concurrent_requests() as i64)
                .encode(m.encode_family(&[("cluster", c.id())])?)?;
        }
        Ok(())
    }
}

/// `fuseway_build_info`, the process's client connections and its own metrics (the
/// names Prometheus client libraries use), read at scrape time; the `process_` ones on
/// Linux only, from `/proc/self`.
#[derive(Debug)]
struct ProcessMetrics {
    /// When the metrics were created (at the process's start, in the binary).
    start: std::time::SystemTime,
}

impl Collector for ProcessMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_build_info",
                "1, labelled with the version of fuseway that runs",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(1)
                .encode(m.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?)?;
        }
        use crate::forwarding::pool::{pool_totals, PoolTotals};
        use crate::server::counts::{connections, PROTOCOLS};
        let by_protocol = |value: fn((u64, i64)) -> u64| {
            PROTOCOLS
                .iter()
                .enumerate()
                .map(move |(i, protocol)| (*protocol, value(connections(i))))
        };
        encode_rows(
            &mut encoder,
            (
                "fuseway_connections_accepted",
                "Client connections accepted by this process, by protocol (once known)",
            ),
            MetricType::Counter,
            "protocol",
            by_protocol(|(accepted, _)| accepted),
        )?;
        encode_rows(
            &mut encoder,
            (
                "fuseway_connections_open",
                "Client connections open now in this process, by protocol",
            ),
            MetricType::Gauge,
            "protocol",
            by_protocol(|(_, open)| open.max(0) as u64),
        )?;
        let pools = pool_totals();
        type Field = fn(&PoolTotals) -> u64;
        let pool_metrics: [(&str, &str, MetricType, Field); 5] = [
            (
                "fuseway_pool_connects",
                "Connections opened to a destination address, by all workers' pools",
                MetricType::Counter,
                |t| t.connects,
            ),
            (
                "fuseway_pool_connect_errors",
                "Connections to a destination address that failed to open",
                MetricType::Counter,
                |t| t.connect_errors,
            ),
            (
                "fuseway_pool_reuses",
                "Requests sent on an idle HTTP/1.1 connection taken from a pool",
                MetricType::Counter,
                |t| t.reuses,
            ),
            (
                "fuseway_pool_idle_connections",
                "HTTP/1.1 connections idle in the pools now",
                MetricType::Gauge,
                |t| t.idle,
            ),
            (
                "fuseway_pool_open_connections",
                "Connections open to a destination address now, idle or in use",
                MetricType::Gauge,
                |t| t.open,
            ),
        ];
        for (name, help, kind, field) in pool_metrics {
            let rows = pools
                .iter()
                .map(|(address, t)| (address.as_str(), field(t)));
            encode_rows(&mut encoder, (name, help), kind, "address", rows)?;
        }
        let start = self
            .start
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let gauges = [
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                Some(start.as_secs_f64()),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                proc_self::resident_bytes(),
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                proc_self::open_fds(),
            ),
            (
                "process_max_fds",
                "Most file descriptors the process may open",
                proc_self::max_fds(),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                ConstGauge::new(value).encode(m)?;
            }
        }
        if let Some(seconds) = proc_self::cpu_seconds() {
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                MetricType::Counter,
            )?;
            prometheus_client::metrics::counter::ConstCounter::new(seconds).encode(m)?;
        }
        Ok(())
    }
}

/// One family with one label (`label`), a row per value of it: counters or gauges as
/// `kind` says.
fn encode_rows<'a>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    kind: MetricType,
    label: &str,
    rows: impl Iterator<Item = (&'a str, u64)>,
) -> std::fmt::Result {
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    for (value, n) in rows {
        let labels = [(label, value)];
        match kind {
            MetricType::Counter => prometheus_client::metrics::counter::ConstCounter::new(n)
                .encode(m.encode_family(&labels)?)?,
            _ => ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX))
                .encode(m.encode_family(&labels)?)?,
        }
    }
    Ok(())
}

/// The process's figures from `/proc/self` (`None` where there is none).
mod proc_self {
    /// Clock ticks per second in `/proc` (`USER_HZ`: 100 on every Linux architecture
    /// fuseway builds for).
    const TICKS: f64 = 100.0;

    fn read(file: &str) -> Option<String> {
        std::fs::read_to_string(format!("/proc/self/{file}")).ok()
    }

    /// `VmRSS` of `/proc/self/status`.
    pub(super) fn resident_bytes() -> Option<f64> {
        let status = read("status")?;
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024.0)
    }

    pub(super) fn open_fds() -> Option<f64> {
        Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
    }

    /// The soft limit of `Max open files` in `/proc/self/limits`.
    pub(super) fn max_fds() -> Option<f64> {
        let limits = read("limits")?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        line["Max open files".len()..]
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// `utime` + `stime` of `/proc/self/stat` (the 14th and 15th fields, counted after
    /// the command name's closing parenthesis, which may itself hold spaces).
    pub(super) fn cpu_seconds() -> Option<f64> {
        let stat = read("stat")?;
        let after_name = &stat[stat.rfind(')')? + 2..];
        let mut fields = after_name.split_whitespace().skip(11);
        let user: f64 = fields.next()?.parse().ok()?;
        let system: f64 = fields.next()?.parse().ok()?;
        Some((user + system) / TICKS)
    }
}

pub(super) mod history;
#[cfg(test)]
mod tests;
mod types;

use types::{DurationHistogram, ThreadGauge};
