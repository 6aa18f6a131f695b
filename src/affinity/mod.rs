//! Session affinity. (stub: filled in by the affinity work)

use base64::Engine;

use crate::config::{ConfigError, SessionAffinityConfig};
use crate::request::{ProxyResponse, Routed};
use crate::stage::Stage;

/// Parse a `SessionAffinity.EncryptionKey`: 32 bytes, base64.
pub fn parse_key(key: &str) -> Result<[u8; 32], String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|e| format!("not valid base64: {e}"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("must be 32 bytes, not {}", b.len()))
}

/// A cluster's affinity settings, resolved from its configuration.
#[derive(Debug)]
pub struct AffinitySettings {
    _private: (),
}

impl AffinitySettings {
    /// Resolve; `None` when affinity is not enabled. `path` is the cluster's config path.
    pub(crate) fn from_config(
        config: Option<&SessionAffinityConfig>,
        _cluster_id: &str,
        _path: &str,
    ) -> Result<Option<Self>, ConfigError> {
        Ok(config
            .filter(|c| c.enabled == Some(true))
            .map(|_| AffinitySettings { _private: () }))
    }
}

/// The session-affinity stage.
#[derive(Debug, Clone, Default)]
pub struct SessionAffinity {
    _private: (),
}

impl SessionAffinity {
    /// The session-affinity stage.
    pub fn new() -> Self {
        SessionAffinity::default()
    }
}

impl<B> Stage<Routed<B>> for SessionAffinity {
    type Out = Routed<B>;
    type State = ();

    fn on_request(&self, routed: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        Ok((routed, ()))
    }
}
