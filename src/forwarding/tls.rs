//! TLS towards `https://` destinations (rustls with the `ring` provider).

use std::sync::atomic::{AtomicBool, Ordering};
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

/// Whether [`roots`] adds the bundled Mozilla set to the system's.
static BUNDLED_ROOTS: AtomicBool = AtomicBool::new(false);

/// Also trust the bundled Mozilla root set (webpki-roots) for `https://` destinations,
/// not only the system's trust store (the binary's `--bundled-roots`). Takes effect
/// only before the first `https://` connection of the process.
pub fn trust_bundled_roots(yes: bool) {
    BUNDLED_ROOTS.store(yes, Ordering::Relaxed);
}

/// The trust anchors for `https://` destinations, loaded once per process: the
/// system's trust store (the platform store; or, when set, the PEM file
/// `SSL_CERT_FILE` and the directories `SSL_CERT_DIR` instead, as OpenSSL and curl
/// read them), so that removing a CA from the system distrusts it. The bundled Mozilla
/// set is used where the system has no roots at all, or when asked for
/// ([`trust_bundled_roots`]).
pub(crate) fn roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let native = rustls_native_certs::load_native_certs();
            for error in &native.errors {
                tracing::warn!(%error, "some system root certificates could not be loaded");
            }
            let (added, ignored) = roots.add_parsable_certificates(native.certs);
            let bundled = added == 0 || BUNDLED_ROOTS.load(Ordering::Relaxed);
            if bundled {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            if added == 0 {
                tracing::warn!(
                    "no system root certificates: https destinations are verified against \
                     the bundled Mozilla set"
                );
            }
            tracing::debug!(
                added,
                ignored,
                bundled,
                "root certificates for https destinations"
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
