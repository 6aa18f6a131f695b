//! The recent past, for the status page's charts: at each sample (every 2 s in the
//! binary), per route and per cluster, the requests per second, p50 and p99 latency and
//! share of 5xx answers since the sample before, for the last [`POINTS`] samples.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use super::{RouteTelemetry, Target, DURATION_BUCKETS};
use crate::state::Snapshot;

/// Samples kept per series (5 minutes at one every 2 s).
pub const POINTS: usize = 150;

/// Series with points kept per kind (routes, clusters): the first ones to see traffic.
/// The others keep only their last counts (so they can start when one of these goes).
const MAX_SERIES: usize = 200;

const BUCKETS: usize = DURATION_BUCKETS.len() + 1;

/// One sample of a series.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Point {
    /// Requests answered per second.
    pub rps: f32,
    /// Median time to the response headers, in ms (estimated within its histogram
    /// bucket); `None` without requests.
    pub p50_ms: Option<f32>,
    /// 99th percentile, in ms.
    pub p99_ms: Option<f32>,
    /// Share of the answers that were 5xx, in percent.
    pub errors_pct: f32,
}

/// Cumulative counts of a route or cluster.
#[derive(Debug, Clone, Copy)]
struct Counts {
    buckets: [u64; BUCKETS],
    errors: u64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            buckets: [0; BUCKETS],
            errors: 0,
        }
    }
}

impl Counts {
    fn add(&mut self, target: &Target) {
        for (sum, n) in self.buckets.iter_mut().zip(target.duration.counts()) {
            *sum += n;
        }
        self.errors += target
            .statuses
            .iter()
            .filter_map(|slot| slot.get())
            .filter(|(status, _)| *status >= 500)
            .map(|(_, counter)| counter.get())
            .sum::<u64>();
    }
}

#[derive(Debug, Default)]
struct Series {
    last: Counts,
    points: VecDeque<Point>,
}

/// The series of every route and cluster (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct History(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    last_at: Option<Instant>,
    routes: HashMap<Arc<str>, Series>,
    clusters: HashMap<Arc<str>, Series>,
}

/// A kind's series with points, for the status page: (id, points), the busiest first.
pub type Charts = Vec<(Arc<str>, Vec<Point>)>;

impl History {
    /// Take a sample of `snapshot`'s routes and clusters at `now`.
    pub(crate) fn sample(&self, snapshot: &Snapshot, now: Instant) {
        let mut routes: HashMap<Arc<str>, Counts> = HashMap::new();
        let mut clusters: HashMap<Arc<str>, Counts> = HashMap::new();
        for route in snapshot.routes() {
            let telemetry: &RouteTelemetry = route.telemetry();
            let Some(targets) = telemetry.0.as_ref() else {
                continue;
            };
            let mut counts = Counts::default();
            let made = targets.targets.iter().filter_map(|slot| slot.get());
            for target in made.chain(targets.early.get()) {
                counts.add(target);
                if !target.labels.cluster.is_empty() {
                    clusters
                        .entry(target.labels.cluster.clone())
                        .or_default()
                        .add(target);
                }
            }
            routes.insert(targets.route.clone(), counts);
        }
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let seconds = inner
            .last_at
            .map(|at| now.saturating_duration_since(at).as_secs_f64());
        inner.last_at = Some(now);
        advance(&mut inner.routes, routes, seconds);
        advance(&mut inner.clusters, clusters, seconds);
    }

    /// The routes' and the clusters' series that have points.
    pub(crate) fn charts(&self) -> (Charts, Charts) {
        let inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (charted(&inner.routes), charted(&inner.clusters))
    }
}

/// Move every series to its counts now (`seconds` after the last sample; `None`: the
/// first sample, which only sets the counts); series no longer counted go.
fn advance(
    series: &mut HashMap<Arc<str>, Series>,
    now: HashMap<Arc<str>, Counts>,
    seconds: Option<f64>,
) {
    series.retain(|id, _| now.contains_key(id));
    let mut charted = series.values().filter(|s| !s.points.is_empty()).count();
    for (id, counts) in now {
        let s = series.entry(id).or_default();
        let previous = std::mem::replace(&mut s.last, counts);
        let Some(seconds) = seconds.filter(|s| *s > 0.0) else {
            continue;
        };
        let delta: [u64; BUCKETS] =
            std::array::from_fn(|i| counts.buckets[i].saturating_sub(previous.buckets[i]));
        let requests: u64 = delta.iter().sum();
        if s.points.is_empty() && (requests == 0 || charted >= MAX_SERIES) {
            continue;
        }
        if s.points.is_empty() {
            charted += 1;
        }
        let errors = counts.errors.saturating_sub(previous.errors);
        s.points.push_back(Point {
            rps: (requests as f64 / seconds) as f32,
            p50_ms: quantile(&delta, requests, 0.5),
            p99_ms: quantile(&delta, requests, 0.99),
            errors_pct: if requests == 0 {
                0.0
            } else {
                (errors as f64 * 100.0 / requests as f64) as f32
            },
        });
        if s.points.len() > POINTS {
            s.points.pop_front();
        }
        // A series whose window holds no request any more stops being charted.
        if s.points.iter().all(|p| p.rps == 0.0) {
            s.points.clear();
            charted -= 1;
        }
    }
}

fn charted(series: &HashMap<Arc<str>, Series>) -> Charts {
    let mut out: Vec<(Arc<str>, Vec<Point>, f32)> = series
        .iter()
        .filter(|(_, s)| !s.points.is_empty())
        .map(|(id, s)| {
            let total = s.points.iter().map(|p| p.rps).sum();
            (id.clone(), s.points.iter().copied().collect(), total)
        })
        .collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    out.into_iter()
        .map(|(id, points, _)| (id, points))
        .collect()
}

/// The `q` quantile of `requests` observations spread over the buckets as `delta`
/// says, in ms: linear within its bucket (as Prometheus' `histogram_quantile`), the
/// last bound for observations above it.
fn quantile(delta: &[u64; BUCKETS], requests: u64, q: f64) -> Option<f32> {
    if requests == 0 {
        return None;
    }
    let rank = q * requests as f64;
    let mut below = 0u64;
    for (i, &n) in delta.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = DURATION_BUCKETS.get(i) else {
                return Some((DURATION_BUCKETS[DURATION_BUCKETS.len() - 1] * 1e3) as f32);
            };
            let lower = if i == 0 { 0.0 } else { DURATION_BUCKETS[i - 1] };
            let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
            return Some(((lower + (upper - lower) * within) * 1e3) as f32);
        }
        below += n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let mut delta = [0u64; BUCKETS];
        // 100 observations: 50 in (0, 0.1 ms], 50 in (0.5 ms, 1 ms].
        delta[0] = 50;
        delta[3] = 50;
        assert_eq!(quantile(&delta, 100, 0.5), Some(0.1));
        let p99 = quantile(&delta, 100, 0.99).unwrap();
        assert!((p99 - 0.99).abs() < 1e-3, "{p99}");
        assert_eq!(quantile(&delta, 0, 0.5), None);
        let mut slow = [0u64; BUCKETS];
        slow[BUCKETS - 1] = 1;
        assert_eq!(quantile(&slow, 1, 0.5), Some(30_000.0));
    }
}
