//! The binary's logs: the log proper on stderr (`RUST_LOG` filters it, else the
//! configuration's `Logging` levels, else `info`; colours only on a terminal) and the
//! access log ([`telemetry::access`](crate::telemetry::access)) on stdout or a file,
//! batched and written by a thread of its own so that a worker never waits for it (a
//! slow reader makes it drop records rather than stall requests: at most 4 MiB wait);
//! text or JSON. With `--otlp-endpoint`, the [span
//! records](crate::telemetry::span) go to an OTLP exporter.

use std::io::IsTerminal;
use std::path::PathBuf;

use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
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
    let rust_log = std::env::var_os("RUST_LOG").is_some();
    let configured = match rust_log {
        true => None,
        false => configured_levels(&args.config),
    };
    let filter = match (&configured, EnvFilter::try_from_default_env()) {
        (Some((_, directives)), _) => LogFilter::new(directives)?,
        (None, Ok(filter)) => LogFilter(Arc::new(Levels {
            levels: ArcSwap::from_pointee(filter),
            directives: Mutex::new(String::new()),
        })),
        (None, Err(_)) => LogFilter::new(DEFAULT_LEVEL)?,
    };
    if !rust_log {
        // The configuration's levels filter the log: its reloads may change them.
        let _ = LEVELS.set(filter.clone());
    }
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

/// The log proper's level when neither `RUST_LOG` nor the configuration sets one.
const DEFAULT_LEVEL: &str = "info";

/// The log proper's filter, when the configuration's `Logging` levels make it (`RUST_LOG`
/// is not set): what [`apply_levels`] swaps.
static LEVELS: OnceLock<LogFilter> = OnceLock::new();

/// The log proper's filter: `RUST_LOG`'s, else the configuration's `Logging` levels,
/// which a reload of the configuration may swap (ASP.NET applies a changed `Logging` at
/// once too). The swap costs the records nothing: each call site's interest is decided
/// when it is first seen and again after a swap (`rebuild_interest_cache`), and the
/// records of the access log and the span export — one or two a request, which the
/// other layers take — are kept out by their target alone, before the levels are read.
#[derive(Clone)]
struct LogFilter(Arc<Levels>);

/// What a [`LogFilter`] shares with [`LEVELS`].
struct Levels {
    levels: ArcSwap<EnvFilter>,
    /// The directives `levels` was made from (empty: `RUST_LOG`'s).
    directives: Mutex<String>,
}

impl LogFilter {
    fn new(directives: &str) -> Result<LogFilter, BoxError> {
        Ok(LogFilter(Arc::new(Levels {
            levels: ArcSwap::from_pointee(EnvFilter::try_new(directives)?),
            directives: Mutex::new(directives.to_string()),
        })))
    }

    fn levels(&self) -> arc_swap::Guard<Arc<EnvFilter>> {
        self.0.levels.load()
    }

    /// Records of the other layers, never in the log proper.
    fn others(meta: &tracing::Metadata<'_>) -> bool {
        let target = meta.target();
        target == TARGET || target == crate::telemetry::span::TARGET
    }
}

impl<S> Filter<S> for LogFilter
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn enabled(&self, meta: &tracing::Metadata<'_>, cx: &Context<'_, S>) -> bool {
        !Self::others(meta) && Filter::<S>::enabled(&**self.levels(), meta, cx)
    }

    fn callsite_enabled(&self, meta: &'static tracing::Metadata<'static>) -> Interest {
        if Self::others(meta) {
            return Interest::never();
        }
        Filter::<S>::callsite_enabled(&**self.levels(), meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Filter::<S>::max_level_hint(&**self.levels())
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, cx: Context<'_, S>) {
        Filter::<S>::on_new_span(&**self.levels(), attrs, id, cx);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, cx: Context<'_, S>) {
        Filter::<S>::on_record(&**self.levels(), id, values, cx);
    }

    fn on_enter(&self, id: &Id, cx: Context<'_, S>) {
        Filter::<S>::on_enter(&**self.levels(), id, cx);
    }

    fn on_exit(&self, id: &Id, cx: Context<'_, S>) {
        Filter::<S>::on_exit(&**self.levels(), id, cx);
    }

    fn on_close(&self, id: Id, cx: Context<'_, S>) {
        Filter::<S>::on_close(&**self.levels(), id, cx);
    }
}

/// Filter the log by a configuration's `Logging` levels from now on (the binary calls it
/// on every reload that changes them): a change is logged; levels equal to those in use
/// change nothing. When `RUST_LOG` filters the log, a configuration's levels are not
/// applied: said.
pub fn apply_levels(logging: &crate::config::LoggingConfig) {
    let directives = logging
        .directives()
        .unwrap_or_else(|| DEFAULT_LEVEL.to_string());
    let Some(filter) = LEVELS.get() else {
        if !logging.is_empty() {
            tracing::warn!(
                "the configuration's `Logging` levels are not applied: `RUST_LOG` filters the log"
            );
        }
        return;
    };
    let mut current = filter
        .0
        .directives
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if *current == directives {
        return;
    }
    match EnvFilter::try_new(&directives) {
        Ok(levels) => {
            filter.0.levels.store(Arc::new(levels));
            directives.clone_into(&mut current);
            drop(current);
            // Call sites decide their interest again, under the new levels.
            tracing::callsite::rebuild_interest_cache();
            tracing::info!(filter = %directives, "log levels from the configuration's `Logging`");
        }
        Err(e) => {
            tracing::warn!(filter = %directives, error = %e, "the configuration's `Logging` levels make no filter; the log keeps its levels");
        }
    }
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
