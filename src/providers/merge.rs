//! Merging the configurations of several providers into one.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use crate::config::{ConfigErrors, ProxyConfig};

/// One configuration of several: `parts` are `(source, configuration)` pairs. Routes and
/// clusters are put together, an id defined in two sources being an error that names
/// both (at the path of the second); listeners are taken in order; the server's limits,
/// the allowed hosts and the log levels may come from one source only. The result is not
/// validated here (a [`ProxyState`](crate::state::ProxyState) validates it whole).
///
/// ```
/// use fuseway::config::{parse, Format};
/// use fuseway::providers::merge;
///
/// let a = parse(r#"{ "Clusters": { "c1": {} } }"#, Format::Json).unwrap();
/// let b = parse(r#"{ "Routes": { "r1": { "ClusterId": "c1" } } }"#, Format::Json).unwrap();
/// let merged = merge(&[("a.json", &a), ("b.json", &b)]).unwrap();
/// assert!(merged.clusters.contains_key("c1") && merged.routes.contains_key("r1"));
///
/// let errors = merge(&[("a.json", &a), ("c.json", &a)]).unwrap_err();
/// let error = errors.iter().next().unwrap();
/// assert_eq!(error.path, "Clusters.c1");
/// assert!(error.message.contains("a.json") && error.message.contains("c.json"));
///
/// let limited = parse(r#"{ "Limits": { "MaxRequestBodySize": 1000 } }"#, Format::Json).unwrap();
/// let errors = merge(&[("d.json", &limited), ("e.json", &limited)]).unwrap_err();
/// assert_eq!(errors.iter().next().unwrap().path, "Limits");
/// let hosts = parse(r#"{ "AllowedHosts": "a.com" }"#, Format::Json).unwrap();
/// let errors = merge(&[("f.json", &hosts), ("g.json", &hosts)]).unwrap_err();
/// assert_eq!(errors.iter().next().unwrap().path, "AllowedHosts");
/// ```
pub fn merge(parts: &[(&str, &ProxyConfig)]) -> Result<ProxyConfig, ConfigErrors> {
    let mut merged = ProxyConfig::default();
    let mut errors = ConfigErrors::default();
    let mut route_sources = BTreeMap::new();
    let mut cluster_sources = BTreeMap::new();
    let (mut limits_source, mut hosts_source, mut logging_source) = (None, None, None);
    for &(source, config) in parts {
        merged.listen.extend(config.listen.iter().cloned());
        let once = ("AllowedHosts", "the allowed hosts");
        if config.allowed_hosts.is_some() && first(&mut hosts_source, source, once, &mut errors) {
            merged.allowed_hosts = config.allowed_hosts.clone();
        }
        let once = ("Limits", "the server's limits");
        if !config.limits.is_empty() && first(&mut limits_source, source, once, &mut errors) {
            merged.limits = config.limits.clone();
        }
        let once = ("Logging", "the log levels");
        if !config.logging.is_empty() && first(&mut logging_source, source, once, &mut errors) {
            merged.logging = config.logging.clone();
        }
        put(
            &mut merged.routes,
            &mut route_sources,
            &config.routes,
            ("Routes", "route", source),
            &mut errors,
        );
        put(
            &mut merged.clusters,
            &mut cluster_sources,
            &config.clusters,
            ("Clusters", "cluster", source),
            &mut errors,
        );
    }
    errors.into_result().map(|()| merged)
}

/// Whether `source` is the first to set a setting one source only may set (`set_by`:
/// the first one, recorded here); a second is an error at `key` naming both.
fn first<'a>(
    set_by: &mut Option<&'a str>,
    source: &'a str,
    (key, what): (&str, &str),
    errors: &mut ConfigErrors,
) -> bool {
    match *set_by {
        None => {
            *set_by = Some(source);
            true
        }
        Some(first) => {
            errors.push(key, format!("{what} are set by both {first} and {source}"));
            false
        }
    }
}

/// Put `items` of `source` into `into`, recording where each id came from in `sources`.
fn put<'a, T: Clone>(
    into: &mut BTreeMap<String, T>,
    sources: &mut BTreeMap<String, &'a str>,
    items: &BTreeMap<String, T>,
    (section, kind, source): (&str, &str, &'a str),
    errors: &mut ConfigErrors,
) {
    for (id, item) in items {
        match sources.entry(id.clone()) {
            Entry::Vacant(v) => {
                v.insert(source);
                into.insert(id.clone(), item.clone());
            }
            Entry::Occupied(first) => errors.push(
                format!("{section}.{id}"),
                format!(
                    "{kind} `{id}` is defined by both {} and {source}",
                    first.get()
                ),
            ),
        }
    }
}
