//! Durations in either YARP's `"00:01:40"` (TimeSpan) form or `"100s"`/`"250ms"`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration read from configuration.
///
/// Accepts .NET TimeSpan strings (`"00:01:40"`, `"1.00:00:00"`, `"00:00:00.250"`) and
/// unit strings (`"100s"`, `"250ms"`, `"2m"`, `"1h"`, `"1.5s"`).
///
/// ```
/// use fuseway::config::ConfigDuration;
/// let a: ConfigDuration = "00:01:40".parse().unwrap();
/// let b: ConfigDuration = "100s".parse().unwrap();
/// assert_eq!(a, b);
/// assert_eq!(a.get(), std::time::Duration::from_secs(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl From<Duration> for ConfigDuration {
    fn from(d: Duration) -> Self {
        ConfigDuration(d)
    }
}

impl FromStr for ConfigDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty duration".into());
        }
        if s.contains(':') {
            parse_timespan(s)
        } else {
            parse_units(s)
        }
        .map(ConfigDuration)
        .ok_or_else(|| {
            format!("invalid duration `{s}`: expected `hh:mm:ss[.fff]`, `d.hh:mm:ss` or a number with a unit (`250ms`, `100s`, `2m`, `1h`)")
        })
    }
}

fn parse_units(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86400.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

fn parse_timespan(s: &str) -> Option<Duration> {
    // [d.]hh:mm[:ss[.fffffff]]
    let mut parts = s.split(':');
    let first = parts.next()?;
    let (days, hours) = match first.split_once('.') {
        Some((d, h)) => (d.parse::<u64>().ok()?, h.parse::<u64>().ok()?),
        None => (0, first.parse::<u64>().ok()?),
    };
    let minutes: u64 = parts.next()?.parse().ok()?;
    let (seconds, nanos) = match parts.next() {
        None => (0, 0),
        Some(sec) => match sec.split_once('.') {
            None => (sec.parse::<u64>().ok()?, 0),
            Some((whole, frac)) => {
                if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let nanos = frac.parse::<u32>().ok()? * 10u32.pow(9 - frac.len() as u32);
                (whole.parse::<u64>().ok()?, nanos)
            }
        },
    };
    if parts.next().is_some() || hours > 23 || minutes > 59 || seconds > 59 {
        return None;
    }
    let secs = days * 86400 + hours * 3600 + minutes * 60 + seconds;
    Some(Duration::new(secs, nanos))
}

impl fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{}s", d.as_secs())
        } else {
            write!(f, "{}ms", d.as_secs_f64() * 1000.0)
        }
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Option<Duration> {
        s.parse::<ConfigDuration>().ok().map(|d| d.0)
    }

    #[test]
    fn timespan_and_units() {
        assert_eq!(p("00:01:40"), Some(Duration::from_secs(100)));
        assert_eq!(p("1.00:00:01"), Some(Duration::from_secs(86401)));
        assert_eq!(p("00:00:00.250"), Some(Duration::from_millis(250)));
        assert_eq!(p("100s"), Some(Duration::from_secs(100)));
        assert_eq!(p("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(p("2m"), Some(Duration::from_secs(120)));
        assert_eq!(p("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(p("1h"), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "10",
            "abc",
            "10x",
            "00:61:00",
            "1:2:3:4",
            "00:00:00.",
            "-5s",
        ] {
            assert!(p(bad).is_none(), "{bad:?} should be rejected");
        }
    }
}
