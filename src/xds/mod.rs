//! The xDS side: ADS streams to Envoy, state of the world and delta.
//!
//! * [`watch`]: what both protocols keep per type (subscriptions, nonces,
//!   ACKs, NACKs), the watched name lists, and the one decision of what a
//!   push sends.
//! * [`stream`]: the stream machinery both share: requests as whole
//!   messages, the response body and its shared bytes, placement, status,
//!   metrics.
//! * [`sotw`]: the state-of-the-world protocol.
//! * [`delta`]: the delta protocol.
//! * [`api`]: MCP-over-xDS, the Istio config served to clients whose node
//!   says `GENERATOR: api` (state of the world, its own small stream task).
//! * [`server`]: the hand-written tonic service and the per-stream task
//!   that drives either protocol.
//!
//! Inside this layer imports go one way: `watch` ← `stream` ← `sotw`,
//! `delta`, `api` ← `server` (`tests/layers.rs` checks it). Both protocols make their shared decisions through
//! `watch` (`push_plan::plan` decides what a push sends), so they cannot
//! drift apart.

pub mod api;
pub mod delta;
pub mod server;
pub mod sotw;
pub mod stream;
pub mod watch;

pub use server::AdsService;

#[cfg(test)]
mod test;
