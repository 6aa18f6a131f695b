//! The `fuseway` command line: run a configuration file, or the embedded demo.

mod demo;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

use crate::config::{self, ProxyConfig};
use crate::health::ActiveHealthChecker;
use crate::pipeline;
use crate::server::Server;
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
    /// Configuration file (YARP-shaped JSON, or TOML with the same keys). Without it,
    /// fuseway runs an embedded demo.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Address to listen on (repeatable). Default: the config's `Listen`, else 127.0.0.1:8080.
    #[arg(long, short)]
    pub listen: Vec<SocketAddr>,
}

/// The listen address used when neither the command line nor the config names one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Run the binary with these arguments until Ctrl-C / SIGTERM.
pub async fn run(args: Args) -> Result<(), BoxError> {
    match &args.config {
        Some(path) => run_config(path.clone(), args.listen).await,
        None => demo::run(args.listen).await,
    }
}

async fn run_config(path: PathBuf, listen: Vec<SocketAddr>) -> Result<(), BoxError> {
    let config = config::load_file(&path)
        .map_err(|e| format!("invalid configuration {}: {e}", path.display()))?;
    // The config's `Listen` entries may terminate TLS; `--listen` addresses are plain.
    let server = if listen.is_empty() && !config.listen.is_empty() {
        Server::bind_config(&config.listen).await?
    } else {
        Server::bind(&listen_addrs(&listen, &config)?).await?
    };
    let state = Arc::new(ProxyState::new(config)?);
    for addr in server.local_addrs() {
        tracing::info!(%addr, config = %path.display(), "fuseway listening");
    }
    spawn_reload_on_sighup(path, state.clone());
    let health = ActiveHealthChecker::spawn(state.clone());
    let service = pipeline::FusedDefault::from_state(state);
    server.serve(service, shutdown_signal()).await?;
    health.shutdown().await;
    Ok(())
}

/// Addresses to listen on: the command line's, else the config's, else the default.
pub fn listen_addrs(cli: &[SocketAddr], config: &ProxyConfig) -> Result<Vec<SocketAddr>, BoxError> {
    if !cli.is_empty() {
        return Ok(cli.to_vec());
    }
    if config.listen.is_empty() {
        return Ok(vec![DEFAULT_LISTEN.parse()?]);
    }
    config
        .listen
        .iter()
        .map(|l| {
            l.address()
                .parse()
                .map_err(|e| format!("Listen: `{}`: {e}", l.address()).into())
        })
        .collect()
}

#[cfg(unix)]
fn spawn_reload_on_sighup(path: PathBuf, state: Arc<ProxyState>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match config::load_file(&path).and_then(|c| state.update(c)) {
                Ok(()) => tracing::info!(config = %path.display(), "configuration reloaded"),
                Err(e) => tracing::error!(
                    config = %path.display(),
                    error = %e,
                    "configuration rejected; the previous one keeps serving"
                ),
            }
        }
    });
}

#[cfg(not(unix))]
fn spawn_reload_on_sighup(_path: PathBuf, _state: Arc<ProxyState>) {}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
