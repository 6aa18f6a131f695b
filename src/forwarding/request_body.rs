//! The request body as sent to the destination: the client's body, cut at the route's
//! size limit, with client-side failures told apart from destination-side ones.

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

type BoxError = Box<dyn StdError + Send + Sync>;

/// The request body was larger than the route's `MaxRequestBodySize`.
#[derive(Debug)]
pub(crate) struct BodyTooLarge {
    pub(crate) limit: u64,
}

impl fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request body larger than {} bytes", self.limit)
    }
}

impl StdError for BodyTooLarge {}

/// Reading the client's request body failed.
#[derive(Debug)]
pub(crate) struct ClientBodyError(pub(crate) BoxError);

impl fmt::Display for ClientBodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reading the client's request body failed: {}", self.0)
    }
}

impl StdError for ClientBodyError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}

/// The client's body `B` with an optional size limit (or no body at all: the empty
/// body of a request sent again, see [`Default`]).
#[derive(Debug)]
pub struct RequestBody<B> {
    inner: Option<B>,
    remaining: Option<u64>,
    limit: u64,
}

impl<B> RequestBody<B> {
    pub(crate) fn new(inner: B, limit: Option<u64>) -> Self {
        RequestBody {
            inner: Some(inner),
            remaining: limit,
            limit: limit.unwrap_or(u64::MAX),
        }
    }
}

/// An empty body.
impl<B> Default for RequestBody<B> {
    fn default() -> Self {
        RequestBody {
            inner: None,
            remaining: None,
            limit: u64::MAX,
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(remaining), Some(data)) = (this.remaining.as_mut(), frame.data_ref()) {
                    let len = data.len() as u64;
                    if len > *remaining {
                        return Poll::Ready(Some(Err(Box::new(BodyTooLarge {
                            limit: this.limit,
                        }))));
                    }
                    *remaining -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(Box::new(ClientBodyError(e.into())))))
            }
            other => other.map(|o| o.map(|r| r.map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint)
    }
}
