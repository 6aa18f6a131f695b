//! Load-balancing policies. (stub: filled in by the balancing work)

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use crate::config::{ClusterConfig, ConfigError};
use crate::request::Candidates;
use crate::state::{Cluster, Destination};

/// A load-balancing policy: picks one destination among at least two candidates.
///
/// Implement it and [`register_policy`] it under a name; clusters select it with
/// `"LoadBalancingPolicy": "<name>"`.
pub trait LoadBalancingPolicy: Send + Sync + 'static {
    /// The index (into `cluster.destinations()`) of the chosen candidate, or `None` to
    /// answer 503. `candidates` holds at least two destinations.
    fn pick(&self, cluster: &Cluster, candidates: &Candidates) -> Option<usize>;
}

type Registry = RwLock<HashMap<String, Arc<dyn LoadBalancingPolicy>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Make `policy` available to configurations under `name` (case-insensitive). Register
/// before loading a configuration that names it.
pub fn register_policy(name: &str, policy: Arc<dyn LoadBalancingPolicy>) {
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_ascii_lowercase(), policy);
}

/// Whether a custom policy is registered under `name`.
pub fn is_registered(name: &str) -> bool {
    registered(name).is_some()
}

pub(crate) fn registered(name: &str) -> Option<Arc<dyn LoadBalancingPolicy>> {
    registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&name.to_ascii_lowercase())
        .cloned()
}

/// Runtime state of a cluster's balancer (round-robin position ...); lives in the
/// cluster's [`ClusterState`](crate::state::ClusterState) and survives reloads.
#[derive(Debug, Default)]
pub struct BalancerState {
    _private: (),
}

/// A cluster's load-balancing policy, resolved from its configuration.
pub struct ClusterBalancing {
    _private: (),
}

impl fmt::Debug for ClusterBalancing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterBalancing").finish_non_exhaustive()
    }
}

impl ClusterBalancing {
    /// Resolve `config`'s policy for these destinations. `path` is the cluster's config
    /// path (`Clusters.c1`) for errors.
    pub(crate) fn from_config(
        _config: &ClusterConfig,
        _destinations: &[Destination],
        _path: &str,
    ) -> Result<Self, ConfigError> {
        Ok(ClusterBalancing { _private: () })
    }

    /// Pick among `candidates` (at least two).
    pub fn pick(&self, _cluster: &Cluster, candidates: &Candidates) -> Option<usize> {
        candidates.first()
    }
}
