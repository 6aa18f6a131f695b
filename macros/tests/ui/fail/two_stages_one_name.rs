fuseway::fused_pipeline! {
    pub struct Proxy(http::Request<fuseway::body::Incoming>) {
        routing: fuseway::routing::Routing,
        limits: fuseway::limits::Limits,
        limits: fuseway::limits::Limits,
        balancing: fuseway::balancing::LoadBalancing,
        => forwarder: fuseway::forwarding::Forwarder<fuseway::body::Incoming>,
    }
}

fn main() {}
