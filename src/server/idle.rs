//! The HTTP/1.1 header read and keep-alive timeouts (and the HTTP/2 idle timeout), kept
//! once per connection instead of once per request.
//!
//! hyper's own `header_read_timeout` arms a boxed timer each time it starts reading a
//! request head — an allocation, a registration in the runtime's timer wheel and its
//! removal for every request on a keep-alive connection. Here each HTTP/1.1
//! connection has one timer, re-armed only when it fires: the connection counts the
//! requests it is answering ([`Activity::enter`], released when the response body has
//! been sent or dropped), stamps the moment it last became idle, and the moment the
//! first byte after that was read ([`Activity::read`], from the connection's reader).
//! When the timer fires on a connection that has waited too long for a request head,
//! the connection is closed; otherwise the timer is set for the new expiry. The first
//! head must arrive within the header read timeout of the accept; after a response,
//! the connection waits for the keep-alive timeout, and a head that has started must
//! end within the header read timeout of its first byte (Kestrel's
//! `KeepAliveTimeout` and `RequestHeadersTimeout`) — at no per-request cost beyond a
//! few uncontended atomic operations and one clock read.
//!
//! HTTP/2 connections served by hyper get the same limit with
//! [`ServerOptions::http2_idle_timeout`](super::ServerOptions::http2_idle_timeout) as
//! both timeouts: one with no stream in flight for that long is closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::body::ProxyBody;

/// One connection's requests in flight, when it last became idle and when the first
/// byte after that came.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    /// When the last request in flight ended, in nanoseconds since `origin` plus one
    /// (0: no request has ended yet).
    idle_since: AtomicU64,
    /// When the first byte read after that came, the same way (0: none yet).
    head_since: AtomicU64,
    /// `head_since` was just stamped, or the connection became idle: the timer is to be
    /// set anew (its deadline may be sooner now).
    rearm: AtomicBool,
    origin: Instant,
}

impl Activity {
    /// A connection accepted now.
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            rearm: AtomicBool::new(false),
            origin: Instant::now(),
        })
    }

    /// A request head has arrived: the connection is busy until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_since.store(0, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Bytes were read from the client: on an idle connection, the first of them start
    /// the next head's header read timeout.
    pub(crate) fn read(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_since.load(Ordering::Relaxed) == 0
        {
            self.head_since
                .store(self.stamp(crate::clock::now()), Ordering::Release);
            self.rearm.store(true, Ordering::Release);
        }
    }

    /// `at` as stored: nanoseconds since `origin`, plus one.
    fn stamp(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(since).unwrap_or(u64::MAX - 1) + 1
    }

    /// The moment a stamp stands for (`None`: never stamped).
    fn at(&self, stamp: &AtomicU64) -> Option<Instant> {
        match stamp.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.origin + Duration::from_nanos(n - 1)),
        }
    }

    /// When the connection must be closed if nothing happens before (`header`: the
    /// header read timeout, `keep_alive`: the keep-alive timeout): `None` when that
    /// moment has passed.
    fn expiry(&self, header: Duration, keep_alive: Duration) -> Option<Instant> {
        let now = Instant::now();
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Some(now + header);
        }
        let expiry = match self.at(&self.idle_since) {
            None => self.origin + header,
            Some(idle) => {
                let waited = idle + keep_alive;
                match self.at(&self.head_since) {
                    Some(head) => waited.min(head + header),
                    None => waited,
                }
            }
        };
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
        let last = activity.in_flight.load(Ordering::Relaxed) == 1;
        if last {
            let stamp = activity.stamp(crate::clock::now());
            activity.idle_since.store(stamp, Ordering::Release);
        }
        activity.in_flight.fetch_sub(1, Ordering::Release);
        if last {
            // Idle now: the keep-alive timeout may end sooner than the timer's moment
            // (a keep-alive timeout shorter than the header read timeout).
            activity.rearm.store(true, Ordering::Release);
        }
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
    /// Drives an HTTP/1.1 connection until it ends (`Some(output)`) or has waited too
    /// long for a request head (`None`: dropping it closes the connection).
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct IdleLimited<F> {
        #[pin]
        connection: F,
        #[pin]
        timer: Sleep,
        // The timer has been polled since it was last set: it will wake the task.
        armed: bool,
        activity: Arc<Activity>,
        header: Duration,
        keep_alive: Duration,
    }
}

impl<F: Future> IdleLimited<F> {
    /// `header`: the header read timeout; `keep_alive`: the keep-alive timeout (see
    /// [`Activity`]).
    pub(crate) fn new(
        connection: F,
        activity: Arc<Activity>,
        header: Duration,
        keep_alive: Duration,
    ) -> Self {
        IdleLimited {
            connection,
            timer: tokio::time::sleep_until(activity.origin + header),
            armed: false,
            activity,
            header,
            keep_alive,
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
        // A head has begun on an idle connection (read in the poll above): its
        // deadline may be sooner than the timer's.
        let rearm = &this.activity.rearm;
        if rearm.load(Ordering::Relaxed) && rearm.swap(false, Ordering::Acquire) {
            match this.activity.expiry(*this.header, *this.keep_alive) {
                Some(expiry) => {
                    this.timer.as_mut().reset(expiry);
                    *this.armed = false;
                }
                None => return Poll::Ready(None),
            }
        }
        // The timer keeps the task's waker once polled; it is looked at again only
        // when it has fired.
        while !*this.armed || this.timer.is_elapsed() {
            if this.timer.as_mut().poll(cx).is_pending() {
                *this.armed = true;
                break;
            }
            match this.activity.expiry(*this.header, *this.keep_alive) {
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
        assert!(activity.expiry(timeout, timeout).is_some(), "fresh");
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(
            activity.expiry(timeout, timeout),
            None,
            "idle since the accept"
        );

        let busy = activity.enter();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(
            activity.expiry(timeout, timeout).is_some(),
            "a request in flight"
        );
        drop(busy);
        let expiry = activity.expiry(timeout, timeout).expect("idle from now on");
        assert_eq!(expiry, Instant::now() + timeout);
    }

    /// The first head within the header read timeout of the accept; after a response,
    /// the keep-alive timeout, and a head that has started within the header read
    /// timeout of its first byte (and by the end of the keep-alive timeout).
    #[tokio::test(start_paused = true)]
    async fn kept_connections_wait_for_the_keep_alive_timeout() {
        let (header, keep_alive) = (Duration::from_secs(30), Duration::from_secs(130));
        let activity = Activity::new();
        let expiry = || activity.expiry(header, keep_alive);
        assert_eq!(expiry(), Some(activity.origin + header), "the first head");
        activity.read();
        assert_eq!(
            expiry(),
            Some(activity.origin + header),
            "its bytes change nothing"
        );
        drop(activity.enter());
        let ended = Instant::now();
        tokio::time::advance(Duration::from_secs(110)).await;
        assert_eq!(expiry(), Some(ended + keep_alive), "idle after a response");
        activity.read();
        assert_eq!(
            expiry(),
            Some(ended + keep_alive),
            "a head started 20 s before the wait's end ends with it"
        );
        drop(activity.enter());
        tokio::time::advance(Duration::from_secs(1)).await;
        activity.read();
        assert_eq!(
            expiry(),
            Some(Instant::now() + header),
            "a head started early: its header read timeout"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_closes_only_an_idle_connection() {
        let timeout = Duration::from_secs(30);
        let activity = Activity::new();
        let busy = activity.enter();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let connection = IdleLimited::new(rx, activity.clone(), timeout, timeout);
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

    /// A keep-alive timeout shorter than the header read timeout closes an idle
    /// connection on time: its request's end (in the connection's poll, as a response
    /// body's end is) sets the timer anew. Before, the timer waited for the header read
    /// timeout's moment.
    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_shorter_than_the_header_timeout_closes_on_time() {
        let (header, keep_alive) = (Duration::from_secs(30), Duration::from_secs(5));
        let activity = Activity::new();
        let mut busy = Some(activity.enter());
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let connection = std::future::poll_fn(move |cx| {
            if busy.is_some() && Pin::new(&mut rx).poll(cx).is_ready() {
                busy = None;
            }
            Poll::<()>::Pending
        });
        let handle = tokio::spawn(IdleLimited::new(connection, activity, header, keep_alive));
        tokio::time::sleep(Duration::from_secs(10)).await;
        tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            !handle.is_finished(),
            "idle for less than the keep-alive timeout"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(handle.is_finished(), "closed after the keep-alive timeout");
        assert!(handle.await.unwrap().is_none());
    }
}
