fuseway::fused_pipeline! {
    pub struct Marked(http::Request<hyper::body::Incoming>) {
        routing: fuseway::routing::Routing,
        balancing: fuseway::balancing::LoadBalancing,
        => #[in_place] forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fn main() {}
