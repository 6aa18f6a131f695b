//! Idle keep-alive connections: memory per connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::procfs::rss_kib;
use crate::scenario::Scenario;
use crate::targets::{haproxy_maxconn, Kind, Target};

/// One request on `stream`, its response read to the end of its body.
pub(crate) fn one_request(stream: &mut TcpStream) -> std::io::Result<()> {
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
pub(crate) const IDLE_SETTLE: Duration = Duration::from_secs(3);

/// Open `n` keep-alive connections to each proxy, one request on each, and hold them
/// ([`IDLE_SETTLE`]): the proxy's RSS growth per connection; then one more request on
/// every connection (all must still be open and answer).
pub(crate) fn idle_phase(targets: &[Target], n: usize) {
    if n == 0 {
        return;
    }
    println!();
    println!("idle: {n} keep-alive HTTP/1.1 connections per proxy, one request each, then held");
    for t in targets {
        let (Some(process), Some(port)) = (&t.process, t.port(Scenario::H1ToH1)) else {
            continue;
        };
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
            match TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
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
