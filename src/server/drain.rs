//! Graceful shutdown of client connections.
//!
//! The same contract as hyper-util's `GracefulShutdown` — on shutdown every connection
//! is asked to finish what it is doing and close, and shutdown waits until all of them
//! have — without its cost on the hot path: hyper-util's watcher polls a channel (a
//! lock) every time the connection is polled. Here a connection registers its task's
//! waker with the shutdown signal once, on its first poll, and afterwards only reads a
//! flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::server::graceful::GracefulConnection;
use pin_project_lite::pin_project;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::{Notify, OwnedSemaphorePermit};

/// The connections of one listener, and their shutdown.
#[derive(Debug)]
pub(crate) struct Drain {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    draining: AtomicBool,
    /// Wakes every connection when draining starts.
    signal: Arc<Notify>,
    live: AtomicUsize,
    /// Wakes `shutdown` when the last connection has ended.
    ended: Notify,
}

impl Drain {
    pub(crate) fn new() -> Self {
        Drain {
            shared: Arc::default(),
        }
    }

    /// A new connection's signal (counted from now on: shutdown waits for it). Boxed
    /// once, when the connection is accepted: the connection's protocol detection (or
    /// TLS handshake) polls it, then its driver, without moving it. It also keeps the
    /// connection's `permit` (its place under the listener's connection limit) until
    /// the connection ends: what every connection holds for its whole life is kept out
    /// of its task, whose size counts for every idle connection.
    pub(crate) fn signal(&self, permit: Option<OwnedSemaphorePermit>) -> Signal {
        self.shared.live.fetch_add(1, Ordering::AcqRel);
        Box::pin(DrainSignal {
            // Created before the flag can be read: a shutdown from now on reaches it.
            signal: self.shared.signal.clone().notified_owned(),
            registered: false,
            live: Live(self.shared.clone()),
            _permit: permit,
        })
    }

    /// Ask every connection to shut down, and wait until all of them have ended.
    pub(crate) async fn shutdown(self) {
        let shared = &self.shared;
        shared.draining.store(true, Ordering::Release);
        shared.signal.notify_waiters();
        loop {
            let ended = shared.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if shared.live.load(Ordering::Acquire) == 0 {
                return;
            }
            ended.await;
        }
    }
}

/// A connection's view of its [`Drain`] (see [`Drain::signal`]).
pub(crate) type Signal = Pin<Box<DrainSignal>>;

/// Drive `connection` to its end; once draining starts it is asked to shut down
/// gracefully (finish the request in flight, then close).
pub(crate) fn watch<C: GracefulConnection>(signal: Signal, connection: C) -> Watched<C> {
    Watched {
        connection,
        signal,
        asked: false,
    }
}

pin_project! {
    /// A live connection's view of its [`Drain`], for a connection driver that polls it
    /// itself ([`DrainSignal::poll_draining`]) instead of being wrapped ([`watch`]).
    #[derive(Debug)]
    pub(crate) struct DrainSignal {
        #[pin]
        signal: OwnedNotified,
        registered: bool,
        live: Live,
        _permit: Option<OwnedSemaphorePermit>,
    }
}

impl DrainSignal {
    /// Whether shutdown has started. The first call registers the task's waker with
    /// the signal (it is woken when shutdown starts); later ones read a flag.
    pub(crate) fn poll_draining(self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool {
        let this = self.project();
        if *this.registered {
            return this.live.0.draining.load(Ordering::Acquire);
        }
        *this.registered = true;
        this.signal.poll(cx).is_ready() || this.live.0.draining.load(Ordering::Acquire)
    }
}

/// One live connection: counted until dropped.
#[derive(Debug)]
struct Live(Arc<Shared>);

impl Drop for Live {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

pin_project! {
    /// A connection under a [`Drain`].
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct Watched<C> {
        #[pin]
        connection: C,
        signal: Signal,
        // The connection has been asked to shut down.
        asked: bool,
    }
}

impl<C: GracefulConnection> Future for Watched<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let mut this = self.project();
        if !*this.asked && this.signal.as_mut().poll_draining(cx) {
            *this.asked = true;
            this.connection.as_mut().graceful_shutdown();
        }
        this.connection.poll(cx)
    }
}
