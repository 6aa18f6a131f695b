//! Validation of a whole configuration. (stub: filled in by the config work)

use super::{ConfigErrors, ProxyConfig};

impl ProxyConfig {
    /// Check everything; any error rejects the whole configuration.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        Ok(())
    }
}
