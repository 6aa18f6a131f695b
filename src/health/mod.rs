//! Destination health: passive (traffic-based) and active (probing), and which
//! destinations of a cluster are available.
//!
//! Each destination has two [`HealthState`]s, active and passive, each `Unknown`,
//! `Healthy` or `Unhealthy`; they live in its [`DestinationState`] and survive
//! configuration reloads. A check's state only counts while that check is enabled for
//! the cluster.
//!
//! **Available destinations** ([`available`], used by routing for every request):
//! destinations whose enabled checks are not `Unhealthy`. With
//! `AvailableDestinationsPolicy: HealthyOrPanic` (the default) all destinations are
//! used when none is available; with `HealthyAndUnknown` there is no such fallback
//! (load balancing then answers 503).
//!
//! **Passive health**, `TransportFailureRate` (`HealthCheck.Passive.Enabled`): the
//! [`PassiveHealth`] stage records every forwarded request once its exchange is over
//! (response body finished or failed). A request fails when forwarding failed because of
//! the destination ([`ForwardErrorKind::is_destination_failure`]) or, with
//! `CountServerErrors: true` (fuseway extension), when the destination answered 5xx.
//! A request the client cancelled — before the response head (`RequestCanceled`) or
//! while its body streamed (`ResponseBodyClient`) — counts in the window's total, never
//! as a failure, as in YARP; nothing is recorded for requests that never reached a
//! destination. After each record, a destination with at least 10 requests in the last
//! 60 s and a failure rate of at least 0.3 becomes `Unhealthy`, else `Healthy`. An
//! unhealthy destination goes back to `Unknown` (with an empty window) after
//! `max(ReactivationPeriod (default 60 s), detection window)`; this is checked lazily,
//! by the next [`available`] call or record.
//!
//! | cluster `Metadata` key | meaning | default |
//! |---|---|---|
//! | `TransportFailureRateHealthPolicy.RateLimit` | failure rate limit, in (0, 1] | 0.3 |
//! | `TransportFailureRateHealthPolicy.DetectionWindowSize` | window (fuseway extension) | 60 s |
//! | `TransportFailureRateHealthPolicy.MinimalTotalCountThreshold` | fewest requests judged (fuseway extension) | 10 |
//! | `ConsecutiveFailuresHealthPolicy.Threshold` | active threshold when `Active.Threshold` is absent | 2 |
//!
//! The window is made of 1 s buckets (a tenth of the window when it is shorter than
//! 10 s), so a request leaves it between one window and one window plus a bucket after
//! it ended.
//!
//! **Active health**, `ConsecutiveFailures` (`HealthCheck.Active.Enabled`): an
//! [`ActiveHealthChecker`] probes every destination of such clusters concurrently every
//! `Interval` (15 s), first right away: `GET {Health ?? Address}{Path}{Query}` within
//! `Timeout` (10 s). A 2xx answer makes it `Healthy` and resets its failure count; an
//! error, a timeout or another status counts a failure, and `Threshold` (2) failures in a
//! row make it `Unhealthy` (fewer leave the state as it was). The checker runs only
//! where the application starts it: `ActiveHealthChecker::spawn(state)`.

mod active;
mod passive;
mod settings;

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use crate::config::AvailableDestinationsPolicyName;
use crate::request::{Balanced, Candidates, ForwardErrorKind, ProxyResponse};
use crate::stage::{InPlace, Stage};
use crate::state::{Cluster, DestinationState};

pub use active::ActiveHealthChecker;
pub use settings::{
    ActiveSettings, ClusterHealth, PassiveSettings, DEFAULT_DETECTION_WINDOW,
    DEFAULT_FAILURE_RATE_LIMIT, DEFAULT_INTERVAL, DEFAULT_MINIMAL_TOTAL_COUNT,
    DEFAULT_REACTIVATION_PERIOD, DEFAULT_THRESHOLD, DEFAULT_TIMEOUT, DETECTION_WINDOW_METADATA,
    MINIMAL_TOTAL_COUNT_METADATA, RATE_LIMIT_METADATA, THRESHOLD_METADATA,
};

use passive::PassiveWindow;

/// The destinations of `cluster` that requests may go to, by its
/// `AvailableDestinationsPolicy`. O(1) while none of the cluster's destinations is
/// unhealthy (the common case), else one pass over them. Does not allocate for clusters
/// of up to 128 destinations; reads the clock only when a destination is passively
/// unhealthy.
pub fn available(cluster: &Cluster) -> Candidates {
    let destinations = cluster.destinations();
    let mut candidates = Candidates::all(destinations.len());
    let health = cluster.health();
    let (active, passive) = (health.active.is_some(), health.passive.is_some());
    // The common case in O(1): no destination of the cluster is out of rotation.
    if (!active && !passive) || cluster.state().unhealthy().none() {
        return candidates;
    }
    let mut now = None;
    // One pass over the destinations (not `Candidates::retain`, which searches the set
    // for each next member): two relaxed atomic loads per destination when all is well.
    for (i, destination) in destinations.iter().enumerate() {
        let state = destination.state();
        let out = (active && state.health().active() == HealthState::Unhealthy)
            || (passive
                && passive::refresh(state, || *now.get_or_insert_with(crate::clock::now))
                    == HealthState::Unhealthy);
        if out {
            candidates.remove(i);
        }
    }
    if candidates.is_empty() && health.policy == AvailableDestinationsPolicyName::HealthyOrPanic {
        tracing::trace!(
            cluster = cluster.id(),
            "no healthy destination: using all of them (HealthyOrPanic)"
        );
        return Candidates::all(destinations.len());
    }
    candidates
}

/// The health of a destination as one check sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Not known yet (or no longer: a passive reactivation).
    #[default]
    Unknown,
    /// Working.
    Healthy,
    /// Failing: out of rotation.
    Unhealthy,
}

impl HealthState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => HealthState::Healthy,
            2 => HealthState::Unhealthy,
            _ => HealthState::Unknown,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            HealthState::Unknown => 0,
            HealthState::Healthy => 1,
            HealthState::Unhealthy => 2,
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// How many of a cluster's destinations are unhealthy (actively and passively each
/// count once), kept by the destinations' state changes: while it is zero, [`available`]
/// does not look at each destination.
#[derive(Debug, Default)]
pub(crate) struct UnhealthyCount(AtomicU32);

impl UnhealthyCount {
    /// No destination of the cluster is unhealthy.
    pub(crate) fn none(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 0
    }

    /// Count a state change from `old` to `new`.
    fn change(&self, old: HealthState, new: HealthState) {
        match (old, new) {
            (HealthState::Unhealthy, HealthState::Unhealthy) => {}
            (_, HealthState::Unhealthy) => {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            (HealthState::Unhealthy, _) => {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Health of one destination; lives in its [`DestinationState`] and survives reloads.
#[derive(Debug)]
pub struct DestinationHealth {
    active: AtomicU8,
    passive: AtomicU8,
    consecutive_failures: AtomicU32,
    window: Mutex<PassiveWindow>,
    /// Successful requests recorded without the window's lock, not yet in the window.
    successes: AtomicU64,
    /// Until when (nanoseconds after `created`, plus one; 0: not now) a success may be
    /// recorded without the lock: see `passive::record`.
    quiet_until: AtomicU64,
    created: Instant,
    /// Its cluster's count of unhealthy destinations.
    cluster: Arc<UnhealthyCount>,
}

impl Drop for DestinationHealth {
    fn drop(&mut self) {
        self.cluster.change(self.active(), HealthState::Unknown);
        self.cluster
            .change(self.passive_raw(), HealthState::Unknown);
    }
}

impl DestinationHealth {
    /// The health of a destination of the cluster that keeps `count`.
    pub(crate) fn counted_in(count: Arc<UnhealthyCount>) -> Self {
        DestinationHealth {
            active: AtomicU8::default(),
            passive: AtomicU8::default(),
            consecutive_failures: AtomicU32::default(),
            window: Mutex::default(),
            successes: AtomicU64::default(),
            quiet_until: AtomicU64::default(),
            created: Instant::now(),
            cluster: count,
        }
    }

    /// Its active (probing) state.
    pub fn active(&self) -> HealthState {
        HealthState::from_u8(self.active.load(Ordering::Acquire))
    }

    /// Its passive (traffic) state now: `Unknown` once an unhealthy destination's
    /// reactivation time is over, even before the next request moves it there.
    pub fn passive(&self) -> HealthState {
        self.passive_at(Instant::now())
    }

    /// Its passive state at `now` (see [`passive`](Self::passive)).
    pub fn passive_at(&self, now: Instant) -> HealthState {
        match self.passive_raw() {
            HealthState::Unhealthy if self.lock_window().reactivate_at_due(now) => {
                HealthState::Unknown
            }
            state => state,
        }
    }

    /// Failed probes in a row so far.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    /// (failed, total) requests in the passive detection window, as of the last
    /// record (buckets leave the window when the next request is recorded).
    pub fn passive_counts(&self) -> (u64, u64) {
        let (failed, total) = self.lock_window().counts();
        (failed, total + self.successes.load(Ordering::Relaxed))
    }

    fn passive_raw(&self) -> HealthState {
        HealthState::from_u8(self.passive.load(Ordering::Acquire))
    }

    fn store_passive(&self, state: HealthState) {
        self.store(&self.passive, state);
    }

    fn store_active(&self, state: HealthState) {
        self.store(&self.active, state);
    }

    fn store(&self, slot: &AtomicU8, state: HealthState) {
        let old = HealthState::from_u8(slot.swap(state.to_u8(), Ordering::AcqRel));
        self.cluster.change(old, state);
    }

    fn lock_window(&self) -> MutexGuard<'_, PassiveWindow> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A passive-health observation waiting for the exchange to end: recorded exactly once,
/// after the response body has finished and the concurrency counters are released;
/// a response the client abandoned counts in the total, not as a failure (as in YARP).
///
/// It is made for the destination of the exchange that keeps it (no reference of its
/// own: one reference-count increment and decrement less per request).
#[derive(Debug)]
pub struct PassiveRecord {
    settings: PassiveSettings,
    /// The destination answered 5xx and the cluster counts server errors.
    server_error: bool,
}

impl PassiveRecord {
    /// Record the exchange's result: `Ok(())` when the body completed, else the error.
    pub(crate) fn complete(
        self,
        destination: &DestinationState,
        result: Result<(), ForwardErrorKind>,
    ) {
        self.complete_at(destination, crate::clock::now(), result);
    }

    fn complete_at(
        self,
        destination: &DestinationState,
        now: Instant,
        result: Result<(), ForwardErrorKind>,
    ) {
        let failed =
            self.server_error || result.is_err_and(ForwardErrorKind::is_destination_failure);
        passive::record(destination, now, failed, &self.settings);
    }

    /// Record a request to destination `index` of `cluster` that the client cancelled
    /// before its response head: in the window's total, not a failure (YARP's
    /// `RequestCanceled`). Nothing when the cluster has no passive health.
    pub(crate) fn cancelled(cluster: &Cluster, index: usize) {
        if let Some(settings) = cluster.health().passive() {
            let record = PassiveRecord {
                settings: *settings,
                server_error: false,
            };
            let destination = cluster.destinations()[index].state();
            record.complete(destination, Err(ForwardErrorKind::RequestCanceled));
        }
    }
}

/// The passive-health stage: arms a [`PassiveRecord`] on every forwarded response of a
/// cluster with passive health enabled, for the cluster and destination the request was
/// finally sent to.
#[derive(Debug, Clone, Default)]
pub struct PassiveHealth {
    _private: (),
}

impl PassiveHealth {
    /// The passive-health stage.
    pub fn new() -> Self {
        PassiveHealth::default()
    }

    fn arm(response: &mut ProxyResponse) {
        let outcome = &response.outcome;
        let (Some(cluster), Some(_)) = (outcome.cluster(), outcome.destination_index()) else {
            return; // never sent to a destination
        };
        let Some(settings) = cluster.health().passive() else {
            return;
        };
        let record = PassiveRecord {
            settings: *settings,
            server_error: settings.count_server_errors
                && outcome.error.is_none()
                && response.response.status().is_server_error(),
        };
        record_when_over(response, record);
    }
}

/// Record `record` once the exchange is over: when the streamed body ends or fails,
/// after the counters are released (as a non-failure if the client abandons it); at
/// once when there is no streamed body; for the outcome's destination (nothing without
/// one).
fn record_when_over(response: &mut ProxyResponse, record: PassiveRecord) {
    let ProxyResponse { response, outcome } = response;
    match response.body_mut().exchange_mut() {
        Some(exchange) => exchange.on_complete(record),
        None => {
            if let Some(destination) = outcome.destination_state() {
                let result = match &outcome.error {
                    Some(e) => Err(e.kind()),
                    None => Ok(()),
                };
                record.complete(destination, result);
            }
        }
    }
}

impl<B> InPlace<Balanced<B>> for PassiveHealth {
    /// [`Stage::on_request`] on the request where it lies (the default fused pipeline
    /// calls this): marks the request, so that the forwarder records it as a
    /// non-failure if the client cancels it before the response head.
    #[inline]
    fn on_request_in_place(&self, request: &mut Balanced<B>) -> Result<(), ProxyResponse> {
        request.context.arm_passive();
        Ok(())
    }
}

impl<B> Stage<Balanced<B>> for PassiveHealth {
    type Out = Balanced<B>;
    type State = ();

    fn on_request(&self, mut request: Balanced<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
        self.on_request_in_place(&mut request)?;
        Ok((request, ()))
    }

    fn on_response(&self, _: (), response: &mut ProxyResponse) {
        PassiveHealth::arm(response);
    }
}

impl crate::state::ClusterState {
    /// How many of its destinations are unhealthy (kept by the health stages).
    pub(crate) fn unhealthy(&self) -> &UnhealthyCount {
        static NONE_KEPT: std::sync::LazyLock<Arc<UnhealthyCount>> =
            std::sync::LazyLock::new(Default::default);
        self.data::<Arc<UnhealthyCount>>()
            .unwrap_or_else(|| &NONE_KEPT)
    }
}

impl DestinationState {
    /// Its health, active and passive (kept by the health stages).
    pub fn health(&self) -> &DestinationHealth {
        static NONE_KEPT: std::sync::LazyLock<DestinationHealth> =
            std::sync::LazyLock::new(|| DestinationHealth::counted_in(Default::default()));
        self.data::<DestinationHealth>()
            .unwrap_or_else(|| &NONE_KEPT)
    }
}

/// What the health stages keep for every new cluster: the count of its unhealthy
/// destinations.
pub(crate) fn fill_cluster_state(data: &mut crate::state::DataSet) {
    data.insert(Arc::new(UnhealthyCount::default()));
}

/// What the health stages keep for every new destination: its health, counted in its
/// cluster's unhealthy destinations.
pub(crate) fn fill_destination_state(
    cluster: &crate::state::ClusterState,
    data: &mut crate::state::DataSet,
) {
    let count = cluster
        .data::<Arc<UnhealthyCount>>()
        .cloned()
        .unwrap_or_default();
    data.insert(DestinationHealth::counted_in(count));
}

#[cfg(test)]
mod tests;
