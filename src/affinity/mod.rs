//! Session affinity: requests carrying an affinity key go to the destination that
//! served the session before.
//!
//! Enabled per cluster with `SessionAffinity { Enabled: true, AffinityKeyName, ... }`.
//! The [`SessionAffinity`] stage runs after routing, before load balancing:
//!
//! | request | what happens |
//! |---|---|
//! | no key | unchanged: the balancer picks; the response gets the key of the destination it finally went to |
//! | a key of a candidate (available) destination | candidates narrowed to it; no key on the response |
//! | a key that is unreadable, sent twice (two header lines, or the cookie name twice), or of a destination that is gone or unavailable | `FailurePolicy`: `Redistribute` (default: all candidates, a new key on the response) or `Return503Error` (503 at once) |
//!
//! The key is written on the way back, error responses (502, 504 ...) included, whenever
//! the request was not affinitized and the exchange has a destination; never on an
//! answer without one (503 for no available destination, a limit's 429 ...).
//!
//! Policies (`Policy`), and where `AffinityKeyName` is used:
//!
//! | policy | carrier | value |
//! |---|---|---|
//! | `HashCookie` (default) | cookie | lower-case hex of XxHash64 over the UTF-16LE upper-cased id: as YARP ([`hash_cookie_value`]) |
//! | `ArrCookie` | cookie | upper-case hex of SHA-256 over the UTF-16LE lower-cased id: as YARP and IIS ARR ([`arr_cookie_value`]) |
//! | `Cookie` | cookie | the id sealed with ChaCha20-Poly1305, base64url |
//! | `CustomHeader` | request and response header | the id sealed with ChaCha20-Poly1305, base64url |
//!
//! The sealed values are **not** YARP-compatible (YARP uses ASP.NET Data Protection).
//! They are sealed under `EncryptionKey` (32 bytes, base64) or, without one, under a
//! random key made once per process: such keys do not survive a restart and are not
//! shared between instances (a warning says so).
//!
//! The cookie is written as ASP.NET Core writes it, e.g.
//! `.Affinity=53c079ed4c377b0d; expires=Sun, 06 Nov 1994 08:49:37 GMT; max-age=3600;
//! domain=example.com; path=/; secure; samesite=lax; httponly`, with `Cookie.Path`
//! (default `/`), `Cookie.Domain`, `Cookie.HttpOnly` (default true), `Cookie.SameSite`
//! (`Unspecified`, the default, writes none), `Cookie.Expiration` (`expires` = now +
//! it), `Cookie.MaxAge` (whole seconds) and `Cookie.SecurePolicy`: `SameAsRequest`
//! (default; `secure` when the request came over TLS or has an `https` URI), `Always`
//! or `None`. `IsEssential` is accepted and ignored.
//!
//! ```
//! use fuseway::affinity::SessionAffinity;
//! use fuseway::stage::StageLayer;
//! let layer = StageLayer::new(SessionAffinity::new());
//! # let _ = layer;
//! ```

mod cookie;
mod keys;
mod seal;

use crate::state::Destination;
use std::fmt;
use std::time::SystemTime;

use base64::Engine;
use http::header::SET_COOKIE;
use http::uri::Scheme;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};

pub use keys::{arr_cookie_value, hash_cookie_value};

use crate::config::{
    AffinityFailurePolicyName, ConfigError, SessionAffinityConfig, SessionAffinityPolicyName,
};
use crate::request::{ConnectionInfo, ProxyResponse, Routed};
use crate::stage::{InPlace, Stage};
use crate::state::Cluster;
use cookie::{CookieFormat, Found};
use keys::{Keys, Lookup};
use seal::Sealer;

/// Parse a `SessionAffinity.EncryptionKey`: 32 bytes, base64.
pub fn parse_key(key: &str) -> Result<[u8; 32], String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|e| format!("not valid base64: {e}"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("must be 32 bytes, not {}", b.len()))
}

/// Where the key travels.
enum Carrier {
    Cookie(CookieFormat),
    Header(HeaderName),
}

/// A cluster's affinity settings, resolved from its configuration.
///
/// The destinations' keys are computed once, when the configuration is loaded; a lookup
/// is then a parse and a binary search, without allocating.
pub struct AffinitySettings {
    policy: SessionAffinityPolicyName,
    failure_policy: AffinityFailurePolicyName,
    key_name: Box<str>,
    carrier: Carrier,
    sealer: Option<Sealer>,
    keys: Keys,
}

impl fmt::Debug for AffinitySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AffinitySettings")
            .field("policy", &self.policy)
            .field("failure_policy", &self.failure_policy)
            .field("key_name", &self.key_name)
            .finish_non_exhaustive()
    }
}

impl AffinitySettings {
    /// Resolve; `None` when affinity is not enabled. `path` is the cluster's config path.
    pub(crate) fn from_config(
        config: Option<&SessionAffinityConfig>,
        cluster_id: &str,
        destinations: &[Destination],
        path: &str,
    ) -> Result<Option<Self>, ConfigError> {
        let Some(config) = config.filter(|c| c.enabled == Some(true)) else {
            return Ok(None);
        };
        let path = format!("{path}.SessionAffinity");
        let name_error = |field: &str| {
            let path = format!("{path}.{field}");
            move |m: String| ConfigError::new(path, m)
        };
        let policy: SessionAffinityPolicyName = match config.policy.as_deref() {
            Some(p) => p.parse().map_err(name_error("Policy"))?,
            None => SessionAffinityPolicyName::default(),
        };
        let failure_policy: AffinityFailurePolicyName = match config.failure_policy.as_deref() {
            Some(p) => p.parse().map_err(name_error("FailurePolicy"))?,
            None => AffinityFailurePolicyName::default(),
        };
        let key_name = config
            .affinity_key_name
            .as_deref()
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| {
                ConfigError::new(
                    format!("{path}.AffinityKeyName"),
                    "required when session affinity is enabled",
                )
            })?;
        let key = config
            .encryption_key
            .as_deref()
            .map(parse_key)
            .transpose()
            .map_err(name_error("EncryptionKey"))?;

        let carrier = match policy {
            SessionAffinityPolicyName::CustomHeader => {
                Carrier::Header(HeaderName::from_bytes(key_name.as_bytes()).map_err(|_| {
                    ConfigError::new(
                        format!("{path}.AffinityKeyName"),
                        format!("`{key_name}` is not a valid header name"),
                    )
                })?)
            }
            _ => Carrier::Cookie(CookieFormat::from_config(
                key_name,
                config.cookie.as_ref(),
                &path,
            )?),
        };
        let sealer = match policy {
            SessionAffinityPolicyName::Cookie | SessionAffinityPolicyName::CustomHeader => {
                let key = match &key {
                    Some(k) => k,
                    None => seal::process_key().ok_or_else(|| {
                        ConfigError::new(
                            format!("{path}.EncryptionKey"),
                            "no key set and the system's random generator failed",
                        )
                    })?,
                };
                Some(Sealer::new(key, cluster_id))
            }
            SessionAffinityPolicyName::HashCookie | SessionAffinityPolicyName::ArrCookie => None,
        };
        let ids: Vec<&str> = destinations.iter().map(|d| d.id()).collect();
        let keys = Keys::build(policy, sealer.as_ref(), &carrier, &ids);
        Ok(Some(AffinitySettings {
            policy,
            failure_policy,
            key_name: Box::from(key_name),
            carrier,
            sealer,
            keys,
        }))
    }

    /// The policy (where the key travels and what it holds).
    pub fn policy(&self) -> SessionAffinityPolicyName {
        self.policy
    }

    /// What happens when the key cannot be honoured.
    pub fn failure_policy(&self) -> AffinityFailurePolicyName {
        self.failure_policy
    }

    /// The cookie or header name carrying the key.
    pub fn key_name(&self) -> &str {
        &self.key_name
    }

    /// Resolve the key `headers` carry against the cluster's destinations, accepting only
    /// those for which `is_candidate` holds.
    fn resolve(&self, headers: &HeaderMap, is_candidate: impl Fn(usize) -> bool) -> Resolution {
        let raw = match &self.carrier {
            Carrier::Cookie(c) => match cookie::find_cookie(headers, &c.name) {
                Found::Absent => return Resolution::NotSet,
                Found::Many => return Resolution::Failed("the affinity cookie was sent twice"),
                Found::One(v) => v,
            },
            Carrier::Header(name) => {
                let mut values = headers.get_all(name).iter();
                match (values.next(), values.next()) {
                    (None, _) => return Resolution::NotSet,
                    (Some(v), None) => v.as_bytes(),
                    (Some(_), Some(_)) => {
                        return Resolution::Failed("the affinity header was sent twice")
                    }
                }
            }
        };
        // As YARP: an empty protected key counts as no key; an empty hash matches nothing.
        if raw.is_empty() && self.sealer.is_some() {
            return Resolution::NotSet;
        }
        match self.keys.lookup(raw, self.sealer.as_ref(), is_candidate) {
            Lookup::Found(i) => Resolution::Found(i),
            Lookup::NotFound => {
                Resolution::Failed("no available destination has the request's affinity key")
            }
            Lookup::Unreadable => Resolution::Failed("the request's affinity key is unreadable"),
        }
    }

    /// The response header carrying destination `index`'s key: its name and value.
    /// `now` (the wall clock) is read only for a cookie with an expiry.
    fn response_header(
        &self,
        index: usize,
        request_secure: bool,
        now: impl FnOnce() -> SystemTime,
    ) -> Option<(HeaderName, HeaderValue)> {
        let keys = &self.keys;
        let value = keys.values.get(index)?;
        if value.is_empty() {
            return None;
        }
        match &self.carrier {
            Carrier::Cookie(c) => {
                let secure = c.is_secure(request_secure);
                let v = match &keys.ready {
                    Some(ready) => ready[index][usize::from(secure)].clone(),
                    // Only a cookie with an expiry needs the time (a clock read).
                    None => header_value(c.set_cookie(value, secure, now())),
                };
                Some((SET_COOKIE, v))
            }
            Carrier::Header(name) => {
                let ready = keys.ready.as_ref()?;
                Some((name.clone(), ready[index][0].clone()))
            }
        }
    }
}

/// The key value destination `index` of `cluster` is given (the cookie or header
/// value, without attributes); `None` if the cluster has no affinity or no such
/// destination.
///
/// ```
/// use fuseway::config::{parse, Format};
/// use fuseway::state::ProxyState;
///
/// let config = parse(r#"{
///   "Clusters": { "c1": {
///     "SessionAffinity": { "Enabled": true, "AffinityKeyName": ".Affinity" },
///     "Destinations": { "dest-B": { "Address": "http://127.0.0.1:9" } } } }
/// }"#, Format::Json).unwrap();
/// let state = ProxyState::new(config).unwrap();
/// let snapshot = state.snapshot();
/// let cluster = snapshot.cluster("c1").unwrap();
/// assert_eq!(fuseway::affinity::destination_key(cluster, 0), Some("53c079ed4c377b0d"));
/// ```
pub fn destination_key(cluster: &Cluster, index: usize) -> Option<&str> {
    let settings = cluster.affinity()?;
    let value = settings.keys.values.get(index)?;
    Some(value).filter(|v| !v.is_empty()).map(|v| &**v)
}

fn header_value(s: String) -> HeaderValue {
    // Every piece was validated (tokens, visible ASCII, hex, base64url).
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The outcome of looking at a request's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    NotSet,
    Found(usize),
    Failed(&'static str),
}

/// Whether the request came over TLS, or names an `https` URI.
fn is_secure<B: 'static>(request: &Request<B>) -> bool {
    ConnectionInfo::of(request).is_some_and(|c| c.tls)
        || request.uri().scheme() == Some(&Scheme::HTTPS)
}

/// The session-affinity stage: narrows the candidates to the destination named by the
/// request's affinity key, and writes the key of the destination a new session went to
/// on the response. See the [module documentation](self).
#[derive(Debug, Clone, Default)]
pub struct SessionAffinity {
    _private: (),
}

impl SessionAffinity {
    /// The session-affinity stage.
    pub fn new() -> Self {
        SessionAffinity::default()
    }
}

/// What [`SessionAffinity`] keeps for the way back: whether to write a key, and whether
/// the request was secure (for `SecurePolicy: SameAsRequest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffinityState {
    write: Option<bool>,
}

impl AffinityState {
    const NONE: AffinityState = AffinityState { write: None };

    fn write(secure: bool) -> Self {
        AffinityState {
            write: Some(secure),
        }
    }

    /// Whether the response will be given a new affinity key (if it has a destination).
    pub fn writes_key(&self) -> bool {
        self.write.is_some()
    }
}

impl<B: 'static> InPlace<Routed<B>> for SessionAffinity {
    /// [`Stage::on_request`] on the request where it lies (the default fused pipeline
    /// calls this: the request is not moved in and out).
    #[inline]
    fn on_request_in_place(&self, routed: &mut Routed<B>) -> Result<AffinityState, ProxyResponse> {
        let context = &routed.context;
        let cluster = context.cluster();
        let Some(settings) = cluster.affinity() else {
            return Ok(AffinityState::NONE);
        };
        let secure = is_secure(&routed.request);
        let failure_policy = settings.failure_policy;
        let candidates = context.candidates();
        match settings.resolve(routed.request.headers(), |i| candidates.contains(i)) {
            Resolution::NotSet => Ok(AffinityState::write(secure)),
            Resolution::Found(i) => {
                let candidates = routed.context.candidates_mut();
                candidates.clear();
                candidates.insert(i);
                Ok(AffinityState::NONE)
            }
            Resolution::Failed(why) => {
                tracing::debug!(
                    route = context.route().id(),
                    cluster = cluster.id(),
                    failure_policy = failure_policy.as_str(),
                    "session affinity failed: {why}"
                );
                match failure_policy {
                    AffinityFailurePolicyName::Redistribute => Ok(AffinityState::write(secure)),
                    AffinityFailurePolicyName::Return503Error => {
                        Err(ProxyResponse::status(StatusCode::SERVICE_UNAVAILABLE)
                            .for_route(context))
                    }
                }
            }
        }
    }
}

impl<B: 'static> Stage<Routed<B>> for SessionAffinity {
    type Out = Routed<B>;
    type State = AffinityState;

    fn on_request(
        &self,
        mut routed: Routed<B>,
    ) -> Result<(Routed<B>, AffinityState), ProxyResponse> {
        let state = self.on_request_in_place(&mut routed)?;
        Ok((routed, state))
    }

    fn on_response(&self, state: AffinityState, response: &mut ProxyResponse) {
        let Some(secure) = state.write else {
            return;
        };
        // The final cluster and destination: a later stage may have reassigned them.
        let outcome = &response.outcome;
        let (Some(cluster), Some(index)) = (outcome.cluster(), outcome.destination_index()) else {
            return;
        };
        let Some(settings) = cluster.affinity() else {
            return;
        };
        if let Some((name, value)) = settings.response_header(index, secure, SystemTime::now) {
            response.response.headers_mut().append(name, value);
        }
    }
}

/// Compiled for every cluster when a state is built (the session-affinity stage's
/// [`ClusterData`](crate::state::ClusterData)): none where affinity is not enabled.
impl crate::state::ClusterData for AffinitySettings {
    fn compile(
        source: &crate::state::ClusterSource<'_>,
        _previous: Option<&Self>,
    ) -> Result<Option<Self>, crate::config::ConfigErrors> {
        Ok(AffinitySettings::from_config(
            source.config.session_affinity.as_ref(),
            source.id,
            source.destinations,
            source.path,
        )?)
    }
}

impl Cluster {
    /// Its session-affinity settings, when enabled (compiled by the affinity stage).
    pub fn affinity(&self) -> Option<&AffinitySettings> {
        self.data::<AffinitySettings>()
    }
}

#[cfg(test)]
mod tests;

impl Keys {
    fn build(
        policy: SessionAffinityPolicyName,
        sealer: Option<&Sealer>,
        carrier: &Carrier,
        ids: &[&str],
    ) -> Keys {
        let ids = ids.to_vec();
        let (index, values) = match (policy, sealer) {
            (SessionAffinityPolicyName::ArrCookie, _) => Keys::arr(&ids),
            (_, Some(sealer)) => Keys::sealed(&ids, sealer),
            _ => Keys::hash(&ids),
        };
        let ready = match carrier {
            Carrier::Cookie(c) if c.has_expires() => None,
            Carrier::Cookie(c) => Some(
                values
                    .iter()
                    .map(|v| {
                        let epoch = SystemTime::UNIX_EPOCH;
                        [
                            header_value(c.set_cookie(v, c.is_secure(false), epoch)),
                            header_value(c.set_cookie(v, c.is_secure(true), epoch)),
                        ]
                    })
                    .collect(),
            ),
            Carrier::Header(_) => Some(
                values
                    .iter()
                    .map(|v| {
                        let h = header_value(v.to_string());
                        [h.clone(), h]
                    })
                    .collect(),
            ),
        };
        Keys {
            index,
            values: values.into_boxed_slice(),
            ready,
        }
    }
}
