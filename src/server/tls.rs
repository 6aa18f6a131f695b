//! TLS termination: rustls (ring) server configurations from PEM certificates and keys,
//! offering HTTP/2 and HTTP/1.1 by ALPN.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// Why a certificate or key could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    /// Which input is at fault: the certificate or the key.
    pub part: TlsPart,
    /// What went wrong.
    pub message: String,
}

/// The certificate chain or the private key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPart {
    /// The certificate chain (PEM `CERTIFICATE` blocks, leaf first).
    Certificate,
    /// The private key (PEM PKCS#8, PKCS#1 or SEC1).
    Key,
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsError {}

fn error(part: TlsPart, message: impl Into<String>) -> TlsError {
    TlsError {
        part,
        message: message.into(),
    }
}

fn read(path: &Path, part: TlsPart) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| error(part, format!("cannot read `{}`: {e}", path.display())))
}

/// A server configuration from PEM files: `certificate` holds the chain (leaf first),
/// `key` the private key. ALPN offers `h2` then `http/1.1`.
pub fn tls_config_from_files(
    certificate: &Path,
    key: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_pem = read(certificate, TlsPart::Certificate)?;
    let key_pem = read(key, TlsPart::Key)?;
    tls_config_from_pem(&cert_pem, &key_pem).map_err(|mut e| {
        let path = match e.part {
            TlsPart::Certificate => certificate,
            TlsPart::Key => key,
        };
        e.message = format!("`{}`: {}", path.display(), e.message);
        e
    })
}

/// A server configuration from PEM text (see [`tls_config_from_files`]).
pub fn tls_config_from_pem(certificate: &[u8], key: &[u8]) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(certificate)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            error(
                TlsPart::Certificate,
                format!("not a valid PEM certificate: {e}"),
            )
        })?;
    if chain.is_empty() {
        return Err(error(
            TlsPart::Certificate,
            "no PEM `CERTIFICATE` block found",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| error(TlsPart::Key, format!("no usable PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| error(TlsPart::Key, format!("unusable with the certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_rejected_naming_the_part() {
        let e = tls_config_from_pem(b"not pem", b"not pem").unwrap_err();
        assert_eq!(e.part, TlsPart::Certificate);
        let e =
            tls_config_from_files(Path::new("/nonexistent/cert.pem"), Path::new("k")).unwrap_err();
        assert_eq!(e.part, TlsPart::Certificate);
        assert!(e.message.contains("/nonexistent/cert.pem"), "{e}");
    }
}
