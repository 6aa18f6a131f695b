//! HTTP/2 streams run inside their connection's task, in slots reused from one stream to
//! the next, instead of a `tokio::spawn` (a heap task) per stream.
//!
//! hyper's HTTP/2 server hands each new stream's future to its executor while the
//! connection is being polled. [`StreamExecutor`] is that executor: when the connection
//! is polled inside [`WithStreams`], the stream goes into the connection's [`Slots`]
//! (one boxed slot per stream that was ever open at once, reused by later streams), and
//! [`WithStreams`] polls the open streams each time the connection's task runs.
//! Elsewhere (a connection not wrapped), the executor spawns on tokio as
//! `TokioExecutor` does.
//!
//! Every stream is polled on each wake-up of its connection's task, whichever stream or
//! the connection itself was woken: cheap for the few streams a connection usually has
//! open, linear in their number for a connection with many.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

thread_local! {
    /// While a connection is polled inside [`WithStreams`]: its streams (`Some(None)`
    /// before its first stream). `None` outside.
    static CURRENT: RefCell<Option<Option<Box<dyn Streams>>>> = const { RefCell::new(None) };
}

/// hyper's executor for HTTP/2 streams (see the module's documentation).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StreamExecutor;

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, future: F) {
        let spawn = CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            let Some(streams) = current.as_mut() else {
                return Some(future);
            };
            let streams = streams.get_or_insert_with(|| Box::new(Slots::<F>::default()));
            match streams.as_any().downcast_mut::<Slots<F>>() {
                Some(slots) => {
                    slots.push(future);
                    None
                }
                None => Some(future),
            }
        });
        if let Some(future) = spawn {
            tokio::spawn(future);
        }
    }
}

/// A connection's streams, whatever their future's type.
trait Streams: Send {
    fn as_any(&mut self) -> &mut dyn Any;

    /// Poll every open stream; whether none is left open.
    fn poll_open(&mut self, cx: &mut Context<'_>) -> bool;
}

/// Streams of one future type: a slot per stream open at once, kept for the next.
struct Slots<F> {
    slots: Vec<Pin<Box<Option<F>>>>,
    /// Indices of the empty slots.
    free: Vec<usize>,
}

impl<F> Default for Slots<F> {
    fn default() -> Self {
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<F: Future<Output = ()>> Slots<F> {
    fn push(&mut self, future: F) {
        match self.free.pop() {
            Some(i) => self.slots[i].as_mut().set(Some(future)),
            None => self.slots.push(Box::pin(Some(future))),
        }
    }
}

impl<F: Future<Output = ()> + Send + 'static> Streams for Slots<F> {
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn poll_open(&mut self, cx: &mut Context<'_>) -> bool {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(stream) = slot.as_mut().as_pin_mut() else {
                continue;
            };
            if stream.poll(cx).is_ready() {
                slot.as_mut().set(None);
                self.free.push(i);
            }
        }
        self.free.len() == self.slots.len()
    }
}

pin_project! {
    /// A served connection whose HTTP/2 streams run in its own task (see the module's
    /// documentation). It ends when the connection has ended; streams still open then
    /// (their client gone) are dropped with it.
    pub(crate) struct WithStreams<C> {
        #[pin]
        connection: C,
        streams: Option<Box<dyn Streams>>,
    }
}

impl<C> WithStreams<C> {
    pub(crate) fn new(connection: C) -> Self {
        WithStreams {
            connection,
            streams: None,
        }
    }
}

/// Puts a connection's streams back where they were found when dropped, also when the
/// connection's poll panics.
struct Lent<'a> {
    streams: &'a mut Option<Box<dyn Streams>>,
    outer: Option<Option<Box<dyn Streams>>>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let outer = self.outer.take();
        *self.streams = CURRENT.with(|current| current.replace(outer)).flatten();
    }
}

impl<C: Future> Future for WithStreams<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.project();
        let ended = {
            let ours = Some(this.streams.take());
            let outer = CURRENT.with(|current| current.replace(ours));
            let _lent = Lent {
                streams: this.streams,
                outer,
            };
            this.connection.poll(cx)
        };
        if let Some(streams) = this.streams {
            streams.poll_open(cx);
        }
        ended
    }
}
