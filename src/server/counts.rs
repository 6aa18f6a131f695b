//! Connections served by this process, by protocol: accepted so far and open now
//! (process-wide, for the `fuseway_connections_*` metrics). Two relaxed atomic
//! additions per connection. And a server's upgraded connections, for its limit
//! ([`UpgradeLimit`]).

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

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

/// A server's upgraded connections (WebSockets and other `Upgrade` protocols, HTTP/2
/// extended CONNECT tunnels) and Kestrel's `MaxConcurrentUpgradedConnections` for them.
/// The server puts it in each upgrade request it serves; the forwarder takes a
/// [`UpgradeSlot`] when the destination agrees to switch, and refuses the upgrade past
/// the limit, as Kestrel's `UpgradeAsync` does under YARP. Clones count together.
#[derive(Debug, Clone)]
pub(crate) struct UpgradeLimit(Arc<UpgradeCount>);

#[derive(Debug)]
struct UpgradeCount {
    open: AtomicUsize,
    limit: usize,
}

impl UpgradeLimit {
    /// A count of none, up to `limit`.
    pub(crate) fn new(limit: usize) -> Self {
        UpgradeLimit(Arc::new(UpgradeCount {
            open: AtomicUsize::new(0),
            limit,
        }))
    }

    /// The limit.
    pub(crate) fn limit(&self) -> usize {
        self.0.limit
    }

    /// A slot for one more upgraded connection, held while it lives; `None` at the
    /// limit.
    pub(crate) fn try_take(&self) -> Option<UpgradeSlot> {
        self.0
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.0.limit).then_some(open + 1)
            })
            .ok()?;
        Some(UpgradeSlot(self.clone()))
    }

    /// Upgraded connections open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }
}

/// One upgraded connection counted in its server's [`UpgradeLimit`] until dropped.
#[derive(Debug)]
pub(crate) struct UpgradeSlot(UpgradeLimit);

impl Drop for UpgradeSlot {
    fn drop(&mut self) {
        self.0 .0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_slots_are_counted_up_to_the_limit_and_given_back() {
        let limit = UpgradeLimit::new(2);
        let first = limit.try_take().expect("one");
        let second = limit.clone().try_take().expect("two");
        assert!(limit.try_take().is_none(), "a third past the limit of 2");
        assert_eq!(limit.open(), 2);
        drop(first);
        let third = limit.try_take().expect("room again");
        drop((second, third));
        assert_eq!(limit.open(), 0);
        assert!(UpgradeLimit::new(0).try_take().is_none(), "0: none at all");
    }
}
