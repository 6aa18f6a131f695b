//! Header rules of the forwarder: hop-by-hop removal (YARP's list and every token
//! named in `Connection`). `X-Forwarded-*`, `Forwarded` and the other header
//! transforms are the route's [`RouteTransforms`](crate::transforms::RouteTransforms).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Version;

/// Headers that never cross the proxy, in either direction (YARP's list).
static HOP_BY_HOP: [HeaderName; 17] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    HeaderName::from_static("keep-alive"),
    header::UPGRADE,
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("proxy-authentication-info"),
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-features"),
    HeaderName::from_static("proxy-instruction"),
    HeaderName::from_static("security-scheme"),
    HeaderName::from_static("alpn"),
    HeaderName::from_static("close"),
    HeaderName::from_static("http2-settings"),
    header::UPGRADE_INSECURE_REQUESTS,
    header::TE,
    HeaderName::from_static("alt-svc"),
];

/// Whether any hop-by-hop header is present. Most messages carry none: one pass over
/// the names present is far cheaper than a hashed look-up for each of the 17.
#[inline]
fn has_hop_by_hop(headers: &HeaderMap) -> bool {
    headers.keys().any(is_hop_by_hop)
}

/// Remove every value of `name` from `headers`. Most removals (the default transforms'
/// `X-Forwarded-Prefix` and `Forwarded`, a route's `RequestHeaderRemove`) find nothing:
/// in a map of a few fields one pass over the names present says so for less than the
/// hashed look-up `HeaderMap::remove` makes.
#[inline]
pub(crate) fn remove_field(headers: &mut HeaderMap, name: &HeaderName) {
    if may_have(headers, name) {
        headers.remove(name);
    }
}

/// Whether `headers` may have `name`: `false` says it has not. For a look-up that
/// mostly finds nothing (a `traceparent`, a header about to be removed): in a map of a
/// few fields, one pass over the names present answers for less than a hashed look-up.
#[inline]
pub(crate) fn may_have(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.keys_len() > SCANNED || headers.keys().any(|present| present == name)
}

/// `headers.get(name)`: in a map of a few fields, one pass over them answers for less
/// than a hashed look-up (~110 instructions), whether the field is one most requests
/// have (`Host`) or one most do not (a `traceparent`, an `Expect`).
#[inline]
pub(crate) fn get_few<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if headers.keys_len() > SCANNED {
        return headers.get(name);
    }
    headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}

/// Whether `headers` has more than one value of `name`: looked up only in a map where
/// some name has more than one (most have none).
#[inline]
pub(crate) fn repeated(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.len() != headers.keys_len() && headers.get_all(name).iter().nth(1).is_some()
}

/// `headers.insert(name, value)`: where `headers` holds one value of `name`, that value
/// replaced where it lies (see [`get_few`]; an insertion costs ~170 instructions).
#[inline]
pub(crate) fn set_few(headers: &mut HeaderMap, name: HeaderName, value: HeaderValue) {
    if headers.keys_len() <= SCANNED && !repeated(headers, &name) {
        if let Some((_, slot)) = headers.iter_mut().find(|(n, _)| **n == name) {
            *slot = value;
            return;
        }
    }
    headers.insert(name, value);
}

/// The most fields [`may_have`] looks through before it leaves the look-up to the hash.
const SCANNED: usize = 16;

/// Fields the forwarder adds to a request that has none of their names (the
/// `X-Forwarded-*` fields a route sets), kept beside the request's map instead of
/// inserted into it: the HTTP/1.1 engine writes them after the map's fields, every
/// other way a request is sent takes them into the map first ([`move_into`]).
///
/// Inserting a field costs a hashed look-up and an insertion (~250 instructions for
/// each `X-Forwarded-*` name); writing it from here costs nothing more than writing
/// it from the map. And the map, left with the client's fields, is one the next
/// request of the connection can read into in place (`http1::head`).
///
/// [`move_into`]: Added::move_into
#[derive(Debug, Default)]
pub(crate) struct Added(smallvec::SmallVec<[(HeaderName, HeaderValue); 4]>);

impl Added {
    /// Add `name` (which the request's map does not have).
    pub(crate) fn push(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.push((name, value));
    }

    /// The fields, in the order they were added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.0.iter().map(|(name, value)| (name, value))
    }

    /// Move the fields into `headers`.
    pub(crate) fn move_into(&mut self, headers: &mut HeaderMap) {
        for (name, value) in self.0.drain(..) {
            headers.append(name, value);
        }
    }
}

/// Whether `name` is in [`HOP_BY_HOP`] (a `match` on the name: a length switch and a
/// compare, not 17 comparisons).
#[inline]
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "transfer-encoding"
            | "keep-alive"
            | "upgrade"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authentication-info"
            | "proxy-authorization"
            | "proxy-features"
            | "proxy-instruction"
            | "security-scheme"
            | "alpn"
            | "close"
            | "http2-settings"
            | "upgrade-insecure-requests"
            | "te"
            | "alt-svc"
    )
}

/// Remove hop-by-hop headers and every header named by a `Connection` token.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if !has_hop_by_hop(headers) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Prepare a destination's response headers for the client: hop-by-hop and
/// `Connection`-named headers removed, and `Content-Length` with them when
/// `Transfer-Encoding` was present (RFC 9112 §6.3: the coding framed the body, and a
/// proxy does not pass the length on). fuseway's own client refuses such an answer;
/// hyper's takes the coding.
pub(crate) fn prepare_response(headers: &mut HeaderMap) {
    if !has_hop_by_hop(headers) {
        return;
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    remove_hop_by_hop(headers);
}

/// Prepare the client's request headers for the destination, before the route's
/// transforms run (they handle `X-Forwarded-*`, `Forwarded` and the rest; the
/// forwarder sets `Host`):
///
/// - hop-by-hop and `Connection`-named headers removed; `TE: trailers` kept for
///   HTTP/2 clients (gRPC); `Upgrade` and `Connection: upgrade` kept for HTTP/1.1
///   upgrade requests (WebSockets);
/// - `Content-Length` dropped when `Transfer-Encoding` was present.
pub(crate) fn prepare_request(headers: &mut HeaderMap, version: Version) {
    // `TE`, `Upgrade`, `Transfer-Encoding` and `Connection` are hop-by-hop too: a
    // request without any needs nothing here.
    if !has_hop_by_hop(headers) {
        return;
    }
    let keep_te_trailers = version == Version::HTTP_2
        && headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    // An HTTP/1.1 upgrade (WebSocket) keeps `Upgrade` and `Connection: upgrade`.
    let upgrade = super::upgrade::upgrade_protocol(headers, version).cloned();
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    remove_hop_by_hop(headers);
    if keep_te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(protocol) = upgrade {
        headers.insert(header::UPGRADE, protocol);
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map of `fields` distinct fields, `x-field-0` ...
    fn map_of(fields: usize) -> HeaderMap {
        (0..fields)
            .map(|i| {
                let name = HeaderName::from_bytes(format!("x-field-{i}").as_bytes()).unwrap();
                (name, HeaderValue::from_static("v"))
            })
            .collect()
    }

    #[test]
    fn remove_field_removes_every_value_in_small_and_large_maps() {
        for fields in [2, SCANNED + 4] {
            let mut headers = map_of(fields);
            headers.append("x-gone", HeaderValue::from_static("1"));
            headers.append("x-gone", HeaderValue::from_static("2"));
            remove_field(&mut headers, &HeaderName::from_static("x-absent"));
            assert_eq!(headers.keys_len(), fields + 1, "{fields} fields");
            remove_field(&mut headers, &HeaderName::from_static("x-gone"));
            assert!(!headers.contains_key("x-gone"), "{fields} fields");
            assert_eq!(headers.keys_len(), fields, "{fields} fields");
            remove_field(&mut headers, &header::HOST);
            assert_eq!(headers.keys_len(), fields, "{fields} fields");
        }
    }

    /// The scans answer as the hashed look-ups do, in maps small enough to be scanned
    /// and in larger ones: the first value, whether a name repeats, and an insertion
    /// that leaves one value of the name, where the first one was.
    #[test]
    fn the_few_field_look_ups_answer_as_the_map_does() {
        let host = |v: &'static str| HeaderValue::from_static(v);
        for fields in [2, SCANNED + 4] {
            let mut headers = map_of(fields);
            assert_eq!(get_few(&headers, &header::HOST), None, "{fields}");
            assert!(!repeated(&headers, &header::HOST));
            set_few(&mut headers, header::HOST, host("new"));
            assert_eq!(get_few(&headers, &header::HOST), Some(&host("new")));
            headers.insert("x-field-0", host("first"));
            set_few(&mut headers, header::HOST, host("set"));
            assert_eq!(headers.get_all(header::HOST).iter().count(), 1);
            assert_eq!(get_few(&headers, &header::HOST), Some(&host("set")));
            // Where the first value was: the map's order of names is kept.
            let order = |h: &HeaderMap| h.keys().cloned().collect::<Vec<_>>();
            let before = order(&headers);
            headers.append(header::HOST, host("second"));
            assert!(repeated(&headers, &header::HOST), "{fields}");
            assert_eq!(get_few(&headers, &header::HOST), Some(&host("set")));
            set_few(&mut headers, header::HOST, host("one"));
            assert!(!repeated(&headers, &header::HOST), "{fields}");
            assert_eq!(headers.get_all(header::HOST).iter().count(), 1);
            assert_eq!(get_few(&headers, &header::HOST), Some(&host("one")));
            assert_eq!(order(&headers), before, "{fields}");
        }
    }

    #[test]
    fn the_hop_by_hop_match_is_the_list() {
        for name in &HOP_BY_HOP {
            assert!(is_hop_by_hop(name), "{name}");
        }
        let matched = [
            "connection",
            "transfer-encoding",
            "keep-alive",
            "upgrade",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authentication-info",
            "proxy-authorization",
            "proxy-features",
            "proxy-instruction",
            "security-scheme",
            "alpn",
            "close",
            "http2-settings",
            "upgrade-insecure-requests",
            "te",
            "alt-svc",
        ];
        assert_eq!(matched.len(), HOP_BY_HOP.len());
        for name in matched {
            assert!(HOP_BY_HOP.iter().any(|h| h == name), "{name}");
        }
        assert!(!is_hop_by_hop(&header::CONTENT_LENGTH));
        assert!(!is_hop_by_hop(&HeaderName::from_static("x-connection")));
    }

    #[test]
    fn removes_hop_by_hop_and_connection_tokens() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, X-Secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("proxy-authorization", "basic x".parse().unwrap());
        h.insert("x-kept", "1".parse().unwrap());
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn te_trailers_kept_only_for_h2() {
        for (version, kept) in [(Version::HTTP_2, true), (Version::HTTP_11, false)] {
            let mut h = HeaderMap::new();
            h.insert(header::TE, "trailers".parse().unwrap());
            prepare_request(&mut h, version);
            assert_eq!(h.contains_key(header::TE), kept, "{version:?}");
        }
    }

    #[test]
    fn upgrade_kept_only_for_h1_upgrade_requests() {
        for (version, conn, kept) in [
            (Version::HTTP_11, "keep-alive, Upgrade", true),
            (Version::HTTP_11, "keep-alive", false),
            (Version::HTTP_2, "upgrade", false),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::CONNECTION, conn.parse().unwrap());
            h.insert(header::UPGRADE, "websocket".parse().unwrap());
            h.insert("keep-alive", "timeout=5".parse().unwrap());
            prepare_request(&mut h, version);
            assert_eq!(h.contains_key(header::UPGRADE), kept, "{version:?} {conn}");
            assert!(!h.contains_key("keep-alive"));
            if kept {
                assert_eq!(h[header::UPGRADE], "websocket");
                assert_eq!(h[header::CONNECTION], "upgrade");
            } else {
                assert!(!h.contains_key(header::CONNECTION));
            }
        }
    }
}
