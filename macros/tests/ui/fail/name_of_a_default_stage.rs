fuseway::default_pipeline! {
    pub struct Proxy {
        after routing: routing: fuseway::limits::Limits,
    }
}

fn main() {}
