//! Loading a configuration from JSON or TOML text.
//!
//! Two shapes are accepted:
//!
//! * YARP's `appsettings.json` shape, where the proxy object is under `ReverseProxy` and
//!   other top-level keys (`Logging`, `AllowedHosts`, `Kestrel`, ...) are ignored. A
//!   top-level `Listen` beside `ReverseProxy` is read too.
//! * The bare proxy object (`Listen`, `Routes`, `Clusters`), where unknown keys are errors.
//!
//! Error paths are relative to the proxy object in both shapes (`Routes.r1.Match.Path`).
//!
//! ```
//! use fuseway::config::{parse, Format};
//! let config = parse(
//!     r#"{ "Logging": {}, "ReverseProxy": { "Clusters": { "c1": {} } } }"#,
//!     Format::Json,
//! )
//! .unwrap();
//! assert!(config.clusters.contains_key("c1"));
//!
//! let err = parse("[Routes.r1]\nClusterIdd = \"c1\"\n", Format::Toml).unwrap_err();
//! assert_eq!(err.iter().next().unwrap().path, "Routes.r1");
//! ```

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_path_to_error::Segment;

use super::{ConfigError, ConfigErrors, ListenConfig, ProxyConfig};

/// The top-level key of the proxy object in YARP's `appsettings.json`.
const WRAPPER: &str = "ReverseProxy";

/// The syntax of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, as YARP's `appsettings.json`.
    Json,
    /// TOML with the same keys.
    Toml,
}

impl Format {
    /// The format a file name's extension (`.json`, `.toml`, any case) stands for.
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?;
        if ext.eq_ignore_ascii_case("json") {
            Some(Format::Json)
        } else if ext.eq_ignore_ascii_case("toml") {
            Some(Format::Toml)
        } else {
            None
        }
    }
}

/// YARP's `appsettings.json` shape; keys other than these are ignored.
#[derive(Deserialize)]
struct Document {
    #[serde(rename = "ReverseProxy")]
    reverse_proxy: ProxyConfig,
    #[serde(rename = "Listen", default)]
    listen: Vec<ListenConfig>,
}

impl Document {
    /// The proxy object, with the top-level listeners first.
    fn into_config(self) -> ProxyConfig {
        let mut config = self.reverse_proxy;
        if !self.listen.is_empty() {
            let inner = std::mem::replace(&mut config.listen, self.listen);
            config.listen.extend(inner);
        }
        config
    }
}

/// Parse and validate a configuration, in either accepted shape.
///
/// Syntax errors give the line and column; other errors name the path of the bad field.
pub fn parse(text: &str, format: Format) -> Result<ProxyConfig, ConfigErrors> {
    // Editors on Windows like to start appsettings.json with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let config = match format {
        Format::Json => parse_json(text)?,
        Format::Toml => parse_toml(text)?,
    };
    config.validate()?;
    Ok(config)
}

/// Read, parse and validate a configuration file; the format follows the extension
/// (`.json` or `.toml`).
pub fn load_file(path: &Path) -> Result<ProxyConfig, ConfigErrors> {
    let format = Format::from_path(path).ok_or_else(|| {
        ConfigError::new(
            "",
            format!(
                "{}: unsupported configuration file type; expected a `.json` or `.toml` file",
                path.display()
            ),
        )
    })?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("", format!("cannot read {}: {e}", path.display())))?;
    parse(&text, format)
}

fn parse_json(text: &str) -> Result<ProxyConfig, ConfigError> {
    // A first pass finds syntax errors and which shape the document has.
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ConfigError::new("", format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ConfigError::new(
            "",
            "the configuration must be a JSON object",
        ));
    }
    let wrapped = value.get(WRAPPER).is_some();
    // The second pass reads the text again so that errors keep their line and column.
    let json = |e: serde_json::Error| e.to_string();
    if wrapped {
        let doc: Document = typed(&mut serde_json::Deserializer::from_str(text), true, json)?;
        Ok(doc.into_config())
    } else {
        typed(&mut serde_json::Deserializer::from_str(text), false, json)
    }
}

fn parse_toml(text: &str) -> Result<ProxyConfig, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        ConfigError::new("", format!("invalid TOML: {}", toml_message(text, &e)))
    })?;
    let wrapped = table.contains_key(WRAPPER);
    let message = |e: toml::de::Error| toml_message(text, &e);
    if wrapped {
        let doc: Document = typed(toml::Deserializer::new(text), true, message)?;
        Ok(doc.into_config())
    } else {
        typed(toml::Deserializer::new(text), false, message)
    }
}

/// Deserialize `T`, turning an error into one that names the field's dotted path.
fn typed<'de, T, D>(
    de: D,
    wrapped: bool,
    message: impl FnOnce(D::Error) -> String,
) -> Result<T, ConfigError>
where
    T: DeserializeOwned,
    D: serde::Deserializer<'de>,
{
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().clone();
        let segments: Vec<&Segment> = path.iter().collect();
        let message = message(e.into_inner());
        ConfigError::new(dotted_path(&segments, wrapped, &message), message)
    })
}

/// `Routes.r1.Match.Hosts[0]`; drops the leading `ReverseProxy` of the wrapped shape,
/// and the unknown key itself from an "unknown field" error so that the path names the
/// object that does not have it.
fn dotted_path(mut segments: &[&Segment], wrapped: bool, message: &str) -> String {
    if let (true, [Segment::Map { key }, rest @ ..]) = (wrapped, segments) {
        if key == WRAPPER {
            segments = rest;
        }
    }
    if let [rest @ .., Segment::Map { key }] = segments {
        if message.starts_with(&format!("unknown field `{key}`")) {
            segments = rest;
        }
    }
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// A TOML error's message with `at line L column C` instead of a source excerpt.
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', ": ");
    match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("{message} at line {line} column {column}")
        }
        None => message,
    }
}

/// One-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_error(text: &str, format: Format) -> ConfigError {
        match parse(text, format) {
            Ok(config) => panic!("expected an error, got {config:?}"),
            Err(errors) => errors.0.into_iter().next().expect("at least one error"),
        }
    }

    #[test]
    fn unknown_field_names_its_parent() {
        let e = first_error(
            r#"{"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c", "Match": {"Pathh": "/"}}}}}"#,
            Format::Json,
        );
        assert_eq!(e.path, "Routes.r1.Match");
        assert!(e.message.contains("unknown field `Pathh`"), "{e}");
        assert!(e.message.contains("line 1"), "{e}");
    }

    #[test]
    fn sequence_indexes_use_brackets() {
        let e = first_error(
            r#"{"Routes": {"r1": {"Match": {"Hosts": ["a", 5]}}}}"#,
            Format::Json,
        );
        assert_eq!(e.path, "Routes.r1.Match.Hosts[1]");
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        let e = first_error("{\n  \"Routes\": {,\n}", Format::Json);
        assert_eq!(e.path, "");
        assert!(e.message.contains("line 2 column"), "{e}");

        let e = first_error("[Routes.r1]\nClusterId = \n", Format::Toml);
        assert_eq!(e.path, "");
        assert!(e.message.contains("line 2 column"), "{e}");
        assert!(!e.message.contains('|'), "no source excerpt: {e}");
    }

    #[test]
    fn toml_type_errors_name_the_field_and_line() {
        let e = first_error(
            "[ReverseProxy.Routes.r1]\nClusterId = \"c\"\nOrder = \"first\"\n",
            Format::Toml,
        );
        assert_eq!(e.path, "Routes.r1.Order");
        assert!(e.message.contains("line 3"), "{e}");
    }

    #[test]
    fn top_level_listen_comes_first() {
        let config = parse(
            r#"{"Listen": ["127.0.0.1:1"], "ReverseProxy": {"Listen": ["127.0.0.1:2"]}}"#,
            Format::Json,
        )
        .unwrap();
        let addresses: Vec<&str> = config.listen.iter().map(|l| l.address()).collect();
        assert_eq!(addresses, ["127.0.0.1:1", "127.0.0.1:2"]);
    }

    #[test]
    fn document_must_be_an_object() {
        let e = first_error("[1, 2]", Format::Json);
        assert_eq!(e.path, "");
        assert!(e.message.contains("must be a JSON object"), "{e}");
    }

    #[test]
    fn listen_entries_say_what_they_expect() {
        let e = first_error(r#"{"Listen": ["127.0.0.1:1", 5]}"#, Format::Json);
        assert_eq!(e.path, "Listen[1]");
        assert!(
            e.message.contains("an `ip:port` string or an object"),
            "{e}"
        );
        let e = first_error(r#"{"Listen": [{"Adress": "x"}]}"#, Format::Json);
        assert_eq!(e.path, "Listen[0]");
        assert!(e.message.contains("unknown field `Adress`"), "{e}");
        let config = parse(r#"{"Listen": [{"Address": "[::1]:80"}]}"#, Format::Json).unwrap();
        assert_eq!(config.listen[0].address(), "[::1]:80");
    }

    #[test]
    fn byte_order_mark_is_skipped() {
        assert!(parse("\u{feff}{}", Format::Json).is_ok());
    }

    #[test]
    fn line_columns() {
        assert_eq!(line_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é\nx", 3), (2, 1));
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(Format::from_path(Path::new("a.JSON")), Some(Format::Json));
        assert_eq!(Format::from_path(Path::new("a/b.toml")), Some(Format::Toml));
        assert_eq!(Format::from_path(Path::new("a.yaml")), None);
        assert_eq!(Format::from_path(Path::new("json")), None);
    }
}
