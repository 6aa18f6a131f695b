//! The request path as routing sees it: split into decoded, lower-cased segments with
//! dot segments and empty segments removed (see the [module docs](super) for the rules).

use smallvec::SmallVec;

use super::text::escape_at;

/// Bytes of decoded path kept on the stack before spilling to the heap.
const INLINE_BYTES: usize = 512;
/// Segments kept on the stack before spilling to the heap.
const INLINE_SEGMENTS: usize = 32;

/// A normalised request path: segments as spans into one buffer.
#[derive(Debug)]
pub(super) struct RequestPath<'a> {
    text: Text<'a>,
    /// `(start, end)` of each segment in the text.
    spans: SmallVec<[(u32, u32); INLINE_SEGMENTS]>,
}

/// The text the spans point into.
// Both variants live on the stack on purpose: boxing the decoded one would allocate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Text<'a> {
    /// The raw path itself, when it is already normal (the common case): no copy.
    Raw(&'a [u8]),
    /// The decoded, lower-cased path.
    Decoded(SmallVec<[u8; INLINE_BYTES]>),
}

impl<'a> RequestPath<'a> {
    /// An empty path, to [`parse`](Self::parse) into where it lives: it is large (its
    /// inline buffers are what lets ordinary paths allocate nothing), and a path
    /// returned by value from a call was built in the callee's frame and then copied
    /// out, 800 bytes per request.
    #[inline(always)]
    pub(super) fn new() -> RequestPath<'a> {
        RequestPath {
            text: Text::Raw(&[]),
            spans: SmallVec::new(),
        }
    }

    /// Normalise a raw (still percent-encoded) request path into `self`: percent-decode
    /// each segment on its own (so `%2F` never splits), fold ASCII case, drop empty
    /// segments (repeated or trailing slashes) and `.` segments, and let `..` remove the
    /// segment before it.
    pub(super) fn parse(&mut self, raw: &'a str) {
        let raw = raw.as_bytes();
        self.text = Text::Raw(raw);
        self.spans.truncate(0);
        // Most paths are already normal (no escape, no upper case, no dot segment): then
        // the segments are spans of the raw path and nothing is copied.
        if self.split_normal(raw) {
            return;
        }
        self.text = Text::Decoded(SmallVec::new());
        self.spans.truncate(0);
        for raw_segment in raw.split(|&b| b == b'/') {
            if !raw_segment.is_empty() {
                self.push_segment(raw_segment);
            }
        }
    }

    /// Split `raw` into spans if it needs no normalisation beyond dropping empty
    /// segments; `false` (spans incomplete) if it does.
    fn split_normal(&mut self, raw: &[u8]) -> bool {
        if raw.len() > u32::MAX as usize {
            return false;
        }
        // One pass: each byte is checked and splits at the same time.
        let mut start = 0;
        for (i, &b) in raw.iter().enumerate() {
            match b {
                b'/' => {
                    if !self.push_normal(raw, start, i) {
                        return false;
                    }
                    start = i + 1;
                }
                b'%' | b'A'..=b'Z' => return false,
                _ => {}
            }
        }
        self.push_normal(raw, start, raw.len())
    }

    /// Keep `raw[start..end]` as a segment unless it is empty; `false` if it may be a
    /// dot segment.
    fn push_normal(&mut self, raw: &[u8], start: usize, end: usize) -> bool {
        if end > start {
            if raw[start] == b'.' {
                return false;
            }
            self.spans.push((start as u32, end as u32));
        }
        true
    }

    fn bytes(&mut self) -> &mut SmallVec<[u8; INLINE_BYTES]> {
        match &mut self.text {
            Text::Decoded(bytes) => bytes,
            Text::Raw(_) => unreachable!("only decoded paths are built segment by segment"),
        }
    }

    fn push_segment(&mut self, raw: &[u8]) {
        let bytes = self.bytes();
        let start = bytes.len();
        if raw.contains(&b'%') {
            let mut i = 0;
            while i < raw.len() {
                if let Some(b) = escape_at(&raw[i..]) {
                    bytes.push(b.to_ascii_lowercase());
                    i += 3;
                } else {
                    bytes.push(raw[i].to_ascii_lowercase());
                    i += 1;
                }
            }
        } else {
            bytes.extend_from_slice(raw);
            bytes.as_mut_slice()[start..].make_ascii_lowercase();
        }
        let end = bytes.len();
        match &bytes.as_slice()[start..end] {
            b"." => bytes.truncate(start),
            b".." => {
                bytes.truncate(start);
                if let Some((previous_start, _)) = self.spans.pop() {
                    self.bytes().truncate(previous_start as usize);
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
        let text = match &self.text {
            Text::Raw(raw) => raw,
            Text::Decoded(bytes) => bytes.as_slice(),
        };
        &text[start as usize..end as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &str) -> RequestPath<'_> {
        let mut path = RequestPath::new();
        path.parse(raw);
        path
    }

    fn segments(raw: &str) -> Vec<String> {
        let path = parsed(raw);
        (0..path.len())
            .map(|i| String::from_utf8_lossy(path.segment(i)).into_owned())
            .collect()
    }

    #[test]
    fn normal_paths_are_not_copied() {
        assert!(matches!(parsed("/api/users/42").text, Text::Raw(_)));
        assert!(matches!(parsed("//api//x/").text, Text::Raw(_)));
        assert!(matches!(parsed("/Api").text, Text::Decoded(_)));
        assert!(matches!(parsed("/a/../b").text, Text::Decoded(_)));
        assert!(matches!(parsed("/a%20b").text, Text::Decoded(_)));
        assert_eq!(segments("//api//x/"), ["api", "x"]);
        assert_eq!(segments("/.well-known/x"), [".well-known", "x"]);
        assert_eq!(segments("/a/.b/c"), ["a", ".b", "c"]);
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
