//! `cargo e2e`: fuseway's end-to-end benchmark (method and runs: docs/BENCHMARKS.md,
//! "End to end").
//!
//! A hyper backend (100-byte body, HTTP/1.1 and h2c on one port), the `fuseway` binary
//! (built with `--features count-allocs`) and a load generator, each its own process on
//! 127.0.0.1, 32 connections, over five paths ([`Scenario`]): HTTP/1.1 and h2c clients
//! to an HTTP/1.1 destination, the same to an h2c destination, and gRPC unary calls
//! (h2c on both sides). Each path alternates rounds over the targets that serve it,
//! each round starting one target further on (round 2 runs the second target first):
//! direct -> fuseway -> fuseway-hyper (the binary with `--http1-engine hyper
//! --http2-engine hyper`) -> hyper-legacy -> hyper-pool -> hyper-pinned [-> nginx ->
//! haproxy, when installed]; to h2c destinations fuseway (a second process, configured
//! with `"Version": "2"`) and HAProxy (`proto h2`), for gRPC those and nginx
//! (`grpc_pass`; nginx forwards HTTP/2 only for gRPC). `hyper-legacy`, `hyper-pool` and
//! `hyper-pinned` are `examples/bare_proxy.rs`: a bare hyper proxy (no routing, no
//! transforms) over hyper-util's legacy client, its composable pool, or no pool at all
//! (each client connection its own backend connection) — the floor of a proxy built on
//! those pools, against which fuseway's own pool is measured, and the floor of any
//! proxy on hyper.
//!
//! ```text
//! cargo e2e                                  # 3 rounds x (5 s warm-up + 10 s) per target and protocol
//! cargo e2e --quick --profile dev            # 1 round x (1 s + 2 s), debug build: a smoke test (CI)
//! cargo e2e --rounds 5 --seconds 20
//! cargo e2e --paths 1.1>1.1 --only fuseway,nginx   # one path, two proxies (and the direct baseline)
//! cargo e2e --reload-only                    # p99 on 10 000 routes, steady and reloaded every 250 ms
//! cargo e2e --pgo                            # also fuseway-pgo: built with profile-guided optimisation
//! cargo e2e --pgo-build                      # only build that binary (the packaged build)
//! ```
//!
//! (`cargo e2e` is an alias, in `.cargo/config.toml`, of `cargo run -p fuseway-e2e
//! --release --`.) It first runs `cargo build` in the chosen profile (release by
//! default) for the binary and the `bench_backend`, `loadgen` and `bare_proxy`
//! examples. One `RESULT` line per run; the proxy's CPU time per request is the
//! user+sys ticks of the proxy's processes (`/proc/PID/stat`) over the measurement
//! window divided by the requests, also reported apart (user: the proxy's own code and
//! its libraries; sys: the kernel's TCP work for it, about the same for every proxy);
//! allocations per request come from the binary's SIGUSR1 totals over the same window;
//! RSS is read at the window's end. nginx and HAProxy run with equivalent keep-alive
//! settings (configs written to a temp dir, 2 workers/threads like fuseway's 2-core
//! runtime) when they are on PATH; otherwise they are skipped with a message. They run
//! twice on the HTTP/1.1-destination paths: as configured minimally (`nginx`,
//! `haproxy`: no forwarding headers) and doing the header work fuseway does by default
//! as YARP does (`nginx-xff`, `haproxy-xff`: `X-Forwarded-For` appended, `-Proto` and
//! `-Host` set). Only 127.0.0.1 is used.

mod idle;
mod pgo;
mod process;
mod procfs;
mod reload;
mod run;
mod scenario;
mod targets;

use std::io::BufReader;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Parser;

use crate::idle::idle_phase;
use crate::process::{on_path, raise_fd_limit, read_line, spawn};
use crate::procfs::clock_ticks;
use crate::reload::reload_phase;
use crate::run::{run_once, summary};
use crate::scenario::Scenario;
use crate::targets::{start_bare, start_fuseway, start_haproxy, start_nginx, Kind, Target};

/// fuseway's end-to-end benchmark against nginx and HAProxy on 127.0.0.1.
#[derive(Parser, Debug)]
#[command(name = "cargo e2e")]
struct Args {
    /// A smoke test: 1 round of 1 s warm-up + 2 s, 200 idle connections (figures
    /// meaningless).
    #[arg(long)]
    quick: bool,
    /// The cargo profile the measured binaries are built in.
    #[arg(long, default_value = "release")]
    profile: String,
    /// Rounds per target and protocol [default: 3; 1 with --quick].
    #[arg(long)]
    rounds: Option<usize>,
    /// Warm-up seconds before each measurement [default: 5; 1 with --quick].
    #[arg(long)]
    warmup: Option<f64>,
    /// Measured seconds per run [default: 10; 2 with --quick].
    #[arg(long)]
    seconds: Option<f64>,
    /// Client connections of the load generator.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Idle keep-alive connections opened to each proxy in the memory phase (0: no
    /// memory phase) [default: 10 000; 200 with --quick].
    #[arg(long)]
    idle: Option<usize>,
    /// Also the reload phase: p99 latency on a 10 000-route configuration, steady and
    /// while it is reloaded every 250 ms (on with --quick, as a smoke test).
    #[arg(long)]
    reload: bool,
    /// Only the reload phase (no path runs, no idle phase).
    #[arg(long)]
    reload_only: bool,
    /// Only these targets (comma-separated labels as the tables print them:
    /// `fuseway,fuseway-alog,nginx` ...); the backend's own row is always measured.
    #[arg(long, value_delimiter = ',', value_name = "LABELS")]
    only: Vec<String>,
    /// Only these paths (comma-separated labels as the tables print them: `1.1>1.1`,
    /// `h2c>1.1`, `1.1>h2c`, `h2c>h2c`, `grpc`).
    #[arg(long, value_delimiter = ',', value_name = "LABELS")]
    paths: Vec<String>,
    /// Also `fuseway-pgo`: the binary built with profile-guided optimisation, trained
    /// on its own traffic, not the benchmark's (needs rustup's `llvm-tools`; two more
    /// builds).
    #[arg(long)]
    pgo: bool,
    /// Only build the profile-guided binary (trained as for `--pgo`, without the
    /// allocation counter) and print where it is: the packaged build
    /// (contrib/Dockerfile).
    #[arg(long)]
    pgo_build: bool,
}

/// What one benchmark run does, from [`Args`].
pub(crate) struct Settings {
    pub(crate) rounds: usize,
    pub(crate) warmup: f64,
    pub(crate) seconds: f64,
    pub(crate) connections: usize,
    /// Idle keep-alive connections opened to each proxy in the memory phase.
    pub(crate) idle: usize,
    pub(crate) quick: bool,
    /// Run the reload phase.
    pub(crate) reload: bool,
}

impl From<&Args> for Settings {
    fn from(args: &Args) -> Self {
        let quick = args.quick;
        Settings {
            rounds: args.rounds.unwrap_or(if quick { 1 } else { 3 }),
            warmup: args.warmup.unwrap_or(if quick { 1.0 } else { 5.0 }),
            seconds: args.seconds.unwrap_or(if quick { 2.0 } else { 10.0 }),
            connections: args.connections,
            idle: args.idle.unwrap_or(if quick { 200 } else { 10_000 }),
            quick,
            reload: args.reload || args.reload_only || quick,
        }
    }
}

/// The workspace the tool belongs to (two levels above its manifest).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("contrib/e2e sits two levels below the workspace root")
        .to_path_buf()
}

/// `cargo build` of the examples the run starts and (if `binary`) the binary, in
/// `profile`; returns the directory they are in (`target/release`, `target/debug` ...).
///
/// The binary is built on its own, as a user builds it: built in one command with the
/// examples it would take the features the dev-dependencies turn on in shared crates
/// (tokio's `process` driver, whose orphan reaping takes a process-wide lock at each
/// wait for events, and `test-util`, whose clock reads take a lock), and be measured
/// with work the user's binary does not do.
fn build(root: &Path, profile: &str, binary: bool) -> PathBuf {
    let common = ["--profile", profile, "--features", "count-allocs"];
    if binary {
        eprintln!("e2e: building fuseway (--features count-allocs), profile {profile}");
        cargo_build(root, &[&common[..], &["--bin", "fuseway"]].concat());
    }
    eprintln!("e2e: building the bench examples, profile {profile}");
    let examples = ["bench_backend", "loadgen", "bare_proxy"].map(|e| ["--example", e]);
    cargo_build(root, &[&common[..], examples.as_flattened()].concat());
    target_dir(root).join(profile_dir(profile))
}

/// `cargo build` with `args` in `root`; panics if it fails.
fn cargo_build(root: &Path, args: &[&str]) {
    let status = cargo()
        .arg("build")
        .args(args)
        .current_dir(root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "e2e: cargo build failed");
}

/// `cargo`, to be run in the environment of the shell `cargo e2e` was started from:
/// without the variables `cargo run` sets for the program it runs (this one), which a
/// build would otherwise inherit. A build script that reads one of them makes cargo
/// rebuild its crate, and every crate above it, whenever the value differs from the
/// last build's: ring's reads `CARGO_MANIFEST_DIR`, so each `cargo e2e` after a `cargo
/// build` or `cargo test` rebuilt ring, rustls and all that uses them, and the next
/// `cargo build` did again (~6 minutes each time on a 2-core machine).
pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_by_cargo_run = name.starts_with("CARGO_PKG_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            );
        if set_by_cargo_run {
            command.env_remove(name);
        }
    }
    command
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else the workspace's `target`.
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// The directory a profile's artifacts go to under a target directory.
pub(crate) fn profile_dir(profile: &str) -> &str {
    match profile {
        "dev" | "test" => "debug",
        "bench" => "release",
        other => other,
    }
}

fn main() {
    let args = Args::parse();
    let settings = Settings::from(&args);
    // The idle phase holds thousands of sockets here and in each proxy (which inherit
    // the limit).
    raise_fd_limit(settings.idle as u64 * 3 + 4096);
    // `--pgo-build` builds its own binaries.
    let dir = build(&workspace_root(), &args.profile, !args.pgo_build);
    let tmp = std::env::temp_dir().join(format!("fuseway-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let ticks = clock_ticks();

    let mut backend = spawn(
        "bench_backend",
        Command::new(dir.join("examples").join("bench_backend"))
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .stdout(Stdio::piped()),
    );
    let mut out = BufReader::new(backend.child.stdout.take().expect("piped stdout"));
    let backend_addr: SocketAddr = read_line(&mut out)
        .and_then(|l| l.strip_prefix("listening ").and_then(|a| a.parse().ok()))
        .expect("bench_backend prints `listening ADDR`");
    eprintln!("e2e: backend on {backend_addr}");

    if args.pgo_build {
        let Some(pgo) = pgo::build_pgo(
            &workspace_root(),
            &args.profile,
            &dir,
            &tmp,
            backend_addr,
            false,
        ) else {
            std::process::exit(1);
        };
        println!("e2e: built {}", pgo.join("fuseway").display());
        backend.stop();
        let _ = std::fs::remove_dir_all(&tmp);
        return;
    }
    if args.reload_only {
        reload_phase(&dir, &tmp, &backend, backend_addr, &settings, ticks);
        backend.stop();
        let _ = std::fs::remove_dir_all(&tmp);
        return;
    }

    let port = backend_addr.port();
    let wanted = |kind: Kind| args.only.is_empty() || args.only.iter().any(|l| l == kind.label());
    let mut targets = vec![
        // The baseline of each scenario (see `Scenario::baseline`).
        Target::new(
            Kind::Direct,
            None,
            &[
                (Scenario::H1ToH1, port),
                (Scenario::H2ToH1, port),
                (Scenario::Grpc, port),
            ],
        ),
    ];
    for (kind, h2c_destination) in [
        (Kind::Fuseway, false),
        (Kind::FusewayHyper, false),
        (Kind::FusewayAccessLog, false),
        (Kind::Fuseway, true),
    ] {
        if wanted(kind) {
            targets.push(start_fuseway(
                &dir,
                &tmp,
                backend_addr,
                kind,
                h2c_destination,
            ));
        }
    }
    if args.pgo && wanted(Kind::FusewayPgo) {
        if let Some(pgo) = pgo::build_pgo(
            &workspace_root(),
            &args.profile,
            &dir,
            &tmp,
            backend_addr,
            true,
        ) {
            for h2c_destination in [false, true] {
                targets.push(start_fuseway(
                    &pgo,
                    &tmp,
                    backend_addr,
                    Kind::FusewayPgo,
                    h2c_destination,
                ));
            }
        }
    }
    for kind in [Kind::HyperLegacy, Kind::HyperPool, Kind::HyperPinned] {
        if wanted(kind) {
            targets.extend(start_bare(&dir, backend_addr, kind));
        }
    }
    for (kind, forwarded) in [(Kind::Nginx, false), (Kind::NginxForwarded, true)] {
        if wanted(kind) {
            match on_path("nginx") {
                Some(nginx) => targets.extend(start_nginx(&nginx, &tmp, backend_addr, forwarded)),
                None => println!("e2e: nginx is not installed: its rounds are skipped"),
            }
        }
    }
    for (kind, forwarded) in [(Kind::Haproxy, false), (Kind::HaproxyForwarded, true)] {
        if wanted(kind) {
            match on_path("haproxy") {
                Some(haproxy) => {
                    targets.extend(start_haproxy(&haproxy, &tmp, backend_addr, forwarded))
                }
                None => println!("e2e: haproxy is not installed: its rounds are skipped"),
            }
        }
    }
    let mut kinds: Vec<Kind> = targets.iter().map(|t| t.kind).collect();
    kinds.sort();
    kinds.dedup();
    println!(
        "e2e: {} round(s) of {} s (+{} s warm-up) per target and path, {} connections{}",
        settings.rounds,
        settings.seconds,
        settings.warmup,
        settings.connections,
        if settings.quick {
            " (quick mode: a smoke test only)"
        } else {
            ""
        }
    );

    let mut runs = Vec::new();
    let paths = Scenario::ALL
        .into_iter()
        .filter(|s| args.paths.is_empty() || args.paths.iter().any(|l| l == s.label()));
    for scenario in paths {
        let serving: Vec<_> = targets
            .iter()
            .filter_map(|t| Some((t, t.port(scenario)?)))
            .collect();
        for round in 0..settings.rounds {
            // Each round starts one target further on: no target always runs in the
            // same slot (after the same neighbour, at the same point of the host's
            // cycles), which a fixed order would fold into its figures.
            let start = round % serving.len().max(1);
            for &(t, port) in serving[start..].iter().chain(&serving[..start]) {
                runs.push(run_once(
                    &dir, t, port, &backend, scenario, &settings, ticks,
                ));
            }
        }
    }
    summary(&runs, &kinds);
    idle_phase(&targets, settings.idle);
    if settings.reload {
        reload_phase(&dir, &tmp, &backend, backend_addr, &settings, ticks);
    }
    for t in &mut targets {
        if let Some(p) = &mut t.process {
            p.stop();
        }
    }
    for f in &targets {
        if let Some(rx) = &f.allocs {
            if let Ok((a, b)) = rx.recv_timeout(Duration::from_secs(2)) {
                println!(
                    "{} {} exited: {a} allocations, {b} bytes in total",
                    f.kind.label(),
                    f.note
                );
            }
        }
    }
    backend.stop();
    let _ = std::fs::remove_dir_all(&tmp);
    let total_errors: u64 = runs.iter().map(|r| r.errors).sum();
    assert!(
        runs.iter().all(|r| r.requests > 0),
        "e2e: a run completed no request"
    );
    if total_errors > 0 {
        println!("e2e: {total_errors} errors in total (see the RESULT lines)");
    }
}
