//! What header and query rules share: validation of their `Values` and the normalised
//! form used to detect routes that always tie.

use crate::config::ConfigErrors;

/// The compared values of a rule, as bytes.
pub(super) type RuleValues = Box<[Box<[u8]>]>;

/// Validate a rule's `Values` (errors under `{path}.Values`): required and non-empty
/// when the mode compares values, absent (or empty) when it does not. Returns `None`
/// after recording an error.
pub(super) fn compile_values(
    values: Option<&[String]>,
    compares_values: bool,
    mode: &str,
    path: &str,
    errors: &mut ConfigErrors,
) -> Option<RuleValues> {
    let values = values.unwrap_or_default();
    if compares_values && values.is_empty() {
        errors.push(
            format!("{path}.Values"),
            format!("at least one value is required for mode {mode}"),
        );
        return None;
    }
    if !compares_values && !values.is_empty() {
        errors.push(
            format!("{path}.Values"),
            format!("mode {mode} takes no values"),
        );
        return None;
    }
    let mut ok = true;
    for (j, value) in values.iter().enumerate() {
        if value.is_empty() {
            errors.push(format!("{path}.Values[{j}]"), "a value must not be empty");
            ok = false;
        }
    }
    ok.then(|| values.iter().map(|v| v.as_bytes().into()).collect())
}

/// A rule with everything that does not change its meaning normalised away: name case,
/// value order and duplicates, value case when compared case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct RuleKey {
    name: Box<[u8]>,
    mode: u8,
    case_sensitive: bool,
    values: Vec<Box<[u8]>>,
}

impl RuleKey {
    /// The key of one rule.
    pub(super) fn new(name: &[u8], mode: u8, case_sensitive: bool, values: &[Box<[u8]>]) -> Self {
        let case_sensitive = case_sensitive && !values.is_empty();
        let mut values: Vec<Box<[u8]>> = values
            .iter()
            .map(|v| {
                if case_sensitive {
                    v.clone()
                } else {
                    v.to_ascii_lowercase().into_boxed_slice()
                }
            })
            .collect();
        values.sort();
        values.dedup();
        RuleKey {
            name: name.to_ascii_lowercase().into_boxed_slice(),
            mode,
            case_sensitive,
            values,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn requires_values_when_comparing() {
        let mut errors = ConfigErrors::default();
        assert!(compile_values(None, true, "Exact", "P", &mut errors).is_none());
        assert!(compile_values(Some(&[]), true, "Exact", "P", &mut errors).is_none());
        let bad = strings(&["a", ""]);
        assert!(compile_values(Some(&bad), true, "Exact", "P", &mut errors).is_none());
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["P.Values", "P.Values", "P.Values[1]"]);
    }

    #[test]
    fn forbids_values_when_not_comparing() {
        let mut errors = ConfigErrors::default();
        assert!(compile_values(Some(&[]), false, "Exists", "P", &mut errors).is_some());
        let some = strings(&["a"]);
        assert!(compile_values(Some(&some), false, "Exists", "P", &mut errors).is_none());
        assert_eq!(
            errors.iter().next().unwrap().message,
            "mode Exists takes no values"
        );
    }

    #[test]
    fn key_normalises() {
        let v = |s: &[&str]| -> Vec<Box<[u8]>> { s.iter().map(|s| s.as_bytes().into()).collect() };
        assert_eq!(
            RuleKey::new(b"X-A", 0, false, &v(&["B", "a", "b"])),
            RuleKey::new(b"x-a", 0, false, &v(&["A", "B"]))
        );
        assert_ne!(
            RuleKey::new(b"x", 0, true, &v(&["A"])),
            RuleKey::new(b"x", 0, true, &v(&["a"]))
        );
        assert_eq!(
            RuleKey::new(b"x", 4, true, &[]),
            RuleKey::new(b"x", 4, false, &[])
        );
    }
}
