//! Fused and layered are observably identical.
//!
//! Every scenario runs twice against fresh real backends on 127.0.0.1: once through the
//! fused pipeline (`default_pipeline!`) and once through the same stages as separate
//! tower layers. Status, headers, body, cookies, the backend reached, the concurrency
//! counters and the passive-health records must be the same; some are also checked
//! against what they must be.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fuseway::balancing::LoadBalancing;
use fuseway::config::{parse, Format};
use fuseway::request::{Balanced, ProxyResponse};
use fuseway::server::{ProxyService, Server};
use fuseway::stage::{Stage, StageService};
use fuseway::state::ProxyState;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

// ===== user stages =====

/// After load balancing: `x-reassign: <destination id>` moves the request there,
/// `x-reassign-cluster: <cluster id>` to that cluster (whose policy chooses again);
/// `x-panic` panics.
#[derive(Debug, Default)]
pub struct Chaos;

/// Cluster data compiled from `"Metadata": { "Note": ... }`: `Chaos` answers with it
/// in `x-note`.
#[derive(Debug)]
pub struct Note(http::HeaderValue);

impl fuseway::state::ClusterData for Note {
    fn compile(
        cluster: &fuseway::state::ClusterSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, fuseway::config::ConfigErrors> {
        cluster
            .config
            .metadata
            .get("Note")
            .map(|note| {
                http::HeaderValue::from_str(note).map(Note).map_err(|_| {
                    fuseway::config::ConfigError::new(
                        format!("{}.Metadata.Note", cluster.path),
                        "not a header value",
                    )
                    .into()
                })
            })
            .transpose()
    }
}

impl<B> Stage<Balanced<B>> for Chaos {
    type Out = Balanced<B>;
    type State = Option<http::HeaderValue>;

    fn on_request(
        &self,
        mut req: Balanced<B>,
    ) -> Result<(Balanced<B>, Self::State), ProxyResponse> {
        if req.request.headers().contains_key("x-panic") {
            panic!("chaos stage asked to panic");
        }
        if let Some(to) = req.request.headers().get("x-reassign") {
            let to = to.to_str().unwrap().to_owned();
            assert!(req.reassign_destination(&to), "no destination {to}");
        }
        if let Some(to) = req.request.headers().get("x-reassign-cluster") {
            let to = to.to_str().unwrap().to_owned();
            assert!(req.context.reassign_cluster(&to), "no cluster {to}");
        }
        let note = req.context.cluster().data::<Note>().map(|n| n.0.clone());
        Ok((req, note))
    }

    fn on_response(&self, note: Self::State, response: &mut ProxyResponse) {
        if let Some(note) = note {
            response.response.headers_mut().insert("x-note", note);
        }
    }
}

fuseway::default_pipeline! {
    /// The default stages with `Chaos` after load balancing.
    pub struct FusedChaos {
        after balancing: chaos: Chaos,
    }
}

type LayeredChaos = StageService<
    fuseway::routing::Routing,
    StageService<
        fuseway::affinity::SessionAffinity,
        StageService<
            fuseway::limits::Limits,
            StageService<
                LoadBalancing,
                StageService<
                    Chaos,
                    StageService<
                        fuseway::health::PassiveHealth,
                        fuseway::forwarding::Forwarder<fuseway::body::Incoming>,
                    >,
                >,
            >,
        >,
    >,
>;

fn layered_chaos(state: Arc<ProxyState>) -> LayeredChaos {
    StageService::new(
        fuseway::routing::Routing::new(state),
        StageService::new(
            fuseway::affinity::SessionAffinity::new(),
            StageService::new(
                fuseway::limits::Limits::new(),
                StageService::new(
                    LoadBalancing::new(),
                    StageService::new(
                        Chaos,
                        StageService::new(
                            fuseway::health::PassiveHealth::new(),
                            fuseway::forwarding::Forwarder::new(),
                        ),
                    ),
                ),
            ),
        ),
    )
}

// ===== the world of one run =====

struct World {
    proxy: std::net::SocketAddr,
    state: Arc<ProxyState>,
    stop: Option<oneshot::Sender<()>>,
    _backends: Vec<Backend>,
    slow_started: mpsc::Receiver<()>,
}

fn named(
    name: &'static str,
) -> impl Fn(Request<Incoming>) -> std::future::Ready<Response<TestBody>> + Clone {
    move |req: Request<Incoming>| {
        let status = if req.uri().path().ends_with("/fail") {
            500
        } else {
            200
        };
        std::future::ready(
            Response::builder()
                .status(status)
                .header("x-backend", name)
                .body(full(format!("{name} {}", req.uri().path())))
                .unwrap(),
        )
    }
}

async fn world(fused: bool) -> World {
    let d1 = backend(named("d1")).await;
    let d2 = backend(named("d2")).await;
    let (slow_tx, slow_started) = mpsc::channel::<()>(4);
    let slow = backend(move |_req: Request<Incoming>| {
        let slow_tx = slow_tx.clone();
        async move {
            slow_tx.send(()).await.ok();
            std::future::pending::<()>().await;
            unreachable!()
        }
    })
    .await;
    let refused = Refused::bind();
    let dead = refused.addr;
    let passive = r#""HealthCheck": { "Passive": { "Enabled": true } }"#;
    let config = format!(
        r#"{{
  "Routes": {{
    "main": {{ "ClusterId": "main", "Match": {{ "Path": "/a/{{**rest}}" }} }},
    "limited": {{ "ClusterId": "main", "Match": {{ "Path": "/limited" }},
                 "MaxRequestBodySize": 10, "RateLimit": {{ "PermitsPerSecond": 0.001, "Burst": 1 }} }},
    "dead": {{ "ClusterId": "dead", "Match": {{ "Path": "/dead" }} }},
    "empty": {{ "ClusterId": "empty", "Match": {{ "Path": "/empty" }} }},
    "slow": {{ "ClusterId": "slow", "Match": {{ "Path": "/slow" }} }}
  }},
  "Clusters": {{
    "main": {{
      "LoadBalancingPolicy": "FirstAlphabetical",
      "SessionAffinity": {{ "Enabled": true, "AffinityKeyName": "aff" }},
      {passive}, "Metadata": {{ "Note": "compiled at load" }},
      "Destinations": {{ "d1": {{ "Address": "{}" }}, "d2": {{ "Address": "{}" }} }}
    }},
    "dead": {{ {passive}, "Destinations": {{ "x": {{ "Address": "http://{dead}" }} }} }},
    "empty": {{ "Destinations": {{}} }},
    "slow": {{ {passive}, "Destinations": {{ "s": {{ "Address": "{}" }} }} }}
  }}
}}"#,
        d1.url(),
        d2.url(),
        slow.url()
    );
    let policies = fuseway::policy::Policies::new().cluster_data::<Note>();
    let state = Arc::new(
        ProxyState::with_policies(parse(&config, Format::Json).unwrap(), policies).unwrap(),
    );
    let server = Server::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    let proxy = server.local_addrs()[0];
    let (stop, stopped) = oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    if fused {
        let svc = FusedChaos::from_state(state.clone(), Chaos);
        tokio::spawn(server.serve(svc, stopped));
    } else {
        let svc = ProxyService::new(layered_chaos(state.clone()));
        tokio::spawn(server.serve(svc, stopped));
    }
    World {
        proxy,
        state,
        stop: Some(stop),
        _backends: vec![d1, d2, slow],
        slow_started,
    }
}

/// Everything observable after a scenario.
#[derive(Debug, PartialEq)]
struct Observed {
    responses: Vec<(u16, BTreeMap<String, String>, String)>,
    /// (cluster/destination, in flight, passive (failed, total))
    destinations: Vec<(String, usize, (u64, u64))>,
}

impl World {
    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.proxy, path)
    }

    async fn observe(&self, responses: Vec<reqwest::Response>) -> Observed {
        let mut out = Vec::new();
        for r in responses {
            let status = r.status().as_u16();
            let headers = r
                .headers()
                .iter()
                .filter(|(n, _)| *n != "date")
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                .collect();
            out.push((status, headers, r.text().await.unwrap()));
        }
        // Counters return to zero once the server has finished with the bodies.
        within("every counter back to 0", async {
            loop {
                let snap = self.state.snapshot();
                let busy = snap
                    .clusters()
                    .iter()
                    .flat_map(|c| c.destinations())
                    .any(|d| d.state().concurrent_requests() != 0);
                if !busy {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let snap = self.state.snapshot();
        let destinations = snap
            .clusters()
            .iter()
            .flat_map(|c| {
                c.destinations().iter().map(move |d| {
                    (
                        format!("{}/{}", c.id(), d.id()),
                        d.state().concurrent_requests(),
                        d.state().health().passive_counts(),
                    )
                })
            })
            .collect();
        Observed {
            responses: out,
            destinations,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Run `scenario` against both forms and require identical observations.
async fn both<F, Fut>(scenario: F) -> Observed
where
    F: Fn(World) -> Fut,
    Fut: std::future::Future<Output = (World, Vec<reqwest::Response>)>,
{
    let (fused, responses) = scenario(world(true).await).await;
    let fused_seen = fused.observe(responses).await;
    fused.stop().await;
    let (layered, responses) = scenario(world(false).await).await;
    let layered_seen = layered.observe(responses).await;
    layered.stop().await;
    assert_eq!(fused_seen, layered_seen, "fused and layered differ");
    fused_seen
}

fn passive(seen: &Observed, dest: &str) -> (u64, u64) {
    seen.destinations
        .iter()
        .find(|(d, ..)| d == dest)
        .unwrap()
        .2
}

// ===== scenarios =====

#[tokio::test]
async fn success_and_affinity_miss_hit_redistribute() {
    let seen = both(|w| async move {
        let c = h1_client();
        let first = c.get(w.url("/a/x")).send().await.unwrap();
        let cookie = first.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let hit = c
            .get(w.url("/a/y"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        let stale = c
            .get(w.url("/a/z"))
            .header("cookie", "aff=0000000000000000")
            .send()
            .await
            .unwrap();
        (w, vec![first, hit, stale])
    })
    .await;
    let [first, hit, stale] = &seen.responses[..] else {
        panic!()
    };
    assert_eq!((first.0, first.2.as_str()), (200, "d1 /a/x"));
    assert_eq!(
        first.1["x-note"], "compiled at load",
        "the cluster's compiled data"
    );
    assert!(first.1.contains_key("set-cookie"), "miss: key written");
    assert_eq!(hit.0, 200);
    assert!(!hit.1.contains_key("set-cookie"), "hit: no new key");
    assert!(stale.1.contains_key("set-cookie"), "redistributed: new key");
    assert_eq!(
        passive(&seen, "main/d1"),
        (0, 3),
        "each forwarded request recorded once"
    );
}

#[tokio::test]
async fn not_found_and_no_destination() {
    let seen = both(|w| async move {
        let c = h1_client();
        let a = c.get(w.url("/nowhere")).send().await.unwrap();
        let b = c.get(w.url("/empty")).send().await.unwrap();
        (w, vec![a, b])
    })
    .await;
    assert_eq!(seen.responses[0].0, 404);
    assert_eq!(seen.responses[1].0, 503);
    assert!(seen
        .destinations
        .iter()
        .all(|(_, inflight, p)| *inflight == 0 && *p == (0, 0)));
}

#[tokio::test]
async fn connect_failure_is_recorded_once_as_a_failure() {
    let seen = both(|w| async move {
        let r = h1_client().get(w.url("/dead")).send().await.unwrap();
        (w, vec![r])
    })
    .await;
    assert_eq!(seen.responses[0].0, 502);
    assert_eq!(passive(&seen, "dead/x"), (1, 1));
}

#[tokio::test]
async fn server_error_is_not_a_transport_failure() {
    let seen = both(|w| async move {
        let r = h1_client().get(w.url("/a/fail")).send().await.unwrap();
        (w, vec![r])
    })
    .await;
    assert_eq!(seen.responses[0].0, 500);
    assert_eq!(passive(&seen, "main/d1"), (0, 1));
}

#[tokio::test]
async fn client_cancellation_counts_never_as_a_failure() {
    let seen = both(|mut w| async move {
        let mut s = tokio::net::TcpStream::connect(w.proxy).await.unwrap();
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        within("the slow backend to start", w.slow_started.recv())
            .await
            .unwrap();
        drop(s);
        // Recorded once the proxy has seen the client go (after the counters).
        within("the cancellation to be recorded", async {
            loop {
                let snap = w.state.snapshot();
                let (_, d) = snap.cluster("slow").unwrap().destination("s").unwrap();
                if d.state().health().passive_counts().1 > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        (w, vec![])
    })
    .await;
    // In the window's total, not a failure (YARP's `RequestCanceled`).
    assert_eq!(passive(&seen, "slow/s"), (0, 1));
}

#[tokio::test]
async fn panicking_stage_answers_500_records_nothing_and_the_server_keeps_serving() {
    let seen = both(|w| async move {
        let c = h1_client();
        let boom = c
            .get(w.url("/a/x"))
            .header("x-panic", "1")
            .send()
            .await
            .unwrap();
        let after = c.get(w.url("/a/x")).send().await.unwrap();
        (w, vec![boom, after])
    })
    .await;
    assert_eq!(seen.responses[0].0, 500);
    assert_eq!(seen.responses[1].0, 200);
    assert_eq!(
        passive(&seen, "main/d1"),
        (0, 1),
        "only the second request is recorded"
    );
}

#[tokio::test]
async fn reassigned_destination_is_the_one_recorded() {
    let seen = both(|w| async move {
        let r = h1_client()
            .get(w.url("/a/x"))
            .header("x-reassign", "d2")
            .send()
            .await
            .unwrap();
        (w, vec![r])
    })
    .await;
    assert_eq!(seen.responses[0].2, "d2 /a/x");
    assert_eq!(passive(&seen, "main/d2"), (0, 1));
    assert_eq!(passive(&seen, "main/d1"), (0, 0));
}

/// A cluster reassigned after load balancing chooses its own destination: the index
/// chosen in the first cluster (d2, the second) does not exist in `dead` (one).
#[tokio::test]
async fn a_cluster_reassigned_after_balancing_chooses_again() {
    let seen = both(|w| async move {
        let r = h1_client()
            .get(w.url("/a/x"))
            .header("x-reassign", "d2")
            .header("x-reassign-cluster", "dead")
            .send()
            .await
            .unwrap();
        (w, vec![r])
    })
    .await;
    assert_eq!(seen.responses[0].0, 502, "{:?}", seen.responses[0]);
    assert_eq!(passive(&seen, "dead/x"), (1, 1));
    assert_eq!(passive(&seen, "main/d2"), (0, 0));
}

#[tokio::test]
async fn limits_rejections() {
    let seen = both(|w| async move {
        let c = h1_client();
        let too_big = c
            .post(w.url("/limited"))
            .body("0123456789abc")
            .send()
            .await
            .unwrap();
        let ok = c
            .post(w.url("/limited"))
            .body("small")
            .send()
            .await
            .unwrap();
        let limited = c
            .post(w.url("/limited"))
            .body("small")
            .send()
            .await
            .unwrap();
        (w, vec![too_big, ok, limited])
    })
    .await;
    let statuses: Vec<u16> = seen.responses.iter().map(|r| r.0).collect();
    assert_eq!(statuses, [413, 200, 429]);
    assert_eq!(passive(&seen, "main/d1"), (0, 1));
}
