//! Applying response header and trailer transforms.

use std::sync::Arc;

use http::{HeaderMap, StatusCode};

use super::request::keep_only;
use super::{ResponseOp, RouteTransforms};
use crate::config::ResponseCondition;

fn applies(when: ResponseCondition, status: StatusCode) -> bool {
    match when {
        ResponseCondition::Always => true,
        ResponseCondition::Success => status.as_u16() < 400,
        ResponseCondition::Failure => status.as_u16() >= 400,
    }
}

fn apply_ops(ops: &[ResponseOp], headers: &mut HeaderMap, status: StatusCode) {
    for op in ops {
        match op {
            ResponseOp::Set(name, value, when) if applies(*when, status) => {
                headers.insert(name.clone(), value.clone());
            }
            ResponseOp::Append(name, value, when) if applies(*when, status) => {
                headers.append(name.clone(), value.clone());
            }
            ResponseOp::Remove(name, when) if applies(*when, status) => {
                crate::forwarding::headers::remove_field(headers, name);
            }
            _ => {}
        }
    }
}

impl RouteTransforms {
    /// Apply the response header transforms to a response of `status`.
    /// `from_destination`: the headers came from the destination (so
    /// `ResponseHeadersCopy` / `ResponseHeadersAllowed` filter them); otherwise the
    /// response is the forwarder's own error response.
    pub fn apply_response(
        &self,
        headers: &mut HeaderMap,
        status: StatusCode,
        from_destination: bool,
    ) {
        if from_destination {
            if let Some(allowed) = &self.response_allowed {
                keep_only(headers, allowed);
            }
        }
        apply_ops(&self.response, headers, status);
    }

    /// The trailer transforms for a response of `status`, or `None` when the route
    /// has none.
    pub fn trailers_for(self: &Arc<Self>, status: StatusCode) -> Option<TrailerTransforms> {
        if !self.has_trailer_transforms() {
            return None;
        }
        let adds = self.trailers.iter().any(|op| match op {
            ResponseOp::Set(_, _, when) | ResponseOp::Append(_, _, when) => applies(*when, status),
            ResponseOp::Remove(..) => false,
        });
        Some(TrailerTransforms {
            transforms: self.clone(),
            status,
            pending: adds,
        })
    }
}

/// A route's response trailer transforms, bound to one response: applied to the
/// destination's trailers, or producing trailers at the end of a body that had none.
#[derive(Debug)]
pub struct TrailerTransforms {
    transforms: Arc<RouteTransforms>,
    status: StatusCode,
    /// Trailers still to be added at the end of the body.
    pending: bool,
}

impl TrailerTransforms {
    /// Transform the destination's trailers.
    pub fn apply(&mut self, trailers: &mut HeaderMap) {
        self.pending = false;
        if let Some(allowed) = &self.transforms.trailers_allowed {
            keep_only(trailers, allowed);
        }
        apply_ops(&self.transforms.trailers, trailers, self.status);
    }

    /// The body ended without trailers: the trailers to send, if transforms add any.
    pub fn at_end(&mut self) -> Option<HeaderMap> {
        if !std::mem::take(&mut self.pending) {
            return None;
        }
        let mut trailers = HeaderMap::new();
        apply_ops(&self.transforms.trailers, &mut trailers, self.status);
        (!trailers.is_empty()).then_some(trailers)
    }

    /// Whether trailers will still be added at the end of the body.
    pub fn pending(&self) -> bool {
        self.pending
    }
}
