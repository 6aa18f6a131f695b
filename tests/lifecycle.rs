//! The binary's lifecycle: `/healthz` and `/readyz` on the admin listener, the drain on
//! the first SIGTERM (readiness fails at once, connections are still served for
//! `--drain-delay`), `--grace` bounding the wait for in-flight requests, the exit on a
//! second signal, systemd's `READY=1`/`STOPPING=1`, and no colour codes in a log that
//! is not a terminal. The real binary, a real backend and real clients on 127.0.0.1.

#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;
use std::process::Stdio;

use common::{h1_client, within, TempDir};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A running `fuseway --config` with its admin listener.
struct Running {
    child: Child,
    proxy: SocketAddr,
    admin: SocketAddr,
    /// The log lines up to the listening ones, as written (stderr is a pipe).
    early: Vec<String>,
    /// The lines after them.
    log: mpsc::UnboundedReceiver<String>,
    _dir: TempDir,
}

/// Start the binary on a config forwarding everything to `destination`, with `args`
/// and `env`; wait for its proxy and admin addresses.
async fn start(destination: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
    let dir = TempDir::new("lifecycle");
    let file = dir.write(
        "proxy.json",
        &common::simple_config(&[("d1", destination)], ""),
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_fuseway"));
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .arg("--config")
        .arg(&file)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--workers",
            "1",
        ])
        .args(args)
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let common::Logged {
        proxy,
        admin,
        early,
        log,
    } = common::proxy_and_admin(&mut child).await;
    Running {
        child,
        proxy,
        admin,
        early,
        log,
        _dir: dir,
    }
}

impl Running {
    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id().expect("running") as libc::pid_t;
        // SAFETY: sends a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// The admin listener's answer to `GET path`: status and body.
    async fn admin(&self, path: &str) -> (u16, String) {
        let r = within(
            path,
            h1_client()
                .get(format!("http://{}{path}", self.admin))
                .send(),
        )
        .await
        .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Wait for a log line containing `text`; every line up to it is returned.
    async fn log_until(&mut self, text: &str) -> Vec<String> {
        let mut lines = Vec::new();
        within(&format!("a log line with `{text}`"), async {
            while let Some(line) = self.log.recv().await {
                let found = line.contains(text);
                lines.push(line);
                if found {
                    return;
                }
            }
            panic!("the log ended before `{text}`: {lines:?}");
        })
        .await;
        lines
    }
}

/// Liveness and readiness while serving; on SIGTERM `/readyz` fails at once, a new
/// connection is still served during the drain delay, and the process then exits 0.
/// The log, a pipe here, has no colour codes.
#[tokio::test]
async fn readiness_fails_at_once_on_sigterm_and_the_drain_delay_still_serves() {
    let backend = common::echo_backend().await;
    let mut p = start(&backend.url(), &["--drain-delay", "4s"], &[]).await;
    assert_eq!(p.admin("/healthz").await, (200, "ok\n".into()));
    assert_eq!(p.admin("/readyz").await, (200, "ready\n".into()));
    p.signal(libc::SIGTERM);
    let mut lines = std::mem::take(&mut p.early);
    lines.extend(p.log_until("draining").await);
    assert_eq!(p.admin("/readyz").await, (503, "draining\n".into()));
    assert_eq!(p.admin("/healthz").await, (200, "ok\n".into()));
    // A new client connection, accepted and served while draining.
    let r = within(
        "a request during the drain delay",
        h1_client()
            .get(format!("http://{}/during-drain", p.proxy))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "GET /during-drain");
    let status = within("fuseway to exit after the drain delay", p.child.wait())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    while let Some(line) = p.log.recv().await {
        lines.push(line);
    }
    assert!(
        lines.iter().all(|line| !line.contains('\u{1b}')),
        "colour codes in a log that is not a terminal: {lines:?}"
    );
}

/// A second signal during the drain delay ends the process at once (a 60 s delay
/// would outlast the test's limit), with a failure status.
#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let backend = common::echo_backend().await;
    let mut p = start(&backend.url(), &["--drain-delay", "60s"], &[]).await;
    p.signal(libc::SIGTERM);
    p.log_until("draining").await;
    p.signal(libc::SIGINT);
    let status = within("fuseway to exit on the second signal", p.child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// `--grace` bounds how long the shutdown waits for in-flight requests: a request its
/// destination never answers does not hold the process for the default 30 s.
#[tokio::test]
async fn grace_bounds_the_wait_for_in_flight_requests() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let mut p = start(&url, &["--grace", "300ms"], &[]).await;
    let request = tokio::spawn(
        h1_client()
            .get(format!("http://{}/never-answered", p.proxy))
            .send(),
    );
    // The request has reached the destination, which holds it unanswered.
    let (_held, _) = within("the request at the destination", silent.accept())
        .await
        .unwrap();
    p.signal(libc::SIGTERM);
    let status = within("fuseway to exit after the grace period", p.child.wait())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    p.log_until("graceful shutdown timed out").await;
    let answered = within("the cut request", request).await.unwrap();
    assert!(answered.is_err(), "{answered:?}");
}

/// With `NOTIFY_SOCKET` (a systemd unit of `Type=notify`), systemd is told `READY=1`
/// once the proxy serves and `STOPPING=1` when the drain starts; by path and by
/// abstract name.
#[tokio::test]
async fn systemd_is_told_ready_and_stopping() {
    use tokio::net::UnixDatagram;
    let backend = common::echo_backend().await;
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.sock");
    let abstract_name = format!("fuseway-notify-{}", std::process::id());
    let sockets = [
        (
            UnixDatagram::bind(&path).unwrap(),
            path.display().to_string(),
        ),
        (
            {
                use std::os::linux::net::SocketAddrExt;
                let address =
                    std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                        .unwrap();
                let socket = std::os::unix::net::UnixDatagram::bind_addr(&address).unwrap();
                socket.set_nonblocking(true).unwrap();
                UnixDatagram::from_std(socket).unwrap()
            },
            format!("@{abstract_name}"),
        ),
    ];
    for (socket, name) in sockets {
        let mut p = start(&backend.url(), &[], &[("NOTIFY_SOCKET", &name)]).await;
        let mut message = [0u8; 64];
        let n = within("READY=1", socket.recv(&mut message)).await.unwrap();
        assert_eq!(&message[..n], b"READY=1", "{name}");
        p.signal(libc::SIGTERM);
        let n = within("STOPPING=1", socket.recv(&mut message))
            .await
            .unwrap();
        assert_eq!(&message[..n], b"STOPPING=1", "{name}");
        let status = within("fuseway to exit", p.child.wait()).await.unwrap();
        assert!(status.success(), "{status:?}");
    }
}
