//! Allocation counts of the default pipeline, fused and layered, in process.
//!
//! The terminal is [`StubForwarder`] (an in-process stub, no sockets): this test
//! measures the pipeline itself. Allocation counts are deterministic, so they are
//! asserted; time is measured by the benches, never here.

use std::sync::Arc;

use bytes::Bytes;
use fuseway::config::{parse, Format};
use fuseway::pipeline::layered_default_with;
use fuseway::request::ProxyResponse;
use fuseway::stage::Stage;
use fuseway::state::ProxyState;
use fuseway::testing::{block_on, StubForwarder, StubMode};
use http::Request;
use http_body_util::Empty;
use tower::ServiceExt;

// ===== counting allocator =====

#[global_allocator]
static ALLOCATOR: fuseway_alloc_count::Counting =
    fuseway_alloc_count::Counting::new(std::alloc::System);

/// (allocations, bytes) made by `f` on this thread.
fn count<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let (out, counted) = fuseway_alloc_count::this_thread(f);
    (out, counted.allocs, counted.bytes)
}

// ===== the pipelines =====

type Req = Request<Empty<Bytes>>;

fuseway::default_pipeline! {
    /// The default stages fused over the stub.
    struct StubDefault(http::Request<http_body_util::Empty<bytes::Bytes>>) {
        => stub: fuseway::testing::StubForwarder,
    }
}

const CONFIG: &str = r#"{
  "Routes": {
    "api": {
      "ClusterId": "c",
      "Match": { "Path": "/api/{**rest}", "Hosts": ["example.com"] },
      "MaxConcurrentRequests": 100000,
      "RateLimit": { "PermitsPerSecond": 1000000000, "Burst": 1000000 },
      "Timeout": "30s"
    },
    "other": { "ClusterId": "c", "Match": { "Path": "/other/{id}" } }
  },
  "Clusters": {
    "c": {
      "LoadBalancingPolicy": "PowerOfTwoChoices",
      "SessionAffinity": { "Enabled": true, "AffinityKeyName": ".fw.affinity" },
      "HealthCheck": {
        "Passive": { "Enabled": true },
        "AvailableDestinationsPolicy": "HealthyOrPanic"
      },
      "Destinations": {
        "d1": { "Address": "http://127.0.0.1:1" },
        "d2": { "Address": "http://127.0.0.1:2" },
        "d3": { "Address": "http://127.0.0.1:3" },
        "d4": { "Address": "http://127.0.0.1:4" },
        "d5": { "Address": "http://127.0.0.1:5" },
        "d6": { "Address": "http://127.0.0.1:6" },
        "d7": { "Address": "http://127.0.0.1:7" },
        "d8": { "Address": "http://127.0.0.1:8" }
      }
    }
  }
}"#;

fn state() -> Arc<ProxyState> {
    Arc::new(ProxyState::new(parse(CONFIG, Format::Json).unwrap()).unwrap())
}

fn request(cookie: Option<&str>) -> Req {
    let mut b = Request::builder()
        .uri("/api/users/42?x=1")
        .header("host", "example.com")
        .header("user-agent", "alloc-test");
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    b.body(Empty::new()).unwrap()
}

/// The affinity cookie the pipeline sets (`name=value`), from one request.
fn affinity_cookie(p: &StubDefault) -> Option<String> {
    let r = block_on(p.call_fused(request(None))).unwrap();
    let set = r.response.headers().get("set-cookie")?.to_str().ok()?;
    Some(set.split(';').next()?.to_owned())
}

const N: usize = 1000;

struct Figures {
    allocs_per_req: f64,
    bytes_per_req: f64,
}

fn per_request(allocs: u64, bytes: u64) -> Figures {
    Figures {
        allocs_per_req: allocs as f64 / N as f64,
        bytes_per_req: bytes as f64 / N as f64,
    }
}

/// What the stub itself allocates per request (measured alone).
fn stub_alone(state: &Arc<ProxyState>, mode: StubMode) -> (u64, u64) {
    let stub = StubForwarder::new(mode);
    let routing = fuseway::routing::Routing::new(state.clone());
    let balancing = fuseway::balancing::LoadBalancing::new();
    let balanced: Vec<_> = (0..N)
        .map(|_| {
            let (routed, ()) = routing.on_request(request(None)).unwrap();
            balancing.on_request(routed).unwrap().0
        })
        .collect();
    let ((), allocs, bytes) = count(|| {
        for b in balanced {
            let r: ProxyResponse =
                block_on(fuseway::pipeline::Terminal::call_terminal(&stub, b)).unwrap();
            drop(r);
        }
    });
    (allocs, bytes)
}

/// (allocations, bytes) of `N` requests through `serve` (each answered 200), after 100
/// to warm it up.
fn requests_through(cookie: Option<&str>, serve: impl Fn(Req) -> ProxyResponse) -> (u64, u64) {
    for _ in 0..100 {
        drop(serve(request(cookie)));
    }
    let reqs: Vec<Req> = (0..N).map(|_| request(cookie)).collect();
    let ((), allocs, bytes) = count(|| {
        for r in reqs {
            let resp = serve(r);
            assert_eq!(resp.status_code(), 200);
            drop(resp);
        }
    });
    (allocs, bytes)
}

fn fused(state: &Arc<ProxyState>, mode: StubMode, cookie: Option<&str>) -> (u64, u64) {
    let p = StubDefault::from_state(state.clone(), StubForwarder::new(mode));
    requests_through(cookie, |r| block_on(p.call_fused(r)).unwrap())
}

fn layered(state: &Arc<ProxyState>, mode: StubMode, cookie: Option<&str>) -> (u64, u64) {
    let svc = layered_default_with(state.clone(), StubForwarder::new(mode));
    // As hyper-util serves a tower service: a clone per request, then oneshot.
    requests_through(cookie, |r| block_on(svc.clone().oneshot(r)).unwrap())
}

#[test]
fn fused_default_pipeline_allocates_nothing_per_request() {
    let state = state();
    let probe = StubDefault::from_state(state.clone(), StubForwarder::new(StubMode::Sync));
    let cookie = affinity_cookie(&probe);
    let mut rows = Vec::new();
    for mode in [StubMode::Sync, StubMode::Async] {
        let stub = stub_alone(&state, mode);
        for (scenario, cookie) in [("affinity miss", None), ("affinity hit", cookie.as_deref())] {
            let f = fused(&state, mode, cookie);
            let l = layered(&state, mode, cookie);
            let fused_net = per_request(f.0 - stub.0.min(f.0), f.1 - stub.1.min(f.1));
            let layered_net = per_request(l.0 - stub.0.min(l.0), l.1 - stub.1.min(l.1));
            rows.push(format!(
                "{scenario:<14} {mode:<6?} fused {:>5.2} allocs {:>7.1} B/req | layered {:>5.2} allocs {:>7.1} B/req (stub alone {:.2} allocs, {:.1} B/req)",
                fused_net.allocs_per_req,
                fused_net.bytes_per_req,
                layered_net.allocs_per_req,
                layered_net.bytes_per_req,
                stub.0 as f64 / N as f64,
                stub.1 as f64 / N as f64,
            ));
            assert_eq!(
                f, stub,
                "{scenario} {mode:?}: the fused pipeline allocated beyond the stub ({f:?} vs stub {stub:?} for {N} requests)"
            );
        }
    }
    println!("allocations per request beyond the stub, {N} requests:");
    for r in rows {
        println!("  {r}");
    }
}

#[test]
fn future_sizes() {
    let state = state();
    let fused = StubDefault::from_state(state.clone(), StubForwarder::new(StubMode::Async));
    let f = fused.call_fused(request(None));
    let fused_size = std::mem::size_of_val(&f);
    let layered = layered_default_with(state, StubForwarder::new(StubMode::Async));
    let l = layered.oneshot(request(None));
    let layered_size = std::mem::size_of_val(&l);
    println!("size_of fused future: {fused_size} B; layered future (oneshot, as hyper-util serves it): {layered_size} B");
    assert!(fused_size > 0 && layered_size > 0);
}

// ===== a user stage reading compiled data =====

/// Cluster data compiled from `"Metadata": { "Tier": ... }`: the tier and a count of
/// the requests the stage saw on the cluster, carried across reloads.
#[derive(Debug)]
pub struct Tier {
    name: String,
    seen: Arc<std::sync::atomic::AtomicU64>,
}

impl fuseway::state::ClusterData for Tier {
    fn compile(
        cluster: &fuseway::state::ClusterSource<'_>,
        previous: Option<&Self>,
    ) -> Result<Option<Self>, fuseway::config::ConfigErrors> {
        Ok(cluster.config.metadata.get("Tier").map(|name| Tier {
            name: name.clone(),
            seen: previous.map_or_else(Default::default, |p| p.seen.clone()),
        }))
    }
}

/// Counts requests on clusters with a tier, reading the compiled data (no parsing of
/// `Metadata` per request); in place, as the built-in stages that keep the request's
/// type are.
#[derive(Debug, Default)]
pub struct TierStage;

impl<B> fuseway::stage::InPlace<fuseway::request::Routed<B>> for TierStage {
    fn on_request_in_place(
        &self,
        req: &mut fuseway::request::Routed<B>,
    ) -> Result<(), ProxyResponse> {
        if let Some(tier) = req.context.cluster().data::<Tier>() {
            tier.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}

impl<B> Stage<fuseway::request::Routed<B>> for TierStage {
    type Out = fuseway::request::Routed<B>;
    type State = ();

    fn on_request(
        &self,
        mut req: fuseway::request::Routed<B>,
    ) -> Result<(fuseway::request::Routed<B>, ()), ProxyResponse> {
        use fuseway::stage::InPlace;
        self.on_request_in_place(&mut req)?;
        Ok((req, ()))
    }
}

fuseway::default_pipeline! {
    /// The default stages and `TierStage` fused over the stub.
    struct StubWithTier(http::Request<http_body_util::Empty<bytes::Bytes>>) {
        after routing: #[in_place] tier: TierStage,
        => stub: fuseway::testing::StubForwarder,
    }
}

#[test]
fn a_user_stage_reads_compiled_cluster_data_without_allocating() {
    let config = CONFIG.replace(
        r#""LoadBalancingPolicy": "PowerOfTwoChoices","#,
        r#""LoadBalancingPolicy": "PowerOfTwoChoices", "Metadata": { "Tier": "gold" },"#,
    );
    assert!(config.contains("gold"));
    let policies = fuseway::policy::Policies::new().cluster_data::<Tier>();
    let state = Arc::new(
        ProxyState::with_policies(parse(&config, Format::Json).unwrap(), policies).unwrap(),
    );
    let mode = StubMode::Sync;
    let stub = stub_alone(&state, mode);
    let p = StubWithTier::from_state(state.clone(), TierStage, StubForwarder::new(mode));
    let counted = requests_through(None, |r| block_on(p.call_fused(r)).unwrap());
    assert_eq!(
        counted, stub,
        "the stage reading cluster data allocated beyond the stub"
    );
    let seen = |state: &ProxyState| {
        let snapshot = state.snapshot();
        let tier = snapshot
            .cluster("c")
            .unwrap()
            .data::<Tier>()
            .expect("compiled");
        assert_eq!(tier.name, "gold");
        tier.seen.load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(seen(&state), 100 + N as u64);
    // A reload compiles it again, handed the previous value: the count carries over,
    // and requests keep counting without allocating.
    state.update(parse(&config, Format::Json).unwrap()).unwrap();
    assert_eq!(seen(&state), 100 + N as u64);
    let counted = requests_through(None, |r| block_on(p.call_fused(r)).unwrap());
    assert_eq!(counted, stub, "after a reload");
    assert_eq!(seen(&state), 2 * (100 + N as u64));
}
