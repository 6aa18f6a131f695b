//! Loading a configuration from JSON or TOML text. (stub: filled in by the config work)

use std::path::Path;

use super::{ConfigErrors, ProxyConfig};

/// The syntax of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, as YARP's `appsettings.json`.
    Json,
    /// TOML with the same keys.
    Toml,
}

/// Parse and validate a configuration.
pub fn parse(_text: &str, _format: Format) -> Result<ProxyConfig, ConfigErrors> {
    todo!()
}

/// Read, parse and validate a configuration file; the format follows the extension.
pub fn load_file(_path: &Path) -> Result<ProxyConfig, ConfigErrors> {
    todo!()
}
