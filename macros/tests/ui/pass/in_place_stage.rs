use fuseway::request::{ProxyResponse, Routed};
use fuseway::stage::{InPlace, Stage};

/// A user stage on the fused form's fast path.
pub struct Tag;

impl<B> InPlace<Routed<B>> for Tag {
    fn on_request_in_place(&self, r: &mut Routed<B>) -> Result<(), ProxyResponse> {
        r.request
            .headers_mut()
            .insert("x-tag", http::HeaderValue::from_static("1"));
        Ok(())
    }
}

impl<B> Stage<Routed<B>> for Tag {
    type Out = Routed<B>;
    type State = ();
    fn on_request(&self, mut r: Routed<B>) -> Result<(Routed<B>, ()), ProxyResponse> {
        self.on_request_in_place(&mut r)?;
        Ok((r, ()))
    }
}

fuseway::fused_pipeline! {
    pub struct Mine(http::Request<hyper::body::Incoming>) {
        #[by_ref] routing: fuseway::routing::Routing,
        #[in_place] tag: Tag,
        #[by_ref] balancing: fuseway::balancing::LoadBalancing,
        => forwarder: fuseway::forwarding::Forwarder<hyper::body::Incoming>,
    }
}

fuseway::default_pipeline! {
    pub struct WithTag {
        after routing: #[in_place] tag: Tag,
    }
}

fn main() {
    let _ = Mine::new;
    let _ = WithTag::from_state;
}
