//! The keep-alive race: a request sent again on a new connection.

use super::*;

/// The head of an idempotent request without a body, kept while it goes out on a
/// reused connection: if the destination closed that connection while it was idle
/// and the close crosses the request (the keep-alive race), the request is sent once
/// more on a new connection, as .NET's `SocketsHttpHandler` (YARP) and nginx do.
///
/// It is kept as bytes — the target, then each header's name and value — in buffers
/// that live in the pooled connection, so arming it per request copies a few hundred
/// bytes and allocates nothing once they have grown (no reference-counted clone of
/// every header, which cost about twice as much); the rare replay parses them back.
#[derive(Default)]
pub(super) struct Replay {
    /// Whether the request in flight can be sent again.
    armed: bool,
    method: http::Method,
    /// The request's target, then each header's name and value.
    bytes: Vec<u8>,
    /// Where the target ends in `bytes`.
    target: usize,
    /// Each header: where its name and its value end in `bytes`, and whether the
    /// value is sensitive.
    headers: Vec<(usize, usize, bool)>,
}

impl Replay {
    pub(super) fn arm<B: Body>(&mut self, request: &Request<B>) {
        self.armed = request.method().is_idempotent() && request.body().is_end_stream();
        if !self.armed {
            return;
        }
        self.method.clone_from(request.method());
        self.bytes.clear();
        self.headers.clear();
        let uri = request.uri();
        if let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) {
            self.bytes.extend_from_slice(scheme.as_str().as_bytes());
            self.bytes.extend_from_slice(b"://");
            self.bytes.extend_from_slice(authority.as_str().as_bytes());
        }
        if let Some(path) = uri.path_and_query() {
            self.bytes.extend_from_slice(path.as_str().as_bytes());
        }
        self.target = self.bytes.len();
        for (name, value) in request.headers() {
            self.bytes.extend_from_slice(name.as_str().as_bytes());
            let name_end = self.bytes.len();
            self.bytes.extend_from_slice(value.as_bytes());
            self.headers
                .push((name_end, self.bytes.len(), value.is_sensitive()));
        }
    }

    /// The request is answered. (Buffers grown past 16 KiB by one large head are let
    /// go rather than kept for the connection's life.)
    pub(super) fn disarm(&mut self) {
        self.armed = false;
        if self.bytes.capacity() > 16 * 1024 {
            self.bytes = Vec::new();
        }
    }

    /// The request to send again, once (`None` if it cannot be: not armed, or its
    /// head does not parse back, which a head that went out once always does).
    pub(super) fn take<B: Default>(&mut self) -> Option<Request<B>> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let mut request = Request::new(B::default());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = Uri::try_from(&self.bytes[..self.target]).ok()?;
        let headers = request.headers_mut();
        headers.reserve(self.headers.len());
        let mut start = self.target;
        for &(name_end, value_end, sensitive) in &self.headers {
            let name = http::header::HeaderName::from_bytes(&self.bytes[start..name_end]).ok()?;
            let mut value = http::HeaderValue::from_bytes(&self.bytes[name_end..value_end]).ok()?;
            value.set_sensitive(sensitive);
            headers.append(name, value);
            start = value_end;
        }
        Some(request)
    }
}
