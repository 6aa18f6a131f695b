//! ASP.NET's `Logging` section: its log levels (`Logging.LogLevel`, and the console
//! provider's `Logging.Console.LogLevel` over them — fuseway's log is its console), which
//! the binary takes as its log filter when `RUST_LOG` is not set (reloads change it).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A .NET log level, as `Logging.LogLevel` names them (any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// `Trace`.
    Trace,
    /// `Debug`.
    Debug,
    /// `Information`.
    Information,
    /// `Warning`.
    Warning,
    /// `Error`.
    Error,
    /// `Critical` (fuseway's most severe level is `error`).
    Critical,
    /// `None`: nothing.
    None,
}

const LEVELS: [(&str, LogLevel); 7] = [
    ("Trace", LogLevel::Trace),
    ("Debug", LogLevel::Debug),
    ("Information", LogLevel::Information),
    ("Warning", LogLevel::Warning),
    ("Error", LogLevel::Error),
    ("Critical", LogLevel::Critical),
    ("None", LogLevel::None),
];

impl LogLevel {
    /// Its name in `.NET`.
    pub fn as_str(self) -> &'static str {
        LEVELS
            .iter()
            .find(|(_, level)| *level == self)
            .map_or("None", |(name, _)| name)
    }

    /// The `tracing` level it stands for, as a filter directive writes it.
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Information => "info",
            LogLevel::Warning => "warn",
            LogLevel::Error | LogLevel::Critical => "error",
            LogLevel::None => "off",
        }
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LEVELS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s.trim()))
            .map(|(_, level)| *level)
            .ok_or_else(|| {
                let names: Vec<&str> = LEVELS.iter().map(|(name, _)| *name).collect();
                format!(
                    "`{s}` is not a log level; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for LogLevel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LogLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// ASP.NET's `Logging` section (also `Logging` beside `Routes` in fuseway's own shape):
/// what of it fuseway reads. Its other providers' sections and settings configure
/// ASP.NET's loggers and are not read.
///
/// ```
/// use fuseway::config::{parse, Format};
///
/// let config = parse(
///     r#"{ "Logging": { "LogLevel": { "Default": "Warning", "Yarp": "Debug", "Microsoft": "Error" } },
///          "ReverseProxy": {} }"#,
///     Format::Json,
/// )
/// .unwrap();
/// // `Yarp` is fuseway's own log; `Microsoft` names none of it.
/// assert_eq!(config.logging.directives().as_deref(), Some("warn,fuseway=debug"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct LoggingConfig {
    /// The minimum level of each category (`Default`: of every category not named).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub log_level: BTreeMap<String, LogLevel>,
    /// The console provider's own levels, over `LogLevel`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<ConsoleLogging>,
}

/// `Logging.Console`: the console provider's levels (its formatting settings are not
/// read).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct ConsoleLogging {
    /// The minimum level of each category, over `Logging.LogLevel`'s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub log_level: BTreeMap<String, LogLevel>,
}

impl LoggingConfig {
    /// No level is set.
    pub fn is_empty(&self) -> bool {
        self.log_level.is_empty()
            && self
                .console
                .as_ref()
                .is_none_or(|console| console.log_level.is_empty())
    }

    /// The log filter these levels make, in `RUST_LOG`'s syntax (`None` when none is
    /// set): `Default` is every target's level (ASP.NET's default, `Information`, when
    /// it is not set); `Yarp` and its sub-categories (the most specific named) are
    /// fuseway's own log (`fuseway`), as are `Fuseway` and its sub-categories
    /// (`Fuseway.Server` is `fuseway::server`); other categories name ASP.NET's loggers,
    /// which fuseway does not have, and are left out. Category names match in any case.
    pub fn directives(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        // The console's levels over the general ones, categories in any case.
        let mut levels: BTreeMap<String, (&str, LogLevel)> = BTreeMap::new();
        let console = self.console.iter().flat_map(|c| &c.log_level);
        for (category, level) in self.log_level.iter().chain(console) {
            levels.insert(category.to_ascii_lowercase(), (category, *level));
        }
        let default = levels
            .get("default")
            .map_or(LogLevel::Information, |(_, level)| *level);
        // Each target's level, from its most specific category.
        let mut targets: BTreeMap<String, (usize, LogLevel)> = BTreeMap::new();
        for (category, (_, level)) in &levels {
            let target = if category == "yarp" || category.starts_with("yarp.") {
                "fuseway".to_string()
            } else if category == "fuseway"
                || category.starts_with("fuseway.")
                || category.starts_with("fuseway::")
            {
                category.replace('.', "::")
            } else {
                continue;
            };
            let entry = targets.entry(target).or_insert((0, *level));
            if category.len() >= entry.0 {
                *entry = (category.len(), *level);
            }
        }
        let mut directives = default.directive().to_string();
        for (target, (_, level)) in targets {
            directives.push_str(&format!(",{target}={}", level.directive()));
        }
        Some(directives)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logging(general: &[(&str, LogLevel)], console: &[(&str, LogLevel)]) -> LoggingConfig {
        let map = |pairs: &[(&str, LogLevel)]| {
            pairs
                .iter()
                .map(|(c, l)| (c.to_string(), *l))
                .collect::<BTreeMap<_, _>>()
        };
        LoggingConfig {
            log_level: map(general),
            console: (!console.is_empty()).then(|| ConsoleLogging {
                log_level: map(console),
            }),
        }
    }

    #[test]
    fn levels_become_directives() {
        use LogLevel::{Critical, Debug, Error, Information, Trace, Warning};
        assert_eq!(logging(&[], &[]).directives(), None);
        // YARP's template: ASP.NET's categories name none of fuseway's log.
        let template = logging(
            &[("Default", Information), ("Microsoft.AspNetCore", Warning)],
            &[],
        );
        assert_eq!(template.directives().as_deref(), Some("info"));
        assert_eq!(
            logging(&[("Yarp", Debug)], &[]).directives().as_deref(),
            Some("info,fuseway=debug")
        );
        // The most specific Yarp category wins; fuseway's own modules by name.
        let both = logging(
            &[
                ("Default", Warning),
                ("Yarp", Error),
                ("Yarp.ReverseProxy", Trace),
                ("Fuseway.Server", Debug),
            ],
            &[],
        );
        assert_eq!(
            both.directives().as_deref(),
            Some("warn,fuseway=trace,fuseway::server=debug")
        );
        // The console's levels over the general ones, in any case; None and Critical.
        let console = logging(
            &[("Default", Information), ("yarp", Debug)],
            &[("DEFAULT", LogLevel::None), ("Yarp", Critical)],
        );
        assert_eq!(console.directives().as_deref(), Some("off,fuseway=error"));
    }

    #[test]
    fn level_names() {
        assert_eq!("information".parse::<LogLevel>(), Ok(LogLevel::Information));
        assert_eq!(" Warning ".parse::<LogLevel>(), Ok(LogLevel::Warning));
        let e = "Verbose".parse::<LogLevel>().unwrap_err();
        assert!(
            e.contains("`Verbose` is not a log level") && e.contains("Information"),
            "{e}"
        );
        for (name, level) in LEVELS {
            assert_eq!(level.as_str(), name);
        }
    }
}
