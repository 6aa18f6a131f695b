//! The in-flight slots a listener lends its connections: the pipeline's future, then
//! the response body, kept out of the connections' own futures.

use std::any::{Any, TypeId};
use std::cell::RefCell;

use super::*;

pin_project_lite::pin_project! {
    /// What a connection has in flight: the pipeline's future, then the response's
    /// body. Kept out of the connection's own future (which an idle keep-alive
    /// connection holds for as long as it waits) in a slot lent by [`Slots`].
    #[project = InFlightProj]
    pub(crate) enum InFlight<F, B> {
        Idle,
        Calling { #[pin] future: F },
        Sending { #[pin] body: B, sending: super::conn::Sending },
    }
}

/// The in-flight slots of a listener's connections: one is taken when a request head
/// arrives and given back when the connection waits again, so a warm server allocates
/// none per request and an idle connection holds none. The free slots are kept by
/// thread (a worker's connections run on its thread), with no lock to take and give
/// them. Also the listener's options, which its connections read through it rather
/// than each keeping a reference.
pub(crate) struct Slots<F, B> {
    pub(super) options: Arc<ServerOptions>,
    /// Where the listener's idle plain TCP connections park (none: they do not).
    pub(super) lot: Option<Arc<lot::Lot>>,
    _slots: std::marker::PhantomData<fn() -> Slot<F, B>>,
}

/// One in-flight slot: pinned in its own allocation, reused request after request.
pub(super) type Slot<F, B> = Pin<Box<InFlight<F, B>>>;

thread_local! {
    /// This thread's free slots: one list per slot type (a `Vec<T>`, found by its
    /// `TypeId`; a thread serves one or two kinds of connection, HTTP/1.1 and HTTP/2).
    static FREE: RefCell<Vec<(TypeId, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

/// Call `f` with this thread's free list of `T`s (none while the thread's locals are
/// being destroyed).
fn with_free<T: 'static, R>(f: impl FnOnce(&mut Vec<T>) -> R) -> Option<R> {
    let id = TypeId::of::<Vec<T>>();
    FREE.try_with(|lists| {
        let mut lists = lists.borrow_mut();
        let at = match lists.iter().position(|(list, _)| *list == id) {
            Some(at) => at,
            None => {
                lists.push((id, Box::new(Vec::<T>::new())));
                lists.len() - 1
            }
        };
        lists[at].1.downcast_mut::<Vec<T>>().map(f)
    })
    .ok()
    .flatten()
}

/// A free slot of type `T` from this thread's list, if it has one: what a connection
/// on this worker gave back, taken with no lock.
pub(crate) fn take_free<T: 'static>() -> Option<T> {
    with_free(Vec::pop).flatten()
}

/// Give a free slot back to this thread's list, for a connection on this worker to take
/// (freed when the thread keeps enough of its type).
pub(crate) fn give_free<T: 'static>(slot: T) {
    /// Most slots of a type a thread keeps free.
    const KEEP: usize = 1024;
    with_free(|free| {
        if free.len() < KEEP {
            free.push(slot);
        }
    });
}

impl<F: 'static, B: 'static> Slots<F, B> {
    /// The slots of a listener whose connections do not park.
    pub(crate) fn new(options: Arc<ServerOptions>) -> Arc<Self> {
        Self::with_lot(options, None)
    }

    pub(super) fn with_lot(options: Arc<ServerOptions>, lot: Option<Arc<lot::Lot>>) -> Arc<Self> {
        Arc::new(Slots {
            options,
            lot,
            _slots: std::marker::PhantomData,
        })
    }

    // Out of line: `Lent::get`, which calls it once a message, inlines the rest.
    #[inline(never)]
    pub(super) fn take(&self) -> Slot<F, B> {
        take_free().unwrap_or_else(|| Box::pin(InFlight::Idle))
    }

    pub(super) fn give(&self, mut slot: Slot<F, B>) {
        slot.set(InFlight::Idle);
        give_free(slot);
    }
}

impl<F, B> std::fmt::Debug for Slots<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slots")
    }
}

/// The slot of the request in flight, given back to its pool when dropped (at the end
/// of the message, or with the connection).
pub(super) struct Lent<'a, F: 'static, B: 'static> {
    pub(super) slot: Option<Slot<F, B>>,
    pub(super) slots: &'a Slots<F, B>,
}

impl<F: 'static, B: 'static> Lent<'_, F, B> {
    /// The slot, taken from the pool if the connection has none.
    #[inline]
    pub(super) fn get(&mut self) -> Pin<&mut InFlight<F, B>> {
        self.slot.get_or_insert_with(|| self.slots.take()).as_mut()
    }

    /// Give the slot back (what it holds is dropped).
    pub(super) fn release(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.slots.give(slot);
        }
    }
}

impl<F: 'static, B: 'static> Drop for Lent<'_, F, B> {
    fn drop(&mut self) {
        self.release();
    }
}
