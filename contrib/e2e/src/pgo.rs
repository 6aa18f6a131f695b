//! `--pgo`: the fuseway binary built with profile-guided optimisation, measured as its
//! own target (`fuseway-pgo`) beside the plain `cargo build`.
//!
//! The recipe is rustc's (the rustc book, "Profile-guided Optimization"): build with
//! `-Cprofile-generate`, run the instrumented binary under traffic, merge its raw
//! profiles with `llvm-profdata` (rustup's `llvm-tools` component), and build again
//! with `-Cprofile-use`. The traffic here is the benchmark's own: every path
//! ([`Scenario::ALL`]) for a few seconds through the same two configurations the
//! measured fuseway runs, so the figures say what PGO does for a proxy trained on the
//! traffic it then serves (docs/BENCHMARKS.md, twenty-eighth round). Both builds pass
//! `--target` (the host's) so that `RUSTFLAGS` reach only the binary and its crates, not
//! build scripts or proc-macros, and use their own target directories (`target/pgo-train`,
//! `target/pgo`): the plain build in `target/` is left as it is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::{on_path, spawn};
use crate::scenario::Scenario;
use crate::targets::{start_fuseway, Kind};

/// Seconds of training traffic per path.
const TRAINING_SECONDS: &str = "3";

/// Build the instrumented binary, train it, build the optimised one; returns the
/// directory holding the optimised `fuseway`, or `None` (with a message) where
/// `llvm-profdata` is not installed.
pub(crate) fn build_pgo(
    root: &Path,
    profile: &str,
    examples: &Path,
    tmp: &Path,
    backend: std::net::SocketAddr,
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
    );
    eprintln!("e2e: training the instrumented fuseway on every path");
    for h2c_destination in [false, true] {
        let mut target = start_fuseway(&trainee, tmp, backend, Kind::Fuseway, h2c_destination);
        for scenario in Scenario::ALL {
            if let Some(port) = target.port(scenario) {
                train(examples, port, scenario);
            }
        }
        // The profile is written when the process exits.
        if let Some(p) = &mut target.process {
            p.stop();
        }
    }
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
    ))
}

/// `cargo build` of the binary (as the plain build: `--features count-allocs`) for
/// `host` into `target/<dir>` with `rustflags`; returns the binary's directory.
fn build_with(root: &Path, profile: &str, host: &str, dir: &str, rustflags: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = crate::target_dir(root).join(dir);
    eprintln!(
        "e2e: building fuseway with {rustflags} into {}",
        target_dir.display()
    );
    let status = Command::new(cargo)
        .args(["build", "--profile", profile, "--features", "count-allocs"])
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

/// One path's training traffic: the load generator for [`TRAINING_SECONDS`].
fn train(examples: &Path, port: u16, scenario: Scenario) {
    let mut loadgen = spawn(
        "loadgen",
        crate::run::loadgen(examples, port, scenario)
            .args(["--warmup", "0", "--duration", TRAINING_SECONDS])
            .stdout(Stdio::null()),
    );
    let status = loadgen.child.wait().expect("wait for loadgen");
    assert!(
        status.success(),
        "e2e: the training load failed ({scenario:?})"
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
