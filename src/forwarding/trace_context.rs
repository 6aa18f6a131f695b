//! W3C Trace Context (`traceparent`, `tracestate`) towards destinations.
//!
//! A request that comes with a valid `traceparent` goes on as a child of it: the same
//! trace id and flags, a new parent id (the proxy's own span in the trace, as YARP's
//! activity gives it), `tracestate` unchanged. An invalid `traceparent` is removed
//! with its `tracestate` (the W3C rule: a vendor that cannot parse it must not pass it
//! on). A request without one is forwarded without one, unless the proxy records spans
//! of its own (the telemetry stage does when a subscriber takes
//! [`fuseway::span`](crate::telemetry::span)): then it starts a trace ([`SpanIds`]).

use std::cell::Cell;

use http::header::{HeaderMap, HeaderName, HeaderValue};

pub(crate) static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Rewrite the request's trace context for the hop to the destination (unless the
/// request carries [`OwnSpan`]: its `traceparent` names the proxy's span already).
pub(crate) fn propagate(headers: &mut HeaderMap) {
    let Some(incoming) = super::headers::get_few(headers, &TRACEPARENT) else {
        return;
    };
    match child(incoming.as_bytes(), span_id()) {
        Some(child) => {
            headers.insert(&TRACEPARENT, child);
        }
        None => {
            headers.remove(&TRACEPARENT);
            headers.remove(&TRACESTATE);
        }
    }
}

/// A request's place in its trace when the proxy records a span of its own for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpanIds {
    /// The trace: the client's, or one started here.
    pub(crate) trace_id: u128,
    /// The proxy's span: the parent id the destination is sent.
    pub(crate) span_id: u64,
    /// The client's span (0: none, the trace started here).
    pub(crate) parent_id: u64,
    /// The trace flags (bit 0: sampled).
    pub(crate) flags: u8,
}

/// In a request's extensions: its `traceparent` names the proxy's own span already
/// ([`SpanIds::enter`]), the forwarder passes it on as it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnSpan;

impl SpanIds {
    /// The proxy's span of a request with these headers: a child of a valid
    /// `traceparent` (its trace id and flags), else the root of a new sampled trace.
    /// `traceparent` is set to name the new span as the parent of what follows; an
    /// invalid one's `tracestate` is removed (a new trace has none).
    pub(crate) fn enter(headers: &mut HeaderMap) -> SpanIds {
        let incoming = headers
            .get(&TRACEPARENT)
            .map(|t| t.as_bytes())
            .filter(|t| valid(t))
            .and_then(|t| {
                let field = |range: std::ops::Range<usize>| {
                    std::str::from_utf8(&t[range])
                        .ok()
                        .and_then(|s| u128::from_str_radix(s, 16).ok())
                };
                Some((field(3..35)?, field(36..52)? as u64, field(53..55)? as u8))
            });
        let ids = match incoming {
            Some((trace_id, parent_id, flags)) => SpanIds {
                trace_id,
                span_id: span_id(),
                parent_id,
                flags,
            },
            None => {
                headers.remove(&TRACESTATE);
                SpanIds {
                    trace_id: (u128::from(span_id()) << 64) | u128::from(span_id()),
                    span_id: span_id(),
                    parent_id: 0,
                    flags: 1,
                }
            }
        };
        headers.insert(&TRACEPARENT, ids.traceparent());
        ids
    }

    /// `00-<trace id>-<span id>-<flags>`: this span as the parent of what follows.
    fn traceparent(&self) -> HeaderValue {
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        hex(&self.trace_id.to_be_bytes(), &mut out[3..35]);
        out[35] = b'-';
        hex(&self.span_id.to_be_bytes(), &mut out[36..52]);
        out[52] = b'-';
        hex(&[self.flags], &mut out[53..55]);
        HeaderValue::from_bytes(&out).expect("hex digits and dashes")
    }
}

/// `bytes` as lowercase hex digits into `out` (twice as long).
pub(crate) fn hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(byte >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// The trace id of a valid `traceparent` (32 lowercase hex digits): the one the
/// destination is sent, and the access log's request id.
pub(crate) fn trace_id(traceparent: &HeaderValue) -> Option<&str> {
    let bytes = traceparent.as_bytes();
    valid(bytes).then(|| std::str::from_utf8(&bytes[3..35]).ok())?
}

/// Whether `traceparent` is a valid version-00 value (`00-<32 hex trace id>-<16 hex
/// parent id>-<2 hex flags>`, lowercase, neither id all zeros), or a later version's
/// whose first four fields are (read as version 00, as the spec asks).
fn valid(traceparent: &[u8]) -> bool {
    let lower_hex = |s: &[u8]| {
        s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let not_zero = |s: &[u8]| s.iter().any(|&b| b != b'0');
    if traceparent.len() < 55 {
        return false;
    }
    let (version, trace, parent, flags) = (
        &traceparent[0..2],
        &traceparent[3..35],
        &traceparent[36..52],
        &traceparent[53..55],
    );
    let dashes = [2, 35, 52].iter().all(|&i| traceparent[i] == b'-');
    let version_ok = lower_hex(version)
        && version != b"ff"
        && (traceparent.len() == 55 || (version != b"00" && traceparent[55] == b'-'));
    dashes
        && version_ok
        && lower_hex(trace)
        && not_zero(trace)
        && lower_hex(parent)
        && not_zero(parent)
        && lower_hex(flags)
}

/// `traceparent` with `span` as its parent id, if it is [valid].
fn child(traceparent: &[u8], span: u64) -> Option<HeaderValue> {
    if !valid(traceparent) {
        return None;
    }
    let flags = &traceparent[53..55];
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    out[3..36].copy_from_slice(&traceparent[3..36]);
    hex(&span.to_be_bytes(), &mut out[36..52]);
    out[52] = b'-';
    out[53..55].copy_from_slice(flags);
    HeaderValue::from_bytes(&out).ok()
}

/// A new non-zero span id: a per-thread xorshift generator seeded from the
/// process's random hasher keys.
fn span_id() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(&h as *const _ as usize);
            h.finish() | 1
        });
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_gets_a_new_parent_id() {
        let out = child(SAMPLE.as_bytes(), 0x0123_4567_89ab_cdef).unwrap();
        assert_eq!(
            out,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0123456789abcdef-01"
        );
        // A later version: its first four fields, as version 00.
        let later = format!("cc{}-extra", &SAMPLE[2..]);
        let out = child(later.as_bytes(), 1).unwrap();
        assert_eq!(
            out,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000001-01"
        );
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(child(bad.as_bytes(), 1).is_none(), "{bad}");
        }
    }

    #[test]
    fn headers_are_rewritten_or_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(&TRACEPARENT, HeaderValue::from_static(SAMPLE));
        headers.insert(&TRACESTATE, HeaderValue::from_static("vendor=1"));
        propagate(&mut headers);
        let out = headers[&TRACEPARENT].to_str().unwrap().to_owned();
        assert_eq!(&out[..36], &SAMPLE[..36]);
        assert_ne!(&out[36..52], &SAMPLE[36..52]);
        assert_eq!(headers[&TRACESTATE], "vendor=1");
        headers.insert(&TRACEPARENT, HeaderValue::from_static("garbage"));
        propagate(&mut headers);
        assert!(headers.is_empty(), "{headers:?}");
        let ids: std::collections::HashSet<u64> = (0..1000).map(|_| span_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&0));
    }

    #[test]
    fn the_proxys_span_continues_the_clients_trace_or_starts_one() {
        let mut headers = HeaderMap::new();
        headers.insert(&TRACEPARENT, HeaderValue::from_static(SAMPLE));
        headers.insert(&TRACESTATE, HeaderValue::from_static("vendor=1"));
        let ids = SpanIds::enter(&mut headers);
        assert_eq!(ids.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!((ids.parent_id, ids.flags), (0x00f067aa0ba902b7, 1));
        assert_eq!(
            headers[&TRACEPARENT],
            format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01",
                ids.span_id
            )
        );
        assert_eq!(headers[&TRACESTATE], "vendor=1");

        // Not sampled by the client: kept so.
        headers.insert(
            &TRACEPARENT,
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        );
        assert_eq!(SpanIds::enter(&mut headers).flags, 0);

        // None, or an invalid one: a new sampled trace, without the old tracestate.
        for incoming in [None, Some("00-zz")] {
            let mut headers = HeaderMap::new();
            if let Some(t) = incoming {
                headers.insert(&TRACEPARENT, HeaderValue::from_static(t));
                headers.insert(&TRACESTATE, HeaderValue::from_static("vendor=1"));
            }
            let ids = SpanIds::enter(&mut headers);
            assert_eq!((ids.parent_id, ids.flags), (0, 1));
            assert_ne!(ids.trace_id, 0);
            let sent = headers[&TRACEPARENT].to_str().unwrap();
            assert!(valid(sent.as_bytes()), "{sent}");
            assert_eq!(
                sent,
                format!("00-{:032x}-{:016x}-01", ids.trace_id, ids.span_id)
            );
            assert!(headers.get(&TRACESTATE).is_none());
        }
    }
}
