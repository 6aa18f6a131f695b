//! Loading and validating configurations through the public API.
//!
//! Every route here has a distinct, valid `Match.Path`, so route-table (match) errors
//! never appear and these tests do not depend on the routing work.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fuseway::config::{
    load_file, parse, ConfigDuration, ConfigErrors, Format, HttpVersion, LoadBalancingPolicyName,
    ProxyConfig, Transform,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load_fixture(name: &str) -> ProxyConfig {
    load_file(&fixture(name)).unwrap_or_else(|e| panic!("{name} should load: {e}"))
}

fn json_errors(text: &str) -> ConfigErrors {
    match parse(text, Format::Json) {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(errors) => errors,
    }
}

/// The paths of all errors of a JSON configuration.
fn paths(text: &str) -> Vec<String> {
    json_errors(text).iter().map(|e| e.path.clone()).collect()
}

/// The single error of a JSON configuration; panics unless there is exactly one.
fn only_error(text: &str) -> (String, String) {
    let errors = json_errors(text);
    assert_eq!(errors.0.len(), 1, "expected one error, got: {errors}");
    let e = &errors.0[0];
    (e.path.clone(), e.message.clone())
}

/// A bare configuration with one cluster `c1` whose body is `body`.
fn cluster(body: &str) -> String {
    format!(r#"{{ "Clusters": {{ "c1": {body} }} }}"#)
}

/// A bare configuration with one route `r1` (matching `/r1`) whose extra keys are `extra`.
fn route(extra: &str) -> String {
    format!(
        r#"{{ "Routes": {{ "r1": {{ "Match": {{ "Path": "/r1" }} {extra} }} }},
             "Clusters": {{ "c1": {{}} }} }}"#
    )
}

// ---------------------------------------------------------------------------------------
// Loading

#[test]
fn json_and_toml_fixtures_are_the_same_configuration() {
    let json = load_fixture("appsettings.json");
    let toml = load_fixture("appsettings.toml");
    assert_eq!(json, toml);

    assert_eq!(json.listen.len(), 1);
    assert_eq!(json.listen[0].address(), "127.0.0.1:8080");
    assert_eq!(
        json.routes.keys().collect::<Vec<_>>(),
        ["api", "beta", "static"]
    );
    let api = &json.routes["api"];
    assert_eq!(api.timeout, Some(ConfigDuration(Duration::from_secs(30))));
    assert_eq!(api.transforms.len(), 4);
    let backend = &json.clusters["backend"];
    assert_eq!(backend.destinations.len(), 2);
    let active = backend
        .health_check
        .as_ref()
        .and_then(|h| h.active.as_ref())
        .expect("active health check");
    assert_eq!(
        active.interval.map(ConfigDuration::get),
        Some(Duration::from_secs(10))
    );
    let cookie = backend
        .session_affinity
        .as_ref()
        .and_then(|a| a.cookie.as_ref())
        .expect("affinity cookie");
    assert_eq!(
        cookie.max_age.map(ConfigDuration::get),
        Some(Duration::from_secs(86400))
    );
}

#[test]
fn fixture_policies_and_transforms_parse_to_typed_values() {
    let config = load_fixture("appsettings.json");
    let backend = &config.clusters["backend"];
    let policy: LoadBalancingPolicyName = backend
        .load_balancing_policy
        .as_deref()
        .unwrap_or_default()
        .parse()
        .expect("valid policy");
    assert_eq!(policy, LoadBalancingPolicyName::LeastRequests);
    let version: HttpVersion = backend
        .http_request
        .as_ref()
        .and_then(|r| r.version.as_deref())
        .unwrap_or_default()
        .parse()
        .expect("valid version");
    assert_eq!(version, HttpVersion::Http2);

    let transforms = fuseway::config::parse_transforms(
        &config.routes["api"].transforms,
        "Routes.api.Transforms",
    )
    .expect("valid transforms");
    assert_eq!(transforms[0], Transform::PathRemovePrefix("/api".into()));
    assert!(matches!(transforms[2], Transform::XForwarded(_)));
}

#[test]
fn bare_object_parses_like_the_wrapped_one() {
    let text = std::fs::read_to_string(fixture("appsettings.json")).expect("fixture");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let mut bare = doc["ReverseProxy"].clone();
    bare["Listen"] = doc["Listen"].clone();
    bare["AllowedHosts"] = doc["AllowedHosts"].clone();
    bare["Logging"] = doc["Logging"].clone();
    let bare = parse(&bare.to_string(), Format::Json).expect("bare object parses");
    assert_eq!(bare, load_fixture("appsettings.json"));
}

#[test]
fn bare_and_wrapped_toml_agree() {
    let body = "ClusterId = \"c1\"\nMatch = { Path = \"/a\" }\n";
    let bare = parse(&format!("[Routes.r1]\n{body}"), Format::Toml).expect("bare");
    let wrapped =
        parse(&format!("[ReverseProxy.Routes.r1]\n{body}"), Format::Toml).expect("wrapped");
    assert_eq!(bare, wrapped);
    assert_eq!(bare.routes["r1"].cluster_id.as_deref(), Some("c1"));
}

#[test]
fn wrapped_shape_ignores_other_top_level_keys() {
    // `Logging`'s levels are read; its providers' settings, and other sections, are not.
    let config = parse(
        r#"{ "Logging": { "LogLevel": { "Default": "Debug" }, "Console": { "FormatterName": "json" },
                          "EventLog": { "LogLevel": { "Default": "Error" } } },
             "Other": { "X": 1 },
             "Kestrel": { "Endpoints": {}, "AddServerHeader": false }, "ReverseProxy": {} }"#,
        Format::Json,
    )
    .expect("parses");
    assert_eq!(config.logging.directives().as_deref(), Some("debug"));
    let mut expected = ProxyConfig::default();
    expected.logging = config.logging.clone();
    assert_eq!(config, expected);
    // A level that is not one is refused, named.
    let (path, message) =
        only_error(r#"{ "Logging": { "LogLevel": { "Yarp": "Verbose" } }, "ReverseProxy": {} }"#);
    assert_eq!(path, "Logging.LogLevel.Yarp");
    assert!(
        message.contains("`Verbose` is not a log level"),
        "{message}"
    );
}

#[test]
fn unknown_fields_are_rejected_with_their_path() {
    let (path, message) = only_error(
        r#"{ "ReverseProxy": { "Routes": { "r1": { "ClusterId": "c1", "Match": { "Pathh": "/" } } } } }"#,
    );
    assert_eq!(path, "Routes.r1.Match");
    assert!(
        message.starts_with("unknown field `Pathh` (did you mean `Path`?), expected one of"),
        "{message}"
    );

    let errors = json_errors(r#"{ "Clusters": { "c1": { "LoadBalancing": "Random" } } }"#);
    assert_eq!(
        errors.to_string().split(':').next(),
        Some("Clusters.c1"),
        "{errors}"
    );

    // In the bare shape, top-level keys are checked too.
    let (path, message) = only_error(r#"{ "Routes": {}, "Kestrel": {} }"#);
    assert_eq!(path, "");
    assert!(message.contains("unknown field `Kestrel`"), "{message}");

    let err = parse(
        "[ReverseProxy.Clusters.c1.Destinations.d1]\nAddress = \"http://a\"\nAdress = \"x\"\n",
        Format::Toml,
    )
    .expect_err("unknown field");
    assert_eq!(err.0[0].path, "Clusters.c1.Destinations.d1");
    assert!(err.0[0].message.contains("unknown field `Adress`"), "{err}");
}

#[test]
fn type_errors_name_the_field() {
    let (path, _) = only_error(r#"{ "Routes": { "r1": { "Match": { "Hosts": [ { } ] } } } }"#);
    assert_eq!(path, "Routes.r1.Match.Hosts[0]");

    let (path, message) = only_error(r#"{ "Routes": { "r1": { "Timeout": "soon" } } }"#);
    assert_eq!(path, "Routes.r1.Timeout");
    assert!(message.contains("invalid duration"), "{message}");

    let (path, _) = only_error(
        r#"{ "ReverseProxy": { "Routes": { "r1": { "Transforms": [ {}, { "PathSet": [] } ] } } } }"#,
    );
    assert_eq!(path, "Routes.r1.Transforms[1].PathSet");
}

#[test]
fn syntax_errors_give_line_and_column() {
    let (path, message) = only_error("{\n  \"Routes\": {\n    \"r1\": {\"a\" 1},\n}");
    assert_eq!(path, "");
    assert!(message.contains("line 3 column"), "{message}");

    let err = parse("Routes = {\n[Clusters\n", Format::Toml).expect_err("bad TOML");
    assert!(err.0[0].message.contains("line "), "{err}");
}

#[test]
fn load_file_names_the_file_on_failure() {
    let err = load_file(Path::new("proxy.yaml")).expect_err("unsupported extension");
    assert!(err.to_string().contains("proxy.yaml"), "{err}");

    let missing = fixture("does-not-exist.json");
    let err = load_file(&missing).expect_err("missing file");
    assert!(err.to_string().contains("does-not-exist.json"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Validation: listeners and routes

#[test]
fn listen_addresses_must_be_socket_addresses() {
    let paths =
        paths(r#"{ "Listen": [ "127.0.0.1:8080", "localhost:80", { "Address": "0.0.0.0" } ] }"#);
    assert_eq!(paths, ["Listen[1]", "Listen[2].Address"]);
}

#[test]
fn route_needs_a_cluster_id() {
    let text = r#"{ "Routes": { "r1": { "Match": { "Path": "/a" } },
                                "r2": { "ClusterId": " ", "Match": { "Path": "/b" } } } }"#;
    assert_eq!(paths(text), ["Routes.r1.ClusterId", "Routes.r2.ClusterId"]);
}

#[test]
fn route_to_a_missing_cluster_is_accepted() {
    let config = parse(
        r#"{ "Routes": { "r1": { "ClusterId": "nowhere", "Match": { "Path": "/" } } } }"#,
        Format::Json,
    );
    assert!(config.is_ok(), "{config:?}");
}

#[test]
fn route_limits() {
    assert!(parse(
        &route(r#", "ClusterId": "c1", "MaxRequestBodySize": -1"#),
        Format::Json
    )
    .is_ok());
    let (path, _) = only_error(&route(r#", "ClusterId": "c1", "MaxRequestBodySize": -2"#));
    assert_eq!(path, "Routes.r1.MaxRequestBodySize");

    let (path, _) = only_error(&route(r#", "ClusterId": "c1", "Timeout": "00:00:00""#));
    assert_eq!(path, "Routes.r1.Timeout");

    let (path, _) = only_error(&route(
        r#", "ClusterId": "c1", "Timeout": "5s", "TimeoutPolicy": "slow""#,
    ));
    assert_eq!(path, "Routes.r1.TimeoutPolicy");
}

#[test]
fn transform_errors_name_the_entry() {
    let text = route(
        r#", "ClusterId": "c1", "Transforms": [
            { "PathPrefix": "/ok" },
            { "PathPrefixx": "/typo" },
            { "RequestHeader": "X-A" },
            { "ResponseHeader": "X-B", "Set": "v", "When": "Sometimes" },
            { "X-Forwarded": "Set", "Hots": "Off" },
            { "RequestHeadersCopy": "maybe" }
        ]"#,
    );
    let errors = json_errors(&text);
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Routes.r1.Transforms[1]",
            "Routes.r1.Transforms[2]",
            "Routes.r1.Transforms[3]",
            "Routes.r1.Transforms[4]",
            "Routes.r1.Transforms[5]",
        ]
    );
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert!(
        messages[0].contains("unknown transform `PathPrefixx`"),
        "{}",
        messages[0]
    );
    assert!(messages[1].contains("`Set` or `Append`"), "{}", messages[1]);
    assert!(messages[2].contains("Sometimes"), "{}", messages[2]);
    assert!(
        messages[3].contains("unexpected key `Hots`"),
        "{}",
        messages[3]
    );
    assert!(messages[4].contains("`true` or `false`"), "{}", messages[4]);
}

// ---------------------------------------------------------------------------------------
// Validation: clusters

#[test]
fn load_balancing_policy_names() {
    assert!(parse(
        &cluster(r#"{ "LoadBalancingPolicy": "roundrobin" }"#),
        Format::Json
    )
    .is_ok());
    // A name that is no built-in policy may be a custom one registered for the state:
    // building the state decides.
    let config = parse(
        &cluster(r#"{ "LoadBalancingPolicy": "Fastest" }"#),
        Format::Json,
    )
    .unwrap();
    let errors = fuseway::state::ProxyState::new(config).unwrap_err();
    assert_eq!(errors.0.len(), 1, "{errors}");
    let (path, message) = (&errors.0[0].path, &errors.0[0].message);
    assert_eq!(path, "Clusters.c1.LoadBalancingPolicy");
    for name in LoadBalancingPolicyName::NAMES {
        assert!(message.contains(name), "{message} should list {name}");
    }
}

#[test]
fn session_affinity() {
    let (path, _) = only_error(&cluster(r#"{ "SessionAffinity": { "Enabled": true } }"#));
    assert_eq!(path, "Clusters.c1.SessionAffinity.AffinityKeyName");
    let (path, _) = only_error(&cluster(
        r#"{ "SessionAffinity": { "Enabled": true, "AffinityKeyName": "" } }"#,
    ));
    assert_eq!(path, "Clusters.c1.SessionAffinity.AffinityKeyName");
    assert!(parse(
        &cluster(r#"{ "SessionAffinity": { "Enabled": false } }"#),
        Format::Json
    )
    .is_ok());

    let text = cluster(
        r#"{ "SessionAffinity": {
              "Enabled": true, "AffinityKeyName": "k",
              "Policy": "Sticky", "FailurePolicy": "Retry",
              "Cookie": { "SecurePolicy": "Sometimes", "SameSite": "Loose" } } }"#,
    );
    assert_eq!(
        paths(&text),
        [
            "Clusters.c1.SessionAffinity.Policy",
            "Clusters.c1.SessionAffinity.FailurePolicy",
            "Clusters.c1.SessionAffinity.Cookie.SecurePolicy",
            "Clusters.c1.SessionAffinity.Cookie.SameSite",
        ]
    );
    let ok = cluster(
        r#"{ "SessionAffinity": {
              "Enabled": true, "AffinityKeyName": "k", "Policy": "customheader",
              "FailurePolicy": "Return503Error",
              "Cookie": { "SecurePolicy": "None", "SameSite": "Strict" } } }"#,
    );
    assert!(parse(&ok, Format::Json).is_ok());
}

#[test]
fn health_checks() {
    let text = cluster(
        r#"{ "HealthCheck": {
              "Passive": { "Policy": "Failures", "ReactivationPeriod": "0s" },
              "Active": { "Policy": "Probe", "Interval": "0ms", "Timeout": "00:00:00",
                          "Path": "healthz" },
              "AvailableDestinationsPolicy": "Everything" } }"#,
    );
    assert_eq!(
        paths(&text),
        [
            "Clusters.c1.HealthCheck.Passive.Policy",
            "Clusters.c1.HealthCheck.Passive.ReactivationPeriod",
            "Clusters.c1.HealthCheck.Active.Policy",
            "Clusters.c1.HealthCheck.Active.Interval",
            "Clusters.c1.HealthCheck.Active.Timeout",
            "Clusters.c1.HealthCheck.Active.Path",
            "Clusters.c1.HealthCheck.AvailableDestinationsPolicy",
        ]
    );
    let ok = cluster(
        r#"{ "HealthCheck": { "Active": { "Enabled": true, "Path": "/health" },
                              "AvailableDestinationsPolicy": "HealthyAndUnknown" } }"#,
    );
    assert!(parse(&ok, Format::Json).is_ok());
}

#[test]
fn http_request_and_client() {
    for version in ["1.0", "1.1", "2", "2.0"] {
        let ok = cluster(&format!(
            r#"{{ "HttpRequest": {{ "Version": "{version}" }} }}"#
        ));
        assert!(parse(&ok, Format::Json).is_ok(), "{version}");
    }
    let (path, message) = only_error(&cluster(r#"{ "HttpRequest": { "Version": "3" } }"#));
    assert_eq!(path, "Clusters.c1.HttpRequest.Version");
    assert!(message.contains("HTTP/3 is not supported"), "{message}");

    let text = cluster(
        r#"{ "HttpRequest": { "Version": "1.2", "VersionPolicy": "Any", "ActivityTimeout": "0s" },
             "HttpClient": { "MaxConnectionsPerServer": 0 } }"#,
    );
    assert_eq!(
        paths(&text),
        [
            "Clusters.c1.HttpRequest.Version",
            "Clusters.c1.HttpRequest.VersionPolicy",
            "Clusters.c1.HttpRequest.ActivityTimeout",
            "Clusters.c1.HttpClient.MaxConnectionsPerServer",
        ]
    );
}

#[test]
fn destinations() {
    let text = cluster(
        r#"{ "Destinations": {
              "a": { "Address": "" },
              "b": { "Address": "10.0.0.1:80" },
              "c": { "Address": "ftp://example.com" },
              "d": { "Address": "http://example.com/?x=1" },
              "e": { "Address": "http://example.com/#top" },
              "f": { "Address": "http://ok.example.com", "Health": "/health" },
              "g": { "Address": "http://ok.example.com", "Host": "bad host" },
              "h": { "Address": "https://[::1]:5001/base", "Health": "http://[::1]:5002",
                     "Host": "example.com:8443" } } }"#,
    );
    assert_eq!(
        paths(&text),
        [
            "Clusters.c1.Destinations.a.Address",
            "Clusters.c1.Destinations.b.Address",
            "Clusters.c1.Destinations.c.Address",
            "Clusters.c1.Destinations.d.Address",
            "Clusters.c1.Destinations.e.Address",
            "Clusters.c1.Destinations.f.Health",
            "Clusters.c1.Destinations.g.Host",
        ]
    );
}

#[test]
fn cluster_without_destinations_is_valid() {
    assert!(parse(&cluster(r#"{ "Destinations": {} }"#), Format::Json).is_ok());
}

#[test]
fn every_problem_is_reported_in_document_order() {
    let text = r#"{ "ReverseProxy": {
        "Listen": [ "nowhere" ],
        "Routes": { "r1": { "Match": { "Path": "/a" }, "MaxRequestBodySize": -5 } },
        "Clusters": { "c1": { "LoadBalancingPolicy": "Best",
                              "Destinations": { "d1": { "Address": "relative/path" } } } } } }"#;
    let errors = json_errors(text);
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Listen[0]",
            "Routes.r1.ClusterId",
            "Routes.r1.MaxRequestBodySize",
            // (`LoadBalancingPolicy: "Best"` is refused when a state is built: it could
            // name a custom policy registered there.)
            "Clusters.c1.Destinations.d1.Address",
        ]
    );
    let shown = errors.to_string();
    assert!(shown.starts_with("Listen[0]: "), "{shown}");
}

// ===== YARP's files as they are =====

#[test]
fn yarp_sample_loads_unchanged() {
    let config = load_fixture("yarp-basic-sample.json");
    assert_eq!(
        config.routes["route1"].cluster_id.as_deref(),
        Some("cluster1")
    );
    assert_eq!(
        config.routes["route1"].match_.path.as_deref(),
        Some("{**catch-all}")
    );
    assert_eq!(
        config.clusters["cluster1"].destinations["destination1"].address,
        "http://127.0.0.1:9/"
    );
    // Kestrel's endpoint becomes the listener; `localhost` is the IPv4 loopback.
    let listen: Vec<&str> = config.listen.iter().map(|l| l.address()).collect();
    assert_eq!(listen, ["127.0.0.1:0"]);
}

#[test]
fn lower_camel_case_keys_bind_as_dotnet_binds_them() {
    let config = parse(
        r#"{
          "reverseProxy": {
            "routes": {
              "Api": {
                "clusterId": "Backend", "order": "2",
                "match": { "path": "/api/{**rest}", "headers": [{ "name": "x-v", "mode": "exists" }] }
              }
            },
            "clusters": {
              "Backend": {
                "loadBalancingPolicy": "RoundRobin",
                "httpRequest": { "activityTimeout": "00:00:05" },
                "healthCheck": { "passive": { "enabled": "true" } },
                "destinations": { "D1": { "address": "http://127.0.0.1:9/" } }
              }
            }
          }
        }"#,
        Format::Json,
    )
    .unwrap();
    // Ids keep their case; keys and values bind ignoring it.
    let route = &config.routes["Api"];
    assert_eq!(route.cluster_id.as_deref(), Some("Backend"));
    assert_eq!(route.order, Some(2));
    let header = &route.match_.headers.as_ref().unwrap()[0];
    assert_eq!(header.mode, fuseway::config::HeaderMatchMode::Exists);
    let cluster = &config.clusters["Backend"];
    assert_eq!(
        cluster
            .health_check
            .as_ref()
            .unwrap()
            .passive
            .as_ref()
            .unwrap()
            .enabled,
        Some(true)
    );
    assert!(cluster.destinations.contains_key("D1"));

    // Errors name the key as written.
    let (path, message) = only_error(r#"{"routes": {"r1": {"match": {"pathh": "/"}}}}"#);
    assert_eq!(path, "routes.r1.match");
    assert!(message.contains("unknown field `pathh`"), "{message}");
}

#[test]
fn environment_overrides_apply_on_top_of_the_file() {
    use fuseway::config::parse_with_overrides;
    let text = std::fs::read_to_string(fixture("yarp-basic-sample.json")).unwrap();
    let overrides = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let config = parse_with_overrides(
        &text,
        Format::Json,
        &overrides(&[
            // An existing key, in another case.
            (
                "REVERSEPROXY__Clusters__cluster1__Destinations__destination1__Address",
                "http://127.0.0.1:5002/",
            ),
            // New sections and a list item.
            (
                "ReverseProxy__Clusters__cluster1__Destinations__d2__Address",
                "http://127.0.0.1:5003/",
            ),
            (
                "ReverseProxy__Routes__route1__Match__Hosts__0",
                "example.com",
            ),
            ("ReverseProxy__Routes__route1__Order", "7"),
            ("Kestrel__Endpoints__Http__Url", "http://127.0.0.1:8081"),
        ]),
    )
    .unwrap();
    let cluster = &config.clusters["cluster1"];
    assert_eq!(
        cluster.destinations["destination1"].address,
        "http://127.0.0.1:5002/"
    );
    assert_eq!(cluster.destinations["d2"].address, "http://127.0.0.1:5003/");
    let route = &config.routes["route1"];
    assert_eq!(
        route.match_.hosts.as_deref(),
        Some(&["example.com".to_string()][..])
    );
    assert_eq!(route.order, Some(7));
    assert_eq!(config.listen[0].address(), "127.0.0.1:8081");

    // The bare shape and TOML take them too.
    let config = parse_with_overrides(
        "[Clusters.c1.Destinations.d1]\nAddress = \"http://127.0.0.1:1/\"\n",
        Format::Toml,
        &overrides(&[(
            "ReverseProxy__Clusters__c1__Destinations__d1__Address",
            "http://127.0.0.1:2/",
        )]),
    )
    .unwrap();
    assert_eq!(
        config.clusters["c1"].destinations["d1"].address,
        "http://127.0.0.1:2/"
    );

    // A bad override is an error naming the variable and the field.
    let err = parse_with_overrides(
        &text,
        Format::Json,
        &overrides(&[("ReverseProxy__Routes__route1__Order", "first")]),
    )
    .unwrap_err();
    assert_eq!(err.0[0].path, "Routes.route1.Order");
    let err = parse_with_overrides(
        &text,
        Format::Json,
        &overrides(&[("ReverseProxy__Routes__route1__ClusterId__x", "y")]),
    )
    .unwrap_err();
    assert!(
        err.0[0]
            .message
            .contains("ReverseProxy__Routes__route1__ClusterId__x"),
        "{err}"
    );
}

#[test]
fn kestrel_endpoints_become_listeners() {
    let listen = |endpoints: &str| {
        parse(
            &format!(r#"{{"Kestrel": {{"Endpoints": {endpoints}}}, "ReverseProxy": {{}}}}"#),
            Format::Json,
        )
        .map(|c| {
            c.listen
                .iter()
                .map(|l| (l.address().to_string(), l.tls_files().is_some()))
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(
        listen(r#"{"A": {"Url": "http://*:5000"}, "B": {"Url": "http://[::1]:5001/"}, "C": {"Url": "http://+"}}"#)
            .unwrap(),
        [
            ("0.0.0.0:5000".to_string(), false),
            ("[::1]:5001".to_string(), false),
            ("0.0.0.0:80".to_string(), false),
        ]
    );
    let dir = std::env::temp_dir().join(format!("fuseway-config-kestrel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("c.pem"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), ck.signing_key.serialize_pem()).unwrap();
    let https = format!(
        r#"{{"S": {{"Url": "https://127.0.0.1:5443", "Certificate": {{"Path": "{}", "KeyPath": "{}"}}}}}}"#,
        dir.join("c.pem").display(),
        dir.join("k.pem").display()
    );
    assert_eq!(
        listen(&https).unwrap(),
        [("127.0.0.1:5443".to_string(), true)]
    );
    // An `https` endpoint without a certificate of its own takes
    // `Kestrel.Certificates.Default`; an `http` one does not.
    let defaulted = parse(
        &format!(
            r#"{{"Kestrel": {{
                "Certificates": {{"Default": {{"Path": "{}", "KeyPath": "{}"}}}},
                "Endpoints": {{"S": {{"Url": "https://127.0.0.1:5443"}}, "P": {{"Url": "http://127.0.0.1:5080"}}}}
            }}, "ReverseProxy": {{}}}}"#,
            dir.join("c.pem").display(),
            dir.join("k.pem").display()
        ),
        Format::Json,
    )
    .unwrap();
    let files: Vec<_> = defaulted
        .listen
        .iter()
        .map(|l| {
            (
                l.address().to_string(),
                l.tls_files().map(|files| match files {
                    fuseway::server::TlsFiles::Pem { certificate, .. } => certificate,
                    other => panic!("{other:?}"),
                }),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("127.0.0.1:5080".to_string(), None),
            ("127.0.0.1:5443".to_string(), Some(dir.join("c.pem"))),
        ]
    );
    std::fs::remove_dir_all(&dir).ok();
    let err = listen(r#"{"S": {"Url": "https://127.0.0.1:5443"}}"#).unwrap_err();
    assert_eq!(err.0[0].path, "Kestrel.Endpoints.S.Certificate");
    let err = listen(r#"{"S": {"Url": "ftp://127.0.0.1"}}"#).unwrap_err();
    assert_eq!(err.0[0].path, "Kestrel.Endpoints.S.Url");
    let err = listen(r#"{"S": {"Url": "http://127.0.0.1:1", "Protocols": "Http3"}}"#).unwrap_err();
    assert_eq!(err.0[0].path, "Kestrel.Endpoints.S.Protocols");
    assert!(
        err.0[0].message.contains("no HTTP/3"),
        "{}",
        err.0[0].message
    );
}

/// ASP.NET's `Urls` (`;`-separated) are listeners when `Kestrel.Endpoints` names none,
/// as ASP.NET binds them; Kestrel's endpoints take precedence over them.
#[test]
fn urls_are_listeners_unless_kestrel_has_endpoints() {
    let listen = |text: &str| {
        parse(text, Format::Json).map(|c| {
            c.listen
                .iter()
                .map(|l| l.address().to_string())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(
        listen(r#"{"Urls": "http://localhost:5000; http://*:5001", "ReverseProxy": {}}"#).unwrap(),
        ["127.0.0.1:5000", "0.0.0.0:5001"]
    );
    assert_eq!(
        listen(
            r#"{"Urls": "http://localhost:5000",
                "Kestrel": {"Endpoints": {"A": {"Url": "http://127.0.0.1:6000"}}},
                "ReverseProxy": {}}"#
        )
        .unwrap(),
        ["127.0.0.1:6000"]
    );
    let err =
        listen(r#"{"Urls": "http://localhost:5000;https://localhost:5001", "ReverseProxy": {}}"#)
            .unwrap_err();
    assert_eq!(err.0[0].path, "Urls[1].Certificate");
}

/// Kestrel's `Protocols` (an endpoint's, else `EndpointDefaults`'), and fuseway's own
/// `Listen[].Protocols`: what each listener serves; names in any case.
#[test]
fn listeners_take_kestrels_protocols() {
    use fuseway::config::ListenProtocols;
    let protocols = |text: &str| {
        parse(text, Format::Json).map(|c| {
            c.listen
                .iter()
                .map(|l| (l.address().to_string(), l.protocols()))
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(
        protocols(
            r#"{"Kestrel": {
                "EndpointDefaults": {"Protocols": "Http2"},
                "Endpoints": {
                    "Grpc": {"Url": "http://127.0.0.1:5001"},
                    "Web": {"Url": "http://127.0.0.1:5002", "Protocols": "http1"},
                    "Both": {"Url": "http://127.0.0.1:5003", "Protocols": "Http1AndHttp2"}
                }
            }, "ReverseProxy": {}}"#
        )
        .unwrap(),
        [
            ("127.0.0.1:5003".to_string(), ListenProtocols::Http1AndHttp2),
            ("127.0.0.1:5001".to_string(), ListenProtocols::Http2),
            ("127.0.0.1:5002".to_string(), ListenProtocols::Http1),
        ]
    );
    assert_eq!(
        protocols(
            r#"{"Listen": [{"Address": "127.0.0.1:1", "Protocols": "HTTP2"}, "127.0.0.1:2"]}"#
        )
        .unwrap(),
        [
            ("127.0.0.1:1".to_string(), ListenProtocols::Http2),
            ("127.0.0.1:2".to_string(), ListenProtocols::Http1AndHttp2),
        ]
    );
    let err =
        protocols(r#"{"Listen": [{"Address": "127.0.0.1:1", "Protocols": "Http4"}]}"#).unwrap_err();
    assert_eq!(err.0[0].path, "Listen[0].Protocols");
    // HTTP/3 beside the others (.NET's templates): HTTP/1.1 and HTTP/2, as Kestrel serves
    // them where there is no QUIC; HTTP/3 alone is refused.
    assert_eq!(
        protocols(
            r#"{"Kestrel": {"EndpointDefaults": {"Protocols": "Http1AndHttp2AndHttp3"},
                "Endpoints": {"S": {"Url": "http://127.0.0.1:1", "Protocols": "Http1"},
                              "T": {"Url": "http://127.0.0.1:2"}}},
                "Listen": [{"Address": "127.0.0.1:3", "Protocols": "http1andhttp2andhttp3"}],
                "ReverseProxy": {}}"#,
        )
        .unwrap(),
        [
            ("127.0.0.1:3".to_string(), ListenProtocols::Http1AndHttp2),
            ("127.0.0.1:1".to_string(), ListenProtocols::Http1),
            ("127.0.0.1:2".to_string(), ListenProtocols::Http1AndHttp2),
        ]
    );
    let err = protocols(
        r#"{"Kestrel": {"EndpointDefaults": {"Protocols": "Http3"},
            "Endpoints": {"S": {"Url": "http://127.0.0.1:1"}}}, "ReverseProxy": {}}"#,
    )
    .unwrap_err();
    assert_eq!(err.0[0].path, "Kestrel.Endpoints.S.Protocols");
}

#[test]
fn yarp_keys_fuseway_cannot_honour_are_refused_with_what_is_supported() {
    let cluster = |extra: &str| {
        format!(
            r#"{{"Clusters": {{"c1": {{ {extra}, "Destinations": {{"d1": {{"Address": "http://127.0.0.1:1/"}}}} }}}}}}"#
        )
    };
    for (extra, path, says) in [
        (
            r#""HttpClient": {"RequestHeaderEncoding": "utf-16"}"#,
            "Clusters.c1.HttpClient.RequestHeaderEncoding",
            "`utf-8` or `latin1`",
        ),
        (
            r#""HttpClient": {"ResponseHeaderEncoding": "ascii"}"#,
            "Clusters.c1.HttpClient.ResponseHeaderEncoding",
            "`utf-8` or `latin1`",
        ),
        (
            r#""HttpClient": {"SslProtocols": ["Ssl3"]}"#,
            "Clusters.c1.HttpClient.SslProtocols",
            "broken",
        ),
        (
            r#""HttpClient": {"WebProxy": {"Address": "https://proxy:3128"}}"#,
            "Clusters.c1.HttpClient.WebProxy.Address",
            "`https` proxies are not supported",
        ),
        (
            r#""HttpClient": {"WebProxy": {"Address": "socks5://proxy:1080"}}"#,
            "Clusters.c1.HttpClient.WebProxy.Address",
            "`socks5` proxies are not supported",
        ),
        (
            r#""HttpClient": {"WebProxy": {"Address": "http://user:pw@proxy:3128"}}"#,
            "Clusters.c1.HttpClient.WebProxy.Address",
            "no credentials",
        ),
        (
            r#""HttpClient": {"WebProxy": {"Address": "proxy.example.org"}}"#,
            "Clusters.c1.HttpClient.WebProxy.Address",
            "needs the scheme",
        ),
        (
            r#""HttpClient": {"WebProxy": {"Address": "http://proxy:3128", "UseDefaultCredentials": true}}"#,
            "Clusters.c1.HttpClient.WebProxy.UseDefaultCredentials",
            "no credentials",
        ),
    ] {
        let (p, message) = only_error(&cluster(extra));
        assert_eq!(p, path);
        assert!(message.contains(says), "{message}");
    }
    // What fuseway does is accepted.
    for extra in [
        r#""HttpRequest": {"AllowResponseBuffering": false}"#,
        // Kestrel buffers no response either way (only IIS takes YARP's leave to).
        r#""HttpRequest": {"AllowResponseBuffering": true}"#,
        r#""HttpClient": {"RequestHeaderEncoding": "utf-8", "ResponseHeaderEncoding": "Latin1"}"#,
        r#""HttpClient": {"EnableMultipleHttp2Connections": false, "SslProtocols": ["Tls12", "Tls13"]}"#,
        r#""HttpClient": {"EnableMultipleHttp2Connections": true}"#,
        r#""HttpClient": {"WebProxy": {"Address": "http://proxy:3128", "BypassOnLocal": true, "UseDefaultCredentials": false}}"#,
        r#""HttpClient": {"WebProxy": {"Address": null}}"#,
    ] {
        parse(&cluster(extra), Format::Json).unwrap_or_else(|e| panic!("{extra}: {e}"));
    }
    // `SslProtocols` as one string, as YARP's own sample writes it (YARP reads only a
    // list, and ignores a string): its names.
    for (extra, names) in [
        (r#""HttpClient": {"SSLProtocols": "Tls13"}"#, &["Tls13"][..]),
        (
            r#""HttpClient": {"SslProtocols": "Tls12, Tls13"}"#,
            &["Tls12", "Tls13"][..],
        ),
    ] {
        let config = parse(&cluster(extra), Format::Json).unwrap();
        let client = config.clusters["c1"].http_client.as_ref().unwrap();
        assert_eq!(client.ssl_protocols.as_deref().unwrap(), names, "{extra}");
    }
    let (p, message) = only_error(&cluster(r#""HttpClient": {"SslProtocols": "Ssl3"}"#));
    assert_eq!(p, "Clusters.c1.HttpClient.SslProtocols");
    assert!(message.contains("broken"), "{message}");
}

/// An `AllowedHosts` the state cannot take is one error, at its key — validation and
/// the route table (which compiles the list) do not both report it.
#[test]
fn a_bad_allowed_hosts_is_reported_once_by_the_state() {
    let mut config = parse("{}", Format::Json).unwrap();
    config.allowed_hosts = Some("a.com:80".to_string());
    let errors = fuseway::state::ProxyState::new(config).unwrap_err();
    assert_eq!(errors.0.len(), 1, "{errors}");
    assert_eq!(errors.0[0].path, "AllowedHosts");
}

/// Kestrel's HTTPS settings — `SslProtocols`, `ClientCertificateMode` (an endpoint's,
/// else `EndpointDefaults`') and `Sni` — become the listener's; on an `http` endpoint
/// they are an error, as Kestrel's (the defaults do not apply there); fuseway's own
/// `Listen` long form takes the same keys, validated.
#[test]
fn kestrel_tls_settings_become_listener_settings() {
    use fuseway::config::ListenEntry;
    let entries = |kestrel: &str| {
        parse(
            &format!(r#"{{"Kestrel": {kestrel}, "ReverseProxy": {{}}}}"#),
            Format::Json,
        )
        .map(|c| {
            // The long forms: a plain `http` endpoint is an address.
            c.listen
                .into_iter()
                .filter_map(|l| match l {
                    fuseway::config::ListenConfig::Full(entry) => Some(entry),
                    fuseway::config::ListenConfig::Address(_) => None,
                })
                .collect::<Vec<ListenEntry>>()
        })
    };
    let got = entries(
        r#"{
        "EndpointDefaults": {"SslProtocols": ["Tls13"], "ClientCertificateMode": "AllowCertificate"},
        "Endpoints": {
            "A": {"Url": "https://127.0.0.1:5443", "Certificate": {"Path": "a.pem", "KeyPath": "a.key"}},
            "B": {"Url": "https://127.0.0.1:5444", "SslProtocols": ["Tls11", "Tls12"],
                  "ClientCertificateMode": "RequireCertificate",
                  "Sni": {
                      "a.example.org": {"Certificate": {"Path": "s.pfx", "Password": "pw"},
                                        "Protocols": "http1", "SslProtocols": ["Tls13"]},
                      "*": {"ClientCertificateMode": "NoCertificate"}
                  },
                  "Certificate": {"Path": "b.pem", "KeyPath": "b.key"}},
            "P": {"Url": "http://127.0.0.1:5080"}
        }}"#,
    );
    let got = match got {
        Ok(got) => got,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(got.len(), 2, "{got:?}");
    // A: the defaults.
    assert_eq!(got[0].ssl_protocols, Some(vec!["Tls13".to_string()]));
    assert_eq!(
        got[0].client_certificate_mode.as_deref(),
        Some("AllowCertificate")
    );
    assert!(got[0].sni.is_empty());
    // B: its own, and its Sni entries with theirs (the rest left to the listener).
    assert_eq!(
        got[1].ssl_protocols,
        Some(vec!["Tls11".to_string(), "Tls12".to_string()])
    );
    assert_eq!(
        got[1].client_certificate_mode.as_deref(),
        Some("RequireCertificate")
    );
    let a = &got[1].sni["a.example.org"];
    assert_eq!(a.certificate.as_deref(), Some("s.pfx"));
    assert_eq!(a.key, None);
    assert_eq!(a.password.as_deref(), Some("pw"));
    assert_eq!(a.protocols.as_deref(), Some("Http1"));
    assert_eq!(a.ssl_protocols, Some(vec!["Tls13".to_string()]));
    assert_eq!(a.client_certificate_mode, None);
    let any = &got[1].sni["*"];
    assert_eq!(any.certificate, None);
    assert_eq!(
        any.client_certificate_mode.as_deref(),
        Some("NoCertificate")
    );
    // The `http` endpoint has none of the defaults: it stays a plain address (only the
    // two `https` endpoints are long forms, above).

    // An `https` endpoint whose Sni entries each name a certificate needs none itself.
    let got = entries(
        r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:5443",
            "Sni": {"a.example.org": {"Certificate": {"Path": "a.pem", "KeyPath": "a.key"}}}}}}"#,
    )
    .unwrap();
    assert_eq!(got[0].certificate, None);

    // A store's qualifiers beside a file are ignored, as Kestrel ignores them.
    let got = entries(
        r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:5443",
            "Certificate": {"Path": "a.pem", "KeyPath": "a.key", "AllowInvalid": true,
                            "Store": "My", "Location": "CurrentUser"}}}}"#,
    )
    .unwrap();
    assert_eq!(got[0].certificate.as_deref(), Some("a.pem"));

    // Errors, each at its key.
    for (kestrel, path, says) in [
        (
            r#"{"Endpoints": {"P": {"Url": "http://127.0.0.1:1", "SslProtocols": ["Tls12"]}}}"#,
            "Kestrel.Endpoints.P.SslProtocols",
            "HTTPS-only",
        ),
        (
            r#"{"Endpoints": {"P": {"Url": "http://127.0.0.1:1", "Sni": {"*": {}}}}}"#,
            "Kestrel.Endpoints.P.Sni",
            "HTTPS-only",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Certificate": {"Path": "a.pem", "KeyPath": "a.key"}, "ClientCertificateMode": "Maybe"}}}"#,
            "Listen[0].ClientCertificateMode",
            "RequireCertificate",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Certificate": {"Path": "a.pem", "KeyPath": "a.key"}, "SslProtocols": ["Tls11"]}}}"#,
            "Listen[0].SslProtocols",
            "TLS 1.0 and 1.1",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Sni": {"a.example.org": {"Certificate": {"Path": "a.pem", "KeyPath": "a.key"}},
                        "b.example.org": {}}}}}"#,
            "Listen[0].Sni.b.example.org.Certificate",
            "no certificate",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Certificate": {"Path": "a.pem", "KeyPath": "a.key"},
                "Sni": {"a.example.org": {"Certificate": {"Subject": "CN=a"}}}}}}"#,
            "Kestrel.Endpoints.S.Sni.a.example.org.Certificate",
            "certificate store",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Certificate": {"Path": "a.pem", "KeyPath": "a.key", "Subject": "CN=a"}}}}"#,
            "Kestrel.Endpoints.S.Certificate",
            "certificate store",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Certificate": {"Path": "a.pem", "KeyPath": "a.key"},
                "Sni": {"a.*.org": {}}}}}"#,
            "Listen[0].Sni.a.*.org",
            "a host name",
        ),
        (
            r#"{"Endpoints": {"S": {"Url": "https://127.0.0.1:1",
                "Certificate": {"Path": "a.pem", "KeyPath": "a.key"},
                "Sni": {"A.example.org": {}, "a.example.org": {}}}}}"#,
            "Listen[0].Sni.a.example.org",
            "named twice",
        ),
    ] {
        let err = entries(kestrel).unwrap_err();
        let e = &err.0[0];
        assert_eq!(e.path, path, "{kestrel}: {err}");
        assert!(e.message.contains(says), "{kestrel}: {err}");
    }

    // fuseway's own long form: TLS settings on a listener without TLS are an error.
    let err = parse(
        r#"{"Listen": [{"Address": "127.0.0.1:1", "SslProtocols": ["Tls12"]}]}"#,
        Format::Json,
    )
    .unwrap_err();
    assert_eq!(err.0[0].path, "Listen[0].SslProtocols");
    assert!(err.0[0].message.contains("terminates TLS"), "{err}");
}
