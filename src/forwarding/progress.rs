//! Request-body progress, for the activity timeout: YARP's `ActivityTimeout` restarts
//! whenever bytes move in either direction, so a long upload that never pauses longer
//! than the timeout is not cut while the destination waits for its end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tokio::time::Instant;

/// When the request body last moved towards the destination. Shared by the outgoing
/// body (which marks it) and the forwarder's future (which reads it when its deadline
/// for the response head passes); made only for requests that have a body.
#[derive(Debug)]
pub(crate) struct Progress {
    /// Nanoseconds after [`base`].
    last: AtomicU64,
    /// Body bytes sent so far.
    bytes: AtomicU64,
}

/// The instant progress times are counted from: an hour before the first one asked
/// for, so that a clock reading taken just before (a poll's cached moment) is after it.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(std::time::Duration::from_secs(3600))
            .unwrap_or(now)
    })
}

impl Progress {
    /// Progress whose last movement is `now` (the request is being sent).
    pub(crate) fn new(now: Instant) -> Self {
        let progress = Progress {
            last: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        };
        progress.mark(now);
        progress
    }

    /// The body moved at `now`.
    pub(crate) fn mark(&self, now: Instant) {
        let nanos = now.saturating_duration_since(base()).as_nanos();
        self.last
            .fetch_max(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// `n` more body bytes went.
    pub(crate) fn sent(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Body bytes sent so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// When the body last moved.
    pub(crate) fn last(&self) -> Instant {
        base() + std::time::Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn keeps_the_latest_mark() {
        let start = Instant::now();
        let p = Progress::new(start);
        assert_eq!(p.last(), start);
        p.mark(start + Duration::from_secs(2));
        p.mark(start + Duration::from_secs(1));
        assert_eq!(p.last(), start + Duration::from_secs(2));
    }
}
