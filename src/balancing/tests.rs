//! Policies on real clusters built from configuration.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::StatusCode;

use super::*;
use crate::config::{parse, ClusterConfig, Format};
use crate::policy::Policies;
use crate::request::{Candidates, RouteContext, Routed};
use crate::state::{Cluster, ConcurrencyGuard, ProxyState};

fn config_json(policy: &str, destinations: &[(&str, u32)]) -> String {
    let dests: Vec<String> = destinations
        .iter()
        .enumerate()
        .map(|(n, (id, w))| {
            format!(
                r#""{id}": {{ "Address": "http://127.0.0.1:{}", "Weight": {w} }}"#,
                9000 + n
            )
        })
        .collect();
    format!(
        r#"{{
  "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ "LoadBalancingPolicy": "{policy}", "Destinations": {{ {} }} }} }}
}}"#,
        dests.join(", ")
    )
}

fn load(policy: &str, destinations: &[(&str, u32)]) -> ProxyState {
    let config = parse(&config_json(policy, destinations), Format::Json).expect("config");
    ProxyState::new(config).expect("state")
}

/// `abc` with weights 1, under the custom `policy` registered as `name`.
fn custom(name: &str, policy: impl LoadBalancingPolicy) -> ProxyState {
    let config = parse(
        &config_json(name, &[("a", 1), ("b", 1), ("c", 1)]),
        Format::Json,
    )
    .expect("config");
    let policies = Policies::new().load_balancing("Test-Last", policy);
    ProxyState::with_policies(config, policies).expect("state")
}

/// `abc` with weights 1.
fn unweighted(policy: &str) -> ProxyState {
    load(policy, &[("a", 1), ("b", 1), ("c", 1)])
}

fn pick(cluster: &Cluster, candidates: &Candidates) -> usize {
    cluster
        .balancing()
        .pick(cluster, candidates)
        .expect("a destination")
}

fn all(cluster: &Cluster) -> Candidates {
    Candidates::all(cluster.destinations().len())
}

fn without(cluster: &Cluster, ids: &[&str]) -> Candidates {
    let mut c = all(cluster);
    for id in ids {
        c.remove(cluster.destination(id).expect("destination").0);
    }
    c
}

/// How often each destination is picked in `n` picks.
fn counts(cluster: &Cluster, candidates: &Candidates, n: usize) -> Vec<usize> {
    let mut counts = vec![0; cluster.destinations().len()];
    for _ in 0..n {
        counts[pick(cluster, candidates)] += 1;
    }
    counts
}

/// The ids of `n` picks, concatenated (single-letter ids).
fn sequence(cluster: &Cluster, candidates: &Candidates, n: usize) -> String {
    (0..n)
        .map(|_| cluster.destinations()[pick(cluster, candidates)].id())
        .collect()
}

/// Hold `n` requests in flight on destination `id`.
fn busy(cluster: &Cluster, id: &str, n: usize) -> Vec<ConcurrencyGuard> {
    let d = cluster.destination(id).expect("destination").1;
    (0..n).map(|_| d.state().enter()).collect()
}

fn within(value: usize, expected: usize, tolerance: usize) -> bool {
    value.abs_diff(expected) <= tolerance
}

// ---- RoundRobin ----

#[test]
fn round_robin_takes_turns_exactly() {
    let state = unweighted("RoundRobin");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(c.balancing().policy_name(), "RoundRobin");
    assert_eq!(sequence(c, &all(c), 6), "abcabc");
    assert_eq!(counts(c, &all(c), 3000), [1000, 1000, 1000]);
}

#[test]
fn round_robin_spreads_over_the_remaining_candidates() {
    let state = unweighted("roundrobin");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let ac = without(c, &["b"]);
    assert_eq!(counts(c, &ac, 1000), [500, 0, 500]);
    assert_eq!(sequence(c, &ac, 4), "acac");
}

#[test]
fn round_robin_position_survives_reloads() {
    let state = unweighted("RoundRobin");
    let first = state.snapshot();
    let c = first.cluster("c").unwrap();
    assert_eq!(sequence(c, &all(c), 2), "ab");
    let json = config_json("RoundRobin", &[("a", 1), ("b", 1), ("c", 1)]);
    state.update(parse(&json, Format::Json).unwrap()).unwrap();
    let second = state.snapshot();
    assert!(!Arc::ptr_eq(&first, &second));
    let c = second.cluster("c").unwrap();
    assert_eq!(sequence(c, &all(c), 4), "cabc", "goes on where it was");
}

#[test]
fn weighted_round_robin_is_exact_and_smooth() {
    let state = load("RoundRobin", &[("a", 5), ("b", 3), ("c", 2)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let picks: Vec<usize> = (0..3000).map(|_| pick(c, &all(c))).collect();
    let mut counts = [0usize; 3];
    for (k, &i) in picks.iter().enumerate() {
        counts[i] += 1;
        // Smooth: after every pick, each destination is within one pick of its share.
        for (d, w) in [5, 3, 2].into_iter().enumerate() {
            let share = (k + 1) as f64 * w as f64 / 10.0;
            assert!(
                (counts[d] as f64 - share).abs() <= 1.0,
                "after {} picks {counts:?}",
                k + 1
            );
        }
    }
    assert_eq!(counts, [1500, 900, 600]);
    // Every period of 10 is exact, and `a` never runs more than twice in a row.
    for period in picks.chunks(10) {
        for (d, w) in [5, 3, 2].into_iter().enumerate() {
            assert_eq!(period.iter().filter(|&&i| i == d).count(), w);
        }
    }
    assert!(!picks.windows(3).any(|w| w == [0, 0, 0]));
}

#[test]
fn weighted_round_robin_is_nginx_sequence() {
    let state = load("RoundRobin", &[("a", 5), ("b", 1), ("c", 1)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(sequence(c, &all(c), 14), "aabacaaaabacaa");
    let state = load("RoundRobin", &[("a", 5), ("b", 3), ("c", 2)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(sequence(c, &all(c), 10), "abcaabacba");
}

#[test]
fn weighted_round_robin_skips_non_candidates_keeping_the_others_shares() {
    // 5,3,2 is `abcaabacba`; without `a` each period yields `bcbcb`.
    let state = load("RoundRobin", &[("a", 5), ("b", 3), ("c", 2)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let bc = without(c, &["a"]);
    assert_eq!(sequence(c, &bc, 10), "bcbcbbcbcb");
    assert_eq!(counts(c, &bc, 3000), [0, 1800, 1200]);
    // Without `b`, 5:2 over `a` and `c`.
    let ac = without(c, &["b"]);
    let n = counts(c, &ac, 7000);
    assert_eq!(n, [5000, 0, 2000]);
}

#[test]
fn weighted_round_robin_is_exact_under_concurrency() {
    let state = load("RoundRobin", &[("a", 5), ("b", 3), ("c", 2)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    for (candidates, expected) in [
        (all(c), [5000, 3000, 2000]),
        // Every candidate slot is consumed exactly once, skipping or not.
        (without(c, &["a"]), [0, 6000, 4000]),
    ] {
        let tally: [AtomicUsize; 3] = Default::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2500 {
                        tally[pick(c, &candidates)].fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(tally.map(|t| t.into_inner()), expected);
    }
}

#[test]
fn weighted_round_robin_with_a_huge_period_is_still_exact() {
    // Sum 39994 after the gcd: too long to precompute, run live.
    let state = load(
        "RoundRobin",
        &[("a", 10000), ("b", 9999), ("c", 9998), ("d", 9997)],
    );
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(sequence(c, &all(c), 8), "abcdabcd");
    assert_eq!(counts(c, &all(c), 39994 - 8), [9998, 9997, 9996, 9995]);
    // Without `d`, the others keep alternating exactly.
    let abc = without(c, &["d"]);
    assert_eq!(counts(c, &abc, 300), [100, 100, 100, 0]);
}

#[test]
fn equal_weights_are_unweighted() {
    for policy in ["RoundRobin", "Random"] {
        let state = load(policy, &[("a", 4), ("b", 4), ("c", 4)]);
        let snap = state.snapshot();
        let c = snap.cluster("c").unwrap();
        assert!(
            format!("{:?}", c.balancing()).contains("weighted: false"),
            "{policy}"
        );
        let state = load(policy, &[("a", 4), ("b", 4), ("c", 3)]);
        let snap = state.snapshot();
        let c = snap.cluster("c").unwrap();
        assert!(
            format!("{:?}", c.balancing()).contains("weighted: true"),
            "{policy}"
        );
    }
    // YARP's round robin over a subset: `position % candidates`.
    let state = load("RoundRobin", &[("a", 4), ("b", 4), ("c", 4)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(sequence(c, &all(c), 1), "a");
    assert_eq!(sequence(c, &without(c, &["c"]), 3), "bab");
}

// ---- Random ----

#[test]
fn random_is_uniform() {
    fastrand::seed(7);
    let state = unweighted("Random");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let n = counts(c, &all(c), 30000);
    // σ ≈ 82 per destination: ±600 is over 7σ.
    assert!(n.iter().all(|&x| within(x, 10000, 600)), "{n:?}");
    let n = counts(c, &without(c, &["a"]), 10000);
    assert_eq!(n[0], 0);
    assert!(within(n[1], 5000, 400), "{n:?}");
}

#[test]
fn weighted_random_is_proportional() {
    fastrand::seed(8);
    let state = load("Random", &[("a", 5), ("b", 3), ("c", 2)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let n = counts(c, &all(c), 30000);
    assert!(within(n[0], 15000, 600), "{n:?}");
    assert!(within(n[1], 9000, 600), "{n:?}");
    assert!(within(n[2], 6000, 600), "{n:?}");
    // Among `b` and `c`: 3:2.
    let n = counts(c, &without(c, &["a"]), 10000);
    assert_eq!(n[0], 0);
    assert!(within(n[1], 6000, 400), "{n:?}");
    assert!(within(n[2], 4000, 400), "{n:?}");
}

// ---- PowerOfTwoChoices ----

#[test]
fn power_of_two_choices_is_the_default() {
    let config = parse(
        r#"{ "Clusters": { "c": { "Destinations": {
            "a": { "Address": "http://127.0.0.1:1" }, "b": { "Address": "http://127.0.0.1:2" }
        } } } }"#,
        Format::Json,
    )
    .unwrap();
    let state = ProxyState::new(config).unwrap();
    assert_eq!(
        state
            .snapshot()
            .cluster("c")
            .unwrap()
            .balancing()
            .policy_name(),
        "PowerOfTwoChoices"
    );
}

#[test]
fn power_of_two_choices_never_picks_the_busiest() {
    fastrand::seed(9);
    let state = unweighted("PowerOfTwoChoices");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    // The two draws are distinct, so the single busiest candidate always loses.
    let _held = busy(c, "b", 1);
    let n = counts(c, &all(c), 3000);
    assert_eq!(n[1], 0, "{n:?}");
    assert!(n[0] > 1200 && n[2] > 1200, "{n:?}");
    // With two candidates both are always drawn: the idle one wins every time.
    let n = counts(c, &without(c, &["c"]), 1000);
    assert_eq!(n, [1000, 0, 0]);
}

#[test]
fn power_of_two_choices_compares_loads() {
    fastrand::seed(10);
    let state = unweighted("PowerOfTwoChoices");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    // a: 0, b: 1, c: 2 in flight. Of the 6 ordered pairs, `a` wins the 4 it is in,
    // `b` the 2 with `c`, `c` none.
    let _b = busy(c, "b", 1);
    let _c = busy(c, "c", 2);
    let n = counts(c, &all(c), 30000);
    assert_eq!(n[2], 0, "{n:?}");
    assert!(within(n[0], 20000, 600), "{n:?}");
    assert!(within(n[1], 10000, 600), "{n:?}");
}

#[test]
fn power_of_two_choices_gives_ties_to_the_first_drawn() {
    fastrand::seed(11);
    let state = unweighted("PowerOfTwoChoices");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    // Equal loads: whoever is drawn first wins, so picks stay uniform.
    let n = counts(c, &all(c), 30000);
    assert!(n.iter().all(|&x| within(x, 10000, 600)), "{n:?}");
}

// ---- LeastRequests ----

#[test]
fn least_requests_picks_the_least_loaded_first_on_ties() {
    let state = unweighted("LeastRequests");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(counts(c, &all(c), 100), [100, 0, 0], "all idle: the first");
    let _a = busy(c, "a", 2);
    let _b = busy(c, "b", 1);
    let _c = busy(c, "c", 1);
    assert_eq!(counts(c, &all(c), 100), [0, 100, 0], "b and c tie: b");
    assert_eq!(counts(c, &without(c, &["b"]), 100), [0, 0, 100]);
    drop(_a);
    assert_eq!(counts(c, &all(c), 100), [100, 0, 0]);
}

#[test]
fn least_requests_never_picks_a_destination_holding_long_requests() {
    let state = unweighted("LeastRequests");
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let _held = busy(c, "a", 3);
    let mut inflight: Vec<ConcurrencyGuard> = Vec::new();
    // Each pick holds its request: the others fill up evenly, `a` stays out until
    // they reach its load.
    for _ in 0..6 {
        let i = pick(c, &all(c));
        assert_ne!(i, 0);
        inflight.push(c.destinations()[i].state().enter());
    }
    assert_eq!(c.destinations()[1].state().concurrent_requests(), 3);
    assert_eq!(c.destinations()[2].state().concurrent_requests(), 3);
}

// ---- FirstAlphabetical ----

#[test]
fn first_alphabetical_is_case_insensitive() {
    // Ordered as .NET's OrdinalIgnoreCase: upper-cased, `_` after the letters.
    let state = load(
        "FirstAlphabetical",
        &[
            ("beta", 1),
            ("Alpha", 1),
            ("alpha2", 1),
            ("a_b", 1),
            ("aab", 1),
        ],
    );
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    let id = |cands: &Candidates| c.destinations()[pick(c, cands)].id().to_owned();
    assert_eq!(id(&all(c)), "aab");
    assert_eq!(id(&without(c, &["aab"])), "Alpha");
    assert_eq!(id(&without(c, &["aab", "Alpha"])), "alpha2");
    assert_eq!(id(&without(c, &["aab", "Alpha", "alpha2"])), "a_b");
    assert_eq!(id(&without(c, &["aab", "Alpha", "alpha2", "a_b"])), "beta");
    // Ids equal but for case keep their (ordinal) order.
    let state = load("FirstAlphabetical", &[("y", 1), ("x", 1), ("X", 1)]);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(c.destinations()[pick(c, &all(c))].id(), "X");
    assert_eq!(c.destinations()[pick(c, &without(c, &["X"]))].id(), "x");
}

// ---- Custom policies ----

/// Picks the last candidate and counts its calls.
#[derive(Default)]
struct Last(AtomicUsize);

impl LoadBalancingPolicy for Last {
    fn pick(&self, _: &Cluster, candidates: &Candidates) -> Option<usize> {
        self.0.fetch_add(1, Ordering::Relaxed);
        candidates.iter().last()
    }
}

struct Outsider;

impl LoadBalancingPolicy for Outsider {
    fn pick(&self, cluster: &Cluster, _: &Candidates) -> Option<usize> {
        Some(cluster.destinations().len() - 1)
    }
}

#[test]
fn registered_policies_are_selected_by_name() {
    let last = Arc::new(Last::default());
    let state = custom("TEST-LAST", last.clone());
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(c.balancing().policy_name(), "TEST-LAST");
    assert_eq!(counts(c, &all(c), 10), [0, 0, 10]);
    assert_eq!(counts(c, &without(c, &["c"]), 10), [0, 10, 0]);
    assert_eq!(last.0.load(Ordering::Relaxed), 20);
    // One candidate: the policy is not consulted.
    assert_eq!(pick(c, &without(c, &["b", "c"])), 0);
    assert_eq!(c.balancing().pick(c, &Candidates::none()), None);
    assert_eq!(last.0.load(Ordering::Relaxed), 20);
}

#[test]
fn a_custom_pick_outside_the_candidates_is_refused() {
    let state = custom("test-last", Outsider);
    let snap = state.snapshot();
    let c = snap.cluster("c").unwrap();
    assert_eq!(c.balancing().pick(c, &all(c)), Some(2));
    assert_eq!(c.balancing().pick(c, &without(c, &["c"])), None);
}

#[test]
fn unknown_policies_are_config_errors() {
    let config = parse(&config_json("Fastest", &[("a", 1), ("b", 1)]), Format::Json).unwrap();
    let errors = ProxyState::new(config.clone()).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.path == "Clusters.c.LoadBalancingPolicy" && e.message.contains("Fastest")),
        "{errors}"
    );
    // Registered for another state only: not for this one.
    let other = Policies::new().load_balancing("Fastest", Outsider);
    assert!(ProxyState::with_policies(config.clone(), other.clone()).is_ok());
    assert!(ProxyState::new(config).is_err());
    let config = ClusterConfig {
        load_balancing_policy: Some("test-never-registered".into()),
        ..Default::default()
    };
    let err =
        ClusterBalancing::from_config(&config, &[], "Clusters.x", &Policies::new()).unwrap_err();
    assert_eq!(err.path, "Clusters.x.LoadBalancingPolicy");
    assert!(err.message.contains("test-never-registered"), "{err}");
}

#[test]
#[should_panic(expected = "built-in")]
fn built_in_names_cannot_be_registered() {
    let _ = Policies::new().load_balancing("roundRobin", Last::default());
}

// ---- The stage ----

fn routed(state: &ProxyState, candidates: Candidates) -> Routed<()> {
    let snap = state.snapshot();
    let cluster = snap.cluster_index("c").unwrap();
    Routed {
        request: http::Request::new(()),
        context: RouteContext::new(snap, 0, cluster, candidates),
    }
}

#[test]
fn the_stage_answers_503_without_candidates() {
    let state = unweighted("RoundRobin");
    let err = LoadBalancing::new()
        .on_request(routed(&state, Candidates::none()))
        .unwrap_err();
    assert_eq!(err.status_code(), StatusCode::SERVICE_UNAVAILABLE);
}

#[test]
fn the_stage_takes_a_single_candidate_and_otherwise_asks_the_policy() {
    let last = Arc::new(Last::default());
    let state = custom("test-last", last.clone());
    let stage = LoadBalancing::new();
    let (balanced, ()) = stage
        .on_request(routed(&state, Candidates::only(0, 3)))
        .unwrap();
    assert_eq!(balanced.destination().id(), "a");
    assert_eq!(last.0.load(Ordering::Relaxed), 0, "not consulted");
    let (balanced, ()) = stage
        .on_request(routed(&state, Candidates::all(3)))
        .unwrap();
    assert_eq!(balanced.destination().id(), "c");
    assert_eq!(last.0.load(Ordering::Relaxed), 1);
}
