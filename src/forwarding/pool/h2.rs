//! HTTP/2: one shared connection per pool, driven by a task of its own.

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

/// An HTTP/2 exchange on the pool's shared connection, or on a new one (in a pool
/// that negotiates, a new connection negotiates again).
pub(super) fn h2_exchange<B: SendBody>(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
    let shared = pool
        .shared
        .lock()
        .expect("pool lock")
        .as_ref()
        .filter(|s| !s.is_closed())
        .cloned();
    match shared {
        Some(sender) => h2(Ok(sender), request),
        None if pool.key.version == UpstreamVersion::Negotiate => Negotiating::start(pool, request),
        None => {
            let io = pool.connect_io();
            let pool = pool.clone();
            h2(
                Err(Box::pin(async move { h2_handshake(pool, io.await?).await })),
                request,
            )
        }
    }
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

/// The HTTP/2 handshake on `io`; the connection is driven by a task of its own and
/// becomes `pool`'s shared one.
pub(super) async fn h2_handshake<B: SendBody>(
    pool: Arc<Pool<B>>,
    io: Io,
) -> Result<http2::SendRequest<B>, BoxError> {
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(io)
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "HTTP/2 connection to a destination ended");
        }
    });
    *pool.shared.lock().expect("pool lock") = Some(sender.clone());
    Ok(sender)
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
