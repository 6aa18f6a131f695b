//! The collectors read at scrape time: the configuration providers' statuses, the
//! current snapshot's destination gauges, the process's own figures.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::ConfigSourceStatus;
use crate::health::HealthState;
use crate::state::Snapshot;

/// The providers' statuses, also a collector of their metrics.
#[derive(Debug, Clone, Default)]
pub(super) struct ConfigSources(pub(super) Arc<Mutex<Vec<ConfigSourceStatus>>>);

impl Collector for ConfigSources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let sources = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if sources.is_empty() {
            return Ok(());
        }
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_config_source_info",
                "1 for each configuration provider, labelled with its source and the version the running configuration holds (etcd revision, file digest)",
                None,
                MetricType::Gauge,
            )?;
            for s in &sources {
                ConstGauge::new(1).encode(m.encode_family(&[
                    ("source", s.source.as_str()),
                    ("version", s.version.as_str()),
                ])?)?;
            }
        }
        let rows = sources
            .iter()
            .map(|s| (s.source.as_str(), u64::from(s.error.is_some())));
        encode_rows(
            &mut encoder,
            (
                "fuseway_config_source_error",
                "1 while a configuration provider's last read failed (the previous configuration keeps serving), else 0",
            ),
            MetricType::Gauge,
            "source",
            rows,
        )
    }
}

/// Destination gauges read from the current snapshot at scrape time.
#[derive(Debug)]
pub(super) struct SnapshotGauges(pub(super) Arc<Snapshot>);

/// A health state's name on the status page and in metrics.
pub fn health_name(state: HealthState) -> &'static str {
    match state {
        HealthState::Unknown => "unknown",
        HealthState::Healthy => "healthy",
        HealthState::Unhealthy => "unhealthy",
    }
}

impl Collector for SnapshotGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let clusters = self.0.clusters();
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_destination_health",
                "Health of each destination per check (active, passive): 1 for its current state",
                None,
                MetricType::Gauge,
            )?;
            for c in clusters {
                for d in c.destinations() {
                    let health = d.state().health();
                    for (check, current) in
                        [("active", health.active()), ("passive", health.passive())]
                    {
                        for state in [
                            HealthState::Unknown,
                            HealthState::Healthy,
                            HealthState::Unhealthy,
                        ] {
                            let labels = [
                                ("cluster", c.id()),
                                ("destination", d.id()),
                                ("check", check),
                                ("state", health_name(state)),
                            ];
                            ConstGauge::new(i64::from(current == state))
                                .encode(m.encode_family(&labels)?)?;
                        }
                    }
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_destination_available",
                "1 when the destination is among its cluster's available destinations now",
                None,
                MetricType::Gauge,
            )?;
            for c in clusters {
                let available = crate::health::available(c);
                for (i, d) in c.destinations().iter().enumerate() {
                    let labels = [("cluster", c.id()), ("destination", d.id())];
                    ConstGauge::new(i64::from(available.contains(i)))
                        .encode(m.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_destination_requests_in_flight",
                "Requests being forwarded to the destination now, response bodies included",
                None,
                MetricType::Gauge,
            )?;
            for c in clusters {
                for d in c.destinations() {
                    let labels = [("cluster", c.id()), ("destination", d.id())];
                    ConstGauge::new(d.state().concurrent_requests() as i64)
                        .encode(m.encode_family(&labels)?)?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "fuseway_cluster_requests_in_flight",
            "Requests being forwarded to the cluster now, response bodies included",
            None,
            MetricType::Gauge,
        )?;
        for c in clusters {
            ConstGauge::new(c.state().concurrent_requests() as i64)
                .encode(m.encode_family(&[("cluster", c.id())])?)?;
        }
        Ok(())
    }
}

/// `fuseway_build_info`, the process's client connections and its own metrics (the
/// names Prometheus client libraries use), read at scrape time; the `process_` ones on
/// Linux only, from `/proc/self`.
#[derive(Debug)]
pub(super) struct ProcessMetrics {
    /// When the metrics were created (at the process's start, in the binary).
    pub(super) start: std::time::SystemTime,
}

impl Collector for ProcessMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        {
            let mut m = encoder.encode_descriptor(
                "fuseway_build_info",
                "1, labelled with the version of fuseway that runs",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(1)
                .encode(m.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?)?;
        }
        use crate::forwarding::pool::{pool_totals, PoolTotals};
        use crate::server::counts::{connections, PROTOCOLS};
        let by_protocol = |value: fn((u64, i64)) -> u64| {
            PROTOCOLS
                .iter()
                .enumerate()
                .map(move |(i, protocol)| (*protocol, value(connections(i))))
        };
        encode_rows(
            &mut encoder,
            (
                "fuseway_connections_accepted",
                "Client connections accepted by this process, by protocol (once known)",
            ),
            MetricType::Counter,
            "protocol",
            by_protocol(|(accepted, _)| accepted),
        )?;
        encode_rows(
            &mut encoder,
            (
                "fuseway_connections_open",
                "Client connections open now in this process, by protocol",
            ),
            MetricType::Gauge,
            "protocol",
            by_protocol(|(_, open)| open.max(0) as u64),
        )?;
        let pools = pool_totals();
        type Field = fn(&PoolTotals) -> u64;
        let pool_metrics: [(&str, &str, MetricType, Field); 5] = [
            (
                "fuseway_pool_connects",
                "Connections opened to a destination address, by all workers' pools",
                MetricType::Counter,
                |t| t.connects,
            ),
            (
                "fuseway_pool_connect_errors",
                "Connections to a destination address that failed to open",
                MetricType::Counter,
                |t| t.connect_errors,
            ),
            (
                "fuseway_pool_reuses",
                "Requests sent on an idle HTTP/1.1 connection taken from a pool",
                MetricType::Counter,
                |t| t.reuses,
            ),
            (
                "fuseway_pool_idle_connections",
                "HTTP/1.1 connections idle in the pools now",
                MetricType::Gauge,
                |t| t.idle,
            ),
            (
                "fuseway_pool_open_connections",
                "Connections open to a destination address now, idle or in use",
                MetricType::Gauge,
                |t| t.open,
            ),
        ];
        for (name, help, kind, field) in pool_metrics {
            let rows = pools
                .iter()
                .map(|(address, t)| (address.as_str(), field(t)));
            encode_rows(&mut encoder, (name, help), kind, "address", rows)?;
        }
        let start = self
            .start
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let gauges = [
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                Some(start.as_secs_f64()),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                proc_self::resident_bytes(),
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                proc_self::open_fds(),
            ),
            (
                "process_max_fds",
                "Most file descriptors the process may open",
                proc_self::max_fds(),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                ConstGauge::new(value).encode(m)?;
            }
        }
        if let Some(seconds) = proc_self::cpu_seconds() {
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                MetricType::Counter,
            )?;
            prometheus_client::metrics::counter::ConstCounter::new(seconds).encode(m)?;
        }
        Ok(())
    }
}

/// One family with one label (`label`), a row per value of it: counters or gauges as
/// `kind` says.
fn encode_rows<'a>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    kind: MetricType,
    label: &str,
    rows: impl Iterator<Item = (&'a str, u64)>,
) -> std::fmt::Result {
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    for (value, n) in rows {
        let labels = [(label, value)];
        match kind {
            MetricType::Counter => prometheus_client::metrics::counter::ConstCounter::new(n)
                .encode(m.encode_family(&labels)?)?,
            _ => ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX))
                .encode(m.encode_family(&labels)?)?,
        }
    }
    Ok(())
}

/// The process's figures from `/proc/self` (`None` where there is none).
mod proc_self {
    /// Clock ticks per second in `/proc` (`USER_HZ`: 100 on every Linux architecture
    /// fuseway builds for).
    const TICKS: f64 = 100.0;

    fn read(file: &str) -> Option<String> {
        std::fs::read_to_string(format!("/proc/self/{file}")).ok()
    }

    /// `VmRSS` of `/proc/self/status`.
    pub(super) fn resident_bytes() -> Option<f64> {
        let status = read("status")?;
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024.0)
    }

    pub(super) fn open_fds() -> Option<f64> {
        Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
    }

    /// The soft limit of `Max open files` in `/proc/self/limits`.
    pub(super) fn max_fds() -> Option<f64> {
        let limits = read("limits")?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        line["Max open files".len()..]
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// `utime` + `stime` of `/proc/self/stat` (the 14th and 15th fields, counted after
    /// the command name's closing parenthesis, which may itself hold spaces).
    pub(super) fn cpu_seconds() -> Option<f64> {
        let stat = read("stat")?;
        let after_name = &stat[stat.rfind(')')? + 2..];
        let mut fields = after_name.split_whitespace().skip(11);
        let user: f64 = fields.next()?.parse().ok()?;
        let system: f64 = fields.next()?.parse().ok()?;
        Some((user + system) / TICKS)
    }
}
