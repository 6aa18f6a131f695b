use fuseway::request::{Balanced, ProxyResponse};
use fuseway::stage::Stage;

pub struct Tag;

impl<B> Stage<Balanced<B>> for Tag {
    type Out = Balanced<B>;
    type State = ();
    fn on_request(&self, r: Balanced<B>) -> Result<(Balanced<B>, ()), ProxyResponse> {
        Ok((r, ()))
    }
}

fuseway::default_pipeline! {
    pub struct WithTag {
        after forwarding: tag: Tag,
    }
}

fn main() {}
