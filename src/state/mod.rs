//! Runtime state: an immutable [`Snapshot`] of routes and clusters compiled from a
//! configuration, swapped atomically on reload, plus per-destination runtime state
//! (counters, health) that survives reloads for destinations whose id is unchanged.
//!
//! ```
//! use fuseway::config::{parse, Format};
//! use fuseway::state::ProxyState;
//!
//! let config = parse(r#"{
//!   "Routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "/{**rest}" } } },
//!   "Clusters": { "c1": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9" } } } }
//! }"#, Format::Json).unwrap();
//! let state = ProxyState::new(config).unwrap();
//! let snapshot = state.snapshot();
//! assert_eq!(snapshot.cluster("c1").unwrap().destinations().len(), 1);
//! ```

mod cluster;
mod data;
mod destination;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::watch;

pub use cluster::{
    Cluster, HttpSettings, Route, UpstreamVersion, WebProxy, DEFAULT_ACTIVITY_TIMEOUT,
};
pub use data::{
    ClusterData, ClusterSource, RouteData, RouteSource, Shared, SnapshotData, SnapshotSource,
};
pub(crate) use data::{Compilers, DataSet};
pub(crate) use destination::PoolCache;
pub use destination::{
    ClusterState, ConcurrencyGuard, Destination, DestinationAddress, DestinationState,
};

use crate::config::{ConfigDuration, ConfigErrors, ProxyConfig, RouteConfig};
use crate::policy::Policies;

/// An immutable view of the whole configuration, compiled for request handling.
#[derive(Debug)]
pub struct Snapshot {
    routes: Vec<Route>,
    clusters: Vec<Cluster>,
    cluster_index: HashMap<Arc<str>, usize>,
    config: ProxyConfig,
    /// What stages compiled from the whole configuration ([`SnapshotData`]).
    data: DataSet,
}

impl Snapshot {
    /// All routes, in id order; a route's index is its position here.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// All clusters, in id order.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// The cluster with this id.
    pub fn cluster(&self, id: &str) -> Option<&Cluster> {
        self.cluster_index(id).map(|i| &self.clusters[i])
    }

    /// The index of the cluster with this id.
    pub fn cluster_index(&self, id: &str) -> Option<usize> {
        self.cluster_index.get(id).copied()
    }

    /// The `T` a stage compiled from the whole configuration when the state was built
    /// (see [`SnapshotData`]; routing's route table is one): no lock, no allocation.
    pub fn data<T: SnapshotData>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// The configuration this snapshot was built from.
    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }
}

#[derive(Debug, Default)]
struct Registry {
    clusters: HashMap<Arc<str>, Arc<ClusterState>>,
    destinations: HashMap<(Arc<str>, Arc<str>), Arc<DestinationState>>,
}

/// The live proxy state: the current [`Snapshot`] behind an atomic pointer, and the
/// runtime state of every destination.
#[derive(Debug)]
pub struct ProxyState {
    current: ArcSwap<Snapshot>,
    registry: Mutex<Registry>,
    generation: watch::Sender<u64>,
    /// Values that live as long as the state (the built-in stages' and users').
    shared: Shared,
    policies: Policies,
    /// The data types every snapshot compiles: the built-in stages', then those of
    /// `policies`.
    compilers: Compilers,
    /// Snapshots replaced by an update, kept until no request holds them so that they
    /// are freed here rather than by whichever request finishes last (see
    /// [`release_retired`](ProxyState::release_retired)).
    retired: Mutex<Vec<Arc<Snapshot>>>,
}

impl ProxyState {
    /// The state of `config` with `policies`, its stages' data compiled by `compilers`
    /// (the built-in stages' first: see [`ProxyState::with_policies`]) with `shared`.
    pub(crate) fn assemble(
        config: ProxyConfig,
        policies: Policies,
        compilers: Compilers,
        shared: Shared,
    ) -> Result<Self, ConfigErrors> {
        let compilers = compilers.then(policies.compilers());
        let mut registry = Registry::default();
        let snapshot = build(config, &mut registry, &shared, &policies, &compilers, None)?;
        compilers.built(&shared, &snapshot);
        Ok(ProxyState {
            current: ArcSwap::from_pointee(snapshot),
            registry: Mutex::new(registry),
            generation: watch::Sender::new(0),
            shared,
            policies,
            compilers,
            retired: Mutex::default(),
        })
    }

    /// The value of type `T` the state keeps for as long as it lives (see [`Shared`]).
    pub fn shared<T: 'static>(&self) -> Option<&T> {
        self.shared.get::<T>()
    }

    /// Validate `config` and swap it in atomically. On error the current snapshot keeps
    /// serving. Requests in flight finish on the snapshot they started with; runtime
    /// state of destinations whose (cluster id, destination id) is unchanged is kept.
    ///
    /// The replaced snapshot is kept until [`release_retired`](Self::release_retired)
    /// (or the next update) finds no request holding it, so that its memory is freed by
    /// the thread that reloads, not by the worker whose request happens to end last.
    pub fn update(&self, config: ProxyConfig) -> Result<(), ConfigErrors> {
        self.release_retired();
        let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = Registry::default();
        // Seed `next` with the existing states so they are reused, then keep only the used ones.
        next.clusters.clone_from(&registry.clusters);
        next.destinations.clone_from(&registry.destinations);
        let previous = self.current.load();
        let restart_needed = !previous.config.limits.same_at_start(&config.limits);
        let snapshot = build(
            config,
            &mut next,
            &self.shared,
            &self.policies,
            &self.compilers,
            Some(&previous),
        )?;
        next.clusters
            .retain(|id, _| snapshot.cluster_index.contains_key(id));
        next.destinations.retain(|(c, d), _| {
            snapshot
                .cluster(c)
                .is_some_and(|cl| cl.destination(d).is_some())
        });
        self.compilers.built(&self.shared, &snapshot);
        // Destinations of clusters that no longer limit connections let their shared
        // pools (and the idle connections in them) go.
        for cluster in snapshot.clusters() {
            if cluster.http().max_connections_per_server.is_none() {
                for destination in cluster.destinations() {
                    destination.state().drop_shared_pool();
                }
            }
        }
        let replaced = self.current.swap(Arc::new(snapshot));
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(replaced);
        *registry = next;
        self.generation.send_modify(|g| *g += 1);
        if restart_needed {
            tracing::warn!(
                "the server's limits (Kestrel.Limits) changed: they apply at the next start, \
                 but for MaxRequestBodySize, which applies now"
            );
        }
        Ok(())
    }

    /// Free the snapshots replaced by updates that no request holds any more; how many
    /// are still held. A reloader calls it now and then after an update (the binary's
    /// [`Providers`](crate::providers::Providers) does), so that a large configuration
    /// is freed on its thread: freeing one of 10 000 routes takes milliseconds that a
    /// worker would otherwise spend in the middle of requests.
    pub fn release_retired(&self) -> usize {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        // Only this list holds them once their count is 1: nothing can take a new
        // reference (the state points elsewhere).
        let (free, keep): (Vec<_>, Vec<_>) =
            retired.drain(..).partition(|s| Arc::strong_count(s) == 1);
        *retired = keep;
        let held = retired.len();
        drop(retired);
        drop(free);
        held
    }

    /// Notified after every successful [`update`](Self::update); the value counts them.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }
}

fn build(
    config: ProxyConfig,
    registry: &mut Registry,
    shared: &Shared,
    policies: &Policies,
    compilers: &Compilers,
    previous: Option<&Snapshot>,
) -> Result<Snapshot, ConfigErrors> {
    // The model's checks and what stages compile from the whole configuration
    // (routing's route table), reported together.
    let mut errors = config.validate().err().unwrap_or_default();
    let data = compilers.snapshot(
        &SnapshotSource {
            config: &config,
            policies,
            shared,
        },
        previous.map(|p| &p.data),
        &mut errors,
    );
    let Some(data) = data.filter(|_| errors.0.is_empty()) else {
        return Err(errors);
    };
    let mut clusters = Vec::with_capacity(config.clusters.len());
    let mut cluster_index = HashMap::with_capacity(config.clusters.len());
    for (cid, ccfg) in &config.clusters {
        let cid: Arc<str> = Arc::from(cid.as_str());
        let state = registry
            .clusters
            .entry(cid.clone())
            .or_insert_with(|| Arc::new(compilers.new_cluster_state()))
            .clone();
        let mut destinations = Vec::with_capacity(ccfg.destinations.len());
        for (did, dcfg) in &ccfg.destinations {
            let did: Arc<str> = Arc::from(did.as_str());
            let dstate = registry
                .destinations
                .entry((cid.clone(), did.clone()))
                .or_insert_with(|| {
                    Arc::new(compilers.new_destination_state(&state, cid.clone(), did.clone()))
                })
                .clone();
            let path = format!("Clusters.{cid}.Destinations.{did}");
            match Destination::new(did, dcfg, dstate, &path) {
                Ok(d) => destinations.push(d),
                Err(e) => errors.0.push(e),
            }
        }
        let path = format!("Clusters.{cid}");
        let source = ClusterSource {
            id: &cid,
            config: ccfg,
            path: &path,
            destinations: &destinations,
            policies,
            shared,
        };
        let Some(data) = compilers.cluster(
            &source,
            previous.and_then(|p| p.cluster(&cid)).map(|c| &c.data),
            &mut errors,
        ) else {
            continue;
        };
        cluster_index.insert(cid.clone(), clusters.len());
        clusters.push(Cluster {
            id: cid,
            http: cluster::HttpSettings::from_config(ccfg),
            config: ccfg.clone(),
            destinations,
            state,
            data,
        });
    }
    // The routes of the snapshot being replaced, by id (only when stages compile route
    // data, which is handed the previous value: the built-in ones do).
    let previous_routes: HashMap<&str, &Route> = match previous {
        Some(p) if compilers.has_route_data() => p.routes.iter().map(|r| (&*r.id, r)).collect(),
        _ => HashMap::new(),
    };
    let all_policies = policies;
    let mut routes = Vec::with_capacity(config.routes.len());
    for (id, r) in &config.routes {
        let id: Arc<str> = Arc::from(id.as_str());
        let path = format!("Routes.{id}");
        let (policies, policy_timeout) = all_policies.resolve(r, &path, &mut errors);
        // A `TimeoutPolicy` stands for the duration it was registered with.
        let timed;
        let r = match policy_timeout {
            Some(t) => {
                timed = RouteConfig {
                    timeout: Some(ConfigDuration(t)),
                    ..r.clone()
                };
                &timed
            }
            None => r,
        };
        let cluster = r
            .cluster_id
            .as_deref()
            .and_then(|c| cluster_index.get(c).copied());
        let source = RouteSource {
            id: &id,
            config: r,
            path: &path,
            cluster: cluster.map(|c| &clusters[c]),
            policies: all_policies,
            shared,
            limits: &config.limits,
        };
        let Some(data) = compilers.route(
            &source,
            previous_routes.get(&*id).map(|r| &r.data),
            &mut errors,
        ) else {
            continue;
        };
        routes.push(Route {
            cluster,
            config: r.clone(),
            id,
            policies,
            data,
        });
    }
    errors.into_result()?;
    Ok(Snapshot {
        routes,
        clusters,
        cluster_index,
        config,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Format};

    fn config(path: &str) -> ProxyConfig {
        let text = format!(
            r#"{{ "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "{path}" }} }} }},
                 "Clusters": {{ "c": {{ "Destinations": {{ "d": {{ "Address": "http://127.0.0.1:1" }} }} }} }} }}"#
        );
        parse(&text, Format::Json).unwrap()
    }

    /// A replaced snapshot lives on while a request holds it, and is freed by
    /// `release_retired` (not by the request) once none does.
    #[test]
    fn replaced_snapshots_are_freed_by_the_reloader() {
        let state = ProxyState::new(config("/a")).unwrap();
        let held = state.snapshot();
        let weak = Arc::downgrade(&held);
        state.update(config("/b")).unwrap();
        assert_eq!(state.release_retired(), 1, "a request still holds it");
        drop(held);
        // The request's end did not free it: the state still keeps it.
        assert!(weak.upgrade().is_some());
        assert_eq!(state.release_retired(), 0);
        assert!(weak.upgrade().is_none(), "freed by release_retired");

        // Unheld, the next update frees it by itself.
        let weak = Arc::downgrade(&state.snapshot());
        state.update(config("/c")).unwrap();
        assert!(weak.upgrade().is_some());
        state.update(config("/d")).unwrap();
        assert!(weak.upgrade().is_none());
    }
}
