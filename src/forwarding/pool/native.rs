//! HTTP/1.1 to destinations on fuseway's own codec ([`crate::http1`]): the client side
//! of the native engine.
//!
//! An exchange owns its connection while it runs, and the connection lives inside the
//! exchange's one allocation, made when the connection is opened; a request on a
//! pooled connection allocates nothing here. Everything is driven by the task that
//! polls the exchange (the client connection's): the request head and small body
//! frames go out in one vectored write, the request body streams while the response
//! is read (a destination may answer early), and the response body is decoded from
//! the connection's read buffer straight into the client's response ([`ResponseBody`]
//! is a view of the exchange, not a channel). Header maps come from, and go back to,
//! the worker thread's pool; the read buffer is the thread's too while the connection
//! is idle.
//!
//! A reused connection is looked at (one read that finds nothing) before a request
//! goes out on it: one the destination closed while it sat idle is replaced, whatever
//! the request's method. The keep-alive race that is left: the request head stays in
//! the write buffer until the response head arrives, so an idempotent request without
//! a body whose reused connection closes under it is sent again, on a new connection,
//! byte for byte as it went out. One whose bytes never left (the first write failed)
//! goes to another connection whatever its method.

use crate::forwarding::headers::Added;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::{
    idle_hint, BoxError, BoxExchange, Deadline, Exchange, H1Slot, Link, Pool, ResponseBody,
    SendBody,
};
use crate::forwarding::client::{Io, TcpConnection};
use crate::forwarding::expect::ContinueGate;
use crate::http1::{
    buffers, parse_response, write_request_head, BodyDecoder, Decoded, Outgoing, RequestFraming,
    ResponseBodyLength,
};

/// Largest response head (and trailer section) taken from a destination; a larger one
/// fails the exchange (502), as nginx's `proxy_buffer_size` does. A response's interim
/// (1xx) heads count in it, as in .NET's client under YARP (`MaxResponseHeadersLength`),
/// so that a destination cannot hold a request with them forever.
pub(crate) const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Request body bytes buffered past which they are written before more are taken.
const WRITE_HIGH: usize = 64 * 1024;

/// An open connection to a destination.
pub(crate) struct Conn {
    io: Stream,
    read_buf: BytesMut,
    eof: bool,
}

/// A destination connection's socket. A plain one is read and written as the tokio
/// `TcpStream` it is: through `TokioIo<MaybeHttpsStream<..>>` each read and write would
/// cross four adapters between tokio's and hyper's I/O traits (~100 instructions a
/// request). A TLS one goes through them, boxed: its state (~1 KiB) is allocated with
/// the connection rather than carried by every exchange's plain connection.
enum Stream {
    Plain(TcpConnection),
    Tls(Box<TokioIo<Io>>),
}

impl Conn {
    pub(super) fn new(io: Io) -> Self {
        Conn {
            io: match io {
                MaybeHttpsStream::Http(tcp) => Stream::Plain(tcp),
                tls => Stream::Tls(Box::new(TokioIo::new(tls))),
            },
            read_buf: BytesMut::new(),
            eof: false,
        }
    }

    /// Read more into the read buffer: the bytes read, 0 at the connection's end.
    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.eof {
            return Poll::Ready(Ok(0));
        }
        let n = ready!(buffers::poll_read(&mut self.io, &mut self.read_buf, cx))?;
        if n == 0 {
            self.eof = true;
        }
        Poll::Ready(Ok(n))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp.stream_mut()).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp.stream_mut()).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => crate::http1::poll_write_vectored(tcp.stream_mut(), cx, bufs),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(_) => true,
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp.stream_mut()).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp.stream_mut()).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }
}

/// What is left to read of the response.
#[derive(Debug)]
enum Recv {
    /// The head, after the interim (1xx) heads' bytes read so far.
    Head(usize),
    Body(BodyDecoder),
    Done,
}

/// Why the request could not be sent.
enum SendError {
    /// The request body failed (the client's, or over the route's limit).
    Body(BoxError),
    /// The connection failed.
    Io(io::Error),
}

pin_project! {
    /// A native HTTP/1.1 exchange and the connection it drives.
    pub(super) struct Native<B> {
        inner: Inner<B>,
        #[pin]
        timer: Deadline,
    }
}

/// Everything of a [`Native`] exchange but its timer.
struct Inner<B> {
    pool: Weak<Pool<B>>,
    link: Link<B>,
    /// Whether the connection was reused (it may be found closed).
    reused: bool,
    out: Outgoing,
    /// The request body still to send.
    body: Option<B>,
    chunked: bool,
    /// Bytes left of a `Content-Length` body.
    length_left: u64,
    gate: Option<Arc<crate::forwarding::expect::Gate>>,
    to_head: bool,
    /// The head can be sent once more (idempotent, no body) if the reused connection
    /// closes under it.
    replay: bool,
    /// The reused connection has been looked at before the request goes out on it.
    checked: bool,
    /// The whole request has been written and flushed.
    sent: bool,
    recv: Recv,
    keep_alive: bool,
    /// How long the destination said it keeps the connection idle ([`idle_hint`]).
    idle_hint: Option<Duration>,
    /// The connection cannot carry another request.
    broken: bool,
    /// Why the request could not be sent whole: the destination closed the connection
    /// under it. Its answer, if it gave one first, is still read (and relayed); the
    /// connection then ends.
    unsent: Option<io::Error>,
}

impl<B: SendBody> Native<B> {
    /// An exchange for `request` on `link`: a new connection, or a wait for one at
    /// the pool's limit (the one allocation a pooled connection costs).
    pub(super) fn on_link(
        pool: &Arc<Pool<B>>,
        link: Link<B>,
        request: Request<B>,
        added: &mut Added,
    ) -> BoxExchange {
        let mut inner = Inner {
            pool: Arc::downgrade(pool),
            link,
            reused: false,
            out: Outgoing::default(),
            body: None,
            chunked: false,
            length_left: 0,
            gate: None,
            to_head: false,
            replay: false,
            checked: false,
            sent: false,
            recv: Recv::Done,
            keep_alive: true,
            idle_hint: None,
            broken: false,
            unsent: None,
        };
        inner.begin(request, added);
        Box::pin(Native {
            inner,
            timer: Deadline::new(),
        })
    }
}

impl<B: SendBody> Inner<B> {
    /// Encode `request`'s head, with the fields `added` after its map's (written once
    /// the connection is open), and keep its body.
    fn begin(&mut self, request: Request<B>, added: &Added) {
        let (mut parts, body) = request.into_parts();
        let framing = if body.is_end_stream() {
            RequestFraming::Empty
        } else if let Some(n) = body.size_hint().exact() {
            RequestFraming::Length(n)
        } else if let Some(n) = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| crate::http1::parse_length(v.as_bytes()))
        {
            RequestFraming::Length(n)
        } else {
            RequestFraming::Chunked
        };
        self.gate = parts
            .extensions
            .remove::<ContinueGate>()
            .map(|ContinueGate(gate)| gate);
        buffers::ready_to_write(&mut self.out.buf);
        write_request_head(
            &mut self.out.buf,
            &parts.method,
            &parts.uri,
            &parts.headers,
            added,
            framing,
        );
        // Moved out of `parts`, which then drops field by field: no empty map left
        // behind to drop.
        buffers::Heads::Requests.release(parts.headers);
        self.replay = framing == RequestFraming::Empty && parts.method.is_idempotent();
        self.out.keep(self.replay);
        self.to_head = parts.method == Method::HEAD;
        self.chunked = framing == RequestFraming::Chunked;
        self.length_left = match framing {
            RequestFraming::Length(n) => n,
            _ => 0,
        };
        self.body = (framing != RequestFraming::Empty).then_some(body);
        self.recv = Recv::Head(0);
        self.keep_alive = true;
        self.checked = false;
        self.sent = false;
    }

    /// Whether a reused connection is still open before the request goes out on it: a
    /// destination's close while the connection was idle is seen here (one read that
    /// finds nothing), so that any request, a `POST` too, goes to another connection
    /// instead of failing on this one. Bytes on an idle connection are no response to
    /// this request: it is not used either.
    fn still_open(&mut self, cx: &mut Context<'_>) -> bool {
        self.checked = true;
        let Link::Native { conn, .. } = &mut self.link else {
            return false;
        };
        matches!(conn.poll_read_more(cx), Poll::Pending)
    }

    /// Write the request: its head, then its body as it comes. Ready once all of it
    /// is written and flushed.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        let Link::Native { conn, .. } = &mut self.link else {
            return Poll::Ready(Err(SendError::Io(io::Error::other("no connection"))));
        };
        loop {
            if self.out.holds_data() || self.out.pending() >= WRITE_HIGH || self.body.is_none() {
                ready!(self.out.poll_write(&mut conn.io, cx)).map_err(SendError::Io)?;
            }
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            let frame = match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => {
                    // Nothing more to take now: what is queued goes out.
                    ready!(self.out.poll_write(&mut conn.io, cx)).map_err(SendError::Io)?;
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(SendError::Body(e.into()))),
                Poll::Ready(None) => None,
                Poll::Ready(Some(Ok(frame))) => Some(frame),
            };
            let mut trailers = None;
            match frame.map(Frame::into_data) {
                Some(Ok(data)) => {
                    if !self.chunked {
                        if data.len() as u64 > self.length_left {
                            return Poll::Ready(Err(SendError::Body(
                                "request body longer than its Content-Length".into(),
                            )));
                        }
                        self.length_left -= data.len() as u64;
                    }
                    if !data.is_empty() {
                        self.out.push_data(data, self.chunked);
                    }
                    // A `Content-Length` body is complete with its last byte (as hyper
                    // has it): its end-of-stream is not waited for.
                    let complete = !self.chunked && self.length_left == 0;
                    if !complete && !body.is_end_stream() {
                        continue;
                    }
                }
                Some(Err(frame)) => trailers = frame.into_trailers().ok(),
                None => {}
            }
            // The body has ended.
            self.body = None;
            if self.chunked {
                self.out.push_last_chunk(trailers.as_ref());
            } else if self.length_left != 0 {
                return Poll::Ready(Err(SendError::Body(
                    "request body shorter than its Content-Length".into(),
                )));
            }
        }
    }

    /// Read the response head (after any `1xx`, a `100 Continue` opening a held-back
    /// body). `Err(None)`: the connection closed before a byte of it came. `armed`: a
    /// read in this poll found nothing and registered for readiness, so an empty
    /// buffer waits without reading again.
    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        armed: bool,
    ) -> Poll<Result<crate::http1::ResponseHead, Option<BoxError>>> {
        let (Link::Native { conn, .. }, Recv::Head(interim)) = (&mut self.link, &mut self.recv)
        else {
            return Poll::Ready(Err(Some("no connection".into())));
        };
        if armed && conn.read_buf.is_empty() {
            return Poll::Pending;
        }
        loop {
            if !conn.read_buf.is_empty() {
                let had = conn.read_buf.len();
                let max_head = MAX_RESPONSE_HEAD - *interim;
                match parse_response(&mut conn.read_buf, max_head, self.to_head, |n| {
                    buffers::Heads::Responses.take(n)
                }) {
                    Ok(Some(head)) => {
                        let status = head.response.status();
                        if !status.is_informational() || status == StatusCode::SWITCHING_PROTOCOLS {
                            return Poll::Ready(Ok(head));
                        }
                        // Within `max_head`: the sum stays within the limit.
                        *interim += had - conn.read_buf.len();
                        if status == StatusCode::CONTINUE {
                            if let Some(gate) = self.gate.take() {
                                gate.continued();
                            }
                        }
                        let (parts, ()) = head.response.into_parts();
                        buffers::Heads::Responses.release(parts.headers);
                        continue;
                    }
                    Ok(None) => {}
                    Err(crate::http1::ParseError::Bad(reason)) => {
                        return Poll::Ready(Err(Some(
                            format!("invalid response head from the destination: {reason}").into(),
                        )))
                    }
                    Err(_) => {
                        return Poll::Ready(Err(Some(
                            format!(
                                "response head too large (over {} KiB{})",
                                MAX_RESPONSE_HEAD / 1024,
                                if *interim > 0 {
                                    " with the interim heads before it"
                                } else {
                                    ""
                                }
                            )
                            .into(),
                        )))
                    }
                }
            }
            let received = !conn.read_buf.is_empty();
            match ready!(conn.poll_read_more(cx)) {
                Ok(0) if received => {
                    return Poll::Ready(Err(Some(
                        "the destination closed the connection within the response head".into(),
                    )))
                }
                Ok(0) => return Poll::Ready(Err(None)),
                Ok(_) => {}
                Err(e) if closed(&e) && !received => return Poll::Ready(Err(None)),
                Err(e) => return Poll::Ready(Err(Some(e.into()))),
            }
        }
    }

    /// Send no more of the request: the destination closed the connection under it
    /// (`error`), which then ends with this exchange.
    fn stop_sending(&mut self, error: io::Error) {
        tracing::debug!(error = %error, "the destination closed the connection under the request; reading its answer");
        // Nothing queued goes anywhere now: with no body and nothing pending, the
        // connection's driving sends nothing more.
        self.body = None;
        self.out.clear();
        self.sent = true;
        self.unsent = Some(error);
    }

    /// The connection turned out closed; `written`: whether any of the request had been
    /// written to it. Relinked (`true`) when the request can go to another connection.
    fn relink(&mut self, written: bool) -> bool {
        let Some(pool) = self.pool.upgrade() else {
            return false;
        };
        if !self.reused {
            return false;
        }
        if !written {
            tracing::debug!("pooled connection closed before the request was sent; retrying");
            self.link = pool.relink_h1();
        } else if std::mem::take(&mut self.replay) {
            tracing::debug!(
                "reused connection closed under an idempotent request; sending it again"
            );
            // The closed connection goes first: it frees its place under the limit.
            self.link = Link::None;
            self.link = pool.new_link();
        } else {
            return false;
        }
        self.out.rewind();
        self.reused = self.link.is_open();
        self.checked = false;
        self.sent = false;
        true
    }
}

/// Whether `error` says the connection was closed or reset by the destination (a
/// write that took nothing too).
fn closed(error: &io::Error) -> bool {
    super::closed_io(error) || error.kind() == io::ErrorKind::WriteZero
}

impl<B: SendBody> Exchange for Native<B> {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        // Nothing in it is structurally pinned but the timer, which is not touched here.
        let this = &mut self.project().inner;
        loop {
            ready!(this.link.poll_open(&this.pool, &mut this.reused, cx))?;
            // The read that found a reused connection open also asked to be woken when
            // it becomes readable: the response's wait needs no read of its own in
            // this poll (one readiness check and its layers fewer per request).
            let mut armed = false;
            if this.reused && !this.checked {
                armed = this.still_open(cx);
                if !armed && this.relink(false) {
                    std::hint::cold_path();
                    continue;
                }
            }
            // Written and flushed in an earlier poll: nothing to write now.
            if !this.sent {
                match this.poll_send(cx) {
                    Poll::Ready(Ok(())) => this.sent = true,
                    Poll::Pending => {}
                    Poll::Ready(Err(SendError::Body(e))) => {
                        std::hint::cold_path();
                        this.broken = true;
                        return Poll::Ready(Err(e));
                    }
                    Poll::Ready(Err(SendError::Io(e))) => {
                        std::hint::cold_path();
                        if closed(&e) && this.relink(this.out.wrote()) {
                            continue;
                        }
                        if !closed(&e) || !this.out.wrote() {
                            this.broken = true;
                            return Poll::Ready(Err(e.into()));
                        }
                        // The destination may have answered before it closed (an
                        // early `413`, its body left unread): that answer is read.
                        this.stop_sending(e);
                    }
                }
            }
            let head = match this.poll_head(cx, armed) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(head)) => head,
                Poll::Ready(Err(None)) => {
                    std::hint::cold_path();
                    if let Some(e) = this.unsent.take() {
                        this.broken = true;
                        return Poll::Ready(Err(e.into()));
                    }
                    if this.relink(this.out.wrote()) {
                        continue;
                    }
                    this.broken = true;
                    return Poll::Ready(Err(
                        "the destination closed the connection before responding".into(),
                    ));
                }
                Poll::Ready(Err(Some(e))) => {
                    std::hint::cold_path();
                    this.broken = true;
                    return Poll::Ready(Err(e));
                }
            };
            // Answered: the head is not sent again.
            this.replay = false;
            this.out.keep(false);
            let (decoder, remaining) = match head.body {
                ResponseBodyLength::Length(n) => (BodyDecoder::length(n), Some(n)),
                ResponseBodyLength::Chunked => (BodyDecoder::chunked(), None),
                ResponseBodyLength::UntilClose => (BodyDecoder::until_close(), None),
            };
            this.keep_alive =
                head.keep_alive && head.response.status() != StatusCode::SWITCHING_PROTOCOLS;
            this.idle_hint = if head.connection_keep_alive {
                idle_hint(head.response.headers())
            } else {
                None
            };
            let ended = decoder.is_done();
            this.recv = if ended {
                Recv::Done
            } else {
                Recv::Body(decoder)
            };
            return Poll::Ready(Ok(head
                .response
                .map(|()| ResponseBody::Native { remaining, ended })));
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        let this = &mut self.project().inner;
        if this.body.is_some() || this.out.pending() > 0 {
            match this.poll_send(cx) {
                // The destination closed the connection under the request body after
                // it answered: the rest of its answer is read from what came first.
                Poll::Ready(Err(SendError::Io(e))) if closed(&e) => this.stop_sending(e),
                Poll::Ready(Err(_)) => {
                    // The response fails with it (see `poll_frame`).
                    this.broken = true;
                    this.body = None;
                }
                _ => {}
            }
        }
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut self.project().inner;
        if this.broken && matches!(this.recv, Recv::Body(_)) {
            std::hint::cold_path();
            // See `poll_connection`.
            this.recv = Recv::Done;
            return Poll::Ready(Some(Err("sending the request body failed".into())));
        }
        let Link::Native { conn, .. } = &mut this.link else {
            return Poll::Ready(None);
        };
        let Recv::Body(decoder) = &mut this.recv else {
            return Poll::Ready(None);
        };
        loop {
            let decoded = match decoder.decode(&mut conn.read_buf, MAX_RESPONSE_HEAD) {
                Ok(Decoded::NeedMore) => match ready!(conn.poll_read_more(cx)) {
                    Ok(0) => {
                        std::hint::cold_path();
                        // Whatever is read past a close-delimited body is not another
                        // response: the connection ends with it.
                        this.keep_alive = false;
                        decoder.closed()
                    }
                    Ok(_) => continue,
                    Err(e) => Err(crate::http1::DecodeError(if closed(&e) {
                        std::hint::cold_path();
                        "the destination closed the connection within the response body"
                    } else {
                        "reading the response body failed"
                    })),
                },
                decoded => decoded,
            };
            return Poll::Ready(match decoded {
                Ok(Decoded::Data(data)) => {
                    if decoder.is_done() {
                        this.recv = Recv::Done;
                    }
                    Some(Ok(Frame::data(data)))
                }
                Ok(Decoded::Trailers(trailers)) => {
                    this.recv = Recv::Done;
                    Some(Ok(Frame::trailers(trailers)))
                }
                Ok(Decoded::End) => {
                    this.recv = Recv::Done;
                    None
                }
                Ok(Decoded::NeedMore) => continue,
                Err(e) => {
                    this.broken = true;
                    this.recv = Recv::Done;
                    Some(Err(e.into()))
                }
            });
        }
    }

    fn body_ended(&self) -> bool {
        matches!(self.inner.recv, Recv::Done)
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(mut self: Pin<Box<Self>>, reusable: bool) {
        let this = &mut self.as_mut().project().inner;
        let Link::Native { conn, .. } = &mut this.link else {
            return;
        };
        let clean = reusable
            && this.keep_alive
            && !this.broken
            && this.unsent.is_none()
            && matches!(this.recv, Recv::Done)
            && this.body.is_none()
            && this.out.pending() == 0
            // Bytes the destination sent past the response are not another response.
            && conn.read_buf.is_empty()
            && !conn.eof;
        if !clean {
            return;
        }
        this.out.clear();
        buffers::release_write(&mut this.out.buf);
        buffers::release_read(&mut conn.read_buf);
        this.gate = None;
        this.reused = true;
        let Some(pool) = this.pool.upgrade() else {
            return;
        };
        // The timer keeps the waker of the task that polled it last, as the socket's
        // registration does: letting it go is a poll of the timer (~110 instructions
        // and a few atomic operations a request), while keeping it costs at most one
        // spurious wake of that task should the timer fire before the connection's
        // next request, and keeps a finished task's memory until then.
        let hint = this.idle_hint;
        pool.put_idle(self, hint);
    }
}

impl<B: SendBody> H1Slot<B> for Native<B> {
    fn start(self: Pin<&mut Self>, request: Request<B>, added: &mut Added) {
        self.project().inner.begin(request, added);
    }

    fn take_link(self: Pin<&mut Self>) -> Link<B> {
        std::mem::replace(&mut self.project().inner.link, Link::None)
    }
}
