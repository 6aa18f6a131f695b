//! Parked keep-alive connections: no task, no runtime registration, 64 bytes each.
//!
//! A plain TCP connection that has waited [`PARK_AFTER`](super::PARK_AFTER) for its next
//! request with nothing in hand is *parked*: its task ends, its socket leaves tokio's
//! reactor (which frees the socket's registration, 256 bytes) and joins the listener's
//! lot — an epoll set of its own (mio's `Poll`), watched by one task per listener and
//! worker through one `AsyncFd`. What stays of the connection is a record in the lot's
//! table: the socket, the client's address, its place under the connection limit and
//! its header read deadline, 64 bytes (nginx keeps a few hundred per idle connection).
//!
//! When a parked socket becomes readable (a request, or the client's close) the lot
//! takes its record out, hands the socket back to tokio and starts a new connection
//! task for it, whose wait for the head keeps the deadline it had. Records are linked
//! in deadline order — parking order, as every connection of a listener parks the same
//! time before its deadline, so a record joins at the tail — and the lot closes those
//! whose deadline has passed from the front of the list, with one timer. Shutdown
//! closes every parked connection.

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::server::Place;
use mio::unix::SourceFd;
use mio::{Events, Interest, Token};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::super::chunked::Chunked;
use super::super::drain::Signal;

/// No record.
const NIL: u32 = u32::MAX;

/// The parked connections of one listener on one worker.
pub(crate) struct Lot {
    state: Mutex<Table>,
    /// Registers parked sockets in the lot's epoll set.
    registry: mio::Registry,
    /// Deadlines are milliseconds since this instant (wrapping: a deadline is never
    /// more than a keep-alive timeout away).
    origin: Instant,
}

impl std::fmt::Debug for Lot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lot")
            .field("parked", &self.lock().parked)
            .finish_non_exhaustive()
    }
}

struct Table {
    records: Chunked<Record>,
    /// The parked records, oldest (earliest deadline) first.
    head: u32,
    tail: u32,
    parked: usize,
    /// The lot's task, woken when a record is parked with the earliest deadline (its
    /// timer must wait for that one).
    waker: Option<Waker>,
    /// The lot's task has ended (shutdown): nothing parks any more.
    closed: bool,
}

/// A parked connection.
pub(crate) struct Record {
    pub(crate) stream: std::net::TcpStream,
    pub(crate) remote: SocketAddr,
    /// Its place under the listener's connection limit.
    pub(crate) place: Option<Place>,
    /// Its header read deadline, in the lot's milliseconds.
    deadline: u32,
    prev: u32,
    next: u32,
}

impl Table {
    fn record(&mut self, index: u32) -> &mut Record {
        self.records.get_mut(index)
    }

    /// Keep `record`, linked in deadline order: after the last record whose deadline is
    /// not later (the tail, when every record has the same timeout: O(1)). Its index.
    fn put(&mut self, mut record: Record) -> u32 {
        let mut prev = self.tail;
        while prev != NIL && !not_after(self.record(prev).deadline, record.deadline) {
            prev = self.record(prev).prev;
        }
        let next = match prev {
            NIL => self.head,
            prev => self.record(prev).next,
        };
        record.prev = prev;
        record.next = next;
        let index = self.records.insert(record);
        match prev {
            NIL => self.head = index,
            prev => self.record(prev).next = index,
        }
        match next {
            NIL => self.tail = index,
            next => self.record(next).prev = index,
        }
        self.parked += 1;
        index
    }

    /// Take the record of `index` out (`None`: none is parked there).
    fn take(&mut self, index: u32) -> Option<Record> {
        let record = self.records.remove(index)?;
        match record.prev {
            NIL => self.head = record.next,
            prev => self.record(prev).next = record.next,
        }
        match record.next {
            NIL => self.tail = record.prev,
            next => self.record(next).prev = record.prev,
        }
        self.parked -= 1;
        Some(record)
    }
}

/// `a` is at or before `b`, in wrapping milliseconds.
fn not_after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

impl Lot {
    /// A lot and the epoll set its task watches (`None` where one cannot be made: then
    /// connections do not park).
    pub(crate) fn new() -> Option<(Arc<Lot>, AsyncFd<mio::Poll>)> {
        let made = (|| {
            let poll = mio::Poll::new()?;
            let registry = poll.registry().try_clone()?;
            // Sound here: the `AsyncFd` owns the `Poll`, whose descriptor stays open and
            // the same until both are dropped (the crate has no `unsafe` for
            // `register_with_interest`, which states that contract).
            #[allow(deprecated)]
            let poll = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE)?;
            io::Result::Ok((registry, poll))
        })();
        match made {
            Ok((registry, poll)) => Some((
                Arc::new(Lot {
                    state: Mutex::new(Table {
                        records: Chunked::default(),
                        head: NIL,
                        tail: NIL,
                        parked: 0,
                        waker: None,
                        closed: false,
                    }),
                    registry,
                    origin: Instant::now(),
                }),
                poll,
            )),
            Err(error) => {
                tracing::warn!(%error, "no epoll set for idle connections: they keep their tasks");
                None
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u32 {
        // Wrapping on purpose (see `origin`).
        self.origin.elapsed().as_millis() as u32
    }

    /// Park `stream` until it becomes readable, for at most `rest` (what is left of its
    /// wait for a head); closed at once if the lot has shut down.
    pub(crate) fn park(
        &self,
        stream: tokio::net::TcpStream,
        remote: SocketAddr,
        place: Option<Place>,
        rest: Duration,
    ) {
        // Out of tokio's reactor (its registration is freed); still non-blocking.
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let fd = stream.as_raw_fd();
        let millis = u32::try_from(rest.as_millis()).unwrap_or(u32::MAX / 2);
        let deadline = self.now().wrapping_add(millis.clamp(1, u32::MAX / 2));
        let mut table = self.lock();
        if table.closed {
            return;
        }
        // Registered with the table locked: the lot's task looks an event's record up
        // under the lock, so it finds it there.
        let index = table.put(Record {
            stream,
            remote,
            place,
            deadline,
            prev: NIL,
            next: NIL,
        });
        if let Err(error) = self.registry.register(
            &mut SourceFd(&fd),
            Token(index as usize),
            Interest::READABLE,
        ) {
            tracing::debug!(%error, %remote, "could not park an idle connection; closing it");
            // Dropped: the socket closes and its place under the limit is released.
            let _ = table.take(index);
            return;
        }
        // The earliest deadline now: the lot's timer must learn it.
        if table.head == index {
            if let Some(waker) = table.waker.take() {
                waker.wake();
            }
        }
        // At the connection limit, a new connection may close this one to get in.
        if let Some(place) = &table.record(index).place {
            place.went_idle();
        }
    }

    /// Take the record of the connection `token` names out of the lot and its epoll
    /// set (`None` if it is no longer parked).
    fn unpark(&self, token: Token) -> Option<Record> {
        let index = u32::try_from(token.0).ok()?;
        let record = self.lock().take(index)?;
        let _ = self
            .registry
            .deregister(&mut SourceFd(&record.stream.as_raw_fd()));
        Some(record)
    }

    /// Close the connections whose deadline has passed; the next deadline, if any.
    /// Keeps `waker` to be woken when a connection parks with the earliest deadline.
    fn expire(&self, waker: &Waker) -> Option<Instant> {
        let now = self.now();
        let mut table = self.lock();
        match &table.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => table.waker = Some(waker.clone()),
        }
        while table.head != NIL {
            let head = table.head;
            let deadline = table.record(head).deadline;
            if !not_after(deadline, now) {
                let left = Duration::from_millis(u64::from(deadline.wrapping_sub(now)));
                return Some(Instant::now() + left);
            }
            // Dropped: the socket closes and its place under the limit is released.
            let _ = table.take(head);
        }
        None
    }

    /// Shut down: every parked connection is closed, and nothing parks any more.
    fn close(&self) {
        let mut table = self.lock();
        table.closed = true;
        table.waker = None;
        table.head = NIL;
        table.tail = NIL;
        table.parked = 0;
        table.records = Chunked::default();
    }

    /// What is left of a record's wait for a head.
    fn left(&self, record: &Record) -> Duration {
        let left = record.deadline.wrapping_sub(self.now()) as i32;
        Duration::from_millis(u64::try_from(left).unwrap_or(0))
    }

    /// Connections parked now.
    #[cfg(test)]
    pub(crate) fn parked(&self) -> usize {
        self.lock().parked
    }
}

impl crate::server::balance::Reclaim for Lot {
    /// The parked connection whose wait ends first closes: the one parked longest, as
    /// the connections of a lot wait as long (see [`Table::put`]).
    fn close_oldest(&self) -> bool {
        let oldest = {
            let mut table = self.lock();
            let head = table.head;
            table.take(head)
        };
        // Dropped unlocked: the socket closes and its place under the limit is released.
        oldest.is_some()
    }
}

/// The lot's task: resume each parked connection whose socket becomes readable (with
/// `resume`), close those past their deadline, and on shutdown (`signal`) close them
/// all.
pub(crate) async fn watch(
    lot: Arc<Lot>,
    mut poll: AsyncFd<mio::Poll>,
    mut signal: Signal,
    mut resume: impl FnMut(Record, Duration, &Signal),
) {
    let mut events = Events::with_capacity(256);
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut armed: Option<Instant> = None;
    poll_fn(|cx: &mut Context<'_>| loop {
        if signal.poll_draining(cx) {
            return Poll::Ready(());
        }
        match poll.poll_read_ready_mut(cx) {
            Poll::Ready(Ok(mut ready)) => {
                match ready.get_inner_mut().poll(&mut events, Some(Duration::ZERO)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(error) => {
                        tracing::warn!(%error, "the parked connections' epoll set failed; closing them");
                        return Poll::Ready(());
                    }
                }
                if events.is_empty() {
                    ready.clear_ready();
                }
                for event in events.iter() {
                    if let Some(record) = lot.unpark(event.token()) {
                        let left = lot.left(&record);
                        resume(record, left, &signal);
                    }
                }
                continue;
            }
            Poll::Ready(Err(error)) => {
                tracing::warn!(%error, "the parked connections' epoll set failed; closing them");
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
        match lot.expire(cx.waker()) {
            Some(at) => {
                if armed != Some(at) {
                    armed = Some(at);
                    timer.as_mut().reset(at);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    armed = None;
                    continue;
                }
            }
            None => armed = None,
        }
        return Poll::Pending;
    })
    .await;
    lot.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::chunked::CHUNK;
    use crate::server::drain::Drain;
    use crate::testing::tcp_pair;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;

    const LIMIT: Duration = Duration::from_secs(10);

    /// A lot whose task sends each resumed record (with what was left of its
    /// deadline) to the returned receiver.
    fn lot(drain: &Drain) -> (Arc<Lot>, mpsc::UnboundedReceiver<(Record, Duration)>) {
        let (lot, poll) = Lot::new().expect("an epoll set");
        let (tx, rx) = mpsc::unbounded_channel();
        let resume = move |record, left, _: &Signal| {
            let _ = tx.send((record, left));
        };
        tokio::spawn(watch(lot.clone(), poll, drain.signal(None), resume));
        (lot, rx)
    }

    async fn closed(client: &mut TcpStream) {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(LIMIT, client.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    }

    #[tokio::test]
    async fn parked_connections_resume_when_readable_and_close_at_their_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let drain = Drain::new(Duration::from_secs(1));
        let (lot, mut resumed) = lot(&drain);
        // More than a chunk of the table.
        let mut clients = Vec::new();
        for _ in 0..CHUNK + 10 {
            let (client, server) = tcp_pair(&listener).await;
            let remote = server.peer_addr().unwrap();
            lot.park(server, remote, None, Duration::from_secs(30));
            clients.push((client, remote));
        }
        assert_eq!(lot.parked(), CHUNK + 10);
        // Every other one sends a request: those, and only those, resume.
        for (client, _) in clients.iter_mut().step_by(2) {
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        }
        let mut seen = Vec::new();
        for _ in (0..CHUNK + 10).step_by(2) {
            let (record, left) = tokio::time::timeout(LIMIT, resumed.recv())
                .await
                .unwrap()
                .unwrap();
            assert!(left > Duration::from_secs(20) && left <= Duration::from_secs(30));
            let mut request = [0u8; 18];
            let mut stream = TcpStream::from_std(record.stream).unwrap();
            stream.read_exact(&mut request).await.unwrap();
            assert_eq!(&request, b"GET / HTTP/1.1\r\n\r\n");
            seen.push(record.remote);
        }
        let expected: Vec<_> = clients.iter().step_by(2).map(|(_, r)| *r).collect();
        seen.sort();
        let mut sorted = expected.clone();
        sorted.sort();
        assert_eq!(seen, sorted);
        assert_eq!(lot.parked(), (CHUNK + 10) / 2);

        // A short deadline: closed by the lot, never resumed.
        let (mut client, server) = tcp_pair(&listener).await;
        let remote = server.peer_addr().unwrap();
        lot.park(server, remote, None, Duration::from_millis(50));
        closed(&mut client).await;
        assert_eq!(lot.parked(), (CHUNK + 10) / 2);
        assert!(resumed.try_recv().is_err(), "an expired connection resumed");

        // Shutdown closes the parked ones; a connection parked afterwards closes.
        tokio::time::timeout(LIMIT, drain.shutdown()).await.unwrap();
        for (client, _) in clients.iter_mut().skip(1).step_by(2) {
            closed(client).await;
        }
        let (mut client, server) = tcp_pair(&listener).await;
        let remote = server.peer_addr().unwrap();
        lot.park(server, remote, None, Duration::from_secs(30));
        closed(&mut client).await;
        assert_eq!(lot.parked(), 0);
    }

    #[tokio::test]
    async fn the_connection_limit_closes_the_parked_connection_whose_wait_ends_first() {
        use crate::server::balance::Reclaim;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let drain = Drain::new(Duration::from_secs(1));
        let (lot, _resumed) = lot(&drain);
        let mut clients = Vec::new();
        for secs in [30, 10, 20] {
            let (client, server) = tcp_pair(&listener).await;
            let remote = server.peer_addr().unwrap();
            lot.park(server, remote, None, Duration::from_secs(secs));
            clients.push(client);
        }
        assert!(lot.close_oldest());
        closed(&mut clients[1]).await;
        assert!(lot.close_oldest());
        closed(&mut clients[2]).await;
        assert_eq!(lot.parked(), 1);
        assert!(lot.close_oldest());
        closed(&mut clients[0]).await;
        assert!(!lot.close_oldest(), "none left");
        assert_eq!(lot.parked(), 0);
    }

    #[tokio::test]
    async fn a_client_that_closes_while_parked_resumes_to_be_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let drain = Drain::new(Duration::from_secs(1));
        let (lot, mut resumed) = lot(&drain);
        let (client, server) = tcp_pair(&listener).await;
        let remote = server.peer_addr().unwrap();
        lot.park(server, remote, None, Duration::from_secs(30));
        drop(client);
        let (record, _) = tokio::time::timeout(LIMIT, resumed.recv())
            .await
            .unwrap()
            .unwrap();
        let mut stream = TcpStream::from_std(record.stream).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(stream.read(&mut byte).await.unwrap(), 0);
        assert_eq!(lot.parked(), 0);
    }
}
