use std::io::Write;

use clap::Parser;
use tracing_subscriber::EnvFilter;

// The control plane (reload, health probes, admin, signals) runs here; requests are
// served on the worker threads `Server::serve_workers` starts.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    #[cfg(feature = "mimalloc")]
    purge_freed_pages_at_once();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // A closed stderr must not stop the proxy: by default a failed log write is
        // reported with `eprintln!`, which panics when stderr itself is gone.
        .log_internal_errors(false)
        .init();
    #[cfg(feature = "count-allocs")]
    count_allocs::report_on_sigusr1();
    let args = fuseway::cli::Args::parse();
    let result = fuseway::cli::run(args).await;
    #[cfg(feature = "count-allocs")]
    count_allocs::report("exit");
    if let Err(e) = result {
        let _ = writeln!(std::io::stderr(), "fuseway: {e}");
        std::process::exit(1);
    }
}

// The allocator the binary uses (see the `mimalloc` feature in Cargo.toml): mimalloc by
// default, the system's with `--no-default-features`.
#[cfg(feature = "mimalloc")]
use mimalloc::MiMalloc as Heap;
#[cfg(not(feature = "mimalloc"))]
use std::alloc::System as Heap;

#[cfg(not(feature = "count-allocs"))]
#[global_allocator]
static ALLOCATOR: Heap = Heap;

/// mimalloc gives a free page's memory back to the OS 10 ms after the page empties, the
/// next time the thread allocates: a worker whose connections have all gone idle (their
/// tasks freed when they park) allocates nothing more and would keep it. Purged at once
/// instead (`MIMALLOC_PURGE_DELAY` in the environment still decides). The native
/// engine allocates nothing per request, so this costs nothing under load.
#[cfg(feature = "mimalloc")]
fn purge_freed_pages_at_once() {
    // `mi_option_purge_delay` in mimalloc.h (v2); the crate exports no constant for it.
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options; nothing else runs yet.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
    }
}

/// `--features count-allocs`: a counting global allocator over the binary's. The totals
/// since start go to stderr as `fuseway-allocs: allocations=N bytes=M at=WHEN` at exit
/// (Ctrl-C, SIGTERM) and on every SIGUSR1, so a bench can take the difference over its
/// window.
#[cfg(feature = "count-allocs")]
mod count_allocs {
    use std::alloc::{GlobalAlloc, Layout};
    use std::cell::Cell;
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::Heap;

    /// One counter pair per cache line; each thread counts in its own slot, so counting
    /// adds no cache-line traffic between the runtime's worker threads.
    #[repr(align(128))]
    struct Slot {
        allocations: AtomicU64,
        bytes: AtomicU64,
    }

    const SLOTS: usize = 64;

    static COUNTS: [Slot; SLOTS] = [const {
        Slot {
            allocations: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }; SLOTS];
    static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }

    fn count(bytes: usize) {
        let slot = MY_SLOT
            .try_with(|s| {
                if s.get() == usize::MAX {
                    s.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS);
                }
                s.get()
            })
            .unwrap_or(0);
        let slot = &COUNTS[slot];
        slot.allocations.fetch_add(1, Ordering::Relaxed);
        slot.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    struct Counting(Heap);

    // SAFETY: every call is forwarded unchanged to the binary's allocator.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count(layout.size());
            unsafe { self.0.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count(layout.size());
            unsafe { self.0.alloc_zeroed(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { self.0.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count(new_size);
            unsafe { self.0.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting(Heap);

    /// Print the totals so far.
    pub(crate) fn report(at: &str) {
        let (mut allocations, mut bytes) = (0, 0);
        for slot in &COUNTS {
            allocations += slot.allocations.load(Ordering::Relaxed);
            bytes += slot.bytes.load(Ordering::Relaxed);
        }
        let _ = writeln!(
            std::io::stderr(),
            "fuseway-allocs: allocations={allocations} bytes={bytes} at={at}"
        );
    }

    /// Print the totals on every SIGUSR1.
    #[cfg(unix)]
    pub(crate) fn report_on_sigusr1() {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
            return;
        };
        tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                report("sigusr1");
            }
        });
    }

    #[cfg(not(unix))]
    pub(crate) fn report_on_sigusr1() {}
}
