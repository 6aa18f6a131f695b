fuseway::default_pipeline! {
    pub struct Proxy {
        after auth: x: fuseway::limits::Limits,
    }
}

fn main() {}
