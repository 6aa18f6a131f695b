//! One clock reading per moment.
//!
//! Several parts of a request's handling want the time at the same moment: when a
//! request arrives, telemetry stamps its start and the forwarder checks its idle
//! connection's age; when a response is ready, passive health and telemetry both
//! record. Each `Instant::now()` costs ~25 ns on a virtual machine's clock, as much as
//! a whole pipeline stage, so they share one: while a [`Moment`] is open on a thread,
//! [`now`] reads the clock the first time and returns that reading after.
//!
//! The server opens a moment around each call into the pipeline, each poll of its
//! future and each poll of the response body; the native HTTP/1.1 engine around each
//! poll of a connection's task (so a response's end, the connection's return to its
//! pool and the next request's header timer share the reading of the poll they fall
//! in); [`testing::block_on`](crate::testing::block_on) opens one around each poll. A
//! moment lasts one synchronous call, never across an `.await`. Outside any moment,
//! [`now`] is `Instant::now()`. The instants are tokio's, so that a test runtime's
//! paused clock governs them too.
//!
//! **On fuseway's worker threads** the moments between two waits of the worker share
//! one reading, as nginx's event loop does: the first moment after the worker last
//! waited for events reads the clock, and the next [`TICK_MOMENTS`] − 1 take that
//! reading. A worker waits whenever it has nothing to run, so a reading is as old as
//! the batch of events the worker is working through (tens of microseconds under
//! load); the bound keeps a worker that never runs out of work reading the clock
//! afresh. Durations and deadlines are exact to that. Other threads' moments (a
//! runtime of the user's, a test's) read the clock once each.
//!
//! ```
//! use fuseway::clock;
//!
//! let _moment = clock::Moment::open();
//! let a = clock::now();
//! let b = clock::now();
//! assert_eq!(a, b); // one reading for the whole moment
//! ```

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Instant;

/// How many moments one reading serves at most on a worker thread between two of its
/// waits for events (see the [module docs](self)).
pub const TICK_MOMENTS: u8 = 16;

thread_local! {
    /// Whether a moment is open on this thread.
    static OPEN: Cell<bool> = const { Cell::new(false) };
    /// The open moment's reading, once taken; on a worker, kept for the next moments.
    static READ: Cell<Option<Instant>> = const { Cell::new(None) };
    /// How many more moments the kept reading serves (0 but on a worker).
    static LEFT: Cell<u8> = const { Cell::new(0) };
    /// The thread is a worker whose waits are seen ([`worker_waits`]).
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

/// The time now: the open [`Moment`]'s reading, else a fresh one.
pub fn now() -> Instant {
    if !OPEN.try_with(Cell::get).unwrap_or(false) {
        return Instant::now();
    }
    READ.with(|read| match read.get() {
        Some(read) => read,
        None => {
            let now = Instant::now();
            read.set(Some(now));
            if WORKER.with(Cell::get) {
                LEFT.with(|left| left.set(TICK_MOMENTS - 1));
            }
            now
        }
    })
}

/// The hook a worker's runtime calls each time the worker is about to wait for events
/// (`on_thread_park`): the moments after it read the clock afresh, and this thread's
/// moments share readings from now on (see the [module docs](self)).
pub(crate) fn worker_waits() {
    let _ = WORKER.try_with(|worker| worker.set(true));
    let _ = LEFT.try_with(|left| left.set(0));
}

/// A current-thread runtime for a worker: I/O and timers enabled, its moments sharing
/// readings between its waits ([`worker_waits`]).
pub(crate) fn worker_runtime() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().on_thread_park(worker_waits);
    builder
}

/// While it lives, every [`now`] on this thread shares one clock reading. Opening a
/// moment inside another one changes nothing: the outer one's reading is kept.
#[derive(Debug)]
#[must_use = "the moment closes when this guard is dropped"]
pub struct Moment {
    outermost: bool,
}

impl Moment {
    /// Open a moment on this thread (see the [module docs](self)).
    pub fn open() -> Moment {
        let outermost = OPEN.try_with(|open| !open.replace(true)).unwrap_or(false);
        if outermost {
            // The kept reading, while it serves; else the first `now` reads the clock.
            LEFT.with(|left| match left.get() {
                0 => READ.with(|read| read.set(None)),
                n => left.set(n - 1),
            });
        }
        Moment { outermost }
    }
}

impl Drop for Moment {
    fn drop(&mut self) {
        if self.outermost {
            let _ = OPEN.try_with(|open| open.set(false));
        }
    }
}

pin_project_lite::pin_project! {
    /// `inner`, each of its polls in a [`Moment`]: a task whose whole poll shares one
    /// clock reading.
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct InMoment<F> {
        #[pin]
        inner: F,
    }
}

impl<F> InMoment<F> {
    pub(crate) fn new(inner: F) -> Self {
        InMoment { inner }
    }
}

impl<F: Future> Future for InMoment<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _moment = Moment::open();
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_reads_the_clock_once_and_nested_ones_keep_its_reading() {
        let outside = now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let moment = Moment::open();
        let first = now();
        assert!(first > outside, "a moment reads the clock afresh");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(now(), first);
        {
            let _inner = Moment::open();
            assert_eq!(now(), first, "a nested moment keeps the outer reading");
        }
        assert_eq!(
            now(),
            first,
            "closing the nested moment keeps the outer one"
        );
        drop(moment);
        assert!(now() > first, "outside a moment every call reads the clock");
    }

    #[test]
    fn each_poll_in_a_moment_has_a_reading_of_its_own() {
        let mut readings = Vec::new();
        let mut future = std::pin::pin!(InMoment::new(std::future::poll_fn(|_| {
            let a = now();
            std::thread::sleep(std::time::Duration::from_millis(2));
            assert_eq!(now(), a, "one reading for the whole poll");
            readings.push(a);
            if readings.len() < 2 {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_pending());
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(future.as_mut().poll(&mut cx).is_ready());
        assert!(
            readings[1] > readings[0],
            "the next poll reads the clock again"
        );
        let outside = now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(now() > outside, "no moment is left open after a poll");
    }

    #[test]
    fn a_workers_moments_share_a_reading_until_it_waits_or_the_bound() {
        let runtime = worker_runtime().build().unwrap();
        runtime.block_on(async {
            // The worker has waited at least once: its moments share readings.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            let read = || {
                let _moment = Moment::open();
                now()
            };
            let first = read();
            for _ in 1..TICK_MOMENTS {
                std::thread::sleep(std::time::Duration::from_millis(1));
                assert_eq!(read(), first, "moments before the worker waits share");
            }
            let fresh = read();
            assert!(
                fresh > first,
                "a reading serves TICK_MOMENTS moments at most"
            );
            assert_eq!(read(), fresh, "and the next moments take the fresh one");
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            assert!(
                read() > fresh,
                "the first moment after a wait reads the clock"
            );
            let outside = now();
            std::thread::sleep(std::time::Duration::from_millis(1));
            assert!(
                now() > outside,
                "outside a moment every call reads the clock"
            );
        });
    }
}
