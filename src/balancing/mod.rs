//! Load balancing: [`Routed<B>`] -> [`Balanced<B>`].
//!
//! (Policies are being implemented; for now the first candidate is taken.)

mod policy;

use crate::request::{Balanced, ForwardError, ForwardErrorKind, ProxyResponse, Routed};
use crate::stage::Stage;

pub use policy::{
    is_registered, register_policy, BalancerState, ClusterBalancing, LoadBalancingPolicy,
};

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

impl<B> Stage<Routed<B>> for LoadBalancing {
    type Out = Balanced<B>;
    type State = ();

    fn on_request(&self, routed: Routed<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
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
            Some(i) => Ok((routed.balance(i), ())),
            None => {
                tracing::warn!(
                    route = routed.context.route().id(),
                    cluster = routed.context.cluster().id(),
                    "no available destination: 503"
                );
                Err(ProxyResponse::error(ForwardError::kind_only(
                    ForwardErrorKind::NoAvailableDestinations,
                )))
            }
        }
    }
}
