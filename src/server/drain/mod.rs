//! The connections of one listener: their graceful shutdown, and the deadlines of
//! those that wait.
//!
//! Shutdown has the same contract as hyper-util's `GracefulShutdown` — every
//! connection is asked to finish what it is doing and close, and shutdown waits until
//! all of them have — without its cost on the hot path: hyper-util's watcher polls a
//! channel (a lock) every time the connection is polled. Here a connection registers
//! its task's waker once and afterwards only reads a flag.
//!
//! Deadlines (the native engine's header read timeout, the bound on discarding an
//! unread body, on writing a refused head's answer) are kept here too, rather than as
//! a tokio `Sleep` in each connection's future: a `Sleep` is 112 bytes that every idle
//! keep-alive connection would hold, and re-arming it for each request moves it in the
//! runtime's timer wheel. A connection's place here is one slot of a listener-wide
//! table (its waker, its deadline and two links, 48 bytes), in chunks that are never
//! moved, so the table grows without leaving freed copies of itself behind. Slots with
//! a deadline are linked into a coarse timer wheel whose tick is 1/64 of the header
//! read timeout (from 10 ms to 1 s); while any is linked, one sweeper task per listener
//! wakes at each tick and wakes the connections whose deadlines have passed. Setting a
//! later deadline than the one a slot is linked with changes no link: the sweeper
//! finds the new deadline when it reaches the slot and moves it on — so a keep-alive
//! connection's deadline, set again for every request, is relinked about once per
//! timeout.

use super::chunked::Chunked;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::server::Place;

/// The connections of one listener, their deadlines and their shutdown.
#[derive(Debug)]
pub(crate) struct Drain {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    draining: AtomicBool,
    table: Mutex<Table>,
    /// Wakes the sweeper: a slot linked while none was, or the last connection gone
    /// once the listener has.
    sweep: Notify,
    /// Wakes `shutdown` when the last connection has ended.
    ended: Notify,
    /// Deadlines are milliseconds since this instant.
    origin: Instant,
}

/// No deadline.
const NEVER: u64 = u64::MAX;
/// No slot.
const NIL: u32 = u32::MAX;
/// Buckets of the timer wheel.
const WHEEL: usize = 256;

#[derive(Debug)]
struct Table {
    slots: Chunked<Slot>,
    live: usize,
    /// The wheel: the first slot of each bucket. A slot whose deadline falls in tick
    /// `t` (`deadline / step`) is linked in bucket `t % WHEEL`.
    wheel: [u32; WHEEL],
    /// Slots linked in the wheel.
    linked: usize,
    /// The next tick to sweep.
    swept: u64,
    /// A sweeper task runs; `idle`: it waits for a slot to be linked.
    sweeper: bool,
    idle: bool,
    /// The listener has stopped: the sweeper ends with the last connection.
    closed: bool,
    /// Milliseconds per tick of the wheel.
    step: u64,
}

/// One connection's place in the table.
#[derive(Debug)]
struct Slot {
    waker: Option<Waker>,
    /// When the connection's wait ends (`NEVER`: it has none).
    deadline: u64,
    /// The deadline the slot is linked in the wheel with (`NEVER`: not linked).
    linked: u64,
    next: u32,
    prev: u32,
    /// The deadline has passed (reset when a new one is set).
    expired: bool,
    /// The connection's place under the server's connection limit and on its worker:
    /// kept here rather than in the connection's task, whose size counts for every
    /// idle connection.
    place: Option<Place>,
}

impl Slot {
    const EMPTY: Slot = Slot {
        waker: None,
        deadline: NEVER,
        linked: NEVER,
        next: NIL,
        prev: NIL,
        expired: false,
        place: None,
    };
}

impl Table {
    fn slot(&mut self, index: u32) -> &mut Slot {
        self.slots.get_mut(index)
    }

    /// A new, empty slot.
    fn take(&mut self) -> u32 {
        self.slots.insert(Slot::EMPTY)
    }

    /// Give `index` back (what it holds is dropped).
    fn give(&mut self, index: u32) {
        self.unlink(index);
        self.slots.remove(index);
    }

    fn bucket(&self, at: u64) -> usize {
        (at / self.step) as usize % WHEEL
    }

    /// Link `index` into the bucket of `at`.
    fn link(&mut self, index: u32, at: u64) {
        let bucket = self.bucket(at);
        let head = self.wheel[bucket];
        if head != NIL {
            self.slot(head).prev = index;
        }
        let slot = self.slot(index);
        slot.linked = at;
        slot.next = head;
        slot.prev = NIL;
        self.wheel[bucket] = index;
        self.linked += 1;
    }

    fn unlink(&mut self, index: u32) {
        let slot = self.slot(index);
        if slot.linked == NEVER {
            return;
        }
        let (at, next, prev) = (slot.linked, slot.next, slot.prev);
        slot.linked = NEVER;
        slot.next = NIL;
        slot.prev = NIL;
        if prev == NIL {
            let bucket = self.bucket(at);
            self.wheel[bucket] = next;
        } else {
            self.slot(prev).next = next;
        }
        if next != NIL {
            self.slot(next).prev = prev;
        }
        self.linked -= 1;
    }

    /// Wake the slots of `bucket` whose deadlines are past `now`; move on those whose
    /// deadlines were set later than they were linked with.
    fn sweep_bucket(&mut self, bucket: usize, now: u64) {
        let mut index = self.wheel[bucket];
        while index != NIL {
            let slot = self.slot(index);
            let (next, deadline) = (slot.next, slot.deadline);
            if deadline <= now {
                self.unlink(index);
                let slot = self.slot(index);
                slot.expired = true;
                if let Some(waker) = &slot.waker {
                    waker.wake_by_ref();
                }
            } else if deadline == NEVER {
                self.unlink(index);
            } else if self.bucket(deadline) != bucket {
                self.unlink(index);
                self.link(index, deadline);
            }
            index = next;
        }
    }
}
impl Drain {
    /// The connections of a listener whose header read timeout is `timeout` (it sets
    /// how coarse the deadlines are).
    pub(crate) fn new(timeout: Duration) -> Self {
        let step = u64::try_from((timeout / 64).as_millis())
            .unwrap_or(u64::MAX)
            .clamp(10, 1000);
        Drain {
            shared: Arc::new(Shared {
                draining: AtomicBool::new(false),
                table: Mutex::new(Table {
                    slots: Chunked::default(),
                    live: 0,
                    wheel: [NIL; WHEEL],
                    linked: 0,
                    swept: 0,
                    sweeper: false,
                    // The sweeper starts as if woken from waiting.
                    idle: true,
                    closed: false,
                    step,
                }),
                sweep: Notify::new(),
                ended: Notify::new(),
                origin: Instant::now(),
            }),
        }
    }

    /// A new connection's signal (counted from now on: shutdown waits for it). It also
    /// keeps the connection's `place` (under the server's connection limit and on its
    /// worker) until the connection ends.
    pub(crate) fn signal(&self, place: Option<Place>) -> Signal {
        Drain::signal_on(&self.shared, place)
    }

    fn signal_on(shared: &Arc<Shared>, place: Option<Place>) -> Signal {
        let mut table = shared.lock();
        table.live += 1;
        let slot = table.take();
        table.slot(slot).place = place;
        drop(table);
        Signal {
            shared: shared.clone(),
            slot,
            registered: false,
            open: None,
        }
    }

    /// Ask every connection to shut down, and wait until all of them have ended.
    pub(crate) async fn shutdown(self) {
        let shared = &self.shared;
        {
            // Set under the table's lock: a connection registering its waker either
            // sees the flag or is woken here.
            let table = shared.lock();
            shared.draining.store(true, Ordering::Release);
            for slot in table.slots.values() {
                if let Some(waker) = &slot.waker {
                    waker.wake_by_ref();
                }
            }
        }
        loop {
            let ended = shared.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if shared.lock().live == 0 {
                return;
            }
            ended.await;
        }
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.sweep.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        // The moment's reading, where one is open (a native connection's poll).
        let elapsed = crate::clock::now().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_millis()).unwrap_or(NEVER - 1)
    }
}

/// While slots are linked, wake at each tick and wake the connections whose deadlines
/// have passed; otherwise wait for one to be linked. Ends once the listener has
/// stopped and its last connection has gone.
async fn sweep(shared: Arc<Shared>) {
    loop {
        let next_tick = {
            let mut table = shared.lock();
            if table.closed && table.live == 0 {
                table.sweeper = false;
                return;
            }
            let now = shared.now();
            let step = table.step;
            // Ticks wholly past: their buckets hold only deadlines up to `now`.
            let current = now / step;
            if table.idle {
                table.idle = false;
                table.swept = current;
            }
            let behind = current.saturating_sub(table.swept);
            for tick in table.swept..table.swept + behind.min(WHEEL as u64) {
                table.sweep_bucket(tick as usize % WHEEL, now);
            }
            table.swept = current;
            if table.linked == 0 {
                table.idle = true;
                None
            } else {
                Some((current + 1) * step)
            }
        };
        let woken = shared.sweep.notified();
        match next_tick {
            None => woken.await,
            Some(at) => {
                tokio::time::sleep_until(shared.origin + Duration::from_millis(at)).await;
            }
        }
    }
}

/// A connection's place among its listener's (see [`Drain::signal`]): whether shutdown
/// has started, and the deadline of what it waits for.
#[derive(Debug)]
pub(crate) struct Signal {
    shared: Arc<Shared>,
    slot: u32,
    /// The task's waker is in the slot (shutdown wakes it).
    registered: bool,
    /// Counts the connection as open (by protocol) while it lives; in the padding.
    open: Option<crate::server::counts::Open>,
}

impl Signal {
    /// Count the connection as open in `open`'s protocol until it ends.
    pub(crate) fn count(&mut self, open: crate::server::counts::Open) {
        self.open = Some(open);
    }

    /// Whether shutdown has started. The first call registers the task's waker (it is
    /// woken when shutdown starts); later ones read a flag.
    #[inline(always)]
    pub(crate) fn poll_draining(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.registered {
            self.register(cx);
        }
        self.shared.draining.load(Ordering::Acquire)
    }

    #[inline(never)]
    fn register(&mut self, cx: &mut Context<'_>) {
        self.registered = true;
        let mut table = self.shared.lock();
        set_waker(table.slot(self.slot), cx);
    }

    /// Whether shutdown has started, without registering for it.
    pub(crate) fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::Acquire)
    }

    /// Ready once the deadline has passed; `restart`: a new deadline, that long from
    /// now (a wait begins). Wakes the task when it passes (within the listener's
    /// step). Also registers for shutdown, as [`poll_draining`](Self::poll_draining).
    pub(crate) fn poll_deadline(
        &mut self,
        cx: &mut Context<'_>,
        restart: Option<Duration>,
    ) -> Poll<()> {
        self.registered = true;
        let shared = &*self.shared;
        let now = restart.map(|_| shared.now());
        let mut table = shared.lock();
        let slot = table.slot(self.slot);
        set_waker(slot, cx);
        match (restart, now) {
            (Some(after), Some(now)) => {
                self.set_deadline(&mut table, now, after);
                Poll::Pending
            }
            _ if slot.expired => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }

    /// A new deadline, `after` from now, without registering a waker: the task that
    /// polls [`poll_deadline`](Self::poll_deadline) next is woken when it passes.
    pub(crate) fn restart(&mut self, after: Duration) {
        let now = self.shared.now();
        let mut table = self.shared.lock();
        self.set_deadline(&mut table, now, after);
    }

    /// The deadline `after` from now, if that is sooner than the one set; without
    /// registering a waker (as [`restart`](Self::restart)).
    pub(crate) fn shorten(&mut self, after: Duration) {
        let now = self.shared.now();
        let mut table = self.shared.lock();
        if deadline_after(now, after) < table.slot(self.slot).deadline {
            self.set_deadline(&mut table, now, after);
        }
    }

    fn set_deadline(&self, table: &mut Table, now: u64, after: Duration) {
        let deadline = deadline_after(now, after);
        let slot = table.slot(self.slot);
        slot.deadline = deadline;
        slot.expired = false;
        if slot.linked <= deadline {
            // The sweeper finds the new deadline when it reaches the slot.
            return;
        }
        table.unlink(self.slot);
        table.link(self.slot, deadline);
        if !table.sweeper {
            table.sweeper = true;
            tokio::spawn(sweep(self.shared.clone()));
        } else if table.idle {
            self.shared.sweep.notify_one();
        }
    }

    /// Another connection's signal on the same listener (counted from now on), keeping
    /// `place` (see [`Drain::signal`]).
    pub(crate) fn sibling(&self, place: Option<Place>) -> Signal {
        Drain::signal_on(&self.shared, place)
    }

    /// The connection's place (under the connection limit, on its worker), taken out (it
    /// moves with the connection; the signal no longer releases it).
    pub(crate) fn take_place(&mut self) -> Option<Place> {
        self.shared.lock().slot(self.slot).place.take()
    }
}

/// The deadline `after` from `now` (milliseconds; at least one ahead, never `NEVER`).
fn deadline_after(now: u64, after: Duration) -> u64 {
    let millis = u64::try_from(after.as_millis()).unwrap_or(NEVER - 1);
    now.saturating_add(millis.max(1)).min(NEVER - 1)
}

/// Keep `cx`'s waker in `slot` (cloned only when it changed).
fn set_waker(slot: &mut Slot, cx: &Context<'_>) {
    match &slot.waker {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => slot.waker = Some(cx.waker().clone()),
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        let mut table = self.shared.lock();
        table.give(self.slot);
        table.live -= 1;
        if table.live == 0 {
            self.shared.ended.notify_waiters();
            if table.closed {
                self.shared.sweep.notify_one();
            }
        }
    }
}

/// A hyper connection that can be asked to shut down gracefully (hyper-util's
/// `GracefulConnection` is sealed, and lacks hyper's HTTP/1.1 connection with upgrades).
pub(crate) trait Graceful: Future {
    /// Finish the requests in flight, take no new one, then end.
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, B> Graceful for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, S, B, E> Graceful for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self);
    }
}

/// Drive `connection` to its end; once draining starts it is asked to shut down
/// gracefully (finish the request in flight, then close).
pub(crate) fn watch<C: Graceful>(signal: Signal, connection: C) -> Watched<C> {
    Watched {
        connection,
        signal,
        asked: false,
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

impl<C: Graceful> Future for Watched<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let mut this = self.project();
        if !*this.asked && this.signal.poll_draining(cx) {
            *this.asked = true;
            this.connection.as_mut().graceful_shutdown();
        }
        this.connection.poll(cx)
    }
}

#[cfg(test)]
mod tests;
