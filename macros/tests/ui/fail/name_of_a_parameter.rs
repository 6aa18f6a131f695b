fuseway::default_pipeline! {
    pub struct Proxy {
        after routing: state: fuseway::limits::Limits,
    }
}

fn main() {}
