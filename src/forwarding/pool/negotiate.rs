//! Versions negotiated by ALPN.

use super::*;
use crate::forwarding::headers::Added;

pin_project! {
    /// A request on a new connection of a pool that negotiates the version: the
    /// connection offers `h2` and `http/1.1`, and once the destination has chosen, the
    /// request goes on as an HTTP/2 or HTTP/1.1 exchange on it (reshaped if it was
    /// shaped for the other version), and the pool remembers the choice.
    pub(super) struct Negotiating<B> {
        pool: Arc<Pool<B>>,
        connecting: Option<Connecting<Io>>,
        // The connection's place under the pool's limit, if it turns out HTTP/1.1.
        permit: Option<Permit>,
        request: Option<Request<B>>,
        then: Option<BoxExchange>,
        #[pin]
        timer: Deadline,
    }
}

impl<B: SendBody> Negotiating<B> {
    pub(super) fn start(pool: &Arc<Pool<B>>, request: Request<B>) -> BoxExchange {
        let permit = match &pool.limit {
            None => None,
            Some(limit) => match limit.try_open() {
                Some(permit) => Some(permit),
                // At the limit: wait for an HTTP/1.1 connection like the others.
                None => {
                    return pool.checkout_h1(
                        shape(request, UpstreamVersion::Http1, &pool.target),
                        &mut Added::default(),
                    )
                }
            },
        };
        Box::pin(Negotiating {
            pool: pool.clone(),
            connecting: Some(Box::pin(pool.connect_io())),
            permit,
            request: Some(request),
            then: None,
            timer: Deadline::new(),
        })
    }
}

impl<B: SendBody> Exchange for Negotiating<B> {
    fn poll_response(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResponseBody>, BoxError>> {
        let this = self.project();
        if let Some(connecting) = this.connecting.as_mut() {
            let io = std::task::ready!(connecting.as_mut().poll(cx));
            *this.connecting = None;
            let io = io?;
            let h2 = io.connected().is_negotiated_h2();
            let pool = &*this.pool;
            pool.learned
                .store(if h2 { CHOSE_H2 } else { CHOSE_H1 }, Ordering::Relaxed);
            let Some(request) = this.request.take() else {
                return Poll::Ready(Err("the exchange was polled after its response".into()));
            };
            *this.then = Some(if h2 {
                drop(this.permit.take());
                let connecting = h2_handshake(pool)(io);
                h2_on(
                    connecting,
                    shape(request, UpstreamVersion::Http2, &pool.target),
                )
            } else {
                let link = Link::Connecting(Box::pin(h1_link(io, this.permit.take(), pool.native)));
                pool.h1_on(
                    link,
                    shape(request, UpstreamVersion::Http1, &pool.target),
                    &mut Added::default(),
                )
            });
        }
        match this.then {
            Some(then) => then.as_mut().poll_response(cx),
            None => Poll::Ready(Err("the exchange was polled after its response".into())),
        }
    }

    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        if let Some(then) = self.project().then {
            then.as_mut().poll_connection(cx);
        }
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().then {
            Some(then) => then.as_mut().poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn body_ended(&self) -> bool {
        self.then.as_ref().is_none_or(|then| then.body_ended())
    }

    fn poll_deadline(self: Pin<&mut Self>, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let this = self.project();
        match this.then {
            Some(then) => then.as_mut().poll_deadline(cx, deadline),
            None => this.timer.poll_until(cx, deadline),
        }
    }

    fn finish(mut self: Pin<Box<Self>>, reusable: bool) {
        if let Some(then) = self.as_mut().project().then.take() {
            then.finish(reusable);
        }
    }
}

/// `request`, shaped for HTTP/1.1 or HTTP/2 (as its version says), reshaped for `to`
/// on a connection to `target` (`scheme://authority`): HTTP/2 takes the absolute URI
/// (a `Host` equal to the authority goes: it is `:authority`), HTTP/1.1 the origin form
/// and a `Host` (the authority, unless one is set). A body held back for
/// `Expect: 100-continue` goes at once on HTTP/2.
pub(super) fn shape<B>(mut request: Request<B>, to: UpstreamVersion, target: &Uri) -> Request<B> {
    let is_h2 = request.version() == http::Version::HTTP_2;
    match to {
        UpstreamVersion::Http2 if !is_h2 => {
            let mut parts = http::uri::Parts::default();
            parts.scheme = target.scheme().cloned();
            parts.authority = target.authority().cloned();
            parts.path_and_query = Some(
                request
                    .uri()
                    .path_and_query()
                    .cloned()
                    .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            );
            if let Ok(uri) = Uri::from_parts(parts) {
                *request.uri_mut() = uri;
            }
            let authority = target.authority().map_or("", |a| a.as_str());
            let headers = request.headers_mut();
            if headers
                .get(http::header::HOST)
                .is_some_and(|h| h.as_bytes() == authority.as_bytes())
            {
                headers.remove(http::header::HOST);
            }
            *request.version_mut() = http::Version::HTTP_2;
            if let Some(gate) = request
                .extensions()
                .get::<crate::forwarding::expect::ContinueGate>()
            {
                gate.0.continued();
            }
        }
        UpstreamVersion::Http1 | UpstreamVersion::Negotiate if is_h2 => {
            let origin = request
                .uri()
                .path_and_query()
                .cloned()
                .map_or_else(|| Uri::from_static("/"), Uri::from);
            *request.uri_mut() = origin;
            if !request.headers().contains_key(http::header::HOST) {
                if let Some(host) = target
                    .authority()
                    .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
                {
                    request.headers_mut().insert(http::header::HOST, host);
                }
            }
            *request.version_mut() = http::Version::HTTP_11;
        }
        _ => {}
    }
    request
}
