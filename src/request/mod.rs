//! Typed requests that carry the pipeline's state from stage to stage.
//!
//! Routing turns an `http::Request<B>` into a [`Routed<B>`] (route, cluster and the
//! candidate destinations); load balancing turns that into a [`Balanced<B>`] (the
//! chosen destination); the forwarder takes only `Balanced<B>`. So a pipeline whose
//! stages are in the wrong order does not compile. The state rides in the typed
//! wrapper, never in `http::Extensions` (every insert there is an allocation).

mod candidates;
mod response;

use std::fmt;
use std::sync::Arc;

use http::Request;

pub use candidates::{Candidates, Iter as CandidatesIter};
pub use response::{
    ExchangeEnd, ExchangeReport, ForwardError, ForwardErrorKind, Outcome, ProxyResponse,
};

use crate::state::DestinationState;

use crate::state::{Cluster, Destination, Route, Snapshot};

/// Information about the client connection a request arrived on. Read it with
/// [`ConnectionInfo::of`]. fuseway's server does not put it in the request's extensions
/// (an insert there costs three allocations per request): it records it in the request
/// body ([`Incoming::with_connection`](crate::body::Incoming::with_connection)), which
/// goes wherever the request goes, and makes it [current](ConnectionInfo::current) on
/// the thread while it calls the pipeline and polls its future (for stages that changed
/// the body's type). A `ConnectionInfo` inserted into a request's extensions takes
/// precedence: that is how a request served by something else (`axum::serve`, see
/// `examples/axum_fallback.rs`) names its client. Requests built in process may have
/// none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The client's address.
    pub remote: std::net::SocketAddr,
    /// The local address the connection was accepted on.
    pub local: std::net::SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
}

thread_local! {
    static CURRENT_CONNECTION: std::cell::Cell<Option<ConnectionInfo>> =
        const { std::cell::Cell::new(None) };
}

impl ConnectionInfo {
    /// The connection `request` arrived on: the `ConnectionInfo` in its extensions if
    /// any, else the one its body recorded (an [`Incoming`](crate::body::Incoming)
    /// from fuseway's server), else [`ConnectionInfo::current`].
    pub fn of<B: 'static>(request: &Request<B>) -> Option<ConnectionInfo> {
        request
            .extensions()
            .get::<ConnectionInfo>()
            .copied()
            .or_else(|| {
                (request.body() as &dyn std::any::Any)
                    .downcast_ref::<crate::body::Incoming>()
                    .and_then(crate::body::Incoming::connection)
            })
            .or_else(Self::current)
    }

    /// [`ConnectionInfo::of`] for a request taken apart: its extensions, else
    /// [`ConnectionInfo::current`].
    pub fn from_extensions(extensions: &http::Extensions) -> Option<ConnectionInfo> {
        extensions
            .get::<ConnectionInfo>()
            .copied()
            .or_else(Self::current)
    }

    /// The connection whose request fuseway's server is running on this thread right
    /// now: set while the server calls the pipeline and polls its future, so a stage
    /// (or the forwarder) reads it synchronously there; `None` elsewhere (for example
    /// in a task a stage spawned: [`ConnectionInfo::of`] finds it there).
    pub fn current() -> Option<ConnectionInfo> {
        CURRENT_CONNECTION.with(std::cell::Cell::get)
    }

    /// Make `self` [current](ConnectionInfo::current) on this thread until the returned
    /// guard is dropped (which restores the previous one, also when unwinding).
    ///
    /// The server enters a connection a few times a request, nearly always with none
    /// current: the previous one is copied (~70 bytes) only when there is one.
    pub(crate) fn enter(self) -> CurrentConnection {
        CURRENT_CONNECTION.with(|c| {
            let previous = match c.get() {
                None => CurrentConnection::NoneBefore,
                Some(previous) => CurrentConnection::Before(previous),
            };
            c.set(Some(self));
            previous
        })
    }
}

/// Restores the previously current connection on drop; see [`ConnectionInfo::enter`].
pub(crate) enum CurrentConnection {
    /// No connection was current.
    NoneBefore,
    /// This one was.
    Before(ConnectionInfo),
}

impl Drop for CurrentConnection {
    fn drop(&mut self) {
        CURRENT_CONNECTION.with(|c| match self {
            CurrentConnection::NoneBefore => c.set(None),
            CurrentConnection::Before(previous) => c.set(Some(*previous)),
        });
    }
}

/// The certificate a client presented on a TLS connection that asked for one (Kestrel's
/// `ClientCertificateMode`), verified by the handshake. fuseway's server puts it in the
/// extensions of every request of that connection (an insert costs allocations, so only
/// such requests have one); YARP's `ClientCert` transform sends
/// [`base64`](Self::base64) to the destination.
///
/// ```
/// use fuseway::request::ClientCertificate;
/// let cert = ClientCertificate::from_der(vec![1, 2, 3]);
/// assert_eq!(cert.der(), &[1, 2, 3]);
/// assert_eq!(cert.base64(), "AQID");
/// ```
#[derive(Clone)]
pub struct ClientCertificate(Arc<CertificateParts>);

struct CertificateParts {
    der: Vec<u8>,
    base64: http::HeaderValue,
}

impl ClientCertificate {
    /// The certificate, DER-encoded.
    pub fn from_der(der: Vec<u8>) -> ClientCertificate {
        use base64::Engine as _;
        let text = base64::engine::general_purpose::STANDARD.encode(&der);
        let base64 = http::HeaderValue::try_from(text).expect("base64 is a valid header value");
        ClientCertificate(Arc::new(CertificateParts { der, base64 }))
    }

    /// The certificate's DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.0.der
    }

    /// The DER bytes in standard base64, as a header value: what YARP's `ClientCert`
    /// transform sends (.NET's `Convert.ToBase64String(certificate.RawData)`).
    pub fn base64(&self) -> &http::HeaderValue {
        &self.0.base64
    }
}

impl fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("der_len", &self.0.der.len())
            .finish_non_exhaustive()
    }
}

/// The routing decision for a request: the snapshot it was made on, the route, the
/// cluster and the destinations still eligible.
#[derive(Clone)]
pub struct RouteContext {
    snapshot: Arc<Snapshot>,
    route: usize,
    cluster: usize,
    candidates: Candidates,
    limits: ExchangeLimits,
    /// The destination load balancing chose (an index into the cluster's), `NO_PICK`
    /// before.
    destination: u32,
    /// The passive-health stage saw the request: a cancellation before the response
    /// head is recorded (as a non-failure) when the forwarder's future is dropped.
    passive_armed: bool,
}

/// Limits the forwarder applies to one exchange; set by the limits stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExchangeLimits {
    /// Largest request body sent to the destination; past it the exchange fails with 413.
    pub max_request_body_size: Option<u64>,
    /// When the whole exchange must be over (504 before the response starts).
    pub deadline: Option<tokio::time::Instant>,
}

impl fmt::Debug for RouteContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteContext")
            .field("route", &self.route().id())
            .field("cluster", &self.cluster().id())
            .field("candidates", &self.candidates)
            .finish()
    }
}

impl RouteContext {
    /// A routing decision; `candidates` index into the cluster's destinations.
    ///
    /// # Panics
    /// If `route` or `cluster` are out of range for `snapshot`.
    pub fn new(
        snapshot: Arc<Snapshot>,
        route: usize,
        cluster: usize,
        candidates: Candidates,
    ) -> Self {
        assert!(route < snapshot.routes().len() && cluster < snapshot.clusters().len());
        RouteContext {
            snapshot,
            route,
            cluster,
            candidates,
            limits: ExchangeLimits::default(),
            destination: NO_PICK,
            passive_armed: false,
        }
    }

    /// Ask the forwarder to record a request cancelled before its response head in
    /// passive health (set by the passive-health stage).
    pub(crate) fn arm_passive(&mut self) {
        self.passive_armed = true;
    }

    /// Whether the passive-health stage saw the request.
    pub(crate) fn passive_armed(&self) -> bool {
        self.passive_armed
    }

    /// Limits for the forwarder.
    pub fn limits(&self) -> &ExchangeLimits {
        &self.limits
    }

    /// Limits for the forwarder, to set them.
    pub fn limits_mut(&mut self) -> &mut ExchangeLimits {
        &mut self.limits
    }

    /// The snapshot the decision was made on.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The matched route.
    pub fn route(&self) -> &Route {
        &self.snapshot.routes()[self.route]
    }

    /// The cluster serving the request.
    pub fn cluster(&self) -> &Cluster {
        &self.snapshot.clusters()[self.cluster]
    }

    /// The eligible destinations.
    pub fn candidates(&self) -> &Candidates {
        &self.candidates
    }

    /// The eligible destinations, to narrow them.
    pub fn candidates_mut(&mut self) -> &mut Candidates {
        &mut self.candidates
    }

    /// The snapshot, route and cluster, for the exchange's [`Outcome`].
    pub(crate) fn into_target(self) -> (Arc<Snapshot>, usize, usize) {
        (self.snapshot, self.route, self.cluster)
    }

    /// The snapshot, route and cluster, borrowed.
    pub(crate) fn target(&self) -> (&Arc<Snapshot>, usize, usize) {
        (&self.snapshot, self.route, self.cluster)
    }

    /// Move the decision to cluster `cluster` (an index into the snapshot's) with these
    /// candidates, and destination `destination` when one was chosen (see
    /// `balancing::reassign`, which defines [`RouteContext::reassign_cluster`]).
    pub(crate) fn retarget(
        &mut self,
        cluster: usize,
        candidates: Candidates,
        destination: Option<usize>,
    ) {
        self.cluster = cluster;
        self.candidates = candidates;
        if let Some(destination) = destination {
            self.destination = destination as u32;
        }
    }

    /// Whether load balancing has chosen a destination.
    pub(crate) fn has_destination(&self) -> bool {
        self.destination != NO_PICK
    }
}

/// No destination chosen yet.
const NO_PICK: u32 = u32::MAX;

/// A request that has been routed.
#[derive(Debug)]
pub struct Routed<B> {
    /// The HTTP request.
    pub request: Request<B>,
    /// Route, cluster and candidate destinations.
    pub context: RouteContext,
}

impl<B> Routed<B> {
    /// Pick destination `index` of the cluster: the request becomes [`Balanced`].
    ///
    /// # Panics
    /// If the cluster has no destination `index`.
    pub fn balance(mut self, index: usize) -> Balanced<B> {
        assert!(index < self.context.cluster().destinations().len());
        self.context.destination = index as u32;
        Balanced {
            request: self.request,
            context: self.context,
        }
    }
}

/// A request with its destination chosen: what the forwarder takes.
#[derive(Debug)]
pub struct Balanced<B> {
    /// The HTTP request.
    pub request: Request<B>,
    /// Route, cluster, candidate destinations and the chosen one (moving the request
    /// to another cluster with [`RouteContext::reassign_cluster`] chooses again).
    pub context: RouteContext,
}

impl<B> Balanced<B> {
    /// The chosen destination.
    pub fn destination(&self) -> &Destination {
        &self.context.cluster().destinations()[self.destination_index()]
    }

    /// The chosen destination's runtime state.
    pub fn destination_state(&self) -> &Arc<DestinationState> {
        self.destination().state()
    }

    /// The chosen destination's index in its cluster.
    pub fn destination_index(&self) -> usize {
        self.context.destination as usize
    }

    /// Take it apart: the request, the routing context and the destination index.
    pub fn into_parts(self) -> (Request<B>, RouteContext, usize) {
        let destination = self.destination_index();
        (self.request, self.context, destination)
    }

    /// Send the request to another destination of its cluster instead. Returns false
    /// (and changes nothing) if the cluster has no destination with that id.
    pub fn reassign_destination(&mut self, destination_id: &str) -> bool {
        match self.context.cluster().destination(destination_id) {
            Some((i, _)) => {
                self.context.destination = i as u32;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod connection_info_tests {
    use super::ConnectionInfo;

    fn info(port: u16) -> ConnectionInfo {
        ConnectionInfo {
            remote: ([10, 0, 0, 1], port).into(),
            local: ([127, 0, 0, 1], 80).into(),
            tls: false,
        }
    }

    #[test]
    fn current_is_scoped_and_extensions_take_precedence() {
        let request = http::Request::new(());
        assert_eq!(ConnectionInfo::of(&request), None);
        {
            let _outer = info(1).enter();
            assert_eq!(ConnectionInfo::of(&request), Some(info(1)));
            {
                let _inner = info(2).enter();
                assert_eq!(ConnectionInfo::current(), Some(info(2)));
            }
            assert_eq!(ConnectionInfo::current(), Some(info(1)));
            let mut explicit = http::Request::new(());
            explicit.extensions_mut().insert(info(3));
            assert_eq!(ConnectionInfo::of(&explicit), Some(info(3)));
        }
        assert_eq!(ConnectionInfo::current(), None);
    }
}
