//! Proc-macros of [fuseway](https://docs.rs/fuseway): `fused_pipeline!` and
//! `default_pipeline!` compile an ordered list of stages and a terminal service into
//! **one** service with **one** future — no per-stage future, no boxing, no
//! allocation. Use them through the `fuseway` crate, which re-exports them and documents
//! them in full.

mod default;
mod fused;

use proc_macro::TokenStream;

/// Fuse stages and a terminal service into one service with one future. An entry
/// marked `#[in_place]` (a stage implementing `fuseway::stage::InPlace`) or `#[by_ref]`
/// (`fuseway::stage::ByRef`) is called without moving the request into and out of it.
///
/// ```ignore
/// fuseway::fused_pipeline! {
///     /// My pipeline.
///     pub struct MyPipeline(http::Request<fuseway::body::Incoming>) {
///         routing: fuseway::routing::Routing,
///         balancing: fuseway::balancing::LoadBalancing,
///         => forwarder: fuseway::forwarding::Forwarder<fuseway::body::Incoming>,
///     }
/// }
/// ```
#[proc_macro]
pub fn fused_pipeline(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as fused::FusedInput);
    fused::expand(&input).into()
}

/// The default stage list (routing, session affinity, limits, load balancing, passive
/// health, forwarding) fused, optionally with user stages inserted at named points.
/// The built-in stages that keep the request's type are called on the request where
/// it lies (`fuseway::stage::InPlace`), those that change it on a reference
/// (`fuseway::stage::ByRef`): the request is not moved in and out of each. A user stage
/// entry marked `#[in_place]` or `#[by_ref]` is called the same way.
///
/// ```ignore
/// fuseway::default_pipeline! {
///     pub struct Proxy {
///         after routing: auth: MyAuthStage,
///     }
/// }
/// ```
#[proc_macro]
pub fn default_pipeline(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as default::DefaultInput);
    match default::expand(input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}
