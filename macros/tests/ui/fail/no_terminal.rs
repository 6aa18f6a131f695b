fuseway::fused_pipeline! {
    pub struct Open(http::Request<hyper::body::Incoming>) {
        routing: fuseway::routing::Routing,
        balancing: fuseway::balancing::LoadBalancing,
    }
}

fn main() {}
