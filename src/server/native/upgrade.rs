//! An upgraded connection (`101`): the socket and what was read past the head, handed
//! to the tunnel.

use super::*;

/// The client's connection after a `101 Switching Protocols`: the socket, and the
/// bytes already read past the request head.
pub(crate) struct UpgradedIo {
    pub(super) io: Box<dyn Io>,
    pub(super) read: Bytes,
}

impl std::fmt::Debug for UpgradedIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpgradedIo")
            .field("read", &self.read.len())
            .finish_non_exhaustive()
    }
}

impl AsyncRead for UpgradedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.read.is_empty() {
            let n = self.read.len().min(buf.remaining());
            buf.put_slice(&self.read[..n]);
            self.read.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for UpgradedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// In an upgrade request's extensions (the native engine's counterpart of hyper's
/// `OnUpgrade`): resolves to the client's connection once the `101` has been written.
#[derive(Clone, Debug)]
pub(crate) struct OnUpgrade(pub(super) Handoff<UpgradedIo>);

impl OnUpgrade {
    /// Wait for the connection.
    pub(crate) async fn upgraded(self) -> io::Result<UpgradedIo> {
        self.0.take("the connection was not upgraded").await
    }
}

/// What an engine hands to the request's tunnel once the upgrade's answer is written
/// (the upgraded connection, or HTTP/2 stream), taken once. Kept in the request's
/// extensions, which must be `Clone`, `Send` and `Sync`; the engine keeps the sender.
pub(crate) struct Handoff<T>(Arc<Mutex<Option<oneshot::Receiver<T>>>>);

impl<T> Clone for Handoff<T> {
    fn clone(&self) -> Self {
        Handoff(self.0.clone())
    }
}

impl<T> std::fmt::Debug for Handoff<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handoff")
    }
}

impl<T> Handoff<T> {
    pub(crate) fn new() -> (Handoff<T>, oneshot::Sender<T>) {
        let (tx, rx) = oneshot::channel();
        (Handoff(Arc::new(Mutex::new(Some(rx)))), tx)
    }

    /// Wait for what is handed over; `not_sent` is the error when the engine drops the
    /// sender (the upgrade did not happen).
    pub(crate) async fn take(self, not_sent: &'static str) -> io::Result<T> {
        let rx = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        match rx {
            Some(rx) => rx.await.map_err(|_| io::Error::other(not_sent)),
            None => Err(io::Error::other("the upgrade was already taken")),
        }
    }
}
