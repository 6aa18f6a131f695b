//! Adapters between tower pipelines and hyper's `Service`.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_util::future::{CatchUnwind, FutureExt};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower_service::Service;

use super::idle::{Activity, Busy, ServedBody};
use crate::body::{Incoming, ProxyBody};
use crate::request::{ClientCertificate, ConnectionInfo};

/// Serves a tower pipeline through hyper: each request gets a clone of the pipeline (as
/// hyper-util's `TowerToHyperService` does). The pipeline answers with a
/// [`ProxyResponse`](crate::request::ProxyResponse) or, when tower-http layers wrap it (after a
/// `MapResponseLayer::new(ProxyResponse::into_response)`), with `Response<ProxyBody>`.
#[derive(Debug, Clone)]
pub struct ProxyService<S> {
    inner: S,
}

impl<S> ProxyService<S> {
    /// Serve `pipeline`.
    pub fn new(pipeline: S) -> Self {
        ProxyService { inner: pipeline }
    }
}

impl<S, B> hyper::service::Service<Request<B>> for ProxyService<S>
where
    S: Service<Request<B>> + Clone,
    S::Response: Into<Response<ProxyBody>>,
{
    type Response = Response<ProxyBody>;
    type Error = S::Error;
    type Future = IntoResponse<Oneshot<S, Request<B>>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        IntoResponse::new(Oneshot::new(self.inner.clone(), request))
    }
}

pin_project! {
    /// Maps a pipeline's `ProxyResponse` to its HTTP response.
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct IntoResponse<F> {
        #[pin]
        inner: F,
    }
}

impl<F> IntoResponse<F> {
    /// Map `inner`'s `ProxyResponse` to its HTTP response.
    pub fn new(inner: F) -> Self {
        IntoResponse { inner }
    }
}

impl<F, R, E> Future for IntoResponse<F>
where
    F: Future<Output = Result<R, E>>,
    R: Into<Response<ProxyBody>>,
{
    type Output = Result<Response<ProxyBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(ready!(self.project().inner.poll(cx)).map(Into::into))
    }
}

/// What the server wraps around every pipeline it serves through hyper (HTTP/2, and
/// HTTP/1.1 on hyper's engine; the native engine does the same in its connection
/// driver): makes the connection's [`ConnectionInfo`] [current](ConnectionInfo::current)
/// while it calls the pipeline and polls its future (no per-request allocation, unlike
/// an extensions insert), and turns a panic anywhere in the pipeline into a `500` for
/// that request alone (stage guards are released by the unwinding; the connection and
/// the server keep serving).
///
/// On HTTP/1.1 connections it also marks the connection busy from the request's head
/// until its response body has been sent (see [`idle`](super::idle)), and answers a
/// request without `Host` with 400; an HTTP/2 request past its [`FieldLimits`] with
/// 431.
#[derive(Debug, Clone)]
pub(crate) struct Served<S> {
    pub(crate) inner: S,
    pub(crate) info: ConnectionInfo,
    /// The client's certificate, put in each request's extensions.
    pub(crate) certificate: Option<ClientCertificate>,
    pub(crate) activity: Option<Arc<Activity>>,
    pub(crate) fields: FieldLimits,
    /// The server's count of upgraded connections, put in each request that may
    /// upgrade, where the server has a limit.
    pub(crate) upgrades: Option<super::counts::UpgradeLimit>,
}

/// The limits of an HTTP/2 request's fields that hyper's engine (its `h2`) does not
/// keep, kept here: how many regular fields, and how long a name or value may be (the
/// native engine keeps them as it decodes; on HTTP/1.1 hyper counts the fields itself).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldLimits {
    count: usize,
    length: Option<usize>,
}

impl FieldLimits {
    pub(crate) fn new(options: &super::ServerOptions) -> Self {
        FieldLimits {
            count: options.max_request_headers as usize,
            length: options.http2_max_header_field_size.map(|n| n as usize),
        }
    }

    /// Whether `request` (HTTP/2) is past them.
    fn refuse<B>(&self, request: &Request<B>) -> bool {
        let headers = request.headers();
        headers.len() > self.count
            || self.length.is_some_and(|max| {
                let uri = request.uri();
                uri.path_and_query().is_some_and(|p| p.as_str().len() > max)
                    || uri.authority().is_some_and(|a| a.as_str().len() > max)
                    || headers
                        .iter()
                        .any(|(name, value)| name.as_str().len().max(value.len()) > max)
            })
    }
}

impl<S, B> hyper::service::Service<Request<B>> for Served<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<ProxyBody>>,
    B: Into<Incoming>,
{
    type Response = Response<ServedBody>;
    type Error = S::Error;
    type Future = ServedFuture<S::Future>;

    fn call(&self, request: Request<B>) -> Self::Future {
        let busy = self.activity.as_ref().map(Activity::enter);
        // RFC 9112 section 3.2: an HTTP/1.1 request without `Host` gets 400 (two `Host`
        // lines are refused by routing, which reads them). hyper's connections only: the
        // native engine's parser refuses such a head itself.
        if request.version() == http::Version::HTTP_11
            && !request.headers().contains_key(http::header::HOST)
        {
            return ServedFuture::Refused {
                status: http::StatusCode::BAD_REQUEST,
                busy,
            };
        }
        if request.version() == http::Version::HTTP_2 && self.fields.refuse(&request) {
            tracing::debug!(remote = %self.info.remote, "request header fields past their limits; 431");
            return ServedFuture::Refused {
                status: http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                busy,
            };
        }
        let info = self.info;
        let mut request = request.map(|body| Into::<Incoming>::into(body).with_connection(info));
        if let Some(certificate) = &self.certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        // hyper gives a request that may upgrade (`Upgrade`, `CONNECT`) its `OnUpgrade`.
        if let Some(limit) = &self.upgrades {
            if request
                .extensions()
                .get::<hyper::upgrade::OnUpgrade>()
                .is_some()
            {
                request.extensions_mut().insert(limit.clone());
            }
        }
        let _current = info.enter();
        let _moment = crate::clock::Moment::open();
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.call(request))) {
            Ok(future) => ServedFuture::Running {
                inner: AssertUnwindSafe(future).catch_unwind(),
                info: self.info,
                busy,
            },
            Err(panic) => ServedFuture::Panicked {
                panic: Some(panic),
                busy,
            },
        }
    }
}

pin_project! {
    /// The future of [`Served`].
    #[project = ServedProj]
    pub(crate) enum ServedFuture<F> {
        Running {
            #[pin]
            inner: CatchUnwind<AssertUnwindSafe<F>>,
            info: ConnectionInfo,
            busy: Option<Busy>,
        },
        Panicked { panic: Option<Box<dyn Any + Send>>, busy: Option<Busy> },
        Refused { status: http::StatusCode, busy: Option<Busy> },
    }
}

impl<F, E> Future for ServedFuture<F>
where
    F: Future<Output = Result<Response<ProxyBody>, E>>,
{
    type Output = Result<Response<ServedBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (panic, busy) = match self.project() {
            ServedProj::Running { inner, info, busy } => {
                let polled = {
                    let _current = info.enter();
                    let _moment = crate::clock::Moment::open();
                    inner.poll(cx)
                };
                match ready!(polled) {
                    Ok(result) => {
                        let busy = busy.take();
                        return Poll::Ready(
                            result.map(|response| response.map(|b| ServedBody::new(b, busy))),
                        );
                    }
                    Err(panic) => (panic, busy.take()),
                }
            }
            ServedProj::Panicked { panic, busy } => {
                (panic.take().expect("polled after completion"), busy.take())
            }
            ServedProj::Refused { status, busy } => {
                let body = ServedBody::new(ProxyBody::empty(), busy.take());
                return Poll::Ready(Ok(status_response(*status).map(|_| body)));
            }
        };
        log_panic(&panic);
        Poll::Ready(Ok(internal_error().map(|body| ServedBody::new(body, busy))))
    }
}

/// A panic in a request's pipeline, on either engine: logged, and the request answered
/// with [`internal_error`]; the connection and the server keep serving (the stages'
/// guards were released by the unwinding).
pub(super) fn log_panic(panic: &Box<dyn Any + Send>) {
    tracing::error!(panic = %panic_message(panic), "the pipeline panicked; answering 500");
}

/// The answer to a request whose pipeline panicked.
pub(super) fn internal_error() -> Response<ProxyBody> {
    status_response(http::StatusCode::INTERNAL_SERVER_ERROR)
}

/// An empty response of `status`, answered by the server itself.
pub(super) fn status_response(status: http::StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::empty());
    *response.status_mut() = status;
    response
}

fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}
