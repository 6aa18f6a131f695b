//! FxHash (rustc's hash): a rotate, a xor and a multiply per word.
//!
//! For maps whose keys come from the configuration (pool keys, route literals, host
//! names): their keys are few and not chosen by clients, so no flooding defence is
//! needed, and looking up a client's path segment or host costs a few instructions
//! instead of SipHash's rounds.

use std::hash::{BuildHasherDefault, Hasher};

/// Builds [`FxHasher`]s.
pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

/// A `HashMap` hashed with [`FxHasher`].
pub(crate) type FxHashMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

/// The hasher.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn equal_keys_hash_alike_and_different_ones_apart() {
        let build = FxBuild::default();
        let h = |k: &[u8]| build.hash_one(k);
        assert_eq!(h(b"api"), h(b"api"));
        assert_ne!(h(b"api"), h(b"apj"));
        // Length is hashed too: a prefix differs from the whole.
        assert_ne!(h(b"abcdefgh"), h(b"abcdefgh\0"));
        let mut map = FxHashMap::default();
        map.insert(b"users".to_vec().into_boxed_slice(), 1);
        assert_eq!(map.get(&b"users"[..]), Some(&1));
        assert_eq!(map.get(&b"user"[..]), None);
    }
}
