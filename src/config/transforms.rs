//! Route transforms: YARP's list of string dictionaries, parsed into typed [`Transform`]s.
//!
//! Each dictionary has one key naming the transform (`PathPrefix`, `RequestHeader`, ...)
//! and possibly companion keys (`Set`, `Append`, `When`, ...). Keys are matched
//! case-insensitively, as in YARP. This module only parses and validates; applying
//! transforms to requests and responses is the job of the proxy stages.
//!
//! ```
//! use std::collections::BTreeMap;
//! use fuseway::config::{parse_transforms, Transform, ValueAction};
//!
//! let list = vec![
//!     BTreeMap::from([("PathRemovePrefix".to_string(), "/api".to_string())]),
//!     BTreeMap::from([
//!         ("RequestHeader".to_string(), "X-Tenant".to_string()),
//!         ("Set".to_string(), "blue".to_string()),
//!     ]),
//! ];
//! let parsed = parse_transforms(&list, "Routes.r1.Transforms").unwrap();
//! assert_eq!(parsed[0], Transform::PathRemovePrefix("/api".into()));
//! assert!(matches!(parsed[1], Transform::RequestHeader { action: ValueAction::Set, .. }));
//! ```

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue, Method};

use super::names::named_enum;
use super::ConfigErrors;

/// Whether a transform replaces a value or adds one beside the existing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueAction {
    /// Replace (`Set`).
    Set,
    /// Add (`Append`).
    Append,
}

named_enum! {
    /// What a forwarding transform does with its header (`X-Forwarded`, `Forwarded`).
    #[derive(Default)]
    pub enum ForwardedAction("forwarded header action") {
        /// Replace any incoming value (the default).
        #[default]
        Set = "Set",
        /// Add to the incoming value.
        Append = "Append",
        /// Remove the header.
        Remove = "Remove",
        /// Leave the header as it came.
        Off = "Off",
    }
}

named_enum! {
    /// For which responses a response transform runs (`When`).
    #[derive(Default)]
    pub enum ResponseCondition("response condition") {
        /// Responses with a status below 400 (the default).
        #[default]
        Success = "Success",
        /// Every response.
        Always = "Always",
        /// Responses with a status of 400 or more.
        Failure = "Failure",
    }
}

named_enum! {
    /// How the `for=`/`by=` node of a `Forwarded` header is written.
    #[derive(Default)]
    pub enum NodeFormat("node format") {
        /// An obfuscated random identifier (the default).
        #[default]
        Random = "Random",
        /// An obfuscated identifier and the real port.
        RandomAndPort = "RandomAndPort",
        /// An obfuscated identifier and an obfuscated port.
        RandomAndRandomPort = "RandomAndRandomPort",
        /// `unknown`.
        Unknown = "Unknown",
        /// `unknown` and the real port.
        UnknownAndPort = "UnknownAndPort",
        /// `unknown` and an obfuscated port.
        UnknownAndRandomPort = "UnknownAndRandomPort",
        /// The IP address.
        Ip = "Ip",
        /// The IP address and port.
        IpAndPort = "IpAndPort",
        /// The IP address and an obfuscated port.
        IpAndRandomPort = "IpAndRandomPort",
    }
}

/// The `X-Forwarded` transform: one action per `X-Forwarded-*` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XForwardedTransform {
    /// Action for `X-Forwarded-For` (`For`, else the transform's value).
    pub for_action: ForwardedAction,
    /// Action for `X-Forwarded-Proto` (`Proto`, else the transform's value).
    pub proto_action: ForwardedAction,
    /// Action for `X-Forwarded-Host` (`Host`, else the transform's value).
    pub host_action: ForwardedAction,
    /// Action for `X-Forwarded-Prefix` (`Prefix`, else the transform's value).
    pub prefix_action: ForwardedAction,
    /// Prefix of the header names (`HeaderPrefix`, default `X-Forwarded-`).
    pub header_prefix: String,
}

/// The `Forwarded` (RFC 7239) transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedTransform {
    /// Write `for=`.
    pub include_for: bool,
    /// Write `by=`.
    pub include_by: bool,
    /// Write `proto=`.
    pub include_proto: bool,
    /// Write `host=`.
    pub include_host: bool,
    /// Format of `for=` (`ForFormat`).
    pub for_format: NodeFormat,
    /// Format of `by=` (`ByFormat`).
    pub by_format: NodeFormat,
    /// What to do with an incoming `Forwarded` header (`Action`).
    pub action: ForwardedAction,
}

/// One route transform, parsed from YARP's dictionary form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transform {
    /// `PathPrefix`: put this before the request path.
    PathPrefix(String),
    /// `PathRemovePrefix`: remove this from the start of the request path.
    PathRemovePrefix(String),
    /// `PathSet`: replace the request path.
    PathSet(String),
    /// `PathPattern`: replace the request path by this template filled with route values.
    PathPattern(String),
    /// `QueryValueParameter` + `Set`/`Append`: a query parameter with a fixed value.
    QueryValueParameter {
        /// Parameter name.
        name: String,
        /// Replace or add.
        action: ValueAction,
        /// The value.
        value: String,
    },
    /// `QueryRouteParameter` + `Set`/`Append`: a query parameter from a route value.
    QueryRouteParameter {
        /// Parameter name.
        name: String,
        /// Replace or add.
        action: ValueAction,
        /// Name of the route value.
        route_value: String,
    },
    /// `QueryRemoveParameter`: remove a query parameter.
    QueryRemoveParameter(String),
    /// `HttpMethodChange` + `Set`: change one method into another.
    HttpMethodChange {
        /// The method to change.
        from: Method,
        /// The method it becomes.
        to: Method,
    },
    /// `RequestHeadersCopy`: copy the incoming request headers (default true).
    RequestHeadersCopy(bool),
    /// `RequestHeaderOriginalHost`: keep the incoming `Host` header (default false).
    RequestHeaderOriginalHost(bool),
    /// `RequestHeader` + `Set`/`Append`: a request header with a fixed value.
    RequestHeader {
        /// Header name.
        name: HeaderName,
        /// Replace or add.
        action: ValueAction,
        /// The value.
        value: HeaderValue,
    },
    /// `RequestHeaderRouteValue` + `Set`/`Append`: a request header from a route value.
    RequestHeaderRouteValue {
        /// Header name.
        name: HeaderName,
        /// Replace or add.
        action: ValueAction,
        /// Name of the route value.
        route_value: String,
    },
    /// `RequestHeaderRemove`: remove a request header.
    RequestHeaderRemove(HeaderName),
    /// `RequestHeadersAllowed`: copy only these request headers (`;`-separated).
    RequestHeadersAllowed(Vec<HeaderName>),
    /// `X-Forwarded`: the `X-Forwarded-*` headers.
    XForwarded(XForwardedTransform),
    /// `Forwarded`: the RFC 7239 `Forwarded` header.
    Forwarded(ForwardedTransform),
    /// `ClientCert`: send the client certificate in this header.
    ClientCert(HeaderName),
    /// `ResponseHeader` + `Set`/`Append` (+ `When`): a response header with a fixed value.
    ResponseHeader {
        /// Header name.
        name: HeaderName,
        /// Replace or add.
        action: ValueAction,
        /// The value.
        value: HeaderValue,
        /// For which responses.
        when: ResponseCondition,
    },
    /// `ResponseHeaderRemove` (+ `When`): remove a response header.
    ResponseHeaderRemove {
        /// Header name.
        name: HeaderName,
        /// For which responses.
        when: ResponseCondition,
    },
    /// `ResponseHeadersAllowed`: copy only these response headers (`;`-separated).
    ResponseHeadersAllowed(Vec<HeaderName>),
    /// `ResponseHeadersCopy`: copy the destination's response headers (default true).
    ResponseHeadersCopy(bool),
    /// `ResponseTrailer` + `Set`/`Append` (+ `When`): a response trailer with a fixed value.
    ResponseTrailer {
        /// Trailer name.
        name: HeaderName,
        /// Replace or add.
        action: ValueAction,
        /// The value.
        value: HeaderValue,
        /// For which responses.
        when: ResponseCondition,
    },
    /// `ResponseTrailerRemove` (+ `When`): remove a response trailer.
    ResponseTrailerRemove {
        /// Trailer name.
        name: HeaderName,
        /// For which responses.
        when: ResponseCondition,
    },
    /// `ResponseTrailersAllowed`: copy only these response trailers (`;`-separated).
    ResponseTrailersAllowed(Vec<HeaderName>),
    /// `ResponseTrailersCopy`: copy the destination's response trailers (default true).
    ResponseTrailersCopy(bool),
}

/// The keys that name a transform.
const KINDS: &[&str] = &[
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

fn parse_one(
    map: &BTreeMap<String, String>,
    path: &str,
    errors: &mut ConfigErrors,
) -> Option<Transform> {
    if map.is_empty() {
        errors.push(
            path,
            "empty transform; expected one of ".to_string() + &KINDS.join(", "),
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
        .filter_map(|k| Some((*k, *KINDS.iter().find(|kind| k.eq_ignore_ascii_case(kind))?)))
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
                    KINDS.join(", ")
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
fn build(e: &mut Entry<'_>, kind: &'static str, value: &str) -> Option<Transform> {
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
fn companions(kind: &str) -> &'static [&'static str] {
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
struct Entry<'a> {
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
    fn take(&mut self, key: &str) -> Option<&'a str> {
        let (_, v) = self.map.iter().find(|(k, _)| k.eq_ignore_ascii_case(key))?;
        Some(v)
    }

    fn fail<T>(&mut self, message: String) -> Option<T> {
        self.failed = true;
        self.errors.push(self.path, message);
        None
    }

    /// Report every key this transform does not accept.
    fn finish(&mut self) {
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

    fn non_empty(&mut self, value: &str, what: &str) -> Option<String> {
        if value.is_empty() {
            self.fail(format!("`{}` needs a {what}", self.kind))
        } else {
            Some(value.to_string())
        }
    }

    fn path_value(&mut self, value: &str, template: bool) -> Option<String> {
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

    fn bool(&mut self, value: &str) -> Option<bool> {
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

    fn method(&mut self, value: &str) -> Option<Method> {
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

    fn header_name(&mut self, value: &str) -> Option<HeaderName> {
        match HeaderName::from_bytes(value.as_bytes()) {
            Ok(name) => Some(name),
            Err(_) => self.fail(format!("`{value}` is not a valid header name")),
        }
    }

    fn header_value(&mut self, value: &str) -> Option<HeaderValue> {
        match HeaderValue::from_str(value) {
            Ok(v) => Some(v),
            Err(_) => self.fail(format!("`{value}` is not a valid header value")),
        }
    }

    /// A `;`-separated list of header names; empty items are skipped.
    fn header_list(&mut self, value: &str) -> Option<Vec<HeaderName>> {
        let names: Vec<Option<HeaderName>> = value
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| self.header_name(s))
            .collect();
        names.into_iter().collect()
    }

    /// Exactly one of `Set` and `Append`.
    fn action(&mut self) -> Option<(ValueAction, &'a str)> {
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

    fn when(&mut self) -> Option<ResponseCondition> {
        self.named("When").map(Option::unwrap_or_default)
    }

    /// The optional companion `key` parsed as a name; `Some(None)` when absent.
    fn named<T: std::str::FromStr<Err = String>>(&mut self, key: &str) -> Option<Option<T>> {
        match self.take(key).map(str::parse::<T>) {
            None => Some(None),
            Some(Ok(v)) => Some(Some(v)),
            Some(Err(message)) => self.fail(format!("{key}: {message}")),
        }
    }

    fn x_forwarded(&mut self, value: &str) -> Option<XForwardedTransform> {
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

    fn forwarded(&mut self, value: &str) -> Option<ForwardedTransform> {
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
fn braces_balanced(s: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn one(pairs: &[(&str, &str)]) -> Result<Transform, Vec<String>> {
        parse_transforms(&[entry(pairs)], "T")
            .map(|mut v| v.remove(0))
            .map_err(|e| e.iter().map(|e| format!("{e}")).collect())
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        one(pairs).unwrap_err().join("\n")
    }

    #[test]
    fn path_transforms() {
        assert_eq!(
            one(&[("PathPrefix", "/api")]),
            Ok(Transform::PathPrefix("/api".into()))
        );
        assert_eq!(
            one(&[("pathremoveprefix", "/v1")]),
            Ok(Transform::PathRemovePrefix("/v1".into()))
        );
        assert_eq!(one(&[("PathSet", "")]), Ok(Transform::PathSet("".into())));
        assert_eq!(
            one(&[("PathPattern", "/my/{plugin}/{**rest}")]),
            Ok(Transform::PathPattern("/my/{plugin}/{**rest}".into()))
        );
        assert!(err(&[("PathPrefix", "api")]).contains("must start with `/`"));
        assert!(err(&[("PathPattern", "/a/{b")]).contains("unbalanced"));
        assert!(err(&[("PathPattern", "")]).contains("empty"));
    }

    #[test]
    fn query_and_method_transforms() {
        assert_eq!(
            one(&[("QueryValueParameter", "foo"), ("Append", "bar")]),
            Ok(Transform::QueryValueParameter {
                name: "foo".into(),
                action: ValueAction::Append,
                value: "bar".into()
            })
        );
        assert_eq!(
            one(&[("QueryRouteParameter", "foo"), ("set", "id")]),
            Ok(Transform::QueryRouteParameter {
                name: "foo".into(),
                action: ValueAction::Set,
                route_value: "id".into()
            })
        );
        assert_eq!(
            one(&[("QueryRemoveParameter", "foo")]),
            Ok(Transform::QueryRemoveParameter("foo".into()))
        );
        assert!(err(&[("QueryValueParameter", "foo")]).contains("needs `Set` or `Append`"));
        assert!(err(&[
            ("QueryValueParameter", "foo"),
            ("Set", "a"),
            ("Append", "b")
        ])
        .contains("not both"));
        assert_eq!(
            one(&[("HttpMethodChange", "put"), ("Set", "POST")]),
            Ok(Transform::HttpMethodChange {
                from: Method::PUT,
                to: Method::POST
            })
        );
        assert!(err(&[("HttpMethodChange", "PUT")]).contains("missing `Set`"));
        assert!(err(&[("HttpMethodChange", "P T"), ("Set", "GET")]).contains("HTTP method"));
    }

    #[test]
    fn request_header_transforms() {
        assert_eq!(
            one(&[("RequestHeadersCopy", "False")]),
            Ok(Transform::RequestHeadersCopy(false))
        );
        assert_eq!(
            one(&[("RequestHeaderOriginalHost", "true")]),
            Ok(Transform::RequestHeaderOriginalHost(true))
        );
        assert!(err(&[("RequestHeadersCopy", "yes")]).contains("`true` or `false`"));
        assert_eq!(
            one(&[("RequestHeader", "X-Foo"), ("Set", "bar")]),
            Ok(Transform::RequestHeader {
                name: HeaderName::from_static("x-foo"),
                action: ValueAction::Set,
                value: HeaderValue::from_static("bar")
            })
        );
        assert!(err(&[("RequestHeader", "X Foo"), ("Set", "bar")]).contains("header name"));
        assert!(err(&[("RequestHeader", "X-Foo"), ("Set", "a\nb")]).contains("header value"));
        assert_eq!(
            one(&[("RequestHeaderRemove", "Cookie")]),
            Ok(Transform::RequestHeaderRemove(http::header::COOKIE))
        );
        assert_eq!(
            one(&[("RequestHeadersAllowed", "Accept; Content-Type;")]),
            Ok(Transform::RequestHeadersAllowed(vec![
                http::header::ACCEPT,
                http::header::CONTENT_TYPE
            ]))
        );
        assert!(err(&[("RequestHeadersAllowed", "Accept;Bad Name")]).contains("`Bad Name`"));
        assert_eq!(
            one(&[("ClientCert", "X-Client-Cert")]),
            Ok(Transform::ClientCert(HeaderName::from_static(
                "x-client-cert"
            )))
        );
    }

    #[test]
    fn x_forwarded() {
        let Ok(Transform::XForwarded(t)) = one(&[
            ("X-Forwarded", "Append"),
            ("Prefix", "Off"),
            ("HeaderPrefix", "X-Original-"),
        ]) else {
            panic!("X-Forwarded should parse")
        };
        assert_eq!(t.for_action, ForwardedAction::Append);
        assert_eq!(t.host_action, ForwardedAction::Append);
        assert_eq!(t.prefix_action, ForwardedAction::Off);
        assert_eq!(t.header_prefix, "X-Original-");
        assert!(err(&[("X-Forwarded", "Sometimes")]).contains("expected one of Set, Append"));
        assert!(err(&[("X-Forwarded", "Set"), ("For", "Maybe")]).contains("For: unknown"));
        assert!(err(&[("X-Forwarded", "Set"), ("HeaderPrefix", "X Y")]).contains("HeaderPrefix"));
    }

    #[test]
    fn forwarded() {
        let Ok(Transform::Forwarded(t)) = one(&[
            ("Forwarded", "for, Proto"),
            ("ForFormat", "IpAndPort"),
            ("Action", "Append"),
        ]) else {
            panic!("Forwarded should parse")
        };
        assert!(t.include_for && t.include_proto && !t.include_by && !t.include_host);
        assert_eq!(t.for_format, NodeFormat::IpAndPort);
        assert_eq!(t.by_format, NodeFormat::Random);
        assert_eq!(t.action, ForwardedAction::Append);
        assert!(err(&[("Forwarded", "for,path")]).contains("`path`"));
        assert!(err(&[("Forwarded", "for"), ("ByFormat", "Mac")]).contains("ByFormat"));
    }

    #[test]
    fn response_transforms() {
        assert_eq!(
            one(&[
                ("ResponseHeader", "X-Served"),
                ("Append", "f"),
                ("When", "always")
            ]),
            Ok(Transform::ResponseHeader {
                name: HeaderName::from_static("x-served"),
                action: ValueAction::Append,
                value: HeaderValue::from_static("f"),
                when: ResponseCondition::Always
            })
        );
        assert_eq!(
            one(&[("ResponseHeaderRemove", "Server")]),
            Ok(Transform::ResponseHeaderRemove {
                name: http::header::SERVER,
                when: ResponseCondition::Success
            })
        );
        assert!(
            err(&[("ResponseHeader", "X"), ("Set", "v"), ("When", "Never")])
                .contains("When: unknown")
        );
        assert!(matches!(
            one(&[("ResponseTrailer", "grpc-status"), ("Set", "0")]),
            Ok(Transform::ResponseTrailer { .. })
        ));
        assert!(matches!(
            one(&[
                ("ResponseTrailerRemove", "grpc-message"),
                ("When", "Failure")
            ]),
            Ok(Transform::ResponseTrailerRemove {
                when: ResponseCondition::Failure,
                ..
            })
        ));
        assert_eq!(
            one(&[("ResponseHeadersCopy", "true")]),
            Ok(Transform::ResponseHeadersCopy(true))
        );
        assert_eq!(
            one(&[("ResponseTrailersCopy", "false")]),
            Ok(Transform::ResponseTrailersCopy(false))
        );
        assert_eq!(
            one(&[("ResponseHeadersAllowed", "")]),
            Ok(Transform::ResponseHeadersAllowed(vec![]))
        );
        assert!(matches!(
            one(&[("ResponseTrailersAllowed", "grpc-status")]),
            Ok(Transform::ResponseTrailersAllowed(v)) if v.len() == 1
        ));
    }

    #[test]
    fn shape_errors() {
        assert!(err(&[]).contains("empty transform"));
        let unknown = err(&[("PathPrefixx", "/a")]);
        assert!(
            unknown.contains("unknown transform `PathPrefixx`"),
            "{unknown}"
        );
        assert!(unknown.contains("PathRemovePrefix"), "{unknown}");
        assert!(err(&[("PathPrefix", "/a"), ("PathSet", "/b")]).contains("conflicting"));
        assert!(err(&[("PathPrefix", "/a"), ("pathprefix", "/b")]).contains("duplicate key"));
        assert!(err(&[("PathPrefix", "/a"), ("Set", "x")])
            .contains("unexpected key `Set`: a `PathPrefix` transform takes no other key"));
        let both = one(&[("RequestHeader", "X-A"), ("Sett", "v")]).unwrap_err();
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(both.iter().any(|e| e.contains("unexpected key `Sett`")));
    }

    #[test]
    fn errors_name_the_entry_and_every_bad_entry_is_reported() {
        let list = vec![
            entry(&[("PathPrefix", "/ok")]),
            entry(&[("Nope", "x")]),
            entry(&[("ResponseHeadersCopy", "maybe")]),
        ];
        let errors = parse_transforms(&list, "Routes.r1.Transforms").unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["Routes.r1.Transforms[1]", "Routes.r1.Transforms[2]"]
        );
    }
}
