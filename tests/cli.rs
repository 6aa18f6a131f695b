//! The `fuseway` binary: the demo prints curl commands that answer; `--config` runs a
//! file and rejects an invalid one with the field named.

mod common;

use std::process::Stdio;

use common::{h1_client, h2c_client, listening_addr, strip_ansi, within};
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
    let dir = std::env::temp_dir().join(format!("fuseway-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.json");
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
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn runs_a_config_file_and_stops_on_sigterm() {
    let backend = common::echo_backend().await;
    let dir = std::env::temp_dir().join(format!("fuseway-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("proxy.toml");
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
    std::fs::remove_dir_all(&dir).ok();
}
