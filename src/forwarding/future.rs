use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Version;
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::expect::Gate;
use super::pool::BoxExchange;
use super::progress::Progress;
use super::request_body::{BodyTooLarge, ClientBodyError};
use super::upgrade::{self, ClientUpgrade};
use super::{headers, ExchangeGuard};
use crate::body::ProxyBody;
use crate::health::PassiveRecord;
use crate::request::{ForwardError, ForwardErrorKind, Outcome, ProxyResponse, RouteContext};

pin_project! {
    /// The forwarder's future: waits for the destination's response headers within
    /// the activity timeout, then hands the streamed body to the client.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture {
        // The response head must have arrived by then (on the exchange's timer).
        headers_by: Instant,
        state: State,
        target: Option<(RouteContext, usize)>,
    }
    impl PinnedDrop for ResponseFuture {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Dropped while waiting for the response head: the client cancelled the
            // request. The counters go first, then passive health counts it (a
            // non-failure) if its stage saw the request.
            if matches!(this.state, State::Sending { .. }) {
                *this.state = State::Done;
                if let Some((context, destination)) = this.target.take() {
                    if context.passive_armed() && !std::thread::panicking() {
                        PassiveRecord::cancelled(context.cluster(), destination);
                    }
                }
            }
        }
    }
}

// `Sending` is the state a request lives in; boxing it would cost an allocation per
// request to save bytes in the short-lived `Failed`/`Done` states.
#[allow(clippy::large_enum_variant)]
enum State {
    Sending {
        upstream: BoxExchange,
        guard: ExchangeGuard,
        activity_timeout: Duration,
        client_version: Version,
        exchange: Exchange,
    },
    Failed(Option<ForwardError>),
    Done,
}

/// What the forwarder's future needs beyond the response: the client's side of an
/// upgrade request, and the gate of a held-back `Expect: 100-continue` body.
#[derive(Debug, Default)]
pub(super) struct Exchange {
    pub(super) upgrade: Option<Box<ClientUpgrade>>,
    pub(super) gate: Option<Arc<Gate>>,
    /// When the request body last moved: the wait for the response head restarts
    /// from there (YARP's activity timeout counts progress in either direction).
    pub(super) progress: Option<Arc<Progress>>,
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("forwarding::ResponseFuture")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ResponseFuture {
    pub(super) fn sending(
        upstream: BoxExchange,
        guard: ExchangeGuard,
        context: RouteContext,
        destination: usize,
        activity_timeout: Duration,
        client_version: Version,
        exchange: Exchange,
    ) -> Self {
        let idle = crate::clock::now() + activity_timeout;
        let headers_by = context.limits().deadline.map_or(idle, |d| d.min(idle));
        ResponseFuture {
            headers_by,
            state: State::Sending {
                upstream,
                guard,
                activity_timeout,
                client_version,
                exchange,
            },
            target: Some((context, destination)),
        }
    }

    pub(super) fn failed(error: ForwardError, context: RouteContext, destination: usize) -> Self {
        ResponseFuture {
            headers_by: Instant::now(),
            state: State::Failed(Some(error)),
            target: Some((context, destination)),
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<ProxyResponse, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let error = match this.state {
            State::Sending {
                upstream,
                activity_timeout,
                exchange,
                ..
            } => match upstream.as_mut().poll_response(cx) {
                Poll::Ready(Ok(mut response)) => {
                    let State::Sending {
                        upstream,
                        mut guard,
                        activity_timeout,
                        client_version,
                        exchange,
                        ..
                    } = std::mem::replace(this.state, State::Done)
                    else {
                        unreachable!()
                    };
                    guard.attach(upstream);
                    if let Some(closer) = exchange.gate.as_ref().and_then(|g| g.final_response()) {
                        // Answered before `100 Continue`: the body stays unsent.
                        guard.close_on_finish(closer);
                    }
                    let switching = response.status() == http::StatusCode::SWITCHING_PROTOCOLS;
                    match (switching, exchange.upgrade) {
                        // An HTTP/2 client would take a 2xx to its CONNECT as the
                        // tunnel being open.
                        (false, Some(ref client))
                            if client.is_extended_connect() && response.status().is_success() =>
                        {
                            std::hint::cold_path();
                            ForwardError::new(
                                ForwardErrorKind::Request,
                                "the destination accepted an extended CONNECT without switching protocols",
                            )
                        }
                        (false, _) => {
                            let (mut parts, body) = response.into_parts();
                            headers::prepare_response(&mut parts.headers);
                            parts.version = client_version;
                            let (context, destination) = this.target.take().expect("target");
                            let transforms = context.route().transforms();
                            transforms.apply_response(&mut parts.headers, parts.status, true);
                            let trailers = transforms.trailers_for(parts.status);
                            let deadline = context.limits().deadline;
                            let mut body = ProxyBody::upstream(
                                body,
                                activity_timeout,
                                deadline,
                                exchange.progress,
                                guard,
                            );
                            if let Some(trailers) = trailers {
                                std::hint::cold_path();
                                body.set_trailer_transforms(trailers);
                            }
                            return Poll::Ready(Ok(respond(parts, body, context, destination)));
                        }
                        (true, Some(client)) => {
                            std::hint::cold_path();
                            match client.take_slot() {
                                // As Kestrel's `UpgradeAsync` under YARP: the
                                // destination's connection closes (the response
                                // dropped), the client is answered 502.
                                Err(limit) => ForwardError::new(
                                    ForwardErrorKind::UpgradeResponseClient,
                                    format!(
                                        "the server's {limit} upgraded connections \
                                         (MaxConcurrentUpgradedConnections) are open"
                                    ),
                                ),
                                Ok(slot) => {
                                    let upstream = hyper::upgrade::on(&mut response);
                                    let (mut parts, _) = response.into_parts();
                                    client.response_head(&mut parts);
                                    parts.version = client_version;
                                    let (context, destination) =
                                        this.target.take().expect("target");
                                    let handoff = upgrade::spawn_tunnel(
                                        *client,
                                        upstream,
                                        guard,
                                        activity_timeout,
                                        (context.clone(), destination),
                                        slot,
                                    );
                                    let body = ProxyBody::upgraded(handoff);
                                    return Poll::Ready(Ok(respond(
                                        parts,
                                        body,
                                        context,
                                        destination,
                                    )));
                                }
                            }
                        }
                        (true, None) => {
                            std::hint::cold_path();
                            ForwardError::new(
                                ForwardErrorKind::Request,
                                "the destination switched protocols on a request that asked for no upgrade",
                            )
                        }
                    }
                }
                Poll::Ready(Err(e)) => {
                    std::hint::cold_path();
                    ForwardError::new(classify(&*e), e)
                }
                Poll::Pending => loop {
                    if upstream
                        .as_mut()
                        .poll_deadline(cx, *this.headers_by)
                        .is_pending()
                    {
                        return Poll::Pending;
                    }
                    std::hint::cold_path();
                    // The body moved since the deadline was set: the activity timeout
                    // restarts from its last movement (never past the route's `Timeout`).
                    let route_deadline =
                        this.target.as_ref().and_then(|(c, _)| c.limits().deadline);
                    let moved = exchange
                        .progress
                        .as_ref()
                        .map(|p| p.last() + *activity_timeout);
                    match moved.map(|m| route_deadline.map_or(m, |d| d.min(m))) {
                        Some(next) if next > *this.headers_by => *this.headers_by = next,
                        _ => break ForwardError::kind_only(ForwardErrorKind::RequestTimedOut),
                    }
                },
            },
            State::Failed(e) => {
                std::hint::cold_path();
                e.take().expect("polled after completion")
            }
            State::Done => panic!("forwarding::ResponseFuture polled after completion"),
        };
        // Release the counters before anyone looks at the outcome.
        *this.state = State::Done;
        let (context, destination) = this.target.take().expect("target");
        let dest = &context.cluster().destinations()[destination];
        tracing::warn!(
            route = context.route().id(),
            cluster = context.cluster().id(),
            destination = dest.id(),
            status = error.kind().status().as_u16(),
            error = %error,
            "forwarding failed"
        );
        let mut response = ProxyResponse::error(error);
        let status = response.status_code();
        context
            .route()
            .transforms()
            .apply_response(response.response.headers_mut(), status, false);
        response.outcome.set_target(context, destination);
        Poll::Ready(Ok(response))
    }
}

fn respond(
    parts: http::response::Parts,
    body: ProxyBody,
    context: RouteContext,
    destination: usize,
) -> ProxyResponse {
    let mut outcome = Outcome::default();
    outcome.set_target(context, destination);
    ProxyResponse {
        response: http::Response::from_parts(parts, body),
        outcome,
    }
}

/// YARP's error kind for a send failure: the request body over the route's limit is
/// 413, a failure reading the client's body is the client's fault (400), everything
/// else the destination's (502).
fn classify(error: &(dyn std::error::Error + 'static)) -> ForwardErrorKind {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<BodyTooLarge>() {
            return ForwardErrorKind::RequestBodyTooLarge;
        }
        if e.is::<ClientBodyError>() {
            return ForwardErrorKind::RequestBodyClient;
        }
        source = e.source();
    }
    ForwardErrorKind::Request
}
