//! Byte-string helpers shared by the matchers: ASCII case folding comparisons and
//! percent-decoding.
//!
//! Matching works on bytes, not `str`: request paths, header values and query strings
//! may carry any bytes after decoding, and comparing bytes needs no UTF-8 validation.
//! Case-insensitive comparison folds ASCII letters only.

use std::borrow::Cow;

/// The value of one hexadecimal digit.
pub(super) fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The byte a `%XY` escape at the start of `s` stands for.
pub(super) fn escape_at(s: &[u8]) -> Option<u8> {
    match s {
        [b'%', h, l, ..] => Some(hex_value(*h)? << 4 | hex_value(*l)?),
        _ => None,
    }
}

/// Percent-decode `raw` (and `+` as a space when `plus_as_space`); borrows unless
/// something was decoded. A `%` not followed by two hex digits stays as it is.
pub(super) fn percent_decode(raw: &[u8], plus_as_space: bool) -> Cow<'_, [u8]> {
    let special = |b: &u8| *b == b'%' || (plus_as_space && *b == b'+');
    if !raw.iter().any(special) {
        return Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'%' => match escape_at(&raw[i..]) {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            b'+' if plus_as_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(out)
}

/// `a == b`, folding ASCII case unless `case_sensitive`.
pub(super) fn equals(a: &[u8], b: &[u8], case_sensitive: bool) -> bool {
    if case_sensitive {
        a == b
    } else {
        a.eq_ignore_ascii_case(b)
    }
}

/// Whether `haystack` starts with `needle`, folding ASCII case unless `case_sensitive`.
pub(super) fn starts_with(haystack: &[u8], needle: &[u8], case_sensitive: bool) -> bool {
    haystack.len() >= needle.len() && equals(&haystack[..needle.len()], needle, case_sensitive)
}

/// Whether `haystack` contains `needle`, folding ASCII case unless `case_sensitive`.
pub(super) fn contains(haystack: &[u8], needle: &[u8], case_sensitive: bool) -> bool {
    if needle.is_empty() {
        return true;
    }
    haystack
        .windows(needle.len())
        .any(|w| equals(w, needle, case_sensitive))
}

/// `s` without leading and trailing spaces and tabs (HTTP's optional whitespace).
pub(super) fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let Some(start) = start else {
        return &[];
    };
    let end = s
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(start);
    &s[start..=end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_and_keeps_bad_ones() {
        assert!(matches!(percent_decode(b"/plain", false), Cow::Borrowed(_)));
        assert_eq!(&*percent_decode(b"a%20b%2Fc", false), b"a b/c");
        assert_eq!(&*percent_decode(b"100%", false), b"100%");
        assert_eq!(&*percent_decode(b"%zz%4", false), b"%zz%4");
        assert_eq!(&*percent_decode(b"a+b%2B", true), b"a b+");
        assert_eq!(&*percent_decode(b"a+b", false), b"a+b");
    }

    #[test]
    fn compares_with_and_without_case() {
        assert!(equals(b"Abc", b"aBC", false));
        assert!(!equals(b"Abc", b"aBC", true));
        assert!(starts_with(b"Bearer xyz", b"bearer", false));
        assert!(!starts_with(b"Bearer xyz", b"bearer", true));
        assert!(!starts_with(b"Be", b"bearer", false));
        assert!(contains(b"Mozilla Firefox", b"FIREFOX", false));
        assert!(!contains(b"Mozilla Firefox", b"FIREFOX", true));
        assert!(!contains(b"abc", b"abcd", false));
    }

    #[test]
    fn trims_optional_whitespace() {
        assert_eq!(trim_ows(b" \ta b\t "), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b"x"), b"x");
    }
}
