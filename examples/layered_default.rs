//! The default stages as separate tower layers — the twin of `default_pipeline.rs`,
//! kept to compare what fusing costs to compile (see docs/ARCHITECTURE.md) and for users who
//! want to wrap individual stages.
//!
//! ```text
//! cargo run --example layered_default -- proxy.json
//! ```

use std::sync::Arc;

use fuseway::server::{ProxyService, Server};
use fuseway::state::ProxyState;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "proxy.json".into());
    let config = fuseway::config::load_file(path.as_ref())?;
    let addrs = config.listen_addrs()?;
    let state = Arc::new(ProxyState::new(config)?);
    let server = Server::bind(&addrs).await?;
    println!("listening on {:?}", server.local_addrs());
    let service = ProxyService::new(fuseway::pipeline::layered_default(state));
    server
        .serve(service, fuseway::server::shutdown_signal())
        .await?;
    Ok(())
}
