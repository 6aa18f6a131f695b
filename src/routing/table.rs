//! The compiled route table: host dispatch over segment tries.

use crate::fxhash::FxHashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::fmt;

use http::{HeaderMap, Method, Uri};

use super::host::{HostName, RequestHost};
use super::method::MethodSet;
use super::path::RequestPath;
use super::route::CompiledRoute;
use super::trie::{Best, Entry, Node};
use crate::config::{ConfigErrors, RouteConfig};

/// Routes compiled into a matcher.
///
/// Built once per configuration snapshot with [`RouteTable::build`]; [`RouteTable::find`]
/// then picks the route for each request. See the [module docs](super) for the matching
/// and precedence rules.
pub struct RouteTable {
    routes: Vec<CompiledRoute>,
    /// Tries of routes with an exact host pattern, by host.
    exact: FxHashMap<Box<[u8]>, Node>,
    /// Tries of routes with a `*.suffix` host pattern, by suffix.
    wildcard: FxHashMap<Box<[u8]>, Node>,
    /// The trie of routes without hosts and with `*:port` patterns.
    any: Node,
    /// Whether any route names a host or a port: if none does, the request's host is
    /// never looked at.
    uses_host: bool,
    /// The configuration's `AllowedHosts` (`None`: any host).
    allowed: Option<super::AllowedHosts>,
}

impl fmt::Debug for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteTable")
            .field("routes", &self.routes.len())
            .field("exact_hosts", &self.exact.len())
            .field("wildcard_hosts", &self.wildcard.len())
            .finish_non_exhaustive()
    }
}

impl RouteTable {
    /// Whether a request to `uri` with `headers` names a host the configuration's
    /// `AllowedHosts` allows (any, when it sets none).
    #[inline]
    pub fn admits(&self, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|allowed| allowed.admit(uri, headers))
    }

    /// Compile routes; a route's index is its position in `routes`.
    ///
    /// Every invalid route is reported (with the dotted path of the offending field,
    /// `Routes.<id>.Match.Path`), as is every route that would tie with an earlier one
    /// for every request (`Routes.<id>.Match`).
    pub fn build<'a>(
        routes: impl IntoIterator<Item = (&'a str, &'a RouteConfig)>,
    ) -> Result<RouteTable, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let mut compiled = Vec::new();
        let mut first_with_key = FxHashMap::default();
        for (id, config) in routes {
            let Some(route) = CompiledRoute::compile(id, config, &mut errors) else {
                continue;
            };
            match first_with_key.entry(route.tie_key()) {
                MapEntry::Occupied(other) => errors.push(
                    format!("Routes.{id}.Match"),
                    format!(
                        "ties with route `{}`: same Order and identical match criteria, so \
                         this route could never be chosen",
                        other.get()
                    ),
                ),
                MapEntry::Vacant(slot) => {
                    slot.insert(id);
                }
            }
            compiled.push(route);
        }
        errors.into_result()?;
        assert!(compiled.len() < u32::MAX as usize, "too many routes");
        Ok(RouteTable::compile(compiled))
    }

    fn compile(routes: Vec<CompiledRoute>) -> RouteTable {
        // One entry per (route, host pattern); its rank is its position in precedence
        // order, so comparing two candidates at match time is comparing two integers.
        let mut keyed = Vec::new();
        for (index, route) in routes.iter().enumerate() {
            if route.hosts().is_empty() {
                keyed.push((route.precedence(index, None), index, None));
            }
            for (h, host) in route.hosts().iter().enumerate() {
                keyed.push((route.precedence(index, Some((h, host))), index, Some(h)));
            }
        }
        keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));

        let mut table = RouteTable {
            routes: Vec::new(),
            exact: FxHashMap::default(),
            wildcard: FxHashMap::default(),
            any: Node::default(),
            uses_host: routes.iter().any(|r| !r.hosts().is_empty()),
            allowed: None,
        };
        for (rank, (_, index, host)) in keyed.into_iter().enumerate() {
            let route = &routes[index];
            let host = host.map(|h| &route.hosts()[h]);
            let entry = Entry {
                rank: rank as u32,
                route: index as u32,
                port: host.and_then(|h| h.port),
            };
            let node = match host.map(|h| &h.name) {
                None | Some(HostName::Any) => &mut table.any,
                Some(HostName::Exact(name)) => table.exact.entry(name.clone()).or_default(),
                Some(HostName::Wildcard(suffix)) => {
                    table.wildcard.entry(suffix.clone()).or_default()
                }
            };
            node.insert(route.template().segments(), entry);
        }
        table.any.finish();
        table.exact.values_mut().for_each(|n| {
            n.finish();
        });
        table.wildcard.values_mut().for_each(|n| {
            n.finish();
        });
        table.routes = routes;
        table
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether the table has no routes.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The index of the route that serves this request, if any.
    ///
    /// Does not allocate for ordinary requests (paths up to 512 bytes and 32 segments,
    /// query values without escapes).
    pub fn find(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<usize> {
        let mut path = RequestPath::new();
        path.parse(uri.path());
        let host = if self.uses_host {
            RequestHost::from_request(uri, headers)
        } else {
            RequestHost::none()
        };
        let method_bit = MethodSet::bit(method);
        let port = host.port();
        let query = uri.query();
        let accept = |entry: &Entry| {
            (entry.port.is_none() || entry.port == port)
                && self.routes[entry.route as usize].accepts(method_bit, headers, query)
        };
        let mut best = Best::NONE;
        if let Some(host) = host.host() {
            if let Some(node) = self.exact.get(host) {
                node.search(&path, 0, &accept, &mut best);
            }
            if !self.wildcard.is_empty() {
                // `*.example.com` is stored under `example.com`: try every suffix that
                // follows a dot, so any subdomain depth matches but the bare domain not.
                for (i, _) in host.iter().enumerate().filter(|(_, &b)| b == b'.') {
                    if let Some(node) = self.wildcard.get(&host[i + 1..]) {
                        node.search(&path, 0, &accept, &mut best);
                    }
                }
            }
        }
        self.any.search(&path, 0, &accept, &mut best);
        best.route()
    }
}

/// Compiled once per snapshot when a state is built (routing's
/// [`SnapshotData`](crate::state::SnapshotData)): the routes' match criteria, their
/// errors refusing the configuration with their paths.
impl crate::state::SnapshotData for RouteTable {
    fn compile(
        source: &crate::state::SnapshotSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors> {
        let routes = source.config.routes.iter();
        let mut table = RouteTable::build(routes.map(|(id, route)| (id.as_str(), route)))?;
        // A list that does not parse is reported by validation, which runs beside this.
        table.allowed = source
            .config
            .allowed_hosts
            .as_deref()
            .and_then(|hosts| super::AllowedHosts::parse(hosts).ok().flatten());
        Ok(Some(table))
    }
}

impl crate::state::Snapshot {
    /// The compiled route matcher (routing's).
    pub fn route_table(&self) -> &RouteTable {
        static NONE_COMPILED: std::sync::LazyLock<RouteTable> =
            std::sync::LazyLock::new(|| RouteTable::build(std::iter::empty()).expect("no routes"));
        self.data::<RouteTable>().unwrap_or_else(|| &NONE_COMPILED)
    }
}
