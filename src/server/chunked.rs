//! A table of values addressed by `u32` index, in chunks of 256 that never move: it
//! grows a chunk at a time without copying what it holds or leaving a freed copy of
//! itself behind (a `Vec` doubling would, and with thousands of connections that is
//! resident memory). Freed places are reused first. Used by a listener's drain table
//! (one place per connection) and its lot (one per parked connection).

/// Places per chunk.
pub(crate) const CHUNK: usize = 256;

/// No place.
const NIL: u32 = u32::MAX;

pub(crate) struct Chunked<T> {
    chunks: Vec<Box<[Entry<T>]>>,
    /// The free places, linked through `Entry::Free`.
    free: u32,
}

enum Entry<T> {
    Free(u32),
    Used(T),
}

impl<T> std::fmt::Debug for Chunked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} chunks", self.chunks.len())
    }
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            free: NIL,
        }
    }
}

impl<T> Chunked<T> {
    fn entry(&mut self, index: u32) -> Option<&mut Entry<T>> {
        let index = index as usize;
        self.chunks
            .get_mut(index / CHUNK)
            .map(|c| &mut c[index % CHUNK])
    }

    /// Keep `value` in a free place (the table grows by a chunk when it has none); its
    /// index.
    pub(crate) fn insert(&mut self, value: T) -> u32 {
        if self.free == NIL {
            let first = self.chunks.len() * CHUNK;
            let end = u32::try_from(first + CHUNK).expect("fewer than 2^32 places");
            let chunk: Box<[Entry<T>]> = (first as u32 + 1..=end)
                .map(|next| Entry::Free(if next == end { NIL } else { next }))
                .collect();
            self.chunks.push(chunk);
            self.free = first as u32;
        }
        let index = self.free;
        let entry = self.entry(index).expect("a free place");
        let Entry::Free(next) = std::mem::replace(entry, Entry::Used(value)) else {
            unreachable!("the free list holds free places");
        };
        self.free = next;
        index
    }

    /// Take the value at `index` out (`None`: the place is free, or there is none).
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let free = self.free;
        let entry = self.entry(index)?;
        if let Entry::Free(_) = entry {
            return None;
        }
        let Entry::Used(value) = std::mem::replace(entry, Entry::Free(free)) else {
            unreachable!("checked above");
        };
        self.free = index;
        Some(value)
    }

    /// The value at `index`.
    ///
    /// # Panics
    /// If the place is free: the caller keeps the indices it was given.
    pub(crate) fn get_mut(&mut self, index: u32) -> &mut T {
        match self.entry(index) {
            Some(Entry::Used(value)) => value,
            _ => panic!("no value at {index}"),
        }
    }

    /// Every value held.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .filter_map(|e| match e {
                Entry::Used(value) => Some(value),
                Entry::Free(_) => None,
            })
    }

    /// Chunks allocated.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_reused_and_chunks_never_move() {
        let mut table = Chunked::default();
        let first: Vec<u32> = (0..300).map(|i| table.insert(i)).collect();
        assert_eq!(table.chunks(), 2);
        let chunk = &table.chunks[0][0] as *const Entry<i32>;
        assert_eq!(table.remove(first[5]), Some(5));
        assert_eq!(table.remove(first[5]), None, "already free");
        assert_eq!(table.remove(10_000), None, "no such place");
        assert_eq!(table.insert(-5), first[5], "the freed place first");
        *table.get_mut(first[7]) += 10_000;
        assert_eq!(table.values().filter(|v| **v == 10_007).count(), 1);
        for i in 0..200 {
            table.insert(1000 + i);
        }
        assert_eq!(table.chunks(), 2, "the second chunk's free places");
        assert_eq!(&table.chunks[0][0] as *const Entry<i32>, chunk, "not moved");
        assert_eq!(table.values().count(), 500);
    }
}
