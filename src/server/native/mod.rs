//! fuseway's own HTTP/1.1 engine, server side: one task per connection drives the
//! socket, the codec ([`crate::http1`]) and the pipeline's future as one state
//! machine. The connection owns a read buffer and a write buffer, reused by every
//! message on it; a request body is handed to the pipeline through a slot allocated
//! once per connection ([`channel`]).
//!
//! Per message: wait for a head (bounded by the header read timeout, counted from the
//! accept or from the end of the previous response; a shutdown closes a connection
//! that waits), parse and check it (400 / 414 / 431 and close on anything ambiguous),
//! call the pipeline, and while its future runs pump the request body and watch the
//! socket for the client going away (which drops the future: the destination's
//! request is cancelled). The response head and small bodies are written with one
//! vectored write; bodies are framed by length, chunks (with trailers when the
//! client said `TE: trailers`) or, for HTTP/1.0 clients, the connection's close.
//! A `101` hands the socket, and whatever was read past the head, to the tunnel.
//!
//! A plain TCP connection that has waited [`PARK_AFTER`] for its next request with
//! nothing in hand parks: its task ends and its socket waits in the listener's
//! [`lot`] (64 bytes, no task), which starts a new connection task when the socket
//! becomes readable. The header read timeout still counts from the end of the previous
//! response, and shutdown closes a parked connection as it does a waiting one.

mod channel;
#[cfg(unix)]
mod lot;
#[cfg(not(unix))]
mod lot {
    //! Connections park only where an epoll (kqueue) set can hold them.
    pub(crate) struct Lot;
}

use std::any::{Any, TypeId};
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{header, Method, Request, Response, StatusCode, Version};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

pub(crate) use channel::BodyReader;
use channel::Channel;

use super::drain::Signal;
use super::idle::ServedBody;
use super::service::Served;
use super::{ServeService, ServerOptions};
use crate::body::Incoming;
use crate::http1::{
    buffers, parse_request, write_response_head, BodyDecoder, Connection, Decoded, Framing, Limits,
    Outgoing, ParseError,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a connection's socket is: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Buffered response bytes past which the driver writes before taking more.
const WRITE_HIGH: usize = 64 * 1024;
/// Most request body bytes read and thrown away after a response so that the
/// connection can carry the next request; beyond, the connection is closed.
const DISCARD_MAX: u64 = 256 * 1024;

/// The client's connection after a `101 Switching Protocols`: the socket, and the
/// bytes already read past the request head.
pub(crate) struct UpgradedIo {
    io: Box<dyn Io>,
    read: Bytes,
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
#[derive(Clone)]
pub(crate) struct OnUpgrade(Arc<Mutex<Option<oneshot::Receiver<UpgradedIo>>>>);

impl std::fmt::Debug for OnUpgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnUpgrade")
    }
}

impl OnUpgrade {
    /// Wait for the connection.
    pub(crate) async fn upgraded(self) -> io::Result<UpgradedIo> {
        let rx = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        match rx {
            Some(rx) => rx
                .await
                .map_err(|_| io::Error::other("the connection was not upgraded")),
            None => Err(io::Error::other("the upgrade was already taken")),
        }
    }
}

pin_project_lite::pin_project! {
    /// What a connection has in flight: the pipeline's future, then the response's
    /// body. Kept out of the connection's own future (which an idle keep-alive
    /// connection holds for as long as it waits) in a slot lent by [`Slots`].
    #[project = InFlightProj]
    pub(crate) enum InFlight<F, B> {
        Idle,
        Calling { #[pin] future: F },
        Sending { #[pin] body: B },
    }
}

/// The in-flight slots of a listener's connections: one is taken when a request head
/// arrives and given back when the connection waits again, so a warm server allocates
/// none per request and an idle connection holds none. Also the listener's options,
/// which its connections read through it rather than each keeping a reference.
pub(crate) struct Slots<F, B> {
    free: Mutex<Vec<Slot<F, B>>>,
    options: Arc<ServerOptions>,
    /// Where the listener's idle plain TCP connections park (none: they do not).
    lot: Option<Arc<lot::Lot>>,
}

/// One in-flight slot: pinned in its own allocation, reused request after request.
type Slot<F, B> = Pin<Box<InFlight<F, B>>>;

impl<F, B> Slots<F, B> {
    /// Most slots kept free; more are freed.
    const KEEP: usize = 1024;

    /// The slots of a listener whose connections do not park.
    pub(crate) fn new(options: Arc<ServerOptions>) -> Arc<Self> {
        Self::with_lot(options, None)
    }

    fn with_lot(options: Arc<ServerOptions>, lot: Option<Arc<lot::Lot>>) -> Arc<Self> {
        Arc::new(Slots {
            free: Mutex::new(Vec::new()),
            options,
            lot,
        })
    }

    fn take(&self) -> Slot<F, B> {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_else(|| Box::pin(InFlight::Idle))
    }

    fn give(&self, mut slot: Slot<F, B>) {
        slot.set(InFlight::Idle);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < Self::KEEP {
            free.push(slot);
        }
    }
}

impl<F, B> std::fmt::Debug for Slots<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slots")
    }
}

/// The slot of the request in flight, given back to its pool when dropped (at the end
/// of the message, or with the connection).
struct Lent<'a, F, B> {
    slot: Option<Slot<F, B>>,
    slots: &'a Slots<F, B>,
}

impl<F, B> Lent<'_, F, B> {
    /// The slot, taken from the pool if the connection has none.
    fn get(&mut self) -> Pin<&mut InFlight<F, B>> {
        self.slot.get_or_insert_with(|| self.slots.take()).as_mut()
    }

    /// Give the slot back (what it holds is dropped).
    fn release(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.slots.give(slot);
        }
    }
}

impl<F, B> Drop for Lent<'_, F, B> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The future of a call of a connection's service (what an in-flight slot holds first).
pub(crate) type CallOf<P> = <Served<P> as hyper::service::Service<Request<Incoming>>>::Future;

/// Serve HTTP/1.1 on `io` until the client closes, the connection idles past the
/// header read timeout, shutdown, an error, or an upgrade.
///
/// A function returning an `async` block rather than an `async fn`: the block keeps
/// what it captures in place, where an `async fn` would hold its arguments twice (as
/// captured and as moved into its body's locals) for the connection's whole life.
///
/// `resumed`: the connection was parked ([`Parked`]) and has bytes to read; its wait
/// for this head keeps the deadline it had.
pub(crate) fn serve_connection<I, P>(
    io: I,
    service: Served<P>,
    slots: Arc<Slots<CallOf<P>, ServedBody>>,
    mut drain: Signal,
    mut resumed: bool,
) -> impl Future<Output = ()>
where
    I: Io,
    P: ServeService,
{
    let mut conn = Conn {
        io,
        read_buf: BytesMut::new(),
        out: Outgoing::default(),
        limits: Limits::new(
            slots.options.max_header_size,
            slots.options.max_request_line,
        ),
        channel: None,
        body: None,
        continue_pending: false,
        read_eof: false,
        body_failed: false,
    };
    // Kept as milliseconds (at least one): it lives in the connection's future for its
    // whole life.
    let timeout_ms =
        u32::try_from(slots.options.header_read_timeout.as_millis().max(1)).unwrap_or(u32::MAX);
    let timeout = move || Duration::from_millis(timeout_ms.into());
    // Only plain TCP connections park: their readiness is the socket's.
    let parks = TypeId::of::<I>() == TypeId::of::<TcpStream>() && slots.lot.is_some();
    async move {
        use hyper::service::Service as _;
        // Requests' locals live in blocks that end before the next suspension point, and
        // the pipeline's future and the response body in a lent slot: the connection's
        // future stays small while it waits (see `the_connection_future_size`).
        let mut lent = Lent {
            slot: None,
            slots: &slots,
        };
        loop {
            buffers::release_write(&mut conn.out.buf);
            lent.release();
            // A message's locals end with its response, before the wait for the next
            // head or the discarding of an unread body (a state of the task as large as
            // the largest).
            let keep_alive = {
                // The header read timeout, counted from when the connection starts
                // waiting (a resumed connection's wait started before it parked).
                let mut wait = if std::mem::take(&mut resumed) {
                    Wait::Counting
                } else {
                    Wait::Starts { parks }
                };
                let message = {
                    let head = match poll_fn(|cx| {
                        conn.poll_head(cx, &mut drain, &mut wait, timeout())
                    })
                    .await
                    {
                        Waited::Head(head) => head,
                        Waited::Closed => return,
                        Waited::Park => {
                            park(conn.io, &service, &slots, drain, timeout() - PARK_AFTER);
                            return;
                        }
                        Waited::TimedOut => {
                            tracing::debug!(remote = %service.info.remote, "no request head within the header read timeout; closing");
                            return;
                        }
                        Waited::Refused(error) => {
                            tracing::debug!(remote = %service.info.remote, reason = error.reason(), status = error.status().as_u16(), "refused a request head");
                            conn.queue_error(error.status());
                            // Answered after the loop: no head is held while it is written.
                            break;
                        }
                    };
                    let (request, message) = conn.start_request(head);
                    lent.get().set(InFlight::Calling {
                        future: service.call(request),
                    });
                    message
                };

                // The pipeline runs; meanwhile the request body is pumped and the socket
                // watched for the client's going away.
                let (mut sending, keep_alive, upgrading) = {
                    let response = poll_fn(|cx| {
                        conn.pump(cx);
                        if let InFlightProj::Calling { future } = lent.get().project() {
                            if let Poll::Ready(response) = future.poll(cx) {
                                return Poll::Ready(Some(response.map_err(Into::<BoxError>::into)));
                            }
                        }
                        if conn.peer_closed(cx) {
                            return Poll::Ready(None);
                        }
                        Poll::Pending
                    })
                    .await;
                    // The future is done (or abandoned): dropped now, before the body takes
                    // its place.
                    lent.get().set(InFlight::Idle);
                    let response = match response {
                        Some(Ok(response)) => response,
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, remote = %service.info.remote, "the service failed; closing the connection");
                            return;
                        }
                        None => {
                            tracing::debug!(remote = %service.info.remote, "the client closed its connection before the response; request cancelled");
                            return;
                        }
                    };
                    let draining = drain.is_draining();
                    let (body, sending, keep_alive, upgrading) =
                        conn.start_response(response, &message, draining);
                    lent.get().set(InFlight::Sending { body });
                    (sending, keep_alive, upgrading)
                };
                let written = poll_fn(|cx| match lent.get().project() {
                    InFlightProj::Sending { body } => conn.poll_send(cx, body, &mut sending),
                    _ => Poll::Ready(Ok(())),
                })
                .await;
                // The body is dropped here (an upgrade's hands the exchange to the tunnel).
                lent.release();
                if let Err(e) = written {
                    tracing::debug!(error = %e, remote = %service.info.remote, "the response could not be sent; closing");
                    return;
                }
                if upgrading {
                    let tx = message.upgrade.expect("upgrading");
                    if let Some(channel) = &conn.channel {
                        channel.close();
                    }
                    let _ = tx.send(UpgradedIo {
                        io: Box::new(conn.io),
                        read: conn.read_buf.freeze(),
                    });
                    return;
                }
                keep_alive
            };
            if !keep_alive {
                let _ = poll_fn(|cx| Pin::new(&mut conn.io).poll_shutdown(cx)).await;
                return;
            }
            // The body the pipeline left unread is read and thrown away (up to a bound),
            // so that the next request can be read; a shutdown closes the connection
            // instead of waiting for a client that is slow to send it.
            if conn.body.is_some() {
                let mut starts = true;
                let discarded = poll_fn(|cx| {
                    if drain.poll_draining(cx) {
                        return Poll::Ready(false);
                    }
                    conn.poll_discard(cx, &mut drain, &mut starts, timeout())
                })
                .await;
                if !discarded {
                    return;
                }
            }
            if let Some(channel) = &conn.channel {
                channel.close();
            }
        }
        // A refused head: its answer (written within a few seconds, on the header
        // timer), then the close.
        let mut starts = true;
        let written = poll_fn(|cx| match conn.poll_write_out(cx) {
            Poll::Ready(result) => Poll::Ready(result.is_ok()),
            Poll::Pending => drain
                .poll_deadline(cx, std::mem::take(&mut starts).then_some(ANSWER_TIMEOUT))
                .map(|()| false),
        })
        .await;
        if written {
            let _ = poll_fn(|cx| Pin::new(&mut conn.io).poll_shutdown(cx)).await;
        }
    }
}

/// How long the answer to a refused head may take to be written.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a keep-alive connection waits for its next request in its own task before
/// it parks (when the header read timeout is longer): a connection under load never
/// waits that long, and one that does gives its task back.
const PARK_AFTER: Duration = Duration::from_secs(1);

/// How far the wait for a request head has gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Not waited yet (`parks`: the connection may park).
    Starts { parks: bool },
    /// Waiting [`PARK_AFTER`] with nothing in hand.
    Parking,
    /// The header read timeout runs.
    Counting,
}

/// End the connection's task; its socket waits for the next request in the
/// listener's lot. `rest`: what is left of the header read timeout.
fn park<I: Io, P: ServeService>(
    io: I,
    service: &Served<P>,
    slots: &Slots<CallOf<P>, ServedBody>,
    mut drain: Signal,
    rest: Duration,
) {
    #[cfg(unix)]
    {
        let mut io = Some(io);
        // Only a `TcpStream` parks (`parks` in `serve_connection`).
        let (Some(lot), Some(io)) = (
            &slots.lot,
            (&mut io as &mut dyn Any)
                .downcast_mut::<Option<TcpStream>>()
                .and_then(Option::take),
        ) else {
            return;
        };
        // The connection's place under the limit goes with it; its drain slot is
        // given back (the lot's task answers shutdown for it).
        let permit = drain.take_permit();
        drop(drain);
        lot.park(io, service.info.remote, permit, rest);
    }
    #[cfg(not(unix))]
    let _ = (io, service, slots, drain, rest);
}

/// Slots for a listener's plain TCP connections on this worker, with a lot their idle
/// keep-alive connections park in, watched by a task of its own that `signal` (the
/// listener's) ends on shutdown. Without an epoll set, slots whose connections do not
/// park.
pub(crate) fn slots_with_lot<P: ServeService>(
    options: Arc<ServerOptions>,
    service: P,
    local: std::net::SocketAddr,
    signal: Signal,
) -> Arc<Slots<CallOf<P>, ServedBody>> {
    #[cfg(unix)]
    if let Some((lot, poll)) = lot::Lot::new() {
        let slots = Slots::with_lot(options, Some(lot.clone()));
        let for_resumed = slots.clone();
        let resume = move |record: lot::Record, left: Duration, signal: &Signal| {
            let lot::Record {
                stream,
                remote,
                permit,
                ..
            } = record;
            let Ok(io) = TcpStream::from_std(stream) else {
                return;
            };
            let mut drain = signal.sibling(permit);
            drain.restart(left);
            let service = Served {
                inner: service.clone(),
                info: crate::request::ConnectionInfo {
                    remote,
                    local,
                    tls: false,
                },
                activity: None,
            };
            tokio::spawn(serve_connection(
                io,
                service,
                for_resumed.clone(),
                drain,
                true,
            ));
        };
        tokio::spawn(lot::watch(lot, poll, signal, resume));
        return slots;
    }
    let _ = (service, local, signal);
    Slots::new(options)
}

/// What the connection keeps of a request while it is answered.
struct Message {
    keep_alive: bool,
    accepts_trailers: bool,
    head: bool,
    version: Version,
    connect: bool,
    /// Where the connection goes if the request is upgraded.
    /// Boxed: upgrades are rare, and the message lives in the connection's future.
    upgrade: Option<Box<oneshot::Sender<UpgradedIo>>>,
}

/// A response's own `Content-Length`.
fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    let value = headers.get(header::CONTENT_LENGTH)?;
    crate::http1::parse_length(value.as_bytes())
}

// Returned once per request, by value on the stack: boxing the head would cost an
// allocation per request.
#[allow(clippy::large_enum_variant)]
enum Waited {
    Head(crate::http1::RequestHead),
    Closed,
    TimedOut,
    /// Waited [`PARK_AFTER`] with nothing in hand.
    Park,
    Refused(ParseError),
}

/// A response body being sent: `Framing::Length` counts the bytes still to come.
struct Sending {
    framing: Framing,
    trailers: bool,
    done: bool,
}

struct Conn<I> {
    io: I,
    read_buf: BytesMut,
    out: Outgoing,
    limits: Limits,
    /// Where request bodies are handed over: made for the first body that streams.
    channel: Option<Arc<Channel>>,
    /// The request body still to be read from the socket.
    body: Option<BodyDecoder>,
    /// `Expect: 100-continue` not answered yet.
    continue_pending: bool,
    read_eof: bool,
    /// The request body could not be read: the connection closes after the response.
    body_failed: bool,
}

impl<I: Io> Conn<I> {
    /// The request of `head`, its body read from this connection (the bytes already
    /// in hand, or through the channel).
    fn start_request(&mut self, head: crate::http1::RequestHead) -> (Request<Incoming>, Message) {
        let mut request = head.request.map(|()| Incoming::empty());
        let version = request.version();
        self.continue_pending = false;
        match head.body {
            crate::http1::BodyLength::Length(0) => {}
            crate::http1::BodyLength::Length(n) if n <= self.read_buf.len() as u64 => {
                *request.body_mut() = Incoming::full(self.read_buf.split_to(n as usize).freeze());
            }
            framing => {
                let (decoder, length) = match framing {
                    crate::http1::BodyLength::Length(n) => (BodyDecoder::length(n), Some(n)),
                    crate::http1::BodyLength::Chunked => (BodyDecoder::chunked(), None),
                };
                self.body = Some(decoder);
                self.continue_pending = head.expect_continue;
                let channel = self.channel.get_or_insert_with(Default::default);
                *request.body_mut() = Incoming::native(channel.open(length));
            }
        }
        // Looked for only when `Connection` names `upgrade` (the parser saw its tokens).
        let upgrade = (head.connection_upgrade
            && crate::forwarding::upgrade::upgrade_protocol(request.headers(), version).is_some())
        .then(|| {
            let (tx, rx) = oneshot::channel();
            request
                .extensions_mut()
                .insert(OnUpgrade(Arc::new(Mutex::new(Some(rx)))));
            Box::new(tx)
        });
        let message = Message {
            keep_alive: head.keep_alive,
            accepts_trailers: head.accepts_trailers,
            head: request.method() == Method::HEAD,
            version,
            connect: request.method() == Method::CONNECT,
            upgrade,
        };
        (request, message)
    }

    /// Write `response`'s head into the write buffer: returns its body, how it is sent,
    /// whether the connection stays open, and whether it is being upgraded.
    fn start_response(
        &mut self,
        response: Response<ServedBody>,
        message: &Message,
        draining: bool,
    ) -> (ServedBody, Sending, bool, bool) {
        let (parts, body) = response.into_parts();
        let status = parts.status;
        let upgrading = status == StatusCode::SWITCHING_PROTOCOLS && message.upgrade.is_some();
        let bodiless = message.head
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let framing = if bodiless {
            Framing::Bodiless
        } else if let Some(n) = body.size_hint().exact() {
            Framing::Length(n)
        } else if let Some(n) = declared_length(&parts.headers) {
            Framing::Length(n)
        } else if message.version == Version::HTTP_11 {
            Framing::Chunked
        } else {
            Framing::UntilClose
        };
        let keep_alive = message.keep_alive
            && !draining
            && !message.connect
            && !self.body_failed
            && framing != Framing::UntilClose
            && (!status.is_informational() || upgrading)
            && !crate::forwarding::upgrade::connection_has(&parts.headers, "close");
        let connection = match (keep_alive || upgrading, message.version) {
            (false, Version::HTTP_11) => Connection::Close,
            (true, Version::HTTP_10) => Connection::KeepAlive,
            _ => Connection::Default,
        };
        buffers::ready_to_write(&mut self.out.buf);
        write_response_head(
            &mut self.out.buf,
            status,
            &parts.headers,
            framing,
            connection,
        );
        buffers::release_headers(parts.headers);
        self.continue_pending = false;
        let sending = Sending {
            framing,
            trailers: message.accepts_trailers && framing == Framing::Chunked,
            done: bodiless,
        };
        (body, sending, keep_alive, upgrading)
    }

    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        buffers::poll_read(&mut self.io, &mut self.read_buf, cx)
    }

    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        drain: &mut Signal,
        wait: &mut Wait,
        timeout: Duration,
    ) -> Poll<Waited> {
        let draining = drain.poll_draining(cx);
        loop {
            if !self.read_buf.is_empty() {
                match parse_request(&mut self.read_buf, &self.limits, buffers::headers) {
                    Ok(Some(head)) => return Poll::Ready(Waited::Head(head)),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Waited::Refused(e)),
                }
            } else if draining {
                return Poll::Ready(Waited::Closed);
            }
            if self.read_eof {
                return Poll::Ready(Waited::Closed);
            }
            match self.poll_read_more(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Waited::Closed),
                Poll::Ready(Ok(_)) => continue,
                Poll::Pending => {
                    // Nothing in hand: wait without a buffer.
                    buffers::release_read(&mut self.read_buf);
                    let restart = match *wait {
                        Wait::Starts { parks: true }
                            if self.read_buf.is_empty() && timeout > PARK_AFTER =>
                        {
                            *wait = Wait::Parking;
                            Some(PARK_AFTER)
                        }
                        Wait::Starts { .. } => {
                            *wait = Wait::Counting;
                            Some(timeout)
                        }
                        Wait::Parking | Wait::Counting => None,
                    };
                    ready!(drain.poll_deadline(cx, restart));
                    if *wait == Wait::Parking {
                        if self.read_buf.is_empty() {
                            return Poll::Ready(Waited::Park);
                        }
                        // Part of a head came: the rest of the timeout (a deadline
                        // just set is pending).
                        *wait = Wait::Counting;
                        return drain
                            .poll_deadline(cx, Some(timeout - PARK_AFTER))
                            .map(|()| Waited::TimedOut);
                    }
                    return Poll::Ready(Waited::TimedOut);
                }
            }
        }
    }

    /// Whether the client has closed its side (no request body left to read). Reads
    /// ahead (a pipelined request) up to the head limit.
    fn peer_closed(&mut self, cx: &mut Context<'_>) -> bool {
        if self.body.is_some() {
            return false;
        }
        while !self.read_eof && self.read_buf.len() < self.limits.max_head() {
            match self.poll_read_more(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => self.read_eof = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return false,
            }
        }
        self.read_eof
    }

    /// Move the request body along: when its reader waits and the slot is free,
    /// decode the next frame (reading the socket if needed) and hand it over.
    fn pump(&mut self, cx: &mut Context<'_>) {
        // `Expect: 100-continue`: the client sends its body once the reader first asks
        // for it. Written and flushed like any response bytes (what a full socket
        // leaves goes out ahead of the response head).
        if self.continue_pending
            && self
                .channel
                .as_ref()
                .is_some_and(|c| c.lock().ready_for_frame())
        {
            self.continue_pending = false;
            self.out
                .buf
                .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            let _ = self.poll_write_out(cx);
        }
        let Some(decoder) = self.body.as_mut() else {
            return;
        };
        let Some(channel) = &self.channel else {
            return;
        };
        let mut state = channel.lock();
        state.driver_waits(cx);
        while state.ready_for_frame() {
            match decoder.decode(&mut self.read_buf, self.limits.max_head()) {
                Ok(Decoded::Data(data)) => state.put_data(data),
                Ok(Decoded::Trailers(trailers)) => state.put_end(Some(trailers)),
                Ok(Decoded::End) => state.put_end(None),
                Ok(Decoded::NeedMore) => {
                    match buffers::poll_read(&mut self.io, &mut self.read_buf, cx) {
                        Poll::Ready(Ok(0)) => {
                            self.read_eof = true;
                            match decoder.closed() {
                                Ok(_) => state.put_end(None),
                                Err(e) => state.put_error(e.0),
                            }
                        }
                        Poll::Ready(Ok(_)) => continue,
                        Poll::Ready(Err(_)) => {
                            self.read_eof = true;
                            state.put_error("reading the request body failed");
                        }
                        Poll::Pending => return,
                    }
                }
                Err(e) => state.put_error(e.0),
            }
            if decoder.is_done() {
                break;
            }
        }
        if decoder.is_done() {
            self.body = None;
        } else if state.is_failed() {
            self.body = None;
            self.body_failed = true;
        }
    }

    /// Send the response body (the head is in the write buffer).
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        mut body: Pin<&mut ServedBody>,
        sending: &mut Sending,
    ) -> Poll<io::Result<()>> {
        loop {
            self.pump(cx);
            if sending.done {
                ready!(self.poll_write_out(cx))?;
                return Poll::Ready(Ok(()));
            }
            if self.out.holds_data() || self.out.pending() >= WRITE_HIGH {
                ready!(self.poll_write_out(cx))?;
            }
            match body.as_mut().poll_frame(cx) {
                Poll::Pending => {
                    ready!(self.poll_write_out(cx))?;
                    // A client that goes away while the destination is silent ends
                    // the response (and so the exchange) now, not when the
                    // destination speaks again.
                    if self.peer_closed(cx) {
                        return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(None) => self.finish_body(sending, None)?,
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(io::Error::other(format!("response body: {e}"))))
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        self.queue_data(sending, data)?;
                        if body.is_end_stream() {
                            self.finish_body(sending, None)?;
                        }
                    }
                    Err(frame) => {
                        let trailers = frame.into_trailers().ok();
                        self.finish_body(sending, trailers)?;
                    }
                },
            }
        }
    }

    fn queue_data(&mut self, sending: &mut Sending, data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len();
        match sending.framing {
            Framing::Bodiless => return Ok(()),
            Framing::Length(ref mut left) => {
                *left = left.checked_sub(len as u64).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "response body longer than its Content-Length",
                    )
                })?;
            }
            Framing::Chunked | Framing::UntilClose => {}
        }
        self.out
            .push_data(data, sending.framing == Framing::Chunked);
        Ok(())
    }

    fn finish_body(
        &mut self,
        sending: &mut Sending,
        trailers: Option<http::HeaderMap>,
    ) -> io::Result<()> {
        sending.done = true;
        match sending.framing {
            Framing::Length(left) if left != 0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "response body shorter than its Content-Length",
            )),
            Framing::Chunked => {
                let trailers = trailers.filter(|_| sending.trailers);
                self.out.push_last_chunk(trailers.as_ref());
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Write what is queued; flush.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.out.poll_write(&mut self.io, cx)
    }

    /// Read and throw away the rest of a request body the pipeline left unread (at
    /// most [`DISCARD_MAX`] bytes, within `timeout` of when it starts waiting:
    /// `starts`). `false`: the connection must close.
    fn poll_discard(
        &mut self,
        cx: &mut Context<'_>,
        drain: &mut Signal,
        starts: &mut bool,
        timeout: Duration,
    ) -> Poll<bool> {
        if self.continue_pending {
            // The client waits for a `100` it will not get: its body never comes.
            return Poll::Ready(false);
        }
        let Some(decoder) = self.body.as_mut() else {
            return Poll::Ready(true);
        };
        if decoder.remaining().is_some_and(|n| n > DISCARD_MAX) {
            return Poll::Ready(false);
        }
        let mut discarded = 0u64;
        loop {
            match decoder.decode(&mut self.read_buf, self.limits.max_head()) {
                Ok(Decoded::Data(data)) => {
                    discarded += data.len() as u64;
                    if discarded > DISCARD_MAX {
                        return Poll::Ready(false);
                    }
                }
                Ok(Decoded::Trailers(_) | Decoded::End) => {
                    self.body = None;
                    return Poll::Ready(true);
                }
                Ok(Decoded::NeedMore) => {
                    match buffers::poll_read(&mut self.io, &mut self.read_buf, cx) {
                        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(false),
                        Poll::Ready(Ok(_)) => {}
                        Poll::Pending => {
                            ready!(
                                drain.poll_deadline(cx, std::mem::take(starts).then_some(timeout))
                            );
                            return Poll::Ready(false);
                        }
                    }
                }
                Err(_) => return Poll::Ready(false),
            }
        }
    }

    /// Queue the answer to a refused head (`400`, `414`, `431`), which closes the
    /// connection.
    fn queue_error(&mut self, status: StatusCode) {
        buffers::ready_to_write(&mut self.out.buf);
        write_response_head(
            &mut self.out.buf,
            status,
            &http::HeaderMap::new(),
            Framing::Length(0),
            Connection::Close,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an idle keep-alive connection costs besides its socket is mostly its task:
    /// the connection's future, whose size is that of its largest state (the one
    /// holding the pipeline's future). Printed for the README; bounded so that it
    /// cannot grow unnoticed.
    #[test]
    fn the_connection_future_size() {
        let config = crate::config::parse(
            r#"{"Routes": {}, "Clusters": {}}"#,
            crate::config::Format::Json,
        )
        .unwrap();
        let state = Arc::new(crate::state::ProxyState::new(config).unwrap());
        let service = super::super::service::Served {
            inner: crate::pipeline::FusedDefault::from_state(state),
            info: crate::request::ConnectionInfo {
                remote: ([127, 0, 0, 1], 1).into(),
                local: ([127, 0, 0, 1], 2).into(),
                tls: false,
            },
            activity: None,
        };
        let (io, _peer) = tokio::io::duplex(64);
        let drain = super::super::drain::Drain::new(Duration::from_secs(30));
        let future = serve_connection(
            io,
            service,
            Slots::new(Arc::new(ServerOptions::default())),
            drain.signal(None),
            false,
        );
        let size = std::mem::size_of_val(&future);
        println!(
            "the native connection future: {size} bytes (the service {} bytes, the drain signal {}, the in-flight slot {})",
            std::mem::size_of::<super::super::service::Served<crate::pipeline::FusedDefault>>(),
            std::mem::size_of::<Signal>(),
            std::mem::size_of::<InFlight<<super::super::service::Served<crate::pipeline::FusedDefault> as hyper::service::Service<Request<Incoming>>>::Future, ServedBody>>(),
        );
        // 376 bytes in a debug build; 392 in a release build (print-type-sizes), which
        // with tokio's task header and trailer make a 512-byte task (tasks are rounded
        // up to 128 bytes): 8 more would make it 640.
        assert!(size <= 384, "{size} bytes");
        // A parked connection: its record in the lot.
        #[cfg(unix)]
        {
            let parked = std::mem::size_of::<lot::Record>();
            println!("a parked connection: {parked} bytes");
            assert!(parked <= 64, "{parked} bytes");
        }
    }
}
