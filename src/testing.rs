//! In-process stand-ins for the forwarder, for pipeline benches and tests that measure
//! or compare the pipeline itself without sockets. Never part of a real proxy.
//!
//! [`replay`] ([`replay_h2`]) serves a client's bytes through one HTTP/1.1 (HTTP/2) engine in process and tells
//! what the pipeline received; [`replay_response`] ([`replay_h2_response`]) sends a
//! request with one engine's HTTP/1.1 (HTTP/2) client to a destination (on 127.0.0.1)
//! that answers given bytes and tells what the client read: the differential tests and
//! fuzz targets compare the native engines with hyper's through them.
//!
//! [`StubForwarder`] answers every [`Balanced`] request with `200 OK` and an empty body,
//! recording the destination in the outcome as the real forwarder does, so stages that
//! look at the outcome (affinity, passive health) behave as in production.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, Response, StatusCode};

pub use crate::forwarding::replay::{
    replay_h2_response, replay_response, NoResponse, ReceivedResponse,
};
pub use crate::server::replay::{replay, replay_h2, Received, Replayed};

use crate::body::ProxyBody;
use crate::pipeline::Terminal;
use crate::request::{Balanced, ProxyResponse};

/// Whether the stub's future is ready at once or pending once first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StubMode {
    /// Ready on the first poll (the synchronous control).
    Sync,
    /// `Pending` once (waking itself), so every frame kept across an await really is kept.
    Async,
}

/// A terminal that answers `200 OK` without any I/O. See the [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct StubForwarder {
    mode: StubMode,
}

impl StubForwarder {
    /// A stub in `mode`.
    pub fn new(mode: StubMode) -> Self {
        StubForwarder { mode }
    }

    fn answer<B>(&self, request: Balanced<B>) -> StubFuture {
        let (request, context, destination) = request.into_parts();
        drop(request);
        // Room for the headers stages add on the way back, so they do not allocate.
        let mut response = Response::new(ProxyBody::empty());
        *response.headers_mut() = HeaderMap::with_capacity(8);
        *response.status_mut() = StatusCode::OK;
        let mut response = ProxyResponse {
            response,
            outcome: Default::default(),
        };
        response.outcome.set_target(context, destination);
        StubFuture {
            pending: self.mode == StubMode::Async,
            response: Some(response),
        }
    }
}

pin_project_lite::pin_project! {
    /// The stub's future.
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct StubFuture {
        pending: bool,
        response: Option<ProxyResponse>,
    }
}

impl Future for StubFuture {
    type Output = Result<ProxyResponse, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if *this.pending {
            *this.pending = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(this.response.take().expect("polled after completion")))
    }
}

impl<B> Terminal<Balanced<B>> for StubForwarder {
    type Future = StubFuture;
    type Error = Infallible;

    fn call_terminal(&self, request: Balanced<B>) -> StubFuture {
        self.answer(request)
    }
}

impl<B> tower_service::Service<Balanced<B>> for StubForwarder {
    type Response = ProxyResponse;
    type Error = Infallible;
    type Future = StubFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Balanced<B>) -> StubFuture {
        self.answer(request)
    }
}

/// Drive `future` to completion on the current thread with a no-op waker: no runtime,
/// no scheduler in the measurement. Each poll is one [`clock`](crate::clock) moment, as
/// in the server.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        // As the server does: one clock reading per poll (see `clock`).
        let _moment = crate::clock::Moment::open();
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// An `io::Write` keeping everything written to it, shared by its clones: a log sink
/// whose output a test reads back.
///
/// ```
/// use std::io::Write;
/// let sink = fuseway::testing::SharedBuffer::default();
/// sink.clone().write_all(b"line\n").unwrap();
/// assert_eq!(sink.text(), "line\n");
/// ```
#[derive(Debug, Clone, Default)]
pub struct SharedBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl SharedBuffer {
    /// What was written so far, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Forget what was written so far.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl std::io::Write for SharedBuffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A connected pair of TCP sockets through `listener`: (the connecting side, the
/// accepted side). For the crate's own unit tests of socket handling.
#[cfg(test)]
pub(crate) async fn tcp_pair(
    listener: &tokio::net::TcpListener,
) -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
    let (client, accepted) = tokio::join!(client, listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}
