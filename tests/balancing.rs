//! Load balancing end to end: real backends, the real proxy, a real client.

mod common;

use common::*;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

/// A backend answering every request with `name`.
async fn named_backend(name: &'static str) -> Backend {
    backend(move |_: Request<Incoming>| async move { Response::new(full(name)) }).await
}

#[tokio::test]
async fn weighted_round_robin_through_the_proxy() {
    let (a, b, c) = (
        named_backend("a").await,
        named_backend("b").await,
        named_backend("c").await,
    );
    let addresses = [a.url(), b.url(), c.url()];
    assert!(
        addresses[0] != addresses[1]
            && addresses[1] != addresses[2]
            && addresses[0] != addresses[2]
    );
    let config = format!(
        r#"{{
  "Routes": {{ "all": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
  "Clusters": {{ "c": {{
    "LoadBalancingPolicy": "RoundRobin",
    "Destinations": {{
      "a": {{ "Address": "{}", "Weight": 3 }},
      "b": {{ "Address": "{}", "Weight": 1 }},
      "c": {{ "Address": "{}", "Weight": 1 }}
    }}
  }} }}
}}"#,
        addresses[0], addresses[1], addresses[2]
    );
    let p = proxy(&config).await;
    let client = h1_client();
    let mut answers = String::new();
    for i in 0..50 {
        let r = within(
            "a proxied request",
            client.get(p.url(&format!("/{i}"))).send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        answers.push_str(&r.text().await.unwrap());
    }
    let count = |name: char| answers.chars().filter(|&c| c == name).count();
    assert_eq!(
        (count('a'), count('b'), count('c')),
        (30, 10, 10),
        "{answers}"
    );
    // nginx's smooth order for 3,1,1, period after period.
    assert_eq!(answers, "abaca".repeat(10));
    for d in ["a", "b", "c"] {
        p.wait_idle("c", d).await;
    }
    p.shutdown().await;
}
