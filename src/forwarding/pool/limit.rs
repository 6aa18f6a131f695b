//! The connections a pool may have open at once (`MaxConnectionsPerServer`), and the
//! exchanges waiting for one.

use super::*;

/// The HTTP/1.1 connections a pool may have open at once, and the exchanges waiting
/// for one (in arrival order).
#[derive(Debug)]
pub(super) struct Limit {
    max: AtomicUsize,
    state: Mutex<LimitState>,
}

#[derive(Debug, Default)]
pub(super) struct LimitState {
    open: usize,
    queue: std::collections::VecDeque<(u64, Waker)>,
    next_ticket: u64,
}

/// One open connection under a [`Limit`]; dropped when the connection closes.
#[derive(Debug)]
pub(super) struct Permit(Arc<Limit>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.state.lock().expect("limit lock").open -= 1;
        self.0.wake_one();
    }
}

impl Limit {
    pub(super) fn new(max: usize) -> Arc<Limit> {
        Arc::new(Limit {
            max: AtomicUsize::new(max),
            state: Mutex::default(),
        })
    }

    /// Whether exchanges are queued: a new one queues behind them.
    pub(super) fn queued(&self) -> bool {
        !self.state.lock().expect("limit lock").queue.is_empty()
    }

    /// A new connection may be opened (nobody is queued ahead).
    pub(super) fn try_open(self: &Arc<Self>) -> Option<Permit> {
        let mut state = self.state.lock().expect("limit lock");
        if state.open < self.max.load(Ordering::Relaxed) && state.queue.is_empty() {
            state.open += 1;
            return Some(Permit(self.clone()));
        }
        None
    }

    /// A new connection may be opened for the exchange holding `ticket` (its turn has
    /// come); else it is, or stays, queued with `waker`, to be woken when a connection
    /// comes back to the pool or closes.
    pub(super) fn open_or_queue(
        self: &Arc<Self>,
        waker: &Waker,
        ticket: &mut Option<Ticket>,
    ) -> Option<Permit> {
        let mut state = self.state.lock().expect("limit lock");
        let position = ticket
            .as_ref()
            .map(|t| state.queue.iter().position(|(q, _)| *q == t.id));
        // Taken off the queue by a wake-up (its turn), or nobody queued.
        let turn = match position {
            Some(None) => true,
            Some(Some(_)) => false,
            None => state.queue.is_empty(),
        };
        if turn && state.open < self.max.load(Ordering::Relaxed) {
            state.open += 1;
            drop(state);
            Ticket::leave(ticket);
            return Some(Permit(self.clone()));
        }
        match (position, ticket.as_ref()) {
            (Some(Some(at)), _) => state.queue[at].1.clone_from(waker),
            // Woken but beaten to the connection: first again.
            (Some(None), Some(t)) => state.queue.push_front((t.id, waker.clone())),
            _ => {
                let id = state.next_ticket;
                state.next_ticket += 1;
                state.queue.push_back((id, waker.clone()));
                drop(state);
                *ticket = Some(Ticket {
                    limit: self.clone(),
                    id,
                    done: false,
                });
            }
        }
        None
    }

    /// A connection came back to the pool, or one closed: wake the first exchange
    /// queued.
    pub(super) fn wake_one(&self) {
        let next = self.state.lock().expect("limit lock").queue.pop_front();
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }

    /// The most connections open at once.
    pub(super) fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// The configured limit changed (a reload): queued exchanges look again.
    pub(super) fn set_max(&self, max: usize) {
        if self.max.load(Ordering::Relaxed) != max && self.max.swap(max, Ordering::Relaxed) != max {
            let queue = std::mem::take(&mut self.state.lock().expect("limit lock").queue);
            for (_, waker) in queue {
                waker.wake();
            }
        }
    }
}

/// An exchange's place in a [`Limit`]'s queue. Dropped without having got a
/// connection after it was woken for one, it passes the turn on.
#[derive(Debug)]
pub(super) struct Ticket {
    limit: Arc<Limit>,
    id: u64,
    /// It got a connection: nothing to pass on.
    done: bool,
}

impl Ticket {
    /// The exchange got a connection.
    pub(super) fn leave(ticket: &mut Option<Ticket>) {
        if let Some(mut t) = ticket.take() {
            t.done = true;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.limit.state.lock().expect("limit lock");
        let queued = state.queue.iter().position(|(q, _)| *q == self.id);
        let next = match queued {
            Some(at) => {
                state.queue.remove(at);
                None
            }
            None if !self.done => state.queue.pop_front(),
            None => None,
        };
        drop(state);
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }
}
