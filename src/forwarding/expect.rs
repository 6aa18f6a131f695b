//! `Expect: 100-continue` towards HTTP/1.1 destinations.
//!
//! hyper's client sends a request body as soon as the head is written. For a request
//! carrying `Expect: 100-continue` the forwarder holds the body back instead, as .NET's
//! `HttpClient` and curl do: it is released when the destination answers
//! `100 Continue`, or after [`CONTINUE_TIMEOUT`] without any answer (destinations that
//! ignore the expectation). If the destination answers with a final status first, the
//! body is never sent: the client's body is never read, so hyper's server never sends
//! `100 Continue` to the client either, and the connection to the destination is
//! closed once that response has been relayed (its framing is broken without the body).

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::progress::Progress;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{header, Request};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::future::Future;

use tokio::time::Sleep;

type BoxError = Box<dyn StdError + Send + Sync>;

/// How long the body is held back waiting for `100 Continue` (.NET's and curl's 1 s).
pub const CONTINUE_TIMEOUT: Duration = Duration::from_secs(1);

const WAITING: u8 = 0;
const OPEN: u8 = 1;
const REJECTED: u8 = 2;
const CLOSED: u8 = 3;

/// The state of one held-back body, shared with the forwarder's future and hyper's
/// informational-response callback.
#[derive(Debug)]
pub(crate) struct Gate {
    state: AtomicU8,
    waker: AtomicWaker,
}

impl Gate {
    fn set(&self, from: u8, to: u8) -> bool {
        let changed = self
            .state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if changed {
            self.waker.wake();
        }
        changed
    }

    /// The destination answered `100 Continue`: the body goes.
    pub(crate) fn continued(&self) {
        self.set(WAITING, OPEN);
    }

    /// A final response arrived: if the body was still held back it is never sent,
    /// and the returned closer ends the connection to the destination when dropped
    /// (once the response has been relayed).
    pub(crate) fn final_response(self: &Arc<Self>) -> Option<Closer> {
        self.set(WAITING, REJECTED).then(|| Closer(self.clone()))
    }
}

/// In the request's extensions: the gate a native HTTP/1.1 exchange opens when the
/// destination answers `100 Continue` (hyper's client calls the callback set by
/// `hyper::ext::on_informational` instead).
#[derive(Debug, Clone)]
pub(crate) struct ContinueGate(pub(crate) Arc<Gate>);

/// Drop it to close the upstream connection of a rejected expectation.
#[derive(Debug)]
pub(crate) struct Closer(Arc<Gate>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.set(REJECTED, CLOSED);
    }
}

/// Hold back `request`'s body if it expects `100-continue` and has a body; returns the
/// gate the forwarder's future reports the final response to.
pub(crate) fn hold_back<B>(request: &mut Request<B>) -> Option<Arc<Gate>>
where
    B: Body,
{
    if request.body().is_end_stream() {
        return None;
    }
    let expects = super::headers::get_few(request.headers(), &header::EXPECT)
        .is_some_and(|v| crate::http1::expects_continue(v.as_bytes()));
    if !expects {
        return None;
    }
    let gate = Arc::new(Gate {
        state: AtomicU8::new(WAITING),
        waker: AtomicWaker::new(),
    });
    let informed = gate.clone();
    hyper::ext::on_informational(request, move |response| {
        if response.status() == http::StatusCode::CONTINUE {
            informed.continued();
        }
    });
    request.extensions_mut().insert(ContinueGate(gate.clone()));
    Some(gate)
}

/// The destination answered before `100 Continue`: the request body was not sent.
#[derive(Debug)]
pub(crate) struct ExpectationRejected;

impl fmt::Display for ExpectationRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the destination answered before 100 Continue; the request body was not sent")
    }
}

impl StdError for ExpectationRejected {}

pin_project! {
    /// A request body, possibly held back until the destination asks for it.
    #[derive(Debug)]
    pub(crate) struct UpstreamBody<B> {
        #[pin]
        inner: B,
        gate: Option<Arc<Gate>>,
        timer: Option<Pin<Box<Sleep>>>,
        progress: Option<Arc<Progress>>,
    }
}

/// An empty body (`B`'s), held back by nothing.
impl<B: Default> Default for UpstreamBody<B> {
    fn default() -> Self {
        UpstreamBody::new(B::default(), None)
    }
}

impl<B> UpstreamBody<B> {
    pub(crate) fn new(inner: B, gate: Option<Arc<Gate>>) -> Self {
        UpstreamBody {
            inner,
            gate,
            timer: None,
            progress: None,
        }
    }

    /// Mark `progress` whenever a frame of the body goes out.
    pub(crate) fn with_progress(mut self, progress: Option<Arc<Progress>>) -> Self {
        self.progress = progress;
        self
    }
}

impl<B> Body for UpstreamBody<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(gate) = this.gate.as_ref() {
            gate.waker.register(cx.waker());
            match gate.state.load(Ordering::Acquire) {
                OPEN => {}
                WAITING => {
                    let timer = this
                        .timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(CONTINUE_TIMEOUT)));
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    // No answer at all: the destination ignores the expectation.
                    gate.set(WAITING, OPEN);
                    if gate.state.load(Ordering::Acquire) != OPEN {
                        return Poll::Pending;
                    }
                }
                REJECTED => return Poll::Pending,
                _ => return Poll::Ready(Some(Err(Box::new(ExpectationRejected)))),
            }
            *this.gate = None;
            *this.timer = None;
        }
        let polled = this.inner.poll_frame(cx);
        if let (Some(progress), Poll::Ready(Some(Ok(frame)))) = (this.progress.as_ref(), &polled) {
            progress.mark(crate::clock::now());
            progress.sent(frame.data_ref().map_or(0, Bytes::len));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    fn body(
        gate: &Arc<Gate>,
    ) -> UpstreamBody<http_body_util::combinators::BoxBody<Bytes, BoxError>> {
        UpstreamBody::new(
            Full::new(Bytes::from_static(b"abc"))
                .map_err(|e| match e {})
                .boxed(),
            Some(gate.clone()),
        )
    }

    fn expecting() -> (Request<Full<Bytes>>, Arc<Gate>) {
        let mut req = Request::builder()
            .header("expect", "100-Continue")
            .body(Full::new(Bytes::from_static(b"abc")))
            .unwrap();
        let gate = hold_back(&mut req).expect("held back");
        (req, gate)
    }

    #[test]
    fn only_requests_expecting_continue_with_a_body_are_held() {
        let mut plain = Request::new(Full::new(Bytes::from_static(b"abc")));
        assert!(hold_back(&mut plain).is_none());
        let mut empty = Request::builder()
            .header("expect", "100-continue")
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert!(hold_back(&mut empty).is_none());
        let _ = expecting();
    }

    #[tokio::test(start_paused = true)]
    async fn released_after_the_timeout_without_an_answer() {
        let (_req, gate) = expecting();
        let started = tokio::time::Instant::now();
        let data = body(&gate).collect().await.unwrap().to_bytes();
        assert_eq!(data, "abc");
        assert!(started.elapsed() >= CONTINUE_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_answer_withholds_the_body_then_fails_it_when_closed() {
        let (_req, gate) = expecting();
        let mut b = body(&gate);
        let closer = gate.final_response().expect("was waiting");
        let frame = tokio::time::timeout(CONTINUE_TIMEOUT * 3, b.frame()).await;
        assert!(
            frame.is_err(),
            "no frame while rejected, even after the timeout"
        );
        drop(closer);
        let err = b.frame().await.unwrap().unwrap_err();
        assert!(err.is::<ExpectationRejected>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_final_answer_changes_nothing_once_open() {
        let (_req, gate) = expecting();
        assert!(gate.set(WAITING, OPEN));
        assert!(gate.final_response().is_none());
        let data = body(&gate).collect().await.unwrap().to_bytes();
        assert_eq!(data, "abc");
    }
}
