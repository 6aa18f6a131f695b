//! Stage types named like the generic parameters the macros generate (`S0`, `T`,
//! `Stages`, `I1`): the parameters step aside.
use fuseway::request::{ProxyResponse, Routed};
use fuseway::stage::Stage;

pub struct S0;
pub struct T;

impl<B> Stage<Routed<B>> for S0 {
    type Out = Routed<B>;
    type State = ();
    fn on_request(&self, r: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        Ok((r, ()))
    }
}

impl<B> Stage<Routed<B>> for T {
    type Out = Routed<B>;
    type State = ();
    fn on_request(&self, r: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        Ok((r, ()))
    }
}

fuseway::default_pipeline! {
    pub struct Named {
        after routing: first: S0,
        after limits: second: T,
    }
}

fn main() {
    fn is_service<S: tower_service::Service<http::Request<fuseway::body::Incoming>>>(_: &S) {}
    let config = fuseway::config::parse(r#"{"Routes":{},"Clusters":{}}"#, fuseway::config::Format::Json).unwrap();
    let state = std::sync::Arc::new(fuseway::state::ProxyState::new(config).unwrap());
    let p = Named::from_state(state, S0, T);
    is_service(&p);
}
