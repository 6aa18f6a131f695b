//! An exchange's timer.

use super::*;

pin_project! {
    /// An exchange's timer (the activity timeout while it waits for the response head
    /// and between body frames), moved lazily: a deadline later than the one the
    /// timer is set for is only noted, and the timer is moved when it fires. A pooled
    /// HTTP/1.1 connection keeps one for all its requests, so with the same timeout
    /// each request's later deadline costs no registration in the runtime's timer
    /// wheel (and no removal when the request ends) — only a timer that fires before
    /// a deadline is re-registered, once per timeout period.
    pub(crate) struct Deadline {
        #[pin]
        sleep: tokio::time::Sleep,
    }
}

/// What a new timer is set to before its first deadline: far enough never to fire.
pub(super) const UNSET: Duration = Duration::from_secs(365 * 24 * 3600);

impl Deadline {
    pub(super) fn new() -> Self {
        Deadline {
            sleep: tokio::time::sleep(UNSET),
        }
    }

    /// Ready once `deadline` has passed.
    pub(super) fn poll_until(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        deadline: Instant,
    ) -> Poll<()> {
        let mut sleep = self.project().sleep;
        if deadline < sleep.deadline() {
            sleep.as_mut().reset(deadline);
        }
        loop {
            std::task::ready!(sleep.as_mut().poll(cx));
            // Set for an earlier deadline (an earlier request's): move it on.
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(deadline);
        }
    }

    /// Let go of the waker of the task that polled it last (before the connection
    /// waits in its pool): when it fires, it wakes nothing.
    pub(super) fn release(self: Pin<&mut Self>) {
        let _ = self
            .project()
            .sleep
            .poll(&mut Context::from_waker(Waker::noop()));
    }
}
