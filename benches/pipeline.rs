//! In-process pipeline bench (method and runs: docs/BENCHMARKS.md, "In-process
//! pipeline"): the default pipeline fused, as lean tower layers, and as the same layers
//! each type-erased behind `BoxCloneService`, over an in-process stub forwarder (sync
//! and async), served the way hyper serves them.
//!
//! ```text
//! cargo bench --bench pipeline                      # full run (~4 min)
//! cargo bench --bench pipeline -- minimal           # scenarios whose name contains `minimal`
//! FUSEWAY_BENCH_QUICK=1 cargo bench --bench pipeline   # smoke run (~30 s)
//! ```
//!
//! What is measured is the pipeline boundary: each request is built before its timed
//! chunk starts, and the stub forwarder's own cost (measured alone on pre-built
//! `Balanced` requests, interleaved with the others) is subtracted. Requests are driven
//! with `fuseway::testing::block_on` (a no-op waker: no runtime in the figure).
//!
//! - **fused**: `default_pipeline!` over the stub, called through its
//!   `hyper::service::Service` impl (`call(&self)`, no clone).
//! - **lean**: `layered_default_with(state, stub)`, concrete futures, no boxing, served
//!   through `ProxyService` exactly as hyper-util's `TowerToHyperService` serves a tower
//!   service: one clone of the stack per request, then `Oneshot`.
//! - **boxed**: the same layers, each (and the stub) behind `tower::util::BoxCloneService`
//!   as tower stacks usually are (axum, linkerd), served the same way.
//!
//! After criterion's own runs it prints one table: ns/op from criterion (median of its
//! samples) and from an interleaved loop (every variant in turn, each round's stub time
//! subtracted, median of the rounds), and allocations and bytes per request beyond the
//! stub (a counting global allocator). Then a two-thread run on one cluster.

use fuseway_alloc_count as alloc_count;

use std::cell::RefCell;
use std::collections::HashMap;
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::Criterion;
use fuseway::affinity::SessionAffinity;
use fuseway::balancing::LoadBalancing;
use fuseway::body::ProxyBody;
use fuseway::config::{parse, Format};
use fuseway::health::PassiveHealth;
use fuseway::limits::Limits;
use fuseway::pipeline::{layered_default_with, Layered, Terminal};
use fuseway::request::{Balanced, ProxyResponse, Routed};
use fuseway::routing::Routing;
use fuseway::server::ProxyService;
use fuseway::stage::{Stage, StageService};
use fuseway::state::ProxyState;
use fuseway::telemetry::Telemetry;
use fuseway::testing::{block_on, StubForwarder, StubMode};
use http::{Request, Response};
use http_body_util::Empty;
use tower::util::BoxCloneService;

#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting::new(std::alloc::System);

type Body = Empty<Bytes>;
type Req = Request<Body>;
type Resp = Response<ProxyBody>;

fuseway::default_pipeline! {
    /// The default stages fused over the stub.
    struct FusedDefault(http::Request<http_body_util::Empty<bytes::Bytes>>) {
        => stub: fuseway::testing::StubForwarder,
    }
}

fuseway::fused_pipeline! {
    /// The custom pipeline (no passive health) fused over the stub.
    struct FusedCustom(http::Request<http_body_util::Empty<bytes::Bytes>>) {
        routing: fuseway::routing::Routing,
        affinity: fuseway::affinity::SessionAffinity,
        limits: fuseway::limits::Limits,
        balancing: fuseway::balancing::LoadBalancing,
        => stub: fuseway::testing::StubForwarder,
    }
}

type LeanCustom = StageService<
    Routing,
    StageService<SessionAffinity, StageService<Limits, StageService<LoadBalancing, StubForwarder>>>,
>;

type Boxed<In> = BoxCloneService<In, ProxyResponse, Infallible>;

// ===== settings =====

struct Settings {
    quick: bool,
    warm_up: Duration,
    measurement: Duration,
    samples: usize,
    /// Interleaved rounds, and chunks of `CHUNK` requests per variant and round.
    rounds: usize,
    chunks: usize,
    /// Requests over which allocations are counted.
    alloc_requests: usize,
    filter: Vec<String>,
}

const CHUNK: usize = 256;

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var_os("FUSEWAY_BENCH_QUICK").is_some_and(|v| v != "0");
        // `cargo bench -- NAME` runs the scenarios whose name contains NAME.
        let filter = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        if quick {
            Settings {
                quick,
                warm_up: Duration::from_millis(100),
                measurement: Duration::from_millis(300),
                samples: 10,
                rounds: 5,
                chunks: 2,
                alloc_requests: 1024,
                filter,
            }
        } else {
            Settings {
                quick,
                warm_up: Duration::from_millis(700),
                measurement: Duration::from_secs(2),
                samples: 50,
                rounds: 41,
                chunks: 8,
                alloc_requests: 8192,
                filter,
            }
        }
    }

    fn selects(&self, name: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| name.contains(f.as_str()))
    }
}

// ===== scenarios =====

#[derive(Clone)]
struct RequestSpec {
    path: String,
    host: &'static str,
    cookie: Option<String>,
}

impl RequestSpec {
    fn build(&self) -> Req {
        let mut b = Request::builder()
            .uri(self.path.as_str())
            .header("host", self.host)
            .header("user-agent", "fuseway-bench")
            .header("accept", "*/*");
        if let Some(c) = &self.cookie {
            b = b.header("cookie", c.as_str());
        }
        b.body(Empty::new()).expect("valid request")
    }
}

struct Scenario {
    name: String,
    state: Arc<ProxyState>,
    request: RequestSpec,
    /// The custom pipeline (no passive health) instead of the default one.
    custom: bool,
}

fn destinations(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                r#""d{i:02}": {{ "Address": "http://127.0.0.1:{}" }}"#,
                10_000 + i
            )
        })
        .collect::<Vec<_>>()
        .join(",\n")
}

fn cluster(dests: usize, policy: &str, affinity: bool, health: &str) -> String {
    let affinity = if affinity {
        r#""SessionAffinity": { "Enabled": true, "Policy": "HashCookie", "AffinityKeyName": ".fw.affinity" },"#
    } else {
        ""
    };
    let health = match health {
        // health filtering (active checks enabled, not running) and passive health
        "both" => {
            r#""HealthCheck": { "Active": { "Enabled": true, "Path": "/health" }, "Passive": { "Enabled": true } },"#
        }
        "passive" => r#""HealthCheck": { "Passive": { "Enabled": true } },"#,
        _ => "",
    };
    format!(
        r#"{{ "LoadBalancingPolicy": "{policy}", {affinity} {health}
             "Destinations": {{ {} }} }}"#,
        destinations(dests)
    )
}

fn state(routes: &str, cluster: &str) -> Arc<ProxyState> {
    let json = format!(r#"{{ "Routes": {{ {routes} }}, "Clusters": {{ "c": {cluster} }} }}"#);
    Arc::new(ProxyState::new(parse(&json, Format::Json).expect("config parses")).expect("valid"))
}

const ONE_ROUTE: &str = r#""api": { "ClusterId": "c", "Match": { "Path": "/api/{**rest}" } }"#;

fn api_request() -> RequestSpec {
    RequestSpec {
        path: "/api/users/42?x=1".into(),
        host: "example.com",
        cookie: None,
    }
}

/// `n` distinct routes, path routes and host routes alternating; returns the routes and
/// a request for the last path route.
fn many_routes(n: usize) -> (String, RequestSpec) {
    let routes = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                format!(r#""r{i:05}": {{ "ClusterId": "c", "Match": {{ "Path": "/svc{i}/{{**rest}}" }} }}"#)
            } else {
                format!(
                    r#""r{i:05}": {{ "ClusterId": "c", "Match": {{ "Path": "/api/{{**rest}}", "Hosts": ["h{i}.example.com"] }} }}"#
                )
            }
        })
        .collect::<Vec<_>>()
        .join(",\n");
    let last_path = (n - 1) / 2 * 2;
    let request = RequestSpec {
        path: format!("/svc{last_path}/users/42?x=1"),
        host: "example.com",
        cookie: None,
    };
    (routes, request)
}

fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    for dests in [8, 64] {
        for (policy, short) in [("RoundRobin", "rr"), ("PowerOfTwoChoices", "p2c")] {
            out.push(Scenario {
                name: format!("minimal {dests}d {short}"),
                state: state(ONE_ROUTE, &cluster(dests, policy, false, "both")),
                request: api_request(),
                custom: false,
            });
        }
    }
    for n in [100, 1000] {
        let (routes, request) = many_routes(n);
        out.push(Scenario {
            name: format!("routes {n} late hit"),
            state: state(&routes, &cluster(8, "PowerOfTwoChoices", false, "passive")),
            request,
            custom: false,
        });
    }
    let affinity = state(ONE_ROUTE, &cluster(8, "PowerOfTwoChoices", true, "passive"));
    let cookie = {
        let probe = FusedDefault::from_state(affinity.clone(), StubForwarder::new(StubMode::Sync));
        let r = block_on(probe.call_fused(api_request().build())).expect("infallible");
        let set = r.response.headers()["set-cookie"].to_str().expect("ascii");
        set.split(';').next().expect("name=value").to_owned()
    };
    out.push(Scenario {
        name: "affinity miss".into(),
        state: affinity.clone(),
        request: api_request(),
        custom: false,
    });
    out.push(Scenario {
        name: "affinity hit".into(),
        state: affinity,
        request: RequestSpec {
            cookie: Some(cookie),
            ..api_request()
        },
        custom: false,
    });
    out.push(Scenario {
        name: "custom (no passive)".into(),
        state: state(ONE_ROUTE, &cluster(8, "PowerOfTwoChoices", false, "")),
        request: api_request(),
        custom: true,
    });
    out
}

// ===== the measured targets =====

/// Something measured per request: `make` builds its input (untimed), `run` handles it.
trait Target: Clone + Send {
    type In;
    fn make(&self) -> Self::In;
    fn run(&self, input: Self::In);
}

/// A pipeline served as hyper serves a service: `hyper::service::Service::call(&self)`.
#[derive(Clone)]
struct Served<S> {
    service: S,
    request: RequestSpec,
}

impl<S> Target for Served<S>
where
    S: hyper::service::Service<Req, Response = Resp, Error = Infallible> + Clone + Send,
{
    type In = Req;

    fn make(&self) -> Req {
        self.request.build()
    }

    #[inline(never)]
    fn run(&self, request: Req) {
        let response = block_on(self.service.call(request));
        drop(black_box(response));
    }
}

/// The stub forwarder alone, on `Balanced` requests made by routing and balancing.
#[derive(Clone)]
struct StubAlone {
    stub: StubForwarder,
    routing: Routing,
    request: RequestSpec,
}

impl Target for StubAlone {
    type In = Balanced<Body>;

    fn make(&self) -> Balanced<Body> {
        let (routed, ()): (Routed<Body>, ()) = self
            .routing
            .on_request(self.request.build())
            .expect("routes");
        LoadBalancing::new().on_request(routed).expect("balances").0
    }

    #[inline(never)]
    fn run(&self, request: Balanced<Body>) {
        let response = block_on(self.stub.call_terminal(request));
        drop(black_box(response));
    }
}

/// Time `n` requests (rounded up to whole chunks), inputs built before each chunk.
fn time<T: Target>(target: &T, n: u64, inputs: &mut Vec<T::In>) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let k = left.min(CHUNK as u64) as usize;
        inputs.extend((0..k).map(|_| target.make()));
        let start = Instant::now();
        for input in inputs.drain(..) {
            target.run(black_box(input));
        }
        total += start.elapsed();
        left -= k as u64;
    }
    total
}

/// Allocations of `n` requests, inputs built before each chunk.
fn allocations<T: Target>(target: &T, n: usize) -> alloc_count::Counted {
    let mut inputs = Vec::with_capacity(CHUNK);
    let mut total = alloc_count::Counted::default();
    for _ in 0..n.div_ceil(CHUNK) {
        inputs.extend((0..CHUNK).map(|_| target.make()));
        let ((), c) = alloc_count::this_thread(|| {
            for input in inputs.drain(..) {
                target.run(input);
            }
        });
        total.allocs += c.allocs;
        total.bytes += c.bytes;
    }
    total
}

/// Object-safe face of a [`Target`], so the variants of a scenario sit in one list.
trait Measure {
    fn time(&self, n: u64) -> Duration;
    fn allocations(&self, n: usize) -> alloc_count::Counted;
    /// ns/op of each of `threads` threads running `n` requests at once on clones.
    fn time_threads(&self, threads: usize, n: u64) -> Vec<f64>;
}

impl<T: Target> Measure for T {
    fn time(&self, n: u64) -> Duration {
        time(self, n, &mut Vec::with_capacity(CHUNK))
    }

    fn allocations(&self, n: usize) -> alloc_count::Counted {
        allocations(self, n)
    }

    fn time_threads(&self, threads: usize, n: u64) -> Vec<f64> {
        let barrier = Barrier::new(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let target = self.clone();
                    let barrier = &barrier;
                    s.spawn(move || {
                        let mut inputs = Vec::with_capacity(CHUNK);
                        time(&target, CHUNK as u64, &mut inputs); // warm this thread
                        barrier.wait();
                        time(&target, n, &mut inputs).as_nanos() as f64 / n as f64
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("bench thread"))
                .collect()
        })
    }
}

struct Variants {
    stub: Box<dyn Measure>,
    fused: Box<dyn Measure>,
    lean: Box<dyn Measure>,
    boxed: Box<dyn Measure>,
}

fn boxed<S, In>(service: S) -> Boxed<In>
where
    S: tower_service::Service<In, Response = ProxyResponse, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    BoxCloneService::new(service)
}

fn served<S>(service: S, request: &RequestSpec) -> Box<dyn Measure>
where
    S: hyper::service::Service<Req, Response = Resp, Error = Infallible> + Clone + Send + 'static,
{
    Box::new(Served {
        service,
        request: request.clone(),
    })
}

fn variants(scenario: &Scenario, mode: StubMode) -> Variants {
    let state = &scenario.state;
    let stub = StubForwarder::new(mode);
    let request = &scenario.request;
    let (fused, lean, boxed): (Box<dyn Measure>, Box<dyn Measure>, Box<dyn Measure>) =
        if scenario.custom {
            let fused = FusedCustom::new(
                Routing::new(state.clone()),
                SessionAffinity::new(),
                Limits::new(),
                LoadBalancing::new(),
                stub,
            );
            let lean: LeanCustom = StageService::new(
                Routing::new(state.clone()),
                StageService::new(
                    SessionAffinity::new(),
                    StageService::new(Limits::new(), StageService::new(LoadBalancing::new(), stub)),
                ),
            );
            let b: Boxed<Balanced<Body>> = boxed(stub);
            let b: Boxed<Routed<Body>> = boxed(StageService::new(LoadBalancing::new(), b));
            let b: Boxed<Routed<Body>> = boxed(StageService::new(Limits::new(), b));
            let b: Boxed<Routed<Body>> = boxed(StageService::new(SessionAffinity::new(), b));
            let b: Boxed<Req> = boxed(StageService::new(Routing::new(state.clone()), b));
            (
                served(fused, request),
                served(ProxyService::new(lean), request),
                served(ProxyService::new(b), request),
            )
        } else {
            let fused = FusedDefault::from_state(state.clone(), stub);
            let lean: Layered<StubForwarder> = layered_default_with(state.clone(), stub);
            let b: Boxed<Balanced<Body>> = boxed(stub);
            let b: Boxed<Balanced<Body>> = boxed(StageService::new(PassiveHealth::new(), b));
            let b: Boxed<Routed<Body>> = boxed(StageService::new(LoadBalancing::new(), b));
            let b: Boxed<Routed<Body>> = boxed(StageService::new(Limits::new(), b));
            let b: Boxed<Routed<Body>> = boxed(StageService::new(SessionAffinity::new(), b));
            let b: Boxed<Req> = boxed(StageService::new(Routing::new(state.clone()), b));
            // The default pipeline's first stage, as in `layered_default_with`.
            let b: Boxed<Req> = boxed(StageService::new(Telemetry::new(state), b));
            (
                served(fused, request),
                served(ProxyService::new(lean), request),
                served(ProxyService::new(b), request),
            )
        };
    Variants {
        stub: Box::new(StubAlone {
            stub,
            routing: Routing::new(state.clone()),
            request: scenario.request.clone(),
        }),
        fused,
        lean,
        boxed,
    }
}

/// Every form answers 200 (a bench of a 404 path would measure nothing).
fn check(scenario: &Scenario) {
    let fused =
        FusedDefault::from_state(scenario.state.clone(), StubForwarder::new(StubMode::Sync));
    let r = block_on(fused.call_fused(scenario.request.build())).expect("infallible");
    assert_eq!(
        r.status_code(),
        200,
        "{}: the request must be proxied",
        scenario.name
    );
}

// ===== criterion =====

thread_local! {
    /// (iterations, time) of every criterion sample, by bench id.
    static SAMPLES: RefCell<HashMap<String, Vec<(u64, Duration)>>> = RefCell::default();
}

fn criterion_median(id: &str, samples: usize) -> Option<f64> {
    SAMPLES.with(|s| {
        let s = s.borrow();
        let all = s.get(id)?;
        // Warm-up calls come first; the last `samples` calls are the measurement.
        let mut per_iter: Vec<f64> = all[all.len().saturating_sub(samples)..]
            .iter()
            .map(|(iters, d)| d.as_nanos() as f64 / *iters as f64)
            .collect();
        Some(median(&mut per_iter))
    })
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

const FORMS: [&str; 4] = ["stub", "fused", "lean", "boxed"];

fn form<'a>(v: &'a Variants, name: &str) -> &'a dyn Measure {
    match name {
        "stub" => &*v.stub,
        "fused" => &*v.fused,
        "lean" => &*v.lean,
        _ => &*v.boxed,
    }
}

fn run_criterion(c: &mut Criterion, runs: &[(String, Variants)]) {
    let mut group = c.benchmark_group("pipeline");
    for (name, variants) in runs {
        for f in FORMS {
            let id = format!("{name}/{f}");
            group.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let d = form(variants, f).time(iters);
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
}

// ===== interleaved loop and table =====

struct Row {
    name: String,
    criterion: [f64; 4],
    /// Net ns/op of fused, lean, boxed (median over rounds of variant minus stub).
    net: [f64; 3],
    stub: f64,
    allocs: [f64; 3],
    bytes: [f64; 3],
    stub_allocs: (f64, f64),
}

fn interleaved(v: &Variants, settings: &Settings) -> ([f64; 3], f64) {
    let n = (settings.chunks * CHUNK) as u64;
    let mut nets: [Vec<f64>; 3] = Default::default();
    let mut stubs = Vec::new();
    for round in 0..settings.rounds {
        let mut t = [0.0; 4];
        // Rotate the order so no variant always runs right after another.
        for k in 0..4 {
            let i = (k + round) % 4;
            t[i] = form(v, FORMS[i]).time(n).as_nanos() as f64 / n as f64;
        }
        stubs.push(t[0]);
        for i in 0..3 {
            nets[i].push(t[i + 1] - t[0]);
        }
    }
    (nets.map(|mut x| median(&mut x)), median(&mut stubs))
}

fn per_request(c: alloc_count::Counted, stub: alloc_count::Counted, n: usize) -> (f64, f64) {
    (
        (c.allocs as f64 - stub.allocs as f64) / n as f64,
        (c.bytes as f64 - stub.bytes as f64) / n as f64,
    )
}

fn print_table(rows: &[Row], settings: &Settings) {
    println!();
    println!(
        "pipeline boundary, per request, net of building the request and of the stub forwarder"
    );
    println!(
        "ns/op: interleaved median of {} rounds x {} requests per variant [criterion median of {} samples, net]",
        settings.rounds,
        settings.chunks * CHUNK,
        settings.samples
    );
    println!(
        "{:<30} {:>16} {:>16} {:>16} {:>10} {:>11} | {:>17} | {:>20} | {:>9}",
        "scenario",
        "fused ns",
        "lean ns",
        "boxed ns",
        "fused/lean",
        "fused/boxed",
        "allocs fused/lean/boxed",
        "B/op fused/lean/boxed",
        "stub ns"
    );
    for r in rows {
        let c = |i: usize| r.criterion[i + 1] - r.criterion[0];
        println!(
            "{:<30} {:>7.0} [{:>6.0}] {:>7.0} [{:>6.0}] {:>7.0} [{:>6.0}] {:>10.2} {:>11.2} | {:>5.2} {:>5.2} {:>5.2}  | {:>6.0} {:>6.0} {:>6.0} | {:>9.0}",
            r.name,
            r.net[0],
            c(0),
            r.net[1],
            c(1),
            r.net[2],
            c(2),
            r.net[0] / r.net[1],
            r.net[0] / r.net[2],
            r.allocs[0],
            r.allocs[1],
            r.allocs[2],
            r.bytes[0],
            r.bytes[1],
            r.bytes[2],
            r.stub,
        );
    }
    if let Some(r) = rows.first() {
        println!(
            "(the stub alone: {:.2} allocs, {:.0} B per request; not included above)",
            r.stub_allocs.0, r.stub_allocs.1
        );
    }
}

fn two_threads(scenario: &Scenario, settings: &Settings) {
    let v = variants(scenario, StubMode::Async);
    let n = (settings.chunks * CHUNK) as u64;
    let mut one: [Vec<f64>; 4] = Default::default();
    let mut two: [Vec<f64>; 4] = Default::default();
    for round in 0..settings.rounds.max(3) {
        for k in 0..4 {
            let i = (k + round) % 4;
            let m = form(&v, FORMS[i]);
            one[i].extend(m.time_threads(1, n));
            two[i].extend(m.time_threads(2, n));
        }
    }
    println!();
    println!(
        "two threads on one cluster ({} async): ns/op per thread, pipeline + stub, median",
        scenario.name
    );
    println!(
        "{:<8} {:>10} {:>10} {:>10}",
        "form", "1 thread", "2 threads", "growth"
    );
    for i in 0..4 {
        let (a, b) = (median(&mut one[i]), median(&mut two[i]));
        println!("{:<8} {:>10.0} {:>10.0} {:>+10.0}", FORMS[i], a, b, b - a);
    }
}

/// `FUSEWAY_BENCH_PROFILE="minimal 8d p2c async/fused"`: run only that variant for
/// `FUSEWAY_BENCH_PROFILE_N` requests (default 100 000), for `valgrind --tool=callgrind`
/// (each request is one call of the `#[inline(never)]` `run` function: its inclusive
/// instruction count divided by the calls is instructions per request).
fn profile(which: &str) {
    let (scenario, form_name) = which.rsplit_once('/').expect("SCENARIO MODE/FORM");
    let (scenario, mode) = scenario.rsplit_once(' ').expect("SCENARIO MODE/FORM");
    let mode = if mode == "sync" {
        StubMode::Sync
    } else {
        StubMode::Async
    };
    let s = scenarios()
        .into_iter()
        .find(|s| s.name == scenario)
        .unwrap_or_else(|| panic!("no scenario `{scenario}`"));
    let n: u64 = std::env::var("FUSEWAY_BENCH_PROFILE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let v = variants(&s, mode);
    let m = form(&v, form_name);
    m.time(1024);
    let d = m.time(n);
    println!(
        "{which}: {n} requests, {:.0} ns/op (gross)",
        d.as_nanos() as f64 / n as f64
    );
}

fn main() {
    if let Ok(which) = std::env::var("FUSEWAY_BENCH_PROFILE") {
        profile(&which);
        return;
    }
    let settings = Settings::from_env();
    let mut criterion = Criterion::default()
        .warm_up_time(settings.warm_up)
        .measurement_time(settings.measurement)
        .sample_size(settings.samples)
        .without_plots()
        .configure_from_args();

    let scenarios: Vec<Scenario> = scenarios()
        .into_iter()
        .filter(|s| settings.selects(&s.name))
        .collect();
    let mut runs = Vec::new();
    for s in &scenarios {
        check(s);
        for mode in [StubMode::Sync, StubMode::Async] {
            let name = format!(
                "{} {}",
                s.name,
                if mode == StubMode::Sync {
                    "sync"
                } else {
                    "async"
                }
            );
            runs.push((name, variants(s, mode)));
        }
    }

    run_criterion(&mut criterion, &runs);

    let mut rows = Vec::new();
    for (name, v) in &runs {
        let (net, stub) = interleaved(v, &settings);
        let n = settings.alloc_requests;
        let stub_counted = v.stub.allocations(n);
        let counted = [
            v.fused.allocations(n),
            v.lean.allocations(n),
            v.boxed.allocations(n),
        ];
        let per = counted.map(|c| per_request(c, stub_counted, n));
        let criterion = FORMS.map(|f| {
            criterion_median(&format!("{name}/{f}"), settings.samples).unwrap_or(f64::NAN)
        });
        rows.push(Row {
            name: name.clone(),
            criterion,
            net,
            stub,
            allocs: per.map(|p| p.0),
            bytes: per.map(|p| p.1),
            stub_allocs: (
                stub_counted.allocs as f64 / n as f64,
                stub_counted.bytes as f64 / n as f64,
            ),
        });
    }
    print_table(&rows, &settings);

    if let Some(s) = scenarios.iter().find(|s| s.name == "minimal 8d p2c") {
        two_threads(s, &settings);
    }
    if settings.quick {
        println!("(quick mode: FUSEWAY_BENCH_QUICK is set; figures are a smoke test only)");
    }
    criterion.final_summary();
}
