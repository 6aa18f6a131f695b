fuseway::fused_pipeline! {
    pub struct Unbalanced(http::Request<hyper::body::Incoming>) {
        routing: fuseway::routing::Routing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fn main() {}
