//! [`Incoming`]: the request body of every pipeline, whichever HTTP/1.1 engine read it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::request::ConnectionInfo;
use crate::server::native::BodyReader;
use crate::server::native_h2::RecvBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body as the server received it: read by fuseway's own HTTP/1.1 or HTTP/2
/// engine, by hyper's (with `--http1-engine hyper`, `--http2-engine hyper`), or built
/// in process.
/// Pipelines take `Request<Incoming>`; it replaces `hyper::body::Incoming` in their
/// types (`From<hyper::body::Incoming>` converts, without allocating).
///
/// fuseway's server also records in it the [connection](ConnectionInfo) the request
/// arrived on, so that [`ConnectionInfo::of`] finds the client's address wherever the
/// request goes — also on another task (a layer that spawns, `tower::buffer`).
///
/// ```
/// use fuseway::body::Incoming;
/// use http_body::Body;
///
/// let body = Incoming::full("hello");
/// assert_eq!(body.size_hint().exact(), Some(5));
/// assert!(Incoming::empty().is_end_stream());
/// ```
pub struct Incoming {
    kind: Kind,
    connection: Option<ConnectionInfo>,
}

enum Kind {
    Empty,
    Full(Option<Bytes>),
    Hyper(hyper::body::Incoming),
    Native(BodyReader),
    Http2(RecvBody),
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("Incoming::Empty"),
            Kind::Full(data) => f.debug_tuple("Incoming::Full").field(data).finish(),
            Kind::Hyper(body) => f.debug_tuple("Incoming::Hyper").field(body).finish(),
            Kind::Native(body) => f.debug_tuple("Incoming::Native").field(body).finish(),
            Kind::Http2(body) => f.debug_tuple("Incoming::Http2").field(body).finish(),
        }
    }
}

impl Incoming {
    /// An empty body.
    pub fn empty() -> Self {
        Incoming::of(Kind::Empty)
    }

    /// A body of these bytes.
    pub fn full(data: impl Into<Bytes>) -> Self {
        let data = data.into();
        Incoming::of(Kind::Full((!data.is_empty()).then_some(data)))
    }

    pub(crate) fn native(reader: BodyReader) -> Self {
        Incoming::of(Kind::Native(reader))
    }

    pub(crate) fn http2(reader: RecvBody) -> Self {
        Incoming::of(Kind::Http2(reader))
    }

    fn of(kind: Kind) -> Self {
        Incoming {
            kind,
            connection: None,
        }
    }

    /// This body, recording the connection its request arrived on (what fuseway's
    /// server does for every request; for requests built in process or served by
    /// something else, see [`ConnectionInfo::of`]).
    ///
    /// ```
    /// use fuseway::body::Incoming;
    /// use fuseway::request::ConnectionInfo;
    ///
    /// let info = ConnectionInfo {
    ///     remote: "127.0.0.1:50000".parse().unwrap(),
    ///     local: "127.0.0.1:8080".parse().unwrap(),
    ///     tls: false,
    /// };
    /// let request = http::Request::new(Incoming::empty().with_connection(info));
    /// assert_eq!(ConnectionInfo::of(&request), Some(info));
    /// ```
    pub fn with_connection(mut self, connection: ConnectionInfo) -> Self {
        self.connection = Some(connection);
        self
    }

    /// The connection recorded by [`with_connection`](Self::with_connection).
    pub fn connection(&self) -> Option<ConnectionInfo> {
        self.connection
    }
}

impl Default for Incoming {
    fn default() -> Self {
        Incoming::empty()
    }
}

impl From<hyper::body::Incoming> for Incoming {
    fn from(body: hyper::body::Incoming) -> Self {
        Incoming::of(Kind::Hyper(body))
    }
}

impl From<Bytes> for Incoming {
    fn from(data: Bytes) -> Self {
        Incoming::full(data)
    }
}

impl Body for Incoming {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Kind::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Kind::Native(body) => body.poll_frame(cx),
            Kind::Http2(body) => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(data) => data.is_none(),
            Kind::Hyper(body) => body.is_end_stream(),
            Kind::Native(body) => body.is_end_stream(),
            Kind::Http2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Kind::Hyper(body) => body.size_hint(),
            Kind::Native(body) => body.size_hint(),
            Kind::Http2(body) => body.size_hint(),
        }
    }
}
