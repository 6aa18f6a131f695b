//! The pipeline's response type and the outcome of forwarding.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use http::{Response, StatusCode};

use crate::body::ProxyBody;
use crate::state::DestinationState;

type BoxError = Box<dyn StdError + Send + Sync>;

/// What went wrong while forwarding, in YARP's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardErrorKind {
    /// No destination was available (503).
    NoAvailableDestinations,
    /// Connecting to or sending the request to the destination failed (502).
    Request,
    /// The destination did not answer within the activity timeout (504).
    RequestTimedOut,
    /// The client went away before the response started.
    RequestCanceled,
    /// Reading the request body from the client failed (400).
    RequestBodyClient,
    /// Sending the request body to the destination failed (502).
    RequestBodyDestination,
    /// Reading the response body from the destination failed (the response is aborted).
    ResponseBodyDestination,
    /// Writing the response body to the client failed.
    ResponseBodyClient,
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

/// What forwarding did: the final destination (a stage may have reassigned it) and the
/// error, if any. Passive health reads this.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The destination the request was sent to, if it got that far.
    pub destination: Option<Arc<DestinationState>>,
    /// The forwarding error, if any.
    pub error: Option<ForwardError>,
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

    /// The error response for a forwarding failure (status from its kind, empty body).
    pub fn error(error: ForwardError, destination: Option<Arc<DestinationState>>) -> Self {
        let mut r = ProxyResponse::status(error.kind().status());
        r.outcome = Outcome {
            destination,
            error: Some(error),
        };
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
}
