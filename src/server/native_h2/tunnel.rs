//! Extended CONNECT (RFC 8441) on the native HTTP/2 engine: once the stream's `2xx`
//! is sent, the stream is a byte stream for the tunnel — reads are the client's DATA,
//! writes go out as DATA on the stream, shutdown ends it (END_STREAM).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use http::HeaderValue;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::body::RecvBody;
use crate::server::native::Handoff;

/// Bytes written by the tunnel and not yet sent, past which its writes wait.
const OUTBOX_HIGH: usize = 64 * 1024;

/// In an extended CONNECT request's extensions: the stream as a byte stream, once
/// the response's `2xx` head is sent.
#[derive(Clone, Debug)]
pub(crate) struct OnUpgrade {
    stream: Handoff<Upgraded>,
    /// The `:protocol` asked for (`websocket`).
    pub(crate) protocol: HeaderValue,
}

impl OnUpgrade {
    pub(super) fn new(protocol: HeaderValue) -> (OnUpgrade, oneshot::Sender<Upgraded>) {
        let (stream, tx) = Handoff::new();
        (OnUpgrade { stream, protocol }, tx)
    }

    /// Wait for the stream.
    pub(crate) async fn upgraded(self) -> io::Result<Upgraded> {
        self.stream.take("the stream was not upgraded").await
    }
}

/// The tunnel's writes on their way to the connection.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    chunks: VecDeque<Bytes>,
    queued: usize,
    /// The tunnel shut its side down (or is gone).
    closed: bool,
    /// The stream is gone: writes fail.
    failed: bool,
    writer: Option<Waker>,
    connection: Option<Waker>,
}

fn lock(outbox: &Mutex<Outbox>) -> MutexGuard<'_, Outbox> {
    outbox.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the connection takes from an outbox.
pub(super) enum Taken {
    Data(Bytes),
    /// Nothing now (the connection is woken when there is).
    Empty,
    /// The tunnel has shut its side down.
    Closed,
}

/// The connection's end of an outbox.
pub(super) fn take(outbox: &Mutex<Outbox>, cx: &Context<'_>) -> Taken {
    let mut o = lock(outbox);
    if let Some(data) = o.chunks.pop_front() {
        o.queued -= data.len();
        if let Some(w) = o.writer.take() {
            w.wake();
        }
        return Taken::Data(data);
    }
    if o.closed {
        return Taken::Closed;
    }
    if !o
        .connection
        .as_ref()
        .is_some_and(|w| w.will_wake(cx.waker()))
    {
        o.connection = Some(cx.waker().clone());
    }
    Taken::Empty
}

/// The stream is gone: the tunnel's writes fail from now on.
pub(super) fn fail(outbox: &Mutex<Outbox>) {
    let mut o = lock(outbox);
    o.failed = true;
    o.chunks.clear();
    if let Some(w) = o.writer.take() {
        w.wake();
    }
}

/// An upgraded stream: what the tunnel reads and writes.
pub(crate) struct Upgraded {
    recv: RecvBody,
    /// The part of the last DATA not yet read.
    leftover: Bytes,
    out: Arc<Mutex<Outbox>>,
}

impl Upgraded {
    pub(super) fn new(recv: RecvBody) -> (Upgraded, Arc<Mutex<Outbox>>) {
        let out = Arc::new(Mutex::new(Outbox::default()));
        let upgraded = Upgraded {
            recv,
            leftover: Bytes::new(),
            out: out.clone(),
        };
        (upgraded, out)
    }
}

impl AsyncRead for Upgraded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.leftover.is_empty() {
            match self.recv.poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.leftover = data;
                    }
                }
                // The client ended its side (trailers, if any, mean nothing here).
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
        let n = self.leftover.len().min(buf.remaining());
        buf.put_slice(&self.leftover[..n]);
        self.leftover.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut o = lock(&self.out);
        if o.failed || o.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if o.queued >= OUTBOX_HIGH {
            o.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        o.chunks.push_back(Bytes::copy_from_slice(buf));
        o.queued += buf.len();
        if let Some(w) = o.connection.take() {
            w.wake();
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        close(&self.out);
        Poll::Ready(Ok(()))
    }
}

fn close(out: &Mutex<Outbox>) {
    let mut o = lock(out);
    o.closed = true;
    if let Some(w) = o.connection.take() {
        w.wake();
    }
}

impl Drop for Upgraded {
    fn drop(&mut self) {
        close(&self.out);
    }
}
