//! The minimum data rates (Kestrel's `MinRequestBodyDataRate` and
//! `MinResponseDataRate`): the time a request body or a response may take, kept by
//! both native engines.

use std::time::Duration;

use tokio::time::Instant;

use crate::server::MinDataRate;

/// `after` past `at`; a century if that overflows (a rate's allowance can be that long).
pub(crate) fn later(at: Instant, after: Duration) -> Instant {
    at.checked_add(after)
        .unwrap_or_else(|| at + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// How fast a client sends a request body while the pipeline waits for it: the time
/// spent waiting for the client's bytes and the bytes that came (Kestrel's
/// `MinRequestBodyDataRate` times the same: not while the reader is not asking).
#[derive(Debug, Default)]
pub(crate) struct BodyPace {
    bytes: u64,
    waited: Duration,
    /// A wait for the client, open since then.
    since: Option<Instant>,
}

impl BodyPace {
    /// `n` body bytes came.
    pub(crate) fn received(&mut self, n: usize) {
        self.bytes += n as u64;
    }

    /// The wait open (if any) ends now (the clock is read only if one is).
    pub(crate) fn resume_if_waiting(&mut self) {
        if self.since.is_some() {
            self.resume(crate::clock::now());
        }
    }

    /// The wait open (if any) ends at `now`.
    pub(crate) fn resume(&mut self, now: Instant) {
        if let Some(since) = self.since.take() {
            self.waited += now.saturating_duration_since(since);
        }
    }

    /// Waiting for the client from `now`: `None` if the body is already below `rate`
    /// (of at least a byte a second), else how long this wait may last before it is.
    pub(crate) fn wait(&mut self, now: Instant, rate: MinDataRate) -> Option<Duration> {
        // Too slow once the time waited is past the grace period and past the time the
        // bytes that came are worth at the rate.
        let allowed = rate.allowance(self.bytes);
        if self.waited > allowed {
            return None;
        }
        self.since = Some(now);
        // Looked at again just after the allowance is spent.
        Some((allowed - self.waited).saturating_add(Duration::from_millis(1)))
    }
}

/// How fast a client takes what is written to it, while writes wait for it: a write
/// that waits must be done within the grace period or the time its bytes take at the
/// rate, whichever is longer, and bytes queued behind it add their time.
#[derive(Debug, Default)]
pub(crate) struct WritePace {
    /// The wait open (if any): when it must be over, and the bytes it has counted.
    late: Option<(Instant, usize)>,
}

impl WritePace {
    /// The writes are done: no wait is open.
    pub(crate) fn written(&mut self) {
        self.late = None;
    }

    /// A write waits for the client at `now` with `pending` bytes queued: how long it
    /// may still wait, `None` when it is past its time at `rate`.
    pub(crate) fn wait(
        &mut self,
        now: Instant,
        pending: usize,
        rate: MinDataRate,
    ) -> Option<Duration> {
        let (late, counted) = self
            .late
            .get_or_insert_with(|| (later(now, rate.allowance(pending as u64)), pending));
        if pending > *counted {
            *late = later(*late, rate.time_for((pending - *counted) as u64));
        }
        *counted = pending;
        late.checked_duration_since(now)
            .filter(|left| !left.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_body_is_too_slow_once_its_waits_pass_the_grace_period_and_its_bytes_worth() {
        let rate = MinDataRate::new(1_000, 500 * MS);
        let t0 = Instant::now();
        let mut pace = BodyPace::default();
        // Nothing came yet: the grace period, and a millisecond.
        assert_eq!(pace.wait(t0, rate), Some(501 * MS));
        pace.resume(t0 + 400 * MS);
        assert_eq!(pace.wait(t0 + 400 * MS, rate), Some(101 * MS));
        // Bytes buy time at the rate: 2 000 bytes, 2 s.
        pace.resume(t0 + 450 * MS);
        pace.received(2_000);
        assert_eq!(pace.wait(t0 + 450 * MS, rate), Some(1_551 * MS));
        // Time when nothing waits for the client does not count: no wait is open.
        pace.resume(t0 + 900 * MS);
        pace.resume(t0 + 10_000 * MS);
        assert_eq!(pace.wait(t0 + 10_000 * MS, rate), Some(1_101 * MS));
        // Past what the bytes are worth: too slow.
        pace.resume(t0 + 11_200 * MS);
        assert_eq!(pace.wait(t0 + 11_200 * MS, rate), None);
    }

    #[test]
    fn a_write_is_too_slow_past_the_grace_period_or_its_bytes_worth() {
        let rate = MinDataRate::new(1_000, 500 * MS);
        let t0 = Instant::now();
        let mut pace = WritePace::default();
        // 100 bytes waiting: the grace period.
        assert_eq!(pace.wait(t0, 100, rate), Some(500 * MS));
        // Some written, none added: the same deadline.
        assert_eq!(pace.wait(t0 + 100 * MS, 50, rate), Some(400 * MS));
        // 1 050 more queued behind: their second at the rate is added.
        assert_eq!(pace.wait(t0 + 200 * MS, 1_100, rate), Some(1_350 * MS));
        assert_eq!(pace.wait(t0 + 1_549 * MS, 1_100, rate), Some(MS));
        assert_eq!(pace.wait(t0 + 1_550 * MS, 1_100, rate), None);
        // Written: the next wait starts afresh, 2 000 bytes worth 2 s.
        pace.written();
        assert_eq!(pace.wait(t0 + 2_000 * MS, 2_000, rate), Some(2_000 * MS));
    }
}
