use std::collections::BTreeMap;

use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::*;
use crate::request::ConnectionInfo;

fn compile(list: &[&[(&str, &str)]], route_path: Option<&str>) -> RouteTransforms {
    let raw: Vec<BTreeMap<String, String>> = list
        .iter()
        .map(|e| {
            e.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    let parsed = parse_transforms(&raw, "T").expect("parses");
    RouteTransforms::compile(&parsed, route_path).expect("compiles")
}

struct Sent {
    method: Method,
    headers: HeaderMap,
    uri: Option<RewrittenUri>,
}

/// The transforms' view of a request to `path` with `headers` from one client
/// (10.1.2.3 for `front.example:8080`), given to `f` with the request's map.
fn with_request<R>(
    path: &str,
    query: Option<&str>,
    headers: &[(&str, &str)],
    f: impl FnOnce(&ClientRequest<'_>, HeaderMap) -> R,
) -> R {
    let conn = ConnectionInfo {
        remote: "[::ffff:10.1.2.3]:5555".parse().unwrap(),
        local: "127.0.0.1:8080".parse().unwrap(),
        tls: false,
    };
    let host = HeaderValue::from_static("front.example:8080");
    let client = ClientRequest {
        path,
        query,
        host: Some(&host),
        https: false,
        connection: Some(&conn),
        client_certificate: None,
    };
    let mut h = HeaderMap::new();
    for (n, v) in headers {
        h.append(
            http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    f(&client, h)
}

fn run(t: &RouteTransforms, path: &str, query: Option<&str>, headers: &[(&str, &str)]) -> Sent {
    with_request(path, query, headers, |client, mut h| {
        let mut method = Method::GET;
        let uri = t.apply_request(client, &mut method, &mut h);
        Sent {
            method,
            headers: h,
            uri,
        }
    })
}

fn path_of(t: &RouteTransforms, path: &str) -> String {
    run(t, path, None, &[]).uri.expect("rewritten").path
}

#[test]
fn defaults_set_x_forwarded_and_remove_prefix_and_forwarded() {
    let t = RouteTransforms::default();
    assert!(!t.rewrites_uri());
    let s = run(
        &t,
        "/a",
        None,
        &[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-prefix", "/evil"),
            ("forwarded", "for=6.6.6.6"),
        ],
    );
    assert_eq!(s.headers["x-forwarded-for"], "10.1.2.3");
    assert_eq!(s.headers.get_all("x-forwarded-for").iter().count(), 1);
    assert_eq!(s.headers["x-forwarded-proto"], "http");
    assert_eq!(s.headers["x-forwarded-host"], "front.example:8080");
    assert!(!s.headers.contains_key("x-forwarded-prefix"));
    assert!(!s.headers.contains_key("forwarded"));
    assert!(s.uri.is_none());
}

#[test]
fn path_transforms() {
    let t = compile(&[&[("PathRemovePrefix", "/api/")]], None);
    assert_eq!(path_of(&t, "/API/users"), "/users");
    assert_eq!(path_of(&t, "/api"), "");
    assert_eq!(path_of(&t, "/apix/users"), "/apix/users");
    let t = compile(
        &[
            &[("PathPrefix", "/v 1")],
            &[("PathRemovePrefix", "/v%201/old")],
        ],
        None,
    );
    assert_eq!(path_of(&t, "/old/x"), "/x");
    let t = compile(&[&[("PathSet", "/fixed")]], None);
    assert_eq!(path_of(&t, "/anything"), "/fixed");
}

#[test]
fn path_pattern_fills_route_values_and_drops_missing_ones() {
    let t = compile(
        &[&[("PathPattern", "/svc/{plugin}/{opt}/x/{**rest}")]],
        Some("/api/{plugin}/{opt?}/{**rest}"),
    );
    assert_eq!(path_of(&t, "/api/p1/o/a/b%20c"), "/svc/p1/o/x/a/b%20c");
    assert_eq!(path_of(&t, "/api/p1"), "/svc/p1/x");
    let t = compile(&[&[("PathPattern", "/s/{*rest}")]], Some("/api/{**rest}"));
    assert_eq!(path_of(&t, "/api/a/b"), "/s/a%2Fb");
    let bad = parse_transforms(
        &[BTreeMap::from([("PathPattern".into(), "/a/{:int}".into())])],
        "T",
    )
    .unwrap();
    let (i, message) = RouteTransforms::compile(&bad, None).unwrap_err();
    assert_eq!(i, 0);
    assert!(message.contains("without a name"), "{message}");
}

#[test]
fn query_transforms() {
    let t = compile(
        &[
            &[("QueryValueParameter", "a"), ("Set", "x y")],
            &[("QueryValueParameter", "b"), ("Append", "&2")],
            &[("QueryRemoveParameter", "gone")],
            &[("QueryRouteParameter", "id"), ("Set", "id")],
        ],
        Some("/items/{id}"),
    );
    let s = run(&t, "/items/4%202", Some("A=1&gone=1&b=1&a=3&keep=%20"), &[]);
    assert_eq!(
        s.uri.unwrap().query.as_deref(),
        Some("a=x%20y&b=1&keep=%20&b=%262&id=4%202")
    );
}

#[test]
fn method_and_headers() {
    let t = compile(
        &[
            &[("HttpMethodChange", "GET"), ("Set", "POST")],
            &[("RequestHeader", "x-a"), ("Set", "1")],
            &[("RequestHeader", "x-b"), ("Append", "2")],
            &[("RequestHeader", "x-c"), ("Set", "")],
            &[("RequestHeaderRemove", "x-d")],
            &[("RequestHeaderRouteValue", "x-id"), ("Set", "id")],
        ],
        Some("/i/{id}"),
    );
    let s = run(
        &t,
        "/i/a%20b",
        None,
        &[("x-a", "0"), ("x-b", "1"), ("x-c", "0"), ("x-d", "0")],
    );
    assert_eq!(s.method, Method::POST);
    assert_eq!(s.headers["x-a"], "1");
    let b: Vec<_> = s.headers.get_all("x-b").iter().collect();
    assert_eq!(b, ["1", "2"]);
    assert!(!s.headers.contains_key("x-c") && !s.headers.contains_key("x-d"));
    assert_eq!(s.headers["x-id"], "a b");
    let t = compile(&[&[("RequestHeadersAllowed", "x-a;x-b")]], None);
    let s = run(&t, "/", None, &[("x-a", "1"), ("x-z", "1")]);
    assert!(s.headers.contains_key("x-a") && !s.headers.contains_key("x-z"));
    assert!(
        s.headers.contains_key("x-forwarded-for"),
        "defaults still apply"
    );
    let t = compile(&[&[("RequestHeadersCopy", "false")]], None);
    let s = run(&t, "/", None, &[("x-a", "1")]);
    assert!(!s.headers.contains_key("x-a"));
}

#[test]
fn x_forwarded_actions_and_prefix() {
    let t = compile(
        &[
            &[("PathRemovePrefix", "/api")],
            &[
                ("X-Forwarded", "Append"),
                ("Proto", "Off"),
                ("Host", "Remove"),
                ("HeaderPrefix", "X-Original-"),
            ],
        ],
        None,
    );
    let s = run(
        &t,
        "/API/x",
        None,
        &[
            ("x-original-for", "1.1.1.1"),
            ("x-original-for", "2.2.2.2"),
            ("x-original-proto", "gopher"),
            ("x-original-host", "h"),
            ("forwarded", "for=x"),
            ("x-forwarded-for", "kept"),
        ],
    );
    assert_eq!(s.headers["x-original-for"], "1.1.1.1, 2.2.2.2, 10.1.2.3");
    assert_eq!(s.headers["x-original-proto"], "gopher", "Off leaves it");
    assert!(!s.headers.contains_key("x-original-host"));
    assert_eq!(s.headers["x-original-prefix"], "/API");
    assert!(!s.headers.contains_key("forwarded"));
    assert_eq!(s.headers["x-forwarded-for"], "kept", "no defaults");
}

#[test]
fn forwarded_rfc7239() {
    let t = compile(
        &[&[
            ("Forwarded", "for,by,proto,host"),
            ("ForFormat", "IpAndPort"),
            ("ByFormat", "Unknown"),
            ("Action", "Append"),
        ]],
        None,
    );
    let s = run(
        &t,
        "/",
        None,
        &[("forwarded", "for=1.1.1.1"), ("x-forwarded-for", "spoof")],
    );
    assert_eq!(
        s.headers["forwarded"],
        "for=1.1.1.1, proto=http;host=\"front.example:8080\";for=\"10.1.2.3:5555\";by=unknown"
    );
    assert!(!s.headers.contains_key("x-forwarded-for"));
    let t = compile(&[&[("Forwarded", "for")]], None);
    let s = run(&t, "/", None, &[]);
    let v = s.headers["forwarded"].to_str().unwrap().to_owned();
    assert!(v.starts_with("for=_") && v.len() == 4 + 10, "{v}");
}

#[test]
fn response_headers_and_trailers() {
    let t = Arc::new(compile(
        &[
            &[("ResponseHeader", "x-ok"), ("Set", "1")],
            &[
                ("ResponseHeader", "x-bad"),
                ("Set", "1"),
                ("When", "Failure"),
            ],
            &[
                ("ResponseHeader", "x-all"),
                ("Append", "1"),
                ("When", "Always"),
            ],
            &[("ResponseHeaderRemove", "server")],
            &[("ResponseTrailer", "x-t"), ("Set", "done")],
            &[("ResponseTrailersAllowed", "grpc-status")],
        ],
        None,
    ));
    let mut h = HeaderMap::new();
    h.insert("server", "backend".parse().unwrap());
    h.insert("x-all", "0".parse().unwrap());
    t.apply_response(&mut h, StatusCode::OK, true);
    assert_eq!(h["x-ok"], "1");
    assert!(!h.contains_key("x-bad") && !h.contains_key("server"));
    assert_eq!(h.get_all("x-all").iter().count(), 2);
    let mut h = HeaderMap::new();
    t.apply_response(&mut h, StatusCode::BAD_GATEWAY, false);
    assert!(h.contains_key("x-bad") && !h.contains_key("x-ok"));

    let mut tr = t.trailers_for(StatusCode::OK).unwrap();
    assert!(tr.pending());
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    trailers.insert("x-secret", "1".parse().unwrap());
    tr.apply(&mut trailers);
    assert_eq!(trailers.len(), 2, "{trailers:?}");
    assert_eq!(trailers["x-t"], "done");
    assert!(tr.at_end().is_none(), "already added");
    let mut tr = t.trailers_for(StatusCode::OK).unwrap();
    assert_eq!(tr.at_end().unwrap()["x-t"], "done");
    assert!(RouteTransforms::default().trailers_for_default().is_none());
}

impl RouteTransforms {
    fn trailers_for_default(self) -> Option<TrailerTransforms> {
        Arc::new(self).trailers_for(StatusCode::OK)
    }
}

#[test]
fn forwarded_for_values_match_display() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut rng = fastrand::Rng::with_seed(7);
    let mut ips: Vec<IpAddr> = ["0.0.0.0", "255.255.255.255", "10.0.100.9", "127.0.0.1"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    ips.extend((0..2000).map(|_| IpAddr::V4(Ipv4Addr::from(rng.u32(..)))));
    ips.push("::1".parse().unwrap());
    ips.push(IpAddr::V6(Ipv6Addr::from(rng.u128(..))));
    for ip in ips {
        assert_eq!(request::ip_value(ip), ip.to_string().as_str(), "{ip}");
    }
    // IPv4-mapped IPv6 is written as IPv4.
    let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
    assert_eq!(request::ip_value(mapped), "192.0.2.1");
    // The per-thread cache: addresses sharing a slot, asked for in turns, each get
    // their own text; a repeated one gets the same shared bytes.
    let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.9".parse().unwrap());
    for _ in 0..3 {
        assert_eq!(request::ip_value(a), "10.0.0.1");
        assert_eq!(request::ip_value(b), "10.0.0.9");
    }
    let (first, again) = (request::ip_value(b), request::ip_value(b));
    assert_eq!(first.as_bytes().as_ptr(), again.as_bytes().as_ptr());
}

#[test]
fn host_values_are_kept_per_thread_and_checked() {
    let hosts: Vec<String> = (0..12).map(|i| format!("h{i}.example:8{i}")).collect();
    for _ in 0..3 {
        for h in &hosts {
            assert_eq!(request::host_value(h).unwrap(), h.as_str());
        }
    }
    let (first, again) = (
        request::host_value("api.example").unwrap(),
        request::host_value("api.example").unwrap(),
    );
    assert_eq!(first.as_bytes().as_ptr(), again.as_bytes().as_ptr());
    assert!(request::host_value("bad\nhost").is_none());
}

/// `apply_request_adding` for a request to `/a` (the client of [`run`]): its map and
/// the fields added beside it.
fn run_adding(
    t: &RouteTransforms,
    headers: &[(&str, &str)],
) -> (HeaderMap, crate::forwarding::headers::Added) {
    with_request("/a", None, headers, |client, mut h| {
        let mut added = crate::forwarding::headers::Added::default();
        let mut method = Method::GET;
        t.apply_request_adding(client, &mut method, &mut h, &mut added);
        (h, added)
    })
}

#[test]
fn x_forwarded_fields_a_request_lacks_are_added_beside_its_map() {
    let names = |added: &crate::forwarding::headers::Added| -> Vec<String> {
        added.iter().map(|(n, _)| n.to_string()).collect()
    };
    // The defaults: the three fields, none in the map.
    let (map, added) = run_adding(&RouteTransforms::default(), &[("accept", "*/*")]);
    assert_eq!(
        names(&added),
        ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]
    );
    assert_eq!(map.len(), 1);
    // One the client sent is replaced in the map (its value not kept twice).
    let (map, added) = run_adding(
        &RouteTransforms::default(),
        &[("x-forwarded-for", "6.6.6.6")],
    );
    assert_eq!(map["x-forwarded-for"], "10.1.2.3");
    assert_eq!(names(&added), ["x-forwarded-proto", "x-forwarded-host"]);
    // A later transform naming the header sees it in the map.
    let t = compile(
        &[
            &[("X-Forwarded", "Set")],
            &[("RequestHeader", "X-Forwarded-Proto"), ("Append", "extra")],
            &[("RequestHeaderRemove", "X-Forwarded-Host")],
        ],
        None,
    );
    let (map, added) = run_adding(&t, &[]);
    assert_eq!(names(&added), ["x-forwarded-for"]);
    let protos: Vec<_> = map.get_all("x-forwarded-proto").iter().collect();
    assert_eq!(protos, ["http", "extra"]);
    assert!(!map.contains_key("x-forwarded-host"));
    // Whatever is added beside, the request sent is the one `apply_request` makes.
    for headers in [&[][..], &[("x-forwarded-host", "h"), ("accept", "a")][..]] {
        let (mut map, mut added) = run_adding(&t, headers);
        added.move_into(&mut map);
        let expected = run(&t, "/a", None, headers).headers;
        let sorted = |m: &HeaderMap| {
            let mut v: Vec<_> = m.iter().map(|(n, v)| format!("{n}: {v:?}")).collect();
            v.sort();
            v
        };
        assert_eq!(sorted(&map), sorted(&expected), "{headers:?}");
    }
}

/// YARP's `ClientCert`: the client's certificate in base64 replaces the client's own
/// field of that name; without a certificate, the field is only removed.
#[test]
fn client_cert_sends_the_certificate_or_nothing() {
    let t = compile(&[&[("ClientCert", "X-Client-Cert")]], None);
    let certificate = crate::request::ClientCertificate::from_der(vec![0x30, 0x03, 1, 2, 3]);
    for (given, expected) in [(Some(&certificate), Some("MAMBAgM=")), (None, None)] {
        let sent = with_request(
            "/",
            None,
            &[("x-client-cert", "forged")],
            |client, mut h| {
                let client = ClientRequest {
                    client_certificate: given,
                    ..*client
                };
                let mut method = Method::GET;
                t.apply_request(&client, &mut method, &mut h);
                h
            },
        );
        let values: Vec<_> = sent.get_all("x-client-cert").iter().collect();
        match expected {
            Some(value) => assert_eq!(values, [value], "{given:?}"),
            None => assert!(values.is_empty(), "{values:?}"),
        }
    }
}
