//! Applying request transforms: method, path, query and headers.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};
use http::Method;

use super::{
    encode, ForwardedOp, HeaderOp, PatternPart, PatternSegment, QueryValue, RouteTransforms, UriOp,
    XForwardedKind,
};
use crate::config::{ForwardedAction, NodeFormat, ValueAction};
use crate::forwarding::headers::{may_have, remove_field, Added};
use crate::request::{ClientCertificate, ConnectionInfo};
use crate::routing::RouteValues;

/// What request transforms read from the client's request.
#[derive(Debug, Clone, Copy)]
pub struct ClientRequest<'a> {
    /// The request path, normalised (no dot segments, no repeated slashes) and still
    /// percent-encoded.
    pub path: &'a str,
    /// The query string, if any.
    pub query: Option<&'a str>,
    /// The host the client asked for: the `Host` header, else the URI authority.
    pub host: Option<&'a HeaderValue>,
    /// Whether the client connection is TLS (`https`).
    pub https: bool,
    /// The client connection, when known.
    pub connection: Option<&'a ConnectionInfo>,
    /// The certificate the client presented, when its TLS connection asked for one.
    pub client_certificate: Option<&'a ClientCertificate>,
}

/// The path and query a route's transforms produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewrittenUri {
    /// The new path, percent-encoded; empty when a transform removed all of it.
    pub path: String,
    /// The new query string (without `?`), if any.
    pub query: Option<String>,
}

impl RouteTransforms {
    /// Apply the request transforms: `method` may change; `headers` (the client's
    /// headers without hop-by-hop ones) are filtered and changed, `X-Forwarded-*` /
    /// `Forwarded` included. Returns the new path and query when the route rewrites
    /// them (see [`rewrites_uri`](Self::rewrites_uri)). `Host` is the forwarder's job.
    pub fn apply_request(
        &self,
        client: &ClientRequest<'_>,
        method: &mut Method,
        headers: &mut HeaderMap,
    ) -> Option<RewrittenUri> {
        let mut added = Added::default();
        let uri = self.apply_request_adding(client, method, headers, &mut added);
        added.move_into(headers);
        uri
    }

    /// [`apply_request`](Self::apply_request), with the `X-Forwarded-*` fields that
    /// the request has none of, and that no later transform names, put in `added`
    /// rather than in `headers`.
    pub(crate) fn apply_request_adding(
        &self,
        client: &ClientRequest<'_>,
        method: &mut Method,
        headers: &mut HeaderMap,
        added: &mut Added,
    ) -> Option<RewrittenUri> {
        for (from, to) in self.method.iter() {
            if method == from {
                *method = to.clone();
            }
        }
        let values = self
            .capture
            .as_ref()
            .map(|c| c.capture(client.path))
            .unwrap_or_default();
        let mut removed_prefix = String::new();
        let uri = self
            .rewrites_uri()
            .then(|| self.rewrite_uri(client, &values, &mut removed_prefix));
        if let Some(allowed) = &self.request_allowed {
            keep_only(headers, allowed);
        }
        for op in self.headers.iter() {
            apply_header_op(op, headers, added, client, &values, &removed_prefix);
        }
        uri
    }

    fn rewrite_uri(
        &self,
        client: &ClientRequest<'_>,
        values: &RouteValues<'_>,
        removed_prefix: &mut String,
    ) -> RewrittenUri {
        let mut path = client.path.to_owned();
        let mut query = client.query.map(str::to_owned);
        for op in self.uri.iter() {
            match op {
                UriOp::PathPrefix(p) => path.insert_str(0, p),
                UriOp::PathRemovePrefix(p) => {
                    if starts_with_segments(&path, p) {
                        removed_prefix.push_str(&path[..p.len()]);
                        path.replace_range(..p.len(), "");
                    }
                }
                UriOp::PathSet(p) => p.clone_into(&mut path),
                UriOp::PathPattern(segments) => path = render_pattern(segments, values),
                UriOp::Query {
                    name,
                    encoded,
                    action,
                    value,
                } => {
                    let value = match value {
                        QueryValue::Fixed(v) => Some(v.clone()),
                        QueryValue::Route(rv) => values.get(rv).map(|v| encode(&decode(v))),
                    };
                    match (value, action) {
                        (Some(v), action) => {
                            let pair = format!("{encoded}{v}");
                            query_put(&mut query, name, pair, *action == ValueAction::Append);
                        }
                        (None, ValueAction::Set) => query_remove(&mut query, name),
                        (None, ValueAction::Append) => {}
                    }
                }
                UriOp::QueryRemove(name) => query_remove(&mut query, name),
            }
        }
        RewrittenUri { path, query }
    }
}

/// `path` equals `prefix` or continues it with `/` (ASCII case-insensitive).
fn starts_with_segments(path: &str, prefix: &str) -> bool {
    path.len() >= prefix.len()
        && path.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
        && matches!(path.as_bytes().get(prefix.len()), None | Some(b'/'))
}

fn render_pattern(segments: &[PatternSegment], values: &RouteValues<'_>) -> String {
    let mut out = String::new();
    for segment in segments {
        let has_params = segment
            .parts
            .iter()
            .any(|p| matches!(p, PatternPart::Param { .. }));
        let any_value = segment.parts.iter().any(|p| match p {
            PatternPart::Param { name, .. } => values.get(name).is_some(),
            PatternPart::Literal(l) => !l.is_empty(),
        });
        if has_params && !any_value {
            continue;
        }
        out.push('/');
        for part in &segment.parts {
            match part {
                PatternPart::Literal(l) => out.push_str(l),
                PatternPart::Param { name, encode_slash } => {
                    let value = values.get(name).unwrap_or_default();
                    if *encode_slash {
                        out.push_str(&value.replace('/', "%2F"));
                    } else {
                        out.push_str(value);
                    }
                }
            }
        }
    }
    out
}

/// Percent-decode a query name or a route value (`+` is a space in queries).
fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn query_name_is(pair: &str, name: &str) -> bool {
    let raw = pair.split_once('=').map_or(pair, |(n, _)| n);
    if !raw.contains(['%', '+']) {
        return raw.eq_ignore_ascii_case(name);
    }
    decode(&raw.replace('+', " ")).eq_ignore_ascii_case(name)
}

/// Set (replace the first occurrence in place, drop the others, else add at the end)
/// or append a `name=value` pair.
fn query_put(query: &mut Option<String>, name: &str, pair: String, append: bool) {
    let mut pairs: Vec<&str> = query
        .as_deref()
        .map(|q| q.split('&').filter(|p| !p.is_empty()).collect())
        .unwrap_or_default();
    let mut placed = false;
    if !append {
        pairs.retain_mut(|p| {
            if !query_name_is(p, name) {
                return true;
            }
            if placed {
                return false;
            }
            placed = true;
            *p = pair.as_str();
            true
        });
    }
    if !placed {
        pairs.push(pair.as_str());
    }
    *query = Some(pairs.join("&"));
}

fn query_remove(query: &mut Option<String>, name: &str) {
    let Some(q) = query.as_deref() else { return };
    let kept: Vec<&str> = q
        .split('&')
        .filter(|p| !p.is_empty() && !query_name_is(p, name))
        .collect();
    *query = (!kept.is_empty()).then(|| kept.join("&"));
}

/// Keep only the `allowed` headers (every value of each).
pub(super) fn keep_only(headers: &mut HeaderMap, allowed: &[HeaderName]) {
    let mut kept = HeaderMap::with_capacity(allowed.len());
    for name in allowed {
        for value in headers.get_all(name) {
            kept.append(name.clone(), value.clone());
        }
    }
    *headers = kept;
}

fn apply_header_op(
    op: &HeaderOp,
    headers: &mut HeaderMap,
    added: &mut Added,
    client: &ClientRequest<'_>,
    values: &RouteValues<'_>,
    removed_prefix: &str,
) {
    match op {
        HeaderOp::Set(name, value) => {
            headers.insert(name.clone(), value.clone());
        }
        HeaderOp::Append(name, value) => {
            headers.append(name.clone(), value.clone());
        }
        HeaderOp::Remove(name) => {
            remove_field(headers, name);
        }
        HeaderOp::ClientCert(name) => {
            // As YARP: the client's own field never goes through.
            remove_field(headers, name);
            if let Some(certificate) = client.client_certificate {
                headers.insert(name.clone(), certificate.base64().clone());
            }
        }
        HeaderOp::RouteValue {
            name,
            action,
            route_value,
        } => {
            let value = values
                .get(route_value)
                .and_then(|v| HeaderValue::try_from(decode(v)).ok());
            match (value, action) {
                (Some(v), ValueAction::Set) => {
                    headers.insert(name.clone(), v);
                }
                (Some(v), ValueAction::Append) => {
                    headers.append(name.clone(), v);
                }
                (None, ValueAction::Set) => {
                    remove_field(headers, name);
                }
                (None, ValueAction::Append) => {}
            }
        }
        HeaderOp::XForwarded {
            kind,
            name,
            action,
            last,
        } => {
            let value = match kind {
                XForwardedKind::For => client.connection.map(|c| ip_value(c.remote.ip())),
                XForwardedKind::Proto => Some(HeaderValue::from_static(if client.https {
                    "https"
                } else {
                    "http"
                })),
                XForwardedKind::Host => client.host.cloned(),
                XForwardedKind::Prefix => (!removed_prefix.is_empty())
                    .then(|| HeaderValue::from_str(removed_prefix).ok())
                    .flatten(),
            };
            match value {
                // Set or appended to nothing: the value as it is.
                Some(value)
                    if *last
                        && matches!(action, ForwardedAction::Set | ForwardedAction::Append)
                        && !may_have(headers, name) =>
                {
                    added.push(name.clone(), value)
                }
                value => forwarded_header(headers, name, *action, value),
            }
        }
        HeaderOp::Forwarded(op) => {
            let value = HeaderValue::try_from(forwarded_value(op, client)).ok();
            forwarded_header(headers, &header::FORWARDED, op.action, value);
        }
    }
}

/// Set, extend (one comma-separated line) or remove a forwarding header.
fn forwarded_header(
    headers: &mut HeaderMap,
    name: &HeaderName,
    action: ForwardedAction,
    value: Option<HeaderValue>,
) {
    match (action, value) {
        // `insert` replaces every value the header had.
        (ForwardedAction::Set, Some(value)) => {
            headers.insert(name.clone(), value);
        }
        (ForwardedAction::Set, None) => {
            remove_field(headers, name);
        }
        // One look-up: the usual request has no such header, and gets `value` as it is.
        (ForwardedAction::Append, Some(value)) => match headers.entry(name) {
            Entry::Vacant(vacant) => {
                vacant.insert(value);
            }
            Entry::Occupied(mut occupied) => {
                let mut joined: Vec<u8> = Vec::new();
                for existing in occupied.iter() {
                    if existing.is_empty() {
                        continue;
                    }
                    joined.extend_from_slice(existing.as_bytes());
                    joined.extend_from_slice(b", ");
                }
                joined.extend_from_slice(value.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&joined) {
                    // `insert` replaces every value the header had.
                    occupied.insert(v);
                }
            }
        },
        (ForwardedAction::Append, None) | (ForwardedAction::Off, _) => {}
        (ForwardedAction::Remove, _) => {
            remove_field(headers, name);
        }
    }
}

/// An IP address as `X-Forwarded-For` writes it (IPv4-mapped IPv6 as IPv4).
///
/// The values of the last few client addresses are kept per thread, already shared,
/// so that the requests of a keep-alive connection (or of many clients behind one
/// load balancer) reuse one value: a reference-count increment instead of two
/// allocations (the value, and its promotion to shared storage when the keep-alive
/// replay or a transform clones it).
pub(crate) fn ip_value(ip: IpAddr) -> HeaderValue {
    const SLOTS: usize = 8;
    thread_local! {
        static RECENT: std::cell::RefCell<[Option<(IpAddr, HeaderValue)>; SLOTS]> =
            const { std::cell::RefCell::new([const { None }; SLOTS]) };
    }
    let ip = unmap(ip);
    let slot = match ip {
        IpAddr::V4(v4) => v4.to_bits() as usize,
        IpAddr::V6(v6) => v6.to_bits() as usize,
    } % SLOTS;
    RECENT
        .try_with(|recent| {
            let mut recent = recent.borrow_mut();
            match &recent[slot] {
                Some((cached, value)) if *cached == ip => value.clone(),
                _ => {
                    let value = shared(format_ip(ip));
                    recent[slot] = Some((ip, value.clone()));
                    value
                }
            }
        })
        .unwrap_or_else(|_| format_ip(ip))
}

/// `host` (an HTTP/2 request's `:authority`) as a header value for `X-Forwarded-Host`
/// and the like: `None` when it is not a valid one. Kept per thread like
/// [`ip_value`]'s, for the same reason: most requests name one of a few hosts.
pub(crate) fn host_value(host: &str) -> Option<HeaderValue> {
    const SLOTS: usize = 4;
    thread_local! {
        static RECENT: std::cell::RefCell<[Option<HeaderValue>; SLOTS]> =
            const { std::cell::RefCell::new([const { None }; SLOTS]) };
    }
    let slot = {
        use std::hash::BuildHasher;
        crate::fxhash::FxBuild::default().hash_one(host.as_bytes()) as usize % SLOTS
    };
    RECENT
        .try_with(|recent| {
            let mut recent = recent.borrow_mut();
            match &recent[slot] {
                Some(value) if value.as_bytes() == host.as_bytes() => Some(value.clone()),
                _ => {
                    let value = shared(HeaderValue::from_str(host).ok()?);
                    recent[slot] = Some(value.clone());
                    Some(value)
                }
            }
        })
        .unwrap_or_else(|_| HeaderValue::from_str(host).ok())
}

/// `value` backed by shared storage, so that its clones allocate nothing.
fn shared(value: HeaderValue) -> HeaderValue {
    let bytes = Bytes::copy_from_slice(value.as_bytes());
    // The first clone of a `Bytes` made from a vector moves it to shared storage.
    let _promoted = bytes.clone();
    HeaderValue::from_maybe_shared(bytes).expect("the bytes of a header value")
}

fn format_ip(ip: IpAddr) -> HeaderValue {
    match ip {
        // Dotted decimal by hand: `Display` costs ~1 300 instructions, this ~60, and it
        // runs for every request.
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[len] = b'.';
                    len += 1;
                }
                if octet >= 100 {
                    buf[len] = b'0' + octet / 100;
                    len += 1;
                }
                if octet >= 10 {
                    buf[len] = b'0' + octet / 10 % 10;
                    len += 1;
                }
                buf[len] = b'0' + octet % 10;
                len += 1;
            }
            HeaderValue::from_bytes(&buf[..len]).expect("dotted decimal is a valid header value")
        }
        v6 => HeaderValue::try_from(v6.to_string()).expect("an IP address is a valid header value"),
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The RFC 7239 element: `proto=...;host="...";for=...;by=...` (YARP's order).
fn forwarded_value(op: &ForwardedOp, client: &ClientRequest<'_>) -> String {
    let mut out = String::new();
    if op.proto {
        out.push_str(if client.https {
            "proto=https"
        } else {
            "proto=http"
        });
    }
    if op.host {
        if let Some(host) = client.host.and_then(|h| h.to_str().ok()) {
            if !out.is_empty() {
                out.push(';');
            }
            let _ = write!(out, "host=\"{host}\"");
        }
    }
    for (format, addr, key) in [
        (op.for_format, client.connection.map(|c| c.remote), "for="),
        (op.by_format, client.connection.map(|c| c.local), "by="),
    ] {
        if let Some(format) = format {
            if !out.is_empty() {
                out.push(';');
            }
            out.push_str(key);
            node(&mut out, addr, format);
        }
    }
    out
}

/// An RFC 7239 node (section 6), formatted as YARP does.
fn node(out: &mut String, addr: Option<SocketAddr>, format: NodeFormat) {
    use NodeFormat::*;
    let ip = addr.map(|a| unmap(a.ip()));
    let port = addr.map_or(0, |a| a.port());
    let add_port = port != 0 && matches!(format, IpAndPort | UnknownAndPort | RandomAndPort);
    let random_port = matches!(
        format,
        IpAndRandomPort | UnknownAndRandomPort | RandomAndRandomPort
    );
    let show_ip = matches!(format, Ip | IpAndPort | IpAndRandomPort);
    let ipv6 = show_ip && matches!(ip, Some(IpAddr::V6(_)));
    let quote = add_port || random_port || ipv6;
    if quote {
        out.push('"');
    }
    match (show_ip, ip) {
        (true, Some(IpAddr::V6(v6))) => {
            let _ = write!(out, "[{v6}]");
        }
        (true, Some(v4)) => {
            let _ = write!(out, "{v4}");
        }
        _ if matches!(format, Random | RandomAndPort | RandomAndRandomPort) => obfuscated(out),
        _ => out.push_str("unknown"),
    }
    if add_port {
        let _ = write!(out, ":{port}");
    } else if random_port {
        out.push(':');
        obfuscated(out);
    }
    if quote {
        out.push('"');
    }
}

/// An RFC 7239 obfuscated identifier: `_` and nine random characters.
fn obfuscated(out: &mut String) {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    out.push('_');
    for _ in 0..9 {
        out.push(CHARS[fastrand::usize(..CHARS.len())] as char);
    }
}
