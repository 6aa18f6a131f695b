//! Load balancing: [`Routed<B>`] -> [`Balanced<B>`].
//!
//! The [`LoadBalancing`] stage picks one of the request's candidate destinations
//! (those routing, health and affinity left eligible) with the cluster's
//! `LoadBalancingPolicy`. No candidate: 503 without contacting any destination. One:
//! taken without consulting the policy. Otherwise the policy decides:
//!
//! | Policy | Pick |
//! |---|---|
//! | `PowerOfTwoChoices` (default) | two *distinct* candidates at random; the one with fewer requests in flight, the first drawn on ties |
//! | `RoundRobin` | in turn; with weights, nginx's smooth weighted round robin |
//! | `Random` | uniformly at random; with weights, proportionally to them |
//! | `LeastRequests` | fewest requests in flight; the first candidate on ties |
//! | `FirstAlphabetical` | the smallest destination id, case-insensitively |
//! | a name registered with [`Policies::load_balancing`](crate::policy::Policies::load_balancing) | the custom [`LoadBalancingPolicy`] |
//!
//! Names are case-insensitive. "Requests in flight" is
//! [`DestinationState::concurrent_requests`](crate::state::DestinationState::concurrent_requests),
//! response bodies included.
//!
//! # Weights
//!
//! A destination's `Weight` (fuseway extension, 1 to 10000, default 1) is honoured by
//! `RoundRobin` and `Random`; the other policies ignore it. When all of a cluster's
//! weights are equal, both behave exactly as without weights.
//!
//! - Weighted `RoundRobin` is nginx's *smooth* weighted round robin: over every
//!   `sum(weights / gcd)` picks each destination gets exactly `weight / gcd` of them,
//!   interleaved (weights 5, 1, 1 give `a a b a c a a`). The period is precomputed
//!   when the configuration is loaded and an atomic position indexes it: no lock and
//!   no allocation per pick. A destination that is not a candidate (unhealthy, ...)
//!   has its slots skipped, so the others keep their order and exact relative shares.
//!   Periods longer than 32768 slots run nginx's algorithm live under a mutex instead.
//! - Weighted `Random` picks with probability `weight / sum of the candidates' weights`.
//!
//! Unweighted `RoundRobin` is YARP's: `candidates[position++ % candidates.len()]`.
//! The position lives in the cluster's [`BalancerState`], which survives reloads.
//!
//! # Custom policies
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use fuseway::balancing::LoadBalancingPolicy;
//! use fuseway::config::{parse, Format};
//! use fuseway::policy::Policies;
//! use fuseway::request::Candidates;
//! use fuseway::state::{Cluster, ProxyState};
//!
//! /// Prefers destinations whose metadata says `"Zone": "local"`; in turn among them.
//! #[derive(Default)]
//! struct LocalFirst {
//!     turn: AtomicUsize,
//! }
//!
//! impl LoadBalancingPolicy for LocalFirst {
//!     fn pick(&self, cluster: &Cluster, candidates: &Candidates) -> Option<usize> {
//!         let local = |i: &usize| {
//!             cluster.destinations()[*i].config().metadata.get("Zone").map(String::as_str)
//!                 == Some("local")
//!         };
//!         let count = candidates.iter().filter(local).count();
//!         let turn = self.turn.fetch_add(1, Ordering::Relaxed);
//!         if count == 0 {
//!             return candidates.nth(turn % candidates.len());
//!         }
//!         candidates.iter().filter(local).nth(turn % count)
//!     }
//! }
//!
//! // Registered in the policies the state is built with.
//! let policies = Policies::new().load_balancing("LocalFirst", LocalFirst::default());
//!
//! let config = parse(r#"{
//!   "Clusters": { "c": {
//!     "LoadBalancingPolicy": "LocalFirst",
//!     "Destinations": {
//!       "far":  { "Address": "http://10.0.0.1", "Metadata": { "Zone": "remote" } },
//!       "near": { "Address": "http://10.0.0.2", "Metadata": { "Zone": "local" } }
//!     }
//!   } }
//! }"#, Format::Json).unwrap();
//! let state = ProxyState::with_policies(config, policies).unwrap();
//! let snapshot = state.snapshot();
//! let cluster = snapshot.cluster("c").unwrap();
//! assert_eq!(cluster.balancing().policy_name(), "LocalFirst");
//! let all = Candidates::all(cluster.destinations().len());
//! for _ in 0..3 {
//!     let pick = cluster.balancing().pick(cluster, &all).unwrap();
//!     assert_eq!(cluster.destinations()[pick].id(), "near");
//! }
//! ```

mod policy;
mod reassign;
mod smooth;
#[cfg(test)]
mod tests;

use crate::request::{Balanced, ForwardError, ForwardErrorKind, ProxyResponse, Routed};
use crate::stage::{ByRef, Stage};

pub use crate::policy::LoadBalancingPolicy;
pub(crate) use policy::fill_cluster_state;
pub use policy::{BalancerState, ClusterBalancing};

/// Picks the destination among the request's candidates with the cluster's
/// `LoadBalancingPolicy`. One candidate: taken without consulting the policy. None:
/// 503 (`NoAvailableDestinations`) without contacting any destination.
#[derive(Debug, Clone, Default)]
pub struct LoadBalancing {
    _private: (),
}

impl LoadBalancing {
    /// The load-balancing stage.
    pub fn new() -> Self {
        LoadBalancing::default()
    }
}

impl<B> ByRef<Routed<B>> for LoadBalancing {
    type Decision = usize;

    /// [`Stage::on_request`] without moving the request: the chosen destination's
    /// index, which [`LoadBalancing::into_out`] applies (the default fused pipeline
    /// calls these two: the request is moved once, not into the stage and out of its
    /// result).
    #[inline]
    fn on_request_by_ref(&self, routed: &Routed<B>) -> Result<(usize, ()), ProxyResponse> {
        let candidates = routed.context.candidates();
        let pick = match candidates.len() {
            0 => None,
            1 => candidates.first(),
            _ => routed
                .context
                .cluster()
                .balancing()
                .pick(routed.context.cluster(), candidates),
        };
        match pick {
            Some(i) => Ok((i, ())),
            None => {
                tracing::warn!(
                    route = routed.context.route().id(),
                    cluster = routed.context.cluster().id(),
                    "no available destination: 503"
                );
                Err(ProxyResponse::error(ForwardError::kind_only(
                    ForwardErrorKind::NoAvailableDestinations,
                ))
                .for_route(&routed.context))
            }
        }
    }

    /// The balanced request: `routed` sent to the destination
    /// [`LoadBalancing::on_request_by_ref`] chose.
    #[inline]
    fn into_out(routed: Routed<B>, destination: usize) -> Balanced<B> {
        routed.balance(destination)
    }
}

impl<B> Stage<Routed<B>> for LoadBalancing {
    type Out = Balanced<B>;
    type State = ();

    fn on_request(&self, routed: Routed<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
        let (destination, state) = self.on_request_by_ref(&routed)?;
        Ok((Self::into_out(routed, destination), state))
    }
}
