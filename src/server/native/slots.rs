//! The in-flight slots a listener lends its connections: the pipeline's future, then
//! the response body, kept out of the connections' own futures.

use super::*;

pin_project_lite::pin_project! {
    /// What a connection has in flight: the pipeline's future, then the response's
    /// body. Kept out of the connection's own future (which an idle keep-alive
    /// connection holds for as long as it waits) in a slot lent by [`Slots`].
    #[project = InFlightProj]
    pub(crate) enum InFlight<F, B> {
        Idle,
        Calling { #[pin] future: F },
        Sending { #[pin] body: B },
    }
}

/// The in-flight slots of a listener's connections: one is taken when a request head
/// arrives and given back when the connection waits again, so a warm server allocates
/// none per request and an idle connection holds none. Also the listener's options,
/// which its connections read through it rather than each keeping a reference.
pub(crate) struct Slots<F, B> {
    pub(super) free: Mutex<Vec<Slot<F, B>>>,
    pub(super) options: Arc<ServerOptions>,
    /// Where the listener's idle plain TCP connections park (none: they do not).
    pub(super) lot: Option<Arc<lot::Lot>>,
}

/// One in-flight slot: pinned in its own allocation, reused request after request.
pub(super) type Slot<F, B> = Pin<Box<InFlight<F, B>>>;

impl<F, B> Slots<F, B> {
    /// Most slots kept free; more are freed.
    const KEEP: usize = 1024;

    /// The slots of a listener whose connections do not park.
    pub(crate) fn new(options: Arc<ServerOptions>) -> Arc<Self> {
        Self::with_lot(options, None)
    }

    pub(super) fn with_lot(options: Arc<ServerOptions>, lot: Option<Arc<lot::Lot>>) -> Arc<Self> {
        Arc::new(Slots {
            free: Mutex::new(Vec::new()),
            options,
            lot,
        })
    }

    pub(super) fn take(&self) -> Slot<F, B> {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_else(|| Box::pin(InFlight::Idle))
    }

    pub(super) fn give(&self, mut slot: Slot<F, B>) {
        slot.set(InFlight::Idle);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < Self::KEEP {
            free.push(slot);
        }
    }
}

impl<F, B> std::fmt::Debug for Slots<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slots")
    }
}

/// The slot of the request in flight, given back to its pool when dropped (at the end
/// of the message, or with the connection).
pub(super) struct Lent<'a, F, B> {
    pub(super) slot: Option<Slot<F, B>>,
    pub(super) slots: &'a Slots<F, B>,
}

impl<F, B> Lent<'_, F, B> {
    /// The slot, taken from the pool if the connection has none.
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

impl<F, B> Drop for Lent<'_, F, B> {
    fn drop(&mut self) {
        self.release();
    }
}
