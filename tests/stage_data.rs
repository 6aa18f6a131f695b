//! Data stages compile from the configuration (`ClusterData`, `RouteData`): compiled
//! when the state is built, handed to the next compile on a reload (same id), refused
//! with its field path when it does not compile — and then the old snapshot keeps
//! serving.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fuseway::config::{parse, ConfigError, ConfigErrors, Format};
use fuseway::policy::Policies;
use fuseway::state::{ClusterData, ClusterSource, ProxyState, RouteData, RouteSource};

/// `"Metadata": { "Quota": "<n>" }` on a cluster, and the requests counted against it:
/// the count survives reloads that keep the cluster.
#[derive(Debug)]
struct Quota {
    limit: u64,
    used: Arc<AtomicU64>,
}

impl ClusterData for Quota {
    fn compile(
        cluster: &ClusterSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors> {
        let Some(value) = cluster.config.metadata.get("Quota") else {
            return Ok(None);
        };
        let limit = value.parse().map_err(|_| {
            ConfigError::new(
                format!("{}.Metadata.Quota", cluster.path),
                format!("`{value}` is not a number"),
            )
        })?;
        let used = previous.map_or_else(Default::default, |p| p.used.clone());
        Ok(Some(Quota { limit, used }))
    }
}

/// The route's id as its metadata spells it, to check route data per route.
#[derive(Debug, PartialEq)]
struct Label(String);

impl RouteData for Label {
    fn compile(
        route: &RouteSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors> {
        Ok(route.config.metadata.get("Label").cloned().map(Label))
    }
}

fn config(quota: &str, cluster: &str) -> fuseway::config::ProxyConfig {
    parse(
        &format!(
            r#"{{
  "Routes": {{ "r": {{ "ClusterId": "{cluster}", "Match": {{ "Path": "/{{**rest}}" }},
                 "Metadata": {{ "Label": "first" }} }} }},
  "Clusters": {{ "{cluster}": {{ "Metadata": {{ "Quota": "{quota}" }},
                   "Destinations": {{ "d": {{ "Address": "http://127.0.0.1:9" }} }} }} }}
}}"#
        ),
        Format::Json,
    )
    .unwrap()
}

fn quota(state: &ProxyState, cluster: &str) -> (u64, Arc<AtomicU64>) {
    let snapshot = state.snapshot();
    let q = snapshot
        .cluster(cluster)
        .unwrap()
        .data::<Quota>()
        .expect("compiled");
    (q.limit, q.used.clone())
}

#[test]
fn compiled_data_is_kept_across_reloads_and_refused_with_its_path() {
    let policies = Policies::new()
        .cluster_data::<Quota>()
        .route_data::<Label>();
    let state = ProxyState::with_policies(config("10", "c"), policies).unwrap();
    let (limit, used) = quota(&state, "c");
    assert_eq!(limit, 10);
    used.fetch_add(3, Ordering::Relaxed);
    let snapshot = state.snapshot();
    assert_eq!(
        snapshot.routes()[0].data::<Label>(),
        Some(&Label("first".into()))
    );

    // Same cluster id, new limit: compiled again, handed the previous count.
    state.update(config("20", "c")).unwrap();
    let (limit, used) = quota(&state, "c");
    assert_eq!((limit, used.load(Ordering::Relaxed)), (20, 3));

    // Does not compile: refused with the field's path, the old snapshot serving on.
    let errors = state.update(config("lots", "c")).unwrap_err();
    let error = errors.iter().next().unwrap();
    assert_eq!(error.path, "Clusters.c.Metadata.Quota");
    assert!(error.message.contains("lots"), "{error}");
    assert_eq!(quota(&state, "c").0, 20);

    // Another cluster id: a fresh start.
    state.update(config("5", "other")).unwrap();
    let (limit, used) = quota(&state, "other");
    assert_eq!((limit, used.load(Ordering::Relaxed)), (5, 0));

    // A state that registered nothing compiles nothing.
    let plain = ProxyState::new(config("10", "c")).unwrap();
    assert!(plain
        .snapshot()
        .cluster("c")
        .unwrap()
        .data::<Quota>()
        .is_none());
}
