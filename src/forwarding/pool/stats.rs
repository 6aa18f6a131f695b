//! What the pools did, for the `fuseway_pool_*` metrics: per pool (so per worker, no
//! counter shared between threads), summed by destination address at scrape time
//! from a process-wide list of the pools alive.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// One pool's counts.
#[derive(Debug)]
pub(crate) struct PoolStats {
    /// `scheme://authority` of the pool's destination.
    target: String,
    connects: AtomicU64,
    connect_errors: AtomicU64,
    reuses: AtomicU64,
    idle: AtomicUsize,
    open: AtomicUsize,
}

/// Every pool's stats while it lives.
static POOLS: Mutex<Vec<Weak<PoolStats>>> = Mutex::new(Vec::new());

impl PoolStats {
    /// The stats of a new pool to `target`, listed for scrapes.
    pub(super) fn register(target: String) -> Arc<PoolStats> {
        let stats = Arc::new(PoolStats {
            target,
            connects: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            reuses: AtomicU64::new(0),
            idle: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
        });
        let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(&stats));
        stats
    }

    pub(super) fn connect(&self) {
        self.connects.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn connect_failed(&self) {
        self.connect_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn reuse(&self) {
        self.reuses.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn set_idle(&self, idle: usize) {
        self.idle.store(idle, Ordering::Relaxed);
    }

    /// A connection opened: counted open until the returned guard is dropped (with
    /// the connection).
    pub(super) fn opened(self: &Arc<Self>) -> OpenConnection {
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.clone())
    }
}

/// Counts its connection as open in its pool's stats while it lives (the connection
/// holds it).
#[derive(Debug)]
pub(crate) struct OpenConnection(Arc<PoolStats>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Per destination address: connections opened, connects that failed, requests that
/// took an idle HTTP/1.1 connection, HTTP/1.1 connections idle now and connections
/// open now — summed over the pools alive (a pool forgotten by a sweep takes its
/// counts with it once its last connection has closed).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PoolTotals {
    /// Connections opened (connect attempts).
    pub(crate) connects: u64,
    /// Connect attempts that failed.
    pub(crate) connect_errors: u64,
    /// Requests sent on an idle HTTP/1.1 connection taken from the pool.
    pub(crate) reuses: u64,
    /// HTTP/1.1 connections idle in the pool now.
    pub(crate) idle: u64,
    /// Connections open now (HTTP/1.1 idle or in use, HTTP/2, upgraded).
    pub(crate) open: u64,
}

/// [`PoolTotals`] by `scheme://authority`, sorted.
pub(crate) fn pool_totals() -> Vec<(String, PoolTotals)> {
    let mut totals: std::collections::BTreeMap<String, PoolTotals> = Default::default();
    let pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    for stats in pools.iter().filter_map(Weak::upgrade) {
        let t = totals.entry(stats.target.clone()).or_default();
        t.connects += stats.connects.load(Ordering::Relaxed);
        t.connect_errors += stats.connect_errors.load(Ordering::Relaxed);
        t.reuses += stats.reuses.load(Ordering::Relaxed);
        t.idle += stats.idle.load(Ordering::Relaxed) as u64;
        t.open += stats.open.load(Ordering::Relaxed) as u64;
    }
    totals.into_iter().collect()
}
