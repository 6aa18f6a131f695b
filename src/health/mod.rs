//! Destination health: passive (traffic-based) and active (probing), and which
//! destinations of a cluster are available. (stub: filled in by the health work)

use std::sync::Arc;

use http::StatusCode;

use crate::config::{ClusterConfig, ConfigError};
use crate::request::{Balanced, Candidates, ForwardErrorKind, ProxyResponse};
use crate::stage::Stage;
use crate::state::{Cluster, DestinationState};

/// The destinations of `cluster` that requests may go to, by its
/// `AvailableDestinationsPolicy`.
pub fn available(cluster: &Cluster) -> Candidates {
    Candidates::all(cluster.destinations().len())
}

/// Health of one destination; lives in its [`DestinationState`] and survives reloads.
#[derive(Debug, Default)]
pub struct DestinationHealth {
    _private: (),
}

/// A cluster's health settings, resolved from its configuration.
#[derive(Debug, Default)]
pub struct ClusterHealth {
    _private: (),
}

impl ClusterHealth {
    /// Resolve from `config`; `path` is the cluster's config path.
    pub(crate) fn from_config(_config: &ClusterConfig, _path: &str) -> Result<Self, ConfigError> {
        Ok(ClusterHealth::default())
    }
}

/// A passive-health observation waiting for the exchange to end: recorded exactly once,
/// after the response body has finished and the concurrency counters are released;
/// never when the client aborted.
#[derive(Debug)]
pub struct PassiveRecord {
    destination: Arc<DestinationState>,
    status: StatusCode,
}

impl PassiveRecord {
    /// Record the exchange's result: `Ok(())` when the body completed, else the error.
    pub(crate) fn complete(self, result: Result<(), ForwardErrorKind>) {
        let _ = (self.destination, self.status, result);
    }
}

/// The passive-health stage: arms a [`PassiveRecord`] on every forwarded response of a
/// cluster with passive health enabled.
#[derive(Debug, Clone, Default)]
pub struct PassiveHealth {
    _private: (),
}

impl PassiveHealth {
    /// The passive-health stage.
    pub fn new() -> Self {
        PassiveHealth::default()
    }
}

impl<B> Stage<Balanced<B>> for PassiveHealth {
    type Out = Balanced<B>;
    type State = ();

    fn on_request(&self, request: Balanced<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
        Ok((request, ()))
    }

    fn on_response(&self, _: (), _response: &mut ProxyResponse) {}
}
