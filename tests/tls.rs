//! TLS: an HTTPS front (certificate generated with rcgen, listeners from the config's
//! long `Listen` form) reached by HTTP/1.1 and HTTP/2 clients, fused and layered;
//! validation of the certificate and key; HTTPS destinations; the binary binding a TLS
//! listener from its config file.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{json_path, tls_proxy, within, Form, TempDir};
use fuseway::config::ProxyConfig;
use fuseway::server::Server;
use http::{Request, Response, Version};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

const FORMS: [Form; 2] = [Form::Fused, Form::Layered];

/// A self-signed certificate for `localhost` and `127.0.0.1`: (certificate PEM, key PEM).
fn self_signed() -> (String, String) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    (ck.cert.pem(), ck.signing_key.serialize_pem())
}

fn front_config(cert: &Path, key: &Path, destination: &str, cluster_extra: &str) -> String {
    format!(
        r#"{{
  "Listen": [ {{ "Address": "127.0.0.1:0", "Certificate": {}, "Key": {} }} ],
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ {cluster_extra} "Destinations": {{ "d1": {{ "Address": "{destination}" }} }} }} }}
}}"#,
        json_path(cert),
        json_path(key)
    )
}

fn https_client(cert_pem: &str, version: Option<Version>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .timeout(common::LIMIT)
        .no_proxy();
    match version {
        Some(Version::HTTP_11) => b = b.http1_only(),
        Some(Version::HTTP_2) => b = b.http2_prior_knowledge(),
        _ => {}
    }
    b.build().unwrap()
}

#[tokio::test]
async fn https_front_serves_http1_and_http2_with_forwarded_proto_https() {
    let (cert, key) = self_signed();
    let dir = TempDir::new("tls-front");
    let cert_file = dir.write("cert.pem", &cert);
    let key_file = dir.write("key.pem", &key);
    let backend = common::echo_backend().await;
    for form in FORMS {
        let proxy = tls_proxy(
            &front_config(&cert_file, &key_file, &backend.url(), ""),
            form,
        )
        .await;
        let url = format!("https://127.0.0.1:{}/secure?q=1", proxy.addr.port());
        // ALPN: a client offering both gets HTTP/2; an HTTP/1.1-only client gets 1.1.
        for (client_version, expected) in [
            (None, Version::HTTP_2),
            (Some(Version::HTTP_11), Version::HTTP_11),
            (Some(Version::HTTP_2), Version::HTTP_2),
        ] {
            let r = https_client(&cert, client_version)
                .get(&url)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{form:?} {client_version:?}");
            assert_eq!(r.version(), expected, "{form:?} {client_version:?}");
            assert_eq!(r.headers()["x-echo-x-forwarded-proto"], "https", "{form:?}");
            assert_eq!(r.text().await.unwrap(), "GET /secure?q=1");
        }
        // A client that does not trust the certificate cannot connect.
        let untrusting = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(common::LIMIT)
            .build()
            .unwrap();
        assert!(untrusting.get(&url).send().await.is_err(), "{form:?}");
        // Plain HTTP on the TLS port is not served.
        assert!(common::h1_client()
            .get(format!("http://127.0.0.1:{}/", proxy.addr.port()))
            .send()
            .await
            .is_err());
        proxy.shutdown().await;
    }
}

#[test]
fn listen_certificate_and_key_are_validated() {
    let (cert, key) = self_signed();
    let (_, other_key) = self_signed();
    let dir = TempDir::new("tls-validate");
    let cert_file = dir.write("cert.pem", &cert);
    let key_file = dir.write("key.pem", &key);
    let garbage = dir.write("garbage.pem", "not a certificate");
    let other_key_file = dir.write("other-key.pem", &other_key);
    let missing = dir.path().join("missing.pem");

    let errors = |listen: String| -> Vec<String> {
        let config: ProxyConfig =
            serde_json::from_str(&format!(r#"{{ "Listen": [ "127.0.0.1:1", {listen} ] }}"#))
                .unwrap();
        // The model (a certificate needs its key), then the files (read by the server).
        match config
            .validate()
            .and_then(|()| Server::check_listeners(&config.listen))
        {
            Ok(()) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    };
    let entry = |c: Option<&Path>, k: Option<&Path>| {
        let mut s = r#"{ "Address": "127.0.0.1:8443""#.to_string();
        if let Some(c) = c {
            s += &format!(r#", "Certificate": {}"#, json_path(c));
        }
        if let Some(k) = k {
            s += &format!(r#", "Key": {}"#, json_path(k));
        }
        s + " }"
    };

    assert_eq!(
        errors(entry(Some(&cert_file), Some(&key_file))),
        Vec::<String>::new()
    );
    let e = errors(entry(Some(&missing), Some(&key_file)));
    assert!(
        e.len() == 1 && e[0].starts_with("Listen[1].Certificate: ") && e[0].contains("missing.pem"),
        "{e:?}"
    );
    let e = errors(entry(Some(&garbage), Some(&key_file)));
    assert!(
        e.len() == 1 && e[0].starts_with("Listen[1].Certificate: "),
        "{e:?}"
    );
    let e = errors(entry(Some(&cert_file), Some(&garbage)));
    assert!(e.len() == 1 && e[0].starts_with("Listen[1].Key: "), "{e:?}");
    let e = errors(entry(Some(&cert_file), Some(&other_key_file)));
    assert!(e.len() == 1 && e[0].starts_with("Listen[1].Key: "), "{e:?}");
    let e = errors(entry(Some(&cert_file), None));
    assert!(e.len() == 1 && e[0].starts_with("Listen[1].Key: "), "{e:?}");
    let e = errors(entry(None, Some(&key_file)));
    assert!(
        e.len() == 1 && e[0].starts_with("Listen[1].Certificate: "),
        "{e:?}"
    );
    // Unknown keys in the long form are still rejected by the parser.
    assert!(serde_json::from_str::<ProxyConfig>(
        r#"{ "Listen": [ { "Address": "127.0.0.1:1", "Cert": "x" } ] }"#
    )
    .is_err());
}

/// Kestrel's PFX certificates: `Certificate.Path` with `Password` and no `KeyPath`
/// names a PKCS#12 archive holding the chain and the key, as in ASP.NET. Archives
/// written by p12-keystore (AES-256, the legacy 3DES, no password) and, where the
/// `openssl` command is present, by OpenSSL (its default, its `-legacy` RC2, no
/// password) are served with, and so is an encrypted PKCS#8 key OpenSSL wrote
/// (`KeyPath` with `Password`); a wrong password (of either), a PEM certificate without
/// its key and a certificate store are refused, each named.
#[tokio::test]
async fn kestrel_pfx_certificates_are_served_and_bad_ones_named() {
    use p12_keystore::{
        Certificate, EncryptionAlgorithm, KeyStore, KeyStoreEntry, PrivateKey, PrivateKeyChain,
    };
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

    let dir = TempDir::new("tls-pfx");
    let ca_file = common::localhost_certificates(&dir);
    let (leaf_file, key_file) = (dir.path().join("server.pem"), dir.path().join("server.key"));
    let ca_pem = std::fs::read_to_string(&ca_file).unwrap();
    let der = |file: &Path| CertificateDer::from_pem_file(file).unwrap().to_vec();
    let key_der = PrivatePkcs8KeyDer::from_pem_file(&key_file).unwrap();
    let write = |name: &str, data: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, data).unwrap();
        path
    };

    let mut archives = Vec::new();
    let mut encrypted_key = None;
    for (name, algorithm, password) in [
        (
            "aes.pfx",
            EncryptionAlgorithm::PbeWithHmacSha256AndAes256,
            "pw",
        ),
        (
            "3des.pfx",
            EncryptionAlgorithm::PbeWithShaAnd3KeyTripleDesCbc,
            "pw",
        ),
        (
            "empty.pfx",
            EncryptionAlgorithm::PbeWithHmacSha256AndAes256,
            "",
        ),
    ] {
        let chain = PrivateKeyChain::new(
            "fuseway",
            PrivateKey::from_der(key_der.secret_pkcs8_der()).unwrap(),
            [
                Certificate::from_der(&der(&leaf_file)).unwrap(),
                Certificate::from_der(&der(&ca_file)).unwrap(),
            ],
        );
        let mut store = KeyStore::new();
        store.add_entry("fuseway", KeyStoreEntry::PrivateKeyChain(chain));
        let data = store
            .writer(password)
            .encryption_algorithm(algorithm)
            .write()
            .unwrap();
        archives.push((write(name, &data), password));
    }
    if let Some(openssl) = common::installed(&["openssl"], "openssl", "PFX files made by OpenSSL") {
        for (name, extra, password) in [
            ("openssl.pfx", None, "pw"),
            ("openssl-legacy.pfx", Some("-legacy"), "pw"),
            ("openssl-empty.pfx", None, ""),
        ] {
            let out = dir.path().join(name);
            let status = std::process::Command::new(&openssl)
                .args(["pkcs12", "-export", "-in"])
                .arg(&leaf_file)
                .arg("-inkey")
                .arg(&key_file)
                .arg("-certfile")
                .arg(&ca_file)
                .arg("-out")
                .arg(&out)
                .arg("-passout")
                .arg(format!("pass:{password}"))
                .args(extra)
                .status()
                .unwrap();
            assert!(status.success(), "openssl pkcs12 {extra:?}: {status:?}");
            archives.push((out, password));
        }
        let out = dir.path().join("encrypted.key");
        let status = std::process::Command::new(&openssl)
            .args(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in"])
            .arg(&key_file)
            .arg("-out")
            .arg(&out)
            .args(["-passout", "pass:pw"])
            .status()
            .unwrap();
        assert!(status.success(), "openssl pkcs8: {status:?}");
        encrypted_key = Some(out);
    }

    let backend = common::echo_backend().await;
    let kestrel = |certificate: &str| {
        format!(
            r#"{{ "Kestrel": {{ "Endpoints": {{ "Https": {{ "Url": "https://127.0.0.1:0", "Certificate": {certificate} }} }} }},
                 "ReverseProxy": {{
                   "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
                   "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }} }} }}"#,
            backend.url()
        )
    };
    let pfx = |file: &Path, password: &str| {
        format!(
            r#"{{ "Path": {}, "Password": "{password}" }}"#,
            json_path(file)
        )
    };
    let mut certificates: Vec<String> = archives
        .iter()
        .map(|(file, password)| pfx(file, password))
        .collect();
    if let Some(key) = &encrypted_key {
        certificates.push(format!(
            r#"{{ "Path": {}, "KeyPath": {}, "Password": "pw" }}"#,
            json_path(&leaf_file),
            json_path(key)
        ));
    }
    for certificate in &certificates {
        let proxy = tls_proxy(&kestrel(certificate), Form::Fused).await;
        let url = format!("https://127.0.0.1:{}/pfx", proxy.addr.port());
        let r = https_client(&ca_pem, None).get(&url).send().await;
        let r = r.unwrap_or_else(|e| panic!("{certificate}: {e:?}"));
        assert_eq!(r.status(), 200, "{certificate}");
        assert_eq!(r.text().await.unwrap(), "GET /pfx");
        proxy.shutdown().await;
    }

    // What is refused, and where.
    let refused = |certificate: String| -> (String, String) {
        let errors = fuseway::config::parse(&kestrel(&certificate), fuseway::config::Format::Json)
            .and_then(|config| Server::check_listeners(&config.listen))
            .expect_err(&certificate);
        let e = &errors.0[0];
        (e.path.clone(), e.message.clone())
    };
    let (path, message) = refused(pfx(&archives[0].0, "wrong"));
    assert_eq!(path, "Listen[0].Certificate", "{message}");
    assert!(
        message.contains("aes.pfx") && message.contains("password"),
        "{message}"
    );
    let (path, message) = refused(format!(r#"{{ "Path": {} }}"#, json_path(&leaf_file)));
    assert_eq!(path, "Listen[0].Key", "{message}");
    assert!(message.contains("PEM certificate"), "{message}");
    let (path, message) = refused(r#"{ "Subject": "localhost", "Store": "My" }"#.to_string());
    assert_eq!(path, "Kestrel.Endpoints.Https.Certificate", "{message}");
    assert!(message.contains("certificate store"), "{message}");
    if let Some(key) = &encrypted_key {
        let (path, message) = refused(format!(
            r#"{{ "Path": {}, "KeyPath": {}, "Password": "wrong" }}"#,
            json_path(&leaf_file),
            json_path(key)
        ));
        assert_eq!(path, "Listen[0].Key", "{message}");
        assert!(message.contains("password does not decrypt"), "{message}");
    }
    // A key that is not encrypted, given a password: not what the password is for.
    let (path, message) = refused(format!(
        r#"{{ "Path": {}, "KeyPath": {}, "Password": "pw" }}"#,
        json_path(&leaf_file),
        json_path(&key_file)
    ));
    assert_eq!(path, "Listen[0].Key", "{message}");
    assert!(message.contains("ENCRYPTED PRIVATE KEY"), "{message}");
}

/// An HTTPS echo backend (HTTP/1.1 and HTTP/2 by ALPN) with `cert`/`key`.
async fn https_backend(cert: &str, key: &str) -> SocketAddr {
    let tls = fuseway::server::tls_config_from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    versioned_backend(Some(tls)).await
}

/// A backend (HTTP/1.1 and HTTP/2, over TLS with `tls`) answering `VERSION PATH`.
async fn versioned_backend(tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let body = format!("{:?} {}", req.version(), req.uri().path());
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(bytes::Bytes::from(
                        body,
                    ))))
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                let _ = match acceptor {
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(stream).await else {
                            return;
                        };
                        builder.serve_connection(TokioIo::new(stream), svc).await
                    }
                    None => builder.serve_connection(TokioIo::new(stream), svc).await,
                };
            });
        }
    });
    addr
}

/// What the backend saw through a proxy of `cluster_extra` (or the status when not 200).
async fn seen(backend: SocketAddr, https: bool, cluster_extra: &str, form: Form) -> String {
    let scheme = if https { "https" } else { "http" };
    let config = common::simple_config(
        &[("d1", &format!("{scheme}://127.0.0.1:{}", backend.port()))],
        cluster_extra,
    );
    let proxy = common::proxy_with(&config, form).await;
    let r = common::h1_client()
        .get(proxy.url("/v"))
        .send()
        .await
        .unwrap();
    let seen = match r.status().as_u16() {
        200 => r.text().await.unwrap(),
        status => status.to_string(),
    };
    proxy.shutdown().await;
    seen
}

#[tokio::test]
async fn version_and_version_policy_as_yarp() {
    let (cert, key) = self_signed();
    let https = https_backend(&cert, &key).await;
    let plain = versioned_backend(None).await;
    const ANY_CERT: &str = r#""HttpClient": { "DangerousAcceptAnyServerCertificate": true },"#;
    for form in FORMS {
        for (request, http, tls) in [
            // YARP's default: "2" with RequestVersionOrLower (the backend chooses h2).
            ("", "HTTP/1.1", "HTTP/2.0"),
            (r#""Version": "2""#, "HTTP/1.1", "HTTP/2.0"),
            (
                r#""Version": "2", "VersionPolicy": "RequestVersionExact""#,
                "HTTP/2.0",
                "HTTP/2.0",
            ),
            (
                r#""Version": "2", "VersionPolicy": "RequestVersionOrHigher""#,
                "HTTP/2.0",
                "HTTP/2.0",
            ),
            (
                r#""Version": "1.1", "VersionPolicy": "RequestVersionOrHigher""#,
                "HTTP/1.1",
                "HTTP/2.0",
            ),
            (r#""Version": "1.1""#, "HTTP/1.1", "HTTP/1.1"),
        ] {
            let extra = format!(r#""HttpRequest": {{ {request} }}, {ANY_CERT}"#);
            assert_eq!(
                seen(plain, false, &extra, form).await,
                format!("{http} /v"),
                "http {request} {form:?}"
            );
            assert_eq!(
                seen(https, true, &extra, form).await,
                format!("{tls} /v"),
                "https {request} {form:?}"
            );
        }
    }
}

/// An HTTPS backend offering `alpn` (HTTP/1.1 and HTTP/2 spoken, by preface) answering
/// `VERSION PATH AUTHORITY` (the URI's authority, else `Host`), counting its
/// connections.
async fn alpn_backend(alpn: &[&[u8]], connections: Arc<AtomicUsize>) -> SocketAddr {
    let (cert, key) = self_signed();
    let mut tls = fuseway::server::tls_config_from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    Arc::make_mut(&mut tls).alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            connections.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let authority = match req.uri().authority() {
                        Some(a) => a.to_string(),
                        None => req.headers()["host"].to_str().unwrap().to_owned(),
                    };
                    let body = format!("{:?} {} {authority}", req.version(), req.uri());
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(bytes::Bytes::from(
                        body,
                    ))))
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn https_destinations_choose_the_version_by_alpn() {
    // YARP's default ("2", RequestVersionOrLower) and "1.1" with OrHigher offer both.
    for request in [
        "",
        r#""Version": "1.1", "VersionPolicy": "RequestVersionOrHigher""#,
    ] {
        for (alpn, version) in [
            (&[&b"h2"[..], b"http/1.1"][..], "HTTP/2.0"),
            (&[&b"http/1.1"[..]][..], "HTTP/1.1"),
            // No ALPN at all: HTTP/1.1.
            (&[][..], "HTTP/1.1"),
        ] {
            let connections = Arc::new(AtomicUsize::new(0));
            let backend = alpn_backend(alpn, connections.clone()).await;
            let config = common::simple_config(
                &[("d1", &format!("https://127.0.0.1:{}", backend.port()))],
                &format!(
                    r#""HttpRequest": {{ {request} }}, "HttpClient": {{ "DangerousAcceptAnyServerCertificate": true }},"#
                ),
            );
            let proxy = common::proxy(&config).await;
            let client = common::h1_client();
            // The first request finds the choice unknown (shaped for HTTP/1.1, reshaped
            // when the destination chooses HTTP/2); the next ones are shaped for the
            // choice and go on the same connection.
            for i in 0..3 {
                let r = within(
                    "a response",
                    client.get(proxy.url(&format!("/v/{i}?q=1"))).send(),
                )
                .await
                .unwrap();
                assert_eq!(r.status(), 200, "{request} {alpn:?} request {i}");
                let expected = match version {
                    "HTTP/2.0" => format!(
                        "HTTP/2.0 https://127.0.0.1:{0}/v/{i}?q=1 127.0.0.1:{0}",
                        backend.port()
                    ),
                    _ => format!("HTTP/1.1 /v/{i}?q=1 127.0.0.1:{}", backend.port()),
                };
                assert_eq!(
                    r.text().await.unwrap(),
                    expected,
                    "{request} {alpn:?} request {i}"
                );
            }
            assert_eq!(
                connections.load(Ordering::SeqCst),
                1,
                "{request} {alpn:?}: one connection, reused"
            );
            proxy.shutdown().await;
        }
    }
}

/// Concurrent first requests to a destination that negotiates, under
/// `MaxConnectionsPerServer: 1`: one negotiates, the others wait for its connection.
#[tokio::test]
async fn negotiation_keeps_the_connection_limit() {
    let connections = Arc::new(AtomicUsize::new(0));
    let backend = alpn_backend(&[b"http/1.1"], connections.clone()).await;
    let config = common::simple_config(
        &[("d1", &format!("https://127.0.0.1:{}", backend.port()))],
        r#""HttpClient": { "DangerousAcceptAnyServerCertificate": true, "MaxConnectionsPerServer": 1 },"#,
    );
    let proxy = common::proxy(&config).await;
    let client = common::h1_client();
    let requests = (0..4).map(|i| {
        let r = client.get(proxy.url(&format!("/c/{i}"))).send();
        async move { r.await.unwrap().text().await.unwrap() }
    });
    let answers = within("the answers", futures_util::future::join_all(requests)).await;
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(
            answer,
            &format!("HTTP/1.1 /c/{i} 127.0.0.1:{}", backend.port())
        );
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "one connection at most"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn ssl_protocols_are_enforced() {
    let (cert, key) = self_signed();
    // A destination that speaks TLS 1.2 only.
    let certs = rustls_pemfile_certs(&cert);
    let key = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap()
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS12])
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls12 = versioned_backend(Some(Arc::new(config))).await;
    let cluster = |protocols: &str| {
        format!(
            r#""HttpClient": {{ "DangerousAcceptAnyServerCertificate": true, "SslProtocols": {protocols} }},"#
        )
    };
    for form in FORMS {
        assert_eq!(
            seen(tls12, true, &cluster(r#"["Tls12"]"#), form).await,
            "HTTP/1.1 /v"
        );
        assert_eq!(
            seen(tls12, true, &cluster(r#"["Tls12", "Tls13"]"#), form).await,
            "HTTP/1.1 /v"
        );
        // TLS 1.1 beside 1.2 (Kestrel's example list): 1.2 is offered.
        assert_eq!(
            seen(tls12, true, &cluster(r#"["Tls11", "Tls12"]"#), form).await,
            "HTTP/1.1 /v"
        );
        // TLS 1.3 only: the handshake fails, 502.
        assert_eq!(
            seen(tls12, true, &cluster(r#"["Tls13"]"#), form).await,
            "502"
        );
    }
    // Broken versions alone, and SSL anywhere, are refused with a message.
    for (list, says) in [
        (r#"["Tls11"]"#, "TLS 1.0 and 1.1"),
        (r#"["Ssl3", "Tls12"]"#, "SSL"),
    ] {
        let err = fuseway::config::parse(
            &common::simple_config(&[("d1", "https://127.0.0.1:1")], &cluster(list)),
            fuseway::config::Format::Json,
        )
        .unwrap_err();
        assert_eq!(err.0[0].path, "Clusters.c.HttpClient.SslProtocols");
        assert!(err.0[0].message.contains(says), "{err}");
    }
}

/// The certificates of a PEM text.
fn rustls_pemfile_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn https_destinations_over_http1_and_http2() {
    let (cert, key) = self_signed();
    let backend = https_backend(&cert, &key).await;
    for form in FORMS {
        for (version, expected) in [("1.1", "HTTP/1.1"), ("2", "HTTP/2.0")] {
            let config = common::simple_config(
                &[("d1", &format!("https://127.0.0.1:{}", backend.port()))],
                &format!(
                    r#""HttpRequest": {{ "Version": "{version}", "VersionPolicy": "RequestVersionExact" }}, "HttpClient": {{ "DangerousAcceptAnyServerCertificate": true }},"#
                ),
            );
            let proxy = common::proxy_with(&config, form).await;
            let r = common::h1_client()
                .get(proxy.url("/over-tls"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{form:?} {version}");
            assert_eq!(
                r.text().await.unwrap(),
                format!("{expected} /over-tls"),
                "{form:?}"
            );
            proxy.shutdown().await;
        }
        // Without the test-only switch the self-signed certificate is refused: 502.
        let config = common::simple_config(
            &[("d1", &format!("https://127.0.0.1:{}", backend.port()))],
            "",
        );
        let proxy = common::proxy_with(&config, form).await;
        let r = common::h1_client()
            .get(proxy.url("/over-tls"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502, "{form:?}");
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn the_binary_binds_tls_listeners_from_its_config() {
    let (cert, key) = self_signed();
    let dir = TempDir::new("binary");
    let cert_file = dir.write("cert.pem", &cert);
    let key_file = dir.write("key.pem", &key);
    let backend = common::echo_backend().await;
    let config = front_config(&cert_file, &key_file, &backend.url(), "");
    let file = dir.write("proxy.json", &config);
    let mut child = fuseway(&file).spawn().unwrap();
    let addr = until_listening(&mut child).await;
    let r = https_client(&cert, None)
        .get(format!("https://{addr}/from-binary"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), Version::HTTP_2);
    assert_eq!(r.headers()["x-echo-x-forwarded-proto"], "https");
    assert_eq!(r.text().await.unwrap(), "GET /from-binary");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// `https://` destinations are verified against the system's roots, which
/// `SSL_CERT_FILE` replaces (as for OpenSSL and curl): a destination whose certificate
/// is in that file is reached, without `DangerousAcceptAnyServerCertificate`; with a
/// store that lacks it, the same destination is refused (502).
#[tokio::test]
async fn the_binary_trusts_the_roots_in_ssl_cert_file() {
    let (cert, key) = self_signed();
    let backend = https_backend(&cert, &key).await;
    let dir = TempDir::new("roots");
    let roots = dir.write("roots.pem", &cert);
    let (other, _) = self_signed();
    let other = dir.write("other.pem", &other);
    let empty = dir.write("empty.pem", "");
    // (SSL_CERT_FILE, --bundled-roots, status): the system's store decides; a store
    // without the destination's CA distrusts it (the bundled set does not rescue it);
    // an empty store falls back to the bundled set, which does not have it either.
    for (store, bundled, expected) in [
        (&roots, false, 200),
        (&roots, true, 200),
        (&other, false, 502),
        (&other, true, 502),
        (&empty, false, 502),
    ] {
        let trusted = expected == 200;
        let config = common::simple_config(
            &[("d1", &format!("https://127.0.0.1:{}", backend.port()))],
            "",
        );
        let file = dir.write("proxy.json", &config);
        let mut command = fuseway(&file);
        command
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("SSL_CERT_DIR");
        command.env("SSL_CERT_FILE", store);
        if bundled {
            command.arg("--bundled-roots");
        }
        let mut child = command.spawn().unwrap();
        let addr = until_listening(&mut child).await;
        let r = within(
            "an answer",
            common::h1_client()
                .get(format!("http://{addr}/verified"))
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(
            r.status(),
            expected,
            "{} bundled: {bundled}",
            store.display()
        );
        if trusted {
            // YARP's default version policy: the destination chose h2 by ALPN.
            assert_eq!(r.text().await.unwrap(), "HTTP/2.0 /verified");
        }
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
}

/// The binary running `file`, logging at INFO to a piped stderr.
fn fuseway(file: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_fuseway"));
    command
        .arg("--config")
        .arg(file)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

type Log = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>;

/// Wait for the binary's "fuseway listening" log line (its stderr piped) and return
/// the address it names. The log is closed afterwards: the binary must keep serving
/// with its stderr gone (its later log lines fail to write).
async fn until_listening(child: &mut tokio::process::Child) -> std::net::SocketAddr {
    listening_with_log(child).await.0
}

/// [`until_listening`], keeping the log open for later lines.
async fn listening_with_log(child: &mut tokio::process::Child) -> (std::net::SocketAddr, Log) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = within("the listening log line", async {
        while let Some(line) = log.next_line().await.unwrap() {
            if let Some(addr) = common::listening_addr(&line) {
                return addr;
            }
        }
        panic!("fuseway exited before listening");
    })
    .await;
    (addr, log)
}

/// Send the binary `SIGHUP` and wait for its log to say the certificates were reloaded.
async fn reload_certificates(child: &tokio::process::Child, log: &mut Log) {
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    within("the certificates to reload", async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains("TLS certificates reloaded") {
                return;
            }
        }
        panic!("fuseway exited before reloading");
    })
    .await;
}

/// `SIGHUP` re-reads the listener's certificate and key: after the files are replaced,
/// new connections get the new certificate, without a restart.
#[tokio::test]
async fn sighup_rotates_listener_certificates() {
    let (old_cert, old_key) = self_signed();
    let (new_cert, new_key) = self_signed();
    let dir = TempDir::new("rotate");
    let cert_file = dir.write("cert.pem", &old_cert);
    let key_file = dir.write("key.pem", &old_key);
    let backend = common::echo_backend().await;
    let file = dir.write(
        "proxy.json",
        &front_config(&cert_file, &key_file, &backend.url(), ""),
    );
    let mut child = fuseway(&file).spawn().unwrap();
    let (addr, mut log) = listening_with_log(&mut child).await;
    let get = |cert: &str| {
        https_client(cert, Some(Version::HTTP_11))
            .get(format!("https://{addr}/rotated"))
            .send()
    };
    assert_eq!(get(&old_cert).await.unwrap().status(), 200);
    assert!(
        get(&new_cert).await.is_err(),
        "the new certificate is not served yet"
    );

    dir.write("cert.pem", &new_cert);
    dir.write("key.pem", &new_key);
    reload_certificates(&child, &mut log).await;
    assert_eq!(get(&new_cert).await.unwrap().status(), 200);
    assert!(get(&old_cert).await.is_err(), "the old certificate is gone");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// A listener's `Protocols` (Kestrel's): what it serves and nothing else. In clear a
/// client speaking the other protocol has its connection closed; over TLS ALPN offers
/// only what the listener serves (a client offering `h2` and `http/1.1` gets that one;
/// one offering only the other fails its handshake). Both engines.
#[tokio::test]
async fn a_listener_serves_only_its_protocols() {
    let backend = common::echo_backend().await;
    let config = |listen: &str| {
        format!(
            r#"{{
  "Listen": [ {listen} ],
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }}
}}"#,
            backend.url()
        )
    };
    let served = |r: Result<reqwest::Response, reqwest::Error>| {
        r.ok().map(|r| (r.status().as_u16(), r.version()))
    };
    for (protocols, http1, http2) in [
        ("Http1", Some((200, Version::HTTP_11)), None),
        ("Http2", None, Some((200, Version::HTTP_2))),
        (
            "Http1AndHttp2",
            Some((200, Version::HTTP_11)),
            Some((200, Version::HTTP_2)),
        ),
    ] {
        let listen = format!(r#"{{ "Address": "127.0.0.1:0", "Protocols": "{protocols}" }}"#);
        let proxy = tls_proxy(&config(&listen), Form::Fused).await;
        let url = format!("http://{}/p", proxy.addr);
        let got1 = served(common::h1_client().get(&url).send().await);
        let got2 = served(common::h2c_client().get(&url).send().await);
        assert_eq!((got1, got2), (http1, http2), "{protocols} in clear");
        proxy.shutdown().await;
    }

    let (cert, key) = self_signed();
    let dir = TempDir::new("tls-protocols");
    let cert_file = dir.write("cert.pem", &cert);
    let key_file = dir.write("key.pem", &key);
    for (protocols, offering_both, only_http1) in [
        (
            "Http1",
            Some((200, Version::HTTP_11)),
            Some((200, Version::HTTP_11)),
        ),
        ("Http2", Some((200, Version::HTTP_2)), None),
    ] {
        let listen = format!(
            r#"{{ "Address": "127.0.0.1:0", "Certificate": {}, "Key": {}, "Protocols": "{protocols}" }}"#,
            json_path(&cert_file),
            json_path(&key_file)
        );
        let proxy = tls_proxy(&config(&listen), Form::Fused).await;
        let url = format!("https://127.0.0.1:{}/p", proxy.addr.port());
        let both = served(https_client(&cert, None).get(&url).send().await);
        let http1 = served(
            https_client(&cert, Some(Version::HTTP_11))
                .get(&url)
                .send()
                .await,
        );
        assert_eq!(
            (both, http1),
            (offering_both, only_http1),
            "{protocols} over TLS"
        );
        proxy.shutdown().await;
    }
}

/// HTTP/2 over TLS is chosen by ALPN (RFC 9113 §3.2): a client that offers no ALPN and
/// sends HTTP/2's preface (prior knowledge) is not served HTTP/2, on either engine —
/// hyper-util's protocol detection, which hyper's engine ran behind, served it, on a
/// listener whose `Protocols` are `Http1` too.
#[tokio::test]
async fn http2_over_tls_needs_alpn() {
    let backend = common::echo_backend().await;
    let (cert, key) = self_signed();
    let dir = TempDir::new("tls-prior-knowledge");
    let cert_file = dir.write("cert.pem", &cert);
    let key_file = dir.write("key.pem", &key);
    for protocols in ["Http1", "Http1AndHttp2"] {
        let config = format!(
            r#"{{
  "Listen": [ {{ "Address": "127.0.0.1:0", "Certificate": {}, "Key": {}, "Protocols": "{protocols}" }} ],
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }}
}}"#,
            json_path(&cert_file),
            json_path(&key_file),
            backend.url()
        );
        let proxy = tls_proxy(&config, Form::Fused).await;
        let answer = Hello {
            alpn: &[],
            request: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
            ..Hello::default()
        }
        .to(proxy.addr)
        .await;
        // The native engine answers 400; hyper's closes the connection. Served HTTP/2,
        // the client would wait for the end of the connection's answer in vain.
        match answer {
            Ok(answer) => assert_eq!(
                answer.status.as_deref(),
                Some("HTTP/1.1 400 Bad Request"),
                "{protocols}: {}",
                answer.response
            ),
            Err(e) => assert!(e.starts_with("read: "), "{protocols}: {e}"),
        }
        proxy.shutdown().await;
    }
}

/// A TLS client of the tests' own, to see what a handshake gives: it accepts any
/// certificate (the test compares the one it got), asks for `name` by SNI (`None`:
/// connects by IP, so no SNI), offers `alpn` at `versions`, presents `identity` when
/// given, then sends `request` (`GET /tls HTTP/1.1` by default) unless ALPN chose `h2`.
struct Hello<'a> {
    name: Option<&'a str>,
    alpn: &'a [&'a [u8]],
    versions: &'a [&'static rustls::SupportedProtocolVersion],
    identity: Option<(&'a str, &'a str)>,
    request: &'a [u8],
}

/// What a [`Hello`] got: the server's leaf certificate (DER), the protocol ALPN chose,
/// the TLS version, how many certificate authorities the server's certificate request
/// named (`None`: it asked for no certificate, or the hello presented none), and the
/// response's status line and whole text (`None`: no HTTP/1.1 request sent).
#[derive(Debug)]
struct Answer {
    leaf: Vec<u8>,
    alpn: Option<Vec<u8>>,
    version: rustls::ProtocolVersion,
    authorities: Option<usize>,
    status: Option<String>,
    response: String,
}

/// Presents one client certificate and notes how many authorities the server's
/// certificate request named.
#[derive(Debug)]
struct Presents {
    key: Arc<rustls::sign::CertifiedKey>,
    authorities: std::sync::Mutex<Option<usize>>,
}

impl rustls::client::ResolvesClientCert for Presents {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        _: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        *self.authorities.lock().unwrap() = Some(root_hint_subjects.len());
        Some(self.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl Default for Hello<'_> {
    fn default() -> Self {
        Hello {
            name: None,
            alpn: &[b"h2", b"http/1.1"],
            versions: rustls::DEFAULT_VERSIONS,
            identity: None,
            request: b"GET /tls HTTP/1.1\r\nHost: x\r\nX-Client-Cert: forged\r\nConnection: close\r\n\r\n",
        }
    }
}

impl Hello<'_> {
    async fn to(&self, addr: SocketAddr) -> Result<Answer, String> {
        use rustls::pki_types::pem::PemObject;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(self.versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider.clone())));
        let presents = self.identity.map(|(cert, key)| {
            let key = rustls::sign::CertifiedKey::from_der(
                rustls_pemfile_certs(cert),
                rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                &provider,
            )
            .unwrap();
            Arc::new(Presents {
                key: Arc::new(key),
                authorities: std::sync::Mutex::new(None),
            })
        });
        let mut config = match &presents {
            None => builder.with_no_client_auth(),
            Some(presents) => builder.with_client_cert_resolver(presents.clone()),
        };
        config.alpn_protocols = self.alpn.iter().map(|p| p.to_vec()).collect();
        let server_name = match self.name {
            Some(name) => rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
            None => rustls::pki_types::ServerName::IpAddress(addr.ip().into()),
        };
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let mut tls = within("a TLS handshake", connector.connect(server_name, tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (_, connection) = tls.get_ref();
        let mut answer = Answer {
            leaf: connection.peer_certificates().unwrap()[0].to_vec(),
            alpn: connection.alpn_protocol().map(<[u8]>::to_vec),
            version: connection.protocol_version().unwrap(),
            authorities: presents.and_then(|p| *p.authorities.lock().unwrap()),
            status: None,
            response: String::new(),
        };
        if answer.alpn.as_deref() == Some(b"h2") {
            return Ok(answer);
        }
        tls.write_all(self.request)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut response = Vec::new();
        within("the response", tls.read_to_end(&mut response))
            .await
            .map_err(|e| format!("read: {e}"))?;
        answer.response = String::from_utf8_lossy(&response).into_owned();
        match answer.response.lines().next() {
            Some(line) if !line.is_empty() => answer.status = Some(line.to_string()),
            _ => return Err("no response".to_string()),
        }
        Ok(answer)
    }
}

/// Accepts any server certificate (the tests look at which one they got).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A self-signed certificate for `names`: (certificate PEM, key PEM, leaf DER).
fn certificate_for(names: &[&str]) -> (String, String, Vec<u8>) {
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    (
        ck.cert.pem(),
        ck.signing_key.serialize_pem(),
        ck.cert.der().to_vec(),
    )
}

/// Kestrel's `Sni` on a listener: the certificate, protocols and TLS versions by the
/// host name the client asks for — the name itself ignoring case, else the longest
/// `*.` suffix, else `*` (also for a client that names none); a listener without `*`
/// refuses a name no entry matches, and a client that names none. Entries take the
/// listener's certificate where they name none. Requests are served on the chosen
/// site, by both engines.
#[tokio::test]
async fn sni_chooses_certificate_and_settings_by_host_name() {
    let dir = TempDir::new("sni");
    let file = |name: &str, (cert, key, der): (String, String, Vec<u8>)| {
        let files = (
            json_path(&dir.write(&format!("{name}.pem"), &cert)),
            json_path(&dir.write(&format!("{name}.key"), &key)),
        );
        (files, der)
    };
    let (own, own_der) = file("own", certificate_for(&["localhost", "127.0.0.1"]));
    let (a, a_der) = file("a", certificate_for(&["a.example.org"]));
    let (deep, deep_der) = file("deep", certificate_for(&["*.b.example.org"]));
    let (wild, wild_der) = file("wild", certificate_for(&["*.example.org"]));
    let backend = common::echo_backend().await;
    let config = |any: &str| {
        format!(
            r#"{{
  "Listen": [ {{ "Address": "127.0.0.1:0", "Certificate": {}, "Key": {},
     "Sni": {{
       "a.example.org": {{ "Certificate": {}, "Key": {}, "Protocols": "Http1" }},
       "*.b.example.org": {{ "Certificate": {}, "Key": {} }},
       "*.example.org": {{ "Certificate": {}, "Key": {}, "SslProtocols": ["Tls12"] }}
       {any}
     }} }} ],
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }}
}}"#,
            own.0,
            own.1,
            a.0,
            a.1,
            deep.0,
            deep.1,
            wild.0,
            wild.1,
            backend.url()
        )
    };
    let proxy = tls_proxy(&config(""), Form::Fused).await;
    let addr = proxy.addr;
    let hello = |name| Hello {
        name: Some(name),
        ..Hello::default()
    };
    // Exact names, ignoring case: its certificate; `Http1` — ALPN chose HTTP/1.1 from
    // a client offering both, and the request is served.
    for name in ["a.example.org", "A.Example.ORG"] {
        let got = hello(name).to(addr).await.unwrap();
        assert_eq!(got.leaf, a_der, "{name}");
        assert_eq!(got.alpn.as_deref(), Some(&b"http/1.1"[..]), "{name}");
        assert_eq!(got.status.as_deref(), Some("HTTP/1.1 200 OK"), "{name}");
    }
    // The longest suffix wins; a wildcard entry keeps the listener's protocols (h2).
    let got = hello("x.b.example.org").to(addr).await.unwrap();
    assert_eq!(got.leaf, deep_der);
    assert_eq!(got.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(got.version, rustls::ProtocolVersion::TLSv1_3);
    // `*.example.org`: TLS 1.2 only, any depth below the domain, not the domain.
    for name in ["b.example.org", "x.y.example.org"] {
        let got = hello(name).to(addr).await.unwrap();
        assert_eq!(got.leaf, wild_der, "{name}");
        assert_eq!(got.version, rustls::ProtocolVersion::TLSv1_2, "{name}");
    }
    let tls13_only = Hello {
        name: Some("b.example.org"),
        versions: &[&rustls::version::TLS13],
        ..Hello::default()
    };
    assert!(tls13_only.to(addr).await.is_err());
    // No entry: refused, as a client naming none.
    for name in [Some("example.org"), Some("other.test"), None] {
        let refused = Hello {
            name,
            ..Hello::default()
        };
        let got = refused.to(addr).await;
        assert!(got.is_err(), "{name:?}: {got:?}");
    }
    // A real client, by name, over HTTP/1.1 and HTTP/2.
    for (name, root, version) in [
        ("a.example.org", &a, Version::HTTP_11),
        ("x.b.example.org", &deep, Version::HTTP_2),
    ] {
        let root = std::fs::read_to_string(root.0.trim_matches('"')).unwrap();
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(root.as_bytes()).unwrap())
            .resolve(name, addr)
            .timeout(common::LIMIT)
            .no_proxy()
            .build()
            .unwrap();
        let r = client
            .get(format!("https://{name}:{}/sni", addr.port()))
            .send()
            .await
            .unwrap();
        assert_eq!((r.status().as_u16(), r.version()), (200, version), "{name}");
        assert_eq!(r.headers()["x-echo-x-forwarded-proto"], "https");
    }
    proxy.shutdown().await;

    // With `*` (the listener's certificate and settings): every other name, and none.
    let proxy = tls_proxy(&config(r#", "*": {}"#), Form::Layered).await;
    for name in [Some("other.test"), Some("example.org"), None] {
        let got = Hello {
            name,
            ..Hello::default()
        }
        .to(proxy.addr)
        .await
        .unwrap();
        assert_eq!(got.leaf, own_der, "{name:?}");
        assert_eq!(got.alpn.as_deref(), Some(&b"h2"[..]), "{name:?}");
    }
    assert_eq!(
        hello("a.example.org").to(proxy.addr).await.unwrap().leaf,
        a_der
    );
    proxy.shutdown().await;
}

/// A listener's `SslProtocols`: a client that offers only another version fails its
/// handshake.
#[tokio::test]
async fn a_listeners_ssl_protocols_are_enforced() {
    let dir = TempDir::new("ssl-protocols");
    let (cert, key, _) = certificate_for(&["127.0.0.1"]);
    let listen = |versions: &str| {
        format!(
            r#"{{ "Listen": [ {{ "Address": "127.0.0.1:0", "Certificate": {}, "Key": {}, "SslProtocols": {versions} }} ],
                 "Routes": {{}}, "Clusters": {{}} }}"#,
            json_path(&dir.write("c.pem", &cert)),
            json_path(&dir.write("k.pem", &key)),
        )
    };
    use rustls::version::{TLS12, TLS13};
    for (versions, tls12, tls13) in [
        (r#"["Tls12"]"#, true, false),
        (r#"["Tls13"]"#, false, true),
        (r#"["Tls11", "Tls12", "Tls13"]"#, true, true),
        (r#"["None"]"#, true, true),
    ] {
        let proxy = tls_proxy(&listen(versions), Form::Fused).await;
        for (version, served) in [(&TLS12, tls12), (&TLS13, tls13)] {
            let got = Hello {
                versions: &[version],
                ..Hello::default()
            }
            .to(proxy.addr)
            .await;
            assert_eq!(got.is_ok(), served, "{versions} {version:?}: {got:?}");
        }
        proxy.shutdown().await;
    }
}

/// Kestrel's `ClientCertificateMode`, from an `appsettings.json` the binary runs:
/// `RequireCertificate` serves only clients whose certificate chains to the trust store
/// (`SSL_CERT_FILE` here) — none, or one from another CA, fails; `AllowCertificate`
/// (an `Sni` entry's) serves clients without one too, but not a bad one;
/// `EndpointDefaults.SslProtocols` applies to the endpoint. YARP's `ClientCert`
/// transform sends the certificate (DER, base64) to the destination, and never the
/// client's own field of that name.
#[tokio::test]
async fn client_certificates_are_asked_for_and_verified() {
    use rcgen::{CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, KeyPair};
    let dir = TempDir::new("client-certs");
    let ca =
        CertifiedIssuer::self_signed(common::ca_params(), KeyPair::generate().unwrap()).unwrap();
    let roots = dir.write("ca.pem", &ca.pem());
    let client = |issuer: &CertifiedIssuer<'_, KeyPair>| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["client.example.org".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    };
    let (good_cert, good_key, good_der) = client(&ca);
    let good = (good_cert, good_key);
    let good_base64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&good_der)
    };
    let other_ca =
        CertifiedIssuer::self_signed(common::ca_params(), KeyPair::generate().unwrap()).unwrap();
    let bad = {
        let (cert, key, _) = client(&other_ca);
        (cert, key)
    };
    let (cert, key, _) = certificate_for(&["127.0.0.1"]);
    let backend = common::echo_backend().await;
    let file = dir.write(
        "appsettings.json",
        &format!(
            r#"{{
  "Kestrel": {{
    "EndpointDefaults": {{ "SslProtocols": ["Tls13"] }},
    "Endpoints": {{ "Https": {{
      "Url": "https://127.0.0.1:0",
      "Certificate": {{ "Path": {}, "KeyPath": {} }},
      "ClientCertificateMode": "RequireCertificate",
      "Sni": {{ "open.example.org": {{ "ClientCertificateMode": "AllowCertificate" }}, "*": {{}} }}
    }} }}
  }},
  "ReverseProxy": {{
    "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }},
                          "Transforms": [ {{ "ClientCert": "X-Client-Cert" }} ] }} }},
    "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }}
  }}
}}"#,
            json_path(&dir.write("server.pem", &cert)),
            json_path(&dir.write("server.key", &key)),
            backend.url()
        ),
    );
    for engine in ["native", "hyper"] {
        let mut command = fuseway(&file);
        command
            .args(["--http1-engine", engine, "--http2-engine", engine])
            .env("SSL_CERT_FILE", &roots)
            .env_remove("SSL_CERT_DIR");
        let mut child = command.spawn().unwrap();
        let addr = until_listening(&mut child).await;
        let http1: &[&[u8]] = &[b"http/1.1"];
        let ask = |name: Option<&'static str>, identity: Option<&(String, String)>| {
            let identity = identity.map(|(c, k)| (c.clone(), k.clone()));
            async move {
                Hello {
                    name,
                    alpn: http1,
                    identity: identity.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
                    ..Hello::default()
                }
                .to(addr)
                .await
                .map(|a| {
                    // What the destination got in `X-Client-Cert` (the echo's header).
                    let sent = a
                        .response
                        .lines()
                        .find_map(|l| l.strip_prefix("x-echo-x-client-cert: "))
                        .map(str::to_string);
                    (a.status, sent)
                })
            }
        };
        let ok = |sent: Option<&str>| {
            Ok((
                Some("HTTP/1.1 200 OK".to_string()),
                sent.map(str::to_string),
            ))
        };
        // Required (the endpoint's, through `*`).
        assert_eq!(ask(None, Some(&good)).await, ok(Some(&good_base64)));
        // The request names no authorities (as .NET's), though the store has one.
        let asked = Hello {
            alpn: http1,
            identity: Some((&good.0, &good.1)),
            ..Hello::default()
        };
        assert_eq!(
            asked.to(addr).await.unwrap().authorities,
            Some(0),
            "{engine}"
        );
        assert!(ask(None, None).await.is_err());
        assert!(ask(None, Some(&bad)).await.is_err());
        // Allowed (the entry's): without a certificate the forged field is not passed on.
        assert_eq!(ask(Some("open.example.org"), None).await, ok(None));
        assert_eq!(
            ask(Some("open.example.org"), Some(&good)).await,
            ok(Some(&good_base64))
        );
        assert!(ask(Some("open.example.org"), Some(&bad)).await.is_err());
        // `EndpointDefaults.SslProtocols`: TLS 1.3 only.
        let tls12 = Hello {
            alpn: http1,
            versions: &[&rustls::version::TLS12],
            identity: Some((&good.0, &good.1)),
            ..Hello::default()
        };
        assert!(tls12.to(addr).await.is_err());
        // Over HTTP/2, the certificate goes with every request of the connection.
        let h2 = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(cert.as_bytes()).unwrap())
            .identity(
                reqwest::Identity::from_pem(format!("{}{}", good.0, good.1).as_bytes()).unwrap(),
            )
            .timeout(common::LIMIT)
            .no_proxy()
            .build()
            .unwrap();
        for _ in 0..2 {
            let r = h2.get(format!("https://{addr}/h2")).send().await.unwrap();
            assert_eq!(
                (r.status().as_u16(), r.version()),
                (200, Version::HTTP_2),
                "{engine}"
            );
            assert_eq!(
                r.headers()["x-echo-x-client-cert"],
                good_base64.as_str(),
                "{engine}"
            );
        }
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
}

/// `SIGHUP` re-reads an `Sni` entry's certificate too: the entry's name gets the new
/// one, the listener's own is unchanged.
#[tokio::test]
async fn sighup_rotates_sni_certificates() {
    let dir = TempDir::new("rotate-sni");
    let write = |name: &str, (cert, key, der): (String, String, Vec<u8>)| {
        dir.write(&format!("{name}.pem"), &cert);
        dir.write(&format!("{name}.key"), &key);
        der
    };
    let own = write("own", certificate_for(&["127.0.0.1"]));
    let old = write("a", certificate_for(&["a.example.org"]));
    let backend = common::echo_backend().await;
    let file = dir.write(
        "proxy.json",
        &format!(
            r#"{{
  "Listen": [ {{ "Address": "127.0.0.1:0", "Certificate": {}, "Key": {},
     "Sni": {{ "a.example.org": {{ "Certificate": {}, "Key": {} }}, "*": {{}} }} }} ],
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }}
}}"#,
            json_path(&dir.path().join("own.pem")),
            json_path(&dir.path().join("own.key")),
            json_path(&dir.path().join("a.pem")),
            json_path(&dir.path().join("a.key")),
            backend.url()
        ),
    );
    let mut child = fuseway(&file).spawn().unwrap();
    let (addr, mut log) = listening_with_log(&mut child).await;
    let leaf = |name: Option<&'static str>| async move {
        Hello {
            name,
            ..Hello::default()
        }
        .to(addr)
        .await
        .unwrap()
        .leaf
    };
    assert_eq!(leaf(Some("a.example.org")).await, old);
    assert_eq!(leaf(None).await, own);

    let new = write("a", certificate_for(&["a.example.org"]));
    reload_certificates(&child, &mut log).await;
    assert_eq!(leaf(Some("a.example.org")).await, new);
    assert_eq!(leaf(None).await, own);
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// A forward proxy of the tests' own, as a corporate proxy is: `CONNECT host:port`
/// opens a tunnel; a request in absolute form sends its connection on, unchanged, to
/// the authority it names (the destination takes the absolute form too). It notes the
/// first line of every connection, and with `refuse` answers 407 to each.
struct ForwardProxy {
    addr: SocketAddr,
    lines: Arc<tokio::sync::watch::Sender<Vec<String>>>,
}

impl ForwardProxy {
    async fn start(refuse: bool) -> ForwardProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let lines = Arc::new(tokio::sync::watch::Sender::new(Vec::new()));
        let noted = lines.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let noted = noted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match client.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let line = text.lines().next().unwrap_or_default().to_string();
                    noted.send_modify(|lines| lines.push(line.clone()));
                    if refuse {
                        let _ = client
                            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        return;
                    }
                    let mut words = line.split(' ');
                    let (method, target) = (words.next().unwrap(), words.next().unwrap_or(""));
                    // Not in absolute form: the connection is closed (the test sees it).
                    let authority = match method {
                        "CONNECT" => target.to_string(),
                        _ => match target
                            .parse::<http::Uri>()
                            .ok()
                            .and_then(|u| u.authority().cloned())
                        {
                            Some(authority) => authority.to_string(),
                            None => return,
                        },
                    };
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(authority).await else {
                        return;
                    };
                    if method == "CONNECT" {
                        let _ = client
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await;
                    } else if upstream.write_all(&head).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        ForwardProxy { addr, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.borrow().clone()
    }

    /// Wait for a first line equal to `line`.
    async fn seen(&self, line: &str) {
        let mut lines = self.lines.subscribe();
        within(
            &format!("`{line}` at the proxy"),
            lines.wait_for(|l| l.iter().any(|l| l == line)),
        )
        .await
        .unwrap();
    }
}

/// YARP's `HttpClient.WebProxy`, as .NET's `HttpClient` uses a proxy: requests to a
/// plain destination go to the proxy in absolute form, on connections kept alive;
/// `https://` destinations (ALPN through the tunnel) and HTTP/2 over `http://` get a
/// `CONNECT` tunnel; active health probes go through it too; `BypassOnLocal` reaches
/// `127.0.0.1` directly; a tunnel refused,
/// or no proxy there, is a 502.
#[tokio::test]
async fn destinations_are_reached_through_a_web_proxy() {
    let (cert, key) = self_signed();
    let https = https_backend(&cert, &key).await;
    let plain = versioned_backend(None).await;
    let proxied = |proxy: SocketAddr, extra: &str| {
        format!(
            r#""HttpClient": {{ "DangerousAcceptAnyServerCertificate": true, "WebProxy": {{ "Address": "http://{proxy}" {extra} }} }},"#
        )
    };
    for form in FORMS {
        // Plain HTTP/1.1: the absolute form, two requests on one connection.
        let proxy = ForwardProxy::start(false).await;
        let config = common::simple_config(
            &[("d1", &format!("http://127.0.0.1:{}", plain.port()))],
            &proxied(proxy.addr, ""),
        );
        let front = common::proxy_with(&config, form).await;
        let client = common::h1_client();
        for path in ["/a?x=1", "/b"] {
            let r = client.get(front.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 200, "{form:?}");
            assert_eq!(r.text().await.unwrap(), format!("HTTP/1.1 {}", &path[..2]));
        }
        assert_eq!(
            proxy.lines(),
            [format!(
                "GET http://127.0.0.1:{}/a?x=1 HTTP/1.1",
                plain.port()
            )],
            "{form:?}"
        );
        front.shutdown().await;
        // `https://`: a tunnel, the destination choosing HTTP/2 through it.
        let proxy = ForwardProxy::start(false).await;
        let extra = proxied(proxy.addr, "");
        assert_eq!(seen(https, true, &extra, form).await, "HTTP/2.0 /v");
        assert_eq!(
            proxy.lines(),
            [format!("CONNECT 127.0.0.1:{} HTTP/1.1", https.port())]
        );
        // Active health probes go the same way, as YARP's through the cluster's client.
        let proxy = ForwardProxy::start(false).await;
        let config = common::simple_config(
            &[("d1", &format!("http://127.0.0.1:{}", plain.port()))],
            &format!(
                r#"{} "HealthCheck": {{ "Active": {{ "Enabled": true, "Interval": "100ms", "Path": "/health" }} }},"#,
                proxied(proxy.addr, "")
            ),
        );
        let front = common::proxy_with(&config, form).await;
        let checker = fuseway::health::ActiveHealthChecker::spawn(front.state.clone());
        proxy
            .seen(&format!(
                "GET http://127.0.0.1:{}/health HTTP/1.1",
                plain.port()
            ))
            .await;
        drop(checker);
        front.shutdown().await;
        // HTTP/2 over `http://` (prior knowledge): a tunnel too.
        let proxy = ForwardProxy::start(false).await;
        let extra = format!(
            r#"{} "HttpRequest": {{ "Version": "2", "VersionPolicy": "RequestVersionExact" }},"#,
            proxied(proxy.addr, "")
        );
        assert_eq!(seen(plain, false, &extra, form).await, "HTTP/2.0 /v");
        assert_eq!(
            proxy.lines(),
            [format!("CONNECT 127.0.0.1:{} HTTP/1.1", plain.port())]
        );
        // `BypassOnLocal`: 127.0.0.1 directly.
        let proxy = ForwardProxy::start(false).await;
        let extra = proxied(proxy.addr, r#", "BypassOnLocal": true"#);
        assert_eq!(seen(plain, false, &extra, form).await, "HTTP/1.1 /v");
        assert_eq!(seen(https, true, &extra, form).await, "HTTP/2.0 /v");
        assert!(proxy.lines().is_empty(), "{:?}", proxy.lines());
        // A proxy that refuses: its answer to a request (as .NET passes it on), 502
        // for a tunnel it does not open; none there: 502.
        let refusing = ForwardProxy::start(true).await;
        let extra = proxied(refusing.addr, "");
        assert_eq!(seen(plain, false, &extra, form).await, "407");
        assert_eq!(seen(https, true, &extra, form).await, "502");
        assert_eq!(refusing.lines().len(), 2, "{:?}", refusing.lines());
        let gone = common::Refused::bind();
        assert_eq!(
            seen(plain, false, &proxied(gone.addr, ""), form).await,
            "502"
        );
    }
}

/// An ASP.NET `https` endpoint that names no certificate: in the `Development`
/// environment it serves a self-signed certificate for `localhost` fuseway makes (where
/// Kestrel serves .NET's development certificate), the same on both the endpoint and a
/// second one; in any other environment the file is refused, saying so. Fuseway's own
/// `Listen` entries ask for it with `DevelopmentCertificate`.
#[tokio::test]
async fn the_development_environment_serves_a_development_certificate() {
    let dir = TempDir::new("development-certificate");
    let backend = common::echo_backend().await;
    let file = dir.write(
        "appsettings.json",
        &format!(
            r#"{{
  "Kestrel": {{ "Endpoints": {{
    "Https": {{ "Url": "https://127.0.0.1:0" }},
    "Other": {{ "Url": "https://127.0.0.1:0" }}
  }} }},
  "ReverseProxy": {{
    "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
    "Clusters": {{ "c": {{ "Destinations": {{ "d1": {{ "Address": "{}" }} }} }} }}
  }}
}}"#,
            backend.url()
        ),
    );
    for (name, value) in [
        ("ASPNETCORE_ENVIRONMENT", "Development"),
        ("DOTNET_ENVIRONMENT", "development"),
    ] {
        let mut command = fuseway(&file);
        command
            .env_remove("ASPNETCORE_ENVIRONMENT")
            .env_remove("DOTNET_ENVIRONMENT")
            .env(name, value);
        let mut child = command.spawn().unwrap();
        let (first, mut log) = listening_with_log(&mut child).await;
        let second = within("the second listening line", async {
            while let Some(line) = log.next_line().await.unwrap() {
                if let Some(addr) = common::listening_addr(&line) {
                    return addr;
                }
            }
            panic!("fuseway exited");
        })
        .await;
        let mut leaves = Vec::new();
        for addr in [first, second] {
            let answer = Hello {
                name: Some("localhost"),
                alpn: &[b"http/1.1"],
                ..Hello::default()
            }
            .to(addr)
            .await
            .unwrap();
            assert_eq!(answer.status.as_deref(), Some("HTTP/1.1 200 OK"), "{name}");
            leaves.push(answer.leaf);
        }
        // One certificate, for localhost, signed by itself.
        assert_eq!(leaves[0], leaves[1], "{name}");
        let (_, leaf) = x509_parser::parse_x509_certificate(&leaves[0]).unwrap();
        assert_eq!(leaf.subject(), leaf.issuer());
        let names = leaf.subject_alternative_name().unwrap().unwrap();
        assert!(
            format!("{:?}", names.value).contains("localhost"),
            "{:?}",
            names.value
        );
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
    // In production (the default), refused at the endpoint's certificate.
    let out = within(
        "fuseway --check",
        fuseway(&file)
            .env_remove("ASPNETCORE_ENVIRONMENT")
            .env_remove("DOTNET_ENVIRONMENT")
            .arg("--check")
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Kestrel.Endpoints.Https.Certificate") && stderr.contains("`Development`"),
        "{stderr}"
    );
    // Fuseway's own form: `DevelopmentCertificate`, not beside a `Certificate`.
    let listen = |entry: &str| {
        fuseway::config::parse(
            &format!(r#"{{ "Listen": [ {{ "Address": "127.0.0.1:0", {entry} }} ] }}"#),
            fuseway::config::Format::Json,
        )
    };
    let config = listen(r#""DevelopmentCertificate": true"#).unwrap();
    assert_eq!(
        config.listen[0].tls_files(),
        Some(fuseway::server::TlsFiles::Development)
    );
    let errors = listen(r#""DevelopmentCertificate": true, "Certificate": "c.pfx""#).unwrap_err();
    assert_eq!(
        errors.iter().next().unwrap().path,
        "Listen[0].DevelopmentCertificate"
    );
}
