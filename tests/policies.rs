//! Named route policies (`AuthorizationPolicy`, `CorsPolicy`, ...): refused unless
//! registered, applied to the routes that name them when they are, in both forms.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{echo_backend, h1_client, proxy_on, Form};
use fuseway::config::{parse, Format};
use fuseway::policy::{Policies, PolicyKind, PolicyRequest, RoutePolicy};
use fuseway::request::ProxyResponse;
use fuseway::state::ProxyState;
use http::{HeaderValue, StatusCode};

/// Lets a request through only with `x-api-key: secret`, from a client on this host
/// (the policy sees the request's connection).
struct ApiKey;

impl RoutePolicy for ApiKey {
    fn on_request(&self, request: &PolicyRequest<'_>) -> Result<(), ProxyResponse> {
        let local_client = request
            .connection
            .is_some_and(|c| c.remote.ip().is_loopback());
        match request.headers.get("x-api-key") {
            Some(key) if key == "secret" && local_client => Ok(()),
            _ => Err(ProxyResponse::status(StatusCode::UNAUTHORIZED)),
        }
    }
}

/// Adds `access-control-allow-origin: *` to forwarded responses.
struct AllowAll;

impl RoutePolicy for AllowAll {
    fn on_request(&self, _: &PolicyRequest<'_>) -> Result<(), ProxyResponse> {
        Ok(())
    }

    fn on_response(&self, response: &mut ProxyResponse) {
        response
            .response
            .headers_mut()
            .insert("access-control-allow-origin", HeaderValue::from_static("*"));
    }
}

fn config(backend: &str) -> String {
    format!(
        r#"{{
          "Routes": {{
            "admin": {{ "ClusterId": "c1", "AuthorizationPolicy": "API-KEY", "CorsPolicy": "open",
                        "Match": {{ "Path": "/admin/{{**rest}}" }} }},
            "public": {{ "ClusterId": "c1", "AuthorizationPolicy": "Anonymous", "CorsPolicy": "disable",
                         "RateLimiterPolicy": "Disable", "TimeoutPolicy": "DISABLE",
                         "Match": {{ "Path": "/public/{{**rest}}" }} }},
            "slow": {{ "ClusterId": "c1", "TimeoutPolicy": "short", "Match": {{ "Path": "/slow" }} }}
          }},
          "Clusters": {{ "c1": {{ "Destinations": {{ "d1": {{ "Address": "{backend}" }} }} }} }}
        }}"#
    )
}

fn policies() -> Policies {
    Policies::new()
        .with(PolicyKind::Authorization, "api-key", ApiKey)
        .with(PolicyKind::Cors, "open", AllowAll)
        .timeout("short", Duration::from_millis(1500))
}

#[test]
fn unregistered_policies_are_refused_naming_route_and_key() {
    let config = parse(&config("http://127.0.0.1:9"), Format::Json).unwrap();
    let err = ProxyState::new(config.clone()).unwrap_err();
    let paths: Vec<&str> = err.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Routes.admin.CorsPolicy",
            "Routes.admin.AuthorizationPolicy",
            "Routes.slow.TimeoutPolicy"
        ],
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("policy `API-KEY` is not registered"),
        "{err}"
    );
    // Registered under another kind is not registered.
    let wrong_kind = Policies::new()
        .with(PolicyKind::RateLimiter, "api-key", ApiKey)
        .with(PolicyKind::Cors, "open", AllowAll)
        .timeout("short", Duration::from_secs(1));
    let err = ProxyState::with_policies(config.clone(), wrong_kind).unwrap_err();
    assert_eq!(
        err.iter().next().unwrap().path,
        "Routes.admin.AuthorizationPolicy"
    );
    // `Timeout` and `TimeoutPolicy` together are refused, as YARP does.
    let mut both = config;
    both.routes.get_mut("slow").unwrap().timeout = Some("00:00:05".parse().unwrap());
    let err = ProxyState::with_policies(both, policies()).unwrap_err();
    assert_eq!(err.iter().next().unwrap().path, "Routes.slow.TimeoutPolicy");
}

#[tokio::test]
async fn registered_policies_apply_to_the_routes_that_name_them() {
    let backend = echo_backend().await;
    for form in [Form::Fused, Form::Layered] {
        let config = parse(&config(&backend.url()), Format::Json).unwrap();
        let state = Arc::new(ProxyState::with_policies(config, policies()).unwrap());
        let proxy = proxy_on(state.clone(), form).await;
        let client = h1_client();

        let r = client.get(proxy.url("/admin/x")).send().await.unwrap();
        assert_eq!(r.status(), 401, "{form:?}");
        assert!(r.headers().get("access-control-allow-origin").is_none());
        // Counted on its route and cluster.
        let mut metrics = String::new();
        state
            .metrics()
            .encode(&state.snapshot(), &mut metrics)
            .unwrap();
        let series =
            r#"fuseway_requests_total{route="admin",cluster="c1",destination="",status="401"} 1"#;
        assert!(
            metrics.lines().any(|l| l == series),
            "{form:?}: {series} in\n{metrics}"
        );

        let r = client
            .get(proxy.url("/admin/x"))
            .header("x-api-key", "secret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{form:?}");
        assert_eq!(r.headers()["access-control-allow-origin"], "*", "{form:?}");
        assert_eq!(r.text().await.unwrap(), "GET /admin/x");

        // The values that need nothing change nothing.
        let r = client.get(proxy.url("/public/y")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{form:?}");
        assert!(r.headers().get("access-control-allow-origin").is_none());

        // A TimeoutPolicy is the route's timeout.
        let snapshot = state.snapshot();
        let slow = snapshot.routes().iter().find(|r| r.id() == "slow").unwrap();
        assert_eq!(
            slow.config().timeout.map(|t| t.0),
            Some(Duration::from_millis(1500))
        );
        proxy.shutdown().await;
    }
}
