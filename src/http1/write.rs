//! Bytes on their way to a socket, written with one vectored write where the socket
//! takes it: a buffer (heads, chunk-size lines, small bodies copied behind them), then
//! a large data frame written from where it is, then its tail (a chunk's CRLF), then
//! what was buffered after the frame (the last chunk, the next head).

use std::any::Any;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

/// Data frames up to this size are copied behind what is buffered (one write); larger
/// ones are written from where they are.
pub(crate) const COPY_MAX: usize = 16 * 1024;

const CRLF: &[u8] = b"\r\n";

/// A connection's outgoing bytes (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct Outgoing {
    /// Heads, chunk-size lines and small bodies.
    pub(crate) buf: Vec<u8>,
    /// How much of `buf` is written.
    written: usize,
    data: Bytes,
    /// How many bytes of a CRLF after `data` (a chunk's end) are left to write: the
    /// last `tail` of `b"\r\n"` (a count, not a slice: this lives in every
    /// connection's future).
    tail: u8,
    /// Where in `buf` `data` goes, while there is some: what was buffered after it
    /// was queued is written after it (32-bit, as `tail`: this lives in every
    /// connection's future, and `buf` holds heads and small bodies only).
    at: u32,
    /// Keep `buf`'s bytes once written (see [`Outgoing::rewind`]).
    keep: bool,
    /// Something has been written since the last [`Outgoing::clear`].
    wrote: bool,
}

impl Outgoing {
    /// Queue a data frame, framed as a chunk when `chunked`. A large frame waits in
    /// place: call it only when no large frame is queued ([`Outgoing::holds_data`]).
    pub(crate) fn push_data(&mut self, data: Bytes, chunked: bool) {
        debug_assert!(self.data.is_empty() && self.tail == 0);
        if chunked {
            let mut line = [0u8; 18];
            self.buf
                .extend_from_slice(super::chunk_header(data.len(), &mut line));
        }
        if data.len() <= COPY_MAX {
            self.buf.extend_from_slice(&data);
            if chunked {
                self.buf.extend_from_slice(CRLF);
            }
        } else {
            self.data = data;
            self.tail = if chunked { 2 } else { 0 };
            self.at = u32::try_from(self.buf.len()).expect("heads and small bodies");
        }
    }

    /// Queue the end of a chunked body: the last chunk, then `trailers`' fields and the
    /// empty line (after a large data frame still queued).
    pub(crate) fn push_last_chunk(&mut self, trailers: Option<&http::HeaderMap>) {
        self.buf.extend_from_slice(b"0\r\n");
        for (name, value) in trailers.into_iter().flatten() {
            super::write_field(&mut self.buf, name, value);
        }
        self.buf.extend_from_slice(CRLF);
    }

    /// A large data frame is queued (write before queuing another).
    pub(crate) fn holds_data(&self) -> bool {
        !self.data.is_empty() || self.tail != 0
    }

    /// Bytes buffered and not written yet.
    pub(crate) fn pending(&self) -> usize {
        self.buf.len() - self.written.min(self.buf.len()) + self.data.len() + usize::from(self.tail)
    }

    /// Keep the buffered bytes once written, until [`Outgoing::clear`], so that
    /// [`Outgoing::rewind`] can write them again (a request head sent once more).
    pub(crate) fn keep(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// Write the kept bytes again (on another connection).
    pub(crate) fn rewind(&mut self) {
        self.written = 0;
        self.wrote = false;
    }

    /// Whether any byte has been written since the last [`Outgoing::clear`].
    pub(crate) fn wrote(&self) -> bool {
        self.wrote
    }

    /// Forget everything queued or kept.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.written = 0;
        self.data = Bytes::new();
        self.tail = 0;
        self.at = 0;
        self.keep = false;
        self.wrote = false;
    }

    /// Write everything queued to `io`, then flush it.
    pub(crate) fn poll_write<I: AsyncWrite + Unpin + 'static>(
        &mut self,
        io: &mut I,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let n = if self.holds_data() {
                ready!(self.poll_write_around(io, cx))?
            } else {
                let head = &self.buf[self.written.min(self.buf.len())..];
                if head.is_empty() {
                    break;
                }
                let n = ready!(poll_write_vectored(&mut *io, cx, &[IoSlice::new(head)]))?;
                self.written += n;
                n
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.wrote = true;
        }
        if !self.keep {
            self.buf.clear();
            self.written = 0;
        }
        Pin::new(io).poll_flush(cx)
    }

    /// One write of what is buffered before the large data frame, the frame, its tail
    /// and what is buffered after it: how many bytes were taken.
    fn poll_write_around<I: AsyncWrite + Unpin + 'static>(
        &mut self,
        io: &mut I,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let split = self.at as usize;
        let head = &self.buf[self.written.min(split)..split];
        let head_left = head.len();
        let tail = &CRLF[2 - usize::from(self.tail)..];
        let slices = [
            IoSlice::new(head),
            IoSlice::new(&self.data),
            IoSlice::new(tail),
            IoSlice::new(&self.buf[split..]),
        ];
        let written = ready!(poll_write_vectored(&mut *io, cx, &slices))?;
        let mut n = written;
        let from_head = n.min(head_left);
        self.written += from_head;
        n -= from_head;
        let from_data = n.min(self.data.len());
        self.data.advance(from_data);
        n -= from_data;
        let from_tail = n.min(usize::from(self.tail));
        self.tail -= from_tail as u8;
        // The rest came after the frame, all of it taken: `written` was `split`.
        self.written += n - from_tail;
        Poll::Ready(Ok(written))
    }
}

/// `io.poll_write_vectored(cx, slices)`, but on a plain TCP socket tokio has marked
/// writable, the write itself (`TcpStream::try_write_vectored`): tokio's poll around it
/// would spend the task's cooperative budget and check the mark again, ~60 instructions
/// on every write. Only a socket that is not writable is polled (registering the task).
/// Reads still spend the budget, so a task that keeps finding work still yields.
pub(crate) fn poll_write_vectored<I: AsyncWrite + Unpin + 'static>(
    io: &mut I,
    cx: &mut Context<'_>,
    slices: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    if let Some(tcp) = (io as &mut dyn Any).downcast_mut::<TcpStream>() {
        match tcp.try_write_vectored(slices) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            written => return Poll::Ready(written),
        }
    }
    Pin::new(io).poll_write_vectored(cx, slices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::{Wake, Waker};
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    /// A waker that says when it was woken.
    struct Woken(tokio::sync::Notify);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.notify_one();
        }
    }

    /// What is queued after a large data frame is written after it: a chunked body
    /// ending with one, its last chunk behind it (it went before the frame once,
    /// breaking the body's framing), and a socket that takes a few bytes at a time.
    #[tokio::test]
    async fn bytes_queued_after_a_large_frame_are_written_after_it() {
        let data = Bytes::from(vec![b'x'; COPY_MAX + 1]);
        let mut expected = format!("{:x}\r\n", data.len()).into_bytes();
        expected.extend_from_slice(&data);
        expected.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut out = Outgoing::default();
        out.push_data(data.clone(), true);
        out.push_last_chunk(None);
        assert_eq!(out.pending(), expected.len());
        let mut written = Vec::new();
        std::future::poll_fn(|cx| out.poll_write(&mut written, cx))
            .await
            .unwrap();
        assert_eq!(written, expected);
        // Five bytes a write.
        let mut out = Outgoing::default();
        out.push_data(data, true);
        out.push_last_chunk(None);
        let (mut writer, mut reader) = tokio::io::duplex(5);
        let read = tokio::spawn(async move {
            let mut got = Vec::new();
            reader.read_to_end(&mut got).await.unwrap();
            got
        });
        std::future::poll_fn(|cx| out.poll_write(&mut writer, cx))
            .await
            .unwrap();
        assert_eq!(out.pending(), 0);
        drop(writer);
        assert_eq!(read.await.unwrap(), expected);
    }

    /// A plain TCP socket is written without tokio's poll while it takes bytes; once
    /// full, the write registers the task, which is woken when the peer reads.
    #[tokio::test]
    async fn a_full_socket_wakes_the_writer_when_drained() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut peer, mut io) = crate::testing::tcp_pair(&listener).await;
        let chunk = vec![7u8; 64 * 1024];
        let slices = [IoSlice::new(&chunk)];
        let woken = Arc::new(Woken(tokio::sync::Notify::new()));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        // Fill the socket: writes succeed until the kernel's buffers are full.
        let mut sent = 0usize;
        while let Poll::Ready(written) = poll_write_vectored(&mut io, &mut cx, &slices) {
            sent += written.unwrap();
        }
        assert!(sent > 0);
        let mut got = vec![0u8; sent];
        tokio::time::timeout(Duration::from_secs(10), peer.read_exact(&mut got))
            .await
            .expect("the bytes sent")
            .unwrap();
        assert!(got.iter().all(|&b| b == 7));
        tokio::time::timeout(Duration::from_secs(10), woken.0.notified())
            .await
            .expect("the writer woken once the socket drained");
        assert!(poll_write_vectored(&mut io, &mut cx, &slices).is_ready());
    }
}
