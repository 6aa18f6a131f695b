//! The pooled HTTP clients the forwarder sends through.

use std::time::Duration;

use bytes::Bytes;
use http_body::Body;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::state::{HttpSettings, UpstreamVersion};

type Connector = HttpsConnector<HttpConnector>;

/// One pooled client per (HTTP version, certificate policy); connections are pooled
/// per destination authority inside each.
pub(crate) struct Clients<B> {
    h1: Client<Connector, B>,
    h2: Client<Connector, B>,
    h1_any_cert: Client<Connector, B>,
    h2_any_cert: Client<Connector, B>,
}

impl<B> Clients<B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    pub(crate) fn new() -> Self {
        Clients {
            h1: client(false, false),
            h2: client(true, false),
            h1_any_cert: client(false, true),
            h2_any_cert: client(true, true),
        }
    }

    pub(crate) fn get(&self, http: &HttpSettings) -> &Client<Connector, B> {
        self.for_version(http.version, http.accept_any_certificate)
    }

    /// The client for `version` and this certificate policy (upgrades use HTTP/1.1
    /// whatever the cluster's version).
    pub(crate) fn for_version(
        &self,
        version: UpstreamVersion,
        accept_any: bool,
    ) -> &Client<Connector, B> {
        match (version, accept_any) {
            (UpstreamVersion::Http1, false) => &self.h1,
            (UpstreamVersion::Http2, false) => &self.h2,
            (UpstreamVersion::Http1, true) => &self.h1_any_cert,
            (UpstreamVersion::Http2, true) => &self.h2_any_cert,
        }
    }
}

fn client<B>(h2: bool, accept_any: bool) -> Client<Connector, B>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let tls = super::tls::client_config(accept_any);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = if h2 {
        builder.enable_http2().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .http2_only(h2)
        .build(connector)
}
