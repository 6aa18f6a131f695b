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

/// The client's preface and an empty SETTINGS frame.
const H2C_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A `GET /` for host `bench` on `stream`: HEADERS with END_STREAM and END_HEADERS, the
/// pseudo-fields from HPACK's static table and `:authority` as a literal.
fn h2c_get(stream: u32) -> Vec<u8> {
    let block = [0x82, 0x86, 0x84, 0x01, 5, b'b', b'e', b'n', b'c', b'h'];
    let mut frame = vec![0, 0, block.len() as u8, 1, 0x5];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(&block);
    frame
}

/// Frames from `conn` until `stream`'s response has ended (a `200`), acknowledging the
/// server's SETTINGS and PINGs on the way.
fn h2c_response(conn: &mut TcpStream, stream: u32) -> std::io::Result<()> {
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head)?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        conn.read_exact(&mut payload)?;
        match kind {
            // SETTINGS and PING, not acknowledgements: acknowledged.
            4 if flags & 1 == 0 => conn.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0])?,
            6 if flags & 1 == 0 => {
                conn.write_all(&[0, 0, 8, 6, 1, 0, 0, 0, 0])?;
                conn.write_all(&payload)?;
            }
            // GOAWAY, or the stream reset.
            7 => return Err(std::io::Error::other("GOAWAY")),
            3 if id == stream => return Err(std::io::Error::other("RST_STREAM")),
            // The response head: `:status 200` is HPACK's static entry 8 (no padding
            // or priority in these servers' heads).
            1 if id == stream && payload.first() != Some(&0x88) => {
                return Err(std::io::Error::other("not a 200"));
            }
            0 | 1 if id == stream && flags & 1 != 0 => return Ok(()),
            _ => {}
        }
    }
}

/// The protocols the idle phase holds connections of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Http1,
    H2c,
}

/// Open `n` keep-alive connections to each proxy, one request on each, and hold them
/// ([`IDLE_SETTLE`]): the proxy's RSS growth per connection; then one more request on
/// every connection (all must still be open and answer). HTTP/1.1 connections first,
/// then h2c ones.
pub(crate) fn idle_phase(targets: &[Target], n: usize) {
    if n == 0 {
        return;
    }
    for held in [Held::Http1, Held::H2c] {
        idle_connections(targets, n, held);
    }
}

fn idle_connections(targets: &[Target], n: usize, held: Held) {
    let (name, scenario) = match held {
        Held::Http1 => ("HTTP/1.1", Scenario::H1ToH1),
        Held::H2c => ("h2c", Scenario::H2ToH1),
    };
    println!();
    println!("idle: {n} keep-alive {name} connections per proxy, one request each, then held");
    for t in targets {
        let (Some(process), Some(port)) = (&t.process, t.port(scenario)) else {
            continue;
        };
        if matches!(
            t.kind,
            Kind::HyperLegacy
                | Kind::HyperPool
                | Kind::HyperPinned
                | Kind::NginxForwarded
                | Kind::HaproxyForwarded
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
                match held {
                    Held::Http1 => one_request(&mut s)?,
                    Held::H2c => {
                        s.write_all(H2C_PREFACE)?;
                        s.write_all(&h2c_get(1))?;
                        h2c_response(&mut s, 1)?;
                    }
                }
                Ok(s)
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
            let again = match held {
                Held::Http1 => one_request(s),
                Held::H2c => s.write_all(&h2c_get(3)).and_then(|()| h2c_response(s, 3)),
            };
            if again.is_err() {
                errors += 1;
            }
        }
        let held = conns.len();
        drop(conns);
        let per_conn = (after.saturating_sub(before) * 1024) as f64 / held.max(1) as f64;
        println!(
            "IDLE label={} protocol={name} connections={held} errors={errors} rss_before_kib={before} rss_held_kib={after} bytes_per_connection={per_conn:.0}",
            t.kind.label()
        );
    }
}
