//! TLS termination: rustls (ring) server configurations from PEM certificates and keys,
//! or from a PKCS#12 (PFX) archive holding both, offering HTTP/2 and HTTP/1.1 by ALPN.

use std::fmt;
use std::path::{Path, PathBuf};
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
    /// The certificate chain (PEM `CERTIFICATE` blocks, leaf first), or the PKCS#12
    /// archive holding it and the key.
    Certificate,
    /// The private key (PEM PKCS#8, PKCS#1 or SEC1).
    Key,
}

/// Where a TLS listener's certificate chain and private key are read from
/// ([`ListenConfig::tls_files`](crate::config::ListenConfig::tls_files)).
///
/// ```
/// use fuseway::server::TlsFiles;
///
/// let pfx = TlsFiles::Pkcs12 { file: "site.pfx".into(), password: "secret".into() };
/// // The password is not shown.
/// assert!(!format!("{pfx:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum TlsFiles {
    /// PEM files: the chain (leaf first) and its private key (an encrypted PKCS#8 key
    /// with its password, as Kestrel's `KeyPath` with `Password`).
    Pem {
        /// The certificate chain.
        certificate: PathBuf,
        /// The private key.
        key: PathBuf,
        /// The key's password, when it is encrypted.
        password: Option<String>,
    },
    /// A PKCS#12 (PFX) archive holding the chain and the key, as Kestrel's
    /// `Certificate.Path` + `Password` name one.
    Pkcs12 {
        /// The archive.
        file: PathBuf,
        /// Its password (empty: none).
        password: String,
    },
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFiles::Pem {
                certificate, key, ..
            } => f
                .debug_struct("Pem")
                .field("certificate", certificate)
                .field("key", key)
                .finish_non_exhaustive(),
            TlsFiles::Pkcs12 { file, .. } => f
                .debug_struct("Pkcs12")
                .field("file", file)
                .finish_non_exhaustive(),
        }
    }
}

impl fmt::Display for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFiles::Pem {
                certificate, key, ..
            } => write!(f, "{} / {}", certificate.display(), key.display()),
            TlsFiles::Pkcs12 { file, .. } => write!(f, "{}", file.display()),
        }
    }
}

impl TlsFiles {
    /// Read the files now: a server configuration (see [`tls_config_from_files`] and
    /// [`tls_config_from_pkcs12`]); errors name the file at fault.
    pub fn load(&self) -> Result<Arc<ServerConfig>, TlsError> {
        match self {
            TlsFiles::Pem {
                certificate,
                key,
                password,
            } => pem_files(certificate, key, password.as_deref()),
            TlsFiles::Pkcs12 { file, password } => {
                let archive = read(file, TlsPart::Certificate)?;
                if archive.trim_ascii_start().starts_with(b"-----BEGIN") {
                    // A PEM certificate given alone: what is missing is its key.
                    return Err(error(
                        TlsPart::Key,
                        format!(
                            "`{}` is a PEM certificate: it needs its key (a PKCS#12 file \
                             holds both)",
                            file.display()
                        ),
                    ));
                }
                tls_config_from_pkcs12(&archive, password).map_err(|mut e| {
                    e.message = format!("`{}`: {}", file.display(), e.message);
                    e
                })
            }
        }
    }
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
    pem_files(certificate, key, None)
}

/// [`tls_config_from_files`], the key decrypted with `password` when one is given
/// ([`tls_config_from_encrypted_pem`]); errors name the file at fault.
fn pem_files(
    certificate: &Path,
    key: &Path,
    password: Option<&str>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_pem = read(certificate, TlsPart::Certificate)?;
    let key_pem = read(key, TlsPart::Key)?;
    match password {
        None => tls_config_from_pem(&cert_pem, &key_pem),
        Some(password) => tls_config_from_encrypted_pem(&cert_pem, &key_pem, password),
    }
    .map_err(|mut e| {
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
    let chain = pem_chain(certificate)?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| error(TlsPart::Key, format!("no usable PEM private key: {e}")))?;
    server_config(chain, key)
}

/// A server configuration from PEM text whose key is an encrypted PKCS#8 key
/// (`ENCRYPTED PRIVATE KEY`, PBES2: PBKDF2 or scrypt with AES), decrypted with
/// `password`, as Kestrel reads `KeyPath` with `Password`.
pub fn tls_config_from_encrypted_pem(
    certificate: &[u8],
    key: &[u8],
    password: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    let text = std::str::from_utf8(key)
        .map_err(|_| error(TlsPart::Key, "not a PEM encrypted private key"))?;
    let not_encrypted = |why: String| {
        error(
            TlsPart::Key,
            format!("not a PEM `ENCRYPTED PRIVATE KEY` (PKCS#8): {why}"),
        )
    };
    // The PEM text decoded whole first: the DER reader reads it where the PEM reader
    // cannot (its nested sequences).
    let (label, der) =
        pkcs8::der::Document::from_pem(text).map_err(|e| not_encrypted(e.to_string()))?;
    if label != "ENCRYPTED PRIVATE KEY" {
        return Err(not_encrypted(format!("a `{label}` block")));
    }
    let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(der.as_bytes())
        .map_err(|e| not_encrypted(e.to_string()))?;
    let key = info.decrypt(password).map_err(|e| {
        error(
            TlsPart::Key,
            format!("the password does not decrypt the key: {e}"),
        )
    })?;
    let key = PrivateKeyDer::Pkcs8(key.as_bytes().to_vec().into());
    server_config(pem_chain(certificate)?, key)
}

/// A server configuration from a PKCS#12 (PFX) archive, decrypted with `password`
/// (empty: none): its private key and that key's certificate with the chain the
/// archive holds for it (leaf first), as Kestrel loads `Certificate.Path` with
/// `Password`. The encryptions PKCS#12 writers use are read: PBES2 with AES (OpenSSL
/// 3's and Java's default), and the legacy 3DES and RC2 (OpenSSL's `-legacy` and older
/// versions, .NET's `Export`); tested with OpenSSL's files and p12-keystore's.
pub fn tls_config_from_pkcs12(
    archive: &[u8],
    password: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    use p12_keystore::{KeyStore, Pkcs12ImportPolicy};
    let store =
        KeyStore::from_pkcs12(archive, password, Pkcs12ImportPolicy::Strict).map_err(|e| {
            error(
                TlsPart::Certificate,
                format!("not a PKCS#12 archive this password opens: {e}"),
            )
        })?;
    let (_, keys) = store.private_key_chain().ok_or_else(|| {
        error(
            TlsPart::Certificate,
            "the PKCS#12 archive holds no private key with its certificate",
        )
    })?;
    let chain = keys
        .certs()
        .iter()
        .map(|c| CertificateDer::from(c.as_der().to_vec()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(keys.key().as_der().to_vec().into());
    server_config(chain, key)
}

/// The `CERTIFICATE` blocks of PEM text: a chain, leaf first.
fn pem_chain(certificate: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
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
    Ok(chain)
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, TlsError> {
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
