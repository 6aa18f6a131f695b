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
