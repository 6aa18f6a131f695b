use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Version;
use hyper_util::client::legacy;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::{headers, ExchangeGuard};
use crate::body::ProxyBody;
use crate::request::{ForwardError, ForwardErrorKind, Outcome, ProxyResponse, RouteContext};
use crate::state::DestinationState;

pin_project! {
    /// The forwarder's future: waits for the destination's response headers within
    /// the activity timeout, then hands the streamed body to the client.
    pub struct ResponseFuture {
        #[pin]
        timeout: Sleep,
        state: State,
        context: RouteContext,
        destination: Arc<DestinationState>,
    }
}

enum State {
    Sending {
        future: legacy::ResponseFuture,
        guard: ExchangeGuard,
        activity_timeout: Duration,
        client_version: Version,
    },
    Failed(Option<ForwardError>),
    Done,
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("forwarding::ResponseFuture")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl ResponseFuture {
    pub(super) fn sending(
        future: legacy::ResponseFuture,
        guard: ExchangeGuard,
        context: RouteContext,
        destination: Arc<DestinationState>,
        activity_timeout: Duration,
        client_version: Version,
    ) -> Self {
        ResponseFuture {
            timeout: tokio::time::sleep(activity_timeout),
            state: State::Sending {
                future,
                guard,
                activity_timeout,
                client_version,
            },
            context,
            destination,
        }
    }

    pub(super) fn failed(
        error: ForwardError,
        context: RouteContext,
        destination: Arc<DestinationState>,
    ) -> Self {
        ResponseFuture {
            timeout: tokio::time::sleep(Duration::ZERO),
            state: State::Failed(Some(error)),
            context,
            destination,
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<ProxyResponse, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let error = match this.state {
            State::Sending { future, .. } => match Pin::new(future).poll(cx) {
                Poll::Ready(Ok(response)) => {
                    let State::Sending {
                        guard,
                        activity_timeout,
                        client_version,
                        ..
                    } = std::mem::replace(this.state, State::Done)
                    else {
                        unreachable!()
                    };
                    let (mut parts, body) = response.into_parts();
                    headers::remove_hop_by_hop(&mut parts.headers);
                    parts.version = client_version;
                    let body = ProxyBody::upstream(body, activity_timeout, guard);
                    return Poll::Ready(Ok(ProxyResponse {
                        response: http::Response::from_parts(parts, body),
                        outcome: Outcome {
                            destination: Some(this.destination.clone()),
                            error: None,
                        },
                    }));
                }
                Poll::Ready(Err(e)) => ForwardError::new(classify(&e), e),
                Poll::Pending => match this.timeout.poll(cx) {
                    Poll::Ready(()) => ForwardError::kind_only(ForwardErrorKind::RequestTimedOut),
                    Poll::Pending => return Poll::Pending,
                },
            },
            State::Failed(e) => e.take().expect("polled after completion"),
            State::Done => panic!("forwarding::ResponseFuture polled after completion"),
        };
        *this.state = State::Done;
        tracing::warn!(
            route = this.context.route().id(),
            cluster = this.destination.cluster_id(),
            destination = this.destination.id(),
            status = error.kind().status().as_u16(),
            error = %error,
            "forwarding failed"
        );
        Poll::Ready(Ok(ProxyResponse::error(
            error,
            Some(this.destination.clone()),
        )))
    }
}

/// YARP's error kind for a client error: a failure to read the client's request body
/// is the client's fault (400), everything else the destination's (502).
fn classify(error: &legacy::Error) -> ForwardErrorKind {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_user() {
                return ForwardErrorKind::RequestBodyClient;
            }
        }
        source = e.source();
    }
    ForwardErrorKind::Request
}
