//! The request path as routing sees it: split into decoded, lower-cased segments with
//! dot segments and empty segments removed (see the [module docs](super) for the rules).

use super::inline::InlineVec;
use super::text::escape_at;

/// Bytes of decoded path kept on the stack before spilling to the heap.
const INLINE_BYTES: usize = 512;
/// Segments kept on the stack before spilling to the heap.
const INLINE_SEGMENTS: usize = 32;

/// A normalised request path: segments as spans into one buffer.
#[derive(Debug)]
pub(super) struct RequestPath {
    bytes: InlineVec<u8, INLINE_BYTES>,
    /// `(start, end)` of each segment in `bytes`.
    spans: InlineVec<(u32, u32), INLINE_SEGMENTS>,
}

impl RequestPath {
    /// Normalise a raw (still percent-encoded) request path: percent-decode each segment
    /// on its own (so `%2F` never splits), fold ASCII case, drop empty segments (repeated
    /// or trailing slashes) and `.` segments, and let `..` remove the segment before it.
    pub(super) fn parse(raw: &str) -> RequestPath {
        let mut path = RequestPath {
            bytes: InlineVec::new(),
            spans: InlineVec::new(),
        };
        for raw_segment in raw.as_bytes().split(|&b| b == b'/') {
            if !raw_segment.is_empty() {
                path.push_segment(raw_segment);
            }
        }
        path
    }

    fn push_segment(&mut self, raw: &[u8]) {
        let start = self.bytes.len();
        if raw.contains(&b'%') {
            let mut i = 0;
            while i < raw.len() {
                if let Some(b) = escape_at(&raw[i..]) {
                    self.bytes.push(b.to_ascii_lowercase());
                    i += 3;
                } else {
                    self.bytes.push(raw[i].to_ascii_lowercase());
                    i += 1;
                }
            }
        } else {
            self.bytes.extend_from_slice(raw);
            self.bytes.as_mut_slice()[start..].make_ascii_lowercase();
        }
        let end = self.bytes.len();
        match &self.bytes.as_slice()[start..end] {
            b"." => self.bytes.truncate(start),
            b".." => {
                self.bytes.truncate(start);
                if let Some((previous_start, _)) = self.spans.pop() {
                    self.bytes.truncate(previous_start as usize);
                }
            }
            _ => self.spans.push((start as u32, end as u32)),
        }
    }

    /// Number of segments.
    pub(super) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Segment `i` (decoded, ASCII lower case, never empty).
    pub(super) fn segment(&self, i: usize) -> &[u8] {
        let (start, end) = self.spans.as_slice()[i];
        &self.bytes.as_slice()[start as usize..end as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(raw: &str) -> Vec<String> {
        let path = RequestPath::parse(raw);
        (0..path.len())
            .map(|i| String::from_utf8_lossy(path.segment(i)).into_owned())
            .collect()
    }

    #[test]
    fn splits_and_lowercases() {
        assert_eq!(segments("/Api/Users/42"), ["api", "users", "42"]);
        assert_eq!(segments("/"), Vec::<String>::new());
        assert_eq!(segments(""), Vec::<String>::new());
    }

    #[test]
    fn drops_empty_segments() {
        assert_eq!(segments("//api///x//"), ["api", "x"]);
        assert_eq!(segments("/api/"), ["api"]);
    }

    #[test]
    fn removes_dot_segments() {
        assert_eq!(segments("/api/../admin"), ["admin"]);
        assert_eq!(segments("/a/./b/."), ["a", "b"]);
        assert_eq!(segments("/../../x"), ["x"]);
        assert_eq!(segments("/a/b/c/../../d"), ["a", "d"]);
        assert_eq!(segments("/a/..."), ["a", "..."]);
    }

    #[test]
    fn decodes_before_removing_dot_segments() {
        assert_eq!(segments("/api/%2e%2e/admin"), ["admin"]);
        assert_eq!(segments("/api/%2E./admin"), ["admin"]);
        assert_eq!(segments("/api/%2e/x"), ["api", "x"]);
    }

    #[test]
    fn encoded_slash_stays_in_its_segment() {
        assert_eq!(segments("/a%2Fb/c"), ["a/b", "c"]);
        assert_eq!(segments("/a/%2F/b"), ["a", "/", "b"]);
    }

    #[test]
    fn decodes_and_lowercases_escapes() {
        assert_eq!(segments("/%41%42c/d%20e/100%"), ["abc", "d e", "100%"]);
    }

    #[test]
    fn handles_many_segments_and_long_paths() {
        let raw: String = (0..100).map(|i| format!("/Seg{i}")).collect();
        let got = segments(&raw);
        assert_eq!(got.len(), 100);
        assert_eq!(got[99], "seg99");
        let long = format!("/{}/X", "a".repeat(2000));
        assert_eq!(segments(&long), ["a".repeat(2000), "x".to_string()]);
    }
}
