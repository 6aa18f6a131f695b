//! One route's match criteria, validated and compiled, with its precedence key and the
//! key that detects routes which would always tie.

use std::cmp::Reverse;

use http::HeaderMap;

use super::header::HeaderRule;
use super::host::HostPattern;
use super::method::{MethodError, MethodSet};
use super::query::QueryRule;
use super::template::{PathTemplate, SegmentShape};
use super::values::RuleKey;
use crate::config::{ConfigErrors, RouteConfig};

/// A route's compiled match criteria.
#[derive(Debug)]
pub(super) struct CompiledRoute {
    order: i32,
    template: PathTemplate,
    hosts: Vec<HostPattern>,
    methods: MethodSet,
    headers: Vec<HeaderRule>,
    query: Vec<QueryRule>,
}

/// Sort key of one (route, host pattern) pair: the smaller key wins.
///
/// Order; path precedence; methods before none; host specificity (a longer wildcard
/// suffix before a shorter one); more header rules; more query rules; then the lower
/// route index (and host index) so the result is deterministic.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct PrecedenceKey {
    order: i32,
    path: Vec<u8>,
    no_methods: bool,
    host_score: u8,
    host_len: Reverse<usize>,
    headers: Reverse<usize>,
    query: Reverse<usize>,
    route: usize,
    host_index: usize,
}

/// Everything that decides which requests a route matches and how it ranks, with
/// meaningless differences (parameter names, list order, case) normalised away. Two
/// routes with equal keys tie for every request.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct TieKey {
    order: i32,
    path: Vec<SegmentShape>,
    hosts: Vec<HostPattern>,
    methods: MethodSet,
    headers: Vec<RuleKey>,
    query: Vec<RuleKey>,
}

impl CompiledRoute {
    /// Validate and compile one route; every problem is recorded in `errors` under
    /// `Routes.<id>.Match...`, and then `None` is returned.
    pub(super) fn compile(
        id: &str,
        route: &RouteConfig,
        errors: &mut ConfigErrors,
    ) -> Option<CompiledRoute> {
        let before = errors.0.len();
        let base = format!("Routes.{id}.Match");
        let m = &route.match_;
        let host_list = m.hosts.as_deref().unwrap_or_default();
        if m.path.is_none() && host_list.is_empty() {
            errors.push(base.clone(), "a route needs Path or Hosts");
        }
        let template = match &m.path {
            None => Some(PathTemplate::match_all()),
            Some(path) => PathTemplate::parse(path)
                .map_err(|e| errors.push(format!("{base}.Path"), e))
                .ok(),
        };
        let mut hosts: Vec<HostPattern> = Vec::new();
        for (i, text) in host_list.iter().enumerate() {
            match HostPattern::parse(text) {
                Ok(h) if hosts.contains(&h) => errors.push(
                    format!("{base}.Hosts[{i}]"),
                    format!("`{text}` is listed more than once"),
                ),
                Ok(h) => hosts.push(h),
                Err(e) => errors.push(format!("{base}.Hosts[{i}]"), e),
            }
        }
        let mut methods = MethodSet::default();
        for (i, name) in m.methods.iter().flatten().enumerate() {
            let message = match methods.add(name) {
                Ok(()) => continue,
                Err(MethodError::Unknown) => format!(
                    "unknown HTTP method `{name}` (expected one of {})",
                    MethodSet::known()
                ),
                Err(MethodError::Duplicate) => format!("`{name}` is listed more than once"),
            };
            errors.push(format!("{base}.Methods[{i}]"), message);
        }
        let headers: Vec<HeaderRule> = (m.headers.iter().flatten().enumerate())
            .filter_map(|(i, h)| HeaderRule::compile(h, &format!("{base}.Headers[{i}]"), errors))
            .collect();
        let query: Vec<QueryRule> = (m.query_parameters.iter().flatten().enumerate())
            .filter_map(|(i, q)| {
                QueryRule::compile(q, &format!("{base}.QueryParameters[{i}]"), errors)
            })
            .collect();
        if errors.0.len() != before {
            return None;
        }
        Some(CompiledRoute {
            order: route.order.unwrap_or(0),
            template: template?,
            hosts,
            methods,
            headers,
            query,
        })
    }

    /// The path template.
    pub(super) fn template(&self) -> &PathTemplate {
        &self.template
    }

    /// The host patterns (empty: any host).
    pub(super) fn hosts(&self) -> &[HostPattern] {
        &self.hosts
    }

    /// Whether the criteria not handled by the trie (method, headers, query) match.
    pub(super) fn accepts(
        &self,
        method_bit: u16,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> bool {
        self.methods.accepts(method_bit)
            && self.headers.iter().all(|h| h.matches(headers))
            && self.query.iter().all(|q| q.matches(query))
    }

    /// The precedence of this route (at `index`) when matched through `host`, the
    /// pattern at `host_index` of its `Hosts` (`None` for a route without hosts).
    pub(super) fn precedence(
        &self,
        index: usize,
        host: Option<(usize, &HostPattern)>,
    ) -> PrecedenceKey {
        PrecedenceKey {
            order: self.order,
            path: self.template.precedence(),
            no_methods: !self.methods.is_restricted(),
            host_score: host.map_or(5, |(_, h)| h.score()),
            host_len: Reverse(host.map_or(0, |(_, h)| h.specificity_len())),
            headers: Reverse(self.headers.len()),
            query: Reverse(self.query.len()),
            route: index,
            host_index: host.map_or(0, |(i, _)| i),
        }
    }

    /// The key under which two routes always tie.
    pub(super) fn tie_key(&self) -> TieKey {
        let sorted = |mut v: Vec<RuleKey>| {
            v.sort();
            v.dedup();
            v
        };
        let mut hosts = self.hosts.clone();
        hosts.sort();
        TieKey {
            order: self.order,
            path: self.template.shape(),
            hosts,
            methods: self.methods,
            headers: sorted(self.headers.iter().map(HeaderRule::key).collect()),
            query: sorted(self.query.iter().map(QueryRule::key).collect()),
        }
    }
}
