//! Configuration errors that name the field they are about.

use std::fmt;

/// One problem in a configuration, with the dotted path of the field it is about
/// (`Routes.r1.Match.Path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending field; empty for the document as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about the field at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in a configuration; a configuration with any is rejected whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Whether no problem was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Record a problem.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError::new(path, message));
    }

    /// `Ok(())` when empty, else `Err(self)`.
    pub fn into_result(self) -> Result<(), ConfigErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The errors, for matching in tests.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
