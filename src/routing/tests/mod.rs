//! Tests of the whole table: matching, precedence, validation and scale. The matchers'
//! own details are tested beside them.

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Method, Uri};

use super::RouteTable;
use crate::config::{
    HeaderMatch, HeaderMatchMode, QueryParameterMatch, QueryParameterMatchMode, RouteConfig,
};

mod hosts;
mod paths;
mod precedence;
mod rules;
mod scale;
mod validation;

/// A route under construction.
#[derive(Debug, Clone, Default)]
pub(super) struct Route(pub(super) RouteConfig);

/// A route with a path.
pub(super) fn path(path: &str) -> Route {
    let mut r = Route::default();
    r.0.match_.path = Some(path.into());
    r
}

/// A route with hosts and no path.
pub(super) fn hosts(hosts: &[&str]) -> Route {
    Route::default().hosts(hosts)
}

fn strings(values: &[&str]) -> Option<Vec<String>> {
    (!values.is_empty()).then(|| values.iter().map(|s| s.to_string()).collect())
}

impl Route {
    pub(super) fn order(mut self, order: i32) -> Self {
        self.0.order = Some(order);
        self
    }

    pub(super) fn hosts(mut self, hosts: &[&str]) -> Self {
        self.0.match_.hosts = Some(hosts.iter().map(|s| s.to_string()).collect());
        self
    }

    pub(super) fn methods(mut self, methods: &[&str]) -> Self {
        self.0.match_.methods = Some(methods.iter().map(|s| s.to_string()).collect());
        self
    }

    pub(super) fn header(self, name: &str, mode: HeaderMatchMode, values: &[&str]) -> Self {
        self.header_cs(name, mode, values, false)
    }

    pub(super) fn header_cs(
        mut self,
        name: &str,
        mode: HeaderMatchMode,
        values: &[&str],
        is_case_sensitive: bool,
    ) -> Self {
        let rule = HeaderMatch {
            name: name.into(),
            values: strings(values),
            mode,
            is_case_sensitive,
        };
        self.0
            .match_
            .headers
            .get_or_insert_with(Vec::new)
            .push(rule);
        self
    }

    pub(super) fn query(self, name: &str, mode: QueryParameterMatchMode, values: &[&str]) -> Self {
        let rule = QueryParameterMatch {
            name: name.into(),
            values: strings(values),
            mode,
            is_case_sensitive: false,
        };
        let mut r = self;
        r.0.match_
            .query_parameters
            .get_or_insert_with(Vec::new)
            .push(rule);
        r
    }
}

/// A request under construction (GET unless told otherwise).
#[derive(Debug)]
pub(super) struct Req {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

/// A GET request for `uri`.
pub(super) fn req(uri: &str) -> Req {
    Req {
        method: Method::GET,
        uri: uri.parse().unwrap_or_else(|e| panic!("{uri}: {e}")),
        headers: HeaderMap::new(),
    }
}

impl Req {
    pub(super) fn method(mut self, method: &str) -> Self {
        self.method = Method::from_bytes(method.as_bytes()).unwrap();
        self
    }

    pub(super) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        self
    }

    pub(super) fn host(self, host: &str) -> Self {
        self.header("host", host)
    }
}

/// A built table that answers with route ids.
#[derive(Debug)]
pub(super) struct Table {
    table: RouteTable,
    ids: Vec<String>,
}

impl Table {
    /// Build; panics on validation errors.
    pub(super) fn new(routes: &[(&str, Route)]) -> Table {
        let table = RouteTable::build(routes.iter().map(|(id, r)| (*id, &r.0)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(table.len(), routes.len());
        Table {
            table,
            ids: routes.iter().map(|(id, _)| id.to_string()).collect(),
        }
    }

    /// The id of the route chosen for `request`.
    pub(super) fn find(&self, request: Req) -> Option<&str> {
        self.table
            .find(&request.method, &request.uri, &request.headers)
            .map(|i| self.ids[i].as_str())
    }

    /// The id of the route chosen for a GET of `uri` (no headers).
    pub(super) fn get(&self, uri: &str) -> Option<&str> {
        self.find(req(uri))
    }
}

/// The validation errors of `routes`, as `path: message`.
pub(super) fn errors(routes: &[(&str, Route)]) -> Vec<String> {
    match RouteTable::build(routes.iter().map(|(id, r)| (*id, &r.0))) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn table_can_be_shared_across_threads() {
    fn check<T: Send + Sync + 'static>() {}
    check::<RouteTable>();
}
