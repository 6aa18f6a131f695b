//! Validation errors: every path, and routes that always tie.

use super::{errors, hosts, path, Route, Table};
use crate::config::{HeaderMatchMode as H, QueryParameterMatchMode as Q};

fn one_error(route: Route) -> String {
    let errs = errors(&[("r", route)]);
    assert_eq!(errs.len(), 1, "{errs:?}");
    errs.into_iter().next().unwrap()
}

fn starts(error: &str, prefix: &str) {
    assert!(
        error.starts_with(prefix),
        "`{error}` should start with `{prefix}`"
    );
}

#[test]
fn path_errors() {
    for template in [
        "",
        "/a//b",
        "/{id",
        "/id}",
        "/{}",
        "/{*rest}/x",
        "/{id}/{Id}",
        "/file-{id}",
        "/{id:regex(x)}",
        "/{a?}/b",
        "/{*r?}",
        "/{id=1}",
    ] {
        starts(&one_error(path(template)), "Routes.r.Match.Path: ");
    }
}

#[test]
fn route_needs_path_or_hosts() {
    assert_eq!(
        one_error(Route::default()),
        "Routes.r.Match: a route needs Path or Hosts"
    );
    assert_eq!(
        one_error(hosts(&[])),
        "Routes.r.Match: a route needs Path or Hosts"
    );
    assert!(errors(&[("r", hosts(&["a.com"]))]).is_empty());
}

#[test]
fn host_errors() {
    starts(
        &one_error(path("/").hosts(&["ok.com", "a..com"])),
        "Routes.r.Match.Hosts[1]: ",
    );
    starts(
        &one_error(path("/").hosts(&["*"])),
        "Routes.r.Match.Hosts[0]: ",
    );
    starts(
        &one_error(path("/").hosts(&["a.com:x"])),
        "Routes.r.Match.Hosts[0]: ",
    );
    let dup = one_error(path("/").hosts(&["a.com", "A.com."]));
    assert_eq!(
        dup,
        "Routes.r.Match.Hosts[1]: `A.com.` is listed more than once"
    );
}

#[test]
fn method_errors() {
    let unknown = one_error(path("/").methods(&["GET", "FETCH"]));
    starts(
        &unknown,
        "Routes.r.Match.Methods[1]: unknown HTTP method `FETCH`",
    );
    let dup = one_error(path("/").methods(&["get", "GET"]));
    assert_eq!(
        dup,
        "Routes.r.Match.Methods[1]: `GET` is listed more than once"
    );
}

#[test]
fn header_errors() {
    let e = one_error(path("/").header("", H::Exists, &[]));
    starts(&e, "Routes.r.Match.Headers[0].Name: ");
    let e = one_error(
        path("/")
            .header("x", H::Exists, &[])
            .header("y z", H::Exists, &[]),
    );
    starts(&e, "Routes.r.Match.Headers[1].Name: ");
    let e = one_error(path("/").header("x", H::ExactHeader, &[]));
    starts(&e, "Routes.r.Match.Headers[0].Values: ");
    let e = one_error(path("/").header("x", H::NotExists, &["v"]));
    starts(&e, "Routes.r.Match.Headers[0].Values: ");
    let e = one_error(path("/").header("x", H::Contains, &["v", ""]));
    starts(&e, "Routes.r.Match.Headers[0].Values[1]: ");
}

#[test]
fn query_errors() {
    let e = one_error(path("/").query("", Q::Exists, &[]));
    starts(&e, "Routes.r.Match.QueryParameters[0].Name: ");
    let e = one_error(path("/").query("q", Q::Prefix, &[]));
    starts(&e, "Routes.r.Match.QueryParameters[0].Values: ");
    let e = one_error(path("/").query("q", Q::Exists, &["v"]));
    starts(&e, "Routes.r.Match.QueryParameters[0].Values: ");
    let e = one_error(path("/").query("q", Q::Exact, &[""]));
    starts(&e, "Routes.r.Match.QueryParameters[0].Values[0]: ");
}

#[test]
fn every_error_is_reported() {
    let errs = errors(&[
        ("a", path("/x/{").hosts(&["*"]).methods(&["NOPE"])),
        ("b", path("/ok")),
        ("c", Route::default()),
    ]);
    let paths: Vec<&str> = errs.iter().map(|e| e.split(':').next().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "Routes.a.Match.Path",
            "Routes.a.Match.Hosts[0]",
            "Routes.a.Match.Methods[0]",
            "Routes.c.Match"
        ]
    );
}

#[test]
fn routes_that_always_tie_are_rejected() {
    let errs = errors(&[("first", path("/api/{x}")), ("second", path("/api/{y}"))]);
    assert_eq!(errs.len(), 1);
    starts(&errs[0], "Routes.second.Match: ties with route `first`");

    let same = |a: Route, b: Route| errors(&[("a", a), ("b", b)]).len() == 1;
    assert!(same(path("/API/{*x}"), path("/api/{**y}/")));
    assert!(same(
        path("/x").hosts(&["b.com", "a.com"]),
        path("/x").hosts(&["A.com", "b.com."])
    ));
    assert!(same(
        path("/x").methods(&["GET", "POST"]),
        path("/x").methods(&["post", "get"])
    ));
    assert!(same(
        path("/x").header("X-A", H::ExactHeader, &["v", "W"]),
        path("/x").header("x-a", H::ExactHeader, &["w", "V"])
    ));
    assert!(same(
        path("/x")
            .query("q", Q::Exists, &[])
            .header("h", H::Exists, &[]),
        path("/x")
            .header("h", H::Exists, &[])
            .query("Q", Q::Exists, &[])
    ));
    assert!(same(hosts(&["a.com"]), path("/{**all}").hosts(&["a.com"])));
    assert!(same(path("/{id:int:long}"), path("/{n:long:int}")));
}

#[test]
fn routes_that_differ_somewhere_may_overlap() {
    let ok = |a: Route, b: Route| errors(&[("a", a), ("b", b)]).is_empty();
    assert!(ok(path("/x"), path("/x").order(1)));
    assert!(ok(path("/{a}"), path("/{a:int}")));
    assert!(ok(path("/{a}"), path("/{a?}")));
    assert!(ok(path("/x"), path("/x").methods(&["GET"])));
    assert!(ok(
        path("/x").methods(&["GET"]),
        path("/x").methods(&["GET", "PUT"])
    ));
    assert!(ok(
        path("/x").hosts(&["a.com"]),
        path("/x").hosts(&["a.com:80"])
    ));
    assert!(ok(
        path("/x").header("h", H::ExactHeader, &["v"]),
        path("/x").header_cs("h", H::ExactHeader, &["v"], true)
    ));
    assert!(ok(
        path("/x").header("h", H::ExactHeader, &["v"]),
        path("/x").header("h", H::HeaderPrefix, &["v"])
    ));
    assert!(ok(
        path("/x").query("q", Q::Exact, &["v"]),
        path("/x").query("q", Q::Exact, &["w"])
    ));
}

#[test]
fn valid_routes_build() {
    let t = Table::new(&[
        ("a", path("/a/{b?}")),
        ("b", path("/{**rest}").hosts(&["*.x.com:8443", "y.com"])),
    ]);
    assert_eq!(t.table.len(), 2);
}
