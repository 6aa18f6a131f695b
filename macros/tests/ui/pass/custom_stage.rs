use fuseway::request::{ProxyResponse, Routed};
use fuseway::stage::Stage;

pub struct Tag;

impl<B> Stage<Routed<B>> for Tag {
    type Out = Routed<B>;
    type State = ();
    fn on_request(&self, r: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        Ok((r, ()))
    }
}

fuseway::fused_pipeline! {
    /// Routing, a user stage, balancing, forwarding.
    pub struct Mine(http::Request<hyper::body::Incoming>) {
        routing: fuseway::routing::Routing,
        tag: Tag,
        balancing: fuseway::balancing::LoadBalancing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fuseway::default_pipeline! {
    pub struct WithTag {
        after routing: tag: Tag,
    }
}

fn main() {
    fn is_service<S: hyper::service::Service<http::Request<fuseway::body::Incoming>>>(_: &S) {}
    let config = fuseway::config::parse(r#"{"Routes":{},"Clusters":{}}"#, fuseway::config::Format::Json).unwrap();
    let state = std::sync::Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let p = WithTag::from_state(state, Tag);
    is_service(&p);
    let _ = Mine::new;
}
