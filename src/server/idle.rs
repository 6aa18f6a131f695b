//! The HTTP/1.1 header read timeout (and the HTTP/2 idle timeout), kept once per
//! connection instead of once per request.
//!
//! hyper's own `header_read_timeout` arms a boxed timer each time it starts reading a
//! request head — an allocation, a registration in the runtime's timer wheel and its
//! removal for every request on a keep-alive connection. Here each HTTP/1.1
//! connection has one timer, re-armed only when it fires: the connection counts the
//! requests it is answering ([`Activity::enter`], released when the response body has
//! been sent or dropped) and stamps the moment it last became idle. When the timer
//! fires on a connection that has been idle — reading a request head, or waiting for
//! one — for the whole timeout, the connection is closed; otherwise the timer is set
//! for the new expiry. The result is what hyper's timer enforces (a head must
//! arrive within the timeout of the previous response's end, or of the accept), at no
//! per-request cost beyond a few uncontended atomic operations and one clock read.
//!
//! HTTP/2 connections served by hyper get the same limit with
//! [`ServerOptions::http2_idle_timeout`](super::ServerOptions::http2_idle_timeout): one
//! with no stream in flight for that long is closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::body::ProxyBody;

/// One connection's requests in flight and when it last became idle.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    /// When the last request in flight ended, in nanoseconds since `origin`.
    idle_since: AtomicU64,
    origin: Instant,
}

impl Activity {
    /// A connection accepted now.
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            origin: Instant::now(),
        })
    }

    /// A request head has arrived: the connection is busy until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// When the connection must be closed if nothing happens before: `None` when that
    /// moment has passed.
    fn expiry(&self, timeout: Duration) -> Option<Instant> {
        let now = Instant::now();
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Some(now + timeout);
        }
        let idle = self.origin + Duration::from_nanos(self.idle_since.load(Ordering::Acquire));
        let expiry = idle + timeout;
        (expiry > now).then_some(expiry)
    }
}

/// A request in flight on its connection (see [`Activity::enter`]).
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        // Stamp first: the timer reads the count, then the stamp.
        if activity.in_flight.load(Ordering::Relaxed) == 1 {
            let since = crate::clock::now()
                .saturating_duration_since(activity.origin)
                .as_nanos();
            activity
                .idle_since
                .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Release);
        }
        activity.in_flight.fetch_sub(1, Ordering::Release);
    }
}

pin_project! {
    /// A response body that keeps its connection busy until it has been sent or
    /// dropped.
    #[derive(Debug)]
    pub(crate) struct ServedBody {
        #[pin]
        body: ProxyBody,
        busy: Option<Busy>,
    }
}

impl ServedBody {
    pub(crate) fn new(body: ProxyBody, busy: Option<Busy>) -> Self {
        ServedBody { body, busy }
    }
}

impl Body for ServedBody {
    type Data = Bytes;
    type Error = <ProxyBody as Body>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        // The body's end releases the exchange (its connection back to the pool, the
        // passive-health record): one clock reading for all of it.
        let _moment = crate::clock::Moment::open();
        let polled = this.body.as_mut().poll_frame(cx);
        // Its last frame handed over (hyper may drop a body whose length it knows
        // without polling it again), the connection is idle from now.
        let ended = match &polled {
            Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Pending => false,
        };
        if ended {
            *this.busy = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

pin_project! {
    /// Drives an HTTP/1.1 connection until it ends (`Some(output)`) or has been idle
    /// for the header read timeout (`None`: dropping it closes the connection).
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct IdleLimited<F> {
        #[pin]
        connection: F,
        #[pin]
        timer: Sleep,
        // The timer has been polled since it was last set: it will wake the task.
        armed: bool,
        activity: Arc<Activity>,
        timeout: Duration,
    }
}

impl<F: Future> IdleLimited<F> {
    pub(crate) fn new(connection: F, activity: Arc<Activity>, timeout: Duration) -> Self {
        IdleLimited {
            connection,
            timer: tokio::time::sleep_until(activity.origin + timeout),
            armed: false,
            activity,
            timeout,
        }
    }
}

impl<F: Future> Future for IdleLimited<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(output) = this.connection.poll(cx) {
            return Poll::Ready(Some(output));
        }
        // The timer keeps the task's waker once polled; it is looked at again only
        // when it has fired.
        while !*this.armed || this.timer.is_elapsed() {
            if this.timer.as_mut().poll(cx).is_pending() {
                *this.armed = true;
                break;
            }
            match this.activity.expiry(*this.timeout) {
                Some(expiry) => {
                    this.timer.as_mut().reset(expiry);
                    *this.armed = false;
                }
                None => return Poll::Ready(None),
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_connections_expire_and_busy_ones_do_not() {
        let timeout = Duration::from_secs(30);
        let activity = Activity::new();
        assert!(activity.expiry(timeout).is_some(), "fresh");
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(activity.expiry(timeout), None, "idle since the accept");

        let busy = activity.enter();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(activity.expiry(timeout).is_some(), "a request in flight");
        drop(busy);
        let expiry = activity.expiry(timeout).expect("idle from now on");
        assert_eq!(expiry, Instant::now() + timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_closes_only_an_idle_connection() {
        let timeout = Duration::from_secs(30);
        let activity = Activity::new();
        let busy = activity.enter();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let connection = IdleLimited::new(rx, activity.clone(), timeout);
        let handle = tokio::spawn(connection);
        // Busy for three timeouts: still open.
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert!(!handle.is_finished());
        drop(busy);
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(!handle.is_finished(), "idle for less than the timeout");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(handle.await.unwrap().is_none(), "closed once idle too long");
        drop(tx);
    }
}
