use std::io::Write;

use clap::Parser;

// The control plane (reload, health probes, admin, signals) runs on this thread and its
// runtime's blocking threads; requests are served on the worker threads
// `Server::serve_workers` starts.
fn main() {
    #[cfg(feature = "mimalloc")]
    purge_freed_pages_at_once();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(yield_to_workers)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "fuseway: cannot start a runtime: {e}");
            std::process::exit(1);
        }
    }
}

/// The blocking threads of the control plane (configuration reads, reloads, freeing
/// replaced configurations) run at a lower priority (nice 10) than the workers, so that
/// reloading a large configuration under load takes CPU from no request: the reload
/// takes longer instead. (The main thread keeps its priority: the workers it starts
/// inherit it.)
fn yield_to_workers() {
    #[cfg(target_os = "linux")]
    // SAFETY: `setpriority` with `who` 0 changes the calling thread's nice value on
    // Linux (a thread is a process there); no memory is involved.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

async fn run() {
    let args = fuseway::cli::Args::parse();
    let logs = match fuseway::cli::logging::init(&args) {
        Ok(guard) => guard,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "fuseway: {e}");
            std::process::exit(1);
        }
    };
    #[cfg(feature = "count-allocs")]
    count_allocs::report_on_sigusr1();
    let result = fuseway::cli::run(args).await;
    drop(logs);
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
    use std::io::Write;

    use fuseway_alloc_count::{Counting, Window};

    use super::Heap;

    /// Every thread's allocations since the process started.
    static TOTALS: Window = Window::opened();

    #[global_allocator]
    static ALLOCATOR: Counting<Heap> = Counting::every_thread(Heap, &TOTALS);

    /// Print the totals so far.
    pub(crate) fn report(at: &str) {
        let counted = TOTALS.peek();
        let (allocations, bytes) = (counted.allocs, counted.bytes);
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
