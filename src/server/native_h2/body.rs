//! A request body on the native HTTP/2 engine: the connection puts each DATA frame's
//! bytes in the stream's queue, the pipeline takes them out; what it has taken is
//! credited back to the client (WINDOW_UPDATE) by the connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The reading side, in [`Incoming`](crate::body::Incoming).
#[derive(Debug)]
pub(crate) struct RecvBody {
    shared: Arc<Shared>,
    /// The request's `content-length`.
    length: Option<u64>,
}

/// The connection's side of a stream's body.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Nothing more to read: the body ended and the reader has taken all of it (set
    /// under the lock, once; read without it by `is_end_stream`, which a writer asks
    /// after every frame).
    finished: AtomicBool,
}

#[derive(Debug, Default)]
struct Queue {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    state: State,
    /// Bytes the reader has taken and the connection has not yet credited.
    taken: usize,
    /// The task reading the body.
    reader: Option<Waker>,
    /// The connection's task: woken when bytes are taken (their credit is due) or the
    /// reader goes.
    connection: Option<Waker>,
    /// The reader is gone: what comes is credited at once and thrown away.
    dropped: bool,
    /// The reader has waited for bytes with none queued: the client's
    /// `Expect: 100-continue` is due its `100 Continue`.
    asked: bool,
    /// The reader waits for bytes now (none queued, the body open).
    waiting: bool,
    /// The body is held to the minimum request body data rate: the connection is
    /// woken whenever its reader starts waiting, to time the wait.
    paced: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Open,
    Ended,
    /// The stream was reset, or its body broke a rule (a `content-length` it did not
    /// match).
    Failed(&'static str),
}

/// What [`Sender::take_credit`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Credit {
    /// Bytes taken by the reader since the last call.
    pub(crate) taken: usize,
    /// The reader is gone.
    pub(crate) gone: bool,
    /// The reader has waited for bytes (ever): a client holding its body back for
    /// `100 Continue` gets it now.
    pub(crate) asked: bool,
    /// A paced body's reader waits for the client's bytes now.
    pub(crate) waiting: bool,
}

/// A body's channel: the reading side for the request, the sending side for the
/// connection. A `paced` body's waits are told to the connection (see
/// [`Credit::waiting`]).
pub(crate) fn channel(length: Option<u64>, paced: bool) -> (Sender, RecvBody) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            paced,
            ..Queue::default()
        }),
        ..Shared::default()
    });
    (
        Sender {
            shared: shared.clone(),
        },
        RecvBody { shared, length },
    )
}

fn lock(shared: &Shared) -> MutexGuard<'_, Queue> {
    shared.queue.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Mark the body finished if, with `q` (its queue, locked), it is.
    fn check_finished(&self, q: &Queue) {
        if q.chunks.is_empty() && q.state == State::Ended && q.trailers.is_none() {
            self.finished.store(true, Ordering::Release);
        }
    }
}

impl Sender {
    /// Queue a DATA frame's bytes; `false` when the reader is gone (the caller credits
    /// them back at once).
    pub(crate) fn push(&self, data: Bytes) -> bool {
        let mut q = lock(&self.shared);
        if q.dropped {
            return false;
        }
        q.chunks.push_back(data);
        q.waiting = false;
        if let Some(w) = q.reader.take() {
            w.wake();
        }
        true
    }

    /// The body ends (with trailers, if any).
    pub(crate) fn end(&self, trailers: Option<HeaderMap>) {
        let mut q = lock(&self.shared);
        if q.state == State::Open {
            q.state = State::Ended;
            q.trailers = trailers;
            self.shared.check_finished(&q);
        }
        q.waiting = false;
        if let Some(w) = q.reader.take() {
            w.wake();
        }
    }

    /// The body ends in error (`why`), unless it had ended.
    pub(crate) fn fail(&self, why: &'static str) {
        let mut q = lock(&self.shared);
        if q.state == State::Open {
            q.state = State::Failed(why);
        }
        q.waiting = false;
        if let Some(w) = q.reader.take() {
            w.wake();
        }
    }

    /// Bytes taken by the reader since the last call (to credit), whether the reader is
    /// gone and whether it has waited for bytes; the connection's task is woken when
    /// any of them changes.
    pub(crate) fn take_credit(&self, cx: &Context<'_>) -> Credit {
        let mut q = lock(&self.shared);
        if !q
            .connection
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            q.connection = Some(cx.waker().clone());
        }
        Credit {
            taken: std::mem::take(&mut q.taken),
            gone: q.dropped,
            asked: q.asked,
            waiting: q.waiting && q.paced && !q.dropped,
        }
    }
}

impl Sender {
    /// The stream is gone: what its reader took and was not credited for, and what it
    /// left unread, to credit back on the connection; later bytes are refused.
    pub(crate) fn close(&self) -> usize {
        let mut q = lock(&self.shared);
        q.dropped = true;
        let unread: usize = q.chunks.drain(..).map(|c| c.len()).sum();
        std::mem::take(&mut q.taken) + unread
    }
}

impl RecvBody {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut q = lock(&self.shared);
        if let Some(data) = q.chunks.pop_front() {
            q.taken += data.len();
            if let Some(w) = q.connection.take() {
                w.wake();
            }
            self.shared.check_finished(&q);
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        match q.state {
            State::Open => {
                if !q.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    q.reader = Some(cx.waker().clone());
                }
                // The first wait is told to the connection (a `100 Continue` may be
                // due), and each wait of a paced body (the connection times it).
                if !q.waiting {
                    q.waiting = true;
                    if !std::mem::replace(&mut q.asked, true) || q.paced {
                        if let Some(w) = q.connection.take() {
                            w.wake();
                        }
                    }
                }
                Poll::Pending
            }
            State::Ended => {
                let trailers = q.trailers.take();
                self.shared.check_finished(&q);
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            State::Failed(why) => Poll::Ready(Some(Err(why.into()))),
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire)
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.length {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        let mut q = lock(&self.shared);
        q.dropped = true;
        // What it held unread is credited too.
        let unread: usize = q.chunks.drain(..).map(|c| c.len()).sum();
        q.taken += unread;
        if let Some(w) = q.connection.take() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is_end_stream` (read without the lock) says the end only once the body has
    /// ended and the reader has taken every chunk and the trailers.
    #[test]
    fn the_end_is_seen_once_everything_is_taken() {
        let cx = &mut Context::from_waker(Waker::noop());
        let (tx, mut rx) = channel(None, false);
        assert!(tx.push(Bytes::from_static(b"a")));
        tx.end(None);
        assert!(!rx.is_end_stream(), "a chunk is still queued");
        match rx.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => assert_eq!(frame.into_data().unwrap(), "a"),
            _ => panic!("the chunk"),
        }
        assert!(rx.is_end_stream());
        assert!(matches!(rx.poll_frame(cx), Poll::Ready(None)));

        let (tx, mut rx) = channel(None, false);
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        tx.end(Some(trailers));
        assert!(!rx.is_end_stream(), "the trailers are still to be read");
        assert!(matches!(rx.poll_frame(cx), Poll::Ready(Some(Ok(f))) if f.is_trailers()));
        assert!(rx.is_end_stream());

        let (tx, rx) = channel(Some(1), false);
        assert!(!rx.is_end_stream(), "still open");
        tx.fail("reset");
        assert!(!rx.is_end_stream(), "failed, not ended");
    }

    /// A paced body's reader waiting for bytes is told to the connection (which is
    /// woken for each wait) until bytes, the end or an error come; an unpaced body's
    /// waits are not (only its first, for `100 Continue`).
    #[test]
    fn a_paced_readers_waits_are_told() {
        use std::sync::atomic::AtomicUsize;
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let connection = Arc::new(Count(AtomicUsize::new(0)));
        let connection_waker = Waker::from(connection.clone());
        let conn_cx = &Context::from_waker(&connection_waker);
        let reader_cx = &mut Context::from_waker(Waker::noop());

        let (tx, mut rx) = channel(None, true);
        assert!(!tx.take_credit(conn_cx).waiting);
        assert!(rx.poll_frame(reader_cx).is_pending());
        assert_eq!(connection.0.load(Ordering::Relaxed), 1);
        let credit = tx.take_credit(conn_cx);
        assert!(credit.waiting && credit.asked);
        tx.push(Bytes::from_static(b"a"));
        assert!(!tx.take_credit(conn_cx).waiting, "bytes came");
        assert!(rx.poll_frame(reader_cx).is_ready());
        assert!(rx.poll_frame(reader_cx).is_pending());
        assert_eq!(connection.0.load(Ordering::Relaxed), 2, "each wait");
        assert!(tx.take_credit(conn_cx).waiting);
        tx.end(None);
        assert!(!tx.take_credit(conn_cx).waiting, "ended");

        let (tx, mut rx) = channel(None, false);
        let before = connection.0.load(Ordering::Relaxed);
        tx.take_credit(conn_cx);
        assert!(rx.poll_frame(reader_cx).is_pending());
        tx.push(Bytes::from_static(b"a"));
        assert!(rx.poll_frame(reader_cx).is_ready());
        tx.take_credit(conn_cx);
        assert!(rx.poll_frame(reader_cx).is_pending());
        let credit = tx.take_credit(conn_cx);
        assert!(credit.asked && !credit.waiting, "unpaced");
        assert_eq!(
            connection.0.load(Ordering::Relaxed),
            before + 1,
            "the first wait only"
        );
    }
}
