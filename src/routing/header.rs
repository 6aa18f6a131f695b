//! Header rules (`Match.Headers`).
//!
//! - `ExactHeader`, `HeaderPrefix`, `Contains`: some element of some header line equals /
//!   starts with / contains one of the values. A line is split into elements on `,`
//!   (on `;` for `Cookie`); a separator inside a quoted string does not split, spaces
//!   and tabs around an element are trimmed and a fully quoted element is compared
//!   without its quotes (as YARP does).
//! - `NotContains`: no element contains any of the values; matches when the header is
//!   absent or empty.
//! - `Exists`: some line of the header is non-empty. `NotExists`: the header is absent
//!   (a present but empty header matches neither, as in YARP).
//!
//! Values compare ASCII case-insensitively unless `IsCaseSensitive`.

use http::header::{HeaderName, COOKIE};
use http::HeaderMap;

use super::text::{contains, equals, starts_with, trim_ows};
use super::values::{compile_values, RuleKey, RuleValues};
use crate::config::{ConfigErrors, HeaderMatch, HeaderMatchMode};

/// A compiled header rule.
#[derive(Debug, Clone)]
pub(super) struct HeaderRule {
    name: HeaderName,
    mode: HeaderMatchMode,
    values: RuleValues,
    case_sensitive: bool,
}

impl HeaderRule {
    /// Validate and compile a rule; errors go under `path` (`Routes.r.Match.Headers[0]`).
    pub(super) fn compile(
        rule: &HeaderMatch,
        path: &str,
        errors: &mut ConfigErrors,
    ) -> Option<HeaderRule> {
        let name = if rule.name.is_empty() {
            errors.push(format!("{path}.Name"), "a header name is required");
            None
        } else {
            let name = HeaderName::from_bytes(rule.name.as_bytes()).ok();
            if name.is_none() {
                errors.push(
                    format!("{path}.Name"),
                    format!("`{}` is not a valid header name", rule.name),
                );
            }
            name
        };
        let compares = !matches!(
            rule.mode,
            HeaderMatchMode::Exists | HeaderMatchMode::NotExists
        );
        let values = compile_values(
            rule.values.as_deref(),
            compares,
            &format!("{:?}", rule.mode),
            path,
            errors,
        );
        Some(HeaderRule {
            name: name?,
            mode: rule.mode,
            values: values?,
            case_sensitive: rule.is_case_sensitive,
        })
    }

    /// Whether the request headers satisfy this rule.
    pub(super) fn matches(&self, headers: &HeaderMap) -> bool {
        match self.mode {
            HeaderMatchMode::Exists => headers
                .get_all(&self.name)
                .iter()
                .any(|line| !trim_ows(line.as_bytes()).is_empty()),
            HeaderMatchMode::NotExists => !headers.contains_key(&self.name),
            HeaderMatchMode::ExactHeader => self.any_element(headers, equals),
            HeaderMatchMode::HeaderPrefix => self.any_element(headers, starts_with),
            HeaderMatchMode::Contains => self.any_element(headers, contains),
            HeaderMatchMode::NotContains => !self.any_element(headers, contains),
        }
    }

    fn any_element(&self, headers: &HeaderMap, test: fn(&[u8], &[u8], bool) -> bool) -> bool {
        let separator = if self.name == COOKIE { b';' } else { b',' };
        headers.get_all(&self.name).iter().any(|line| {
            Elements::new(line.as_bytes(), separator).any(|element| {
                self.values
                    .iter()
                    .any(|value| test(element, value, self.case_sensitive))
            })
        })
    }

    /// The normalised rule, for tie detection.
    pub(super) fn key(&self) -> RuleKey {
        RuleKey::new(
            self.name.as_str().as_bytes(),
            self.mode as u8,
            self.case_sensitive,
            &self.values,
        )
    }
}

/// The elements of one header line (see the module docs).
struct Elements<'a> {
    rest: Option<&'a [u8]>,
    separator: u8,
}

impl<'a> Elements<'a> {
    fn new(line: &'a [u8], separator: u8) -> Self {
        Elements {
            rest: Some(line),
            separator,
        }
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            let rest = self.rest?;
            let mut i = 0;
            let mut quoted = false;
            while i < rest.len() {
                match rest[i] {
                    b'\\' if quoted => i += 1,
                    b'"' => quoted = !quoted,
                    b if b == self.separator && !quoted => break,
                    _ => {}
                }
                i += 1;
            }
            let end = i.min(rest.len());
            self.rest = rest.get(end + 1..).filter(|_| end < rest.len());
            let element = trim_ows(&rest[..end]);
            let element = match element {
                [b'"', inner @ .., b'"'] => inner,
                _ => element,
            };
            if !element.is_empty() {
                return Some(element);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn rule(name: &str, mode: HeaderMatchMode, values: &[&str], cs: bool) -> HeaderRule {
        let cfg = HeaderMatch {
            name: name.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|s| s.to_string()).collect()),
            mode,
            is_case_sensitive: cs,
        };
        let mut errors = ConfigErrors::default();
        HeaderRule::compile(&cfg, "H", &mut errors).unwrap_or_else(|| panic!("{errors}"))
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in pairs {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn elements(line: &str, sep: u8) -> Vec<String> {
        Elements::new(line.as_bytes(), sep)
            .map(|e| String::from_utf8(e.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn splits_elements_respecting_quotes() {
        assert_eq!(elements("a, b ,,c", b','), ["a", "b", "c"]);
        assert_eq!(elements(r#""x,y", z"#, b','), ["x,y", "z"]);
        assert_eq!(elements(r#""a\"b,c" , d"#, b','), [r#"a\"b,c"#, "d"]);
        assert_eq!(elements("k=v; k2=v2", b';'), ["k=v", "k2=v2"]);
        assert_eq!(elements("", b','), Vec::<String>::new());
        assert_eq!(elements(r#""unclosed, x"#, b','), [r#""unclosed, x"#]);
    }

    #[test]
    fn exact_any_value_any_element_any_line() {
        let r = rule(
            "x-tenant",
            HeaderMatchMode::ExactHeader,
            &["blue", "green"],
            false,
        );
        assert!(r.matches(&headers(&[("x-tenant", "Blue")])));
        assert!(r.matches(&headers(&[("x-tenant", "red, GREEN")])));
        assert!(r.matches(&headers(&[("x-tenant", "red"), ("x-tenant", "green")])));
        assert!(r.matches(&headers(&[("x-tenant", "\"blue\"")])));
        assert!(!r.matches(&headers(&[("x-tenant", "blueish")])));
        assert!(!r.matches(&headers(&[])));
        let cs = rule("x-tenant", HeaderMatchMode::ExactHeader, &["blue"], true);
        assert!(!cs.matches(&headers(&[("x-tenant", "Blue")])));
        assert!(cs.matches(&headers(&[("x-tenant", "blue")])));
    }

    #[test]
    fn prefix_and_contains() {
        let p = rule(
            "authorization",
            HeaderMatchMode::HeaderPrefix,
            &["bearer "],
            false,
        );
        assert!(p.matches(&headers(&[("authorization", "Bearer abc")])));
        assert!(!p.matches(&headers(&[("authorization", "Basic abc")])));
        let c = rule("user-agent", HeaderMatchMode::Contains, &["firefox"], false);
        assert!(c.matches(&headers(&[("user-agent", "Mozilla Firefox/1")])));
        assert!(!c.matches(&headers(&[("user-agent", "curl")])));
        assert!(!c.matches(&headers(&[])));
    }

    #[test]
    fn not_contains_matches_when_absent() {
        let r = rule(
            "user-agent",
            HeaderMatchMode::NotContains,
            &["bot", "crawler"],
            false,
        );
        assert!(r.matches(&headers(&[])));
        assert!(r.matches(&headers(&[("user-agent", "")])));
        assert!(r.matches(&headers(&[("user-agent", "Firefox")])));
        assert!(!r.matches(&headers(&[("user-agent", "GoogleBot")])));
        assert!(!r.matches(&headers(&[
            ("user-agent", "x"),
            ("user-agent", "a crawler")
        ])));
    }

    #[test]
    fn exists_and_not_exists() {
        let e = rule("x-debug", HeaderMatchMode::Exists, &[], false);
        let n = rule("x-debug", HeaderMatchMode::NotExists, &[], false);
        let present = headers(&[("x-debug", "1")]);
        let empty = headers(&[("x-debug", "")]);
        let absent = headers(&[("other", "1")]);
        assert!(e.matches(&present) && !n.matches(&present));
        assert!(!e.matches(&empty) && !n.matches(&empty));
        assert!(!e.matches(&absent) && n.matches(&absent));
        let two = headers(&[("x-debug", ""), ("x-debug", "1")]);
        assert!(e.matches(&two));
    }

    #[test]
    fn cookie_splits_on_semicolon() {
        let r = rule("Cookie", HeaderMatchMode::ExactHeader, &["beta=on"], false);
        assert!(r.matches(&headers(&[("cookie", "session=1; beta=on")])));
        assert!(!r.matches(&headers(&[("cookie", "session=1, beta=on")])));
        let other = rule("x-list", HeaderMatchMode::ExactHeader, &["beta=on"], false);
        assert!(!other.matches(&headers(&[("x-list", "session=1; beta=on")])));
        assert!(other.matches(&headers(&[("x-list", "session=1, beta=on")])));
    }

    #[test]
    fn validation_errors() {
        let compile = |name: &str, mode, values: Option<Vec<String>>| {
            let cfg = HeaderMatch {
                name: name.into(),
                values,
                mode,
                is_case_sensitive: false,
            };
            let mut errors = ConfigErrors::default();
            assert!(HeaderRule::compile(&cfg, "H", &mut errors).is_none());
            errors.iter().map(|e| e.path.clone()).collect::<Vec<_>>()
        };
        let v = |s: &str| Some(vec![s.to_string()]);
        assert_eq!(compile("", HeaderMatchMode::Exists, None), ["H.Name"]);
        assert_eq!(
            compile("bad name", HeaderMatchMode::Exists, None),
            ["H.Name"]
        );
        assert_eq!(
            compile("x", HeaderMatchMode::ExactHeader, None),
            ["H.Values"]
        );
        assert_eq!(
            compile("x", HeaderMatchMode::NotExists, v("a")),
            ["H.Values"]
        );
        assert_eq!(
            compile("x", HeaderMatchMode::Contains, v("")),
            ["H.Values[0]"]
        );
        assert_eq!(
            compile("", HeaderMatchMode::HeaderPrefix, None),
            ["H.Name", "H.Values"]
        );
    }
}
