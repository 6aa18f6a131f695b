fuseway::default_pipeline! {
    pub struct WithTag {
        after routing: #[inline] tag: fuseway::limits::Limits,
    }
}

fn main() {}
