//! fuseway: a reverse-proxy framework built from typed tower stages.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod config;
pub mod routing;
