//! The [`Stage`] trait: a pipeline stage written once, used layered or fused.
//!
//! A stage has a synchronous [`on_request`](Stage::on_request) that passes a (possibly
//! transformed) request on or answers directly, and an
//! [`on_response`](Stage::on_response) that sees the [`ProxyResponse`] on the way
//! back. [`StageLayer`] turns a stage into a tower `Layer` for custom pipelines.
//!
//! ```
//! use fuseway::request::{ProxyResponse, Routed};
//! use fuseway::stage::{Stage, StageLayer};
//! use http::StatusCode;
//!
//! /// Answers 403 to requests without an `x-api-key` header; tags responses.
//! struct RequireKey;
//!
//! impl<B> Stage<Routed<B>> for RequireKey {
//!     type Out = Routed<B>;
//!     type State = ();
//!
//!     fn on_request(&self, req: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
//!         if req.request.headers().contains_key("x-api-key") {
//!             Ok((req, ()))
//!         } else {
//!             Err(ProxyResponse::status(StatusCode::FORBIDDEN))
//!         }
//!     }
//!
//!     fn on_response(&self, _: (), response: &mut ProxyResponse) {
//!         response.response.headers_mut().insert("x-checked", "1".parse().unwrap());
//!     }
//! }
//!
//! let layer = StageLayer::new(RequireKey);
//! # let _ = layer;
//! ```

mod future;
mod layer;

pub use future::ResponseFuture;
pub use layer::{StageLayer, StageService};

use crate::request::ProxyResponse;

/// One step of a proxy pipeline.
///
/// `In` is what the stage takes (`http::Request<B>`, [`Routed<B>`](crate::request::Routed),
/// [`Balanced<B>`](crate::request::Balanced), ...), `Out` what it passes on; the types
/// make a wrong stage order a compile error. `State` is whatever the stage needs to
/// keep from the request to the response (a guard, a flag); it is dropped without
/// `on_response` if the request is cancelled or a later stage panics, so guards in it
/// are always released.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a stage that takes `{In}`",
    label = "this stage cannot take `{In}`, the output of the stage before it",
    note = "stages are typed by what they take and give: routing takes `http::Request<B>` and gives `Routed<B>`, affinity and limits take and give `Routed<B>`, load balancing takes `Routed<B>` and gives `Balanced<B>`, passive health takes and gives `Balanced<B>`"
)]
pub trait Stage<In> {
    /// What the stage passes to the next one.
    type Out;
    /// What the stage keeps between request and response.
    type State;

    /// Pass the request on (with state for the way back), or answer it directly.
    // Both sides are large by design: requests and responses move by value, never boxed.
    #[allow(clippy::result_large_err)]
    fn on_request(&self, request: In) -> Result<(Self::Out, Self::State), ProxyResponse>;

    /// See (and possibly change) the response on its way back. Runs for responses
    /// from the next stages, including their early answers, but not for this
    /// stage's own early answer.
    fn on_response(&self, state: Self::State, response: &mut ProxyResponse) {
        let _ = (state, response);
    }
}

/// A [`Stage`] that keeps the request's type and runs on the request where it lies.
///
/// The fused pipeline calls [`on_request_in_place`](Self::on_request_in_place) for the
/// stages that have it — the built-in telemetry, affinity, limits and passive-health
/// stages, and a user stage marked `#[in_place]` in `fused_pipeline!` or
/// `default_pipeline!` — so the request is not moved into the stage and out of its
/// result (each move is a copy of a few hundred bytes). Write the stage's logic here
/// and let [`Stage::on_request`] call it: both forms share one implementation.
///
/// ```
/// use fuseway::request::{ProxyResponse, Routed};
/// use fuseway::stage::{InPlace, Stage};
///
/// /// Tags every routed request.
/// struct Tag;
///
/// impl<B> InPlace<Routed<B>> for Tag {
///     fn on_request_in_place(&self, req: &mut Routed<B>) -> Result<(), ProxyResponse> {
///         req.request.headers_mut().insert("x-tag", http::HeaderValue::from_static("1"));
///         Ok(())
///     }
/// }
///
/// impl<B> Stage<Routed<B>> for Tag {
///     type Out = Routed<B>;
///     type State = ();
///
///     fn on_request(&self, mut req: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
///         self.on_request_in_place(&mut req)?;
///         Ok((req, ()))
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is marked `#[in_place]` but does not implement `InPlace<{In}>`",
    label = "no `impl InPlace<{In}>` for this stage",
    note = "implement `fuseway::stage::InPlace` for the stage, or drop the `#[in_place]` marker to call its `on_request`"
)]
pub trait InPlace<In>: Stage<In, Out = In> {
    /// [`Stage::on_request`] on the request where it lies.
    #[allow(clippy::result_large_err)] // answers are responses, by value like on_request's
    fn on_request_in_place(&self, request: &mut In) -> Result<Self::State, ProxyResponse>;
}

/// A [`Stage`] that changes the request's type and decides from a reference to it.
///
/// The fused pipeline calls [`on_request_by_ref`](Self::on_request_by_ref) and then
/// [`into_out`](Self::into_out) for the stages that have them — the built-in routing and
/// load-balancing stages, and a user stage marked `#[by_ref]` — so the request moves
/// once (into the next type) instead of into the stage and out of its result. Let
/// [`Stage::on_request`] call the two.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is marked `#[by_ref]` but does not implement `ByRef<{In}>`",
    label = "no `impl ByRef<{In}>` for this stage",
    note = "implement `fuseway::stage::ByRef` for the stage, or drop the `#[by_ref]` marker to call its `on_request`"
)]
pub trait ByRef<In>: Stage<In> {
    /// What the stage decided, joined to the request to make its output.
    type Decision;

    /// The decision (and the state for the way back), or an answer.
    #[allow(clippy::result_large_err)] // answers are responses, by value like on_request's
    fn on_request_by_ref(
        &self,
        request: &In,
    ) -> Result<(Self::Decision, Self::State), ProxyResponse>;

    /// The stage's output: `request` with `decision` joined to it.
    fn into_out(request: In, decision: Self::Decision) -> Self::Out;
}

impl<In, S: Stage<In> + ?Sized> Stage<In> for std::sync::Arc<S> {
    type Out = S::Out;
    type State = S::State;

    fn on_request(&self, request: In) -> Result<(Self::Out, Self::State), ProxyResponse> {
        (**self).on_request(request)
    }

    fn on_response(&self, state: Self::State, response: &mut ProxyResponse) {
        (**self).on_response(state, response)
    }
}
