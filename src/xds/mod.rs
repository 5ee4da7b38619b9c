//! The xDS side: ADS streams to Envoy.
//!
//! * [`codec`]: pre-encoded, gRPC-framed responses; the request decoder.
//! * [`bodies`]: response bodies assembled once, shared by the streams that send them.
//! * [`body`]: the HTTP/2 response body that sends shared bytes without copying.
//! * [`connection`]: one stream's protocol state (SotW ACK/NACK, nonces, watches).
//! * [`delta`]: one delta stream's protocol state (per-resource versions).
//! * [`delta_codec`]: pre-encoded, gRPC-framed delta responses.
//! * [`held`]: what a delta client holds of a type, compact and sorted.
//! * [`names`]: watched name lists, built once and shared by the streams that watch them.
//! * [`published`]: what a stream answers from (snapshot, resource cache, body cache).
//! * [`recorder`]: one stream's metric bookkeeping.
//! * [`requests`]: the request half of a stream, as whole messages, without a per-stream buffer.
//! * [`server`]: the hand-written tonic service and the per-stream task.
//! * [`status`]: a copy of each stream's state for the admin endpoints.

pub mod bodies;
pub mod body;
pub mod codec;
pub mod connection;
pub mod delta;
pub mod delta_codec;
pub mod held;
pub mod names;
pub mod placement;
pub mod published;
pub mod recorder;
pub mod requests;
pub mod server;
pub mod status;

pub use server::AdsService;
