//! [`ExchangeGuard`]: what lives exactly as long as one exchange.

use std::sync::Arc;
use std::task::{Context, Poll};

use crate::health::PassiveRecord;
use crate::request::{ExchangeEnd, ExchangeReport, ForwardError, ForwardErrorKind};
use crate::state::{ConcurrencyGuard, DestinationState};

use super::{expect, pool};

/// Everything that lives exactly as long as one exchange: the destination's and the
/// cluster's concurrency counters, the guards and end hooks stages asked for (any
/// number of each), and the passive-health record. When the exchange ends the counters
/// and guards are released first, then the hooks are called and the record is made —
/// exactly once; a response the client abandoned is recorded as a non-failure.
pub struct ExchangeGuard {
    /// The exchange counts in `target`'s concurrency counter (given back once): the
    /// counter is reached through `target`, not through a guard of its own holding a
    /// second `Arc` (each clone and drop an atomic operation on the request's path).
    counted: bool,
    cluster: Option<ConcurrencyGuard>,
    /// The guards and end hooks stages asked for.
    held: Held,
    passive: Option<PassiveRecord>,
    continue_closer: Option<expect::Closer>,
    /// The exchange with the destination once its response head has arrived: an
    /// HTTP/1.1 connection is driven from the response body through it, and goes back
    /// to its pool when the body ends cleanly.
    upstream: Option<pool::BoxExchange>,
    target: Arc<DestinationState>,
    /// Response body bytes passed on to the client so far (the request body's are
    /// counted by its progress record and handed to [`finish_sent`](Self::finish_sent)).
    pub(crate) response_bytes: u64,
}

impl std::fmt::Debug for ExchangeGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeGuard")
            .field("counted", &self.counted)
            .field("cluster", &self.cluster)
            .field("held", &self.held)
            .field("passive", &self.passive)
            .field("continue_closer", &self.continue_closer)
            .field("upstream", &self.upstream.is_some())
            .finish()
    }
}

impl ExchangeGuard {
    pub(super) fn new(target: &Arc<DestinationState>, cluster: ConcurrencyGuard) -> Self {
        target.enter_unguarded();
        ExchangeGuard {
            counted: true,
            cluster: Some(cluster),
            held: Held::None,
            passive: None,
            continue_closer: None,
            upstream: None,
            target: target.clone(),
            response_bytes: 0,
        }
    }

    /// Log that the destination's response body failed (after the head was sent on).
    pub(crate) fn log_body_failure(&self, error: &ForwardError) {
        tracing::warn!(
            cluster = self.target.cluster_id(),
            destination = self.target.id(),
            error = %error,
            "response body from the destination failed; aborting the response"
        );
    }

    pub(crate) fn hold(&mut self, guard: ConcurrencyGuard) {
        match &mut self.held {
            Held::None => self.held = Held::One(guard),
            held => held.push(Hook::Guard { _held: guard }),
        }
    }

    pub(crate) fn on_end(&mut self, hook: EndHook) {
        self.held.push(Hook::End(hook));
    }

    pub(crate) fn on_complete(&mut self, record: PassiveRecord) {
        self.passive = Some(record);
    }

    /// Close the upstream connection of a rejected `Expect: 100-continue` when the
    /// exchange ends.
    pub(super) fn close_on_finish(&mut self, closer: expect::Closer) {
        self.continue_closer = Some(closer);
    }

    /// Keep the exchange with the destination for the response body's lifetime.
    pub(super) fn attach(&mut self, upstream: pool::BoxExchange) {
        self.upstream = Some(upstream);
    }

    /// The exchange with the destination, while the response body streams.
    pub(crate) fn exchange_mut(&mut self) -> Option<&mut pool::BoxExchange> {
        self.upstream.as_mut()
    }

    /// Ready once `deadline` has passed, on the exchange's timer (pending for ever
    /// when the exchange is over).
    pub(crate) fn poll_deadline(
        &mut self,
        cx: &mut Context<'_>,
        deadline: tokio::time::Instant,
    ) -> Poll<()> {
        match self.upstream.as_mut() {
            Some(upstream) => upstream.as_mut().poll_deadline(cx, deadline),
            None => Poll::Pending,
        }
    }

    /// The exchange is over: `Some(result)` when the body ended or failed, `None` when
    /// it was abandoned (client gone).
    pub(crate) fn finish(&mut self, result: Option<Result<(), ForwardErrorKind>>) {
        self.finish_sent(result, 0);
    }

    /// [`finish`](Self::finish), `request_bytes` of request body having been sent.
    pub(crate) fn finish_sent(
        &mut self,
        result: Option<Result<(), ForwardErrorKind>>,
        request_bytes: u64,
    ) {
        if let Some(upstream) = self.upstream.take() {
            // A connection whose `Expect: 100-continue` body was never sent has broken
            // framing: it is closed, not reused.
            let reusable = matches!(result, Some(Ok(()))) && self.continue_closer.is_none();
            upstream.finish(reusable);
        }
        if std::mem::take(&mut self.counted) {
            self.target.leave();
        }
        self.cluster.take();
        self.continue_closer.take();
        let panicking = std::thread::panicking();
        let report = || {
            ExchangeReport::new(
                ExchangeEnd::from_result(result),
                request_bytes,
                self.response_bytes,
            )
        };
        match std::mem::replace(&mut self.held, Held::None) {
            Held::End(hook) if !panicking => (*hook)(&report()),
            Held::Many(mut hooks) => {
                // Guards first, then the hooks, in the order they were added.
                hooks.retain(|hook| matches!(hook, Hook::End(_)));
                let report = report();
                for hook in *hooks {
                    if let (Hook::End(hook), false) = (hook, panicking) {
                        hook(&report);
                    }
                }
            }
            _ => {}
        }
        // A client that went away is counted in the window's total, not as a failure
        // (as YARP counts `ResponseBodyClient`); a panic records nothing.
        if let Some(record) = self.passive.take() {
            if !panicking {
                let result = result.unwrap_or(Err(ForwardErrorKind::ResponseBodyClient));
                record.complete(&self.target, result);
            }
        }
    }
}

/// The guards and end hooks stages asked an exchange to keep: one guard (the limits
/// stage's) or one end hook (the access log's) inline, more in a list allocated when
/// needed.
#[derive(Default)]
enum Held {
    #[default]
    None,
    One(ConcurrencyGuard),
    // Boxed again: a thin pointer keeps every exchange (and so every response) from
    // growing by the second word of the hook's.
    #[allow(clippy::redundant_allocation)]
    End(Box<EndHook>),
    // Boxed: 8 bytes in every exchange rather than a `Vec`'s 24.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Hook>>),
}

impl Held {
    fn push(&mut self, hook: Hook) {
        match std::mem::take(self) {
            Held::None => match hook {
                Hook::End(end) => *self = Held::End(Box::new(end)),
                hook => *self = Held::Many(Box::new(vec![hook])),
            },
            Held::End(first) => {
                *self = Held::Many(Box::new(vec![Hook::End(*first), hook]));
            }
            Held::One(first) => {
                *self = Held::Many(Box::new(vec![Hook::Guard { _held: first }, hook]));
            }
            Held::Many(mut hooks) => {
                hooks.push(hook);
                *self = Held::Many(hooks);
            }
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::None => f.write_str("None"),
            Held::One(guard) => f.debug_tuple("One").field(guard).finish(),
            Held::End(_) => f.write_str("End"),
            Held::Many(hooks) => write!(f, "Many({})", hooks.len()),
        }
    }
}

/// What a stage keeps in an exchange beyond its first guard.
enum Hook {
    /// Kept to be dropped when the exchange ends.
    Guard {
        _held: ConcurrencyGuard,
    },
    End(EndHook),
}

/// A stage's end hook ([`ProxyResponse::on_exchange_report`](crate::request::ProxyResponse::on_exchange_report)).
type EndHook = Box<dyn FnOnce(&ExchangeReport) + Send>;

impl Drop for ExchangeGuard {
    fn drop(&mut self) {
        self.finish(None);
    }
}
