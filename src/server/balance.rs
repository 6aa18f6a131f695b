//! Connections spread over the workers by how many each holds.
//!
//! Each worker accepts on a listening socket of its own (`SO_REUSEPORT`), and the
//! kernel picks the socket by a hash of the connection's addresses: for a few dozen
//! connections that is often uneven (15/17, 11/21 of 32 seen), and the worker holding
//! more answers them later. So a worker keeps a connection it accepted only while it
//! holds fewer than [`SPREAD`] more than the least-loaded worker; otherwise it hands
//! the connection (not yet read from) to that worker, whose accept loop takes it from
//! its inbox. Only connections that would deepen an imbalance move; each move costs
//! a channel message and moving the socket between the workers' reactors.
//!
//! At the server's connection limit a new connection does not simply wait for one to
//! end: idle keep-alive connections parked by the native HTTP/1.1 engine (each worker's
//! lots, see [`Reclaim`]) are closed, the longest-waiting of a lot first, to admit it —
//! as nginx, out of `worker_connections`, closes its idle keep-alive connections. Only
//! when none is parked does the new connection wait (in the kernel's backlog behind it).

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify, Semaphore, SemaphorePermit, TryAcquireError};

/// A worker keeps a connection it accepted while it holds fewer than this many more
/// than the least-loaded worker.
const SPREAD: usize = 2;

/// The count of a worker that takes no more connections: never the least loaded (and
/// far from overflowing when its connections end or others are counted beside it).
const FULL: usize = usize::MAX / 4;

/// The connections of a server: its limit, how many each worker holds, and each
/// worker's inbox for each listener.
pub(super) struct Balance {
    /// Free places under the server's connection limit.
    connections: Semaphore,
    /// The limit.
    limit: usize,
    /// Connections held by each worker.
    open: Box<[AtomicUsize]>,
    /// Listener `l`'s inbox on worker `w` at `l * workers + w`.
    inboxes: Box<[mpsc::UnboundedSender<Handoff>]>,
    /// Where idle connections wait without a task, to be closed at the limit.
    idle: Mutex<Idle>,
    /// Woken when a connection goes idle while the limit is reached: a connection
    /// waiting for a place may close it.
    went_idle: Notify,
}

/// The places idle connections wait in, and what the log has been told of closing them.
#[derive(Default)]
struct Idle {
    lots: Vec<Arc<dyn Reclaim>>,
    /// Idle connections closed to admit others since the last warning.
    closed: u64,
    warned: Option<Instant>,
}

/// A set of idle connections the server may close to admit new ones at its connection
/// limit (the native engine's lot of parked keep-alive connections).
pub(crate) trait Reclaim: Send + Sync {
    /// Close the idle connection that has waited longest, if there is one (its place
    /// under the limit is given back as it drops): whether one was closed.
    fn close_oldest(&self) -> bool;
}

/// At most one warning this often that the connection limit closes idle connections.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A connection one worker accepted and gave to another.
pub(super) struct Handoff {
    stream: std::net::TcpStream,
    remote: SocketAddr,
    place: Place,
}

impl Handoff {
    /// The connection, registered with this worker's reactor (`None`, logged, where
    /// that fails: the socket closes).
    pub(super) fn take(self) -> Option<(tokio::net::TcpStream, SocketAddr, Place)> {
        let remote = self.remote;
        match tokio::net::TcpStream::from_std(self.stream) {
            Ok(stream) => Some((stream, remote, self.place)),
            Err(e) => {
                tracing::debug!(error = %e, %remote, "cannot take a handed connection");
                None
            }
        }
    }
}

/// What one worker's accept loop for one listener needs of the balance.
pub(super) struct Lane {
    pub(super) balance: Arc<Balance>,
    pub(super) listener: usize,
    pub(super) worker: usize,
    /// Connections other workers accepted on this listener and gave to this one.
    pub(super) inbox: mpsc::UnboundedReceiver<Handoff>,
}

impl Balance {
    /// The lanes of a balance of `workers` workers serving `listeners` listeners, at
    /// most `max_connections` connections in all: by worker, then by listener.
    pub(super) fn lanes(
        max_connections: usize,
        workers: usize,
        listeners: usize,
    ) -> Vec<Vec<Lane>> {
        let workers = workers.max(1);
        let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..listeners * workers)
            .map(|_| mpsc::unbounded_channel())
            .unzip();
        let balance = Arc::new(Balance {
            connections: Semaphore::new(max_connections),
            limit: max_connections,
            open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            inboxes: inboxes.into(),
            idle: Mutex::default(),
            went_idle: Notify::new(),
        });
        let mut receivers = receivers.into_iter();
        let mut lanes: Vec<Vec<Lane>> = (0..workers).map(|_| Vec::new()).collect();
        for listener in 0..listeners {
            for (worker, own) in lanes.iter_mut().enumerate() {
                own.push(Lane {
                    balance: balance.clone(),
                    listener,
                    worker,
                    inbox: receivers.next().expect("one receiver per lane"),
                });
            }
        }
        lanes
    }

    /// A place under the connection limit for a connection worker `me` accepted, on
    /// the worker that is to serve it. At the limit, an idle connection is closed to
    /// make one; with none idle, it waits for a connection to end or go idle. `None`
    /// once the limit is closed.
    pub(super) async fn admit(self: &Arc<Self>, me: usize) -> Option<Place> {
        match self.connections.try_acquire() {
            Ok(permit) => permit.forget(),
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => self.admit_at_limit().await?.forget(),
        }
        Some(Place {
            balance: self.clone(),
            worker: self.choose(me),
        })
    }

    /// [`Balance::admit`] at the limit.
    async fn admit_at_limit(&self) -> Option<SemaphorePermit<'_>> {
        loop {
            // Listening for connections going idle before looking for one, so that one
            // parked after the look still wakes this.
            let went_idle = self.went_idle.notified();
            let mut went_idle = std::pin::pin!(went_idle);
            went_idle.as_mut().enable();
            match self.connections.try_acquire() {
                Ok(permit) => return Some(permit),
                Err(TryAcquireError::Closed) => return None,
                Err(TryAcquireError::NoPermits) => {}
            }
            if self.close_idle() {
                continue;
            }
            tokio::select! {
                permit = self.connections.acquire() => return permit.ok(),
                () = went_idle => {}
            }
        }
    }

    /// Close one idle connection, the longest-waiting of the first lot that has one:
    /// whether one was closed.
    fn close_idle(&self) -> bool {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if !idle.lots.iter().any(|lot| lot.close_oldest()) {
            return false;
        }
        idle.closed += 1;
        if idle.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            tracing::warn!(
                limit = self.limit,
                closed = idle.closed,
                "at the connection limit: closing idle keep-alive connections to admit new ones"
            );
            idle.warned = Some(Instant::now());
            idle.closed = 0;
        }
        true
    }

    /// Let the connection limit close `lot`'s idle connections to admit new ones.
    pub(super) fn reclaim_from(&self, lot: Arc<dyn Reclaim>) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lots
            .push(lot);
    }

    /// The worker to serve a connection `me` accepted, counted on it: `me` unless it
    /// holds at least [`SPREAD`] more than the least-loaded worker. Counted by compare and
    /// swap on the value the choice was made by, so that workers choosing at once
    /// cannot all add to the same worker on a stale count.
    fn choose(&self, me: usize) -> usize {
        loop {
            let own = self.open[me].load(Relaxed);
            let (least, at) = self
                .open
                .iter()
                .enumerate()
                .map(|(i, n)| (n.load(Relaxed), i))
                .min()
                .expect("at least one worker");
            let (target, seen) = if own < least + SPREAD {
                (me, own)
            } else {
                (at, least)
            };
            if self.open[target]
                .compare_exchange(seen, seen + 1, Relaxed, Relaxed)
                .is_ok()
            {
                return target;
            }
        }
    }
}

impl Lane {
    /// Give a connection accepted here to the worker its place is on: `None` once
    /// handed. Where that worker no longer takes connections on this listener (its
    /// accept loop ended: shutdown, or its listener could not be registered), it is
    /// counted as full from then on and the connection is served here (returned).
    pub(super) fn hand(
        &self,
        stream: tokio::net::TcpStream,
        remote: SocketAddr,
        place: Place,
    ) -> Option<(tokio::net::TcpStream, SocketAddr, Place)> {
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(error = %e, %remote, "cannot hand a connection to another worker");
                return None;
            }
        };
        let workers = self.balance.open.len();
        let inbox = &self.balance.inboxes[self.listener * workers + place.worker];
        let handoff = Handoff {
            stream,
            remote,
            place,
        };
        let Err(mpsc::error::SendError(mut handoff)) = inbox.send(handoff) else {
            return None;
        };
        let place = &mut handoff.place;
        self.balance.open[place.worker].store(FULL, Relaxed);
        place.worker = self.worker;
        self.balance.open[self.worker].fetch_add(1, Relaxed);
        handoff.take()
    }
}

/// A connection's place: under the server's connection limit, and on the worker
/// serving it. Both are given back when it drops.
pub(crate) struct Place {
    balance: Arc<Balance>,
    worker: usize,
}

impl Place {
    /// The worker serving the connection.
    pub(super) fn worker(&self) -> usize {
        self.worker
    }

    /// The connection holding this place has gone idle where the limit may close it
    /// ([`Reclaim`]): at the limit, a connection waiting for a place is woken to.
    pub(crate) fn went_idle(&self) {
        if self.balance.connections.available_permits() == 0 {
            self.balance.went_idle.notify_waiters();
        }
    }
}

impl fmt::Debug for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Place")
            .field("worker", &self.worker)
            .finish()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.balance.open[self.worker].fetch_sub(1, Relaxed);
        self.balance.connections.add_permits(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(lanes: &[Vec<Lane>], me: usize, n: usize) -> Vec<Place> {
        let balance = &lanes[me][0].balance;
        (0..n)
            .map(|_| Place {
                worker: balance.choose(me),
                balance: balance.clone(),
            })
            .collect()
    }

    #[test]
    fn connections_one_worker_accepts_are_spread_once_it_holds_two_more() {
        let lanes = Balance::lanes(100, 3, 1);
        // Worker 0 accepts everything: it keeps two, then a connection whenever it
        // holds fewer than two more than the least-loaded worker.
        let held = places(&lanes, 0, 9);
        let order: Vec<_> = held.iter().map(Place::worker).collect();
        assert_eq!(order, [0, 0, 1, 2, 0, 1, 2, 0, 1]);
        let open: Vec<_> = lanes[0][0]
            .balance
            .open
            .iter()
            .map(|n| n.load(Relaxed))
            .collect();
        assert_eq!(open, [4, 3, 2]);
        // Closing gives the places back: worker 0 keeps new ones again.
        drop(held);
        assert_eq!(places(&lanes, 0, 2)[1].worker(), 0);
    }

    #[test]
    fn lanes_are_by_worker_then_listener() {
        let lanes = Balance::lanes(1, 2, 3);
        for (w, lanes) in lanes.iter().enumerate() {
            for (l, lane) in lanes.iter().enumerate() {
                assert_eq!((lane.worker, lane.listener), (w, l));
            }
        }
    }

    #[tokio::test]
    async fn a_connection_for_a_worker_that_stopped_is_served_where_it_came() {
        let mut lanes = Balance::lanes(10, 2, 1);
        // Worker 1's accept loop is gone (its inbox with it).
        drop(lanes.pop());
        let lane = &lanes[0][0];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, remote) = listener.accept().await.unwrap();
        let mut held = places(&lanes, 0, 2);
        let place = lane.balance.admit(0).await.unwrap();
        assert_eq!(place.worker(), 1, "worker 0 holds two more than worker 1");
        let (_, _, place) = lane
            .hand(stream, remote, place)
            .expect("kept: worker 1 takes no connections");
        assert_eq!(place.worker(), 0);
        held.push(place);
        // Worker 1 counts as full: worker 0 keeps the next ones.
        assert!(places(&lanes, 0, 3).iter().all(|p| p.worker() == 0));
        assert_eq!(lane.balance.open[0].load(Relaxed), 3);
    }

    #[tokio::test]
    async fn the_limit_holds_across_workers() {
        let lanes = Balance::lanes(1, 2, 1);
        let first = lanes[0][0].balance.admit(0).await.unwrap();
        let waiting = lanes[1][0].balance.admit(1);
        tokio::pin!(waiting);
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        drop(first);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("a place once the first is given back")
            .unwrap();
        assert_eq!(second.worker(), 1);
    }
}
