//! Metric types of fuseway's own: a duration histogram and a per-thread gauge,
//! both without a lock on the request path.

use super::*;
use crate::per_thread::{self, add, PerThread};

/// [`DURATION_BUCKETS`] in nanoseconds.
pub(super) const DURATION_BUCKET_NANOS: [u64; DURATION_BUCKETS.len()] = {
    let mut nanos = [0; DURATION_BUCKETS.len()];
    let mut i = 0;
    while i < nanos.len() {
        nanos[i] = (DURATION_BUCKETS[i] * 1e9) as u64;
        i += 1;
    }
    nanos
};

/// The request durations of one target, a Prometheus histogram over
/// [`DURATION_BUCKETS`]: an observation is two plain additions to this thread's
/// counts ([`PerThread`]), no lock (prometheus-client's `Histogram` locks a mutex per
/// observation, on every request). A scrape reads the buckets one by one, so while
/// requests complete it may see a count and a sum a few requests apart — as every
/// lock-free histogram does.
#[derive(Debug, Clone, Default)]
pub(super) struct DurationHistogram(Arc<PerThread<DurationCounts>>);

#[derive(Debug, Default)]
pub(super) struct DurationCounts {
    /// Observations per bucket (at most its upper bound, above the previous one), then
    /// the ones above the last bound.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    /// Sum of the observations in nanoseconds (wraps after 584 years of them).
    sum_nanos: AtomicU64,
}

impl DurationHistogram {
    pub(super) fn observe(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let bucket = DURATION_BUCKET_NANOS
            .iter()
            .position(|&bound| nanos <= bound)
            .unwrap_or(DURATION_BUCKETS.len());
        let (counts, shared) = self.0.mine();
        add(&counts.buckets[bucket], 1, shared);
        add(&counts.sum_nanos, nanos, shared);
    }

    /// The observations per bucket now (the last: above the last bound).
    pub(super) fn counts(&self) -> [u64; DURATION_BUCKETS.len() + 1] {
        let mut counts = [0; DURATION_BUCKETS.len() + 1];
        for mine in self.0.each() {
            for (sum, bucket) in counts.iter_mut().zip(&mine.buckets) {
                *sum += bucket.load(Ordering::Relaxed);
            }
        }
        counts
    }

    fn sum_nanos(&self) -> u64 {
        self.0
            .each()
            .map(|mine| mine.sum_nanos.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        let mut buckets = [(f64::INFINITY, 0); DURATION_BUCKETS.len() + 1];
        for (i, ((bound, count), n)) in buckets.iter_mut().zip(self.counts()).enumerate() {
            if let Some(b) = DURATION_BUCKETS.get(i) {
                *bound = *b;
            }
            *count = n;
        }
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum = self.sum_nanos() as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The in-flight gauge: a [`per_thread::Count`], each thread moving a value of its own
/// (a change may be undone on another thread, a future moved between threads: the sum
/// is still right). A scrape sums them.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadGauge(Arc<per_thread::Count>);

impl ThreadGauge {
    /// One more, until the guard is dropped. The guard holds `self`: a handle a worker
    /// has to itself ([`InFlightHandle`]) keeps its reference count off the cache lines
    /// other workers write.
    pub(super) fn enter(self: &Arc<Self>) -> InFlight {
        self.0.enter();
        InFlight(Arc::clone(self))
    }

    /// One fewer (a guard dropped).
    pub(super) fn leave(&self) {
        self.0.leave();
    }

    pub(super) fn get(&self) -> i64 {
        i64::try_from(self.0.get()).unwrap_or(i64::MAX)
    }
}

impl TypedMetric for ThreadGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for ThreadGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A counter each thread counts in a value of its own ([`PerThread`]); a scrape sums
/// them. It replaces prometheus-client's `Counter` (one atomic shared by every thread)
/// where every request counts.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadCounter(Arc<PerThread<AtomicU64>>);

impl ThreadCounter {
    pub(super) fn inc(&self) {
        self.0.add_mine(1);
    }

    pub(super) fn get(&self) -> u64 {
        self.0.sum()
    }
}

impl TypedMetric for ThreadCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ThreadCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
