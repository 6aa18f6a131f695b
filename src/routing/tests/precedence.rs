//! Which route wins when several match.

use super::{path, req, Table};
use crate::config::{HeaderMatchMode as H, QueryParameterMatchMode as Q};

#[test]
fn lower_order_wins_over_everything() {
    let t = Table::new(&[
        ("literal", path("/x").order(1)),
        ("param", path("/{p}")),
        (
            "catch-all",
            path("/{**rest}").order(-1).hosts(&["late.com"]),
        ),
    ]);
    assert_eq!(t.get("/x"), Some("param"));
    assert_eq!(t.find(req("/x").host("late.com")), Some("catch-all"));
}

#[test]
fn segment_kinds_rank_literal_constrained_param_optional_catch_all() {
    let t = Table::new(&[
        ("catch-all", path("/a/{*rest}")),
        ("optional", path("/a/{o?}")),
        ("param", path("/a/{p}")),
        ("constrained", path("/a/{id:int}")),
        ("literal", path("/a/b")),
    ]);
    assert_eq!(t.get("/a/b"), Some("literal"));
    assert_eq!(t.get("/a/5"), Some("constrained"));
    assert_eq!(t.get("/a/c"), Some("param"));
    assert_eq!(t.get("/a"), Some("optional"));
    assert_eq!(t.get("/a/c/d"), Some("catch-all"));
}

#[test]
fn constrained_optional_beats_plain_optional() {
    let t = Table::new(&[("plain", path("/a/{o?}")), ("int", path("/a/{n:int?}"))]);
    assert_eq!(t.get("/a/1"), Some("int"));
    assert_eq!(t.get("/a/x"), Some("plain"));
    assert_eq!(
        t.get("/a"),
        Some("int"),
        "precedence is static, also when left out"
    );
}

#[test]
fn path_precedence_is_segment_by_segment() {
    let t = Table::new(&[
        ("late-literal", path("/{x}/b")),
        ("early-literal", path("/a/{y}")),
    ]);
    assert_eq!(t.get("/a/b"), Some("early-literal"));
    assert_eq!(t.get("/c/b"), Some("late-literal"));

    let t = Table::new(&[("rest", path("/api/{*rest}")), ("api", path("/api"))]);
    assert_eq!(t.get("/api"), Some("api"), "a prefix template wins");
    assert_eq!(t.get("/api/x"), Some("rest"));

    let t = Table::new(&[("deep", path("/{a}/{b}/{c}")), ("shallow", path("/x/{*r}"))]);
    assert_eq!(
        t.get("/x/y/z"),
        Some("shallow"),
        "literal first segment decides"
    );
}

#[test]
fn methods_beat_no_methods_but_not_path() {
    let t = Table::new(&[
        ("plain", path("/x")),
        ("get", path("/x").methods(&["GET"])),
        ("param-get", path("/{p}").methods(&["GET"])),
    ]);
    assert_eq!(t.get("/x"), Some("get"));
    assert_eq!(t.find(req("/x").method("PUT")), Some("plain"));
    assert_eq!(t.get("/y"), Some("param-get"));
}

#[test]
fn host_specificity() {
    let t = Table::new(&[
        ("none", path("/x")),
        ("port", path("/x").hosts(&["*:8080"])),
        ("wild", path("/x").hosts(&["*.example.com"])),
        ("wild-port", path("/x").hosts(&["*.example.com:8080"])),
        ("host", path("/x").hosts(&["a.example.com"])),
        ("host-port", path("/x").hosts(&["a.example.com:8080"])),
    ]);
    let at = |host: &str| t.find(req("/x").host(host));
    assert_eq!(at("a.example.com:8080"), Some("host-port"));
    assert_eq!(at("a.example.com"), Some("host"));
    assert_eq!(at("b.example.com:8080"), Some("wild-port"));
    assert_eq!(at("b.example.com"), Some("wild"));
    assert_eq!(at("other.org:8080"), Some("port"));
    assert_eq!(at("other.org"), Some("none"));
}

#[test]
fn longer_wildcard_suffix_wins() {
    let t = Table::new(&[
        ("short", path("/x").hosts(&["*.example.com"])),
        ("long", path("/x").hosts(&["*.b.example.com"])),
    ]);
    assert_eq!(t.find(req("/x").host("a.b.example.com")), Some("long"));
    assert_eq!(t.find(req("/x").host("a.c.example.com")), Some("short"));
}

#[test]
fn methods_outrank_hosts() {
    let t = Table::new(&[
        ("host", path("/x").hosts(&["a.com"])),
        ("get", path("/x").methods(&["GET"])),
    ]);
    assert_eq!(t.find(req("/x").host("a.com")), Some("get"));
    assert_eq!(t.find(req("/x").host("a.com").method("POST")), Some("host"));
}

#[test]
fn more_header_rules_win_and_hosts_outrank_headers() {
    let t = Table::new(&[
        ("none", path("/x")),
        ("one", path("/x").header("a", H::Exists, &[])),
        (
            "two",
            path("/x")
                .header("a", H::Exists, &[])
                .header("b", H::Exists, &[]),
        ),
        ("host", path("/x").hosts(&["h.com"])),
    ]);
    let both = || req("/x").header("a", "1").header("b", "1");
    assert_eq!(t.find(both()), Some("two"));
    assert_eq!(t.find(req("/x").header("a", "1")), Some("one"));
    assert_eq!(t.find(req("/x")), Some("none"));
    assert_eq!(t.find(both().host("h.com")), Some("host"));
}

#[test]
fn more_query_rules_win_and_headers_outrank_query() {
    let t = Table::new(&[
        ("none", path("/x")),
        ("one", path("/x").query("a", Q::Exists, &[])),
        (
            "two",
            path("/x")
                .query("a", Q::Exists, &[])
                .query("b", Q::Exists, &[]),
        ),
        ("header", path("/x").header("h", H::Exists, &[])),
    ]);
    assert_eq!(t.get("/x?a=1&b=1"), Some("two"));
    assert_eq!(t.get("/x?a=1"), Some("one"));
    assert_eq!(t.get("/x"), Some("none"));
    assert_eq!(t.find(req("/x?a=1&b=1").header("h", "1")), Some("header"));
}

#[test]
fn partial_overlaps_go_to_the_first_listed_route() {
    let t = Table::new(&[
        ("get", path("/x").methods(&["GET"])),
        ("get-post", path("/x").methods(&["GET", "POST"])),
    ]);
    assert_eq!(t.get("/x"), Some("get"));
    assert_eq!(t.find(req("/x").method("POST")), Some("get-post"));

    let t = Table::new(&[
        ("get-post", path("/x").methods(&["GET", "POST"])),
        ("get", path("/x").methods(&["GET"])),
    ]);
    assert_eq!(t.get("/x"), Some("get-post"));

    let t = Table::new(&[
        ("two-hosts", path("/x").hosts(&["a.com", "b.com"])),
        ("one-host", path("/x").hosts(&["a.com"])),
    ]);
    assert_eq!(t.find(req("/x").host("a.com")), Some("two-hosts"));
}

#[test]
fn precedence_holds_across_host_tables() {
    // The exact-host table holds a catch-all; the host-less table a literal.
    let t = Table::new(&[
        ("host-catch-all", path("/{**rest}").hosts(&["a.com"])),
        ("literal", path("/api/items")),
    ]);
    assert_eq!(t.find(req("/api/items").host("a.com")), Some("literal"));
    assert_eq!(
        t.find(req("/api/other").host("a.com")),
        Some("host-catch-all")
    );
}
