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
//! table (its waker and deadline); one sweeper task per listener sleeps until the
//! earliest deadline, rounded up to a coarse step (1/64 of the header read timeout,
//! from 1 ms to 1 s), and wakes the connections whose deadlines have passed. Setting a
//! later deadline than the one a slot is queued with costs no queue operation: the
//! sweeper finds it when the queued one comes up and queues the slot again — so a
//! keep-alive connection's deadline, set again for every request, touches the queue
//! about once per timeout.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use pin_project_lite::pin_project;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;

/// The connections of one listener, their deadlines and their shutdown.
#[derive(Debug)]
pub(crate) struct Drain {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    draining: AtomicBool,
    table: Mutex<Table>,
    /// Wakes the sweeper: a deadline earlier than the one it sleeps until, or the
    /// last connection gone once the listener has.
    sweep: Notify,
    /// Wakes `shutdown` when the last connection has ended.
    ended: Notify,
    /// Deadlines are milliseconds since this instant.
    origin: Instant,
    /// The sweeper wakes at multiples of this many milliseconds.
    step: u64,
}

/// No deadline.
const NEVER: u64 = u64::MAX;

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    /// Queued deadlines: (deadline, slot, the slot's generation when queued).
    queue: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// Entries of `queue` that no longer count (their connection has gone, or queued
    /// an earlier deadline): the queue is compacted when they are most of it.
    stale: usize,
    /// The deadline the sweeper sleeps until (`NEVER`: none, or no sweeper yet).
    armed: u64,
    sweeper: bool,
    /// The listener has stopped: the sweeper ends with the last connection.
    closed: bool,
}

/// One connection's place in the table.
#[derive(Debug)]
struct Slot {
    waker: Option<Waker>,
    /// When the connection's wait ends (`NEVER`: it has none).
    deadline: u64,
    /// The deadline this slot is queued with (`NEVER`: not queued).
    queued: u64,
    /// Counts the connections that have held the slot: queue entries of an earlier
    /// one are ignored.
    generation: u32,
    /// The deadline has passed (reset when a new one is set).
    expired: bool,
}

impl Drain {
    /// The connections of a listener whose header read timeout is `timeout` (it sets
    /// how coarse the deadlines are).
    pub(crate) fn new(timeout: Duration) -> Self {
        let step = u64::try_from((timeout / 64).as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, 1000);
        Drain {
            shared: Arc::new(Shared {
                draining: AtomicBool::new(false),
                table: Mutex::new(Table {
                    armed: NEVER,
                    ..Table::default()
                }),
                sweep: Notify::new(),
                ended: Notify::new(),
                origin: Instant::now(),
                step,
            }),
        }
    }

    /// A new connection's signal (counted from now on: shutdown waits for it). It also
    /// keeps the connection's `permit` (its place under the listener's connection
    /// limit) until the connection ends.
    pub(crate) fn signal(&self, permit: Option<OwnedSemaphorePermit>) -> Signal {
        let mut table = self.shared.lock();
        table.live += 1;
        let slot = match table.free.pop() {
            Some(slot) => slot,
            None => {
                table.slots.push(Slot {
                    waker: None,
                    deadline: NEVER,
                    queued: NEVER,
                    generation: 0,
                    expired: false,
                });
                u32::try_from(table.slots.len() - 1).expect("fewer than 2^32 connections")
            }
        };
        drop(table);
        Signal {
            shared: self.shared.clone(),
            slot,
            registered: false,
            _permit: permit,
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
            for slot in &table.slots {
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
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(NEVER - 1)
    }
}

/// Wake the connections whose deadlines have passed, then sleep until the next one;
/// ends once the listener has stopped and its last connection has gone.
async fn sweep(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut table = shared.lock();
            if table.closed && table.live == 0 {
                table.sweeper = false;
                return;
            }
            let now = shared.now();
            while let Some(&Reverse((at, index, generation))) = table.queue.peek() {
                if at > now {
                    break;
                }
                table.queue.pop();
                let slot = &mut table.slots[index as usize];
                if slot.generation != generation || slot.queued != at {
                    table.stale = table.stale.saturating_sub(1);
                    continue;
                }
                slot.queued = NEVER;
                if slot.deadline <= now {
                    slot.expired = true;
                    if let Some(waker) = &slot.waker {
                        waker.wake_by_ref();
                    }
                } else if slot.deadline != NEVER {
                    // Set again since it was queued: queued again.
                    let deadline = slot.deadline;
                    slot.queued = deadline;
                    table.queue.push(Reverse((deadline, index, generation)));
                }
            }
            let next = table.queue.peek().map_or(NEVER, |Reverse((at, ..))| *at);
            table.armed = next;
            next
        };
        let woken = shared.sweep.notified();
        if next == NEVER {
            woken.await;
        } else {
            let wake_at = next.div_ceil(shared.step).saturating_mul(shared.step);
            let sleep = tokio::time::sleep_until(shared.origin + Duration::from_millis(wake_at));
            tokio::select! {
                () = sleep => {}
                () = woken => {}
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
    _permit: Option<OwnedSemaphorePermit>,
}

impl Signal {
    /// Whether shutdown has started. The first call registers the task's waker (it is
    /// woken when shutdown starts); later ones read a flag.
    pub(crate) fn poll_draining(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.registered {
            self.registered = true;
            let mut table = self.shared.lock();
            set_waker(&mut table.slots[self.slot as usize], cx);
        }
        self.shared.draining.load(Ordering::Acquire)
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
        let slot = &mut table.slots[self.slot as usize];
        set_waker(slot, cx);
        let (Some(after), Some(now)) = (restart, now) else {
            return if slot.expired {
                Poll::Ready(())
            } else {
                Poll::Pending
            };
        };
        let millis = u64::try_from(after.as_millis()).unwrap_or(NEVER - 1);
        let deadline = now.saturating_add(millis.max(1)).min(NEVER - 1);
        slot.deadline = deadline;
        slot.expired = false;
        if slot.queued <= deadline {
            // The sweeper finds the new deadline when the queued one comes up.
            return Poll::Pending;
        }
        let superseded = slot.queued != NEVER;
        slot.queued = deadline;
        let generation = slot.generation;
        if superseded {
            table.stale += 1;
        }
        table.queue.push(Reverse((deadline, self.slot, generation)));
        if !table.sweeper {
            table.sweeper = true;
            table.armed = deadline;
            tokio::spawn(sweep(self.shared.clone()));
        } else if deadline < table.armed {
            table.armed = deadline;
            shared.sweep.notify_one();
        }
        Poll::Pending
    }
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
        let slot = &mut table.slots[self.slot as usize];
        let queued = slot.queued != NEVER;
        slot.waker = None;
        slot.deadline = NEVER;
        slot.queued = NEVER;
        slot.expired = false;
        slot.generation = slot.generation.wrapping_add(1);
        table.free.push(self.slot);
        table.live -= 1;
        if queued {
            table.stale += 1;
            // Connections that close before their deadline leave entries behind: a
            // listener with many short-lived connections compacts them away.
            if table.stale > 1024 && table.stale > table.queue.len() / 2 {
                let Table {
                    queue,
                    slots,
                    stale,
                    ..
                } = &mut *table;
                queue.retain(|Reverse((at, index, generation))| {
                    let slot = &slots[*index as usize];
                    slot.generation == *generation && slot.queued == *at
                });
                *stale = 0;
            }
        }
        if table.live == 0 {
            self.shared.ended.notify_waiters();
            if table.closed {
                self.shared.sweep.notify_one();
            }
        }
    }
}

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
        if !*this.asked && this.signal.poll_draining(cx) {
            *this.asked = true;
            this.connection.as_mut().graceful_shutdown();
        }
        this.connection.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    const STEP_10_MS: Duration = Duration::from_millis(640);

    #[tokio::test(start_paused = true)]
    async fn a_deadline_wakes_its_connection_once_passed() {
        let drain = Drain::new(STEP_10_MS);
        let mut signal = drain.signal(None);
        let started = Instant::now();
        let mut restart = Some(Duration::from_millis(100));
        poll_fn(|cx| signal.poll_deadline(cx, restart.take())).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took <= Duration::from_millis(110),
            "{took:?}"
        );
    }

    /// A keep-alive connection sets its deadline again for every request: the later
    /// deadline counts, found when the queued one comes up.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_set_again_replaces_the_queued_one() {
        let drain = Drain::new(STEP_10_MS);
        let mut signal = drain.signal(None);
        let started = Instant::now();
        let wait = Some(Duration::from_millis(100));
        let first = poll_fn(|cx| Poll::Ready(signal.poll_deadline(cx, wait))).await;
        assert!(first.is_pending());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut restart = wait;
        poll_fn(|cx| signal.poll_deadline(cx, restart.take())).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took <= Duration::from_millis(160),
            "{took:?}"
        );
        assert_eq!(drain.shared.lock().queue.len(), 0, "nothing left queued");
    }

    /// An earlier deadline than the one the sweeper sleeps for wakes it.
    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_is_not_kept_waiting_for_a_later_one() {
        let drain = Drain::new(STEP_10_MS);
        let (mut late, mut early) = (drain.signal(None), drain.signal(None));
        let started = Instant::now();
        let late_wait = Some(Duration::from_secs(60));
        assert!(poll_fn(|cx| Poll::Ready(late.poll_deadline(cx, late_wait)))
            .await
            .is_pending());
        let mut restart = Some(Duration::from_millis(30));
        poll_fn(|cx| early.poll_deadline(cx, restart.take())).await;
        assert!(started.elapsed() <= Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_every_connection_and_waits_for_them() {
        let drain = Drain::new(Duration::from_secs(30));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let mut signal = drain.signal(None);
            tasks.spawn(async move {
                poll_fn(|cx| {
                    if signal.poll_draining(cx) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
            });
        }
        tokio::time::timeout(Duration::from_secs(1), drain.shutdown())
            .await
            .expect("shutdown ends once its connections have");
        assert_eq!(tasks.join_all().await.len(), 2);
    }

    /// Connections that close before their deadlines leave no unbounded queue behind.
    #[tokio::test(start_paused = true)]
    async fn the_deadlines_of_closed_connections_are_compacted_away() {
        let drain = Drain::new(STEP_10_MS);
        let wait = Some(Duration::from_secs(30));
        for _ in 0..10_000 {
            let mut signal = drain.signal(None);
            assert!(poll_fn(|cx| Poll::Ready(signal.poll_deadline(cx, wait)))
                .await
                .is_pending());
        }
        let table = drain.shared.lock();
        assert!(table.queue.len() <= 2100, "{} entries", table.queue.len());
        assert_eq!(table.slots.len(), 1, "the slot is reused");
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweeper_ends_with_the_listener_and_its_last_connection() {
        let drain = Drain::new(STEP_10_MS);
        let shared = drain.shared.clone();
        let mut signal = drain.signal(None);
        let wait = Some(Duration::from_secs(60));
        assert!(poll_fn(|cx| Poll::Ready(signal.poll_deadline(cx, wait)))
            .await
            .is_pending());
        assert!(shared.lock().sweeper);
        drop(drain);
        drop(signal);
        for _ in 0..100 {
            if !shared.lock().sweeper {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the sweeper is still running");
    }
}
