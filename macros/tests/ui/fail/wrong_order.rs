fuseway::fused_pipeline! {
    pub struct Backwards(http::Request<hyper::body::Incoming>) {
        balancing: fuseway::balancing::LoadBalancing,
        routing: fuseway::routing::Routing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fn main() {}
