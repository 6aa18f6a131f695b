//! Unit tests of the session-affinity stage on real snapshots.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{COOKIE, SET_COOKIE};
use http::{Request, StatusCode};

use super::*;
use crate::config::{parse, Format};
use crate::request::{Candidates, ForwardError, ForwardErrorKind, RouteContext};
use crate::state::{ProxyState, Snapshot};

const KEY_32: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// One route `r1` to cluster `c1` (with `affinity` as its `SessionAffinity`) with these
/// destinations, plus a cluster `plain` without affinity.
fn state(affinity: &str, destinations: &[&str]) -> ProxyState {
    let dests: Vec<String> = destinations
        .iter()
        .enumerate()
        .map(|(i, d)| format!(r#""{d}": {{ "Address": "http://127.0.0.1:{}" }}"#, 10 + i))
        .collect();
    let json = format!(
        r#"{{
  "Routes": {{ "r1": {{ "ClusterId": "c1", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{
    "c1": {{ "SessionAffinity": {affinity}, "Destinations": {{ {} }} }},
    "plain": {{ "Destinations": {{ "p1": {{ "Address": "http://127.0.0.1:9" }} }} }}
  }}
}}"#,
        dests.join(", ")
    );
    ProxyState::new(parse(&json, Format::Json).expect("config parses")).expect("valid state")
}

fn affinity(policy: &str, extra: &str) -> String {
    format!(
        r#"{{ "Enabled": true, "Policy": "{policy}", "AffinityKeyName": "My.Affinity" {extra} }}"#
    )
}

const DESTS: &[&str] = &["d1", "d2", "d3"];

fn cluster_index(snapshot: &Snapshot, id: &str) -> usize {
    snapshot.cluster_index(id).expect("cluster")
}

/// A routed request to `c1` with all destinations as candidates.
fn routed(snapshot: &Arc<Snapshot>, headers: &[(&str, &str)]) -> Routed<()> {
    let c = cluster_index(snapshot, "c1");
    let n = snapshot.clusters()[c].destinations().len();
    routed_with(snapshot, headers, Candidates::all(n))
}

fn routed_with(
    snapshot: &Arc<Snapshot>,
    headers: &[(&str, &str)],
    candidates: Candidates,
) -> Routed<()> {
    let mut request = Request::builder().uri("/x");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let c = cluster_index(snapshot, "c1");
    Routed {
        request: request.body(()).unwrap(),
        context: RouteContext::new(snapshot.clone(), 0, c, candidates),
    }
}

fn candidates(r: &Routed<()>) -> Vec<usize> {
    r.context.candidates().iter().collect()
}

/// The response of a forward to destination `index` of the request's cluster, after
/// the stage's `on_response`.
fn respond(routed: &Routed<()>, state: AffinityState, index: usize) -> ProxyResponse {
    let mut response = ProxyResponse::status(StatusCode::OK);
    response.outcome.set_target(routed.context.clone(), index);
    back(state, &mut response);
    response
}

fn back(state: AffinityState, response: &mut ProxyResponse) {
    <SessionAffinity as Stage<Routed<()>>>::on_response(&SessionAffinity::new(), state, response);
}

fn set_cookies(response: &ProxyResponse) -> Vec<String> {
    response
        .response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

#[allow(clippy::result_large_err)]
fn run(routed: Routed<()>) -> Result<(Routed<()>, AffinityState), ProxyResponse> {
    SessionAffinity::new().on_request(routed)
}

/// The key of destination `id` of `c1`.
fn key_of(snapshot: &Snapshot, id: &str) -> String {
    let (i, _) = snapshot
        .cluster("c1")
        .unwrap()
        .destination(id)
        .expect("destination");
    key(snapshot, i)
}

fn key(snapshot: &Snapshot, index: usize) -> String {
    destination_key(snapshot.cluster("c1").unwrap(), index)
        .unwrap()
        .to_owned()
}

// ---- Test vectors ----

#[test]
fn hash_cookie_vectors() {
    // From YARP's own tests (HashCookieSessionAffinityPolicyTests: "dest-B").
    assert_eq!(hash_cookie_value("dest-B"), "53c079ed4c377b0d");
    // Computed independently with Python's `xxhash` 4.1.0:
    // xxhash.xxh64(s.encode('utf-16-le'), seed=0).hexdigest() over the id upper-cased
    // with .NET's invariant (one to one) mapping, written out by hand below.
    assert_eq!(hash_cookie_value("dest-A"), "615d6cd1b28160f0");
    assert_eq!(hash_cookie_value("dest-C"), "435025e33cab55ca");
    assert_eq!(hash_cookie_value("d1"), "3ca257a575bfff71"); // "D1"
    assert_eq!(hash_cookie_value("D1"), "3ca257a575bfff71");
    assert_eq!(hash_cookie_value("d2"), "eb4f7569e28edc50"); // "D2"
    assert_eq!(hash_cookie_value(""), "ef46db3751d8e999");
    assert_eq!(hash_cookie_value("straße"), "07a9dbedf2e2b41e"); // "STRAßE", not "STRASSE"
    assert_eq!(hash_cookie_value("İstanbul"), "07cfa7c076a0a1ff"); // "İSTANBUL"
    assert_eq!(hash_cookie_value("ıi"), "995f41415586dc51"); // "ıI": U+0131 stays
    assert_eq!(hash_cookie_value("d😀"), "bb78f02c958a183b"); // "D😀", a surrogate pair
    assert_eq!(hash_cookie_value("\u{1FB3}x"), "195e513424cbfbaf"); // "\u{1FBC}X"
}

#[test]
fn arr_cookie_vectors() {
    // From YARP's own tests (ArrCookieSessionAffinityPolicyTests: "dest-B").
    assert_eq!(
        arr_cookie_value("dest-B"),
        "920A160FA519353932B655488361A944531650016793761EE7224DE632863B13"
    );
    // Computed independently with Python's hashlib:
    // hashlib.sha256(s.encode('utf-16-le')).hexdigest().upper() over the lower-cased id.
    assert_eq!(
        arr_cookie_value("dest-A"),
        "CE3762A8E5BFB452C5071CC80C81E9C89A87369B0E8F7866CB437C1A181A865F"
    );
    assert_eq!(
        arr_cookie_value("D1"),
        "E1A81620F938713C58BD2D3627E2FD60538B502CCE1E2DF25C6D79F2F7F8EDAF"
    );
    assert_eq!(
        arr_cookie_value(""),
        "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"
    );
    // "İstanbul": U+0130 stays itself under .NET's invariant lower-casing.
    assert_eq!(
        arr_cookie_value("İSTANBUL"),
        "A143439EC5B81F5C927CEFBA479645B5E486C97681EBA13549BE656D10F8B003"
    );
    assert_eq!(
        arr_cookie_value("STRAßE"),
        "BE0758DD908EF851B81E064E4643099028A1B6ED9B7876DCF1964EFBBE028D49"
    );
    assert_eq!(
        arr_cookie_value("d😀"),
        "7DB7DFFBB2CF5BE1AF6372DA14E7EF30EAAC901A40825A21DB4F82B777492BD1"
    );
}

/// YARP's tests' configuration: the exact `Set-Cookie` they expect for "dest-B".
const YARP_TEST_COOKIE: &str = r#", "FailurePolicy": "Return503Error", "Cookie": {
    "Domain": "mydomain.my", "HttpOnly": false, "IsEssential": true, "MaxAge": "01:00:00",
    "Path": "/some", "SameSite": "Lax", "SecurePolicy": "Always" }"#;

#[test]
fn set_cookie_matches_yarp_tests() {
    for (policy, value) in [
        ("HashCookie", "53c079ed4c377b0d"),
        (
            "ArrCookie",
            "920A160FA519353932B655488361A944531650016793761EE7224DE632863B13",
        ),
    ] {
        let state = state(
            &affinity(policy, YARP_TEST_COOKIE),
            &["dest-A", "dest-B", "dest-C"],
        );
        let snapshot = state.snapshot();
        let (r, s) = run(routed(&snapshot, &[("cookie", "Some-Cookie=ZZZ")])).unwrap();
        assert!(s.writes_key());
        let response = respond(&r, s, 1);
        assert_eq!(
            set_cookies(&response),
            vec![format!(
                "My.Affinity={value}; max-age=3600; domain=mydomain.my; path=/some; secure; samesite=lax"
            )],
            "{policy}"
        );
    }
}

// ---- Cookie attributes ----

fn cookie_for(affinity_json: &str, request: Request<()>) -> Vec<String> {
    let state = state(affinity_json, DESTS);
    let snapshot = state.snapshot();
    let c = cluster_index(&snapshot, "c1");
    let routed = Routed {
        request,
        context: RouteContext::new(snapshot.clone(), 0, c, Candidates::all(3)),
    };
    let (r, s) = run(routed).unwrap();
    set_cookies(&respond(&r, s, 0))
}

fn tls_request() -> Request<()> {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut request = Request::new(());
    request.extensions_mut().insert(ConnectionInfo {
        remote: addr,
        local: addr,
        tls: true,
    });
    request
}

#[test]
fn default_cookie_attributes() {
    let d1 = "3ca257a575bfff71";
    let json = affinity("HashCookie", "");
    assert_eq!(
        cookie_for(&json, Request::new(())),
        vec![format!("My.Affinity={d1}; path=/; httponly")]
    );
    // SameAsRequest (the default): secure over TLS, or for an https URI.
    assert_eq!(
        cookie_for(&json, tls_request()),
        vec![format!("My.Affinity={d1}; path=/; secure; httponly")]
    );
    let https = Request::builder()
        .uri("https://example.com/x")
        .body(())
        .unwrap();
    assert_eq!(
        cookie_for(&json, https),
        vec![format!("My.Affinity={d1}; path=/; secure; httponly")]
    );
}

#[test]
fn cookie_attribute_options() {
    let d1 = "3ca257a575bfff71";
    let none = affinity(
        "HashCookie",
        r#", "Cookie": { "SecurePolicy": "None", "SameSite": "None", "HttpOnly": true }"#,
    );
    assert_eq!(
        cookie_for(&none, tls_request()),
        vec![format!("My.Affinity={d1}; path=/; samesite=none; httponly")]
    );
    let always = affinity(
        "HashCookie",
        r#", "Cookie": { "SecurePolicy": "always", "SameSite": "Strict", "Domain": "example.com", "Path": "/app", "MaxAge": "90s" }"#,
    );
    assert_eq!(
        cookie_for(&always, Request::new(())),
        vec![format!(
            "My.Affinity={d1}; max-age=90; domain=example.com; path=/app; secure; samesite=strict; httponly"
        )]
    );
}

#[test]
fn cookie_expires_is_now_plus_expiration() {
    let state = state(
        &affinity(
            "HashCookie",
            r#", "Cookie": { "Expiration": "1.00:00:00", "MaxAge": "00:30:00" }"#,
        ),
        DESTS,
    );
    let snapshot = state.snapshot();
    let cluster = snapshot.cluster("c1").unwrap();
    let settings = cluster.affinity().unwrap();
    // RFC 9110's example date, one day after `now`.
    let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 86_400);
    let (name, value) = settings.response_header(1, true, || now).unwrap();
    assert_eq!(name, SET_COOKIE);
    assert_eq!(
        value,
        "My.Affinity=eb4f7569e28edc50; expires=Sun, 06 Nov 1994 08:49:37 GMT; max-age=1800; path=/; secure; httponly"
    );
    // Through the stage, with the real clock.
    let (r, s) = run(routed(&snapshot, &[])).unwrap();
    let before = SystemTime::now();
    let cookie = set_cookies(&respond(&r, s, 0)).pop().unwrap();
    let mut expected = String::new();
    cookie::write_imf_fixdate(&mut expected, Some(before + Duration::from_secs(86_400)));
    let mut later = String::new();
    cookie::write_imf_fixdate(
        &mut later,
        Some(SystemTime::now() + Duration::from_secs(86_400)),
    );
    assert!(
        cookie.contains(&format!("; expires={expected};"))
            || cookie.contains(&format!("; expires={later};")),
        "{cookie}"
    );
}

// ---- Outcomes ----

/// Every policy, with a way to make a request carrying `value` as its key.
fn policies() -> Vec<(&'static str, String)> {
    let key = format!(r#", "EncryptionKey": "{KEY_32}""#);
    vec![
        ("HashCookie", String::new()),
        ("ArrCookie", String::new()),
        ("Cookie", key.clone()),
        ("Cookie", String::new()),
        ("CustomHeader", key),
        ("CustomHeader", String::new()),
    ]
}

fn carrying(policy: &str, value: &str) -> (&'static str, String) {
    if policy == "CustomHeader" {
        ("My.Affinity", value.to_owned())
    } else {
        ("cookie", format!("other=1; My.Affinity={value}; more=2"))
    }
}

fn written(policy: &str, response: &ProxyResponse) -> Vec<String> {
    if policy == "CustomHeader" {
        response
            .response
            .headers()
            .get_all("my.affinity")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    } else {
        set_cookies(response)
    }
}

#[test]
fn no_key_continues_and_writes_the_final_destination() {
    for (policy, extra) in policies() {
        let state = state(&affinity(policy, &extra), DESTS);
        let snapshot = state.snapshot();
        let (r, s) = run(routed(&snapshot, &[])).unwrap();
        assert_eq!(candidates(&r), vec![0, 1, 2], "{policy}");
        assert!(s.writes_key());
        let response = respond(&r, s, 2);
        let written = written(policy, &response);
        assert_eq!(written.len(), 1, "{policy}");
        if policy == "CustomHeader" {
            assert_eq!(written[0], key(&snapshot, 2));
            assert!(set_cookies(&response).is_empty());
        } else {
            assert_eq!(
                written[0],
                format!("My.Affinity={}; path=/; httponly", key(&snapshot, 2))
            );
        }
    }
}

#[test]
fn a_valid_key_narrows_to_its_destination_and_writes_nothing() {
    for (policy, extra) in policies() {
        let state = state(&affinity(policy, &extra), DESTS);
        let snapshot = state.snapshot();
        let value = key(&snapshot, 1);
        let (name, header) = carrying(policy, &value);
        let (r, s) = run(routed(&snapshot, &[(name, &header)])).unwrap();
        assert_eq!(candidates(&r), vec![1], "{policy}");
        assert!(!s.writes_key());
        let response = respond(&r, s, 1);
        assert!(written(policy, &response).is_empty(), "{policy}");
        assert!(set_cookies(&response).is_empty(), "{policy}");
    }
}

#[test]
fn stale_and_garbage_keys_follow_the_failure_policy() {
    for (policy, extra) in policies() {
        // A key of another cluster's destination, never issued here, or garbage.
        let other = state(&affinity(policy, &extra), &["gone", "d1"]);
        let stale = key_of(&other.snapshot(), "gone");
        let mut values = vec![stale, "garbage".to_owned(), "%%%".to_owned()];
        if policy.ends_with("Cookie") && policy != "Cookie" {
            values.push(String::new()); // an empty hash matches nothing
            values.push(key_of(&other.snapshot(), "d1").to_lowercase()); // wrong case
            values.push(key_of(&other.snapshot(), "d1").to_uppercase());
        }
        for value in values {
            for failure in ["Redistribute", "Return503Error"] {
                let extra = format!(r#"{extra}, "FailurePolicy": "{failure}""#);
                let state = state(&affinity(policy, &extra), DESTS);
                let snapshot = state.snapshot();
                if value == key_of(&other.snapshot(), "d1") {
                    continue; // d1 exists here too (same case): not a failure
                }
                let (name, header) = carrying(policy, &value);
                let result = run(routed(&snapshot, &[(name, &header)]));
                match failure {
                    "Redistribute" => {
                        let (r, s) = result.unwrap();
                        assert_eq!(candidates(&r), vec![0, 1, 2], "{policy} {value:?}");
                        let response = respond(&r, s, 2);
                        assert_eq!(written(policy, &response).len(), 1, "{policy} {value:?}");
                    }
                    _ => {
                        let response = result.unwrap_err();
                        assert_eq!(response.status_code(), StatusCode::SERVICE_UNAVAILABLE);
                        assert!(written(policy, &response).is_empty());
                    }
                }
            }
        }
    }
}

#[test]
fn the_key_of_an_unavailable_destination_is_a_failure() {
    for (policy, extra) in policies() {
        for failure in ["Redistribute", "Return503Error"] {
            let extra = format!(r#"{extra}, "FailurePolicy": "{failure}""#);
            let state = state(&affinity(policy, &extra), DESTS);
            let snapshot = state.snapshot();
            let (name, header) = carrying(policy, &key(&snapshot, 1));
            let mut healthy = Candidates::all(3);
            healthy.remove(1);
            let result = run(routed_with(&snapshot, &[(name, &header)], healthy));
            match failure {
                "Redistribute" => {
                    let (r, s) = result.unwrap();
                    assert_eq!(candidates(&r), vec![0, 2], "{policy}");
                    assert!(s.writes_key());
                    let response = respond(&r, s, 0);
                    let written = written(policy, &response);
                    assert_eq!(written.len(), 1);
                    assert!(written[0].contains(&key(&snapshot, 0)), "{written:?}");
                }
                _ => {
                    let response = result.unwrap_err();
                    assert_eq!(response.status_code(), StatusCode::SERVICE_UNAVAILABLE);
                }
            }
        }
    }
}

#[test]
fn a_key_sent_twice_is_a_failure() {
    for (policy, extra) in policies() {
        let extra = format!(r#"{extra}, "FailurePolicy": "Return503Error""#);
        let state = state(&affinity(policy, &extra), DESTS);
        let snapshot = state.snapshot();
        let value = key(&snapshot, 1);
        let headers: Vec<(&str, String)> = if policy == "CustomHeader" {
            vec![
                ("My.Affinity", value.clone()),
                ("My.Affinity", value.clone()),
            ]
        } else {
            vec![(
                "cookie",
                format!("My.Affinity={value}; x=1; My.Affinity={value}"),
            )]
        };
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let response = run(routed(&snapshot, &headers)).unwrap_err();
        assert_eq!(
            response.status_code(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{policy}"
        );
        if policy != "CustomHeader" {
            // The same cookie on two `Cookie` lines (as HTTP/2 sends them) too.
            let line = format!("My.Affinity={value}");
            let response = run(routed(
                &snapshot,
                &[("cookie", &line), (COOKIE.as_str(), &line)],
            ))
            .unwrap_err();
            assert_eq!(response.status_code(), StatusCode::SERVICE_UNAVAILABLE);
        }
    }
}

#[test]
fn cookies_split_over_lines_are_found() {
    let state = state(&affinity("HashCookie", ""), DESTS);
    let snapshot = state.snapshot();
    let line = format!("My.Affinity={}", key(&snapshot, 2));
    let (r, _) = run(routed(&snapshot, &[("cookie", "a=1"), ("cookie", &line)])).unwrap();
    assert_eq!(candidates(&r), vec![2]);
}

#[test]
fn empty_sealed_keys_count_as_absent() {
    for policy in ["Cookie", "CustomHeader"] {
        let extra = r#", "FailurePolicy": "Return503Error""#;
        let state = state(&affinity(policy, extra), DESTS);
        let snapshot = state.snapshot();
        let (name, header) = carrying(policy, "");
        let (r, s) = run(routed(&snapshot, &[(name, &header)])).unwrap();
        assert_eq!(candidates(&r), vec![0, 1, 2]);
        assert!(s.writes_key());
    }
}

#[test]
fn sealed_keys_survive_reloads_with_the_same_key_only() {
    for policy in ["Cookie", "CustomHeader"] {
        let extra = format!(r#", "EncryptionKey": "{KEY_32}""#);
        let before = state(&affinity(policy, &extra), DESTS);
        let value = key_of(&before.snapshot(), "d2");
        // A new snapshot (as after a reload or restart): new nonces, same key.
        let after = state(&affinity(policy, &extra), &["d0", "d1", "d2", "d3"]);
        let snapshot = after.snapshot();
        assert_ne!(key_of(&snapshot, "d2"), value);
        let (name, header) = carrying(policy, &value);
        let c = cluster_index(&snapshot, "c1");
        let routed = Routed {
            request: Request::builder()
                .header(name, header.as_str())
                .body(())
                .unwrap(),
            context: RouteContext::new(snapshot.clone(), 0, c, Candidates::all(4)),
        };
        let (r, _) = run(routed).unwrap();
        assert_eq!(candidates(&r), vec![2], "{policy}: d2 is now index 2");

        let other_key = format!(
            r#", "EncryptionKey": "{}", "FailurePolicy": "Return503Error""#,
            "AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        );
        let other = state(&affinity(policy, &other_key), DESTS);
        let response = run(routed_with(
            &other.snapshot(),
            &[(name, &header)],
            Candidates::all(3),
        ))
        .unwrap_err();
        assert_eq!(response.status_code(), StatusCode::SERVICE_UNAVAILABLE);
    }
}

#[test]
fn nothing_is_written_without_a_destination() {
    let state = state(&affinity("HashCookie", ""), DESTS);
    let snapshot = state.snapshot();
    let (_, s) = run(routed(&snapshot, &[])).unwrap();
    let mut response = ProxyResponse::error(ForwardError::kind_only(
        ForwardErrorKind::NoAvailableDestinations,
    ));
    back(s, &mut response);
    assert!(set_cookies(&response).is_empty());
}

#[test]
fn error_responses_with_a_destination_get_the_key() {
    let state = state(&affinity("HashCookie", ""), DESTS);
    let snapshot = state.snapshot();
    let (r, s) = run(routed(&snapshot, &[])).unwrap();
    let mut response = ProxyResponse::error(ForwardError::kind_only(ForwardErrorKind::Request));
    response.outcome.set_target(r.context.clone(), 1);
    back(s, &mut response);
    assert_eq!(response.status_code(), StatusCode::BAD_GATEWAY);
    assert_eq!(
        set_cookies(&response),
        vec!["My.Affinity=eb4f7569e28edc50; path=/; httponly".to_owned()]
    );
}

#[test]
fn a_reassigned_request_is_keyed_for_its_final_cluster() {
    let state = state(&affinity("HashCookie", ""), DESTS);
    let snapshot = state.snapshot();
    let (mut r, s) = run(routed(&snapshot, &[])).unwrap();
    // Moved to a cluster without affinity: nothing to write.
    assert!(r.context.reassign_cluster("plain"));
    let response = respond(&r, s, 0);
    assert!(set_cookies(&response).is_empty());
}

#[test]
fn clusters_without_affinity_pass_through() {
    let state = state(r#"{ "Enabled": false, "AffinityKeyName": "k" }"#, DESTS);
    let snapshot = state.snapshot();
    assert!(snapshot.cluster("c1").unwrap().affinity().is_none());
    assert_eq!(destination_key(snapshot.cluster("c1").unwrap(), 0), None);
    let (r, s) = run(routed(&snapshot, &[("cookie", "k=whatever")])).unwrap();
    assert_eq!(candidates(&r), vec![0, 1, 2]);
    assert!(!s.writes_key());
    assert!(set_cookies(&respond(&r, s, 0)).is_empty());
}

#[test]
fn settings_are_exposed() {
    let state = state(
        &affinity("arrcookie", r#", "FailurePolicy": "return503error""#),
        DESTS,
    );
    let snapshot = state.snapshot();
    let settings = snapshot.cluster("c1").unwrap().affinity().unwrap();
    assert_eq!(settings.policy(), SessionAffinityPolicyName::ArrCookie);
    assert_eq!(
        settings.failure_policy(),
        AffinityFailurePolicyName::Return503Error
    );
    assert_eq!(settings.key_name(), "My.Affinity");
    let defaults = crate::config::SessionAffinityConfig {
        enabled: Some(true),
        affinity_key_name: Some("k".into()),
        ..Default::default()
    };
    let settings = AffinitySettings::from_config(Some(&defaults), "c", &[], "Clusters.c")
        .unwrap()
        .unwrap();
    assert_eq!(settings.policy(), SessionAffinityPolicyName::HashCookie);
    assert_eq!(
        settings.failure_policy(),
        AffinityFailurePolicyName::Redistribute
    );
}

// ---- Configuration errors ----

fn error_of(json: &str) -> ConfigError {
    let config: crate::config::SessionAffinityConfig = serde_json::from_str(json).unwrap();
    AffinitySettings::from_config(Some(&config), "c1", &[], "Clusters.c1").unwrap_err()
}

#[test]
fn configuration_errors_name_their_field() {
    let cases = [
        (
            r#"{ "Enabled": true }"#,
            "Clusters.c1.SessionAffinity.AffinityKeyName",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "a b" }"#,
            "Clusters.c1.SessionAffinity.AffinityKeyName",
        ),
        (
            r#"{ "Enabled": true, "Policy": "CustomHeader", "AffinityKeyName": "a:b" }"#,
            "Clusters.c1.SessionAffinity.AffinityKeyName",
        ),
        (
            r#"{ "Enabled": true, "Policy": "Sticky", "AffinityKeyName": "k" }"#,
            "Clusters.c1.SessionAffinity.Policy",
        ),
        (
            r#"{ "Enabled": true, "FailurePolicy": "Retry", "AffinityKeyName": "k" }"#,
            "Clusters.c1.SessionAffinity.FailurePolicy",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "EncryptionKey": "AAAA" }"#,
            "Clusters.c1.SessionAffinity.EncryptionKey",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "Cookie": { "Path": "/a;b" } }"#,
            "Clusters.c1.SessionAffinity.Cookie.Path",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "Cookie": { "Domain": "a\nb" } }"#,
            "Clusters.c1.SessionAffinity.Cookie.Domain",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "Cookie": { "Expiration": "00:00:00" } }"#,
            "Clusters.c1.SessionAffinity.Cookie.Expiration",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "Cookie": { "MaxAge": "0s" } }"#,
            "Clusters.c1.SessionAffinity.Cookie.MaxAge",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "Cookie": { "SameSite": "Loose" } }"#,
            "Clusters.c1.SessionAffinity.Cookie.SameSite",
        ),
        (
            r#"{ "Enabled": true, "AffinityKeyName": "k", "Cookie": { "SecurePolicy": "Sometimes" } }"#,
            "Clusters.c1.SessionAffinity.Cookie.SecurePolicy",
        ),
    ];
    for (json, path) in cases {
        assert_eq!(error_of(json).path, path, "{json}");
    }
    // Not enabled: nothing is checked or built.
    let off: crate::config::SessionAffinityConfig =
        serde_json::from_str(r#"{ "AffinityKeyName": "a b" }"#).unwrap();
    assert!(
        AffinitySettings::from_config(Some(&off), "c1", &[], "Clusters.c1")
            .unwrap()
            .is_none()
    );
    assert!(
        AffinitySettings::from_config(None, "c1", &[], "Clusters.c1")
            .unwrap()
            .is_none()
    );
    // The custom header ignores cookie settings.
    let header: crate::config::SessionAffinityConfig = serde_json::from_str(
        r#"{ "Enabled": true, "Policy": "CustomHeader", "AffinityKeyName": "X-Affinity", "Cookie": { "Path": "/a;b" } }"#,
    )
    .unwrap();
    assert!(AffinitySettings::from_config(Some(&header), "c1", &[], "Clusters.c1").is_ok());
}
