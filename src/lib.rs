//! fuseway: a reverse-proxy framework built from typed tower stages.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

// Lets the macros' `::fuseway::...` paths resolve inside this crate too.
extern crate self as fuseway;

pub use fuseway_macros::{default_pipeline, fused_pipeline};

pub mod affinity;
pub mod balancing;
pub mod body;
pub mod cli;
pub mod config;
pub mod forwarding;
pub mod health;
pub mod limits;
pub mod pipeline;
pub mod request;
pub mod routing;
pub mod server;
pub mod stage;
pub mod state;
pub mod testing;

/// Items the macros' expansions refer to. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use http;
    pub use hyper;
    pub use tower_service;

    use crate::pipeline::Terminal;
    use crate::stage::Stage;

    /// Instantiated by the macros at each stage's span to check the chain of types.
    pub fn assert_stage<S: Stage<In>, In>() {}

    /// Instantiated by the macros at the terminal's span.
    pub fn assert_terminal<T: Terminal<In>, In>() {}
}
