//! The built-in stages' part in building a [`ProxyState`]: the data they compile for
//! the configuration, every route and every cluster, and what they keep for the
//! state's life (the metrics). The state knows no stage; this is where the built-in ones
//! are handed to it (a user's stage registers its own data on the [`Policies`]).

use std::sync::Arc;

use crate::affinity::AffinitySettings;
use crate::balancing::ClusterBalancing;
use crate::config::{ConfigErrors, ProxyConfig};
use crate::health::ClusterHealth;
use crate::limits::{RouteLimits, RouteState};
use crate::policy::Policies;
use crate::routing::RouteTable;
use crate::state::{Compilers, ProxyState, Shared};
use crate::telemetry::{Metrics, RouteTelemetry};
use crate::transforms::RouteTransforms;

/// What the built-in stages compile, in the order they are compiled.
fn compilers() -> Compilers {
    let mut compilers = Compilers::default();
    compilers.add_snapshot::<RouteTable>();
    compilers.add_cluster::<ClusterBalancing>();
    compilers.add_cluster::<AffinitySettings>();
    compilers.add_cluster::<ClusterHealth>();
    compilers.add_route::<RouteLimits>();
    compilers.add_route::<Arc<RouteState>>();
    compilers.add_route::<Arc<RouteTransforms>>();
    compilers.add_route::<RouteTelemetry>();
    compilers.on_built(crate::telemetry::retain_destinations);
    compilers.on_cluster_state(crate::balancing::fill_cluster_state);
    compilers.on_cluster_state(crate::health::fill_cluster_state);
    compilers.on_destination_state(crate::health::fill_destination_state);
    compilers
}

/// The runtime state of a destination `d` of a cluster `c` with the built-in stages'
/// parts, outside any snapshot (for unit tests).
#[cfg(test)]
pub(crate) fn destination_state() -> crate::state::DestinationState {
    let compilers = compilers();
    let cluster = compilers.new_cluster_state();
    compilers.new_destination_state(&cluster, "c".into(), "d".into())
}

/// What the built-in stages keep for the state's whole life: the metrics registry.
fn shared() -> Shared {
    let mut shared = Shared::default();
    shared.insert(Arc::new(Metrics::new()));
    shared
}

impl ProxyState {
    /// Validate `config` and build the first snapshot. A route naming a
    /// [policy](crate::policy) other than `Anonymous` / `Disable` is refused: use
    /// [`with_policies`](Self::with_policies) to register them.
    pub fn new(config: ProxyConfig) -> Result<Self, ConfigErrors> {
        Self::with_policies(config, Policies::new())
    }

    /// [`new`](Self::new), with the named policies routes may name and the data user
    /// stages compile; they serve every later [`update`](Self::update) too.
    pub fn with_policies(config: ProxyConfig, policies: Policies) -> Result<Self, ConfigErrors> {
        ProxyState::assemble(config, policies, compilers(), shared())
    }
}
