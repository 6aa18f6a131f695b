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

fuseway::default_pipeline! {
    pub struct WithTag {
        after routing: #[by_ref] tag: Tag,
    }
}

fn main() {}
