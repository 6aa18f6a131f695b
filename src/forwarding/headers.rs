//! Header rules of the forwarder: hop-by-hop removal (YARP's list and every token
//! named in `Connection`), `X-Forwarded-*`, `Host`.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Version;

use crate::request::ConnectionInfo;

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

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub(crate) static X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

/// Remove hop-by-hop headers and every header named by a `Connection` token.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
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

/// Prepare request headers for the destination.
///
/// - hop-by-hop and `Connection`-named headers removed; `TE: trailers` kept for
///   HTTP/2 clients (gRPC); `Upgrade` and `Connection: upgrade` kept for HTTP/1.1
///   upgrade requests (WebSockets);
/// - `Content-Length` dropped when `Transfer-Encoding` was present;
/// - `Host` set to `host` (`None`: removed, so the URI authority is used);
/// - `X-Forwarded-For/Proto/Host` set (incoming values replaced),
///   `X-Forwarded-Prefix` and `Forwarded` removed.
pub(crate) fn prepare_request(
    headers: &mut HeaderMap,
    version: Version,
    conn: Option<&ConnectionInfo>,
    scheme_https: bool,
    host: Option<&HeaderValue>,
    original_host: Option<HeaderValue>,
) {
    let keep_te_trailers = version == Version::HTTP_2
        && headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    // An HTTP/1.1 upgrade (WebSocket) keeps `Upgrade` and `Connection: upgrade`.
    let upgrade = (version == Version::HTTP_11)
        .then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
        .filter(|_| super::upgrade::connection_has(headers, "upgrade"));
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

    match host {
        Some(h) => {
            headers.insert(header::HOST, h.clone());
        }
        None => {
            headers.remove(header::HOST);
        }
    }

    headers.remove(header::FORWARDED);
    headers.remove(&X_FORWARDED_PREFIX);
    match conn {
        Some(c) => {
            headers.insert(X_FORWARDED_FOR.clone(), ip_header(c.remote.ip()));
        }
        None => {
            headers.remove(&X_FORWARDED_FOR);
        }
    }
    let proto = if scheme_https || conn.is_some_and(|c| c.tls) {
        "https"
    } else {
        "http"
    };
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
    match original_host {
        Some(h) => {
            headers.insert(X_FORWARDED_HOST.clone(), h);
        }
        None => {
            headers.remove(&X_FORWARDED_HOST);
        }
    }
}

fn ip_header(ip: std::net::IpAddr) -> HeaderValue {
    let ip = match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    };
    HeaderValue::try_from(ip.to_string()).expect("an IP address is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

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
            prepare_request(&mut h, version, None, false, None, None);
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
            prepare_request(&mut h, version, None, false, None, None);
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

    #[test]
    fn forwarded_headers_replaced() {
        let mut h = HeaderMap::new();
        h.append(&X_FORWARDED_FOR, "6.6.6.6".parse().unwrap());
        h.append(&X_FORWARDED_FOR, "7.7.7.7".parse().unwrap());
        h.insert(header::FORWARDED, "for=6.6.6.6".parse().unwrap());
        h.insert(&X_FORWARDED_PROTO, "gopher".parse().unwrap());
        let conn = ConnectionInfo {
            remote: "[::ffff:10.1.2.3]:5555".parse().unwrap(),
            local: "127.0.0.1:80".parse().unwrap(),
            tls: false,
        };
        let host = HeaderValue::from_static("backend:81");
        prepare_request(
            &mut h,
            Version::HTTP_11,
            Some(&conn),
            false,
            Some(&host),
            Some(HeaderValue::from_static("front.example")),
        );
        assert_eq!(h.get_all(&X_FORWARDED_FOR).iter().count(), 1);
        assert_eq!(h[&X_FORWARDED_FOR], "10.1.2.3");
        assert_eq!(h[&X_FORWARDED_PROTO], "http");
        assert_eq!(h[&X_FORWARDED_HOST], "front.example");
        assert_eq!(h[header::HOST], "backend:81");
        assert!(!h.contains_key(header::FORWARDED));
    }
}
