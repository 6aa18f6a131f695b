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

mod cookies;

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
