//! A growable array that lives on the stack until it outgrows `N` items.
//!
//! Routing splits every request path and host into byte spans; keeping those on the
//! stack is what lets [`RouteTable::find`](super::RouteTable::find) run without
//! allocating for ordinary requests. Only unusually long paths spill to the heap.

/// Up to `N` items inline, then a `Vec`.
#[derive(Debug, Clone)]
pub(super) struct InlineVec<T: Copy + Default, const N: usize> {
    inline: [T; N],
    len: usize,
    /// Holds every item once `len` has exceeded `N` (then `inline` is unused).
    heap: Vec<T>,
    spilled: bool,
}

impl<T: Copy + Default, const N: usize> InlineVec<T, N> {
    /// An empty vector; does not allocate.
    pub(super) fn new() -> Self {
        InlineVec {
            inline: [T::default(); N],
            len: 0,
            heap: Vec::new(),
            spilled: false,
        }
    }

    /// Number of items.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Append one item.
    pub(super) fn push(&mut self, item: T) {
        if self.spilled {
            self.heap.push(item);
        } else if self.len < N {
            self.inline[self.len] = item;
        } else {
            self.spill();
            self.heap.push(item);
        }
        self.len += 1;
    }

    /// Append many items.
    pub(super) fn extend_from_slice(&mut self, items: &[T]) {
        if !self.spilled && self.len + items.len() <= N {
            self.inline[self.len..self.len + items.len()].copy_from_slice(items);
        } else {
            if !self.spilled {
                self.spill();
            }
            self.heap.extend_from_slice(items);
        }
        self.len += items.len();
    }

    /// Remove and return the last item.
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        if self.spilled {
            self.heap.pop()
        } else {
            Some(self.inline[self.len])
        }
    }

    /// Keep only the first `len` items.
    pub(super) fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            if self.spilled {
                self.heap.truncate(len);
            }
        }
    }

    /// The items.
    pub(super) fn as_slice(&self) -> &[T] {
        if self.spilled {
            &self.heap
        } else {
            &self.inline[..self.len]
        }
    }

    /// The items, mutably.
    pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
        if self.spilled {
            &mut self.heap
        } else {
            &mut self.inline[..self.len]
        }
    }

    fn spill(&mut self) {
        self.heap.reserve(N * 2);
        self.heap.extend_from_slice(&self.inline[..self.len]);
        self.spilled = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_inline_then_spills() {
        let mut v: InlineVec<u8, 4> = InlineVec::new();
        v.extend_from_slice(b"abc");
        v.push(b'd');
        assert!(!v.spilled);
        assert_eq!(v.as_slice(), b"abcd");
        v.push(b'e');
        assert!(v.spilled);
        v.extend_from_slice(b"fg");
        assert_eq!(v.as_slice(), b"abcdefg");
        assert_eq!(v.pop(), Some(b'g'));
        v.truncate(2);
        assert_eq!(v.as_slice(), b"ab");
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn extend_past_capacity_spills() {
        let mut v: InlineVec<u8, 4> = InlineVec::new();
        v.extend_from_slice(b"ab");
        v.extend_from_slice(b"cde");
        assert_eq!(v.as_slice(), b"abcde");
        v.truncate(0);
        assert_eq!(v.pop(), None);
        assert!(v.as_slice().is_empty());
    }
}
