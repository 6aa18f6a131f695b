//! The server's limits: Kestrel's `Limits` section.
//!
//! A YARP user sets the listening side's limits in `appsettings.json` under
//! `Kestrel.Limits`, with Kestrel's keys; fuseway reads the same keys there (and under
//! `Limits` in the bare shape) and applies those it has an equivalent of. The keys it
//! has none of are accepted, so that the file works unchanged, and named in a warning
//! at start ([`ServerLimits::unapplied`]).

use serde::{Deserialize, Deserializer, Serialize};

use super::duration::ConfigDuration;

/// Kestrel's `Limits`: the server-wide limits of the listening side. Every key is
/// optional; an absent one keeps fuseway's default (the command line's option wins
/// over both). `MaxRequestBodySize` applies from the next reload; the others are read
/// at start, as Kestrel reads them.
///
/// ```
/// use fuseway::config::{parse, Format};
/// let config = parse(
///     r#"{
///       "Kestrel": { "Limits": {
///         "MaxRequestBodySize": null,
///         "KeepAliveTimeout": "00:05:00",
///         "MinRequestBodyDataRate": { "BytesPerSecond": 100, "GracePeriod": "00:00:10" },
///         "MaxRequestBufferSize": 1048576
///       } },
///       "ReverseProxy": {}
///     }"#,
///     Format::Json,
/// )
/// .unwrap();
/// let limits = &config.limits;
/// assert_eq!(limits.max_request_body_size, Some(None)); // null: no limit
/// assert_eq!(limits.keep_alive_timeout.unwrap().get().as_secs(), 300);
/// assert_eq!(limits.unapplied(), ["MaxRequestBufferSize"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Most client connections open at once (`--max-connections`; fuseway's default
    /// 10 000 where Kestrel has none).
    #[serde(default)]
    pub max_concurrent_connections: Option<u64>,
    /// The request body limit of routes that set none (Kestrel's default 30 000 000
    /// bytes); `null`: none. A route's `MaxRequestBodySize` overrides it, as in YARP.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_request_body_size: Option<Option<u64>>,
    /// How long an idle client connection is kept for its next request, HTTP/1.1 and
    /// HTTP/2 (`--keep-alive-timeout`; 130 s).
    #[serde(default)]
    pub keep_alive_timeout: Option<ConfigDuration>,
    /// How long a client may take to send an HTTP/1.1 request head
    /// (`--header-read-timeout`; 30 s).
    #[serde(default)]
    pub request_headers_timeout: Option<ConfigDuration>,
    /// Longest HTTP/1.1 request line, in bytes (8 KiB); longer ones get 414.
    #[serde(default)]
    pub max_request_line_size: Option<u64>,
    /// Largest request head, in bytes: an HTTP/1.1 head, an HTTP/2 header list
    /// (`SETTINGS_MAX_HEADER_LIST_SIZE`) (fuseway's default 64 KiB, Kestrel's 32 KiB);
    /// larger ones get 431.
    #[serde(default)]
    pub max_request_headers_total_size: Option<u64>,
    /// The slowest a request body may arrive (`--min-request-body-rate`; 240 bytes a
    /// second after 5 s); `null`: no minimum.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_request_body_data_rate: Option<Option<DataRate>>,
    /// The slowest a client may take a response (`--min-response-rate`; 240 bytes a
    /// second after 5 s); `null`: no minimum.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_response_data_rate: Option<Option<DataRate>>,
    /// HTTP/2's limits.
    #[serde(default)]
    pub http2: Option<Http2Limits>,
    /// Most header fields in a request, HTTP/1.1 and HTTP/2 (100, Kestrel's default);
    /// more get 431.
    #[serde(default)]
    pub max_request_header_count: Option<u32>,
    /// Not applied: fuseway buffers as its engines do.
    #[serde(default)]
    pub max_request_buffer_size: Option<Ignored>,
    /// Not applied: fuseway buffers as its engines do.
    #[serde(default)]
    pub max_response_buffer_size: Option<Ignored>,
    /// Most upgraded connections (WebSockets, extended CONNECT tunnels) at once; `null`
    /// or absent: no limit, Kestrel's default. Past it an upgrade is refused (`502`). A
    /// connection leaves `MaxConcurrentConnections` once upgraded, as in Kestrel.
    #[serde(default)]
    pub max_concurrent_upgraded_connections: Option<u64>,
    /// Not applied: fuseway serves no HTTP/3.
    #[serde(default)]
    pub http3: Option<Ignored>,
}

/// Kestrel's `Limits.Http2`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Http2Limits {
    /// Most concurrent streams per connection (100).
    #[serde(default)]
    pub max_streams_per_connection: Option<u32>,
    /// A keep-alive ping after this long without a frame from the client (none by
    /// default).
    #[serde(default)]
    pub keep_alive_ping_delay: Option<ConfigDuration>,
    /// How long a ping's answer is awaited before the connection is closed (20 s).
    #[serde(default)]
    pub keep_alive_ping_timeout: Option<ConfigDuration>,
    /// The HPACK table a client's header blocks may use, in bytes
    /// (`SETTINGS_HEADER_TABLE_SIZE`; 4 096, HTTP/2's default).
    #[serde(default)]
    pub header_table_size: Option<u32>,
    /// The largest frame a client may send, in bytes (`SETTINGS_MAX_FRAME_SIZE`; 16 384
    /// to 16 777 215; 16 384, HTTP/2's default).
    #[serde(default)]
    pub max_frame_size: Option<u32>,
    /// The longest name or value of a request header field, in bytes (none but the
    /// header list's by default; Kestrel's default 16 KiB); longer ones get 431.
    #[serde(default)]
    pub max_request_header_field_size: Option<u32>,
    /// The window a client gets for its request bodies over the whole connection
    /// (bytes, 65 535 to 2^31 − 1; fuseway's default 1 MiB, Kestrel's too).
    #[serde(default)]
    pub initial_connection_window_size: Option<u32>,
    /// The window a client gets for each stream's request body (bytes, 65 535 to
    /// 2^31 − 1; fuseway's default 1 MiB, Kestrel's 768 KiB).
    #[serde(default)]
    pub initial_stream_window_size: Option<u32>,
}

/// Kestrel's `MinDataRate`: at least `BytesPerSecond` once `GracePeriod` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct DataRate {
    /// Bytes a second.
    pub bytes_per_second: u64,
    /// How long a slower pace is let go first (Kestrel requires over 1 s).
    pub grace_period: ConfigDuration,
}

/// A value fuseway accepts for a key it does not apply, whatever its type.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ignored;

/// Written as `null`.
impl Serialize for Ignored {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl<'de> Deserialize<'de> for Ignored {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Ignored)
    }
}

/// A key that may be `null` (`Some(None)`) as well as absent (`None`); written only when
/// set, so that the two stay apart when a configuration is written out and read back.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl ServerLimits {
    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        *self == ServerLimits::default()
    }

    /// The keys set that fuseway does not apply, as Kestrel names them.
    pub fn unapplied(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut note = |set: bool, key| {
            if set {
                keys.push(key);
            }
        };
        note(
            self.max_request_buffer_size.is_some(),
            "MaxRequestBufferSize",
        );
        note(
            self.max_response_buffer_size.is_some(),
            "MaxResponseBufferSize",
        );
        note(self.http3.is_some(), "Http3");
        keys
    }

    /// Whether `other` sets what is read at start as this does (all but
    /// `MaxRequestBodySize`, which a reload applies).
    pub(crate) fn same_at_start(&self, other: &ServerLimits) -> bool {
        let at_start = |limits: &ServerLimits| ServerLimits {
            max_request_body_size: None,
            ..limits.clone()
        };
        at_start(self) == at_start(other)
    }

    /// The request body limit of a route that sets none: `MaxRequestBodySize`, else
    /// Kestrel's 30 000 000 bytes (`None`: no limit).
    pub fn default_max_request_body_size(&self) -> Option<u64> {
        self.max_request_body_size
            .unwrap_or(Some(crate::limits::DEFAULT_MAX_REQUEST_BODY_SIZE))
    }
}
