//! Reload bench (method and runs: docs/BENCHMARKS.md, "Reload at scale"): what a
//! configuration of 1 000 and 10 000 routes costs to read and to swap in.
//!
//! ```text
//! cargo bench --bench reload                          # full run (~1 min)
//! FUSEWAY_BENCH_QUICK=1 cargo bench --bench reload    # smoke run
//! ```
//!
//! The configuration has `n` routes of mixed kinds (as the routing bench's: parameter,
//! literal, catch-all, host and header routes) over `n / 100` clusters of two
//! destinations each. Measured: `parse` (JSON text to a validated `ProxyConfig`, what a
//! file or etcd provider does), and `update` (`ProxyState::update`: validation,
//! compiling the route table and every stage's data, keeping destination state, the
//! atomic swap — what every reload does after parsing). After criterion, a table gives
//! the median of both in ms, the bytes a built state keeps (live allocations after
//! `ProxyState::new`) and what one update allocates in all. Request latency during
//! repeated reloads is measured end to end: `cargo e2e --reload` (contrib/e2e).

use fuseway_alloc_count as alloc_count;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion};
use fuseway::config::{parse, Format, ProxyConfig};
use fuseway::state::ProxyState;

// mimalloc, as the binary: glibc's malloc spends half of a large reload consolidating
// its free lists.
#[global_allocator]
static ALLOCATOR: alloc_count::Counting<mimalloc::MiMalloc> =
    alloc_count::Counting::new(mimalloc::MiMalloc);

const SIZES: [usize; 2] = [1_000, 10_000];

#[path = "support/routes.rs"]
mod routes;

/// The JSON text of a configuration with `n` routes.
fn config_text(n: usize) -> String {
    let clusters = (n / 100).max(1);
    let routes: Vec<String> = (0..n)
        .map(|i| routes::route(i, &format!("c{}", i % clusters)))
        .collect();
    let clusters: Vec<String> = (0..clusters)
        .map(|c| {
            format!(
                r#""c{c}": {{ "Destinations": {{ "d1": {{ "Address": "http://10.0.{}.{}:8080" }}, "d2": {{ "Address": "http://10.1.{}.{}:8080" }} }} }}"#,
                c / 250,
                c % 250,
                c / 250,
                c % 250
            )
        })
        .collect();
    format!(
        r#"{{ "Routes": {{ {} }}, "Clusters": {{ {} }} }}"#,
        routes.join(",\n"),
        clusters.join(",\n")
    )
}

fn parsed(text: &str) -> ProxyConfig {
    parse(text, Format::Json).expect("the bench's configuration is valid")
}

/// The median of `runs` timings of `f`.
fn median_time(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs).map(|_| f()).collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let quick = std::env::var_os("FUSEWAY_BENCH_QUICK").is_some();
    let mut c = Criterion::default().configure_from_args();
    if quick {
        c = c
            .sample_size(10)
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500));
    } else {
        c = c.sample_size(20).measurement_time(Duration::from_secs(10));
    }
    let sizes: &[usize] = if quick { &SIZES[..1] } else { &SIZES };
    let mut rows = Vec::new();
    for &n in sizes {
        let text = config_text(n);
        let config = parsed(&text);
        let state = ProxyState::new(config.clone()).expect("valid");
        let mut group = c.benchmark_group(format!("reload/{n}"));
        group.bench_function("parse", |b| b.iter(|| parsed(black_box(&text))));
        group.bench_function("update", |b| {
            b.iter_batched(
                || config.clone(),
                |config| state.update(config).expect("valid"),
                BatchSize::LargeInput,
            )
        });
        group.finish();

        let runs = if quick { 3 } else { 11 };
        let parse_time = median_time(runs, || {
            let start = Instant::now();
            black_box(parsed(&text));
            start.elapsed()
        });
        let update_time = median_time(runs, || {
            let config = config.clone();
            let start = Instant::now();
            state.update(config).expect("valid");
            start.elapsed()
        });
        let (built, kept) = alloc_count::this_thread(|| ProxyState::new(config.clone()));
        drop(built);
        let (_, update) = alloc_count::this_thread(|| state.update(config.clone()));
        rows.push((n, parse_time, update_time, kept.live, update.bytes));
    }
    println!();
    println!("routes   parse ms   update ms   state keeps MB   an update allocates MB");
    for (n, parse_time, update_time, kept, allocated) in rows {
        println!(
            "{n:>6} {:>10.1} {:>11.1} {:>16.1} {:>24.1}",
            parse_time.as_secs_f64() * 1e3,
            update_time.as_secs_f64() * 1e3,
            kept as f64 / 1e6,
            allocated as f64 / 1e6,
        );
    }
}
