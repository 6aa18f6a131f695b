//! Load balancing: [`Routed<B>`] -> [`Balanced<B>`].

use crate::request::{Balanced, ForwardError, ForwardErrorKind, ProxyResponse, Routed};
use crate::stage::Stage;

/// Picks the destination among the request's candidates. No candidate: 503
/// (`NoAvailableDestinations`) without contacting any destination.
///
/// For now it takes the first candidate; the policies (PowerOfTwoChoices, RoundRobin,
/// ...) replace this.
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
        match routed.context.candidates().first() {
            Some(i) => Ok((routed.balance(i), ())),
            None => {
                tracing::warn!(
                    route = routed.context.route().id(),
                    cluster = routed.context.cluster().id(),
                    "no available destination: 503"
                );
                Err(ProxyResponse::error(
                    ForwardError::kind_only(ForwardErrorKind::NoAvailableDestinations),
                    None,
                ))
            }
        }
    }
}
