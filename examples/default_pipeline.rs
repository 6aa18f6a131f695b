//! The default pipeline, fused by the macro, serving a configuration file — what the
//! `fuseway` binary does, in a dozen lines.
//!
//! ```text
//! cargo run --example default_pipeline -- proxy.json
//! ```

use std::sync::Arc;

use fuseway::server::Server;
use fuseway::state::ProxyState;

fuseway::default_pipeline! {
    /// routing -> session affinity -> limits -> load balancing -> passive health ->
    /// forwarding, as one service with one future.
    pub struct Proxy;
}

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
    server
        .serve(Proxy::from_state(state), fuseway::server::shutdown_signal())
        .await?;
    Ok(())
}
