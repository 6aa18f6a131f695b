//! [`ProxyBody`]: the one concrete response body type of every pipeline; [`Incoming`]:
//! the one request body type.

mod incoming;

pub use incoming::Incoming;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use pin_project_lite::pin_project;
use tokio::time::Instant;

use crate::forwarding::pool::ResponseBody;
use crate::forwarding::progress::Progress;
use crate::forwarding::upgrade::Handoff;
use crate::forwarding::ExchangeGuard;
use crate::kept::Kept;
use crate::request::{ForwardError, ForwardErrorKind};
use crate::transforms::TrailerTransforms;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// A response body: streamed from a destination, fixed bytes, empty, or (for
    /// custom stages) any boxed body. The upstream form holds the exchange's
    /// concurrency counters until the body has been sent or dropped, and applies the
    /// cluster's activity timeout between chunks.
    ///
    /// 40 bytes: a response moves by value through every stage on its way out, so the
    /// state of a streamed body lives in a box its thread keeps for the next one.
    pub struct ProxyBody {
        #[pin]
        kind: Kind,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind {
        Empty,
        Full { data: Option<Bytes> },
        // In a box its thread keeps (see `ProxyBody`).
        Upstream { inner: Kept<Upstream> },
        // Boxed: upgrades are rare, and the handoff would double the body's size.
        Upgraded { handoff: Box<Handoff> },
        Boxed { #[pin] inner: UnsyncBoxBody<Bytes, BoxError> },
    }
}

crate::kept::kept_boxes!(Upstream, 256);

pin_project! {
    #[derive(Debug)]
    struct Upstream {
        body: ResponseBody,
        timeout: Duration,
        deadline: Option<Instant>,
        // When the destination must have sent the next frame: set when the body
        // first waits after a frame, on the exchange's timer.
        idle_by: Option<Instant>,
        guard: Option<ExchangeGuard>,
        // When the request body last moved (while it still streams to the destination):
        // the activity timeout counts progress in either direction.
        progress: Option<Arc<Progress>>,
        trailers: Option<TrailerTransforms>,
        // The destination's body failed: reported on the next poll, after the server
        // has flushed what it already had (see `poll_frame`).
        failed: Option<ForwardError>,
    }
}

impl std::fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("ProxyBody::Empty"),
            Kind::Full { data } => f.debug_tuple("ProxyBody::Full").field(data).finish(),
            Kind::Upstream { inner } => f.debug_tuple("ProxyBody::Upstream").field(inner).finish(),
            Kind::Upgraded { handoff } => {
                f.debug_tuple("ProxyBody::Upgraded").field(handoff).finish()
            }
            Kind::Boxed { .. } => f.write_str("ProxyBody::Boxed"),
        }
    }
}

impl From<Kind> for ProxyBody {
    fn from(kind: Kind) -> Self {
        ProxyBody { kind }
    }
}

impl Default for ProxyBody {
    fn default() -> Self {
        Kind::Empty.into()
    }
}

impl ProxyBody {
    /// An empty body.
    pub fn empty() -> Self {
        Kind::Empty.into()
    }

    /// A body of these bytes.
    pub fn full(data: impl Into<Bytes>) -> Self {
        let data = data.into();
        Kind::Full {
            data: (!data.is_empty()).then_some(data),
        }
        .into()
    }

    /// Any body, boxed (for custom stages that answer with their own body type).
    pub fn boxed<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        use http_body_util::BodyExt;
        Kind::Boxed {
            inner: body.map_err(Into::into).boxed_unsync(),
        }
        .into()
    }

    /// A body streamed from a destination, holding `guard` until it ends and failing
    /// with [`ForwardErrorKind::RequestTimedOut`] after `timeout` without a frame, or at
    /// `deadline`. While the request body still moves (`progress`), the wait restarts
    /// from its last movement, as YARP's activity timeout does.
    pub(crate) fn upstream(
        body: ResponseBody,
        timeout: Duration,
        deadline: Option<Instant>,
        progress: Option<Arc<Progress>>,
        mut guard: ExchangeGuard,
    ) -> Self {
        // An empty body is never polled: the exchange is over already.
        let guard = if body.is_end_stream() {
            guard.finish(Some(Ok(())));
            None
        } else {
            Some(guard)
        };
        Kind::Upstream {
            inner: Kept::new(Upstream {
                body,
                timeout,
                deadline,
                idle_by: None,
                guard,
                progress,
                trailers: None,
                failed: None,
            }),
        }
        .into()
    }

    /// The (empty) body of a `101 Switching Protocols`: holds the exchange until hyper
    /// has written the response head, then hands it to the upgraded connection's
    /// tunnel, which releases it when the tunnel closes.
    pub(crate) fn upgraded(handoff: Handoff) -> Self {
        Kind::Upgraded {
            handoff: Box::new(handoff),
        }
        .into()
    }

    /// Apply a route's response trailer transforms to this upstream body (to its
    /// trailers, or as trailers at its end); no effect on other bodies.
    pub(crate) fn set_trailer_transforms(&mut self, trailers: TrailerTransforms) {
        if let Kind::Upstream { inner } = &mut self.kind {
            inner.trailers = Some(trailers);
        }
    }

    /// The exchange this body belongs to, while it is streaming from a destination
    /// (or, for an upgrade, until the tunnel closes).
    pub(crate) fn exchange_mut(&mut self) -> Option<&mut ExchangeGuard> {
        match &mut self.kind {
            Kind::Upstream { inner } => inner.guard.as_mut(),
            Kind::Upgraded { handoff } => handoff.guard_mut(),
            _ => None,
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = ForwardError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ForwardError>>> {
        match self.project().kind.project() {
            KindProj::Empty | KindProj::Upgraded { .. } => Poll::Ready(None),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Upstream { inner } => Pin::new(&mut **inner).poll_frame(cx),
            KindProj::Boxed { inner } => inner
                .poll_frame(cx)
                .map_err(|e| ForwardError::new(ForwardErrorKind::ResponseBodyDestination, e)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty | Kind::Upgraded { .. } => true,
            Kind::Full { data } => data.is_none(),
            Kind::Upstream { inner } => {
                inner.body.is_end_stream() && !inner.trailers.as_ref().is_some_and(|t| t.pending())
            }
            Kind::Boxed { inner } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty | Kind::Upgraded { .. } => SizeHint::with_exact(0),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Upstream { inner } => inner.body.size_hint(),
            Kind::Boxed { inner } => inner.size_hint(),
        }
    }
}

fn next_deadline(timeout: Duration, deadline: Option<Instant>) -> Instant {
    let idle = crate::clock::now() + timeout;
    deadline.map_or(idle, |d| d.min(idle))
}

impl Upstream {
    fn finish(
        guard: &mut Option<ExchangeGuard>,
        progress: Option<&Arc<Progress>>,
        result: Result<(), ForwardErrorKind>,
    ) {
        if let Some(mut g) = guard.take() {
            g.finish_sent(Some(result), progress.map_or(0, |p| p.bytes()));
        }
    }

    fn fail(
        guard: &mut Option<ExchangeGuard>,
        progress: Option<&Arc<Progress>>,
        error: &ForwardError,
    ) {
        if let Some(g) = guard {
            g.log_body_failure(error);
        }
        Self::finish(guard, progress, Err(error.kind()));
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ForwardError>>> {
        let this = self.project();
        if let Some(error) = this.failed.take() {
            return Poll::Ready(Some(Err(error)));
        }
        let exchange = this.guard.as_mut().and_then(ExchangeGuard::exchange_mut);
        match this.body.poll_frame(exchange, cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                if let (Some(t), Some(trailers)) = (this.trailers.as_mut(), frame.trailers_mut()) {
                    t.apply(trailers);
                }
                if let (Some(g), Some(data)) = (this.guard.as_mut(), frame.data_ref()) {
                    g.response_bytes += data.len() as u64;
                }
                if this.body.is_end_stream() {
                    Self::finish(this.guard, this.progress.as_ref(), Ok(()));
                }
                *this.idle_by = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let error = ForwardError::new(ForwardErrorKind::ResponseBodyDestination, e);
                Self::fail(this.guard, this.progress.as_ref(), &error);
                // The failure often arrives in the same poll as the head and the last
                // data (the connection is driven from here): an error now would make
                // the server drop them unsent. Yield once so that it flushes
                // everything the destination sent, then abort.
                *this.failed = Some(error);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(None) => {
                Self::finish(this.guard, this.progress.as_ref(), Ok(()));
                match this.trailers.as_mut().and_then(TrailerTransforms::at_end) {
                    Some(trailers) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                    None => Poll::Ready(None),
                }
            }
            Poll::Pending => {
                let Some(guard) = this.guard.as_mut() else {
                    return Poll::Pending;
                };
                loop {
                    let idle_by = *this
                        .idle_by
                        .get_or_insert_with(|| next_deadline(*this.timeout, *this.deadline));
                    ready!(guard.poll_deadline(cx, idle_by));
                    // The request body moved since: the wait restarts from its last
                    // movement (never past the route's deadline).
                    let moved = this.progress.as_ref().map(|p| {
                        let moved = p.last() + *this.timeout;
                        this.deadline.map_or(moved, |d| d.min(moved))
                    });
                    match moved {
                        Some(next) if next > idle_by => *this.idle_by = Some(next),
                        _ => break,
                    }
                }
                let error = ForwardError::kind_only(ForwardErrorKind::RequestTimedOut);
                Self::fail(this.guard, this.progress.as_ref(), &error);
                Poll::Ready(Some(Err(error)))
            }
        }
    }
}
