//! Destinations and their runtime state.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use http::uri::{Authority, Scheme};
use http::HeaderValue;

use super::DataSet;
use crate::config::{ConfigError, DestinationConfig};
use crate::per_thread::Count;

/// Runtime state of one destination that outlives configuration reloads for as long
/// as the destination keeps its id within its cluster.
#[derive(Debug)]
pub struct DestinationState {
    cluster_id: Arc<str>,
    id: Arc<str>,
    /// Requests in flight, counted per thread (see `per_thread`): every worker counts
    /// its exchanges here.
    concurrent: Count,
    /// What stages keep per destination (passive and active health, ...).
    data: DataSet,
    /// The connection pool of this destination while its cluster limits connections
    /// per server: one for every forwarder (each worker's), so that the limit holds
    /// for the process. Type-erased: the forwarder's pool type.
    shared_pool: Mutex<Option<Arc<dyn Any + Send + Sync>>>,
}

impl DestinationState {
    /// The state of destination `id` of the cluster `cluster_id`, with what stages keep
    /// for it (made by `Compilers::new_destination_state`).
    pub(crate) fn new(cluster_id: Arc<str>, id: Arc<str>, data: DataSet) -> Self {
        DestinationState {
            cluster_id,
            id,
            concurrent: Count::default(),
            data,
            shared_pool: Mutex::new(None),
        }
    }

    /// The `T` a stage keeps for this destination for as long as it keeps its id (its
    /// health, for the health stages): no lock, no allocation.
    pub fn data<T: 'static>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// The destination's shared connection pool: the one kept if it is a `T` that
    /// `fits`, else a new one from `make` (which replaces it).
    pub(crate) fn shared_pool<T: Any + Send + Sync>(
        &self,
        fits: impl FnOnce(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let mut slot = self.shared_pool.lock().expect("shared pool lock");
        if let Some(pool) = slot.as_ref().and_then(|p| p.clone().downcast::<T>().ok()) {
            if fits(&pool) {
                return pool;
            }
        }
        let pool = Arc::new(make());
        *slot = Some(pool.clone());
        pool
    }

    /// Let the shared pool go (a reload left its cluster without a connection limit).
    pub(crate) fn drop_shared_pool(&self) {
        let pool = self.shared_pool.lock().expect("shared pool lock").take();
        drop(pool);
    }

    /// The destination's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id of the cluster it belongs to.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Requests being forwarded to this destination right now (bodies included): a sum
    /// over the threads that forward, each read once.
    pub fn concurrent_requests(&self) -> usize {
        self.concurrent.get()
    }

    /// Count one more request until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> ConcurrencyGuard {
        self.enter_unguarded();
        ConcurrencyGuard {
            counter: Counter::Destination(self.clone()),
        }
    }

    /// Count one more request, given back by [`leave`](Self::leave): for a holder that
    /// keeps the state's `Arc` anyway (the exchange), so no second one is cloned.
    pub(crate) fn enter_unguarded(&self) {
        self.concurrent.enter();
    }

    /// Give back a unit counted by [`enter_unguarded`](Self::enter_unguarded).
    pub(crate) fn leave(&self) {
        self.concurrent.leave();
    }
}

/// Runtime state of one cluster that outlives configuration reloads.
#[derive(Debug, Default)]
pub struct ClusterState {
    /// Requests in flight, counted per thread (see `per_thread`).
    concurrent: Count,
    /// What stages keep per cluster (the balancer's position, the unhealthy count ...).
    data: DataSet,
}

impl ClusterState {
    /// The state of a cluster, with what stages keep for it (made by
    /// `Compilers::new_cluster_state`).
    pub(crate) fn new(data: DataSet) -> Self {
        ClusterState {
            concurrent: Count::default(),
            data,
        }
    }

    /// The `T` a stage keeps for this cluster for as long as it keeps its id: no lock,
    /// no allocation.
    pub fn data<T: 'static>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// Requests being forwarded to this cluster right now (a sum over the threads that
    /// forward).
    pub fn concurrent_requests(&self) -> usize {
        self.concurrent.get()
    }

    /// Count one more request until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> ConcurrencyGuard {
        self.concurrent.enter();
        ConcurrencyGuard {
            counter: Counter::Cluster(self.clone()),
        }
    }
}

#[derive(Debug)]
enum Counter {
    Destination(Arc<DestinationState>),
    Cluster(Arc<ClusterState>),
    /// A stage's own counter (the limits stage's per route).
    Other(Arc<AtomicUsize>),
}

/// Holds one unit of a concurrency counter; dropping it gives the unit back, on
/// success, error, cancellation and panic alike.
#[derive(Debug)]
pub struct ConcurrencyGuard {
    counter: Counter,
}

impl ConcurrencyGuard {
    /// A guard for a unit the caller already added to `count`.
    pub(crate) fn holding(count: Arc<AtomicUsize>) -> Self {
        ConcurrencyGuard {
            counter: Counter::Other(count),
        }
    }
}

impl Drop for ConcurrencyGuard {
    fn drop(&mut self) {
        match &self.counter {
            Counter::Destination(d) => d.leave(),
            Counter::Cluster(c) => c.concurrent.leave(),
            Counter::Other(count) => {
                count.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// A destination's parsed address: `scheme://authority/prefix`.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DestinationAddress {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host:port`.
    pub authority: Authority,
    /// Path prefix without a trailing slash (empty for none).
    pub path_prefix: String,
}

impl fmt::Debug for DestinationAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme, self.authority, self.path_prefix
        )
    }
}

impl DestinationAddress {
    /// Parse an absolute `http://` or `https://` address.
    pub fn parse(address: &str) -> Result<Self, String> {
        let uri: http::Uri = address
            .parse()
            .map_err(|e| format!("`{address}` is not a valid URI: {e}"))?;
        let scheme = uri
            .scheme()
            .cloned()
            .ok_or_else(|| format!("`{address}` must be absolute (http:// or https://)"))?;
        if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
            return Err(format!("`{address}` must use http or https"));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("`{address}` has no host"))?;
        if uri.query().is_some() {
            return Err(format!("`{address}` must not have a query"));
        }
        let path_prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(DestinationAddress {
            scheme,
            authority,
            path_prefix,
        })
    }

    /// Whether this is an `https://` address.
    pub fn is_https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }
}

/// A destination as the current snapshot knows it.
#[derive(Debug, Clone)]
pub struct Destination {
    pub(crate) id: Arc<str>,
    address: DestinationAddress,
    host: HeaderValue,
    config: DestinationConfig,
    state: Arc<DestinationState>,
    /// The forwarder's connection pool for it, found once per snapshot.
    pool: PoolCache,
}

/// The forwarders' connection pools for one destination of one snapshot, kept with the
/// destination so that a request reaches its pool without a look-up in the forwarder's
/// map (a lock, a hash and two reference counts per request). The binary's workers each
/// have a forwarder of their own: each forwarder keeps its pool in one of
/// [`POOL_CACHE_WAYS`] ways (by its id); one whose way another forwarder took looks up
/// its own. The ways are allocated at the first request. A clone starts empty: the
/// cluster settings the pools were chosen by may differ where the clone goes.
#[derive(Default)]
pub(crate) struct PoolCache(OnceLock<Box<[PoolWay; POOL_CACHE_WAYS]>>);

/// How many forwarders a [`PoolCache`] keeps a pool for.
pub(crate) const POOL_CACHE_WAYS: usize = 8;

/// One forwarder's pool in a [`PoolCache`]: its id, and the pool.
type PoolWay = OnceLock<(u64, Box<dyn Any + Send + Sync>)>;

impl PoolCache {
    fn way(ways: &[PoolWay; POOL_CACHE_WAYS], owner: u64) -> &PoolWay {
        // Lossless: the remainder is below `POOL_CACHE_WAYS`.
        &ways[(owner % POOL_CACHE_WAYS as u64) as usize]
    }

    /// The pool `owner` kept here, if it is a `T`.
    pub(crate) fn get<T: Any>(&self, owner: u64) -> Option<&T> {
        let (kept_by, pool) = Self::way(self.0.get()?, owner).get()?;
        (*kept_by == owner)
            .then(|| pool.downcast_ref::<T>())
            .flatten()
    }

    /// Keep `owner`'s `pool` here, unless its way holds a pool already.
    pub(crate) fn fill<T: Any + Send + Sync>(&self, owner: u64, pool: impl FnOnce() -> T) {
        let ways = self
            .0
            .get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())));
        let way = Self::way(ways, owner);
        if way.get().is_none() {
            let _ = way.set((owner, Box::new(pool())));
        }
    }
}

impl Clone for PoolCache {
    fn clone(&self) -> Self {
        PoolCache::default()
    }
}

impl fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "PoolCache(kept)"
        } else {
            "PoolCache(empty)"
        })
    }
}

impl Destination {
    pub(crate) fn new(
        id: Arc<str>,
        config: &DestinationConfig,
        state: Arc<DestinationState>,
        path: &str,
    ) -> Result<Self, ConfigError> {
        let address = DestinationAddress::parse(&config.address)
            .map_err(|m| ConfigError::new(format!("{path}.Address"), m))?;
        let host = match &config.host {
            Some(h) => HeaderValue::from_str(h)
                .map_err(|e| ConfigError::new(format!("{path}.Host"), e.to_string()))?,
            None => HeaderValue::from_str(address.authority.as_str())
                .map_err(|e| ConfigError::new(format!("{path}.Address"), e.to_string()))?,
        };
        Ok(Destination {
            id,
            address,
            host,
            config: config.clone(),
            state,
            pool: PoolCache::default(),
        })
    }

    /// Where the forwarder keeps its connection pool for it.
    pub(crate) fn pool_cache(&self) -> &PoolCache {
        &self.pool
    }

    /// The destination's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where requests go.
    pub fn address(&self) -> &DestinationAddress {
        &self.address
    }

    /// The `Host` header sent to it: the configured `Host`, else the address' authority.
    pub fn host_header(&self) -> &HeaderValue {
        &self.host
    }

    /// Its relative weight (`Weight`, default 1).
    pub fn weight(&self) -> u32 {
        self.config.weight.unwrap_or(1)
    }

    /// The configuration it was built from (metadata included).
    pub fn config(&self) -> &DestinationConfig {
        &self.config
    }

    /// Its runtime state (counters, health).
    pub fn state(&self) -> &Arc<DestinationState> {
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_cache_keeps_a_pool_per_forwarder() {
        let cache = PoolCache::default();
        assert!(cache.get::<u32>(1).is_none());
        cache.fill(1, || 10u32);
        cache.fill(2, || 20u32);
        assert_eq!(cache.get::<u32>(1), Some(&10));
        assert_eq!(cache.get::<u32>(2), Some(&20));
        // A way is kept by its first forwarder: another with the same way looks up its own.
        let same_way = 1 + POOL_CACHE_WAYS as u64;
        cache.fill(same_way, || 30u32);
        assert!(cache.get::<u32>(same_way).is_none());
        assert_eq!(cache.get::<u32>(1), Some(&10));
        // Filled once: a later pool does not replace it.
        cache.fill(1, || 11u32);
        assert_eq!(cache.get::<u32>(1), Some(&10));
        // Another type is not mistaken for the pool.
        assert!(cache.get::<u64>(1).is_none());
        // A clone (a destination carried into another snapshot) starts empty.
        assert!(cache.clone().get::<u32>(1).is_none());
    }

    #[test]
    fn parses_addresses() {
        let a = DestinationAddress::parse("http://127.0.0.1:5000/").unwrap();
        assert_eq!(a.authority.as_str(), "127.0.0.1:5000");
        assert_eq!(a.path_prefix, "");
        let b = DestinationAddress::parse("https://example.com/base/").unwrap();
        assert!(b.is_https());
        assert_eq!(b.path_prefix, "/base");
        assert!(DestinationAddress::parse("ftp://x").is_err());
        assert!(DestinationAddress::parse("/relative").is_err());
        assert!(DestinationAddress::parse("http://x/?q=1").is_err());
    }

    #[test]
    fn guards_release_on_drop() {
        let d = Arc::new(DestinationState::new(
            "c".into(),
            "d".into(),
            DataSet::default(),
        ));
        let g1 = d.enter();
        let g2 = d.enter();
        assert_eq!(d.concurrent_requests(), 2);
        drop(g1);
        drop(g2);
        assert_eq!(d.concurrent_requests(), 0);
    }
}
