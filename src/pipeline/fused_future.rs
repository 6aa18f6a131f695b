//! The one future type behind every fused pipeline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::body::ProxyBody;
use crate::request::ProxyResponse;

/// What `fused_pipeline!` generates for a pipeline: its stages, the terminal service's
/// future, and the tuple of per-stage states kept across the one await. Not meant to
/// be implemented by hand.
pub trait FusedPipeline: 'static {
    /// The struct holding the stages and the terminal service.
    type Stages;
    /// The terminal service's future.
    type Future: Future<Output = Result<ProxyResponse, Self::Error>>;
    /// The terminal service's error.
    type Error;
    /// Every stage's `State`, in order.
    type States;

    /// Run every stage's `on_response`, last stage first.
    fn on_responses(stages: &Self::Stages, states: Self::States, response: &mut ProxyResponse);
}

/// The terminal service of a fused pipeline: the [`Forwarder`](crate::forwarding::Forwarder),
/// a stub in tests, or any `hyper::service::Service` answering with a [`ProxyResponse`]
/// wrapped in [`HyperTerminal`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot end a pipeline that hands it `{In}`",
    label = "this terminal service does not take `{In}`, the output of the last stage",
    note = "the forwarder takes `Balanced<B>`: load balancing must come before it"
)]
pub trait Terminal<In> {
    /// The terminal's future.
    type Future: Future<Output = Result<ProxyResponse, Self::Error>>;
    /// The terminal's error.
    type Error;
    /// Handle the request.
    fn call_terminal(&self, request: In) -> Self::Future;
}

/// Makes any `hyper::service::Service<In, Response = ProxyResponse>` a [`Terminal`].
#[derive(Debug, Clone)]
pub struct HyperTerminal<S>(pub S);

impl<S, In> Terminal<In> for HyperTerminal<S>
where
    S: hyper::service::Service<In, Response = ProxyResponse>,
{
    type Future = S::Future;
    type Error = S::Error;

    fn call_terminal(&self, request: In) -> S::Future {
        self.0.call(request)
    }
}

pin_project! {
    /// The one future of a fused pipeline: the terminal service's future plus every
    /// stage's state; on completion each stage's `on_response` runs, last stage first.
    /// An early answer from a stage is a ready future.
    #[must_use = "futures do nothing unless polled"]
    pub struct FusedFuture<P: FusedPipeline> {
        #[pin]
        state: State<P>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<P: FusedPipeline> {
        Forwarding {
            #[pin]
            future: P::Future,
            stages: Arc<P::Stages>,
            states: Option<P::States>,
        },
        Answered {
            response: Option<ProxyResponse>,
        },
    }
}

impl<P: FusedPipeline> std::fmt::Debug for FusedFuture<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedFuture").finish_non_exhaustive()
    }
}

impl<P: FusedPipeline> FusedFuture<P> {
    /// Waiting on the terminal service.
    pub fn forwarding(future: P::Future, stages: Arc<P::Stages>, states: P::States) -> Self {
        FusedFuture {
            state: State::Forwarding {
                future,
                stages,
                states: Some(states),
            },
        }
    }

    /// A stage answered early.
    pub fn answered(response: ProxyResponse) -> Self {
        FusedFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }

    /// Poll to the pipeline's response, handed to `finish` where it lies: each layer a
    /// response (~430 bytes) is handed up through is a copy of it.
    #[inline]
    fn poll_with<R>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        finish: impl FnOnce(ProxyResponse) -> R,
    ) -> Poll<Result<R, P::Error>> {
        match self.project().state.project() {
            StateProj::Answered { response } => Poll::Ready(Ok(finish(
                response.take().expect("polled after completion"),
            ))),
            StateProj::Forwarding {
                future,
                stages,
                states,
            } => {
                let mut response = match std::task::ready!(future.poll(cx)) {
                    Ok(response) => response,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                let states = states.take().expect("polled after completion");
                P::on_responses(stages, states, &mut response);
                Poll::Ready(Ok(finish(response)))
            }
        }
    }
}

impl<P: FusedPipeline> Future for FusedFuture<P> {
    type Output = Result<ProxyResponse, P::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_with(cx, |response| response)
    }
}

pin_project! {
    /// A fused pipeline's future as a server serves it (the pipeline's
    /// `hyper::service::Service` future): the HTTP response of its [`FusedFuture`],
    /// taken out of the [`ProxyResponse`] where the future finishes it.
    #[must_use = "futures do nothing unless polled"]
    pub struct FusedResponse<P: FusedPipeline> {
        #[pin]
        inner: FusedFuture<P>,
    }
}

impl<P: FusedPipeline> FusedResponse<P> {
    /// Serve `inner`'s response.
    pub fn new(inner: FusedFuture<P>) -> Self {
        FusedResponse { inner }
    }
}

impl<P: FusedPipeline> std::fmt::Debug for FusedResponse<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedResponse").finish_non_exhaustive()
    }
}

impl<P: FusedPipeline> Future for FusedResponse<P> {
    type Output = Result<http::Response<ProxyBody>, P::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .inner
            .poll_with(cx, |response| response.response)
    }
}
