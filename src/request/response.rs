//! The pipeline's response type and the outcome of forwarding.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use http::{Response, StatusCode};

use super::RouteContext;
use crate::body::ProxyBody;
use crate::state::{Cluster, ConcurrencyGuard, Destination, DestinationState, Route, Snapshot};

type BoxError = Box<dyn StdError + Send + Sync>;

/// What went wrong while forwarding, in YARP's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardErrorKind {
    /// No destination was available (503).
    NoAvailableDestinations,
    /// Connecting to or sending the request to the destination failed (502).
    Request,
    /// The outgoing request could not be built (an invalid URI after the transforms;
    /// 502). Not the destination's failure.
    RequestCreation,
    /// The destination did not answer within the activity timeout (504).
    RequestTimedOut,
    /// The client went away before the response started.
    RequestCanceled,
    /// Reading the request body from the client failed (400).
    RequestBodyClient,
    /// The request body was larger than the route allows (413).
    RequestBodyTooLarge,
    /// Sending the request body to the destination failed (502).
    RequestBodyDestination,
    /// Reading the response body from the destination failed (the response is aborted).
    ResponseBodyDestination,
    /// Writing the response body to the client failed.
    ResponseBodyClient,
    /// The destination agreed to an upgrade (`101`) the client's side could not take:
    /// the server's upgraded connections were at its limit
    /// (`MaxConcurrentUpgradedConnections`; 502). Not the destination's failure.
    UpgradeResponseClient,
}

impl ForwardErrorKind {
    /// The status answered for this error when no response has started.
    pub fn status(self) -> StatusCode {
        match self {
            ForwardErrorKind::NoAvailableDestinations => StatusCode::SERVICE_UNAVAILABLE,
            ForwardErrorKind::RequestTimedOut => StatusCode::GATEWAY_TIMEOUT,
            ForwardErrorKind::RequestBodyClient | ForwardErrorKind::RequestCanceled => {
                StatusCode::BAD_REQUEST
            }
            ForwardErrorKind::RequestBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// Whether passive health counts this as the destination's transport failure.
    pub fn is_destination_failure(self) -> bool {
        matches!(
            self,
            ForwardErrorKind::Request
                | ForwardErrorKind::RequestTimedOut
                | ForwardErrorKind::RequestBodyDestination
                | ForwardErrorKind::ResponseBodyDestination
        )
    }
}

/// How an exchange ended, as the hooks stages register with
/// [`ProxyResponse::on_exchange_end`] learn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExchangeEnd {
    /// The response (with its whole body) was answered.
    Completed,
    /// Forwarding failed, before the response or while its body streamed.
    Failed(ForwardErrorKind),
    /// The client went away while the response body streamed.
    Abandoned,
}

impl ExchangeEnd {
    /// From an exchange's result: `Some(Ok(()))` completed, `Some(Err(kind))` failed,
    /// `None` abandoned.
    pub(crate) fn from_result(result: Option<Result<(), ForwardErrorKind>>) -> Self {
        match result {
            Some(Ok(())) => ExchangeEnd::Completed,
            Some(Err(kind)) => ExchangeEnd::Failed(kind),
            None => ExchangeEnd::Abandoned,
        }
    }
}

/// What the hooks registered with [`ProxyResponse::on_exchange_report`] learn when an
/// exchange is over: how it ended and the body bytes that went each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExchangeReport {
    /// How it ended.
    pub end: ExchangeEnd,
    /// Request body bytes sent on to the destination (for an upgraded connection, the
    /// bytes the client sent through the tunnel).
    pub request_bytes: u64,
    /// Response body bytes passed on to the client (for an upgraded connection, the
    /// bytes the destination sent through the tunnel; for a local answer, its body's
    /// length).
    pub response_bytes: u64,
}

impl ExchangeReport {
    /// A report of `end` with these byte counts.
    pub fn new(end: ExchangeEnd, request_bytes: u64, response_bytes: u64) -> Self {
        ExchangeReport {
            end,
            request_bytes,
            response_bytes,
        }
    }
}

/// A forwarding error: its kind and, where known, the underlying cause.
#[derive(Debug)]
pub struct ForwardError {
    kind: ForwardErrorKind,
    source: Option<BoxError>,
}

impl ForwardError {
    /// An error of `kind` caused by `source`.
    pub fn new(kind: ForwardErrorKind, source: impl Into<BoxError>) -> Self {
        ForwardError {
            kind,
            source: Some(source.into()),
        }
    }

    /// An error of `kind` without a further cause.
    pub fn kind_only(kind: ForwardErrorKind) -> Self {
        ForwardError { kind, source: None }
    }

    /// Its kind.
    pub fn kind(&self) -> ForwardErrorKind {
        self.kind
    }
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.kind)?;
        let mut cause = self
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static));
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

impl StdError for ForwardError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

/// What forwarding did: where the request finally went (a stage may have reassigned
/// it) and the error, if any. Passive health, affinity and telemetry read this on the
/// way back.
///
/// It keeps only the route, cluster and destination of the exchange (not the whole
/// [`RouteContext`] with its candidates and limits), so that the [`ProxyResponse`]
/// carrying it stays small: responses move by value through every stage.
#[derive(Debug, Default)]
pub struct Outcome {
    target: Option<Target>,
    /// The forwarding error, if any.
    pub error: Option<ForwardError>,
}

/// The route, cluster and destination (indices into the snapshot) of an exchange; the
/// cluster and destination are [`NONE`] for an answer given before they were chosen
/// (`u32`s: the outcome moves with every response).
#[derive(Debug, Clone)]
struct Target {
    snapshot: Arc<Snapshot>,
    route: usize,
    cluster: u32,
    destination: u32,
}

/// [`Target`]'s cluster or destination: not chosen.
const NONE: u32 = u32::MAX;

/// An index as a [`Target`] keeps it.
fn index(i: Option<usize>) -> u32 {
    i.and_then(|i| u32::try_from(i).ok()).unwrap_or(NONE)
}

impl Target {
    fn cluster(&self) -> Option<&Cluster> {
        (self.cluster != NONE).then(|| &self.snapshot.clusters()[self.cluster as usize])
    }

    fn destination(&self) -> Option<usize> {
        (self.destination != NONE).then_some(self.destination as usize)
    }
}

impl Outcome {
    /// Record that the request was sent to destination `index` of `context`'s cluster.
    pub fn set_target(&mut self, context: RouteContext, index: usize) {
        let (snapshot, route, cluster) = context.into_target();
        self.target = Some(Target {
            snapshot,
            route,
            cluster: self::index(Some(cluster)),
            destination: self::index(Some(index)),
        });
    }

    /// Record the route (and cluster) of a request the proxy answered before a
    /// destination was chosen (429, 413, 503 from limits, affinity or balancing), so
    /// that telemetry and the route's policies see it; a stage answering early calls
    /// this through [`ProxyResponse::for_route`].
    pub fn set_route(&mut self, snapshot: Arc<Snapshot>, route: usize, cluster: Option<usize>) {
        self.target = Some(Target {
            snapshot,
            route,
            cluster: index(cluster),
            destination: NONE,
        });
    }

    /// The snapshot the forwarded request was routed on.
    pub fn snapshot(&self) -> Option<&Arc<Snapshot>> {
        self.target.as_ref().map(|t| &t.snapshot)
    }

    /// Where the request went, without the error: one reference to the snapshot more,
    /// which keeps route, cluster and destination readable (the access log's record
    /// does this rather than take a reference to each of their ids, counters that
    /// every worker would otherwise contend for).
    pub(crate) fn place(&self) -> Outcome {
        Outcome {
            target: self.target.clone(),
            error: None,
        }
    }

    /// The route of the forwarded request.
    pub fn route(&self) -> Option<&Route> {
        self.target.as_ref().map(|t| &t.snapshot.routes()[t.route])
    }

    /// The index of the forwarded request's route in its snapshot.
    pub(crate) fn route_index(&self) -> Option<usize> {
        self.target.as_ref().map(|t| t.route)
    }

    /// The cluster the request was sent to.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.target.as_ref().and_then(Target::cluster)
    }

    /// The destination the request was sent to.
    pub fn destination(&self) -> Option<&Destination> {
        let target = self.target.as_ref()?;
        Some(&target.cluster()?.destinations()[target.destination()?])
    }

    /// The index of that destination in its cluster.
    pub fn destination_index(&self) -> Option<usize> {
        self.target.as_ref().and_then(Target::destination)
    }

    /// The destination's runtime state.
    pub fn destination_state(&self) -> Option<&Arc<DestinationState>> {
        self.destination().map(Destination::state)
    }
}

/// The response a pipeline produces: an HTTP response plus the [`Outcome`] of forwarding.
#[derive(Debug)]
pub struct ProxyResponse {
    /// The HTTP response for the client.
    pub response: Response<ProxyBody>,
    /// What happened while forwarding.
    pub outcome: Outcome,
}

impl ProxyResponse {
    /// A response produced by the proxy itself (404, 503, 413 ...), with an empty body
    /// and no forwarding outcome.
    pub fn status(status: StatusCode) -> Self {
        let mut response = Response::new(ProxyBody::empty());
        *response.status_mut() = status;
        ProxyResponse {
            response,
            outcome: Outcome::default(),
        }
    }

    /// This answer, given before a destination was chosen, attributed to `context`'s
    /// route and cluster (see [`Outcome::set_route`]).
    pub fn for_route(mut self, context: &RouteContext) -> Self {
        let (snapshot, route, cluster) = context.target();
        self.outcome
            .set_route(snapshot.clone(), route, Some(cluster));
        self
    }

    /// The error response for a forwarding failure (status from its kind, empty body).
    pub fn error(error: ForwardError) -> Self {
        let mut r = ProxyResponse::status(error.kind().status());
        r.outcome.error = Some(error);
        r
    }

    /// The status code.
    pub fn status_code(&self) -> StatusCode {
        self.response.status()
    }

    /// The HTTP response, dropping the outcome.
    pub fn into_response(self) -> Response<ProxyBody> {
        self.response
    }

    /// Keep `guard` until the response body has been sent (or dropped); dropped now when
    /// the body is not streamed from a destination. Any number of stages may hold
    /// guards; the first costs no allocation.
    pub fn hold_until_complete(&mut self, guard: ConcurrencyGuard) {
        if let Some(exchange) = self.response.body_mut().exchange_mut() {
            exchange.hold(guard);
        }
    }

    /// Call `hook` once when the exchange is over: when the streamed body has ended,
    /// failed or been abandoned by the client (after the exchange's counters and held
    /// guards are released); at once when the body is not streamed from a destination
    /// (a local answer, or forwarding that failed before the response). Not called
    /// while a panic unwinds. Costs one allocation; any number of stages may register
    /// hooks, each called in turn.
    ///
    /// ```
    /// use fuseway::request::{ExchangeEnd, ProxyResponse};
    /// use http::StatusCode;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let mut response = ProxyResponse::status(StatusCode::NOT_FOUND);
    /// // A local answer: the hook runs at once.
    /// response.on_exchange_end(move |end| tx.send(end).unwrap());
    /// assert_eq!(rx.try_recv(), Ok(ExchangeEnd::Completed));
    /// ```
    pub fn on_exchange_end(&mut self, hook: impl FnOnce(ExchangeEnd) + Send + 'static) {
        self.on_exchange_report(move |report| hook(report.end));
    }

    /// Call `hook` once when the exchange is over, as [`on_exchange_end`](Self::on_exchange_end)
    /// does, with the body bytes that went each way besides how it ended (the access
    /// log's record is written from here).
    ///
    /// ```
    /// use fuseway::body::ProxyBody;
    /// use fuseway::request::{ExchangeEnd, ProxyResponse};
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let mut response = ProxyResponse::status(http::StatusCode::OK);
    /// *response.response.body_mut() = ProxyBody::full("hello");
    /// // A local answer: the hook runs at once.
    /// response.on_exchange_report(move |report| tx.send(*report).unwrap());
    /// let report = rx.try_recv().unwrap();
    /// assert_eq!((report.end, report.response_bytes), (ExchangeEnd::Completed, 5));
    /// ```
    pub fn on_exchange_report(&mut self, hook: impl FnOnce(&ExchangeReport) + Send + 'static) {
        let ProxyResponse { response, outcome } = self;
        let local_length = http_body::Body::size_hint(response.body())
            .exact()
            .unwrap_or(0);
        match response.body_mut().exchange_mut() {
            Some(exchange) => exchange.on_end(Box::new(hook)),
            None => hook(&ExchangeReport::new(
                match &outcome.error {
                    Some(e) => ExchangeEnd::Failed(e.kind()),
                    None => ExchangeEnd::Completed,
                },
                0,
                local_length,
            )),
        }
    }
}

impl From<ProxyResponse> for Response<ProxyBody> {
    fn from(r: ProxyResponse) -> Self {
        r.response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Responses move by value through every stage (each move a `memcpy` of the whole
    /// value): the outcome must not grow back into a whole routing context, nor the
    /// body take its streaming state back in place (see `ProxyBody`).
    #[test]
    fn the_outcome_stays_small() {
        assert!(std::mem::size_of::<Outcome>() <= 64);
        assert!(std::mem::size_of::<ProxyBody>() <= 40);
        assert!(std::mem::size_of::<ProxyResponse>() <= 200);
    }
}
