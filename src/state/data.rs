//! Data a stage compiles from each route's or cluster's configuration when a state is
//! built or reloaded, and reads back by type on the request path.
//!
//! A stage that needs per-route or per-cluster settings (from `Metadata`, say) should
//! not parse them for every request: it implements [`RouteData`] or [`ClusterData`] for
//! a type of its own, registers it in the [`Policies`](crate::policy::Policies) the
//! state is built with, and reads it with [`Route::data`](super::Route::data) or
//! [`Cluster::data`](super::Cluster::data) — a scan of a few type ids and a downcast:
//! no lock, no allocation. The built-in stages keep their settings the same way (load
//! balancing, session affinity and health per cluster; limits, transforms and metric
//! handles per route; routing's table per snapshot): the state itself knows no stage.
//! A reload compiles it again for the new configuration, handing over the value of the
//! same route or cluster id in the snapshot it replaces, so runtime state (counters,
//! caches) can be carried across. A compile error names the
//! field and refuses the configuration, as the built-in settings do.
//!
//! ```
//! use fuseway::config::{parse, ConfigError, ConfigErrors, Format};
//! use fuseway::policy::Policies;
//! use fuseway::state::{ClusterData, ClusterSource, ProxyState};
//!
//! /// `"Metadata": { "Tier": "gold" }` on a cluster.
//! #[derive(Debug, PartialEq)]
//! struct Gold;
//!
//! impl ClusterData for Gold {
//!     fn compile(
//!         cluster: &ClusterSource<'_>,
//!         _previous: Option<&Self>,
//!     ) -> Result<Option<Self>, ConfigErrors> {
//!         match cluster.config.metadata.get("Tier").map(String::as_str) {
//!             Some("gold") => Ok(Some(Gold)),
//!             None | Some("standard") => Ok(None),
//!             Some(other) => Err(ConfigError::new(
//!                 format!("{}.Metadata.Tier", cluster.path),
//!                 format!("`{other}` is not gold or standard"),
//!             )
//!             .into()),
//!         }
//!     }
//! }
//!
//! let config = parse(r#"{ "Clusters": {
//!   "a": { "Metadata": { "Tier": "gold" }, "Destinations": { "d": { "Address": "http://127.0.0.1:9" } } },
//!   "b": { "Destinations": { "d": { "Address": "http://127.0.0.1:9" } } } } }"#,
//!   Format::Json).unwrap();
//! let state = ProxyState::with_policies(config, Policies::new().cluster_data::<Gold>()).unwrap();
//! let snapshot = state.snapshot();
//! assert_eq!(snapshot.cluster("a").unwrap().data::<Gold>(), Some(&Gold));
//! assert_eq!(snapshot.cluster("b").unwrap().data::<Gold>(), None);
//! ```

use std::any::{Any, TypeId};
use std::fmt;

use fuseway_type_slots::TypeSlots;

use super::Destination;
use crate::config::{ClusterConfig, ConfigErrors, ProxyConfig, RouteConfig};
use crate::policy::Policies;

/// What a cluster's data is compiled from.
#[derive(Debug)]
#[non_exhaustive]
pub struct ClusterSource<'a> {
    /// The cluster's id.
    pub id: &'a str,
    /// Its configuration.
    pub config: &'a ClusterConfig,
    /// Its path in the configuration, `Clusters.<id>`, for errors.
    pub path: &'a str,
    /// Its destinations, ordered by id (a destination's index is its position here).
    pub destinations: &'a [Destination],
    /// The policies the state is built with (custom load-balancing policies, ...).
    pub policies: &'a Policies,
    /// The state's shared values.
    pub shared: &'a Shared,
}

/// Values that live as long as the [`ProxyState`](super::ProxyState), across reloads
/// (the telemetry stage's metrics registry, say), by type: a stage finds them while
/// its data is compiled (the sources' `shared`) and through
/// [`ProxyState::shared`](super::ProxyState::shared).
#[derive(Default)]
pub struct Shared(TypeSlots);

impl Shared {
    /// The value of type `T`, if there is one.
    #[inline]
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.0.get::<T>()
    }

    /// Keep `value` (replacing one of the same type).
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(value);
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} shared values", self.0.len())
    }
}

/// What a snapshot's data is compiled from: the whole configuration.
#[derive(Debug)]
#[non_exhaustive]
pub struct SnapshotSource<'a> {
    /// The configuration.
    pub config: &'a ProxyConfig,
    /// The policies the state is built with.
    pub policies: &'a Policies,
    /// The state's shared values.
    pub shared: &'a Shared,
}

/// Data a stage compiles from the whole configuration once per snapshot (routing's
/// route table, say), read back with [`Snapshot::data`](super::Snapshot::data).
pub trait SnapshotData: Send + Sync + Sized + 'static {
    /// The data for the configuration `source`, or `None`. `previous`: this type's data
    /// in the snapshot being replaced (a reload). An error refuses the configuration.
    fn compile(
        source: &SnapshotSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors>;
}

/// What a route's data is compiled from.
#[derive(Debug)]
#[non_exhaustive]
pub struct RouteSource<'a> {
    /// The route's id.
    pub id: &'a str,
    /// Its configuration (a `TimeoutPolicy` it names already turned into its
    /// `Timeout`).
    pub config: &'a RouteConfig,
    /// Its path in the configuration, `Routes.<id>`, for errors.
    pub path: &'a str,
    /// Its cluster, when the configuration has the one it names.
    pub cluster: Option<&'a super::Cluster>,
    /// The policies the state is built with.
    pub policies: &'a Policies,
    /// The state's shared values.
    pub shared: &'a Shared,
    /// The server's limits (the default request body limit among them).
    pub limits: &'a crate::config::ServerLimits,
}

/// Data a stage compiles from each cluster's configuration (see
/// [`Cluster::data`](super::Cluster::data)).
pub trait ClusterData: Send + Sync + Sized + 'static {
    /// The data for the cluster `source`, or `None` when it has none. `previous`: this
    /// type's data for the same cluster id in the snapshot being replaced (a reload),
    /// if it had some. An error refuses the configuration.
    fn compile(
        source: &ClusterSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors>;
}

/// Data a stage compiles from each route's configuration (see
/// [`Route::data`](super::Route::data)).
pub trait RouteData: Send + Sync + Sized + 'static {
    /// The data for the route `source`, or `None` when it has none. `previous`: this
    /// type's data for the same route id in the snapshot being replaced (a reload), if
    /// it had some. An error refuses the configuration.
    fn compile(
        source: &RouteSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors>;
}

type AnyData = fuseway_type_slots::AnyValue;
fn compile_cluster<T: ClusterData>(
    source: &ClusterSource<'_>,
    previous: Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigErrors> {
    let previous = previous.and_then(|p| p.downcast_ref::<T>());
    Ok(T::compile(source, previous)?.map(|data| Box::new(data) as AnyData))
}

fn compile_route<T: RouteData>(
    source: &RouteSource<'_>,
    previous: Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigErrors> {
    let previous = previous.and_then(|p| p.downcast_ref::<T>());
    Ok(T::compile(source, previous)?.map(|data| Box::new(data) as AnyData))
}

fn compile_snapshot<T: SnapshotData>(
    source: &SnapshotSource<'_>,
    previous: Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigErrors> {
    let previous = previous.and_then(|p| p.downcast_ref::<T>());
    Ok(T::compile(source, previous)?.map(|data| Box::new(data) as AnyData))
}

type SnapshotCompile = for<'a> fn(
    &SnapshotSource<'a>,
    Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigErrors>;
type ClusterCompile = for<'a> fn(
    &ClusterSource<'a>,
    Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigErrors>;
type RouteCompile = for<'a> fn(
    &RouteSource<'a>,
    Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigErrors>;

/// The data types a state compiles, in registration order.
#[derive(Clone, Default)]
pub(crate) struct Compilers {
    /// Run with every snapshot built (the first and each reload's), before it serves.
    built: Vec<fn(&Shared, &super::Snapshot)>,
    /// Fill a new cluster's runtime state (see [`ClusterState::data`](super::ClusterState::data)).
    cluster_state: Vec<fn(&mut DataSet)>,
    /// Fill a new destination's runtime state, given its cluster's.
    destination_state: Vec<fn(&super::ClusterState, &mut DataSet)>,
    snapshots: Vec<(TypeId, SnapshotCompile)>,
    clusters: Vec<(TypeId, ClusterCompile)>,
    routes: Vec<(TypeId, RouteCompile)>,
}

impl Compilers {
    pub(crate) fn on_built(&mut self, hook: fn(&Shared, &super::Snapshot)) {
        self.built.push(hook);
    }

    /// `fill` adds a stage's values to every new cluster's runtime state.
    pub(crate) fn on_cluster_state(&mut self, fill: fn(&mut DataSet)) {
        self.cluster_state.push(fill);
    }

    /// `fill` adds a stage's values to every new destination's runtime state.
    pub(crate) fn on_destination_state(&mut self, fill: fn(&super::ClusterState, &mut DataSet)) {
        self.destination_state.push(fill);
    }

    /// The runtime state of a new cluster.
    pub(crate) fn new_cluster_state(&self) -> super::ClusterState {
        let mut data = DataSet::default();
        for fill in &self.cluster_state {
            fill(&mut data);
        }
        super::ClusterState::new(data)
    }

    /// The runtime state of a new destination `id` of the cluster `cluster_id` whose
    /// runtime state is `cluster`.
    pub(crate) fn new_destination_state(
        &self,
        cluster: &super::ClusterState,
        cluster_id: std::sync::Arc<str>,
        id: std::sync::Arc<str>,
    ) -> super::DestinationState {
        let mut data = DataSet::default();
        for fill in &self.destination_state {
            fill(cluster, &mut data);
        }
        super::DestinationState::new(cluster_id, id, data)
    }

    /// Run the [`on_built`](Self::on_built) hooks for `snapshot`.
    pub(crate) fn built(&self, shared: &Shared, snapshot: &super::Snapshot) {
        for hook in &self.built {
            hook(shared, snapshot);
        }
    }

    pub(crate) fn add_snapshot<T: SnapshotData>(&mut self) {
        let id = TypeId::of::<T>();
        if !self.snapshots.iter().any(|(t, _)| *t == id) {
            self.snapshots.push((id, compile_snapshot::<T>));
        }
    }

    pub(crate) fn add_cluster<T: ClusterData>(&mut self) {
        let id = TypeId::of::<T>();
        if !self.clusters.iter().any(|(t, _)| *t == id) {
            self.clusters.push((id, compile_cluster::<T>));
        }
    }

    pub(crate) fn add_route<T: RouteData>(&mut self) {
        let id = TypeId::of::<T>();
        if !self.routes.iter().any(|(t, _)| *t == id) {
            self.routes.push((id, compile_route::<T>));
        }
    }

    /// These, then `other`'s types that are not among them.
    pub(crate) fn then(mut self, other: &Compilers) -> Compilers {
        self.built.extend(other.built.iter().copied());
        self.cluster_state
            .extend(other.cluster_state.iter().copied());
        self.destination_state
            .extend(other.destination_state.iter().copied());
        for entry in &other.snapshots {
            if !self.snapshots.iter().any(|(t, _)| *t == entry.0) {
                self.snapshots.push(*entry);
            }
        }
        for entry in &other.clusters {
            if !self.clusters.iter().any(|(t, _)| *t == entry.0) {
                self.clusters.push(*entry);
            }
        }
        for entry in &other.routes {
            if !self.routes.iter().any(|(t, _)| *t == entry.0) {
                self.routes.push(*entry);
            }
        }
        self
    }

    /// Whether any route data type is registered.
    pub(crate) fn has_route_data(&self) -> bool {
        !self.routes.is_empty()
    }

    /// The snapshot data of `source`, given the replaced snapshot's; `None` when one of
    /// them did not compile (its errors added to `errors`).
    pub(crate) fn snapshot(
        &self,
        source: &SnapshotSource<'_>,
        previous: Option<&DataSet>,
        errors: &mut ConfigErrors,
    ) -> Option<DataSet> {
        compile_all(
            self.snapshots.iter().copied(),
            |f: SnapshotCompile, previous| f(source, previous),
            previous,
            errors,
        )
    }

    /// The data of the cluster `source`, given the same cluster's in the snapshot being
    /// replaced; `None` when one of them did not compile (its errors added to `errors`).
    pub(crate) fn cluster(
        &self,
        source: &ClusterSource<'_>,
        previous: Option<&DataSet>,
        errors: &mut ConfigErrors,
    ) -> Option<DataSet> {
        compile_all(
            self.clusters.iter().copied(),
            |f: ClusterCompile, previous| f(source, previous),
            previous,
            errors,
        )
    }

    /// The data of the route `source`, given the same route's in the snapshot being
    /// replaced; `None` when one of them did not compile (its errors added to `errors`).
    pub(crate) fn route(
        &self,
        source: &RouteSource<'_>,
        previous: Option<&DataSet>,
        errors: &mut ConfigErrors,
    ) -> Option<DataSet> {
        compile_all(
            self.routes.iter().copied(),
            |f: RouteCompile, previous| f(source, previous),
            previous,
            errors,
        )
    }
}

/// Each of `compilers` run (`run`: with the previous value of its type), the values in
/// order; `None` when one of them failed (its errors added to `errors`).
fn compile_all<F>(
    compilers: impl Iterator<Item = (TypeId, F)>,
    run: impl Fn(F, Option<&(dyn Any + Send + Sync)>) -> Result<Option<AnyData>, ConfigErrors>,
    previous: Option<&DataSet>,
    errors: &mut ConfigErrors,
) -> Option<DataSet> {
    let mut set = TypeSlots::default();
    let mut failed = false;
    for (id, compile) in compilers {
        match run(compile, previous.and_then(|p| p.get_any(id))) {
            Ok(Some(data)) => set.insert_boxed(data),
            Ok(None) => {}
            Err(e) => {
                errors.0.extend(e.0);
                failed = true;
            }
        }
    }
    (!failed).then_some(set)
}

impl fmt::Debug for Compilers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} data types",
            self.snapshots.len() + self.clusters.len() + self.routes.len()
        )
    }
}

/// What stages keep in one snapshot, route, cluster or destination, by type: read with
/// a scan of a few inline type ids and no virtual call.
pub(crate) type DataSet = TypeSlots;
