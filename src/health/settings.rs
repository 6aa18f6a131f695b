//! A cluster's health settings, resolved once per configuration load.

use std::time::Duration;

use http::uri::Uri;

use crate::config::{
    ActiveHealthConfig, AvailableDestinationsPolicyName, ClusterConfig, ConfigDuration,
    ConfigError, PassiveHealthConfig,
};

/// Cluster metadata key overriding the failure rate (0 < rate <= 1) at which passive
/// health marks a destination unhealthy (YARP's name; default 0.3).
pub const RATE_LIMIT_METADATA: &str = "TransportFailureRateHealthPolicy.RateLimit";
/// Cluster metadata key setting the passive detection window (fuseway extension; a
/// duration such as `"60s"` or `"00:01:00"`; default 60 s). YARP configures it globally.
pub const DETECTION_WINDOW_METADATA: &str = "TransportFailureRateHealthPolicy.DetectionWindowSize";
/// Cluster metadata key setting the fewest requests in the window before passive health
/// judges a destination (fuseway extension; default 10). YARP configures it globally.
pub const MINIMAL_TOTAL_COUNT_METADATA: &str =
    "TransportFailureRateHealthPolicy.MinimalTotalCountThreshold";
/// Cluster metadata key setting the consecutive failed probes that make a destination
/// unhealthy (YARP's name; `HealthCheck.Active.Threshold` wins over it; default 2).
pub const THRESHOLD_METADATA: &str = "ConsecutiveFailuresHealthPolicy.Threshold";

/// Default passive detection window (YARP's `DetectionWindowSize`).
pub const DEFAULT_DETECTION_WINDOW: Duration = Duration::from_secs(60);
/// Default fewest requests in the window before a destination is judged.
pub const DEFAULT_MINIMAL_TOTAL_COUNT: u32 = 10;
/// Default failure rate that makes a destination passively unhealthy.
pub const DEFAULT_FAILURE_RATE_LIMIT: f64 = 0.3;
/// Default time a passively unhealthy destination stays out of rotation (before the
/// detection window is taken into account, see [`PassiveSettings::reactivation`]).
pub const DEFAULT_REACTIVATION_PERIOD: Duration = Duration::from_secs(60);
/// Default time between active probes.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// Default active probe timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default consecutive failed probes that make a destination unhealthy.
pub const DEFAULT_THRESHOLD: u32 = 2;

/// A cluster's health settings, resolved from its `HealthCheck` configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterHealth {
    pub(crate) policy: AvailableDestinationsPolicyName,
    pub(crate) passive: Option<PassiveSettings>,
    pub(crate) active: Option<ActiveSettings>,
}

impl ClusterHealth {
    /// Resolve from `config`; `path` is the cluster's config path (`Clusters.c1`).
    pub(crate) fn from_config(config: &ClusterConfig, path: &str) -> Result<Self, ConfigError> {
        let Some(health) = &config.health_check else {
            return Ok(ClusterHealth::default());
        };
        let path = format!("{path}.HealthCheck");
        let policy = match &health.available_destinations_policy {
            Some(name) => name
                .parse()
                .map_err(|m| ConfigError::new(format!("{path}.AvailableDestinationsPolicy"), m))?,
            None => AvailableDestinationsPolicyName::default(),
        };
        let passive = match &health.passive {
            Some(p) if p.enabled == Some(true) => Some(PassiveSettings::from_config(
                p,
                config,
                &format!("{path}.Passive"),
            )?),
            _ => None,
        };
        let active = match &health.active {
            Some(a) if a.enabled == Some(true) => Some(ActiveSettings::from_config(
                a,
                config,
                &format!("{path}.Active"),
            )?),
            _ => None,
        };
        Ok(ClusterHealth {
            policy,
            passive,
            active,
        })
    }

    /// The `AvailableDestinationsPolicy`.
    pub fn available_destinations_policy(&self) -> AvailableDestinationsPolicyName {
        self.policy
    }

    /// Passive health settings, when passive health is enabled.
    pub fn passive(&self) -> Option<&PassiveSettings> {
        self.passive.as_ref()
    }

    /// Active health settings, when active health is enabled.
    pub fn active(&self) -> Option<&ActiveSettings> {
        self.active.as_ref()
    }
}

/// Settings of the passive `TransportFailureRate` policy of a cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct PassiveSettings {
    /// How long a request counts in the failure rate (metadata
    /// `TransportFailureRateHealthPolicy.DetectionWindowSize`, default 60 s).
    pub detection_window: Duration,
    /// Fewest requests in the window before the rate is judged (metadata
    /// `TransportFailureRateHealthPolicy.MinimalTotalCountThreshold`, default 10).
    pub minimal_total_count: u32,
    /// Failure rate at or above which the destination is unhealthy (metadata
    /// `TransportFailureRateHealthPolicy.RateLimit`, default 0.3).
    pub failure_rate_limit: f64,
    /// `ReactivationPeriod` (default 60 s).
    pub reactivation_period: Duration,
    /// `CountServerErrors`: a 5xx answer of the destination is a failure too.
    pub count_server_errors: bool,
}

impl Default for PassiveSettings {
    fn default() -> Self {
        PassiveSettings {
            detection_window: DEFAULT_DETECTION_WINDOW,
            minimal_total_count: DEFAULT_MINIMAL_TOTAL_COUNT,
            failure_rate_limit: DEFAULT_FAILURE_RATE_LIMIT,
            reactivation_period: DEFAULT_REACTIVATION_PERIOD,
            count_server_errors: false,
        }
    }
}

impl PassiveSettings {
    fn from_config(
        passive: &PassiveHealthConfig,
        cluster: &ClusterConfig,
        path: &str,
    ) -> Result<Self, ConfigError> {
        let metadata_path = |key: &str| format!("{}.Metadata.{key}", cluster_path(path));
        let meta = |key: &str| cluster.metadata.get(key).map(|v| v.trim());
        let mut settings = PassiveSettings {
            reactivation_period: passive
                .reactivation_period
                .map_or(DEFAULT_REACTIVATION_PERIOD, ConfigDuration::get),
            count_server_errors: passive.count_server_errors.unwrap_or(false),
            ..PassiveSettings::default()
        };
        if let Some(v) = meta(RATE_LIMIT_METADATA) {
            settings.failure_rate_limit = v
                .parse::<f64>()
                .ok()
                .filter(|r| *r > 0.0 && *r <= 1.0)
                .ok_or_else(|| {
                ConfigError::new(
                    metadata_path(RATE_LIMIT_METADATA),
                    format!("`{v}` is not a failure rate: expected a number in (0, 1]"),
                )
            })?;
        }
        if let Some(v) = meta(DETECTION_WINDOW_METADATA) {
            settings.detection_window = v
                .parse::<ConfigDuration>()
                .map_err(|m| ConfigError::new(metadata_path(DETECTION_WINDOW_METADATA), m))?
                .get();
            if settings.detection_window.is_zero() {
                return Err(ConfigError::new(
                    metadata_path(DETECTION_WINDOW_METADATA),
                    "must be greater than 0",
                ));
            }
        }
        if let Some(v) = meta(MINIMAL_TOTAL_COUNT_METADATA) {
            settings.minimal_total_count = v.parse().map_err(|_| {
                ConfigError::new(
                    metadata_path(MINIMAL_TOTAL_COUNT_METADATA),
                    format!("`{v}` is not a request count"),
                )
            })?;
        }
        Ok(settings)
    }

    /// How long a passively unhealthy destination stays out of rotation:
    /// `max(ReactivationPeriod, detection window)`, so that the failures that made it
    /// unhealthy have left the window when it comes back.
    pub fn reactivation(&self) -> Duration {
        self.reactivation_period.max(self.detection_window)
    }

    /// Width of one bucket of the sliding window: 1 s as in YARP, finer for windows
    /// under 10 s (a tenth of the window, at least 1 ms).
    pub(crate) fn bucket(&self) -> Duration {
        (self.detection_window / 10)
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(1))
    }
}

/// Settings of the active `ConsecutiveFailures` policy of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveSettings {
    /// Time between probes (`Interval`, default 15 s).
    pub interval: Duration,
    /// Probe timeout (`Timeout`, default 10 s).
    pub timeout: Duration,
    /// Failed probes in a row that make a destination unhealthy (`Threshold`, else the
    /// `ConsecutiveFailuresHealthPolicy.Threshold` metadata, default 2).
    pub threshold: u32,
    /// Probe path (`Path`), appended to the probe address' path.
    pub path: Option<String>,
    /// Probe query string including its `?` (`Query`), empty for none.
    pub query: String,
}

impl Default for ActiveSettings {
    fn default() -> Self {
        ActiveSettings {
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            threshold: DEFAULT_THRESHOLD,
            path: None,
            query: String::new(),
        }
    }
}

impl ActiveSettings {
    fn from_config(
        active: &ActiveHealthConfig,
        cluster: &ClusterConfig,
        path: &str,
    ) -> Result<Self, ConfigError> {
        let threshold = match (active.threshold, cluster.metadata.get(THRESHOLD_METADATA)) {
            (Some(0), _) => {
                return Err(ConfigError::new(
                    format!("{path}.Threshold"),
                    "must be greater than 0",
                ))
            }
            (Some(t), _) => t,
            // YARP reads this metadata as a number; a fractional threshold is reached at
            // the next whole failure.
            (None, Some(v)) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0 && *t <= f64::from(u32::MAX))
                .map(|t| t.ceil() as u32)
                .ok_or_else(|| {
                    ConfigError::new(
                        format!("{}.Metadata.{THRESHOLD_METADATA}", cluster_path(path)),
                        format!("`{v}` is not a failure count: expected a number greater than 0"),
                    )
                })?,
            (None, None) => DEFAULT_THRESHOLD,
        };
        let query = match active.query.as_deref().map(str::trim) {
            None | Some("") | Some("?") => String::new(),
            Some(q) => format!("?{}", q.trim_start_matches('?')),
        };
        if let Some(p) = &active.path {
            if !p.starts_with('/') {
                return Err(ConfigError::new(
                    format!("{path}.Path"),
                    format!("`{p}` must start with `/`"),
                ));
            }
        }
        let probe = format!("http://x{}{query}", active.path.as_deref().unwrap_or("/"));
        if let Err(e) = probe.parse::<Uri>() {
            let field = if active
                .path
                .as_deref()
                .is_some_and(|p| format!("http://x{p}").parse::<Uri>().is_err())
            {
                "Path"
            } else {
                "Query"
            };
            return Err(ConfigError::new(
                format!("{path}.{field}"),
                format!("does not form a valid probe URI: {e}"),
            ));
        }
        Ok(ActiveSettings {
            interval: active
                .interval
                .map_or(DEFAULT_INTERVAL, ConfigDuration::get),
            timeout: active.timeout.map_or(DEFAULT_TIMEOUT, ConfigDuration::get),
            threshold,
            path: active.path.clone(),
            query,
        })
    }
}

/// `Clusters.c1` from `Clusters.c1.HealthCheck.Passive`.
fn cluster_path(path: &str) -> &str {
    path.find(".HealthCheck").map_or(path, |i| &path[..i])
}

/// Compiled for every cluster when a state is built (the health stages'
/// [`ClusterData`](crate::state::ClusterData)).
impl crate::state::ClusterData for ClusterHealth {
    fn compile(
        source: &crate::state::ClusterSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, crate::config::ConfigErrors> {
        Ok(Some(ClusterHealth::from_config(
            source.config,
            source.path,
        )?))
    }
}

impl crate::state::Cluster {
    /// Its health settings (compiled by the health stages).
    pub fn health(&self) -> &ClusterHealth {
        static NONE_COMPILED: std::sync::LazyLock<ClusterHealth> =
            std::sync::LazyLock::new(ClusterHealth::default);
        self.data::<ClusterHealth>()
            .unwrap_or_else(|| &NONE_COMPILED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Format};

    fn cluster(json: &str) -> ClusterConfig {
        let config = parse(
            &format!(r#"{{ "Clusters": {{ "c": {json} }} }}"#),
            Format::Json,
        )
        .unwrap();
        config.clusters["c"].clone()
    }

    fn resolve(json: &str) -> Result<ClusterHealth, ConfigError> {
        ClusterHealth::from_config(&cluster(json), "Clusters.c")
    }

    #[test]
    fn defaults_and_disabled_checks() {
        let h = resolve("{}").unwrap();
        assert_eq!(
            h.available_destinations_policy(),
            AvailableDestinationsPolicyName::HealthyOrPanic
        );
        assert!(h.passive().is_none() && h.active().is_none());
        let h = resolve(
            r#"{ "HealthCheck": { "Passive": { "Enabled": false }, "Active": { "Path": "/h" },
                 "AvailableDestinationsPolicy": "healthyandunknown" } }"#,
        )
        .unwrap();
        assert!(h.passive().is_none() && h.active().is_none());
        assert_eq!(
            h.available_destinations_policy(),
            AvailableDestinationsPolicyName::HealthyAndUnknown
        );
        let h = resolve(
            r#"{ "HealthCheck": { "Passive": { "Enabled": true }, "Active": { "Enabled": true } } }"#,
        )
        .unwrap();
        let p = h.passive().unwrap();
        assert_eq!(*p, PassiveSettings::default());
        assert_eq!(p.reactivation(), Duration::from_secs(60));
        assert_eq!(p.bucket(), Duration::from_secs(1));
        assert_eq!(*h.active().unwrap(), ActiveSettings::default());
    }

    #[test]
    fn passive_settings_and_metadata() {
        let h = resolve(
            r#"{ "HealthCheck": { "Passive": { "Enabled": true, "ReactivationPeriod": "00:00:05",
                   "CountServerErrors": true } },
                 "Metadata": { "TransportFailureRateHealthPolicy.RateLimit": "0.5",
                   "TransportFailureRateHealthPolicy.DetectionWindowSize": "2s",
                   "TransportFailureRateHealthPolicy.MinimalTotalCountThreshold": "4" } }"#,
        )
        .unwrap();
        let p = h.passive().unwrap();
        assert_eq!(p.failure_rate_limit, 0.5);
        assert_eq!(p.detection_window, Duration::from_secs(2));
        assert_eq!(p.minimal_total_count, 4);
        assert!(p.count_server_errors);
        assert_eq!(p.reactivation(), Duration::from_secs(5));
        assert_eq!(p.bucket(), Duration::from_millis(200));
    }

    #[test]
    fn bad_metadata_names_its_key() {
        for (key, value) in [
            (RATE_LIMIT_METADATA, "0"),
            (RATE_LIMIT_METADATA, "lots"),
            (RATE_LIMIT_METADATA, "1.5"),
            (DETECTION_WINDOW_METADATA, "soon"),
            (DETECTION_WINDOW_METADATA, "0s"),
            (MINIMAL_TOTAL_COUNT_METADATA, "-1"),
        ] {
            let err = resolve(&format!(
                r#"{{ "HealthCheck": {{ "Passive": {{ "Enabled": true }} }},
                     "Metadata": {{ "{key}": "{value}" }} }}"#
            ))
            .unwrap_err();
            assert_eq!(err.path, format!("Clusters.c.Metadata.{key}"), "{value}");
        }
        // Ignored while the check is off.
        resolve(&format!(
            r#"{{ "Metadata": {{ "{RATE_LIMIT_METADATA}": "x", "{THRESHOLD_METADATA}": "y" }} }}"#
        ))
        .unwrap();
    }

    #[test]
    fn active_settings_threshold_and_probe_parts() {
        let h = resolve(
            r#"{ "HealthCheck": { "Active": { "Enabled": true, "Interval": "100ms",
                   "Timeout": "50ms", "Path": "/health", "Query": "a=1" } },
                 "Metadata": { "ConsecutiveFailuresHealthPolicy.Threshold": "2.5" } }"#,
        )
        .unwrap();
        let a = h.active().unwrap();
        assert_eq!(a.interval, Duration::from_millis(100));
        assert_eq!(a.timeout, Duration::from_millis(50));
        assert_eq!(a.threshold, 3);
        assert_eq!(a.path.as_deref(), Some("/health"));
        assert_eq!(a.query, "?a=1");
        let h = resolve(
            r#"{ "HealthCheck": { "Active": { "Enabled": true, "Threshold": 5, "Query": "?b=2" } },
                 "Metadata": { "ConsecutiveFailuresHealthPolicy.Threshold": "2" } }"#,
        )
        .unwrap();
        assert_eq!(h.active().unwrap().threshold, 5, "the config field wins");
        assert_eq!(h.active().unwrap().query, "?b=2");
        let err = resolve(
            r#"{ "HealthCheck": { "Active": { "Enabled": true } },
                 "Metadata": { "ConsecutiveFailuresHealthPolicy.Threshold": "0" } }"#,
        )
        .unwrap_err();
        assert_eq!(
            err.path,
            "Clusters.c.Metadata.ConsecutiveFailuresHealthPolicy.Threshold"
        );
        let err =
            resolve(r#"{ "HealthCheck": { "Active": { "Enabled": true, "Query": "a b" } } }"#)
                .unwrap_err();
        assert_eq!(err.path, "Clusters.c.HealthCheck.Active.Query");
    }
}
