//! Session affinity end to end: real backends, the real proxy, real clients, 127.0.0.1.
//! Written to hold whatever the load balancer picks for a request without a key.

mod common;

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use common::*;
use fuseway::affinity::{destination_key, hash_cookie_value, SessionAffinity};
use fuseway::config::{parse, Format};
use fuseway::request::{Candidates, RouteContext, Routed};
use fuseway::stage::Stage;
use fuseway::state::ProxyState;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

const COOKIE_NAME: &str = ".Fuseway.Affinity";
const KEY_32: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A backend answering its own name.
async fn named(name: &'static str) -> Backend {
    backend(move |_req: Request<Incoming>| async move { Response::new(full(name)) }).await
}

/// Backends `d1`, `d2`, `d3`, each answering its id.
async fn three() -> Vec<(&'static str, Backend)> {
    let mut v = Vec::new();
    for id in ["d1", "d2", "d3"] {
        v.push((id, named(id).await));
    }
    v
}

fn config(backends: &[(&'static str, Backend)], affinity: &str) -> String {
    let dests: Vec<(&str, String)> = backends.iter().map(|(id, b)| (*id, b.url())).collect();
    let dests: Vec<(&str, &str)> = dests.iter().map(|(id, u)| (*id, u.as_str())).collect();
    simple_config(&dests, &format!(r#""SessionAffinity": {affinity},"#))
}

fn hash_cookie(failure: &str) -> String {
    format!(
        r#"{{ "Enabled": true, "AffinityKeyName": "{COOKIE_NAME}", "FailurePolicy": "{failure}" }}"#
    )
}

struct Answer {
    status: StatusCode,
    body: String,
    set_cookies: Vec<String>,
    header: Option<String>,
}

impl Answer {
    /// The value of the affinity cookie set, checking there is exactly one and its attributes.
    fn cookie_value(&self) -> &str {
        assert_eq!(self.set_cookies.len(), 1, "{:?}", self.set_cookies);
        let c = &self.set_cookies[0];
        let (pair, attributes) = c.split_once(';').expect("attributes");
        assert_eq!(attributes, " path=/; httponly");
        pair.strip_prefix(&format!("{COOKIE_NAME}="))
            .expect("the affinity cookie")
    }
}

async fn get(p: &Proxy, headers: &[(&str, &str)]) -> Answer {
    let mut request = h1_client().get(p.url("/x"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let r = request.send().await.unwrap();
    let status = r.status();
    let set_cookies = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let header = r
        .headers()
        .get("x-affinity")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = r.text().await.unwrap();
    Answer {
        status,
        body,
        set_cookies,
        header,
    }
}

fn cookie(value: &str) -> String {
    format!("theme=dark; {COOKIE_NAME}={value}")
}

#[tokio::test]
async fn hash_cookie_sticks_to_the_destination_it_names() {
    let backends = three().await;
    let p = proxy(&config(&backends, &hash_cookie("Redistribute"))).await;

    // No cookie: whoever answers, the response names it.
    let first = get(&p, &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.cookie_value(), hash_cookie_value(&first.body));
    // YARP's value for the same id.
    assert_eq!(hash_cookie_value("d2"), "eb4f7569e28edc50");

    // Replaying it reaches the same backend, and sets nothing.
    let again = get(&p, &[("cookie", &cookie(first.cookie_value()))]).await;
    assert_eq!(again.body, first.body);
    assert!(again.set_cookies.is_empty(), "{:?}", again.set_cookies);

    // A cookie naming any other destination wins over the balancer, every time.
    for id in ["d2", "d3", "d1"] {
        for _ in 0..3 {
            let a = get(&p, &[("cookie", &cookie(&hash_cookie_value(id)))]).await;
            assert_eq!(a.status, StatusCode::OK);
            assert_eq!(a.body, id);
            assert!(a.set_cookies.is_empty(), "{:?}", a.set_cookies);
        }
    }
    p.shutdown().await;
}

#[tokio::test]
async fn a_cookie_for_a_missing_destination_is_redistributed() {
    let backends = three().await;
    let p = proxy(&config(&backends, &hash_cookie("Redistribute"))).await;

    // A value for an id the cluster never had.
    let a = get(&p, &[("cookie", &cookie(&hash_cookie_value("gone")))]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_ne!(a.cookie_value(), hash_cookie_value("gone"));
    assert_eq!(a.cookie_value(), hash_cookie_value(&a.body));

    // d2 sticks, until it is removed from the configuration.
    let d2 = cookie(&hash_cookie_value("d2"));
    assert_eq!(get(&p, &[("cookie", &d2)]).await.body, "d2");
    let without_d2: Vec<(&'static str, Backend)> =
        backends.into_iter().filter(|(id, _)| *id != "d2").collect();
    let update = parse(
        &config(&without_d2, &hash_cookie("Redistribute")),
        Format::Json,
    )
    .unwrap();
    p.state.update(update).unwrap();
    let a = get(&p, &[("cookie", &d2)]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_ne!(a.body, "d2");
    assert_eq!(a.cookie_value(), hash_cookie_value(&a.body));
    // The new cookie sticks.
    let b = get(&p, &[("cookie", &cookie(a.cookie_value()))]).await;
    assert_eq!(b.body, a.body);
    assert!(b.set_cookies.is_empty());
    p.shutdown().await;
}

#[tokio::test]
async fn return503error_answers_503_for_a_missing_destination() {
    let backends = three().await;
    let p = proxy(&config(&backends, &hash_cookie("Return503Error"))).await;

    let a = get(&p, &[("cookie", &cookie(&hash_cookie_value("gone")))]).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(a.set_cookies.is_empty(), "{:?}", a.set_cookies);
    // The cookie sent twice is ambiguous: a failure too.
    let twice = format!(
        "{COOKIE_NAME}={}; {COOKIE_NAME}={}",
        hash_cookie_value("d1"),
        hash_cookie_value("d1")
    );
    assert_eq!(
        get(&p, &[("cookie", &twice)]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // Without a cookie, or with a good one, all is well.
    let first = get(&p, &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.cookie_value(), hash_cookie_value(&first.body));
    let a = get(&p, &[("cookie", &cookie(&hash_cookie_value("d3")))]).await;
    assert_eq!(a.body, "d3");
    p.shutdown().await;
}

#[tokio::test]
async fn error_responses_carry_the_cookie_only_with_a_destination() {
    // A destination that refuses connections: 502, and the cookie for it.
    let closed = Refused::bind();
    let json = simple_config(
        &[("dead", &closed.url())],
        &format!(r#""SessionAffinity": {},"#, hash_cookie("Redistribute")),
    );
    let p = proxy(&json).await;
    let a = get(&p, &[]).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert_eq!(a.cookie_value(), hash_cookie_value("dead"));
    p.shutdown().await;

    // No destination at all: 503 from load balancing, no cookie.
    let json = simple_config(
        &[],
        &format!(r#""SessionAffinity": {},"#, hash_cookie("Redistribute")),
    );
    let p = proxy(&json).await;
    let a = get(&p, &[]).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(a.set_cookies.is_empty(), "{:?}", a.set_cookies);
    p.shutdown().await;
}

#[tokio::test]
async fn custom_header_sticks_with_sealed_ids() {
    let backends = three().await;
    let affinity = format!(
        r#"{{ "Enabled": true, "Policy": "CustomHeader", "AffinityKeyName": "X-Affinity", "EncryptionKey": "{KEY_32}" }}"#
    );
    let p = proxy(&config(&backends, &affinity)).await;

    let first = get(&p, &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.set_cookies.is_empty());
    let sealed = first.header.clone().expect("the affinity header");
    // Sealed: base64url of a 12-byte nonce, the id encrypted and a 16-byte tag. (Not
    // "the id does not appear in it": a random value holds a two-letter id about once
    // in a hundred runs.)
    assert_ne!(sealed, first.body);
    let decoded = URL_SAFE_NO_PAD.decode(&sealed).expect("a base64url key");
    assert_eq!(
        decoded.len(),
        12 + first.body.len() + 16,
        "the id is sealed: {sealed}"
    );
    let again = get(&p, &[("x-affinity", &sealed)]).await;
    assert_eq!(again.body, first.body);
    assert_eq!(again.header, None);

    // The key the proxy would issue for d2 (the second destination).
    let snapshot = p.state.snapshot();
    let cluster = snapshot.cluster("c").unwrap();
    let (d2, _) = cluster.destination("d2").unwrap();
    let d2_key = destination_key(cluster, d2).unwrap().to_owned();
    for _ in 0..3 {
        let a = get(&p, &[("x-affinity", &d2_key)]).await;
        assert_eq!(a.body, "d2");
        assert_eq!(a.header, None);
    }

    // Tampered: redistributed, with a fresh key.
    let mut tampered = d2_key.into_bytes();
    tampered[20] = if tampered[20] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let a = get(&p, &[("x-affinity", &tampered)]).await;
    assert_eq!(a.status, StatusCode::OK);
    let fresh = a.header.expect("a new key");
    assert_eq!(get(&p, &[("x-affinity", &fresh)]).await.body, a.body);
    p.shutdown().await;
}

// ---- The hit path does not allocate ----

#[global_allocator]
static ALLOCATOR: fuseway_alloc_count::Counting =
    fuseway_alloc_count::Counting::new(std::alloc::System);

/// Allocations made by `f` on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let (out, counted) = fuseway_alloc_count::this_thread(f);
    (out, counted.allocs as usize)
}

#[test]
#[allow(clippy::result_large_err)]
fn an_affinitized_request_does_not_allocate() {
    // The counter sees allocations at all.
    let (v, n) = allocations(|| vec![1u8; 8]);
    assert!(n >= 1 && v.len() == 8);
    for (policy, header) in [
        ("HashCookie", "cookie"),
        ("ArrCookie", "cookie"),
        ("Cookie", "cookie"),
        ("CustomHeader", "x-affinity"),
    ] {
        let json = format!(
            r#"{{
  "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{
    "SessionAffinity": {{ "Enabled": true, "Policy": "{policy}", "AffinityKeyName": "X-Affinity", "EncryptionKey": "{KEY_32}" }},
    "Destinations": {{
      "d1": {{ "Address": "http://127.0.0.1:1" }},
      "d2": {{ "Address": "http://127.0.0.1:2" }},
      "d3": {{ "Address": "http://127.0.0.1:3" }} }} }} }}
}}"#
        );
        let state = ProxyState::new(parse(&json, Format::Json).unwrap()).unwrap();
        let snapshot = state.snapshot();
        let cluster = snapshot.cluster_index("c").unwrap();
        // The first call computes the cluster's keys (once per snapshot).
        let key = destination_key(&snapshot.clusters()[cluster], 1)
            .unwrap()
            .to_owned();
        let value = if header == "cookie" {
            format!("a=1; X-Affinity={key}; b=2")
        } else {
            key
        };
        let stage = SessionAffinity::new();
        for _ in 0..3 {
            let routed = Routed {
                request: Request::builder()
                    .header(header, value.as_str())
                    .body(())
                    .unwrap(),
                context: RouteContext::new(Arc::clone(&snapshot), 0, cluster, Candidates::all(3)),
            };
            let (result, n) = allocations(|| stage.on_request(routed));
            let (routed, state) = result.expect("affinitized");
            assert_eq!(n, 0, "{policy}: allocations on the hit path");
            assert_eq!(
                routed.context.candidates().iter().collect::<Vec<_>>(),
                vec![1],
                "{policy}"
            );
            assert!(!state.writes_key());
        }
    }
}
