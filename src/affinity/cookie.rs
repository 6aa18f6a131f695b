//! The affinity cookie: finding it in a request's `Cookie` headers and writing its
//! `Set-Cookie` the way ASP.NET Core does (attribute names in lower case, in the order
//! `expires; max-age; domain; path; secure; samesite; httponly`).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::COOKIE;
use http::HeaderMap;

use crate::config::{AffinityCookieConfig, ConfigError, CookieSameSite, CookieSecurePolicy};

/// What a request's `Cookie` headers hold under one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found<'a> {
    /// No cookie of that name.
    Absent,
    /// Exactly one, with this value (surrounding double quotes removed).
    One(&'a [u8]),
    /// The name more than once: ambiguous.
    Many,
}

/// Find the cookie `name` in every `Cookie` header line (HTTP/2 clients may send one line
/// per cookie). Names compare ASCII case-insensitively, as ASP.NET Core's request
/// cookies do; pairs without `=` are skipped. Does not allocate.
pub(crate) fn find_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Found<'a> {
    let name = name.as_bytes();
    let mut found = None;
    for line in headers.get_all(COOKIE) {
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            let (pair, next) = match memchr::memchr(b';', rest) {
                Some(end) => (&rest[..end], &rest[end + 1..]),
                None => (rest, &[][..]),
            };
            rest = next;
            let Some(eq) = memchr::memchr(b'=', pair) else {
                continue;
            };
            if !trim(&pair[..eq]).eq_ignore_ascii_case(name) {
                continue;
            }
            if found.is_some() {
                return Found::Many;
            }
            found = Some(unquote(trim(&pair[eq + 1..])));
        }
    }
    found.map_or(Found::Absent, Found::One)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn unquote(s: &[u8]) -> &[u8] {
    match s {
        [b'"', inner @ .., b'"'] => inner,
        _ => s,
    }
}

/// Whether `name` is an RFC 6265 cookie name (an RFC 7230 token).
pub(crate) fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` may be a `Path`/`Domain` attribute value: visible ASCII or spaces,
/// no `;`.
fn is_attribute_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b';')
}

/// How the affinity cookie is written, precomputed from the configuration.
#[derive(Debug)]
pub(crate) struct CookieFormat {
    pub(crate) name: Box<str>,
    expiration: Option<Duration>,
    /// `; max-age=..; domain=..; path=..`
    middle: Box<str>,
    /// `; samesite=..; httponly`
    tail: Box<str>,
    secure: CookieSecurePolicy,
}

impl CookieFormat {
    /// `path` is the `SessionAffinity` config path, for errors.
    pub(crate) fn from_config(
        name: &str,
        config: Option<&AffinityCookieConfig>,
        path: &str,
    ) -> Result<Self, ConfigError> {
        if !is_token(name) {
            return Err(ConfigError::new(
                format!("{path}.AffinityKeyName"),
                format!("`{name}` is not a valid cookie name"),
            ));
        }
        let default = AffinityCookieConfig::default();
        let c = config.unwrap_or(&default);
        let path = format!("{path}.Cookie");
        let secure =
            parse_name::<CookieSecurePolicy>(c.secure_policy.as_deref(), &path, "SecurePolicy")?;
        let same_site = parse_name::<CookieSameSite>(c.same_site.as_deref(), &path, "SameSite")?;
        let positive =
            |d: Option<crate::config::ConfigDuration>, field: &str| match d.map(|d| d.get()) {
                Some(d) if d.is_zero() => Err(ConfigError::new(
                    format!("{path}.{field}"),
                    "must be positive",
                )),
                d => Ok(d),
            };
        let expiration = positive(c.expiration, "Expiration")?;
        let max_age = positive(c.max_age, "MaxAge")?;

        let mut middle = String::new();
        if let Some(max_age) = max_age {
            // ASP.NET writes the whole seconds of `MaxAge`.
            let _ = write!(middle, "; max-age={}", max_age.as_secs());
        }
        if let Some(domain) = &c.domain {
            if !is_attribute_value(domain) || domain.is_empty() {
                return Err(ConfigError::new(
                    format!("{path}.Domain"),
                    format!("`{domain}` is not a valid cookie domain"),
                ));
            }
            let _ = write!(middle, "; domain={domain}");
        }
        let cookie_path = c.path.as_deref().unwrap_or("/");
        if !is_attribute_value(cookie_path) {
            return Err(ConfigError::new(
                format!("{path}.Path"),
                format!("`{cookie_path}` is not a valid cookie path"),
            ));
        }
        let _ = write!(middle, "; path={cookie_path}");

        let mut tail = String::new();
        match same_site {
            CookieSameSite::Unspecified => {}
            CookieSameSite::None => tail.push_str("; samesite=none"),
            CookieSameSite::Lax => tail.push_str("; samesite=lax"),
            CookieSameSite::Strict => tail.push_str("; samesite=strict"),
        }
        if c.http_only.unwrap_or(true) {
            tail.push_str("; httponly");
        }
        Ok(CookieFormat {
            name: Box::from(name),
            expiration,
            middle: middle.into_boxed_str(),
            tail: tail.into_boxed_str(),
            secure,
        })
    }

    /// Whether the header depends on the time (it has an `Expires`).
    pub(crate) fn has_expires(&self) -> bool {
        self.expiration.is_some()
    }

    /// Whether the cookie is `Secure` for a request that came over TLS (`request_secure`)
    /// or not.
    pub(crate) fn is_secure(&self, request_secure: bool) -> bool {
        match self.secure {
            CookieSecurePolicy::Always => true,
            CookieSecurePolicy::None => false,
            CookieSecurePolicy::SameAsRequest => request_secure,
        }
    }

    /// The `Set-Cookie` value for `value`; `now` is used for `Expires`.
    pub(crate) fn set_cookie(&self, value: &str, secure: bool, now: SystemTime) -> String {
        let mut s = String::with_capacity(
            self.name.len() + 1 + value.len() + 38 + self.middle.len() + 8 + self.tail.len(),
        );
        s.push_str(&self.name);
        s.push('=');
        s.push_str(value);
        if let Some(expiration) = self.expiration {
            s.push_str("; expires=");
            write_imf_fixdate(&mut s, now.checked_add(expiration));
        }
        s.push_str(&self.middle);
        if secure {
            s.push_str("; secure");
        }
        s.push_str(&self.tail);
        s
    }
}

fn parse_name<T: std::str::FromStr<Err = String> + Default>(
    value: Option<&str>,
    path: &str,
    field: &str,
) -> Result<T, ConfigError> {
    value.map_or(Ok(T::default()), |v| {
        v.parse()
            .map_err(|m| ConfigError::new(format!("{path}.{field}"), m))
    })
}

/// The last second that fits the four-digit years of an IMF-fixdate:
/// 9999-12-31T23:59:59Z.
const MAX_SECS: u64 = 253_402_300_799;

/// Write `t` as an RFC 9110 IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the format of
/// .NET's `"r"`. Times before 1970 are written as the epoch; unrepresentable or later than
/// year 9999 (`None`: the addition overflowed) as 9999-12-31T23:59:59.
pub(crate) fn write_imf_fixdate(out: &mut String, t: Option<SystemTime>) {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = match t {
        Some(t) => t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .min(MAX_SECS),
        None => MAX_SECS,
    };
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    // 1970-01-01 was a Thursday.
    let weekday = DAYS[((days + 4) % 7) as usize];
    let _ = write!(
        out,
        "{weekday}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
}

/// (year, month 1-12, day 1-31) of `days` days after 1970-01-01, proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`, for non-negative days).
pub(crate) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(COOKIE, HeaderValue::from_str(l).unwrap());
        }
        h
    }

    #[test]
    fn finds_the_cookie_among_others_and_lines() {
        let h = headers(&["a=1; My.Affinity=abc; b=2"]);
        assert_eq!(find_cookie(&h, "My.Affinity"), Found::One(b"abc"));
        let h = headers(&["a=1", "My.Affinity=abc", "b=2"]);
        assert_eq!(find_cookie(&h, "My.Affinity"), Found::One(b"abc"));
        let h = headers(&["a=1;My.Affinity = \"abc\" ;b"]);
        assert_eq!(find_cookie(&h, "My.Affinity"), Found::One(b"abc"));
        let h = headers(&["my.affinity=abc"]);
        assert_eq!(find_cookie(&h, "My.Affinity"), Found::One(b"abc"));
        let h = headers(&["xMy.Affinity=abc; My.AffinityX=def; My.Affinity"]);
        assert_eq!(find_cookie(&h, "My.Affinity"), Found::Absent);
        assert_eq!(find_cookie(&HeaderMap::new(), "k"), Found::Absent);
        let h = headers(&["k="]);
        assert_eq!(find_cookie(&h, "k"), Found::One(b""));
        let h = headers(&["k=a=b"]);
        assert_eq!(find_cookie(&h, "k"), Found::One(b"a=b"));
    }

    #[test]
    fn the_same_name_twice_is_ambiguous() {
        let h = headers(&["k=1; k=2"]);
        assert_eq!(find_cookie(&h, "k"), Found::Many);
        let h = headers(&["k=1", "K=1"]);
        assert_eq!(find_cookie(&h, "k"), Found::Many);
    }

    #[test]
    fn non_utf8_bytes_are_tolerated() {
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_bytes(b"x=\xff\xfe; k=v").unwrap());
        assert_eq!(find_cookie(&h, "k"), Found::One(b"v"));
    }

    #[test]
    fn cookie_names_are_tokens() {
        assert!(is_token(".Fuseway.Affinity"));
        assert!(is_token("My.Affinity"));
        assert!(!is_token(""));
        assert!(!is_token("a b"));
        assert!(!is_token("a;b"));
        assert!(!is_token("a=b"));
        assert!(!is_token("é"));
    }

    fn fixdate(secs: u64) -> String {
        let mut s = String::new();
        write_imf_fixdate(&mut s, Some(UNIX_EPOCH + Duration::from_secs(secs)));
        s
    }

    #[test]
    fn imf_fixdate() {
        // RFC 9110's example.
        assert_eq!(fixdate(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(fixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(fixdate(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(fixdate(4_107_542_400), "Mon, 01 Mar 2100 00:00:00 GMT");
        assert_eq!(fixdate(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(fixdate(MAX_SECS), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(fixdate(u64::MAX / 4), "Fri, 31 Dec 9999 23:59:59 GMT");
        let mut s = String::new();
        write_imf_fixdate(&mut s, None);
        assert_eq!(s, "Fri, 31 Dec 9999 23:59:59 GMT");
        let mut s = String::new();
        write_imf_fixdate(&mut s, UNIX_EPOCH.checked_sub(Duration::from_secs(5)));
        assert_eq!(s, "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn civil_from_days_agrees_with_a_day_by_day_count() {
        let (mut y, mut m, mut d) = (1970u64, 1u64, 1u64);
        for days in 0..(400 * 366) {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ][(m - 1) as usize];
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
