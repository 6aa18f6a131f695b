//! A counting global allocator: the one fuseway's tests, benches and its binary (built
//! with `--features count-allocs`) measure allocations with. Allocation counts are
//! deterministic, so tests assert them.
//!
//! [`Counting`] wraps the allocator that does the work and counts, per allocation
//! (`alloc`, `alloc_zeroed`, `realloc`; frees only lower the live bytes):
//!
//! - on **this thread**, while [`this_thread`] runs a closure — tests running in
//!   parallel threads do not see each other's allocations;
//! - on **joined threads** into a [`Window`] while it is open: a thread joins with
//!   [`Window::join_this_thread`] (a server's worker, say) and another opens and closes
//!   the window around what it measures;
//! - on **every thread** into the window [`Counting::every_thread`] names (a whole
//!   process), while it is open.
//!
//! ```
//! use fuseway_alloc_count::{this_thread, Counting};
//!
//! #[global_allocator]
//! static ALLOCATOR: Counting = Counting::new(std::alloc::System);
//!
//! let (v, counted) = this_thread(|| vec![1u8; 8]);
//! assert_eq!(counted.allocs, 1);
//! assert_eq!(counted.bytes, 8);
//! drop(v);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// How many of a window's first allocation sizes it keeps (for a failure's message).
pub const FIRST_SIZES: usize = 32;

/// What was counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Allocations (a `realloc` is one).
    pub allocs: u64,
    /// Bytes they asked for (a `realloc`, its new size).
    pub bytes: u64,
    /// Bytes allocated and not freed since counting started (frees of older blocks
    /// lower it too).
    pub live: i64,
    /// The sizes of the first [`FIRST_SIZES`] allocations (0 past `allocs`).
    pub first_sizes: [usize; FIRST_SIZES],
}

/// Counters that threads add to while open (see the [crate](crate) documentation).
pub struct Window {
    open: AtomicBool,
    allocs: AtomicU64,
    bytes: AtomicU64,
    live: AtomicI64,
    first_sizes: [AtomicUsize; FIRST_SIZES],
}

impl Default for Window {
    fn default() -> Self {
        Window::new()
    }
}

impl Window {
    /// A closed window.
    pub const fn new() -> Self {
        Window::with_open(false)
    }

    /// A window open from the start: in a `static`, it counts from the process's first
    /// allocation.
    pub const fn opened() -> Self {
        Window::with_open(true)
    }

    const fn with_open(open: bool) -> Self {
        Window {
            open: AtomicBool::new(open),
            allocs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            live: AtomicI64::new(0),
            first_sizes: [const { AtomicUsize::new(0) }; FIRST_SIZES],
        }
    }

    /// Count the allocations of the current thread into this window (while it is open)
    /// from now on.
    pub fn join_this_thread(&'static self) {
        let _ = JOINED.try_with(|j| j.set(Some(self)));
    }

    /// Zero the counters and start counting.
    pub fn open(&self) {
        self.allocs.store(0, Ordering::SeqCst);
        self.bytes.store(0, Ordering::SeqCst);
        self.live.store(0, Ordering::SeqCst);
        for size in &self.first_sizes {
            size.store(0, Ordering::SeqCst);
        }
        self.open.store(true, Ordering::SeqCst);
    }

    /// Stop counting; what was counted since [`open`](Self::open).
    pub fn close(&self) -> Counted {
        self.open.store(false, Ordering::SeqCst);
        self.peek()
    }

    /// What was counted since [`open`](Self::open), counting on.
    pub fn peek(&self) -> Counted {
        let mut first_sizes = [0; FIRST_SIZES];
        for (out, size) in first_sizes.iter_mut().zip(&self.first_sizes) {
            *out = size.load(Ordering::SeqCst);
        }
        Counted {
            allocs: self.allocs.load(Ordering::SeqCst),
            bytes: self.bytes.load(Ordering::SeqCst),
            live: self.live.load(Ordering::SeqCst),
            first_sizes,
        }
    }

    fn allocated(&self, size: usize, grew: i64) {
        if !self.open.load(Ordering::Relaxed) {
            return;
        }
        let n = self.allocs.fetch_add(1, Ordering::Relaxed) as usize;
        self.bytes.fetch_add(size as u64, Ordering::Relaxed);
        self.live.fetch_add(grew, Ordering::Relaxed);
        if let Some(first) = self.first_sizes.get(n) {
            first.store(size, Ordering::Relaxed);
        }
    }

    fn freed(&self, size: usize) {
        if self.open.load(Ordering::Relaxed) {
            self.live.fetch_sub(size as i64, Ordering::Relaxed);
        }
    }
}

/// What [`this_thread`] counts.
struct Own {
    on: Cell<bool>,
    allocs: Cell<u64>,
    bytes: Cell<u64>,
    live: Cell<i64>,
    first_sizes: Cell<[usize; FIRST_SIZES]>,
}

thread_local! {
    static OWN: Own = const {
        Own {
            on: Cell::new(false),
            allocs: Cell::new(0),
            bytes: Cell::new(0),
            live: Cell::new(0),
            first_sizes: Cell::new([0; FIRST_SIZES]),
        }
    };
    static JOINED: Cell<Option<&'static Window>> = const { Cell::new(None) };
}

/// Run `f` counting the current thread's allocations.
pub fn this_thread<T>(f: impl FnOnce() -> T) -> (T, Counted) {
    OWN.with(|own| {
        own.allocs.set(0);
        own.bytes.set(0);
        own.live.set(0);
        own.first_sizes.set([0; FIRST_SIZES]);
        own.on.set(true);
    });
    let out = f();
    let counted = OWN.with(|own| {
        own.on.set(false);
        Counted {
            allocs: own.allocs.get(),
            bytes: own.bytes.get(),
            live: own.live.get(),
            first_sizes: own.first_sizes.get(),
        }
    });
    (out, counted)
}

/// A global allocator counting what it hands to `A` (see the [crate](crate)
/// documentation).
pub struct Counting<A = System> {
    inner: A,
    every_thread: Option<&'static Window>,
}

impl<A> Counting<A> {
    /// Counting over `inner`, per thread ([`this_thread`]) and per joined window.
    pub const fn new(inner: A) -> Self {
        Counting {
            inner,
            every_thread: None,
        }
    }

    /// [`new`](Self::new), also counting every thread's allocations into `window`
    /// while it is open.
    pub const fn every_thread(inner: A, window: &'static Window) -> Self {
        Counting {
            inner,
            every_thread: Some(window),
        }
    }

    fn allocated(&self, size: usize, grew: i64) {
        // `try_with`: nothing is counted while a thread's locals are being torn down.
        let _ = OWN.try_with(|own| {
            if own.on.get() {
                let n = own.allocs.get();
                own.allocs.set(n + 1);
                own.bytes.set(own.bytes.get() + size as u64);
                own.live.set(own.live.get() + grew);
                if (n as usize) < FIRST_SIZES {
                    let mut sizes = own.first_sizes.get();
                    sizes[n as usize] = size;
                    own.first_sizes.set(sizes);
                }
            }
        });
        if let Ok(Some(window)) = JOINED.try_with(Cell::get) {
            window.allocated(size, grew);
        }
        if let Some(window) = self.every_thread {
            window.allocated(size, grew);
        }
    }

    fn freed(&self, size: usize) {
        let _ = OWN.try_with(|own| {
            if own.on.get() {
                own.live.set(own.live.get() - size as i64);
            }
        });
        if let Ok(Some(window)) = JOINED.try_with(Cell::get) {
            window.freed(size);
        }
        if let Some(window) = self.every_thread {
            window.freed(size);
        }
    }
}

// SAFETY: every call is forwarded unchanged to `A`; counting only reads and writes
// thread-locals and atomics, and allocates nothing.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.allocated(layout.size(), layout.size() as i64);
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.allocated(layout.size(), layout.size() as i64);
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.freed(layout.size());
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.allocated(new_size, new_size as i64 - layout.size() as i64);
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}
