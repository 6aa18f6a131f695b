//! Typed forms of the policy names a configuration spells as strings.
//!
//! Names are matched case-insensitively, as YARP does; `as_str` gives YARP's spelling.
//!
//! ```
//! use fuseway::config::LoadBalancingPolicyName;
//! let p: LoadBalancingPolicyName = "roundrobin".parse().unwrap();
//! assert_eq!(p, LoadBalancingPolicyName::RoundRobin);
//! assert_eq!(p.as_str(), "RoundRobin");
//! assert!("Fastest".parse::<LoadBalancingPolicyName>().is_err());
//! ```

/// Declares a fieldless enum whose variants are spelled by string literals, with
/// case-insensitive `FromStr` (the error lists the accepted names), `as_str` and `Display`.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every accepted name, in the canonical spelling.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The canonical spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text ),+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                $(
                    if s.eq_ignore_ascii_case($text) {
                        return Ok(Self::$variant);
                    }
                )+
                Err($crate::config::names::unknown_name($kind, s, Self::NAMES))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use named_enum;

/// The message for a name that is not one of `expected`.
pub(crate) fn unknown_name(kind: &str, value: &str, expected: &[&str]) -> String {
    format!(
        "unknown {kind} `{value}`; expected one of {}",
        expected.join(", ")
    )
}

named_enum! {
    /// How a cluster picks a destination (`LoadBalancingPolicy`).
    #[derive(Default)]
    pub enum LoadBalancingPolicyName("load balancing policy") {
        /// Pick two at random, use the less loaded one (YARP's default).
        #[default]
        PowerOfTwoChoices = "PowerOfTwoChoices",
        /// The destination whose id sorts first.
        FirstAlphabetical = "FirstAlphabetical",
        /// Uniformly at random.
        Random = "Random",
        /// In turn.
        RoundRobin = "RoundRobin",
        /// The destination with the fewest requests in flight.
        LeastRequests = "LeastRequests",
    }
}

named_enum! {
    /// Where the session affinity key is carried (`SessionAffinity.Policy`).
    #[derive(Default)]
    pub enum SessionAffinityPolicyName("session affinity policy") {
        /// A cookie holding a hash of the destination id (YARP's default).
        #[default]
        HashCookie = "HashCookie",
        /// A cookie in the format of IIS' Application Request Routing.
        ArrCookie = "ArrCookie",
        /// A cookie holding the protected destination id.
        Cookie = "Cookie",
        /// A request/response header holding the protected destination id.
        CustomHeader = "CustomHeader",
    }
}

named_enum! {
    /// What happens when the affinitized destination is unavailable
    /// (`SessionAffinity.FailurePolicy`).
    #[derive(Default)]
    pub enum AffinityFailurePolicyName("affinity failure policy") {
        /// Pick another destination (YARP's default).
        #[default]
        Redistribute = "Redistribute",
        /// Answer 503.
        Return503Error = "Return503Error",
    }
}

named_enum! {
    /// When the affinity cookie is marked `Secure` (`SessionAffinity.Cookie.SecurePolicy`).
    #[derive(Default)]
    pub enum CookieSecurePolicy("cookie secure policy") {
        /// `Secure` when the request came over HTTPS (the default).
        #[default]
        SameAsRequest = "SameAsRequest",
        /// Always `Secure`.
        Always = "Always",
        /// Never `Secure`.
        None = "None",
    }
}

named_enum! {
    /// The affinity cookie's `SameSite` attribute (`SessionAffinity.Cookie.SameSite`).
    #[derive(Default)]
    pub enum CookieSameSite("cookie SameSite mode") {
        /// No `SameSite` attribute (the default).
        #[default]
        Unspecified = "Unspecified",
        /// `SameSite=None`.
        None = "None",
        /// `SameSite=Lax`.
        Lax = "Lax",
        /// `SameSite=Strict`.
        Strict = "Strict",
    }
}

named_enum! {
    /// The passive health policy (`HealthCheck.Passive.Policy`).
    #[derive(Default)]
    pub enum PassiveHealthPolicyName("passive health policy") {
        /// Unhealthy when the rate of transport failures is too high (the default).
        #[default]
        TransportFailureRate = "TransportFailureRate",
    }
}

named_enum! {
    /// The active health policy (`HealthCheck.Active.Policy`).
    #[derive(Default)]
    pub enum ActiveHealthPolicyName("active health policy") {
        /// Unhealthy after a number of failed probes in a row (the default).
        #[default]
        ConsecutiveFailures = "ConsecutiveFailures",
    }
}

named_enum! {
    /// Which destinations may receive traffic, given their health
    /// (`HealthCheck.AvailableDestinationsPolicy`).
    #[derive(Default)]
    pub enum AvailableDestinationsPolicyName("available destinations policy") {
        /// Healthy and unknown ones; all of them when none is (the default).
        #[default]
        HealthyOrPanic = "HealthyOrPanic",
        /// Healthy and unknown ones only.
        HealthyAndUnknown = "HealthyAndUnknown",
    }
}

named_enum! {
    /// How the outgoing HTTP version may differ from `HttpRequest.Version`
    /// (`HttpRequest.VersionPolicy`).
    #[derive(Default)]
    pub enum HttpVersionPolicy("HTTP version policy") {
        /// The configured version or a lower one (the default).
        #[default]
        RequestVersionOrLower = "RequestVersionOrLower",
        /// The configured version or a higher one.
        RequestVersionOrHigher = "RequestVersionOrHigher",
        /// Exactly the configured version.
        RequestVersionExact = "RequestVersionExact",
    }
}

/// The HTTP version of outgoing requests (`HttpRequest.Version`).
///
/// Accepts `"1.0"`, `"1.1"`, `"2"` and `"2.0"`; HTTP/3 is not supported. The default
/// is YARP's, `"2"` (with `RequestVersionOrLower`: HTTP/1.1 on `http://`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HttpVersion {
    /// HTTP/1.0 (sent as HTTP/1.1).
    Http10,
    /// HTTP/1.1.
    Http11,
    /// HTTP/2 (the default).
    #[default]
    Http2,
}

impl HttpVersion {
    /// The `http` crate's version.
    pub fn to_http(self) -> http::Version {
        match self {
            HttpVersion::Http10 => http::Version::HTTP_10,
            HttpVersion::Http11 => http::Version::HTTP_11,
            HttpVersion::Http2 => http::Version::HTTP_2,
        }
    }
}

impl std::str::FromStr for HttpVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "1.0" => Ok(HttpVersion::Http10),
            "1.1" => Ok(HttpVersion::Http11),
            "2" | "2.0" => Ok(HttpVersion::Http2),
            "3" | "3.0" => Err("HTTP/3 is not supported; use \"1.1\" or \"2\"".into()),
            _ => Err(unknown_name("HTTP version", s, &["1.0", "1.1", "2", "2.0"])),
        }
    }
}

impl std::fmt::Display for HttpVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HttpVersion::Http10 => "1.0",
            HttpVersion::Http11 => "1.1",
            HttpVersion::Http2 => "2",
        })
    }
}

named_enum! {
    /// What a listener serves (`Listen[].Protocols`, Kestrel's `Protocols`).
    #[derive(Default)]
    pub enum ListenProtocols("protocols") {
        /// HTTP/1.1 only: over TLS ALPN offers `http/1.1` alone; in clear a client
        /// opening with the HTTP/2 preface has its connection closed.
        Http1 = "Http1",
        /// HTTP/2 only: over TLS ALPN offers `h2` alone (a client negotiating no
        /// protocol has its connection closed); in clear, HTTP/2 with prior knowledge
        /// (a client sending anything else has its connection closed).
        Http2 = "Http2",
        /// Both, told apart by ALPN over TLS and by the first bytes in clear.
        #[default]
        Http1AndHttp2 = "Http1AndHttp2",
    }
}

named_enum! {
    /// Whether a TLS listener asks clients for a certificate: Kestrel's
    /// `ClientCertificateMode`. A certificate a client gives must chain to the system's
    /// trust store (`SSL_CERT_FILE` / `SSL_CERT_DIR` when set, as for `https://`
    /// destinations) and allow client authentication, as Kestrel checks it by default.
    #[derive(Default)]
    pub enum ClientCertificateMode("client certificate mode") {
        /// Not asked for (the default).
        #[default]
        NoCertificate = "NoCertificate",
        /// Asked for: a client may send none; one it sends must verify.
        AllowCertificate = "AllowCertificate",
        /// Required: a client without a verified certificate fails its handshake.
        RequireCertificate = "RequireCertificate",
        /// Kestrel asks only when the application asks later, which a proxy never does
        /// (YARP's `ClientCert` transform reads the certificate the handshake gave): as
        /// `NoCertificate`.
        DelayCertificate = "DelayCertificate",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive() {
        assert_eq!(
            "leastrequests".parse::<LoadBalancingPolicyName>(),
            Ok(LoadBalancingPolicyName::LeastRequests)
        );
        assert_eq!(
            "STRICT".parse::<CookieSameSite>(),
            Ok(CookieSameSite::Strict)
        );
        assert_eq!(
            LoadBalancingPolicyName::default().as_str(),
            "PowerOfTwoChoices"
        );
    }

    #[test]
    fn unknown_name_lists_accepted_ones() {
        let err = "Sticky".parse::<SessionAffinityPolicyName>().unwrap_err();
        assert!(err.contains("`Sticky`"), "{err}");
        for name in SessionAffinityPolicyName::NAMES {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn http_versions() {
        assert_eq!("2.0".parse::<HttpVersion>(), Ok(HttpVersion::Http2));
        assert_eq!("1.0".parse::<HttpVersion>(), Ok(HttpVersion::Http10));
        assert_eq!(HttpVersion::Http2.to_http(), http::Version::HTTP_2);
        assert!("3"
            .parse::<HttpVersion>()
            .unwrap_err()
            .contains("HTTP/3 is not supported"));
        assert!("1.2".parse::<HttpVersion>().unwrap_err().contains("1.1"));
    }
}

/// The TLS versions offered to `https://` destinations (`HttpClient.SslProtocols`, a
/// list of .NET's `SslProtocols` names).
///
/// `Tls12` and `Tls13` are honoured; `None` and `Default` (or no list) leave the choice
/// to the TLS library (1.2 and 1.3). `Tls` and `Tls11` beside one of those are not
/// offered (rustls does not implement them; a modern .NET on Linux does not offer them
/// either): Kestrel's own example lists `Tls11`, `Tls12`, `Tls13`. Alone, and `Ssl2` and
/// `Ssl3` anywhere, they are refused: broken, and not implemented.
///
/// ```
/// use fuseway::config::TlsVersions;
/// assert_eq!(TlsVersions::from_names(&["Tls13".into()]), Ok(TlsVersions::Tls13));
/// assert_eq!(
///     TlsVersions::from_names(&["Tls11".into(), "Tls12".into()]),
///     Ok(TlsVersions::Tls12)
/// );
/// assert!(TlsVersions::from_names(&["Tls11".into()]).is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TlsVersions {
    /// TLS 1.2 and 1.3 (the default).
    #[default]
    Both,
    /// TLS 1.2 only.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl TlsVersions {
    /// The versions a list of `SslProtocols` names allows.
    pub fn from_names(names: &[String]) -> Result<TlsVersions, String> {
        let (mut tls12, mut tls13, mut old) = (false, false, None);
        for name in names {
            match name.trim().to_ascii_lowercase().as_str() {
                "tls12" => tls12 = true,
                "tls13" => tls13 = true,
                "none" | "default" => (tls12, tls13) = (true, true),
                "tls" | "tls11" => old = Some(name),
                "ssl2" | "ssl3" => {
                    return Err(format!(
                        "`{name}` is refused: SSL is broken and not supported; use `Tls12` \
                         and/or `Tls13`"
                    ))
                }
                _ => {
                    return Err(unknown_name(
                        "SSL protocol",
                        name,
                        &["Tls12", "Tls13", "None", "Default"],
                    ))
                }
            }
        }
        if let (Some(name), false, false) = (old, tls12, tls13) {
            return Err(format!(
                "`{name}` alone is refused: TLS 1.0 and 1.1 are broken and not supported; \
                 use `Tls12` and/or `Tls13`"
            ));
        }
        Ok(match (tls12, tls13) {
            (true, false) => TlsVersions::Tls12,
            (false, true) => TlsVersions::Tls13,
            _ => TlsVersions::Both,
        })
    }
}
