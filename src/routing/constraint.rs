//! Inline route constraints: `{id:int}`, `{slug:alpha}`, ...
//!
//! A small subset of ASP.NET's constraints is supported; any other name is a validation
//! error rather than being silently ignored. Several may be chained (`{id:int:long}`);
//! all must accept the segment.

use std::fmt;

/// A constraint on one parameter segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Constraint {
    /// An optional `+`/`-` sign and decimal digits that fit an `i32`.
    Int,
    /// An optional `+`/`-` sign and decimal digits that fit an `i64`.
    Long,
    /// `true` or `false`, any case.
    Bool,
    /// One or more ASCII letters.
    Alpha,
    /// A GUID: 32 hex digits, optionally as `8-4-4-4-12` and optionally inside `{}`
    /// or `()`.
    Guid,
}

/// The names accepted in templates, for error messages.
pub(super) const SUPPORTED: &str = "int, long, bool, alpha, guid";

impl Constraint {
    /// Parse a constraint name (case-insensitive, as ASP.NET).
    pub(super) fn parse(name: &str) -> Option<Constraint> {
        const NAMES: [(&str, Constraint); 5] = [
            ("int", Constraint::Int),
            ("long", Constraint::Long),
            ("bool", Constraint::Bool),
            ("alpha", Constraint::Alpha),
            ("guid", Constraint::Guid),
        ];
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, c)| c)
    }

    /// Whether a decoded path segment satisfies this constraint.
    pub(super) fn accepts(self, segment: &[u8]) -> bool {
        match self {
            Constraint::Int => parse_number::<i32>(segment),
            Constraint::Long => parse_number::<i64>(segment),
            Constraint::Bool => {
                segment.eq_ignore_ascii_case(b"true") || segment.eq_ignore_ascii_case(b"false")
            }
            Constraint::Alpha => !segment.is_empty() && segment.iter().all(u8::is_ascii_alphabetic),
            Constraint::Guid => is_guid(segment),
        }
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Constraint::Int => "int",
            Constraint::Long => "long",
            Constraint::Bool => "bool",
            Constraint::Alpha => "alpha",
            Constraint::Guid => "guid",
        })
    }
}

fn parse_number<T: std::str::FromStr>(segment: &[u8]) -> bool {
    std::str::from_utf8(segment).is_ok_and(|s| s.parse::<T>().is_ok())
}

fn is_guid(segment: &[u8]) -> bool {
    let inner = match segment {
        [b'{', inner @ .., b'}'] | [b'(', inner @ .., b')'] => inner,
        _ => segment,
    };
    match inner.len() {
        // `N` format; braces only go with the hyphenated form.
        32 => inner.len() == segment.len() && inner.iter().all(u8::is_ascii_hexdigit),
        36 => inner.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_case_insensitively() {
        assert_eq!(Constraint::parse("INT"), Some(Constraint::Int));
        assert_eq!(Constraint::parse("guid"), Some(Constraint::Guid));
        assert_eq!(Constraint::parse("regex(x)"), None);
        assert_eq!(Constraint::Alpha.to_string(), "alpha");
    }

    #[test]
    fn int_and_long() {
        assert!(Constraint::Int.accepts(b"42"));
        assert!(Constraint::Int.accepts(b"-7"));
        assert!(Constraint::Int.accepts(b"+7"));
        assert!(Constraint::Int.accepts(b"2147483647"));
        assert!(!Constraint::Int.accepts(b"2147483648"));
        assert!(Constraint::Long.accepts(b"2147483648"));
        assert!(!Constraint::Long.accepts(b"99999999999999999999"));
        assert!(!Constraint::Int.accepts(b"4x"));
        assert!(!Constraint::Int.accepts(b""));
        assert!(!Constraint::Int.accepts(b"-"));
    }

    #[test]
    fn bool_and_alpha() {
        assert!(Constraint::Bool.accepts(b"TRUE"));
        assert!(Constraint::Bool.accepts(b"false"));
        assert!(!Constraint::Bool.accepts(b"yes"));
        assert!(Constraint::Alpha.accepts(b"abcXYZ"));
        assert!(!Constraint::Alpha.accepts(b"abc1"));
        assert!(!Constraint::Alpha.accepts(b""));
    }

    #[test]
    fn guid_formats() {
        let d = b"3f2504e0-4f89-11d3-9a0c-0305e82c3301";
        assert!(Constraint::Guid.accepts(d));
        assert!(Constraint::Guid.accepts(b"{3F2504E0-4F89-11D3-9A0C-0305E82C3301}"));
        assert!(Constraint::Guid.accepts(b"(3f2504e0-4f89-11d3-9a0c-0305e82c3301)"));
        assert!(Constraint::Guid.accepts(b"3f2504e04f8911d39a0c0305e82c3301"));
        assert!(!Constraint::Guid.accepts(b"{3f2504e04f8911d39a0c0305e82c3301}"));
        assert!(!Constraint::Guid.accepts(b"3f2504e0-4f89-11d3-9a0c-0305e82c330g"));
        assert!(!Constraint::Guid.accepts(b"3f2504e0-4f89-11d3-9a0c"));
    }
}
