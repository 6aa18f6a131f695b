//! Every key of the configuration model is listed in `docs/YARP-KEYS.md` with what
//! fuseway does with it, and no key is parsed and then dropped.
//!
//! The model's keys come from serializing a configuration in which every nested object
//! is present (serde writes every field, `null` when unset), so a field added to the
//! model shows up here whether or not anything sets it. A key marked `honoured` or
//! `extension` must be read by code outside the parsing and validation files (the
//! model's own accessors count); one marked
//! `partly` must be checked by validation (which refuses the values not supported); one
//! marked `no effect` must say why. (The source check looks for `.field_name` and so
//! cannot tell apart two fields of the same name: it catches a field nothing reads.)

use std::collections::BTreeSet;
use std::path::Path;

use fuseway::config::ProxyConfig;
use serde_json::Value;

/// Every nested object present once.
const FULL: &str = r#"{
  "AllowedHosts": "example.com",
  "Listen": [{ "Address": "127.0.0.1:0", "Certificate": "c.pem", "Key": "k.pem", "Protocols": "Http2",
               "SslProtocols": ["Tls12"], "ClientCertificateMode": "AllowCertificate",
               "Sni": { "a.example.org": { "Certificate": "a.pem", "Key": "a.key", "Password": "p",
                                           "Protocols": "Http1", "SslProtocols": ["Tls13"],
                                           "ClientCertificateMode": "NoCertificate" } } },
             { "Address": "127.0.0.1:0", "Certificate": "c.pfx", "Password": "p" },
             { "Address": "127.0.0.1:0", "DevelopmentCertificate": true }],
  "Routes": { "r": {
    "Match": { "Headers": [{ "Name": "h" }], "QueryParameters": [{ "Name": "q" }] },
    "RateLimit": { "PermitsPerSecond": 1 }
  } },
  "Clusters": { "c": {
    "SessionAffinity": { "Cookie": {} },
    "HealthCheck": { "Passive": {}, "Active": {} },
    "HttpRequest": {},
    "HttpClient": { "WebProxy": {} },
    "Destinations": { "d": { "Address": "http://127.0.0.1:1" } }
  } },
  "Limits": {
    "MaxRequestBodySize": 1,
    "MinRequestBodyDataRate": { "BytesPerSecond": 1, "GracePeriod": "00:00:05" },
    "MinResponseDataRate": { "BytesPerSecond": 1, "GracePeriod": "00:00:05" },
    "Http2": {}
  },
  "Logging": { "LogLevel": { "Default": "Information" }, "Console": { "LogLevel": { "Yarp": "Debug" } } }
}"#;

/// Objects whose keys are ids, and values that are data rather than keys.
const ID_MAPS: [&str; 4] = ["Routes", "Clusters", "Destinations", "Sni"];
const LEAVES: [&str; 3] = ["Metadata", "Transforms", "LogLevel"];

fn walk(value: &Value, path: &str, keys: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                keys.insert(p.clone());
                if LEAVES.contains(&k.as_str()) {
                    continue;
                }
                if ID_MAPS.contains(&k.as_str()) {
                    for child in v.as_object().expect("an id map").values() {
                        walk(child, &format!("{p}.*"), keys);
                    }
                } else {
                    walk(v, &p, keys);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, &format!("{path}[]"), keys);
            }
        }
        _ => {}
    }
}

/// The model's keys, as `Routes.*.Match.Headers[].Name`.
fn model_keys() -> BTreeSet<String> {
    let config: ProxyConfig = serde_json::from_str(FULL).unwrap();
    let value = serde_json::to_value(&config).unwrap();
    let mut keys = BTreeSet::new();
    walk(&value, "", &mut keys);
    // A map's own key (`Routes`), as opposed to its entries, is structure, not a setting.
    for map in ["Routes", "Clusters", "Clusters.*.Destinations"] {
        keys.remove(map);
    }
    keys
}

/// The documented keys and their status.
fn documented() -> Vec<(String, String, String)> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/YARP-KEYS.md"))
            .unwrap();
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (
                cells[0].trim_matches('`').to_string(),
                cells[1].to_string(),
                cells.get(2).unwrap_or(&"").to_string(),
            )
        })
        .collect()
}

/// `IsCaseSensitive` -> `is_case_sensitive`, `Match` -> `match_`.
fn field_name(key: &str) -> String {
    let last = key.rsplit('.').next().unwrap().trim_end_matches("[]");
    let mut out = String::new();
    for (i, c) in last.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    if out == "match" {
        out.push('_');
    }
    out
}

/// The library's sources, by file name relative to `src/`.
fn sources() -> Vec<(String, String)> {
    fn visit(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                visit(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    visit(&root, &root, &mut out);
    out
}

/// Whether `text` reads the field `name`: `.name` not followed by an identifier
/// character, or a pattern `name: Some(` (an accessor destructuring the model).
fn reads(text: &str, name: &str) -> bool {
    let needle = format!(".{name}");
    text.match_indices(&needle).any(|(i, _)| {
        !text[i + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    }) || text.contains(&format!(" {name}: Some("))
}

/// Files that parse or validate the model: a read there is not a use.
const PARSING: [&str; 3] = ["config/validate.rs", "config/load.rs", "config/binder.rs"];

#[test]
fn every_model_key_is_documented_and_every_documented_key_exists() {
    let model = model_keys();
    let doc = documented();
    let documented: BTreeSet<String> = doc.iter().map(|(k, ..)| k.clone()).collect();
    let missing: Vec<_> = model.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&model).collect();
    assert!(
        missing.is_empty(),
        "keys of the model missing from docs/YARP-KEYS.md: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "rows of docs/YARP-KEYS.md the model does not have: {stale:?}"
    );
    assert!(
        model.len() > 80,
        "the walk found the model's keys: {}",
        model.len()
    );
}

#[test]
fn no_key_is_parsed_and_then_dropped() {
    let sources = sources();
    let read_in = |name: &str, keep: &dyn Fn(&str) -> bool| {
        sources
            .iter()
            .filter(|(file, _)| keep(file))
            .any(|(_, text)| reads(text, name))
    };
    let mut problems = Vec::new();
    for (key, status, notes) in documented() {
        let field = field_name(&key);
        let ok = match status.as_str() {
            "honoured" | "extension" => read_in(&field, &|f| !PARSING.contains(&f)),
            "partly" => read_in(&field, &|f| f == "config/validate.rs" || f == "policy.rs"),
            "no effect" => notes.len() > 20,
            other => {
                problems.push(format!("{key}: unknown status `{other}`"));
                continue;
            }
        };
        if !ok {
            problems.push(format!(
                "{key} ({status}): `.{field}` is not read where it should be"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_walk_and_the_source_check_can_fail() {
    // The walk sees a key only the model has...
    assert!(model_keys().contains("Clusters.*.HttpClient.SslProtocols"));
    // ...and the source check tells a read field from one nothing reads.
    assert!(reads("let x = c.ssl_protocols;", "ssl_protocols"));
    assert!(!reads("let x = c.ssl_protocols_v2;", "ssl_protocols"));
    assert!(!reads("ssl_protocols", "ssl_protocols"));
    assert_eq!(field_name("Routes.*.Match"), "match_");
    assert_eq!(
        field_name("Routes.*.Match.Headers[].IsCaseSensitive"),
        "is_case_sensitive"
    );
}
