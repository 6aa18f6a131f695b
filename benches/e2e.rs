//! End-to-end bench (method and runs: docs/BENCHMARKS.md, "End to end"): a hyper
//! backend (100-byte body), the release `fuseway` binary (built with `--features
//! count-allocs`) and a load generator, each its own process on 127.0.0.1; HTTP/1.1 and
//! h2c, 32 connections, alternating rounds direct -> fuseway -> fuseway-hyper (the
//! binary with `--http1-engine hyper`; HTTP/1.1 only) -> hyper-legacy -> hyper-pool ->
//! hyper-pinned [-> nginx -> haproxy, when installed]. `hyper-legacy`, `hyper-pool` and
//! `hyper-pinned` are `examples/bare_proxy.rs`: a bare hyper proxy (no routing, no
//! transforms) over hyper-util's legacy client, its composable pool, or no pool at all
//! (each client connection its own backend connection) — the floor of a proxy built on
//! those pools, against which fuseway's own pool is measured, and the floor of any
//! proxy on hyper.
//!
//! ```text
//! cargo bench --bench e2e                          # 3 rounds x (5 s warm-up + 10 s) per target and protocol
//! FUSEWAY_BENCH_QUICK=1 cargo bench --bench e2e    # 1 round x (1 s + 2 s): a smoke test
//! FUSEWAY_E2E_ROUNDS=5 FUSEWAY_E2E_SECONDS=20 cargo bench --bench e2e
//! ```
//!
//! It first runs `cargo build` (same profile as itself) for the binary and the
//! `bench_backend` and `loadgen` examples. One `RESULT` line per run; the proxy's CPU
//! time per request is the user+sys ticks of the proxy's processes (`/proc/PID/stat`)
//! over the measurement window divided by the requests, also reported apart (user: the
//! proxy's own code and its libraries; sys: the kernel's TCP work for it, about the same
//! for every proxy); allocations per request come
//! from the binary's SIGUSR1 totals over the same window; RSS is read at the window's
//! end. nginx and HAProxy run with equivalent keep-alive settings (configs written to a
//! temp dir, 2 workers/threads like fuseway's 2-core runtime) when they are on PATH;
//! otherwise they are skipped with a message. Only 127.0.0.1 is used.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Settings {
    rounds: usize,
    warmup: f64,
    seconds: f64,
    connections: usize,
    /// Idle keep-alive connections opened to each proxy in the memory phase.
    idle: usize,
    quick: bool,
}

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var_os("FUSEWAY_BENCH_QUICK").is_some_and(|v| v != "0");
        let num = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Settings {
            rounds: num("FUSEWAY_E2E_ROUNDS", if quick { 1.0 } else { 3.0 }) as usize,
            warmup: num("FUSEWAY_E2E_WARMUP", if quick { 1.0 } else { 5.0 }),
            seconds: num("FUSEWAY_E2E_SECONDS", if quick { 2.0 } else { 10.0 }),
            connections: num("FUSEWAY_E2E_CONNECTIONS", 32.0) as usize,
            idle: num("FUSEWAY_E2E_IDLE", if quick { 200.0 } else { 10_000.0 }) as usize,
            quick,
        }
    }
}

/// Kills (and reaps) a child process when dropped.
struct Process {
    name: &'static str,
    child: Child,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("e2e: {} did not stop on SIGTERM; killing it", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn(name: &'static str, cmd: &mut Command) -> Process {
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("e2e: cannot start {name}: {e}"));
    Process { name, child }
}

// ===== build =====

/// The profile directory this bench runs from (`target/release`, `target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    // <target>/<profile>/deps/e2e-HASH
    exe.parent()
        .and_then(Path::parent)
        .expect("bench runs from <target>/<profile>/deps")
        .to_path_buf()
}

fn build(dir: &Path) {
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some("release") => "release".to_owned(),
        Some(other) => other.to_owned(),
        None => "release".to_owned(),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = dir.parent().expect("target dir");
    eprintln!(
        "e2e: building fuseway (--features count-allocs) and the bench examples, profile {profile}"
    );
    let status = Command::new(cargo)
        .args([
            "build",
            "--profile",
            &profile,
            "--features",
            "count-allocs",
            "--bin",
            "fuseway",
            "--example",
            "bench_backend",
            "--example",
            "loadgen",
            "--example",
            "bare_proxy",
        ])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "e2e: cargo build failed");
}

// ===== processes and /proc =====

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// Whether `addr` accepts connections within 20 s (false at once if `process` exits).
fn listening(addr: SocketAddr, process: &mut Process) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        if matches!(process.child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A peer proxy that does not come up is skipped, not fatal.
fn peer_up(kind: Kind, mut process: Process, h1: u16, h2: u16) -> Option<Target> {
    let up = [h1, h2]
        .iter()
        .all(|&p| listening(SocketAddr::from(([127, 0, 0, 1], p)), &mut process));
    if !up {
        println!(
            "e2e: {} did not start listening (see its messages above): its rounds are skipped",
            kind.label()
        );
        return None;
    }
    Some(Target {
        kind,
        h1,
        h2,
        process: Some(process),
        allocs: None,
    })
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Fields of /proc/PID/stat after the command name: [0] is field 3 (state).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// `pid` and its child processes (nginx's workers).
fn family(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if stat_fields(p).is_some_and(|f| f.get(1) == Some(&(pid as u64))) {
                pids.push(p);
            }
        }
    }
    pids
}

/// (user, sys) clock ticks of `pid` and its children.
fn cpu_ticks(pid: u32) -> (u64, u64) {
    family(pid)
        .into_iter()
        .filter_map(stat_fields)
        .fold((0, 0), |(u, s), f| (u + f[11], s + f[12]))
}

/// Resident set size of `pid` and its children, in MB.
fn rss_mb(pid: u32) -> f64 {
    family(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .sum::<f64>()
        / 1024.0
}

// ===== the targets =====

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Direct,
    Fuseway,
    /// The same binary with `--http1-engine hyper` (HTTP/1.1 rounds only: HTTP/2 is
    /// hyper's in both).
    FusewayHyper,
    HyperLegacy,
    HyperPool,
    HyperPinned,
    Nginx,
    Haproxy,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Fuseway => "fuseway",
            Kind::FusewayHyper => "fuseway-hyper",
            Kind::HyperLegacy => "hyper-legacy",
            Kind::HyperPool => "hyper-pool",
            Kind::HyperPinned => "hyper-pinned",
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
        }
    }
}

struct Target {
    kind: Kind,
    /// Ports for HTTP/1.1 and h2c (equal when one port serves both).
    h1: u16,
    h2: u16,
    process: Option<Process>,
    /// fuseway's allocation totals, from its stderr.
    allocs: Option<mpsc::Receiver<(u64, u64)>>,
}

fn start_fuseway(dir: &Path, tmp: &Path, backend: SocketAddr, kind: Kind) -> Target {
    let port = free_port();
    let config = tmp.join("fuseway.json");
    let engine = if kind == Kind::FusewayHyper {
        "hyper"
    } else {
        "native"
    };
    std::fs::write(
        &config,
        format!(
            r#"{{
  "Routes": {{ "all": {{ "ClusterId": "backend", "Match": {{ "Path": "/{{**catchall}}" }} }} }},
  "Clusters": {{ "backend": {{ "Destinations": {{ "b": {{ "Address": "http://{backend}" }} }} }} }}
}}"#
        ),
    )
    .expect("write fuseway config");
    let mut process = spawn(
        "fuseway",
        Command::new(dir.join("fuseway"))
            .arg("--config")
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--http1-engine", engine])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = process.child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            match parse_allocs(&line) {
                Some(counts) => {
                    let _ = tx.send(counts);
                }
                None => eprintln!("fuseway: {line}"),
            }
        }
    });
    assert!(
        listening(SocketAddr::from(([127, 0, 0, 1], port)), &mut process),
        "e2e: fuseway is not listening on 127.0.0.1:{port}"
    );
    Target {
        kind,
        h1: port,
        h2: port,
        process: Some(process),
        allocs: Some(rx),
    }
}

/// `examples/bare_proxy.rs` with hyper-util's legacy client, its composable pool or
/// pinned connections, two workers like fuseway's default on this machine kind.
fn start_bare(dir: &Path, backend: SocketAddr, kind: Kind) -> Option<Target> {
    let client = match kind {
        Kind::HyperLegacy => "legacy",
        Kind::HyperPinned => "pinned",
        _ => "pool",
    };
    let mut process = spawn(
        "bare_proxy",
        Command::new(dir.join("examples").join("bare_proxy"))
            .args(["--listen", "127.0.0.1:0", "--backend", &backend.to_string()])
            .args(["--client", client, "--workers", "2"])
            .stdout(Stdio::piped()),
    );
    let mut out = BufReader::new(process.child.stdout.take().expect("piped stdout"));
    let port = read_line(&mut out)
        .and_then(|l| l.strip_prefix("listening ")?.parse::<SocketAddr>().ok())
        .expect("bare_proxy prints `listening ADDR`")
        .port();
    peer_up(kind, process, port, port)
}

/// `fuseway-allocs: allocations=N bytes=M at=...`
fn parse_allocs(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("fuseway-allocs: ")?;
    let kv = key_values(rest);
    Some((
        kv.get("allocations")?.parse().ok()?,
        kv.get("bytes")?.parse().ok()?,
    ))
}

fn key_values(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn start_nginx(nginx: &Path, tmp: &Path, backend: SocketAddr) -> Option<Target> {
    let (h1, h2) = (free_port(), free_port());
    let d = tmp.join("nginx");
    std::fs::create_dir_all(&d).expect("nginx dir");
    let p = d.display();
    // nginx 1.22 serves h2c (prior knowledge) only on a listener marked `http2`, so
    // HTTP/1.1 and h2c get a port each. Keep-alive to clients and to the backend.
    let config = format!(
        r#"worker_processes 2;
daemon off;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {p}/body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 60s;
    upstream backend {{
        server {backend};
        keepalive 64;
        keepalive_requests 10000000;
    }}
    server {{
        listen 127.0.0.1:{h1};
        listen 127.0.0.1:{h2} http2;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
        }}
    }}
}}
"#
    );
    let file = d.join("nginx.conf");
    std::fs::write(&file, config).expect("write nginx config");
    let process = spawn(
        "nginx",
        Command::new(nginx)
            .arg("-c")
            .arg(&file)
            .arg("-p")
            .arg(&d)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
    );
    peer_up(Kind::Nginx, process, h1, h2)
}

/// HAProxy's `maxconn`: as many as its descriptor limit allows (it needs two per
/// connection and refuses to start beyond the limit).
fn haproxy_maxconn() -> u64 {
    (fd_limit().saturating_sub(200) / 2).clamp(1000, 30_000)
}

fn start_haproxy(haproxy: &Path, tmp: &Path, backend: SocketAddr) -> Option<Target> {
    let (h1, h2) = (free_port(), free_port());
    let maxconn = haproxy_maxconn();
    let config = format!(
        r#"global
    nbthread 2
    maxconn {maxconn}
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    option http-keep-alive
    http-reuse always
frontend fe_h1
    bind 127.0.0.1:{h1}
    default_backend be
frontend fe_h2
    bind 127.0.0.1:{h2} proto h2
    default_backend be
backend be
    server b {backend}
"#
    );
    let file = tmp.join("haproxy.cfg");
    std::fs::write(&file, config).expect("write haproxy config");
    let process = spawn(
        "haproxy",
        Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
    );
    peer_up(Kind::Haproxy, process, h1, h2)
}

// ===== one run =====

struct Run {
    kind: Kind,
    http: u8,
    rps: f64,
    requests: u64,
    errors: u64,
    proxy_cpu_us: Option<f64>,
    /// The user-mode part of `proxy_cpu_us` (the rest is the kernel's).
    proxy_user_us: Option<f64>,
    backend_cpu_us: f64,
    allocs_per_req: Option<f64>,
    alloc_bytes_per_req: Option<f64>,
    rss_mb: Option<f64>,
    p50: u64,
    p99: u64,
}

fn read_line(out: &mut BufReader<ChildStdout>) -> Option<String> {
    let mut line = String::new();
    match out.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
    }
}

fn snapshot_allocs(target: &Target) -> Option<(u64, u64)> {
    let rx = target.allocs.as_ref()?;
    while rx.try_recv().is_ok() {}
    let pid = target.process.as_ref()?.pid();
    Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .ok()?;
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

#[allow(clippy::too_many_arguments)]
fn run_once(
    dir: &Path,
    target: &Target,
    backend: &Process,
    backend_addr: SocketAddr,
    http: u8,
    settings: &Settings,
    ticks_per_s: f64,
) -> Run {
    let port = match target.kind {
        Kind::Direct => backend_addr.port(),
        _ if http == 2 => target.h2,
        _ => target.h1,
    };
    let mut loadgen = spawn(
        "loadgen",
        Command::new(dir.join("examples").join("loadgen"))
            .args(["--url", &format!("http://127.0.0.1:{port}/bench/path?q=1")])
            .args(["--http", &http.to_string()])
            .args(["--connections", &settings.connections.to_string()])
            .args(["--warmup", &settings.warmup.to_string()])
            .args(["--duration", &settings.seconds.to_string()])
            .stdout(Stdio::piped()),
    );
    let mut out = BufReader::new(loadgen.child.stdout.take().expect("piped stdout"));
    let proxy_pid = target.process.as_ref().map(Process::pid);
    let mut start = None;
    let mut end = None;
    let mut result = None;
    while let Some(line) = read_line(&mut out) {
        let sample = || {
            (
                proxy_pid.map(cpu_ticks),
                cpu_ticks(backend.pid()),
                snapshot_allocs(target),
            )
        };
        match line.as_str() {
            "MEASURE start" => start = Some(sample()),
            "MEASURE end" => end = Some((sample(), proxy_pid.map(rss_mb))),
            l if l.starts_with("LOADGEN ") => result = Some(key_values(&l[8..])),
            l => eprintln!("loadgen: {l}"),
        }
    }
    let status = loadgen.child.wait().expect("loadgen exit");
    assert!(status.success(), "e2e: loadgen failed ({status})");
    let (start, (end, rss)) = (
        start.expect("loadgen printed MEASURE start"),
        end.expect("loadgen printed MEASURE end"),
    );
    let r = result.expect("loadgen printed its LOADGEN line");
    let get = |k: &str| -> f64 { r.get(k).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    let requests = get("requests") as u64;
    let per_req_us = |ticks: u64| ticks as f64 / ticks_per_s * 1e6 / requests.max(1) as f64;
    let used = |a: (u64, u64), b: (u64, u64)| (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1));
    let proxy = match (start.0, end.0) {
        (Some(a), Some(b)) => Some(used(a, b)),
        _ => None,
    };
    let backend_used = used(start.1, end.1);
    let run = Run {
        kind: target.kind,
        http,
        rps: get("rps"),
        requests,
        errors: get("errors") as u64,
        proxy_cpu_us: proxy.map(|(u, s)| per_req_us(u + s)),
        proxy_user_us: proxy.map(|(u, _)| per_req_us(u)),
        backend_cpu_us: per_req_us(backend_used.0 + backend_used.1),
        allocs_per_req: match (start.2, end.2) {
            (Some(a), Some(b)) => Some((b.0 - a.0) as f64 / requests.max(1) as f64),
            _ => None,
        },
        alloc_bytes_per_req: match (start.2, end.2) {
            (Some(a), Some(b)) => Some((b.1 - a.1) as f64 / requests.max(1) as f64),
            _ => None,
        },
        rss_mb: rss,
        p50: get("p50_us") as u64,
        p99: get("p99_us") as u64,
    };
    let opt = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".into(),
    };
    println!(
        "RESULT label={} target=127.0.0.1:{port} http={} connections={} duration_s={} requests={} errors={} rps={:.0} p50_us={} p90_us={} p99_us={} p999_us={} proxy_cpu_us_per_req={} proxy_user_us_per_req={} backend_cpu_us_per_req={:.1} allocs_per_req={} alloc_bytes_per_req={} proxy_rss_mb={}",
        target.kind.label(),
        if http == 2 { "2" } else { "1.1" },
        settings.connections,
        r.get("duration_s").map(String::as_str).unwrap_or("?"),
        run.requests,
        run.errors,
        run.rps,
        run.p50,
        get("p90_us") as u64,
        run.p99,
        get("p999_us") as u64,
        opt(run.proxy_cpu_us, 1),
        opt(run.proxy_user_us, 1),
        run.backend_cpu_us,
        opt(run.allocs_per_req, 1),
        opt(run.alloc_bytes_per_req, 0),
        opt(run.rss_mb, 1),
    );
    let _ = std::io::stdout().flush();
    run
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn summary(runs: &[Run], kinds: &[Kind]) {
    println!();
    println!("summary: medians over rounds (proxy CPU = user+sys of the proxy's processes over the window / requests; user = its user-mode part)");
    println!(
        "{:<6} {:<13} {:>9} {:>10} {:>8} {:>14} {:>7} {:>11} {:>9} {:>8} {:>8} {:>7} {:>7}",
        "http",
        "target",
        "rps",
        "vs direct",
        "errors",
        "proxy CPU µs/r",
        "user",
        "allocs/req",
        "bytes/req",
        "RSS MB",
        "p50 µs",
        "p99 µs",
        "rounds"
    );
    for http in [1u8, 2] {
        let of = |k: Kind| runs.iter().filter(move |r| r.kind == k && r.http == http);
        let direct = median(of(Kind::Direct).map(|r| r.rps).collect());
        let mut fuseway_cpu = None;
        for &k in kinds {
            let rs: Vec<&Run> = of(k).collect();
            if rs.is_empty() {
                continue;
            }
            let m = |f: &dyn Fn(&Run) -> Option<f64>| {
                let v: Vec<f64> = rs.iter().filter_map(|r| f(r)).collect();
                (!v.is_empty()).then(|| median(v))
            };
            let rps = m(&|r| Some(r.rps)).unwrap_or(0.0);
            let cpu = m(&|r| r.proxy_cpu_us);
            if k == Kind::Fuseway {
                fuseway_cpu = cpu;
            }
            let show =
                |v: Option<f64>, d: usize| v.map(|v| format!("{v:.d$}")).unwrap_or("-".into());
            println!(
                "{:<6} {:<13} {:>9.0} {:>10} {:>8} {:>14} {:>7} {:>11} {:>9} {:>8} {:>8} {:>7} {:>7}",
                if http == 2 { "h2c" } else { "1.1" },
                k.label(),
                rps,
                if k == Kind::Direct {
                    "1".into()
                } else {
                    format!("{:.2}", rps / direct)
                },
                rs.iter().map(|r| r.errors).sum::<u64>(),
                show(cpu, 1),
                show(m(&|r| r.proxy_user_us), 1),
                show(m(&|r| r.allocs_per_req), 1),
                show(m(&|r| r.alloc_bytes_per_req), 0),
                show(m(&|r| r.rss_mb), 1),
                show(m(&|r| Some(r.p50 as f64)), 0),
                show(m(&|r| Some(r.p99 as f64)), 0),
                rs.len(),
            );
        }
        let Some(f) = fuseway_cpu else { continue };
        let f_user = median(of(Kind::Fuseway).filter_map(|r| r.proxy_user_us).collect());
        for &k in kinds {
            if matches!(k, Kind::Direct | Kind::Fuseway) {
                continue;
            }
            if of(k).next().is_none() {
                continue;
            }
            let cpu = median(of(k).filter_map(|r| r.proxy_cpu_us).collect());
            let user = median(of(k).filter_map(|r| r.proxy_user_us).collect());
            let rps = median(of(Kind::Fuseway).map(|r| r.rps).collect())
                / median(of(k).map(|r| r.rps).collect());
            println!(
                "       fuseway/{}: rps {rps:.2}, proxy CPU per request {:.2} (user {:.2})",
                k.label(),
                f / cpu,
                f_user / user
            );
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported here.
    let settings = Settings::from_env();
    // The idle phase holds thousands of sockets here and in each proxy (which inherit
    // the limit).
    raise_fd_limit(settings.idle as u64 * 3 + 4096);
    let dir = profile_dir();
    build(&dir);
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

    let mut targets = vec![
        Target {
            kind: Kind::Direct,
            h1: backend_addr.port(),
            h2: backend_addr.port(),
            process: None,
            allocs: None,
        },
        start_fuseway(&dir, &tmp, backend_addr, Kind::Fuseway),
        start_fuseway(&dir, &tmp, backend_addr, Kind::FusewayHyper),
    ];
    for kind in [Kind::HyperLegacy, Kind::HyperPool, Kind::HyperPinned] {
        targets.extend(start_bare(&dir, backend_addr, kind));
    }
    match on_path("nginx") {
        Some(nginx) => targets.extend(start_nginx(&nginx, &tmp, backend_addr)),
        None => println!("e2e: nginx is not installed: its rounds are skipped"),
    }
    match on_path("haproxy") {
        Some(haproxy) => targets.extend(start_haproxy(&haproxy, &tmp, backend_addr)),
        None => println!("e2e: haproxy is not installed: its rounds are skipped"),
    }
    let kinds: Vec<Kind> = targets.iter().map(|t| t.kind).collect();
    println!(
        "e2e: {} round(s) of {} s (+{} s warm-up) per target and protocol, {} connections{}",
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
    for http in [1u8, 2] {
        for _ in 0..settings.rounds {
            for t in &targets {
                if http == 2 && t.kind == Kind::FusewayHyper {
                    continue;
                }
                runs.push(run_once(
                    &dir,
                    t,
                    &backend,
                    backend_addr,
                    http,
                    &settings,
                    ticks,
                ));
            }
        }
    }
    summary(&runs, &kinds);
    idle_phase(&targets, settings.idle);
    for t in &mut targets {
        if let Some(p) = &mut t.process {
            p.stop();
        }
    }
    for f in &targets {
        if let Some(rx) = &f.allocs {
            if let Ok((a, b)) = rx.recv_timeout(Duration::from_secs(2)) {
                println!(
                    "{} exited: {a} allocations, {b} bytes in total",
                    f.kind.label()
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

// ===== idle keep-alive connections: memory per connection =====

/// This process's descriptor limit (its children inherit it).
fn fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain libc call on a local struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    limit.rlim_cur
}

fn raise_fd_limit(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Resident set size of `pid` and its children, in KiB.
fn rss_kib(pid: u32) -> u64 {
    (rss_mb(pid) * 1024.0) as u64
}

/// One request on `stream`, its response read to the end of its body.
fn one_request(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"GET /idle HTTP/1.1\r\nHost: bench\r\n\r\n")?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            return Err(std::io::Error::other(head));
        }
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return Ok(());
        }
    }
}

/// How long the idle connections are held before the proxies' RSS is read.
const IDLE_SETTLE: Duration = Duration::from_secs(3);

/// Open `n` keep-alive connections to each proxy, one request on each, and hold them
/// ([`IDLE_SETTLE`]): the proxy's RSS growth per connection; then one more request on
/// every connection (all must still be open and answer).
fn idle_phase(targets: &[Target], n: usize) {
    if n == 0 {
        return;
    }
    println!();
    println!("idle: {n} keep-alive HTTP/1.1 connections per proxy, one request each, then held");
    for t in targets {
        let Some(process) = &t.process else { continue };
        if matches!(
            t.kind,
            Kind::HyperLegacy | Kind::HyperPool | Kind::HyperPinned
        ) {
            continue;
        }
        // HAProxy holds at most `maxconn` connections (its descriptor limit).
        let n = if t.kind == Kind::Haproxy {
            n.min(haproxy_maxconn() as usize - 100)
        } else {
            n
        };
        let before = rss_kib(process.pid());
        let mut conns = Vec::with_capacity(n);
        let mut errors = 0usize;
        for _ in 0..n {
            match TcpStream::connect(("127.0.0.1", t.h1)).and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                one_request(&mut s).map(|()| s)
            }) {
                Ok(s) => conns.push(s),
                Err(_) => errors += 1,
            }
        }
        // Held a few seconds before measuring: what a proxy does with connections that
        // stay idle counts (fuseway parks a connection after 1 s of waiting).
        std::thread::sleep(IDLE_SETTLE);
        let after = rss_kib(process.pid());
        for s in &mut conns {
            if one_request(s).is_err() {
                errors += 1;
            }
        }
        let held = conns.len();
        drop(conns);
        let per_conn = (after.saturating_sub(before) * 1024) as f64 / held.max(1) as f64;
        println!(
            "IDLE label={} connections={held} errors={errors} rss_before_kib={before} rss_held_kib={after} bytes_per_connection={per_conn:.0}",
            t.kind.label()
        );
    }
}
