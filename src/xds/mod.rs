//! The xDS side: ADS streams to Envoy.
//!
//! * [`types`]: the resource types and their URLs.
//! * [`codec`]: pre-encoded responses and the gRPC codec that writes them.
//! * [`connection`]: one stream's protocol state (SotW ACK/NACK, nonces, watches).
//! * [`server`]: the hand-written tonic service and the per-stream task.

pub mod codec;
pub mod connection;
pub mod server;
pub mod types;

pub use server::AdsService;
pub use types::TypeUrl;
