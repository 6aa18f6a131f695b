//! Hands a request body from the connection's driver to whoever reads it.
//!
//! The driver owns the socket and the read buffer; the body ([`BodyReader`]) is read by
//! the pipeline, usually from the same task (the forwarder drives its destination
//! connection inline), sometimes from another (an HTTP/2 destination connection's
//! task). They meet in one small slot per connection, allocated once and reused by
//! every message on it: the reader asks (`wanted`) and waits, the driver decodes the
//! next chunk from its buffer, puts it in the slot and wakes the reader. A reader of
//! an earlier message (numbered) finds the slot moved on and ends with an error.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};

use crate::server::pace::BodyPace;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One connection's slot.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// The message the slot serves.
    message: u64,
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
    ended: bool,
    error: Option<&'static str>,
    /// The reader is waiting for the next frame.
    wanted: bool,
    reader: Option<Waker>,
    driver: Option<Waker>,
    /// How fast the client sends the body while the reader waits for it.
    pub(crate) pace: BodyPace,
}

fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl Channel {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it cannot leave the slot inconsistent: take it as is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start serving a new message's body: returns its reader.
    pub(crate) fn open(self: &Arc<Self>, length: Option<u64>) -> BodyReader {
        let mut state = self.lock();
        let message = state.message + 1;
        *state = State {
            message,
            driver: state.driver.take(),
            ..State::default()
        };
        BodyReader {
            channel: self.clone(),
            message,
            done: false,
            remaining: length,
        }
    }

    /// The current message is over for the driver: a reader still around reads an
    /// error from now on.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.message += 1;
        state.data = None;
        state.trailers = None;
        if let Some(reader) = state.reader.take() {
            reader.wake();
        }
    }
}

impl State {
    /// The driver waits for the reader to want more. (A reader dropped before the
    /// body's end is noticed when the response is done: the rest of the body is read
    /// and thrown away, or the connection closed.)
    pub(crate) fn driver_waits(&mut self, cx: &Context<'_>) {
        set_waker(&mut self.driver, cx);
    }

    /// The slot is free for the next frame, and the reader asked for one.
    pub(crate) fn ready_for_frame(&self) -> bool {
        self.wanted && self.data.is_none() && !self.ended && self.error.is_none()
    }

    fn hand(&mut self) {
        self.wanted = false;
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }

    pub(crate) fn put_data(&mut self, data: Bytes) {
        self.data = Some(data);
        self.hand();
    }

    pub(crate) fn put_end(&mut self, trailers: Option<HeaderMap>) {
        self.trailers = trailers;
        self.ended = true;
        self.hand();
    }

    /// The body ends with the data in the slot (if it has not ended already; no
    /// trailers were put, as only an end puts them).
    pub(crate) fn end_after_data(&mut self) {
        if self.error.is_none() {
            self.ended = true;
        }
    }

    /// The body could not be read to its end.
    pub(crate) fn is_failed(&self) -> bool {
        self.error.is_some()
    }

    pub(crate) fn put_error(&mut self, error: &'static str) {
        self.error = Some(error);
        self.hand();
    }
}

/// The reading end of a [`Channel`] for one message's body.
#[derive(Debug)]
pub(crate) struct BodyReader {
    channel: Arc<Channel>,
    message: u64,
    done: bool,
    remaining: Option<u64>,
}

/// Reading the client's request body failed.
#[derive(Debug)]
pub(crate) struct ReadError(&'static str);

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ReadError {}

impl BodyReader {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut state = self.channel.lock();
        if state.message != self.message {
            self.done = true;
            return Poll::Ready(Some(Err(Box::new(ReadError(
                "the connection ended before the request body was read",
            )))));
        }
        if let Some(data) = state.data.take() {
            if let Some(r) = self.remaining.as_mut() {
                *r = r.saturating_sub(data.len() as u64);
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if state.ended {
            self.done = true;
            return Poll::Ready(state.trailers.take().map(|t| Ok(Frame::trailers(t))));
        }
        if let Some(error) = state.error {
            self.done = true;
            return Poll::Ready(Some(Err(Box::new(ReadError(error)))));
        }
        set_waker(&mut state.reader, cx);
        if !state.wanted {
            state.wanted = true;
            if let Some(driver) = &state.driver {
                driver.wake_by_ref();
            }
        }
        Poll::Pending
    }

    /// Read to its end: `None` returned, or every byte of a body of known length
    /// taken (an HTTP/2 client then ends the stream with the last data).
    pub(crate) fn is_end_stream(&self) -> bool {
        self.done || self.remaining == Some(0)
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
