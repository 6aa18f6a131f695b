//! Configuration providers: where routes and clusters come from.
//!
//! A [`ConfigProvider`] is YARP's `IProxyConfigProvider` idea: it holds the latest good
//! configuration read from its source, and tells when that changes. fuseway ships two:
//!
//! * [`FileProvider`] (feature `watch`, in the binary): a JSON or TOML file, watched and
//!   re-read when it changes;
//! * [`EtcdProvider`] (feature `etcd`, in the binary): one key per route, cluster and
//!   destination under a prefix of an etcd cluster, watched from the revision it read, so
//!   that a fleet of instances runs one configuration and backends can register
//!   themselves under a lease.
//!
//! [`Providers`] runs several at once: their routes and clusters are merged (an id
//! defined by two providers is an error naming both), the merged configuration is
//! validated whole and swapped into a [`ProxyState`] atomically, and when anything is
//! wrong the configuration that runs keeps serving and the error is logged, counted and
//! shown on the status page ([`Metrics::config_sources`](crate::telemetry::Metrics::config_sources)).
//!
//! A provider of one's own implements the trait: keep a [`watch::Sender`] of
//! [`ProviderSnapshot`]s and send a new one whenever the source changes.
//!
//! ```
//! use std::sync::Arc;
//! use fuseway::config::{parse, Format};
//! use fuseway::providers::{ConfigProvider, ProviderSnapshot, Providers};
//! use tokio::sync::watch;
//!
//! /// Routes and clusters given in code.
//! struct Fixed(watch::Sender<ProviderSnapshot>);
//!
//! impl ConfigProvider for Fixed {
//!     fn source(&self) -> &str {
//!         "fixed"
//!     }
//!     fn subscribe(&self) -> watch::Receiver<ProviderSnapshot> {
//!         self.0.subscribe()
//!     }
//! }
//!
//! let config = parse(r#"{ "Clusters": { "c1": {} } }"#, Format::Json).unwrap();
//! let fixed = Fixed(watch::Sender::new(ProviderSnapshot::read(config, "1")));
//! let providers = Providers::new(vec![Arc::new(fixed)]);
//! let merged = providers.merged().unwrap();
//! assert!(merged.clusters.contains_key("c1"));
//! ```

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "watch")]
mod file;
mod merge;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{ConfigError, ConfigErrors, ProxyConfig};
use crate::state::ProxyState;
use crate::telemetry::ConfigSourceStatus;

#[cfg(feature = "etcd")]
pub use etcd::{EtcdOptions, EtcdProvider};
#[cfg(feature = "watch")]
pub use file::{FileProvider, DEBOUNCE};
pub use merge::merge;

/// A source of routes and clusters (and, for files, listeners): the latest good
/// configuration read from it, and a signal when that changes.
pub trait ConfigProvider: Send + Sync + 'static {
    /// The source, as logs, errors and the status page name it: a file's path, an
    /// `etcd://` URL.
    fn source(&self) -> &str;

    /// The provider's state now; the receiver's `changed()` resolves at the next change.
    fn subscribe(&self) -> watch::Receiver<ProviderSnapshot>;

    /// Read the source again now (`SIGHUP`). Sources that push their changes need not
    /// (the default does nothing).
    fn reload(&self) {}
}

/// What a provider holds at one moment.
#[derive(Debug, Clone, Default)]
pub struct ProviderSnapshot {
    /// The last configuration read and validated from the source; `None` until one has
    /// been.
    pub config: Option<Arc<ProxyConfig>>,
    /// Which version of the source `config` is (an etcd revision, a file's digest).
    pub version: String,
    /// The last read's error, when it failed (`config` is then the one before it).
    pub error: Option<Arc<ConfigErrors>>,
    /// Whether the provider is trying again by itself (the source is unreachable), as
    /// opposed to waiting for the source to change (the source is invalid).
    pub retrying: bool,
    /// Where, inside the source, the parts of `config` were read: pairs of a path in the
    /// configuration (`Routes.r1`, `Clusters.c1.Destinations.d1`) and the place that
    /// holds it (an etcd key), most specific first; see [`locate`](Self::locate).
    pub origins: Arc<[(String, String)]>,
}

impl ProviderSnapshot {
    /// A snapshot of a configuration read successfully at `version`.
    pub fn read(config: ProxyConfig, version: impl Into<String>) -> Self {
        ProviderSnapshot {
            config: Some(Arc::new(config)),
            version: version.into(),
            ..ProviderSnapshot::default()
        }
    }

    /// This snapshot, its last read having failed with `error`: the configuration stays.
    pub fn failed(&self, error: ConfigErrors, retrying: bool) -> Self {
        ProviderSnapshot {
            error: Some(Arc::new(error)),
            retrying,
            ..self.clone()
        }
    }

    /// The error `error` (whose path is a path in this snapshot's configuration) as the
    /// source would name it: its path becomes the place of the part it is in (an etcd
    /// key), the rest of the path going to the front of the message. Unchanged when
    /// the source has no finer places than itself (a file).
    pub fn locate(&self, error: ConfigError) -> ConfigError {
        for (prefix, place) in self.origins.iter() {
            let rest = match error.path.strip_prefix(prefix.as_str()) {
                Some("") => "",
                Some(rest) if rest.starts_with('.') => &rest[1..],
                _ => continue,
            };
            let message = if rest.is_empty() {
                error.message
            } else {
                format!("{rest}: {}", error.message)
            };
            return ConfigError::new(place.clone(), message);
        }
        error
    }
}

/// Several providers feeding one [`ProxyState`]: merged, validated whole, applied
/// atomically. See the [module docs](self).
pub struct Providers {
    providers: Vec<Arc<dyn ConfigProvider>>,
    /// What the last [`apply`](Self::apply) saw of each provider (its configuration
    /// and error), so that an apply with nothing new does nothing.
    seen: Mutex<Vec<Seen>>,
    /// What applies a changed `Logging` ([`on_logging_change`](Self::on_logging_change)).
    on_logging: Option<LoggingHook>,
}

/// See [`Providers::on_logging_change`].
type LoggingHook = Box<dyn Fn(&crate::config::LoggingConfig) + Send + Sync>;

/// A provider's configuration and error, by identity.
type Seen = (Option<Arc<ProxyConfig>>, Option<Arc<ConfigErrors>>);

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.providers.iter().map(|p| p.source()))
            .finish()
    }
}

impl Providers {
    /// Run these providers (in this order: listeners are taken in it, and errors name
    /// the first of two providers defining an id first).
    pub fn new(providers: Vec<Arc<dyn ConfigProvider>>) -> Self {
        Providers {
            providers,
            seen: Mutex::default(),
            on_logging: None,
        }
    }

    /// Call `apply` with the new `Logging` section when an applied configuration changes
    /// it (the binary re-filters its log: `cli::logging::apply_levels`, with the `cli`
    /// feature). Without it, such a change is warned of as needing a restart.
    pub fn on_logging_change(
        mut self,
        apply: impl Fn(&crate::config::LoggingConfig) + Send + Sync + 'static,
    ) -> Self {
        self.on_logging = Some(Box::new(apply));
        self
    }

    /// The providers' sources, in order.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.providers.iter().map(|p| p.source())
    }

    /// Every provider's snapshot now.
    fn snapshots(&self) -> Vec<ProviderSnapshot> {
        self.providers
            .iter()
            .map(|p| p.subscribe().borrow().clone())
            .collect()
    }

    /// Wait until every provider has read its source once, up to `timeout`, then
    /// [`merged`](Self::merged). A provider whose source is invalid (not merely
    /// unreachable) fails at once with its errors.
    pub async fn first(&self, timeout: Duration) -> Result<ProxyConfig, ConfigErrors> {
        let wait = async {
            for provider in &self.providers {
                let mut rx = provider.subscribe();
                let source = provider.source().to_string();
                let snapshot = rx
                    .wait_for(|s| s.config.is_some() || (s.error.is_some() && !s.retrying))
                    .await
                    .map_err(|_| {
                        ConfigErrors::from(ConfigError::new("", format!("{source}: stopped")))
                    })?;
                if let (None, Some(error)) = (&snapshot.config, &snapshot.error) {
                    return Err(self.in_source(&source, (**error).clone()));
                }
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(r) => r?,
            Err(_) => {
                let mut errors = ConfigErrors::default();
                for (p, s) in self.providers.iter().zip(self.snapshots()) {
                    if s.config.is_none() {
                        let why = s.error.map_or("no answer".to_string(), |e| e.to_string());
                        errors.push(
                            "",
                            format!("{}: not read within {timeout:?}: {why}", p.source()),
                        );
                    }
                }
                return Err(errors);
            }
        }
        self.merged()
    }

    /// The providers' configurations now, merged (see [`merge`]); errors are named as
    /// the sources name them (an etcd key).
    pub fn merged(&self) -> Result<ProxyConfig, ConfigErrors> {
        let snapshots = self.snapshots();
        self.merge_snapshots(&snapshots)
            .map_err(|e| located_errors(&snapshots, e))
    }

    /// Errors about the merged configuration (from [`ProxyState::new`], say), each named
    /// as the provider holding its route or cluster names it (an etcd key).
    pub fn locate(&self, errors: ConfigErrors) -> ConfigErrors {
        located_errors(&self.snapshots(), errors)
    }

    fn merge_snapshots(&self, snapshots: &[ProviderSnapshot]) -> Result<ProxyConfig, ConfigErrors> {
        let empty = ProxyConfig::default();
        let parts: Vec<(&str, &ProxyConfig)> = self
            .providers
            .iter()
            .zip(snapshots)
            .map(|(p, s)| (p.source(), s.config.as_deref().unwrap_or(&empty)))
            .collect();
        merge(&parts)
    }

    /// Read every source again now (`SIGHUP`) and apply the result, even if nothing
    /// changed.
    pub fn reload(&self, state: &ProxyState) -> Result<(), ConfigErrors> {
        for provider in &self.providers {
            provider.reload();
        }
        self.apply(state, true)
    }

    /// Merge the providers' configurations and swap the result into `state` (unless it
    /// is what runs already and `force` is false). On error the running configuration
    /// stays. The outcome is logged and counted (`fuseway_config_reloads_total`), and
    /// each provider's version and error set on the state's metrics.
    pub fn apply(&self, state: &ProxyState, force: bool) -> Result<(), ConfigErrors> {
        let snapshots = self.snapshots();
        let seen: Vec<Seen> = snapshots
            .iter()
            .map(|s| (s.config.clone(), s.error.clone()))
            .collect();
        {
            let mut last = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let same = |(a, b): (&Seen, &Seen)| {
                fn eq<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
                    match (a, b) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    }
                }
                eq(&a.0, &b.0) && eq(&a.1, &b.1)
            };
            if !force && last.len() == seen.len() && last.iter().zip(&seen).all(same) {
                // Reported when it was new.
                return Ok(());
            }
            *last = seen;
        }
        // A provider's own error (its source invalid) is reported; the others' changes
        // still apply over its last good configuration. An unreachable source is only
        // shown (the provider logs its retries): it is not a rejected configuration.
        let mut own = ConfigErrors::default();
        for (p, s) in self.providers.iter().zip(&snapshots) {
            if let (Some(e), false) = (&s.error, s.retrying) {
                own.0.extend(self.in_source(p.source(), (**e).clone()).0);
            }
        }
        let applied = self
            .apply_snapshots(state, &snapshots, force)
            .map_err(|e| located(&snapshots, e).collect::<Vec<_>>());
        let metrics = state.metrics();
        // Each provider's status shows its own error and those of the merged
        // configuration in its parts (all of them when they are in no provider's part).
        let mut errors: Vec<Vec<String>> = snapshots
            .iter()
            .map(|s| s.error.iter().map(|e| e.to_string()).collect())
            .collect();
        if let Err(merged) = &applied {
            for (owner, e) in merged {
                match owner {
                    Some(i) => errors[*i].push(e.to_string()),
                    None => errors.iter_mut().for_each(|list| list.push(e.to_string())),
                }
            }
        }
        let statuses = self
            .providers
            .iter()
            .zip(&snapshots)
            .zip(errors)
            .map(|((p, s), errors)| ConfigSourceStatus {
                source: p.source().to_string(),
                version: s.version.clone(),
                error: (!errors.is_empty()).then(|| errors.join("; ")),
            })
            .collect();
        metrics.set_config_sources(statuses);
        let config = self.sources_list();
        match applied {
            Ok(true) => {
                metrics.record_reload(true);
                tracing::info!(%config, "configuration reloaded");
            }
            Ok(false) => {}
            Err(merged) => {
                let mut merged: Vec<ConfigError> = merged.into_iter().map(|(_, e)| e).collect();
                merged.append(&mut own.0);
                own = ConfigErrors(merged);
            }
        }
        if own.is_empty() {
            return Ok(());
        }
        metrics.record_reload(false);
        tracing::error!(
            %config,
            error = %own,
            "configuration rejected; the previous one keeps serving"
        );
        Err(own)
    }

    fn sources_list(&self) -> String {
        self.sources().collect::<Vec<_>>().join(",")
    }

    /// `errors` of the provider reading `source`, which the message names when there is
    /// more than one provider.
    fn in_source(&self, source: &str, errors: ConfigErrors) -> ConfigErrors {
        if self.providers.len() < 2 {
            return errors;
        }
        ConfigErrors(
            errors
                .0
                .into_iter()
                .map(|e| {
                    if e.message.starts_with(source) || e.path.starts_with(source) {
                        e
                    } else {
                        ConfigError::new(e.path, format!("{} (in {source})", e.message))
                    }
                })
                .collect(),
        )
    }

    /// Whether a new configuration was applied; errors are about the merged
    /// configuration (paths in it, not yet [`located`]).
    fn apply_snapshots(
        &self,
        state: &ProxyState,
        snapshots: &[ProviderSnapshot],
        force: bool,
    ) -> Result<bool, ConfigErrors> {
        let config = self.merge_snapshots(snapshots)?;
        let running = state.snapshot();
        if !force && &config == running.config() {
            return Ok(false);
        }
        let listen_changed = config.listen != running.config().listen;
        let logging = (config.logging != running.config().logging).then(|| config.logging.clone());
        crate::server::Server::check_listeners(&config.listen)?;
        state.update(config)?;
        if listen_changed {
            tracing::warn!(
                config = %self.sources_list(),
                "`Listen` changed: listeners are bound at start, so the change needs a \
                 restart (the rest of the configuration is applied; listener \
                 certificates reload on SIGHUP)"
            );
        }
        if let Some(logging) = logging {
            match &self.on_logging {
                Some(apply) => apply(&logging),
                None => tracing::warn!(
                    config = %self.sources_list(),
                    "`Logging` changed: nothing applies the log levels here, so the change \
                     needs a restart (the rest of the configuration is applied)"
                ),
            }
        }
        Ok(true)
    }

    /// Apply every change of every provider to `state` until the returned task is
    /// aborted (or dropped with its [`ProvidersTask`]). The first application happens
    /// at once, so the statuses are set. Must be called within a tokio runtime.
    pub fn spawn(self: Arc<Self>, state: Arc<ProxyState>) -> ProvidersTask {
        let mut receivers: Vec<_> = self.providers.iter().map(|p| p.subscribe()).collect();
        let task = tokio::spawn(async move {
            loop {
                let (this, s) = (self.clone(), state.clone());
                let _ = tokio::task::spawn_blocking(move || this.apply(&s, false)).await;
                if receivers.is_empty() {
                    return;
                }
                // Until the next change, free the replaced configurations here as the
                // requests holding them finish (10 ms, doubling up to 1 s while some
                // long request keeps one).
                let mut wait = Duration::from_millis(10);
                let changed = loop {
                    let s = state.clone();
                    let held = tokio::task::spawn_blocking(move || s.release_retired())
                        .await
                        .unwrap_or(0);
                    let changes = receivers.iter_mut().map(|rx| Box::pin(rx.changed()));
                    let next = futures_util::future::select_all(changes);
                    if held == 0 {
                        break next.await.0;
                    }
                    match tokio::time::timeout(wait, next).await {
                        Ok((changed, _, _)) => break changed,
                        Err(_) => wait = (wait * 2).min(Duration::from_secs(1)),
                    }
                };
                if changed.is_err() {
                    // A provider is gone: keep the last configuration.
                    return;
                }
            }
        });
        ProvidersTask(task)
    }
}

/// The task applying providers' changes ([`Providers::spawn`]); dropping it stops it.
#[derive(Debug)]
pub struct ProvidersTask(tokio::task::JoinHandle<()>);

impl Drop for ProvidersTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Errors about the merged configuration, each with the index of the provider holding
/// the route or cluster it is about, and named as that provider names it (an etcd key).
fn located(
    snapshots: &[ProviderSnapshot],
    errors: ConfigErrors,
) -> impl Iterator<Item = (Option<usize>, ConfigError)> + '_ {
    errors
        .0
        .into_iter()
        .map(|e| match owner(snapshots, &e.path) {
            Some(i) => (Some(i), snapshots[i].locate(e)),
            None => (None, e),
        })
}

/// [`located`], the errors alone.
fn located_errors(snapshots: &[ProviderSnapshot], errors: ConfigErrors) -> ConfigErrors {
    ConfigErrors(located(snapshots, errors).map(|(_, e)| e).collect())
}

/// The index of the snapshot whose configuration holds the route or cluster `path`
/// (`Routes.r1.Match.Path`) is about.
fn owner(snapshots: &[ProviderSnapshot], path: &str) -> Option<usize> {
    let (section, rest) = path.split_once('.')?;
    snapshots.iter().position(|s| {
        let Some(config) = &s.config else {
            return false;
        };
        let ids: Box<dyn Iterator<Item = &String>> = match section {
            "Routes" => Box::new(config.routes.keys()),
            "Clusters" => Box::new(config.clusters.keys()),
            _ => return false,
        };
        ids.into_iter().any(|id| {
            rest.strip_prefix(id.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with('.'))
        })
    })
}
