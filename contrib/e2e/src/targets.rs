//! The targets a run measures: the backend itself, fuseway (both HTTP/1.1 engines), the
//! bare hyper proxies, nginx and HAProxy, each started with equivalent settings.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use crate::process::{fd_limit, free_port, key_values, listening, read_line, spawn, Process};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Kind {
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
    pub(crate) fn label(self) -> &'static str {
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

pub(crate) struct Target {
    pub(crate) kind: Kind,
    /// Ports for HTTP/1.1 and h2c (equal when one port serves both).
    pub(crate) h1: u16,
    pub(crate) h2: u16,
    pub(crate) process: Option<Process>,
    /// fuseway's allocation totals, from its stderr.
    pub(crate) allocs: Option<mpsc::Receiver<(u64, u64)>>,
}

pub(crate) fn start_fuseway(dir: &Path, tmp: &Path, backend: SocketAddr, kind: Kind) -> Target {
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
pub(crate) fn start_bare(dir: &Path, backend: SocketAddr, kind: Kind) -> Option<Target> {
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
pub(crate) fn parse_allocs(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("fuseway-allocs: ")?;
    let kv = key_values(rest);
    Some((
        kv.get("allocations")?.parse().ok()?,
        kv.get("bytes")?.parse().ok()?,
    ))
}

pub(crate) fn start_nginx(nginx: &Path, tmp: &Path, backend: SocketAddr) -> Option<Target> {
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
pub(crate) fn haproxy_maxconn() -> u64 {
    (fd_limit().saturating_sub(200) / 2).clamp(1000, 30_000)
}

pub(crate) fn start_haproxy(haproxy: &Path, tmp: &Path, backend: SocketAddr) -> Option<Target> {
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

/// A peer proxy that does not come up is skipped, not fatal.
pub(crate) fn peer_up(kind: Kind, mut process: Process, h1: u16, h2: u16) -> Option<Target> {
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
