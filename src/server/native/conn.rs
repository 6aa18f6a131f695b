//! One connection's socket, buffers and codec state, and the steps of serving it.

use super::*;
use crate::server::linger;
use crate::server::pace::later;

/// What the connection keeps of a request while it is answered.
pub(super) struct Message {
    pub(super) keep_alive: bool,
    pub(super) accepts_trailers: bool,
    pub(super) head: bool,
    pub(super) version: Version,
    pub(super) connect: bool,
    /// Where the connection goes if the request is upgraded.
    /// Boxed: upgrades are rare, and the message lives in the connection's future.
    pub(super) upgrade: Option<Box<oneshot::Sender<UpgradedIo>>>,
}

/// A response's own `Content-Length`.
pub(super) fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    let value = headers.get(header::CONTENT_LENGTH)?;
    crate::http1::parse_length(value.as_bytes())
}

/// How a wait for a request head ended: `Head` holds what the caller's `start` made
/// of it (see [`Conn::poll_head`]).
pub(super) enum Waited<T> {
    Head(T),
    Closed,
    TimedOut,
    /// Waited [`PARK_AFTER`] with nothing in hand.
    Park,
    Refused(ParseError),
}

/// How far a connection's close has gone (see [`Conn::close`]).
#[derive(Default)]
struct Closing {
    /// Its write side is shut, and the lingering ends by then.
    until: Option<tokio::time::Instant>,
    /// The client may still send (the request body was not read through, or bytes came).
    waits: bool,
    /// Bytes came: the wait for the next one starts again.
    restart: bool,
}

/// The pace of a request body, as [`Conn::pump`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Paced {
    /// Nothing waits for the client (or no minimum rate is kept).
    Moving,
    /// The reader waits for the client's bytes: the body falls below the minimum rate
    /// unless some come within this.
    Waiting(Duration),
    /// The body came slower than the minimum rate: it is no longer read, and the
    /// connection closes after the response.
    TooSlow,
}

/// A response body being sent: `Framing::Length` counts the bytes still to come.
pub(crate) struct Sending {
    pub(super) framing: Framing,
    pub(super) trailers: bool,
    pub(super) done: bool,
    /// A write to the client is waiting: by when it must be done, at the minimum
    /// response rate.
    late: Option<tokio::time::Instant>,
}

pub(super) struct Conn<I> {
    pub(super) io: I,
    pub(super) read_buf: BytesMut,
    pub(super) out: Outgoing,
    pub(super) limits: Limits,
    /// Where request bodies are handed over: made for the first body that streams.
    pub(super) channel: Option<Arc<Channel>>,
    /// The request body still to be read from the socket.
    pub(super) body: Option<BodyDecoder>,
    /// `Expect: 100-continue` not answered yet.
    pub(super) continue_pending: bool,
    pub(super) read_eof: bool,
    /// The request body could not be read: the connection closes after the response.
    pub(super) body_failed: bool,
    /// The task is registered for the client's socket becoming readable: a read found
    /// it not ready (registering the task's waker) and none has read it since. See
    /// [`read_client`].
    pub(super) read_armed: bool,
}

impl<I: Io> Conn<I> {
    /// The request of `head`, its body read from this connection (the bytes already
    /// in hand, or through the channel).
    pub(super) fn start_request(
        &mut self,
        head: crate::http1::RequestHead,
        info: ConnectionInfo,
    ) -> (Request<Incoming>, Message) {
        self.continue_pending = false;
        let body = match head.body {
            crate::http1::BodyLength::Length(0) => Incoming::empty(),
            crate::http1::BodyLength::Length(n) if n <= self.read_buf.len() as u64 => {
                Incoming::full(self.read_buf.split_to(n as usize).freeze())
            }
            framing => {
                let (decoder, length) = match framing {
                    crate::http1::BodyLength::Length(n) => (BodyDecoder::length(n), Some(n)),
                    crate::http1::BodyLength::Chunked => (BodyDecoder::chunked(), None),
                };
                self.body = Some(decoder);
                self.continue_pending = head.expect_continue;
                let channel = self.channel.get_or_insert_with(Default::default);
                Incoming::native(channel.open(length))
            }
        };
        // The connection recorded in the body (`ConnectionInfo::of`).
        let mut request = head.request.map(|()| body.with_connection(info));
        let version = request.version();
        // Looked for only when `Connection` names `upgrade` (the parser saw its tokens).
        let upgrade = (head.connection_upgrade
            && crate::forwarding::upgrade::upgrade_protocol(request.headers(), version).is_some())
        .then(|| {
            let (handoff, tx) = Handoff::new();
            request.extensions_mut().insert(OnUpgrade(handoff));
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
    pub(super) fn start_response(
        &mut self,
        response: Response<ProxyBody>,
        message: &Message,
        draining: bool,
    ) -> (ProxyBody, Sending, bool, bool) {
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
            // A final answer before the `100 Continue`: the client may send its body
            // or not (RFC 9110 §10.1.1), so what comes next cannot be told apart from
            // its next request.
            && !self.continue_pending
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
        buffers::Heads::Responses.release(parts.headers);
        self.continue_pending = false;
        let sending = Sending {
            framing,
            trailers: message.accepts_trailers && framing == Framing::Chunked,
            done: bodiless,
            late: None,
        };
        (body, sending, keep_alive, upgrading)
    }

    pub(super) fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        read_client(&mut self.io, &mut self.read_buf, &mut self.read_armed, cx)
    }

    /// Wait for the next request head and hand it to `start` where it was parsed: each
    /// step a head (~200 bytes) is returned through is a copy of it. `idle`: how long
    /// the connection waits with nothing of a head; `header`: how long a head may take
    /// from its first byte (and not past the end of `idle`).
    pub(super) fn poll_head<T>(
        &mut self,
        cx: &mut Context<'_>,
        drain: &mut Signal,
        wait: &mut Wait,
        (idle, header): (Duration, Duration),
        start: &mut impl FnMut(&mut Self, crate::http1::RequestHead) -> T,
    ) -> Poll<Waited<T>> {
        let draining = drain.poll_draining(cx);
        loop {
            if !self.read_buf.is_empty() {
                match parse_request(&mut self.read_buf, &self.limits, |n| {
                    buffers::Heads::Requests.take(n)
                }) {
                    Ok(Some(head)) => return Poll::Ready(Waited::Head(start(self, head))),
                    Ok(None) => {}
                    Err(e) => {
                        std::hint::cold_path();
                        return Poll::Ready(Waited::Refused(e));
                    }
                }
            } else if draining {
                std::hint::cold_path();
                return Poll::Ready(Waited::Closed);
            }
            if self.read_eof {
                std::hint::cold_path();
                return Poll::Ready(Waited::Closed);
            }
            match self.poll_read_more(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                    std::hint::cold_path();
                    return Poll::Ready(Waited::Closed);
                }
                Poll::Ready(Ok(_)) => continue,
                Poll::Pending => {
                    // Nothing in hand: wait without a buffer.
                    buffers::release_read(&mut self.read_buf);
                    let nothing = self.read_buf.is_empty();
                    let restart = match *wait {
                        Wait::Starts { parks: true } if nothing && idle > PARK_AFTER => {
                            *wait = Wait::Parking;
                            Some(PARK_AFTER)
                        }
                        Wait::Starts { .. } if nothing => {
                            *wait = Wait::Idle;
                            Some(idle)
                        }
                        // Part of a head is in hand: its header read timeout runs, and
                        // ends by the end of the idle wait (a second of which, at most,
                        // has passed while parking).
                        Wait::Starts { .. } => {
                            *wait = Wait::Counting;
                            Some(header.min(idle))
                        }
                        Wait::Parking if !nothing => {
                            *wait = Wait::Counting;
                            Some(header.min(idle - PARK_AFTER))
                        }
                        Wait::Idle if !nothing => {
                            *wait = Wait::Counting;
                            drain.shorten(header);
                            None
                        }
                        Wait::Parking | Wait::Idle | Wait::Counting => None,
                    };
                    ready!(drain.poll_deadline(cx, restart));
                    std::hint::cold_path();
                    if *wait == Wait::Parking {
                        // Nothing came for the park time (bytes would have moved the
                        // wait on above).
                        return Poll::Ready(Waited::Park);
                    }
                    return Poll::Ready(Waited::TimedOut);
                }
            }
        }
    }

    /// Whether the client has closed its side (no request body left to read). Reads
    /// ahead (a pipelined request) up to the head limit.
    pub(super) fn peer_closed(&mut self, cx: &mut Context<'_>) -> bool {
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
    /// decode the next frame (reading the socket if needed) and hand it over. With a
    /// minimum `rate`, also times the waits for the client (see [`Paced`]).
    #[inline(always)]
    pub(super) fn pump(&mut self, cx: &mut Context<'_>, rate: &Option<MinDataRate>) -> Paced {
        // Most requests have no body left to move: a test, not a call.
        if self.continue_pending || self.body.is_some() {
            return self.pump_body(cx, rate);
        }
        Paced::Moving
    }

    #[inline(never)]
    fn pump_body(&mut self, cx: &mut Context<'_>, rate: &Option<MinDataRate>) -> Paced {
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
            return Paced::Moving;
        };
        let Some(channel) = &self.channel else {
            return Paced::Moving;
        };
        let mut state = channel.lock();
        state.driver_waits(cx);
        // A wait for the client's bytes ends with each look at the socket.
        let paced = rate.map(|rate| (rate, crate::clock::now()));
        if let Some((_, now)) = paced {
            state.pace.resume(now);
        }
        let mut waiting = Paced::Moving;
        while state.ready_for_frame() {
            match decoder.decode(&mut self.read_buf, self.limits.max_head()) {
                Ok(Decoded::Data(data)) => {
                    state.pace.received(data.len());
                    state.put_data(data);
                }
                Ok(Decoded::Trailers(trailers)) => state.put_end(Some(trailers)),
                Ok(Decoded::End) => state.put_end(None),
                Ok(Decoded::NeedMore) => {
                    match read_client(&mut self.io, &mut self.read_buf, &mut self.read_armed, cx) {
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
                        Poll::Pending => {
                            // The reader waits for the client.
                            if let Some((rate, now)) = paced {
                                waiting = match state.pace.wait(now, rate) {
                                    Some(left) => Paced::Waiting(left),
                                    None => {
                                        std::hint::cold_path();
                                        drop(state);
                                        self.body = None;
                                        self.body_failed = true;
                                        return Paced::TooSlow;
                                    }
                                };
                            }
                            break;
                        }
                    }
                }
                Err(e) => state.put_error(e.0),
            }
            if decoder.is_done() {
                // A body of known length ends with its last bytes, which leave no
                // `End` to decode: the reader is told here, or one that reads to the
                // end (an HTTP/2 destination's `END_STREAM`, a handler collecting the
                // body) would wait for it forever.
                state.end_after_data();
                break;
            }
        }
        if decoder.is_done() {
            self.body = None;
        } else if state.is_failed() {
            self.body = None;
            self.body_failed = true;
        }
        waiting
    }

    /// Send the response body (the head is in the write buffer), at `rate` at least
    /// (see [`Conn::poll_write_paced`]).
    pub(super) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        mut body: Pin<&mut ProxyBody>,
        sending: &mut Sending,
        rate: &Option<MinDataRate>,
        drain: &mut Signal,
    ) -> Poll<io::Result<()>> {
        loop {
            self.pump(cx, &None);
            if sending.done {
                ready!(self.poll_write_paced(cx, sending, rate, drain))?;
                return Poll::Ready(Ok(()));
            }
            if self.out.holds_data() || self.out.pending() >= WRITE_HIGH {
                ready!(self.poll_write_paced(cx, sending, rate, drain))?;
            }
            match body.as_mut().poll_frame(cx) {
                Poll::Pending => {
                    ready!(self.poll_write_paced(cx, sending, rate, drain))?;
                    // A client that goes away while the destination is silent ends
                    // the response (and so the exchange) now, not when the
                    // destination speaks again.
                    if self.peer_closed(cx) {
                        std::hint::cold_path();
                        return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(None) => self.finish_body(sending, None)?,
                Poll::Ready(Some(Err(e))) => {
                    std::hint::cold_path();
                    return Poll::Ready(Err(io::Error::other(format!("response body: {e}"))));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        // Queued behind a waiting write: its time at the rate is added.
                        if let (Some(late), Some(rate)) = (&mut sending.late, rate) {
                            *late = later(*late, rate.time_for(data.len() as u64));
                        }
                        self.queue_data(sending, data)?;
                        if body.is_end_stream() {
                            self.finish_body(sending, None)?;
                        }
                    }
                    Err(frame) => {
                        std::hint::cold_path();
                        let trailers = frame.into_trailers().ok();
                        self.finish_body(sending, trailers)?;
                    }
                },
            }
        }
    }

    pub(super) fn queue_data(&mut self, sending: &mut Sending, data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len();
        match sending.framing {
            Framing::Bodiless => return Ok(()),
            Framing::Length(ref mut left) => match left.checked_sub(len as u64) {
                Some(rest) => *left = rest,
                None => {
                    std::hint::cold_path();
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "response body longer than its Content-Length",
                    ));
                }
            },
            Framing::Chunked | Framing::UntilClose => {}
        }
        self.out
            .push_data(data, sending.framing == Framing::Chunked);
        Ok(())
    }

    pub(super) fn finish_body(
        &mut self,
        sending: &mut Sending,
        trailers: Option<http::HeaderMap>,
    ) -> io::Result<()> {
        sending.done = true;
        match sending.framing {
            Framing::Length(left) if left != 0 => {
                std::hint::cold_path();
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "response body shorter than its Content-Length",
                ))
            }
            Framing::Chunked => {
                let trailers = trailers.filter(|_| sending.trailers);
                self.out.push_last_chunk(trailers.as_ref());
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Write what is queued; flush.
    pub(super) fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.out.poll_write(&mut self.io, cx)
    }

    /// Write what is queued, at a minimum `rate` (Kestrel's `MinResponseDataRate`): a
    /// write that waits for the client must be done within the grace period or the
    /// time its bytes take at the rate, whichever is longer (more bytes queued behind
    /// it add theirs); the connection's deadline (`drain`) wakes the task for that
    /// moment. Past it, an error: the connection closes.
    #[inline(always)]
    fn poll_write_paced(
        &mut self,
        cx: &mut Context<'_>,
        sending: &mut Sending,
        rate: &Option<MinDataRate>,
        drain: &mut Signal,
    ) -> Poll<io::Result<()>> {
        match self.poll_write_out(cx) {
            Poll::Ready(written) => {
                sending.late = None;
                Poll::Ready(written)
            }
            Poll::Pending => match rate {
                Some(rate) => self.write_waits(cx, sending, rate, drain),
                None => Poll::Pending,
            },
        }
    }

    /// A write waits for the client (see [`Conn::poll_write_paced`]).
    #[inline(never)]
    fn write_waits(
        &mut self,
        cx: &mut Context<'_>,
        sending: &mut Sending,
        rate: &MinDataRate,
        drain: &mut Signal,
    ) -> Poll<io::Result<()>> {
        let now = crate::clock::now();
        let pending = self.out.pending() as u64;
        let late = *sending
            .late
            .get_or_insert_with(|| later(now, rate.allowance(pending)));
        if now >= late {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took the response slower than the minimum data rate",
            )));
        }
        let _ = drain.poll_deadline(cx, Some(late - now));
        Poll::Pending
    }

    /// Read and throw away the rest of a request body the pipeline left unread (at
    /// most [`DISCARD_MAX`] bytes, within `timeout` of when it starts waiting:
    /// `starts`). `false`: the connection must close.
    pub(super) fn poll_discard(
        &mut self,
        cx: &mut Context<'_>,
        drain: &mut Signal,
        starts: &mut bool,
        timeout: Duration,
    ) -> Poll<bool> {
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
                    match read_client(&mut self.io, &mut self.read_buf, &mut self.read_armed, cx) {
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

    /// Close the connection once its last answer is written, lingering ([`linger`]):
    /// its write side is shut, and what the client still sends is read and thrown away
    /// until it closes its side, shutdown starts, no byte has come for `timeout` (the
    /// header read timeout, at most [`linger::IDLE`]), or [`linger::ROUNDS`] times that
    /// has passed in all. It lingers only while the client sends, or when the request
    /// body was not read through (the rest may be on its way); else it closes at once.
    ///
    /// Not an `async fn`: the future holds the three borrows and its state, not copies
    /// of its arguments besides (it is a state of the connection's future).
    pub(super) fn close<'a>(
        &'a mut self,
        drain: &'a mut Signal,
        timeout: Duration,
    ) -> impl Future<Output = ()> + 'a {
        let mut closing = Closing::default();
        poll_fn(move |cx| self.poll_close(cx, drain, &mut closing, timeout))
    }

    fn poll_close(
        &mut self,
        cx: &mut Context<'_>,
        drain: &mut Signal,
        closing: &mut Closing,
        timeout: Duration,
    ) -> Poll<()> {
        let idle = timeout.min(linger::IDLE);
        let until = match closing.until {
            Some(until) => until,
            None => {
                let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
                closing.waits = self.body.is_some();
                closing.restart = true;
                *closing
                    .until
                    .insert(crate::clock::now() + idle * linger::ROUNDS)
            }
        };
        if !self.read_eof && !drain.poll_draining(cx) {
            loop {
                self.read_buf.clear();
                match self.poll_read_more(cx) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => break,
                    Poll::Ready(Ok(_)) => (closing.waits, closing.restart) = (true, true),
                    Poll::Pending => {
                        let left = until.saturating_duration_since(crate::clock::now());
                        if !closing.waits || left.is_zero() {
                            break;
                        }
                        let restart = std::mem::take(&mut closing.restart);
                        ready!(drain.poll_deadline(cx, restart.then(|| idle.min(left))));
                        break;
                    }
                }
            }
        }
        self.read_buf.clear();
        buffers::release_read(&mut self.read_buf);
        Poll::Ready(())
    }

    /// Queue the answer to a refused head (`400`, `414`, `431`), which closes the
    /// connection.
    pub(super) fn queue_error(&mut self, status: StatusCode) {
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

/// Read the client's socket into `buf`, as [`buffers::poll_read`] — or, when `armed`
/// and the socket is still not ready, pending without a read.
///
/// While the task is registered for the socket's readiness and the socket is not
/// ready, a read would only register the same waker again: tokio takes a socket's
/// waker only when it marks the socket ready, and only a read clears that mark. So the
/// wait for the next request head after a response (the task registered while the
/// destination answered, watching for the client's going away) checks the mark instead
/// of reading: no read buffer taken from the pool and given back, no lock on the
/// socket's wakers. Plain TCP sockets only (tokio's readiness is theirs). Every read of
/// the client's socket goes through here, so that `armed` stays true to it.
pub(super) fn read_client<I: Io>(
    io: &mut I,
    buf: &mut BytesMut,
    armed: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if *armed && not_ready(io) {
        return Poll::Pending;
    }
    let polled = buffers::poll_read(io, buf, cx);
    // Registered only if the read waited for the socket: one refused by tokio's
    // cooperative budget (none left) registered nothing with it.
    *armed = polled.is_pending()
        && (io as &dyn Any).is::<TcpStream>()
        && tokio::task::coop::has_budget_remaining();
    polled
}

/// Whether `io` is a TCP socket tokio has not marked readable since it was last read
/// (a check of the mark: no system call, no lock).
fn not_ready<I: Io>(io: &I) -> bool {
    (io as &dyn Any)
        .downcast_ref::<TcpStream>()
        .is_some_and(|tcp| {
            tcp.try_io(tokio::io::Interest::READABLE, || Ok(()))
                .is_err()
        })
}
