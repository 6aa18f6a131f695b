//! Connections served by this process, by protocol: accepted so far and open now
//! (process-wide, for the `fuseway_connections_*` metrics). Two relaxed atomic
//! additions per connection.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::accept::Protocol;

static ACCEPTED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static OPEN: [AtomicI64; 2] = [AtomicI64::new(0), AtomicI64::new(0)];

/// The protocols counted, with their label.
pub(crate) const PROTOCOLS: [&str; 2] = ["http1", "http2"];

fn slot(protocol: Protocol) -> usize {
    match protocol {
        Protocol::Http1 => 0,
        Protocol::Http2 => 1,
    }
}

/// Counts a connection as open while it lives (kept in its drain signal).
#[derive(Debug)]
pub(crate) struct Open(u8);

impl Open {
    /// A connection of `protocol` accepted (its protocol known) and open from now on.
    pub(super) fn enter(protocol: Protocol) -> Open {
        let i = slot(protocol);
        ACCEPTED[i].fetch_add(1, Ordering::Relaxed);
        OPEN[i].fetch_add(1, Ordering::Relaxed);
        Open(i as u8)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        OPEN[usize::from(self.0)].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Connections accepted so far and open now, for protocol `i` of [`PROTOCOLS`].
pub(crate) fn connections(i: usize) -> (u64, i64) {
    (
        ACCEPTED[i].load(Ordering::Relaxed),
        OPEN[i].load(Ordering::Relaxed),
    )
}
