//! TLS towards `https://` destinations (rustls with the `ring` provider).

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::TlsVersions;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client config offering the TLS versions `versions` (the cluster's
/// `SslProtocols`) that validates destinations against [`roots`], or accepts any
/// certificate when `accept_any` (the cluster's `DangerousAcceptAnyServerCertificate`,
/// meant for tests).
pub(crate) fn client_config(accept_any: bool, versions: TlsVersions) -> ClientConfig {
    let versions: &[&rustls::SupportedProtocolVersion] = match versions {
        TlsVersions::Both => rustls::DEFAULT_VERSIONS,
        TlsVersions::Tls12 => &[&rustls::version::TLS12],
        TlsVersions::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .expect("ring supports TLS 1.2 and 1.3");
    if accept_any {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots())
            .with_no_client_auth()
    }
}

/// The trust anchors for `https://` destinations, loaded once per process: the
/// system's (the platform store; or, when set, the PEM file `SSL_CERT_FILE` and the
/// directories `SSL_CERT_DIR` instead, as OpenSSL and curl read them) plus the Mozilla
/// set (webpki-roots), so that a machine without a store still verifies public sites.
fn roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let native = rustls_native_certs::load_native_certs();
            for error in &native.errors {
                tracing::warn!(%error, "some system root certificates could not be loaded");
            }
            let (added, ignored) = roots.add_parsable_certificates(native.certs);
            tracing::debug!(
                added,
                ignored,
                "system root certificates for https destinations"
            );
            Arc::new(roots)
        })
        .clone()
}

#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
