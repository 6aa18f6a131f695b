//! fuseway's own HTTP/1.1 engine, server side: one task per connection drives the
//! socket, the codec ([`crate::http1`]) and the pipeline's future as one state
//! machine. The connection owns a read buffer and a write buffer, reused by every
//! message on it; a request body is handed to the pipeline through a slot allocated
//! once per connection ([`channel`]).
//!
//! Per message: wait for a head (the first within the header read timeout of the
//! accept; after a response, for the keep-alive timeout, and a head within the header
//! read timeout of its first byte; a shutdown closes a connection that waits), parse
//! and check it (400 / 414 / 431 and close on anything ambiguous), call the pipeline,
//! and while its future runs pump the request body and watch the socket for the client
//! going away (which drops the future: the destination's request is cancelled). The
//! response head and small bodies are written with one vectored write; bodies are
//! framed by length, chunks (with trailers when the client said `TE: trailers`) or, for
//! HTTP/1.0 clients, the connection's close.
//! A `101` hands the socket, and whatever was read past the head, to the tunnel. A
//! connection that closes while its client may still be sending (a refused or unread
//! body, a refused head) reads and drops what comes for a while first, as nginx's
//! lingering close does (`Conn::close`, [`super::linger`]), so that the answer is not
//! lost to a reset.
//!
//! A plain TCP connection that has answered a request and waited [`PARK_AFTER`] for
//! its next one with nothing in hand parks: its task ends and its socket waits in the
//! listener's [`lot`] (64 bytes, no task), which starts a new connection task when the
//! socket becomes readable. The wait still ends when it would have (the lot closes the
//! socket then), a head that comes gets its header read timeout within it, and
//! shutdown closes a parked connection as it does a waiting one.

mod channel;
mod conn;
#[cfg(unix)]
mod lot;
mod slots;
#[cfg(test)]
mod tests;
mod upgrade;
#[cfg(not(unix))]
mod lot {
    //! Connections park only where an epoll (kqueue) set can hold them.
    pub(crate) struct Lot;
}

use std::any::{Any, TypeId};
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{header, Method, Request, Response, StatusCode, Version};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

pub(crate) use channel::BodyReader;
use channel::Channel;
use conn::{Conn, Paced, Waited};
pub(crate) use slots::{give_free, take_free, Slots};
use slots::{InFlight, InFlightProj, Lent};
pub(crate) use upgrade::{Handoff, OnUpgrade, UpgradedIo};

use super::drain::Signal;
use super::service::{internal_error, log_panic, status_response};
use super::{MinDataRate, ServeService, ServerOptions};
use crate::body::{Incoming, ProxyBody};
use crate::http1::{
    buffers, parse_request, write_response_head, BodyDecoder, Connection, Decoded, Framing, Limits,
    Outgoing, ParseError,
};
use crate::request::ConnectionInfo;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a connection's socket is: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Buffered response bytes past which the driver writes before taking more.
const WRITE_HIGH: usize = 64 * 1024;
/// Most request body bytes read and thrown away after a response so that the
/// connection can carry the next request; beyond, the connection is closed.
const DISCARD_MAX: u64 = 256 * 1024;

/// The future of a call of a connection's pipeline (what an in-flight slot holds first).
pub(crate) type CallOf<P> = <P as hyper::service::Service<Request<Incoming>>>::Future;

/// Serve HTTP/1.1 on `io` until the client closes, the connection waits for a head past
/// the header read or keep-alive timeout, shutdown, an error, or an upgrade.
///
/// A function returning an `async` block rather than an `async fn`: the block keeps
/// what it captures in place, where an `async fn` would hold its arguments twice (as
/// captured and as moved into its body's locals) for the connection's whole life.
///
/// `resumed`: the connection was parked ([`Parked`]) and has bytes to read; its wait
/// for this head has the deadline the lot set (see `slots_with_lot`).
pub(crate) fn serve_connection<I, P>(
    io: I,
    pipeline: P,
    info: ConnectionInfo,
    slots: Arc<Slots<CallOf<P>, ProxyBody>>,
    mut drain: Signal,
    mut resumed: bool,
) -> impl Future<Output = ()>
where
    I: Io,
    P: ServeService,
{
    let mut conn = Conn {
        io,
        read_buf: BytesMut::new(),
        out: Outgoing::default(),
        limits: Limits::new(
            slots.options.max_header_size,
            slots.options.max_request_line,
            slots.options.max_request_headers,
        ),
        channel: None,
        body: None,
        continue_pending: false,
        read_eof: false,
        body_failed: false,
        read_armed: false,
    };
    // Whether a head has come: later ones are waited for as on a kept connection.
    let mut served = false;
    // Only plain TCP connections park: their readiness is the socket's.
    let parks = TypeId::of::<I>() == TypeId::of::<TcpStream>() && slots.lot.is_some();
    // One clock reading per poll of the task (see `clock`).
    crate::clock::InMoment::new(async move {
        // Requests' locals live in blocks that end before the next suspension point, and
        // the pipeline's future and the response body in a lent slot: the connection's
        // future stays small while it waits (see `the_connection_future_size`).
        let mut lent = Lent {
            slot: None,
            slots: &slots,
        };
        loop {
            buffers::release_write(&mut conn.out.buf);
            lent.release();
            // A message's locals end with its response, before the wait for the next
            // head or the discarding of an unread body (a state of the task as large as
            // the largest).
            let keep_alive = {
                // The wait for a head, counted from when the connection starts waiting
                // (a resumed connection's deadline was set when it was resumed).
                let mut wait = if std::mem::take(&mut resumed) {
                    Wait::Counting
                } else {
                    // Only kept connections park: every record in the lot then has
                    // the same wait (the keep-alive timeout's), and the lot keeps them
                    // in deadline order by parking order.
                    Wait::Starts {
                        parks: parks && served,
                    }
                };
                let (called, message) = {
                    // The request is made and the pipeline called where its head is
                    // parsed (see `Conn::poll_head`), with the connection current; the
                    // pipeline's future is made where it will be polled, and a panic
                    // answers 500 (as hyper's engine does). Only whether it was called
                    // is kept across the wait below.
                    let mut start = |conn: &mut Conn<I>, head| {
                        let (mut request, message) = conn.start_request(head, info);
                        if let Some(certificate) = super::tls::certificate_of(&conn.io) {
                            request.extensions_mut().insert(certificate.clone());
                        }
                        // Through `lent`, which the closure holds already: a capture
                        // of its own would make the connection's future larger.
                        if let (Some(_), Some(limit)) =
                            (&message.upgrade, lent.slots.options.upgrade_limit())
                        {
                            request.extensions_mut().insert(limit.clone());
                        }
                        let _current = info.enter();
                        let mut slot = lent.get();
                        let called = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            slot.set(InFlight::Calling {
                                future: pipeline.call(request),
                            })
                        }));
                        (called.map_err(|panic| log_panic(&panic)).is_ok(), message)
                    };
                    match poll_fn(|cx| {
                        conn.poll_head(
                            cx,
                            &mut drain,
                            &mut wait,
                            waits(&slots.options, served),
                            &mut start,
                        )
                    })
                    .await
                    {
                        Waited::Head(started) => {
                            // Later heads are waited for as on a kept connection.
                            served = true;
                            started
                        }
                        Waited::Closed => return,
                        Waited::Park => {
                            std::hint::cold_path();
                            let (idle, _) = waits(&slots.options, served);
                            park(conn.io, info, &slots, drain, idle - PARK_AFTER);
                            return;
                        }
                        Waited::TimedOut => {
                            std::hint::cold_path();
                            tracing::debug!(remote = %info.remote, "no request head within the header read or keep-alive timeout; closing");
                            return;
                        }
                        Waited::Refused(error) => {
                            std::hint::cold_path();
                            tracing::debug!(remote = %info.remote, reason = error.reason(), status = error.status().as_u16(), "refused a request head");
                            conn.queue_error(error.status());
                            // Answered after the loop: no head is held while it is written.
                            break;
                        }
                    }
                };

                // The pipeline runs; meanwhile the request body is pumped and the socket
                // watched for the client's going away.
                let (keep_alive, upgrading) = {
                    let started = if !called {
                        std::hint::cold_path();
                        let draining = drain.is_draining();
                        let response = internal_error();
                        Some(Ok(begin_response(
                            &mut conn, &mut lent, response, &message, draining,
                        )))
                    } else {
                        let rate = &slots.options.min_request_body_data_rate;
                        poll_fn(|cx| {
                            let paced = conn.pump(cx, rate);
                            if paced == Paced::TooSlow {
                                std::hint::cold_path();
                                tracing::debug!(remote = %info.remote, "the request body came slower than the minimum data rate; 408");
                                // Answered as Kestrel does; the connection closes after it.
                                let response = status_response(StatusCode::REQUEST_TIMEOUT);
                                let draining = drain.is_draining();
                                return Poll::Ready(Some(Ok(begin_response(
                                    &mut conn, &mut lent, response, &message, draining,
                                ))));
                            }
                            let polled = match lent.get().project() {
                                InFlightProj::Calling { future } => {
                                    let _current = info.enter();
                                    std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx)))
                                }
                                _ => Ok(Poll::Pending),
                            };
                            // The response is begun here, where it comes out of the future:
                            // each step it is handed up through is a copy of it (~400 bytes).
                            let response = match polled {
                                Ok(Poll::Ready(Ok(response))) => response,
                                Ok(Poll::Ready(Err(e))) => {
                                    std::hint::cold_path();
                                    return Poll::Ready(Some(Err(e.into())));
                                }
                                Ok(Poll::Pending) if conn.peer_closed(cx) => {
                                    std::hint::cold_path();
                                    return Poll::Ready(None);
                                }
                                Ok(Poll::Pending) => {
                                    if let Paced::Waiting(left) = paced {
                                        // Woken to look at the pace again.
                                        let _ = drain.poll_deadline(cx, Some(left));
                                    }
                                    return Poll::Pending;
                                }
                                Err(panic) => {
                                    std::hint::cold_path();
                                    log_panic(&panic);
                                    internal_error()
                                }
                            };
                            let draining = drain.is_draining();
                            Poll::Ready(Some(Ok(begin_response(
                                &mut conn, &mut lent, response, &message, draining,
                            ))))
                        })
                        .await
                    };
                    match started {
                        Some(Ok(started)) => started,
                        Some(Err::<_, BoxError>(e)) => {
                            std::hint::cold_path();
                            tracing::debug!(error = %e, remote = %info.remote, "the service failed; closing the connection");
                            return;
                        }
                        None => {
                            std::hint::cold_path();
                            tracing::debug!(remote = %info.remote, "the client closed its connection before the response; request cancelled");
                            return;
                        }
                    }
                };
                let written = poll_fn(|cx| match lent.get().project() {
                    InFlightProj::Sending { body, sending } => {
                        // Read from the options where used: a copy would live in the
                        // connection's future.
                        let rate = &slots.options.min_response_data_rate;
                        conn.poll_send(cx, body, sending, rate, &mut drain)
                    }
                    _ => Poll::Ready(Ok(())),
                })
                .await;
                // The body is dropped here (an upgrade's hands the exchange to the tunnel).
                lent.release();
                if let Err(e) = written {
                    std::hint::cold_path();
                    tracing::debug!(error = %e, remote = %info.remote, "the response could not be sent; closing");
                    return;
                }
                if upgrading {
                    std::hint::cold_path();
                    let tx = message.upgrade.expect("upgrading");
                    if let Some(channel) = &conn.channel {
                        channel.close();
                    }
                    let _ = tx.send(UpgradedIo {
                        io: Box::new(conn.io),
                        read: conn.read_buf.freeze(),
                    });
                    return;
                }
                keep_alive
            };
            if !keep_alive {
                std::hint::cold_path();
                conn.close(&mut drain, slots.options.header_read_timeout)
                    .await;
                return;
            }
            // The body the pipeline left unread is read and thrown away (up to a bound),
            // so that the next request can be read; a shutdown closes the connection
            // instead of waiting for a client that is slow to send it.
            if conn.body.is_some() {
                std::hint::cold_path();
                let mut starts = true;
                let discarded = poll_fn(|cx| {
                    if drain.poll_draining(cx) {
                        return Poll::Ready(false);
                    }
                    conn.poll_discard(
                        cx,
                        &mut drain,
                        &mut starts,
                        slots.options.header_read_timeout,
                    )
                })
                .await;
                if !discarded {
                    conn.close(&mut drain, slots.options.header_read_timeout)
                        .await;
                    return;
                }
            }
            if let Some(channel) = &conn.channel {
                channel.close();
            }
        }
        // A refused head: its answer (written within a few seconds, on the header
        // timer), then the close.
        let mut starts = true;
        let written = poll_fn(|cx| match conn.poll_write_out(cx) {
            Poll::Ready(result) => Poll::Ready(result.is_ok()),
            Poll::Pending => drain
                .poll_deadline(cx, std::mem::take(&mut starts).then_some(ANSWER_TIMEOUT))
                .map(|()| false),
        })
        .await;
        if written {
            // The rest of the refused message may be on its way.
            conn.close(&mut drain, slots.options.header_read_timeout)
                .await;
        }
    })
}

/// How long the answer to a refused head may take to be written.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a keep-alive connection waits for its next request in its own task before
/// it parks (when its wait is longer): a connection under load never
/// waits that long, and one that does gives its task back.
const PARK_AFTER: Duration = Duration::from_secs(1);

/// The waits for a head: (with nothing of it in hand, from its first byte). The first
/// request's is due within the header read timeout of the accept; after a response,
/// the connection waits for the keep-alive timeout, and a head within the header read
/// timeout of its first byte.
fn waits(options: &ServerOptions, served: bool) -> (Duration, Duration) {
    let header = options.header_read_timeout.max(Duration::from_millis(1));
    let idle = if served {
        options.keep_alive_timeout.max(Duration::from_millis(1))
    } else {
        header
    };
    (idle, header)
}

/// How far the wait for a request head has gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Not waited yet (`parks`: the connection may park).
    Starts { parks: bool },
    /// Waiting [`PARK_AFTER`] with nothing in hand.
    Parking,
    /// Waiting with nothing of a head in hand: the keep-alive timeout runs (the header
    /// read timeout for a connection's first request).
    Idle,
    /// Part of a head has come: its header read timeout runs.
    Counting,
}

/// End the connection's task; its socket waits for the next request in the
/// listener's lot. `rest`: what is left of its wait for a head.
fn park<I: Io, F, B>(
    io: I,
    info: ConnectionInfo,
    slots: &Slots<F, B>,
    mut drain: Signal,
    rest: Duration,
) {
    #[cfg(unix)]
    {
        let mut io = Some(io);
        // Only a `TcpStream` parks (`parks` in `serve_connection`).
        let (Some(lot), Some(io)) = (
            &slots.lot,
            (&mut io as &mut dyn Any)
                .downcast_mut::<Option<TcpStream>>()
                .and_then(Option::take),
        ) else {
            return;
        };
        // The connection's place under the limit goes with it; its drain slot is
        // given back (the lot's task answers shutdown for it).
        let place = drain.take_place();
        drop(drain);
        lot.park(io, info.remote, place, rest);
    }
    #[cfg(not(unix))]
    let _ = (io, info, slots, drain, rest);
}

/// Slots for a listener's plain TCP connections on this worker, with a lot their idle
/// keep-alive connections park in, watched by a task of its own that `signal` (the
/// listener's) ends on shutdown, and which `balance` may close parked connections of
/// at the connection limit. Without an epoll set, slots whose connections do not park.
pub(super) fn slots_with_lot<P: ServeService>(
    options: Arc<ServerOptions>,
    service: P,
    local: std::net::SocketAddr,
    signal: Signal,
    balance: &super::balance::Balance,
) -> Arc<Slots<CallOf<P>, ProxyBody>> {
    #[cfg(unix)]
    if let Some((lot, poll)) = lot::Lot::new() {
        balance.reclaim_from(lot.clone());
        let slots = Slots::with_lot(options, Some(lot.clone()));
        let for_resumed = slots.clone();
        let resume = move |record: lot::Record, left: Duration, signal: &Signal| {
            let lot::Record {
                stream,
                remote,
                place,
                ..
            } = record;
            let Ok(io) = TcpStream::from_std(stream) else {
                return;
            };
            // Bytes came (or the close): a head's header read timeout starts, within
            // what was left of the wait.
            let mut drain = signal.sibling(place);
            drain.restart(left.min(for_resumed.options.header_read_timeout));
            let info = ConnectionInfo {
                remote,
                local,
                tls: false,
            };
            tokio::spawn(serve_connection(
                io,
                service.clone(),
                info,
                for_resumed.clone(),
                drain,
                true,
            ));
        };
        tokio::spawn(lot::watch(lot, poll, signal, resume));
        return slots;
    }
    let _ = (service, local, signal, balance);
    Slots::new(options)
}

/// Begin answering with `response`: the pipeline's future is dropped, the response's
/// head written into the write buffer and its body, with how it is sent, put in the
/// in-flight slot. Returns whether the connection stays open and whether it is upgraded.
fn begin_response<I: Io, F: 'static>(
    conn: &mut Conn<I>,
    lent: &mut Lent<'_, F, ProxyBody>,
    response: Response<ProxyBody>,
    message: &conn::Message,
    draining: bool,
) -> (bool, bool) {
    // The future is done (or abandoned): dropped now, before the body takes its place.
    lent.get().set(InFlight::Idle);
    let (body, sending, keep_alive, upgrading) = conn.start_response(response, message, draining);
    lent.get().set(InFlight::Sending { body, sending });
    (keep_alive, upgrading)
}
