//! Reloads at scale: request latency while a 10 000-route configuration is reloaded
//! again and again, against the same binary and configuration left alone.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::process::{free_port, Process};
use crate::run::{run_once, Run};
use crate::scenario::Scenario;
use crate::targets::{spawn_fuseway, Kind, Target};
use crate::Settings;

/// Routes in the reloaded configuration.
pub(crate) const ROUTES: usize = 10_000;

/// How often the configuration is reloaded (`SIGHUP`) in the reloading runs.
pub(crate) const EVERY: Duration = Duration::from_millis(250);

/// A configuration of [`ROUTES`] routes (parameter, literal, catch-all and host
/// routes), all to `backend`; the load's `/bench/...` matches the last of them.
fn config(backend: SocketAddr) -> String {
    let mut routes: Vec<String> = (0..ROUTES - 1)
        .map(|i| {
            let body = match i % 4 {
                0 => format!(r#""Path": "/svc{i}/users/{{id}}""#),
                1 => format!(r#""Path": "/svc{i}/items/list""#),
                2 => format!(r#""Path": "/svc{i}/static/{{**rest}}""#),
                _ => format!(r#""Path": "/api/{{id}}", "Hosts": ["h{i}.example.com"]"#),
            };
            format!(r#""r{i:05}": {{ "ClusterId": "backend", "Match": {{ {body} }} }}"#)
        })
        .collect();
    routes.push(
        r#""bench": { "ClusterId": "backend", "Match": { "Path": "/bench/{**rest}" } }"#.into(),
    );
    format!(
        r#"{{ "Routes": {{ {} }},
  "Clusters": {{ "backend": {{ "Destinations": {{ "b": {{ "Address": "http://{backend}" }} }} }} }} }}"#,
        routes.join(",\n")
    )
}

/// `fuseway_config_reloads_total{result="success"}` from the admin listener at `admin`.
fn reloads(admin: SocketAddr) -> Option<u64> {
    let mut stream = TcpStream::connect(admin).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("fuseway_config_reloads_total{result=\"success\"} "))
        .and_then(|v| v.parse().ok())
}

/// The phase: `settings.rounds` pairs of runs (HTTP/1.1, `settings.connections`
/// connections) against one fuseway on the large configuration, steady then while it is
/// reloaded every [`EVERY`]; prints each run's `RESULT` line and a summary.
pub(crate) fn reload_phase(
    dir: &Path,
    tmp: &Path,
    backend: &Process,
    backend_addr: SocketAddr,
    settings: &Settings,
    ticks: f64,
) {
    let file = tmp.join("fuseway-reload.json");
    std::fs::write(&file, config(backend_addr)).expect("write the reload config");
    let (port, admin_port) = (free_port(), free_port());
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let (process, allocs) = spawn_fuseway(
        dir,
        &file,
        port,
        Kind::FusewayReload,
        &["--admin", &admin.to_string()],
    );
    let pid = process.pid();
    let mut target = Target::new(
        Kind::FusewayReload,
        Some(process),
        &[(Scenario::H1ToH1, port)],
    );
    target.allocs = Some(allocs);
    println!(
        "e2e: reloads: {ROUTES} routes, steady and reloaded every {} ms (SIGHUP)",
        EVERY.as_millis()
    );
    let mut steady: Vec<Run> = Vec::new();
    let mut reloading: Vec<Run> = Vec::new();
    let mut done = 0;
    let run = |target: &Target| {
        run_once(
            dir,
            target,
            port,
            backend,
            Scenario::H1ToH1,
            settings,
            ticks,
        )
    };
    for _ in 0..settings.rounds {
        steady.push(run(&target));
        let before = reloads(admin).unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let signaller = {
            let (stop, sent) = (stop.clone(), sent.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = Command::new("kill")
                        .args(["-HUP", &pid.to_string()])
                        .status();
                    sent.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(EVERY);
                }
            })
        };
        reloading.push(run(&target));
        stop.store(true, Ordering::Relaxed);
        signaller.join().expect("the signalling thread");
        done += reloads(admin).unwrap_or(0).saturating_sub(before);
        println!(
            "e2e: reloads: {} SIGHUPs sent during the run, {done} reloads done so far",
            sent.load(Ordering::Relaxed)
        );
    }
    let p99 = |runs: &[Run]| crate::run::median(runs.iter().map(|r| r.p99 as f64).collect());
    let rps = |runs: &[Run]| crate::run::median(runs.iter().map(|r| r.rps).collect());
    let (steady_p99, reloading_p99) = (p99(&steady), p99(&reloading));
    println!(
        "reload summary: {ROUTES} routes; steady p99 {steady_p99:.0} µs, {:.0} rps; \
         reloaded every {} ms: p99 {reloading_p99:.0} µs ({:.2}x steady), {:.0} rps; \
         {done} reloads in all",
        rps(&steady),
        EVERY.as_millis(),
        reloading_p99 / steady_p99,
        rps(&reloading),
    );
    if let Some(p) = &mut target.process {
        p.stop();
    }
}
