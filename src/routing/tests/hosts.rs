//! Host matching, through the table.

use super::{hosts, path, req, Table};

#[test]
fn exact_host_case_insensitive() {
    let t = Table::new(&[("a", hosts(&["Example.com"]))]);
    assert_eq!(t.find(req("/").host("example.com")), Some("a"));
    assert_eq!(t.find(req("/").host("EXAMPLE.COM")), Some("a"));
    assert_eq!(
        t.find(req("/").host("example.com:8080")),
        Some("a"),
        "any port"
    );
    assert_eq!(t.find(req("/").host("www.example.com")), None);
    assert_eq!(t.find(req("/").host("example.org")), None);
    assert_eq!(t.find(req("/")), None, "no host");
}

#[test]
fn trailing_dot_in_request_host_is_ignored() {
    let t = Table::new(&[("a", hosts(&["example.com"]))]);
    assert_eq!(t.find(req("/").host("example.com.")), Some("a"));
    assert_eq!(t.find(req("/").host("example.com.:443")), Some("a"));
    assert_eq!(t.find(req("http://example.com./")), Some("a"));
}

#[test]
fn wildcard_matches_any_depth_but_not_the_bare_domain() {
    let t = Table::new(&[("w", hosts(&["*.example.com"]))]);
    assert_eq!(t.find(req("/").host("a.example.com")), Some("w"));
    assert_eq!(t.find(req("/").host("A.B.C.Example.COM")), Some("w"));
    assert_eq!(t.find(req("/").host("example.com")), None);
    assert_eq!(t.find(req("/").host("badexample.com")), None);
    assert_eq!(t.find(req("/").host("a.example.com.evil")), None);
}

#[test]
fn ports_constrain_hosts() {
    let t = Table::new(&[
        ("hp", hosts(&["example.com:8080"])),
        ("wp", hosts(&["*.example.com:8443"])),
        ("p", hosts(&["*:9000"])),
    ]);
    assert_eq!(t.find(req("/").host("example.com:8080")), Some("hp"));
    assert_eq!(
        t.find(req("/").host("example.com")),
        None,
        "default port 80"
    );
    assert_eq!(t.find(req("/").host("example.com:8081")), None);
    assert_eq!(t.find(req("/").host("a.example.com:8443")), Some("wp"));
    assert_eq!(t.find(req("/").host("a.example.com")), None);
    assert_eq!(t.find(req("/").host("anything:9000")), Some("p"));
    assert_eq!(t.find(req("/").host("anything")), None);
    assert_eq!(t.find(req("/")), None, "no host, no port");
}

#[test]
fn default_ports_follow_the_scheme() {
    let t = Table::new(&[
        ("https", hosts(&["example.com:443"])),
        ("http", hosts(&["example.com:80"])),
    ]);
    assert_eq!(t.find(req("https://example.com/")), Some("https"));
    assert_eq!(t.find(req("http://example.com/")), Some("http"));
    assert_eq!(t.find(req("/").host("example.com")), Some("http"));
    assert_eq!(t.find(req("https://example.com:80/")), Some("http"));
}

#[test]
fn uri_authority_wins_over_host_header() {
    let t = Table::new(&[("a", hosts(&["a.com"])), ("b", hosts(&["b.com"]))]);
    assert_eq!(t.find(req("http://a.com/x").host("b.com")), Some("a"));
    assert_eq!(t.find(req("/x").host("b.com")), Some("b"));
}

#[test]
fn ipv6_hosts() {
    let t = Table::new(&[("v6", hosts(&["[::1]:8080"]))]);
    assert_eq!(t.find(req("http://[::1]:8080/")), Some("v6"));
    assert_eq!(t.find(req("/").host("[::1]:8080")), Some("v6"));
    assert_eq!(t.find(req("/").host("[::1]")), None);
}

#[test]
fn any_of_several_hosts() {
    let t = Table::new(&[("m", path("/api").hosts(&["a.com", "*.b.com", "*:7000"]))]);
    assert_eq!(t.find(req("/api").host("a.com")), Some("m"));
    assert_eq!(t.find(req("/api").host("x.b.com")), Some("m"));
    assert_eq!(t.find(req("/api").host("c.com:7000")), Some("m"));
    assert_eq!(t.find(req("/api").host("c.com")), None);
    assert_eq!(
        t.find(req("/other").host("a.com")),
        None,
        "path still applies"
    );
}

#[test]
fn malformed_host_header_matches_only_hostless_routes() {
    let t = Table::new(&[("h", hosts(&["a.com"])), ("any", path("/{**all}"))]);
    assert_eq!(t.find(req("/").host("a.com:notaport")), Some("any"));
    assert_eq!(t.find(req("/").host("a.com")), Some("h"));
}
