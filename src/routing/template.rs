//! Path templates: parsing, validation and inbound precedence.
//!
//! Grammar (one segment between slashes):
//! - a literal (`api`; `{{` and `}}` stand for literal braces),
//! - a parameter `{name}`, optionally constrained `{name:int}` and/or optional `{name?}`,
//! - a catch-all `{*name}` or `{**name}` (last segment only; matches zero or more
//!   segments).
//!
//! A segment mixing literal text and parameters (`file-{id}.txt`, `{a}.{b}`) is rejected
//! with a validation error: a parameter must be the whole segment. Default values
//! (`{id=5}`) are rejected too.

use super::constraint::{self, Constraint};

/// One segment of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    /// Literal text, ASCII lower case.
    Literal(Box<[u8]>),
    /// A parameter matching exactly one non-empty segment.
    Param {
        /// Name as written.
        name: Box<str>,
        /// Constraints, sorted and without duplicates.
        constraints: Box<[Constraint]>,
        /// Whether the segment may be left out (only at the end of a template).
        optional: bool,
    },
    /// A catch-all matching the rest of the path (zero or more segments).
    CatchAll {
        /// Name as written.
        name: Box<str>,
    },
}

/// The name-independent form of a segment, for detecting routes that always tie.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum SegmentShape {
    /// A literal (lower case).
    Literal(Box<[u8]>),
    /// A parameter with its constraints and optionality.
    Param(Box<[Constraint]>, bool),
    /// A catch-all.
    CatchAll,
}

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PathTemplate {
    segments: Vec<Segment>,
}

impl Segment {
    /// ASP.NET inbound precedence digit: lower is more specific.
    /// literal < constrained parameter < parameter < optional < catch-all.
    fn precedence(&self) -> u8 {
        match self {
            Segment::Literal(_) => 0,
            Segment::Param {
                constraints,
                optional,
                ..
            } => match (*optional, constraints.is_empty()) {
                (false, false) => 1,
                (false, true) => 2,
                (true, false) => 3,
                (true, true) => 4,
            },
            Segment::CatchAll { .. } => 5,
        }
    }

    fn shape(&self) -> SegmentShape {
        match self {
            Segment::Literal(l) => SegmentShape::Literal(l.clone()),
            Segment::Param {
                constraints,
                optional,
                ..
            } => SegmentShape::Param(constraints.clone(), *optional),
            Segment::CatchAll { .. } => SegmentShape::CatchAll,
        }
    }

    fn is_optional(&self) -> bool {
        matches!(self, Segment::Param { optional: true, .. })
    }
}

impl PathTemplate {
    /// The template used when a route has no `Path`: `/{**catchall}`.
    pub(super) fn match_all() -> PathTemplate {
        PathTemplate {
            segments: vec![Segment::CatchAll {
                name: "catchall".into(),
            }],
        }
    }

    /// Parse and validate a template; the error says what is wrong. As in ASP.NET, the
    /// leading `/` may be left out (`{**catch-all}`, `api/{id}`) and `~/` stands for it.
    pub(super) fn parse(template: &str) -> Result<PathTemplate, String> {
        if template.is_empty() {
            return Err("the template is empty (leave `Path` out to match every path)".into());
        }
        if template.contains("//") {
            return Err(format!("`{template}` has an empty segment (`//`)"));
        }
        let body = template
            .strip_prefix("~/")
            .or_else(|| template.strip_prefix('/'))
            .unwrap_or(template);
        let body = body.strip_suffix('/').unwrap_or(body);
        let mut segments = Vec::new();
        if !body.is_empty() {
            for raw in body.split('/') {
                segments.push(parse_segment(raw)?);
            }
        }
        check_structure(&segments)?;
        Ok(PathTemplate { segments })
    }

    /// The segments.
    pub(super) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Inbound precedence, compared lexicographically (lower wins; a template that is a
    /// prefix of another wins over it, like ASP.NET's decimal precedence).
    pub(super) fn precedence(&self) -> Vec<u8> {
        self.segments.iter().map(Segment::precedence).collect()
    }

    /// The template without parameter names.
    pub(super) fn shape(&self) -> Vec<SegmentShape> {
        self.segments.iter().map(Segment::shape).collect()
    }
}

fn check_structure(segments: &[Segment]) -> Result<(), String> {
    let mut names: Vec<&str> = Vec::new();
    let mut after_optional: Option<&str> = None;
    for (i, segment) in segments.iter().enumerate() {
        let name = match segment {
            Segment::Literal(_) => None,
            Segment::Param { name, .. } | Segment::CatchAll { name } => Some(&**name),
        };
        if let Some(name) = name {
            if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                return Err(format!("parameter name `{name}` is used more than once"));
            }
            names.push(name);
        }
        if let Segment::CatchAll { name } = segment {
            if i + 1 != segments.len() {
                return Err(format!(
                    "catch-all parameter `{{*{name}}}` must be the last segment"
                ));
            }
        }
        if let Some(optional) = after_optional {
            if !segment.is_optional() && !matches!(segment, Segment::CatchAll { .. }) {
                return Err(format!(
                    "optional parameter `{{{optional}?}}` may only be followed by optional \
                     parameters or a catch-all"
                ));
            }
        }
        if let (true, Some(name)) = (segment.is_optional(), name) {
            after_optional.get_or_insert(name);
        }
    }
    Ok(())
}

/// A piece of a segment: literal text or the inside of `{...}`.
enum Part<'a> {
    Literal(String),
    Param(&'a str),
}

fn parse_segment(raw: &str) -> Result<Segment, String> {
    let parts = split_parts(raw)?;
    match parts.as_slice() {
        [Part::Param(inner)] => parse_param(inner),
        [Part::Literal(text)] => parse_literal(text),
        _ => Err(format!(
            "segment `{raw}` mixes literal text and parameters; a parameter must be a \
             whole segment"
        )),
    }
}

fn split_parts(raw: &str) -> Result<Vec<Part<'_>>, String> {
    let bytes = raw.as_bytes();
    let mut parts = Vec::new();
    let mut literal: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                literal.push(b'{');
                i += 2;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                literal.push(b'}');
                i += 2;
            }
            b'{' => {
                let Some(len) = raw[i + 1..].find('}') else {
                    return Err(format!("unbalanced `{{` in segment `{raw}`"));
                };
                let inner = &raw[i + 1..i + 1 + len];
                if inner.contains('{') {
                    return Err(format!("unbalanced `{{` in segment `{raw}`"));
                }
                if !literal.is_empty() {
                    parts.push(Part::Literal(take_string(&mut literal)));
                }
                parts.push(Part::Param(inner));
                i += len + 2;
            }
            b'}' => return Err(format!("unbalanced `}}` in segment `{raw}`")),
            b => {
                literal.push(b);
                i += 1;
            }
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(take_string(&mut literal)));
    }
    Ok(parts)
}

fn take_string(bytes: &mut Vec<u8>) -> String {
    // Only ASCII braces were removed from a `str`, so the rest is still UTF-8.
    String::from_utf8(std::mem::take(bytes)).expect("split at ASCII boundaries")
}

fn parse_literal(text: &str) -> Result<Segment, String> {
    if text.contains('?') {
        return Err(format!(
            "`?` is not allowed in the literal segment `{text}`"
        ));
    }
    if text == "." || text == ".." {
        return Err(format!(
            "the dot segment `{text}` never matches: request paths are normalised"
        ));
    }
    Ok(Segment::Literal(
        text.to_ascii_lowercase().into_bytes().into_boxed_slice(),
    ))
}

fn parse_param(inner: &str) -> Result<Segment, String> {
    let written = format!("{{{inner}}}");
    if inner.contains('=') {
        return Err(format!("default values are not supported (`{written}`)"));
    }
    let (body, optional) = match inner.strip_suffix('?') {
        Some(body) => (body, true),
        None => (inner, false),
    };
    let (body, catch_all) = match body.strip_prefix("**").or_else(|| body.strip_prefix('*')) {
        Some(body) => (body, true),
        None => (body, false),
    };
    let mut pieces = body.split(':');
    let name = pieces.next().unwrap_or_default();
    if name.is_empty() {
        return Err(format!("empty parameter name in `{written}`"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '*' | '?' | '{' | '}' | '/') || c.is_whitespace())
    {
        return Err(format!("invalid character `{c}` in parameter `{written}`"));
    }
    let mut constraints = Vec::new();
    for piece in pieces {
        if piece.is_empty() {
            return Err(format!("empty constraint in `{written}`"));
        }
        let Some(c) = Constraint::parse(piece) else {
            return Err(format!(
                "unsupported constraint `{piece}` in `{written}` (supported: {})",
                constraint::SUPPORTED
            ));
        };
        constraints.push(c);
    }
    constraints.sort();
    constraints.dedup();
    if catch_all {
        if optional {
            return Err(format!(
                "a catch-all parameter cannot be optional (`{written}`)"
            ));
        }
        if !constraints.is_empty() {
            return Err(format!(
                "constraints on a catch-all parameter are not supported (`{written}`)"
            ));
        }
        return Ok(Segment::CatchAll { name: name.into() });
    }
    Ok(Segment::Param {
        name: name.into(),
        constraints: constraints.into_boxed_slice(),
        optional,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.as_bytes().into())
    }

    fn param(name: &str, constraints: &[Constraint], optional: bool) -> Segment {
        Segment::Param {
            name: name.into(),
            constraints: constraints.into(),
            optional,
        }
    }

    fn err(template: &str) -> String {
        PathTemplate::parse(template).expect_err(template)
    }

    #[test]
    fn parses_every_segment_kind() {
        let t = PathTemplate::parse("/Api/{id:INT}/{name}/{opt?}/{**rest}").unwrap();
        assert_eq!(
            t.segments(),
            [
                lit("api"),
                param("id", &[Constraint::Int], false),
                param("name", &[], false),
                param("opt", &[], true),
                Segment::CatchAll {
                    name: "rest".into()
                },
            ]
        );
        assert_eq!(t.precedence(), [0, 1, 2, 4, 5]);
        let t = PathTemplate::parse("/{*path}").unwrap();
        assert_eq!(t, PathTemplate::match_all_named("path"));
    }

    #[test]
    fn root_trailing_slash_and_escaped_braces() {
        assert!(PathTemplate::parse("/").unwrap().segments().is_empty());
        assert_eq!(
            PathTemplate::parse("/api/").unwrap().segments(),
            [lit("api")]
        );
        assert_eq!(
            PathTemplate::parse("/a{{b}}").unwrap().segments(),
            [lit("a{b}")]
        );
    }

    #[test]
    fn constraints_are_sorted_and_deduplicated() {
        let a = PathTemplate::parse("/{a:long:int:int}").unwrap();
        let b = PathTemplate::parse("/{b:int:long}").unwrap();
        assert_eq!(a.shape(), b.shape());
        assert_eq!(
            PathTemplate::parse("/{x:int?}").unwrap().precedence(),
            [3],
            "constrained optional"
        );
    }

    #[test]
    fn shape_ignores_names_and_catch_all_stars() {
        let a = PathTemplate::parse("/API/{x}/{*r}").unwrap();
        let b = PathTemplate::parse("/api/{y}/{**s}").unwrap();
        assert_eq!(a.shape(), b.shape());
        let c = PathTemplate::parse("/api/{y?}/{**s}").unwrap();
        assert_ne!(a.shape(), c.shape());
    }

    #[test]
    fn leading_slash_is_optional_as_in_aspnet() {
        for (without, with) in [
            ("{**catch-all}", "/{**catch-all}"),
            ("api/{id}", "/api/{id}"),
            ("~/api", "/api"),
        ] {
            assert_eq!(
                PathTemplate::parse(without).unwrap().segments(),
                PathTemplate::parse(with).unwrap().segments(),
                "{without}"
            );
        }
        assert!(err("~//a").contains("empty segment"));
    }

    #[test]
    fn optional_may_be_followed_by_optionals_or_catch_all() {
        assert!(PathTemplate::parse("/a/{b?}/{c?}").is_ok());
        assert!(PathTemplate::parse("/a/{b?}/{*c}").is_ok());
        assert!(err("/a/{b?}/c").contains("may only be followed"));
        assert!(err("/a/{b?}/{c}").contains("may only be followed"));
    }

    #[test]
    fn rejects_bad_templates() {
        assert!(err("").contains("empty"));
        assert!(err("/a//b").contains("empty segment"));
        assert!(err("/{id").contains("unbalanced `{`"));
        assert!(err("/id}").contains("unbalanced `}`"));
        assert!(err("/{a{b}}").contains("unbalanced `{`"));
        assert!(err("/{}").contains("empty parameter name"));
        assert!(err("/{?}").contains("empty parameter name"));
        assert!(err("/{*}").contains("empty parameter name"));
        assert!(err("/{*rest}/x").contains("must be the last segment"));
        assert!(err("/{id}/{ID}").contains("used more than once"));
        assert!(err("/file-{id}").contains("mixes literal text and parameters"));
        assert!(err("/{a}.{b}").contains("mixes literal text and parameters"));
        assert!(err("/{id=5}").contains("default values"));
        assert!(err("/{id:regex(x)}").contains("unsupported constraint `regex(x)`"));
        assert!(err("/{id:}").contains("empty constraint"));
        assert!(err("/{*rest?}").contains("cannot be optional"));
        assert!(err("/{*rest:int}").contains("catch-all"));
        assert!(err("/a?b").contains("`?` is not allowed"));
        assert!(err("/a/../b").contains("dot segment"));
        assert!(err("/a b/{x y}").contains("invalid character"));
    }

    impl PathTemplate {
        fn match_all_named(name: &str) -> PathTemplate {
            PathTemplate {
                segments: vec![Segment::CatchAll { name: name.into() }],
            }
        }
    }
}
