//! Reloading the configuration file: on `SIGHUP` and when the file changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::{self, ConfigError, ConfigErrors, Format};
use crate::state::ProxyState;

/// How long the file must stay quiet after a change before it is read: editors write
/// in bursts (truncate, write, rename, chmod).
pub const DEBOUNCE: Duration = Duration::from_millis(250);

/// Loads a configuration file into a [`ProxyState`]: validated whole, swapped in
/// atomically on success; on error the running configuration keeps serving and the
/// error is logged. Every attempt is counted in the `fuseway_config_reloads_total`
/// metric.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    state: Arc<ProxyState>,
    /// Applied on top of the file at every reload (see [`config::parse_with_overrides`]).
    overrides: Vec<(String, String)>,
    /// The file's contents at the last attempt.
    last: Mutex<Option<Vec<u8>>>,
}

impl Reloader {
    /// A reloader of `path` into `state`, which was loaded from the file as it is now.
    pub fn new(path: PathBuf, state: Arc<ProxyState>) -> Self {
        let last = std::fs::read(&path).ok();
        Reloader {
            path,
            state,
            overrides: Vec::new(),
            last: Mutex::new(last),
        }
    }

    /// Apply these .NET-style overrides on top of the file at every reload (the binary
    /// passes [`config::env_overrides`], read once at start).
    pub fn with_overrides(mut self, overrides: Vec<(String, String)>) -> Self {
        self.overrides = overrides;
        self
    }

    /// The file reloaded.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read, validate and apply the file now.
    pub fn reload(&self) -> Result<(), ConfigErrors> {
        let bytes = std::fs::read(&self.path).map_err(|e| self.read_error(e))?;
        self.apply(bytes)
    }

    /// Reload if the file's contents differ from the last attempt's; `None` when they
    /// do not (a touch, or another file of the directory changed).
    pub fn reload_if_changed(&self) -> Option<Result<(), ConfigErrors>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            // Between an editor's delete and its rename: the next event will tell.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return Some(Err(self.read_error(e))),
        };
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() == Some(&bytes[..]) {
            return None;
        }
        drop(last);
        Some(self.apply(bytes))
    }

    fn read_error(&self, e: std::io::Error) -> ConfigErrors {
        let errors = ConfigErrors::from(ConfigError::new(
            "",
            format!("cannot read {}: {e}", self.path.display()),
        ));
        self.log(Err(&errors));
        errors
    }

    fn apply(&self, bytes: Vec<u8>) -> Result<(), ConfigErrors> {
        let result = self.parse(&bytes).and_then(|c| {
            let listen_changed = c.listen != self.state.snapshot().config().listen;
            // Listener certificates that would not load are refused like any error
            // (they are needed at the next start, and on SIGHUP).
            crate::server::Server::check_listeners(&c.listen)?;
            self.state.update(c)?;
            if listen_changed {
                tracing::warn!(
                    config = %self.path.display(),
                    "`Listen` changed: listeners are bound at start, so the change needs a \
                     restart (the rest of the configuration is applied; listener \
                     certificates reload on SIGHUP)"
                );
            }
            Ok(())
        });
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
        self.log(result.as_ref().map(|_| ()));
        result
    }

    fn parse(&self, bytes: &[u8]) -> Result<config::ProxyConfig, ConfigErrors> {
        let format = Format::from_path(&self.path).unwrap_or(Format::Json);
        let text = std::str::from_utf8(bytes)
            .map_err(|e| ConfigErrors::from(ConfigError::new("", format!("not UTF-8: {e}"))))?;
        config::parse_with_overrides(text, format, &self.overrides)
    }

    fn log(&self, result: Result<(), &ConfigErrors>) {
        self.state.metrics().record_reload(result.is_ok());
        match result {
            Ok(()) => tracing::info!(config = %self.path.display(), "configuration reloaded"),
            Err(e) => tracing::error!(
                config = %self.path.display(),
                error = %e,
                "configuration rejected; the previous one keeps serving"
            ),
        }
    }
}

/// Watches a configuration file and reloads it when it changes, once writes have
/// settled for [`DEBOUNCE`]. The file's directory is watched, so editors that write
/// a new file and rename it over the old one (and Kubernetes' symlink swaps) are seen;
/// changes that leave the contents as they were are ignored. Dropping the watcher
/// stops it.
#[derive(Debug)]
pub struct ConfigWatcher {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl ConfigWatcher {
    /// Start watching `reloader`'s file. Must be called within a tokio runtime.
    pub fn spawn(reloader: Arc<Reloader>) -> Result<ConfigWatcher, notify::Error> {
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if let Ok(event) = event {
                    if is_change(&event.kind) {
                        let _ = tx.send(());
                    }
                }
            })?;
        let path = reloader.path();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        let task = tokio::spawn(async move {
            while rx.recv().await.is_some() {
                // Wait until the burst is over.
                loop {
                    match tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                        Ok(Some(())) => continue,
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
                let r = reloader.clone();
                let _ = tokio::task::spawn_blocking(move || r.reload_if_changed()).await;
            }
        });
        Ok(ConfigWatcher {
            _watcher: watcher,
            task,
        })
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Events that may change the file's contents (not reads: reloading reads the file).
fn is_change(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(_)
            | EventKind::Modify(_)
            | EventKind::Remove(_)
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
    )
}
