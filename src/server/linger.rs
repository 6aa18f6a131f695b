//! The lingering close, as nginx's `lingering_close on`: a connection that closes while
//! its client is still sending — a body refused or left unread, a head refused with more
//! behind it — shuts its write side and reads and drops what comes, until the client
//! closes, [`IDLE`] (or the header read timeout, when shorter) passes without a byte, or
//! [`ROUNDS`] times that has passed in all.
//!
//! A socket closed with bytes unread answers them with a reset, and the reset may
//! destroy the answer in the client's buffers before the client reads it (RFC 9112
//! §9.6): a client that writes its whole body before it reads (Python's `http.client`,
//! many SDKs) would see a reset instead of its `413`.
//!
//! The native engine lingers in its connection's task (`native::Conn::close`), under the
//! connection's drain signal. hyper's engine drops its connection's I/O at the end;
//! [`Lingering`] wraps that I/O and, when it is dropped with the client still sending,
//! lingers in a task of its own.

use std::any::Any;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::idle::Activity;
use super::native::Io;

/// Longest wait for the next byte of what a closing connection's client still sends
/// (nginx's `lingering_timeout`); the header read timeout when shorter.
pub(crate) const IDLE: Duration = Duration::from_secs(5);
/// How many of those waits a closing connection reads for in all (nginx's
/// `lingering_time` is six of its `lingering_timeout`s: 30 s).
pub(crate) const ROUNDS: u32 = 6;

/// The I/O of a connection served by hyper's engine: when dropped while bytes from the
/// client wait to be read, a task reads and drops what the client still sends before
/// the socket closes (see the module's documentation). Plain and TLS TCP sockets; any
/// other I/O closes at once.
pub(crate) struct Lingering<I: Io> {
    io: Option<I>,
    /// The wait for the next byte ([`IDLE`], or the header read timeout when shorter).
    idle: Duration,
    /// Told of every read (a head's first byte starts its header read timeout).
    activity: Arc<Activity>,
}

impl<I: Io> Lingering<I> {
    pub(crate) fn new(io: I, header_read_timeout: Duration, activity: Arc<Activity>) -> Self {
        Lingering {
            io: Some(io),
            idle: header_read_timeout.min(IDLE),
            activity,
        }
    }

    fn io(&mut self) -> Pin<&mut I> {
        Pin::new(
            self.io
                .as_mut()
                .expect("the I/O is taken only when dropped"),
        )
    }
}

impl<I: Io> Drop for Lingering<I> {
    fn drop(&mut self) {
        let Some(io) = self.io.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if bytes_waiting(&io) {
            runtime.spawn(linger(io, self.idle));
        }
    }
}

/// Whether bytes from the client wait in `io`'s socket (a plain or TLS one): the client
/// is still sending. Asked of the socket itself (a peek), not of tokio's readiness,
/// which only the reactor's next turn brings up to date.
fn bytes_waiting<I: Io>(io: &I) -> bool {
    let io = io as &dyn Any;
    let tcp = match io.downcast_ref::<TcpStream>() {
        Some(tcp) => tcp,
        None => match io.downcast_ref::<tokio_rustls::server::TlsStream<TcpStream>>() {
            Some(tls) => tls.get_ref().0,
            None => return false,
        },
    };
    let mut byte = [MaybeUninit::uninit()];
    socket2::SockRef::from(tcp)
        .peek(&mut byte)
        .is_ok_and(|n| n > 0)
}

/// Shut `io`'s write side, then read and drop what comes until the client closes, `idle`
/// passes without a byte, or [`ROUNDS`] times that has passed.
async fn linger<I: Io>(mut io: I, idle: Duration) {
    let _ = io.shutdown().await;
    let end = Instant::now() + idle * ROUNDS;
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        let wait = (Instant::now() + idle).min(end);
        match tokio::time::timeout_at(wait, io.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

impl<I: Io> AsyncRead for Lingering<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = self.io().poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        read
    }
}

impl<I: Io> AsyncWrite for Lingering<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}
