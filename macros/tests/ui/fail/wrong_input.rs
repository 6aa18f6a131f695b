use fuseway::request::{Balanced, ProxyResponse};
use fuseway::stage::Stage;

/// A stage written for balanced requests.
struct AfterBalancing;

impl<B> Stage<Balanced<B>> for AfterBalancing {
    type Out = Balanced<B>;
    type State = ();
    fn on_request(&self, r: Balanced<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
        Ok((r, ()))
    }
}

fuseway::fused_pipeline! {
    pub struct Misplaced(http::Request<hyper::body::Incoming>) {
        routing: fuseway::routing::Routing,
        early: AfterBalancing,
        balancing: fuseway::balancing::LoadBalancing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fn main() {}
