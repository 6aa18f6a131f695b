//! HTTP/2: one shared connection per pool, driven by a task of its own; concurrent
//! first requests wait for the one being opened.

use futures_util::future::{FutureExt, Shared};

use super::*;

pin_project! {
    /// An HTTP/2 exchange on the pool's shared connection.
    pub(super) struct H2<B, F, S> {
        connecting: Option<Connecting<http2::SendRequest<B>>>,
        pending: Option<Request<B>>,
        #[pin]
        in_flight: Option<F>,
        send: S,
        #[pin]
        timer: Deadline,
    }
}

/// The pool's HTTP/2 connection.
pub(super) enum H2Conn<B> {
    /// None open (or the last one closed, or went idle).
    None,
    /// One being opened: every request that comes meanwhile waits for it, so concurrent
    /// first requests open one connection, not one each.
    Opening(Opening<B>),
    /// Open: requests share it. `id` tells its driver it is still the pool's;
    /// `last_used` starts its idle timeout.
    Open {
        sender: http2::SendRequest<B>,
        id: u64,
        last_used: Instant,
    },
}

impl<B> H2Conn<B> {
    /// Whether it is open or being opened (the pool is in use).
    pub(super) fn is_live(&self) -> bool {
        match self {
            H2Conn::None => false,
            H2Conn::Opening(_) => true,
            H2Conn::Open { sender, .. } => !sender.is_closed(),
        }
    }
}

/// A connection being opened, awaited by every request that wants it.
pub(super) type Opening<B> =
    Shared<Pin<Box<dyn Future<Output = Result<http2::SendRequest<B>, OpenError>> + Send>>>;

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
        } if !sender.is_closed() => {
            *last_used = Instant::now();
            return h2(Ok(sender.clone()), request);
        }
        H2Conn::Opening(opening) => return h2(Err(wait_for(opening.clone())), request),
        _ => {}
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
fn wait_for<B: SendBody>(opening: Opening<B>) -> Connecting<http2::SendRequest<B>> {
    Box::pin(async move { opening.await.map_err(|e| Box::new(e) as BoxError) })
}

/// An HTTP/2 exchange for `request` on `sender`, or on the connection `connecting`.
pub(super) fn h2<B: SendBody>(
    sender: Result<http2::SendRequest<B>, Connecting<http2::SendRequest<B>>>,
    request: Request<B>,
) -> BoxExchange {
    let send = |sender: &mut http2::SendRequest<B>, request| sender.send_request(request);
    let mut exchange = H2 {
        connecting: None,
        pending: None,
        in_flight: None,
        send,
        timer: Deadline::new(),
    };
    match sender {
        Ok(mut sender) => exchange.in_flight = Some(send(&mut sender, request)),
        Err(connecting) => {
            exchange.connecting = Some(connecting);
            exchange.pending = Some(request);
        }
    }
    Box::pin(exchange)
}

/// The HTTP/2 handshake on a connection to `pool`'s destination (with keep-alive pings
/// as the pool's settings say); the connection is driven by a task of its own and
/// becomes `pool`'s shared one. The task gives it up when it has been idle for the
/// pool's idle timeout: hyper closes it once the streams still open on it end.
pub(super) fn h2_handshake<B: SendBody>(
    pool: &Arc<Pool<B>>,
) -> impl FnOnce(Io) -> Connecting<http2::SendRequest<B>> {
    let weak = Arc::downgrade(pool);
    let keep = pool.keep;
    move |io| {
        Box::pin(async move {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            if let Some(interval) = keep.h2_ping_interval {
                builder
                    .keep_alive_interval(interval)
                    .keep_alive_timeout(keep.h2_ping_timeout)
                    .keep_alive_while_idle(true);
            }
            let (sender, connection) = builder.handshake(io).await?;
            let id = NEXT_H2_ID.fetch_add(1, Ordering::Relaxed);
            if let Some(pool) = weak.upgrade() {
                *pool.h2.lock().expect("pool lock") = H2Conn::Open {
                    sender: sender.clone(),
                    id,
                    last_used: Instant::now(),
                };
            }
            tokio::spawn(drive(connection, weak, id, keep.idle_timeout));
            Ok(sender)
        })
    }
}

/// Drive the HTTP/2 connection `id` of `pool` to its end, taking it out of the pool
/// once no request has taken it for `idle_timeout`.
async fn drive<B: SendBody>(
    connection: http2::Connection<Io, B, TokioExecutor>,
    pool: Weak<Pool<B>>,
    id: u64,
    idle_timeout: Duration,
) {
    let mut connection = std::pin::pin!(connection);
    let mut check = Some(Instant::now() + idle_timeout);
    loop {
        let ended = match check {
            Some(at) => tokio::select! {
                ended = connection.as_mut() => ended,
                () = tokio::time::sleep_until(at) => {
                    check = idle_check(&pool, id, idle_timeout);
                    continue;
                }
            },
            None => connection.as_mut().await,
        };
        if let Err(e) = ended {
            tracing::debug!(error = %e, "HTTP/2 connection to a destination ended");
        }
        return;
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

impl<B, F, S> Exchange for H2<B, F, S>
where
    B: SendBody,
    F: Future<Output = hyper::Result<Response<Incoming>>> + Send + 'static,
    S: Fn(&mut http2::SendRequest<B>, Request<B>) -> F + Send + 'static,
{
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let mut this = self.project();
        if let Some(connecting) = this.connecting.as_mut() {
            let mut sender = match connecting.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => {
                    *this.connecting = None;
                    result?
                }
            };
            let request = this.pending.take().expect("a request to send");
            this.in_flight.set(Some((this.send)(&mut sender, request)));
        }
        match this.in_flight.as_mut().as_pin_mut() {
            Some(sending) => sending
                .poll(cx)
                .map(|r| r.map(|r| r.map(ResponseBody::Hyper)).map_err(Into::into)),
            None => Poll::Ready(Err("the exchange was polled after its response".into())),
        }
    }

    fn poll_connection(self: Pin<&mut Self>, _cx: &mut Context<'_>) {}

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.project().timer.poll_until(cx, deadline)
    }

    fn finish(self: Pin<Box<Self>>, _reusable: bool) {}
}
