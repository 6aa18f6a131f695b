//! What `/proc` tells about a process and its children: CPU ticks and resident memory.

use std::process::Command;

pub(crate) fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Fields of /proc/PID/stat after the command name: [0] is field 3 (state).
pub(crate) fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// `pid` and its child processes (nginx's workers).
pub(crate) fn family(pid: u32) -> Vec<u32> {
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
pub(crate) fn cpu_ticks(pid: u32) -> (u64, u64) {
    family(pid)
        .into_iter()
        .filter_map(stat_fields)
        .fold((0, 0), |(u, s), f| (u + f[11], s + f[12]))
}

/// Resident set size of `pid` and its children, in MB.
pub(crate) fn rss_mb(pid: u32) -> f64 {
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

/// Resident set size of `pid` and its children, in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    (rss_mb(pid) * 1024.0) as u64
}
