//! Path templates and request path normalisation, through the table.

use super::{path, Table};

#[test]
fn literal_segments_match_exactly_and_case_insensitively() {
    let t = Table::new(&[("users", path("/api/Users"))]);
    assert_eq!(t.get("/api/users"), Some("users"));
    assert_eq!(t.get("/API/USERS"), Some("users"));
    assert_eq!(
        t.get("/api/users/"),
        Some("users"),
        "trailing slash tolerated"
    );
    assert_eq!(t.get("/api"), None);
    assert_eq!(t.get("/api/users/1"), None);
    assert_eq!(t.get("/api/user"), None);
    assert_eq!(t.get("/"), None);
}

#[test]
fn root_template() {
    let t = Table::new(&[("root", path("/"))]);
    assert_eq!(t.get("/"), Some("root"));
    assert_eq!(t.get("//"), Some("root"));
    assert_eq!(t.get("/x"), None);
}

#[test]
fn template_trailing_slash_is_ignored() {
    let t = Table::new(&[("api", path("/api/"))]);
    assert_eq!(t.get("/api"), Some("api"));
    assert_eq!(t.get("/api/"), Some("api"));
}

#[test]
fn parameter_matches_exactly_one_segment() {
    let t = Table::new(&[("user", path("/users/{id}"))]);
    assert_eq!(t.get("/users/42"), Some("user"));
    assert_eq!(t.get("/users/AbC"), Some("user"));
    assert_eq!(t.get("/users"), None);
    assert_eq!(
        t.get("/users/"),
        None,
        "a parameter never matches an empty segment"
    );
    assert_eq!(t.get("/users/42/x"), None);
}

#[test]
fn optional_parameters() {
    let t = Table::new(&[("files", path("/files/{name?}"))]);
    assert_eq!(t.get("/files"), Some("files"));
    assert_eq!(t.get("/files/a.txt"), Some("files"));
    assert_eq!(t.get("/files/a/b"), None);

    let t = Table::new(&[("two", path("/d/{a?}/{b?}"))]);
    assert_eq!(t.get("/d"), Some("two"));
    assert_eq!(t.get("/d/1"), Some("two"));
    assert_eq!(t.get("/d/1/2"), Some("two"));
    assert_eq!(t.get("/d/1/2/3"), None);

    let t = Table::new(&[("opt-rest", path("/o/{a?}/{*rest}"))]);
    assert_eq!(t.get("/o"), Some("opt-rest"));
    assert_eq!(t.get("/o/1/2/3"), Some("opt-rest"));
    assert_eq!(t.get("/p"), None);
}

#[test]
fn catch_all_matches_zero_or_more_segments() {
    let t = Table::new(&[
        ("static", path("/static/{**rest}")),
        ("single", path("/s/{*rest}")),
    ]);
    assert_eq!(t.get("/static"), Some("static"));
    assert_eq!(t.get("/static/"), Some("static"));
    assert_eq!(t.get("/static/css/site.css"), Some("static"));
    assert_eq!(t.get("/s/a/b"), Some("single"));
    assert_eq!(t.get("/staticx"), None);
}

#[test]
fn no_path_matches_every_path() {
    let t = Table::new(&[("host-only", super::hosts(&["example.com"]))]);
    let get = |uri: &str| t.find(super::req(uri).host("example.com"));
    assert_eq!(get("/"), Some("host-only"));
    assert_eq!(get("/any/thing/at/all"), Some("host-only"));
}

#[test]
fn constraints_filter_segments() {
    let t = Table::new(&[
        ("int", path("/items/{id:int}")),
        ("guid", path("/orders/{id:guid}")),
        ("alpha", path("/tags/{t:alpha}")),
        ("bool", path("/flags/{f:bool}")),
        ("long", path("/big/{n:long}")),
    ]);
    assert_eq!(t.get("/items/42"), Some("int"));
    assert_eq!(t.get("/items/-42"), Some("int"));
    assert_eq!(t.get("/items/x"), None);
    assert_eq!(t.get("/items/99999999999"), None);
    assert_eq!(t.get("/big/99999999999"), Some("long"));
    assert_eq!(
        t.get("/orders/3F2504E0-4F89-11D3-9A0C-0305E82C3301"),
        Some("guid")
    );
    assert_eq!(t.get("/orders/42"), None);
    assert_eq!(t.get("/tags/Rust"), Some("alpha"));
    assert_eq!(t.get("/tags/rust2"), None);
    assert_eq!(t.get("/flags/True"), Some("bool"));
    assert_eq!(t.get("/flags/1"), None);
}

#[test]
fn constrained_and_plain_parameters_coexist() {
    let t = Table::new(&[
        ("plain", path("/items/{name}")),
        ("int", path("/items/{id:int}")),
    ]);
    assert_eq!(t.get("/items/7"), Some("int"));
    assert_eq!(t.get("/items/seven"), Some("plain"));
}

#[test]
fn dot_segments_are_removed_before_routing() {
    let t = Table::new(&[("api", path("/api/{**rest}")), ("admin", path("/admin"))]);
    assert_eq!(t.get("/api/../admin"), Some("admin"));
    assert_eq!(t.get("/api/%2e%2e/admin"), Some("admin"));
    assert_eq!(t.get("/api/%2E%2E/admin"), Some("admin"));
    assert_eq!(t.get("/api/.%2e/admin"), Some("admin"));
    assert_eq!(t.get("/./admin/."), Some("admin"));
    assert_eq!(t.get("/../../admin"), Some("admin"));
    assert_eq!(t.get("/admin/x/.."), Some("admin"));
    assert_eq!(t.get("/api/./x"), Some("api"));
}

#[test]
fn encoded_slash_stays_inside_its_segment() {
    let t = Table::new(&[("file", path("/files/{name}")), ("ab", path("/files/a/b"))]);
    assert_eq!(t.get("/files/a%2Fb"), Some("file"));
    assert_eq!(t.get("/files/a%2fb"), Some("file"));
    assert_eq!(t.get("/files/a/b"), Some("ab"));
    let t = Table::new(&[("ab", path("/a/b"))]);
    assert_eq!(t.get("/a%2Fb"), None);
}

#[test]
fn escapes_and_repeated_slashes_are_normalised() {
    let t = Table::new(&[("api", path("/api/items")), ("sp", path("/hello world"))]);
    assert_eq!(t.get("//api///items"), Some("api"));
    assert_eq!(t.get("/%61pi/%49TEMS"), Some("api"));
    assert_eq!(t.get("/hello%20world"), Some("sp"));
    assert_eq!(t.get("/api/items%"), None);
}

#[test]
fn absolute_form_uri_routes_on_its_path() {
    let t = Table::new(&[("api", path("/api"))]);
    assert_eq!(t.get("http://example.com/api?x=1"), Some("api"));
}

#[test]
fn no_match_and_empty_table() {
    let t = Table::new(&[("a", path("/a"))]);
    assert_eq!(t.get("/b"), None);
    let empty = Table::new(&[]);
    assert!(empty.table.is_empty());
    assert_eq!(empty.get("/"), None);
}
