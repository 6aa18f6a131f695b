//! Destination health: which destinations of a cluster are available.

use crate::request::Candidates;
use crate::state::Cluster;

/// The destinations of `cluster` that requests may go to, by its
/// `AvailableDestinationsPolicy`.
pub fn available(cluster: &Cluster) -> Candidates {
    Candidates::all(cluster.destinations().len())
}
