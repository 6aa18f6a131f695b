//! The `fuseway` binary: the demo prints curl commands that answer; `--config` runs a
//! file and rejects an invalid one with the field named.

mod common;

use std::process::Stdio;

use common::{h1_client, h2c_client, listening_addr, strip_ansi, within, TempDir};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn fuseway() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fuseway"));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    c
}

#[tokio::test]
async fn demo_prints_curl_commands_that_answer() {
    let mut child = fuseway().args(["--listen", "127.0.0.1:0"]).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut curls = Vec::new();
    within("the demo banner", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.trim_start().starts_with("curl") {
                curls.push(line.trim().to_owned());
            }
            if line.starts_with("Ctrl-C") {
                break;
            }
        }
    })
    .await;
    assert!(curls.len() >= 3, "{curls:?}");
    for curl in &curls {
        // `curl -i [--http2-prior-knowledge] [-H 'Host: h'] URL   # comment`
        let words: Vec<&str> = curl.split('#').next().unwrap().split_whitespace().collect();
        let url = words.iter().find(|w| w.starts_with("http://")).unwrap();
        let client = if words.contains(&"--http2-prior-knowledge") {
            h2c_client()
        } else {
            h1_client()
        };
        let mut req = client.get(*url);
        if let Some(i) = words.iter().position(|w| *w == "-H") {
            let header = curl.split('\'').nth(1).unwrap();
            let (n, v) = header.split_once(':').unwrap();
            assert!(words[i + 1].starts_with('\''));
            req = req.header(n.trim(), v.trim());
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200, "{curl}");
        assert!(
            r.text().await.unwrap().starts_with("hello from backend-"),
            "{curl}"
        );
    }
    child.start_kill().unwrap();
}

#[tokio::test]
async fn invalid_config_names_the_field_and_exits_non_zero() {
    let dir = TempDir::new("cli");
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{ "ReverseProxy": { "Routes": { "r1": { "ClusterId": "c", "Match": { "Path": "/{oops" } } } } }"#,
    )
    .unwrap();
    let out = within(
        "fuseway to exit",
        fuseway().arg("--config").arg(&file).output(),
    )
    .await
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Routes.r1.Match.Path"), "{stderr}");
}

#[tokio::test]
async fn runs_a_config_file_and_stops_on_sigterm() {
    let backend = common::echo_backend().await;
    let dir = TempDir::new("cli-run");
    let file = dir.path().join("proxy.toml");
    std::fs::write(
        &file,
        format!(
            "Listen = [\"127.0.0.1:0\"]\n\
             [Routes.r1]\nClusterId = \"c1\"\nMatch = {{ Path = \"/{{**rest}}\" }}\n\
             [Clusters.c1.Destinations.d1]\nAddress = \"{}\"\n",
            backend.url()
        ),
    )
    .unwrap();
    let mut child = fuseway()
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(&file)
        .args(["--workers", "3"])
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = within("the listening and serving log lines", async {
        let mut addr = None;
        while let Some(line) = log.next_line().await.unwrap() {
            addr = addr.or(listening_addr(&line));
            if line.contains("serving") {
                assert!(strip_ansi(&line).contains("workers=3"), "{line}");
                return addr.expect("a listening line before the serving one");
            }
        }
        panic!("fuseway exited before serving");
    })
    .await;
    // Connections of their own, spread over the three workers' shared listener.
    let url = format!("http://{addr}/hello");
    let answers = futures_util::future::join_all((0..12).map(|i| {
        let url = format!("{url}/{i}");
        async move {
            let client = h1_client();
            let mut bodies = Vec::new();
            for _ in 0..5 {
                let r = client.get(&url).send().await.unwrap();
                bodies.push(r.text().await.unwrap());
            }
            (i, bodies)
        }
    }));
    for (i, bodies) in within("60 requests on 12 connections", answers).await {
        for body in bodies {
            assert_eq!(body, format!("GET /hello/{i}"));
        }
    }
    let pid = child.id().unwrap() as i32;
    // SIGTERM: graceful shutdown, exit 0.
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = within("fuseway to exit", child.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
}

/// Start `fuseway ARGS --config FILE` (with `env`), wait for its listening line, return
/// the child and the address.
async fn start_with(
    file: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, std::net::SocketAddr) {
    let mut cmd = fuseway();
    cmd.env("RUST_LOG", "info")
        .args(args)
        .arg("--config")
        .arg(file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let addr = common::listening(&mut child).await;
    (child, addr)
}

#[tokio::test]
async fn yarp_sample_appsettings_is_served_unchanged_with_an_env_override() {
    // The file as YARP's sample writes it (comments, trailing commas, `Logging`,
    // `AllowedHosts`, `{**catch-all}`, a Kestrel endpoint); the destination comes from
    // the environment, as a container would set it.
    let backend = common::echo_backend().await;
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/yarp-basic-sample.json");
    let (mut child, addr) = start_with(
        &file,
        &[],
        &[(
            "ReverseProxy__Clusters__cluster1__Destinations__destination1__Address",
            &backend.url(),
        )],
    )
    .await;
    assert!(
        addr.ip().is_loopback(),
        "Kestrel's localhost endpoint: {addr}"
    );
    let r = h1_client()
        .get(format!("http://{addr}/any/path?q=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "GET /any/path?q=1");
    child.start_kill().unwrap();
}

/// A YARP container's ASP.NET variables, as Microsoft's guide to HTTPS in Docker sets
/// them: `ASPNETCORE_URLS` and the default certificate
/// (`ASPNETCORE_Kestrel__Certificates__Default__Path`, `KeyPath`), read under the file
/// as ASP.NET's host reads them; and `Logging__LogLevel__Default` over the file's
/// `Warning` (or the listening line, information, would not be logged).
#[tokio::test]
async fn a_containers_aspnetcore_variables_are_read() {
    let backend = common::echo_backend().await;
    let dir = TempDir::new("cli-aspnetcore-variables");
    let ca = std::fs::read(common::localhost_certificates(&dir)).unwrap();
    let file = dir.path().join("appsettings.json");
    std::fs::write(
        &file,
        format!(
            r#"{{
              "Logging": {{ "LogLevel": {{ "Default": "Warning" }} }},
              "ReverseProxy": {{
                "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "{{**catch-all}}" }} }} }},
                "Clusters": {{ "c": {{ "Destinations": {{ "d": {{ "Address": "{}" }} }} }} }}
              }}
            }}"#,
            backend.url()
        ),
    )
    .unwrap();
    let mut child = fuseway()
        .env_remove("RUST_LOG")
        .env("ASPNETCORE_URLS", "https://127.0.0.1:0")
        .env(
            "ASPNETCORE_Kestrel__Certificates__Default__Path",
            dir.path().join("server.pem"),
        )
        .env(
            "ASPNETCORE_Kestrel__Certificates__Default__KeyPath",
            dir.path().join("server.key"),
        )
        .env("Logging__LogLevel__Default", "Information")
        .arg("--config")
        .arg(&file)
        .spawn()
        .unwrap();
    let addr = common::listening(&mut child).await;
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .timeout(common::LIMIT)
        .build()
        .unwrap();
    let r = client
        .get(format!("https://{addr}/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "GET /hello");
    child.start_kill().unwrap();
}

#[tokio::test]
async fn lower_camel_case_file_is_served() {
    let backend = common::echo_backend().await;
    let dir = TempDir::new("cli-camel");
    let file = dir.path().join("appsettings.json");
    std::fs::write(
        &file,
        format!(
            r#"{{
              "kestrel": {{ "endpoints": {{ "http": {{ "url": "http://127.0.0.1:0" }} }} }},
              "reverseProxy": {{
                "routes": {{ "api": {{ "clusterId": "backend", "match": {{ "path": "api/{{**rest}}" }} }} }},
                "clusters": {{ "backend": {{ "destinations": {{ "d1": {{ "address": "{}" }} }} }} }}
              }}
            }}"#,
            backend.url()
        ),
    )
    .unwrap();
    let (mut child, addr) = start_with(&file, &[], &[]).await;
    let client = h1_client();
    let r = client
        .get(format!("http://{addr}/api/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "GET /api/x");
    let r = client
        .get(format!("http://{addr}/other"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    child.start_kill().unwrap();
}

#[tokio::test]
async fn check_validates_without_serving() {
    let dir = TempDir::new("cli-check");
    let good = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/yarp-basic-sample.json");
    let out = within(
        "fuseway --check to exit",
        fuseway().arg("--check").arg("--config").arg(&good).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("is valid"));

    // An override that breaks the file is checked too: exit 1, the field named.
    let out = within(
        "fuseway --check to exit",
        fuseway()
            .arg("--check")
            .arg("--config")
            .arg(&good)
            .env("ReverseProxy__Routes__route1__Match__Path", "/{oops")
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Routes.route1.Match.Path"), "{stderr}");

    // A listener certificate that cannot be read: refused without binding anything.
    let bad = dir.path().join("tls.json");
    std::fs::write(
        &bad,
        r#"{"Listen": [{"Address": "127.0.0.1:0", "Certificate": "/nonexistent/c.pem", "Key": "/nonexistent/k.pem"}]}"#,
    )
    .unwrap();
    let out = within(
        "fuseway --check to exit",
        fuseway().arg("--check").arg("--config").arg(&bad).output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Listen[0]"), "{stderr}");
}

#[tokio::test]
async fn a_route_naming_an_unregistered_policy_is_refused() {
    let dir = TempDir::new("cli-policy");
    let file = dir.path().join("appsettings.json");
    std::fs::write(
        &file,
        r#"{ "ReverseProxy": {
              "Routes": { "r1": { "ClusterId": "c1", "AuthorizationPolicy": "admins",
                                   "Match": { "Path": "/{**rest}" } } },
              "Clusters": { "c1": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9/" } } } } } }"#,
    )
    .unwrap();
    for check in [true, false] {
        let mut cmd = fuseway();
        if check {
            cmd.arg("--check");
        }
        let out = within(
            "fuseway to refuse the file",
            cmd.arg("--config")
                .arg(&file)
                .args(["--listen", "127.0.0.1:0"])
                .output(),
        )
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(1), "check={check}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("Routes.r1.AuthorizationPolicy")
                && stderr.contains("policy `admins` is not registered"),
            "{stderr}"
        );
    }
}

/// A bad option value — a duration that is not one, a connection limit of 0 — is
/// refused with the option and the value named.
#[tokio::test]
async fn a_bad_option_value_names_its_option() {
    for (option, value) in [
        ("--grace", "soon"),
        ("--max-connections", "0"),
        ("--min-request-body-rate", "fast"),
        ("--min-response-rate", "slow"),
    ] {
        let out = within(
            "fuseway to refuse the argument",
            fuseway().args([option, value]).output(),
        )
        .await
        .unwrap();
        assert!(!out.status.success(), "{option} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(option) && err.contains(value), "{err}");
    }
}

/// `--keep-alive-timeout` and `--header-read-timeout` reach the server: with both at
/// 1 s, a kept connection idle for longer is closed, one used within it is served.
#[tokio::test]
async fn the_connection_timeouts_are_set_from_the_command_line() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = common::echo_backend().await;
    let dir = TempDir::new("cli-timeouts");
    let file = dir.write(
        "proxy.json",
        &common::simple_config(&[("d", &backend.url())], ""),
    );
    let (mut child, addr) = start_with(
        &file,
        &[
            "--listen",
            "127.0.0.1:0",
            "--keep-alive-timeout",
            "1s",
            "--header-read-timeout",
            "1s",
        ],
        &[],
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 4096];
    for wait in [
        std::time::Duration::from_millis(300),
        std::time::Duration::from_millis(1600),
    ] {
        s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let n = within("an answer", s.read(&mut buf)).await.unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        // The idle time under test (not a synchronisation).
        tokio::time::sleep(wait).await;
    }
    // Idle 1.6 s after the second answer: closed by the 1 s keep-alive timeout.
    let n = within("the close", s.read(&mut buf)).await.unwrap_or(0);
    assert_eq!(n, 0, "the connection was closed");
    child.start_kill().unwrap();
}

/// By default a request body is held to Kestrel's minimum rate (240 bytes a second
/// after 5 s): one that stops is answered 408 once 5 s have been spent waiting for it.
#[tokio::test]
async fn a_request_body_that_stops_is_answered_408_after_the_grace_period() {
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A destination that reads the whole body before it answers.
    let backend = common::backend(|request: http::Request<hyper::body::Incoming>| async move {
        let body = request.into_body().collect().await;
        http::Response::new(common::full(format!("{}", body.is_ok())))
    })
    .await;
    let dir = TempDir::new("cli-body-rate");
    let file = dir.write(
        "proxy.json",
        &common::simple_config(&[("d", &backend.url())], ""),
    );
    let (mut child, addr) = start_with(
        &file,
        &["--listen", "127.0.0.1:0", "--http1-engine", "native"],
        &[],
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let sent = std::time::Instant::now();
    let mut answer = Vec::new();
    within("the 408", s.read_to_end(&mut answer)).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    let waited = sent.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(5),
        "answered after {waited:?}"
    );
    child.start_kill().unwrap();
}

/// The example configurations shipped in `contrib/examples` are valid (`--check`), so
/// what the packaging docs point at works.
#[tokio::test]
async fn the_contrib_example_configurations_pass_check() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let out = within(
            "fuseway --check to exit",
            fuseway().arg("--check").arg("--config").arg(&path).output(),
        )
        .await
        .unwrap();
        assert!(out.status.success(), "{}: {out:?}", path.display());
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} example configurations");
}

/// A YARP user's `Kestrel.Limits` are applied: `MaxRequestBodySize` (a route without a
/// limit of its own takes it: 413 over it), `KeepAliveTimeout` (an idle connection
/// closed after 1 s) — unless the command line says otherwise (`--keep-alive-timeout`
/// wins) — and a Kestrel key fuseway has no equivalent of is accepted and named in a
/// warning.
#[tokio::test]
async fn kestrel_limits_in_appsettings_are_applied() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = common::echo_backend().await;
    let dir = TempDir::new("cli-kestrel-limits");
    let file = dir.write(
        "appsettings.json",
        &format!(
            r#"{{
  "Kestrel": {{ "Limits": {{
    "MaxRequestBodySize": "10",
    "keepAliveTimeout": "00:00:01",
    "MaxRequestBufferSize": 1048576
  }} }},
  "ReverseProxy": {}
}}"#,
            common::simple_config(&[("d", &backend.url())], "")
        ),
    );
    for (args, closes) in [
        (&[][..], true),
        (&["--keep-alive-timeout", "10s"][..], false),
    ] {
        let mut child = fuseway()
            .env("RUST_LOG", "info")
            .args([
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&file)
            .args(args)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let logged = common::proxy_and_admin(&mut child).await;
        assert!(
            logged
                .early
                .iter()
                .any(|l| l.contains("not applied") && l.contains("MaxRequestBufferSize")),
            "{:#?}",
            logged.early
        );
        let url = format!("http://{}/up", logged.proxy);
        let client = h1_client();
        let r = client
            .post(&url)
            .body(vec![b'x'; 100])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413);
        let r = client.post(&url).body("12345").send().await.unwrap();
        assert_eq!(r.status(), 200);
        let mut s = tokio::net::TcpStream::connect(logged.proxy).await.unwrap();
        let mut buf = [0u8; 4096];
        s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let n = within("an answer", s.read(&mut buf)).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        // The idle time under test (not a synchronisation).
        tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
        if closes {
            let n = within("the close", s.read(&mut buf)).await.unwrap_or(0);
            assert_eq!(n, 0, "closed by the 1 s KeepAliveTimeout");
        } else {
            s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
                .await
                .unwrap();
            let n = within("an answer", s.read(&mut buf)).await.unwrap();
            assert!(
                buf[..n].starts_with(b"HTTP/1.1 200"),
                "kept by --keep-alive-timeout"
            );
        }
        child.start_kill().unwrap();
    }
}

/// Without `RUST_LOG`, a YARP file's `Logging` levels filter the log from its first line:
/// `Yarp` at `Debug` shows fuseway's debug lines (a refused request head); ASP.NET's own
/// categories name none of fuseway's log, so at `Information` they are not written.
#[tokio::test]
async fn the_logging_levels_of_a_yarp_file_filter_the_log() {
    let dir = TempDir::new("cli-logging");
    for (levels, debug) in [
        (r#"{ "Default": "Information", "Yarp": "Debug" }"#, true),
        (
            r#"{ "Default": "Information", "Microsoft.AspNetCore": "Debug" }"#,
            false,
        ),
    ] {
        let file = logging_file(&dir, levels);
        let mut child = served(&file, &[("RUST_LOG", None)]);
        let mut logged = common::proxy_and_admin(&mut child).await;
        let filter = logged
            .early
            .iter()
            .find(|line| line.contains("log levels from the configuration"))
            .unwrap_or_else(|| panic!("{levels}: {:?}", logged.early));
        assert!(filter.contains(&file.display().to_string()), "{filter}");
        let refused = debug_logged(&mut logged).await;
        assert_eq!(refused, debug, "{levels}");
        child.start_kill().unwrap();
    }
}

/// Whether fuseway's debug line for a refused request head is written: a request head
/// with a space in a field name (400, at debug level), then a request to the dead
/// destination, whose warning comes after the debug line if that is written.
/// A YARP file with these `Logging.LogLevel` levels, whose one destination nothing
/// listens on (a request to it is a warning), written (again) in `dir`.
fn logging_file(dir: &TempDir, levels: &str) -> std::path::PathBuf {
    dir.write(
        "appsettings.json",
        &format!(
            r#"{{ "Logging": {{ "LogLevel": {levels} }}, "ReverseProxy": {} }}"#,
            common::simple_config(&[("d", "http://127.0.0.1:9")], "")
        ),
    )
}

/// The binary on `file`, with `RUST_LOG` as given (`None`: unset), on the native engine
/// whichever the environment names (the debug line [`debug_logged`] looks for is its).
/// `fuseway` serving `file` on 127.0.0.1:0 with an admin listener (native HTTP/1.1
/// engine), each of `env` set (`Some`) or removed (`None`).
fn served(file: &std::path::Path, env: &[(&str, Option<&str>)]) -> tokio::process::Child {
    let mut command = fuseway();
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
        .args(["--http1-engine", "native"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(file)
        .spawn()
        .unwrap()
}

/// The next log line that says `says` (a reload's, seen by the file's watcher).
async fn reloaded(logged: &mut common::Logged, says: &str) -> String {
    within("the reload's log line", async {
        while let Some(line) = logged.log.recv().await {
            if line.contains(says) {
                return line;
            }
        }
        panic!("fuseway exited");
    })
    .await
}

async fn debug_logged(logged: &mut common::Logged) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(logged.proxy).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    within("the 400", s.read_exact(&mut answer)).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 400");
    let r = h1_client()
        .get(format!("http://{}/x", logged.proxy))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    within("the destination's warning", async {
        let mut refused = false;
        while let Some(line) = logged.log.recv().await {
            refused |= line.contains("refused a request head");
            if line.contains("WARN") {
                return refused;
            }
        }
        panic!("fuseway exited");
    })
    .await
}

/// A reload that changes `Logging` re-filters the log at once, as ASP.NET applies a
/// changed `appsettings.json`: `Yarp: Debug` added, fuseway's debug lines are written;
/// taken away, they stop. With `RUST_LOG` set, `RUST_LOG` keeps filtering, and the
/// change is said not to apply.
#[tokio::test]
async fn a_reload_applies_changed_logging_levels() {
    let dir = TempDir::new("cli-logging-reload");
    let quiet = r#"{ "Default": "Information" }"#;
    let verbose = r#"{ "Default": "Information", "Yarp": "Debug" }"#;
    let path = logging_file(&dir, quiet);
    let start = |rust_log| served(&path, &[("RUST_LOG", rust_log)]);
    let mut child = start(None);
    let mut logged = common::proxy_and_admin(&mut child).await;
    assert!(!debug_logged(&mut logged).await);
    logging_file(&dir, verbose);
    let line = reloaded(&mut logged, "log levels from the configuration").await;
    assert!(line.contains("fuseway=debug"), "{line}");
    assert!(debug_logged(&mut logged).await);
    logging_file(&dir, quiet);
    reloaded(&mut logged, "log levels from the configuration").await;
    assert!(!debug_logged(&mut logged).await);
    child.start_kill().unwrap();

    logging_file(&dir, quiet);
    let mut child = start(Some("info"));
    let mut logged = common::proxy_and_admin(&mut child).await;
    logging_file(&dir, verbose);
    reloaded(&mut logged, "`RUST_LOG` filters the log").await;
    assert!(!debug_logged(&mut logged).await);
    child.start_kill().unwrap();
}

/// A YARP container's `ASPNETCORE_URLS` is where fuseway listens (the file naming no
/// listener), as ASP.NET binds it.
#[tokio::test]
async fn aspnetcore_urls_in_the_environment_is_where_it_listens() {
    let backend = common::echo_backend().await;
    let dir = TempDir::new("cli-aspnetcore-urls");
    let file = dir.write(
        "appsettings.json",
        &format!(
            r#"{{ "ReverseProxy": {} }}"#,
            common::simple_config(&[("d", &backend.url())], "")
        ),
    );
    let (mut child, addr) =
        start_with(&file, &[], &[("ASPNETCORE_URLS", "http://127.0.0.1:0")]).await;
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let r = h1_client()
        .get(format!("http://{addr}/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "GET /x");
    child.start_kill().unwrap();
}

/// ASP.NET's host layers `appsettings.{Environment}.json` over `appsettings.json`, and
/// so does fuseway: the environment is `ASPNETCORE_ENVIRONMENT`, else
/// `DOTNET_ENVIRONMENT`, else `Production`; what the layer sets wins key by key; a
/// change to the layer reloads; `--check` reads it too.
#[tokio::test]
async fn the_environments_appsettings_file_is_layered_on_top() {
    let named = |name: &'static str| {
        common::backend(move |_| async move { http::Response::new(common::full(name)) })
    };
    let (base, production, staging, changed) = (
        named("base").await,
        named("production").await,
        named("staging").await,
        named("changed").await,
    );
    let dir = TempDir::new("cli-environment-file");
    let file = dir.write(
        "appsettings.json",
        &format!(
            r#"{{ "ReverseProxy": {} }}"#,
            common::simple_config(&[("d", &base.url())], "")
        ),
    );
    let layer = |name: &str, address: &str| {
        dir.write(
            name,
            &format!(
                r#"{{ "ReverseProxy": {{ "clusters": {{ "c": {{ "Destinations": {{ "D": {{ "Address": "{address}" }} }} }} }} }} }}"#
            ),
        )
    };
    layer("appsettings.Production.json", &production.url());
    layer("appsettings.Staging.json", &staging.url());
    let start = |aspnetcore: Option<&str>, dotnet: Option<&str>| {
        let env = [
            ("RUST_LOG", Some("info")),
            ("ASPNETCORE_ENVIRONMENT", aspnetcore),
            ("DOTNET_ENVIRONMENT", dotnet),
        ];
        served(&file, &env)
    };
    let answer = |addr: std::net::SocketAddr| async move {
        let r = h1_client()
            .get(format!("http://{addr}/x"))
            .send()
            .await
            .unwrap();
        r.text().await.unwrap()
    };
    for (aspnetcore, dotnet, expected) in [
        (None, None, "production"),
        (Some("Staging"), None, "staging"),
        (None, Some("Staging"), "staging"),
        (Some("Production"), Some("Staging"), "production"),
        (Some("Development"), None, "base"),
    ] {
        let mut child = start(aspnetcore, dotnet);
        let logged = common::proxy_and_admin(&mut child).await;
        assert_eq!(
            answer(logged.proxy).await,
            expected,
            "{aspnetcore:?} {dotnet:?}"
        );
        child.start_kill().unwrap();
    }
    // A change to the layer reloads.
    let mut child = start(None, None);
    let mut logged = common::proxy_and_admin(&mut child).await;
    assert_eq!(answer(logged.proxy).await, "production");
    layer("appsettings.Production.json", &changed.url());
    reloaded(&mut logged, "configuration reloaded").await;
    assert_eq!(answer(logged.proxy).await, "changed");
    child.start_kill().unwrap();
    // `--check` reads the layer, and names it when it is not JSON.
    dir.write("appsettings.Production.json", "{ nope");
    let out = within(
        "fuseway --check",
        fuseway()
            .env_remove("ASPNETCORE_ENVIRONMENT")
            .env_remove("DOTNET_ENVIRONMENT")
            .arg("--check")
            .arg("--config")
            .arg(&file)
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("appsettings.Production.json: invalid JSON"),
        "{stderr}"
    );
}
