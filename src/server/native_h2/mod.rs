//! fuseway's own HTTP/2 engine, server side (selected with
//! [`Http2Engine::Native`](super::Http2Engine)): one task per connection reads the
//! frames, decodes each request's header block into the `http` types, calls the
//! pipeline and polls every open stream's future and response body itself, in slots
//! taken from the worker's free slots (and given back while no stream is open), and
//! writes the frames of all of them through one buffer. No task, channel or lock per stream; a request body, when there is one, is
//! a queue the connection fills ([`body`]).
//!
//! What it does: the connection preface and SETTINGS (its own: the stream limit, 1 MiB
//! windows, the header list limit), HPACK ([`crate::http2::hpack`]), flow control both
//! ways (a stream's and the connection's window credited back as the pipeline reads
//! the request body; the response's DATA sent as the client's windows allow),
//! trailers both ways, `100 Continue` (an interim HEADERS) to a request with
//! `expect: 100-continue` once the pipeline first waits for its body, PING answered,
//! RST_STREAM both ways (a client's reset drops the stream's pipeline future: the
//! destination's request is cancelled), GOAWAY on shutdown (streams in flight finish)
//! and on protocol errors, the idle timeout (`http2_idle_timeout`), and the checks of
//! RFC 9113 §8 on each request (a malformed one is reset with PROTOCOL_ERROR, as h2
//! does).
//!
//! Keep-alive pings (`http2_keep_alive_interval`): after that long without a frame from
//! the client, a PING; no answer within `http2_keep_alive_timeout` closes the
//! connection. The minimum data rates (`min_request_body_data_rate`,
//! `min_response_data_rate`) are kept over the connection, as Kestrel keeps them for
//! HTTP/2 ([`Conn::poll_paces`]).
//!
//! Extended CONNECT (RFC 8441, WebSockets over HTTP/2) is offered: such a stream,
//! answered `2xx`, becomes a byte stream for the tunnel ([`tunnel`]). Priority is
//! ignored, as RFC 9113 allows.

mod body;
mod tunnel;

use std::future::{poll_fn, Future};
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body;
use pin_project_lite::pin_project;

pub(crate) use body::RecvBody;
pub(crate) use tunnel::{OnUpgrade, Upgraded};

use super::drain::Signal;
use super::native::{give_free, take_free, Io};
use super::pace::{BodyPace, WritePace};
use super::service::{internal_error, log_panic};
use super::{ServeService, ServerOptions};
use crate::body::{Incoming, ProxyBody};
use crate::http1::buffers;
use crate::http2::frame::{self, flag, kind, setting, Head, Reason};
use crate::http2::hpack::{self, Field, Pseudo};
use crate::http2::CONNECTION_SPECIFIC;
use crate::request::ConnectionInfo;

/// Buffered frames past which no more response body is taken before writing.
const WRITE_HIGH: usize = 64 * 1024;
/// Buffered frames past which the client's are not read until some are written: what a
/// client's frames make the server send (a PING's or SETTINGS' acknowledgement, a
/// RST_STREAM) is held to this, however fast it sends them without reading (the PING
/// and SETTINGS floods, CVE-2019-9512 and -9515). Above [`WRITE_HIGH`], so that
/// response bodies alone do not stop the reading.
const READ_PAUSE: usize = 2 * WRITE_HIGH;
/// The table size this endpoint's decoder allows (the default: no setting sent).
const TABLE_SIZE: usize = 4096;
/// How many more streams a client may reset before their answers end than it lets end
/// (the "rapid reset" of CVE-2023-44487: each such stream costs a request to the
/// destination, which the reset cancels, and frees its place at once for the next):
/// twice the stream limit, and 100 at least — a browser leaving a page cancels every
/// stream it has open, once. At that many, GOAWAY with ENHANCE_YOUR_CALM closes the
/// connection.
fn reset_limit(max_concurrent_streams: u32) -> i16 {
    max_concurrent_streams
        .saturating_mul(2)
        .clamp(100, i16::MAX as u32) as i16
}
/// Passes over the socket and the streams in one poll before the task yields.
const BUDGET: usize = 32;

/// Serve HTTP/2 on `io` (whose client is to send the connection preface first) until
/// the client closes, the connection idles past `http2_idle_timeout`, shutdown (the
/// streams in flight finish), or an error.
pub(crate) fn serve_connection<I, P>(
    io: I,
    pipeline: P,
    info: ConnectionInfo,
    options: Arc<ServerOptions>,
    drain: Signal,
) -> impl Future<Output = ()>
where
    I: Io,
    P: ServeService,
{
    let mut conn = Conn::new(io, pipeline, info, options, drain);
    crate::clock::InMoment::new(async move { poll_fn(|cx| conn.poll(cx)).await })
}

pin_project! {
    /// A stream's slot, kept for later streams once it ends.
    struct Slot<F> {
        #[pin]
        future: Option<F>,
        stream: Stream,
    }
}

#[derive(Default)]
struct Stream {
    /// 0: the slot is free.
    id: u32,
    /// The response body being sent.
    body: Option<ProxyBody>,
    /// Body bytes taken from it and not yet sent (the windows were closed).
    pending: Option<Bytes>,
    /// The body ends after `pending`.
    pending_end: bool,
    /// What may be sent on the stream (the client's window).
    send_window: i64,
    /// The request body's queue, when it has one.
    recv: Option<body::Sender>,
    /// The client is still sending (no END_STREAM yet).
    recv_open: bool,
    /// What the client may still send on the stream.
    recv_window: i64,
    /// Bytes read off the stream and not yet credited back to the client.
    credit: u32,
    /// What is left of the request's `content-length`.
    expect: Option<u64>,
    /// The request has `expect: 100-continue`, and neither a response nor any of its
    /// body has come: the client may be holding the body back until `100 Continue`,
    /// sent when the pipeline first waits for the body (Kestrel's rule).
    continue_due: bool,
    /// An extended CONNECT: where the upgraded stream goes once answered `2xx`, and
    /// what it reads.
    upgrade: Option<(tokio::sync::oneshot::Sender<Upgraded>, RecvBody)>,
    /// An upgraded stream's writes, sent as its DATA.
    outbox: Option<Arc<std::sync::Mutex<tunnel::Outbox>>>,
}

struct Conn<I, P: ServeService> {
    io: I,
    pipeline: P,
    info: ConnectionInfo,
    options: Arc<ServerOptions>,
    drain: Signal,
    read: BytesMut,
    write: Vec<u8>,
    /// How much of `write` is written.
    written: usize,
    decoder: hpack::Decoder,
    /// The size update the client's decoder may wait for.
    encoder: hpack::EncoderTable,
    /// How far the connection's opening (the preface, then the client's SETTINGS) has
    /// come.
    opening: Opening,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_window: u32,
    peer_max_frame: u32,
    /// What may be sent on the connection, and what the client may still send.
    send_window: i64,
    recv_window: i64,
    /// Bytes read and not yet credited back on the connection.
    credit: u32,
    slots: Vec<Pin<Box<Slot<P::Future>>>>,
    /// Streams in the slots.
    open: u32,
    /// The highest stream the client has opened.
    last_stream: u32,
    /// Streams the client reset before their answers ended, less the streams answered
    /// in full ([`reset_limit`]).
    resets_ahead: i16,
    /// A header block waiting for its CONTINUATION frames.
    partial: Option<Box<Partial>>,
    /// GOAWAY sent: no new streams; the connection ends when the open ones have.
    goaway: bool,
    /// A connection error: the connection ends once GOAWAY is written.
    closing: bool,
    /// The idle timeout is counting (no stream open).
    idle: bool,
    /// The last pass stopped taking response bodies with the write buffer full.
    full: bool,
    /// Keep-alive pings and the minimum rates' counts, once the connection needs them.
    timing: Option<Box<Timing>>,
}

/// What of a connection's opening has come (RFC 9113 §3.4): one byte, where two flags
/// made room for no other in the connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// Waiting for the client's preface.
    Preface,
    /// The preface has come; its first frame must be SETTINGS.
    Settings,
    /// Both have come.
    Open,
}

/// What a connection times, boxed and made only once it is needed (most connections
/// never need it): keep-alive pings, when they are on, and the minimum data rates'
/// counts ([`Conn::poll_paces`]).
#[derive(Default)]
struct Timing {
    keep_alive: Option<KeepAlive>,
    /// The last pass found a request body's reader waiting for the client's bytes.
    body_waits: bool,
    /// The minimum request body data rate, kept over the connection's request bodies
    /// together (as Kestrel does): their bytes, and the time any of their readers
    /// waited for the client while it could send.
    body_pace: BodyPace,
    /// The minimum response data rate: the time writes wait for the client.
    write_pace: WritePace,
}

/// Keep-alive pings: `sleep` runs to the next check, or to the ping's deadline.
struct KeepAlive {
    interval: std::time::Duration,
    timeout: std::time::Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// A frame came since the last check.
    heard: bool,
    /// A PING is out, unanswered.
    pinged: bool,
}

/// The opaque data of the keep-alive PING.
const PING: [u8; 8] = *b"fuseway!";

struct Partial {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

/// A connection error: GOAWAY with the reason, then close (RFC 9113 §5.4.1).
struct ConnError(Reason, &'static str);

impl<I: Io, P: ServeService> Conn<I, P> {
    fn new(
        io: I,
        pipeline: P,
        info: ConnectionInfo,
        options: Arc<ServerOptions>,
        drain: Signal,
    ) -> Self {
        let mut write = Vec::new();
        buffers::ready_to_write(&mut write);
        let (stream_window, connection_window) = windows(&options);
        let mut settings: smallvec::SmallVec<[(u16, u32); 7]> = smallvec::smallvec![
            (
                setting::MAX_CONCURRENT_STREAMS,
                options.max_concurrent_streams,
            ),
            (setting::INITIAL_WINDOW_SIZE, stream_window),
            (setting::MAX_HEADER_LIST_SIZE, options.max_header_list_size),
            (setting::ENABLE_PUSH, 0),
            (setting::ENABLE_CONNECT_PROTOCOL, 1),
        ];
        // Those at HTTP/2's defaults go unsaid.
        if options.http2_max_frame_size != frame::DEFAULT_MAX_FRAME {
            settings.push((setting::MAX_FRAME_SIZE, options.http2_max_frame_size));
        }
        if options.http2_header_table_size as usize != TABLE_SIZE {
            settings.push((setting::HEADER_TABLE_SIZE, options.http2_header_table_size));
        }
        frame::settings(&mut write, &settings);
        if connection_window > frame::DEFAULT_WINDOW {
            frame::window_update(&mut write, 0, connection_window - frame::DEFAULT_WINDOW);
        }
        let timing = options.http2_keep_alive_interval.map(|interval| {
            let keep_alive = KeepAlive {
                interval,
                timeout: options.http2_keep_alive_timeout,
                sleep: Box::pin(tokio::time::sleep(interval)),
                heard: false,
                pinged: false,
            };
            Box::new(Timing {
                keep_alive: Some(keep_alive),
                ..Timing::default()
            })
        });
        // A lower table applies once the client has acknowledged it.
        let decoder = hpack::Decoder::new(TABLE_SIZE.max(options.http2_header_table_size as usize));
        Conn {
            io,
            pipeline,
            info,
            options,
            drain,
            read: BytesMut::new(),
            write,
            written: 0,
            decoder,
            encoder: hpack::EncoderTable::Default,
            opening: Opening::Preface,
            peer_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            send_window: frame::DEFAULT_WINDOW.into(),
            recv_window: connection_window.into(),
            credit: 0,
            slots: Vec::new(),
            open: 0,
            last_stream: 0,
            resets_ahead: 0,
            partial: None,
            goaway: false,
            closing: false,
            idle: false,
            full: false,
            timing,
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..BUDGET {
            if !self.goaway && self.drain.poll_draining(cx) {
                self.go_away(Reason::NO_ERROR);
            }
            // A wait for the client's body bytes ends with each look at the socket.
            if let Some(timing) = &mut self.timing {
                timing.body_pace.resume_if_waiting();
            }
            let mut progress = false;
            // While the client leaves unread what its frames made, none more are read.
            let paused = self.write.len() - self.written >= READ_PAUSE;
            if !self.closing && !paused {
                match buffers::poll_read(&mut self.io, &mut self.read, cx) {
                    Poll::Ready(Ok(0)) => {
                        tracing::debug!(remote = %self.info.remote, "HTTP/2 client closed its connection");
                        return Poll::Ready(());
                    }
                    Poll::Ready(Ok(_)) => {
                        progress = true;
                        if let Err(ConnError(reason, why)) = self.on_bytes() {
                            tracing::debug!(remote = %self.info.remote, %reason, why, "HTTP/2 connection error");
                            self.go_away(reason);
                            self.closing = true;
                        }
                    }
                    Poll::Ready(Err(e)) => {
                        tracing::debug!(remote = %self.info.remote, error = %e, "HTTP/2 connection failed");
                        return Poll::Ready(());
                    }
                    Poll::Pending => {}
                }
            }
            if !self.closing {
                self.poll_streams(cx);
                self.send_credit(cx);
            }
            let flushed = match self.poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    if let Some(timing) = &mut self.timing {
                        timing.write_pace.written();
                    }
                    true
                }
                Poll::Ready(Err(e)) => {
                    tracing::debug!(remote = %self.info.remote, error = %e, "HTTP/2 connection failed");
                    return Poll::Ready(());
                }
                Poll::Pending => false,
            };
            if flushed && (self.closing || (self.goaway && self.open == 0)) {
                let _ = Pin::new(&mut self.io).poll_shutdown(cx);
                return Poll::Ready(());
            }
            // Another pass when bytes came, or when the buffer was full (of response
            // bodies, or past the point where reading stops) and is written.
            let again = progress || (flushed && (self.full || paused));
            if !again {
                if self.poll_keep_alive(cx) {
                    continue;
                }
                return self.poll_idle(cx);
            }
        }
        // Other tasks get their turn; a client that keeps the connection busy is
        // still held to the minimum rates.
        if self.open > 0 && self.poll_paces(cx).is_ready() {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Keep-alive pings: whether the connection has something to write or is to close
    /// (another pass is due).
    fn poll_keep_alive(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(ka) = self.timing.as_mut().and_then(|t| t.keep_alive.as_mut()) else {
            return false;
        };
        if ka.sleep.as_mut().poll(cx).is_pending() {
            return false;
        }
        let now = tokio::time::Instant::now();
        if ka.pinged {
            tracing::debug!(remote = %self.info.remote, "HTTP/2 client did not answer a keep-alive ping; closing");
            self.closing = true;
            return true;
        }
        if std::mem::take(&mut ka.heard) {
            ka.sleep.as_mut().reset(now + ka.interval);
            // Polled again to register for the new deadline.
            return ka.sleep.as_mut().poll(cx).is_ready();
        }
        ka.pinged = true;
        ka.sleep.as_mut().reset(now + ka.timeout);
        buffers::ready_to_write(&mut self.write);
        frame::write(&mut self.write, kind::PING, 0, 0, &PING);
        true
    }

    /// With no stream open, the idle timeout counts (from when the last one ended);
    /// a connection idle past it is sent GOAWAY and closed. Its buffers and stream
    /// slots go back to the worker's pools meanwhile. With streams open, the minimum
    /// data rates are kept ([`Conn::poll_paces`]).
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.open > 0 {
            self.idle = false;
            return self.poll_paces(cx);
        }
        if self.write.is_empty() {
            buffers::release_write(&mut self.write);
        }
        buffers::release_read(&mut self.read);
        // Every slot is free: back to the worker's, for the next stream of any of its
        // connections.
        for slot in self.slots.drain(..) {
            give_free::<Pin<Box<Slot<P::Future>>>>(slot);
        }
        let restart =
            (!std::mem::replace(&mut self.idle, true)).then_some(self.options.http2_idle_timeout);
        if self.drain.poll_deadline(cx, restart).is_ready() {
            tracing::debug!(remote = %self.info.remote, "HTTP/2 connection idle past its timeout; closing");
            self.go_away(Reason::NO_ERROR);
            // Written and closed on the next pass.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// The minimum data rates, over the connection (Kestrel's for HTTP/2): while
    /// request bodies' readers wait for a client that may send, the bodies must come at
    /// `min_request_body_data_rate` (past it: GOAWAY with INTERNAL_ERROR, and the
    /// connection closes); while writes wait for the client, it must take them at
    /// `min_response_data_rate` (past it: the connection closes). The connection's
    /// deadline wakes the task when a wait runs out.
    fn poll_paces(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let body_rate = self.options.min_request_body_data_rate.filter(|_| {
            self.timing.as_ref().is_some_and(|t| t.body_waits)
                && self.recv_window > 0
                && !self.closing
        });
        let pending = self.write.len() - self.written;
        let write_rate = self.options.min_response_data_rate.filter(|_| pending > 0);
        if body_rate.is_none() && write_rate.is_none() {
            return Poll::Pending;
        }
        let now = crate::clock::now();
        let timing = self.timing.get_or_insert_with(Box::default);
        let mut left: Option<std::time::Duration> = None;
        if let Some(rate) = body_rate {
            match timing.body_pace.wait(now, rate) {
                Some(wait) => left = Some(wait),
                None => {
                    std::hint::cold_path();
                    tracing::debug!(remote = %self.info.remote, "HTTP/2 request bodies came slower than the minimum data rate; closing");
                    self.go_away(Reason::INTERNAL_ERROR);
                    self.closing = true;
                    // Written and closed on the next pass.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        if let Some(rate) = write_rate {
            match timing.write_pace.wait(now, pending, rate) {
                Some(wait) => left = Some(left.map_or(wait, |l| l.min(wait))),
                None => {
                    std::hint::cold_path();
                    tracing::debug!(remote = %self.info.remote, "the HTTP/2 client took the responses slower than the minimum data rate; closing");
                    return Poll::Ready(());
                }
            }
        }
        if let Some(left) = left {
            let _ = self.drain.poll_deadline(cx, Some(left));
        }
        Poll::Pending
    }

    fn go_away(&mut self, reason: Reason) {
        if !self.goaway {
            self.goaway = true;
            buffers::ready_to_write(&mut self.write);
            frame::goaway(&mut self.write, self.last_stream, reason);
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.write.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.write[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.write.clear();
        self.written = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// The frames read so far, each handled in turn.
    fn on_bytes(&mut self) -> Result<(), ConnError> {
        // What the frames answer is written to the connection's buffer (given back to
        // the worker while the connection waits).
        buffers::ready_to_write(&mut self.write);
        if self.opening == Opening::Preface {
            if self.read.len() < frame::PREFACE.len() {
                return if frame::PREFACE.starts_with(&self.read) {
                    Ok(())
                } else {
                    Err(ConnError(Reason::PROTOCOL_ERROR, "no connection preface"))
                };
            }
            if &self.read[..frame::PREFACE.len()] != frame::PREFACE {
                return Err(ConnError(Reason::PROTOCOL_ERROR, "no connection preface"));
            }
            self.read.advance(frame::PREFACE.len());
            self.opening = Opening::Settings;
        }
        while self.read.len() >= frame::HEAD_LEN {
            let head = Head::parse(&self.read);
            if head.len > self.options.http2_max_frame_size {
                return Err(ConnError(
                    Reason::FRAME_SIZE_ERROR,
                    "frame larger than allowed",
                ));
            }
            let len = frame::HEAD_LEN + head.len as usize;
            if self.read.len() < len {
                self.read.reserve(len - self.read.len());
                break;
            }
            let payload = self.read.split_to(len).freeze().slice(frame::HEAD_LEN..);
            if self.opening == Opening::Settings {
                if head.kind != kind::SETTINGS || head.flags & flag::ACK != 0 {
                    return Err(ConnError(
                        Reason::PROTOCOL_ERROR,
                        "first frame not SETTINGS",
                    ));
                }
                self.opening = Opening::Open;
            }
            if let Some(ka) = self.timing.as_mut().and_then(|t| t.keep_alive.as_mut()) {
                ka.heard = true;
                if head.kind == kind::PING && head.flags & flag::ACK != 0 && payload[..] == PING {
                    ka.pinged = false;
                    ka.sleep
                        .as_mut()
                        .reset(tokio::time::Instant::now() + ka.interval);
                }
            }
            self.on_frame(head, payload)?;
            if self.closing {
                break;
            }
        }
        Ok(())
    }

    fn on_frame(&mut self, head: Head, payload: Bytes) -> Result<(), ConnError> {
        use ConnError as E;
        if let Some(partial) = &self.partial {
            if head.kind != kind::CONTINUATION || head.stream != partial.stream {
                return Err(E(Reason::PROTOCOL_ERROR, "header block not continued"));
            }
        }
        match head.kind {
            kind::DATA => self.on_data(head, payload),
            kind::HEADERS => {
                if head.stream == 0 {
                    return Err(E(Reason::PROTOCOL_ERROR, "HEADERS on stream 0"));
                }
                let range = frame::unpadded(&payload, head.flags)
                    .ok_or(E(Reason::PROTOCOL_ERROR, "padding past the frame"))?;
                let mut fragment = payload.slice(range);
                if head.flags & flag::PRIORITY != 0 {
                    if fragment.len() < 5 {
                        return Err(E(Reason::FRAME_SIZE_ERROR, "HEADERS too short"));
                    }
                    fragment.advance(5);
                }
                let end_stream = head.flags & flag::END_STREAM != 0;
                if head.flags & flag::END_HEADERS != 0 {
                    self.on_headers(head.stream, end_stream, fragment)
                } else {
                    self.partial = Some(Box::new(Partial {
                        stream: head.stream,
                        end_stream,
                        block: BytesMut::from(&fragment[..]),
                    }));
                    Ok(())
                }
            }
            kind::CONTINUATION => {
                let Some(partial) = &mut self.partial else {
                    return Err(E(Reason::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
                };
                partial.block.extend_from_slice(&payload);
                // A block this large is refused whatever it holds (RFC 9113 §10.5.1).
                if partial.block.len() > 2 * self.options.max_header_list_size as usize + 16_384 {
                    return Err(E(Reason::ENHANCE_YOUR_CALM, "header block too large"));
                }
                if head.flags & flag::END_HEADERS != 0 {
                    let partial = self.partial.take().expect("checked above");
                    self.on_headers(partial.stream, partial.end_stream, partial.block.freeze())?;
                }
                Ok(())
            }
            kind::PRIORITY => {
                if head.stream == 0 {
                    return Err(E(Reason::PROTOCOL_ERROR, "PRIORITY on stream 0"));
                }
                if payload.len() != 5 {
                    self.reset(head.stream, Reason::FRAME_SIZE_ERROR);
                }
                Ok(())
            }
            kind::RST_STREAM => {
                if payload.len() != 4 {
                    return Err(E(Reason::FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes"));
                }
                if head.stream == 0 || head.stream > self.last_stream {
                    return Err(E(Reason::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
                }
                if let Some(i) = self.find(head.stream) {
                    tracing::debug!(remote = %self.info.remote, stream = head.stream, "the client reset its stream; request cancelled");
                    self.free(i, "the client reset the stream");
                    self.resets_ahead = self.resets_ahead.saturating_add(1);
                    let limit = reset_limit(self.options.max_concurrent_streams);
                    if self.resets_ahead >= limit {
                        tracing::warn!(remote = %self.info.remote, "HTTP/2 client reset {limit} more streams before their answers than it let finish (rapid reset); connection closed");
                        return Err(E(Reason::ENHANCE_YOUR_CALM, "too many streams reset"));
                    }
                }
                Ok(())
            }
            kind::SETTINGS => self.on_settings(head, &payload),
            kind::PUSH_PROMISE => Err(E(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            kind::PING => {
                if head.stream != 0 {
                    return Err(E(Reason::PROTOCOL_ERROR, "PING on a stream"));
                }
                if payload.len() != 8 {
                    return Err(E(Reason::FRAME_SIZE_ERROR, "PING not 8 bytes"));
                }
                if head.flags & flag::ACK == 0 {
                    frame::write(&mut self.write, kind::PING, flag::ACK, 0, &payload);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if head.stream != 0 {
                    return Err(E(Reason::PROTOCOL_ERROR, "GOAWAY on a stream"));
                }
                // The last stream and the error code (RFC 9113 §6.8, §4.2).
                if payload.len() < 8 {
                    return Err(E(Reason::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes"));
                }
                // The client opens no more streams; those open finish.
                self.go_away(Reason::NO_ERROR);
                Ok(())
            }
            kind::WINDOW_UPDATE => self.on_window_update(head, &payload),
            // Unknown frame types are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    fn on_settings(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        use ConnError as E;
        if head.stream != 0 {
            return Err(E(Reason::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if head.flags & flag::ACK != 0 {
            return if payload.is_empty() {
                // This server's one SETTINGS frame is acknowledged.
                self.decoder
                    .set_limit(self.options.http2_header_table_size as usize);
                Ok(())
            } else {
                Err(E(Reason::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"))
            };
        }
        if !payload.len().is_multiple_of(6) {
            return Err(E(
                Reason::FRAME_SIZE_ERROR,
                "SETTINGS not in 6-byte settings",
            ));
        }
        for s in payload.chunks(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(E(Reason::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1"))
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if value > frame::MAX_WINDOW {
                        return Err(E(Reason::FLOW_CONTROL_ERROR, "initial window too large"));
                    }
                    let delta = i64::from(value) - i64::from(self.peer_window);
                    self.peer_window = value;
                    for slot in &mut self.slots {
                        let stream = slot.as_mut().project().stream;
                        if stream.id != 0 {
                            stream.send_window += delta;
                            if stream.send_window > frame::MAX_WINDOW.into() {
                                return Err(E(Reason::FLOW_CONTROL_ERROR, "window past 2^31-1"));
                            }
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..=(1 << 24) - 1).contains(&value) {
                        return Err(E(
                            Reason::PROTOCOL_ERROR,
                            "SETTINGS_MAX_FRAME_SIZE out of range",
                        ));
                    }
                    self.peer_max_frame = value;
                }
                // Said once this frame's ACK is written, below.
                setting::HEADER_TABLE_SIZE => self.encoder.peer_limit(value),
                // The others bound what a server sends that this one does not
                // (pushes) or are advisory.
                _ => {}
            }
        }
        frame::write(&mut self.write, kind::SETTINGS, flag::ACK, 0, &[]);
        // A larger window may let blocked bodies go on.
        self.full = true;
        Ok(())
    }

    fn on_window_update(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        use ConnError as E;
        if payload.len() != 4 {
            return Err(E(Reason::FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes"));
        }
        let increment = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
            & frame::MAX_WINDOW;
        if head.stream == 0 {
            if increment == 0 {
                return Err(E(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
            }
            self.send_window += i64::from(increment);
            if self.send_window > frame::MAX_WINDOW.into() {
                return Err(E(Reason::FLOW_CONTROL_ERROR, "window past 2^31-1"));
            }
            self.full = true;
            return Ok(());
        }
        let Some(i) = self.find(head.stream) else {
            if head.stream > self.last_stream {
                return Err(E(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
            }
            return Ok(());
        };
        let stream = self.slots[i].as_mut().project().stream;
        stream.send_window += i64::from(increment);
        if increment == 0 {
            self.reset(head.stream, Reason::PROTOCOL_ERROR);
        } else if stream.send_window > frame::MAX_WINDOW.into() {
            self.reset(head.stream, Reason::FLOW_CONTROL_ERROR);
        }
        self.full = true;
        Ok(())
    }

    fn on_data(&mut self, head: Head, payload: Bytes) -> Result<(), ConnError> {
        use ConnError as E;
        if head.stream == 0 {
            return Err(E(Reason::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let len = payload.len();
        if len as i64 > self.recv_window {
            return Err(E(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection's window",
            ));
        }
        self.recv_window -= len as i64;
        let range = frame::unpadded(&payload, head.flags)
            .ok_or(E(Reason::PROTOCOL_ERROR, "padding past the frame"))?;
        let Some(i) = self.find(head.stream) else {
            if head.stream > self.last_stream {
                return Err(E(Reason::PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            // A stream that has ended (or was reset): its bytes are credited back.
            self.credit += len as u32;
            return Ok(());
        };
        let stream = self.slots[i].as_mut().project().stream;
        if !stream.recv_open {
            self.credit += len as u32;
            self.reset(head.stream, Reason::STREAM_CLOSED);
            return Ok(());
        }
        if len as i64 > stream.recv_window {
            self.credit += len as u32;
            self.reset(head.stream, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        stream.recv_window -= len as i64;
        // The body is coming: no `100 Continue` is wanted any more.
        stream.continue_due = false;
        let data = payload.slice(range);
        // Padding is credited at once.
        let padding = (len - data.len()) as u32;
        stream.credit += padding;
        let mut unread = padding;
        let too_long = match &mut stream.expect {
            Some(left) if data.len() as u64 > *left => true,
            Some(left) => {
                *left -= data.len() as u64;
                false
            }
            None => false,
        };
        let end = head.flags & flag::END_STREAM != 0;
        let too_short = end && stream.expect.is_some_and(|left| left > 0);
        if too_long || too_short {
            self.credit += len as u32;
            self.reset_length_mismatch(i);
            return Ok(());
        }
        if let Some(recv) = &stream.recv {
            let n = data.len() as u32;
            if self.options.min_request_body_data_rate.is_some() {
                // Counted from the first byte (made here if no wait made it).
                let timing = self.timing.get_or_insert_with(Box::default);
                timing.body_pace.received(data.len());
            }
            if !data.is_empty() && !recv.push(data) {
                // Nobody reads it any more.
                unread += n;
            }
            if end {
                recv.end(None);
            }
        } else {
            unread += data.len() as u32;
        }
        self.credit += unread;
        if end {
            stream.recv_open = false;
        }
        Ok(())
    }

    fn on_headers(&mut self, id: u32, end_stream: bool, block: Bytes) -> Result<(), ConnError> {
        let mut fields = Fields::new(&self.options);
        self.decoder
            .decode(&block, |field| fields.add(field))
            .map_err(|e| ConnError(Reason::COMPRESSION_ERROR, e.0))?;
        if let Some(i) = self.find(id) {
            // Trailers.
            let stream = self.slots[i].as_mut().project().stream;
            if !stream.recv_open {
                self.reset(id, Reason::STREAM_CLOSED);
                return Ok(());
            }
            if !end_stream || fields.malformed.is_some() || fields.has_pseudo() {
                self.reset(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
            stream.recv_open = false;
            if stream.expect.is_some_and(|left| left > 0) {
                self.reset_length_mismatch(i);
                return Ok(());
            }
            if let Some(recv) = &stream.recv {
                if fields.too_large() {
                    // As a chunked HTTP/1.1 body's trailer section over its limit: the
                    // body fails (the exchange answered 400 if it has not begun).
                    tracing::debug!(remote = %self.info.remote, stream = id, "request trailers over the header list limit; the body fails");
                    recv.fail("request trailers over the header list limit");
                } else {
                    recv.end(Some(fields.headers));
                }
            }
            return Ok(());
        }
        if id <= self.last_stream {
            // A stream that has ended or was reset: frames the client sent before it
            // knew are ignored (RFC 9113 §5.1), once decoded (above) for the table.
            return Ok(());
        }
        if id.is_multiple_of(2) {
            return Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "a client stream with an even number",
            ));
        }
        self.last_stream = id;
        if self.goaway {
            // Past the GOAWAY's last stream: not processed, the client may retry it.
            frame::rst_stream(&mut self.write, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        if self.open >= self.options.max_concurrent_streams {
            frame::rst_stream(&mut self.write, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        if fields.too_large() {
            tracing::debug!(remote = %self.info.remote, stream = id, "request header list too large; 431");
            self.answer(id, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, end_stream);
            return Ok(());
        }
        let paced = self.options.min_request_body_data_rate.is_some();
        let request = match fields.into_request(end_stream, paced) {
            Ok(request) => request,
            Err(why) => {
                tracing::debug!(remote = %self.info.remote, stream = id, why, "malformed HTTP/2 request; stream reset");
                frame::rst_stream(&mut self.write, id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
        };
        let Made {
            request,
            recv,
            expect,
            expect_continue,
            upgrade,
        } = request;
        let upgrading = upgrade.is_some();
        let i = match self.slots.iter().position(|s| s.stream.id == 0) {
            Some(i) => i,
            None => {
                self.slots.push(take_free().unwrap_or_else(|| {
                    Box::pin(Slot {
                        future: None,
                        stream: Stream::default(),
                    })
                }));
                self.slots.len() - 1
            }
        };
        self.open += 1;
        self.idle = false;
        *self.slots[i].as_mut().project().stream = Stream {
            id,
            send_window: self.peer_window.into(),
            recv,
            recv_open: !end_stream,
            recv_window: windows(&self.options).0.into(),
            expect,
            continue_due: expect_continue,
            upgrade,
            ..Stream::default()
        };
        let mut request = request.map(|body| body.with_connection(self.info));
        if let Some(certificate) = super::tls::certificate_of(&self.io) {
            request.extensions_mut().insert(certificate.clone());
        }
        if let (true, Some(limit)) = (upgrading, self.options.upgrade_limit()) {
            request.extensions_mut().insert(limit.clone());
        }
        let _current = self.info.enter();
        let slot = self.slots[i].as_mut().project();
        let mut future = slot.future;
        let pipeline = &self.pipeline;
        let called = std::panic::catch_unwind(AssertUnwindSafe(|| {
            future.set(Some(pipeline.call(request)))
        }));
        if let Err(panic) = called {
            log_panic(&panic);
            self.respond(i, internal_error());
        }
        Ok(())
    }

    /// Answer a stream that never reached the pipeline with a bare status.
    fn answer(&mut self, id: u32, status: StatusCode, end_stream: bool) {
        frame::headers_with(
            &mut self.write,
            &mut self.encoder,
            id,
            true,
            self.peer_max_frame,
            |block| hpack::encode_status(status, block),
        );
        if !end_stream {
            // The rest of the request is not wanted (RFC 9113 §8.1).
            frame::rst_stream(&mut self.write, id, Reason::NO_ERROR);
        }
    }

    /// The request body of slot `i` does not match its `content-length` (RFC 9113
    /// §8.1.1): the body fails for the pipeline, the stream is reset.
    fn reset_length_mismatch(&mut self, i: usize) {
        let stream = &self.slots[i].stream;
        if let Some(recv) = &stream.recv {
            recv.fail("the request body does not match its content-length");
        }
        let id = stream.id;
        self.reset(id, Reason::PROTOCOL_ERROR);
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.slots.iter().position(|s| s.stream.id == id)
    }

    /// Reset the stream `id` (a stream error): RST_STREAM, and its slot freed.
    fn reset(&mut self, id: u32, reason: Reason) {
        tracing::debug!(remote = %self.info.remote, stream = id, %reason, "HTTP/2 stream reset");
        frame::rst_stream(&mut self.write, id, reason);
        if let Some(i) = self.find(id) {
            self.free(i, "the stream was reset");
        }
    }

    /// End the stream in slot `i`: its future and body dropped, what its request body
    /// still held credited back to the connection.
    fn free(&mut self, i: usize, why: &'static str) {
        let mut slot = self.slots[i].as_mut().project();
        slot.future.set(None);
        let stream = std::mem::take(slot.stream);
        if let Some(recv) = &stream.recv {
            recv.fail(why);
            self.credit += recv.close() as u32;
        }
        if let Some(out) = &stream.outbox {
            tunnel::fail(out);
        }
        self.open -= 1;
    }

    /// Begin the response of the stream in slot `i`: its head written, its body put in
    /// the slot (or the stream ended, when it has none).
    fn respond(&mut self, i: usize, response: Response<ProxyBody>) {
        let (parts, body) = response.into_parts();
        // An extended CONNECT answered 2xx becomes a tunnel: no length (RFC 9110 §9.3.6).
        let tunnel = self.slots[i].stream.upgrade.is_some() && parts.status.is_success();
        let end = !tunnel && body.is_end_stream();
        let bodiless = parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED
            || tunnel;
        let length = (!bodiless).then(|| body.size_hint().exact()).flatten();
        let stream = self.slots[i].as_mut().project().stream;
        stream.continue_due = false;
        frame::headers_with(
            &mut self.write,
            &mut self.encoder,
            stream.id,
            end,
            self.peer_max_frame,
            |block| {
                hpack::encode_status(parts.status, block);
                let mut has_length = false;
                let mut has_date = false;
                for (name, value) in &parts.headers {
                    if connection_specific(name) || (tunnel && name == header::CONTENT_LENGTH) {
                        continue;
                    }
                    has_length |= name == header::CONTENT_LENGTH;
                    has_date |= name == header::DATE;
                    hpack::encode_header(name, value.as_bytes(), block);
                }
                if let (false, Some(n)) = (has_length, length) {
                    let digits = &mut [0u8; 20];
                    let text = crate::http1::decimal(n, digits);
                    hpack::encode_header(&header::CONTENT_LENGTH, text, block);
                }
                if !has_date {
                    crate::http1::with_date(|now| hpack::encode_header(&header::DATE, now, block));
                }
            },
        );
        buffers::Heads::Responses.release(parts.headers);
        if let Some((tx, recv)) = stream.upgrade.take() {
            if tunnel {
                // An extended CONNECT accepted: the stream is the tunnel's from now on.
                // Its body (the exchange's hand-off to the tunnel) is dropped once the
                // head is written.
                let (upgraded, out) = Upgraded::new(recv);
                stream.outbox = Some(out);
                drop(body);
                if tx.send(upgraded).is_err() {
                    let id = stream.id;
                    self.reset(id, Reason::CANCEL);
                }
                return;
            }
        }
        if end {
            self.finish(i);
        } else {
            stream.body = Some(body);
        }
    }

    /// The response body of slot `i` has ended with nothing left to send: an empty
    /// DATA frame ends the stream.
    fn end_with_data(&mut self, i: usize) {
        let id = self.slots[i].stream.id;
        frame::write(&mut self.write, kind::DATA, flag::END_STREAM, id, &[]);
        self.finish(i);
    }

    /// The response of slot `i` is sent: the stream ends (a request body still coming
    /// is refused with RST_STREAM NO_ERROR, RFC 9113 §8.1). Not one whole by its
    /// `content-length` with only its END_STREAM to come: the client is about to send
    /// it, and some (httpx) fail a request whose stream is reset under their END_STREAM,
    /// answer and all. The late frame finds no stream and is ignored.
    fn finish(&mut self, i: usize) {
        self.resets_ahead = self.resets_ahead.saturating_sub(1);
        let stream = self.slots[i].as_mut().project().stream;
        if stream.recv_open && stream.expect != Some(0) {
            frame::rst_stream(&mut self.write, stream.id, Reason::NO_ERROR);
        }
        self.free(i, "the response was sent before the request body");
    }

    /// Poll every open stream: its pipeline's future until the response, then its
    /// body while the windows and the write buffer allow.
    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        self.full = false;
        for i in 0..self.slots.len() {
            if self.slots[i].stream.id == 0 {
                continue;
            }
            let slot = self.slots[i].as_mut().project();
            if let Some(future) = slot.future.as_pin_mut() {
                let polled = {
                    let _current = self.info.enter();
                    std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx)))
                };
                let response = match polled {
                    Ok(Poll::Pending) => continue,
                    Ok(Poll::Ready(Ok(response))) => response,
                    Ok(Poll::Ready(Err(e))) => {
                        let e: Box<dyn std::error::Error + Send + Sync> = e.into();
                        tracing::debug!(remote = %self.info.remote, error = %e, "the service failed; stream reset");
                        let id = self.slots[i].stream.id;
                        self.reset(id, Reason::INTERNAL_ERROR);
                        continue;
                    }
                    Err(panic) => {
                        log_panic(&panic);
                        internal_error()
                    }
                };
                self.slots[i].as_mut().project().future.set(None);
                self.respond(i, response);
            }
            self.send_body(i, cx);
        }
    }

    /// Send what the body of slot `i` has, as the windows and the buffer allow.
    fn send_body(&mut self, i: usize, cx: &mut Context<'_>) {
        loop {
            let stream = self.slots[i].as_mut().project().stream;
            if stream.id == 0
                || (stream.body.is_none() && stream.pending.is_none() && stream.outbox.is_none())
            {
                return;
            }
            if self.write.len() - self.written >= WRITE_HIGH {
                self.full = true;
                return;
            }
            if let Some(data) = &mut stream.pending {
                let can = stream
                    .send_window
                    .min(self.send_window)
                    .min(i64::from(self.peer_max_frame));
                if can <= 0 && !data.is_empty() {
                    // The client's window opens with a WINDOW_UPDATE, read with the socket.
                    return;
                }
                let n = (can.max(0) as usize).min(data.len());
                let chunk = data.split_to(n);
                let last = data.is_empty() && stream.pending_end;
                let flags = if last { flag::END_STREAM } else { 0 };
                frame::write(&mut self.write, kind::DATA, flags, stream.id, &chunk);
                stream.send_window -= n as i64;
                self.send_window -= n as i64;
                if data.is_empty() {
                    stream.pending = None;
                }
                if last {
                    stream.body = None;
                    self.finish(i);
                    return;
                }
                continue;
            }
            let Some(body) = &mut stream.body else {
                // An upgraded stream: what the tunnel wrote.
                let Some(out) = &stream.outbox else {
                    return;
                };
                match tunnel::take(out, cx) {
                    tunnel::Taken::Data(data) => {
                        stream.pending = Some(data);
                        stream.pending_end = false;
                        continue;
                    }
                    tunnel::Taken::Empty => return,
                    tunnel::Taken::Closed => return self.end_with_data(i),
                }
            };
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => return,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        stream.pending_end = body.is_end_stream();
                        if data.is_empty() && !stream.pending_end {
                            continue;
                        }
                        stream.pending = Some(data);
                    }
                    Err(frame) => {
                        let trailers = frame.into_trailers().unwrap_or_default();
                        let id = stream.id;
                        frame::headers_with(
                            &mut self.write,
                            &mut self.encoder,
                            id,
                            true,
                            self.peer_max_frame,
                            |block| {
                                for (name, value) in &trailers {
                                    if !connection_specific(name) {
                                        hpack::encode_header(name, value.as_bytes(), block);
                                    }
                                }
                            },
                        );
                        self.finish(i);
                        return;
                    }
                },
                Poll::Ready(None) => return self.end_with_data(i),
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(remote = %self.info.remote, error = %e, "the response body failed; stream reset");
                    let id = stream.id;
                    self.reset(id, Reason::INTERNAL_ERROR);
                    return;
                }
            }
        }
    }

    /// Credit back what the pipelines have read of their request bodies: WINDOW_UPDATE
    /// for a stream or the connection once half its window is owed. And `100 Continue`
    /// to a client that expects it once its stream's pipeline waits for the body.
    fn send_credit(&mut self, cx: &mut Context<'_>) {
        let (stream_window, connection_window) = windows(&self.options);
        let mut waits = false;
        let mut bodies = 0;
        for slot in &mut self.slots {
            let stream = slot.as_mut().project().stream;
            let Some(recv) = &stream.recv else {
                continue;
            };
            let body::Credit {
                taken,
                gone,
                asked,
                waiting,
            } = recv.take_credit(cx);
            self.credit += taken as u32;
            if !stream.recv_open || gone {
                continue;
            }
            bodies += 1;
            // A reader waits for bytes the client may send (its window is open).
            waits |= waiting && stream.recv_window > 0;
            if stream.continue_due && asked {
                stream.continue_due = false;
                frame::headers_with(
                    &mut self.write,
                    &mut self.encoder,
                    stream.id,
                    false,
                    self.peer_max_frame,
                    |block| hpack::encode_status(StatusCode::CONTINUE, block),
                );
            }
            stream.credit += taken as u32;
            if stream.credit >= stream_window / 2 {
                frame::window_update(&mut self.write, stream.id, stream.credit);
                stream.recv_window += i64::from(stream.credit);
                stream.credit = 0;
            }
        }
        if self.credit >= connection_window / 2 {
            frame::window_update(&mut self.write, 0, self.credit);
            self.recv_window += i64::from(self.credit);
            self.credit = 0;
        }
        if waits || self.timing.is_some() {
            let timing = self.timing.get_or_insert_with(Box::default);
            timing.body_waits = waits;
            if bodies == 0 {
                // The bodies' pace is counted afresh when one next comes (Kestrel's too).
                timing.body_pace = BodyPace::default();
            }
        }
    }
}

/// Whether `name` is a field HTTP/2 does not carry ([`CONNECTION_SPECIFIC`]).
fn connection_specific(name: &HeaderName) -> bool {
    CONNECTION_SPECIFIC.contains(name)
}

/// A request's fields as they are decoded, checked as RFC 9113 §8.3 says.
struct Fields {
    method: Option<Bytes>,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Option<Bytes>,
    protocol: Option<Bytes>,
    headers: HeaderMap,
    /// The header list's size (RFC 9113 §6.5.2).
    size: usize,
    limit: usize,
    /// Regular fields, and how many may come.
    count: u32,
    max_count: u32,
    /// The longest name or value a field may have.
    max_field: usize,
    /// A field past `max_count` or `max_field`.
    over: bool,
    regular: bool,
    malformed: Option<&'static str>,
}

/// A request made from its fields.
struct Made {
    request: Request<Incoming>,
    /// Its body's queue.
    recv: Option<body::Sender>,
    /// Its `content-length`.
    expect: Option<u64>,
    /// It has a body to come and `expect: 100-continue`.
    expect_continue: bool,
    /// An extended CONNECT's way to its tunnel.
    upgrade: Option<(tokio::sync::oneshot::Sender<Upgraded>, RecvBody)>,
}

impl Fields {
    fn new(options: &ServerOptions) -> Fields {
        let mut headers = buffers::Heads::Requests.take(8);
        headers.clear();
        Fields {
            method: None,
            scheme: None,
            authority: None,
            path: None,
            protocol: None,
            headers,
            size: 0,
            limit: options.max_header_list_size as usize,
            count: 0,
            max_count: options.max_request_headers,
            max_field: options
                .http2_max_header_field_size
                .map_or(usize::MAX, |n| n as usize),
            over: false,
            regular: false,
            malformed: None,
        }
    }

    /// Past a limit of the header list: its size, its count of fields, a field's
    /// length. Answered 431.
    fn too_large(&self) -> bool {
        self.size > self.limit || self.over
    }

    fn add(&mut self, field: Field) {
        self.size += field.size();
        match field {
            Field::Pseudo(pseudo, value) => {
                if self.regular {
                    self.malformed = Some("a pseudo-header after a regular field");
                }
                if value.len() > self.max_field {
                    self.over = true;
                }
                let slot = match pseudo {
                    Pseudo::Method => &mut self.method,
                    Pseudo::Scheme => &mut self.scheme,
                    Pseudo::Authority => &mut self.authority,
                    Pseudo::Path => &mut self.path,
                    Pseudo::Protocol => &mut self.protocol,
                    Pseudo::Status => {
                        self.malformed = Some(":status in a request");
                        return;
                    }
                };
                if slot.replace(value).is_some() {
                    self.malformed = Some("a pseudo-header twice");
                }
            }
            Field::Header(name, value) => {
                self.regular = true;
                if crate::http2::forbidden_field(&name, &value) {
                    self.malformed = Some("a connection-specific field");
                }
                self.count += 1;
                if self.count > self.max_count
                    || name.as_str().len().max(value.len()) > self.max_field
                {
                    self.over = true;
                }
                // Past a limit the request is answered 431; the rest is not kept.
                if !self.too_large() {
                    self.headers.append(name, value);
                }
            }
            Field::Invalid { .. } => self.malformed = Some("an invalid field"),
        }
    }

    fn has_pseudo(&self) -> bool {
        self.method.is_some()
            || self.scheme.is_some()
            || self.authority.is_some()
            || self.path.is_some()
            || self.protocol.is_some()
    }

    /// The request (its body `paced`: see [`body::channel`]).
    fn into_request(self, end_stream: bool, paced: bool) -> Result<Made, &'static str> {
        if let Some(why) = self.malformed {
            return Err(why);
        }
        let method = self.method.ok_or("no :method")?;
        let method = Method::from_bytes(&method).map_err(|_| "an invalid :method")?;
        let protocol = match self.protocol {
            Some(_) if method != Method::CONNECT => {
                return Err(":protocol in a request not CONNECT")
            }
            Some(p) => Some(HeaderValue::from_maybe_shared(p).map_err(|_| "an invalid :protocol")?),
            None => None,
        };
        let mut uri = http::uri::Parts::default();
        if method == Method::CONNECT && protocol.is_none() {
            if self.scheme.is_some() || self.path.is_some() {
                return Err(":scheme or :path in a CONNECT");
            }
            let authority = self.authority.ok_or("a CONNECT without :authority")?;
            uri.authority =
                Some(Authority::from_maybe_shared(authority).map_err(|_| "an invalid :authority")?);
        } else {
            let scheme = self.scheme.ok_or("no :scheme")?;
            let path = self.path.ok_or("no :path")?;
            if path.is_empty() {
                return Err("an empty :path");
            }
            let scheme = Scheme::try_from(&scheme[..]).map_err(|_| "an invalid :scheme")?;
            // A URI has a scheme only with an authority (as h2 makes it, the scheme is
            // checked and left out when there is no `:authority`).
            if let Some(authority) = self.authority {
                uri.authority = Some(
                    Authority::from_maybe_shared(authority).map_err(|_| "an invalid :authority")?,
                );
                uri.scheme = Some(scheme);
            }
            uri.path_and_query =
                Some(PathAndQuery::from_maybe_shared(path).map_err(|_| "an invalid :path")?);
        }
        let uri = Uri::from_parts(uri).map_err(|_| "an invalid request target")?;
        let expect = crate::http2::content_length(&self.headers)?;
        if end_stream && expect.is_some_and(|n| n > 0) {
            return Err("a content-length and no body");
        }
        if method == Method::CONNECT && expect.is_some_and(|n| n > 0) {
            // A CONNECT has no content (RFC 9110 §9.3.6); hyper's engine resets it too.
            return Err("a CONNECT with a content-length");
        }
        let expect_continue = !end_stream
            && protocol.is_none()
            && self
                .headers
                .get(header::EXPECT)
                .is_some_and(|v| crate::http1::expects_continue(v.as_bytes()));
        let mut upgrade = None;
        let (body, recv) = if end_stream {
            (Incoming::empty(), None)
        } else if method == Method::CONNECT && protocol.is_none() {
            // A CONNECT has no content (RFC 9110 §9.3.6): DATA on its stream is a
            // tunnel's (RFC 9113 §8.5), and none is opened for one without `:protocol`
            // (it is forwarded as a request); its bytes are credited back and dropped,
            // as hyper's engine drops them.
            (Incoming::empty(), None)
        } else if let Some(protocol) = protocol {
            // The client's DATA is the tunnel's, not the request's body.
            let (sender, reader) = body::channel(None, false);
            let (on_upgrade, tx) = OnUpgrade::new(protocol);
            upgrade = Some((tx, reader, on_upgrade));
            (Incoming::empty(), Some(sender))
        } else {
            let (sender, reader) = body::channel(expect, paced);
            (Incoming::http2(reader), Some(sender))
        };
        let mut request = Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.version_mut() = Version::HTTP_2;
        *request.headers_mut() = self.headers;
        let upgrade = upgrade.map(|(tx, reader, on_upgrade)| {
            request.extensions_mut().insert(on_upgrade);
            (tx, reader)
        });
        Ok(Made {
            request,
            recv,
            expect,
            expect_continue,
            upgrade,
        })
    }
}

/// The windows this endpoint gives a client, as `options` say: each stream's for its
/// request body (`SETTINGS_INITIAL_WINDOW_SIZE`), and the connection's (which starts at
/// HTTP/2's default and only grows).
fn windows(options: &ServerOptions) -> (u32, u32) {
    (
        options.http2_initial_stream_window.min(frame::MAX_WINDOW),
        options
            .http2_initial_connection_window
            .clamp(frame::DEFAULT_WINDOW, frame::MAX_WINDOW),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle connection is its task and little else: the connection's state is kept
    /// small enough (the keep-alive timer and a header block awaiting CONTINUATION
    /// boxed, no encoding buffer of its own) that, with tokio's task header and
    /// trailer, the task is 512 bytes (tasks are rounded up to 128 bytes).
    #[test]
    fn the_connection_size() {
        let size =
            std::mem::size_of::<Conn<tokio::net::TcpStream, crate::pipeline::FusedDefault>>();
        println!("the native HTTP/2 connection: {size} bytes");
        assert!(size <= 376, "{size} bytes");
    }
}
