//! Methods, header rules and query rules, through the table.

use super::{path, req, Table};
use crate::config::{HeaderMatchMode as H, QueryParameterMatchMode as Q};

#[test]
fn methods() {
    let t = Table::new(&[("rw", path("/x").methods(&["get", "Post"]))]);
    assert_eq!(t.find(req("/x")), Some("rw"));
    assert_eq!(t.find(req("/x").method("POST")), Some("rw"));
    assert_eq!(t.find(req("/x").method("DELETE")), None);
    assert_eq!(t.find(req("/x").method("HEAD")), None, "HEAD is not GET");
    assert_eq!(t.find(req("/x").method("PURGE")), None);

    let all = Table::new(&[("any", path("/x"))]);
    assert_eq!(all.find(req("/x").method("PURGE")), Some("any"));

    let every = [
        "HEAD", "OPTIONS", "GET", "PUT", "POST", "PATCH", "DELETE", "TRACE", "CONNECT",
    ];
    let t = Table::new(&[("all", path("/x").methods(&every))]);
    for m in every {
        assert_eq!(t.find(req("/x").method(m)), Some("all"), "{m}");
    }
}

#[test]
fn header_modes() {
    let t = Table::new(&[
        (
            "exact",
            path("/exact").header("x-v", H::ExactHeader, &["1", "2"]),
        ),
        (
            "prefix",
            path("/prefix").header("x-v", H::HeaderPrefix, &["ab"]),
        ),
        (
            "contains",
            path("/contains").header("x-v", H::Contains, &["mid"]),
        ),
        (
            "notcontains",
            path("/notcontains").header("x-v", H::NotContains, &["bad"]),
        ),
        ("exists", path("/exists").header("x-v", H::Exists, &[])),
        (
            "notexists",
            path("/notexists").header("x-v", H::NotExists, &[]),
        ),
        (
            "cs",
            path("/cs").header_cs("x-v", H::ExactHeader, &["Abc"], true),
        ),
    ]);
    let with = |uri: &str, v: &str| t.find(req(uri).header("X-V", v));
    let without = |uri: &str| t.find(req(uri));

    assert_eq!(with("/exact", "2"), Some("exact"));
    assert_eq!(with("/exact", "0, 1"), Some("exact"));
    assert_eq!(with("/exact", "12"), None);
    assert_eq!(without("/exact"), None);

    assert_eq!(with("/prefix", "ABC"), Some("prefix"));
    assert_eq!(with("/prefix", "xab"), None);

    assert_eq!(with("/contains", "a-MID-z"), Some("contains"));
    assert_eq!(with("/contains", "none"), None);

    assert_eq!(with("/notcontains", "good"), Some("notcontains"));
    assert_eq!(
        without("/notcontains"),
        Some("notcontains"),
        "absent header"
    );
    assert_eq!(with("/notcontains", "very bad"), None);

    assert_eq!(with("/exists", "x"), Some("exists"));
    assert_eq!(with("/exists", ""), None);
    assert_eq!(without("/exists"), None);

    assert_eq!(without("/notexists"), Some("notexists"));
    assert_eq!(with("/notexists", "x"), None);

    assert_eq!(with("/cs", "Abc"), Some("cs"));
    assert_eq!(with("/cs", "abc"), None);
}

#[test]
fn all_header_rules_must_match() {
    let t = Table::new(&[(
        "both",
        path("/x")
            .header("a", H::Exists, &[])
            .header("b", H::ExactHeader, &["1"]),
    )]);
    assert_eq!(
        t.find(req("/x").header("a", "1").header("b", "1")),
        Some("both")
    );
    assert_eq!(t.find(req("/x").header("a", "1")), None);
    assert_eq!(t.find(req("/x").header("b", "1")), None);
}

#[test]
fn cookie_header_is_split_on_semicolons() {
    let t = Table::new(&[(
        "beta",
        path("/x").header("Cookie", H::ExactHeader, &["beta=1"]),
    )]);
    assert_eq!(
        t.find(req("/x").header("cookie", "a=b; beta=1; c=d")),
        Some("beta")
    );
    assert_eq!(
        t.find(req("/x").header("cookie", "a=b").header("cookie", "beta=1")),
        Some("beta")
    );
    assert_eq!(t.find(req("/x").header("cookie", "a=b, beta=1")), None);
}

#[test]
fn query_modes() {
    let t = Table::new(&[
        ("exact", path("/exact").query("v", Q::Exact, &["a b"])),
        ("prefix", path("/prefix").query("v", Q::Prefix, &["pre"])),
        (
            "contains",
            path("/contains").query("v", Q::Contains, &["mid"]),
        ),
        (
            "notcontains",
            path("/notcontains").query("v", Q::NotContains, &["bad"]),
        ),
        ("exists", path("/exists").query("v", Q::Exists, &[])),
    ]);
    let g = |uri: &str| t.get(uri);
    assert_eq!(g("/exact?v=a+b"), Some("exact"));
    assert_eq!(g("/exact?V=A%20B"), Some("exact"));
    assert_eq!(g("/exact?v=x&v=a+b"), Some("exact"));
    assert_eq!(g("/exact?v=ab"), None);
    assert_eq!(g("/exact"), None);

    assert_eq!(g("/prefix?v=PREfix"), Some("prefix"));
    assert_eq!(g("/prefix?v=xpre"), None);

    assert_eq!(g("/contains?v=amidst"), Some("contains"));
    assert_eq!(g("/contains?w=mid"), None);

    assert_eq!(g("/notcontains"), Some("notcontains"));
    assert_eq!(g("/notcontains?v=good"), Some("notcontains"));
    assert_eq!(g("/notcontains?v=good&v=bad"), None);

    assert_eq!(g("/exists?v=1"), Some("exists"));
    assert_eq!(g("/exists?v="), None);
    assert_eq!(g("/exists?v"), None);
    assert_eq!(g("/exists"), None);
}

#[test]
fn all_query_rules_must_match() {
    let t = Table::new(&[(
        "both",
        path("/x")
            .query("a", Q::Exists, &[])
            .query("b", Q::Exact, &["1"]),
    )]);
    assert_eq!(t.get("/x?a=1&b=1"), Some("both"));
    assert_eq!(t.get("/x?a=1"), None);
    assert_eq!(t.get("/x?b=1"), None);
}

#[test]
fn failed_rules_fall_through_to_the_next_candidate() {
    let t = Table::new(&[
        ("header", path("/x").header("x-a", H::Exists, &[])),
        ("method", path("/x").methods(&["POST"])),
        ("plain", path("/{any}")),
    ]);
    assert_eq!(t.find(req("/x").header("x-a", "1")), Some("header"));
    assert_eq!(t.find(req("/x").method("POST")), Some("method"));
    assert_eq!(t.find(req("/x")), Some("plain"));
}
