//! HTTP/2: one shared connection per pool, driven by a task of its own; concurrent
//! first requests wait for the one being opened.
//!
//! The exchanges are on the `h2` crate directly (hyper's HTTP/2 client is h2 behind a
//! request channel, a response callback and a task per request body): a request is
//! sent on the shared connection from the exchange itself, its body is written by the
//! exchange while it waits for the response head and then by the response body's
//! reads (which drive the exchange), and the response body is read from h2's stream,
//! its flow-control window given back as it is read.

use ::h2::client::{ResponseFuture, SendRequest};
use ::h2::{RecvStream, SendStream};
use futures_util::future::{FutureExt, Shared};

use super::*;

/// What sends on an HTTP/2 connection.
pub(super) type H2Sender = SendRequest<Bytes>;

pin_project! {
    /// An HTTP/2 exchange on the pool's shared connection.
    pub(super) struct H2<B> {
        state: State<B>,
        // The request body still to be written.
        pipe: Option<Pipe<B>>,
        // The response body.
        recv: Option<RecvStream>,
        // Its data has all been read (then its trailers are next).
        data_ended: bool,
        ended: bool,
        #[pin]
        timer: Deadline,
    }
}

/// Where an HTTP/2 exchange is.
enum State<B> {
    /// Waiting for the connection being opened.
    Connecting(Connecting<H2Sender>, Option<Request<B>>),
    /// The connection open: the request goes once it can take another stream.
    Ready(H2Sender, Option<Request<B>>),
    /// Sent: waiting for the response head.
    Waiting(ResponseFuture),
    /// The response head has been handed out.
    Answered,
}

/// A request body being written to its stream, as the peer's flow control allows.
struct Pipe<B> {
    body: B,
    stream: SendStream<Bytes>,
    // Data read from the body, not yet sent (waiting for window).
    pending: Bytes,
}

impl<B: SendBody> Pipe<B> {
    /// Write what the body has and the stream takes; ready when the body has been sent
    /// to its end (or failed: the stream is reset).
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        loop {
            if !self.pending.is_empty() {
                self.stream.reserve_capacity(self.pending.len());
                let granted = match std::task::ready!(self.stream.poll_capacity(cx)) {
                    Some(Ok(n)) => n,
                    Some(Err(e)) => return Poll::Ready(Err(e.into())),
                    None => return Poll::Ready(Err("the destination closed the stream".into())),
                };
                let chunk = self.pending.split_to(granted.min(self.pending.len()));
                self.stream.send_data(chunk, false)?;
                continue;
            }
            match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => {
                    self.stream.send_data(Bytes::new(), true)?;
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => {
                    self.stream.send_reset(::h2::Reason::CANCEL);
                    return Poll::Ready(Err(e.into()));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.stream.send_trailers(trailers)?;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
            }
        }
    }
}

/// The pool's HTTP/2 connection.
pub(super) enum H2Conn {
    /// None open (or the last one closed, or went idle).
    None,
    /// One being opened: every request that comes meanwhile waits for it, so concurrent
    /// first requests open one connection, not one each.
    Opening(Opening),
    /// Open: requests share it. `id` tells its driver it is still the pool's;
    /// `last_used` starts its idle timeout.
    Open {
        sender: H2Sender,
        id: u64,
        last_used: Instant,
    },
}

impl H2Conn {
    /// Whether it is open or being opened (the pool is in use).
    pub(super) fn is_live(&mut self) -> bool {
        match self {
            H2Conn::None => false,
            H2Conn::Opening(_) => true,
            H2Conn::Open { sender, .. } => !is_closed(sender),
        }
    }
}

/// A connection being opened, awaited by every request that wants it.
pub(super) type Opening = Shared<Pin<Box<dyn Future<Output = Result<H2Sender, OpenError>> + Send>>>;

/// Whether the connection behind `sender` has closed (it takes no new stream). The
/// pool's own handle is asked: it never opens a stream, so it is never waiting for one
/// and the waker is never kept.
fn is_closed(sender: &mut H2Sender) -> bool {
    let waker = futures_util::task::noop_waker();
    matches!(
        sender.poll_ready(&mut Context::from_waker(&waker)),
        Poll::Ready(Err(_))
    )
}

/// Why opening an HTTP/2 connection failed, for every request that waited for it.
#[derive(Clone, Debug)]
pub(super) struct OpenError(Arc<BoxError>);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl StdError for OpenError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// The identity of each HTTP/2 connection a pool opens (see [`H2Conn::Open`]).
static NEXT_H2_ID: AtomicU64 = AtomicU64::new(0);

/// An HTTP/2 exchange on the pool's shared connection, on the one being opened, or on
/// a new one (in a pool that negotiates, a new connection negotiates again).
pub(super) fn h2_exchange<B: SendBody>(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
    let mut conn = pool.h2.lock().expect("pool lock");
    match &mut *conn {
        H2Conn::Open {
            sender, last_used, ..
        } => {
            if !is_closed(sender) {
                *last_used = Instant::now();
                return h2(Ok(sender.clone()), request);
            }
        }
        H2Conn::Opening(opening) => return h2(Err(wait_for(opening.clone())), request),
        H2Conn::None => {}
    }
    if pool.key.version == UpstreamVersion::Negotiate {
        drop(conn);
        return Negotiating::start(pool, request);
    }
    let io = pool.connect_io();
    let handshake = h2_handshake(pool);
    let pool = Arc::downgrade(pool);
    let open: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
        let opened = match io.await {
            Ok(io) => handshake(io).await,
            Err(e) => Err(e),
        };
        opened.map_err(|e| {
            // Failed: the next request tries again.
            if let Some(pool) = pool.upgrade() {
                let mut conn = pool.h2.lock().expect("pool lock");
                if matches!(*conn, H2Conn::Opening(_)) {
                    *conn = H2Conn::None;
                }
            }
            OpenError(Arc::new(e))
        })
    });
    let opening = open.shared();
    *conn = H2Conn::Opening(opening.clone());
    h2(Err(wait_for(opening)), request)
}

/// A request's wait for the connection being opened.
fn wait_for(opening: Opening) -> Connecting<H2Sender> {
    Box::pin(async move { opening.await.map_err(|e| Box::new(e) as BoxError) })
}

/// An HTTP/2 exchange for `request` on `sender`, or on the connection `connecting`.
pub(super) fn h2<B: SendBody>(
    sender: Result<H2Sender, Connecting<H2Sender>>,
    request: Request<B>,
) -> BoxExchange {
    let state = match sender {
        Ok(sender) => State::Ready(sender, Some(request)),
        Err(connecting) => State::Connecting(connecting, Some(request)),
    };
    Box::pin(H2 {
        state,
        pipe: None,
        recv: None,
        data_ended: false,
        ended: false,
        timer: Deadline::new(),
    })
}

/// The HTTP/2 handshake on a connection to `pool`'s destination (hyper's client
/// settings: 2 MiB stream and 5 MiB connection windows, 1 MiB send buffer); the
/// connection is driven by a task of its own ([`drive`]) and becomes `pool`'s shared one.
pub(super) fn h2_handshake<B: SendBody>(
    pool: &Arc<Pool<B>>,
) -> impl FnOnce(Io) -> Connecting<H2Sender> {
    let weak = Arc::downgrade(pool);
    let keep = pool.keep;
    move |io| {
        Box::pin(async move {
            let (sender, connection) = ::h2::client::Builder::new()
                .initial_window_size(2 * 1024 * 1024)
                .initial_connection_window_size(5 * 1024 * 1024)
                .max_send_buffer_size(1024 * 1024)
                .handshake::<_, Bytes>(hyper_util::rt::TokioIo::new(io))
                .await?;
            let id = NEXT_H2_ID.fetch_add(1, Ordering::Relaxed);
            if let Some(pool) = weak.upgrade() {
                *pool.h2.lock().expect("pool lock") = H2Conn::Open {
                    sender: sender.clone(),
                    id,
                    last_used: Instant::now(),
                };
            }
            tokio::spawn(drive(connection, weak, id, keep));
            Ok(sender)
        })
    }
}

/// Drive the HTTP/2 connection `id` of `pool` to its end: ping it as `keep` says
/// (closing it when an answer is overdue: its requests fail), and take it out of the
/// pool once no request has taken it for the idle timeout (h2 closes it when its last
/// stream ends).
async fn drive<B>(
    connection: ::h2::client::Connection<hyper_util::rt::TokioIo<Io>, Bytes>,
    pool: Weak<Pool<B>>,
    id: u64,
    keep: Keep,
) {
    let mut connection = std::pin::pin!(connection);
    let mut ping_pong = connection.ping_pong();
    let mut idle_at = Some(Instant::now() + keep.idle_timeout);
    let far = || Instant::now() + Duration::from_secs(86_400);
    // When the next ping goes, or (while one is out) when its answer is overdue.
    let mut ping_at = keep.h2_ping_interval.map(|i| Instant::now() + i);
    let mut awaiting_pong = false;
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "HTTP/2 connection to a destination ended");
                }
                return;
            }
            () = tokio::time::sleep_until(idle_at.unwrap_or_else(far)), if idle_at.is_some() => {
                idle_at = idle_check(&pool, id, keep.idle_timeout);
            }
            () = tokio::time::sleep_until(ping_at.unwrap_or_else(far)), if ping_at.is_some() => {
                if awaiting_pong {
                    tracing::debug!("an HTTP/2 destination did not answer a ping in time; closing its connection");
                    return;
                }
                let sent = ping_pong
                    .as_mut()
                    .map(|p| p.send_ping(::h2::Ping::opaque()).is_ok());
                if sent != Some(true) {
                    ping_at = None;
                    continue;
                }
                awaiting_pong = true;
                ping_at = Some(Instant::now() + keep.h2_ping_timeout);
            }
            pong = std::future::poll_fn(|cx| match ping_pong.as_mut() {
                Some(p) => p.poll_pong(cx),
                None => Poll::Pending,
            }), if awaiting_pong => {
                if pong.is_err() {
                    return;
                }
                awaiting_pong = false;
                ping_at = keep.h2_ping_interval.map(|i| Instant::now() + i);
            }
        }
    }
}

/// When the connection `id` is next to be checked for idleness: `None` once it is no
/// longer `pool`'s (taken out here when idle, replaced, or the pool is gone).
fn idle_check<B>(pool: &Weak<Pool<B>>, id: u64, idle_timeout: Duration) -> Option<Instant> {
    let pool = pool.upgrade()?;
    let mut conn = pool.h2.lock().expect("pool lock");
    let H2Conn::Open {
        id: open,
        last_used,
        ..
    } = &*conn
    else {
        return None;
    };
    if *open != id {
        return None;
    }
    let expires = *last_used + idle_timeout;
    if expires > Instant::now() {
        return Some(expires);
    }
    *conn = H2Conn::None;
    None
}

/// `request`'s head for h2: the fields HTTP/2 forbids (RFC 9113 section 8.2.2)
/// removed, as hyper's client does.
fn h2_head<B>(request: Request<B>) -> (Request<()>, B) {
    let (mut parts, body) = request.into_parts();
    let headers = &mut parts.headers;
    for name in [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
        http::HeaderName::from_static("keep-alive"),
        http::HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
    if headers
        .get(http::header::TE)
        .is_some_and(|te| te != "trailers")
    {
        headers.remove(http::header::TE);
    }
    (Request::from_parts(parts, ()), body)
}

impl<B: SendBody> H2<B> {
    /// Write the request body while the stream takes it; a body that fails resets the
    /// stream (the response then fails too).
    fn poll_pipe(pipe: &mut Option<Pipe<B>>, cx: &mut Context<'_>) {
        if let Some(writing) = pipe.as_mut() {
            if let Poll::Ready(result) = writing.poll_write(cx) {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "writing a request body to an HTTP/2 destination failed");
                }
                *pipe = None;
            }
        }
    }
}

impl<B: SendBody> Exchange for H2<B> {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let this = self.project();
        loop {
            match this.state {
                State::Connecting(connecting, request) => {
                    let sender = std::task::ready!(connecting.as_mut().poll(cx))?;
                    *this.state = State::Ready(sender, request.take());
                }
                State::Ready(sender, request) => {
                    std::task::ready!(sender.poll_ready(cx))?;
                    let Some(request) = request.take() else {
                        return Poll::Ready(Err(
                            "the exchange was polled after its response".into()
                        ));
                    };
                    let (head, body) = h2_head(request);
                    let end = body.is_end_stream();
                    let (response, stream) = sender.send_request(head, end)?;
                    if !end {
                        *this.pipe = Some(Pipe {
                            body,
                            stream,
                            pending: Bytes::new(),
                        });
                    }
                    *this.state = State::Waiting(response);
                }
                State::Waiting(response) => {
                    Self::poll_pipe(this.pipe, cx);
                    let response = std::task::ready!(Pin::new(response).poll(cx))?;
                    *this.state = State::Answered;
                    let (parts, recv) = response.into_parts();
                    let remaining = parts
                        .headers
                        .get(http::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok()?.parse().ok());
                    *this.ended = recv.is_end_stream();
                    let body = ResponseBody::Native {
                        remaining,
                        ended: *this.ended,
                    };
                    *this.recv = Some(recv);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                State::Answered => {
                    return Poll::Ready(Err("the exchange was polled after its response".into()))
                }
            }
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        Self::poll_pipe(self.project().pipe, cx);
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let Some(recv) = this.recv.as_mut() else {
            return Poll::Ready(None);
        };
        if !*this.data_ended {
            match std::task::ready!(recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = recv.flow_control().release_capacity(data.len());
                    *this.ended = recv.is_end_stream();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    *this.ended = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => *this.data_ended = true,
            }
        }
        let trailers = std::task::ready!(recv.poll_trailers(cx));
        *this.ended = true;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn body_ended(&self) -> bool {
        self.ended
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(self: Pin<Box<Self>>, _reusable: bool) {}
}
