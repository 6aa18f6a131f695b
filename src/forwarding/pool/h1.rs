//! HTTP/1.1 connections, driven inline by the exchange that holds them, and kept
//! idle in their pool between requests.

use super::*;
use crate::forwarding::headers::Added;
use crate::forwarding::upgrade::connection_has;

/// An idle HTTP/1.1 connection in its pool, and when it expires.
pub(super) struct Idle<B> {
    pub(super) connection: Pin<Box<dyn H1Slot<B>>>,
    /// When it will have been idle for the pool's idle timeout (none: a timeout too
    /// long to reach). Kept as a time rather than as the start of the wait, so that
    /// taking it back is a comparison, not a subtraction.
    pub(super) expires: Option<Instant>,
}

impl<B> Idle<B> {
    /// `connection`, idle from `now` for at most `timeout`.
    pub(super) fn new(
        connection: Pin<Box<dyn H1Slot<B>>>,
        now: Instant,
        timeout: Duration,
    ) -> Self {
        Idle {
            connection,
            expires: now.checked_add(timeout),
        }
    }

    /// It has been idle for its timeout at `now`.
    pub(super) fn expired_at(&self, now: Instant) -> bool {
        self.expires.is_some_and(|expires| expires <= now)
    }
}

/// Close the connections of `idle` (oldest first) that have been idle for their timeout
/// at `now`. Nothing expired (the common case) costs one comparison: the oldest
/// expires first, but for one whose destination asked for a shorter wait (see
/// [`idle_hint`]), which goes when it is taken or when an older one expires.
pub(super) fn drop_expired<B>(idle: &mut Vec<Idle<B>>, now: Instant) {
    let expired = |i: &Idle<B>| i.expired_at(now);
    if idle.first().is_some_and(expired) {
        idle.retain(|i| !expired(i));
    }
}

/// How long to keep a connection idle whose destination answered `Connection:
/// keep-alive` with `Keep-Alive: timeout=N` (Node.js sends `timeout=5`, Apache httpd
/// `timeout=5, max=100`): a second less than it said (half a second of one), so that a
/// request does not go out on it just as the destination closes it — a `POST` would
/// fail with 502 there (see the keep-alive race). `timeout=0`: not at all. `None`: no
/// such field, or none that reads as a number of seconds.
pub(super) fn idle_hint(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("keep-alive")?.as_bytes();
    let seconds = value.split(|&b| b == b',').find_map(|param| {
        let (name, n) = param.trim_ascii().split_at_checked(b"timeout=".len())?;
        if !name.eq_ignore_ascii_case(b"timeout=") {
            return None;
        }
        std::str::from_utf8(n).ok()?.parse::<u32>().ok()
    })?;
    let said = u64::from(seconds) * 1000;
    Some(Duration::from_millis(said - said.min(1000).min(said / 2)))
}

impl<B: SendBody> Pool<B> {
    /// Open a connection: TCP (and TLS; ALPN `http/1.1` only, also in a pool that
    /// negotiates), then (hyper) the HTTP/1.1 handshake.
    pub(super) fn connect_h1(&self, permit: Option<Permit>) -> Connecting<Link<B>> {
        let io = self.connect_io_with(self.h1_connector.as_ref().unwrap_or(&self.connector));
        let native = self.native;
        Box::pin(async move { h1_link(io.await?, permit, native).await })
    }

    /// An HTTP/1.1 exchange for `request` on `link` (a new connection).
    pub(super) fn h1_on(
        self: &Arc<Self>,
        link: Link<B>,
        request: Request<B>,
        added: &mut Added,
    ) -> BoxExchange {
        if self.native {
            return native::Native::on_link(self, link, request, added);
        }
        H1::on_link(
            self,
            link,
            with_added(request, added),
            |sender: &mut http1::SendRequest<B>, request| sender.try_send_request(request),
        )
    }

    /// A new connection, or (at the pool's limit) a place in its queue.
    pub(super) fn new_link(&self) -> Link<B> {
        match &self.limit {
            None => Link::Connecting(self.connect_h1(None)),
            Some(limit) => match limit.try_open() {
                Some(permit) => Link::Connecting(self.connect_h1(Some(permit))),
                None => Link::Waiting { ticket: None },
            },
        }
    }

    /// For an exchange waiting at the pool's limit: an idle connection, or a new one
    /// once a connection has closed; until then the exchange is queued.
    pub(super) fn poll_link(
        &self,
        cx: &mut Context<'_>,
        ticket: &mut Option<Ticket>,
    ) -> Poll<Link<B>> {
        let Some(limit) = &self.limit else {
            return Poll::Ready(Link::Connecting(self.connect_h1(None)));
        };
        // Queue first, then look: a connection coming back in between wakes us.
        if let Some(permit) = limit.open_or_queue(cx.waker(), ticket) {
            return Poll::Ready(Link::Connecting(self.connect_h1(Some(permit))));
        }
        while let Some(mut idle) = self.take_idle() {
            let link = idle.as_mut().take_link();
            if link.is_open() {
                Ticket::leave(ticket);
                return Poll::Ready(link);
            }
        }
        Poll::Pending
    }

    /// The most recently used idle connection that is still fresh.
    pub(super) fn take_idle(&self) -> Option<Pin<Box<dyn H1Slot<B>>>> {
        let mut idle = self.idle.lock().expect("pool lock");
        let now = crate::clock::now();
        // Those below an expired one are older, and expired too but for the rare one
        // that was kept for less than the pool's timeout (`idle_hint`).
        while let Some(fresh) = idle.pop() {
            if !fresh.expired_at(now) {
                self.stats.set_idle(idle.len());
                self.stats.reuse();
                return Some(fresh.connection);
            }
        }
        self.stats.set_idle(0);
        None
    }

    /// Keep `connection` idle for the pool's idle timeout, or for `hint` (its
    /// destination's, [`idle_hint`]) when that is shorter.
    pub(super) fn put_idle(&self, connection: Pin<Box<dyn H1Slot<B>>>, hint: Option<Duration>) {
        let timeout = hint.map_or(self.keep.idle_timeout, |hint| {
            hint.min(self.keep.idle_timeout)
        });
        let now = crate::clock::now();
        let mut idle = self.idle.lock().expect("pool lock");
        drop_expired(&mut idle, now);
        if idle.len() < self.keep.max_idle && !timeout.is_zero() {
            idle.push(Idle::new(connection, now, timeout));
        }
        self.stats.set_idle(idle.len());
        drop(idle);
        if let Some(limit) = &self.limit {
            limit.wake_one();
        }
    }

    /// An HTTP/1.1 exchange on an idle connection, or on a new one (behind those
    /// queued at the pool's limit).
    pub(super) fn checkout_h1(
        self: &Arc<Self>,
        request: Request<B>,
        added: &mut Added,
    ) -> BoxExchange {
        let queued = self.limit.as_ref().is_some_and(|l| l.queued());
        match (!queued).then(|| self.take_idle()).flatten() {
            Some(mut connection) => {
                connection.as_mut().start(request, added);
                connection
            }
            None => self.h1_on(self.new_link(), request, added),
        }
    }

    /// A link for a request whose connection was found closed before it was sent.
    pub(super) fn relink_h1(&self) -> Link<B> {
        while let Some(mut idle) = self.take_idle() {
            let link = idle.as_mut().take_link();
            if link.is_open() {
                return link;
            }
        }
        self.new_link()
    }
}

/// The state of an HTTP/1.1 exchange's connection.
// The connection lives inline in its exchange's one allocation: boxing the native
// one (the largest) would cost a second allocation per connection for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Link<B> {
    Connecting(Connecting<Link<B>>),
    /// Waiting for a connection of a pool at its connection limit: `ticket` is the
    /// exchange's place in the pool's queue, once it has one.
    Waiting {
        ticket: Option<Ticket>,
    },
    Open {
        sender: http1::SendRequest<B>,
        /// The connection's future; `None` once it has completed (see [`drive`]).
        connection: Option<Driver>,
        /// The connection's place under its pool's limit, released when it closes.
        _permit: Option<Permit>,
    },
    /// A connection of the native engine.
    Native {
        conn: native::Conn,
        _permit: Option<Permit>,
    },
    None,
}

impl<B: SendBody> Link<B> {
    /// An open connection (of either engine).
    pub(super) fn is_open(&self) -> bool {
        matches!(self, Link::Open { .. } | Link::Native { .. })
    }

    /// Wait until the exchange has a connection: taken from the pool after a wait at
    /// its limit (`reused` then says so), or opened.
    #[inline(always)]
    pub(super) fn poll_open(
        &mut self,
        pool: &Weak<Pool<B>>,
        reused: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BoxError>> {
        // Most exchanges start on an idle connection: a test, not a call.
        if matches!(self, Link::Waiting { .. } | Link::Connecting(_)) {
            self.poll_opening(pool, reused, cx)
        } else {
            Poll::Ready(Ok(()))
        }
    }

    #[inline(never)]
    fn poll_opening(
        &mut self,
        pool: &Weak<Pool<B>>,
        reused: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BoxError>> {
        if let Link::Waiting { ticket } = self {
            let Some(pool) = pool.upgrade() else {
                return Poll::Ready(Err("the forwarder was dropped".into()));
            };
            let link = std::task::ready!(pool.poll_link(cx, ticket));
            *reused = link.is_open();
            *self = link;
        }
        if let Link::Connecting(connecting) = self {
            match std::task::ready!(connecting.as_mut().poll(cx)) {
                Ok(link) => *self = link,
                Err(e) => {
                    *self = Link::None;
                    return Poll::Ready(Err(e));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// What the pool holds of an idle HTTP/1.1 connection (an exchange between requests).
pub(super) trait H1Slot<B>: Exchange {
    /// Give it the next request, and the fields `added` beside its map.
    fn start(self: Pin<&mut Self>, request: Request<B>, added: &mut Added);
    /// Take its connection out (to relink another exchange).
    fn take_link(self: Pin<&mut Self>) -> Link<B>;
}

pin_project! {
    /// An HTTP/1.1 exchange, and the connection it drives: `F` is hyper's send future,
    /// kept in place so that a reused connection costs no allocation.
    pub(super) struct H1<B, F, S> {
        pub(super) pool: Weak<Pool<B>>,
        pub(super) link: Link<B>,
        pub(super) pending: Option<Request<B>>,
        #[pin]
        pub(super) in_flight: Option<F>,
        pub(super) send: S,
        // Whether the connection may be replaced if it turns out closed (not when it
        // was opened for this request).
        pub(super) reused: bool,
        pub(super) replay: Replay,
        // How long the destination said it keeps the connection idle ([`idle_hint`]).
        pub(super) idle_hint: Option<Duration>,
        #[pin]
        pub(super) timer: Deadline,
    }
}

impl<B, F, S> H1<B, F, S>
where
    B: SendBody,
    F: Future<Output = Result<Response<Incoming>, http1_error::TrySend<B>>> + Send + 'static,
    S: Fn(&mut http1::SendRequest<B>, Request<B>) -> F + Send + Copy + 'static,
{
    /// An exchange for `request` on `link`: a new connection, or a wait for one at
    /// the pool's limit (the one allocation a pooled connection costs).
    pub(super) fn on_link(
        pool: &Arc<Pool<B>>,
        link: Link<B>,
        request: Request<B>,
        send: S,
    ) -> BoxExchange {
        Box::pin(H1 {
            pool: Arc::downgrade(pool),
            link,
            pending: Some(request),
            in_flight: None,
            send,
            reused: false,
            replay: Replay::default(),
            idle_hint: None,
            timer: Deadline::new(),
        })
    }
}

pub(super) mod http1_error {
    pub(super) type TrySend<B> = hyper::client::conn::TrySendError<http::Request<B>>;
}

impl<B, F, S> Exchange for H1<B, F, S>
where
    B: SendBody,
    F: Future<Output = Result<Response<Incoming>, http1_error::TrySend<B>>> + Send + 'static,
    S: Fn(&mut http1::SendRequest<B>, Request<B>) -> F + Send + Copy + 'static,
{
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let mut this = self.project();
        loop {
            std::task::ready!(this.link.poll_open(this.pool, this.reused, cx))?;
            let Link::Open {
                sender, connection, ..
            } = this.link
            else {
                return Poll::Ready(Err("the exchange has no connection".into()));
            };
            // Drive the connection: it writes the request and reads the response. A
            // ready connection with a request still to send is driven after the send
            // (one dispatcher pass fewer).
            let mut failure = None;
            let send_first =
                this.in_flight.is_none() && this.pending.is_some() && sender.is_ready();
            if !send_first {
                if let Poll::Ready(error) = drive(connection, cx) {
                    failure = error;
                }
            }
            let unsent = match this.in_flight.as_mut().as_pin_mut() {
                Some(sending) => match sending.poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(response)) => {
                        this.in_flight.set(None);
                        this.replay.disarm();
                        // What the native client's parser notes as it reads the head.
                        let keep_alive = connection_has(response.headers(), "keep-alive");
                        *this.idle_hint =
                            keep_alive.then(|| idle_hint(response.headers())).flatten();
                        return Poll::Ready(Ok(response.map(ResponseBody::Hyper)));
                    }
                    Poll::Ready(Err(mut e)) => {
                        this.in_flight.set(None);
                        let replay = match e.message() {
                            None if *this.reused && closed_under(e.error()) => this.replay.take(),
                            _ => None,
                        };
                        this.replay.disarm();
                        match (e.take_message(), replay) {
                            (Some(request), _) if *this.reused => (request, false),
                            // Written, then the connection closed under it: the
                            // keep-alive race. Idempotent and body-less: send it again,
                            // on a new connection (the idle ones may be as stale).
                            (None, Some(replay)) => {
                                tracing::debug!(error = %e.error(), "reused connection closed under an idempotent request; sending it again");
                                (replay, true)
                            }
                            _ => return Poll::Ready(Err(e.into_error().into())),
                        }
                    }
                },
                None => {
                    let Some(request) = this.pending.take() else {
                        return Poll::Ready(Err(
                            "the exchange was polled after its response".into()
                        ));
                    };
                    match sender.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {
                            this.in_flight.set(Some((this.send)(sender, request)));
                            // Drive the connection again: it writes the request.
                            continue;
                        }
                        Poll::Pending if !*this.reused && connection.is_some() => {
                            *this.pending = Some(request);
                            return Poll::Pending;
                        }
                        // A reused connection is ready when it is handed out: not
                        // ready means closed.
                        Poll::Pending | Poll::Ready(Err(_)) if *this.reused => (request, false),
                        Poll::Pending | Poll::Ready(Err(_)) => {
                            let e: BoxError = match failure {
                                Some(e) => e.into(),
                                None => "the connection closed before the request was sent".into(),
                            };
                            return Poll::Ready(Err(e));
                        }
                    }
                }
            };
            // Not written (or replayable): send it on another connection.
            let (unsent, fresh) = unsent;
            *this.pending = Some(unsent);
            let Some(pool) = this.pool.upgrade() else {
                return Poll::Ready(Err("the forwarder was dropped".into()));
            };
            *this.link = if fresh {
                // The closed connection goes first: it frees its place under the limit.
                *this.link = Link::None;
                pool.new_link()
            } else {
                tracing::debug!("pooled connection closed before the request was sent; retrying");
                pool.relink_h1()
            };
            *this.reused = this.link.is_open();
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        let this = self.project();
        if let Link::Open { connection, .. } = this.link {
            let _ = drive(connection, cx);
        }
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(mut self: Pin<Box<Self>>, reusable: bool) {
        if !reusable || self.pending.is_some() || self.in_flight.is_some() {
            return;
        }
        let this = self.as_mut().project();
        let Link::Open {
            sender,
            connection: connection @ Some(_),
            ..
        } = this.link
        else {
            return;
        };
        // Let the connection settle after the response's end, polled with a waker
        // that wakes nothing: the last waker it keeps is then not this task's, and the
        // next request that takes it does not wake this task when it sends.
        let mut cx = Context::from_waker(Waker::noop());
        if drive(connection, &mut cx).is_ready() || !sender.is_ready() {
            return;
        }
        this.timer.release();
        if let Some(pool) = this.pool.upgrade() {
            *this.reused = true;
            let hint = *this.idle_hint;
            pool.put_idle(self, hint);
        }
    }
}

impl<B, F, S> H1Slot<B> for H1<B, F, S>
where
    B: SendBody,
    F: Future<Output = Result<Response<Incoming>, http1_error::TrySend<B>>> + Send + 'static,
    S: Fn(&mut http1::SendRequest<B>, Request<B>) -> F + Send + Copy + 'static,
{
    fn start(self: Pin<&mut Self>, request: Request<B>, added: &mut Added) {
        let request = with_added(request, added);
        let mut this = self.project();
        this.replay.arm(&request);
        *this.reused = true;
        // A connection handed out of the pool is ready for a request: it goes in now
        // (written when the exchange is first polled) rather than waiting in `pending`
        // — one move of the request less.
        match this.link {
            Link::Open { sender, .. } if sender.is_ready() => {
                this.in_flight.set(Some((this.send)(sender, request)));
            }
            _ => *this.pending = Some(request),
        }
    }

    fn take_link(self: Pin<&mut Self>) -> Link<B> {
        std::mem::replace(self.project().link, Link::None)
    }
}

/// Drive an HTTP/1.1 connection until it closes. Once its future has completed it is
/// dropped: hyper hands a request still queued on it (sent into it, never written —
/// the connection was found closed) back to its send future only then, as unsent, so
/// that the exchange can take it to another connection instead of waiting for ever.
/// Ready with the connection's end (its error, if it failed); a closed connection is
/// `Ready(None)`.
pub(super) fn drive(
    connection: &mut Option<Driver>,
    cx: &mut Context<'_>,
) -> Poll<Option<hyper::Error>> {
    let Some(future) = connection else {
        return Poll::Ready(None);
    };
    let end = std::task::ready!(future.as_mut().poll(cx));
    *connection = None;
    Poll::Ready(end.err())
}

/// Whether `error` says the connection closed (or was reset) before a response came:
/// not a response the destination got wrong.
pub(super) fn closed_under(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() || error.is_closed() || error.is_canceled() {
        return true;
    }
    std::error::Error::source(error)
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .is_some_and(closed_io)
}

/// Whether a socket error says the destination closed (or reset) the connection.
pub(super) fn closed_io(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
    )
}

/// An HTTP/1.1 connection on `io`: fuseway's codec (`native`) or hyper's handshake.
pub(super) async fn h1_link<B: SendBody>(
    io: Io,
    permit: Option<Permit>,
    native: bool,
) -> Result<Link<B>, BoxError> {
    if native {
        return Ok(Link::Native {
            conn: native::Conn::new(io),
            _permit: permit,
        });
    }
    let (sender, connection) = http1::Builder::new().handshake(io).await?;
    Ok(Link::Open {
        sender,
        connection: Some(Box::pin(connection)),
        _permit: permit,
    })
}
