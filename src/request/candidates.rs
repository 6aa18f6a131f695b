//! A compact set of destination indices that does not allocate for clusters of up to
//! 128 destinations.

use std::fmt;

const INLINE_BITS: usize = 128;

/// The destinations of a cluster still eligible for a request, as indices into
/// [`Cluster::destinations`](crate::state::Cluster::destinations).
///
/// ```
/// use fuseway::request::Candidates;
/// let mut c = Candidates::all(5);
/// c.remove(1);
/// assert_eq!(c.len(), 4);
/// assert_eq!(c.iter().collect::<Vec<_>>(), vec![0, 2, 3, 4]);
/// assert_eq!(c.nth(1), Some(2));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Candidates {
    bits: Bits,
}

/// The members, and the cluster's size (what `insert` may add).
#[derive(Clone, PartialEq, Eq)]
enum Bits {
    Inline(u128, u8),
    Heap(Box<[u64]>, u32),
}

impl Candidates {
    /// No destination, of a cluster of none (nothing can be inserted: for an empty set
    /// of a cluster of `n`, `Candidates::all(n)` then [`clear`](Self::clear)).
    pub fn none() -> Self {
        Candidates {
            bits: Bits::Inline(0, 0),
        }
    }

    /// Every destination of a cluster of `n`.
    pub fn all(n: usize) -> Self {
        if n <= INLINE_BITS {
            let bits = if n == INLINE_BITS {
                u128::MAX
            } else {
                (1u128 << n) - 1
            };
            Candidates {
                bits: Bits::Inline(bits, n as u8),
            }
        } else {
            let mut words = vec![u64::MAX; n.div_ceil(64)].into_boxed_slice();
            if !n.is_multiple_of(64) {
                *words.last_mut().expect("n > 128") = (1u64 << (n % 64)) - 1;
            }
            Candidates {
                bits: Bits::Heap(
                    words,
                    u32::try_from(n).expect("fewer than 2^32 destinations"),
                ),
            }
        }
    }

    /// Only destination `i` of a cluster of `n`.
    pub fn only(i: usize, n: usize) -> Self {
        let mut c = Candidates::all(n);
        c.clear();
        c.insert(i);
        c
    }

    /// Whether `i` is in the set.
    pub fn contains(&self, i: usize) -> bool {
        match &self.bits {
            Bits::Inline(b, _) => i < INLINE_BITS && b & (1u128 << i) != 0,
            Bits::Heap(w, _) => w.get(i / 64).is_some_and(|w| w & (1u64 << (i % 64)) != 0),
        }
    }

    /// Add `i` (ignored when beyond the cluster's size).
    ///
    /// ```
    /// use fuseway::request::Candidates;
    /// let mut c = Candidates::all(3);
    /// c.clear();
    /// c.insert(2);
    /// c.insert(5); // a cluster of 3 has no destination 5
    /// assert_eq!(c.iter().collect::<Vec<_>>(), vec![2]);
    /// ```
    pub fn insert(&mut self, i: usize) {
        match &mut self.bits {
            Bits::Inline(b, n) if i < usize::from(*n) => *b |= 1u128 << i,
            Bits::Heap(w, n) if i < *n as usize => w[i / 64] |= 1u64 << (i % 64),
            Bits::Inline(..) | Bits::Heap(..) => {}
        }
    }

    /// Remove `i`.
    pub fn remove(&mut self, i: usize) {
        match &mut self.bits {
            Bits::Inline(b, _) if i < INLINE_BITS => *b &= !(1u128 << i),
            Bits::Inline(..) => {}
            Bits::Heap(w, _) => {
                if let Some(w) = w.get_mut(i / 64) {
                    *w &= !(1u64 << (i % 64));
                }
            }
        }
    }

    /// Remove everything.
    pub fn clear(&mut self) {
        match &mut self.bits {
            Bits::Inline(b, _) => *b = 0,
            Bits::Heap(w, _) => w.iter_mut().for_each(|w| *w = 0),
        }
    }

    /// Keep only the indices for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        let mut i = 0;
        while let Some(next) = self.next_from(i) {
            if !keep(next) {
                self.remove(next);
            }
            i = next + 1;
        }
    }

    /// How many destinations are in the set.
    pub fn len(&self) -> usize {
        match &self.bits {
            Bits::Inline(b, _) => b.count_ones() as usize,
            Bits::Heap(w, _) => w.iter().map(|w| w.count_ones() as usize).sum(),
        }
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        match &self.bits {
            Bits::Inline(b, _) => *b == 0,
            Bits::Heap(w, _) => w.iter().all(|w| *w == 0),
        }
    }

    /// The smallest index in the set.
    pub fn first(&self) -> Option<usize> {
        self.next_from(0)
    }

    /// The `k`-th smallest index in the set (0-based).
    pub fn nth(&self, k: usize) -> Option<usize> {
        match &self.bits {
            Bits::Inline(b, _) => {
                // All of 0..n (every destination available, the common case): k itself.
                if b & b.wrapping_add(1) == 0 {
                    return (k < b.trailing_ones() as usize).then_some(k);
                }
                // Clear the k lowest members, then take the lowest left: no scan.
                if k >= b.count_ones() as usize {
                    return None;
                }
                let (mut lo, mut hi, mut k) = (*b as u64, (*b >> 64) as u64, k);
                let lo_count = lo.count_ones() as usize;
                if k >= lo_count {
                    k -= lo_count;
                    for _ in 0..k {
                        hi &= hi - 1;
                    }
                    return Some(64 + hi.trailing_zeros() as usize);
                }
                for _ in 0..k {
                    lo &= lo - 1;
                }
                Some(lo.trailing_zeros() as usize)
            }
            Bits::Heap(..) => self.iter().nth(k),
        }
    }

    /// The indices in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { set: self, next: 0 }
    }

    fn next_from(&self, from: usize) -> Option<usize> {
        match &self.bits {
            Bits::Inline(b, _) => {
                if from >= INLINE_BITS {
                    return None;
                }
                let rest = b >> from;
                (rest != 0).then(|| from + rest.trailing_zeros() as usize)
            }
            Bits::Heap(words, _) => {
                let mut wi = from / 64;
                let mut word = *words.get(wi)? & (u64::MAX << (from % 64));
                loop {
                    if word != 0 {
                        return Some(wi * 64 + word.trailing_zeros() as usize);
                    }
                    wi += 1;
                    word = *words.get(wi)?;
                }
            }
        }
    }
}

impl fmt::Debug for Candidates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Iterator over [`Candidates`].
#[derive(Debug)]
pub struct Iter<'a> {
    set: &'a Candidates,
    next: usize,
}

impl Iterator for Iter<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let i = self.set.next_from(self.next)?;
        self.next = i + 1;
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_agree() {
        for n in [0, 1, 5, 64, 127, 128, 129, 200, 256] {
            let mut c = Candidates::all(n);
            assert_eq!(c.len(), n, "n={n}");
            assert_eq!((0..=n).map(|k| c.nth(k)).collect::<Vec<_>>(), {
                let mut all: Vec<_> = (0..n).map(Some).collect();
                all.push(None);
                all
            });
            c.retain(|i| i % 3 == 0);
            let expected: Vec<usize> = (0..n).filter(|i| i % 3 == 0).collect();
            assert_eq!(c.iter().collect::<Vec<_>>(), expected, "n={n}");
            assert_eq!(c.len(), expected.len());
            for (k, want) in expected.iter().enumerate() {
                assert_eq!(c.nth(k), Some(*want), "n={n} k={k}");
            }
            assert_eq!(c.nth(expected.len()), None, "n={n}");
            if n > 0 {
                assert!(c.contains(0));
                assert_eq!(c.first(), Some(0));
                let o = Candidates::only(n - 1, n);
                assert_eq!(o.iter().collect::<Vec<_>>(), vec![n - 1]);
            } else {
                assert!(c.is_empty());
            }
        }
    }

    #[test]
    fn insert_ignores_indices_beyond_the_cluster() {
        for n in [0, 3, 127, 128, 130, 200] {
            let mut c = Candidates::all(n);
            c.clear();
            for i in [n, n + 1, 127, 128, 129, 191, 1000] {
                if i >= n {
                    c.insert(i);
                }
            }
            assert!(c.is_empty(), "n={n}: {c:?}");
            if n > 0 {
                c.insert(n - 1);
                assert_eq!(c.iter().collect::<Vec<_>>(), vec![n - 1]);
            }
        }
        let mut none = Candidates::none();
        none.insert(0);
        assert!(none.is_empty());
        // The cluster's size rides in the enum's spare bytes.
        assert_eq!(std::mem::size_of::<Candidates>(), 32);
    }
}
