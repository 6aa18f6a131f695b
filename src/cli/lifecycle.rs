//! The binary's lifecycle: readiness for `/readyz`, the drain on the first signal, the
//! exit on the second, and systemd's `Type=notify` messages.

use std::time::Duration;

use crate::admin::Readiness;
use crate::server::Signals;

/// Completes when the graceful shutdown is to begin. On the first `SIGTERM` or
/// `SIGINT`, `readiness` turns to draining (`/readyz` answers 503 at once) and systemd
/// is told `STOPPING=1`; connections keep being accepted and served for `drain_delay`
/// so that load balancers notice before the listeners close. A second signal, during
/// the delay or the graceful shutdown after it, exits the process at once.
pub(crate) async fn drain_on_signal(
    mut signals: Signals,
    readiness: Readiness,
    drain_delay: Duration,
) {
    let first = signals.next().await;
    readiness.drain();
    notify_systemd("STOPPING=1");
    tracing::info!(
        signal = first,
        drain_delay = ?drain_delay,
        "draining: /readyz now fails; connections are served until the drain delay ends, \
         then in-flight requests finish; a second signal exits at once"
    );
    tokio::spawn(async move {
        let second = signals.next().await;
        tracing::warn!(signal = second, "second signal: exiting now");
        std::process::exit(1);
    });
    tokio::time::sleep(drain_delay).await;
}

/// Send `message` (`READY=1`, `STOPPING=1`) to systemd's notification socket when
/// `NOTIFY_SOCKET` names one (a unit of `Type=notify`); nothing otherwise. A path, or
/// on Linux an abstract name written with a leading `@`.
pub(crate) fn notify_systemd(message: &str) {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::net::UnixDatagram;
        let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
            return;
        };
        let sent = UnixDatagram::unbound().and_then(|sender| {
            let name = socket.as_bytes();
            match name.strip_prefix(b"@") {
                #[cfg(target_os = "linux")]
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                    sender.send_to_addr(message.as_bytes(), &address)
                }
                _ => sender.send_to(message.as_bytes(), &socket),
            }
        });
        if let Err(e) = sent {
            tracing::warn!(error = %e, socket = ?socket, message, "cannot notify systemd");
        }
    }
    #[cfg(not(unix))]
    let _ = message;
}
