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
//! moment lasts one synchronous call, never across an `.await`, so its reading is as
//! fresh as the work it times. Outside any moment,
//! [`now`] is `Instant::now()`. The instants are tokio's, so that a test runtime's
//! paused clock governs them too.
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

thread_local! {
    /// `None`: no moment is open; `Some(None)`: open, the clock not read yet.
    static MOMENT: Cell<Option<Option<Instant>>> = const { Cell::new(None) };
}

/// The time now: the open [`Moment`]'s reading, else a fresh one.
pub fn now() -> Instant {
    MOMENT
        .try_with(|moment| match moment.get() {
            Some(Some(read)) => read,
            Some(None) => {
                let read = Instant::now();
                moment.set(Some(Some(read)));
                read
            }
            None => Instant::now(),
        })
        .unwrap_or_else(|_| Instant::now())
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
        let outermost = MOMENT
            .try_with(|moment| match moment.get() {
                None => {
                    moment.set(Some(None));
                    true
                }
                Some(_) => false,
            })
            .unwrap_or(false);
        Moment { outermost }
    }
}

impl Drop for Moment {
    fn drop(&mut self) {
        if self.outermost {
            let _ = MOMENT.try_with(|moment| moment.set(None));
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
}
