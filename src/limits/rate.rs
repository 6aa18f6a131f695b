//! A lock-free token bucket (GCRA: one atomic "theoretical arrival time").

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// A rate limiter: `per_second` permits refill continuously, at most `burst` saved.
///
/// Implemented as the generic cell rate algorithm: the state is the theoretical arrival
/// time of the next request, in nanoseconds since the limiter's epoch; acquiring is a
/// compare-and-swap, never a lock.
#[derive(Debug)]
pub struct RateLimiter {
    epoch: Instant,
    tat: AtomicU64,
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter {
            epoch: Instant::now(),
            tat: AtomicU64::new(0),
        }
    }
}

impl RateLimiter {
    /// Take one permit at `now`, or say how long until one is free.
    pub fn acquire(&self, now: Instant, per_second: f64, burst: u32) -> Result<(), Duration> {
        let interval = (1e9 / per_second).max(1.0) as u64;
        let tolerance = interval.saturating_mul(u64::from(burst.max(1)) - 1);
        let now = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > tolerance {
                return Err(Duration::from_nanos(start - now - tolerance));
            }
            match self.tat.compare_exchange_weak(
                tat,
                start + interval,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let limiter = RateLimiter::default();
        let t0 = Instant::now();
        // Burst of 3 at 10/s.
        for _ in 0..3 {
            assert!(limiter.acquire(t0, 10.0, 3).is_ok());
        }
        let wait = limiter.acquire(t0, 10.0, 3).unwrap_err();
        assert!(
            wait > Duration::from_millis(90) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        // 100 ms later exactly one more permit.
        let t1 = t0 + Duration::from_millis(100);
        assert!(limiter.acquire(t1, 10.0, 3).is_ok());
        assert!(limiter.acquire(t1, 10.0, 3).is_err());
        // After a long pause the bucket is full again, but not fuller.
        let t2 = t1 + Duration::from_secs(10);
        for _ in 0..3 {
            assert!(limiter.acquire(t2, 10.0, 3).is_ok());
        }
        assert!(limiter.acquire(t2, 10.0, 3).is_err());
    }

    #[test]
    fn exact_count_over_a_second() {
        let limiter = RateLimiter::default();
        let t0 = Instant::now();
        let mut granted = 0;
        // One attempt per millisecond for a second at 50/s, burst 1.
        for ms in 0..1000 {
            if limiter
                .acquire(t0 + Duration::from_millis(ms), 50.0, 1)
                .is_ok()
            {
                granted += 1;
            }
        }
        assert_eq!(granted, 50);
    }
}
