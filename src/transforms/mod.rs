//! Route transforms, applied: the parsed [`Transform`]s of a route compiled once at
//! configuration load into a [`RouteTransforms`] that the forwarder applies to every
//! request and response of that route without parsing anything per request.
//!
//! Names and semantics are YARP's (see the transforms reference in docs/GUIDE.md); where
//! fuseway differs it says so here:
//!
//! - Request path and query are rewritten on the path as the client sent it
//!   (normalised: dot segments and repeated slashes removed), still percent-encoded.
//!   Path values in the configuration are written as they appear in a URL; characters
//!   a path cannot hold (space, `"`, `#`, `<`, `>`, `?`, `` ` ``, `{`, `}`, controls)
//!   are percent-encoded. Query names and values are plain text and are encoded.
//! - `PathRemovePrefix` matches whole segments, ASCII case-insensitively (`/api`
//!   removes `/api` from `/api` and `/API/x`, not from `/apix`); a trailing `/` in the
//!   configured prefix is ignored. The part removed is what `X-Forwarded` sends as
//!   `X-Forwarded-Prefix` (fuseway's counterpart of ASP.NET's `PathBase`).
//! - `PathPattern` fills `{name}`, `{*name}` and `{**name}` from the route values
//!   (the matched route's `Match.Path` parameters, as the client sent them); a
//!   segment whose parameters have no value is left out. `{*name}` encodes `/` as
//!   `%2F`, `{**name}` keeps slashes.
//! - A `Set` with an empty value removes the header. `Append` on `RequestHeader` /
//!   `ResponseHeader` / `ResponseTrailer` adds one more field line; `Append` on the
//!   `X-Forwarded-*` and `Forwarded` headers extends the existing value into one
//!   comma-separated line, as proxies conventionally do.
//! - Response header transforms also run on the error responses the forwarder
//!   produces (502, 504 ...), as in YARP; not on the answers of earlier stages (404,
//!   429, 503 before a destination was chosen).
//! - `ClientCert` sets the named header to the client's certificate (DER, base64), as
//!   YARP: on TLS listeners that ask for one (`ClientCertificateMode`); the client's own
//!   field of that name is removed in any case.
//!
//! Without any `X-Forwarded` or `Forwarded` transform a route gets YARP's defaults:
//! `X-Forwarded-For`, `-Proto` and `-Host` set (incoming values replaced),
//! `X-Forwarded-Prefix` and `Forwarded` removed.

mod request;
mod response;

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method};
use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC};

use crate::config::{
    parse_transforms, ConfigErrors, ForwardedAction, NodeFormat, ResponseCondition, RouteConfig,
    Transform, ValueAction,
};
use crate::routing::RouteValuesCapture;

pub(crate) use request::host_value;
pub use request::{ClientRequest, RewrittenUri};
pub use response::TrailerTransforms;

/// Bytes encoded in path values from the configuration.
const PATH: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// Bytes encoded in query names and values (everything but RFC 3986 unreserved).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The transforms of one route, compiled. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct RouteTransforms {
    method: Box<[(Method, Method)]>,
    uri: Box<[UriOp]>,
    /// `None`: copy every request header; `Some(list)`: only these (empty: none).
    request_allowed: Option<Box<[HeaderName]>>,
    headers: Box<[HeaderOp]>,
    original_host: bool,
    /// A header transform may write `Host` (see [`may_set_host`](Self::may_set_host)).
    sets_host: bool,
    capture: Option<RouteValuesCapture>,
    response_allowed: Option<Box<[HeaderName]>>,
    response: Box<[ResponseOp]>,
    trailers_allowed: Option<Box<[HeaderName]>>,
    trailers: Box<[ResponseOp]>,
}

#[derive(Debug, Clone)]
enum UriOp {
    PathPrefix(String),
    PathRemovePrefix(String),
    PathSet(String),
    PathPattern(Vec<PatternSegment>),
    /// `name` decoded (compared case-insensitively); `encoded` is `name=` encoded.
    Query {
        name: String,
        encoded: String,
        action: ValueAction,
        value: QueryValue,
    },
    QueryRemove(String),
}

#[derive(Debug, Clone)]
enum QueryValue {
    /// Already encoded.
    Fixed(String),
    /// The name of a route value.
    Route(String),
}

#[derive(Debug, Clone)]
struct PatternSegment {
    parts: Vec<PatternPart>,
}

#[derive(Debug, Clone)]
enum PatternPart {
    Literal(String),
    Param { name: String, encode_slash: bool },
}

/// Which `X-Forwarded-*` header an op writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XForwardedKind {
    For,
    Proto,
    Host,
    Prefix,
}

#[derive(Debug, Clone)]
enum HeaderOp {
    Set(HeaderName, HeaderValue),
    Append(HeaderName, HeaderValue),
    Remove(HeaderName),
    /// YARP's `ClientCert`: the client's certificate in base64, or no such field.
    ClientCert(HeaderName),
    RouteValue {
        name: HeaderName,
        action: ValueAction,
        route_value: String,
    },
    XForwarded {
        kind: XForwardedKind,
        name: HeaderName,
        action: ForwardedAction,
        /// No later operation names this header (and it is not `Host`): when the
        /// request has none, the forwarder may add it beside the map (see
        /// [`Added`](crate::forwarding::headers::Added)).
        last: bool,
    },
    Forwarded(ForwardedOp),
}

impl HeaderOp {
    /// The header the operation sets, adds or removes.
    fn name(&self) -> &HeaderName {
        match self {
            HeaderOp::Set(name, _)
            | HeaderOp::Append(name, _)
            | HeaderOp::Remove(name)
            | HeaderOp::ClientCert(name)
            | HeaderOp::RouteValue { name, .. }
            | HeaderOp::XForwarded { name, .. } => name,
            HeaderOp::Forwarded(_) => &http::header::FORWARDED,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct ForwardedOp {
    proto: bool,
    host: bool,
    for_format: Option<NodeFormat>,
    by_format: Option<NodeFormat>,
    action: ForwardedAction,
}

#[derive(Debug, Clone)]
enum ResponseOp {
    Set(HeaderName, HeaderValue, ResponseCondition),
    Append(HeaderName, HeaderValue, ResponseCondition),
    Remove(HeaderName, ResponseCondition),
}

impl Default for RouteTransforms {
    /// No transforms: YARP's defaults only.
    fn default() -> Self {
        RouteTransforms::compile(&[], None).expect("the defaults compile")
    }
}

impl RouteTransforms {
    /// Compile a route's `Transforms` (errors name `{path}.Transforms[i]`).
    pub fn from_config(route: &RouteConfig, path: &str) -> Result<Self, ConfigErrors> {
        let base = format!("{path}.Transforms");
        let parsed = parse_transforms(&route.transforms, &base)?;
        RouteTransforms::compile(&parsed, route.match_.path.as_deref()).map_err(|(i, message)| {
            let mut errors = ConfigErrors::default();
            errors.push(format!("{base}[{i}]"), message);
            errors
        })
    }

    /// Compile parsed transforms for a route whose `Match.Path` is `route_path`. An
    /// error names the index of the offending transform.
    pub fn compile(
        transforms: &[Transform],
        route_path: Option<&str>,
    ) -> Result<Self, (usize, String)> {
        let mut t = RouteTransforms {
            method: Box::new([]),
            uri: Box::new([]),
            request_allowed: None,
            headers: Box::new([]),
            original_host: false,
            sets_host: false,
            capture: None,
            response_allowed: None,
            response: Box::new([]),
            trailers_allowed: None,
            trailers: Box::new([]),
        };
        let (mut method, mut uri, mut headers) = (Vec::new(), Vec::new(), Vec::new());
        let (mut response, mut trailers) = (Vec::new(), Vec::new());
        let mut copy_request = true;
        let mut copy_response = true;
        let mut copy_trailers = true;
        let mut default_forwarders = true;
        let mut route_values = false;
        for (i, transform) in transforms.iter().enumerate() {
            match transform {
                Transform::PathPrefix(p) => uri.push(UriOp::PathPrefix(encode_path(p))),
                Transform::PathRemovePrefix(p) => {
                    let p = encode_path(p.trim_end_matches('/'));
                    if !p.is_empty() {
                        uri.push(UriOp::PathRemovePrefix(p));
                    }
                }
                Transform::PathSet(p) => uri.push(UriOp::PathSet(encode_path(p))),
                Transform::PathPattern(p) => {
                    route_values = true;
                    uri.push(UriOp::PathPattern(parse_pattern(p).map_err(|e| (i, e))?));
                }
                Transform::QueryValueParameter {
                    name,
                    action,
                    value,
                } => uri.push(query_op(name, *action, QueryValue::Fixed(encode(value)))),
                Transform::QueryRouteParameter {
                    name,
                    action,
                    route_value,
                } => {
                    route_values = true;
                    uri.push(query_op(
                        name,
                        *action,
                        QueryValue::Route(route_value.clone()),
                    ));
                }
                Transform::QueryRemoveParameter(name) => uri.push(UriOp::QueryRemove(name.clone())),
                Transform::HttpMethodChange { from, to } => method.push((from.clone(), to.clone())),
                Transform::RequestHeadersCopy(copy) => copy_request = *copy,
                Transform::RequestHeaderOriginalHost(original) => t.original_host = *original,
                Transform::RequestHeader {
                    name,
                    action,
                    value,
                } => headers.push(match action {
                    _ if value.is_empty() && *action == ValueAction::Set => {
                        HeaderOp::Remove(name.clone())
                    }
                    ValueAction::Set => HeaderOp::Set(name.clone(), value.clone()),
                    ValueAction::Append => HeaderOp::Append(name.clone(), value.clone()),
                }),
                Transform::RequestHeaderRouteValue {
                    name,
                    action,
                    route_value,
                } => {
                    route_values = true;
                    headers.push(HeaderOp::RouteValue {
                        name: name.clone(),
                        action: *action,
                        route_value: route_value.clone(),
                    });
                }
                Transform::RequestHeaderRemove(name) => {
                    headers.push(HeaderOp::Remove(name.clone()))
                }
                Transform::RequestHeadersAllowed(names) => {
                    t.request_allowed = Some(names.clone().into_boxed_slice());
                }
                Transform::XForwarded(x) => {
                    default_forwarders = false;
                    let kinds = [
                        (XForwardedKind::For, "For", x.for_action),
                        (XForwardedKind::Prefix, "Prefix", x.prefix_action),
                        (XForwardedKind::Host, "Host", x.host_action),
                        (XForwardedKind::Proto, "Proto", x.proto_action),
                    ];
                    for (kind, suffix, action) in kinds {
                        if action == ForwardedAction::Off {
                            continue;
                        }
                        let name = HeaderName::try_from(format!("{}{suffix}", x.header_prefix))
                            .map_err(|e| (i, e.to_string()))?;
                        headers.push(HeaderOp::XForwarded {
                            kind,
                            name,
                            action,
                            last: false,
                        });
                    }
                    if kinds.iter().any(|(_, _, a)| *a != ForwardedAction::Off) {
                        headers.push(HeaderOp::Remove(http::header::FORWARDED));
                    }
                }
                Transform::Forwarded(f) => {
                    default_forwarders = false;
                    let any = f.include_for || f.include_by || f.include_host || f.include_proto;
                    if f.action != ForwardedAction::Off && any {
                        headers.push(HeaderOp::Forwarded(ForwardedOp {
                            proto: f.include_proto,
                            host: f.include_host,
                            for_format: f.include_for.then_some(f.for_format),
                            by_format: f.include_by.then_some(f.by_format),
                            action: f.action,
                        }));
                        for suffix in ["For", "Prefix", "Host", "Proto"] {
                            let name = HeaderName::try_from(format!("x-forwarded-{suffix}"))
                                .expect("valid header name");
                            headers.push(HeaderOp::Remove(name));
                        }
                    }
                }
                Transform::ClientCert(name) => headers.push(HeaderOp::ClientCert(name.clone())),
                Transform::ResponseHeader {
                    name,
                    action,
                    value,
                    when,
                } => response.push(response_op(name, *action, value, *when)),
                Transform::ResponseHeaderRemove { name, when } => {
                    response.push(ResponseOp::Remove(name.clone(), *when));
                }
                Transform::ResponseHeadersAllowed(names) => {
                    t.response_allowed = Some(names.clone().into_boxed_slice());
                }
                Transform::ResponseHeadersCopy(copy) => copy_response = *copy,
                Transform::ResponseTrailer {
                    name,
                    action,
                    value,
                    when,
                } => trailers.push(response_op(name, *action, value, *when)),
                Transform::ResponseTrailerRemove { name, when } => {
                    trailers.push(ResponseOp::Remove(name.clone(), *when));
                }
                Transform::ResponseTrailersAllowed(names) => {
                    t.trailers_allowed = Some(names.clone().into_boxed_slice());
                }
                Transform::ResponseTrailersCopy(copy) => copy_trailers = *copy,
            }
        }
        if default_forwarders {
            for (kind, name) in [
                (XForwardedKind::For, "x-forwarded-for"),
                (XForwardedKind::Proto, "x-forwarded-proto"),
                (XForwardedKind::Host, "x-forwarded-host"),
            ] {
                headers.push(HeaderOp::XForwarded {
                    kind,
                    name: HeaderName::from_static(name),
                    action: ForwardedAction::Set,
                    last: false,
                });
            }
            headers.push(HeaderOp::Remove(HeaderName::from_static(
                "x-forwarded-prefix",
            )));
            headers.push(HeaderOp::Remove(http::header::FORWARDED));
        }
        if !copy_request && t.request_allowed.is_none() {
            t.request_allowed = Some(Box::new([]));
        }
        if !copy_response && t.response_allowed.is_none() {
            t.response_allowed = Some(Box::new([]));
        }
        if !copy_trailers && t.trailers_allowed.is_none() {
            t.trailers_allowed = Some(Box::new([]));
        }
        if route_values {
            // An invalid Match.Path is reported by routing; then no values are captured.
            t.capture = RouteValuesCapture::new(route_path).ok();
        }
        t.method = method.into_boxed_slice();
        t.uri = uri.into_boxed_slice();
        t.sets_host = headers.iter().any(|op| match op {
            HeaderOp::Remove(_) | HeaderOp::Forwarded(_) => false,
            op => op.name() == http::header::HOST,
        });
        for i in 0..headers.len() {
            let later = |name: &HeaderName| headers[i + 1..].iter().any(|op| op.name() == name);
            let is_last = match &headers[i] {
                HeaderOp::XForwarded { name, .. } => name != http::header::HOST && !later(name),
                _ => false,
            };
            if let HeaderOp::XForwarded { last, .. } = &mut headers[i] {
                *last = is_last;
            }
        }
        t.headers = headers.into_boxed_slice();
        t.response = response.into_boxed_slice();
        t.trailers = trailers.into_boxed_slice();
        Ok(t)
    }

    /// Whether the path or query of requests change (else the client's
    /// path-and-query is forwarded as it came).
    pub fn rewrites_uri(&self) -> bool {
        !self.uri.is_empty()
    }

    /// Whether the incoming `Host` header is kept (`RequestHeaderOriginalHost`).
    pub fn uses_original_host(&self) -> bool {
        self.original_host
    }

    /// Whether a request header transform may write `Host` (set, append, a route
    /// value, or an `X-Forwarded-*` header whose prefixed name is `Host`). When none
    /// does, the forwarder sets `Host` without first taking the client's out.
    pub fn may_set_host(&self) -> bool {
        self.sets_host
    }

    /// Whether there are response trailer transforms (or trailer filters).
    pub fn has_trailer_transforms(&self) -> bool {
        !self.trailers.is_empty() || self.trailers_allowed.is_some()
    }
}

/// Shared with the forwarder: the compiled transforms of a route.
pub type SharedTransforms = Arc<RouteTransforms>;

fn query_op(name: &str, action: ValueAction, value: QueryValue) -> UriOp {
    UriOp::Query {
        name: name.to_owned(),
        encoded: format!("{}=", encode(name)),
        action,
        value,
    }
}

fn response_op(
    name: &HeaderName,
    action: ValueAction,
    value: &HeaderValue,
    when: ResponseCondition,
) -> ResponseOp {
    match action {
        ValueAction::Set if value.is_empty() => ResponseOp::Remove(name.clone(), when),
        ValueAction::Set => ResponseOp::Set(name.clone(), value.clone(), when),
        ValueAction::Append => ResponseOp::Append(name.clone(), value.clone(), when),
    }
}

fn encode_path(p: &str) -> String {
    percent_encoding::utf8_percent_encode(p, PATH).to_string()
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, COMPONENT).to_string()
}

/// Parse a `PathPattern`: segments of literal text and `{name}` / `{*name}` /
/// `{**name}` parameters (constraints, `?` and defaults after the name are ignored).
fn parse_pattern(pattern: &str) -> Result<Vec<PatternSegment>, String> {
    let mut segments = Vec::new();
    for raw in pattern.split('/').skip(1) {
        let mut parts = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            match rest.find('{') {
                Some(0) => {
                    let end = rest
                        .find('}')
                        .ok_or_else(|| format!("path pattern `{pattern}` has unbalanced braces"))?;
                    let inner = &rest[1..end];
                    let (inner, stars) = if let Some(n) = inner.strip_prefix("**") {
                        (n, 2)
                    } else if let Some(n) = inner.strip_prefix('*') {
                        (n, 1)
                    } else {
                        (inner, 0)
                    };
                    let name = inner
                        .split([':', '=', '?'])
                        .next()
                        .unwrap_or_default()
                        .trim();
                    if name.is_empty() {
                        return Err(format!(
                            "path pattern `{pattern}` has a parameter without a name"
                        ));
                    }
                    parts.push(PatternPart::Param {
                        name: name.to_owned(),
                        encode_slash: stars == 1,
                    });
                    rest = &rest[end + 1..];
                }
                found => {
                    let end = found.unwrap_or(rest.len());
                    parts.push(PatternPart::Literal(encode_path(&rest[..end])));
                    rest = &rest[end..];
                }
            }
        }
        segments.push(PatternSegment { parts });
    }
    Ok(segments)
}

/// Compiled for every route when a state is built (the forwarder's
/// [`RouteData`](crate::state::RouteData)): a route without `Transforms` gets the
/// defaults (`X-Forwarded-*`).
impl crate::state::RouteData for Arc<RouteTransforms> {
    fn compile(
        source: &crate::state::RouteSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, ConfigErrors> {
        Ok(Some(Arc::new(RouteTransforms::from_config(
            source.config,
            source.path,
        )?)))
    }
}

impl crate::state::Route {
    /// Its transforms, compiled at configuration load.
    pub fn transforms(&self) -> &Arc<RouteTransforms> {
        static NONE_COMPILED: std::sync::LazyLock<Arc<RouteTransforms>> =
            std::sync::LazyLock::new(Default::default);
        self.data::<Arc<RouteTransforms>>()
            .unwrap_or_else(|| &NONE_COMPILED)
    }
}

#[cfg(test)]
mod tests;
