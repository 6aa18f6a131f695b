//! Smooth weighted round robin (nginx's algorithm) without a lock on the hot path.
//!
//! nginx keeps a `current` weight per destination; each pick adds every weight to its
//! `current`, takes the largest `current` (the first one on ties) and subtracts the
//! sum of the weights from it. With weights reduced by their gcd, the picks repeat
//! with a period of `L = sum(weights / gcd)` and every period holds exactly
//! `weight / gcd` picks of each destination, smoothly interleaved (`5,1,1` gives
//! `a a b a c a a`).
//!
//! The period is computed once per configuration load and the cluster's round-robin
//! position (an atomic counter in [`BalancerState`](super::BalancerState), which
//! survives reloads) indexes it: a pick is one `fetch_add` and one array read.
//!
//! Destinations missing from the candidates are skipped: the pick is the next
//! candidate along the sequence, and the position moves past it (compare-and-swap,
//! retried under contention), so the skipped slots are consumed, not redistributed.
//! The remaining destinations therefore keep their relative order and get exactly
//! their weight's share over every period. Finding the next candidate position is a
//! binary search in each candidate's list of positions: `O(candidates * log L)`, with
//! no allocation.
//!
//! When the period would be too large to precompute (weights summing to more than
//! [`MAX_PERIOD`] after the gcd reduction, or too much work to build), the same
//! algorithm runs live under a mutex; there, non-candidates simply sit out the round
//! as in nginx, and the `current` weights restart from zero on each reload.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The longest period that is precomputed (positions; 2 x 4 bytes each).
pub(super) const MAX_PERIOD: usize = 1 << 15;

/// The most `period x destinations` steps spent precomputing a period.
const MAX_BUILD_WORK: usize = 1 << 22;

/// A smooth weighted round robin over a cluster's destinations.
#[derive(Debug)]
pub(super) enum SmoothRoundRobin {
    /// The period, precomputed; lock-free picks.
    Precomputed(Sequence),
    /// nginx's algorithm run live, for periods too large to precompute.
    Live(Live),
}

impl SmoothRoundRobin {
    /// For destinations with these weights (each at least 1).
    pub(super) fn new(weights: &[u32]) -> Self {
        let reduced = reduce(weights);
        let period: u64 = reduced.iter().map(|&w| u64::from(w)).sum();
        let fits = usize::try_from(period).ok().filter(|&p| {
            p <= MAX_PERIOD
                && p.saturating_mul(weights.len()) <= MAX_BUILD_WORK
                && u32::try_from(weights.len()).is_ok()
        });
        match fits {
            Some(_) => SmoothRoundRobin::Precomputed(Sequence::new(&reduced)),
            None => SmoothRoundRobin::Live(Live::new(reduced)),
        }
    }

    /// The next destination among `candidates`, moving `position` on.
    pub(super) fn pick(
        &self,
        position: &AtomicUsize,
        candidates: &crate::request::Candidates,
    ) -> Option<usize> {
        match self {
            SmoothRoundRobin::Precomputed(s) => s.pick(position, candidates),
            SmoothRoundRobin::Live(l) => l.pick(candidates),
        }
    }
}

/// Weights divided by their greatest common divisor (the picks are the same).
fn reduce(weights: &[u32]) -> Vec<u32> {
    let g = weights.iter().fold(0, |g, &w| gcd(g, w.max(1)));
    weights.iter().map(|&w| w.max(1) / g.max(1)).collect()
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One nginx step over `members`: add each weight to its `current`, take the largest
/// (first on ties), subtract the members' total weight from it.
fn step(
    current: &mut [i64],
    weights: &[u32],
    members: impl Iterator<Item = usize>,
) -> Option<usize> {
    let mut total = 0i64;
    let mut best: Option<usize> = None;
    for i in members {
        let (Some(&c), Some(&w)) = (current.get(i), weights.get(i)) else {
            continue;
        };
        let c = c + i64::from(w);
        current[i] = c;
        total += i64::from(w);
        if best.is_none_or(|b| c > current[b]) {
            best = Some(i);
        }
    }
    let best = best?;
    current[best] -= total;
    Some(best)
}

/// A precomputed period of smooth weighted round robin.
#[derive(Debug)]
pub(super) struct Sequence {
    /// The destination picked at each position of the period.
    order: Box<[u32]>,
    /// The positions of destination `i` are `positions[starts[i]..starts[i + 1]]`, ascending.
    positions: Box<[u32]>,
    starts: Box<[u32]>,
}

impl Sequence {
    fn new(reduced: &[u32]) -> Self {
        let period: usize = reduced.iter().map(|&w| w as usize).sum();
        let mut current = vec![0i64; reduced.len()];
        let order: Box<[u32]> = (0..period)
            .map(|_| {
                let i = step(&mut current, reduced, 0..reduced.len()).expect("weights");
                i as u32
            })
            .collect();
        debug_assert!(current.iter().all(|&c| c == 0), "a whole period");
        let mut starts = Vec::with_capacity(reduced.len() + 1);
        starts.push(0u32);
        for &w in reduced {
            starts.push(starts.last().expect("pushed") + w);
        }
        let mut fill = starts.clone();
        let mut positions = vec![0u32; period];
        for (p, &i) in order.iter().enumerate() {
            positions[fill[i as usize] as usize] = p as u32;
            fill[i as usize] += 1;
        }
        Sequence {
            order,
            positions: positions.into(),
            starts: starts.into(),
        }
    }

    fn pick(
        &self,
        position: &AtomicUsize,
        candidates: &crate::request::Candidates,
    ) -> Option<usize> {
        let period = self.order.len();
        // The common case: the slot's destination is a candidate.
        let p = position.fetch_add(1, Ordering::Relaxed);
        let i = self.order[p % period] as usize;
        if candidates.contains(i) {
            return Some(i);
        }
        // Walk on to the next slot of a candidate and consume everything up to it.
        let mut p = position.load(Ordering::Relaxed);
        loop {
            let offset = p % period;
            let mut best: Option<(usize, usize)> = None;
            for i in candidates.iter() {
                let Some(slots) = self.slots(i) else { continue };
                let next = slots.partition_point(|&s| (s as usize) < offset);
                let distance = match slots.get(next) {
                    Some(&s) => s as usize - offset,
                    None => slots[0] as usize + period - offset,
                };
                if best.is_none_or(|(d, _)| distance < d) {
                    best = Some((distance, i));
                }
            }
            let (distance, i) = best?;
            match position.compare_exchange_weak(
                p,
                p.wrapping_add(distance + 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(i),
                Err(now) => p = now,
            }
        }
    }

    /// Destination `i`'s positions in the period (never empty), if it exists.
    fn slots(&self, i: usize) -> Option<&[u32]> {
        let start = *self.starts.get(i)? as usize;
        let end = *self.starts.get(i + 1)? as usize;
        Some(&self.positions[start..end])
    }
}

/// nginx's smooth weighted round robin, live, for periods too long to precompute.
#[derive(Debug)]
pub(super) struct Live {
    weights: Box<[u32]>,
    current: Mutex<Box<[i64]>>,
}

impl Live {
    fn new(reduced: Vec<u32>) -> Self {
        Live {
            current: Mutex::new(vec![0; reduced.len()].into()),
            weights: reduced.into(),
        }
    }

    fn pick(&self, candidates: &crate::request::Candidates) -> Option<usize> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        step(&mut current, &self.weights, candidates.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Candidates;

    fn picks(rr: &SmoothRoundRobin, candidates: &Candidates, n: usize) -> Vec<usize> {
        let position = AtomicUsize::new(0);
        (0..n)
            .map(|_| rr.pick(&position, candidates).unwrap())
            .collect()
    }

    #[test]
    fn nginx_sequences() {
        let all = Candidates::all(3);
        let rr = SmoothRoundRobin::new(&[5, 1, 1]);
        assert_eq!(
            picks(&rr, &all, 14),
            [0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0]
        );
        let rr = SmoothRoundRobin::new(&[5, 3, 2]);
        assert_eq!(picks(&rr, &all, 10), [0, 1, 2, 0, 0, 1, 0, 2, 1, 0]);
        // The gcd does not change the picks.
        let rr = SmoothRoundRobin::new(&[50, 30, 20]);
        assert!(matches!(&rr, SmoothRoundRobin::Precomputed(s) if s.order.len() == 10));
        assert_eq!(picks(&rr, &all, 10), [0, 1, 2, 0, 0, 1, 0, 2, 1, 0]);
    }

    #[test]
    fn precomputed_and_live_agree() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..200 {
            let n = rng.usize(2..7);
            let weights: Vec<u32> = (0..n).map(|_| rng.u32(1..40)).collect();
            let pre = SmoothRoundRobin::Precomputed(Sequence::new(&reduce(&weights)));
            let live = SmoothRoundRobin::Live(Live::new(reduce(&weights)));
            let all = Candidates::all(n);
            let total: u32 = weights.iter().sum();
            assert_eq!(
                picks(&pre, &all, 2 * total as usize),
                picks(&live, &all, 2 * total as usize),
                "{weights:?}"
            );
            // With a destination left out, both still give exact shares.
            let mut some = Candidates::all(n);
            some.remove(rng.usize(0..n));
            let reduced = reduce(&weights);
            let g = weights[0] / reduced[0];
            let share: u32 = some.iter().map(|i| weights[i]).sum::<u32>() / g;
            for rr in [&pre, &live] {
                let mut counts = vec![0u32; n];
                for i in picks(rr, &some, 3 * share as usize) {
                    counts[i] += 1;
                }
                for i in 0..n {
                    let expected = if some.contains(i) { 3 * reduced[i] } else { 0 };
                    assert_eq!(counts[i], expected, "{weights:?} {some:?}");
                }
            }
        }
    }

    #[test]
    fn large_periods_run_live() {
        let rr = SmoothRoundRobin::new(&[10000, 9999, 9998]);
        assert!(matches!(rr, SmoothRoundRobin::Precomputed(_)));
        let rr = SmoothRoundRobin::new(&[10000, 9999, 9998, 9997]);
        assert!(matches!(rr, SmoothRoundRobin::Live(_)));
    }

    #[test]
    fn skipping_consumes_the_slots_of_non_candidates() {
        // 5,3,2 is a b c a a b a c b a; without `a` the walk is b c b c b per period.
        let rr = SmoothRoundRobin::new(&[5, 3, 2]);
        let position = AtomicUsize::new(0);
        let mut bc = Candidates::all(3);
        bc.remove(0);
        let got: Vec<usize> = (0..10).map(|_| rr.pick(&position, &bc).unwrap()).collect();
        assert_eq!(got, [1, 2, 1, 2, 1, 1, 2, 1, 2, 1]);
        assert_eq!(
            position.load(Ordering::Relaxed),
            19,
            "up to the 2nd period's last b"
        );
    }
}
