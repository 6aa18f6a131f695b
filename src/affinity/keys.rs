//! Affinity key values: YARP's hash formats, the per-cluster table of keys and the
//! lookup from a request's key to a destination.

use std::cmp::Ordering;

use http::HeaderValue;
use ring::digest;
use twox_hash::XxHash64;

use super::seal::Sealer;

/// The `HashCookie` key of a destination: XxHash64 (seed 0) over the UTF-16LE bytes of
/// the id upper-cased as .NET's `ToUpperInvariant` does, its 8 bytes big-endian (as
/// .NET's `XxHash64.Hash` returns them), in lower-case hex. The same value YARP writes.
///
/// ```
/// // Pinned in YARP's HashCookieSessionAffinityPolicyTests.
/// assert_eq!(fuseway::affinity::hash_cookie_value("dest-B"), "53c079ed4c377b0d");
/// ```
pub fn hash_cookie_value(destination_id: &str) -> String {
    hex(&hash_cookie_bytes(destination_id), HEX_LOWER)
}

/// The `ArrCookie` key of a destination: SHA-256 over the UTF-16LE bytes of the id
/// lower-cased as .NET's `ToLowerInvariant` does, in upper-case hex (the format of IIS'
/// Application Request Routing). The same value YARP writes.
///
/// ```
/// // Pinned in YARP's ArrCookieSessionAffinityPolicyTests.
/// assert_eq!(
///     fuseway::affinity::arr_cookie_value("dest-B"),
///     "920A160FA519353932B655488361A944531650016793761EE7224DE632863B13"
/// );
/// ```
pub fn arr_cookie_value(destination_id: &str) -> String {
    hex(&arr_cookie_bytes(destination_id), HEX_UPPER)
}

fn hash_cookie_bytes(id: &str) -> [u8; 8] {
    let bytes = utf16le(id.chars().map(upper_invariant));
    XxHash64::oneshot(0, &bytes).to_be_bytes()
}

fn arr_cookie_bytes(id: &str) -> [u8; 32] {
    let bytes = utf16le(id.chars().map(lower_invariant));
    let d = digest::digest(&digest::SHA256, &bytes);
    d.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

fn utf16le(chars: impl Iterator<Item = char>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u16; 2];
    for c in chars {
        for unit in c.encode_utf16(&mut buf) {
            out.extend_from_slice(&unit.to_le_bytes());
        }
    }
    out
}

/// .NET's `ToUpperInvariant` for one character: Unicode's simple (one to one) upper-case
/// mapping, except that U+0131 (dotless i) stays itself as on .NET's invariant culture.
/// Rust's `char::to_uppercase` is the full mapping; where that gives several characters
/// (`ß` -> `SS`) the simple mapping is the character itself, or, for the Greek letters
/// with ypogegrammeni, their title-case form.
pub(crate) fn upper_invariant(c: char) -> char {
    match c {
        '\u{0131}' => c,
        '\u{1F80}'..='\u{1F87}' | '\u{1F90}'..='\u{1F97}' | '\u{1FA0}'..='\u{1FA7}' => {
            char::from_u32(c as u32 + 8).unwrap_or(c)
        }
        '\u{1FB3}' => '\u{1FBC}',
        '\u{1FC3}' => '\u{1FCC}',
        '\u{1FF3}' => '\u{1FFC}',
        _ => single(c.to_uppercase()).unwrap_or(c),
    }
}

/// .NET's `ToLowerInvariant` for one character: the simple lower-case mapping, except that
/// U+0130 (capital I with dot above) stays itself as on .NET's invariant culture (its
/// full mapping is two characters, so the fallback keeps it).
pub(crate) fn lower_invariant(c: char) -> char {
    single(c.to_lowercase()).unwrap_or(c)
}

fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
    match (it.next(), it.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn hex(bytes: &[u8], digits: &[u8; 16]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(digits[usize::from(b >> 4)] as char);
        s.push(digits[usize::from(b & 0xf)] as char);
    }
    s
}

/// Parse exactly `2 * N` hex digits of one case (YARP compares key strings ordinally, so
/// the other case does not match).
fn parse_hex<const N: usize>(s: &[u8], upper: bool) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let digit = |d: u8| -> Option<u8> {
        match d {
            b'0'..=b'9' => Some(d - b'0'),
            b'a'..=b'f' if !upper => Some(d - b'a' + 10),
            b'A'..=b'F' if upper => Some(d - b'A' + 10),
            _ => None,
        }
    };
    let mut out = [0u8; N];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// Sorted `(key, destination index)` pairs; equal keys (hash collisions) sorted by index.
type Sorted<K> = Box<[(K, u32)]>;

/// How a request's key is mapped to destination indices.
pub(crate) enum Index {
    /// `HashCookie`: the 8 hash bytes.
    Hash(Sorted<[u8; 8]>),
    /// `ArrCookie`: the 32 digest bytes.
    Arr(Sorted<[u8; 32]>),
    /// `Cookie` / `CustomHeader`: the destination id, after opening the sealed value.
    Sealed {
        ids: Sorted<Box<[u8]>>,
        /// The longest valid sealed value, decoded; longer ones are rejected unread.
        max_len: usize,
    },
}

/// The affinity keys of one cluster's destinations, computed once per snapshot.
pub(crate) struct Keys {
    pub(crate) index: Index,
    /// Per destination: the key value written on responses (empty if it could not be made).
    pub(crate) values: Box<[Box<str>]>,
    /// Per destination: the response header value, `[plain, secure]`, when it does not
    /// depend on the time (no cookie `Expires`).
    pub(crate) ready: Option<Box<[[HeaderValue; 2]]>>,
}

/// How the key a request carried resolved against the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The first destination with this key that is a candidate.
    Found(usize),
    /// The key is readable, but no candidate has it (unknown or unavailable destination).
    NotFound,
    /// The key cannot be read (not the format of this policy, or not sealed by this key).
    Unreadable,
}

impl Keys {
    pub(crate) fn hash(ids: &[&str]) -> (Index, Vec<Box<str>>) {
        let mut table = Vec::with_capacity(ids.len());
        let mut values = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let h = hash_cookie_bytes(id);
            table.push((h, i as u32));
            values.push(hex(&h, HEX_LOWER).into_boxed_str());
        }
        table.sort_unstable();
        (Index::Hash(table.into_boxed_slice()), values)
    }

    pub(crate) fn arr(ids: &[&str]) -> (Index, Vec<Box<str>>) {
        let mut table = Vec::with_capacity(ids.len());
        let mut values = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let h = arr_cookie_bytes(id);
            table.push((h, i as u32));
            values.push(hex(&h, HEX_UPPER).into_boxed_str());
        }
        table.sort_unstable();
        (Index::Arr(table.into_boxed_slice()), values)
    }

    pub(crate) fn sealed(ids: &[&str], sealer: &Sealer) -> (Index, Vec<Box<str>>) {
        let mut table: Vec<(Box<[u8]>, u32)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (Box::from(id.as_bytes()), i as u32))
            .collect();
        table.sort_unstable();
        let values = ids
            .iter()
            .map(|id| match sealer.seal(id.as_bytes()) {
                Some(v) => v.into_boxed_str(),
                None => {
                    tracing::error!(
                        destination = id,
                        "could not seal a session affinity key; none is written for it"
                    );
                    Box::from("")
                }
            })
            .collect();
        let max_len = ids
            .iter()
            .map(|id| Sealer::sealed_len(id.len()))
            .max()
            .unwrap_or(0);
        (
            Index::Sealed {
                ids: table.into_boxed_slice(),
                max_len,
            },
            values,
        )
    }

    /// Resolve `raw`, the key a request carried, to a candidate destination.
    pub(crate) fn lookup(
        &self,
        raw: &[u8],
        sealer: Option<&Sealer>,
        is_candidate: impl Fn(usize) -> bool,
    ) -> Lookup {
        let first = |range: &mut dyn Iterator<Item = u32>| {
            range
                .map(|i| i as usize)
                .find(|&i| is_candidate(i))
                .map_or(Lookup::NotFound, Lookup::Found)
        };
        match &self.index {
            Index::Hash(t) => match parse_hex::<8>(raw, false) {
                Some(k) => first(&mut equal(t, |x| x.cmp(&k))),
                None => Lookup::Unreadable,
            },
            Index::Arr(t) => match parse_hex::<32>(raw, true) {
                Some(k) => first(&mut equal(t, |x| x.cmp(&k))),
                None => Lookup::Unreadable,
            },
            Index::Sealed { ids, max_len } => {
                let Some(sealer) = sealer else {
                    return Lookup::Unreadable;
                };
                // Room for base64's estimate of the longest valid value.
                let need = max_len + 3;
                let mut stack = [0u8; 256];
                let mut heap = Vec::new();
                let buf: &mut [u8] = if need <= stack.len() {
                    &mut stack[..need]
                } else {
                    // Only clusters with destination ids over ~220 bytes get here.
                    heap.resize(need, 0);
                    &mut heap
                };
                match sealer.open(raw, buf) {
                    Some(id) => first(&mut equal(ids, |x| x[..].cmp(id))),
                    None => Lookup::Unreadable,
                }
            }
        }
    }
}

/// The indices of the entries of sorted `t` for which `cmp` is `Equal`.
fn equal<K>(t: &[(K, u32)], cmp: impl Fn(&K) -> Ordering) -> impl Iterator<Item = u32> + '_ {
    let start = t.partition_point(|(k, _)| cmp(k) == Ordering::Less);
    let len = t[start..].partition_point(|(k, _)| cmp(k) == Ordering::Equal);
    t[start..start + len].iter().map(|(_, i)| *i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_parsing_is_strict() {
        assert_eq!(
            parse_hex::<8>(b"53c079ed4c377b0d", false),
            Some([0x53, 0xc0, 0x79, 0xed, 0x4c, 0x37, 0x7b, 0x0d])
        );
        assert_eq!(parse_hex::<8>(b"53C079ED4C377B0D", false), None);
        assert_eq!(parse_hex::<8>(b"53c079ed4c377b0", false), None);
        assert_eq!(parse_hex::<8>(b"53c079ed4c377b0d0", false), None);
        assert_eq!(parse_hex::<8>(b"53c079ed4c377b0g", false), None);
        assert_eq!(parse_hex::<1>(b"AB", true), Some([0xab]));
        assert_eq!(parse_hex::<1>(b"ab", true), None);
    }

    #[test]
    fn invariant_casing_is_one_to_one() {
        assert_eq!(upper_invariant('a'), 'A');
        assert_eq!(upper_invariant('ß'), 'ß');
        assert_eq!(upper_invariant('ı'), 'ı');
        assert_eq!(upper_invariant('é'), 'É');
        assert_eq!(upper_invariant('\u{1FB3}'), '\u{1FBC}');
        assert_eq!(upper_invariant('\u{1F80}'), '\u{1F88}');
        assert_eq!(lower_invariant('A'), 'a');
        assert_eq!(lower_invariant('İ'), 'İ');
        assert_eq!(lower_invariant('Σ'), 'σ');
    }

    #[test]
    fn equal_range_handles_collisions_in_index_order() {
        let t: Vec<([u8; 1], u32)> = vec![([1], 0), ([2], 1), ([2], 3), ([3], 2)];
        assert_eq!(equal(&t, |k| k.cmp(&[2])).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(equal(&t, |k| k.cmp(&[4])).count(), 0);
        assert_eq!(equal(&t, |k| k.cmp(&[0])).count(), 0);
    }
}
