//! The file provider: a JSON or TOML file, re-read when it changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use super::{ConfigProvider, ProviderSnapshot};
use crate::config::{self, ConfigError, ConfigErrors, Format};

/// How long the file must stay quiet after a change before it is read: editors write
/// in bursts (truncate, write, rename, chmod).
pub const DEBOUNCE: Duration = Duration::from_millis(250);

/// A configuration file (YARP-shaped JSON, or TOML) as a [`ConfigProvider`].
///
/// It is read once when made; [`watch`](Self::watch) re-reads it when it changes, once
/// writes have settled for [`DEBOUNCE`]. The file's directory is watched, so editors
/// that write a new file and rename it over the old one (and Kubernetes' symlink swaps)
/// are seen; changes that leave the contents as they were are ignored. The version is a
/// digest of the contents. An `appsettings.json` has its environment's
/// `appsettings.{Environment}.json` layered on top while that file exists, and a change
/// to either reloads both ([`config::environment_file`]).
///
/// ```no_run
/// # async fn run(state: std::sync::Arc<fuseway::state::ProxyState>) {
/// use std::sync::Arc;
/// use fuseway::providers::{FileProvider, Providers};
///
/// let file = Arc::new(FileProvider::open("proxy.json".into(), Vec::new()));
/// file.watch().expect("watch the file's directory");
/// let providers = Arc::new(Providers::new(vec![file]));
/// let _task = providers.spawn(state);
/// # }
/// ```
#[derive(Debug)]
pub struct FileProvider {
    path: PathBuf,
    source: String,
    /// The file layered on top of it when it exists (`appsettings.{Environment}.json`).
    layer: Option<PathBuf>,
    /// Applied on top of the file at every read (see [`config::parse_with_overrides`]).
    overrides: Vec<(String, String)>,
    snapshot: watch::Sender<ProviderSnapshot>,
    /// The contents of the file and of its layer (`None`: absent) at the last read.
    last: Mutex<Option<Contents>>,
    watcher: Mutex<Option<FileWatcher>>,
}

impl FileProvider {
    /// The file at `path`, read now, with these .NET-style overrides applied at every
    /// read (the binary passes [`config::env_overrides`], read once at start).
    pub fn open(path: PathBuf, overrides: Vec<(String, String)>) -> Self {
        let provider = FileProvider {
            source: path.display().to_string(),
            layer: config::environment_file(&path, &overrides),
            path,
            overrides,
            snapshot: watch::Sender::new(ProviderSnapshot::default()),
            last: Mutex::new(None),
            watcher: Mutex::new(None),
        };
        provider.read();
        provider
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the file now.
    fn read(&self) {
        match self.contents() {
            Ok(contents) => self.parse(contents),
            Err((path, e)) => self.cannot_read(path, e),
        }
    }

    /// The file's contents and its layer's, or the file that cannot be read and why.
    fn contents(&self) -> Result<Contents, (&Path, std::io::Error)> {
        let file = std::fs::read(&self.path).map_err(|e| (&*self.path, e))?;
        let layer = match &self.layer {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => Some(bytes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err((path, e)),
            },
            None => None,
        };
        Ok(Contents { file, layer })
    }

    fn cannot_read(&self, path: &Path, e: std::io::Error) {
        self.fail(ConfigErrors::from(ConfigError::new(
            "",
            format!("cannot read {}: {e}", path.display()),
        )));
    }

    /// Read the file if its contents (or its layer's) differ from the last read's.
    fn read_if_changed(&self) {
        let contents = match self.contents() {
            Ok(c) => c,
            // Between an editor's delete and its rename: the next event will tell.
            Err((_, e)) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err((path, e)) => return self.cannot_read(path, e),
        };
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref() == Some(&contents) {
            return;
        }
        drop(last);
        self.parse(contents);
    }

    fn parse(&self, contents: Contents) {
        let format = Format::from_path(&self.path).unwrap_or(Format::Json);
        let mut hash = twox_hash::XxHash64::with_seed(0);
        std::hash::Hasher::write(&mut hash, &contents.file);
        if let Some(layer) = &contents.layer {
            std::hash::Hasher::write(&mut hash, layer);
        }
        let version = format!("{:016x}", std::hash::Hasher::finish(&hash));
        let text = |bytes: &[u8], path: &Path| {
            std::str::from_utf8(bytes).map(str::to_string).map_err(|e| {
                ConfigErrors::from(ConfigError::new(
                    "",
                    format!("{}: not UTF-8: {e}", path.display()),
                ))
            })
        };
        let result = text(&contents.file, &self.path).and_then(|file| {
            let layers = match (&contents.layer, &self.layer) {
                (Some(bytes), Some(path)) => vec![(path.display().to_string(), text(bytes, path)?)],
                _ => Vec::new(),
            };
            config::parse_layered(&file, format, &layers, &self.overrides)
        });
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(contents);
        match result {
            Ok(config) => {
                self.snapshot
                    .send_replace(ProviderSnapshot::read(config, version));
            }
            Err(errors) => self.fail(errors),
        }
    }

    fn fail(&self, errors: ConfigErrors) {
        self.snapshot.send_modify(|s| *s = s.failed(errors, false));
    }

    /// Start watching the file; until [`unwatch`](Self::unwatch) or the provider is
    /// dropped. Must be called within a tokio runtime.
    pub fn watch(self: &Arc<Self>) -> Result<(), notify::Error> {
        let watcher = FileWatcher::spawn(self.clone())?;
        *self.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(watcher);
        Ok(())
    }

    /// Stop watching the file.
    pub fn unwatch(&self) {
        self.watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

impl ConfigProvider for FileProvider {
    fn source(&self) -> &str {
        &self.source
    }

    fn subscribe(&self) -> watch::Receiver<ProviderSnapshot> {
        self.snapshot.subscribe()
    }

    fn reload(&self) {
        self.read();
    }
}

/// What a [`FileProvider`] read: its file, and its layer when that exists.
#[derive(Debug, PartialEq)]
struct Contents {
    file: Vec<u8>,
    layer: Option<Vec<u8>>,
}

/// The notify watcher of a [`FileProvider`]'s directory and the task reading the file
/// once a burst of changes is over. Dropping it stops both.
struct FileWatcher {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FileWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileWatcher")
    }
}

impl FileWatcher {
    fn spawn(provider: Arc<FileProvider>) -> Result<FileWatcher, notify::Error> {
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if let Ok(event) = event {
                    if is_change(&event.kind) {
                        let _ = tx.send(());
                    }
                }
            })?;
        let dir = match provider.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        // The task holds the provider weakly: the provider owns the task.
        let provider = Arc::downgrade(&provider);
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
                let Some(p) = provider.upgrade() else {
                    return;
                };
                let _ = tokio::task::spawn_blocking(move || p.read_if_changed()).await;
            }
        });
        Ok(FileWatcher {
            _watcher: watcher,
            task,
        })
    }
}

impl Drop for FileWatcher {
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
