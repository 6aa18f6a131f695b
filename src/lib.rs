//! fuseway: a reverse-proxy framework built from typed tower stages, fused into one
//! state machine.
//!
//! A request passes **telemetry -> routing -> session affinity -> limits -> load
//! balancing -> passive health -> forwarding**. Each stage is a [`Stage`](stage::Stage): a synchronous
//! `on_request` that passes a (possibly transformed) request on or answers it, and an
//! `on_response` that sees the [`ProxyResponse`](request::ProxyResponse) on the way
//! back. The request's type records how far it got — `http::Request<B>`, then
//! [`Routed<B>`](request::Routed), then [`Balanced<B>`](request::Balanced) — so stages
//! in the wrong order do not compile.
//!
//! # Three ways to use it
//!
//! - **The default pipeline, fused**: [`default_pipeline!`] (or the ready-made
//!   [`pipeline::FusedDefault`], which the `fuseway` binary serves), optionally with your
//!   own stages at named points.
//! - **Custom pipelines**: [`StageLayer`](stage::StageLayer) turns any stage into a tower
//!   `Layer`; mix them with any tower or tower-http layer in a `ServiceBuilder` and serve
//!   with [`ProxyService`](server::ProxyService).
//! - **New stages**: implement [`Stage`](stage::Stage) once; it works layered and fused.
//!   A stage that needs the time reads [`clock::now`]: one clock reading is shared by
//!   everything that happens at the same moment (a call, a poll; on the server's
//!   workers, the polls between two waits for events).
//!
//! # How fusion works
//!
//! A layered pipeline is a stack of services, each with its own future: `call` on the
//! outer layer calls the inner one, and each layer's future wraps the next. Served the
//! way hyper-util serves tower services, the stack is also cloned per request (one `Arc`
//! clone per layer) and driven through `Oneshot`.
//!
//! [`fused_pipeline!`] instead generates one struct holding all stages and one `call`
//! that runs every stage's `on_request` in sequence, then calls the terminal service
//! (the forwarder) — the only real await. The future is one
//! [`FusedFuture`](pipeline::FusedFuture): the terminal's future plus a tuple of every
//! stage's `State`. When the terminal's future completes, each stage's `on_response` runs
//! in reverse order. A stage that answers early ends the request there: the earlier
//! stages' `on_response` run at once and the future is ready. Nothing is boxed and
//! nothing is put into `http::Extensions`; the only per-request shared-state traffic is
//! one `Arc` clone of the pipeline and one of the configuration snapshot. Guards kept in
//! a stage's `State` (concurrency counters) are released by `Drop` on success, error,
//! cancellation and panic alike.
//!
//! Both macros go one step further for the stages that allow it: those that keep the
//! request's type and implement [`stage::InPlace`] are called on the request where it
//! lies, and those that change it and implement [`stage::ByRef`] on a reference (whose
//! decision `into_out` then joins to the request), instead of moving the request into
//! each stage and out of its result — each such move is a `memcpy` of a few hundred
//! bytes. The built-in stages implement them (telemetry, session affinity, limits and
//! passive health in place; routing and load balancing by reference) and
//! `default_pipeline!` uses them; a user stage opts in by implementing the trait and
//! marking its entry `#[in_place] name: Type` or `#[by_ref] name: Type`. Their
//! `Stage::on_request` wraps the same methods, so both forms run the same code; other
//! stages are called through [`Stage::on_request`](stage::Stage::on_request).
//!
//! Fused and layered forms are observably identical — same responses, cookies, counters
//! and passive-health records — which `tests/differential.rs` checks scenario by
//! scenario; `tests/pipeline_alloc.rs` asserts the fused default pipeline allocates
//! nothing per request. The compile cost of fusing is measured in docs/ARCHITECTURE.md.
//!
//! A type error between adjacent stages is one compile error at the offending stage that
//! names both types (pinned by trybuild UI tests in `macros/tests/ui`), e.g.:
//!
//! ```text
//! error[E0277]: `LoadBalancing` is not a stage that takes `http::Request<Incoming>`
//! ```
//!
//! and is not reported again where the wrong stage's output goes on: the macros emit the
//! pipeline generic over its stages — `struct Name<Stages = NameStages>`, `struct
//! NameStages<S0 = FirstStage, S1 = ..., T = Terminal>` (the defaults are the types you
//! listed, so `Name` and `NameStages` name your pipeline) and every impl that runs the
//! chain as `impl<S0, ..., T, I1, ...> ... where S0: Stage<Req, Out = I1>, ...` — and
//! your types meet the chain in one hidden function only, stage by stage.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

// Lets the macros' `::fuseway::...` paths resolve inside this crate too.
extern crate self as fuseway;

pub use fuseway_macros::{default_pipeline, fused_pipeline};

pub mod admin;
pub mod affinity;
pub mod balancing;
pub mod body;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
pub mod config;
pub mod forwarding;
mod fxhash;
pub mod health;
mod http1;
mod http2;
mod kept;
pub mod limits;
mod per_thread;
pub mod pipeline;
pub mod policy;
pub mod providers;
pub mod request;
pub mod routing;
pub mod server;
pub mod stage;
pub mod state;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transforms;

/// Items the macros' expansions refer to. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use http;
    pub use hyper;
    pub use tower_service;

    use crate::pipeline::Terminal;
    use crate::stage::{ByRef, InPlace, Stage};
    use std::marker::PhantomData;

    /// A fused pipeline's chain of types, followed stage by stage where the user's types
    /// meet it (the macros' `__check`): each step's input is known before its stage is
    /// asked to take it, so a stage that cannot is one error, at that stage, with
    /// [`Stage`]'s message; after it the chain's type is unknown and asks nothing more.
    #[derive(Debug)]
    pub struct Chain<In>(PhantomData<In>);

    impl<In> Chain<In> {
        /// A chain that starts with `In`.
        pub fn start() -> Self {
            Chain(PhantomData)
        }

        /// `stage` takes `In`.
        pub fn stage<S: Stage<In>>(self, _: &S) -> Chain<S::Out> {
            Chain(PhantomData)
        }

        /// `stage` takes `In` where it lies.
        pub fn in_place<S: InPlace<In>>(self, _: &S) -> Self {
            self
        }

        /// `stage` takes `In` by reference.
        pub fn by_ref<S: ByRef<In>>(self, _: &S) -> Chain<S::Out> {
            Chain(PhantomData)
        }

        /// `terminal` takes `In`.
        pub fn terminal<T: Terminal<In>>(self, _: &T) {}
    }

    /// The path the forwarder sends for a request path (`None`: unchanged). For the
    /// fuzz targets.
    pub fn forwarded_path(path: &str) -> Option<String> {
        crate::forwarding::path::normalize(path)
    }

    /// The forwarder's rewrite of `request` for the first destination of the cluster
    /// of `snapshot`'s first route: hop-by-hop rules, the route's transforms, the
    /// target and the destination's `Host`, as the forwarder does it before sending.
    /// For the fuzz targets.
    pub fn rewrite_for_destination<B: 'static>(
        request: &mut http::Request<B>,
        snapshot: std::sync::Arc<crate::state::Snapshot>,
    ) -> Result<(), crate::request::ForwardError> {
        let route = snapshot.routes().first().expect("a route");
        let cluster = route.cluster_index().expect("the route's cluster");
        let destinations = snapshot.clusters()[cluster].destinations().len();
        let version = snapshot.clusters()[cluster].http().version;
        let context = crate::request::RouteContext::new(
            snapshot,
            0,
            cluster,
            crate::request::Candidates::all(destinations),
        );
        let mut added = crate::forwarding::headers::Added::default();
        let shaped = crate::forwarding::outgoing(request, &context, 0, version, &mut added);
        added.move_into(request.headers_mut());
        shaped
    }

    /// The hop-by-hop removal applied to both directions. For the fuzz targets.
    pub fn remove_hop_by_hop(headers: &mut http::HeaderMap) {
        crate::forwarding::headers::remove_hop_by_hop(headers);
    }

    /// Decode a chunked body from `input`, fed to the decoder in pieces ending at
    /// `cuts` (offsets into `input`), then closed: the data and trailers, or the
    /// error. For the fuzz targets.
    pub fn decode_chunked(
        input: &[u8],
        cuts: &[usize],
    ) -> Result<(Vec<u8>, Option<http::HeaderMap>), &'static str> {
        crate::http1::decode_chunked_in_pieces(input, cuts)
    }
}
