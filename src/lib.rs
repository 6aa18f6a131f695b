//! fuseway: a reverse-proxy framework built from typed tower stages.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

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
