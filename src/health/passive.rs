//! Passive health, `TransportFailureRate`: the failure rate of the requests proxied to a
//! destination over a sliding window.
//!
//! The window is a queue of buckets (1 s wide by default) with running totals, so a
//! record is O(1) amortised and, once the queue has grown to the window's size, never
//! allocates. Every function takes `now`, so the arithmetic is tested without sleeping.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::settings::PassiveSettings;
use super::HealthState;
use crate::state::DestinationState;

/// The passive-health bookkeeping of one destination (behind its mutex).
#[derive(Debug, Default)]
pub(crate) struct PassiveWindow {
    /// Closed buckets, oldest first.
    closed: VecDeque<Bucket>,
    /// The bucket being filled.
    open: Option<Bucket>,
    /// Requests in `closed` and `open`.
    total: u64,
    /// Failures in `closed` and `open`.
    failed: u64,
    /// When an unhealthy destination goes back to unknown.
    reactivate_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Every request of the bucket happened before this.
    ends_at: Instant,
    total: u64,
    failed: u64,
}

impl PassiveWindow {
    /// Count one request at `now` and drop the buckets that left the window.
    fn add(&mut self, now: Instant, failed: bool, settings: &PassiveSettings) {
        if let Some(open) = self.open.filter(|b| now >= b.ends_at) {
            self.closed.push_back(open);
            self.open = None;
        }
        let open = self.open.get_or_insert(Bucket {
            ends_at: now + settings.bucket(),
            total: 0,
            failed: 0,
        });
        let failed = u64::from(failed);
        open.total += 1;
        open.failed += failed;
        self.total += 1;
        self.failed += failed;
        // A bucket leaves once its newest request is older than the window.
        while let Some(oldest) = self.closed.front() {
            if now < oldest.ends_at + settings.detection_window {
                break;
            }
            self.total -= oldest.total;
            self.failed -= oldest.failed;
            self.closed.pop_front();
        }
    }

    /// Healthy, or unhealthy when there are enough requests and the failure rate is at
    /// or above the limit.
    fn verdict(&self, settings: &PassiveSettings) -> HealthState {
        if self.total > 0 && self.total >= u64::from(settings.minimal_total_count) {
            let rate = self.failed as f64 / self.total as f64;
            if rate >= settings.failure_rate_limit {
                return HealthState::Unhealthy;
            }
        }
        HealthState::Healthy
    }

    /// Forget every request (the destination starts over after a reactivation).
    fn clear(&mut self) {
        self.closed.clear();
        self.open = None;
        self.total = 0;
        self.failed = 0;
        self.reactivate_at = None;
    }

    /// Whether an unhealthy destination's reactivation time is over at `now` (never
    /// when none is scheduled).
    pub(crate) fn reactivate_at_due(&self, now: Instant) -> bool {
        self.reactivate_at.is_some_and(|at| now >= at)
    }

    /// (failures, requests) in the window.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.failed, self.total)
    }

    /// Until when no bucket opens or leaves the window (the open bucket's end, or an
    /// earlier closed bucket's departure); `None` without an open bucket.
    fn stable_until(&self, settings: &PassiveSettings) -> Option<Instant> {
        let open = self.open?.ends_at;
        Some(match self.closed.front() {
            Some(oldest) => open.min(oldest.ends_at + settings.detection_window),
            None => open,
        })
    }

    /// Count `n` successes recorded without the lock into the open bucket (where they
    /// happened: the lock-free path is closed before the bucket ends).
    fn add_successes(&mut self, n: u64) {
        if let Some(open) = self.open.as_mut() {
            open.total += n;
            self.total += n;
        }
    }
}

/// `at` as nanoseconds after `created`, plus one (so that 0 means "never").
fn since(created: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(created).as_nanos())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Back to unknown when the reactivation time of an unhealthy destination is over.
/// Returns the state after that.
fn reactivate_if_due(
    dest: &DestinationState,
    window: &mut PassiveWindow,
    now: Instant,
) -> HealthState {
    let health = dest.health();
    let state = health.passive_raw();
    if state == HealthState::Unhealthy && window.reactivate_at_due(now) {
        window.clear();
        health.store_passive(HealthState::Unknown);
        tracing::info!(
            cluster = dest.cluster_id(),
            destination = dest.id(),
            "passive health: reactivation period over, destination is back in rotation (Unknown)"
        );
        return HealthState::Unknown;
    }
    state
}

/// The passive state of `dest`, reactivating it first if its time has come. Only
/// locks when the destination is unhealthy; `now` is only read then.
pub(crate) fn refresh(dest: &DestinationState, now: impl FnOnce() -> Instant) -> HealthState {
    let health = dest.health();
    match health.passive_raw() {
        HealthState::Unhealthy => reactivate_if_due(dest, &mut health.lock_window(), now()),
        state => state,
    }
}

/// Record one proxied request of `dest` that ended at `now`, and move its passive state
/// to the verdict (logging transitions). Returns the new state.
///
/// A success on a healthy destination whose window already holds the minimal count
/// cannot change the verdict (it only lowers the failure rate) as long as no bucket
/// opens or leaves the window: then it is only counted, with one atomic addition and
/// no lock, and joins the window at the next locked record. Every other record takes
/// the window's lock. (A reload that tightens the policy is judged from the next locked
/// record on: at the latest when the open bucket ends.)
pub(crate) fn record(
    dest: &DestinationState,
    now: Instant,
    failed: bool,
    settings: &PassiveSettings,
) -> HealthState {
    let health = dest.health();
    let at = since(health.created, now);
    if !failed && at < health.quiet_until.load(Ordering::Acquire) {
        health.successes.fetch_add(1, Ordering::Relaxed);
        return HealthState::Healthy;
    }
    let mut window = health.lock_window();
    window.add_successes(health.successes.swap(0, Ordering::Relaxed));
    let previous = reactivate_if_due(dest, &mut window, now);
    window.add(now, failed, settings);
    let verdict = window.verdict(settings);
    let quiet = match window.stable_until(settings) {
        Some(until)
            if verdict == HealthState::Healthy
                && window.total >= u64::from(settings.minimal_total_count) =>
        {
            since(health.created, until)
        }
        _ => 0,
    };
    health.quiet_until.store(quiet, Ordering::Release);
    if verdict != previous {
        health.store_passive(verdict);
        if verdict == HealthState::Unhealthy {
            let period = settings.reactivation();
            window.reactivate_at = Some(now + period);
            let (failures, requests) = window.counts();
            tracing::warn!(
                cluster = dest.cluster_id(),
                destination = dest.id(),
                failures,
                requests,
                reactivation = ?period,
                "passive health: destination is Unhealthy (failure rate over the limit); out of rotation until reactivation"
            );
        } else {
            window.reactivate_at = None;
            tracing::info!(
                cluster = dest.cluster_id(),
                destination = dest.id(),
                from = ?previous,
                to = ?verdict,
                "passive health: destination state changed"
            );
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn dest() -> DestinationState {
        crate::pipeline::builtins::destination_state()
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn settings() -> PassiveSettings {
        PassiveSettings::default()
    }

    /// Record `n` requests at `at`, `failures` of them failed.
    fn many(d: &DestinationState, at: Instant, n: u32, failures: u32, s: &PassiveSettings) {
        for i in 0..n {
            record(d, at, i < failures, s);
        }
    }

    #[test]
    fn below_the_minimal_count_never_unhealthy() {
        let d = dest();
        let s = settings();
        let t0 = Instant::now();
        for i in 0..9 {
            assert_eq!(
                record(&d, t0 + secs(i as f64 * 0.1), true, &s),
                HealthState::Healthy,
                "{i} failures out of {i} is below the minimal count"
            );
        }
        assert_eq!(d.health().passive_at(t0), HealthState::Healthy);
        assert_eq!(record(&d, t0 + secs(1.0), true, &s), HealthState::Unhealthy);
    }

    #[test]
    fn unknown_until_the_first_record() {
        let d = dest();
        assert_eq!(d.health().passive(), HealthState::Unknown);
        record(&d, Instant::now(), false, &settings());
        assert_eq!(d.health().passive(), HealthState::Healthy);
    }

    #[test]
    fn rate_exactly_at_the_limit_is_unhealthy() {
        let s = settings();
        let t0 = Instant::now();
        // 2 of 10 (0.2): healthy.
        let d = dest();
        many(&d, t0, 10, 0, &s);
        assert_eq!(record(&d, t0, true, &s), HealthState::Healthy); // 1/11
        assert_eq!(record(&d, t0, true, &s), HealthState::Healthy); // 2/12
        assert_eq!(record(&d, t0, true, &s), HealthState::Healthy); // 3/13 = 0.23
                                                                    // 3 of 10 (0.3 exactly): unhealthy; successes first, so only the last decides.
        let d = dest();
        many(&d, t0, 7, 0, &s);
        assert_eq!(record(&d, t0, true, &s), HealthState::Healthy);
        assert_eq!(record(&d, t0, true, &s), HealthState::Healthy);
        assert_eq!(record(&d, t0, true, &s), HealthState::Unhealthy);
        // With another limit from metadata: 1 of 2 at 0.5.
        let s = PassiveSettings {
            failure_rate_limit: 0.5,
            minimal_total_count: 2,
            ..settings()
        };
        let d = dest();
        assert_eq!(record(&d, t0, false, &s), HealthState::Healthy);
        assert_eq!(record(&d, t0, true, &s), HealthState::Unhealthy);
    }

    #[test]
    fn old_buckets_expire_after_the_window() {
        let s = settings();
        let t0 = Instant::now();
        let d = dest();
        many(&d, t0, 9, 9, &s);
        // 61 s later the 9 failures have left the 60 s window: 1 of 1, below the minimum.
        assert_eq!(record(&d, t0 + secs(61.0), true, &s), HealthState::Healthy);
        assert_eq!(d.health().lock_window().counts(), (1, 1));
        // Still inside the window: they count.
        let d = dest();
        many(&d, t0, 9, 9, &s);
        assert_eq!(
            record(&d, t0 + secs(59.0), true, &s),
            HealthState::Unhealthy
        );
        // Successes leave the window too: 20 successes at t0, then failures much later.
        let d = dest();
        many(&d, t0, 20, 0, &s);
        many(&d, t0 + secs(30.0), 8, 8, &s);
        assert_eq!(d.health().lock_window().counts(), (8, 28));
        assert_eq!(d.health().passive_at(t0), HealthState::Healthy);
        // At t0 + 62 the 20 successes are gone: 10 failures of 10.
        many(&d, t0 + secs(62.0), 2, 2, &s);
        assert_eq!(d.health().lock_window().counts(), (10, 10));
        assert_eq!(d.health().passive_at(t0), HealthState::Unhealthy);
    }

    #[test]
    fn the_window_spreads_over_buckets() {
        let s = settings();
        let t0 = Instant::now();
        let d = dest();
        // One failure every second for 100 s: at most ~61 in the window at any time.
        for i in 0..100 {
            record(&d, t0 + secs(f64::from(i)), true, &s);
            let (_, total) = d.health().lock_window().counts();
            assert!(total <= 62, "{total} requests counted at {i} s");
        }
        let window = d.health().lock_window();
        assert!(window.closed.len() <= 62);
    }

    #[test]
    fn reactivation_after_max_of_period_and_window() {
        let t0 = Instant::now();
        for (period, window, expected) in [
            (5.0, 60.0, 60.0),    // the window is longer: its length wins
            (120.0, 60.0, 120.0), // the period is longer
            (0.5, 2.0, 2.0),
        ] {
            let s = PassiveSettings {
                reactivation_period: secs(period),
                detection_window: secs(window),
                ..settings()
            };
            assert_eq!(s.reactivation(), secs(expected));
            let d = dest();
            many(&d, t0, 10, 10, &s);
            let h = d.health();
            assert_eq!(h.passive_at(t0), HealthState::Unhealthy);
            let before = t0 + secs(expected) - Duration::from_millis(1);
            assert_eq!(
                h.passive_at(before),
                HealthState::Unhealthy,
                "{period}/{window}"
            );
            assert_eq!(refresh(&d, || before), HealthState::Unhealthy);
            let after = t0 + secs(expected);
            assert_eq!(
                h.passive_at(after),
                HealthState::Unknown,
                "{period}/{window}"
            );
            // `passive_at` only looks; `refresh` makes the move.
            assert_eq!(h.passive_raw(), HealthState::Unhealthy);
            assert_eq!(refresh(&d, || after), HealthState::Unknown);
            assert_eq!(h.passive_raw(), HealthState::Unknown);
            assert_eq!(
                h.lock_window().counts(),
                (0, 0),
                "a reactivated destination starts over"
            );
        }
    }

    #[test]
    fn reactivation_happens_on_the_next_record_too() {
        let s = settings();
        let t0 = Instant::now();
        let d = dest();
        many(&d, t0, 10, 10, &s);
        // More failures while unhealthy do not postpone the reactivation.
        many(&d, t0 + secs(30.0), 5, 5, &s);
        // At 60 s: back to unknown, then this one failure of one is judged: healthy.
        assert_eq!(record(&d, t0 + secs(60.0), true, &s), HealthState::Healthy);
        assert_eq!(d.health().lock_window().counts(), (1, 1));
    }

    #[test]
    fn successes_on_a_judged_healthy_destination_skip_the_lock() {
        let s = settings();
        let t0 = Instant::now();
        let d = dest();
        let h = d.health();
        many(&d, t0, 10, 0, &s);
        assert_eq!(
            h.successes.load(Ordering::Relaxed),
            0,
            "below the minimal count"
        );
        many(&d, t0, 5, 0, &s);
        assert_eq!(h.successes.load(Ordering::Relaxed), 5);
        assert_eq!(h.lock_window().counts(), (0, 10));
        assert_eq!(h.passive_counts(), (0, 15));
        // A failure takes the lock and brings them into the window.
        assert_eq!(record(&d, t0, true, &s), HealthState::Healthy);
        assert_eq!(h.lock_window().counts(), (1, 16));
        assert_eq!(h.successes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lock_free_successes_leave_the_window_with_their_bucket() {
        let s = settings();
        let t0 = Instant::now();
        let d = dest();
        // 5 of them without the lock.
        many(&d, t0, 15, 0, &s);
        // The bucket of t0 ends at t0 + 1 s: this one takes the lock and closes it.
        record(&d, t0 + secs(1.0), false, &s);
        assert_eq!(d.health().lock_window().counts(), (0, 16));
        // At t0 + 61 s the bucket of t0 has left the window, all 15 with it.
        record(&d, t0 + secs(61.0), true, &s);
        assert_eq!(d.health().passive_counts(), (1, 2));
    }

    /// The verdicts and counts of `record` against the window alone, locked for every
    /// request (the reference), over a random sequence of successes and failures.
    #[test]
    fn the_lock_free_path_changes_no_verdict() {
        let s = PassiveSettings {
            // Buckets of 50 ms; a bad phase (~2 s) sees several reactivations.
            detection_window: secs(0.5),
            reactivation_period: secs(0.5),
            ..settings()
        };
        let t0 = Instant::now();
        let mut rng = fastrand::Rng::with_seed(7);
        let d = dest();
        let mut reference = PassiveWindow::default();
        let mut state = HealthState::Unknown;
        let mut now = t0;
        let mut lock_free = 0;
        for i in 0..20_000 {
            now += Duration::from_micros(rng.u64(0..2_000));
            // Phases of mostly successes and of many failures.
            let failed = rng.f64() < if (i / 2_000) % 2 == 0 { 0.05 } else { 0.6 };
            if state == HealthState::Unhealthy && reference.reactivate_at_due(now) {
                reference.clear();
                state = HealthState::Unknown;
            }
            reference.add(now, failed, &s);
            let verdict = reference.verdict(&s);
            if verdict != state {
                state = verdict;
                reference.reactivate_at =
                    (verdict == HealthState::Unhealthy).then(|| now + s.reactivation());
            }
            let before = d.health().successes.load(Ordering::Relaxed);
            assert_eq!(record(&d, now, failed, &s), verdict, "request {i}");
            lock_free += u64::from(d.health().successes.load(Ordering::Relaxed) > before);
            assert_eq!(
                d.health().passive_counts(),
                reference.counts(),
                "request {i}"
            );
        }
        assert!(lock_free > 5_000, "{lock_free} requests without the lock");
    }

    #[test]
    fn refresh_reads_the_clock_only_for_unhealthy_destinations() {
        let d = dest();
        let s = settings();
        assert_eq!(
            refresh(&d, || panic!("no clock needed")),
            HealthState::Unknown
        );
        record(&d, Instant::now(), false, &s);
        assert_eq!(
            refresh(&d, || panic!("no clock needed")),
            HealthState::Healthy
        );
    }

    #[test]
    fn no_allocation_after_warm_up() {
        let s = settings();
        let t0 = Instant::now();
        let d = dest();
        for i in 0..200 {
            record(&d, t0 + secs(f64::from(i)), i % 2 == 0, &s);
        }
        let capacity = d.health().lock_window().closed.capacity();
        for i in 0..2000 {
            record(&d, t0 + secs(200.0 + f64::from(i) * 0.5), i % 2 == 0, &s);
        }
        assert_eq!(d.health().lock_window().closed.capacity(), capacity);
    }
}
