fuseway::fused_pipeline! {
    pub struct Nothing(http::Request<hyper::body::Incoming>) {
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fn main() {}
