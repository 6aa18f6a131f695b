//! Ten thousand routes: lookups still find the right one.

use std::time::Instant;

use super::{path, req, Req, Route, Table};
use crate::config::HeaderMatchMode as H;

/// 10,000 routes: literal, parameter, catch-all, exact-host, wildcard-host and header
/// routes, plus a few that share a path and differ only in a header.
fn many_routes() -> Vec<(String, Route)> {
    let mut routes = Vec::new();
    for i in 0..10_000 {
        let route = match i % 6 {
            0 => path(&format!("/svc{i}/items")),
            1 => path(&format!("/p{i}/{{id}}/detail")),
            2 => path(&format!("/c{i}/{{**rest}}")),
            3 => path("/api/{*rest}").hosts(&[&format!("h{i}.example.com")]),
            4 => path("/{**rest}").hosts(&[&format!("*.w{i}.example.com")]),
            _ if i >= 9_900 => {
                path("/shared/{id:int}").header("x-tenant", H::ExactHeader, &[&format!("t{i}")])
            }
            _ => path(&format!("/h{i}/{{id}}")).header(
                "x-tenant",
                H::ExactHeader,
                &[&format!("t{i}")],
            ),
        };
        routes.push((format!("r{i}"), route));
    }
    routes
}

fn table(routes: &[(String, Route)]) -> Table {
    let refs: Vec<(&str, Route)> = routes
        .iter()
        .map(|(id, r)| (id.as_str(), r.clone()))
        .collect();
    Table::new(&refs)
}

#[test]
fn ten_thousand_routes_find_the_right_one() {
    let t = table(&many_routes());
    assert_eq!(t.get("/svc0/items"), Some("r0"));
    assert_eq!(t.get("/SVC9996/Items/"), Some("r9996"));
    assert_eq!(t.get("/p9997/42/detail"), Some("r9997"));
    assert_eq!(t.get("/p9997/42"), None);
    assert_eq!(t.get("/c9998"), Some("r9998"));
    assert_eq!(t.get("/c9998/a/b/c"), Some("r9998"));
    assert_eq!(
        t.find(req("/api/x").host("h9993.example.com")),
        Some("r9993")
    );
    assert_eq!(t.find(req("/api").host("h9993.example.com")), Some("r9993"));
    assert_eq!(t.find(req("/nope").host("h9993.example.com")), None);
    assert_eq!(
        t.find(req("/any").host("a.b.w9994.example.com")),
        Some("r9994")
    );
    assert_eq!(t.find(req("/any").host("w9994.example.com")), None);
    assert_eq!(
        t.find(req("/h9899/1").header("x-tenant", "T9899")),
        Some("r9899")
    );
    assert_eq!(t.find(req("/h9899/1").header("x-tenant", "t9893")), None);
    assert_eq!(
        t.find(req("/shared/7").header("x-tenant", "t9995")),
        Some("r9995")
    );
    assert_eq!(
        t.find(req("/shared/7").header("x-tenant", "t9905")),
        Some("r9905")
    );
    assert_eq!(t.find(req("/shared/x").header("x-tenant", "t9905")), None);
    assert_eq!(t.get("/svc1/items"), None, "r1 is a parameter route");
    assert_eq!(t.get("/missing"), None);
    // A host that has its own table still reaches host-less routes.
    assert_eq!(
        t.find(req("/svc6/items").host("h3.example.com")),
        Some("r6")
    );
}

/// Name, the route alone, a request for it, its id.
type TimingCase = (&'static str, Route, fn() -> Req, &'static str);

fn time_lookups(t: &Table, request: impl Fn() -> Req, expected: &str) -> f64 {
    let requests: Vec<Req> = (0..1000).map(|_| request()).collect();
    let start = Instant::now();
    for _ in 0..200 {
        for r in &requests {
            let got = t.table.find(&r.method, &r.uri, &r.headers);
            assert_eq!(got.map(|i| t.ids[i].as_str()), Some(expected));
        }
    }
    start.elapsed().as_nanos() as f64 / 200_000.0
}

/// Not a pass/fail test: prints how a late hit among 10,000 routes compares with a
/// hit in a one-route table. Run with
/// `cargo test --release --lib routing::tests::scale -- --ignored --nocapture`.
#[test]
#[ignore = "timing report, run on demand in release mode"]
fn late_hit_cost_report() {
    let big = table(&many_routes());
    let cases: [TimingCase; 3] = [
        (
            "literal",
            path("/svc9996/items"),
            || req("/svc9996/items").host("example.org"),
            "r9996",
        ),
        (
            "exact host",
            path("/api/{*rest}").hosts(&["h9993.example.com"]),
            || req("/api/x/y").host("h9993.example.com"),
            "r9993",
        ),
        (
            "header",
            path("/h9899/{id}").header("x-tenant", H::ExactHeader, &["t9899"]),
            || {
                req("/h9899/1")
                    .host("example.org")
                    .header("x-tenant", "t9899")
            },
            "r9899",
        ),
    ];
    for (name, route, request, id) in cases {
        let small = Table::new(&[(id, route)]);
        let one = time_lookups(&small, request, id);
        let many = time_lookups(&big, request, id);
        println!(
            "{name}: 1 route {one:.0} ns, 10,000 routes {many:.0} ns, ratio {:.2}",
            many / one
        );
    }
}
