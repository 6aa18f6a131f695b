//! The targets a run measures: the backend itself, fuseway (both HTTP/1.1 engines), the
//! bare hyper proxies, nginx and HAProxy, each started with equivalent settings.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use crate::process::{fd_limit, free_port, key_values, listening, read_line, spawn, Process};
use crate::scenario::Scenario;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Kind {
    Direct,
    Fuseway,
    /// The binary built with profile-guided optimisation (`--pgo`, see `pgo.rs`).
    FusewayPgo,
    /// The same binary with `--http1-engine hyper` (HTTP/1.1 rounds only: HTTP/2 is
    /// hyper's in both).
    FusewayHyper,
    /// The same binary writing its access log (to `/dev/null`: what formatting and
    /// handing records to the writer thread cost); the others run with it off, as
    /// nginx runs with `access_log off`.
    FusewayAccessLog,
    /// The binary on a 10 000-route configuration, for the reload phase.
    FusewayReload,
    HyperLegacy,
    HyperPool,
    HyperPinned,
    Nginx,
    /// nginx setting `X-Forwarded-For`/`-Proto`/`-Host` as fuseway does by default
    /// (YARP's defaults): the same header work on both sides.
    NginxForwarded,
    Haproxy,
    /// HAProxy setting the same three headers.
    HaproxyForwarded,
}

impl Kind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Fuseway => "fuseway",
            Kind::FusewayPgo => "fuseway-pgo",
            Kind::FusewayHyper => "fuseway-hyper",
            Kind::FusewayAccessLog => "fuseway-alog",
            Kind::FusewayReload => "fuseway-10k",
            Kind::HyperLegacy => "hyper-legacy",
            Kind::HyperPool => "hyper-pool",
            Kind::HyperPinned => "hyper-pinned",
            Kind::Nginx => "nginx",
            Kind::NginxForwarded => "nginx-xff",
            Kind::Haproxy => "haproxy",
            Kind::HaproxyForwarded => "haproxy-xff",
        }
    }
}

pub(crate) struct Target {
    pub(crate) kind: Kind,
    /// What it is, beyond its kind (`"h2c destination"`), or "".
    pub(crate) note: &'static str,
    /// The port each scenario it serves is sent to.
    ports: [Option<u16>; Scenario::ALL.len()],
    pub(crate) process: Option<Process>,
    /// fuseway's allocation totals, from its stderr.
    pub(crate) allocs: Option<mpsc::Receiver<(u64, u64)>>,
}

impl Target {
    /// A target serving `serves` (scenario, port).
    pub(crate) fn new(kind: Kind, process: Option<Process>, serves: &[(Scenario, u16)]) -> Self {
        let mut ports = [None; Scenario::ALL.len()];
        for &(scenario, port) in serves {
            ports[scenario.index()] = Some(port);
        }
        Target {
            kind,
            note: "",
            ports,
            process,
            allocs: None,
        }
    }

    /// The port `scenario`'s load goes to, if the target serves it.
    pub(crate) fn port(&self, scenario: Scenario) -> Option<u16> {
        self.ports[scenario.index()]
    }

    fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports.iter().flatten().copied()
    }
}

/// The fuseway binary (`kind`: on its own HTTP/1.1 engine or hyper's, with or without
/// its access log) forwarding to `backend` over HTTP/1.1, or over h2c when
/// `h2c_destination`.
pub(crate) fn start_fuseway(
    dir: &Path,
    tmp: &Path,
    backend: SocketAddr,
    kind: Kind,
    h2c_destination: bool,
) -> Target {
    let port = free_port();
    let config = tmp.join(format!("fuseway-{port}.json"));
    let version = if h2c_destination {
        r#", "HttpRequest": { "Version": "2", "VersionPolicy": "RequestVersionExact" }"#
    } else {
        ""
    };
    std::fs::write(
        &config,
        format!(
            r#"{{
  "Routes": {{ "all": {{ "ClusterId": "backend", "Match": {{ "Path": "/{{**catchall}}" }} }} }},
  "Clusters": {{ "backend": {{ "Destinations": {{ "b": {{ "Address": "http://{backend}" }} }}{version} }} }}
}}"#
        ),
    )
    .expect("write fuseway config");
    let (process, allocs) = spawn_fuseway(dir, &config, port, kind, &[]);
    let serves: &[(Scenario, u16)] = match (kind, h2c_destination) {
        (_, true) => &[
            (Scenario::H1ToH2, port),
            (Scenario::H2ToH2, port),
            (Scenario::Grpc, port),
        ],
        _ => &[(Scenario::H1ToH1, port), (Scenario::H2ToH1, port)],
    };
    let mut target = Target::new(kind, Some(process), serves);
    target.allocs = Some(allocs);
    if h2c_destination {
        target.note = "h2c destination";
    }
    target
}

/// The fuseway binary on `config`, listening on `port` (`kind`: which engine, whether it
/// writes its access log), with `args` besides; its allocation totals (SIGUSR1) come
/// from the receiver.
pub(crate) fn spawn_fuseway(
    dir: &Path,
    config: &Path,
    port: u16,
    kind: Kind,
    args: &[&str],
) -> (Process, mpsc::Receiver<(u64, u64)>) {
    let listen = format!("127.0.0.1:{port}");
    let args: Vec<&str> = ["--listen", &listen]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    spawn_fuseway_on(dir, config, &[port], kind, &args)
}

/// [`spawn_fuseway`] listening where `config` (or `args`) says, on 127.0.0.1 at `ports`.
pub(crate) fn spawn_fuseway_on(
    dir: &Path,
    config: &Path,
    ports: &[u16],
    kind: Kind,
    args: &[&str],
) -> (Process, mpsc::Receiver<(u64, u64)>) {
    let engine = if kind == Kind::FusewayHyper {
        "hyper"
    } else {
        "native"
    };
    let mut process = spawn(
        "fuseway",
        Command::new(dir.join("fuseway"))
            .arg("--config")
            .arg(config)
            .args(["--http1-engine", engine, "--http2-engine", engine])
            .args([
                "--access-log",
                if kind == Kind::FusewayAccessLog {
                    "/dev/null"
                } else {
                    "off"
                },
            ])
            .args(args)
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
    for &port in ports {
        assert!(
            listening(SocketAddr::from(([127, 0, 0, 1], port)), &mut process),
            "e2e: fuseway is not listening on 127.0.0.1:{port}"
        );
    }
    (process, rx)
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
    peer_up(Target::new(
        kind,
        Some(process),
        &[(Scenario::H1ToH1, port), (Scenario::H2ToH1, port)],
    ))
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

/// nginx: HTTP/1.1 and h2c clients to an HTTP/1.1 destination, and gRPC (`grpc_pass`:
/// nginx forwards HTTP/2 only for gRPC).
/// `forwarded`: also set `X-Forwarded-For`/`-Proto`/`-Host` as fuseway does (then on
/// HTTP/1.1 and h2c clients only, as [`Kind::NginxForwarded`]).
pub(crate) fn start_nginx(
    nginx: &Path,
    tmp: &Path,
    backend: SocketAddr,
    forwarded: bool,
) -> Option<Target> {
    let (h1, h2, grpc) = (free_port(), free_port(), free_port());
    let (kind, forwarding) = if forwarded {
        (
            Kind::NginxForwarded,
            "\n            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\
             \n            proxy_set_header X-Forwarded-Proto $scheme;\
             \n            proxy_set_header X-Forwarded-Host $http_host;",
        )
    } else {
        (Kind::Nginx, "")
    };
    let d = tmp.join(kind.label());
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
    upstream grpc_backend {{
        server {backend};
        keepalive 64;
        keepalive_requests 10000000;
    }}
    server {{
        listen 127.0.0.1:{grpc} http2;
        location / {{
            grpc_pass grpc://grpc_backend;
        }}
    }}
    server {{
        listen 127.0.0.1:{h1};
        listen 127.0.0.1:{h2} http2;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";{forwarding}
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
    let serves: &[(Scenario, u16)] = if forwarded {
        &[(Scenario::H1ToH1, h1), (Scenario::H2ToH1, h2)]
    } else {
        &[
            (Scenario::H1ToH1, h1),
            (Scenario::H2ToH1, h2),
            (Scenario::Grpc, grpc),
        ]
    };
    peer_up(Target::new(kind, Some(process), serves))
}

/// HAProxy's `maxconn`: as many as its descriptor limit allows (it needs two per
/// connection and refuses to start beyond the limit).
pub(crate) fn haproxy_maxconn() -> u64 {
    (fd_limit().saturating_sub(200) / 2).clamp(1000, 30_000)
}

/// HAProxy: HTTP/1.1 and h2c clients, to an HTTP/1.1 destination or (`proto h2`) an
/// h2c one; gRPC through the latter.
/// `forwarded`: also set `X-Forwarded-For`/`-Proto`/`-Host` as fuseway does (in the
/// frontends of HTTP/1.1 and h2c clients to the HTTP/1.1 destination, the only ones it
/// then serves, as [`Kind::HaproxyForwarded`]).
pub(crate) fn start_haproxy(
    haproxy: &Path,
    tmp: &Path,
    backend: SocketAddr,
    forwarded: bool,
) -> Option<Target> {
    let (h1, h2, h1_h2, h2_h2) = (free_port(), free_port(), free_port(), free_port());
    let (kind, forwarding) = if forwarded {
        (
            Kind::HaproxyForwarded,
            "\n    option forwardfor\
             \n    http-request set-header X-Forwarded-Proto http\
             \n    http-request set-header X-Forwarded-Host %[req.hdr(host)]",
        )
    } else {
        (Kind::Haproxy, "")
    };
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
    default_backend be{forwarding}
frontend fe_h2
    bind 127.0.0.1:{h2} proto h2
    default_backend be{forwarding}
frontend fe_h1_h2
    bind 127.0.0.1:{h1_h2}
    default_backend be_h2
frontend fe_h2_h2
    bind 127.0.0.1:{h2_h2} proto h2
    default_backend be_h2
backend be
    server b {backend}
backend be_h2
    server b {backend} proto h2
"#
    );
    let file = tmp.join(format!("{}.cfg", kind.label()));
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
    let serves: &[(Scenario, u16)] = if forwarded {
        &[(Scenario::H1ToH1, h1), (Scenario::H2ToH1, h2)]
    } else {
        &[
            (Scenario::H1ToH1, h1),
            (Scenario::H2ToH1, h2),
            (Scenario::H1ToH2, h1_h2),
            (Scenario::H2ToH2, h2_h2),
            (Scenario::Grpc, h2_h2),
        ]
    };
    peer_up(Target::new(kind, Some(process), serves))
}

/// A peer proxy that does not come up on all its ports is skipped, not fatal.
pub(crate) fn peer_up(mut target: Target) -> Option<Target> {
    let ports: Vec<u16> = target.ports().collect();
    let process = target.process.as_mut().expect("a peer has a process");
    let up = ports
        .iter()
        .all(|&p| listening(SocketAddr::from(([127, 0, 0, 1], p)), process));
    if !up {
        println!(
            "e2e: {} did not start listening (see its messages above): its rounds are skipped",
            target.kind.label()
        );
        return None;
    }
    Some(target)
}
