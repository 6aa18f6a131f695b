//! Transforms parsed from YARP's dictionaries: the key that names each, its
//! companions, and the errors that name the entry and key.

use std::collections::BTreeMap;

use super::*;
use crate::config::ConfigErrors;

/// The keys that name a transform (YARP's), in the order the reference lists them.
pub const TRANSFORM_KINDS: &[&str] = &[
    "PathPrefix",
    "PathRemovePrefix",
    "PathSet",
    "PathPattern",
    "QueryValueParameter",
    "QueryRouteParameter",
    "QueryRemoveParameter",
    "HttpMethodChange",
    "RequestHeadersCopy",
    "RequestHeaderOriginalHost",
    "RequestHeader",
    "RequestHeaderRouteValue",
    "RequestHeaderRemove",
    "RequestHeadersAllowed",
    "X-Forwarded",
    "Forwarded",
    "ClientCert",
    "ResponseHeader",
    "ResponseHeaderRemove",
    "ResponseHeadersAllowed",
    "ResponseHeadersCopy",
    "ResponseTrailer",
    "ResponseTrailerRemove",
    "ResponseTrailersAllowed",
    "ResponseTrailersCopy",
];

/// Parse a route's transforms. `path` names the list (`Routes.r1.Transforms`); an error
/// about the third entry has the path `Routes.r1.Transforms[2]`. Every bad entry is
/// reported.
pub fn parse_transforms(
    list: &[BTreeMap<String, String>],
    path: &str,
) -> Result<Vec<Transform>, ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let parsed = collect_transforms(list, path, &mut errors);
    errors.into_result().map(|()| parsed)
}

/// Like [`parse_transforms`], adding errors to `errors`.
pub(crate) fn collect_transforms(
    list: &[BTreeMap<String, String>],
    path: &str,
    errors: &mut ConfigErrors,
) -> Vec<Transform> {
    list.iter()
        .enumerate()
        .filter_map(|(i, map)| parse_one(map, &format!("{path}[{i}]"), errors))
        .collect()
}

pub(super) fn parse_one(
    map: &BTreeMap<String, String>,
    path: &str,
    errors: &mut ConfigErrors,
) -> Option<Transform> {
    if map.is_empty() {
        errors.push(
            path,
            "empty transform; expected one of ".to_string() + &TRANSFORM_KINDS.join(", "),
        );
        return None;
    }
    let keys: Vec<&String> = map.keys().collect();
    for (i, a) in keys.iter().enumerate() {
        if let Some(b) = keys[i + 1..].iter().find(|b| a.eq_ignore_ascii_case(b)) {
            errors.push(path, format!("duplicate key: `{a}` and `{b}`"));
            return None;
        }
    }
    let found: Vec<(&String, &'static str)> = keys
        .iter()
        .filter_map(|k| {
            Some((
                *k,
                *TRANSFORM_KINDS
                    .iter()
                    .find(|kind| k.eq_ignore_ascii_case(kind))?,
            ))
        })
        .collect();
    let (key, kind) = match found.as_slice() {
        [one] => *one,
        [] => {
            let keys = keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>();
            errors.push(
                path,
                format!(
                    "unknown transform {}; expected one of {}",
                    keys.join(", "),
                    TRANSFORM_KINDS.join(", ")
                ),
            );
            return None;
        }
        [(a, _), (b, _), ..] => {
            errors.push(
                path,
                format!(
                    "conflicting transform keys `{a}` and `{b}`; give each transform its own entry"
                ),
            );
            return None;
        }
    };
    let mut entry = Entry {
        map,
        key,
        path,
        errors,
        kind,
        failed: false,
    };
    let value = map[key].as_str();
    let transform = build(&mut entry, kind, value);
    entry.finish();
    if entry.failed {
        None
    } else {
        transform
    }
}

/// Builds the transform named `kind` whose key has `value`.
pub(super) fn build(e: &mut Entry<'_>, kind: &'static str, value: &str) -> Option<Transform> {
    use Transform as T;
    Some(match kind {
        "PathPrefix" => T::PathPrefix(e.path_value(value, false)?),
        "PathRemovePrefix" => T::PathRemovePrefix(e.path_value(value, false)?),
        "PathSet" => T::PathSet(e.path_value(value, false)?),
        "PathPattern" => T::PathPattern(e.path_value(value, true)?),
        "QueryValueParameter" | "QueryRouteParameter" => {
            let name = e.non_empty(value, "parameter name")?;
            let (action, v) = e.action()?;
            if kind == "QueryValueParameter" {
                T::QueryValueParameter {
                    name,
                    action,
                    value: v.to_string(),
                }
            } else {
                T::QueryRouteParameter {
                    name,
                    action,
                    route_value: e.non_empty(v, "route value name")?,
                }
            }
        }
        "QueryRemoveParameter" => T::QueryRemoveParameter(e.non_empty(value, "parameter name")?),
        "HttpMethodChange" => {
            let from = e.method(value);
            let to = match e.take("Set") {
                Some(to) => e.method(to),
                None => e.fail("missing `Set`: the method to change to".into()),
            };
            T::HttpMethodChange {
                from: from?,
                to: to?,
            }
        }
        "RequestHeadersCopy" => T::RequestHeadersCopy(e.bool(value)?),
        "RequestHeaderOriginalHost" => T::RequestHeaderOriginalHost(e.bool(value)?),
        "RequestHeader" => {
            let name = e.header_name(value);
            let (action, v) = e.action()?;
            T::RequestHeader {
                name: name?,
                action,
                value: e.header_value(v)?,
            }
        }
        "RequestHeaderRouteValue" => {
            let name = e.header_name(value);
            let (action, v) = e.action()?;
            T::RequestHeaderRouteValue {
                name: name?,
                action,
                route_value: e.non_empty(v, "route value name")?,
            }
        }
        "RequestHeaderRemove" => T::RequestHeaderRemove(e.header_name(value)?),
        "RequestHeadersAllowed" => T::RequestHeadersAllowed(e.header_list(value)?),
        "X-Forwarded" => T::XForwarded(e.x_forwarded(value)?),
        "Forwarded" => T::Forwarded(e.forwarded(value)?),
        "ClientCert" => T::ClientCert(e.header_name(value)?),
        "ResponseHeader" | "ResponseTrailer" => {
            let name = e.header_name(value);
            let action = e.action();
            let when = e.when();
            let (action, v) = action?;
            let value = e.header_value(v)?;
            let (name, when) = (name?, when?);
            if kind == "ResponseHeader" {
                T::ResponseHeader {
                    name,
                    action,
                    value,
                    when,
                }
            } else {
                T::ResponseTrailer {
                    name,
                    action,
                    value,
                    when,
                }
            }
        }
        "ResponseHeaderRemove" | "ResponseTrailerRemove" => {
            let name = e.header_name(value);
            let when = e.when();
            let (name, when) = (name?, when?);
            if kind == "ResponseHeaderRemove" {
                T::ResponseHeaderRemove { name, when }
            } else {
                T::ResponseTrailerRemove { name, when }
            }
        }
        "ResponseHeadersAllowed" => T::ResponseHeadersAllowed(e.header_list(value)?),
        "ResponseHeadersCopy" => T::ResponseHeadersCopy(e.bool(value)?),
        "ResponseTrailersAllowed" => T::ResponseTrailersAllowed(e.header_list(value)?),
        "ResponseTrailersCopy" => T::ResponseTrailersCopy(e.bool(value)?),
        _ => return e.fail(format!("transform `{kind}` is not supported")),
    })
}

/// Companion keys each transform accepts besides its own.
pub(super) fn companions(kind: &str) -> &'static [&'static str] {
    match kind {
        "QueryValueParameter"
        | "QueryRouteParameter"
        | "RequestHeader"
        | "RequestHeaderRouteValue" => &["Set", "Append"],
        "HttpMethodChange" => &["Set"],
        "ResponseHeader" | "ResponseTrailer" => &["Set", "Append", "When"],
        "ResponseHeaderRemove" | "ResponseTrailerRemove" => &["When"],
        "X-Forwarded" => &["For", "Proto", "Host", "Prefix", "HeaderPrefix"],
        "Forwarded" => &["ForFormat", "ByFormat", "Action"],
        _ => &[],
    }
}

/// One dictionary being parsed, with the errors found so far.
pub(super) struct Entry<'a> {
    map: &'a BTreeMap<String, String>,
    /// The key naming the transform, as written.
    key: &'a str,
    path: &'a str,
    errors: &'a mut ConfigErrors,
    kind: &'static str,
    failed: bool,
}

impl<'a> Entry<'a> {
    /// The value of a companion key, matched case-insensitively.
    pub(super) fn take(&mut self, key: &str) -> Option<&'a str> {
        let (_, v) = self.map.iter().find(|(k, _)| k.eq_ignore_ascii_case(key))?;
        Some(v)
    }

    pub(super) fn fail<T>(&mut self, message: String) -> Option<T> {
        self.failed = true;
        self.errors.push(self.path, message);
        None
    }

    /// Report every key this transform does not accept.
    pub(super) fn finish(&mut self) {
        let map = self.map;
        let expected = companions(self.kind);
        for key in map.keys() {
            if key == self.key || expected.iter().any(|c| key.eq_ignore_ascii_case(c)) {
                continue;
            }
            let message = if expected.is_empty() {
                format!(
                    "unexpected key `{key}`: a `{}` transform takes no other key",
                    self.kind
                )
            } else {
                format!(
                    "unexpected key `{key}` in a `{}` transform; expected {}",
                    self.kind,
                    expected.join(", ")
                )
            };
            self.fail::<()>(message);
        }
    }

    pub(super) fn non_empty(&mut self, value: &str, what: &str) -> Option<String> {
        if value.is_empty() {
            self.fail(format!("`{}` needs a {what}", self.kind))
        } else {
            Some(value.to_string())
        }
    }

    pub(super) fn path_value(&mut self, value: &str, template: bool) -> Option<String> {
        if template && value.is_empty() {
            return self.fail("the path pattern is empty".into());
        }
        if !value.is_empty() && !value.starts_with('/') {
            return self.fail(format!("path `{value}` must start with `/`"));
        }
        if template && !braces_balanced(value) {
            return self.fail(format!("path pattern `{value}` has unbalanced braces"));
        }
        Some(value.to_string())
    }

    pub(super) fn bool(&mut self, value: &str) -> Option<bool> {
        if value.eq_ignore_ascii_case("true") {
            Some(true)
        } else if value.eq_ignore_ascii_case("false") {
            Some(false)
        } else {
            self.fail(format!(
                "`{}` must be `true` or `false`, not `{value}`",
                self.kind
            ))
        }
    }

    pub(super) fn method(&mut self, value: &str) -> Option<Method> {
        let upper = value.to_ascii_uppercase();
        let canonical = match upper.as_str() {
            "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE"
            | "PATCH" => upper.as_str(),
            _ => value,
        };
        match Method::from_bytes(canonical.as_bytes()) {
            Ok(m) if !value.is_empty() => Some(m),
            _ => self.fail(format!("`{value}` is not a valid HTTP method")),
        }
    }

    pub(super) fn header_name(&mut self, value: &str) -> Option<HeaderName> {
        match HeaderName::from_bytes(value.as_bytes()) {
            Ok(name) => Some(name),
            Err(_) => self.fail(format!("`{value}` is not a valid header name")),
        }
    }

    pub(super) fn header_value(&mut self, value: &str) -> Option<HeaderValue> {
        match HeaderValue::from_str(value) {
            Ok(v) => Some(v),
            Err(_) => self.fail(format!("`{value}` is not a valid header value")),
        }
    }

    /// A `;`-separated list of header names; empty items are skipped.
    pub(super) fn header_list(&mut self, value: &str) -> Option<Vec<HeaderName>> {
        let names: Vec<Option<HeaderName>> = value
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| self.header_name(s))
            .collect();
        names.into_iter().collect()
    }

    /// Exactly one of `Set` and `Append`.
    pub(super) fn action(&mut self) -> Option<(ValueAction, &'a str)> {
        match (self.take("Set"), self.take("Append")) {
            (Some(v), None) => Some((ValueAction::Set, v)),
            (None, Some(v)) => Some((ValueAction::Append, v)),
            (Some(_), Some(_)) => self.fail(format!(
                "`{}` takes one of `Set` and `Append`, not both",
                self.kind
            )),
            (None, None) => self.fail(format!("`{}` needs `Set` or `Append`", self.kind)),
        }
    }

    pub(super) fn when(&mut self) -> Option<ResponseCondition> {
        self.named("When").map(Option::unwrap_or_default)
    }

    /// The optional companion `key` parsed as a name; `Some(None)` when absent.
    pub(super) fn named<T: std::str::FromStr<Err = String>>(
        &mut self,
        key: &str,
    ) -> Option<Option<T>> {
        match self.take(key).map(str::parse::<T>) {
            None => Some(None),
            Some(Ok(v)) => Some(Some(v)),
            Some(Err(message)) => self.fail(format!("{key}: {message}")),
        }
    }

    pub(super) fn x_forwarded(&mut self, value: &str) -> Option<XForwardedTransform> {
        let default = match value.parse::<ForwardedAction>() {
            Ok(action) => Some(action),
            Err(message) => self.fail(message),
        };
        let actions = ["For", "Proto", "Host", "Prefix"].map(|key| {
            let given = self.named::<ForwardedAction>(key)?;
            given.or(default)
        });
        let header_prefix = self.take("HeaderPrefix").unwrap_or("X-Forwarded-");
        if HeaderName::from_bytes(format!("{header_prefix}For").as_bytes()).is_err() {
            return self.fail(format!(
                "HeaderPrefix `{header_prefix}` does not make valid header names"
            ));
        }
        let [for_action, proto_action, host_action, prefix_action] = actions;
        Some(XForwardedTransform {
            for_action: for_action?,
            proto_action: proto_action?,
            host_action: host_action?,
            prefix_action: prefix_action?,
            header_prefix: header_prefix.to_string(),
        })
    }

    pub(super) fn forwarded(&mut self, value: &str) -> Option<ForwardedTransform> {
        let mut t = ForwardedTransform {
            include_for: false,
            include_by: false,
            include_proto: false,
            include_host: false,
            for_format: NodeFormat::default(),
            by_format: NodeFormat::default(),
            action: ForwardedAction::default(),
        };
        let mut ok = true;
        for token in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let flag = match token.to_ascii_lowercase().as_str() {
                "for" => &mut t.include_for,
                "by" => &mut t.include_by,
                "proto" => &mut t.include_proto,
                "host" => &mut t.include_host,
                _ => {
                    ok = false;
                    self.fail::<()>(format!(
                        "unknown `Forwarded` element `{token}`; expected for, by, proto or host"
                    ));
                    continue;
                }
            };
            *flag = true;
        }
        let for_format = self.named::<NodeFormat>("ForFormat");
        let by_format = self.named::<NodeFormat>("ByFormat");
        let action = self.named::<ForwardedAction>("Action");
        t.for_format = for_format?.unwrap_or_default();
        t.by_format = by_format?.unwrap_or_default();
        t.action = action?.unwrap_or_default();
        ok.then_some(t)
    }
}

/// Whether `{` and `}` alternate properly (no nesting, none left open).
pub(super) fn braces_balanced(s: &str) -> bool {
    let mut open = false;
    for c in s.chars() {
        match c {
            '{' if open => return false,
            '{' => open = true,
            '}' if !open => return false,
            '}' => open = false,
            _ => {}
        }
    }
    !open
}
