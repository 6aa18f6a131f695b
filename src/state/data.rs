//! Data a stage compiles from each route's or cluster's configuration when a state is
//! built or reloaded, and reads back by type on the request path.
//!
//! A stage that needs per-route or per-cluster settings (from `Metadata`, say) should
//! not parse them for every request: it implements [`RouteData`] or [`ClusterData`] for
//! a type of its own, registers it in the [`Policies`](crate::policy::Policies) the
//! state is built with, and reads it with [`Route::data`](super::Route::data) or
//! [`Cluster::data`](super::Cluster::data) — a scan of a few type ids and a downcast:
//! no lock, no allocation. A reload compiles it again for the new configuration,
//! handing over the value of the same route or cluster id in the snapshot it replaces,
//! so runtime state (counters, caches) can be carried across. A compile error names the
//! field and refuses the configuration, as the built-in settings do.
//!
//! ```
//! use fuseway::config::{parse, ClusterConfig, ConfigError, Format};
//! use fuseway::policy::Policies;
//! use fuseway::state::{ClusterData, ProxyState};
//!
//! /// `"Metadata": { "Tier": "gold" }` on a cluster.
//! #[derive(Debug, PartialEq)]
//! struct Gold;
//!
//! impl ClusterData for Gold {
//!     fn compile(
//!         cluster: &ClusterConfig,
//!         path: &str,
//!         _previous: Option<&Self>,
//!     ) -> Result<Option<Self>, ConfigError> {
//!         match cluster.metadata.get("Tier").map(String::as_str) {
//!             Some("gold") => Ok(Some(Gold)),
//!             None | Some("standard") => Ok(None),
//!             Some(other) => Err(ConfigError::new(
//!                 format!("{path}.Metadata.Tier"),
//!                 format!("`{other}` is not gold or standard"),
//!             )),
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

use crate::config::{ClusterConfig, ConfigError, ConfigErrors, RouteConfig};

/// Data a stage compiles from each cluster's configuration (read back with [`Cluster::data`](super::Cluster::data) and [`Route::data`](super::Route::data)).
pub trait ClusterData: Send + Sync + Sized + 'static {
    /// The data for the cluster `config` (at config path `path`, `Clusters.<id>`), or
    /// `None` when it has none. `previous`: this type's data for the same cluster id in
    /// the snapshot being replaced (a reload), if it had some. An error refuses the
    /// configuration.
    fn compile(
        config: &ClusterConfig,
        path: &str,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigError>;
}

/// Data a stage compiles from each route's configuration (read back with [`Cluster::data`](super::Cluster::data) and [`Route::data`](super::Route::data)).
pub trait RouteData: Send + Sync + Sized + 'static {
    /// The data for the route `config` (at config path `path`, `Routes.<id>`), or `None`
    /// when it has none. `previous`: this type's data for the same route id in the
    /// snapshot being replaced (a reload), if it had some. An error refuses the
    /// configuration.
    fn compile(
        config: &RouteConfig,
        path: &str,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigError>;
}

type AnyData = Box<dyn Any + Send + Sync>;
type Compile<C> =
    fn(&C, &str, Option<&(dyn Any + Send + Sync)>) -> Result<Option<AnyData>, ConfigError>;

fn compile_cluster<T: ClusterData>(
    config: &ClusterConfig,
    path: &str,
    previous: Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigError> {
    let previous = previous.and_then(|p| p.downcast_ref::<T>());
    Ok(T::compile(config, path, previous)?.map(|data| Box::new(data) as AnyData))
}

fn compile_route<T: RouteData>(
    config: &RouteConfig,
    path: &str,
    previous: Option<&(dyn Any + Send + Sync)>,
) -> Result<Option<AnyData>, ConfigError> {
    let previous = previous.and_then(|p| p.downcast_ref::<T>());
    Ok(T::compile(config, path, previous)?.map(|data| Box::new(data) as AnyData))
}

/// The data types a state compiles, in registration order.
#[derive(Clone, Default)]
pub(crate) struct Compilers {
    clusters: Vec<(TypeId, Compile<ClusterConfig>)>,
    routes: Vec<(TypeId, Compile<RouteConfig>)>,
}

impl Compilers {
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

    /// Whether any route data type is registered.
    pub(crate) fn has_route_data(&self) -> bool {
        !self.routes.is_empty()
    }

    /// The data of the cluster `config`, given the same cluster's in the snapshot being
    /// replaced.
    pub(crate) fn cluster(
        &self,
        config: &ClusterConfig,
        path: &str,
        previous: Option<&DataSet>,
        errors: &mut ConfigErrors,
    ) -> DataSet {
        compile_all(&self.clusters, config, path, previous, errors)
    }

    /// The data of the route `config`, given the same route's in the snapshot being
    /// replaced.
    pub(crate) fn route(
        &self,
        config: &RouteConfig,
        path: &str,
        previous: Option<&DataSet>,
        errors: &mut ConfigErrors,
    ) -> DataSet {
        compile_all(&self.routes, config, path, previous, errors)
    }
}

fn compile_all<C>(
    compilers: &[(TypeId, Compile<C>)],
    config: &C,
    path: &str,
    previous: Option<&DataSet>,
    errors: &mut ConfigErrors,
) -> DataSet {
    if compilers.is_empty() {
        return DataSet::default();
    }
    let mut set = Vec::new();
    for (id, compile) in compilers {
        match compile(config, path, previous.and_then(|p| p.get_any(*id))) {
            Ok(Some(data)) => set.push((*id, data)),
            Ok(None) => {}
            Err(e) => errors.0.push(e),
        }
    }
    DataSet(set.into_boxed_slice())
}

impl fmt::Debug for Compilers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} data types", self.clusters.len() + self.routes.len())
    }
}

/// The compiled data of one route or cluster, by type.
#[derive(Default)]
pub(crate) struct DataSet(Box<[(TypeId, AnyData)]>);

impl DataSet {
    /// The value of type `T`, if compiled.
    pub(crate) fn get<T: 'static>(&self) -> Option<&T> {
        self.get_any(TypeId::of::<T>())
            .and_then(|d| d.downcast_ref::<T>())
    }

    fn get_any(&self, id: TypeId) -> Option<&(dyn Any + Send + Sync)> {
        self.0.iter().find(|(t, _)| *t == id).map(|(_, d)| &**d)
    }
}

impl fmt::Debug for DataSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} compiled values", self.0.len())
    }
}
