//! The default pipeline, fused by `default_pipeline!`.

crate::default_pipeline! {
    /// The default pipeline — telemetry, routing, session affinity, limits, load
    /// balancing, passive health, forwarding — fused into one service with one future.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # fn f(state: Arc<fuseway::state::ProxyState>) {
    /// let pipeline = fuseway::pipeline::FusedDefault::from_state(state);
    /// # let _ = pipeline; }
    /// ```
    pub struct FusedDefault;
}
