//! Moving a request to another cluster or destination after routing: the new
//! cluster's available destinations (health) become the candidates, and its policy
//! chooses again where load balancing already chose.

use crate::request::{Balanced, RouteContext};

impl RouteContext {
    /// Move the request to another cluster of the same snapshot: its candidates become
    /// that cluster's available destinations, and once a destination has been chosen
    /// (after load balancing), the new cluster's policy chooses one of them. Returns
    /// false (and changes nothing) if no cluster has that id, or if a destination was
    /// chosen and the new cluster has none available.
    pub fn reassign_cluster(&mut self, cluster_id: &str) -> bool {
        let Some(i) = self.snapshot().cluster_index(cluster_id) else {
            return false;
        };
        let cluster = &self.snapshot().clusters()[i];
        let candidates = crate::health::available(cluster);
        let destination = if self.has_destination() {
            match cluster.balancing().pick(cluster, &candidates) {
                Some(pick) => Some(pick),
                None => return false,
            }
        } else {
            None
        };
        self.retarget(i, candidates, destination);
        true
    }
}

impl<B> Balanced<B> {
    /// Move the request to destination `destination_id` of cluster `cluster_id`.
    /// Returns false (and changes nothing) if either does not exist.
    pub fn reassign(&mut self, cluster_id: &str, destination_id: &str) -> bool {
        let Some(ci) = self.context.snapshot().cluster_index(cluster_id) else {
            return false;
        };
        let cluster = &self.context.snapshot().clusters()[ci];
        let Some((di, _)) = cluster.destination(destination_id) else {
            return false;
        };
        let candidates = crate::health::available(cluster);
        self.context.retarget(ci, candidates, Some(di));
        true
    }
}
