//! The binary's access log: one record per request with the fields the docs list, as
//! JSON or text, to stdout or a file, or none with `--access-log off`. The real binary,
//! a real backend and real HTTP/1.1 and h2c clients on 127.0.0.1.

mod common;

use common::{h1_client, h2c_client, stop_for_stdout, within, TempDir};
use serde_json::Value;
use tokio::process::Child;

/// A proxy of one route, `/app/{**rest}`, to `destination`.
fn config(destination: &str) -> String {
    format!(
        r#"{{ "Routes": {{ "r1": {{ "ClusterId": "c1", "Match": {{ "Path": "/app/{{**rest}}" }} }} }},
             "Clusters": {{ "c1": {{ "Destinations": {{ "d1": {{ "Address": "{destination}" }} }} }} }} }}"#
    )
}

/// The binary on [`config`] with `args`.
async fn start(destination: &str, args: &[&str]) -> (Child, std::net::SocketAddr, TempDir) {
    common::fuseway_binary(&config(destination), |command| {
        command.args(args);
    })
    .await
}

/// One JSON record per request on stdout (the default), in the order they ended:
/// client, method, host, path with query, protocol, status, body bytes both ways,
/// durations, route, cluster, destination, error and request id.
#[tokio::test]
async fn json_records_on_stdout_name_every_field() {
    let backend = common::echo_backend().await;
    let (child, addr, _dir) = start(&backend.url(), &["--log-format", "json"]).await;
    let h1 = h1_client();
    let got = within(
        "a GET with a request id",
        h1.get(format!("http://{addr}/app/get?x=1"))
            .header("x-request-id", "req-42")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(got.status(), 200);
    let get_body = got.bytes().await.unwrap();
    let posted = within(
        "a POST with an 11-byte body",
        h1.post(format!("http://{addr}/app/post"))
            .body("hello world")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(posted.status(), 200);
    let post_body = posted.bytes().await.unwrap();
    let h2 = within(
        "an h2c GET",
        h2c_client().get(format!("http://{addr}/app/h2")).send(),
    )
    .await
    .unwrap();
    assert_eq!(h2.status(), 200);
    h2.bytes().await.unwrap();
    let missing = within(
        "a request no route takes",
        h1.get(format!("http://{addr}/elsewhere")).send(),
    )
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);
    let out = stop_for_stdout(child).await;
    let records: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(records.len(), 4, "{out}");
    for r in &records {
        assert_eq!(r["target"], "fuseway::access", "{r}");
        assert_eq!(r["message"], "request", "{r}");
        assert!(
            r["client"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{r}"
        );
        assert_eq!(r["host"], addr.to_string(), "{r}");
        assert!(r["duration_ms"].as_f64().unwrap() >= 0.0, "{r}");
        let id = r["request_id"].as_str().unwrap();
        assert!(!id.is_empty(), "{r}");
    }
    let (get, post, h2, missing) = (&records[0], &records[1], &records[2], &records[3]);
    assert_eq!(get["method"], "GET");
    assert_eq!(get["path"], "/app/get?x=1");
    assert_eq!(get["protocol"], "HTTP/1.1");
    assert_eq!(get["status"], 200);
    assert_eq!(get["bytes_in"], 0);
    assert_eq!(get["bytes_out"], get_body.len());
    assert_eq!(get["route"], "r1");
    assert_eq!(get["cluster"], "c1");
    assert_eq!(get["destination"], "d1");
    assert_eq!(get["request_id"], "req-42");
    assert!(get.get("error").is_none(), "{get}");
    assert!(
        get["upstream_ms"].as_f64().unwrap() <= get["duration_ms"].as_f64().unwrap(),
        "{get}"
    );
    assert_eq!(post["method"], "POST");
    assert_eq!(post["bytes_in"], 11);
    assert_eq!(post["bytes_out"], post_body.len());
    assert_eq!(post["request_id"].as_str().unwrap().len(), 16, "{post}");
    assert_ne!(post["request_id"], h2["request_id"]);
    assert_eq!(h2["protocol"], "HTTP/2");
    assert_eq!(h2["path"], "/app/h2");
    assert_eq!(missing["status"], 404);
    assert_eq!(missing["path"], "/elsewhere");
    for absent in ["route", "cluster", "destination", "upstream_ms"] {
        assert!(missing.get(absent).is_none(), "{absent}: {missing}");
    }
}

/// Text records appended to a file; `--access-log off` writes none.
#[tokio::test]
async fn text_records_to_a_file_and_none_when_off() {
    let backend = common::echo_backend().await;
    let dir = TempDir::new("access-file");
    let file = dir.write("access.log", "an earlier line\n");
    let path = file.to_str().unwrap();
    let (child, addr, _dir) = start(&backend.url(), &["--access-log", path]).await;
    let r = within(
        "a request",
        h1_client().get(format!("http://{addr}/app/text")).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    assert_eq!(stop_for_stdout(child).await, "", "nothing on stdout");
    let written = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 2, "{written}");
    assert_eq!(lines[0], "an earlier line");
    for field in [
        "INFO fuseway::access: request",
        "method=GET ",
        "path=/app/text ",
        "status=200 ",
        "route=r1 ",
        "destination=d1 ",
    ] {
        assert!(lines[1].contains(field), "{field} missing: {}", lines[1]);
    }
    assert!(!lines[1].contains('\u{1b}'), "colour codes: {}", lines[1]);

    let (child, addr, _dir) = start(&backend.url(), &["--access-log", "off"]).await;
    let r = within(
        "a request",
        h1_client().get(format!("http://{addr}/app/off")).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    assert_eq!(stop_for_stdout(child).await, "", "no access log");
}
