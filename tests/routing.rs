//! Routing end to end: every match mode and the precedence rules, through the real
//! proxy to a real backend. Each route has its own cluster whose destination address
//! carries the route id as path prefix, so the backend's echo names the route taken.

mod common;

use common::*;
use http::StatusCode;

/// (route id, JSON of the route's Match and Order) -> a config with one cluster per route.
fn config(backend: &str, routes: &[(&str, &str)]) -> String {
    let r: Vec<String> = routes
        .iter()
        .map(|(id, m)| format!(r#""{id}": {{ "ClusterId": "{id}", {m} }}"#))
        .collect();
    let c: Vec<String> = routes
        .iter()
        .map(|(id, _)| {
            format!(r#""{id}": {{ "Destinations": {{ "d": {{ "Address": "{backend}/{id}" }} }} }}"#)
        })
        .collect();
    format!(
        r#"{{ "Routes": {{ {} }}, "Clusters": {{ {} }} }}"#,
        r.join(",\n"),
        c.join(",\n")
    )
}

struct Fixture {
    _backend: Backend,
    proxy: Proxy,
    client: reqwest::Client,
}

impl Fixture {
    async fn new(routes: &[(&str, &str)]) -> Fixture {
        let backend = echo_backend().await;
        let proxy = proxy(&config(&backend.url(), routes)).await;
        Fixture {
            _backend: backend,
            proxy,
            client: h1_client(),
        }
    }

    /// The route that served `req`, or the status when the proxy answered itself.
    async fn route(&self, req: reqwest::RequestBuilder) -> Result<String, StatusCode> {
        let r = req.send().await.unwrap();
        if r.status() != StatusCode::OK {
            return Err(r.status());
        }
        let body = r.text().await.unwrap();
        let path = body.split_once(' ').unwrap().1;
        Ok(path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap()
            .to_owned())
    }

    /// Like `get`, but the path goes on the wire exactly as written (clients normalise
    /// `..` and `%2e%2e` themselves, which would hide what the proxy does).
    async fn get_raw(&self, path: &str) -> Result<String, StatusCode> {
        let path = self.raw_echo(path).await?;
        Ok(path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap()
            .to_owned())
    }

    /// The path the backend saw for a raw request.
    async fn raw_echo(&self, path: &str) -> Result<String, StatusCode> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let text = within("a raw exchange", async {
            let mut s = tokio::net::TcpStream::connect(self.proxy.addr)
                .await
                .unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            s.read_to_end(&mut out).await.unwrap();
            String::from_utf8(out).unwrap()
        })
        .await;
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status: u16 = head[9..12].parse().unwrap();
        if status != 200 {
            return Err(StatusCode::from_u16(status).unwrap());
        }
        let path = body.split_once(' ').unwrap().1;
        Ok(path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap()
            .to_owned())
    }

    async fn get(&self, path: &str) -> Result<String, StatusCode> {
        self.route(self.client.get(self.proxy.url(path))).await
    }

    async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Result<String, StatusCode> {
        let mut req = self.client.get(self.proxy.url(path));
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        self.route(req).await
    }
}

fn ok(s: &str) -> Result<String, StatusCode> {
    Ok(s.to_owned())
}

#[tokio::test]
async fn path_templates_and_precedence() {
    let f = Fixture::new(&[
        ("lit", r#""Match": { "Path": "/api/users" }"#),
        ("param", r#""Match": { "Path": "/api/{id}" }"#),
        ("catch", r#""Match": { "Path": "/api/{**rest}" }"#),
        ("opt", r#""Match": { "Path": "/opt/{x?}" }"#),
        ("deep", r#""Match": { "Path": "/a/{x}/c" }"#),
        ("late", r#""Match": { "Path": "/{x}/b/c" }"#),
    ])
    .await;
    assert_eq!(
        f.get("/api/users").await,
        ok("lit"),
        "literal beats parameter"
    );
    assert_eq!(
        f.get("/API/Users").await,
        ok("lit"),
        "literals are case-insensitive"
    );
    assert_eq!(
        f.get("/api/users/").await,
        ok("lit"),
        "trailing slash tolerated"
    );
    assert_eq!(
        f.get("/api/42").await,
        ok("param"),
        "parameter beats catch-all"
    );
    assert_eq!(f.get("/api/42/x/y").await, ok("catch"));
    assert_eq!(
        f.get("/api").await,
        ok("catch"),
        "catch-all matches nothing"
    );
    assert_eq!(f.get("/opt").await, ok("opt"));
    assert_eq!(f.get("/opt/1").await, ok("opt"));
    assert_eq!(f.get("/opt/1/2").await, Err(StatusCode::NOT_FOUND));
    assert_eq!(
        f.get("/a/b/c").await,
        ok("deep"),
        "earlier literal segment wins"
    );
    assert_eq!(f.get("/z/b/c").await, ok("late"));
    assert_eq!(f.get("/nothing").await, Err(StatusCode::NOT_FOUND));
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn normalised_paths_cannot_escape_their_route() {
    let f = Fixture::new(&[
        ("api", r#""Match": { "Path": "/api/{**rest}" }"#),
        ("admin", r#""Match": { "Path": "/admin/{**rest}" }"#),
    ])
    .await;
    assert_eq!(f.get_raw("/api/x").await, ok("api"));
    assert_eq!(f.get_raw("/api/../admin/x").await, ok("admin"));
    assert_eq!(f.get_raw("/api/%2e%2e/admin/x").await, ok("admin"));
    assert_eq!(f.get_raw("/api/%2E./admin/x").await, ok("admin"));
    assert_eq!(
        f.get_raw("/api/x%2F..%2Fadmin").await,
        ok("api"),
        "%2F never splits"
    );
    assert_eq!(f.get_raw("//admin//x").await, ok("admin"));
    assert_eq!(f.get_raw("/api/./x").await, ok("api"));
    assert_eq!(
        f.get_raw("/../../api/x").await,
        ok("api"),
        "cannot climb above the root"
    );
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn order_wins_over_specificity() {
    let f = Fixture::new(&[
        ("first", r#""Order": -1, "Match": { "Path": "/o/{**x}" }"#),
        ("lit", r#""Match": { "Path": "/o/lit" }"#),
    ])
    .await;
    assert_eq!(f.get("/o/lit").await, ok("first"));
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn hosts() {
    let f = Fixture::new(&[
        (
            "exact",
            r#""Match": { "Hosts": ["example.com"], "Path": "/h" }"#,
        ),
        (
            "wild",
            r#""Match": { "Hosts": ["*.example.com"], "Path": "/h" }"#,
        ),
        (
            "port",
            r#""Match": { "Hosts": ["example.com:8080"], "Path": "/h" }"#,
        ),
        (
            "anyport",
            r#""Match": { "Hosts": ["*:9090"], "Path": "/h" }"#,
        ),
        ("nohost", r#""Match": { "Path": "/h" }"#),
        ("hostonly", r#""Match": { "Hosts": ["only.test"] }"#),
    ])
    .await;
    let h = |host: &'static str| [("host", host)];
    assert_eq!(f.get_with("/h", &h("example.com")).await, ok("exact"));
    assert_eq!(f.get_with("/h", &h("EXAMPLE.com")).await, ok("exact"));
    assert_eq!(
        f.get_with("/h", &h("example.com.")).await,
        ok("exact"),
        "trailing dot"
    );
    assert_eq!(f.get_with("/h", &h("a.example.com")).await, ok("wild"));
    assert_eq!(
        f.get_with("/h", &h("a.b.example.com")).await,
        ok("wild"),
        "any depth"
    );
    assert_eq!(
        f.get_with("/h", &h("example.com:8080")).await,
        ok("port"),
        "host+port beats host"
    );
    assert_eq!(f.get_with("/h", &h("other.test:9090")).await, ok("anyport"));
    assert_eq!(f.get_with("/h", &h("other.test")).await, ok("nohost"));
    assert_eq!(f.get_with("/h", &h("badexample.com")).await, ok("nohost"));
    assert_eq!(
        f.get_with("/anything/at/all", &h("only.test")).await,
        ok("hostonly")
    );
    assert_eq!(
        f.get_with("/anything", &h("other.test")).await,
        Err(StatusCode::NOT_FOUND)
    );
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn methods() {
    let f = Fixture::new(&[
        (
            "post",
            r#""Match": { "Path": "/m", "Methods": ["POST", "put"] }"#,
        ),
        ("any", r#""Match": { "Path": "/m" }"#),
        (
            "onlyget",
            r#""Match": { "Path": "/g", "Methods": ["GET"] }"#,
        ),
    ])
    .await;
    assert_eq!(f.route(f.client.post(f.proxy.url("/m"))).await, ok("post"));
    assert_eq!(f.route(f.client.put(f.proxy.url("/m"))).await, ok("post"));
    assert_eq!(f.get("/m").await, ok("any"));
    assert_eq!(f.get("/g").await, ok("onlyget"));
    assert_eq!(
        f.route(f.client.delete(f.proxy.url("/g"))).await,
        Err(StatusCode::NOT_FOUND)
    );
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn header_modes() {
    let hdr = |path: &str, mode: &str, values: &str| {
        format!(
            r#""Match": {{ "Path": "{path}", "Headers": [{{ "Name": "x-h", "Mode": "{mode}" {values} }}] }}"#
        )
    };
    let routes = [
        ("exact", hdr("/exact", "ExactHeader", r#", "Values": ["a", "b"]"#)),
        ("prefix", hdr("/prefix", "HeaderPrefix", r#", "Values": ["pre"]"#)),
        ("contains", hdr("/contains", "Contains", r#", "Values": ["mid"]"#)),
        ("notcontains", hdr("/notcontains", "NotContains", r#", "Values": ["bad"]"#)),
        ("exists", hdr("/exists", "Exists", "")),
        ("notexists", hdr("/notexists", "NotExists", "")),
        (
            "cs",
            r#""Match": { "Path": "/cs", "Headers": [{ "Name": "x-h", "Values": ["A"], "IsCaseSensitive": true }] }"#.to_owned(),
        ),
        (
            "two",
            r#""Match": { "Path": "/two", "Headers": [{ "Name": "x-h", "Values": ["1"] }, { "Name": "x-i", "Values": ["2"] }] }"#.to_owned(),
        ),
        (
            "one",
            r#""Match": { "Path": "/two", "Headers": [{ "Name": "x-h", "Values": ["1"] }] }"#.to_owned(),
        ),
        ("fallback", r#""Order": 10, "Match": { "Path": "/{**x}" }"#.to_owned()),
    ];
    let routes: Vec<(&str, &str)> = routes.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let f = Fixture::new(&routes).await;
    let x = |v: &'static str| [("x-h", v)];
    assert_eq!(
        f.get_with("/exact", &x("B")).await,
        ok("exact"),
        "case-insensitive"
    );
    assert_eq!(f.get_with("/exact", &x("c")).await, ok("fallback"));
    assert_eq!(
        f.get_with("/exact", &x("z, a")).await,
        ok("exact"),
        "comma-separated values"
    );
    assert_eq!(f.get_with("/prefix", &x("prefix")).await, ok("prefix"));
    assert_eq!(f.get_with("/prefix", &x("xpre")).await, ok("fallback"));
    assert_eq!(f.get_with("/contains", &x("amidb")).await, ok("contains"));
    assert_eq!(f.get_with("/contains", &x("none")).await, ok("fallback"));
    assert_eq!(
        f.get_with("/notcontains", &x("good")).await,
        ok("notcontains")
    );
    assert_eq!(
        f.get("/notcontains").await,
        ok("notcontains"),
        "matches when absent"
    );
    assert_eq!(
        f.get_with("/notcontains", &x("so bad")).await,
        ok("fallback")
    );
    assert_eq!(f.get_with("/exists", &x("1")).await, ok("exists"));
    assert_eq!(
        f.get_with("/exists", &x("")).await,
        ok("fallback"),
        "empty is not present"
    );
    assert_eq!(f.get("/exists").await, ok("fallback"));
    assert_eq!(f.get("/notexists").await, ok("notexists"));
    assert_eq!(f.get_with("/notexists", &x("1")).await, ok("fallback"));
    assert_eq!(f.get_with("/cs", &x("A")).await, ok("cs"));
    assert_eq!(f.get_with("/cs", &x("a")).await, ok("fallback"));
    assert_eq!(
        f.get_with("/two", &[("x-h", "1"), ("x-i", "2")]).await,
        ok("two"),
        "more header rules win"
    );
    assert_eq!(f.get_with("/two", &x("1")).await, ok("one"));
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn query_modes() {
    let q = |path: &str, mode: &str, values: &str| {
        format!(
            r#""Match": {{ "Path": "{path}", "QueryParameters": [{{ "Name": "q", "Mode": "{mode}" {values} }}] }}"#
        )
    };
    let routes = [
        ("exact", q("/exact", "Exact", r#", "Values": ["a b"]"#)),
        ("prefix", q("/prefix", "Prefix", r#", "Values": ["pre"]"#)),
        (
            "contains",
            q("/contains", "Contains", r#", "Values": ["mid"]"#),
        ),
        (
            "notcontains",
            q("/notcontains", "NotContains", r#", "Values": ["bad"]"#),
        ),
        ("exists", q("/exists", "Exists", "")),
        ("plain", r#""Match": { "Path": "/exact" }"#.to_owned()),
        (
            "fallback",
            r#""Order": 10, "Match": { "Path": "/{**x}" }"#.to_owned(),
        ),
    ];
    let routes: Vec<(&str, &str)> = routes.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let f = Fixture::new(&routes).await;
    assert_eq!(f.get("/exact?q=a%20b").await, ok("exact"), "decoded");
    assert_eq!(
        f.get("/exact?q=A+B").await,
        ok("exact"),
        "+ is space, case-insensitive"
    );
    assert_eq!(
        f.get("/exact?q=c").await,
        ok("plain"),
        "a route with query rules beats one without only when they match"
    );
    assert_eq!(f.get("/prefix?q=prefix").await, ok("prefix"));
    assert_eq!(f.get("/prefix?q=xpre").await, ok("fallback"));
    assert_eq!(f.get("/contains?x=1&q=amid").await, ok("contains"));
    assert_eq!(f.get("/notcontains").await, ok("notcontains"));
    assert_eq!(f.get("/notcontains?q=bad").await, ok("fallback"));
    assert_eq!(f.get("/exists?q=1").await, ok("exists"));
    assert_eq!(f.get("/exists?q=").await, ok("fallback"));
    f.proxy.shutdown().await;
}

#[tokio::test]
async fn no_route_is_404() {
    let f = Fixture::new(&[("only", r#""Match": { "Path": "/only" }"#)]).await;
    assert_eq!(f.get("/only").await, ok("only"));
    assert_eq!(f.get("/other").await, Err(StatusCode::NOT_FOUND));
    let r = h2c_client()
        .get(f.proxy.url("/other"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    f.proxy.shutdown().await;
}

/// ASP.NET's host filtering (`AllowedHosts`), before any route: a request naming a host
/// not listed is answered 400 whatever the routes — over HTTP/1.1 by its `Host`, over
/// HTTP/2 by its `:authority` — a listed one (any case, any port, subdomains for
/// `*.`) is routed, and an HTTP/1.0 request naming none is let through, as ASP.NET's
/// `AllowEmptyHosts`.
#[tokio::test]
async fn allowed_hosts_are_filtered_before_routing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = echo_backend().await;
    let routes = config(
        &backend.url(),
        &[("all", r#""Match": { "Path": "/{**rest}" }"#)],
    );
    let config = routes.replacen('{', r#"{ "AllowedHosts": "localhost; *.example.com","#, 1);
    let proxy = proxy(&config).await;
    let status = |host: &'static str| {
        let url = proxy.url("/x");
        async move {
            h1_client()
                .get(url)
                .header("host", host)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(status("localhost").await, StatusCode::OK);
    assert_eq!(status("LOCALHOST:9999").await, StatusCode::OK);
    assert_eq!(status("a.b.example.com").await, StatusCode::OK);
    assert_eq!(status("example.com").await, StatusCode::BAD_REQUEST);
    assert_eq!(status("evil.test").await, StatusCode::BAD_REQUEST);
    let port = proxy.addr.port();
    for (client, url, expected) in [
        (
            h2c_client(),
            format!("http://localhost:{port}/x"),
            StatusCode::OK,
        ),
        (
            h2c_client(),
            format!("http://127.0.0.1:{port}/x"),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let r = within("the answer", client.get(&url).send()).await.unwrap();
        assert_eq!(
            (r.status(), r.version()),
            (expected, http::Version::HTTP_2),
            "{url}"
        );
    }
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /x HTTP/1.0\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    within("the answer", s.read_to_end(&mut answer))
        .await
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    proxy.shutdown().await;
}
