use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;

use super::Stage;
use crate::request::ProxyResponse;

pin_project! {
    /// The future of a [`StageService`](super::StageService): either the stage's own
    /// answer, or the inner future with the stage's state kept for `on_response`.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<In, S: Stage<In>, F> {
        #[pin]
        kind: Kind<S, S::State, F>,
        _in: PhantomData<fn() -> In>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, St, F> {
        Answered { response: Option<ProxyResponse> },
        Forwarding { #[pin] future: F, stage: Arc<S>, state: Option<St> },
    }
}

impl<In, S: Stage<In>, F> std::fmt::Debug for ResponseFuture<In, S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<In, S: Stage<In>, F> ResponseFuture<In, S, F> {
    pub(super) fn answered(response: ProxyResponse) -> Self {
        ResponseFuture {
            kind: Kind::Answered {
                response: Some(response),
            },
            _in: PhantomData,
        }
    }

    pub(super) fn forwarding(future: F, stage: Arc<S>, state: S::State) -> Self {
        ResponseFuture {
            kind: Kind::Forwarding {
                future,
                stage,
                state: Some(state),
            },
            _in: PhantomData,
        }
    }
}

impl<In, S, F, E> Future for ResponseFuture<In, S, F>
where
    S: Stage<In>,
    F: Future<Output = Result<ProxyResponse, E>>,
{
    type Output = Result<ProxyResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Answered { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
            KindProj::Forwarding {
                future,
                stage,
                state,
            } => {
                let mut response = ready!(future.poll(cx))?;
                let state = state.take().expect("polled after completion");
                stage.on_response(state, &mut response);
                Poll::Ready(Ok(response))
            }
        }
    }
}
