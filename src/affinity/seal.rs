//! Sealed destination ids for the `Cookie` and `CustomHeader` policies.
//!
//! YARP protects these keys with ASP.NET Data Protection; fuseway seals the destination
//! id with ChaCha20-Poly1305 instead, so its values are not interchangeable with YARP's.
//! A value is `base64url(nonce || ciphertext || tag)` without padding, the nonce random
//! (96 bits) per sealing, the cluster id bound as associated data: a value sealed for
//! one cluster does not open in another.

use std::fmt;
use std::sync::OnceLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// The Poly1305 tag length.
const TAG_LEN: usize = 16;

/// Seals and opens destination ids under one key, for one cluster.
pub(crate) struct Sealer {
    key: LessSafeKey,
    aad: Box<[u8]>,
    rng: SystemRandom,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer with `key` (32 bytes) for the cluster `cluster_id`.
    pub(crate) fn new(key: &[u8; 32], cluster_id: &str) -> Self {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte key");
        let mut aad = b"fuseway.affinity.v1\0".to_vec();
        aad.extend_from_slice(cluster_id.as_bytes());
        Sealer {
            key: LessSafeKey::new(key),
            aad: aad.into_boxed_slice(),
            rng: SystemRandom::new(),
        }
    }

    /// The decoded length of the sealed value of a `len`-byte id.
    pub(crate) fn sealed_len(len: usize) -> usize {
        NONCE_LEN + len + TAG_LEN
    }

    /// Seal `plaintext` with a fresh random nonce; `None` if the system RNG failed.
    pub(crate) fn seal(&self, plaintext: &[u8]) -> Option<String> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(Self::sealed_len(plaintext.len()));
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&self.aad[..]),
                &mut out[NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(URL_SAFE_NO_PAD.encode(out))
    }

    /// Open the sealed value `value` using `buf` as scratch space; the id, or `None` if
    /// the value is not base64url, does not fit `buf` or was not sealed by this sealer.
    pub(crate) fn open<'b>(&self, value: &[u8], buf: &'b mut [u8]) -> Option<&'b [u8]> {
        if base64::decoded_len_estimate(value.len()) > buf.len() {
            return None;
        }
        let n = URL_SAFE_NO_PAD.decode_slice(value, buf).ok()?;
        if n < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, sealed) = buf[..n].split_at_mut(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(&self.aad[..]), sealed)
            .ok()?;
        Some(plain)
    }
}

/// The key used by clusters without an `EncryptionKey`: random, generated once per
/// process (with a warning that sealed keys will not survive a restart). `None` if the
/// system RNG failed.
pub(crate) fn process_key() -> Option<&'static [u8; 32]> {
    static KEY: OnceLock<Option<[u8; 32]>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        SystemRandom::new().fill(&mut key).ok()?;
        tracing::warn!(
            "session affinity: no SessionAffinity.EncryptionKey set; using a random key for \
             this process, so affinity keys of the Cookie and CustomHeader policies will not \
             survive a restart (nor be shared between instances)"
        );
        Some(key)
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf() -> [u8; 256] {
        [0u8; 256]
    }

    #[test]
    fn round_trip_and_tamper() {
        let s = Sealer::new(&[7u8; 32], "c1");
        let v = s.seal(b"d1").unwrap();
        // 12 + 2 + 16 bytes: 40 base64 characters, no padding, URL alphabet.
        assert_eq!(v.len(), 40);
        assert!(v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(s.open(v.as_bytes(), &mut buf()), Some(&b"d1"[..]));
        // Fresh nonce per sealing.
        assert_ne!(s.seal(b"d1").unwrap(), v);

        let mut bad = v.clone().into_bytes();
        bad[20] = if bad[20] == b'A' { b'B' } else { b'A' };
        assert_eq!(s.open(&bad, &mut buf()), None);
        assert_eq!(s.open(b"", &mut buf()), None);
        assert_eq!(s.open(b"not base64!", &mut buf()), None);
        assert_eq!(s.open(b"AAAA", &mut buf()), None);
        assert_eq!(s.open(format!("{v}==").as_bytes(), &mut buf()), None);
        // Too long for the scratch space: rejected unread.
        assert_eq!(s.open(v.as_bytes(), &mut [0u8; 10]), None);
    }

    #[test]
    fn bound_to_key_and_cluster() {
        let s = Sealer::new(&[7u8; 32], "c1");
        let v = s.seal(b"d1").unwrap();
        let other_cluster = Sealer::new(&[7u8; 32], "c2");
        assert_eq!(other_cluster.open(v.as_bytes(), &mut buf()), None);
        let other_key = Sealer::new(&[8u8; 32], "c1");
        assert_eq!(other_key.open(v.as_bytes(), &mut buf()), None);
        let same = Sealer::new(&[7u8; 32], "c1");
        assert_eq!(same.open(v.as_bytes(), &mut buf()), Some(&b"d1"[..]));
    }

    #[test]
    fn process_key_is_stable() {
        assert_eq!(process_key(), process_key());
        assert!(process_key().is_some());
    }
}
