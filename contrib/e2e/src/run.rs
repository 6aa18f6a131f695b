//! One run (a load generator against one target for one protocol) and the summary of
//! all runs.

use std::io::{BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{key_values, read_line, spawn, Process};
use crate::procfs::{cpu_ticks, rss_mb};
use crate::scenario::Scenario;
use crate::targets::{Kind, Target};
use crate::Settings;

pub(crate) struct Run {
    pub(crate) kind: Kind,
    pub(crate) scenario: Scenario,
    pub(crate) rps: f64,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) proxy_cpu_us: Option<f64>,
    /// The user-mode part of `proxy_cpu_us` (the rest is the kernel's).
    pub(crate) proxy_user_us: Option<f64>,
    pub(crate) backend_cpu_us: f64,
    pub(crate) allocs_per_req: Option<f64>,
    pub(crate) alloc_bytes_per_req: Option<f64>,
    pub(crate) rss_mb: Option<f64>,
    pub(crate) p50: u64,
    pub(crate) p99: u64,
}

pub(crate) fn snapshot_allocs(target: &Target) -> Option<(u64, u64)> {
    let rx = target.allocs.as_ref()?;
    while rx.try_recv().is_ok() {}
    let pid = target.process.as_ref()?.pid();
    Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .ok()?;
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

/// The load generator (in `dir`'s examples) sending `scenario`'s requests to `port`;
/// connections, warm-up and duration are the caller's.
pub(crate) fn loadgen(dir: &Path, port: u16, scenario: Scenario) -> Command {
    loadgen_to(
        dir,
        &format!("http://127.0.0.1:{port}/bench/path?q=1"),
        scenario.client_http(),
        scenario.grpc(),
    )
}

/// The load generator on `url`, its client speaking HTTP/`http` (1 or 2), sending gRPC
/// calls if `grpc`.
pub(crate) fn loadgen_to(dir: &Path, url: &str, http: u8, grpc: bool) -> Command {
    let mut loadgen = Command::new(dir.join("examples").join("loadgen"));
    if grpc {
        loadgen.arg("--grpc");
    }
    loadgen
        .args(["--url", url])
        .args(["--http", &http.to_string()]);
    loadgen
}

/// One run of `scenario`'s load against `target` on `port` (`backend`: whose CPU is
/// measured too).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_once(
    dir: &Path,
    target: &Target,
    port: u16,
    backend: &Process,
    scenario: Scenario,
    settings: &Settings,
    ticks_per_s: f64,
) -> Run {
    let mut loadgen = spawn(
        "loadgen",
        loadgen(dir, port, scenario)
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
        scenario,
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
        "RESULT label={} target=127.0.0.1:{port} scenario={} connections={} duration_s={} requests={} errors={} rps={:.0} p50_us={} p90_us={} p99_us={} p999_us={} proxy_cpu_us_per_req={} proxy_user_us_per_req={} backend_cpu_us_per_req={:.1} allocs_per_req={} alloc_bytes_per_req={} proxy_rss_mb={}",
        target.kind.label(),
        scenario.label(),
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

pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
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

/// The exact two-sided sign test: the chance that a fair coin gives a split at least as
/// uneven as `k` of `n` (`n` rounds, the subject's figure below the other's in `k`).
fn sign_test(k: usize, n: usize) -> f64 {
    // P(X <= j) for X ~ Binomial(n, 1/2).
    let at_most = |j: usize| {
        let mut choose = 1.0f64;
        let mut sum = 0.0;
        for i in 0..=j.min(n) {
            if i > 0 {
                choose = choose * (n - i + 1) as f64 / i as f64;
            }
            sum += choose;
        }
        sum / 2f64.powi(n as i32)
    };
    let tail = at_most(k.min(n - k));
    (2.0 * tail).min(1.0)
}

/// What the rounds say at the 5% level, the subject's figure `lower` than the other's
/// in `lower` of them and `higher` in `higher` (ties tell nothing): `lower`,
/// `higher`, or `level` (the rounds do not tell them apart).
fn verdict(lower: usize, higher: usize) -> &'static str {
    match sign_test(lower, lower + higher) {
        p if p >= 0.05 => "level",
        _ if lower > higher => "lower",
        _ => "higher",
    }
}

/// The fewest of `n` rounds that the sign test at 5% tells apart from a coin's split
/// (at most this many, or at least `n` minus it), if any.
fn decisive(n: usize) -> Option<usize> {
    (0..=n / 2).rev().find(|&k| sign_test(k, n) < 0.05)
}

pub(crate) fn summary(runs: &[Run], kinds: &[Kind]) {
    println!();
    println!("summary: medians over rounds (proxy CPU = user+sys of the proxy's processes over the window / requests; user = its user-mode part)");
    println!(
        "{:<8} {:<13} {:>9} {:>10} {:>8} {:>14} {:>7} {:>11} {:>9} {:>8} {:>8} {:>7} {:>7}",
        "path",
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
    for scenario in Scenario::ALL {
        let of = |k: Kind| {
            runs.iter()
                .filter(move |r| r.kind == k && r.scenario == scenario)
        };
        let direct = median(
            runs.iter()
                .filter(|r| r.kind == Kind::Direct && r.scenario == scenario.baseline())
                .map(|r| r.rps)
                .collect(),
        );
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
            let show =
                |v: Option<f64>, d: usize| v.map(|v| format!("{v:.d$}")).unwrap_or("-".into());
            println!(
                "{:<8} {:<13} {:>9.0} {:>10} {:>8} {:>14} {:>7} {:>11} {:>9} {:>8} {:>8} {:>7} {:>7}",
                scenario.label(),
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
        // fuseway against each other target, and the PGO build against those after it
        // in `Kind`'s order (not plain fuseway again).
        for subject in [Kind::Fuseway, Kind::FusewayPgo] {
            if of(subject).next().is_none() {
                continue;
            }
            let cpu_of = |k| median(of(k).filter_map(|r| r.proxy_cpu_us).collect());
            let user_of = |k| median(of(k).filter_map(|r| r.proxy_user_us).collect());
            let rps_of = |k| median(of(k).map(|r| r.rps).collect());
            let p99_of = |k| median(of(k).map(|r| r.p99 as f64).collect());
            for &k in kinds {
                if k == Kind::Direct || k <= subject || of(k).next().is_none() {
                    continue;
                }
                // Paired by round (each round runs every target once): in how many
                // rounds the subject's figure was at most the other's. On a noisy
                // machine a ratio of medians near 1 says little without it.
                let pairs = of(subject).zip(of(k));
                let rounds = pairs.clone().count();
                // Rounds with the subject's figure below the other's, the same, and above.
                let split = |f: &dyn Fn(&Run) -> Option<f64>| {
                    let mut counts = [0usize; 3];
                    for (a, b) in pairs.clone() {
                        if let (Some(x), Some(y)) = (f(a), f(b)) {
                            counts[match x.total_cmp(&y) {
                                std::cmp::Ordering::Less => 0,
                                std::cmp::Ordering::Equal => 1,
                                std::cmp::Ordering::Greater => 2,
                            }] += 1;
                        }
                    }
                    counts
                };
                let (cpu, user, p99) = (
                    split(&|r| r.proxy_cpu_us),
                    split(&|r| r.proxy_user_us),
                    split(&|r| Some(r.p99 as f64)),
                );
                let [cpu_level, user_level, p99_level] =
                    [cpu, user, p99].map(|[lower, same, _]| lower + same);
                println!(
                    "       {}/{}: rps {:.2}, proxy CPU per request {:.2} (user {:.2}), \
                     p99 {:.2}; at most its in {cpu_level} (CPU), {user_level} (user), \
                     {p99_level} (p99) of {rounds} rounds",
                    subject.label(),
                    k.label(),
                    rps_of(subject) / rps_of(k),
                    cpu_of(subject) / cpu_of(k),
                    user_of(subject) / user_of(k),
                    p99_of(subject) / p99_of(k),
                );
                // Whether those counts tell the two apart, or are what a coin would give
                // (one round is a smoke test: nothing to say).
                match decisive(rounds) {
                    _ if rounds < 2 => {}
                    Some(c) => println!(
                        "         sign test (5%, tied rounds left out; {rounds} rounds without a \
                         tie decide at {c} or fewer, or {} or more): CPU {}, user {}, p99 {}",
                        rounds - c,
                        verdict(cpu[0], cpu[2]),
                        verdict(user[0], user[2]),
                        verdict(p99[0], p99[2]),
                    ),
                    None => println!(
                        "         sign test (5%): {rounds} rounds cannot tell two targets apart \
                         (six at least)"
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decisive, sign_test, verdict};

    #[test]
    fn the_sign_test_is_exact() {
        // 12 rounds: P(X <= 2) = 79 / 4096, twice that 0.0386; P(X <= 3) twice 0.146.
        assert!((sign_test(2, 12) - 2.0 * 79.0 / 4096.0).abs() < 1e-12);
        assert!((sign_test(10, 12) - sign_test(2, 12)).abs() < 1e-12);
        assert!((sign_test(3, 12) - 2.0 * 299.0 / 4096.0).abs() < 1e-12);
        assert_eq!(sign_test(6, 12), 1.0);
        assert_eq!(decisive(12), Some(2));
        assert_eq!(decisive(5), None);
        assert_eq!(decisive(6), Some(0));
        assert_eq!(verdict(10, 2), "lower");
        assert_eq!(verdict(2, 10), "higher");
        assert_eq!(verdict(9, 3), "level");
        assert_eq!(verdict(5, 0), "level");
        // Ties are left out: 6 lower, none higher, 6 ties is 6 of 6.
        assert_eq!(verdict(6, 0), "lower");
    }
}
