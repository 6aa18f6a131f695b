//! The fuzz targets, one crate for `cargo fuzz` (`fuzz/fuzz_targets/*.rs`) and the
//! in-tree smoke test (`tests/fuzz_smoke.rs`, seeded random inputs under `cargo test`).
//!
//! Each target takes an [`Unstructured`] and must never panic; each also checks
//! properties that must hold for every input.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::{Result, Unstructured};
use fuseway::__private::{forwarded_path, remove_hop_by_hop, rewrite_for_destination};
use fuseway::config::{parse, parse_transforms, Format, RouteConfig, TRANSFORM_KINDS};
use fuseway::request::ConnectionInfo;
use fuseway::routing::RouteTable;
use fuseway::state::ProxyState;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri, Version};
use serde_json::{json, Map, Value};

// ===== building blocks =====

/// Pick one of `items`.
fn pick<'a, T: ?Sized>(u: &mut Unstructured, items: &[&'a T]) -> Result<&'a T> {
    Ok(items[u.choose_index(items.len())?])
}

/// A string of 0..=max pieces from `alphabet`, or now and then arbitrary text.
fn text(u: &mut Unstructured, alphabet: &[&str], max: usize) -> Result<String> {
    if u.ratio(1, 16)? {
        return u.arbitrary::<String>();
    }
    let n = u.int_in_range(0..=max)?;
    let mut s = String::new();
    for _ in 0..n {
        s.push_str(pick(u, alphabet)?);
    }
    Ok(s)
}

const SEGMENTS: &[&str] = &[
    "/",
    "/",
    "/",
    "/",
    "api",
    "admin",
    "Api",
    "ADMIN",
    "users",
    "x",
    "42",
    "7",
    "true",
    "abc",
    "6f9619ff-8b86-d011-b42d-00cf4fc964ff",
    "lit",
    "{lit}",
    "a%2Fb",
    "caf%C3%A9",
    "..",
    ".",
    "%2e",
    "%2E%2e",
    "%2F",
    "%2f",
    "%25",
    "%zz",
    "%",
    ";",
    "~",
    "-",
    "_",
    "..;",
    "...",
    "a.b",
    "%00",
    "%c3%a9",
    "é",
    "*",
    "{",
    "}",
    "?",
    "&",
    "=",
    "#",
    "\\",
    " ",
    "+",
];

const TEMPLATE_PIECES: &[&str] = &[
    "/",
    "/",
    "/",
    "api",
    "admin",
    "x",
    "{id}",
    "{id?}",
    "{*rest}",
    "{**rest}",
    "{id:int}",
    "{n:long}",
    "{b:bool}",
    "{a:alpha}",
    "{g:guid}",
    "{x:int:long}",
    "{x:nope}",
    "{{",
    "}}",
    "{",
    "}",
    "{=1}",
    "{id=1}",
    "file-{id}.txt",
    "..",
    ".",
    "%2e",
    "*",
    "?",
    "{}",
    "{a}{b}",
];

const HOST_PIECES: &[&str] = &[
    "example.com",
    "EXAMPLE.com",
    "a.",
    "*.",
    "*",
    ":",
    "8080",
    ":*",
    "[::1]",
    "[",
    "]",
    ".",
    "admin.internal",
    "xn--bcher-kva",
    "é",
    "@",
    " ",
    "0",
];

const HEADER_NAMES: &[&str] = &[
    "connection",
    "Connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "te",
    "TE",
    "upgrade",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "host",
    "Host",
    "x-forwarded-for",
    "X-Forwarded-For",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-prefix",
    "forwarded",
    "alt-svc",
    "http2-settings",
    "close",
    "x-secret",
    "cookie",
    "accept",
    "x-custom",
    "trailer",
    "upgrade-insecure-requests",
    "alpn",
];

const HEADER_VALUE_PIECES: &[&str] = &[
    "keep-alive",
    "close",
    "x-secret",
    "X-Forwarded-For",
    "host",
    "te",
    "trailers",
    "chunked",
    "upgrade",
    ",",
    ", ",
    " ",
    "\t",
    "\"",
    "a",
    "1",
    "=",
    ";",
    "content-length",
    "cookie",
    "x-forwarded-proto",
    "Connection",
    "%",
    "é",
];

/// Keys that go with a transform's kind (`Set`, `When`, ...), and some that go with
/// none: mixed with `TRANSFORM_KINDS` for generated transform entries.
const TRANSFORM_COMPANION_KEYS: &[&str] = &[
    "Set",
    "Append",
    "Append",
    "When",
    "Action",
    "For",
    "By",
    "Proto",
    "Host",
    "Prefix",
    "HeaderPrefix",
    "NodeFormat",
    "ByFormat",
    "ForFormat",
    "Set",
    "Unknown",
];

const TRANSFORM_VALUES: &[&str] = &[
    "/api",
    "/{**rest}",
    "{id}",
    "x-h",
    "true",
    "false",
    "Set",
    "Append",
    "Remove",
    "Off",
    "Always",
    "Success",
    "Failure",
    "Random",
    "RandomAndPort",
    "Unknown",
    "Ip",
    "IpAndPort",
    "GET",
    "POST",
    ";",
    "a;b",
    "",
    " ",
    "{",
    "}",
    "x-forwarded-",
    "X-Forwarded-For",
];

fn json_text(u: &mut Unstructured, alphabet: &[&str], max: usize) -> Result<Value> {
    Ok(Value::String(text(u, alphabet, max)?))
}

/// A path template: mostly valid segments, now and then a broken one.
fn template(u: &mut Unstructured) -> Result<String> {
    if u.ratio(1, 10)? {
        return text(u, TEMPLATE_PIECES, 6);
    }
    let valid = [
        "api",
        "admin",
        "x",
        "users",
        "{id}",
        "{id:int}",
        "{name:alpha}",
        "{g:guid}",
        "{flag:bool}",
        "{n:long}",
        "A%2Fb",
        "caf\u{e9}",
        "{{lit}}",
    ];
    let mut path = String::new();
    for i in 0..u.int_in_range(0..=4)? {
        path.push('/');
        if u.ratio(1, 12)? {
            path.push_str(pick(u, TEMPLATE_PIECES)?);
        } else {
            // Parameter names numbered by position, so they never repeat.
            let segment = pick(u, &valid)?;
            match segment.find([':', '}']) {
                Some(end) if segment.starts_with('{') => {
                    path.push_str(&format!("{}{i}{}", &segment[..end], &segment[end..]))
                }
                _ => path.push_str(segment),
            }
        }
    }
    match u.int_in_range(0..=5)? {
        0 => path.push_str("/{**rest}"),
        1 => path.push_str("/{*rest}"),
        2 => path.push_str("/{opt?}"),
        3 => path.push('/'),
        _ => {}
    }
    if path.is_empty() {
        path.push('/');
    }
    Ok(path)
}

/// A host pattern: mostly valid, now and then broken.
fn host_pattern(u: &mut Unstructured) -> Result<String> {
    if u.ratio(1, 10)? {
        return text(u, HOST_PIECES, 4);
    }
    let name = pick(
        u,
        &[
            "example.com",
            "*.example.com",
            "admin.internal",
            "[::1]",
            "127.0.0.1",
            "*",
            "A.Example.COM",
        ],
    )?;
    let port = pick(u, &["", "", ":8080", ":80", ":*"])?;
    Ok(format!("{name}{port}"))
}

/// A request `Host` header value.
fn request_host(u: &mut Unstructured) -> Result<String> {
    if u.ratio(1, 6)? {
        return text(u, HOST_PIECES, 3);
    }
    let name = pick(
        u,
        &[
            "example.com",
            "a.example.com",
            "b.a.example.com",
            "admin.internal",
            "ADMIN.internal.",
            "[::1]",
            "127.0.0.1",
            "other.test",
            "example.com.evil",
        ],
    )?;
    let port = pick(u, &["", ":8080", ":80", ":443", ":1"])?;
    Ok(format!("{name}{port}"))
}

/// A duration as config writes it: mostly valid.
fn duration(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(1, 8)? {
        return json_text(
            u,
            &["1", "s", "ms", "00:", "01", ":", ".", "-", "5s", "1e9"],
            4,
        );
    }
    Ok(json!(pick(
        u,
        &["5s", "100ms", "00:00:10", "1m", "2h", "0s", "00:01:00.5"]
    )?))
}

/// A `Match` object.
fn route_match(u: &mut Unstructured) -> Result<Value> {
    let mut m = Map::new();
    if u.ratio(5, 6)? {
        m.insert("Path".into(), Value::String(template(u)?));
    }
    if u.ratio(1, 3)? {
        let n = u.int_in_range(0..=2)?;
        let hosts = (0..n)
            .map(|_| Ok(Value::String(host_pattern(u)?)))
            .collect::<Result<Vec<_>>>()?;
        m.insert("Hosts".into(), Value::Array(hosts));
    }
    if u.ratio(1, 4)? {
        let all = ["GET", "get", "POST", "HEAD", "PUT", "DELETE", "PURGE"];
        let n = u.int_in_range(0..=2)?;
        let methods = (0..n)
            .map(|_| Ok(json!(pick(u, &all)?)))
            .collect::<Result<Vec<_>>>()?;
        m.insert("Methods".into(), Value::Array(methods));
    }
    for (key, modes) in [
        (
            "Headers",
            &[
                "ExactHeader",
                "HeaderPrefix",
                "Contains",
                "NotContains",
                "Exists",
                "NotExists",
                "Bogus",
            ][..],
        ),
        (
            "QueryParameters",
            &[
                "Exact",
                "Prefix",
                "Contains",
                "NotContains",
                "Exists",
                "Bogus",
            ][..],
        ),
    ] {
        if u.ratio(1, 5)? {
            let mut rule = Map::new();
            rule.insert(
                "Name".into(),
                json_text(u, &["x-a", "q", "cookie", "", "é"], 2)?,
            );
            rule.insert("Mode".into(), json!(pick(u, modes)?));
            if u.ratio(2, 3)? {
                let n = u.int_in_range(0..=3)?;
                let values = (0..n)
                    .map(|_| json_text(u, &["a", "b", ",", "\"", ";", "", " "], 3))
                    .collect::<Result<Vec<_>>>()?;
                rule.insert("Values".into(), Value::Array(values));
            }
            if u.ratio(1, 3)? {
                rule.insert("IsCaseSensitive".into(), json!(u.arbitrary::<bool>()?));
            }
            m.insert(key.into(), json!([rule]));
        }
    }
    Ok(Value::Object(m))
}

/// A route object.
fn route(u: &mut Unstructured, clusters: usize) -> Result<Value> {
    let mut r = Map::new();
    r.insert(
        "ClusterId".into(),
        json!(format!("c{}", u.int_in_range(0..=clusters)?)),
    );
    if u.ratio(1, 4)? {
        r.insert("Order".into(), json!(u.int_in_range(-2..=2)?));
    }
    r.insert("Match".into(), route_match(u)?);
    if u.ratio(1, 6)? {
        r.insert(
            "MaxRequestBodySize".into(),
            json!(u.int_in_range(-2..=100_000i64)?),
        );
    }
    if u.ratio(1, 6)? {
        r.insert("Timeout".into(), duration(u)?);
    }
    if u.ratio(1, 8)? {
        r.insert(
            "MaxConcurrentRequests".into(),
            json!(u.int_in_range(0..=3u32)?),
        );
    }
    if u.ratio(1, 4)? {
        r.insert("Transforms".into(), Value::Array(transform_list(u)?));
    }
    Ok(Value::Object(r))
}

/// A list of YARP transform dictionaries: mostly valid ones, some random.
fn transform_list(u: &mut Unstructured) -> Result<Vec<Value>> {
    let valid = [
        json!({ "PathPrefix": "/prefix" }),
        json!({ "PathRemovePrefix": "/api" }),
        json!({ "PathSet": "/set" }),
        json!({ "PathPattern": "/new/{**rest}" }),
        json!({ "QueryValueParameter": "q", "Set": "1" }),
        json!({ "QueryRemoveParameter": "q" }),
        json!({ "HttpMethodChange": "GET", "Set": "POST" }),
        json!({ "RequestHeadersCopy": "false" }),
        json!({ "RequestHeaderOriginalHost": "true" }),
        json!({ "RequestHeader": "x-h", "Append": "v" }),
        json!({ "RequestHeaderRemove": "cookie" }),
        json!({ "RequestHeadersAllowed": "accept;x-h" }),
        json!({ "X-Forwarded": "Append", "Prefix": "Off" }),
        json!({ "Forwarded": "for,proto", "ForFormat": "IpAndPort" }),
        json!({ "ResponseHeader": "x-r", "Set": "1", "When": "Always" }),
        json!({ "ResponseHeaderRemove": "server", "When": "Failure" }),
        json!({ "ResponseTrailersCopy": "true" }),
    ];
    let n = u.int_in_range(0..=3)?;
    (0..n)
        .map(|_| {
            if u.ratio(3, 4)? {
                return Ok(valid[u.choose_index(valid.len())?].clone());
            }
            let k = u.int_in_range(0..=3)?;
            let mut map = Map::new();
            for _ in 0..k {
                let key = if u.ratio(1, 2)? {
                    pick(u, TRANSFORM_KINDS)?
                } else {
                    pick(u, TRANSFORM_COMPANION_KEYS)?
                };
                map.insert(key.to_owned(), json_text(u, TRANSFORM_VALUES, 3)?);
            }
            Ok(Value::Object(map))
        })
        .collect()
}

/// A cluster object.
fn cluster(u: &mut Unstructured) -> Result<Value> {
    let mut c = Map::new();
    let n = u.int_in_range(0..=3)?;
    let mut dests = Map::new();
    for i in 0..n {
        let mut d = Map::new();
        let address = if u.ratio(1, 8)? {
            text(
                u,
                &[
                    "http://",
                    "https://",
                    "127.0.0.1",
                    ":8080",
                    "/base",
                    "/",
                    "x",
                    ":",
                ],
                4,
            )?
        } else {
            let scheme = pick(u, &["http://", "https://"])?;
            let host = pick(
                u,
                &["127.0.0.1:1", "[::1]:2", "localhost", "backend.test:8443"],
            )?;
            let prefix = pick(u, &["", "/", "/base", "/base/", "/a%20b"])?;
            format!("{scheme}{host}{prefix}")
        };
        d.insert("Address".into(), json!(address));
        if u.ratio(1, 4)? {
            d.insert("Host".into(), json_text(u, HOST_PIECES, 2)?);
        }
        if u.ratio(1, 4)? {
            d.insert("Health".into(), json!("http://127.0.0.1:1/"));
        }
        dests.insert(format!("d{i}"), Value::Object(d));
    }
    c.insert("Destinations".into(), Value::Object(dests));
    if u.ratio(1, 3)? {
        let policies = [
            "RoundRobin",
            "Random",
            "PowerOfTwoChoices",
            "LeastRequests",
            "FirstAlphabetical",
            "WeightedRoundRobin",
            "Nope",
        ];
        c.insert("LoadBalancingPolicy".into(), json!(pick(u, &policies)?));
    }
    if u.ratio(1, 4)? {
        let mut health = Map::new();
        health.insert(
            "Passive".into(),
            json!({ "Enabled": u.arbitrary::<bool>()?,
                    "ReactivationPeriod": duration(u)? }),
        );
        if u.ratio(1, 2)? {
            health.insert(
                "Active".into(),
                json!({ "Enabled": u.arbitrary::<bool>()?, "Interval": "15s",
                        "Path": text(u, SEGMENTS, 3)? }),
            );
        }
        if u.ratio(1, 3)? {
            health.insert(
                "AvailableDestinationsPolicy".into(),
                json!(pick(u, &["HealthyOrPanic", "HealthyAndUnknown", "x"])?),
            );
        }
        c.insert("HealthCheck".into(), Value::Object(health));
    }
    if u.ratio(1, 4)? {
        let mut meta = Map::new();
        for key in [
            "TransportFailureRateHealthPolicy.RateLimit",
            "TransportFailureRateHealthPolicy.DetectionWindowSize",
            "TransportFailureRateHealthPolicy.MinimalTotalCountThreshold",
            "ConsecutiveFailuresHealthPolicy.Threshold",
        ] {
            if u.ratio(1, 2)? {
                meta.insert(
                    key.into(),
                    json_text(u, &["0", "1", ".", "5", "-", "s", "00:", "e9", "NaN"], 4)?,
                );
            }
        }
        c.insert("Metadata".into(), Value::Object(meta));
    }
    if u.ratio(1, 5)? {
        c.insert(
            "SessionAffinity".into(),
            json!({ "Enabled": true,
                    "Policy": pick(u, &["HashCookie", "ArrCookie", "Cookie", "CustomHeader", "x"])?,
                    "FailurePolicy": pick(u, &["Redistribute", "Return503Error", "x"])?,
                    "AffinityKeyName": text(u, &["k", "", " ", ";"], 2)? }),
        );
    }
    if u.ratio(1, 4)? {
        c.insert(
            "HttpRequest".into(),
            json!({ "Version": pick(u, &["1.1", "2", "3", "x"])?,
                    "ActivityTimeout": duration(u)? }),
        );
    }
    Ok(Value::Object(c))
}

/// A whole configuration.
fn config_value(u: &mut Unstructured) -> Result<Value> {
    let clusters = u.int_in_range(0..=3)?;
    let routes = u.int_in_range(0..=5)?;
    let mut r = Map::new();
    for i in 0..routes {
        r.insert(format!("r{i}"), route(u, clusters)?);
    }
    let mut c = Map::new();
    for i in 0..clusters {
        c.insert(format!("c{i}"), cluster(u)?);
    }
    let mut config = json!({ "Routes": r, "Clusters": c });
    if u.ratio(1, 3)? {
        let mut listen = Vec::new();
        for _ in 0..u.int_in_range(1..=2)? {
            listen.push(listener(u)?);
        }
        config["Listen"] = Value::Array(listen);
    }
    Ok(config)
}

/// A listener's long form: TLS files (never read by validation), Kestrel's protocols,
/// TLS versions, client certificate modes and `Sni` entries, valid or not.
fn listener(u: &mut Unstructured) -> Result<Value> {
    const PROTOCOLS: &[&str] = &[
        "Http1",
        "http2",
        "Http1AndHttp2",
        "Http1AndHttp2AndHttp3",
        "Http3",
        "",
    ];
    const VERSIONS: &[&str] = &["Tls12", "Tls13", "None", "Tls11", "Tls", "Ssl3", "x"];
    const MODES: &[&str] = &[
        "NoCertificate",
        "AllowCertificate",
        "requirecertificate",
        "DelayCertificate",
        "Maybe",
    ];
    const NAMES: &[&str] = &[
        "*",
        "*.example.org",
        "a.example.org",
        "A.example.org",
        "a.*.org",
        "*.",
        "",
        "[::1]",
    ];
    // The settings an entry and a listener share.
    fn settings(u: &mut Unstructured, entry: &mut Map<String, Value>) -> Result<()> {
        if u.ratio(1, 2)? {
            entry.insert("Certificate".into(), json!("c.pem"));
            if u.ratio(1, 2)? {
                entry.insert("Key".into(), json!("k.pem"));
            }
        } else if u.ratio(1, 4)? {
            entry.insert("Key".into(), json!("k.pem"));
        }
        if u.ratio(1, 4)? {
            entry.insert("Password".into(), json!("p"));
        }
        if u.ratio(1, 3)? {
            entry.insert("Protocols".into(), json!(pick(u, PROTOCOLS)?));
        }
        if u.ratio(1, 3)? {
            let n = u.int_in_range(0..=3)?;
            let list = (0..n)
                .map(|_| pick(u, VERSIONS).map(|v| json!(v)))
                .collect::<Result<Vec<_>>>()?;
            entry.insert("SslProtocols".into(), Value::Array(list));
        }
        if u.ratio(1, 3)? {
            entry.insert("ClientCertificateMode".into(), json!(pick(u, MODES)?));
        }
        Ok(())
    }
    let mut entry = Map::new();
    entry.insert("Address".into(), json!("127.0.0.1:0"));
    settings(u, &mut entry)?;
    if u.ratio(1, 3)? {
        let mut sni = Map::new();
        for _ in 0..u.int_in_range(1..=3)? {
            let mut site = Map::new();
            settings(u, &mut site)?;
            sni.insert(pick(u, NAMES)?.to_string(), Value::Object(site));
        }
        entry.insert("Sni".into(), Value::Object(sni));
    }
    Ok(Value::Object(entry))
}

/// A request path: pieces of path syntax, with an optional query.
fn request_target(u: &mut Unstructured) -> Result<String> {
    let mut p = String::from("/");
    p.push_str(&text(u, SEGMENTS, 8)?);
    if u.ratio(1, 4)? {
        p.push('?');
        p.push_str(&text(u, &["q", "=", "&", "%2e", "a", "+", "%"], 4)?);
    }
    Ok(p)
}

fn method(u: &mut Unstructured) -> Result<Method> {
    let all = [
        Method::GET,
        Method::POST,
        Method::HEAD,
        Method::PUT,
        Method::DELETE,
        Method::OPTIONS,
        Method::CONNECT,
        Method::PATCH,
        Method::TRACE,
    ];
    if u.ratio(1, 8)? {
        return Ok(Method::from_bytes(b"PURGE").unwrap());
    }
    Ok(all[u.choose_index(all.len())?].clone())
}

// ===== targets =====

/// Config text in JSON and TOML: parsing, validation and the runtime state built from
/// it (route tables, clusters, health settings), then a reload with the same config.
pub fn config_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for format in [Format::Json, Format::Toml] {
        if let Ok(config) = parse(text, format) {
            if let Ok(state) = ProxyState::new(config.clone()) {
                state
                    .update(config)
                    .expect("a config that loaded once reloads");
            }
        }
    }
}

/// A generated configuration, most of it nearly valid: through JSON text (the loader,
/// its field paths and validation) and into a state; also as a reload of a state made
/// from another generated config. Every error must name a field path.
pub fn config_structured(u: &mut Unstructured) -> Result<()> {
    let value = config_value(u)?;
    let text = serde_json::to_string(&value).expect("JSON");
    let config = match parse(&text, Format::Json) {
        Ok(config) => config,
        Err(errors) => {
            assert!(!errors.to_string().is_empty());
            return Ok(());
        }
    };
    // What the server reads of a valid listener, short of its files.
    for listen in &config.listen {
        let _ = (listen.protocols(), listen.tls_files());
    }
    match ProxyState::new(config.clone()) {
        Ok(state) => {
            let other = config_value(u)?;
            if let Ok(other) = parse(&other.to_string(), Format::Json) {
                let _ = state.update(other);
            }
            state
                .update(config)
                .expect("a config that loaded once reloads");
        }
        Err(errors) => assert!(!errors.to_string().is_empty()),
    }
    Ok(())
}

/// Route tables from generated match criteria, and requests against them: no panic,
/// and a destination that routed the forwarded (normalised) path again would reach
/// the same route as the request did.
pub fn routes(u: &mut Unstructured) -> Result<()> {
    let n = u.int_in_range(1..=6)?;
    let mut routes: Vec<(String, RouteConfig)> = Vec::new();
    for i in 0..n {
        let m = route_match(u)?;
        let mut r = json!({ "ClusterId": "c", "Match": m });
        if u.ratio(1, 4)? {
            r["Order"] = json!(u.int_in_range(-2..=2)?);
        }
        if let Ok(config) = serde_json::from_value::<RouteConfig>(r) {
            routes.push((format!("r{i}"), config));
        }
    }
    let Ok(table) = RouteTable::build(routes.iter().map(|(id, r)| (id.as_str(), r))) else {
        return Ok(());
    };
    assert_eq!(table.len(), routes.len());
    for _ in 0..u.int_in_range(1..=8)? {
        let target = request_target(u)?;
        let Ok(uri) = Uri::try_from(target.as_str()) else {
            continue;
        };
        let method = method(u)?;
        let mut headers = HeaderMap::new();
        if u.ratio(2, 3)? {
            if let Ok(v) = HeaderValue::from_str(&request_host(u)?) {
                headers.insert(http::header::HOST, v);
            }
        }
        if u.ratio(1, 3)? {
            if let Ok(v) = HeaderValue::from_str(&text(u, &["a", "b", ",", "\""], 3)?) {
                headers.insert("x-a", v);
            }
        }
        let found = table.find(&method, &uri, &headers);
        if let Some(i) = found {
            assert!(i < table.len());
        }
        assert_eq!(table.find(&method, &uri, &headers), found, "deterministic");
        if let Some(path) = forwarded_path(uri.path()) {
            let again = match uri.query() {
                Some(q) => format!("{path}?{q}"),
                None => path.clone(),
            };
            let again = Uri::try_from(again.as_str()).expect("a normalised path is a URI");
            assert_eq!(
                table.find(&method, &again, &headers),
                found,
                "{target} is forwarded as {again}, which routes elsewhere"
            );
            assert_eq!(forwarded_path(&path), None, "normalising twice: {target}");
        }
    }
    Ok(())
}

/// The proxy a generated request is rewritten for: one catch-all route to one
/// destination, with the route's `Transforms` given (as JSON); `None` when they do not
/// compile.
fn rewrite_state(transforms: &[Value]) -> Option<std::sync::Arc<fuseway::state::Snapshot>> {
    let config = json!({
        "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/{**rest}" },
                           "Transforms": transforms } },
        "Clusters": { "c": { "Destinations": { "d": { "Address": "http://backend.test:8080" } } } }
    });
    let config = parse(&config.to_string(), Format::Json).ok()?;
    Some(ProxyState::new(config).ok()?.snapshot())
}

/// The forwarder's real request rewrite (`outgoing`: hop-by-hop rules, the route's
/// transforms — the default `X-Forwarded-*` — then the destination's `Host`) on
/// generated requests, and the response's hop-by-hop rule: no panic; no hop-by-hop
/// header or header named by `Connection` survives (but the ones the proxy sets
/// itself), the forwarding headers are the proxy's own, `Host` is the destination's.
/// Then generated route transforms on the same request: no panic, one `Host` at most.
pub fn headers(u: &mut Unstructured) -> Result<()> {
    let mut headers = HeaderMap::new();
    for _ in 0..u.int_in_range(0..=12)? {
        let name = if u.ratio(1, 8)? {
            u.arbitrary::<String>()?
        } else {
            pick(u, HEADER_NAMES)?.to_owned()
        };
        let value = text(u, HEADER_VALUE_PIECES, 5)?;
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(n, v);
        }
    }
    let version = *pick(u, &[&Version::HTTP_10, &Version::HTTP_11, &Version::HTTP_2])?;
    let conn = if u.ratio(3, 4)? {
        let ip = if u.arbitrary::<bool>()? {
            IpAddr::V4(Ipv4Addr::from(u.arbitrary::<u32>()?))
        } else {
            IpAddr::V6(Ipv6Addr::from(u.arbitrary::<u128>()?))
        };
        Some(ConnectionInfo {
            remote: SocketAddr::new(ip, u.arbitrary()?),
            local: "127.0.0.1:80".parse().unwrap(),
            tls: u.arbitrary()?,
        })
    } else {
        None
    };
    // The target: origin form, or absolute (HTTP/2's `:scheme` and `:authority`, or an
    // HTTP/1.1 absolute form) naming a generated host.
    let scheme = pick(u, &["", "", "http", "https"])?;
    let authority = text(u, HOST_PIECES, 2)?;
    let uri: Uri = match scheme {
        "" => Uri::from_static("/x"),
        scheme => format!("{scheme}://{authority}/x")
            .parse()
            .unwrap_or(Uri::from_static("/x")),
    };
    let https = uri.scheme_str() == Some("https");
    // The host the request was routed on: the URI's authority (less user info), else
    // the first `Host`; what `X-Forwarded-Host` carries.
    let original = match uri.authority() {
        Some(a) => {
            let all = a.as_str();
            HeaderValue::from_str(all.rsplit_once('@').map_or(all, |(_, host)| host)).ok()
        }
        None => headers.get(http::header::HOST).cloned(),
    };
    let named: Vec<HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    // An HTTP/1.1 upgrade request (Connection names `upgrade`, a non-empty `Upgrade`)
    // keeps its protocol and `Connection: upgrade`; nothing else keeps either.
    let upgrade = (version == Version::HTTP_11 && named.contains(&http::header::UPGRADE))
        .then(|| headers.get(http::header::UPGRADE))
        .flatten()
        .filter(|p| !p.as_bytes().trim_ascii().is_empty())
        .cloned();
    let te_trailers = version == Version::HTTP_2
        && headers
            .get_all(http::header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    let client_request = || {
        let mut request = http::Request::new(());
        *request.uri_mut() = uri.clone();
        *request.version_mut() = version;
        *request.headers_mut() = headers.clone();
        if let Some(c) = conn {
            request.extensions_mut().insert(c);
        }
        request
    };

    // The default transforms.
    let snapshot = rewrite_state(&[]).expect("the default route compiles");
    let mut rewritten = client_request();
    rewrite_for_destination(&mut rewritten, snapshot).expect("a GET /x is rewritten");
    let request = rewritten.headers();
    let set_by_proxy = [
        "host",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "te",
    ];
    for hop in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "alt-svc",
        "http2-settings",
        "close",
        "alpn",
        "upgrade-insecure-requests",
        "forwarded",
        "x-forwarded-prefix",
    ] {
        if upgrade.is_some() && (hop == "connection" || hop == "upgrade") {
            continue;
        }
        assert!(!request.contains_key(hop), "{hop} forwarded: {request:?}");
    }
    if let Some(protocol) = &upgrade {
        assert_eq!(
            request
                .get_all(http::header::UPGRADE)
                .iter()
                .collect::<Vec<_>>(),
            [protocol]
        );
        assert_eq!(
            request
                .get_all(http::header::CONNECTION)
                .iter()
                .collect::<Vec<_>>(),
            ["upgrade"]
        );
    }
    match request.get_all(http::header::TE).iter().collect::<Vec<_>>()[..] {
        [] => assert!(!te_trailers),
        [v] => assert!(te_trailers && v == "trailers", "TE {v:?}"),
        ref more => panic!("TE repeated: {more:?}"),
    }
    for name in &named {
        if !set_by_proxy.contains(&name.as_str())
            && !(upgrade.is_some()
                && (name == http::header::UPGRADE || name == http::header::CONNECTION))
        {
            assert!(
                !request.contains_key(name),
                "{name} named in Connection, forwarded"
            );
        }
    }
    if headers.contains_key(http::header::TRANSFER_ENCODING) {
        assert!(!request.contains_key(http::header::CONTENT_LENGTH));
    }
    let one = |name: &str| {
        let all: Vec<_> = request.get_all(name).iter().collect();
        assert!(all.len() <= 1, "{name} repeated: {all:?}");
        all.first().map(|v| v.to_str().unwrap_or("").to_owned())
    };
    assert_eq!(one("host").as_deref(), Some("backend.test:8080"));
    match &conn {
        Some(c) => {
            let xff = one("x-forwarded-for").expect("X-Forwarded-For");
            let ip: IpAddr = xff.parse().expect("an IP address");
            let expected = match c.remote.ip() {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                v4 => v4,
            };
            assert_eq!(ip, expected);
        }
        None => assert!(one("x-forwarded-for").is_none()),
    }
    let proto = one("x-forwarded-proto").expect("X-Forwarded-Proto");
    let tls = https || conn.as_ref().is_some_and(|c| c.tls);
    assert_eq!(proto, if tls { "https" } else { "http" });
    assert_eq!(
        one("x-forwarded-host"),
        original.map(|h| h.to_str().unwrap_or("").to_owned())
    );

    // The response direction.
    let mut response = headers.clone();
    remove_hop_by_hop(&mut response);
    for name in &named {
        assert!(
            !response.contains_key(name),
            "{name} named in Connection, returned"
        );
    }
    for hop in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "upgrade",
    ] {
        assert!(!response.contains_key(hop));
    }

    // Route transforms, as config gives them: refused with their path, or applied by
    // the same rewrite.
    let transforms = transform_list(u)?;
    let list: Vec<BTreeMap<String, String>> = transforms
        .iter()
        .map(|v| serde_json::from_value(v.clone()).expect("string map"))
        .collect();
    match parse_transforms(&list, "Routes.r.Transforms") {
        Err(errors) => {
            let text = errors.to_string();
            assert!(text.contains("Routes.r.Transforms["), "{text}");
        }
        Ok(_) => {
            if let Some(snapshot) = rewrite_state(&transforms) {
                let mut rewritten = client_request();
                if rewrite_for_destination(&mut rewritten, snapshot).is_ok() {
                    let hosts = rewritten
                        .headers()
                        .get_all(http::header::HOST)
                        .iter()
                        .count();
                    assert!(hosts <= 1, "Host repeated: {:?}", rewritten.headers());
                }
            }
        }
    }
    Ok(())
}

// ===== HTTP/1.1: the native engine against hyper's =====

/// Pieces of request heads: what clients send, and what smugglers do.
const REQUEST_LINES: &[&str] = &[
    "GET / HTTP/1.1",
    "GET /a/b?c=d HTTP/1.1",
    "POST /upload HTTP/1.1",
    "HEAD / HTTP/1.1",
    "GET / HTTP/1.0",
    "POST / HTTP/1.0",
    "OPTIONS * HTTP/1.1",
    "GET * HTTP/1.1",
    "CONNECT example.com:443 HTTP/1.1",
    "GET example.com:443 HTTP/1.1",
    "GET http://example.com/x HTTP/1.1",
    "GET /%zz HTTP/1.1",
    "GET / HTTP/1.2",
    "GET / HTTP/2.0",
    "GET  / HTTP/1.1",
    "get / HTTP/1.1",
    "BREW /pot HTTP/1.1",
    "GET /caf\u{e9} HTTP/1.1",
];

const FIELDS: &[&str] = &[
    "Host: example.com",
    "Host: example.com",
    "Host: example.com",
    "Host: other",
    "Host:",
    "Content-Length: 0",
    "Content-Length: 5",
    "Content-Length: 5",
    "Content-Length: 5, 5",
    "Content-Length: 5,6",
    "Content-Length: +5",
    "Content-Length:  5 ",
    "Content-Length: 99999999999999999999",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: Chunked",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, gzip",
    "Transfer-Encoding: chunked, chunked",
    "Transfer-Encoding: identity",
    "Transfer-Encoding: xchunked",
    "Transfer-Encoding:\tchunked",
    "Transfer-Encoding : chunked",
    "Connection: close",
    "Connection: keep-alive",
    "Connection: Upgrade",
    "Upgrade: websocket",
    "Expect: 100-continue",
    "TE: trailers",
    "X-Folded: a\r\n b",
    "X-Bare: a\rb",
    "X-Nul: a\u{0}b",
    "X-Obs: caf\u{e9}",
    "X-Empty:",
    " X-Leading: space",
    "X-Tab:\tvalue\t",
];

const BODIES: &[&str] = &[
    "",
    "hello",
    "hello world",
    "5\r\nhello\r\n0\r\n\r\n",
    "5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
    "5;ext=1\r\nhello\r\n0\r\n\r\n",
    "5 ; ext\r\nhello\r\n0\r\n\r\n",
    "5\r\nhelloX\r\n0\r\n\r\n",
    "\r\n\r\n",
    "0x5\r\nhello\r\n0\r\n\r\n",
    "-1\r\n",
    "5\nhello\n0\n\n",
    "fffffffffffffffff\r\n",
    "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    "0\r\r\n\r\n",
    "5\u{c}\r\nhello\r\n0\r\n\r\n",
    "5\r\nhello\r\n0\r\n\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    "5\r\nhello\r\n0\r\nX-Trailer: t\n\r\n",
];

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
}

/// A client's bytes: one to three requests from the pieces above, line endings now and
/// then bare LF, or (1 in 16) arbitrary bytes.
fn http1_input(u: &mut Unstructured) -> Result<Vec<u8>> {
    messages(u, REQUEST_LINES, FIELDS, 3, 5)
}

/// Up to `most` messages, each a first line from `first`, up to `most_fields` of
/// `fields` and a body, line endings now and then bare LF; or (1 in 16) arbitrary bytes.
fn messages(
    u: &mut Unstructured,
    first: &[&str],
    fields: &[&str],
    most: u32,
    most_fields: u32,
) -> Result<Vec<u8>> {
    if u.ratio(1, 16)? {
        return u.arbitrary::<Vec<u8>>();
    }
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(1..=most)? {
        let eol: &[u8] = if u.ratio(1, 12)? { b"\n" } else { b"\r\n" };
        out.extend_from_slice(pick(u, first)?.as_bytes());
        out.extend_from_slice(eol);
        for _ in 0..u.int_in_range(0..=most_fields)? {
            out.extend_from_slice(pick(u, fields)?.as_bytes());
            out.extend_from_slice(eol);
        }
        out.extend_from_slice(eol);
        out.extend_from_slice(pick(u, BODIES)?.as_bytes());
    }
    Ok(out)
}

/// The same bytes through the native engine and hyper's: every request both hand to
/// the pipeline is the same request (method, target, version, fields; body and
/// trailers where both read them whole), and the native engine hands over no first
/// request that hyper refuses (it is the stricter of the two; the README lists where
/// they differ).
pub fn http1_engines(u: &mut Unstructured) -> Result<()> {
    use fuseway::server::Http1Engine;
    use fuseway::testing::replay;
    let input = http1_input(u)?;
    let (native, hyper) = RUNTIME.with(|rt| {
        rt.block_on(async {
            (
                replay(Http1Engine::Native, &input).await,
                replay(Http1Engine::Hyper, &input).await,
            )
        })
    });
    let shown = || String::from_utf8_lossy(&input).into_owned();
    for (n, h) in native.requests.iter().zip(&hyper.requests) {
        assert_eq!(
            (&n.method, &n.uri, n.version, &n.headers),
            (&h.method, &h.uri, h.version, &h.headers),
            "the engines read different heads from {:?}",
            shown()
        );
        if let (Some(nb), Some(hb)) = (&n.body, &h.body) {
            assert_eq!(nb, hb, "different bodies from {:?}", shown());
            assert_eq!(
                n.trailers,
                h.trailers,
                "different trailers from {:?}",
                shown()
            );
        }
    }
    assert!(
        native.requests.is_empty() || !hyper.requests.is_empty(),
        "the native engine accepted what hyper refused: {:?} -> {:?}",
        shown(),
        native.requests
    );
    Ok(())
}

/// The chunked decoder: the same bytes decode to the same data, trailers or error
/// whether they arrive at once or in arbitrary pieces, and a body that decodes is
/// what its chunks say (re-encoded, it decodes to the same again).
pub fn chunked(u: &mut Unstructured) -> Result<()> {
    use fuseway::__private::decode_chunked;
    let input: Vec<u8> = if u.ratio(1, 2)? {
        // Mostly well-formed: chunks of generated sizes, sometimes a broken piece.
        let mut out = Vec::new();
        for _ in 0..u.int_in_range(0..=6)? {
            let data: Vec<u8> = u.arbitrary()?;
            let size = if u.ratio(1, 12)? {
                data.len() + 1
            } else {
                data.len()
            };
            out.extend_from_slice(format!("{size:x}").as_bytes());
            if u.ratio(1, 6)? {
                out.extend_from_slice(
                    pick(u, &[";a=b", "; x", ";\t", " ;e", ";\u{1}", "\r", "\u{c}"])?.as_bytes(),
                );
            }
            out.extend_from_slice(if u.ratio(1, 16)? { b"\n" } else { b"\r\n" });
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n");
        if u.ratio(1, 3)? {
            out.extend_from_slice(
                pick(
                    u,
                    &[
                        "X-T: 1\r\n",
                        "bad trailer\r\n",
                        "A: b\r\nC: d\r\n",
                        "X-T: 1\n",
                    ],
                )?
                .as_bytes(),
            );
        }
        if u.ratio(7, 8)? {
            out.extend_from_slice(if u.ratio(1, 16)? { b"\n" } else { b"\r\n" });
        }
        out
    } else {
        u.arbitrary()?
    };
    let cuts: Vec<usize> = u.arbitrary()?;
    let whole = decode_chunked(&input, &[]);
    let pieces = decode_chunked(
        &input,
        &cuts
            .iter()
            .map(|c| c % (input.len() + 1))
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        whole,
        pieces,
        "fed whole and in pieces: {:?}",
        String::from_utf8_lossy(&input)
    );
    if let Ok((data, trailers)) = whole {
        let mut again = Vec::new();
        if !data.is_empty() {
            again.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            again.extend_from_slice(&data);
            again.extend_from_slice(b"\r\n");
        }
        again.extend_from_slice(b"0\r\n");
        if let Some(t) = &trailers {
            for (name, value) in t {
                again.extend_from_slice(name.as_str().as_bytes());
                again.extend_from_slice(b": ");
                again.extend_from_slice(value.as_bytes());
                again.extend_from_slice(b"\r\n");
            }
        }
        again.extend_from_slice(b"\r\n");
        assert_eq!(
            decode_chunked(&again, &[]),
            Ok((data, trailers)),
            "re-encoded: {:?}",
            String::from_utf8_lossy(&input)
        );
    }
    Ok(())
}

const STATUS_LINES: &[&str] = &[
    "HTTP/1.1 200 OK",
    "HTTP/1.1 200 OK",
    "HTTP/1.1 200 OK",
    "HTTP/1.1 201 Created",
    "HTTP/1.1 204 No Content",
    "HTTP/1.1 304 Not Modified",
    "HTTP/1.1 404 Not Found",
    "HTTP/1.1 100 Continue",
    "HTTP/1.1 103 Early Hints",
    "HTTP/1.0 200 OK",
    "HTTP/1.1 200",
    "HTTP/1.1 200 ",
    "HTTP/1.1 999 Odd",
    "HTTP/1.1 099 Low",
    "HTTP/1.1 2000 Long",
    "HTTP/2.0 200 OK",
    "HTTP/1.1  200 OK",
    "http/1.1 200 OK",
    "HTTP/1.1 200 caf\u{e9}",
];

const RESPONSE_FIELDS: &[&str] = &[
    "Content-Length: 5",
    "Content-Length: 5",
    "Content-Length: 0",
    "Content-Length: 11",
    "Content-Length: 5, 5",
    "Content-Length: +5",
    "Content-Length: 99999999999999999999",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: gzip",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, gzip",
    "Connection: close",
    "Connection: keep-alive",
    "X-A: 1",
    "X-A: 2",
    "Set-Cookie: a=1",
    "X-Folded: a\r\n b",
    "X-Bare: a\rb",
    "X-Empty:",
    "X-Tab:\tvalue\t",
    "X-Obs: caf\u{e9}",
    "Bad Name: x",
    "Trailer: X-T",
];

/// A destination's bytes: one or two answers (an interim one, then the final one) from
/// the pieces above, line endings now and then bare LF, or (1 in 16) arbitrary bytes.
fn response_input(u: &mut Unstructured) -> Result<Vec<u8>> {
    messages(u, STATUS_LINES, RESPONSE_FIELDS, 2, 4)
}

/// Whether either replay could not set up its exchange (no listener on 127.0.0.1: the
/// machine's ports ran out): then the pair says nothing about the clients.
fn no_verdict<T>(replays: [&std::result::Result<T, fuseway::testing::NoResponse>; 2]) -> bool {
    replays
        .iter()
        .any(|r| matches!(r, Err(fuseway::testing::NoResponse::NoDestination(_))))
}

/// The same destination bytes through the native client and hyper's: a response both
/// read has the same status, version and fields, and the same body and trailers where
/// both read it whole; the native client reads no head and no whole body that hyper
/// refuses (it is the stricter of the two; the README lists where they differ), but
/// for one with more than 100 fields, which these inputs never have (four at most).
pub fn http1_responses(u: &mut Unstructured) -> Result<()> {
    use fuseway::server::Http1Engine;
    use fuseway::testing::replay_response;
    let method = if u.ratio(1, 6)? {
        Method::HEAD
    } else {
        Method::GET
    };
    let input = response_input(u)?;
    let (native, mut hyper) = RUNTIME.with(|rt| {
        rt.block_on(async {
            (
                replay_response(Http1Engine::Native, method.clone(), &input).await,
                replay_response(Http1Engine::Hyper, method.clone(), &input).await,
            )
        })
    });
    // Both exchanges are real ones over 127.0.0.1: a refusal is replayed once more
    // before it counts, so that a busy machine (a connection not made, a timeout) is
    // not taken for a difference.
    if native.is_ok() && hyper.is_err() {
        hyper = RUNTIME
            .with(|rt| rt.block_on(replay_response(Http1Engine::Hyper, method.clone(), &input)));
    }
    if no_verdict([&native, &hyper]) {
        return Ok(());
    }
    let shown = || String::from_utf8_lossy(&input).into_owned();
    // Repeated equal `Content-Length`s are one length: the native client keeps one,
    // hyper's all of them (the server writes its own framing either way).
    let fields = |headers: &HeaderMap| {
        let mut headers = headers.clone();
        if let Some(length) = headers.get(http::header::CONTENT_LENGTH).cloned() {
            headers.insert(http::header::CONTENT_LENGTH, length);
        }
        headers
    };
    match (&native, &hyper) {
        (Ok(n), Ok(h)) => {
            assert_eq!(
                (n.status, n.version, fields(&n.headers)),
                (h.status, h.version, fields(&h.headers)),
                "the clients read different heads from {method} {:?}",
                shown()
            );
            if n.body.is_some() {
                assert_eq!(
                    (&n.body, &n.trailers),
                    (&h.body, &h.trailers),
                    "different bodies from {method} {:?}",
                    shown()
                );
            }
        }
        (Ok(n), Err(why)) => panic!(
            "the native client accepted what hyper refused ({why}): {method} {:?} -> {n:?}",
            shown()
        ),
        _ => {}
    }
    Ok(())
}

// ===== HTTP/2 =====

/// An HTTP/2 frame.
fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK string literal, not Huffman-coded (short strings).
fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    let s = &s[..s.len().min(126)];
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

const H2_METHODS: &[&str] = &[
    "GET", "POST", "PUT", "HEAD", "CONNECT", "OPTIONS", "get", "",
];
const H2_PATHS: &[&str] = &["/", "/a?b=c", "", "*", "a", "/x y", "/%41", "/é"];
const H2_AUTHORITIES: &[&str] = &["x", "x:80", "", "a b", "[::1]:8080", "user@x"];
const H2_NAMES: &[&str] = &[
    "x-a",
    "accept",
    "X-Upper",
    "connection",
    "te",
    "content-length",
    "cookie",
    "host",
    ":path",
    ":status",
    ":nope",
    "keep-alive",
    "transfer-encoding",
    "a b",
];
const H2_VALUES: &[&str] = &[
    "v", "trailers", "5", "0", "a\u{0}b", " lead", "", "x, y", "gzip",
];

/// A header block: the pseudo-header fields of a request (now and then one missing,
/// twice or out of place) and a few others, each in one of HPACK's representations.
fn h2_block(u: &mut Unstructured, trailers: bool) -> Result<Vec<u8>> {
    if u.ratio(1, 24)? {
        return u.arbitrary();
    }
    // Three in four blocks stay within what a request may hold.
    let valid = u.ratio(3, 4)?;
    let mut fields: Vec<(String, String)> = Vec::new();
    if !trailers {
        for (name, values, good) in [
            (
                ":method",
                H2_METHODS,
                &["GET", "POST", "PUT", "HEAD", "OPTIONS"][..],
            ),
            (
                ":scheme",
                &["http", "https", "ftp", ""][..],
                &["http", "https"][..],
            ),
            (":path", H2_PATHS, &["/", "/a?b=c", "/%41"][..]),
            (
                ":authority",
                H2_AUTHORITIES,
                &["x", "x:80", "[::1]:8080"][..],
            ),
        ] {
            let values = if valid { good } else { values };
            if !valid && u.ratio(1, 12)? {
                continue;
            }
            let value = pick(u, values)?.to_owned();
            fields.push((name.to_owned(), value.clone()));
            if !valid && u.ratio(1, 24)? {
                fields.push((name.to_owned(), value));
            }
        }
        if !valid && u.ratio(1, 16)? {
            fields.push((":protocol".to_owned(), "websocket".to_owned()));
        }
    }
    for _ in 0..u.int_in_range(0..=4)? {
        let field = if valid {
            (
                pick(u, &["x-a", "accept", "cookie", "host", "x-b"])?.to_owned(),
                pick(u, &["v", "x, y", "", "a=b; c=d"])?.to_owned(),
            )
        } else {
            (
                pick(u, H2_NAMES)?.to_owned(),
                pick(u, H2_VALUES)?.to_owned(),
            )
        };
        let at = if !valid && u.ratio(1, 16)? {
            0
        } else {
            fields.len()
        };
        fields.insert(at, field);
    }
    hpack_literals(u, fields, &[&0xbe, &0x82, &0x84, &0x87])
}

/// `fields` as a header block, each in one of HPACK's literal representations (with
/// incremental indexing, without, never indexed; the name literal), now and then
/// followed by a reference to a table entry from `indexed` (`0xbe`: the newest dynamic
/// one).
fn hpack_literals(
    u: &mut Unstructured,
    fields: Vec<(String, String)>,
    indexed: &[&u8],
) -> Result<Vec<u8>> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(*pick(u, &[&0x40u8, &0x00, &0x10])?);
        hpack_string(&mut block, name.as_bytes());
        hpack_string(&mut block, value.as_bytes());
        if u.ratio(1, 8)? {
            block.push(*pick(u, indexed)?);
        }
    }
    Ok(block)
}

/// A client's bytes on an HTTP/2 connection: the preface and SETTINGS, then requests
/// (heads, DATA, trailers) on rising streams with now and then another frame; or (1 in
/// 16) the preface and arbitrary bytes.
fn h2_input(u: &mut Unstructured) -> Result<Vec<u8>> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    if u.ratio(1, 16)? {
        out.extend(u.arbitrary::<Vec<u8>>()?);
        return Ok(out);
    }
    h2_frame(&mut out, 4, 0, 0, &[]);
    let mut stream = 1u32;
    for _ in 0..u.int_in_range(1..=3)? {
        let end_now = u.ratio(1, 2)?;
        let block = h2_block(u, false)?;
        let flags = 0x4 | if end_now { 0x1 } else { 0 };
        h2_frame(&mut out, 1, flags, stream, &block);
        if !end_now {
            for _ in 0..u.int_in_range(0..=2)? {
                let data = pick(u, BODIES)?.as_bytes().to_vec();
                h2_frame(&mut out, 0, 0, stream, &data);
            }
            if u.ratio(1, 4)? {
                let block = h2_block(u, true)?;
                h2_frame(&mut out, 1, 0x5, stream, &block);
            } else {
                h2_frame(&mut out, 0, 0x1, stream, &[]);
            }
        }
        if u.ratio(1, 8)? {
            let kind = u.int_in_range(0..=10)?;
            let flags = u.arbitrary()?;
            let on = *pick(u, &[&0u32, &stream, &(stream + 2)])?;
            let payload: Vec<u8> = u.arbitrary()?;
            h2_frame(&mut out, kind, flags, on, &payload[..payload.len().min(64)]);
        }
        stream += 2;
    }
    Ok(out)
}

/// The types, flags and payloads of the frames in a client's HTTP/2 bytes (after the
/// preface; the last payload as far as the bytes go).
fn h2_frames(input: &[u8]) -> impl Iterator<Item = (u8, u8, &[u8])> + '_ {
    let mut at = 24;
    std::iter::from_fn(move || {
        let head = input.get(at..at + 9)?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let payload = &input[at + 9..(at + 9 + len).min(input.len())];
        at += 9 + len;
        Some((head[3], head[4], payload))
    })
}

/// Whether a header block of `input`, as [`h2_block`] writes them (literals), holds a
/// CONNECT with a `content-length` (not `0`).
fn h2_connect_with_length(input: &[u8]) -> bool {
    let has = |block: &[u8], bytes: &[u8]| block.windows(bytes.len()).any(|w| w == bytes);
    h2_frames(input).any(|(kind, _, block)| {
        kind == 1
            && has(block, b"\x07:method\x07CONNECT")
            && has(block, b"\x0econtent-length")
            && !has(block, b"\x0econtent-length\x010")
    })
}

/// The native HTTP/2 engine against hyper's (on h2), fed the same client bytes: the
/// requests hyper passed to the pipeline, the native engine passed too, in the same
/// order, with the same heads and bodies. Neither may panic.
///
/// Where hyper ended the connection with an error, the native engine may have passed
/// more: it calls the pipeline as a request's head is read, where hyper calls it when
/// the stream is next polled — after a connection error in the same read (a later
/// frame's), hyper's connection is gone first. And h2 takes a field it cannot accept
/// (an upper-case name, an invalid value) for a connection error where the native
/// engine resets only that stream (RFC 9113 §8.1.1), so it serves the requests after.
/// After a client's GOAWAY, hyper may have passed more: the native engine takes no new
/// stream then; or less: a request the native engine handed on with its head and whose
/// body then failed, h2 drops when it reset the stream before hyper took it; and after
/// a client's PUSH_PROMISE or a header block broken off by another frame, which end the
/// native engine's connection and which h2 lets pass on a stream it has reset; and at
/// a CONNECT with a `content-length`, where hyper's server stops serving the
/// connection. Otherwise both passed the same requests.
pub fn http2_engines(u: &mut Unstructured) -> Result<()> {
    use fuseway::server::Http2Engine;
    use fuseway::testing::replay_h2;
    let input = h2_input(u)?;
    let (native, hyper) = RUNTIME.with(|rt| {
        rt.block_on(async {
            (
                replay_h2(Http2Engine::Native, &input).await,
                replay_h2(Http2Engine::Hyper, &input).await,
            )
        })
    });
    // What h2 passes and the native engine resets, as RFC 9113 and 9110 ask (listed in
    // the guide): an empty `content-length` (h2 reads it as 0; RFC 9110 §8.6 says
    // `1*DIGIT`), a request other than CONNECT without `:path` (h2 makes it an empty
    // URI; RFC 9113 §8.3.1 makes `:path` mandatory), and a CONNECT without `:authority`
    // (an empty URI too; §8.5 makes it the host and port to connect to). An extended
    // CONNECT (RFC 8441: `:protocol`, `:scheme` and `:path`) without `:authority` both
    // pass, its URI the path.
    let mut hyper = hyper;
    hyper.requests.retain(|q| {
        let empty_length = q
            .headers
            .get_all(http::header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.is_empty());
        let connect = q.method == http::Method::CONNECT;
        let no_path = !connect && q.uri.path().is_empty();
        let no_authority = connect && q.uri.authority().is_none() && q.uri.path().is_empty();
        !empty_length && !no_path && !no_authority
    });
    let heads = |r: &fuseway::testing::Replayed| {
        r.requests
            .iter()
            .map(|q| (q.method.clone(), q.uri.clone(), q.headers.clone()))
            .collect::<Vec<_>>()
    };
    let (native_heads, hyper_heads) = (heads(&native), heads(&hyper));
    // The client sent GOAWAY: the native engine answers with its own (NO_ERROR) and
    // takes no new stream, where h2 serves streams the client opens after it (listed in
    // the guide); if hyper then failed the connection too, either may have passed more.
    let client_went_away = native.goaway == Some(0);
    let hyper_failed = hyper.goaway.is_some_and(|code| code != 0);
    // What is a connection error (PROTOCOL_ERROR) to the native engine and not to h2,
    // which serves on (listed in the guide): a client's PUSH_PROMISE (RFC 9113 §8.4),
    // which h2 ignores on a stream it has reset; and a frame other than CONTINUATION
    // after a HEADERS without END_HEADERS (§6.10), where h2 has reset the stream for
    // what the first fragment held and takes the next frame as a new one.
    let lenient = native.goaway == Some(1)
        && !hyper_failed
        && h2_frames(&input).any(|(kind, flags, _)| kind == 5 || (kind == 1 && flags & 0x4 == 0));
    // A CONNECT with a non-zero `content-length`: hyper's server resets its stream and
    // then stops serving the connection (no GOAWAY; the streams after it are dropped),
    // where the native engine resets only that stream and serves on (listed in the
    // guide). Either may then have passed more, by this or by the differences above.
    let hyper_quit = hyper.goaway.is_none() && h2_connect_with_length(&input);
    if hyper_quit {
        assert!(
            native_heads.starts_with(&hyper_heads) || hyper_heads.starts_with(&native_heads),
            "the engines passed different requests from {input:02x?}: native {native_heads:?}, hyper {hyper_heads:?}"
        );
    } else if lenient {
        assert!(
            hyper_heads.starts_with(&native_heads),
            "the engines passed different requests from {input:02x?}: native {native_heads:?}, hyper {hyper_heads:?}"
        );
    } else if client_went_away {
        // And a request whose body then failed (more DATA than its `content-length`,
        // say) was handed on by the native engine with its head, where h2, winding the
        // connection down, drops a stream it reset before hyper took it (listed).
        let native_heads: Vec<_> = native
            .requests
            .iter()
            .zip(native_heads)
            .filter(|(q, head)| q.body.is_some() || hyper_heads.contains(head))
            .map(|(_, head)| head)
            .collect();
        assert!(
            hyper_heads.starts_with(&native_heads)
                || (hyper_failed && native_heads.starts_with(&hyper_heads)),
            "the engines passed different requests from {input:02x?}: native {native_heads:?}, hyper {hyper_heads:?}"
        );
    } else if hyper_failed {
        assert!(
            native_heads.starts_with(&hyper_heads),
            "the engines passed different requests from {input:02x?}: native {native_heads:?}, hyper {hyper_heads:?}"
        );
    } else {
        assert_eq!(
            native_heads, hyper_heads,
            "the engines passed different requests from {input:02x?}"
        );
    }
    for (n, h) in native.requests.iter().zip(&hyper.requests) {
        if let (Some(nb), Some(hb)) = (&n.body, &h.body) {
            assert_eq!(nb, hb, "different bodies from {input:02x?}");
        }
    }
    Ok(())
}

const H2_STATUSES: &[&str] = &[
    "200", "204", "304", "404", "100", "103", "101", "20", "abc", "",
];
const H2_RESPONSE_NAMES: &[&str] = &[
    "content-type",
    "content-length",
    "x-a",
    "set-cookie",
    "grpc-status",
    "connection",
    "X-Upper",
    ":status",
    ":path",
    "te",
];

/// A response header block (`trailers`: without `:status`), each field in one of
/// HPACK's literal representations, now and then a reference to a table entry; or (1
/// in 24) arbitrary bytes.
fn h2_response_block(u: &mut Unstructured, trailers: bool, length: usize) -> Result<Vec<u8>> {
    if u.ratio(1, 24)? {
        return u.arbitrary();
    }
    let valid = u.ratio(3, 4)?;
    let mut fields: Vec<(String, String)> = Vec::new();
    if !trailers || !valid && u.ratio(1, 8)? {
        let status = if valid {
            pick(u, &["200", "204", "404", "500"])?
        } else {
            pick(u, H2_STATUSES)?
        };
        fields.push((":status".to_owned(), (*status).to_owned()));
    }
    if !trailers && u.ratio(1, 2)? {
        let length = if valid || u.ratio(1, 2)? {
            length.to_string()
        } else {
            pick(u, &["0", "1", "x", "99"])?.to_string()
        };
        fields.push(("content-length".to_owned(), length));
    }
    for _ in 0..u.int_in_range(0..=3)? {
        let name = if valid {
            pick(u, &["content-type", "x-a", "set-cookie", "grpc-status"])?
        } else {
            pick(u, H2_RESPONSE_NAMES)?
        };
        let value = if valid {
            pick(u, &["v", "0", "text/plain", "a=b"])?
        } else {
            pick(u, H2_VALUES)?
        };
        let at = if !valid && u.ratio(1, 8)? {
            0
        } else {
            fields.len()
        };
        fields.insert(at, ((*name).to_owned(), (*value).to_owned()));
    }
    hpack_literals(u, fields, &[&0xbe, &0x88, &0x8d])
}

/// A destination's bytes on an HTTP/2 connection: its SETTINGS (now and then with
/// values, or broken), then the answer on stream 1 — a head (now and then an
/// informational one first, split over CONTINUATION), DATA (padded or not), trailers,
/// with now and then another frame (RST_STREAM, GOAWAY, WINDOW_UPDATE, PING, a frame on
/// another stream); or (1 in 16) arbitrary bytes after the SETTINGS.
fn h2_response_input(u: &mut Unstructured) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut settings = Vec::new();
    let mut values = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let id: u16 = *pick(u, &[&1u16, &3, &4, &5, &6, &2, &9])?;
        if u.ratio(3, 4)? {
            // A value the setting takes.
            let value: u32 = *pick(u, &[&1u32, &100, &65_535, &16_384])?;
            values.extend_from_slice(&id.to_be_bytes());
            values.extend_from_slice(&value.to_be_bytes());
            continue;
        }
        let value: u32 = *pick(
            u,
            &[&0u32, &1, &100, &65_535, &16_384, &(1 << 24), &u32::MAX],
        )?;
        // A stream limit of 0 holds the request until the replay's timeout on both
        // clients: nothing to compare, seconds spent.
        let value = if id == 3 { value.max(1) } else { value };
        values.extend_from_slice(&id.to_be_bytes());
        values.extend_from_slice(&value.to_be_bytes());
    }
    if u.ratio(1, 24)? {
        values.push(0);
    }
    h2_frame(&mut settings, 4, 0, 0, &values);
    let mut answer = Vec::new();
    if u.ratio(1, 16)? {
        answer.extend(u.arbitrary::<Vec<u8>>()?);
        return Ok((settings, answer));
    }
    h2_frame(&mut answer, 4, 1, 0, &[]);
    if u.ratio(1, 8)? {
        let block = h2_response_block(u, false, 0)?;
        h2_frame(&mut answer, 1, 0x4, 1, &block);
    }
    let body = pick(u, BODIES)?.as_bytes().to_vec();
    let block = h2_response_block(u, false, body.len())?;
    let end_now = u.ratio(1, 4)?;
    let end = if end_now { 0x1 } else { 0 };
    if block.len() > 2 && u.ratio(1, 4)? {
        let at = u.int_in_range(1..=block.len() - 1)?;
        h2_frame(&mut answer, 1, end, 1, &block[..at]);
        h2_frame(&mut answer, 9, 0x4, 1, &block[at..]);
    } else {
        h2_frame(&mut answer, 1, 0x4 | end, 1, &block);
    }
    if !end_now {
        let mut rest = &body[..];
        while !rest.is_empty() {
            let n = u.int_in_range(1..=rest.len())?;
            if u.ratio(1, 6)? {
                let pad: u8 = u.int_in_range(0..=4)?;
                let mut payload = vec![pad];
                payload.extend_from_slice(&rest[..n]);
                payload.extend(std::iter::repeat_n(0, usize::from(pad)));
                h2_frame(&mut answer, 0, 0x8, 1, &payload);
            } else {
                h2_frame(&mut answer, 0, 0, 1, &rest[..n]);
            }
            rest = &rest[n..];
        }
        if u.ratio(1, 8)? {
            let kind = u.int_in_range(0..=10)?;
            let flags = u.arbitrary()?;
            let on = *pick(u, &[&0u32, &1, &3, &2])?;
            let payload: Vec<u8> = u.arbitrary()?;
            h2_frame(
                &mut answer,
                kind,
                flags,
                on,
                &payload[..payload.len().min(16)],
            );
        }
        if u.ratio(1, 4)? {
            let block = h2_response_block(u, true, 0)?;
            h2_frame(&mut answer, 1, 0x5, 1, &block);
        } else {
            h2_frame(&mut answer, 0, 0x1, 1, &[]);
        }
    }
    Ok((settings, answer))
}

/// The same destination bytes through fuseway's own HTTP/2 client and the h2 crate's:
/// where both read a response whole, it has the same status, fields, body and
/// trailers; the native client reads no response whole that h2 refuses (it is the
/// stricter: h2 takes DATA on a `204` or `304` and trailers carrying pseudo-header
/// fields, which RFC 9110 and RFC 9113 §8.1 forbid) but a `304` with a non-zero
/// `content-length` ending on an empty DATA frame, which RFC 9113 §8.1.1 allows and
/// h2 refuses. Neither may panic or hang.
pub fn http2_responses(u: &mut Unstructured) -> Result<()> {
    use fuseway::server::Http2Engine;
    use fuseway::testing::{replay_h2_response, NoResponse};
    let method = if u.ratio(1, 6)? {
        Method::HEAD
    } else {
        Method::GET
    };
    let (settings, answer) = h2_response_input(u)?;
    let (native, mut h2) = RUNTIME.with(|rt| {
        rt.block_on(async {
            (
                replay_h2_response(Http2Engine::Native, method.clone(), &settings, &answer).await,
                replay_h2_response(Http2Engine::Hyper, method.clone(), &settings, &answer).await,
            )
        })
    });
    let whole = |r: &Result<fuseway::testing::ReceivedResponse, NoResponse>| {
        r.as_ref().is_ok_and(|r| r.body.is_some())
    };
    // A refusal is replayed once more before it counts (see `http1_responses`).
    if whole(&native) && !whole(&h2) {
        h2 = RUNTIME.with(|rt| {
            rt.block_on(replay_h2_response(
                Http2Engine::Hyper,
                method.clone(),
                &settings,
                &answer,
            ))
        });
    }
    if no_verdict([&native, &h2]) {
        return Ok(());
    }
    // A `304`'s `content-length` describes no content (RFC 9113 §8.1.1): h2 refuses
    // one that ends on an empty DATA frame unless the length is 0; the native client
    // reads it whole (and empty).
    let no_content_length = native.as_ref().is_ok_and(|n| {
        n.status == http::StatusCode::NOT_MODIFIED
            && n.body.as_ref().is_some_and(|b| b.is_empty())
            && n.trailers.is_none()
            && n.headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|v| v != "0")
    });
    if let (Ok(n), Ok(h)) = (&native, &h2) {
        if n.body.is_some() && h.body.is_some() {
            assert_eq!(
                n, h,
                "the clients read different responses from {method} {settings:02x?} {answer:02x?}"
            );
        }
    }
    assert!(
        !whole(&native) || whole(&h2) || no_content_length,
        "the native client read whole what h2 refused ({:?}): {method} {settings:02x?} {answer:02x?} -> {native:?}",
        h2.as_ref().err()
    );
    Ok(())
}

/// PKCS#12 archives OpenSSL made for a P-256 key and its certificate (password `pw`):
/// with a MAC (its default), without one, and without one or any encryption — what the
/// mutations of [`pkcs12`] start from, so that they reach past the outer layers.
pub const PKCS12_SEEDS: [&[u8]; 3] = [
    include_bytes!("pkcs12/mac.pfx"),
    include_bytes!("pkcs12/nomac.pfx"),
    include_bytes!("pkcs12/plain.pfx"),
];

/// A TLS listener's PKCS#12 certificate file, read again on every `SIGHUP`: whatever its
/// bytes (a seed with bytes changed, cut or added, or arbitrary ones), loading it gives
/// an error or a configuration, never a panic.
pub fn pkcs12(u: &mut Unstructured) -> Result<()> {
    let mut data = if u.ratio(1, 8)? {
        u.arbitrary::<Vec<u8>>()?
    } else {
        pick(u, &PKCS12_SEEDS)?.to_vec()
    };
    for _ in 0..u.int_in_range(0..=4)? {
        match u.int_in_range(0..=2)? {
            0 if !data.is_empty() => {
                let i = u.choose_index(data.len())?;
                data[i] = u.arbitrary()?;
            }
            1 => {
                let at = u.int_in_range(0..=data.len())?;
                data.truncate(at);
            }
            _ => {
                let at = u.int_in_range(0..=data.len())?;
                data.insert(at, u.arbitrary()?);
            }
        }
    }
    let _ = fuseway::server::tls_config_from_pkcs12(&data, "pw");
    Ok(())
}
