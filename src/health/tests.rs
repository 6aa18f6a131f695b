//! Unit tests of [`available`] and of the passive-health stage.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::*;
use crate::config::{parse, Format};
use crate::request::{ForwardError, RouteContext};
use crate::state::{ProxyState, Snapshot};

fn state(health: &str, destinations: usize) -> ProxyState {
    let dests: Vec<String> = (0..destinations)
        .map(|i| {
            format!(
                r#""d{i}": {{ "Address": "http://127.0.0.1:{}" }}"#,
                1000 + i
            )
        })
        .collect();
    let config = parse(
        &format!(
            r#"{{ "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
                 "Clusters": {{ "c": {{ {health} "Destinations": {{ {} }} }} }} }}"#,
            dests.join(", ")
        ),
        Format::Json,
    )
    .unwrap();
    ProxyState::new(config).unwrap()
}

fn dest(snap: &Snapshot, i: usize) -> &Arc<DestinationState> {
    snap.cluster("c").unwrap().destinations()[i].state()
}

fn available_ids(snap: &Snapshot) -> Vec<usize> {
    available(snap.cluster("c").unwrap()).iter().collect()
}

/// Mark destination `i` passively unhealthy (10 failures now).
fn passively_unhealthy(snap: &Snapshot, i: usize) {
    let settings = PassiveSettings::default();
    let now = Instant::now();
    for _ in 0..10 {
        passive::record(dest(snap, i), now, true, &settings);
    }
    assert_eq!(dest(snap, i).health().passive(), HealthState::Unhealthy);
}

const BOTH: &str =
    r#""HealthCheck": { "Passive": { "Enabled": true }, "Active": { "Enabled": true } },"#;

#[test]
fn without_checks_everything_is_available() {
    let s = state("", 3);
    let snap = s.snapshot();
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    passively_unhealthy(&snap, 1);
    assert_eq!(
        available_ids(&snap),
        [0, 1, 2],
        "disabled checks are ignored"
    );
}

#[test]
fn unhealthy_destinations_are_left_out() {
    let s = state(BOTH, 4);
    let snap = s.snapshot();
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    passively_unhealthy(&snap, 1);
    dest(&snap, 2).health().store_active(HealthState::Healthy);
    assert_eq!(available_ids(&snap), [2, 3], "healthy and unknown remain");
}

#[test]
fn only_enabled_checks_count() {
    let s = state(r#""HealthCheck": { "Passive": { "Enabled": true } },"#, 3);
    let snap = s.snapshot();
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    passively_unhealthy(&snap, 1);
    assert_eq!(available_ids(&snap), [0, 2]);
    let s = state(r#""HealthCheck": { "Active": { "Enabled": true } },"#, 3);
    let snap = s.snapshot();
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    passively_unhealthy(&snap, 1);
    assert_eq!(available_ids(&snap), [1, 2]);
}

#[test]
fn healthy_or_panic_falls_back_to_all() {
    let s = state(BOTH, 3);
    let snap = s.snapshot();
    for i in 0..3 {
        dest(&snap, i).health().store_active(HealthState::Unhealthy);
    }
    assert_eq!(available_ids(&snap), [0, 1, 2]);
    dest(&snap, 1).health().store_active(HealthState::Healthy);
    assert_eq!(available_ids(&snap), [1], "no panic while one is available");
}

#[test]
fn healthy_and_unknown_has_no_fallback() {
    let s = state(
        r#""HealthCheck": { "Passive": { "Enabled": true }, "Active": { "Enabled": true },
             "AvailableDestinationsPolicy": "HealthyAndUnknown" },"#,
        3,
    );
    let snap = s.snapshot();
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    passively_unhealthy(&snap, 1);
    assert_eq!(available_ids(&snap), [2]);
    dest(&snap, 2).health().store_active(HealthState::Unhealthy);
    assert!(available_ids(&snap).is_empty());
}

#[test]
fn large_clusters() {
    let s = state(BOTH, 200);
    let snap = s.snapshot();
    for i in (0..200).step_by(3) {
        dest(&snap, i).health().store_active(HealthState::Unhealthy);
    }
    let expected: Vec<usize> = (0..200).filter(|i| i % 3 != 0).collect();
    assert_eq!(available_ids(&snap), expected);
}

#[test]
fn passive_reactivation_brings_destinations_back() {
    let s = state(
        r#""HealthCheck": { "Passive": { "Enabled": true, "ReactivationPeriod": "1ms" } },
           "Metadata": { "TransportFailureRateHealthPolicy.DetectionWindowSize": "1ms" },"#,
        2,
    );
    let snap = s.snapshot();
    let settings = *snap.cluster("c").unwrap().health().passive().unwrap();
    let t0 = Instant::now();
    for _ in 0..10 {
        passive::record(dest(&snap, 0), t0, true, &settings);
    }
    assert_eq!(
        dest(&snap, 0).health().passive_at(t0),
        HealthState::Unhealthy
    );
    // 1 ms later (the real clock moves on while we wait for it).
    while Instant::now() < t0 + Duration::from_millis(1) {
        std::thread::yield_now();
    }
    assert_eq!(available_ids(&snap), [0, 1]);
    assert_eq!(dest(&snap, 0).health().passive_raw(), HealthState::Unknown);
}

#[test]
fn health_survives_reloads() {
    let s = state(BOTH, 2);
    let snap = s.snapshot();
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    s.update(s.snapshot().config().clone()).unwrap();
    let snap = s.snapshot();
    assert_eq!(dest(&snap, 0).health().active(), HealthState::Unhealthy);
    assert_eq!(available_ids(&snap), [1]);
}

/// A response for destination `i` of `snap`'s cluster, as the forwarder makes it.
fn forwarded(snap: &Arc<Snapshot>, i: usize, mut response: ProxyResponse) -> ProxyResponse {
    let cluster = snap.cluster_index("c").unwrap();
    let context = RouteContext::new(snap.clone(), 0, cluster, Candidates::all(2));
    response.outcome.set_target(context, i);
    response
}

fn run_stage(response: &mut ProxyResponse) {
    <PassiveHealth as Stage<Balanced<()>>>::on_response(&PassiveHealth::new(), (), response);
}

#[test]
fn stage_counts_destination_failures() {
    let s = state(r#""HealthCheck": { "Passive": { "Enabled": true } },"#, 2);
    let snap = s.snapshot();
    let health = dest(&snap, 0).health();
    for kind in [
        ForwardErrorKind::RequestBodyClient,
        ForwardErrorKind::RequestBodyTooLarge,
        ForwardErrorKind::RequestCanceled,
        // A request that could not be built is not the destination's failure.
        ForwardErrorKind::RequestCreation,
    ] {
        let mut r = forwarded(
            &snap,
            0,
            ProxyResponse::error(ForwardError::kind_only(kind)),
        );
        run_stage(&mut r);
    }
    assert_eq!(
        health.passive_counts(),
        (0, 4),
        "client errors are not failures"
    );
    let mut r = forwarded(
        &snap,
        0,
        ProxyResponse::status(StatusCode::INTERNAL_SERVER_ERROR),
    );
    run_stage(&mut r);
    assert_eq!(
        health.passive_counts(),
        (0, 5),
        "5xx is not counted by default"
    );
    for kind in [
        ForwardErrorKind::Request,
        ForwardErrorKind::RequestTimedOut,
        ForwardErrorKind::RequestBodyDestination,
    ] {
        let mut r = forwarded(
            &snap,
            0,
            ProxyResponse::error(ForwardError::kind_only(kind)),
        );
        run_stage(&mut r);
    }
    assert_eq!(health.passive_counts(), (3, 8));
    assert_eq!(
        health.passive(),
        HealthState::Healthy,
        "8 requests: below 10"
    );
    assert_eq!(dest(&snap, 1).health().passive_counts(), (0, 0));
}

#[test]
fn stage_counts_server_errors_when_asked() {
    let s = state(
        r#""HealthCheck": { "Passive": { "Enabled": true, "CountServerErrors": true } },"#,
        2,
    );
    let snap = s.snapshot();
    for status in [
        StatusCode::OK,
        StatusCode::NOT_FOUND,
        StatusCode::BAD_GATEWAY,
    ] {
        let mut r = forwarded(&snap, 0, ProxyResponse::status(status));
        run_stage(&mut r);
    }
    assert_eq!(dest(&snap, 0).health().passive_counts(), (1, 3));
    // A 502 the proxy makes for a client-side error is not the destination's answer.
    let mut r = forwarded(
        &snap,
        0,
        ProxyResponse::error(ForwardError::kind_only(
            ForwardErrorKind::ResponseBodyClient,
        )),
    );
    assert_eq!(r.status_code(), StatusCode::BAD_GATEWAY);
    run_stage(&mut r);
    assert_eq!(dest(&snap, 0).health().passive_counts(), (1, 4));
    for _ in 0..6 {
        let mut r = forwarded(
            &snap,
            0,
            ProxyResponse::status(StatusCode::SERVICE_UNAVAILABLE),
        );
        run_stage(&mut r);
    }
    assert_eq!(dest(&snap, 0).health().passive_counts(), (7, 10));
    assert_eq!(dest(&snap, 0).health().passive(), HealthState::Unhealthy);
    assert_eq!(available_ids(&snap), [1]);
}

#[test]
fn stage_ignores_requests_without_destination_or_passive_health() {
    let s = state(r#""HealthCheck": { "Passive": { "Enabled": true } },"#, 1);
    let snap = s.snapshot();
    let mut r = ProxyResponse::error(ForwardError::kind_only(
        ForwardErrorKind::NoAvailableDestinations,
    ));
    run_stage(&mut r);
    assert_eq!(dest(&snap, 0).health().passive_counts(), (0, 0));
    assert_eq!(dest(&snap, 0).health().passive(), HealthState::Unknown);
    let s = state("", 2);
    let snap = s.snapshot();
    let mut r = forwarded(
        &snap,
        0,
        ProxyResponse::error(ForwardError::kind_only(ForwardErrorKind::Request)),
    );
    run_stage(&mut r);
    assert_eq!(dest(&snap, 0).health().passive_counts(), (0, 0));
}

#[test]
fn records_use_the_completion_time() {
    let s = state(r#""HealthCheck": { "Passive": { "Enabled": true } },"#, 1);
    let snap = s.snapshot();
    let d = dest(&snap, 0);
    let settings = PassiveSettings::default();
    let t0 = Instant::now();
    for _ in 0..9 {
        PassiveRecord {
            settings,
            server_error: false,
        }
        .complete_at(d, t0, Err(ForwardErrorKind::ResponseBodyDestination));
    }
    PassiveRecord {
        settings,
        server_error: false,
    }
    .complete_at(d, t0 + Duration::from_secs(61), Ok(()));
    assert_eq!(d.health().passive_counts(), (0, 1));
}

#[test]
fn the_cluster_counts_its_unhealthy_destinations() {
    let s = state(BOTH, 3);
    let snap = s.snapshot();
    let count = |snap: &Snapshot| {
        let cluster = snap.cluster("c").unwrap();
        cluster.state().unhealthy().0.load(Ordering::Relaxed)
    };
    assert_eq!(count(&snap), 0);
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    dest(&snap, 0).health().store_active(HealthState::Unhealthy);
    assert_eq!(count(&snap), 1, "a state kept is not counted twice");
    passively_unhealthy(&snap, 0);
    dest(&snap, 1).health().store_active(HealthState::Unhealthy);
    assert_eq!(count(&snap), 3, "active and passive count apart");
    dest(&snap, 0).health().store_active(HealthState::Healthy);
    assert_eq!(count(&snap), 2);
    assert_eq!(available_ids(&snap), [2]);

    // A reload that removes d1 and d2: the count forgets them once they are gone.
    s.update(state(BOTH, 1).snapshot().config().clone())
        .unwrap();
    assert_eq!(count(&s.snapshot()), 2, "the old snapshot still holds d1");
    drop(snap);
    // The state frees the replaced snapshot once no request holds it.
    assert_eq!(count(&s.snapshot()), 2, "kept until released");
    assert_eq!(s.release_retired(), 0);
    let snap = s.snapshot();
    assert_eq!(count(&snap), 1, "d0 is still passively unhealthy");
    dest(&snap, 0).health().store_passive(HealthState::Healthy);
    assert_eq!(count(&snap), 0);
    assert_eq!(available_ids(&snap), [0]);
}
