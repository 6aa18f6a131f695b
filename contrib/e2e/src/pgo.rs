//! `--pgo`: the fuseway binary built with profile-guided optimisation, measured as its
//! own target (`fuseway-pgo`) beside the plain `cargo build`.
//!
//! The recipe is rustc's (the rustc book, "Profile-guided Optimization"): build with
//! `-Cprofile-generate`, run the instrumented binary under traffic, merge its raw
//! profiles with `llvm-profdata` (rustup's `llvm-tools` component), and build again
//! with `-Cprofile-use`. The training is not the benchmark: its own configuration
//! ([`training_config`]: a plain and a TLS listener, a route with transforms, one to an
//! h2c destination, a catch-all) and its own mix of requests ([`TRAFFIC`]: `GET`s and
//! `POST`s with bodies, small and 16 KiB responses, HTTP/1.1 and HTTP/2 clients, on TLS
//! and not, gRPC), so the figures say what a build trained on general traffic does on
//! the benchmark's (docs/BENCHMARKS.md, twenty-ninth round). Both builds pass `--target`
//! (the host's) so that `RUSTFLAGS` reach only the binary and its crates, not build
//! scripts or proc-macros, and use their own target directories (`target/pgo-train`,
//! `target/pgo`): the plain build in `target/` is left as it is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::{free_port, on_path};
use crate::targets::{spawn_fuseway_on, Kind};

/// Seconds of training traffic per kind of request.
const TRAINING_SECONDS: &str = "3";

/// One kind of training request, sent for [`TRAINING_SECONDS`] by the load generator.
struct Training {
    /// To the TLS listener (HTTP/1.1 or `h2` by ALPN) instead of the plain one.
    tls: bool,
    /// The client's HTTP version: 1, or 2 (h2c on the plain listener).
    http: u8,
    /// gRPC unary calls.
    grpc: bool,
    /// Which route of [`training_config`]; `bytes=N`: the backend's body size.
    path: &'static str,
    /// The request body's size (a `POST` when not 0).
    body: usize,
}

const fn training(tls: bool, http: u8, grpc: bool, path: &'static str, body: usize) -> Training {
    Training {
        tls,
        http,
        grpc,
        path,
        body,
    }
}

/// The training traffic, in turn.
const TRAFFIC: [Training; 12] = [
    training(false, 1, false, "/api/items?page=2", 0),
    training(false, 1, false, "/api/upload", 2048),
    training(false, 1, false, "/static/file.js?bytes=16384", 0),
    training(false, 1, false, "/h2/items", 0),
    training(false, 1, false, "/h2/upload", 2048),
    training(false, 2, false, "/api/items?page=2", 0),
    training(false, 2, false, "/api/upload", 2048),
    training(false, 2, false, "/h2/items?bytes=16384", 0),
    training(false, 2, true, "/h2/echo.Echo/Call", 0),
    training(true, 1, false, "/api/items?page=2", 0),
    training(true, 2, false, "/static/file.js?bytes=16384", 0),
    training(true, 2, true, "/h2/echo.Echo/Call", 0),
];

/// The configuration the instrumented binary is trained on (YARP's shape): a plain and
/// a TLS listener; `/api/...` with its prefix removed, a request header set and a
/// response header added, `/h2/...` to the backend as an h2c destination, and a
/// catch-all.
fn training_config(
    backend: std::net::SocketAddr,
    port: u16,
    tls_port: u16,
    cert: &Path,
    key: &Path,
) -> String {
    let (cert, key) = (cert.display(), key.display());
    format!(
        r#"{{
  "Listen": [
    "127.0.0.1:{port}",
    {{ "Address": "127.0.0.1:{tls_port}", "Certificate": "{cert}", "Key": "{key}" }}
  ],
  "Routes": {{
    "api": {{
      "ClusterId": "backend",
      "Match": {{ "Path": "/api/{{**rest}}" }},
      "Transforms": [
        {{ "PathRemovePrefix": "/api" }},
        {{ "RequestHeader": "X-Trained", "Set": "1" }},
        {{ "ResponseHeader": "X-Served-By", "Set": "fuseway" }}
      ]
    }},
    "h2": {{
      "ClusterId": "h2c",
      "Match": {{ "Path": "/h2/{{**rest}}" }},
      "Transforms": [ {{ "PathRemovePrefix": "/h2" }} ]
    }},
    "site": {{ "ClusterId": "backend", "Match": {{ "Path": "/{{**catchall}}" }} }}
  }},
  "Clusters": {{
    "backend": {{ "Destinations": {{ "a": {{ "Address": "http://{backend}" }} }} }},
    "h2c": {{
      "Destinations": {{ "a": {{ "Address": "http://{backend}" }} }},
      "HttpRequest": {{ "Version": "2", "VersionPolicy": "RequestVersionExact" }}
    }}
  }}
}}"#
    )
}

/// Build the instrumented binary, train it, build the optimised one (both with the
/// allocation counter if `count_allocs`, as the measured plain build); returns the
/// directory holding the optimised `fuseway`, or `None` (with a message) where
/// `llvm-profdata` is not installed.
pub(crate) fn build_pgo(
    root: &Path,
    profile: &str,
    examples: &Path,
    tmp: &Path,
    backend: std::net::SocketAddr,
    count_allocs: bool,
) -> Option<PathBuf> {
    let host = rustc_host();
    let Some(profdata) = llvm_profdata(&host) else {
        println!(
            "e2e: llvm-profdata is not installed (`rustup component add llvm-tools`): \
             fuseway-pgo is skipped"
        );
        return None;
    };
    // Fixed paths (not the run's temporary directory), so that `RUSTFLAGS` stay the same
    // from run to run and cargo rebuilds only what changed.
    let target_dir = crate::target_dir(root);
    let raw = target_dir.join("pgo-train").join("profiles");
    let _ = std::fs::remove_dir_all(&raw);
    let trainee = build_with(
        root,
        profile,
        &host,
        "pgo-train",
        &format!("-Cprofile-generate={}", raw.display()),
        count_allocs,
    );
    eprintln!("e2e: training the instrumented fuseway");
    let (cert, key) = (tmp.join("training-cert.pem"), tmp.join("training-key.pem"));
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
        .expect("a self-signed certificate");
    std::fs::write(&cert, certified.cert.pem()).expect("write the certificate");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write the key");
    let config = tmp.join("fuseway-training.json");
    let (port, tls_port) = (free_port(), free_port());
    std::fs::write(
        &config,
        training_config(backend, port, tls_port, &cert, &key),
    )
    .expect("write the training config");
    let (mut trainee, _) =
        spawn_fuseway_on(&trainee, &config, &[port, tls_port], Kind::Fuseway, &[]);
    for t in TRAFFIC {
        let (scheme, port) = if t.tls {
            ("https", tls_port)
        } else {
            ("http", port)
        };
        let url = format!("{scheme}://127.0.0.1:{port}{}", t.path);
        let mut loadgen = crate::run::loadgen_to(examples, &url, t.http, t.grpc);
        if t.tls {
            loadgen.arg("--tls-ca").arg(&cert);
        }
        train(&mut loadgen, &t);
    }
    // The profile is written when the process exits.
    trainee.stop();
    let merged = target_dir.join("pgo-train").join("fuseway.profdata");
    let status = Command::new(&profdata)
        .arg("merge")
        .arg("-o")
        .arg(&merged)
        .arg(&raw)
        .status()
        .expect("run llvm-profdata");
    assert!(status.success(), "e2e: llvm-profdata merge failed");
    Some(build_with(
        root,
        profile,
        &host,
        "pgo",
        &format!("-Cprofile-use={}", merged.display()),
        count_allocs,
    ))
}

/// `cargo build` of the binary (with `--features count-allocs` if `count_allocs`) for
/// `host` into `target/<dir>` with `rustflags`; returns the binary's directory.
fn build_with(
    root: &Path,
    profile: &str,
    host: &str,
    dir: &str,
    rustflags: &str,
    count_allocs: bool,
) -> PathBuf {
    let target_dir = crate::target_dir(root).join(dir);
    eprintln!(
        "e2e: building fuseway with {rustflags} into {}",
        target_dir.display()
    );
    let mut cargo = crate::cargo();
    cargo.args(["build", "--profile", profile]);
    if count_allocs {
        cargo.args(["--features", "count-allocs"]);
    }
    let status = cargo
        .args(["--bin", "fuseway", "--target", host])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", rustflags)
        .current_dir(root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "e2e: cargo build ({rustflags}) failed");
    target_dir.join(host).join(crate::profile_dir(profile))
}

/// One kind of training request: `loadgen` (the load generator on its URL) for
/// [`TRAINING_SECONDS`]; every request must succeed.
fn train(loadgen: &mut Command, t: &Training) {
    let out = loadgen
        .args(["--body", &t.body.to_string()])
        .args(["--warmup", "0", "--duration", TRAINING_SECONDS])
        .stderr(Stdio::inherit())
        .output()
        .expect("run loadgen");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains(" errors=0 "),
        "e2e: the training load failed ({}, HTTP/{}, TLS {}, gRPC {}, body {}): {report}",
        t.path,
        t.http,
        t.tls,
        t.grpc,
        t.body
    );
}

/// The host triple, from `rustc -vV`.
fn rustc_host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("run rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host")
}

/// rustup's `llvm-profdata` (it must match rustc's LLVM), else one on `PATH`.
fn llvm_profdata(host: &str) -> Option<PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))?;
    let rustup = sysroot
        .join("lib/rustlib")
        .join(host)
        .join("bin/llvm-profdata");
    if rustup.is_file() {
        return Some(rustup);
    }
    on_path("llvm-profdata")
}
