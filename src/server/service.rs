//! Adapters between tower pipelines and hyper's `Service`.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower_service::Service;

use crate::body::ProxyBody;
use crate::request::{ConnectionInfo, ProxyResponse};

/// Serves a tower pipeline (`Service<Request<B>, Response = ProxyResponse>`) through
/// hyper: each request gets a clone of the pipeline (as hyper-util's
/// `TowerToHyperService` does) and the [`ProxyResponse`] becomes a plain response.
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
    S: Service<Request<B>, Response = ProxyResponse> + Clone,
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

impl<F, E> Future for IntoResponse<F>
where
    F: Future<Output = Result<ProxyResponse, E>>,
{
    type Output = Result<Response<ProxyBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(ready!(self.project().inner.poll(cx)).map(ProxyResponse::into_response))
    }
}

/// Puts the connection's [`ConnectionInfo`] into each request's extensions.
#[derive(Debug, Clone)]
pub(crate) struct WithConnectionInfo<S> {
    pub(crate) inner: S,
    pub(crate) info: ConnectionInfo,
}

impl<S, B> hyper::service::Service<Request<B>> for WithConnectionInfo<S>
where
    S: hyper::service::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut request: Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.info);
        self.inner.call(request)
    }
}
