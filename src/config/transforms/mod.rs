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

use http::{HeaderName, HeaderValue, Method};

use super::names::named_enum;

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
#[non_exhaustive]
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
#[non_exhaustive]
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

mod parse;
#[cfg(test)]
mod tests;

pub(crate) use parse::collect_transforms;
pub use parse::{parse_transforms, TRANSFORM_KINDS};
