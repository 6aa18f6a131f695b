use std::sync::Arc;
use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use super::future::ResponseFuture;
use super::Stage;
use crate::request::ProxyResponse;

/// A tower [`Layer`] that runs a [`Stage`] in front of the inner service.
#[derive(Debug)]
pub struct StageLayer<S> {
    stage: Arc<S>,
}

impl<S> Clone for StageLayer<S> {
    fn clone(&self) -> Self {
        StageLayer {
            stage: self.stage.clone(),
        }
    }
}

impl<S> StageLayer<S> {
    /// Wrap `stage`.
    pub fn new(stage: S) -> Self {
        StageLayer {
            stage: Arc::new(stage),
        }
    }

    /// Wrap a shared stage.
    pub fn from_arc(stage: Arc<S>) -> Self {
        StageLayer { stage }
    }
}

impl<S, Inner> Layer<Inner> for StageLayer<S> {
    type Service = StageService<S, Inner>;

    fn layer(&self, inner: Inner) -> Self::Service {
        StageService {
            stage: self.stage.clone(),
            inner,
        }
    }
}

/// The tower [`Service`] of a [`Stage`]: runs `on_request`, calls the inner service,
/// and runs `on_response` on its result.
#[derive(Debug)]
pub struct StageService<S, Inner> {
    stage: Arc<S>,
    inner: Inner,
}

impl<S, Inner: Clone> Clone for StageService<S, Inner> {
    fn clone(&self) -> Self {
        StageService {
            stage: self.stage.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl<S, Inner> StageService<S, Inner> {
    /// Run `stage` in front of `inner`.
    pub fn new(stage: S, inner: Inner) -> Self {
        StageService {
            stage: Arc::new(stage),
            inner,
        }
    }

    /// The inner service.
    pub fn inner(&self) -> &Inner {
        &self.inner
    }
}

impl<In, S, Inner> Service<In> for StageService<S, Inner>
where
    S: Stage<In>,
    Inner: Service<S::Out, Response = ProxyResponse>,
{
    type Response = ProxyResponse;
    type Error = Inner::Error;
    type Future = ResponseFuture<In, S, Inner::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: In) -> Self::Future {
        match self.stage.on_request(request) {
            Ok((out, state)) => {
                ResponseFuture::forwarding(self.inner.call(out), self.stage.clone(), state)
            }
            Err(response) => ResponseFuture::answered(response),
        }
    }
}
