//! Host patterns (`Match.Hosts`) and the host/port of a request.

use http::uri::Scheme;
use http::{HeaderMap, Uri};
use smallvec::SmallVec;

/// The host part of a host pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum HostName {
    /// An exact host (lower case, no trailing dot; IPv6 literals keep their brackets).
    Exact(Box<[u8]>),
    /// `*.suffix`: any host ending in `.suffix` (any depth), not `suffix` itself.
    Wildcard(Box<[u8]>),
    /// `*`: any host (only together with a port: `*:8080`).
    Any,
}

/// One entry of `Match.Hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct HostPattern {
    /// Which hosts.
    pub(super) name: HostName,
    /// Which port; `None` is any port.
    pub(super) port: Option<u16>,
}

impl HostPattern {
    /// Parse `example.com`, `*.example.com`, `[::1]`, any of them with `:port` (or
    /// `:*`, any port), or `*:port`.
    pub(super) fn parse(pattern: &str) -> Result<HostPattern, String> {
        if pattern.is_empty() {
            return Err("empty host".into());
        }
        if !pattern.is_ascii() {
            return Err(format!(
                "`{pattern}` is not ASCII; write internationalised names in punycode (xn--...)"
            ));
        }
        let (host, port) = split_host_port(pattern)
            .ok_or_else(|| format!("`{pattern}`: IPv6 addresses must be in brackets"))?;
        let port = match port {
            None | Some("*") => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n != 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
                _ => return Err(format!("`{pattern}` has an invalid port `{p}`")),
            },
        };
        let name = if host == "*" {
            if port.is_none() {
                return Err(format!(
                    "`{pattern}` matches every host; leave Hosts out (and give a Path) instead"
                ));
            }
            HostName::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            HostName::Wildcard(normalise_name(suffix, pattern)?)
        } else if host.starts_with('[') {
            normalise_ipv6(host, pattern)?
        } else {
            HostName::Exact(normalise_name(host, pattern)?)
        };
        Ok(HostPattern { name, port })
    }

    /// Specificity (lower wins): host+port 0, host 1, wildcard+port 2, wildcard 3,
    /// port only 4. Routes without hosts rank 5.
    pub(super) fn score(&self) -> u8 {
        let base = match self.name {
            HostName::Exact(_) => 0,
            HostName::Wildcard(_) => 2,
            HostName::Any => return 4,
        };
        base + u8::from(self.port.is_none())
    }

    /// Length of the host text, used to prefer the longer of two matching wildcards.
    pub(super) fn specificity_len(&self) -> usize {
        match &self.name {
            HostName::Exact(h) | HostName::Wildcard(h) => h.len(),
            HostName::Any => 0,
        }
    }
}

/// Split `host[:port]`; `None` for more than one colon outside brackets.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if s.starts_with('[') {
        return Some(match s.find(']') {
            Some(end) => match s[end + 1..].strip_prefix(':') {
                Some(port) => (&s[..=end], Some(port)),
                None if end + 1 == s.len() => (s, None),
                None => (s, Some("")),
            },
            None => (s, None),
        });
    }
    match s.split_once(':') {
        Some((_, port)) if port.contains(':') => None,
        Some((host, port)) => Some((host, Some(port))),
        None => Some((s, None)),
    }
}

fn normalise_name(host: &str, pattern: &str) -> Result<Box<[u8]>, String> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err(format!("`{pattern}` has an empty host name"));
    }
    if host.contains('*') {
        return Err(format!(
            "`{pattern}`: `*` is only allowed as the whole first label (`*.example.com`)"
        ));
    }
    if host.split('.').any(str::is_empty) {
        return Err(format!("`{pattern}` has an empty label"));
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.'))
    {
        return Err(format!("`{pattern}` has an invalid character `{c}`"));
    }
    Ok(host.to_ascii_lowercase().into_bytes().into_boxed_slice())
}

fn normalise_ipv6(host: &str, pattern: &str) -> Result<HostName, String> {
    let inner = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("`{pattern}` is not a valid bracketed IPv6 address"))?;
    if !inner
        .chars()
        .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
    {
        return Err(format!("`{pattern}` is not a valid bracketed IPv6 address"));
    }
    Ok(HostName::Exact(
        host.to_ascii_lowercase().into_bytes().into_boxed_slice(),
    ))
}

/// The host and port a request is addressed to.
#[derive(Debug)]
pub(super) struct RequestHost {
    /// Lower case, without a trailing dot; empty when the request names no usable host.
    host: SmallVec<[u8; 128]>,
    /// The port, defaulted from the scheme; `None` when there is no host.
    port: Option<u16>,
}

impl RequestHost {
    /// No host (for tables whose routes name none).
    pub(super) fn none() -> RequestHost {
        RequestHost {
            host: SmallVec::new(),
            port: None,
        }
    }

    /// The host from the URI authority (HTTP/2, absolute-form) or else the `Host` header
    /// (HTTP/1.1). A missing port is 443 for an `https` URI, else 80. A malformed `Host`
    /// header counts as no host: then only routes without hosts can match.
    pub(super) fn from_request(uri: &Uri, headers: &HeaderMap) -> RequestHost {
        let mut out = RequestHost::none();
        let Ok(Some((host, port))) = named_host(uri, headers) else {
            return out;
        };
        if host.is_empty() {
            return out;
        }
        out.host.extend_from_slice(host);
        out.host.as_mut_slice().make_ascii_lowercase();
        let default_port = if uri.scheme() == Some(&Scheme::HTTPS) {
            443
        } else {
            80
        };
        out.port = Some(port.unwrap_or(default_port));
        out
    }

    /// The host, or `None` when the request names none.
    pub(super) fn host(&self) -> Option<&[u8]> {
        Some(self.host.as_slice()).filter(|h| !h.is_empty())
    }

    /// The port, or `None` when the request names no host.
    pub(super) fn port(&self) -> Option<u16> {
        self.port
    }
}

/// A host as a request names it, and the port it gives.
type HostPort<'a> = (&'a [u8], Option<u16>);

/// The host a request names — its URI's authority (HTTP/2, absolute form), else its
/// `Host` field — without a trailing dot, and the port it gives: `Ok(None)` when it
/// names none, `Err(())` for a malformed `Host`.
#[inline]
fn named_host<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Result<Option<HostPort<'a>>, ()> {
    let (host, port) = if let Some(authority) = uri.authority() {
        (authority.host().as_bytes(), authority.port_u16())
    } else {
        let Some(value) = crate::forwarding::headers::get_few(headers, &http::header::HOST) else {
            return Ok(None);
        };
        parse_host_header(value.as_bytes()).ok_or(())?
    };
    Ok(Some((host.strip_suffix(b".").unwrap_or(host), port)))
}

fn parse_host_header(value: &[u8]) -> Option<HostPort<'_>> {
    let (host, port) = if value.first() == Some(&b'[') {
        let end = value.iter().position(|&b| b == b']')?;
        (&value[..=end], &value[end + 1..])
    } else {
        match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &value[value.len()..]),
        }
    };
    let port = match port {
        [] | [b':'] => None,
        [b':', digits @ ..] if digits.iter().all(u8::is_ascii_digit) => {
            Some(std::str::from_utf8(digits).ok()?.parse::<u16>().ok()?)
        }
        _ => return None,
    };
    Some((host, port))
}

/// ASP.NET's host filtering (`AllowedHosts`): the hosts requests may name, by name
/// only (the port is not looked at). `None` from [`AllowedHosts::parse`] when every
/// host is allowed.
#[derive(Debug, Clone)]
pub(crate) struct AllowedHosts {
    /// Exact names and `*.suffix` patterns (never [`HostName::Any`]).
    names: Vec<HostName>,
}

impl AllowedHosts {
    /// Parse `AllowedHosts`: names separated by `;` (`example.com;*.example.org;[::1]`),
    /// without ports; `*` among them (or none at all) allows every host.
    pub(crate) fn parse(list: &str) -> Result<Option<AllowedHosts>, String> {
        let mut names = Vec::new();
        for entry in list.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "*" {
                return Ok(None);
            }
            let pattern = HostPattern::parse(entry)?;
            if pattern.port.is_some() || entry.ends_with(":*") {
                return Err(format!(
                    "`{entry}`: AllowedHosts names hosts without a port (as ASP.NET takes them)"
                ));
            }
            names.push(pattern.name);
        }
        Ok((!names.is_empty()).then_some(AllowedHosts { names }))
    }

    /// Whether a request to `uri` with `headers` may be served: its host (the URI's
    /// authority, else its `Host` field) is one of the names; a request naming no host
    /// (HTTP/1.0) may, as ASP.NET's `AllowEmptyHosts`; a malformed `Host` may not.
    pub(crate) fn admit(&self, uri: &Uri, headers: &HeaderMap) -> bool {
        let host = match named_host(uri, headers) {
            Ok(Some((host, _))) => host,
            Ok(None) => return true,
            Err(()) => return false,
        };
        self.names.iter().any(|name| match name {
            HostName::Exact(exact) => host.eq_ignore_ascii_case(exact),
            HostName::Wildcard(suffix) => {
                host.len() > suffix.len() + 1
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                    && host[host.len() - suffix.len() - 1] == b'.'
            }
            HostName::Any => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn allowed_hosts_as_aspnet_filters_them() {
        let allowed = AllowedHosts::parse(" example.com; *.example.org;[::1];")
            .unwrap()
            .unwrap();
        let admit = |uri: &str, host: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(host) = host {
                headers.insert(http::header::HOST, HeaderValue::from_str(host).unwrap());
            }
            allowed.admit(&uri.parse().unwrap(), &headers)
        };
        assert!(admit("/", Some("example.com")));
        assert!(admit("/", Some("EXAMPLE.com.:8080")));
        assert!(admit("/", Some("a.b.example.org")));
        assert!(admit("/", Some("[::1]:80")));
        assert!(admit("http://www.example.org/x", None));
        assert!(admit("/", None), "no host: allowed, as AllowEmptyHosts");
        assert!(
            !admit("/", Some("example.org")),
            "a wildcard is for subdomains"
        );
        assert!(!admit("/", Some("example.com.evil")));
        assert!(!admit("/", Some("xexample.org")));
        assert!(!admit("/", Some("example.com:x")), "malformed");
        assert!(
            !admit("http://other.com/", Some("example.com")),
            "the authority counts"
        );
        assert!(AllowedHosts::parse("*").unwrap().is_none());
        assert!(AllowedHosts::parse("a.com;*").unwrap().is_none());
        assert!(AllowedHosts::parse("").unwrap().is_none());
        for bad in ["a.com:80", "*:8080", "a*.com", "[::1"] {
            assert!(AllowedHosts::parse(bad).is_err(), "{bad}");
        }
    }

    fn pattern(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn exact(s: &str, port: Option<u16>) -> HostPattern {
        HostPattern {
            name: HostName::Exact(s.as_bytes().into()),
            port,
        }
    }

    #[test]
    fn parses_patterns() {
        assert_eq!(pattern("Example.COM"), exact("example.com", None));
        assert_eq!(pattern("example.com."), exact("example.com", None));
        assert_eq!(
            pattern("example.com:8080"),
            exact("example.com", Some(8080))
        );
        assert_eq!(pattern("example.com:*"), exact("example.com", None));
        assert_eq!(pattern("[::1]:443"), exact("[::1]", Some(443)));
        assert_eq!(
            pattern("*.Example.com"),
            HostPattern {
                name: HostName::Wildcard(b"example.com".as_slice().into()),
                port: None
            }
        );
        assert_eq!(
            pattern("*:8080"),
            HostPattern {
                name: HostName::Any,
                port: Some(8080)
            }
        );
    }

    #[test]
    fn scores_by_specificity() {
        let scores: Vec<u8> = ["a.com:1", "a.com", "*.a.com:1", "*.a.com", "*:1"]
            .iter()
            .map(|p| pattern(p).score())
            .collect();
        assert_eq!(scores, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn rejects_bad_patterns() {
        for (p, needle) in [
            ("", "empty host"),
            ("*", "matches every host"),
            ("*:*", "matches every host"),
            ("a.*.com", "only allowed"),
            ("*example.com", "only allowed"),
            ("**.example.com", "only allowed"),
            ("a..com", "empty label"),
            ("a.com:x", "invalid port"),
            ("a.com:0", "invalid port"),
            ("a.com:70000", "invalid port"),
            ("a.com:+80", "invalid port"),
            ("a.com:", "invalid port"),
            ("::1", "brackets"),
            ("[::1", "bracketed IPv6"),
            ("[zz]", "bracketed IPv6"),
            ("[::1]x", "invalid port"),
            ("a b.com", "invalid character"),
            ("bücher.de", "punycode"),
            ("*.", "empty host name"),
        ] {
            let e = HostPattern::parse(p).expect_err(p);
            assert!(e.contains(needle), "{p}: {e}");
        }
    }

    fn request(uri: &str, host_header: Option<&str>) -> (Option<String>, Option<u16>) {
        let uri: Uri = uri.parse().unwrap();
        let mut headers = HeaderMap::new();
        if let Some(h) = host_header {
            headers.insert(http::header::HOST, HeaderValue::from_str(h).unwrap());
        }
        let rh = RequestHost::from_request(&uri, &headers);
        (
            rh.host().map(|h| String::from_utf8(h.to_vec()).unwrap()),
            rh.port(),
        )
    }

    #[test]
    fn request_host_from_authority_or_header() {
        let some = |h: &str, p| (Some(h.to_string()), Some(p));
        assert_eq!(
            request("https://Example.com/x", None),
            some("example.com", 443)
        );
        assert_eq!(
            request("http://example.com:81/", Some("other")),
            some("example.com", 81)
        );
        assert_eq!(
            request("/x", Some("Example.com.:8080")),
            some("example.com", 8080)
        );
        assert_eq!(request("/x", Some("example.com")), some("example.com", 80));
        assert_eq!(request("/x", Some("[::1]:9")), some("[::1]", 9));
        assert_eq!(request("/x", Some("[::1]")), some("[::1]", 80));
        assert_eq!(
            request("http://example.com./", None),
            some("example.com", 80)
        );
        assert_eq!(request("/x", Some("example.com:")), some("example.com", 80));
    }

    #[test]
    fn malformed_or_missing_host_is_none() {
        assert_eq!(request("/x", None), (None, None));
        assert_eq!(request("/x", Some("")), (None, None));
        assert_eq!(request("/x", Some("a.com:x")), (None, None));
        assert_eq!(request("/x", Some("a.com:99999")), (None, None));
        assert_eq!(request("/x", Some("[::1")), (None, None));
    }
}
