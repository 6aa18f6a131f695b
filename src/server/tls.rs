//! TLS termination: rustls (ring) server configurations from PEM certificates and keys,
//! or from a PKCS#12 (PFX) archive holding both, offering HTTP/2 and HTTP/1.1 by ALPN;
//! a listener's configurations by the host name clients ask for (Kestrel's `Sni`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

use crate::config::{ClientCertificateMode, ListenProtocols, TlsVersions};
use crate::request::ClientCertificate;

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
    /// No files: a self-signed certificate for `localhost`, `127.0.0.1` and `::1` that
    /// fuseway makes once per process, as ASP.NET's development certificate (for
    /// development: no client trusts it).
    Development,
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
            TlsFiles::Development => f.write_str("Development"),
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
            TlsFiles::Development => f.write_str("the development certificate"),
        }
    }
}

impl TlsFiles {
    /// Read the files now: a server configuration (see [`tls_config_from_files`] and
    /// [`tls_config_from_pkcs12`]); errors name the file at fault.
    pub fn load(&self) -> Result<Arc<ServerConfig>, TlsError> {
        self.identity()?.server_config(&Site::default())
    }

    /// Read the files now: the chain and its key.
    pub(crate) fn identity(&self) -> Result<Identity, TlsError> {
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
                pkcs12_identity(&archive, password).map_err(|mut e| {
                    e.message = format!("`{}`: {}", file.display(), e.message);
                    e
                })
            }
            TlsFiles::Development => development_identity(),
        }
    }
}

/// The development certificate ([`TlsFiles::Development`]): made at its first use, the
/// same for every listener and reload of the process.
fn development_identity() -> Result<Identity, TlsError> {
    static MADE: std::sync::OnceLock<Result<Identity, String>> = std::sync::OnceLock::new();
    let made = MADE.get_or_init(|| {
        let names = ["localhost", "127.0.0.1", "::1"].map(str::to_string);
        let made = rcgen::generate_simple_self_signed(names).map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())?;
        tracing::warn!(
            "serving the development certificate: self-signed for localhost, made now, \
             trusted by no client (give `Certificate` for anything else)"
        );
        Ok(Identity {
            chain: vec![made.cert.der().clone()],
            key,
        })
    });
    match made {
        Ok(identity) => Ok(Identity {
            chain: identity.chain.clone(),
            key: identity.key.clone_key(),
        }),
        Err(e) => Err(error(
            TlsPart::Certificate,
            format!("the development certificate could not be made: {e}"),
        )),
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
    pem_files(certificate, key, None)?.server_config(&Site::default())
}

/// [`tls_config_from_files`], the key decrypted with `password` when one is given
/// ([`tls_config_from_encrypted_pem`]); errors name the file at fault.
fn pem_files(certificate: &Path, key: &Path, password: Option<&str>) -> Result<Identity, TlsError> {
    let cert_pem = read(certificate, TlsPart::Certificate)?;
    let key_pem = read(key, TlsPart::Key)?;
    match password {
        None => pem_identity(&cert_pem, &key_pem),
        Some(password) => encrypted_pem_identity(&cert_pem, &key_pem, password),
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
    pem_identity(certificate, key)?.server_config(&Site::default())
}

fn pem_identity(certificate: &[u8], key: &[u8]) -> Result<Identity, TlsError> {
    let chain = pem_chain(certificate)?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| error(TlsPart::Key, format!("no usable PEM private key: {e}")))?;
    Ok(Identity { chain, key })
}

/// A server configuration from PEM text whose key is an encrypted PKCS#8 key
/// (`ENCRYPTED PRIVATE KEY`, PBES2: PBKDF2 or scrypt with AES), decrypted with
/// `password`, as Kestrel reads `KeyPath` with `Password`.
pub fn tls_config_from_encrypted_pem(
    certificate: &[u8],
    key: &[u8],
    password: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    encrypted_pem_identity(certificate, key, password)?.server_config(&Site::default())
}

fn encrypted_pem_identity(
    certificate: &[u8],
    key: &[u8],
    password: &str,
) -> Result<Identity, TlsError> {
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
    Ok(Identity {
        chain: pem_chain(certificate)?,
        key,
    })
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
    pkcs12_identity(archive, password)?.server_config(&Site::default())
}

fn pkcs12_identity(archive: &[u8], password: &str) -> Result<Identity, TlsError> {
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
    Ok(Identity { chain, key })
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

/// A certificate chain (leaf first) and its private key, read.
pub(crate) struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// What a TLS site serves and accepts, besides its certificate: Kestrel's `Protocols`,
/// `SslProtocols` and `ClientCertificateMode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Site {
    /// Offered by ALPN, and served.
    pub(crate) protocols: ListenProtocols,
    /// The TLS versions accepted.
    pub(crate) versions: TlsVersions,
    /// Whether clients are asked for a certificate.
    pub(crate) client_certificates: ClientCertificateMode,
}

impl Identity {
    /// A server configuration presenting this identity, as `site` says.
    fn server_config(&self, site: &Site) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = match site.versions {
            TlsVersions::Both => rustls::DEFAULT_VERSIONS,
            TlsVersions::Tls12 => &[&rustls::version::TLS12],
            TlsVersions::Tls13 => &[&rustls::version::TLS13],
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .expect("ring supports TLS 1.2 and 1.3");
        let builder = match site.client_certificates {
            // Kestrel's `DelayCertificate` asks only when the application does later.
            ClientCertificateMode::NoCertificate | ClientCertificateMode::DelayCertificate => {
                builder.with_no_client_auth()
            }
            mode @ (ClientCertificateMode::AllowCertificate
            | ClientCertificateMode::RequireCertificate) => {
                // The system's trust store, as Kestrel's default validation. The
                // certificate request names no authorities, as .NET's since 2017 (all
                // the store's roots would be ~14 KB a handshake).
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    crate::forwarding::tls::roots(),
                    provider,
                )
                .clear_root_hint_subjects();
                let verifier = match mode {
                    ClientCertificateMode::AllowCertificate => verifier.allow_unauthenticated(),
                    _ => verifier,
                };
                let verifier = verifier.build().map_err(|e| {
                    error(
                        TlsPart::Certificate,
                        format!("client certificates cannot be verified: {e}"),
                    )
                })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| error(TlsPart::Key, format!("unusable with the certificate: {e}")))?;
        let alpn: &[&[u8]] = match site.protocols {
            ListenProtocols::Http1AndHttp2 => &[b"h2", b"http/1.1"],
            ListenProtocols::Http1 => &[b"http/1.1"],
            ListenProtocols::Http2 => &[b"h2"],
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// How a listener terminates TLS, as its configuration says: its own certificate and
/// the sites it serves by host name ([`ListenConfig::tls_setup`](crate::config::ListenConfig)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSetup {
    /// The listener's own certificate (`None` when every `Sni` entry has its own).
    pub(crate) files: Option<TlsFiles>,
    /// The sites: without `Sni`, the listener's own alone, named `*`; with it, one per
    /// entry.
    pub(crate) sites: Vec<TlsSite>,
    /// Whether `sites` are `Sni` entries (errors name them).
    pub(crate) sni: bool,
}

/// One site of a [`TlsSetup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSite {
    /// The host names it serves: a name, `*.suffix` or `*`.
    pub(crate) name: String,
    /// Its certificate (`None`: the listener's).
    pub(crate) files: Option<TlsFiles>,
    /// The rest of its settings.
    pub(crate) site: Site,
}

/// A [`TlsSetup`] that could not be loaded: the error, and the `Sni` entry at fault
/// (`None`: the listener's own certificate).
#[derive(Debug)]
pub(crate) struct TlsSetupError {
    pub(crate) sni: Option<String>,
    pub(crate) error: TlsError,
}

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sni {
            Some(name) => write!(f, "Sni `{name}`: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl fmt::Display for TlsSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for files in self
            .files
            .iter()
            .chain(self.sites.iter().flat_map(|s| &s.files))
        {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{files}")?;
        }
        Ok(())
    }
}

impl TlsSetup {
    /// Read every certificate now: the configurations to accept connections with.
    pub(crate) fn load(&self) -> Result<Terminator, TlsSetupError> {
        let at = |site: &TlsSite| self.sni.then(|| site.name.clone());
        let own = match &self.files {
            Some(files) => Some(
                files
                    .identity()
                    .map_err(|error| TlsSetupError { sni: None, error })?,
            ),
            None => None,
        };
        let mut terminator = Terminator::default();
        for site in &self.sites {
            let read;
            let identity = match (&site.files, &own) {
                (Some(files), _) => {
                    read = files.identity().map_err(|error| TlsSetupError {
                        sni: at(site),
                        error,
                    })?;
                    &read
                }
                (None, Some(own)) => own,
                (None, None) => {
                    return Err(TlsSetupError {
                        sni: at(site),
                        error: error(
                            TlsPart::Certificate,
                            "no certificate: its own or the listener's",
                        ),
                    })
                }
            };
            let config = identity
                .server_config(&site.site)
                .map_err(|error| TlsSetupError {
                    sni: at(site),
                    error,
                })?;
            terminator.insert(
                &site.name,
                SiteConfig {
                    config,
                    protocols: site.site.protocols,
                },
            );
        }
        Ok(terminator)
    }
}

/// A configuration to accept a TLS connection with, and what it serves.
#[derive(Clone)]
pub(crate) struct SiteConfig {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) protocols: ListenProtocols,
}

/// A TLS listener's configurations by the host name a client asks for (SNI), chosen as
/// Kestrel chooses among `Sni` entries: the name itself (ignoring case), else the
/// longest `*.suffix` it ends with, else `*` (also for clients that name none); no
/// match, no connection.
#[derive(Default)]
pub(crate) struct Terminator {
    exact: std::collections::HashMap<String, SiteConfig>,
    /// `.suffix`, longest first.
    suffixes: Vec<(String, SiteConfig)>,
    any: Option<SiteConfig>,
}

impl fmt::Debug for Terminator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Terminator")
            .field("exact", &self.exact.keys().collect::<Vec<_>>())
            .field(
                "suffixes",
                &self.suffixes.iter().map(|s| &s.0).collect::<Vec<_>>(),
            )
            .field("any", &self.any.is_some())
            .finish()
    }
}

impl Terminator {
    /// One configuration for every client.
    pub(crate) fn single(config: Arc<ServerConfig>, protocols: ListenProtocols) -> Terminator {
        Terminator {
            any: Some(SiteConfig { config, protocols }),
            ..Terminator::default()
        }
    }

    fn insert(&mut self, name: &str, served: SiteConfig) {
        let name = name.to_ascii_lowercase();
        if name == "*" {
            self.any = Some(served);
        } else if let Some(suffix) = name.strip_prefix('*') {
            self.suffixes.push((suffix.to_string(), served));
            self.suffixes
                .sort_by_key(|(suffix, _)| std::cmp::Reverse(suffix.len()));
        } else {
            self.exact.insert(name, served);
        }
    }

    /// The configuration for every client, when the choice does not depend on the name
    /// (the handshake need not be read first).
    pub(crate) fn only(&self) -> Option<&SiteConfig> {
        match self.exact.is_empty() && self.suffixes.is_empty() {
            true => self.any.as_ref(),
            false => None,
        }
    }

    /// The configuration for a client asking for `name`.
    pub(crate) fn choose(&self, name: Option<&str>) -> Option<&SiteConfig> {
        let found = name.and_then(|name| {
            let name = name.to_ascii_lowercase();
            self.exact.get(&name).or_else(|| {
                self.suffixes
                    .iter()
                    .find(|(suffix, _)| name.ends_with(suffix.as_str()))
                    .map(|(_, served)| served)
            })
        });
        found.or(self.any.as_ref())
    }
}

/// A client's TLS stream, with the certificate the client presented (read once, at the
/// handshake): what the engines serve TLS connections on.
pub(crate) struct TlsIo {
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    certificate: Option<ClientCertificate>,
}

impl TlsIo {
    pub(crate) fn new(stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> TlsIo {
        let certificate = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| ClientCertificate::from_der(leaf.to_vec()));
        TlsIo {
            stream,
            certificate,
        }
    }
}

/// The certificate the client of `io` presented, when `io` is a TLS stream
/// ([`TlsIo`]) whose client gave one; for other streams a constant `None`.
pub(crate) fn certificate_of<I: 'static>(io: &I) -> Option<&ClientCertificate> {
    (io as &dyn std::any::Any)
        .downcast_ref::<TlsIo>()?
        .certificate
        .as_ref()
}

impl tokio::io::AsyncRead for TlsIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
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
