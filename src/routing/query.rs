//! Query parameter rules (`Match.QueryParameters`).
//!
//! The query string is split on `&`, each pair at its first `=`; names and values are
//! percent-decoded with `+` as a space. Names compare ASCII case-insensitively (as
//! ASP.NET's query collection); values too unless `IsCaseSensitive`.
//!
//! A parameter given several times matches `Exact`/`Prefix`/`Contains` when any
//! occurrence does, and `NotContains` only when no occurrence contains any value
//! (absent matches). `Exists` needs an occurrence with a non-empty value.

use std::borrow::Cow;

use super::text::{contains, equals, percent_decode, starts_with};
use super::values::{compile_values, RuleKey, RuleValues};
use crate::config::{ConfigErrors, QueryParameterMatch, QueryParameterMatchMode};

/// A compiled query parameter rule.
#[derive(Debug, Clone)]
pub(super) struct QueryRule {
    name: Box<[u8]>,
    mode: QueryParameterMatchMode,
    values: RuleValues,
    case_sensitive: bool,
}

impl QueryRule {
    /// Validate and compile a rule; errors go under `path`
    /// (`Routes.r.Match.QueryParameters[0]`).
    pub(super) fn compile(
        rule: &QueryParameterMatch,
        path: &str,
        errors: &mut ConfigErrors,
    ) -> Option<QueryRule> {
        let name_ok = !rule.name.is_empty();
        if !name_ok {
            errors.push(format!("{path}.Name"), "a query parameter name is required");
        }
        let compares = rule.mode != QueryParameterMatchMode::Exists;
        let values = compile_values(
            rule.values.as_deref(),
            compares,
            &format!("{:?}", rule.mode),
            path,
            errors,
        )?;
        name_ok.then(|| QueryRule {
            name: rule.name.as_bytes().into(),
            mode: rule.mode,
            values,
            case_sensitive: rule.is_case_sensitive,
        })
    }

    /// Whether the raw query string (without `?`) satisfies this rule.
    pub(super) fn matches(&self, query: Option<&str>) -> bool {
        let mut occurrences = self.occurrences(query.unwrap_or_default());
        let test: fn(&[u8], &[u8], bool) -> bool = match self.mode {
            QueryParameterMatchMode::Exists => return occurrences.any(|v| !v.is_empty()),
            QueryParameterMatchMode::Exact => equals,
            QueryParameterMatchMode::Prefix => starts_with,
            QueryParameterMatchMode::Contains | QueryParameterMatchMode::NotContains => contains,
        };
        let found = occurrences.any(|raw| {
            let value = percent_decode(raw, true);
            self.values
                .iter()
                .any(|expected| test(&value, expected, self.case_sensitive))
        });
        found != (self.mode == QueryParameterMatchMode::NotContains)
    }

    /// The raw values of every occurrence of this parameter.
    fn occurrences<'q>(&'q self, query: &'q str) -> impl Iterator<Item = &'q [u8]> + 'q {
        query
            .as_bytes()
            .split(|&b| b == b'&')
            .filter(|pair| !pair.is_empty())
            .filter_map(move |pair| {
                let (name, value) = match pair.iter().position(|&b| b == b'=') {
                    Some(eq) => (&pair[..eq], &pair[eq + 1..]),
                    None => (pair, &pair[pair.len()..]),
                };
                let name: Cow<'_, [u8]> = percent_decode(name, true);
                name.eq_ignore_ascii_case(&self.name).then_some(value)
            })
    }

    /// The normalised rule, for tie detection.
    pub(super) fn key(&self) -> RuleKey {
        RuleKey::new(
            &self.name,
            self.mode as u8,
            self.case_sensitive,
            &self.values,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, mode: QueryParameterMatchMode, values: &[&str], cs: bool) -> QueryRule {
        let cfg = QueryParameterMatch {
            name: name.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|s| s.to_string()).collect()),
            mode,
            is_case_sensitive: cs,
        };
        let mut errors = ConfigErrors::default();
        QueryRule::compile(&cfg, "Q", &mut errors).unwrap_or_else(|| panic!("{errors}"))
    }

    use QueryParameterMatchMode as M;

    #[test]
    fn exact_decodes_and_folds_case() {
        let r = rule("q", M::Exact, &["hello world", "x/y"], false);
        assert!(r.matches(Some("q=Hello+World")));
        assert!(r.matches(Some("a=1&q=hello%20world")));
        assert!(r.matches(Some("Q=x%2Fy")));
        assert!(r.matches(Some("%71=x%2fy")), "encoded name");
        assert!(!r.matches(Some("q=hello")));
        assert!(!r.matches(None));
        assert!(!r.matches(Some("qq=hello+world")));
        let cs = rule("q", M::Exact, &["Hello"], true);
        assert!(cs.matches(Some("q=Hello")));
        assert!(!cs.matches(Some("q=hello")));
    }

    #[test]
    fn any_occurrence_matches() {
        let r = rule("tag", M::Exact, &["b"], false);
        assert!(r.matches(Some("tag=a&tag=b")));
        assert!(!r.matches(Some("tag=a&tag=c")));
    }

    #[test]
    fn prefix_and_contains() {
        let p = rule("v", M::Prefix, &["2."], false);
        assert!(p.matches(Some("v=2.1")));
        assert!(!p.matches(Some("v=1.2")));
        let c = rule("ua", M::Contains, &["BOT"], false);
        assert!(c.matches(Some("ua=googlebot")));
        assert!(!c.matches(Some("ua=human")));
        assert!(!c.matches(Some("")));
    }

    #[test]
    fn not_contains() {
        let r = rule("debug", M::NotContains, &["true"], false);
        assert!(r.matches(None));
        assert!(r.matches(Some("x=1")));
        assert!(r.matches(Some("debug=false")));
        assert!(!r.matches(Some("debug=TRUE")));
        assert!(!r.matches(Some("debug=false&debug=true")));
    }

    #[test]
    fn exists_needs_a_non_empty_value() {
        let r = rule("key", M::Exists, &[], false);
        assert!(r.matches(Some("key=1")));
        assert!(r.matches(Some("key=&key=2")));
        assert!(!r.matches(Some("key=")));
        assert!(!r.matches(Some("key")));
        assert!(!r.matches(Some("other=1")));
        assert!(!r.matches(None));
    }

    #[test]
    fn validation_errors() {
        let compile = |name: &str, mode, values: Option<Vec<String>>| {
            let cfg = QueryParameterMatch {
                name: name.into(),
                values,
                mode,
                is_case_sensitive: false,
            };
            let mut errors = ConfigErrors::default();
            assert!(QueryRule::compile(&cfg, "Q", &mut errors).is_none());
            errors.iter().map(|e| e.path.clone()).collect::<Vec<_>>()
        };
        assert_eq!(compile("", M::Exists, None), ["Q.Name"]);
        assert_eq!(compile("q", M::Contains, None), ["Q.Values"]);
        assert_eq!(
            compile("q", M::Exists, Some(vec!["a".into()])),
            ["Q.Values"]
        );
        assert_eq!(
            compile("q", M::Exact, Some(vec!["".into()])),
            ["Q.Values[0]"]
        );
    }
}
