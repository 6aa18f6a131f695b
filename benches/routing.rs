//! Routing bench (method and runs: docs/BENCHMARKS.md, "Routing"): `RouteTable::find`
//! over 1, 100, 1 000 and 10 000 routes of mixed kinds, for a hit on the first route,
//! late hits and a miss.
//!
//! ```text
//! cargo bench --bench routing                          # full run (~1 min)
//! FUSEWAY_BENCH_QUICK=1 cargo bench --bench routing    # smoke run (~10 s)
//! ```
//!
//! Route `i` is, by `i % 5`: a parameter route `/svc{i}/users/{id}`, a literal route
//! `/svc{i}/items/list`, a catch-all route `/svc{i}/static/{**rest}`, a host route
//! (`h{i}.example.com`, `/api/{id}`), or a header route (`/svc{i}/h` with
//! `x-tenant: t{i}`). "late" is the last route of its kind. The request (method, URI,
//! headers) is built once; each iteration is one `find`. After criterion, a table gives
//! ns per `find` (criterion's median sample, and the median of an interleaved loop over
//! every table), the ratio to one route, and allocations per `find`.

use fuseway_alloc_count as alloc_count;

use std::cell::RefCell;
use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use fuseway::config::{parse, Format};
use fuseway::routing::RouteTable;
use http::{HeaderMap, HeaderValue, Method, Uri};

#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting::new(std::alloc::System);

const SIZES: [usize; 4] = [1, 100, 1_000, 10_000];

#[path = "support/routes.rs"]
mod routes;

fn table(n: usize) -> RouteTable {
    let routes: Vec<String> = (0..n).map(|i| routes::route(i, "c")).collect();
    let json = format!(r#"{{ "Routes": {{ {} }} }}"#, routes.join(",\n"));
    let config = parse(&json, Format::Json).expect("config parses");
    RouteTable::build(config.routes.iter().map(|(id, r)| (id.as_str(), r))).expect("valid routes")
}

/// The last route index below `n` of kind `kind`.
fn last_of(kind: usize, n: usize) -> Option<usize> {
    (0..n).rev().find(|i| i % 5 == kind)
}

struct Probe {
    name: &'static str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    expect: Option<usize>,
}

fn probe(
    name: &'static str,
    path: String,
    host: String,
    tenant: Option<String>,
    expect: Option<usize>,
) -> Probe {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_str(&host).expect("host"));
    headers.insert("user-agent", HeaderValue::from_static("fuseway-bench"));
    headers.insert("accept", HeaderValue::from_static("*/*"));
    if let Some(t) = tenant {
        headers.insert("x-tenant", HeaderValue::from_str(&t).expect("tenant"));
    }
    Probe {
        name,
        method: Method::GET,
        uri: path.parse().expect("uri"),
        headers,
        expect,
    }
}

fn probes(n: usize) -> Vec<Probe> {
    let host = || "example.com".to_string();
    let mut out = vec![probe(
        "first",
        "/svc0/users/42?x=1".into(),
        host(),
        None,
        Some(0),
    )];
    let late = last_of(0, n).expect("route 0 is a parameter route");
    out.push(probe(
        "late",
        format!("/svc{late}/users/42?x=1"),
        host(),
        None,
        Some(late),
    ));
    if let Some(i) = last_of(3, n) {
        out.push(probe(
            "late host",
            "/api/42".into(),
            format!("h{i}.example.com"),
            None,
            Some(i),
        ));
    }
    if let Some(i) = last_of(4, n) {
        out.push(probe(
            "late header",
            format!("/svc{i}/h"),
            host(),
            Some(format!("t{i}")),
            Some(i),
        ));
    }
    out.push(probe("none", "/nothing/here/42".into(), host(), None, None));
    out
}

fn find(table: &RouteTable, p: &Probe) -> Option<usize> {
    table.find(
        black_box(&p.method),
        black_box(&p.uri),
        black_box(&p.headers),
    )
}

fn time_finds(table: &RouteTable, p: &Probe, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(find(table, p));
    }
    start.elapsed()
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

thread_local! {
    static SAMPLES: RefCell<HashMap<String, Vec<(u64, Duration)>>> = RefCell::default();
}

fn main() {
    let quick = std::env::var_os("FUSEWAY_BENCH_QUICK").is_some_and(|v| v != "0");
    let (warm_up, measurement, samples, rounds, per_round) = if quick {
        (
            Duration::from_millis(100),
            Duration::from_millis(300),
            10,
            5,
            2_000,
        )
    } else {
        (
            Duration::from_millis(500),
            Duration::from_secs(2),
            50,
            41,
            20_000,
        )
    };
    let mut criterion = Criterion::default()
        .warm_up_time(warm_up)
        .measurement_time(measurement)
        .sample_size(samples)
        .without_plots()
        .configure_from_args();

    let mut cases = Vec::new();
    for n in SIZES {
        let started = Instant::now();
        let t = table(n);
        let built = started.elapsed();
        for p in probes(n) {
            assert_eq!(
                find(&t, &p),
                p.expect,
                "{n} routes, {}: wrong route",
                p.name
            );
        }
        println!("{n} routes: built in {:.1} ms", built.as_secs_f64() * 1e3);
        cases.push((n, t, probes(n)));
    }

    let mut group = criterion.benchmark_group("routing");
    for (n, t, ps) in &cases {
        for p in ps {
            let id = format!("{n} routes/{}", p.name);
            group.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let d = time_finds(t, p, iters);
                    SAMPLES.with(|s| {
                        s.borrow_mut()
                            .entry(id.clone())
                            .or_default()
                            .push((iters, d))
                    });
                    d
                })
            });
        }
    }
    group.finish();

    // Interleaved: every (table, probe) in turn, each round; median per case.
    let mut loop_ns: HashMap<(usize, &'static str), Vec<f64>> = HashMap::new();
    for _ in 0..rounds {
        for (n, t, ps) in &cases {
            for p in ps {
                let d = time_finds(t, p, per_round);
                loop_ns
                    .entry((*n, p.name))
                    .or_default()
                    .push(d.as_nanos() as f64 / per_round as f64);
            }
        }
    }
    let crit = |id: &str| {
        SAMPLES.with(|s| {
            let s = s.borrow();
            let all = s.get(id)?;
            let mut v: Vec<f64> = all[all.len().saturating_sub(samples)..]
                .iter()
                .map(|(i, d)| d.as_nanos() as f64 / *i as f64)
                .collect();
            Some(median(&mut v))
        })
    };
    let mut medians: HashMap<(usize, &'static str), f64> = HashMap::new();
    for (k, v) in &mut loop_ns {
        medians.insert(*k, median(v));
    }

    println!();
    println!(
        "RouteTable::find, ns per call: interleaved median of {rounds} rounds x {per_round} [criterion median of {samples} samples]"
    );
    println!(
        "{:<8} {:<12} {:>18} {:>16} {:>12}",
        "routes", "request", "ns/find", "vs 1 route", "allocs/find"
    );
    for (n, t, ps) in &cases {
        for p in ps {
            let m = medians[&(*n, p.name)];
            let c = crit(&format!("{n} routes/{}", p.name)).unwrap_or(f64::NAN);
            // The same request kind against one route: "late" and "first" compare with
            // the one route's hit, "none" with its miss.
            let base = match p.name {
                "none" => medians.get(&(1, "none")),
                _ => medians.get(&(1, "first")),
            };
            let ratio = base.map(|b| format!("{:.2}x", m / b)).unwrap_or_default();
            let ((), a) = alloc_count::this_thread(|| {
                for _ in 0..1000 {
                    black_box(find(t, p));
                }
            });
            println!(
                "{:<8} {:<12} {:>8.1} [{:>6.1}] {:>16} {:>12.3}",
                n,
                p.name,
                m,
                c,
                ratio,
                a.allocs as f64 / 1000.0
            );
        }
    }
    let late_10k = medians[&(10_000, "late")] / medians[&(1, "first")];
    println!(
        "target: a late hit in 10 000 routes at most 3x one route: {late_10k:.2}x ({})",
        if late_10k <= 3.0 { "met" } else { "MISSED" }
    );
    if quick {
        println!("(quick mode: FUSEWAY_BENCH_QUICK is set; figures are a smoke test only)");
    }
    criterion.final_summary();
}
