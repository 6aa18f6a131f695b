use fuseway::request::{Balanced, ProxyResponse};
use fuseway::stage::Stage;

/// A stage written for balanced requests.
pub struct AfterBalancing;

impl<B> Stage<Balanced<B>> for AfterBalancing {
    type Out = Balanced<B>;
    type State = ();
    fn on_request(&self, r: Balanced<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
        Ok((r, ()))
    }
}

// One mistake, one error: at the stage, not again at every stage after it.
fuseway::default_pipeline! {
    pub struct Proxy {
        after routing: early: AfterBalancing,
    }
}

fn main() {}
