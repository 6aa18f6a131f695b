fuseway::fused_pipeline! {
    pub struct Untyped {
        routing: fuseway::routing::Routing,
        balancing: fuseway::balancing::LoadBalancing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fn main() {}
