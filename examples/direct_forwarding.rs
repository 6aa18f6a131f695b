//! The forwarder alone: route nothing, balance nothing — send one request to one
//! destination of a cluster and stream the answer back.
//!
//! ```text
//! cargo run --example direct_forwarding -- http://127.0.0.1:5000
//! ```

use std::sync::Arc;

use bytes::Bytes;
use fuseway::config::{parse, Format};
use fuseway::forwarding::Forwarder;
use fuseway::request::{Candidates, RouteContext, Routed};
use fuseway::state::ProxyState;
use http_body_util::{BodyExt, Empty};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:5000".into());
    let config = parse(
        &format!(
            r#"{{ "Routes": {{ "r": {{ "ClusterId": "c", "Match": {{ "Path": "/{{**rest}}" }} }} }},
                 "Clusters": {{ "c": {{ "Destinations": {{ "d": {{ "Address": "{address}" }} }} }} }} }}"#
        ),
        Format::Json,
    )?;
    let state = Arc::new(ProxyState::new(config)?);
    let snapshot = state.snapshot();
    let cluster = snapshot.cluster_index("c").expect("cluster c");
    let context = RouteContext::new(snapshot, 0, cluster, Candidates::all(1));

    let request = http::Request::get("/").body(Empty::<Bytes>::new())?;
    let balanced = Routed { request, context }.balance(0);
    let forwarder = Forwarder::<Empty<Bytes>>::new();
    let response = forwarder.forward(balanced).await?;
    println!(
        "{} from {:?}",
        response.status_code(),
        response.outcome.destination().map(|d| d.id())
    );
    let body = response
        .into_response()
        .into_body()
        .collect()
        .await?
        .to_bytes();
    println!("{}", String::from_utf8_lossy(&body));
    Ok(())
}
