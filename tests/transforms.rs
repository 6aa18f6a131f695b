//! Route transforms end to end: every transform seen by a real backend (request side)
//! or a real client (response side), through the real proxy on 127.0.0.1.

mod common;

use bytes::Bytes;
use common::*;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

/// A proxy whose cluster `c` is `backend`, with one route per `(id, path, transforms)`.
async fn proxy_for(backend: &str, routes: &[(&str, &str, Value)]) -> Proxy {
    proxy_for_version(backend, "1.1", routes).await
}

/// As [`proxy_for`], with HTTP `version` towards the backend.
async fn proxy_for_version(backend: &str, version: &str, routes: &[(&str, &str, Value)]) -> Proxy {
    let mut r = serde_json::Map::new();
    for (id, path, transforms) in routes {
        r.insert(
            id.to_string(),
            json!({ "ClusterId": "c", "Match": { "Path": path }, "Transforms": transforms }),
        );
    }
    let config = json!({
        "Routes": r,
        "Clusters": { "c": {
            "HttpRequest": { "Version": version, "VersionPolicy": "RequestVersionExact" },
            "Destinations": { "d1": { "Address": backend } }
        } }
    });
    proxy(&config.to_string()).await
}

struct Seen {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn get(p: &Proxy, path: &str, headers: &[(&str, &str)]) -> Seen {
    let mut req = h1_client().get(p.url(path));
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let r = within("a response", req.send()).await.unwrap();
    Seen {
        status: r.status(),
        headers: r.headers().clone(),
        body: within("the body", r.text()).await.unwrap(),
    }
}

fn values(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn path_transforms_reach_the_backend() {
    let b = echo_backend().await;
    let p = proxy_for(
        &b.url(),
        &[
            ("prefix", "/p/{**rest}", json!([{ "PathPrefix": "/base" }])),
            (
                "remove",
                "/api/{**rest}",
                json!([{ "PathRemovePrefix": "/api" }]),
            ),
            ("set", "/s/{**rest}", json!([{ "PathSet": "/fixed" }])),
            (
                "pattern",
                "/pat/{plugin}/{opt?}/{**rest}",
                json!([{ "PathPattern": "/svc/{plugin}/v1/{opt}/x/{**rest}" }]),
            ),
        ],
    )
    .await;
    let cases = [
        ("/p/x?q=1", "GET /base/p/x?q=1"),
        ("/api/users/42?q=%20", "GET /users/42?q=%20"),
        ("/API/users", "GET /users"),
        ("/api", "GET /"),
        ("/s/anything?keep=1", "GET /fixed?keep=1"),
        ("/pat/Plug/o/a/b%2Fc", "GET /svc/Plug/v1/o/x/a/b%2Fc"),
        ("/pat/plug", "GET /svc/plug/v1/x"),
    ];
    for (path, want) in cases {
        let s = get(&p, path, &[]).await;
        assert_eq!(s.status, 200, "{path}");
        assert_eq!(s.body, want, "{path}");
    }
    p.shutdown().await;
}

#[tokio::test]
async fn query_and_method_transforms_reach_the_backend() {
    let b = echo_backend().await;
    let p = proxy_for(
        &b.url(),
        &[
            (
                "q",
                "/q/{id}",
                json!([
                    { "QueryValueParameter": "a", "Set": "x y" },
                    { "QueryValueParameter": "b", "Append": "2" },
                    { "QueryRemoveParameter": "secret" },
                    { "QueryRouteParameter": "id", "Set": "id" }
                ]),
            ),
            (
                "m",
                "/m",
                json!([{ "HttpMethodChange": "PUT", "Set": "POST" }]),
            ),
        ],
    )
    .await;
    let s = get(&p, "/q/7?a=1&secret=s&b=1&A=2", &[]).await;
    assert_eq!(s.body, "GET /q/7?a=x%20y&b=1&b=2&id=7");
    let r = h1_client().put(p.url("/m")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "POST /m");
    let r = h1_client().get(p.url("/m")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "GET /m", "only PUT changes");
    p.shutdown().await;
}

#[tokio::test]
async fn request_header_transforms_reach_the_backend() {
    let b = echo_backend().await;
    let p = proxy_for(
        &b.url(),
        &[
            (
                "h",
                "/h",
                json!([
                    { "RequestHeader": "x-set", "Set": "new" },
                    { "RequestHeader": "x-app", "Append": "two" },
                    { "RequestHeaderRemove": "x-gone" }
                ]),
            ),
            (
                "allowed",
                "/allowed",
                json!([{ "RequestHeadersAllowed": "x-a;accept" }]),
            ),
            (
                "host",
                "/host",
                json!([{ "RequestHeaderOriginalHost": "true" }]),
            ),
            (
                "set-host",
                "/set-host",
                json!([{ "RequestHeader": "Host", "Set": "set.example" }]),
            ),
            (
                "remove-host",
                "/remove-host",
                json!([{ "RequestHeaderRemove": "Host" }]),
            ),
            (
                "allow-host",
                "/allow-host",
                json!([{ "RequestHeadersAllowed": "host;x-a" }]),
            ),
        ],
    )
    .await;
    let s = get(
        &p,
        "/h",
        &[
            ("x-set", "old"),
            ("x-app", "one"),
            ("x-gone", "1"),
            ("x-other", "1"),
        ],
    )
    .await;
    assert_eq!(values(&s.headers, "x-echo-x-set"), ["new"]);
    assert_eq!(values(&s.headers, "x-echo-x-app"), ["one", "two"]);
    assert!(!s.headers.contains_key("x-echo-x-gone"));
    assert_eq!(values(&s.headers, "x-echo-x-other"), ["1"]);

    let s = get(&p, "/allowed", &[("x-a", "1"), ("x-b", "2")]).await;
    assert_eq!(values(&s.headers, "x-echo-x-a"), ["1"]);
    assert!(!s.headers.contains_key("x-echo-x-b"));
    assert!(!s.headers.contains_key("x-echo-user-agent"));
    assert!(
        s.headers.contains_key("x-echo-x-forwarded-for"),
        "forwarding headers are still added"
    );

    // Default: the destination's authority; with RequestHeaderOriginalHost: the client's.
    let s = get(&p, "/h", &[("host", "front.example")]).await;
    assert_eq!(values(&s.headers, "x-echo-host"), [b.addr.to_string()]);
    let s = get(&p, "/host", &[("host", "front.example")]).await;
    assert_eq!(values(&s.headers, "x-echo-host"), ["front.example"]);
    // A transform that sets `Host` wins; removing or allowing it leaves the destination's.
    let s = get(&p, "/set-host", &[("host", "front.example")]).await;
    assert_eq!(values(&s.headers, "x-echo-host"), ["set.example"]);
    for path in ["/remove-host", "/allow-host"] {
        let s = get(&p, path, &[("host", "front.example")]).await;
        assert_eq!(
            values(&s.headers, "x-echo-host"),
            [b.addr.to_string()],
            "{path}"
        );
    }
    p.shutdown().await;
}

#[tokio::test]
async fn forwarding_header_transforms_reach_the_backend() {
    let b = echo_backend().await;
    let p = proxy_for(
        &b.url(),
        &[
            ("default", "/default", json!([])),
            (
                "x",
                "/x/{**rest}",
                json!([
                    { "PathRemovePrefix": "/x" },
                    { "X-Forwarded": "Append", "Proto": "Off", "Host": "Remove", "Prefix": "Set" }
                ]),
            ),
            (
                "prefixed",
                "/prefixed",
                json!([{ "X-Forwarded": "Set", "HeaderPrefix": "X-Orig-" }]),
            ),
            (
                "fwd",
                "/fwd",
                json!([{ "Forwarded": "proto,host,for,by", "ForFormat": "Ip", "ByFormat": "Unknown" }]),
            ),
        ],
    )
    .await;
    let spoofed = [
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-proto", "gopher"),
        ("x-forwarded-host", "evil"),
        ("x-forwarded-prefix", "/evil"),
        ("forwarded", "for=6.6.6.6"),
        ("host", "front.example"),
    ];
    let s = get(&p, "/default", &spoofed).await;
    assert_eq!(values(&s.headers, "x-echo-x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(values(&s.headers, "x-echo-x-forwarded-proto"), ["http"]);
    assert_eq!(
        values(&s.headers, "x-echo-x-forwarded-host"),
        ["front.example"]
    );
    assert!(!s.headers.contains_key("x-echo-x-forwarded-prefix"));
    assert!(!s.headers.contains_key("x-echo-forwarded"));

    let s = get(&p, "/x/y", &spoofed).await;
    assert_eq!(s.body, "GET /y");
    assert_eq!(
        values(&s.headers, "x-echo-x-forwarded-for"),
        ["6.6.6.6, 127.0.0.1"]
    );
    assert_eq!(
        values(&s.headers, "x-echo-x-forwarded-proto"),
        ["gopher"],
        "Off"
    );
    assert!(!s.headers.contains_key("x-echo-x-forwarded-host"));
    assert_eq!(values(&s.headers, "x-echo-x-forwarded-prefix"), ["/x"]);
    assert!(!s.headers.contains_key("x-echo-forwarded"));

    let s = get(&p, "/prefixed", &spoofed).await;
    assert_eq!(values(&s.headers, "x-echo-x-orig-for"), ["127.0.0.1"]);
    assert_eq!(values(&s.headers, "x-echo-x-orig-host"), ["front.example"]);
    assert_eq!(
        values(&s.headers, "x-echo-x-forwarded-for"),
        ["6.6.6.6"],
        "other prefixes pass through"
    );

    let s = get(&p, "/fwd", &spoofed).await;
    assert_eq!(
        values(&s.headers, "x-echo-forwarded"),
        ["proto=http;host=\"front.example\";for=127.0.0.1;by=unknown"]
    );
    assert!(!s.headers.contains_key("x-echo-x-forwarded-for"));
    assert!(!s.headers.contains_key("x-echo-x-forwarded-host"));
    p.shutdown().await;
}

#[tokio::test]
async fn response_header_transforms_reach_the_client() {
    // The backend answers the status named by the last path segment.
    let b = backend(|req: Request<Incoming>| async move {
        let status: u16 = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Response::builder()
            .status(status)
            .header("server", "backend")
            .header("x-keep", "1")
            .header("x-drop", "1")
            .body(full("body"))
            .unwrap()
    })
    .await;
    let transforms = json!([
        { "ResponseHeader": "x-success", "Set": "yes" },
        { "ResponseHeader": "x-failure", "Set": "yes", "When": "Failure" },
        { "ResponseHeader": "x-always", "Append": "yes", "When": "Always" },
        { "ResponseHeaderRemove": "server" }
    ]);
    let p = proxy_for(
        &b.url(),
        &[
            ("r", "/r/{code}", transforms.clone()),
            (
                "allowed",
                "/allowed/{code}",
                json!([{ "ResponseHeadersAllowed": "x-keep" }]),
            ),
        ],
    )
    .await;
    let ok = get(&p, "/r/200", &[]).await;
    assert_eq!(ok.status, 200);
    assert_eq!(values(&ok.headers, "x-success"), ["yes"]);
    assert!(!ok.headers.contains_key("x-failure"));
    assert_eq!(values(&ok.headers, "x-always"), ["yes"]);
    assert!(!ok.headers.contains_key("server"));
    assert_eq!(ok.body, "body");

    let failed = get(&p, "/r/500", &[]).await;
    assert_eq!(failed.status, 500);
    assert!(!failed.headers.contains_key("x-success"));
    assert_eq!(values(&failed.headers, "x-failure"), ["yes"]);
    assert_eq!(values(&failed.headers, "x-always"), ["yes"]);
    assert_eq!(
        values(&failed.headers, "server"),
        ["backend"],
        "remove is Success-only by default"
    );

    let s = get(&p, "/allowed/200", &[]).await;
    assert_eq!(values(&s.headers, "x-keep"), ["1"]);
    assert!(!s.headers.contains_key("x-drop") && !s.headers.contains_key("server"));
    assert_eq!(s.body, "body");
    p.shutdown().await;

    // The forwarder's own error responses get the Failure/Always headers too.
    let dead = Refused::bind();
    let p = proxy_for(&dead.url(), &[("r", "/r/{code}", transforms)]).await;
    let s = get(&p, "/r/200", &[]).await;
    assert_eq!(s.status, 502);
    assert_eq!(values(&s.headers, "x-failure"), ["yes"]);
    assert_eq!(values(&s.headers, "x-always"), ["yes"]);
    assert!(!s.headers.contains_key("x-success"));
    p.shutdown().await;
}

/// GET `path` over h2c with a raw hyper client; returns the status and the trailers.
async fn h2c_trailers(p: &Proxy, path: &str) -> (StatusCode, Bytes, Option<HeaderMap>) {
    within("an h2c exchange with trailers", async {
        let stream = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = Request::get(p.url(path))
            .header("te", "trailers")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let status = resp.status();
        let collected = resp.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned();
        (status, collected.to_bytes(), trailers)
    })
    .await
}

#[tokio::test]
async fn response_trailer_transforms_reach_the_client() {
    // `/with`: the backend sends trailers (over h2, which always carries them);
    // `/without`: it does not.
    let b = backend(|req: Request<Incoming>| async move {
        let with = req.uri().path().starts_with("/with/");
        let body = full("data");
        let body = if with {
            let mut t = HeaderMap::new();
            t.insert("grpc-status", "0".parse().unwrap());
            t.insert("x-secret", "1".parse().unwrap());
            body.with_trailers(async move { Some(Ok(t)) }).boxed()
        } else {
            body
        };
        Response::new(body)
    })
    .await;
    let p = proxy_for_version(
        &b.url(),
        "2",
        &[
            (
                "with",
                "/with/{**rest}",
                json!([
                    { "ResponseTrailer": "x-proxy", "Set": "fuseway" },
                    { "ResponseTrailersAllowed": "grpc-status" }
                ]),
            ),
            (
                "without",
                "/without/{**rest}",
                json!([{ "ResponseTrailer": "x-proxy", "Append": "fuseway", "When": "Always" }]),
            ),
            ("plain", "/plain/{**rest}", json!([])),
        ],
    )
    .await;
    let (status, body, trailers) = h2c_trailers(&p, "/with/x").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"data"[..]));
    let trailers = trailers.expect("trailers");
    assert_eq!(values(&trailers, "grpc-status"), ["0"]);
    assert_eq!(values(&trailers, "x-proxy"), ["fuseway"]);
    assert!(!trailers.contains_key("x-secret"));

    let (_, body, trailers) = h2c_trailers(&p, "/without/x").await;
    assert_eq!(&body[..], b"data");
    assert_eq!(
        values(&trailers.expect("added trailers"), "x-proxy"),
        ["fuseway"]
    );

    let (_, _, trailers) = h2c_trailers(&p, "/plain/with/x").await;
    assert!(
        trailers.is_none(),
        "no transform, no trailers: {trailers:?}"
    );
    p.shutdown().await;
}

fn state_error(transforms: Value) -> String {
    let config = json!({
        "Routes": {
            "r1": { "ClusterId": "c", "Match": { "Path": "/{**rest}" }, "Transforms": transforms }
        },
        "Clusters": { "c": { "Destinations": { "d": { "Address": "http://127.0.0.1:9" } } } }
    });
    let parsed: fuseway::config::ProxyConfig = serde_json::from_value(config).unwrap();
    fuseway::state::ProxyState::new(parsed)
        .unwrap_err()
        .to_string()
}

#[test]
fn invalid_transforms_are_rejected_naming_the_field() {
    let err = state_error(json!([
        { "PathPrefix": "/ok" },
        { "RequestHeader": "x-a", "Sett": "1" },
        { "Nope": "1" },
        { "X-Forwarded": "Sometimes" }
    ]));
    for field in [
        "Routes.r1.Transforms[1]",
        "Routes.r1.Transforms[2]",
        "Routes.r1.Transforms[3]",
    ] {
        assert!(err.contains(field), "{field} missing from: {err}");
    }
    assert!(!err.contains("Transforms[0]"), "{err}");
    assert!(err.contains("unknown transform `Nope`"), "{err}");
    let err = state_error(json!([{ "PathSet": "/ok" }, { "PathPattern": "/a/{}" }]));
    assert!(err.contains("Routes.r1.Transforms[1]"), "{err}");
    assert!(err.contains("without a name"), "{err}");
}
