//! Values kept per thread, so that threads counting the same thing do not write one
//! cache line.
//!
//! Workers that add to one shared atomic pass its cache line between their cores at
//! each addition: on two workers, `perf record` found the locked additions to the
//! request metrics and to the destinations' in-flight counts among the largest costs
//! of a proxied request (docs/BENCHMARKS.md, thirty-sixth round). Each thread gets a
//! slot instead ([`slot`]), the same in every [`PerThread`] value; only its thread
//! writes it, with a plain load and store (a locked addition costs ~8 ns even
//! uncontended). Readers sum the slots. Threads past the first [`SLOTS`] - 1 share the
//! last slot, with atomic additions.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Slots per value.
pub(crate) const SLOTS: usize = 32;
// One bit per slot in `PerThread::made`.
const _: () = assert!(SLOTS <= u32::BITS as usize);
/// The slot every thread past the first `SLOTS - 1` shares.
pub(crate) const SHARED: usize = SLOTS - 1;

/// This thread's slot, the same in every value.
pub(crate) fn slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.try_with(|slot| {
        if slot.get() == usize::MAX {
            slot.set(NEXT.fetch_add(1, Ordering::Relaxed).min(SHARED));
        }
        slot.get()
    })
    .unwrap_or(SHARED)
}

/// One `T` per thread slot, each on a cache line of its own and made at its thread's
/// first use (a value that few threads touch stays small).
#[derive(Debug, Default)]
pub(crate) struct PerThread<T> {
    slots: [OnceLock<Box<Line<T>>>; SLOTS],
    /// A bit per slot made: a reader visits those only (a sum at each load-balancing
    /// pick reads as many slots as threads have counted, not all of them).
    made: AtomicU32,
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct Line<T>(T);

impl<T: Default> PerThread<T> {
    /// This thread's value, and whether other threads share it.
    pub(crate) fn mine(&self) -> (&T, bool) {
        let index = slot();
        let line = self.slots[index].get_or_init(|| {
            self.made.fetch_or(1 << index, Ordering::Relaxed);
            Box::default()
        });
        (&line.0, index == SHARED)
    }

    /// Every thread's value made so far.
    pub(crate) fn each(&self) -> impl Iterator<Item = &T> {
        let mut made = self.made.load(Ordering::Relaxed);
        std::iter::from_fn(move || {
            while made != 0 {
                let index = made.trailing_zeros() as usize;
                made &= made - 1;
                // A bit is set just before its slot is: a slot being made is skipped.
                if let Some(line) = self.slots[index].get() {
                    return Some(&line.0);
                }
            }
            None
        })
    }
}

impl PerThread<AtomicU64> {
    /// Add `n` (wrapping) to this thread's value.
    pub(crate) fn add_mine(&self, n: u64) {
        let (value, shared) = self.mine();
        add(value, n, shared);
    }

    /// The sum (wrapping) of every thread's value, each read once: while threads move
    /// them, as of no single instant.
    pub(crate) fn sum(&self) -> u64 {
        self.each()
            .map(|value| value.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// Add `n` (wrapping) to `cell`, a value of a [`PerThread`]: a plain load and store
/// where only this thread writes it, an atomic addition where it is `shared`.
pub(crate) fn add(cell: &AtomicU64, n: u64, shared: bool) {
    if shared {
        cell.fetch_add(n, Ordering::Relaxed);
    } else {
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
}

/// A count of things in progress (requests in flight) that threads move up and down:
/// one may end on another thread than it began (a future moved between threads); the
/// sum is still right.
#[derive(Debug, Default)]
pub(crate) struct Count(PerThread<AtomicU64>);

impl Count {
    /// One more.
    pub(crate) fn enter(&self) {
        self.0.add_mine(1);
    }

    /// One fewer.
    pub(crate) fn leave(&self) {
        self.0.add_mine(u64::MAX);
    }

    /// How many now (see [`PerThread::sum`]).
    pub(crate) fn get(&self) -> usize {
        // A negative sum (a leave read before its enter) reads as none.
        usize::try_from(self.0.sum() as i64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_sums_its_threads_also_past_the_own_slots_and_across_threads() {
        let count = Count::default();
        // More threads than own slots: the last ones share one with atomic additions.
        // Each enters 1 000 times and leaves half of them on another thread.
        let threads = SLOTS + 8;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| (0..1_000).for_each(|_| count.enter()));
            }
        });
        assert_eq!(count.get(), threads * 1_000);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| (0..500).for_each(|_| count.leave()));
            }
        });
        assert_eq!(count.get(), threads * 500);
        (0..threads * 500).for_each(|_| count.leave());
        assert_eq!(count.get(), 0);
        count.leave();
        assert_eq!(count.get(), 0, "a sum below zero reads as none");
    }
}
