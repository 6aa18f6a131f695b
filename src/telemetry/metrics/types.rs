//! Metric types of fuseway's own: a duration histogram and a per-thread gauge,
//! both without a lock on the request path.

use super::*;

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
/// [`DURATION_BUCKETS`]: an observation is two relaxed atomic additions, no lock
/// (prometheus-client's `Histogram` locks a mutex per observation, on every request).
/// A scrape reads the buckets one by one, so while requests complete it may see a
/// count and a sum a few requests apart — as every lock-free histogram does.
#[derive(Debug, Clone, Default)]
pub(super) struct DurationHistogram(Arc<DurationCounts>);

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
        self.0.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.0.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

impl DurationHistogram {
    /// The observations per bucket now (the last: above the last bound).
    pub(super) fn counts(&self) -> [u64; DURATION_BUCKETS.len() + 1] {
        std::array::from_fn(|i| self.0.buckets[i].load(Ordering::Relaxed))
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        let mut buckets = [(f64::INFINITY, 0); DURATION_BUCKETS.len() + 1];
        for (i, (bound, count)) in buckets.iter_mut().enumerate() {
            if let Some(b) = DURATION_BUCKETS.get(i) {
                *bound = *b;
            }
            *count = self.0.buckets[i].load(Ordering::Relaxed);
        }
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum = self.0.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge each thread moves in a slot of its own: a change is a plain load and store
/// (only its thread writes a slot), not a locked read-modify-write, which costs ~8 ns
/// even uncontended here, and more when threads share the cache line. A scrape sums
/// the slots. Threads past the first [`THREAD_SLOTS`] - 1 share the last slot, with
/// atomic additions. A change may be undone on another thread (a future moved between
/// threads): the sum is still right.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadGauge(Arc<[Slot; THREAD_SLOTS]>);

#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct Slot(AtomicI64);

pub(super) const THREAD_SLOTS: usize = 32;
pub(super) const SHARED_SLOT: usize = THREAD_SLOTS - 1;

/// This thread's slot in every [`ThreadGauge`].
pub(super) fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.try_with(|slot| {
        if slot.get() == usize::MAX {
            slot.set(NEXT.fetch_add(1, Ordering::Relaxed).min(SHARED_SLOT));
        }
        slot.get()
    })
    .unwrap_or(SHARED_SLOT)
}

impl ThreadGauge {
    pub(super) fn add(&self, delta: i64) {
        let index = thread_slot();
        let slot = &self.0[index].0;
        if index == SHARED_SLOT {
            slot.fetch_add(delta, Ordering::Relaxed);
        } else {
            // This thread is the slot's only writer.
            slot.store(
                slot.load(Ordering::Relaxed).wrapping_add(delta),
                Ordering::Relaxed,
            );
        }
    }

    /// One more, until the guard is dropped.
    pub(super) fn enter(&self) -> InFlight {
        self.add(1);
        InFlight(self.clone())
    }

    pub(super) fn get(&self) -> i64 {
        self.0
            .iter()
            .map(|slot| slot.0.load(Ordering::Relaxed))
            .fold(0, i64::wrapping_add)
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
