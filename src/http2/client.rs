//! fuseway's own HTTP/2 client connection (RFC 9113), for the forwarder's connections
//! to HTTP/2 destinations.
//!
//! A connection is shared by the requests of a pool: its state ([`Connection`]) sits
//! behind one lock, taken by the requests' exchanges ([`Stream`]) and by the task that
//! owns the socket ([`Driver`]). An exchange writes its frames (the request's header
//! block, its body's DATA as the destination's windows allow, its trailers) straight
//! into the connection's outgoing buffer and reads its response from its stream's slot;
//! the driver writes the buffer to the socket, reads frames, decodes header blocks into
//! `http` types and wakes the exchanges they are for. Streams live in slots reused by
//! later streams, so a request on an open connection allocates only its response's
//! header map.
//!
//! What it does: the preface and SETTINGS (push off, 2 MiB stream and 5 MiB connection
//! windows, as hyper's client), HPACK (requests sent without the dynamic table, which
//! RFC 7541 allows; responses decoded with it), flow control both ways, trailers both
//! ways, the destination's stream limit (requests over it wait for a stream to end),
//! PING both ways, RST_STREAM both ways (an exchange dropped before its stream ended
//! resets it with CANCEL), GOAWAY (streams the destination did not take fail; the
//! others finish), and the checks of RFC 9113 §8 on responses (a malformed one fails
//! its request and its stream is reset with PROTOCOL_ERROR). Informational (1xx)
//! responses are skipped; a response's header list is held to 64 KiB, its interim
//! heads counting in it, its trailers held apart ([`MAX_HEADER_LIST`]). Server push is
//! refused in the SETTINGS.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Method, Request, Response, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite};

use super::forbidden_field;
use super::frame::{self, flag, kind, setting, Head, Reason};
use super::hpack::{self, Decoder, Field, Pseudo};
use crate::http1::buffers;

/// The window this client gives each stream (hyper's client's).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// The window this client gives the connection (hyper's client's).
const CONN_WINDOW: u32 = 5 * 1024 * 1024;
/// Outgoing bytes buffered past which request bodies wait for the socket.
const WRITE_HIGH: usize = 64 * 1024;
/// Outgoing bytes waiting past which the destination's frames are not read until some
/// are written: what its frames make this client send (a PING's or SETTINGS'
/// acknowledgement) is held to this when it does not read (the PING and SETTINGS
/// floods). Above what request bodies (`WRITE_HIGH`, and the bytes being written)
/// leave waiting, so that they alone do not stop the reading.
const READ_PAUSE: usize = 4 * WRITE_HIGH;
/// The bound on a response's header list, as RFC 9113 §6.5.2 counts it (each field's
/// name and value and 32 bytes): .NET's client's `MaxResponseHeadersLength` under YARP
/// (64 KiB), and this client's `SETTINGS_MAX_HEADER_LIST_SIZE`. A list this large or
/// larger fails its stream (the largest taken is a byte under, as in the h2 crate). A
/// response's interim (1xx) heads count in its final head's; its trailers have one of
/// their own.
pub(crate) const MAX_HEADER_LIST: usize = 64 * 1024;
/// The largest header block taken, compressed: no block larger can decode to a list
/// within [`MAX_HEADER_LIST`] (a field's encoding takes at most ~4 times its characters,
/// the longest Huffman codes being 30 bits).
const MAX_BLOCK: usize = 4 * MAX_HEADER_LIST;
/// The HPACK table size this client's decoder allows (the default: no setting sent).
const TABLE_SIZE: usize = 4096;
/// The payload of this client's pings.
const PING: [u8; 8] = *b"fuseway\0";

/// Why a stream or the connection failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Error {
    /// The RFC 9113 error code.
    pub(crate) reason: Reason,
    what: &'static str,
    // The connection ended (closed, failed, or broken off) under the stream.
    cut: bool,
}

impl Error {
    fn new(reason: Reason, what: &'static str) -> Error {
        Error {
            reason,
            what,
            cut: false,
        }
    }

    /// Whether the connection ended under the stream — closed by the destination,
    /// failed, or broken off for a protocol error — rather than the stream alone
    /// being reset or refused: whether the destination processed it is not known.
    pub(crate) fn cut(&self) -> bool {
        self.cut
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP/2 destination: {} ({})", self.what, self.reason)
    }
}

impl std::error::Error for Error {}

/// One HTTP/2 connection to a destination, shared by its exchanges and its driver.
pub(crate) struct Connection {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Frames to write.
    out: Vec<u8>,
    /// The driver, woken when `out` gets its first bytes or the connection is left.
    driver: Option<Waker>,
    /// The streams' slots (`id` 0: free).
    slots: Vec<Slot>,
    next_id: u32,
    /// Slots in use.
    open: usize,
    /// The destination's `SETTINGS_MAX_CONCURRENT_STREAMS`.
    max_streams: usize,
    /// The destination's `SETTINGS_INITIAL_WINDOW_SIZE`.
    initial_window: i64,
    /// The destination's `SETTINGS_MAX_FRAME_SIZE`.
    max_frame: u32,
    /// The size update the destination's decoder may wait for.
    encoder: hpack::EncoderTable,
    /// What may still be sent on the connection.
    send_window: i64,
    /// What the destination may still send on the connection.
    recv_window: i64,
    /// Bytes received and consumed (or dropped) not yet credited back.
    credit: u32,
    /// The connection failed: every stream fails, none opens.
    failed: Option<Error>,
    /// The destination's GOAWAY (its last stream and error code): no stream opens;
    /// streams above it failed.
    goaway: Option<(u32, Reason)>,
    /// Exchanges waiting for room under the stream limit.
    openers: Vec<Waker>,
    /// The handles that may open streams ([`Sender`]s); at none, with no stream open,
    /// the driver closes the connection.
    senders: usize,
    ping: PingState,
    /// Outgoing bytes had passed `WRITE_HIGH`: the driver wakes the streams once
    /// written.
    write_blocked: bool,
}

#[derive(Default)]
enum PingState {
    #[default]
    Idle,
    Sent(Option<Waker>),
    Answered,
}

#[derive(Default)]
struct Slot {
    id: u32,
    /// The request was a `HEAD` (its response's `content-length` has no body).
    head_request: bool,
    response: Option<Response<()>>,
    /// The response head has been handed out.
    answered: bool,
    data: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    recv_ended: bool,
    send_ended: bool,
    error: Option<Error>,
    /// The exchange, waiting for any of the above.
    waker: Option<Waker>,
    send_window: i64,
    recv_window: i64,
    /// Bytes consumed not yet credited back to the stream.
    consumed: u32,
    /// What is left of the response's `content-length`.
    expect: Option<u64>,
    /// The response is a `204` or a `304`, which ends with its header section: no
    /// content and no trailers may follow (RFC 9110 §15.3.5, §15.4.5).
    ends_with_head: bool,
    /// The header list sizes of the interim (1xx) heads received so far: what is left
    /// of [`MAX_HEADER_LIST`] is the final head's.
    interim: usize,
}

impl Slot {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn fail(&mut self, error: Error) {
        if self.error.is_none() {
            self.error = Some(error);
        }
        self.wake();
    }
}

impl Inner {
    fn find(&self, id: u32) -> Option<usize> {
        self.slots.iter().position(|slot| slot.id == id)
    }

    /// Wake the driver if `out` was empty before the caller's frames.
    fn wrote(&mut self, was_empty: bool) {
        if was_empty && !self.out.is_empty() {
            if let Some(driver) = &self.driver {
                driver.wake_by_ref();
            }
        }
    }

    /// Write the header block `encode` makes for stream `id`.
    fn headers(&mut self, id: u32, end_stream: bool, encode: impl FnOnce(&mut Vec<u8>)) {
        let was_empty = self.out.is_empty();
        frame::headers_with(
            &mut self.out,
            &mut self.encoder,
            id,
            end_stream,
            self.max_frame,
            encode,
        );
        self.wrote(was_empty);
    }

    fn reset(&mut self, id: u32, reason: Reason) {
        let was_empty = self.out.is_empty();
        frame::rst_stream(&mut self.out, id, reason);
        self.wrote(was_empty);
    }

    /// Fail every stream and refuse new ones: the connection ended.
    fn fail(&mut self, error: Error) {
        let error = Error { cut: true, ..error };
        if self.failed.is_none() {
            self.failed = Some(error);
        }
        for slot in &mut self.slots {
            if slot.id != 0 && !(slot.recv_ended && slot.send_ended) {
                slot.fail(error);
            }
        }
        if let PingState::Sent(waker) = &mut self.ping {
            if let Some(waker) = waker.take() {
                waker.wake();
            }
        }
        self.wake_openers();
    }

    fn wake_openers(&mut self) {
        for waker in self.openers.drain(..) {
            waker.wake();
        }
    }

    /// Credit `n` consumed bytes back to the connection, in one WINDOW_UPDATE once half
    /// the window is used.
    fn credit(&mut self, n: usize) {
        self.credit += n as u32;
        if self.credit >= CONN_WINDOW / 2 {
            let was_empty = self.out.is_empty();
            frame::window_update(&mut self.out, 0, self.credit);
            self.recv_window += i64::from(self.credit);
            self.credit = 0;
            self.wrote(was_empty);
        }
    }

    /// Whether stream `id` was never opened (RFC 9113 §5.1: only HEADERS and PRIORITY
    /// may name such a stream, and a server opens none, push being off).
    fn idle(&self, id: u32) -> bool {
        id.is_multiple_of(2) || id >= self.next_id
    }

    fn closed_for_new(&self) -> bool {
        self.failed.is_some() || self.goaway.is_some() || self.next_id > frame::MAX_WINDOW
    }
}

impl Connection {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether it takes no new stream (failed, or told to go away).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed_for_new()
    }

    /// The destination's stream limit.
    pub(crate) fn max_streams(&self) -> usize {
        self.lock().max_streams
    }

    /// Send a PING; `false` when the connection has failed or one is out already.
    pub(crate) fn send_ping(&self) -> bool {
        let mut inner = self.lock();
        if inner.failed.is_some() || !matches!(inner.ping, PingState::Idle) {
            return false;
        }
        inner.ping = PingState::Sent(None);
        let was_empty = inner.out.is_empty();
        frame::write(&mut inner.out, kind::PING, 0, 0, &PING);
        inner.wrote(was_empty);
        true
    }

    /// Ready when the PING sent is answered (`Err`: the connection failed first).
    pub(crate) fn poll_pong(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut inner = self.lock();
        if let Some(error) = inner.failed {
            return Poll::Ready(Err(error));
        }
        match &mut inner.ping {
            PingState::Answered => {
                inner.ping = PingState::Idle;
                Poll::Ready(Ok(()))
            }
            PingState::Sent(waker) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            PingState::Idle => Poll::Pending,
        }
    }
}

/// What opens streams on a connection; the connection closes once no `Sender` is left
/// and its streams have ended.
pub(crate) struct Sender(Arc<Connection>);

impl Clone for Sender {
    fn clone(&self) -> Sender {
        self.0.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.senders -= 1;
        if inner.senders == 0 {
            if let Some(driver) = &inner.driver {
                driver.wake_by_ref();
            }
        }
    }
}

impl std::ops::Deref for Sender {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.0
    }
}

impl Sender {
    /// Open a stream for the request `head` (its header block written now, its body
    /// not looked at, with
    /// END_STREAM when `end_stream`: no body follows); pending while the connection is
    /// at the destination's stream limit.
    pub(crate) fn poll_open(
        &self,
        cx: &mut Context<'_>,
        head: &Request<impl Sized>,
        end_stream: bool,
    ) -> Poll<Result<Stream, Error>> {
        let mut inner = self.0.lock();
        if let Some(error) = inner.failed {
            return Poll::Ready(Err(error));
        }
        if inner.closed_for_new() {
            return Poll::Ready(Err(Error::new(
                Reason::REFUSED_STREAM,
                "the connection takes no new stream",
            )));
        }
        if inner.open >= inner.max_streams {
            if !inner.openers.iter().any(|w| w.will_wake(cx.waker())) {
                inner.openers.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let id = inner.next_id;
        inner.next_id += 2;
        inner.open += 1;
        let at = match inner.find(0) {
            Some(at) => at,
            None => {
                inner.slots.push(Slot::default());
                inner.slots.len() - 1
            }
        };
        let send_window = inner.initial_window;
        let slot = &mut inner.slots[at];
        slot.id = id;
        slot.head_request = head.method() == Method::HEAD;
        slot.send_window = send_window;
        slot.recv_window = i64::from(STREAM_WINDOW);
        slot.send_ended = end_stream;
        inner.headers(id, end_stream, |dst| encode_request(head, dst));
        Poll::Ready(Ok(Stream {
            conn: self.0.clone(),
            at,
            id,
        }))
    }
}

/// The request's header block: the pseudo-header fields from its method and URI, then
/// its fields but those HTTP/2 does not carry (RFC 9113 §8.2.2; `te` but `trailers`).
fn encode_request(head: &Request<impl Sized>, dst: &mut Vec<u8>) {
    let uri = head.uri();
    let connect = head.method() == Method::CONNECT;
    hpack::encode_pseudo(Pseudo::Method, head.method().as_str().as_bytes(), dst);
    if !connect {
        let scheme = uri.scheme_str().unwrap_or("http");
        hpack::encode_pseudo(Pseudo::Scheme, scheme.as_bytes(), dst);
    }
    let authority = uri
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| head.headers().get(header::HOST).map(|h| h.as_bytes()));
    if let Some(authority) = authority {
        hpack::encode_pseudo(Pseudo::Authority, authority, dst);
    }
    if !connect {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let path = if path.is_empty() { "/" } else { path };
        hpack::encode_pseudo(Pseudo::Path, path.as_bytes(), dst);
    }
    encode_fields(head.headers(), dst);
}

fn encode_fields(headers: &HeaderMap, dst: &mut Vec<u8>) {
    for (name, value) in headers {
        if forbidden_field(name, value) {
            continue;
        }
        hpack::encode_header(name, value.as_bytes(), dst);
    }
}

/// One request's stream: its exchange's side.
pub(crate) struct Stream {
    conn: Arc<Connection>,
    at: usize,
    id: u32,
}

impl Stream {
    /// The slot, if still this stream's (it always is while the `Stream` lives).
    fn with<T>(&self, f: impl FnOnce(&mut Inner, usize) -> T) -> T {
        let mut inner = self.conn.lock();
        debug_assert_eq!(inner.slots[self.at].id, self.id);
        f(&mut inner, self.at)
    }

    /// The response head.
    pub(crate) fn poll_response(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<()>, Error>> {
        self.with(|inner, at| {
            let slot = &mut inner.slots[at];
            if let Some(response) = slot.response.take() {
                slot.answered = true;
                return Poll::Ready(Ok(response));
            }
            if let Some(error) = slot.error {
                return Poll::Ready(Err(error));
            }
            register(&mut slot.waker, cx);
            Poll::Pending
        })
    }

    /// Send `data` (all of it, as the windows allow: ready once it is in the connection's
    /// outgoing buffer), the request body's end with it when `end`: `Ok(true)`. A
    /// response that ended with the destination's `RST_STREAM(NO_ERROR)` ends the body
    /// early: `data` is dropped, and `Ok(false)` says to send no more.
    pub(crate) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        data: &mut Bytes,
        end: bool,
    ) -> Poll<Result<bool, Error>> {
        self.with(|inner, at| {
            let was_empty = inner.out.is_empty();
            let polled = loop {
                let slot = &inner.slots[at];
                if let Some(error) = slot.error {
                    break Poll::Ready(Err(error));
                }
                if slot.send_ended {
                    data.clear();
                    break Poll::Ready(Ok(false));
                }
                if data.is_empty() && !end {
                    break Poll::Ready(Ok(true));
                }
                if inner.out.len() >= WRITE_HIGH {
                    inner.write_blocked = true;
                    register(&mut inner.slots[at].waker, cx);
                    break Poll::Pending;
                }
                let room = slot
                    .send_window
                    .min(inner.send_window)
                    .min(i64::from(inner.max_frame));
                if room <= 0 && !data.is_empty() {
                    register(&mut inner.slots[at].waker, cx);
                    break Poll::Pending;
                }
                let n = data.len().min(room.max(0) as usize);
                let last = end && n == data.len();
                let flags = if last { flag::END_STREAM } else { 0 };
                frame::write(&mut inner.out, kind::DATA, flags, self.id, &data[..n]);
                data.advance(n);
                inner.send_window -= n as i64;
                let slot = &mut inner.slots[at];
                slot.send_window -= n as i64;
                if last {
                    slot.send_ended = true;
                    break Poll::Ready(Ok(true));
                }
            };
            inner.wrote(was_empty);
            polled
        })
    }

    /// End the request with `trailers`.
    pub(crate) fn send_trailers(&mut self, trailers: &HeaderMap) -> Result<(), Error> {
        self.with(|inner, at| {
            let slot = &mut inner.slots[at];
            if let Some(error) = slot.error {
                return Err(error);
            }
            if slot.send_ended {
                return Ok(());
            }
            slot.send_ended = true;
            inner.headers(self.id, true, |dst| encode_fields(trailers, dst));
            Ok(())
        })
    }

    /// Reset the stream (the request body failed).
    pub(crate) fn reset(&mut self, reason: Reason) {
        self.with(|inner, at| {
            let slot = &mut inner.slots[at];
            if slot.error.is_none() {
                slot.error = Some(Error::new(reason, "the request was cancelled"));
                inner.reset(self.id, reason);
            }
        })
    }

    /// The response body's next chunk (`None` at its end, then ask for the trailers).
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let id = self.id;
        self.with(|inner, at| {
            let slot = &mut inner.slots[at];
            if let Some(data) = slot.data.pop_front() {
                let n = data.len();
                slot.consumed += n as u32;
                if slot.consumed >= STREAM_WINDOW / 2 && !slot.recv_ended {
                    let consumed = std::mem::take(&mut slot.consumed);
                    slot.recv_window += i64::from(consumed);
                    let was_empty = inner.out.is_empty();
                    frame::window_update(&mut inner.out, id, consumed);
                    inner.wrote(was_empty);
                }
                inner.credit(n);
                return Poll::Ready(Some(Ok(data)));
            }
            // A response received whole stands whatever happens to the stream after.
            if slot.recv_ended {
                return Poll::Ready(None);
            }
            if let Some(error) = slot.error {
                return Poll::Ready(Some(Err(error)));
            }
            register(&mut slot.waker, cx);
            Poll::Pending
        })
    }

    /// The response's trailers, once its data has all been read.
    pub(crate) fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<HeaderMap>, Error>> {
        self.with(|inner, at| {
            let slot = &mut inner.slots[at];
            if slot.recv_ended {
                return Poll::Ready(Ok(slot.trailers.take()));
            }
            if let Some(error) = slot.error {
                return Poll::Ready(Err(error));
            }
            register(&mut slot.waker, cx);
            Poll::Pending
        })
    }

    /// The response has ended and been read.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.with(|inner, at| {
            let slot = &inner.slots[at];
            slot.recv_ended && slot.data.is_empty() && slot.trailers.is_none()
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut inner = self.conn.lock();
        let inner = &mut *inner;
        let slot = &mut inner.slots[self.at];
        let unread: usize = slot.data.drain(..).map(|d| d.len()).sum();
        let cancel = slot.error.is_none() && !(slot.recv_ended && slot.send_ended);
        let keep = std::mem::take(&mut slot.data);
        *slot = Slot {
            data: keep,
            ..Slot::default()
        };
        if cancel && inner.failed.is_none() {
            inner.reset(self.id, Reason::CANCEL);
        }
        inner.credit(unread);
        inner.open -= 1;
        inner.wake_openers();
        if inner.open == 0 {
            if let Some(driver) = &inner.driver {
                driver.wake_by_ref();
            }
        }
    }
}

fn register(waker: &mut Option<Waker>, cx: &mut Context<'_>) {
    match waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *waker = Some(cx.waker().clone()),
    }
}

/// Start HTTP/2 on `io`: the preface, this client's SETTINGS and connection window,
/// then the destination's SETTINGS, read before this returns (so the first requests
/// know its stream limit). The [`Driver`] must then be polled (spawned) for the
/// connection to work.
pub(crate) async fn handshake<I>(mut io: I) -> Result<(Sender, Driver<I>), Error>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(frame::PREFACE);
    frame::settings(
        &mut out,
        &[
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
        ],
    );
    frame::window_update(&mut out, 0, CONN_WINDOW - frame::DEFAULT_WINDOW);
    let io_error = |_| Error::new(Reason::PROTOCOL_ERROR, "connection failed in the handshake");
    tokio::io::AsyncWriteExt::write_all(&mut io, &out)
        .await
        .map_err(io_error)?;
    tokio::io::AsyncWriteExt::flush(&mut io)
        .await
        .map_err(io_error)?;
    out.clear();
    let conn = Arc::new(Connection {
        inner: Mutex::new(Inner {
            out,
            driver: None,
            slots: Vec::new(),
            next_id: 1,
            open: 0,
            max_streams: usize::MAX,
            initial_window: i64::from(frame::DEFAULT_WINDOW),
            max_frame: frame::DEFAULT_MAX_FRAME,
            encoder: hpack::EncoderTable::Default,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONN_WINDOW),
            credit: 0,
            failed: None,
            goaway: None,
            openers: Vec::new(),
            senders: 1,
            ping: PingState::Idle,
            write_blocked: false,
        }),
    });
    let mut driver = Driver {
        io,
        conn: conn.clone(),
        read: BytesMut::new(),
        decoder: Decoder::remembering(TABLE_SIZE),
        block: None,
        writing: Vec::new(),
        written: 0,
        backlog: 0,
        settled: false,
        ack_due: true,
        eof: false,
    };
    std::future::poll_fn(|cx| driver.poll_settings(cx)).await?;
    Ok((Sender(conn), driver))
}

/// The task's half of a connection: it owns the socket.
pub(crate) struct Driver<I> {
    io: I,
    conn: Arc<Connection>,
    read: BytesMut,
    decoder: Decoder,
    /// A header block continued in CONTINUATION frames: its stream, END_STREAM, the
    /// fragments so far.
    block: Option<(u32, bool, BytesMut)>,
    /// Bytes being written, taken from the connection's `out`.
    writing: Vec<u8>,
    written: usize,
    /// The connection's `out` as the last frames read left it ([`READ_PAUSE`]).
    backlog: usize,
    /// The destination's first SETTINGS has come.
    settled: bool,
    /// This client's SETTINGS (its only one, in the preface) awaits its ack.
    ack_due: bool,
    eof: bool,
}

impl<I> Driver<I> {
    /// The connection it drives (for its keep-alive pings: not a [`Sender`], which
    /// would keep it open).
    pub(crate) fn connection(&self) -> Arc<Connection> {
        self.conn.clone()
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> Driver<I> {
    /// Read frames until the destination's first SETTINGS has been taken.
    fn poll_settings(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.poll_io(cx)?;
        if self.settled {
            return Poll::Ready(Ok(()));
        }
        if self.eof {
            return Poll::Ready(Err(Error::new(
                Reason::PROTOCOL_ERROR,
                "the destination closed the connection in the handshake",
            )));
        }
        Poll::Pending
    }

    /// Write what is queued and read what has come, until neither makes progress.
    fn poll_io(&mut self, cx: &mut Context<'_>) -> Result<(), Error> {
        loop {
            let wrote = self.poll_write(cx)?;
            let read = self.poll_read(cx)?;
            if !wrote && !read {
                return Ok(());
            }
        }
    }

    /// Write the connection's outgoing bytes: whether any were written.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Result<bool, Error> {
        let mut progress = false;
        loop {
            if self.written == self.writing.len() {
                self.writing.clear();
                self.written = 0;
                let mut inner = self.conn.lock();
                std::mem::swap(&mut inner.out, &mut self.writing);
                self.backlog = 0;
                if self.writing.is_empty() {
                    register(&mut inner.driver, cx);
                    if inner.write_blocked {
                        inner.write_blocked = false;
                        for slot in &mut inner.slots {
                            slot.wake();
                        }
                    }
                    drop(inner);
                    if progress {
                        let _ = Pin::new(&mut self.io)
                            .poll_flush(cx)
                            .map_err(|e| self.io_failed(&e))?;
                    }
                    return Ok(progress);
                }
            }
            match Pin::new(&mut self.io).poll_write(cx, &self.writing[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Err(self.io_failed(&io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    progress = true;
                }
                Poll::Ready(Err(e)) => return Err(self.io_failed(&e)),
                Poll::Pending => return Ok(progress),
            }
        }
    }

    fn io_failed(&self, e: &io::Error) -> Error {
        tracing::debug!(error = %e, "HTTP/2 connection to a destination failed");
        let error = Error::new(Reason::INTERNAL_ERROR, "the connection failed");
        self.conn.lock().fail(error);
        error
    }

    /// Read and take in the frames that came: whether anything was read.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Result<bool, Error> {
        // While the destination leaves unread what its frames made, none more are read
        // (the write under way is registered: its progress brings the driver back).
        if self.eof || self.writing.len() - self.written + self.backlog >= READ_PAUSE {
            return Ok(false);
        }
        let n = match buffers::poll_read(&mut self.io, &mut self.read, cx) {
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Err(self.io_failed(&e)),
            Poll::Pending => return Ok(false),
        };
        if n == 0 {
            self.eof = true;
            let mut inner = self.conn.lock();
            // After a GOAWAY for an error, that error is the reason.
            let error = match inner.goaway {
                Some((_, reason)) if reason != Reason::NO_ERROR => {
                    Error::new(reason, "the destination closed the connection with GOAWAY")
                }
                _ => Error::new(Reason::NO_ERROR, "the destination closed the connection"),
            };
            inner.fail(error);
            return Ok(true);
        }
        let conn = self.conn.clone();
        let mut inner = conn.lock();
        while self.read.len() >= frame::HEAD_LEN {
            let head = Head::parse(&self.read);
            if head.len > frame::DEFAULT_MAX_FRAME {
                return Err(self.fatal(
                    &mut inner,
                    Reason::FRAME_SIZE_ERROR,
                    "a frame past the frame size",
                ));
            }
            let whole = frame::HEAD_LEN + head.len as usize;
            if self.read.len() < whole {
                self.read.reserve(whole - self.read.len());
                break;
            }
            self.read.advance(frame::HEAD_LEN);
            let payload = self.read.split_to(head.len as usize).freeze();
            if let Err(error) = self.on_frame(&mut inner, head, payload) {
                return Err(self.fatal(&mut inner, error.reason, error.what));
            }
        }
        self.backlog = inner.out.len();
        if self.read.is_empty() {
            buffers::release_read(&mut self.read);
        }
        Ok(true)
    }

    /// A connection error: GOAWAY, every stream failed.
    fn fatal(&mut self, inner: &mut Inner, reason: Reason, what: &'static str) -> Error {
        tracing::debug!(%reason, what, "HTTP/2 destination broke the protocol");
        let error = Error::new(reason, what);
        let last = inner.next_id.saturating_sub(2);
        frame::goaway(&mut inner.out, last, reason);
        inner.fail(error);
        error
    }

    fn on_frame(&mut self, inner: &mut Inner, head: Head, payload: Bytes) -> Result<(), Error> {
        let protocol = |what| Err(Error::new(Reason::PROTOCOL_ERROR, what));
        if let Some((stream, end_stream, block)) = &mut self.block {
            if head.kind != kind::CONTINUATION || head.stream != *stream {
                return protocol("a header block not continued");
            }
            if block.len() + payload.len() > MAX_BLOCK {
                return Err(Error::new(
                    Reason::ENHANCE_YOUR_CALM,
                    "a header block too large",
                ));
            }
            block.extend_from_slice(&payload);
            if head.flags & flag::END_HEADERS != 0 {
                let (stream, end_stream) = (*stream, *end_stream);
                let block = self.block.take().map(|b| b.2.freeze()).unwrap_or_default();
                return self.on_block(inner, stream, end_stream, block);
            }
            return Ok(());
        }
        match head.kind {
            kind::DATA => self.on_data(inner, head, payload),
            kind::HEADERS => {
                if head.stream == 0 {
                    return protocol("HEADERS on stream 0");
                }
                let Some(mut range) = frame::unpadded(&payload, head.flags) else {
                    return protocol("bad padding");
                };
                if head.flags & flag::PRIORITY != 0 {
                    if range.len() < 5 {
                        return protocol("a short PRIORITY part");
                    }
                    range.start += 5;
                }
                let fragment = payload.slice(range);
                let end_stream = head.flags & flag::END_STREAM != 0;
                if head.flags & flag::END_HEADERS != 0 {
                    self.on_block(inner, head.stream, end_stream, fragment)
                } else {
                    self.block = Some((head.stream, end_stream, BytesMut::from(&fragment[..])));
                    Ok(())
                }
            }
            kind::RST_STREAM => {
                if head.stream == 0 || payload.len() != 4 {
                    return protocol("a bad RST_STREAM");
                }
                let reason = Reason(u32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]));
                if inner.idle(head.stream) {
                    return protocol("RST_STREAM on a stream never opened");
                }
                if let Some(at) = inner.find(head.stream) {
                    let slot = &mut inner.slots[at];
                    if reason == Reason::NO_ERROR && slot.recv_ended {
                        // The response is whole; stop sending the request's body.
                        slot.send_ended = true;
                        slot.wake();
                    } else {
                        slot.fail(Error::new(
                            reason,
                            "stream error received (the destination reset the stream)",
                        ));
                    }
                }
                Ok(())
            }
            kind::SETTINGS => self.on_settings(inner, head, &payload),
            kind::PUSH_PROMISE => protocol("PUSH_PROMISE, push being off"),
            kind::PING => {
                if head.stream != 0 || payload.len() != 8 {
                    return Err(Error::new(Reason::FRAME_SIZE_ERROR, "a bad PING"));
                }
                if head.flags & flag::ACK == 0 {
                    let was_empty = inner.out.is_empty();
                    frame::write(&mut inner.out, kind::PING, flag::ACK, 0, &payload);
                    inner.wrote(was_empty);
                } else if payload[..] == PING {
                    if let PingState::Sent(waker) = &mut inner.ping {
                        if let Some(waker) = waker.take() {
                            waker.wake();
                        }
                        inner.ping = PingState::Answered;
                    }
                }
                Ok(())
            }
            kind::GOAWAY => {
                if head.stream != 0 || payload.len() < 8 {
                    return protocol("a bad GOAWAY");
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & frame::MAX_WINDOW;
                let reason = Reason(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
                tracing::debug!(%reason, last, "an HTTP/2 destination sent GOAWAY");
                inner.goaway = Some((last, reason));
                for slot in &mut inner.slots {
                    if slot.id > last {
                        slot.fail(Error::new(
                            Reason::REFUSED_STREAM,
                            "the destination went away before the stream",
                        ));
                    }
                }
                inner.wake_openers();
                Ok(())
            }
            kind::WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return Err(Error::new(Reason::FRAME_SIZE_ERROR, "a bad WINDOW_UPDATE"));
                }
                let increment = i64::from(
                    u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & frame::MAX_WINDOW,
                );
                if head.stream == 0 {
                    if increment == 0 {
                        return protocol("a zero window increment");
                    }
                    inner.send_window += increment;
                    if inner.send_window > i64::from(frame::MAX_WINDOW) {
                        return Err(Error::new(
                            Reason::FLOW_CONTROL_ERROR,
                            "the connection window past its limit",
                        ));
                    }
                    for slot in &mut inner.slots {
                        if slot.id != 0 && !slot.send_ended {
                            slot.wake();
                        }
                    }
                } else if inner.idle(head.stream) {
                    return protocol("WINDOW_UPDATE on a stream never opened");
                } else if let Some(at) = inner.find(head.stream) {
                    let id = head.stream;
                    let slot = &mut inner.slots[at];
                    slot.send_window += increment;
                    if increment == 0 || slot.send_window > i64::from(frame::MAX_WINDOW) {
                        slot.fail(Error::new(
                            Reason::FLOW_CONTROL_ERROR,
                            "a bad stream window update",
                        ));
                        inner.reset(id, Reason::FLOW_CONTROL_ERROR);
                    } else {
                        slot.wake();
                    }
                }
                Ok(())
            }
            kind::CONTINUATION => protocol("CONTINUATION without HEADERS"),
            // RFC 9113 §6.3: a stream error; taken for the connection's, as h2 does.
            kind::PRIORITY if payload.len() != 5 => Err(Error::new(
                Reason::FRAME_SIZE_ERROR,
                "a PRIORITY frame not 5 bytes long",
            )),
            // PRIORITY and unknown frames are ignored.
            _ => Ok(()),
        }
    }

    fn on_settings(&mut self, inner: &mut Inner, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream != 0 {
            return Err(Error::new(Reason::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if head.flags & flag::ACK != 0 {
            if !payload.is_empty() {
                return Err(Error::new(
                    Reason::FRAME_SIZE_ERROR,
                    "a SETTINGS ack with a payload",
                ));
            }
            // An ack of SETTINGS never sent: the peer's state is not this client's (h2
            // and Go's client end the connection too).
            if !std::mem::take(&mut self.ack_due) {
                return Err(Error::new(
                    Reason::PROTOCOL_ERROR,
                    "a SETTINGS ack for no SETTINGS",
                ));
            }
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return Err(Error::new(
                Reason::FRAME_SIZE_ERROR,
                "a bad SETTINGS length",
            ));
        }
        for one in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([one[0], one[1]]);
            let value = u32::from_be_bytes([one[2], one[3], one[4], one[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(Error::new(Reason::PROTOCOL_ERROR, "a bad ENABLE_PUSH"));
                }
                setting::MAX_CONCURRENT_STREAMS => inner.max_streams = value as usize,
                setting::INITIAL_WINDOW_SIZE => {
                    if value > frame::MAX_WINDOW {
                        return Err(Error::new(
                            Reason::FLOW_CONTROL_ERROR,
                            "a window past its limit",
                        ));
                    }
                    let delta = i64::from(value) - inner.initial_window;
                    inner.initial_window = i64::from(value);
                    for slot in &mut inner.slots {
                        if slot.id != 0 {
                            slot.send_window += delta;
                            slot.wake();
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..=0xff_ffff).contains(&value) {
                        return Err(Error::new(Reason::PROTOCOL_ERROR, "a bad MAX_FRAME_SIZE"));
                    }
                    inner.max_frame = value;
                }
                // Said once this frame's ACK is written, below.
                setting::HEADER_TABLE_SIZE => inner.encoder.peer_limit(value),
                _ => {}
            }
        }
        let was_empty = inner.out.is_empty();
        frame::write(&mut inner.out, kind::SETTINGS, flag::ACK, 0, &[]);
        inner.wrote(was_empty);
        inner.wake_openers();
        self.settled = true;
        Ok(())
    }

    fn on_data(&mut self, inner: &mut Inner, head: Head, payload: Bytes) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(Error::new(Reason::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let len = payload.len();
        inner.recv_window -= len as i64;
        if inner.recv_window < 0 {
            return Err(Error::new(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection window",
            ));
        }
        let Some(range) = frame::unpadded(&payload, head.flags) else {
            return Err(Error::new(Reason::PROTOCOL_ERROR, "bad padding"));
        };
        if inner.idle(head.stream) {
            return Err(Error::new(
                Reason::PROTOCOL_ERROR,
                "DATA on a stream never opened",
            ));
        }
        let Some(at) = inner.find(head.stream) else {
            // A stream already ended here: its data is credited back at once.
            inner.credit(len);
            return Ok(());
        };
        let id = head.stream;
        let slot = &mut inner.slots[at];
        let stream_error = if slot.error.is_some() {
            None
        } else if slot.recv_ended || (slot.response.is_none() && !slot.answered) {
            Some(Error::new(Reason::PROTOCOL_ERROR, "DATA out of place"))
        } else if slot.recv_window < len as i64 {
            Some(Error::new(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the stream window",
            ))
        } else {
            slot.recv_window -= len as i64;
            let data = payload.slice(range);
            let end = head.flags & flag::END_STREAM != 0;
            let expect = slot.expect.map(|left| left.checked_sub(data.len() as u64));
            match expect {
                Some(None) => Some(Error::new(
                    Reason::PROTOCOL_ERROR,
                    "more data than the content-length",
                )),
                Some(Some(left)) if end && left > 0 => Some(Error::new(
                    Reason::PROTOCOL_ERROR,
                    "less data than the content-length",
                )),
                _ => {
                    slot.expect = expect.flatten();
                    // Padding is credited back at once.
                    let padding = len - data.len();
                    slot.consumed += padding as u32;
                    if !data.is_empty() {
                        slot.data.push_back(data);
                    }
                    slot.recv_ended = end;
                    slot.wake();
                    inner.credit(padding);
                    return Ok(());
                }
            }
        };
        if let Some(error) = stream_error {
            slot.fail(error);
            inner.reset(id, error.reason);
        }
        inner.credit(len);
        Ok(())
    }

    /// A whole header block: the response head, or its trailers.
    fn on_block(
        &mut self,
        inner: &mut Inner,
        id: u32,
        end_stream: bool,
        block: Bytes,
    ) -> Result<(), Error> {
        let mut status = None;
        // A response head's fields go into a map from the thread's pool (the server
        // gives it back once the head is written); trailers into a new one.
        let (head, interim) = inner.find(id).map_or((false, 0), |at| {
            let slot = &inner.slots[at];
            let head = slot.response.is_none() && !slot.answered && !slot.recv_ended;
            (head, if head { slot.interim } else { 0 })
        });
        // Past it the block is still decoded (the table's state depends on it), its
        // fields no longer kept; interim heads take theirs out of their final head's.
        let budget = MAX_HEADER_LIST.saturating_sub(interim);
        let mut size = 0;
        let mut headers = if head {
            let mut map = buffers::Heads::Responses.take(0);
            map.clear();
            map
        } else {
            HeaderMap::new()
        };
        let mut malformed = None;
        self.decoder
            .decode(&block, |field| {
                size += field.size();
                if size >= budget {
                    std::hint::cold_path();
                    return;
                }
                match field {
                    Field::Pseudo(Pseudo::Status, value)
                        if status.is_none() && headers.is_empty() =>
                    {
                        status = Some(value)
                    }
                    Field::Pseudo(..) => malformed = Some("a bad pseudo-header field"),
                    Field::Header(name, value) => {
                        if forbidden_field(&name, &value) {
                            malformed = Some("a connection-specific field");
                        }
                        headers.append(name, value);
                    }
                    Field::Invalid { .. } => malformed = Some("an invalid field"),
                }
            })
            .map_err(|e| Error::new(Reason::COMPRESSION_ERROR, e.0))?;
        if size >= budget {
            // As h2 does with a list at its limit or over (the largest it takes is one
            // byte under): the stream fails, the connection goes on.
            malformed = Some("a header list over 64 KiB");
        }
        if inner.idle(id) {
            return Err(Error::new(
                Reason::PROTOCOL_ERROR,
                "HEADERS on a stream never opened",
            ));
        }
        let Some(at) = inner.find(id) else {
            return Ok(());
        };
        let slot = &mut inner.slots[at];
        if slot.error.is_some() {
            return Ok(());
        }
        let stream_error = |slot: &mut Slot, what| {
            let error = Error::new(Reason::PROTOCOL_ERROR, what);
            slot.fail(error);
            error
        };
        let error = if slot.recv_ended {
            Some(stream_error(slot, "HEADERS after the stream's end"))
        } else if slot.response.is_none() && !slot.answered {
            let status = status.and_then(|s| StatusCode::from_bytes(&s).ok());
            match (malformed, status) {
                (Some(what), _) => Some(stream_error(slot, what)),
                (None, None) => Some(stream_error(slot, "a response without :status")),
                (None, Some(status)) if status.is_informational() => {
                    if end_stream {
                        Some(stream_error(
                            slot,
                            "an informational response ending the stream",
                        ))
                    } else if headers.contains_key(header::CONTENT_LENGTH) {
                        // RFC 9110 §8.6: a 1xx has no Content-Length.
                        Some(stream_error(
                            slot,
                            "an informational response with a length",
                        ))
                    } else {
                        slot.interim += size;
                        None
                    }
                }
                (None, Some(status)) => {
                    // RFC 9110 §15.3.5, §15.4.5: no content and no trailers.
                    let ends_with_head =
                        status == StatusCode::NOT_MODIFIED || status == StatusCode::NO_CONTENT;
                    let no_body = slot.head_request || ends_with_head;
                    let expect = super::content_length(&headers);
                    if let Err(what) = expect {
                        Some(stream_error(slot, what))
                    } else if status == StatusCode::NO_CONTENT
                        && expect.is_ok_and(|n| n.is_some_and(|n| n > 0))
                    {
                        // RFC 9110 §8.6 (a `0` is let through: servers send it).
                        Some(stream_error(slot, "a 204 with a length"))
                    } else if end_stream
                        && !no_body
                        && expect.is_ok_and(|n| n.is_some_and(|n| n > 0))
                    {
                        Some(stream_error(slot, "less data than the content-length"))
                    } else {
                        // No content may follow (RFC 9110 §6.4.1): any DATA is past the end.
                        slot.expect = if no_body {
                            Some(0)
                        } else {
                            expect.ok().flatten()
                        };
                        slot.ends_with_head = ends_with_head;
                        let mut response = Response::new(());
                        *response.status_mut() = status;
                        *response.version_mut() = Version::HTTP_2;
                        *response.headers_mut() = headers;
                        slot.response = Some(response);
                        slot.recv_ended = end_stream;
                        slot.wake();
                        None
                    }
                }
            }
        } else if let Some(what) = malformed {
            Some(stream_error(slot, what))
        } else if !end_stream || status.is_some() {
            Some(stream_error(slot, "bad trailers"))
        } else if slot.ends_with_head {
            Some(stream_error(slot, "trailers after a 204 or 304"))
        } else if slot.expect.is_some_and(|n| n > 0) {
            Some(stream_error(slot, "less data than the content-length"))
        } else {
            slot.trailers = Some(headers);
            slot.recv_ended = true;
            slot.wake();
            None
        };
        if let Some(error) = error {
            inner.reset(id, error.reason);
        }
        Ok(())
    }
}

impl<I> Drop for Driver<I> {
    /// A connection no longer driven (its task ended it: a ping went unanswered, or the
    /// runtime is shutting down) fails its streams, which would otherwise wait forever.
    fn drop(&mut self) {
        self.conn
            .lock()
            .fail(Error::new(Reason::CANCEL, "the connection was closed"));
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> Future for Driver<I> {
    type Output = Result<(), Error>;

    /// Runs until the connection fails, the destination closes it, or it is left (no
    /// [`Sender`] and no stream) and closed here.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // A failure is recorded in the connection's state, read next.
        let _ = this.poll_io(cx);
        let inner = this.conn.lock();
        if let Some(error) = inner.failed {
            drop(inner);
            // Whatever is left to write (a GOAWAY) goes if it can at once.
            let _ = this.poll_write(cx);
            return Poll::Ready(if error.reason == Reason::NO_ERROR {
                Ok(())
            } else {
                Err(error)
            });
        }
        let left = inner.senders == 0 && inner.open == 0;
        let gone = inner.goaway.is_some() && inner.open == 0;
        drop(inner);
        if left || gone {
            let mut inner = this.conn.lock();
            inner.failed = Some(Error::new(Reason::NO_ERROR, "the connection was closed"));
            frame::goaway(&mut inner.out, 0, Reason::NO_ERROR);
            drop(inner);
            let _ = this.poll_write(cx);
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    //! The client against a destination written frame by frame on a real socket, for
    //! what a well-behaved server never sends. (Against real servers: the pool's and
    //! the forwarder's tests, tests/h2_destination.rs, tests/grpc.rs.)

    use std::future::poll_fn;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
        tokio::time::timeout(LIMIT, f)
            .await
            .unwrap_or_else(|_| panic!("{what} took too long"))
    }

    /// A client connected to a raw peer that has read the preface and sent `settings`.
    async fn connect(settings: &[(u16, u32)]) -> (Sender, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut out = Vec::new();
        frame::settings(&mut out, settings);
        let peer = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut preface = [0; 24];
            socket.read_exact(&mut preface).await.unwrap();
            assert_eq!(&preface, frame::PREFACE);
            socket.write_all(&out).await.unwrap();
            socket
        });
        let io = TcpStream::connect(addr).await.unwrap();
        let (sender, driver) = within("the handshake", handshake(io)).await.unwrap();
        tokio::spawn(driver);
        (sender, peer.await.unwrap())
    }

    async fn read_frame(socket: &mut TcpStream) -> (Head, Vec<u8>) {
        let mut head = [0; frame::HEAD_LEN];
        within("a frame", socket.read_exact(&mut head))
            .await
            .unwrap();
        let head = Head::parse(&head);
        let mut payload = vec![0; head.len as usize];
        within("a payload", socket.read_exact(&mut payload))
            .await
            .unwrap();
        (head, payload)
    }

    /// Read frames up to the first of `kind`.
    async fn read_until(socket: &mut TcpStream, wanted: u8) -> (Head, Vec<u8>) {
        loop {
            let (head, payload) = read_frame(socket).await;
            if head.kind == wanted {
                return (head, payload);
            }
        }
    }

    fn get(path: &str) -> Request<()> {
        Request::get(format!("http://destination{path}"))
            .body(())
            .unwrap()
    }

    async fn open(sender: &Sender, request: &Request<()>) -> Stream {
        within(
            "a stream",
            poll_fn(|cx| sender.poll_open(cx, request, true)),
        )
        .await
        .unwrap()
    }

    /// The response head on `stream`.
    async fn response_head(stream: &mut Stream) -> Result<Response<()>, Error> {
        within("a response head", poll_fn(|cx| stream.poll_response(cx))).await
    }

    /// A whole response without a body on stream `id`, as frames.
    fn whole(out: &mut Vec<u8>, id: u32, status: StatusCode, fields: &[(&'static str, &str)]) {
        let flags = flag::END_HEADERS | flag::END_STREAM;
        frame::write(out, kind::HEADERS, flags, id, &block(status, fields));
    }

    /// A response head on stream `id`, its body (or trailers) to follow, as a frame.
    fn head(out: &mut Vec<u8>, id: u32, status: StatusCode, fields: &[(&'static str, &str)]) {
        frame::write(
            out,
            kind::HEADERS,
            flag::END_HEADERS,
            id,
            &block(status, fields),
        );
    }

    /// The reason `stream`'s response body fails with.
    async fn body_error(stream: &mut Stream) -> Reason {
        within("the body", poll_fn(|cx| stream.poll_data(cx)))
            .await
            .expect("an end where an error was due")
            .expect_err("data where an error was due")
            .reason
    }

    /// A response header block: `:status` then `fields`.
    fn block(status: StatusCode, fields: &[(&'static str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        hpack::encode_status(status, &mut block);
        block.extend(block_of(fields));
        block
    }

    /// A header block of `fields` (trailers).
    fn block_of(fields: &[(&'static str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in fields {
            hpack::encode_header(
                &header::HeaderName::from_static(name),
                value.as_bytes(),
                &mut block,
            );
        }
        block
    }

    #[tokio::test]
    async fn a_request_is_sent_and_a_split_padded_response_read() {
        let (sender, mut peer) = connect(&[]).await;
        let mut stream = open(&sender, &get("/a?b")).await;
        let (head, payload) = read_until(&mut peer, kind::HEADERS).await;
        assert_eq!(head.stream, 1);
        assert_eq!(head.flags, flag::END_HEADERS | flag::END_STREAM);
        let mut fields = Vec::new();
        Decoder::new(4096)
            .decode(&Bytes::from(payload), |f| fields.push(f))
            .unwrap();
        assert_eq!(
            fields[..4],
            [
                Field::Pseudo(Pseudo::Method, Bytes::from_static(b"GET")),
                Field::Pseudo(Pseudo::Scheme, Bytes::from_static(b"http")),
                Field::Pseudo(Pseudo::Authority, Bytes::from_static(b"destination")),
                Field::Pseudo(Pseudo::Path, Bytes::from_static(b"/a?b")),
            ]
        );
        // The head in a HEADERS and a CONTINUATION, the body in a padded DATA, then
        // trailers.
        let head_block = block(StatusCode::OK, &[("content-length", "5"), ("x-a", "b")]);
        let mut out = Vec::new();
        frame::write(&mut out, kind::HEADERS, 0, 1, &head_block[..3]);
        frame::write(
            &mut out,
            kind::CONTINUATION,
            flag::END_HEADERS,
            1,
            &head_block[3..],
        );
        frame::write(&mut out, kind::DATA, flag::PADDED, 1, b"\x03hello\0\0\0");
        let trailers = {
            let mut block = Vec::new();
            hpack::encode_header(
                &header::HeaderName::from_static("grpc-status"),
                b"0",
                &mut block,
            );
            block
        };
        frame::write(
            &mut out,
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            1,
            &trailers,
        );
        peer.write_all(&out).await.unwrap();
        let response = response_head(&mut stream).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-a"], "b");
        let data = poll_fn(|cx| stream.poll_data(cx)).await.unwrap().unwrap();
        assert_eq!(&data[..], b"hello");
        assert!(poll_fn(|cx| stream.poll_data(cx)).await.is_none());
        let trailers = poll_fn(|cx| stream.poll_trailers(cx))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        assert!(stream.is_end_stream());
    }

    #[tokio::test]
    async fn a_malformed_response_fails_its_stream_alone() {
        let (sender, mut peer) = connect(&[]).await;
        let mut first = open(&sender, &get("/1")).await;
        let mut out = Vec::new();
        whole(&mut out, 1, StatusCode::OK, &[("connection", "close")]);
        peer.write_all(&out).await.unwrap();
        let error = response_head(&mut first).await.unwrap_err();
        assert_eq!(error.reason, Reason::PROTOCOL_ERROR);
        let (head, payload) = read_until(&mut peer, kind::RST_STREAM).await;
        assert_eq!(
            (head.stream, payload),
            (1, Reason::PROTOCOL_ERROR.0.to_be_bytes().to_vec())
        );
        // The connection goes on.
        let mut second = open(&sender, &get("/2")).await;
        out.clear();
        whole(&mut out, 3, StatusCode::NO_CONTENT, &[]);
        peer.write_all(&out).await.unwrap();
        let response = response_head(&mut second).await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert!(!sender.is_closed());
    }

    /// `block` on stream `id` as a HEADERS frame and CONTINUATION frames of 16 KiB.
    fn split_block(out: &mut Vec<u8>, id: u32, end_stream: bool, block: &[u8]) {
        let pieces: Vec<&[u8]> = block.chunks(16 * 1024).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let mut flags = if i + 1 == pieces.len() {
                flag::END_HEADERS
            } else {
                0
            };
            if i == 0 && end_stream {
                flags |= flag::END_STREAM;
            }
            let kind = if i == 0 {
                kind::HEADERS
            } else {
                kind::CONTINUATION
            };
            frame::write(out, kind, flags, id, piece);
        }
    }

    /// The client says how large a header list it takes (`SETTINGS_MAX_HEADER_LIST_SIZE`,
    /// 64 KiB), and holds a response to it: a head, and its trailers apart, within it
    /// are taken; trailers over it fail their stream alone (`PROTOCOL_ERROR`).
    #[tokio::test]
    async fn header_lists_are_held_to_64_kib_each() {
        let (sender, mut peer) = connect(&[]).await;
        let (_, settings) = read_until(&mut peer, kind::SETTINGS).await;
        let list_size = settings
            .chunks(6)
            .find(|s| u16::from_be_bytes([s[0], s[1]]) == setting::MAX_HEADER_LIST_SIZE)
            .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
        assert_eq!(list_size, Some(64 * 1024));
        let big = "v".repeat(60_000);
        let mut within_limit = open(&sender, &get("/1")).await;
        let mut over = open(&sender, &get("/3")).await;
        let mut out = Vec::new();
        split_block(&mut out, 1, false, &block(StatusCode::OK, &[("x-a", &big)]));
        split_block(&mut out, 1, true, &block_of(&[("x-t", &big)]));
        head(&mut out, 3, StatusCode::OK, &[]);
        // 60 035 and 6 035 bytes as the list counts them.
        let more = "u".repeat(6_000);
        split_block(
            &mut out,
            3,
            true,
            &block_of(&[("x-t", &big), ("x-u", &more)]),
        );
        peer.write_all(&out).await.unwrap();
        let response = response_head(&mut within_limit).await.unwrap();
        assert_eq!(response.headers()["x-a"].len(), 60_000);
        let trailers = within("the trailers", poll_fn(|cx| within_limit.poll_trailers(cx)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(trailers["x-t"].len(), 60_000);
        response_head(&mut over).await.unwrap();
        assert_eq!(body_error(&mut over).await, Reason::PROTOCOL_ERROR);
        assert!(!sender.is_closed());
    }

    #[tokio::test]
    async fn data_past_the_content_length_fails_the_stream() {
        let (sender, mut peer) = connect(&[]).await;
        let mut stream = open(&sender, &get("/")).await;
        let mut out = Vec::new();
        head(&mut out, 1, StatusCode::OK, &[("content-length", "2")]);
        frame::write(&mut out, kind::DATA, flag::END_STREAM, 1, b"abc");
        peer.write_all(&out).await.unwrap();
        response_head(&mut stream).await.unwrap();
        assert_eq!(body_error(&mut stream).await, Reason::PROTOCOL_ERROR);
    }

    /// What h2 lets through and RFC 9110 / RFC 9113 §8.1 forbid (the `http2_responses`
    /// fuzz target found them): content on a `204`, pseudo-header fields in trailers.
    #[tokio::test]
    async fn no_content_after_a_204_and_no_pseudo_header_in_trailers() {
        let (sender, mut peer) = connect(&[]).await;
        let mut no_content = open(&sender, &get("/1")).await;
        let mut trailed = open(&sender, &get("/3")).await;
        let mut out = Vec::new();
        head(&mut out, 1, StatusCode::NO_CONTENT, &[]);
        frame::write(&mut out, kind::DATA, flag::END_STREAM, 1, b"x");
        head(&mut out, 3, StatusCode::OK, &[]);
        whole(&mut out, 3, StatusCode::OK, &[]);
        peer.write_all(&out).await.unwrap();
        for stream in [&mut no_content, &mut trailed] {
            response_head(stream).await.unwrap();
        }
        assert_eq!(body_error(&mut no_content).await, Reason::PROTOCOL_ERROR);
        assert_eq!(body_error(&mut trailed).await, Reason::PROTOCOL_ERROR);
    }

    /// A `204` or `304` ends with its header section (RFC 9110 §15.3.5, §15.4.5):
    /// trailers after one fail its stream. Its `content-length` describes no content
    /// (RFC 9113 §8.1.1): a `304` ending on an empty DATA frame, a `99` in its
    /// `content-length`, is whole (h2 refuses it). The `http2_responses` fuzz target
    /// found the first: an empty trailer block after a `304`.
    #[tokio::test]
    async fn no_trailers_after_a_304_whose_length_is_no_content() {
        let (sender, mut peer) = connect(&[]).await;
        let mut trailed = open(&sender, &get("/1")).await;
        let mut ended = open(&sender, &get("/3")).await;
        let mut out = Vec::new();
        let length = [("content-length", "99")];
        head(&mut out, 1, StatusCode::NOT_MODIFIED, &length);
        let flags = flag::END_HEADERS | flag::END_STREAM;
        frame::write(&mut out, kind::HEADERS, flags, 1, &[]);
        head(&mut out, 3, StatusCode::NOT_MODIFIED, &length);
        frame::write(&mut out, kind::DATA, flag::END_STREAM, 3, &[]);
        peer.write_all(&out).await.unwrap();
        for stream in [&mut trailed, &mut ended] {
            let response = response_head(stream).await.unwrap();
            assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        }
        assert_eq!(body_error(&mut trailed).await, Reason::PROTOCOL_ERROR);
        let mut body = Vec::new();
        while let Some(data) = within("the body", poll_fn(|cx| ended.poll_data(cx))).await {
            body.extend_from_slice(&data.expect("a whole body"));
        }
        assert!(body.is_empty());
    }

    #[tokio::test]
    async fn goaway_fails_the_streams_it_leaves_out_and_lets_the_others_finish() {
        let (sender, mut peer) = connect(&[]).await;
        let mut kept = open(&sender, &get("/1")).await;
        let mut left = open(&sender, &get("/3")).await;
        let mut out = Vec::new();
        frame::goaway(&mut out, 1, Reason::NO_ERROR);
        peer.write_all(&out).await.unwrap();
        let error = response_head(&mut left).await.unwrap_err();
        assert_eq!(error.reason, Reason::REFUSED_STREAM);
        assert!(sender.is_closed());
        out.clear();
        whole(&mut out, 1, StatusCode::OK, &[]);
        peer.write_all(&out).await.unwrap();
        let response = response_head(&mut kept).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    /// A destination that sends PINGs as fast as it can and reads none of the
    /// acknowledgements is stopped by TCP: the client reads no more of its frames while
    /// its own are left unread, instead of holding an acknowledgement for each.
    #[tokio::test]
    async fn a_destination_that_reads_nothing_cannot_make_the_client_hold_its_answers() {
        let (_sender, mut peer) = connect(&[]).await;
        let mut ping = Vec::new();
        frame::write(&mut ping, kind::PING, 0, 0, b"12345678");
        let batch = ping.repeat(4096);
        // What the kernel's buffers take (a few MB each way on 127.0.0.1) can be
        // written whatever the client does; 64 MB only if it reads them all.
        const LIMIT: usize = 64 << 20;
        let mut written = 0;
        while written < LIMIT {
            // Writes that make no progress for two seconds: the client stopped reading.
            match tokio::time::timeout(Duration::from_secs(2), peer.write_all(&batch)).await {
                Ok(result) => result.unwrap(),
                Err(_) => break,
            }
            written += batch.len();
        }
        assert!(
            written < LIMIT,
            "the client read {written} bytes of PINGs from a destination that read none of its answers"
        );
    }

    /// A destination that lowers its HPACK table under 4 096 bytes waits, from the
    /// client's acknowledgement, for a table size update at the start of the next
    /// header block (RFC 7541 §4.2): it comes once, first in that block (nghttp2 fails
    /// the connection with COMPRESSION_ERROR without it). One that raises the table
    /// gets none.
    #[tokio::test]
    async fn a_lowered_table_gets_its_size_update_once() {
        for (size, update) in [(0, true), (100, true), (8_192, false)] {
            let (sender, mut peer) = connect(&[(setting::HEADER_TABLE_SIZE, size)]).await;
            let mut blocks = Vec::new();
            let mut acked = false;
            for path in ["/1", "/2"] {
                let _stream = open(&sender, &get(path)).await;
                loop {
                    let (head, payload) = read_frame(&mut peer).await;
                    acked |= head.kind == kind::SETTINGS && head.flags == flag::ACK;
                    if head.kind == kind::HEADERS {
                        assert!(acked, "a block before the SETTINGS acknowledgement");
                        blocks.push(payload);
                        break;
                    }
                }
            }
            let mut decoder = Decoder::new(4096);
            decoder.set_limit(size as usize);
            for block in &blocks {
                decoder.decode(&Bytes::from(block.clone()), |_| {}).unwrap();
            }
            // `:method GET` is the static table's 2; the update to 0 is 0x20.
            let firsts: Vec<u8> = blocks.iter().map(|b| b[0]).collect();
            let expected = if update { [0x20, 0x82] } else { [0x82, 0x82] };
            assert_eq!(firsts, expected, "table size {size}");
        }
    }

    /// A destination that sends GOAWAY for an error and closes: the streams it kept
    /// fail with that error, not as if it had closed without one.
    #[tokio::test]
    async fn a_goaway_for_an_error_is_the_reason_the_streams_fail() {
        let (sender, mut peer) = connect(&[]).await;
        let mut stream = open(&sender, &get("/")).await;
        read_until(&mut peer, kind::HEADERS).await;
        let mut out = Vec::new();
        frame::goaway(&mut out, 1, Reason::COMPRESSION_ERROR);
        peer.write_all(&out).await.unwrap();
        drop(peer);
        let error = response_head(&mut stream).await.unwrap_err();
        assert_eq!(error.reason, Reason::COMPRESSION_ERROR);
    }

    #[tokio::test]
    async fn a_second_settings_ack_ends_the_connection() {
        let (sender, mut peer) = connect(&[]).await;
        let mut stream = open(&sender, &get("/")).await;
        let mut out = Vec::new();
        // The ack of the preface's SETTINGS is due; a second one acknowledges nothing.
        for _ in 0..2 {
            frame::write(&mut out, kind::SETTINGS, flag::ACK, 0, &[]);
        }
        peer.write_all(&out).await.unwrap();
        let error = response_head(&mut stream).await.unwrap_err();
        assert_eq!(error.reason, Reason::PROTOCOL_ERROR);
        assert!(sender.is_closed());
    }

    #[tokio::test]
    async fn streams_over_the_limit_wait_for_one_to_end() {
        let (sender, mut peer) = connect(&[(setting::MAX_CONCURRENT_STREAMS, 1)]).await;
        let first = open(&sender, &get("/1")).await;
        let request = get("/2");
        let mut opening = Box::pin(poll_fn(|cx| sender.poll_open(cx, &request, true)));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), opening.as_mut())
                .await
                .is_err(),
            "a second stream opened past the limit"
        );
        drop(first);
        let (head, payload) = read_until(&mut peer, kind::RST_STREAM).await;
        assert_eq!(
            (head.stream, payload),
            (1, Reason::CANCEL.0.to_be_bytes().to_vec())
        );
        let second = within("the second stream", opening).await.unwrap();
        assert_eq!(second.id, 3);
    }

    /// A destination that answers whole before the request's body has come, then
    /// resets the stream with NO_ERROR (RFC 9113 §8.1): the answer stands, and no more
    /// of the body is sent.
    #[tokio::test]
    async fn an_early_answer_and_reset_no_error_stop_the_request_body() {
        let (sender, mut peer) = connect(&[]).await;
        let request = Request::post("http://destination/").body(()).unwrap();
        let mut stream = within(
            "a stream",
            poll_fn(|cx| sender.poll_open(cx, &request, false)),
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        whole(&mut out, 1, StatusCode::PAYLOAD_TOO_LARGE, &[]);
        frame::rst_stream(&mut out, 1, Reason::NO_ERROR);
        // A PING behind them: its answer says the client has read both.
        frame::write(&mut out, kind::PING, 0, 0, b"12345678");
        peer.write_all(&out).await.unwrap();
        let (head, payload) = read_until(&mut peer, kind::PING).await;
        assert_eq!((head.flags, &payload[..]), (flag::ACK, &b"12345678"[..]));
        let response = response_head(&mut stream).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let mut body = Bytes::from_static(b"more");
        let sent = within(
            "a send",
            poll_fn(|cx| stream.poll_send(cx, &mut body, false)),
        )
        .await
        .unwrap();
        assert!(!sent, "the body was still taken after RST_STREAM(NO_ERROR)");
        assert!(body.is_empty(), "the body's data was kept");
        assert!(poll_fn(|cx| stream.poll_data(cx)).await.is_none());
    }

    #[tokio::test]
    async fn the_request_body_waits_for_the_destinations_window() {
        let (sender, mut peer) = connect(&[(setting::INITIAL_WINDOW_SIZE, 4)]).await;
        let request = Request::post("http://destination/").body(()).unwrap();
        let mut stream = within(
            "a stream",
            poll_fn(|cx| sender.poll_open(cx, &request, false)),
        )
        .await
        .unwrap();
        let mut body = Bytes::from_static(b"0123456789");
        let mut sending = Box::pin(poll_fn(|cx| stream.poll_send(cx, &mut body, true)));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), sending.as_mut())
                .await
                .is_err(),
            "sent past the window"
        );
        let (head, payload) = read_until(&mut peer, kind::DATA).await;
        assert_eq!((head.flags, &payload[..]), (0, &b"0123"[..]));
        let mut out = Vec::new();
        frame::window_update(&mut out, 1, 100);
        peer.write_all(&out).await.unwrap();
        assert!(
            within("the rest", sending).await.unwrap(),
            "the body was stopped"
        );
        let (head, payload) = read_until(&mut peer, kind::DATA).await;
        assert_eq!(
            (head.flags, &payload[..]),
            (flag::END_STREAM, &b"456789"[..])
        );
    }
}
