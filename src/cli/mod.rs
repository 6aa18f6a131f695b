//! The `fuseway` command line: run a configuration file, or the embedded demo.

mod access_writer;
mod demo;
mod lifecycle;
pub mod logging;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

pub use crate::config::DEFAULT_LISTEN;

use crate::admin::{Admin, Readiness};
use crate::config::{self, ProxyConfig};
use crate::health::ActiveHealthChecker;
use crate::pipeline;
use crate::providers::{ConfigProvider, FileProvider, Providers};
use crate::server::{Http1Engine, Http2Engine, MinDataRate, Server};
use crate::state::ProxyState;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Command-line arguments of the `fuseway` binary.
#[derive(Debug, Parser)]
#[command(
    name = "fuseway",
    version,
    about = "A reverse proxy built from fused tower stages"
)]
pub struct Args {
    /// Where the configuration comes from (repeatable: the sources are merged, an id
    /// defined twice is an error): a file (YARP-shaped JSON, or TOML with the same
    /// keys), watched for changes, or `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`. Without
    /// it, fuseway runs an embedded demo.
    #[arg(long, short, value_name = "FILE|etcd://...")]
    pub config: Vec<String>,
    /// etcd user name (etcd's authentication); the password is read from
    /// `FUSEWAY_ETCD_PASSWORD`.
    #[arg(long, value_name = "USER")]
    pub etcd_user: Option<String>,
    /// PEM file of the certificate authority of etcd's certificates: etcd is reached
    /// over TLS.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca: Option<PathBuf>,
    /// PEM file of a client certificate for etcd (with `--etcd-key`, `--etcd-ca`).
    #[arg(long, value_name = "FILE", requires_all = ["etcd_key", "etcd_ca"])]
    pub etcd_cert: Option<PathBuf>,
    /// PEM file of the client certificate's key.
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// Address to listen on (repeatable). Default: the config's `Listen`, else 127.0.0.1:8080.
    #[arg(long, short)]
    pub listen: Vec<SocketAddr>,
    /// Address of the admin listener: `/` status page, `/status.json`, `/metrics`
    /// (Prometheus), `/healthz`, `/readyz`. Off unless given; it has no authentication.
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// After the first SIGTERM or SIGINT, keep accepting and serving connections this
    /// long while `/readyz` fails, so that load balancers notice (`500ms`, `5s`, `1m`).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "0s")]
    pub drain_delay: Duration,
    /// Then the graceful shutdown: no new connections, in-flight requests get this
    /// long to finish before the rest are closed. A second signal exits at once.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "30s")]
    pub grace: Duration,
    /// Most client connections open at once. Idle keep-alive connections count (see
    /// `--keep-alive-timeout`); at the limit a new connection closes the plain HTTP/1.1
    /// one idle longest to get in (native engine), or with none such waits in the
    /// listening socket's backlog until one closes. Default: the configuration's
    /// `Kestrel.Limits.MaxConcurrentConnections`, else 10000.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub max_connections: Option<usize>,
    /// How long a client may take to send an HTTP/1.1 request head: the first from the
    /// accept, a later one from its first byte (Kestrel's `RequestHeadersTimeout`).
    /// Default: the configuration's `Kestrel.Limits.RequestHeadersTimeout`, else 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub header_read_timeout: Option<Duration>,
    /// How long an idle HTTP/1.1 client connection is kept for its next request
    /// (Kestrel's `KeepAliveTimeout`). Keep it above the idle timeout of a load balancer
    /// in front (AWS's ALB: 60 s), or the balancer will now and then send a request on a
    /// connection fuseway is closing. Default: the configuration's
    /// `Kestrel.Limits.KeepAliveTimeout`, else 130s.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub keep_alive_timeout: Option<Duration>,
    /// The slowest, in bytes a second, a request body may arrive while it is waited
    /// for, after a grace period of 5 s (Kestrel's `MinRequestBodyDataRate`); a slower
    /// HTTP/1.1 one is answered 408, an HTTP/2 connection whose bodies together come
    /// slower is closed. 0: no minimum. Default: the configuration's
    /// `Kestrel.Limits.MinRequestBodyDataRate` (with its grace period), else 240.
    #[arg(long, value_name = "BYTES")]
    pub min_request_body_rate: Option<u64>,
    /// The slowest, in bytes a second, a client may take a response: a write to it that
    /// waits longer than 5 s and than its bytes take at this rate closes the connection (Kestrel's `MinResponseDataRate`). 0: no minimum. Default: the
    /// configuration's `Kestrel.Limits.MinResponseDataRate`, else 240.
    #[arg(long, value_name = "BYTES")]
    pub min_response_rate: Option<u64>,
    /// Worker threads serving requests, each with its own single-threaded runtime and
    /// connection pools (nginx's worker model). Default: one per CPU.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Validate the configuration (with its environment overrides, certificate files
    /// and policies) and exit: 0 when it is valid, 1 with the errors when not. Nothing
    /// is served (like `nginx -t`).
    #[arg(long, requires = "config")]
    pub check: bool,
    /// How long to wait at start for every configuration source to be read once (etcd
    /// unreachable: retried meanwhile) before giving up.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "60s")]
    pub config_timeout: Duration,
    /// Also trust the bundled Mozilla root certificates for `https://` destinations.
    /// By default only the system's trust store is (`SSL_CERT_FILE` / `SSL_CERT_DIR`
    /// when set), and the bundled set only where the system has none.
    #[arg(long)]
    pub bundled_roots: bool,
    /// The HTTP/1.1 engine, serving clients and forwarding to destinations: `native`
    /// (fuseway's own, the default) or `hyper`. Default: `FUSEWAY_HTTP1_ENGINE` when
    /// set, else native.
    #[arg(long, value_name = "native|hyper")]
    pub http1_engine: Option<Http1Engine>,
    /// The HTTP/2 engine, serving clients (h2c and h2 over TLS) and forwarding to
    /// HTTP/2 destinations: `native` (fuseway's own, the default) or `hyper` (hyper's
    /// server; the h2 crate's client). Default: `FUSEWAY_HTTP2_ENGINE` when set, else
    /// native.
    #[arg(long, value_name = "native|hyper")]
    pub http2_engine: Option<Http2Engine>,
    /// Where the access log (one record per request) goes: `stdout`, `stderr`, a file
    /// path (appended to), or `off`.
    #[arg(long, value_name = "stdout|stderr|PATH|off", default_value = "stdout")]
    pub access_log: logging::AccessLog,
    /// How the log and the access log are written: `text` or `json` (one object per
    /// line).
    #[arg(long, value_enum, default_value_t)]
    pub log_format: logging::LogFormat,
    /// Export a span per request over OTLP/gRPC to this endpoint (`http://HOST:4317`;
    /// `https://` for TLS, checked against the system's trust store):
    /// requests without a `traceparent` start a trace, destinations are sent the
    /// proxy's span as their parent. `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`
    /// and `OTEL_BSP_*` apply.
    #[cfg(feature = "otlp")]
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// Run the binary with these arguments until Ctrl-C / SIGTERM.
pub async fn run(args: Args) -> Result<(), BoxError> {
    crate::forwarding::trust_bundled_roots(args.bundled_roots);
    if args.config.is_empty() {
        return demo::run(&args).await;
    }
    let providers = Arc::new(providers(&args)?);
    if args.check {
        check_config(&providers, &args).await
    } else {
        run_config(providers, &args).await
    }
}

impl Args {
    /// `server` with the connection settings given on the command line (limit,
    /// timeouts, graceful shutdown) over what it has (the defaults, or the
    /// configuration's `Limits`): what every way of running applies.
    fn connection_settings(&self, mut server: Server) -> Server {
        if let Some(max) = self.max_connections {
            server = server.max_connections(max);
        }
        if let Some(timeout) = self.header_read_timeout {
            server = server.header_read_timeout(timeout);
        }
        if let Some(timeout) = self.keep_alive_timeout {
            server = server.keep_alive_timeout(timeout);
        }
        if let Some(bytes) = self.min_request_body_rate {
            server = server.min_request_body_data_rate(rate(bytes));
        }
        if let Some(bytes) = self.min_response_rate {
            server = server.min_response_data_rate(rate(bytes));
        }
        server.graceful_timeout(self.grace)
    }
}

/// Warn of the keys of the configuration's `Limits` that fuseway does not apply.
fn warn_unapplied(config: &ProxyConfig) {
    let unapplied = config.limits.unapplied();
    if !unapplied.is_empty() {
        tracing::warn!(
            keys = %unapplied.join(", "),
            "Kestrel.Limits: not applied (fuseway has no such limit)"
        );
    }
}

/// A minimum data rate of `bytes_per_second` with Kestrel's grace period (`None` for 0).
fn rate(bytes_per_second: u64) -> Option<MinDataRate> {
    MinDataRate::unless_zero(bytes_per_second, MinDataRate::default().grace_period)
}

/// A duration argument, written as durations are in the configuration (`500ms`, `30s`,
/// `2m`, or YARP's `00:00:30`).
fn duration(text: &str) -> Result<Duration, String> {
    text.parse::<config::ConfigDuration>()
        .map(config::ConfigDuration::get)
        .map_err(|e| e.to_string())
}

/// The providers `--config` names, each started (files read and watched, etcd being
/// read).
fn providers(args: &Args) -> Result<Providers, BoxError> {
    let overrides = config::env_overrides();
    let mut list: Vec<Arc<dyn ConfigProvider>> = Vec::new();
    for source in &args.config {
        if source.starts_with("etcd://") {
            list.push(etcd(source, args)?);
        } else {
            let path = PathBuf::from(source);
            if config::Format::from_path(&path).is_none() {
                return Err(format!(
                    "--config {source}: unsupported configuration file type; expected a \
                     `.json` or `.toml` file, or an `etcd://` URL"
                )
                .into());
            }
            let file = Arc::new(FileProvider::open(path, overrides.clone()));
            // `--check` reads once.
            if !args.check {
                if let Err(e) = file.watch() {
                    tracing::warn!(
                        config = %source,
                        error = %e,
                        "cannot watch the configuration file; SIGHUP still reloads it"
                    );
                }
            }
            list.push(file);
        }
    }
    Ok(Providers::new(list).on_logging_change(logging::apply_levels))
}

/// The etcd provider of an `etcd://` source, with the command line's credentials.
#[cfg(feature = "etcd")]
fn etcd(source: &str, args: &Args) -> Result<Arc<dyn ConfigProvider>, BoxError> {
    use crate::providers::{EtcdOptions, EtcdProvider};
    let mut options = EtcdOptions::default();
    if let Some(user) = &args.etcd_user {
        let password = std::env::var("FUSEWAY_ETCD_PASSWORD").unwrap_or_default();
        options = options.with_user(user.clone(), password);
    }
    if let Some(ca) = &args.etcd_ca {
        options = options.with_ca(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&args.etcd_cert, &args.etcd_key) {
        options = options.with_identity(cert.clone(), key.clone());
    }
    let etcd =
        EtcdProvider::spawn(source, options).map_err(|e| format!("--config {source}: {e}"))?;
    Ok(Arc::new(etcd))
}

#[cfg(not(feature = "etcd"))]
fn etcd(source: &str, _args: &Args) -> Result<Arc<dyn ConfigProvider>, BoxError> {
    Err(format!("--config {source}: this fuseway was built without the `etcd` feature").into())
}

/// The sources as error messages name them.
fn sources(providers: &Providers) -> String {
    providers.sources().collect::<Vec<_>>().join(", ")
}

/// Every source read once and merged.
async fn load(providers: &Providers, args: &Args) -> Result<ProxyConfig, BoxError> {
    providers
        .first(args.config_timeout)
        .await
        .map_err(|e| format!("invalid configuration {}: {e}", sources(providers)).into())
}

/// The proxy state of a loaded configuration (its policies checked).
fn build_state(providers: &Providers, config: ProxyConfig) -> Result<ProxyState, BoxError> {
    ProxyState::new(config).map_err(|e| {
        let e = providers.locate(e);
        format!("invalid configuration {}: {e}", sources(providers)).into()
    })
}

/// `--check`: everything a start would check short of binding the listeners (their
/// certificate files are read).
async fn check_config(providers: &Providers, args: &Args) -> Result<(), BoxError> {
    let config = load(providers, args).await?;
    Server::check_listeners(&config.listen)
        .map_err(|e| format!("invalid configuration {}: {e}", sources(providers)))?;
    warn_unapplied(&config);
    build_state(providers, config)?;
    println!("configuration {} is valid", sources(providers));
    Ok(())
}

async fn run_config(providers: Arc<Providers>, args: &Args) -> Result<(), BoxError> {
    let signals = crate::server::Signals::new();
    let engine = args.http1_engine.unwrap_or_else(Http1Engine::from_env);
    let engine2 = args.http2_engine.unwrap_or_else(Http2Engine::from_env);
    let config = load(&providers, args).await?;
    // The log levels, where they come from a source the log's set-up did not read (an
    // etcd prefix's `Logging`); the same levels again change nothing.
    logging::apply_levels(&config.logging);
    // The config's `Listen` entries may terminate TLS; `--listen` addresses are plain.
    let server = if args.listen.is_empty() && !config.listen.is_empty() {
        Server::bind_config(&config.listen).await?
    } else {
        Server::bind(&listen_addrs(&args.listen, &config)?).await?
    }
    .http1_engine(engine)
    .http2_engine(engine2)
    .limits(&config.limits);
    warn_unapplied(&config);
    let server = args.connection_settings(server);
    let state = Arc::new(build_state(&providers, config)?);
    let sources = sources(&providers);
    for addr in server.local_addrs() {
        tracing::info!(%addr, config = %sources, "fuseway listening");
    }
    let readiness = Readiness::starting();
    let admin = spawn_admin(args.admin, &state, &readiness).await?;
    spawn_reload_on_sighup(providers.clone(), state.clone(), server.tls_reloader());
    let _providers = providers.spawn(state.clone());
    let health = ActiveHealthChecker::spawn(state.clone());
    let workers = args
        .workers
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1);
    let shutdown = lifecycle::drain_on_signal(signals, readiness.clone(), args.drain_delay);
    tracing::info!(workers, "serving");
    ready(&readiness);
    server
        .serve_workers(
            workers,
            move || pipeline::FusedDefault::from_state_with_engines(state.clone(), engine, engine2),
            shutdown,
        )
        .await?;
    health.shutdown().await;
    admin.stop().await;
    Ok(())
}

/// The admin listener, while it runs.
pub(crate) struct AdminTask(
    Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
    Vec<SocketAddr>,
);

impl AdminTask {
    /// The addresses it listens on.
    pub(crate) fn addrs(&self) -> &[SocketAddr] {
        &self.1
    }

    pub(crate) async fn stop(self) {
        if let Some((stop, task)) = self.0 {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}

/// The configuration is loaded and the listeners are bound: `/readyz` answers 200 and
/// systemd is told `READY=1`.
fn ready(readiness: &Readiness) {
    readiness.ready();
    lifecycle::notify_systemd("READY=1");
}

/// Start the admin listener on `addr`, if given, its `/readyz` answering as
/// `readiness` says.
pub(crate) async fn spawn_admin(
    addr: Option<SocketAddr>,
    state: &Arc<ProxyState>,
    readiness: &Readiness,
) -> Result<AdminTask, BoxError> {
    let Some(addr) = addr else {
        return Ok(AdminTask(None, Vec::new()));
    };
    let server = Server::bind(&[addr])
        .await
        .map_err(|e| format!("--admin {addr}: {e}"))?
        .graceful_timeout(std::time::Duration::from_secs(1));
    let addrs = server.local_addrs();
    for addr in &addrs {
        tracing::info!(%addr, "fuseway admin listening (/ status page, /status.json, /metrics)");
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let admin = Admin::new(state.clone()).with_readiness(readiness.clone());
    let history = crate::admin::spawn_history(state.clone(), std::time::Duration::from_secs(2));
    let task = tokio::spawn(async move {
        let stopped = async {
            let _ = stopped.await;
        };
        if let Err(e) = server.serve(admin, stopped).await {
            tracing::error!(error = %e, "admin listener failed");
        }
        history.abort();
    });
    Ok(AdminTask(Some((stop, task)), addrs))
}

/// Addresses to listen on: the command line's, else the config's
/// ([`ProxyConfig::listen_addrs`]: its `Listen`, else [`DEFAULT_LISTEN`]).
pub fn listen_addrs(cli: &[SocketAddr], config: &ProxyConfig) -> Result<Vec<SocketAddr>, BoxError> {
    if !cli.is_empty() {
        return Ok(cli.to_vec());
    }
    Ok(config.listen_addrs()?)
}

/// `SIGHUP`: reload the configuration file and the listeners' certificate files.
#[cfg(unix)]
fn spawn_reload_on_sighup(
    providers: Arc<Providers>,
    state: Arc<ProxyState>,
    tls: crate::server::TlsReloader,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let (providers, state, tls) = (providers.clone(), state.clone(), tls.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let _ = providers.reload(&state);
                match tls.reload() {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(listeners = n, "TLS certificates reloaded"),
                    Err(errors) => {
                        for error in errors {
                            tracing::error!(
                                %error,
                                "TLS certificate not reloaded; the listener keeps its previous one"
                            );
                        }
                    }
                }
            })
            .await;
        }
    });
}

#[cfg(not(unix))]
fn spawn_reload_on_sighup(
    _providers: Arc<Providers>,
    _state: Arc<ProxyState>,
    _tls: crate::server::TlsReloader,
) {
}
