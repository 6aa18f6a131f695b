//! What a server is configured with.

use super::counts::UpgradeLimit;
use super::*;

/// Limits of the listening side, applied to every connection.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerOptions {
    /// Most client connections open at once across all listeners (default 10,000). At
    /// the limit an idle keep-alive connection is closed to admit a new one — the
    /// longest-idle plain HTTP/1.1 connection the native engine has parked, as nginx
    /// does out of `worker_connections`; with none parked (TLS, HTTP/2 and hyper's
    /// engine keep their idle connections open), the new one waits until one closes or
    /// parks. A connection upgraded (a WebSocket) leaves the count, as in Kestrel.
    pub max_connections: usize,
    /// Most concurrent HTTP/2 streams per connection (default 100).
    pub max_concurrent_streams: u32,
    /// Time allowed to receive a request's headers on HTTP/1.1 before the connection is
    /// closed (slowloris; default 30 s, Kestrel's `RequestHeadersTimeout`): the first
    /// request's counted from the accept, a later one's from its first byte. A response
    /// or request body taking longer is not cut (the cluster's `ActivityTimeout` bounds
    /// those).
    pub header_read_timeout: Duration,
    /// How long an HTTP/1.1 connection is kept open after a response while nothing of
    /// the next request comes (default 130 s, Kestrel's `KeepAliveTimeout`: longer than
    /// the idle timeouts of the load balancers usually in front — AWS's 60 s, nginx's
    /// upstream `keepalive_timeout` 60 s — so that fuseway does not close a connection
    /// just as one of them sends on it). A head that starts must still end within the
    /// header read timeout of its first byte, and by the end of this one.
    pub keep_alive_timeout: Duration,
    /// Largest request head on HTTP/1.1 (bytes); larger ones get 431 (default 64 KiB).
    pub max_header_size: usize,
    /// Longest request line on HTTP/1.1 (bytes); longer ones get 414 (default 8 KiB,
    /// nginx's). Applies to the native engine.
    pub max_request_line: usize,
    /// Which engine serves HTTP/1.1 (default [`Http1Engine::Native`], or what
    /// `FUSEWAY_HTTP1_ENGINE` names).
    pub http1_engine: Http1Engine,
    /// Which engine serves HTTP/2 (default [`Http2Engine::Native`], or what
    /// `FUSEWAY_HTTP2_ENGINE` names).
    pub http2_engine: Http2Engine,
    /// Largest header list on HTTP/2 (bytes; default 64 KiB); larger ones get 431.
    pub max_header_list_size: u32,
    /// Most header fields in a request, HTTP/1.1 and HTTP/2 (default 100, Kestrel's
    /// `MaxRequestHeaderCount`); more get 431.
    pub max_request_headers: u32,
    /// The longest name or value of an HTTP/2 request header field (bytes; default
    /// `None`: only the header list's limit; Kestrel's
    /// `Http2.MaxRequestHeaderFieldSize`); longer ones get 431.
    pub http2_max_header_field_size: Option<u32>,
    /// The HPACK table an HTTP/2 client's header blocks may use (bytes; default 4 096,
    /// HTTP/2's; Kestrel's `Http2.HeaderTableSize`).
    pub http2_header_table_size: u32,
    /// The largest frame an HTTP/2 client may send (bytes, 16 384 to 16 777 215;
    /// default 16 384, HTTP/2's; Kestrel's `Http2.MaxFrameSize`).
    pub http2_max_frame_size: u32,
    /// The window an HTTP/2 client gets for each stream's request body (bytes; default
    /// 1 MiB; Kestrel's `Http2.InitialStreamWindowSize`): what it may send before the
    /// pipeline reads it.
    pub http2_initial_stream_window: u32,
    /// The window an HTTP/2 client gets for its request bodies over the connection
    /// (bytes; default 1 MiB; Kestrel's `Http2.InitialConnectionWindowSize`).
    pub http2_initial_connection_window: u32,
    /// How long in-flight requests may take after shutdown starts (default 30 s).
    pub graceful_timeout: Duration,
    /// HTTP/2 keep-alive pings to clients: a ping after this long without a frame from
    /// the client, idle connections too (default `None`: no pings, Kestrel's default).
    pub http2_keep_alive_interval: Option<Duration>,
    /// How long a ping's answer is awaited before the connection is closed (default
    /// 20 s).
    pub http2_keep_alive_timeout: Duration,
    /// An HTTP/2 connection with no request in flight for this long is closed (default
    /// 130 s, Kestrel's `KeepAliveTimeout`).
    pub http2_idle_timeout: Duration,
    /// The slowest a request body may arrive while the pipeline waits for it (default
    /// 240 bytes a second after a 5 s grace period, Kestrel's `MinRequestBodyDataRate`;
    /// `None`: no minimum). An HTTP/1.1 body below it is answered `408` and its
    /// connection closed; on HTTP/2 it is kept over a connection's bodies together, as
    /// Kestrel does, and a connection below it gets GOAWAY (`INTERNAL_ERROR`) and is
    /// closed. Kept by the native engines.
    pub min_request_body_data_rate: Option<MinDataRate>,
    /// The slowest a client may take its responses (default 240 bytes a second with a
    /// 5 s grace period, Kestrel's `MinResponseDataRate`; `None`: no minimum): a write
    /// to the client that waits longer than the grace period and than its bytes take
    /// at this rate closes the connection (on HTTP/2, the connection's writes
    /// together). Kept by the native engines.
    pub min_response_data_rate: Option<MinDataRate>,
    /// Most upgraded connections at once (Kestrel's `MaxConcurrentUpgradedConnections`;
    /// default none): see [`ServerOptions::max_upgraded_connections`].
    upgraded: Option<UpgradeLimit>,
}

/// A minimum data rate: Kestrel's `MinDataRate`, at least `bytes_per_second` once
/// `grace_period` has passed. How each minimum is timed (a request body's waits, a
/// response's writes): [`ServerOptions::min_request_body_data_rate`],
/// [`ServerOptions::min_response_data_rate`].
///
/// ```
/// use std::time::Duration;
/// use fuseway::server::{MinDataRate, ServerOptions};
///
/// let options = ServerOptions::default()
///     .min_request_body_data_rate(Some(MinDataRate::new(1_000, Duration::from_secs(2))));
/// assert_eq!(options.min_request_body_data_rate.unwrap().bytes_per_second, 1_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MinDataRate {
    /// The least bytes a second.
    pub bytes_per_second: u64,
    /// How long the rate is not checked.
    pub grace_period: Duration,
}

impl MinDataRate {
    /// At least `bytes_per_second` once `grace_period` has passed.
    pub fn new(bytes_per_second: u64, grace_period: Duration) -> Self {
        MinDataRate {
            bytes_per_second,
            grace_period,
        }
    }

    /// A minimum of `bytes_per_second`, or none for 0 (as the command line and
    /// `Kestrel.Limits` take 0).
    pub(crate) fn unless_zero(bytes_per_second: u64, grace_period: Duration) -> Option<Self> {
        (bytes_per_second > 0).then(|| MinDataRate::new(bytes_per_second, grace_period))
    }

    /// How long `bytes` may take at this rate: the grace period, or longer.
    pub(crate) fn allowance(&self, bytes: u64) -> Duration {
        self.grace_period.max(self.time_for(bytes))
    }

    /// How long `bytes` take at this rate.
    pub(crate) fn time_for(&self, bytes: u64) -> Duration {
        let worth = bytes as f64 / self.bytes_per_second.max(1) as f64;
        Duration::try_from_secs_f64(worth).unwrap_or(Duration::MAX)
    }
}

impl Default for MinDataRate {
    /// Kestrel's default: 240 bytes a second after 5 s.
    fn default() -> Self {
        MinDataRate::new(240, Duration::from_secs(5))
    }
}

/// The engine that serves HTTP/1.1 connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http1Engine {
    /// fuseway's own: one task and one state machine per connection, buffers reused
    /// across its messages, the edge-proxy checks of RFC 9112 (see docs/GUIDE.md,
    /// "HTTP/1.1 engines").
    #[default]
    Native,
    /// hyper's HTTP/1.1 server: the reference the native engine is tested against, and
    /// a fallback.
    Hyper,
}

impl Http1Engine {
    /// The engine named by the `FUSEWAY_HTTP1_ENGINE` environment variable (`native`
    /// or `hyper`), else the default: lets a deployment, or a test run, pick hyper
    /// without a code change. An unknown name is ignored with a warning.
    pub fn from_env() -> Http1Engine {
        match std::env::var("FUSEWAY_HTTP1_ENGINE") {
            Ok(name) => name.parse().unwrap_or_else(|e| {
                tracing::warn!("FUSEWAY_HTTP1_ENGINE: {e}; using the native engine");
                Http1Engine::Native
            }),
            Err(_) => Http1Engine::Native,
        }
    }
}

impl std::str::FromStr for Http1Engine {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "native" => Ok(Http1Engine::Native),
            "hyper" => Ok(Http1Engine::Hyper),
            _ => Err(format!(
                "unknown HTTP/1.1 engine `{name}` (native or hyper)"
            )),
        }
    }
}

/// The engine that serves HTTP/2 connections (h2c and h2 over TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http2Engine {
    /// fuseway's own: one task per connection decodes the frames and polls every
    /// stream's pipeline itself — no task, channel or lock per stream (see
    /// docs/GUIDE.md, "HTTP/2 engines").
    #[default]
    Native,
    /// hyper's HTTP/2 server (on the h2 crate): the reference the native engine is
    /// tested against, and a fallback.
    Hyper,
}

impl Http2Engine {
    /// The engine named by the `FUSEWAY_HTTP2_ENGINE` environment variable (`native`
    /// or `hyper`), else the default: lets a deployment, or a test run, pick hyper
    /// without a code change. An unknown name is ignored with a warning.
    pub fn from_env() -> Http2Engine {
        match std::env::var("FUSEWAY_HTTP2_ENGINE") {
            Ok(name) => name.parse().unwrap_or_else(|e| {
                tracing::warn!("FUSEWAY_HTTP2_ENGINE: {e}; using the native engine");
                Http2Engine::Native
            }),
            Err(_) => Http2Engine::Native,
        }
    }
}

impl std::str::FromStr for Http2Engine {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "native" => Ok(Http2Engine::Native),
            "hyper" => Ok(Http2Engine::Hyper),
            _ => Err(format!("unknown HTTP/2 engine `{name}` (native or hyper)")),
        }
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: 10_000,
            max_concurrent_streams: 100,
            header_read_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(130),
            max_header_size: 64 * 1024,
            max_request_line: 8 * 1024,
            http1_engine: Http1Engine::from_env(),
            http2_engine: Http2Engine::from_env(),
            max_header_list_size: 64 * 1024,
            max_request_headers: 100,
            http2_max_header_field_size: None,
            http2_header_table_size: 4096,
            http2_max_frame_size: 16_384,
            http2_initial_stream_window: 1 << 20,
            http2_initial_connection_window: 1 << 20,
            graceful_timeout: Duration::from_secs(30),
            http2_keep_alive_interval: None,
            http2_keep_alive_timeout: Duration::from_secs(20),
            http2_idle_timeout: Duration::from_secs(130),
            min_request_body_data_rate: Some(MinDataRate::default()),
            min_response_data_rate: Some(MinDataRate::default()),
            upgraded: None,
        }
    }
}

/// Each setting can be set in a chain from the defaults (the struct is
/// `#[non_exhaustive]`: settings may be added without breaking callers).
///
/// ```
/// use std::time::Duration;
/// use fuseway::server::{Http1Engine, ServerOptions};
///
/// let options = ServerOptions::default()
///     .max_connections(50_000)
///     .header_read_timeout(Duration::from_secs(10))
///     .http1_engine(Http1Engine::Native);
/// assert_eq!(options.max_connections, 50_000);
/// ```
impl ServerOptions {
    /// Sets what a configuration's [`ServerLimits`](crate::config::ServerLimits) (Kestrel's
    /// `Limits`) sets; the rest stays. `KeepAliveTimeout` is the idle timeout of HTTP/1.1
    /// and HTTP/2 connections alike, as in Kestrel; `MaxRequestBodySize` is not a
    /// server option (routes apply it).
    ///
    /// ```
    /// use fuseway::config::{parse, Format};
    /// use fuseway::server::ServerOptions;
    /// let config = parse(
    ///     r#"{ "Limits": { "MaxConcurrentConnections": 500, "MinResponseDataRate": null } }"#,
    ///     Format::Json,
    /// )
    /// .unwrap();
    /// let options = ServerOptions::default().limits(&config.limits);
    /// assert_eq!(options.max_connections, 500);
    /// assert_eq!(options.min_response_data_rate, None);
    /// ```
    pub fn limits(mut self, limits: &crate::config::ServerLimits) -> Self {
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        // Kestrel's `TimeSpan.MaxValue` stands for "never": a year is as good, and no
        // deadline overflows.
        const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);
        let timeout = |d: crate::config::ConfigDuration| d.get().min(NEVER);
        if let Some(n) = limits.max_concurrent_connections {
            self.max_connections = size(n);
        }
        if let Some(value) = limits.keep_alive_timeout {
            self.keep_alive_timeout = timeout(value);
            self.http2_idle_timeout = timeout(value);
        }
        if let Some(value) = limits.request_headers_timeout {
            self.header_read_timeout = timeout(value);
        }
        if let Some(n) = limits.max_request_line_size {
            self.max_request_line = size(n);
        }
        if let Some(n) = limits.max_request_headers_total_size {
            // Both protocols' head, as in Kestrel.
            self.max_header_size = size(n);
            self.max_header_list_size = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(n) = limits.max_request_header_count {
            self.max_request_headers = n;
        }
        if let Some(n) = limits.max_concurrent_upgraded_connections {
            self = self.max_upgraded_connections(Some(size(n)));
        }
        let rate = |rate: Option<crate::config::DataRate>| {
            rate.and_then(|r| MinDataRate::unless_zero(r.bytes_per_second, timeout(r.grace_period)))
        };
        if let Some(value) = limits.min_request_body_data_rate {
            self.min_request_body_data_rate = rate(value);
        }
        if let Some(value) = limits.min_response_data_rate {
            self.min_response_data_rate = rate(value);
        }
        if let Some(h2) = &limits.http2 {
            if let Some(n) = h2.max_streams_per_connection {
                self.max_concurrent_streams = n;
            }
            if let Some(delay) = h2.keep_alive_ping_delay {
                self.http2_keep_alive_interval = Some(timeout(delay)).filter(|&d| d < NEVER);
            }
            if let Some(value) = h2.keep_alive_ping_timeout {
                self.http2_keep_alive_timeout = timeout(value);
            }
            if let Some(n) = h2.initial_stream_window_size {
                self.http2_initial_stream_window = n;
            }
            if let Some(n) = h2.initial_connection_window_size {
                self.http2_initial_connection_window = n;
            }
            if let Some(n) = h2.header_table_size {
                self.http2_header_table_size = n;
            }
            if let Some(n) = h2.max_frame_size {
                self.http2_max_frame_size = n;
            }
            if let Some(n) = h2.max_request_header_field_size {
                self.http2_max_header_field_size = Some(n);
            }
        }
        self
    }

    /// Sets `http2_initial_stream_window` and `http2_initial_connection_window` (each
    /// from 65 535 to 2^31 − 1 bytes).
    pub fn http2_initial_windows(mut self, stream: u32, connection: u32) -> Self {
        self.http2_initial_stream_window = stream;
        self.http2_initial_connection_window = connection;
        self
    }

    /// Sets `http2_keep_alive_interval` and `http2_keep_alive_timeout`.
    pub fn http2_keep_alive(mut self, interval: Option<Duration>, timeout: Duration) -> Self {
        self.http2_keep_alive_interval = interval;
        self.http2_keep_alive_timeout = timeout;
        self
    }

    /// Sets `http2_idle_timeout`.
    pub fn http2_idle_timeout(mut self, value: Duration) -> Self {
        self.http2_idle_timeout = value;
        self
    }

    /// Sets `min_request_body_data_rate`.
    pub fn min_request_body_data_rate(mut self, value: Option<MinDataRate>) -> Self {
        self.min_request_body_data_rate = value;
        self
    }

    /// Sets `min_response_data_rate`.
    pub fn min_response_data_rate(mut self, value: Option<MinDataRate>) -> Self {
        self.min_response_data_rate = value;
        self
    }

    /// Sets `max_connections`.
    pub fn max_connections(mut self, value: usize) -> Self {
        self.max_connections = value;
        self
    }

    /// Sets `max_concurrent_streams`.
    pub fn max_concurrent_streams(mut self, value: u32) -> Self {
        self.max_concurrent_streams = value;
        self
    }

    /// Sets `header_read_timeout`.
    pub fn header_read_timeout(mut self, value: Duration) -> Self {
        self.header_read_timeout = value;
        self
    }

    /// Sets `keep_alive_timeout`.
    pub fn keep_alive_timeout(mut self, value: Duration) -> Self {
        self.keep_alive_timeout = value;
        self
    }

    /// Sets `max_header_size`.
    pub fn max_header_size(mut self, value: usize) -> Self {
        self.max_header_size = value;
        self
    }

    /// Sets `max_request_line`.
    pub fn max_request_line(mut self, value: usize) -> Self {
        self.max_request_line = value;
        self
    }

    /// Sets `http1_engine`.
    pub fn http1_engine(mut self, value: Http1Engine) -> Self {
        self.http1_engine = value;
        self
    }

    /// Sets `http2_engine`.
    pub fn http2_engine(mut self, value: Http2Engine) -> Self {
        self.http2_engine = value;
        self
    }

    /// Sets `max_header_list_size`.
    pub fn max_header_list_size(mut self, value: u32) -> Self {
        self.max_header_list_size = value;
        self
    }

    /// Most connections upgraded at once — WebSockets and other `Upgrade` protocols, and
    /// HTTP/2 extended CONNECT tunnels — across the server (Kestrel's
    /// `MaxConcurrentUpgradedConnections`; `None`, the default: no limit). Past it, an
    /// upgrade the destination agrees to is refused, as Kestrel's under YARP: the
    /// destination's connection is closed and the client answered `502`. An upgraded
    /// connection leaves [`ServerOptions::max_connections`].
    ///
    /// ```
    /// use fuseway::server::ServerOptions;
    /// let options = ServerOptions::default().max_upgraded_connections(Some(1_000));
    /// assert_eq!(options.upgraded_connection_limit(), Some(1_000));
    /// ```
    pub fn max_upgraded_connections(mut self, value: Option<usize>) -> Self {
        self.upgraded = value.map(UpgradeLimit::new);
        self
    }

    /// The limit [`ServerOptions::max_upgraded_connections`] sets.
    pub fn upgraded_connection_limit(&self) -> Option<usize> {
        self.upgraded.as_ref().map(UpgradeLimit::limit)
    }

    /// The count of upgraded connections under the limit, if there is one, for the
    /// requests that may upgrade.
    pub(crate) fn upgrade_limit(&self) -> Option<&UpgradeLimit> {
        self.upgraded.as_ref()
    }

    /// These options with a count of upgraded connections of their own (a server's:
    /// two servers made from clones of one `ServerOptions` count apart).
    pub(crate) fn own_upgrade_count(mut self) -> Self {
        self.upgraded = self.upgraded.map(|u| UpgradeLimit::new(u.limit()));
        self
    }

    /// Sets `max_request_headers`.
    pub fn max_request_headers(mut self, value: u32) -> Self {
        self.max_request_headers = value;
        self
    }

    /// Sets `http2_max_header_field_size`.
    pub fn http2_max_header_field_size(mut self, value: Option<u32>) -> Self {
        self.http2_max_header_field_size = value;
        self
    }

    /// Sets `http2_header_table_size`.
    pub fn http2_header_table_size(mut self, value: u32) -> Self {
        self.http2_header_table_size = value;
        self
    }

    /// Sets `http2_max_frame_size` (16 384 to 16 777 215).
    pub fn http2_max_frame_size(mut self, value: u32) -> Self {
        self.http2_max_frame_size = value;
        self
    }

    /// Sets `graceful_timeout`.
    pub fn graceful_timeout(mut self, value: Duration) -> Self {
        self.graceful_timeout = value;
        self
    }
}
