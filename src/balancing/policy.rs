//! Load-balancing policies: the built-in ones, custom ones (registered in
//! [`Policies`]), and the per-cluster resolution done once per configuration load.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::{ClusterConfig, ConfigError, LoadBalancingPolicyName};
use crate::policy::{LoadBalancingPolicy, Policies};
use crate::request::Candidates;
use crate::state::{Cluster, Destination};

use super::smooth::SmoothRoundRobin;

/// Runtime state of a cluster's balancer; lives in the cluster's
/// [`ClusterState`](crate::state::ClusterState) and survives reloads.
///
/// It holds the round-robin position: after a reload, `RoundRobin` goes on from
/// where it was instead of starting over at the first destination (with new weights,
/// the position is taken modulo the new period).
#[derive(Debug, Default)]
pub struct BalancerState {
    position: AtomicUsize,
}

/// A cluster's load-balancing policy, resolved from its configuration.
pub struct ClusterBalancing {
    policy: Policy,
}

enum Policy {
    PowerOfTwoChoices,
    /// Destination indices ordered by id, case-insensitively.
    FirstAlphabetical(Box<[u32]>),
    /// `None` when all weights are equal.
    Random(Option<WeightedRandom>),
    /// `None` when all weights are equal.
    RoundRobin(Option<SmoothRoundRobin>),
    LeastRequests,
    Custom {
        name: Box<str>,
        policy: Arc<dyn LoadBalancingPolicy>,
    },
}

impl fmt::Debug for ClusterBalancing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let weighted = match &self.policy {
            Policy::Random(w) => w.is_some(),
            Policy::RoundRobin(w) => w.is_some(),
            _ => false,
        };
        f.debug_struct("ClusterBalancing")
            .field("policy", &self.policy_name())
            .field("weighted", &weighted)
            .finish()
    }
}

impl ClusterBalancing {
    /// Resolve `config`'s policy for these destinations, custom names among
    /// `policies`. `path` is the cluster's config path (`Clusters.c1`) for errors.
    pub(crate) fn from_config(
        config: &ClusterConfig,
        destinations: &[Destination],
        path: &str,
        policies: &Policies,
    ) -> Result<Self, ConfigError> {
        let name = config.load_balancing_policy.as_deref();
        let builtin = match name {
            None => Some(LoadBalancingPolicyName::default()),
            Some(n) => n.parse::<LoadBalancingPolicyName>().ok(),
        };
        let weights: Vec<u32> = destinations.iter().map(|d| d.weight().max(1)).collect();
        let weighted = weights.windows(2).any(|w| w[0] != w[1]);
        let policy = match builtin {
            Some(LoadBalancingPolicyName::PowerOfTwoChoices) => Policy::PowerOfTwoChoices,
            Some(LoadBalancingPolicyName::LeastRequests) => Policy::LeastRequests,
            Some(LoadBalancingPolicyName::FirstAlphabetical) => {
                Policy::FirstAlphabetical(alphabetical_order(destinations))
            }
            Some(LoadBalancingPolicyName::Random) => {
                Policy::Random(weighted.then(|| WeightedRandom::new(weights)))
            }
            Some(LoadBalancingPolicyName::RoundRobin) => {
                Policy::RoundRobin(weighted.then(|| SmoothRoundRobin::new(&weights)))
            }
            None => {
                let name = name.unwrap_or_default();
                let policy = policies.load_balancing_policy(name).ok_or_else(|| {
                    ConfigError::new(
                        format!("{path}.LoadBalancingPolicy"),
                        format!(
                            "unknown load balancing policy `{name}`; expected one of {} \
                             or a custom policy registered in the embedding program \
                             (fuseway::policy::Policies::load_balancing)",
                            LoadBalancingPolicyName::NAMES.join(", ")
                        ),
                    )
                })?;
                Policy::Custom {
                    name: name.into(),
                    policy,
                }
            }
        };
        Ok(ClusterBalancing { policy })
    }

    /// The policy's name: the canonical spelling of a built-in one, or the name a
    /// custom one was selected with.
    pub fn policy_name(&self) -> &str {
        match &self.policy {
            Policy::PowerOfTwoChoices => LoadBalancingPolicyName::PowerOfTwoChoices.as_str(),
            Policy::FirstAlphabetical(_) => LoadBalancingPolicyName::FirstAlphabetical.as_str(),
            Policy::Random(_) => LoadBalancingPolicyName::Random.as_str(),
            Policy::RoundRobin(_) => LoadBalancingPolicyName::RoundRobin.as_str(),
            Policy::LeastRequests => LoadBalancingPolicyName::LeastRequests.as_str(),
            Policy::Custom { name, .. } => name,
        }
    }

    /// Pick among `candidates` (indices into `cluster.destinations()`, normally at
    /// least two). `None` means no destination can be used (503). With fewer than two
    /// candidates the policy is not consulted: the only one (if any) is returned.
    ///
    /// `cluster` must be the cluster this was resolved for (its
    /// [`balancing()`](Cluster::balancing)).
    pub fn pick(&self, cluster: &Cluster, candidates: &Candidates) -> Option<usize> {
        if candidates.len() < 2 {
            return candidates.first();
        }
        let position = &cluster.state().balancer().position;
        match &self.policy {
            Policy::PowerOfTwoChoices => power_of_two_choices(cluster, candidates),
            Policy::LeastRequests => least_requests(cluster, candidates),
            Policy::FirstAlphabetical(order) => order
                .iter()
                .map(|&i| i as usize)
                .find(|&i| candidates.contains(i)),
            Policy::Random(None) => candidates.nth(fastrand::usize(..candidates.len())),
            Policy::Random(Some(weighted)) => weighted.pick(candidates),
            Policy::RoundRobin(None) => {
                let offset = position.fetch_add(1, Ordering::Relaxed) % candidates.len();
                candidates.nth(offset)
            }
            Policy::RoundRobin(Some(smooth)) => smooth.pick(position, candidates),
            Policy::Custom { name, policy } => {
                let pick = policy.pick(cluster, candidates)?;
                if candidates.contains(pick) && pick < cluster.destinations().len() {
                    Some(pick)
                } else {
                    tracing::error!(
                        cluster = cluster.id(),
                        policy = &**name,
                        pick,
                        "custom load balancing policy picked a destination that is not a candidate"
                    );
                    None
                }
            }
        }
    }
}

/// Two distinct candidates at random; the one with fewer requests in flight wins, the
/// first drawn on ties.
fn power_of_two_choices(cluster: &Cluster, candidates: &Candidates) -> Option<usize> {
    let n = candidates.len();
    let first = fastrand::usize(..n);
    let mut second = fastrand::usize(..n - 1);
    if second >= first {
        second += 1;
    }
    let (first, second) = (candidates.nth(first)?, candidates.nth(second)?);
    let load = |i: usize| {
        cluster
            .destinations()
            .get(i)
            .map_or(usize::MAX, |d| d.state().concurrent_requests())
    };
    Some(if load(first) <= load(second) {
        first
    } else {
        second
    })
}

/// The candidate with the fewest requests in flight; the first one on ties.
fn least_requests(cluster: &Cluster, candidates: &Candidates) -> Option<usize> {
    let destinations = cluster.destinations();
    let mut best: Option<(usize, usize)> = None;
    for i in candidates.iter() {
        let Some(d) = destinations.get(i) else {
            continue;
        };
        let load = d.state().concurrent_requests();
        if best.is_none_or(|(l, _)| load < l) {
            best = Some((load, i));
        }
    }
    best.map(|(_, i)| i)
}

/// Destination indices ordered by id as .NET's `StringComparer.OrdinalIgnoreCase`
/// does (code points of the upper-cased ids); ids equal but for case keep their order.
fn alphabetical_order(destinations: &[Destination]) -> Box<[u32]> {
    let keys: Vec<String> = destinations
        .iter()
        .map(|d| d.id().chars().flat_map(char::to_uppercase).collect())
        .collect();
    let mut order: Vec<u32> = (0..destinations.len() as u32).collect();
    order.sort_by(|&a, &b| keys[a as usize].cmp(&keys[b as usize]));
    order.into()
}

/// Random with probability proportional to the destinations' weights.
struct WeightedRandom {
    weights: Box<[u32]>,
    /// `cumulative[i]` = sum of `weights[..=i]`.
    cumulative: Box<[u64]>,
}

impl WeightedRandom {
    fn new(weights: Vec<u32>) -> Self {
        let cumulative = weights
            .iter()
            .scan(0u64, |sum, &w| {
                *sum += u64::from(w);
                Some(*sum)
            })
            .collect();
        WeightedRandom {
            weights: weights.into(),
            cumulative,
        }
    }

    fn pick(&self, candidates: &Candidates) -> Option<usize> {
        if candidates.len() == self.weights.len() {
            // Every destination: binary search in the precomputed sums.
            let total = *self.cumulative.last()?;
            let r = fastrand::u64(..total);
            let i = self.cumulative.partition_point(|&c| c <= r);
            if candidates.contains(i) {
                return Some(i);
            }
        }
        let weight = |i: usize| self.weights.get(i).map_or(0, |&w| u64::from(w));
        let total: u64 = candidates.iter().map(weight).sum();
        if total == 0 {
            return None;
        }
        let mut r = fastrand::u64(..total);
        for i in candidates.iter() {
            let w = weight(i);
            if r < w {
                return Some(i);
            }
            r -= w;
        }
        None
    }
}

/// Compiled for every cluster when a state is built (the load-balancing stage's
/// [`ClusterData`](crate::state::ClusterData)).
impl crate::state::ClusterData for ClusterBalancing {
    fn compile(
        source: &crate::state::ClusterSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, crate::config::ConfigErrors> {
        let balancing = ClusterBalancing::from_config(
            source.config,
            source.destinations,
            source.path,
            source.policies,
        )?;
        Ok(Some(balancing))
    }
}

impl crate::state::Cluster {
    /// Its load-balancing policy (compiled by the load-balancing stage).
    pub fn balancing(&self) -> &ClusterBalancing {
        static NONE_COMPILED: std::sync::LazyLock<ClusterBalancing> =
            std::sync::LazyLock::new(|| {
                ClusterBalancing::from_config(&ClusterConfig::default(), &[], "", &Policies::new())
                    .expect("the default policy")
            });
        self.data::<ClusterBalancing>()
            .unwrap_or_else(|| &NONE_COMPILED)
    }
}

impl crate::state::ClusterState {
    /// The balancer's runtime state (kept by the load-balancing stage).
    pub fn balancer(&self) -> &BalancerState {
        static NONE_KEPT: std::sync::LazyLock<BalancerState> =
            std::sync::LazyLock::new(Default::default);
        self.data::<BalancerState>().unwrap_or_else(|| &NONE_KEPT)
    }
}

/// What the load-balancing stage keeps for every new cluster: its position.
pub(crate) fn fill_cluster_state(data: &mut crate::state::DataSet) {
    data.insert(BalancerState::default());
}
