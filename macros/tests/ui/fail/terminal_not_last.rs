fuseway::fused_pipeline! {
    pub struct Trailing(http::Request<hyper::body::Incoming>) {
        routing: fuseway::routing::Routing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
        balancing: fuseway::balancing::LoadBalancing,
    }
}

fn main() {}
