//! The binary's logs: the log proper on stderr (`RUST_LOG` filters it, else the
//! configuration's `Logging` levels, else `info`; colours only on a terminal) and the
//! access log ([`telemetry::access`](crate::telemetry::access)) on stdout or a file,
//! batched and written by a thread of its own so that a worker never waits for it (a
//! slow reader makes it drop records rather than stall requests: at most 4 MiB wait);
//! text or JSON. With `--otlp-endpoint`, the [span
//! records](crate::telemetry::span) go to an OTLP exporter.

use std::io::IsTerminal;
use std::path::PathBuf;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::{Args, BoxError};
use crate::telemetry::access::TARGET;

/// How log records are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per record: time, level, target, message and `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the
    /// fields, at the top level.
    Json,
}

/// Where the access log goes (`--access-log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLog {
    /// Standard output (the default).
    Stdout,
    /// Standard error, after the log proper's lines.
    Stderr,
    /// Appended to a file.
    File(PathBuf),
    /// None.
    Off,
}

impl std::str::FromStr for AccessLog {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "stdout" | "-" => AccessLog::Stdout,
            "stderr" => AccessLog::Stderr,
            "off" => AccessLog::Off,
            path => AccessLog::File(path.into()),
        })
    }
}

/// Flushes the access log's last records and sends the last spans when dropped (at
/// exit).
#[must_use = "the access log's last records are lost if this is dropped early"]
pub struct LogGuard {
    access: Option<super::access_writer::Flusher>,
    #[cfg(feature = "otlp")]
    spans: Option<crate::telemetry::otlp::Export>,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("LogGuard");
        f.field("access", &self.access.is_some());
        #[cfg(feature = "otlp")]
        f.field("spans", &self.spans.is_some());
        f.finish()
    }
}

/// Set up the process's logging as `args` say (`--log-format`, `--access-log`,
/// `--otlp-endpoint`; the log proper filtered by `RUST_LOG`, else by the `Logging` levels
/// of the first `--config` file that has them, else at `info`; call once, early).
pub fn init(args: &Args) -> Result<LogGuard, BoxError> {
    let format = args.log_format;
    let configured = match std::env::var_os("RUST_LOG") {
        Some(_) => None,
        None => configured_levels(&args.config),
    };
    let filter = match (&configured, EnvFilter::try_from_default_env()) {
        (Some((_, directives)), _) => EnvFilter::try_new(directives)?,
        (None, Ok(filter)) => filter,
        (None, Err(_)) => EnvFilter::new("info"),
    };
    // Static filters only (decided once per call site, not per event): the access and
    // span records are kept out of the log proper by directives of their own.
    let filter = filter
        .add_directive(format!("{TARGET}=off").parse()?)
        .add_directive(format!("{}=off", crate::telemetry::span::TARGET).parse()?);
    // A `Vec` of the layers in use rather than `Option`s: an absent (`None`) layer
    // would count as interested in everything, enabling every record and span.
    let mut layers = vec![log_layer(format).with_filter(filter).boxed()];
    let sink: Option<Box<dyn std::io::Write + Send>> = match &args.access_log {
        AccessLog::Off => None,
        AccessLog::Stdout => Some(Box::new(std::io::stdout())),
        AccessLog::Stderr => Some(Box::new(std::io::stderr())),
        AccessLog::File(path) => Some(Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("--access-log {}: {e}", path.display()))?,
        )),
    };
    let access = match sink {
        Some(sink) => {
            let (layer, flusher) = super::access_writer::access_log(format, sink)?;
            let targets = tracing_subscriber::filter::Targets::new()
                .with_target(TARGET, tracing::Level::INFO);
            layers.push(layer.with_filter(targets).boxed());
            Some(flusher)
        }
        None => None,
    };
    #[cfg(feature = "otlp")]
    let spans = match &args.otlp_endpoint {
        Some(endpoint) => {
            let export = crate::telemetry::otlp::grpc(endpoint)
                .map_err(|e| format!("--otlp-endpoint {endpoint}: {e}"))?;
            layers.push(crate::telemetry::otlp::layer(export.processor()).boxed());
            Some(export)
        }
        None => None,
    };
    tracing_subscriber::registry().with(layers).try_init()?;
    if let Some((source, directives)) = configured {
        tracing::info!(config = %source, filter = %directives, "log levels from the configuration's `Logging`");
    }
    Ok(LogGuard {
        access,
        #[cfg(feature = "otlp")]
        spans,
    })
}

/// The `Logging` levels of the first of the `--config` files that sets them, as a
/// filter, with the file: read ahead of the configuration's load, so that the log
/// filters from its first line (a file that does not load is left to that load to
/// report; etcd sources are not read here).
fn configured_levels(sources: &[String]) -> Option<(String, String)> {
    let overrides = crate::config::env_overrides();
    sources
        .iter()
        .filter(|source| !source.starts_with("etcd://"))
        .find_map(|source| {
            let config = crate::config::load_file_with_overrides(source.as_ref(), &overrides);
            let directives = config.ok()?.logging.directives()?;
            Some((source.clone(), directives))
        })
}

/// The log proper's layer, on stderr (coloured only when it is a terminal).
fn log_layer<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // A closed stderr must not stop the proxy: by default a failed log write is
        // reported with `eprintln!`, which panics when stderr itself is gone.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    }
}
