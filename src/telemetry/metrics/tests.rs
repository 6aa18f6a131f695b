use super::*;
use crate::per_thread::SLOTS as THREAD_SLOTS;

#[test]
fn duration_histogram_buckets_sum_and_text() {
    let family = Family::<TargetLabels, DurationHistogram>::default();
    let labels = TargetLabels {
        route: "r".into(),
        cluster: "c".into(),
        destination: "d".into(),
    };
    let h = family.get_or_create_owned(&labels);
    for ms in [0.5, 1.0, 3.0, 3.0, 40_000.0] {
        h.observe(Duration::from_secs_f64(ms / 1000.0));
    }
    let mut registry = Registry::default();
    registry.register("d", "durations", family);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let value = |series: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let l = r#"route="r",cluster="c",destination="d""#;
    // Cumulative: 0.5 ms and 1 ms at most 1 ms (the bound is inclusive), 3 ms twice.
    assert_eq!(value(&format!("d_bucket{{le=\"0.001\",{l}}}")), 2.0);
    assert_eq!(value(&format!("d_bucket{{le=\"0.0025\",{l}}}")), 2.0);
    assert_eq!(value(&format!("d_bucket{{le=\"0.005\",{l}}}")), 4.0);
    assert_eq!(value(&format!("d_bucket{{le=\"30.0\",{l}}}")), 4.0);
    assert_eq!(value(&format!("d_bucket{{le=\"+Inf\",{l}}}")), 5.0);
    assert_eq!(value(&format!("d_count{{{l}}}")), 5.0);
    assert!((value(&format!("d_sum{{{l}}}")) - 40.0075).abs() < 1e-9);
}

#[test]
fn recent_errors_age_out() {
    let r = RecentErrors::default();
    r.record(0);
    r.record(0);
    r.record(3);
    assert_eq!(r.count(3), 3);
    assert_eq!(r.count(4), 3);
    assert_eq!(r.count(5), 1, "slot 0 left the window");
    r.record(5);
    assert_eq!(r.count(5), 2, "slot 0 reused for 5");
    assert_eq!(r.count(9), 1);
    assert_eq!(r.count(10), 0);
}

#[test]
fn thread_counters_and_histograms_sum_their_threads_also_past_the_own_slots() {
    let counter = ThreadCounter::default();
    let histogram = DurationHistogram::default();
    // More threads than own slots: the last ones share one with atomic additions.
    let threads = THREAD_SLOTS + 8;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for _ in 0..1_000 {
                    counter.inc();
                    histogram.observe(Duration::from_micros(50));
                }
                histogram.observe(Duration::from_secs(100));
            });
        }
    });
    assert_eq!(counter.get(), threads as u64 * 1_000);
    let counts = histogram.counts();
    assert_eq!(counts[0], threads as u64 * 1_000, "50 µs: the first bucket");
    assert_eq!(
        counts[DURATION_BUCKETS.len()],
        threads as u64,
        "past the last bound"
    );
    assert_eq!(counts.iter().sum::<u64>(), threads as u64 * 1_001);
    let mut text = String::new();
    let mut registry = Registry::default();
    registry.register("c", "c", counter.clone());
    registry.register("h", "h", histogram.clone());
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(&format!("c_total {}", threads * 1_000)),
        "{text}"
    );
    assert!(
        text.contains(&format!("h_count {}", threads * 1_001)),
        "{text}"
    );
}

#[test]
fn a_thread_gauge_sums_its_threads_also_past_the_own_slots_and_across_threads() {
    let gauge = Arc::new(ThreadGauge::default());
    // More threads than own slots: the last ones share one with atomic additions.
    // Each adds 1 000 and hands half of its guards to another thread to drop.
    let threads = THREAD_SLOTS + 8;
    let handed: Vec<Vec<InFlight>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let gauge = gauge.clone();
                scope.spawn(move || {
                    let mut guards: Vec<InFlight> = (0..1_000).map(|_| gauge.enter()).collect();
                    guards.split_off(500)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(gauge.get(), threads as i64 * 500);
    std::thread::scope(|scope| {
        for guards in handed {
            scope.spawn(move || drop(guards));
        }
    });
    assert_eq!(gauge.get(), 0);
}

/// A route's handles are made at its first request (a configuration's untouched pairs
/// cost nothing), and carried over a reload that leaves its cluster's destinations as
/// they were; a changed destination list gets new ones.
#[test]
fn route_handles_are_made_lazily_and_kept_across_reloads() {
    use crate::config::{parse, Format};
    use crate::state::ProxyState;
    let config = |destinations: &str| {
        parse(
            &format!(
                r#"{{ "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "/" }} }} }},
                     "Clusters": {{ "c": {{ "Destinations": {{ {destinations} }} }} }} }}"#
            ),
            Format::Json,
        )
        .unwrap()
    };
    let one = r#""d1": { "Address": "http://127.0.0.1:1" }"#;
    let state = ProxyState::new(config(one)).unwrap();
    let encoded = |state: &ProxyState| {
        let mut out = String::new();
        state.metrics().encode(&state.snapshot(), &mut out).unwrap();
        out
    };
    let series = r#"fuseway_requests_total{route="r",cluster="c",destination="d1",status="200"}"#;
    assert!(
        !encoded(&state).contains(series),
        "no handles before a request"
    );

    let snapshot = state.snapshot();
    let target = snapshot.routes()[0].telemetry().target(0).unwrap() as *const Target;
    assert!(
        encoded(&state).contains(series),
        "made at the first request"
    );

    state.update(config(one)).unwrap();
    let again = state.snapshot().routes()[0].telemetry().target(0).unwrap() as *const Target;
    assert_eq!(target, again, "the same handles after a reload");

    let two = format!(r#"{one}, "d2": {{ "Address": "http://127.0.0.1:2" }}"#);
    state.update(config(&two)).unwrap();
    let changed = state.snapshot().routes()[0].telemetry().target(0).unwrap() as *const Target;
    assert_ne!(target, changed, "new handles for a new destination list");
    assert!(state.snapshot().routes()[0].telemetry().target(1).is_some());
}
